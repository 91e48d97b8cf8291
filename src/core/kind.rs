//! The contract between the engine and a primitive: one trait, [`Kind`].
//!
//! A primitive that holds leases (the lock, the fenced lock, each half of
//! the read-write lock, the fair lock, a semaphore's permits) implements
//! `Kind` once, for a `static` value, and the engine does everything else:
//! lease records, turns, the exactly-once calls, waiting, renewal, the
//! release on unlock, drop or shutdown. Three methods are required — what
//! one acquire try sends ([`Kind::acquire`]), what gives holds back
//! ([`Kind::release`]) and which scripts renew them ([`Kind::renewal`]);
//! the rest have defaults for the lock family (a Redis hash whose fields
//! are owners, values hold counts), which a kind overrides where it
//! differs. A primitive whose releases hand the lock straight to a waiter
//! adds the extension trait [`Handoff`] for its waits (the fair lock).
//!
//! A kind says *what* to send as a [`Request`]: its script, its own keys
//! and arguments, and marked places for the engine's parts (the publish
//! command, the hold count the engine expects). How a request is made
//! exactly-once — its request id, its request record and that record's
//! TTL, re-sending after an unknown outcome, fencing a replaced connection,
//! settling on drop — only the engine knows (`request.rs`, `call.rs`).
//!
//! This module is also the door a kind goes through: it re-exports the
//! types the trait's methods take and return, so a primitive's folder
//! names the engine's modules `kind` (this contract) and `script` (its Lua)
//! and, for the pub/sub-only latch, `wait` (the multi-locks, which hold no
//! lease of their own, name only the engine's lease validation,
//! `core::lease_millis`).

use std::any::TypeId;
use std::time::Duration;

// The wire's own types, fred's: a key (reference-counted bytes, cloned
// without a copy), an argument or reply, and the two byte strings they are
// made of. A primitive names them through this door, never through fred.
pub(crate) use fred::bytes::Bytes;
pub(crate) use fred::bytes_utils::Str;
pub(crate) use fred::types::{Key, Value};

// What a kind's methods take and return, and what a facade hands the
// engine (`Engine::acquire` with a `Spec`, `Engine::run_once` with a
// `Request`).
pub(crate) use super::acquire::Spec;
pub(crate) use super::call::{static_arg, Reply};
pub(crate) use super::caps::Feature;
pub(crate) use super::hold::Hold;
pub(crate) use super::lease::Lease;
use super::pack::Pack;
pub(crate) use super::pubsub::{wake_all_on_one, wake_count, wake_one, Policy, Wake};
pub(crate) use super::request::{Before, Request};
pub(crate) use super::watchdog::{ttl_ms, PackedScripts, Renewal};
pub(crate) use super::Engine;

// The handoff extension's surface: what a primitive whose waits keep a
// queue of their own needs (the fair lock: its grants, its queue entry
// left once by the engine, its waiters' refreshes and its kicks, tasks on
// the connection).
pub(crate) use super::background::spawn_here;
pub(crate) use super::conn::Conn;
pub(crate) use super::handoff::{hand_here, Granted, Handoff};
pub(crate) use super::lease::LeaseRef;
pub(crate) use super::once::{Armed, Once};

/// One acquire try, as the engine hands it to [`Kind::acquire`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Try<'a> {
    /// The lease's TTL in milliseconds: the fixed lease asked for, or the
    /// watchdog's timeout.
    pub(crate) lease_ms: i64,
    /// The keys the primitive gave its acquire ([`Spec::keys`]), after the
    /// lease's own key: the fenced lock's token counter, the fair lock's
    /// queue.
    pub(crate) keys: &'a [Key],
    /// Where to announce that this try took the lock over waiters of other
    /// clients, if the wait loop asks for it ([`Kind::announces_takes`]):
    /// a key the script publishes on.
    pub(crate) announce: Option<&'a str>,
}

/// The whole contract of a kind of lease (see the module docs).
pub(crate) trait Kind: std::fmt::Debug + Send + Sync + 'static {
    /// What one acquire try of `lease` sends. The engine makes it a
    /// recorded call (`request.rs`) and reads its reply with
    /// [`acquire_reply`](Self::acquire_reply).
    fn acquire(&self, lease: &Lease, at: &Try<'_>) -> Request;

    /// What gives back `count` holds of `lease` (the engine makes it a
    /// recorded call); `ttl_ms` is the TTL the key keeps if holds remain.
    fn release(&self, lease: &Lease, count: u32, ttl_ms: i64) -> Request;

    /// The scripts the watchdog renews (or checks) this kind's leases
    /// with, in batches; each lease adds its entry with
    /// [`renew_entry`](Self::renew_entry) or
    /// [`renew_packed`](Self::renew_packed).
    fn renewal(&self) -> &'static Renewal;

    /// The kind's identity: its type. Leases of one kind on one key and
    /// owner share one record; values of one type (the plain and the
    /// fenced lock: one `LockKind`, two acquire scripts) are one kind. No
    /// hand-picked tag.
    fn id(&self) -> TypeId {
        TypeId::of::<Self>()
    }

    /// Reads an acquire script's reply (without the request id). The
    /// default reads the lock family's shape: `{1, count, …}` held (the
    /// field's new hold count), `{0, pttl}` busy (retry after the key's
    /// TTL; -1: none known).
    fn acquire_reply(&self, reply: &[i64]) -> AcquireReply {
        match reply {
            [1, count, ..] => AcquireReply::Held {
                count: (*count).clamp(1, u32::MAX as i64) as u32,
                token: None,
            },
            _ => AcquireReply::busy(reply),
        }
    }

    /// Reads a release script's reply (without the request id). The
    /// default reads the lock family's shape: `{1}` holds remain, `{2}`
    /// freed, `{0}` the field was gone, `{3}` [gone where the release
    /// would have freed it](ReleaseReply::Gone).
    fn release_reply(&self, reply: &Reply) -> ReleaseReply {
        match reply.first() {
            Some(1) => ReleaseReply::Remaining,
            Some(2) => ReleaseReply::Freed,
            Some(3) => ReleaseReply::Gone,
            _ => ReleaseReply::NotHeld,
        }
    }

    /// Called with every release reply of `lease` once it is applied, for
    /// follow-up work the kind starts itself (e.g. a task that checks later
    /// that the waiter its release told took over, or handing a waiter of
    /// this process what the release granted it). Runs before the caller's
    /// unlock returns, so it must not block; the default does nothing.
    fn after_release(&self, _lease: &Lease, _reply: &Reply) {}

    /// Adds `lease`'s entry to a renewal batch: to the keys and arguments
    /// of a [`Renewal::slot`] call, or (`node`) to the arguments of a
    /// [`Renewal::node`] call. The default is the lock family's: the key
    /// and the field.
    fn renew_entry(&self, lease: &Lease, keys: &mut Vec<Key>, args: &mut Vec<Value>, node: bool) {
        if node {
            args.push(Value::Bytes(lease.key().inner().clone()));
        } else {
            keys.push(lease.key());
        }
        args.push(Value::String(lease.field()));
    }

    /// Appends `lease`'s entry to a packed renewal batch
    /// ([`Renewal::packed`]). The default is the lock family's: the key
    /// and the field.
    fn renew_packed(&self, lease: &Lease, pack: &mut Pack) {
        pack.push(lease.key_bytes());
        pack.push(lease.field_bytes());
    }

    /// Whether holding `mine` proves that `other` (another owner's lease on
    /// the same key, of any kind) cannot be held: then a successful acquire
    /// of `mine` ends `other`'s incarnation at once. The default is the
    /// plain lock's: its hash holds one owner at a time.
    fn excludes(&self, _mine: &Lease, _other: &Lease) -> bool {
        true
    }

    /// Whether a refused acquire of a lease proves that the lease's field
    /// is missing from Redis (every lock kind: a try of an owner whose
    /// field exists re-enters). Then an owner's own refused try ends the
    /// holds it counted (see [`Lease::busy_seen`]). A semaphore's try is a
    /// new permit, which proves nothing of the others.
    fn busy_proves_gone(&self) -> bool {
        true
    }

    /// Whether the watchdog also renews this kind's fixed-term holds, up
    /// to their deadline and never past it: for a key another library's
    /// owners share and may cut the TTL of (Redisson's read renewal *sets*
    /// the read-write hash's TTL to its own watchdog timeout). Such a
    /// kind's renewal entries carry their own TTL (see
    /// [`Lease::renew_ttl`]). The default: fixed holds are never renewed.
    fn renews_fixed(&self) -> bool {
        false
    }

    /// What a message on the channel a wait listens on wakes (the
    /// default: one waiter per message).
    fn wakes(&self) -> Policy {
        wake_one
    }

    /// The owner of an acquire whose [`Spec::owner`] is 0, read when it is
    /// first polled (a future made in one task may be polled in another).
    /// The default: 0, the spec names its owner.
    fn owner_at_first_poll(&self) -> u64 {
        0
    }

    /// Whether [`Spec::field`] is the client's prefix of its owners'
    /// fields, completed with the owner's id (the lock family), rather
    /// than the holder's whole field (a permit's id, a fair waiter's
    /// field).
    fn field_of_owner(&self) -> bool {
        false
    }

    /// Whether a try that takes the lock over waiters of other clients
    /// announces it (`core/takes.rs`), so they re-check at once.
    fn announces_takes(&self) -> bool {
        false
    }

    /// How long the wait's channel stays subscribed after the acquire
    /// ends (an owner that waited is likely to come back soon); `None`:
    /// it goes with the last waiter.
    fn linger(&self) -> Option<Duration> {
        None
    }

    /// Whether the key exists exactly while someone holds it, so that a
    /// waiter may learn when to re-check from the key's TTL.
    fn held_while_key_lives(&self) -> bool {
        false
    }
}

/// What an acquire script found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// The caller now holds it: the field's new hold count, and a fencing
    /// token if the kind hands them out.
    Held { count: u32, token: Option<u64> },
    /// Someone else holds it; retry after about this long (`None`: no
    /// expiry is known, re-check at the client's recheck interval).
    Busy(Option<Duration>),
}

/// What a release script found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReleaseReply {
    /// The field was missing: nothing was held, nothing changed.
    NotHeld,
    /// Given back; holds of the field remain.
    Remaining,
    /// Given back; the lock is free (and waiters were told).
    Freed,
    /// The field was gone where the release would have freed the lock:
    /// a copy of this request freed it before, or the hold was lost
    /// before the request ran, and Redis keeps nothing that tells which
    /// (the release wrote no request record: its first run was proved by
    /// the count). Only a [`Kind`] returns it; `Lease::apply_release`
    /// settles it as [`Freed`](Self::Freed) or [`NotHeld`](Self::NotHeld).
    Gone,
}

// === impl AcquireReply ===

impl AcquireReply {
    /// A refusal in the lock family's shape, `{_, pttl, …}`: retry after
    /// the key's TTL, and 1 ms more (-1, or no TTL: none known).
    pub(crate) fn busy(reply: &[i64]) -> AcquireReply {
        match reply {
            [_, ttl, ..] if *ttl >= 0 => {
                AcquireReply::Busy(Some(Duration::from_millis(*ttl as u64 + 1)))
            }
            _ => AcquireReply::Busy(None),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    /// Every primitive folder under `src/` (the lock family, semaphore,
    /// latch, multi-locks), and each of its `.rs` files: (folder, path
    /// under `src/`, source). For the tests that read what primitives
    /// name of the engine.
    pub(crate) fn primitive_sources() -> Vec<(&'static str, String, String)> {
        fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    out.push(path);
                }
            }
        }
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut sources = Vec::new();
        for folder in [
            "lock",
            "fenced_lock",
            "rw_lock",
            "semaphore",
            "fair_lock",
            "latch",
            "multi",
        ] {
            let mut files = Vec::new();
            walk(&src.join(folder), &mut files);
            for path in files {
                let rel = path
                    .strip_prefix(&src)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                sources.push((folder, rel, std::fs::read_to_string(&path).unwrap()));
            }
        }
        sources
    }

    /// The door holds: a primitive's folder names at most three engine
    /// modules (`kind`, `script`, and for the latch `wait`), the plain
    /// lock two. Counted as `crate::core::<module>` paths in code (not in
    /// comments), the test-only Lua lint excluded.
    #[test]
    fn a_primitive_goes_through_the_door() {
        let sources = primitive_sources();
        for (primitive, most) in [
            ("lock", 2),
            ("fenced_lock", 3),
            ("rw_lock", 3),
            ("semaphore", 3),
            ("fair_lock", 3),
            ("latch", 3),
            ("multi", 3),
        ] {
            let mut text = String::new();
            for (_, _, source) in sources.iter().filter(|(f, ..)| *f == primitive) {
                for line in source.lines() {
                    text.push_str(line.split("//").next().unwrap_or(""));
                    text.push('\n');
                }
            }
            assert!(!text.is_empty(), "read nothing in src/{primitive}");
            let mut modules: Vec<&str> = text
                .match_indices("crate::core::")
                .map(|(at, _)| {
                    let rest = &text[at + "crate::core::".len()..];
                    let end = rest
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(rest.len());
                    &rest[..end]
                })
                .filter(|m| *m != "lua_lint")
                .collect();
            modules.sort_unstable();
            modules.dedup();
            assert!(
                modules.len() <= most,
                "src/{primitive} names {} engine modules (at most {most}): {modules:?}",
                modules.len()
            );
        }
    }

    /// fred stays behind the door: no primitive file names it (in code, not
    /// in comments); the wire's types come through `core::kind`, and reads
    /// and plain commands are `Conn` methods (`core/read.rs`).
    #[test]
    fn a_primitive_does_not_name_fred() {
        let sources = primitive_sources();
        assert!(sources.len() >= 7, "read {} files", sources.len());
        for (_, path, source) in &sources {
            for (n, line) in source.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                assert!(
                    !code.contains("fred::"),
                    "src/{path}:{}: a primitive names fred: {line}",
                    n + 1
                );
            }
        }
    }
}

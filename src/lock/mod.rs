//! The reentrant lock (Redisson `RLock`) and its guard.
//!
//! # Keys, channel and scripts
//!
//! Lock `name` (after the client's key prefix) is a Redis hash at `name`.
//! Each holder is a field `<client-uuid>:<owner-id>` (see [`Owner`]) whose
//! value is its hold count. Unlocks are announced with the message `0` on
//! `redisson_lock__channel:{name}` (Redisson's rule: no braces are added to
//! a name that has some). The hash is changed only by the scripts beside
//! this file — `acquire.lua`, `release.lua` (recorded: idempotent by request
//! id, see `core/call.rs`), `force_unlock.lua` — and renewed by
//! `renew.lua` (declared keys), `renew_packed.lua` and
//! `renew_node_packed.lua` (a single server's and a cluster node's batches
//! in one argument); `holders.lua` reads it for operators (`holders.rs`).
//! A recorded call that could not prove its first run by the client's
//! count also keeps a small request record `leasehold_latch:{name}:<field>`
//! for the request record TTL (`ClientBuilder::request_record_ttl`),
//! deleted early once the call ended (`core/forget.rs`); an uncontended
//! lock and unlock write none.
//!
//! A waiting client also listens on `leasehold_lock__taken:{name}` (a
//! channel Redisson neither publishes nor subscribes to). When many
//! clients race for the lock, an acquire of a waiting client that takes
//! it free announces it there (`<lease ms> <field>`): the other clients
//! then leave the lock to it instead of all trying after each unlock
//! (`core/takes.rs`).
//!
//! The fenced lock is this lock with another acquire script (it also takes
//! a token): it acquires through [`Unfair::acquire_with`], and its holds are
//! released, renewed and force-unlocked exactly as these.
//!
//! # Waiting, dropping, cancelling
//!
//! Waiting is the engine's wait loop (`core/wait.rs`): try, subscribe, try,
//! sleep until an unlock message (one local waiter per message) or the
//! lock's TTL, repeat. A client keeps the channel subscribed for a second
//! after one of its waits got the lock, so an owner that locks again soon
//! (a hot lock) starts subscribed. Every acquire and release runs under the engine's
//! rules (`core/hold.rs`): a dropped acquire holds nothing, a dropped guard
//! releases in the background, a stale guard gives back nothing, and the
//! key never expires before the owner's longest live hold.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::Either;
use futures_util::FutureExt;

use crate::client::Client;
use crate::core::kind::{
    static_arg, AcquireReply, Before, Key, Kind, Lease, PackedScripts, Renewal, Request, Spec, Str,
    Try, Value,
};
use crate::core::script::Script;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::handle::raw::{sealed, RawLock, RawSingle};
use crate::handle::LockHandle;
use crate::naming::key_then_channel;
use crate::owner::Owner;

/// A reentrant distributed lock, by name (Redisson `RLock`): the
/// [`LockHandle`] of the plain kind, with every lock verb. Cheap to clone;
/// nothing is sent until a method is called.
///
/// Locks are held by an [`Owner`] (by default the current tokio task), and
/// the same owner can take the same lock again: each acquire adds a hold,
/// each guard gives one back, and the lock is free when the count reaches
/// zero. Read the [`Owner`] docs before using locks inside `join!` or
/// `select!`: futures joined in one task share one owner.
///
/// A lock taken with [`lock`](LockHandle::lock),
/// [`try_lock`](LockHandle::try_lock) or
/// [`try_lock_for`](LockHandle::try_lock_for) keeps a lease of the watchdog
/// timeout that the [`Watchdog`](crate::Watchdog) renews while the guard
/// lives; the `_with_lease` variants set a fixed lease that is never
/// renewed. Holds of one owner share the key: it lives as long as the
/// longest of them needs.
///
/// Waiters of one client are woken one at a time, oldest first. Across
/// clients there is no queue: every client wakes its oldest waiter and they
/// race, so the lock is not fair between processes. A
/// [`FairLock`](crate::FairLock) queues waiters in Redis and wakes only the
/// next one.
///
/// # Example
///
/// ```no_run
/// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
/// let lock = client.lock("orders:42");
/// let outer = lock.lock().await?;
/// let inner = lock.lock().await?; // same task: re-enters
/// assert_eq!(lock.hold_count().await?, 2);
/// inner.unlock().await?;
/// outer.unlock().await?;
/// assert!(!lock.is_locked().await?);
/// # Ok(()) }
/// ```
pub type Lock = LockHandle<Unfair>;

/// The raw kind of a [`Lock`] (see [`RawLock`]): its client, key and
/// channel. Not used directly. Unfair, as Redisson's `RLock`: a release
/// wakes a waiter, and whoever tries first takes the lock (a waiter may be
/// overtaken); [`Fair`](crate::raw::Fair) hands it over in arrival order.
///
/// # Example
///
/// ```no_run
/// # fn f(client: leasehold::Client) {
/// let lock: leasehold::LockHandle<leasehold::raw::Unfair> = client.lock("a");
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Unfair {
    /// One pointer: a handle cloned into every task that waits costs one
    /// word there, and a clone is one reference count.
    inner: Arc<Names>,
}

/// What a [`Lock`] handle names: its client, key and channel.
#[derive(Debug)]
struct Names {
    client: Client,
    /// The key, then the channel, in one buffer
    /// (`naming::key_then_channel`); `key`, `channel_key` and the strings
    /// the accessors return are slices of it.
    text: Str,
    key: Key,
    channel_key: Key,
}

/// Take or re-enter. Recorded: re-sent with the same request id.
static ACQUIRE: Script = Script::proved_after("lock.acquire", ACQUIRE_CHECK, ACQUIRE_BODY);
/// Give back holds; publishes the unlock message when freed. Recorded.
static RELEASE: Script = Script::proved_after("lock.release", RELEASE_CHECK, RELEASE_BODY);
/// Delete whoever holds it. Not retried.
static FORCE_UNLOCK: Script = Script::recorded(
    "lock.force_unlock",
    &[include_str!("scripts/force_unlock.lua")],
);
/// The watchdog's batch per slot (also one hold's renewal).
static RENEW: Script = Script::renewal("lock.renew", include_str!("scripts/renew.lua"));
/// The watchdog's batch packed in one argument (a single server).
static RENEW_PACKED: Script = Script::renewal(
    "lock.renew_packed",
    include_str!("scripts/renew_packed.lua"),
);
/// The watchdog's batch packed in one argument, per Redis 7 cluster
/// node.
static RENEW_NODE_PACKED: Script = Script::node_renewal(
    "lock.renew_node_packed",
    include_str!("scripts/renew_node_packed.lua"),
);

/// The engine's view of the lock's holds, and of the fenced lock's: they
/// are holds of the same field, and one field must have one lease record
/// (one turn, one request record, one set of TTL needs), whichever handle
/// took its holds, so both are values of this one kind (one type: one
/// `Kind::id`) that differ only in their acquire script
/// ([`Unfair::acquire_with`]).
#[derive(Debug)]
pub(crate) struct LockKind {
    /// A recorded script with `acquire.lua`'s `KEYS[1]`, ARGV and reply,
    /// the acquire's own keys after `KEYS[1]`, and optionally a fencing
    /// token after the count in its reply (the fenced lock's).
    acquire: &'static Script,
}

/// The plain lock's kind.
static PLAIN: LockKind = LockKind { acquire: &ACQUIRE };

/// How long the unlock channel stays subscribed after an acquire that
/// subscribed to it: an owner locking again within it starts subscribed.
const LINGER: Duration = Duration::from_secs(1);

/// The acquire's check before the record (`Script::recorded_after`): a
/// lock someone else holds, or a first run; it sets `early`,
/// `read_record` and `found.pttl`.
const ACQUIRE_CHECK: &[&str] = &[include_str!("scripts/acquire_check.lua")];
/// The release's check before the record: a first run; it sets `early`,
/// `read_record` and `found.count`.
const RELEASE_CHECK: &[&str] = &[
    include_str!("scripts/release_check.lua"),
    include_str!("../core/scripts/release_by_count.lua"),
];
/// The acquire script's body (it defines `local function body()`), before
/// the request record wraps it.
const ACQUIRE_BODY: &[&str] = &[include_str!("scripts/acquire.lua")];
/// The acquire without its record: the check, its early reply as it is,
/// then the body (for the bare-script baseline of `compare/`).
const ACQUIRE_BARE: &str = concat!(
    shared_lua!(),
    include_str!("scripts/acquire_check.lua"),
    "if early then return early end\n",
    include_str!("scripts/acquire.lua")
);
/// The release script's body, before the request record wraps it.
const RELEASE_BODY: &[&str] = &[include_str!("scripts/release.lua")];
/// The release without its record (for the bare-script baseline).
const RELEASE_BARE: &str = concat!(
    shared_lua!(),
    include_str!("scripts/release_check.lua"),
    include_str!("../core/scripts/release_by_count.lua"),
    "if early then return early end\n",
    include_str!("scripts/release.lua")
);

/// Renewal of hash-field leases (Redisson's `LockTask`).
pub(crate) static HASH_RENEWAL: Renewal = Renewal {
    slot: &RENEW,
    // Node batches are packed.
    node: None,
    packed: Some(PackedScripts {
        server: &RENEW_PACKED,
        node: &RENEW_NODE_PACKED,
    }),
};

/// The acquire and release scripts exactly as an uncontended lock + unlock
/// sends them (the twins without the request record, `core/script.rs`),
/// for the bare-fred baselines of `benches/` and `compare/`.
pub(crate) fn script_sources() -> (&'static str, &'static str) {
    (ACQUIRE.sent_source(), RELEASE.sent_source())
}

/// The bodies of the acquire and release scripts, without the request record, for
/// the bare-script baseline of `compare/`.
pub(crate) fn script_bodies() -> (&'static str, &'static str) {
    (ACQUIRE_BARE, RELEASE_BARE)
}

// === impl Client ===

impl Client {
    /// A handle to the lock called `name` (the key prefix is added). Cheap;
    /// nothing is sent until it is used. An empty name is reported as
    /// [`Error::InvalidArgument`] by every call on the lock.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let lock = client.lock("orders:42");
    /// assert_eq!(lock.name(), "orders:42");
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, name: &str) -> Lock {
        LockHandle::from_raw(Unfair::new(self, name))
    }
}

// === impl Unfair ===

impl Unfair {
    pub(crate) fn new(client: &Client, name: &str) -> Unfair {
        let (text, key_len) = key_then_channel(client.key_prefix(), name, "redisson_lock__channel");
        Unfair {
            inner: Arc::new(Names {
                client: client.clone(),
                key: Key::from(text.slice(..key_len)),
                channel_key: Key::from(text.slice(key_len..)),
                text,
            }),
        }
    }

    fn key_str(&self) -> &str {
        &self.inner.text[..self.inner.key.as_bytes().len()]
    }

    /// The client the lock is taken through (`MultiLock` orders its
    /// members by client id).
    pub(crate) fn client(&self) -> &Client {
        &self.inner.client
    }

    pub(crate) fn check(&self) -> Result<()> {
        self.inner.client.engine().check()?;
        self.check_name()
    }

    /// The lock's own argument (the engine is checked by the caller).
    fn check_name(&self) -> Result<()> {
        if RawLock::name(self).is_empty() {
            return Err(Error::invalid("lock name is empty"));
        }
        Ok(())
    }

    /// The wait loop (see the module docs), each try sent as `kind` says
    /// (the plain lock's, or the fenced lock's: [`LockKind::with_acquire`]),
    /// with `keys` after `KEYS[1]`. Holds taken either way are holds of the
    /// same field, counted in one lease record with one turn and one
    /// request record, so they may be mixed freely by one owner. `wait:
    /// None` waits forever.
    pub(crate) fn acquire_with<'a>(
        &'a self,
        kind: &'static LockKind,
        keys: &'a [Key],
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> impl Future<Output = Result<Option<LockGuard>>> + Send + 'a {
        let engine = self.inner.client.engine();
        if let Err(e) = self.check_name() {
            // As the acquire would at its first poll: the engine's own
            // error (shut down, no runtime) comes first.
            return Either::Left(async move {
                engine.check()?;
                Err(e)
            });
        }
        // No `async` layer of its own: the engine's future is the whole
        // acquire, and the guard is made from what its hold knows.
        let name_at = self.inner.client.key_prefix().len();
        let spec = Spec {
            kind,
            // Read at the first poll (`LockKind::owner_at_first_poll`).
            owner: 0,
            key: &self.inner.key,
            channel: RawSingle::channel(self),
            field: self.inner.client.field_prefix(),
            release_channel: self.inner.channel_key.as_bytes(),
            keys,
        };
        Either::Right(engine.acquire(spec, lease, wait).map(move |hold| {
            Ok(hold?.map(|hold| {
                let owner = Owner::from_id(hold.owner());
                LockGuard::new(hold, name_at, owner)
            }))
        }))
    }
}

impl sealed::Sealed for Unfair {}

impl RawLock for Unfair {
    type Guard = LockGuard;

    fn name(&self) -> &str {
        &self.key_str()[self.inner.client.key_prefix().len()..]
    }

    fn acquire(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> impl Future<Output = Result<Option<LockGuard>>> + Send + '_ {
        self.acquire_with(&PLAIN, &[], lease, wait)
    }
}

impl RawSingle for Unfair {
    fn key(&self) -> &str {
        self.key_str()
    }

    fn channel(&self) -> &str {
        &self.inner.text[self.inner.key.as_bytes().len()..]
    }

    fn client(&self) -> &Client {
        &self.inner.client
    }

    fn check(&self) -> Result<()> {
        Unfair::check(self)
    }

    async fn force_unlock(&self) -> Result<bool> {
        self.check()?;
        let engine = self.inner.client.engine();
        let reply = engine
            .force_unlock(
                Request::new(
                    &FORCE_UNLOCK,
                    [self.inner.key.clone(), self.inner.channel_key.clone()],
                )
                .arg(static_arg("0"))
                .publish(),
                (&self.inner.key, self.key_str()),
                &self.inner.client.id().to_string(),
            )
            .await?;
        Ok(reply.first() == Some(&1))
    }
}

// === impl LockKind ===

impl LockKind {
    /// A lock kind whose tries send `acquire` (see [`LockKind::acquire`]):
    /// the fenced lock's.
    pub(crate) const fn with_acquire(acquire: &'static Script) -> LockKind {
        LockKind { acquire }
    }
}

impl Kind for LockKind {
    fn acquire(&self, lease: &Lease, at: &Try<'_>) -> Request {
        Request::new(
            self.acquire,
            std::iter::once(lease.key())
                .chain(at.keys.iter().cloned())
                .chain(at.announce.map(Key::from)),
        )
        .arg(at.lease_ms)
        .arg(Value::String(lease.field()))
        // acquire_check.lua: the holds the client counts.
        .expected_holds(Before::Acquire)
        // acquire.lua: how to announce a take (core/takes.rs).
        .publish_if(at.announce.is_some())
    }

    fn release(&self, lease: &Lease, count: u32, ttl_ms: i64) -> Request {
        Request::new(&RELEASE, [lease.key(), lease.channel()])
            .arg(ttl_ms)
            .arg(Value::String(lease.field()))
            .int(i64::from(count))
            .publish()
            // release_check.lua: the count this owner's field holds now.
            .expected_holds(Before::Release)
    }

    fn acquire_reply(&self, reply: &[i64]) -> AcquireReply {
        match reply {
            // A third element is the fenced lock's token (see
            // `Unfair::acquire_with`).
            [1, count, token @ ..] => AcquireReply::Held {
                count: (*count).clamp(1, u32::MAX as i64) as u32,
                token: token.first().map(|t| (*t).max(0) as u64),
            },
            _ => AcquireReply::busy(reply),
        }
    }

    fn renewal(&self) -> &'static Renewal {
        &HASH_RENEWAL
    }

    // `excludes`: the default. A plain lock's hash holds one owner's field
    // at a time: whoever else this client counted on the key is gone.

    /// `owner.scope(lock.lock())` locks as `owner`, and a future made in
    /// one task may be polled in another: the owner is the first poller's.
    fn owner_at_first_poll(&self) -> u64 {
        Owner::current().id()
    }

    fn field_of_owner(&self) -> bool {
        true
    }

    /// Both the lock's and the fenced lock's acquire announce.
    fn announces_takes(&self) -> bool {
        true
    }

    /// An owner that waited is likely to come back soon (a hot lock).
    fn linger(&self) -> Option<Duration> {
        Some(LINGER)
    }

    /// The lock's hash exists exactly while someone holds it.
    fn held_while_key_lives(&self) -> bool {
        true
    }
}

/// Each script's pieces share only what they declare together
/// (`core/lua_lint.rs`).
#[cfg(test)]
mod lua_lint {
    use super::*;

    #[test]
    fn pieces_share_only_what_they_declare() {
        crate::core::lua_lint::check(&[
            &ACQUIRE,
            &FORCE_UNLOCK,
            &RELEASE,
            &RENEW,
            &RENEW_NODE_PACKED,
            &RENEW_PACKED,
        ]);
    }
}

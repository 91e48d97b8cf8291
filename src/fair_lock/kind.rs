//! The fair lock's keys, scripts, and its `Kind`: how the engine releases
//! and renews its holds (see the module docs of `fair_lock`).

use std::time::Duration;

use super::queue::{kick_if_unheard, GRANT, THREAD_WAIT};
use crate::clock::epoch_ms;
use crate::core::kind::{
    hand_here, Before, Key, Kind, Lease, Policy, Renewal, Reply, Request, Try, Value, Wake,
};
use crate::core::script::Script;
use crate::naming::{concat, prefix_name};

/// The keys of one fair lock (and the channel stem), as scripts take them.
#[derive(Clone, Debug)]
pub(crate) struct Names {
    pub(super) key: Key,
    pub(super) channel: Key,
    /// The queue, the waiters' timeouts and the grants
    /// (`leasehold_grant:{name}`, see the module docs), in the order the
    /// acquire takes them after the hash (`FairKind::acquire`).
    tries: [Key; 3],
}

/// The engine's view of a fair lock's holds.
#[derive(Debug)]
pub(super) struct FairKind;

/// How long a waiter's channel stays subscribed after the hold it got
/// ends (see `FairLock::acquire`).
pub(super) const LINGER: Duration = Duration::from_secs(1);

/// A fair-lock script: the queue helpers (`scripts/queue.lua`), then `$file`.
macro_rules! queued {
    ($file:literal) => {
        &[include_str!("scripts/queue.lua"), include_str!($file)]
    };
}

/// Join the queue or take the lock. Its check before the record
/// (`Script::recorded_after`) comes after the queue helpers. Recorded.
pub(super) static ACQUIRE: Script = Script::recorded_after(
    "fair_lock.acquire",
    queued!("scripts/acquire_check.lua"),
    &[include_str!("scripts/acquire.lua")],
);
/// Give back holds, handing a freed lock to the head waiter. Its check
/// proves a first run by the client's count, so it has a twin sent without
/// the record (`Script::proved_after`), as the plain lock's release.
pub(super) static RELEASE: Script = Script::proved_after(
    "fair_lock.release",
    &[
        include_str!("scripts/queue.lua"),
        include_str!("scripts/release_check.lua"),
        include_str!("../core/scripts/release_by_count.lua"),
    ],
    &[include_str!("scripts/release.lua")],
);
/// Free the lock whoever holds it, and hand it to the head waiter.
/// Recorded.
pub(super) static FORCE_UNLOCK: Script = Script::recorded(
    "fair_lock.force_unlock",
    queued!("scripts/force_unlock.lua"),
);
/// A waiter that stopped waiting leaves the queue at once. Recorded.
pub(super) static LEAVE: Script = Script::recorded("fair_lock.leave", queued!("scripts/leave.lua"));
/// After a release told a head waiter that was not listening: once its
/// timeout has passed, hand a still-free lock to the first waiter still
/// there. Not retried.
pub(super) static KICK: Script = Script::plain(
    "fair_lock.kick",
    concat!(
        include_str!("scripts/queue.lua"),
        include_str!("scripts/kick.lua")
    ),
);
/// A waiting waiter shows it is alive (every 2 s while it waits).
/// Idempotent, not retried.
pub(super) static REFRESH: Script = Script::plain(
    "fair_lock.refresh",
    concat!(
        include_str!("scripts/queue.lua"),
        include_str!("scripts/refresh.lua")
    ),
);

/// The release as a release whose client's count is known sends it: the
/// twin without the request record (for tests that send a copy of a
/// release by hand: `__bench::fair_release_script`).
pub(crate) fn release_source() -> &'static str {
    RELEASE.sent_source()
}

/// The queue's key prefix (Redisson's): `redisson_lock_queue:{name}`.
pub(crate) const QUEUE_PREFIX: &str = "redisson_lock_queue";
/// The waiters' timeouts' key prefix (Redisson's): `redisson_lock_timeout:{name}`.
pub(crate) const TIMEOUTS_PREFIX: &str = "redisson_lock_timeout";
/// The grants' key prefix (leasehold's): `leasehold_grant:{name}`.
pub(crate) const GRANTS_PREFIX: &str = "leasehold_grant";

// === impl Names ===

impl Names {
    pub(super) fn of(key: &str) -> Names {
        Names {
            key: Key::from(key),
            channel: Key::from(prefix_name("redisson_lock__channel", key)),
            tries: [
                Key::from(prefix_name(QUEUE_PREFIX, key)),
                Key::from(prefix_name(TIMEOUTS_PREFIX, key)),
                Key::from(prefix_name(GRANTS_PREFIX, key)),
            ],
        }
    }

    /// The acquire's keys after the hash: queue, timeouts, grants.
    pub(super) fn try_keys(&self) -> &[Key] {
        &self.tries
    }

    /// `redisson_lock_queue:{name}`: the waiters' fields, in order.
    pub(super) fn queue(&self) -> &Key {
        &self.tries[0]
    }

    /// `redisson_lock_timeout:{name}`: each waiter's timeout, its score.
    pub(super) fn timeouts(&self) -> &Key {
        &self.tries[1]
    }

    /// `leasehold_grant:{name}`: grants not yet taken up.
    pub(super) fn grants(&self) -> &Key {
        &self.tries[2]
    }

    /// The names of the lock on `key` (a lease's key).
    fn of_key(key: &Key) -> Names {
        Names::of(&String::from_utf8_lossy(key.as_bytes()))
    }

    /// KEYS of the plain scripts (and the release, before its request record):
    /// hash, queue, timeouts, channel stem, grants.
    pub(super) fn script_keys(&self) -> Vec<Key> {
        vec![
            self.key.clone(),
            self.queue().clone(),
            self.timeouts().clone(),
            self.channel.clone(),
            self.grants().clone(),
        ]
    }

    /// The arguments every hand-over takes last: thread wait, grant lease
    /// (both in ms).
    pub(super) fn hand_over_args() -> [Value; 2] {
        [
            (THREAD_WAIT.as_millis() as i64).into(),
            (GRANT.as_millis() as i64).into(),
        ]
    }
}

/// A release that granted the lock to a waiter (reply `{0 | 2, received,
/// timeout, 1, nonce, ms}` and the waiter's field) hands the grant message
/// to that waiter at once if its client lives in this process (see the
/// module docs, "One-hop handoff"): Redis writes the release's reply
/// before the message, so the message reaches even a waiter in this very
/// process tens of microseconds after the releaser goes on. Redis's copy
/// then wakes nobody. A replayed reply (a re-sent release) carries no
/// field, nor does a copy's "gone" (`{3}`: the first run, whose reply was
/// lost, freed the lock and perhaps granted it; the copy changed nothing,
/// `scripts/release_check.lua`): then Redis's message, published by the
/// first run, does the work, as for a waiter in another process.
fn hand_grant_here(names: &Names, reply: &Reply) {
    let ([0 | 2, _, _, 1, nonce, ms, ..], Some(field)) = (&reply[..], reply.text()) else {
        return;
    };
    let Some(client) = field
        .rsplit_once(':')
        .and_then(|(client, _)| uuid::Uuid::parse_str(client).ok())
    else {
        return;
    };
    let channel = waiter_channel(&String::from_utf8_lossy(names.channel.as_bytes()), field);
    hand_here(client, &channel, format!("grant:{nonce}:{ms}").as_bytes());
}

/// The waiter's own channel: the lock's channel `stem`
/// (`redisson_lock__channel:{<key>}`), then `:<field>`, as the scripts
/// publish on it (`channel .. ':' .. head`).
pub(super) fn waiter_channel(stem: &str, field: &str) -> String {
    concat([stem, ":", field])
}

// === impl FairKind ===

/// One try of `lease` (`acquire.lua`): queueing if busy when `waits`,
/// with its client's group mark `mark` (0: none, `alive.rs`).
pub(super) fn try_request(lease: &Lease, at: &Try<'_>, waits: bool, mark: i64) -> Request {
    Request::new(
        &ACQUIRE,
        std::iter::once(lease.key()).chain(at.keys.iter().cloned()),
    )
    .arg(at.lease_ms)
    .arg(Value::String(lease.field()))
    .arg(epoch_ms())
    .arg(THREAD_WAIT.as_millis() as i64)
    .arg(i64::from(waits))
    .arg(i64::from(lease.holds() > 0))
    .expected_holds(Before::Acquire)
    .arg(mark)
}

/// The waiter's channel policy: `grant:…` (the release made this waiter
/// the holder) wakes one waiter handing it the message; anything else
/// (Redisson's `0`) wakes one.
fn wake_or_grant(message: &[u8]) -> Wake {
    if message.starts_with(b"grant:") {
        Wake::OneWith
    } else {
        Wake::One
    }
}

impl Kind for FairKind {
    /// A single try, not queued (a wait's tries are its
    /// [`Handoff`](crate::core::kind::Handoff)'s: `acquire.rs`).
    fn acquire(&self, lease: &Lease, at: &Try<'_>) -> Request {
        try_request(lease, at, false, 0)
    }

    fn release(&self, lease: &Lease, count: u32, ttl_ms: i64) -> Request {
        let names = Names::of_key(&lease.key());
        Request::new(&RELEASE, names.script_keys())
            .arg(ttl_ms)
            .arg(Value::String(lease.field()))
            .int(i64::from(count))
            .publish()
            .arg(epoch_ms())
            .args(Names::hand_over_args())
            // release_check.lua: the count this owner's field holds now.
            .expected_holds(Before::Release)
    }

    fn after_release(&self, lease: &Lease, reply: &Reply) {
        let names = Names::of_key(&lease.key());
        hand_grant_here(&names, reply);
        kick_if_unheard(&lease.conn, &names, reply);
    }

    fn renewal(&self) -> &'static Renewal {
        &crate::lock::HASH_RENEWAL
    }

    fn wakes(&self) -> Policy {
        wake_or_grant
    }

    /// The lock's hash exists exactly while someone holds it (a grant
    /// included).
    fn held_while_key_lives(&self) -> bool {
        true
    }

    fn excludes(&self, mine: &Lease, other: &Lease) -> bool {
        // The hash holds one field at a time: any other field this client
        // counted on it is gone. The same field (this owner through a
        // plain `Lock` handle) is this very hold.
        other.field_bytes() != mine.field_bytes()
    }
}

/// Each script's pieces share only what they declare together
/// (`core/lua_lint.rs`).
#[cfg(test)]
mod lua_lint {
    use super::*;

    #[test]
    fn pieces_share_only_what_they_declare() {
        crate::core::lua_lint::check(&[&ACQUIRE, &FORCE_UNLOCK, &KICK, &LEAVE, &REFRESH, &RELEASE]);
    }
}

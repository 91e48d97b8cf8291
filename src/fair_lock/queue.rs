//! The fair lock's wait queue, on the client side: keeping a waiter's
//! timeout fresh while it waits, leaving the queue when it stops waiting,
//! and checking on a head waiter a release told but that was not
//! listening.
//!
//! * **Refresh** ([`refresh`]), only where the client cannot keep its
//!   waiters alive itself (`alive.rs`, which renews one key per client
//!   and lock every [`REFRESH_EVERY`] instead): while an acquire waits,
//!   every `REFRESH_EVERY` a small script (`refresh.lua`) sets its liveness
//!   sign to now + [`THREAD_WAIT`] and its score to what Redisson's
//!   arithmetic gives its place in the queue (see `queue.lua`). A waiter
//!   whose process dies stops refreshing, so leasehold's scripts count it
//!   gone at most `THREAD_WAIT` later. If the entry is found gone while
//!   the waiter waits (purged by another client), the waiter is told on
//!   its own channel to re-check at once, and queues again.
//! * **Leave** ([`Leave`]): an acquire that ends without the lock (timed
//!   out, failed, dropped) removes its entry from the list and the zset at
//!   once, as a background job if it was dropped, under the lease's turn
//!   (so after an acquire call still being settled), unless a newer wait
//!   of the same owner has queued the field again since (a
//!   `timeout(lock())` retried at once), or another wait of the same owner
//!   is still in progress in this process (tasks sharing an owner; counted
//!   on the lease, read under its turn): the place is then that wait's,
//!   whichever of the two tried last.
//!   If it headed the queue of a free lock, the lock is handed to the
//!   next waiter. If a release had granted it the lock and this client
//!   counts no hold of the field (the wait was dropped as the grant ran),
//!   it gives the grant back and hands the lock on.
//! * **Kick** ([`kick_later`]): a release (or leave, or force-unlock)
//!   that told a head waiter nobody was listening for (PUBLISH reached no
//!   connection: the waiter's process may be dead) checks again once that
//!   waiter's timeout (or the lease a grant gave it) has passed: it purges gone heads and tells the next
//!   one, until a message is received, the lock is taken or nobody waits.
//!   So a dead waiter holds the queue up for at most `THREAD_WAIT` after
//!   it last refreshed, while live waiters sleep (no polling of the
//!   script). The kick is best effort (a task on the releasing client's
//!   runtime); waiters still re-check on their own bound.

use std::convert::Infallible;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::clock::epoch_ms;

use super::kind::{Names, KICK, LEAVE, REFRESH};
use crate::core::kind::{
    spawn_here, Armed, Conn, Engine, LeaseRef, Once, Reply, Request, Str, Value,
};

/// How long a waiter counts as alive after it last showed up (Redisson's
/// "thread wait time", `fairLockWaitTimeout`, 5 minutes there). A waiter
/// whose process died holds the queue up for at most this long after its
/// last refresh.
pub(crate) const THREAD_WAIT: Duration = Duration::from_secs(5);

/// The longest TTL a release grants a waiter it hands the lock to (see
/// the module docs of `fair_lock`): a granted waiter that has gone away
/// holds the lock at most this long.
pub(crate) const GRANT: Duration = Duration::from_secs(5);

/// How often a client renews its alive keys (`alive.rs`), or a waiting
/// acquire that its client cannot keep alive refreshes its timeout. The
/// rest of `THREAD_WAIT` (3 s) is the slack for a late renewal under load.
pub(crate) const REFRESH_EVERY: Duration = Duration::from_secs(2);

/// Most kicks in a row after one release (each needs a head that was not
/// listening and whose timeout passed).
const MAX_KICKS: usize = 32;

/// Keeps the waiter `field`'s liveness sign and score fresh while it
/// waits; never ends (dropped with the acquire). See the module docs. Each
/// refresh that found the waiter still queued records its send time in
/// `seen` (the waiter was not granted the lock before then: a grant pops
/// it).
pub(crate) async fn refresh(
    conn: &Conn,
    names: &Names,
    field: &Str,
    own_channel: &str,
    seen: &parking_lot::Mutex<Option<tokio::time::Instant>>,
) -> Infallible {
    let keys = [
        names.queue().clone(),
        names.timeouts().clone(),
        names.grants().clone(),
    ];
    loop {
        tokio::time::sleep(REFRESH_EVERY).await;
        let sent = tokio::time::Instant::now();
        let args = [
            Value::String(field.clone()),
            epoch_ms().into(),
            (THREAD_WAIT.as_millis() as i64).into(),
        ];
        // Boxed, as the publish below: a fred call's future is large, and
        // this loop lives inline in every waiting fair-lock task, which
        // would carry it for the whole wait (sizes: BENCHMARKS.md, "Sizes
        // behind the code").
        let changed = Box::pin(conn.eval::<i64>(&REFRESH, &keys, &args)).await;
        // Refreshed (1), or an error: the next round.
        if let Ok(1) = changed {
            *seen.lock() = Some(sent);
        }
        if let Ok(0) = changed {
            // Not queued while waiting (purged): nobody will tell this
            // waiter its turn, so it re-checks now (and queues again).
            tracing::debug!(field = %field, "fair lock: waiter purged from the queue; re-checking");
            let _ = Box::pin(conn.publish(own_channel.to_owned(), "0")).await;
        }
    }
}

/// Removes one waiter from the queue (see the module docs), sent once by
/// the engine under the lease's turn (so after an acquire call still being
/// settled: it may queue the waiter again): now when an acquire ends
/// without the lock, in the background when it is dropped.
#[derive(Debug)]
pub(crate) struct Leave {
    pub(crate) lease: LeaseRef,
    pub(crate) names: Names,
    /// The first and last request ids of the wait's tries (a grant's
    /// nonce is one of them): only a grant to this very wait is given
    /// back.
    pub(crate) tries: Arc<parking_lot::Mutex<Option<(u64, u64)>>>,
}

impl Once for Leave {
    fn lease(&self) -> &LeaseRef {
        &self.lease
    }

    /// `under_turn`: run under the lease's turn (not the fallback of a
    /// shutdown that found the turn taken).
    fn request(&self, under_turn: bool) -> Option<Request> {
        if self.lease.waits() > 0 {
            // Another wait of this owner is in progress (tasks sharing an
            // owner, or a wait retried at once): the place in the queue,
            // and a grant made to it, are that wait's now. Read under the
            // turn, so no try of that wait is in flight.
            return None;
        }
        // Under the lease's turn: whether this client counts holds of the
        // field (an adopted grant must never be given back here).
        let counted = i64::from(self.lease.holds() > 0);
        // The request ids that count as this wait's: its own tries, or,
        // under the turn, any. Then no try of the owner is in flight, no
        // other wait of it is in progress (above) and no hold is counted
        // (`counted`), so the entry and any grant to the field are left
        // over from this wait or from an older one whose leave skipped
        // while this one waited (its last try may be the later one):
        // nobody in this process will take them up, and the leave of the
        // owner's last wait gives them back.
        let (first, last) = if under_turn {
            (0, i64::MAX)
        } else {
            self.tries
                .lock()
                .map_or((1, 0), |(first, last)| (first as i64, last as i64))
        };
        // Recorded on the lease's record (the engine's `Once`): a copy of
        // this leave that arrives after a later wait of the owner tried
        // finds a newer request id there and never runs (it could give
        // back a grant that wait adopted: under the turn any nonce counts).
        Some(
            Request::new(&LEAVE, self.names.script_keys())
                .arg(Value::String(self.lease.field()))
                .arg(epoch_ms())
                .publish()
                .arg(counted)
                .args(Names::hand_over_args())
                .arg(first)
                .arg(last),
        )
    }

    fn ran(&self, conn: &Arc<Conn>, reply: &Reply) {
        kick_if_unheard(conn, &self.names, reply);
    }

    fn what(&self) -> &'static str {
        "leave the fair lock's queue"
    }
}

/// An acquire that may be queued: dropped armed, it leaves the queue in
/// the background. It counts as one of its owner's waits (see
/// [`Lease::wait_began`](crate::core::kind::Lease::wait_began)) from
/// [`Queued::new`] until it is disarmed, leaves or is dropped.
pub(crate) struct Queued {
    leave: Armed<Leave>,
    /// Still counted among the owner's waits.
    counted: bool,
}

impl Queued {
    pub(crate) fn new(engine: Arc<Engine>, leave: Leave) -> Queued {
        leave.lease.wait_began();
        Queued {
            leave: Armed::new(engine, leave),
            counted: true,
        }
    }

    /// The wait is over (its leave, if any, must not count it).
    fn uncount(&mut self) {
        if let Some(leave) = self.leave.get().filter(|_| self.counted) {
            leave.lease.wait_ended();
        }
        self.counted = false;
    }

    /// The acquire got the lock: its entry is gone already.
    pub(crate) fn disarm(&mut self) {
        self.uncount();
        self.leave.disarm();
    }

    /// The acquire ended without the lock: leave now.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the leave stays armed until it has run, so a drop
    /// half-way leaves in the background (the same request again).
    pub(crate) async fn leave_now(&mut self) {
        self.uncount();
        self.leave.send_now().await;
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        // Before the armed leave drops (a field: after this) and is sent.
        self.uncount();
    }
}

/// Reads `{status, received, timeout}` (release, leave, force-unlock,
/// kick): a head was told but nobody received it → kick once its timeout
/// has passed.
pub(crate) fn kick_if_unheard(conn: &Arc<Conn>, names: &Names, reply: &[i64]) {
    if let [_, 0, timeout, ..] = reply {
        kick_later(conn, names.clone(), *timeout);
    }
}

/// Starts the kick task on the current runtime (if any); see the module
/// docs.
fn kick_later(conn: &Arc<Conn>, names: Names, timeout: i64) {
    let conn: Weak<Conn> = Arc::downgrade(conn);
    spawn_here(async move {
        let mut timeout = timeout;
        for _ in 0..MAX_KICKS {
            let after = (timeout - epoch_ms()).clamp(0, i64::MAX) as u64 + 1;
            tokio::time::sleep(Duration::from_millis(after)).await;
            let Some(conn) = conn.upgrade() else { return };
            if conn.is_closed() {
                return;
            }
            let reply = Request::new(&KICK, names.script_keys())
                .arg(epoch_ms())
                .publish()
                .args(Names::hand_over_args())
                .run_plain::<Vec<i64>>(&conn)
                .await;
            match reply.as_deref() {
                Ok([1, 0, next, ..]) => timeout = *next,
                // Still held by a grant nobody took up: its key outlives
                // the grant's end as computed here by the release's
                // delay; check again when it has run out.
                Ok([2, pttl, ..]) if *pttl >= 0 => timeout = epoch_ms() + *pttl,
                Ok(_) => return,
                Err(e) => {
                    tracing::debug!(key = ?names.key, error = %e, "fair lock: kick failed; waiters re-check on their own");
                    return;
                }
            }
        }
    });
}

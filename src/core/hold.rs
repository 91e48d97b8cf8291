//! One hold: taken by an acquire, given back by an unlock or a drop, on
//! every path.
//!
//! * **Acquire** ([`acquire`]): takes the lease's turn, sends the
//!   primitive's recorded acquire script, and counts the hold it took. If
//!   the caller's future is dropped while the script is under way, or the
//!   outcome stays unknown, the call is handed (with its turn) to a
//!   background job that resolves it and gives back a hold nobody will use.
//! * **Adopt** ([`count_granted`]): a hold another client's script granted
//!   this owner (a release that hands the lock to the head waiter) is
//!   counted without a call, as an acquire sent at a time the caller
//!   proves was before the grant. Only the handoff (`handoff.rs`, which
//!   documents it) calls it.
//! * **Release** ([`Hold::release`] and [`Hold`]'s drop): the hold stops
//!   needing the key at once (so the watchdog stops renewing it if it was
//!   the last watchdog hold); the release script is then sent under the
//!   turn, only if the hold's incarnation is still current (a stale guard
//!   gives back nothing). A drop sends it from a background job; a
//!   dropped `unlock` hands its call to one.
//! * **Extend** ([`Hold::extend`]): a fixed hold's deadline is raised,
//!   then the kind's renewal script is sent for this one lease, under the
//!   turn, with the new TTL; the signal's `until` rises only once Redis
//!   confirms, from the send time.
//! * **Shutdown**: every counted hold is given back ([`drain`]); an
//!   acquire that completes after shutdown began gives its hold back
//!   itself, under the same turn, and reports `Error::Shutdown`.
//!
//! Every release (unlock, drop, shutdown) runs in a `release` span
//! (`lock`, `owner`, `holds`, `outcome`); each release call that ran is
//! counted in the client's counters.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{Instrument, Span};

use super::background::{BoxFuture, Job};
use super::boxed::boxed_in_place;
use super::call::{Call, Settled};
use super::conn::Conn;
use super::kind::{AcquireReply, ReleaseReply};
use super::lease::{Lease, LeaseRef, Taken, Term, Turn};
use super::open::Open;
use super::signal::Signal;
use super::stats::KeyName;
use super::wait::Step;
use super::Engine;
use crate::error::{Error, Result};

/// One hold of a lease, owned by a guard.
///
/// `parts` is `Some` until the hold is given back by [`Hold::release`]
/// (see `into_parts`); the drop gives back a hold that still has them.
#[derive(Debug)]
pub(crate) struct Hold {
    parts: Option<HoldParts>,
    signal: Arc<Signal>,
    /// Keeps the client's connections open while the hold lives (a guard
    /// may outlive its client: `open.rs`).
    engine: Open,
    token: Option<u64>,
}

/// An acquire's call, the lease's term and the TTL the script raises the
/// key to.
#[derive(Debug)]
pub(crate) struct AcquireCall {
    pub(crate) call: Call,
    pub(crate) term: Term,
    pub(crate) ttl: Duration,
}

/// A call under way for a caller; dropped before it is `finish`ed, it hands
/// the call and its turn to a background job.
struct InFlight {
    engine: Arc<Engine>,
    job: Option<Settle>,
}

/// A call whose outcome must still be learned, with what to do about it.
struct Settle {
    lease: LeaseRef,
    call: Call,
    kind: SettleKind,
    turn: parking_lot::Mutex<Option<Turn>>,
    /// The give-back of an acquire that ran; its rid, once chosen.
    give_back: OnceLock<u64>,
}

#[derive(Clone, Copy, Debug)]
enum SettleKind {
    /// An acquire (sent in incarnation `began`): a hold it took is given
    /// back.
    Acquire {
        sent: Instant,
        ttl: Duration,
        began: u64,
    },
    /// A release of `count` holds: applied to the lease.
    Release {
        sent: Instant,
        ttl: Duration,
        count: u32,
    },
}

impl SettleKind {
    /// When the call was first sent.
    fn sent(self) -> Instant {
        match self {
            SettleKind::Acquire { sent, .. } | SettleKind::Release { sent, .. } => sent,
        }
    }
}

/// A hold whose release is not sent yet. Dropped (an `unlock` cancelled
/// while it waits for the turn, or called outside a runtime), it hands the
/// hold to a background release, as a dropped guard does.
struct Unsent {
    engine: Arc<Engine>,
    parts: Option<HoldParts>,
}

/// The release of a dropped guard's hold.
struct DroppedRelease {
    hold: HoldParts,
    rid: OnceLock<u64>,
    /// How many holds it gives back, fixed at its first run (a run again
    /// sends the same request).
    count: OnceLock<u32>,
}

#[derive(Debug)]
struct HoldParts {
    lease: LeaseRef,
    incarnation: u64,
    term: Term,
}

/// A retired hold's parts go when its release has landed (or will never
/// be sent): only then may the watchdog stop renewing the lease.
impl Drop for HoldParts {
    fn drop(&mut self) {
        self.lease.release_done();
    }
}

// === acquire ===

/// Runs one acquire of `lease`. `request` builds the call once the turn is
/// taken, from the request id.
///
/// Cancel safe: dropped while the script is under way, the call is settled
/// in the background (a hold it took is given back).
pub(crate) async fn acquire(
    engine: &Arc<Engine>,
    lease: &LeaseRef,
    request: impl FnOnce(u64) -> AcquireCall,
) -> Result<Step<Hold>> {
    let turn = lease.turn().await;
    let AcquireCall { call, term, ttl } = request(lease.conn.rid());
    let sent = Instant::now();
    let began = lease.begin_call();
    let mut flight = InFlight::new(
        engine,
        lease,
        call,
        SettleKind::Acquire { sent, ttl, began },
        turn,
    );
    let outcome = flight.call().run(&engine.conn, sent).await;
    let (reply, fresh) = match outcome {
        Ok(Settled::Ran(reply)) => {
            // Done with the call: its record may go (`forget.rs`).
            flight.call().forget_request_record(&engine.conn);
            (lease.kind.acquire_reply(&reply), !reply.is_replay())
        }
        Ok(Settled::Stale) => {
            flight.finish();
            return Err(Error::protocol("a fresh acquire was reported stale"));
        }
        // Still unknown: a background job keeps resolving it.
        Err(e) => return Err(Error::Redis(e)),
    };
    let turn = flight.finish();
    let (count, token) = match reply {
        AcquireReply::Busy(retry) => {
            // Under the turn: the refusal follows every earlier call of
            // this owner, and proves its field is gone.
            lease.busy_seen(began);
            return Ok(Step::Busy(retry));
        }
        AcquireReply::Held { count, token } => (count, token),
    };
    let taken = Taken { began, fresh };
    let hold = Hold::counted(engine, lease, count, term, (sent, ttl), taken, token);
    let hold = hold.unless_shut_down().await?;
    if let Some(wait) = engine.replicas {
        // Boxed: fred's future is large, and inline it would make every
        // try's future (boxed per try) as large.
        let acked = Box::pin(
            engine
                .conn
                .wait_replicas(&lease.key(), wait.replicas, wait.timeout),
        )
        .await;
        let missing = match acked {
            Ok(acked) if acked >= wait.replicas => None,
            Ok(acked) => Some(Error::ReplicasMissing {
                name: lease.key_str().to_owned(),
                wanted: wait.replicas,
                acked,
            }),
            Err(e) => Some(Error::Redis(e)),
        };
        if let Some(e) = missing {
            // Given back before the error is reported: "not held".
            let parts = hold.into_parts();
            give_back(&engine.conn, &parts, 1, &OnceLock::new(), true).await?;
            drop(turn);
            return Err(e);
        }
    }
    drop(turn);
    Ok(Step::Done(hold))
}

/// Counts a hold granted to this lease's field by another client's script
/// (count 1, the key's TTL set to at least `ttl` after `since`), as if an
/// acquire sent at `since` had returned it: the signal's `until` is
/// `since + ttl`. The handoff's adoption (`handoff::adopt`, the only
/// caller, which also raises the TTL if `term` needs more); here because
/// it builds the hold with this file's private constructor.
///
/// Cancel safe: dropped while waiting for the turn, nothing is counted
/// (the caller's primitive gives the grant back).
pub(crate) async fn count_granted(
    engine: &Arc<Engine>,
    lease: &LeaseRef,
    term: Term,
    since: Instant,
    ttl: Duration,
) -> Result<Hold> {
    let turn = lease.turn().await;
    let began = lease.begin_call();
    // Holds this record counts now were taken after the grant, on the
    // field it made: the owner's tries are refused until the grant (a
    // refusal ends the incarnation, `Lease::busy_seen`), and a try of the
    // owner that ran after it found the granted field and counted it (a
    // re-entry: count 2 on a field of 1). So the grant joins them instead
    // of ending them as a fresh field would (which would lose a try made
    // beside the waiting `lock()` at birth).
    let before = lease.holds();
    let (count, fresh) = if before > 0 {
        (before.saturating_add(1), false)
    } else {
        (1, true)
    };
    let taken = Taken { began, fresh };
    let hold = Hold::counted(engine, lease, count, term, (since, ttl), taken, None);
    let hold = hold.unless_shut_down().await?;
    drop(turn);
    Ok(hold)
}

/// Renews `lease` alone to `ttl_ms` with its kind's renewal script (as the
/// watchdog's batch would, for one entry) and applies the verdict to the
/// record: `Ok(true)` renewed, `Ok(false)` its field was found gone. For
/// [`Hold::extend`] and the raise of an adopted hold (`handoff.rs`).
pub(crate) async fn renew_one(lease: &LeaseRef, ttl_ms: i64) -> Result<bool> {
    let conn = &lease.conn;
    let renewal = lease.kind.renewal();
    let nonce = conn.rid() as i64;
    let (mut keys, mut args) = (Vec::with_capacity(2), Vec::with_capacity(4));
    args.push(fred::types::Value::Integer(nonce));
    args.push(fred::types::Value::Integer(ttl_ms));
    lease.kind.renew_entry(lease, &mut keys, &mut args, false);
    let snapshot = lease.lease().snapshot();
    let sent = Instant::now();
    let reply = renewal
        .slot
        .run::<Vec<i64>>(&conn.redis, &keys, &args)
        .await?;
    if super::watchdog::gone_entries(conn, nonce, reply)?.is_empty() {
        lease.stats.renewed(1);
        snapshot.renewed(sent, Duration::from_millis(ttl_ms as u64));
        Ok(true)
    } else {
        snapshot.gone();
        Ok(false)
    }
}

// === impl Hold ===

impl Hold {
    /// Counts a hold an acquire (or a grant) took on `lease`: the field's
    /// count is now `count`, the key kept at least `ttl` from `sent`.
    fn counted(
        engine: &Arc<Engine>,
        lease: &LeaseRef,
        count: u32,
        term: Term,
        (sent, ttl): (Instant, Duration),
        taken: Taken,
        token: Option<u64>,
    ) -> Hold {
        let (signal, incarnation) = lease.acquired_by(count, term, sent, ttl, taken);
        Hold {
            parts: Some(HoldParts {
                lease: lease.clone_ref(),
                incarnation,
                term,
            }),
            signal,
            engine: Open::new(engine.clone()),
            token,
        }
    }

    /// A hold just counted, while the caller has the lease's turn: if the
    /// client is shutting down (and may have drained this lease already),
    /// gives it back now, under that turn, so it cannot be left held, and
    /// reports `Shutdown`.
    async fn unless_shut_down(self) -> Result<Hold> {
        if !self.engine.is_shut_down() {
            return Ok(self);
        }
        let conn = self.engine.conn.clone();
        let parts = self.into_parts();
        give_back(&conn, &parts, 1, &OnceLock::new(), true)
            .await
            .ok();
        Err(Error::Shutdown)
    }

    /// Whether the hold is known or presumed lost.
    pub(crate) fn is_lost(&self) -> bool {
        self.signal.is_lost()
    }

    /// Completes when the hold is lost.
    pub(crate) async fn lost(&self) {
        self.signal.lost().await
    }

    /// Since when the hold is lost (see `Signal::lost_since`).
    pub(crate) fn lost_since(&self) -> Option<Instant> {
        self.signal.lost_since()
    }

    /// The signal this hold reports loss through (shared with the other
    /// holds of its lease's incarnation).
    pub(crate) fn signal(&self) -> Arc<Signal> {
        self.signal.clone()
    }

    /// The key of the lock this hold is on.
    pub(crate) fn key(&self) -> fred::types::Key {
        self.lease_record().key()
    }

    /// The owner whose hold this is.
    pub(crate) fn owner(&self) -> u64 {
        self.lease_record().owner
    }

    /// The key of the lock this hold is on, as text.
    pub(crate) fn key_str(&self) -> &str {
        self.lease_record().key_str()
    }

    fn lease_record(&self) -> &LeaseRef {
        &self
            .parts
            .as_ref()
            .unwrap_or_else(|| unreachable!("a live hold has its parts"))
            .lease
    }

    /// The fencing token its acquire took, if the kind hands them out.
    pub(crate) fn token(&self) -> Option<u64> {
        self.token
    }

    /// Raises the key's TTL to at least `ttl` from now for this fixed
    /// hold (never lowers it), as a renewal does: the kind's renewal
    /// script for this one lease, sent under the lease's turn. The hold's
    /// deadline is raised first (so a release from here on keeps the key
    /// for it); its signal's `until` rises to send time + `ttl` once Redis
    /// confirms. `Ok(false)`: the hold is lost (and, if the field was
    /// found gone, its incarnation ended); nothing was extended.
    ///
    /// A watchdog hold is refused with `InvalidArgument` (the watchdog
    /// keeps it).
    ///
    /// Cancel safe: dropped before the reply, the deadline stays raised
    /// (a release may keep the key that long), the key may or may not have
    /// been extended, and `until` is unchanged.
    pub(crate) async fn extend(&mut self, ttl: Duration) -> Result<bool> {
        self.engine.check()?;
        let ttl_ms = super::lease_millis(ttl)?;
        let parts = self
            .parts
            .as_mut()
            .unwrap_or_else(|| unreachable!("a live hold has its parts"));
        let Term::Fixed(deadline) = parts.term else {
            return Err(Error::invalid(
                "this hold's lease is renewed by the watchdog: extend applies to fixed leases",
            ));
        };
        if self.signal.is_lost() {
            return Ok(false);
        }
        let lease = parts.lease.clone_ref();
        let _turn = lease.turn().await;
        if !lease.is_current(parts.incarnation) || self.signal.is_lost() {
            return Ok(false);
        }
        let raised = deadline.max(Instant::now() + ttl);
        lease.move_deadline(deadline, raised);
        parts.term = Term::Fixed(raised);

        Ok(renew_one(&lease, ttl_ms).await? && !self.signal.is_lost())
    }

    /// Gives the hold back and reports whether it was still held.
    ///
    /// Cancel safe: dropped before the release is sent, it is sent in the
    /// background; dropped while under way, a background job settles it.
    /// (Nothing runs until the future is polled; dropped unpolled, the
    /// hold's drop gives it back.)
    pub(crate) fn release(self) -> impl Future<Output = Result<bool>> + Send + 'static {
        let span = match &self.parts {
            Some(parts) => release_span(&parts.lease, 1),
            None => Span::none(),
        };
        // Boxed: the release (turn, call, settle guard) is several KiB,
        // and every caller's future (a task that waits, then unlocks)
        // would otherwise carry it inline while it waits. A plain `fn`,
        // not an `async fn`: that would keep the hold twice, and the span
        // twice, in every caller's future.
        boxed_in_place(|| self.release_in(span.clone())).instrument(span)
    }

    /// [`release`](Self::release), recording its outcome in `span`.
    async fn release_in(self, span: Span) -> Result<bool> {
        // Kept open until the release is written (the guard's hold goes
        // with `into_parts`).
        let open = self.engine.clone();
        let engine = open.engine();
        let mut unsent = Unsent {
            engine: engine.clone(),
            parts: Some(self.into_parts()),
        };
        if let Err(e) = engine.check() {
            // Outside a runtime, or the client's runtime is gone: the drop
            // path gives the hold back.
            drop(unsent);
            return Err(e);
        }
        let turn = unsent.lease().turn().await;
        let parts = unsent.take();
        if !parts.lease.is_current(parts.incarnation) {
            record_release(&span, Ok(ReleaseReply::NotHeld));
            return Ok(false);
        }
        let rid = parts.lease.conn.rid();
        let ttl_ms = parts.lease.requirement_ms(parts.term);
        // The last live hold gives back whatever else is still counted:
        // holds whose release's outcome stayed unknown (`release_count`).
        let count = parts.lease.release_count();
        let call = parts
            .lease
            .kind
            .release(&parts.lease, count, ttl_ms)
            .for_lease(&parts.lease, rid);
        let sent = Instant::now();
        parts.lease.begin_call();
        let ttl = Duration::from_millis(ttl_ms as u64);
        let mut flight = InFlight::new(
            engine,
            &parts.lease,
            call,
            SettleKind::Release { sent, ttl, count },
            turn,
        );
        let outcome = flight.call().run(&engine.conn, sent).await;
        match outcome {
            Ok(Settled::Ran(reply)) => {
                flight.call().forget_request_record(&engine.conn);
                // The turn is kept until the reply is recorded: the next
                // acquire or release of the owner must see it.
                let _turn = flight.finish();
                let reply = parts.lease.apply_release(&reply, count, sent, ttl);
                record_release(&span, Ok(reply));
                Ok(reply != ReleaseReply::NotHeld)
            }
            Ok(Settled::Stale) => {
                flight.finish();
                record_release(&span, Err(()));
                Err(Error::protocol("a fresh release was reported stale"))
            }
            // A background job keeps resolving it.
            Err(e) => {
                record_release(&span, Err(()));
                Err(Error::Redis(e))
            }
        }
    }

    /// Takes the hold out of the guard (so its drop does nothing); the hold
    /// needs the key no more.
    fn into_parts(mut self) -> HoldParts {
        let parts = self
            .parts
            .take()
            .unwrap_or_else(|| unreachable!("taken once"));
        parts.lease.retire(parts.term);
        parts
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let Some(parts) = self.parts.take() else {
            return;
        };
        parts.lease.retire(parts.term);
        if self.engine.is_shut_down() {
            return; // shutdown gives every counted hold back
        }
        self.engine.background.spawn(DroppedRelease {
            hold: parts,
            rid: OnceLock::new(),
            count: OnceLock::new(),
        });
    }
}

/// Gives back `count` holds of `parts` on `conn` (the caller has the turn,
/// or there is none to take) and applies the outcome to the lease.
/// `forget`: the caller is done once this call is (not a job that may be
/// run again from the start after it): its request record may go.
async fn give_back(
    conn: &Conn,
    parts: &HoldParts,
    count: u32,
    rid: &OnceLock<u64>,
    forget: bool,
) -> Result<ReleaseReply> {
    let lease = &parts.lease;
    if !lease.is_current(parts.incarnation) {
        return Ok(ReleaseReply::NotHeld);
    }
    let span = release_span(lease, count);
    let result = send_give_back(conn, lease, parts.term, count, rid, forget)
        .instrument(span.clone())
        .await;
    record_release(&span, result.as_ref().copied().map_err(|_| ()));
    result
}

/// The call of [`give_back`].
async fn send_give_back(
    conn: &Conn,
    lease: &LeaseRef,
    term: Term,
    count: u32,
    rid: &OnceLock<u64>,
    forget: bool,
) -> Result<ReleaseReply> {
    let rid = *rid.get_or_init(|| conn.rid());
    let ttl_ms = lease.requirement_ms(term);
    let call = lease
        .kind
        .release(lease, count, ttl_ms)
        .for_lease(lease, rid);
    let sent = Instant::now();
    lease.begin_call();
    match call.run(conn, sent).await {
        Ok(Settled::Ran(reply)) => {
            if forget {
                call.forget_request_record(conn);
            }
            let ttl = Duration::from_millis(ttl_ms as u64);
            Ok(lease.apply_release(&reply, count, sent, ttl))
        }
        Ok(Settled::Stale) => Ok(ReleaseReply::NotHeld),
        Err(e) => {
            tracing::warn!(key = %lease.key_str(), error = %e, "could not give a hold back; it will expire with its lease");
            Err(Error::Redis(e))
        }
    }
}

/// Shutdown: gives back every hold `engine` counts, one call per lease.
pub(crate) async fn drain(engine: &Arc<Engine>) -> Result<()> {
    let mut first_error = None;
    let mut releases = tokio::task::JoinSet::new();
    for lease in engine.leases.held() {
        let conn = engine.conn.clone();
        releases.spawn(async move {
            let _turn = lease.turn().await;
            let (count, incarnation) = lease.drain();
            if count == 0 {
                return Ok(());
            }
            let parts = HoldParts {
                lease,
                incarnation,
                term: Term::Fixed(Instant::now()),
            };
            give_back(&conn, &parts, count, &OnceLock::new(), true)
                .await
                .map(|_| ())
        });
    }
    while let Some(done) = releases.join_next().await {
        if let Ok(Err(e)) = done {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

// === impl InFlight ===

impl InFlight {
    fn new(
        engine: &Arc<Engine>,
        lease: &LeaseRef,
        call: Call,
        kind: SettleKind,
        turn: Turn,
    ) -> InFlight {
        InFlight {
            engine: engine.clone(),
            job: Some(Settle {
                lease: lease.clone_ref(),
                call,
                kind,
                turn: parking_lot::Mutex::new(Some(turn)),
                give_back: OnceLock::new(),
            }),
        }
    }

    fn call(&self) -> &Call {
        &self
            .job
            .as_ref()
            .unwrap_or_else(|| unreachable!("finished once"))
            .call
    }

    /// The call has a definite outcome: nothing to settle. Returns its turn.
    fn finish(&mut self) -> Turn {
        let job = self
            .job
            .take()
            .unwrap_or_else(|| unreachable!("finished once"));
        let turn = job.turn.lock().take();
        turn.unwrap_or_else(|| unreachable!("an in-flight call has its turn"))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(job) = self.job.take() {
            self.engine.background.spawn(job);
        }
    }
}

// === impl Unsent ===

impl Unsent {
    fn lease(&self) -> &LeaseRef {
        &self
            .parts
            .as_ref()
            .unwrap_or_else(|| unreachable!("taken once"))
            .lease
    }

    /// The release is being sent: the caller owns the hold from here.
    fn take(&mut self) -> HoldParts {
        self.parts
            .take()
            .unwrap_or_else(|| unreachable!("taken once"))
    }
}

impl Drop for Unsent {
    fn drop(&mut self) {
        let Some(parts) = self.parts.take() else {
            return;
        };
        // After shutdown there is nothing to give back (shutdown did).
        if !self.engine.is_shut_down() {
            self.engine.background.spawn(DroppedRelease {
                hold: parts,
                rid: OnceLock::new(),
                count: OnceLock::new(),
            });
        }
    }
}

// === jobs ===

impl Job for Settle {
    fn run<'a>(&'a self, conn: &'a Arc<Conn>, _fallback: bool) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let outcome = self.call.run(conn, self.kind.sent()).await;
            let lease = &self.lease;
            // Whether every call of the job has a definite outcome: only
            // then may its record go (run again from the start, the job
            // re-sends them all, so not before it is done).
            let settled = match (outcome, self.kind) {
                (Ok(Settled::Ran(reply)), SettleKind::Acquire { sent, ttl, began }) => {
                    match lease.kind.acquire_reply(&reply) {
                        AcquireReply::Held { count, .. } => {
                            // It ran for a caller that has gone: count the
                            // hold as a guard would, and give it back at
                            // once. Its answer comes late: it ends no other
                            // owner's hold.
                            let term = Term::Fixed(Instant::now());
                            let taken = Taken {
                                began,
                                fresh: false,
                            };
                            let (_, incarnation) = lease.acquired_by(count, term, sent, ttl, taken);
                            lease.retire(term);
                            let parts = HoldParts {
                                lease: lease.clone_ref(),
                                incarnation,
                                term,
                            };
                            give_back(conn, &parts, 1, &self.give_back, false)
                                .await
                                .is_ok()
                        }
                        AcquireReply::Busy(_) => true,
                    }
                }
                (Ok(Settled::Ran(reply)), SettleKind::Release { sent, ttl, count }) => {
                    lease.apply_release(&reply, count, sent, ttl);
                    true
                }
                (Ok(Settled::Stale), _) => true,
                (Err(e), _) => {
                    tracing::warn!(key = %lease.key_str(), error = %e, "could not settle an abandoned call; a hold it took will expire with its lease");
                    false
                }
            };
            if settled {
                // The newest request this job sent holds the record.
                let newest = self.give_back.get().copied().unwrap_or(self.call.rid());
                conn.forget_request_record(lease.request_record(), newest);
            }
            drop(self.turn.lock().take());
        })
    }

    fn order(&self) -> u64 {
        self.call.rid()
    }
}

impl Job for DroppedRelease {
    fn run<'a>(&'a self, conn: &'a Arc<Conn>, fallback: bool) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let lease = &self.hold.lease;
            let _turn = if fallback {
                lease.try_turn()
            } else {
                Some(lease.turn().await)
            };
            let count = *self.count.get_or_init(|| lease.release_count());
            let _ = give_back(conn, &self.hold, count, &self.rid, true).await;
        })
    }

    fn order(&self) -> u64 {
        self.rid.get().copied().unwrap_or(u64::MAX)
    }
}

/// The span of one release call.
fn release_span(lease: &Lease, holds: u32) -> Span {
    tracing::debug_span!(
        "release",
        lock = %KeyName(lease.key_bytes()),
        owner = lease.owner,
        holds,
        outcome = tracing::field::Empty,
    )
}

/// Records a release's outcome in its span (`Err`: no definite outcome).
fn record_release(span: &Span, outcome: std::result::Result<ReleaseReply, ()>) {
    let outcome = match outcome {
        Ok(ReleaseReply::Freed) => "freed",
        Ok(ReleaseReply::Remaining) => "remaining",
        Ok(ReleaseReply::NotHeld | ReleaseReply::Gone) => "not_held",
        Err(()) => "error",
    };
    span.record("outcome", outcome);
}

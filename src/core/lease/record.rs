//! A lease record ([`Lease`]): the client's view of one (key, field) in
//! Redis (or, for a semaphore, one permit): how many holds Redis counts
//! for it, which live holds need the key and until when ([`Term`]), the
//! signal its guards watch, and whether the watchdog renews it.
//!
//! # State, and who changes it
//!
//! A record's names, kind, connection and owner never change. What it
//! knows of Redis is its `State`, under one lock, changed under the
//! lease's turn (acquires and releases, see `lease_ref.rs`), except: the
//! live holds' requirements (a guard retires its hold at any time); the
//! watchdog's verdicts, which check the incarnation they were sent in
//! (`sent.rs`); and the end of an incarnation, from whoever learns the
//! field is gone or declares it lost (`release.rs`). `users` counts the record's [`LeaseRef`](super::LeaseRef)s,
//! `waits` its owner's waits for the key, and `flags` whether it is
//! registered with the watchdog (under the state's lock) and parked in
//! the table's ring (`table.rs`).
//!
//! # Guarantees
//!
//! * **Requirements.** Each live hold needs the key until its [`Term`]:
//!   renewed by the watchdog, or a fixed deadline. An acquire counts its
//!   hold and raises the signal; a retired hold needs the key no more;
//!   [`Lease::requirement_ms`] is the TTL the live holds left need, which a
//!   release sets.
//! * **Renewed until the release lands.** The watchdog renews the lease
//!   while a watchdog hold lives (or a fixed one, for a kind that renews
//!   fixed holds), and after such a hold's guard is gone until its release
//!   has an outcome ([`Lease::release_done`]): a slow release never finds
//!   the key expired under a hold that was never lost. Whoever flips the
//!   `REGISTERED` flag (under the state's lock) registers or deregisters
//!   the lease, so each happens once for each time it is needed.
//! * **A fresh field is a new incarnation.** An acquire that finds count 1
//!   ends whatever holds were counted before; a re-entry whose
//!   incarnation ended while it was on its way ran on a field found gone
//!   since, and is lost from the start ([`Lease::acquired`]).

use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::bytes_utils::Str;
use fred::types::Key;
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::core::conn::Conn;
use crate::core::kind::Kind;
use crate::core::names::LeaseNames;
use crate::core::signal::Signal;
use crate::core::stats::Counters;
use crate::core::watchdog::Watchdog;

/// How long one hold needs the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Term {
    /// As long as its guard lives: renewed by the watchdog.
    Watchdog,
    /// Until this deadline: never renewed past it (the watchdog raises
    /// the key's TTL back to it only for a kind that
    /// [renews fixed holds](Kind::renews_fixed)).
    Fixed(Instant),
}

/// One (key, field) the client may hold.
#[derive(Debug)]
pub(crate) struct Lease {
    pub(crate) kind: &'static dyn Kind,
    pub(crate) conn: Arc<Conn>,
    /// The key, the field, the request record of this (key, field) (see `call.rs`)
    /// and the channel the release script publishes on, in one buffer.
    pub(super) names: LeaseNames,
    pub(crate) owner: u64,
    /// Live [`LeaseRef`](super::LeaseRef)s: the record's users. The table drops an idle
    /// record when its last user goes; other references (the watchdog's
    /// registry and the batches it has in flight) do not keep it there.
    /// Goes from 0 to 1 only under the table's lock on the key.
    pub(super) users: AtomicU32,
    /// [`REGISTERED`] and [`PARKED`] (one byte, where the record has room).
    pub(super) flags: AtomicU8,
    /// Waits of this owner for the key in progress (see
    /// [`Lease::wait_began`]): a primitive that keeps one place per owner
    /// in a queue leaves it only when the owner's last wait ends. 16 bits
    /// fit in the record's padding; the count saturates (65,535 waits of
    /// one owner for one key at once).
    waits: AtomicU16,
    pub(crate) watchdog: Watchdog,
    /// The client's counters (renewals and losses are counted per lease).
    pub(crate) stats: Arc<Counters>,
    /// One permit: the turn (see [`LeaseRef::turn`](super::LeaseRef::turn)). Inline, not a
    /// separately allocated mutex: a held lock costs one allocation less.
    pub(super) turn: tokio::sync::Semaphore,
    /// Changed only under the turn, except the requirement counts (by
    /// guards, any time) and the watchdog's verdicts (applied only to the incarnation they were
    /// sent for: `sent.rs`).
    pub(super) state: Mutex<State>,
}

#[derive(Debug)]
pub(super) struct State {
    pub(super) signal: Arc<Signal>,
    pub(super) incarnation: u64,
    /// Holds Redis counts for the field, as far as we know: live guards,
    /// releases not yet done, holds whose release failed.
    pub(super) holds: u32,
    /// Live guards with a watchdog term.
    pub(super) watched: u32,
    /// Deadlines of live guards with a fixed term.
    pub(super) fixed: Deadlines,
    /// Bumped by every acquire and release sent.
    pub(super) gen: u64,
    /// Retired holds whose release is still to land: their parts live
    /// (`retire` counts one, `release_done` takes it away).
    pub(super) pending: u32,
}

impl State {
    /// Whether a live guard holds the lease (not only releases under way).
    pub(super) fn has_live_holds(&self) -> bool {
        self.watched > 0 || !self.fixed.is_empty()
    }
}

/// Deadlines of fixed-term holds: a boxed slice (two words, nothing
/// allocated while empty), not a `Vec` (three words in every record, for
/// a list most leases never use and the rest keep short).
#[derive(Debug, Default)]
pub(super) struct Deadlines(Box<[Instant]>);

impl Deadlines {
    fn push(&mut self, deadline: Instant) {
        let mut all = std::mem::take(&mut self.0).into_vec();
        all.push(deadline);
        self.0 = all.into_boxed_slice();
    }

    /// Removes one `deadline`, if present.
    fn remove(&mut self, deadline: Instant) {
        if let Some(i) = self.0.iter().position(|d| *d == deadline) {
            let mut all = std::mem::take(&mut self.0).into_vec();
            all.swap_remove(i);
            self.0 = all.into_boxed_slice();
        }
    }

    /// Moves one deadline `from` to `to`, if present.
    fn replace(&mut self, from: Instant, to: Instant) {
        if let Some(d) = self.0.iter_mut().find(|d| **d == from) {
            *d = to;
        }
    }

    pub(super) fn clear(&mut self) {
        self.0 = Box::default();
    }

    /// The latest deadline, if any.
    pub(super) fn latest(&self) -> Option<Instant> {
        self.0.iter().max().copied()
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Flag: registered with the watchdog (`watched > 0`, or the release of
/// the last watchdog hold not landed yet; and not lost). Read and written
/// only under `state`'s lock, like the state.
const REGISTERED: u8 = 1;
/// Flag: in the table's ring of idle records (see [`Leases::park`](super::Leases::park)). Set
/// by the last user going, cleared when the ring lets the record go.
pub(super) const PARKED: u8 = 2;

// === impl Lease ===

impl Lease {
    /// A record of no hold yet, its signal lost (made by the table, see
    /// `table.rs`).
    pub(super) fn new(
        kind: &'static dyn Kind,
        conn: Arc<Conn>,
        names: LeaseNames,
        owner: u64,
        watchdog: Watchdog,
        stats: Arc<Counters>,
    ) -> Lease {
        Lease {
            kind,
            conn,
            names,
            owner,
            users: AtomicU32::new(0),
            flags: AtomicU8::new(0),
            waits: AtomicU16::new(0),
            watchdog,
            stats,
            turn: tokio::sync::Semaphore::const_new(1),
            state: Mutex::new(State {
                signal: Signal::new(Instant::now()),
                incarnation: 0,
                holds: 0,
                watched: 0,
                fixed: Deadlines::default(),
                gen: 0,
                pending: 0,
            }),
        }
    }

    /// The lock key, to send.
    pub(crate) fn key(&self) -> Key {
        self.names.key()
    }

    /// The lock key's bytes.
    pub(crate) fn key_bytes(&self) -> &[u8] {
        self.names.key_bytes()
    }

    /// The lock key as text.
    pub(crate) fn key_str(&self) -> &str {
        self.names.key_str()
    }

    /// The hash field, to send.
    pub(crate) fn field(&self) -> Str {
        self.names.field()
    }

    /// The hash field's bytes.
    pub(crate) fn field_bytes(&self) -> &[u8] {
        self.names.field_bytes()
    }

    /// The request record of this (key, field) (see `call.rs`), to send.
    pub(crate) fn request_record(&self) -> Key {
        self.names.request_record()
    }

    /// The channel the release script publishes on, to send.
    pub(crate) fn channel(&self) -> Key {
        self.names.channel()
    }

    /// Marks an acquire or release as sent: renewal replies in flight are
    /// now out of date. Returns the incarnation it belongs to.
    pub(crate) fn begin_call(&self) -> u64 {
        let mut s = self.state.lock();
        s.gen += 1;
        s.incarnation
    }

    /// Counts a hold an acquire (sent at `sent`, raising the TTL to at
    /// least `ttl`) just took; the field's count is now `count`. Returns
    /// the hold's signal and incarnation.
    ///
    /// `began`: the incarnation when the acquire was sent. A re-entry
    /// (`count > 1`) whose incarnation ended while it was on its way ran
    /// on a field that was found gone since: the field existed when the
    /// re-entry ran (its count went up), so it is the later event, and the
    /// new hold is lost from the start. (Only this owner creates its
    /// field, and its acquires run one at a time: nothing of ours could
    /// have re-created the field in between.)
    pub(super) fn acquired(
        self: &Arc<Self>,
        count: u32,
        term: Term,
        sent: Instant,
        ttl: Duration,
        began: u64,
    ) -> (Arc<Signal>, u64) {
        let register = {
            let mut s = self.state.lock();
            if count > 1 && s.incarnation != began {
                Signal::renew_in(&mut s.signal, sent + ttl);
                s.signal.mark_lost();
            } else if count == 1 || s.signal.is_lost() {
                // A fresh field (count 1: whatever we counted was gone), or
                // trust lost: a new signal for the holds from here on.
                if count == 1 && s.holds > 0 {
                    tracing::debug!(key = %self.key_str(), stale = s.holds, "holds of an ended incarnation");
                    s.signal.mark_lost();
                    s.incarnation += 1;
                    s.holds = 0;
                }
                Signal::renew_in(&mut s.signal, sent + ttl);
            } else {
                s.signal.extend(sent + ttl);
            }
            s.holds += 1;
            match term {
                Term::Watchdog => s.watched += 1,
                Term::Fixed(deadline) => s.fixed.push(deadline),
            }
            let register = self.renewed_now(&s) && !self.is_registered();
            if register {
                self.flags.fetch_or(REGISTERED, Ordering::Relaxed);
            }
            register
        };
        if register {
            self.watchdog.register(self.clone());
        }
        let s = self.state.lock();
        (s.signal.clone(), s.incarnation)
    }

    /// A hold's guard is gone (unlock or drop): it needs the key no more.
    /// The watchdog keeps renewing the lease until the hold's release has
    /// landed ([`release_done`](Self::release_done)): a release that takes
    /// longer than what is left of the lease (a busy client, a slot on the
    /// move) must not find the key expired under a hold that was never
    /// lost. Redisson likewise stops renewing only once the unlock is done.
    pub(crate) fn retire(&self, term: Term) {
        let mut s = self.state.lock();
        s.pending = s.pending.saturating_add(1);
        match term {
            Term::Watchdog => s.watched = s.watched.saturating_sub(1),
            Term::Fixed(deadline) => {
                s.fixed.remove(deadline);
            }
        }
    }

    /// A retired hold's release has an outcome, or will not be sent (its
    /// parts are dropped): stops the watchdog renewing the lease if no
    /// watchdog hold is left.
    pub(crate) fn release_done(&self) {
        let deregister = {
            let mut s = self.state.lock();
            s.pending = s.pending.saturating_sub(1);
            let deregister = !self.renewed_now(&s) && self.is_registered();
            if deregister {
                self.unregister();
            }
            deregister
        };
        if deregister {
            self.watchdog.deregister(self);
        }
    }

    /// A fixed hold's deadline moves from `from` to `to` (an extend, under
    /// the turn): releases from here on keep the key until `to`.
    pub(crate) fn move_deadline(&self, from: Instant, to: Instant) {
        let mut s = self.state.lock();
        s.fixed.replace(from, to);
    }

    /// A wait of this owner for the key began; [`Lease::wait_ended`] must
    /// follow once it ends, however it ends.
    pub(crate) fn wait_began(&self) {
        let _ = self
            .waits
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1));
    }

    /// A wait that [`Lease::wait_began`] counted ended.
    pub(crate) fn wait_ended(&self) {
        let _ = self
            .waits
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// Waits of this owner for the key in progress now (two overlap when
    /// tasks share an owner, or a wait is retried while the dropped one
    /// still leaves in the background).
    pub(crate) fn waits(&self) -> u16 {
        self.waits.load(Ordering::Relaxed)
    }

    /// Whether the watchdog must renew the lease for the live holds of
    /// `s`: a watchdog hold lives, or a fixed one of a kind that
    /// [renews fixed holds](Kind::renews_fixed).
    fn renewed_now(&self, s: &State) -> bool {
        s.watched > 0 || (!s.fixed.is_empty() && self.kind.renews_fixed())
    }

    /// Whether the lease is registered with the watchdog (read under
    /// `state`'s lock).
    fn is_registered(&self) -> bool {
        self.flags.load(Ordering::Relaxed) & REGISTERED != 0
    }

    /// Clears the registered flag (under `state`'s lock); whether it was
    /// set (then the caller deregisters the lease from the watchdog).
    pub(super) fn unregister(&self) -> bool {
        self.flags.fetch_and(!REGISTERED, Ordering::Relaxed) & REGISTERED != 0
    }

    /// Whether the record is in its table's ring of idle records.
    pub(super) fn is_parked(&self) -> bool {
        self.flags.load(Ordering::Acquire) & PARKED != 0
    }

    /// Parked, and nothing uses or holds it (what `records_in_use` leaves
    /// out).
    pub(super) fn is_idle_parked(&self) -> bool {
        self.users.load(Ordering::Acquire) == 0 && self.is_parked() && self.state.lock().holds == 0
    }

    /// Whether the record may be parked now: its holds were all given back
    /// (nothing is counted in Redis) after it held (a waiter's record that
    /// never held goes at once, as before: parked waiters keep none).
    pub(super) fn settled_after_holding(&self) -> bool {
        let s = self.state.lock();
        s.holds == 0 && s.incarnation > 0
    }

    /// Live guards of this lease (their holds need the key; a guard
    /// unlocked or dropped no longer counts, even while its release is on
    /// its way).
    pub(crate) fn live_holds(&self) -> u32 {
        let s = self.state.lock();
        s.watched + s.fixed.len() as u32
    }

    /// How many holds a release of one retired hold gives back, under the
    /// turn: 1 while a live guard or another release remains; once none
    /// does, every hold still counted. A hold whose release's outcome stayed unknown (the
    /// call and its settle gave up) is still counted, and may still be in
    /// Redis: the owner's last release gives it back with its own, so the
    /// field never keeps a hold nobody has. If that
    /// release had run after all, the field holds fewer than counted and
    /// the release script frees what is there.
    pub(crate) fn release_count(&self) -> u32 {
        let s = self.state.lock();
        // Only the caller's own release is still to land, and no guard
        // lives: whatever else is counted is a hold whose release's
        // outcome stayed unknown. (Another release queued for the turn
        // gives back its own hold; giving it back here would leave it
        // "not held".)
        if s.has_live_holds() || s.pending > 1 {
            1
        } else {
            s.holds.max(1)
        }
    }

    /// Holds Redis counts for the field as far as this record knows (live
    /// guards and releases not yet done), in the current incarnation.
    pub(crate) fn holds(&self) -> u32 {
        self.state.lock().holds
    }

    /// Whether a call of this record is under way (its turn is taken): an
    /// acquire whose hold is in Redis before it is counted here (the call
    /// may even be a background job's, its caller gone), or a release.
    pub(crate) fn in_call(&self) -> bool {
        self.turn.available_permits() == 0
    }

    /// The current incarnation (see [`is_current`](Self::is_current)).
    pub(crate) fn incarnation(&self) -> u64 {
        self.state.lock().incarnation
    }

    /// Whether holds of `incarnation` can still be in Redis.
    pub(crate) fn is_current(&self, incarnation: u64) -> bool {
        self.state.lock().incarnation == incarnation
    }

    /// The TTL the key must keep while the remaining live holds need it,
    /// in ms; `fallback` when no live hold is left (the holds still counted
    /// are releases under way).
    pub(crate) fn requirement_ms(&self, fallback: Term) -> i64 {
        // Read only if a fixed deadline needs it (a clock read costs more
        // than the rest of this on a VM's clock source).
        let mut now = None;
        let mut now = || *now.get_or_insert_with(Instant::now);
        let s = self.state.lock();
        let mut need: Option<Duration> = None;
        if s.watched > 0 {
            need = Some(self.watchdog.timeout());
        }
        if let Some(latest) = s.fixed.latest() {
            let left = latest.saturating_duration_since(now());
            need = Some(need.map_or(left, |n| n.max(left)));
        }
        let need = need.unwrap_or_else(|| match fallback {
            Term::Watchdog => self.watchdog.timeout(),
            Term::Fixed(deadline) => deadline.saturating_duration_since(now()),
        });
        (need.as_millis().clamp(1, i64::MAX as u128)) as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::lease::tests::held_lease;
    use crate::core::lease::Taken;

    /// A re-entry that ran before its field was found gone (its reply
    /// comes after the verdict) is lost from the start.
    #[tokio::test]
    async fn a_re_entry_overtaken_by_a_gone_verdict_is_lost() {
        let (_table, lease, start, first) = held_lease();
        let renewal = lease.lease().snapshot();
        let began = lease.begin_call();
        renewal.gone();
        assert!(first.is_lost());
        let taken = Taken { began, fresh: true };
        let (second, _) =
            lease.acquired_by(2, Term::Watchdog, start, Duration::from_secs(30), taken);
        assert!(second.is_lost(), "a hold on a field found gone reads held");
        lease.lease().watchdog.deregister(lease.lease());
    }
}

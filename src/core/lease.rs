//! Leases: what the client holds, one record per (lock key, owner field).
//!
//! A [`Lease`] is the client's view of one hash field in Redis (or, for a
//! semaphore, one permit): how many holds Redis counts for it, which live
//! guards need it and until when, and the signal those guards watch.
//!
//! # The invariant
//!
//! While a guard's [`Signal`] is not lost, the field it holds exists in
//! Redis. Four things keep it:
//!
//! * **Requirements.** Each live hold needs the key until a deadline: a
//!   fixed lease's end, or "renewed by the watchdog". Acquires and renewals
//!   only ever *raise* the key's TTL; a release sets it to the longest
//!   requirement of the holds that remain. So the key never expires before
//!   the longest live hold, whatever mix of leases the owner took.
//! * **`until`.** The signal's deadline is a lower bound of the key's expiry:
//!   raised by an acquire or renewal to its *send* time plus the TTL it set,
//!   cut by a release to what it set. A guard whose `until` passed reports
//!   lost by itself, even if no task is left to tell it.
//! * **Incarnations.** When the field is found gone (an acquire recreates it
//!   with count 1, a release or renewal finds it missing), the incarnation
//!   ends: its signal is marked lost and its holds are no longer counted.
//!   A guard of an older incarnation gives back nothing, so it can never
//!   free a newer hold of the same owner.
//! * **Turns and generations.** Acquires and releases of one lease run one
//!   at a time (the *turn*), from sending the script to updating this record,
//!   so the record follows Redis step by step. Each one bumps `gen`; a
//!   renewal reply is applied only if `gen` did not move while it was on its
//!   way (a newer acquire or release knows better).
//!
//! # Lifetime
//!
//! Records live in the client's [`Leases`] table while anything refers to
//! them ([`LeaseRef`]: guards, waiters, calls in flight, background jobs) or
//! Redis may still count holds for them.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use dashmap::DashMap;
use fred::bytes_utils::Str;
use fred::types::Key;
use parking_lot::Mutex;
use smallvec::SmallVec;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::call::{Call, Reply};
use super::conn::Conn;
use super::stats::{Counters, KeyName};
use super::watchdog::{Renewal, Watchdog};

/// What a primitive tells the engine about its leases: how to give a hold
/// back, how to read its scripts' replies, how the watchdog renews them.
pub(crate) trait Kind: std::fmt::Debug + Send + Sync + 'static {
    /// The call giving back `count` holds of `lease`; `ttl_ms` is the TTL
    /// the key keeps if holds remain.
    fn release_call(&self, lease: &Lease, count: u32, ttl_ms: i64, rid: u64) -> Call;
    /// Reads an acquire script's reply (without the request id).
    fn acquire_reply(&self, reply: &[i64]) -> AcquireReply;
    /// Reads a release script's reply (without the request id).
    fn release_reply(&self, reply: &[i64]) -> ReleaseReply;
    /// Called with every release reply of `lease` once it is applied, for
    /// follow-up work the kind starts itself (e.g. a task that checks later
    /// that the waiter its release told took over, or handing a waiter of
    /// this process what the release granted it). Runs before the caller's
    /// unlock returns, so it must not block; the default does nothing.
    fn after_release(&self, _lease: &Lease, _reply: &Reply) {}
    /// How the watchdog renews (or checks) this kind's leases.
    fn renewal(&self) -> &'static Renewal;
    /// Whether holding `mine` proves that `other` (another owner's lease on
    /// the same key, of any kind) cannot be held: then a successful acquire
    /// of `mine` ends `other`'s incarnation at once.
    fn excludes(&self, mine: &Lease, other: &Lease) -> bool;
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
}

/// How long one hold needs the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Term {
    /// As long as its guard lives: renewed by the watchdog.
    Watchdog,
    /// Until this deadline; never renewed.
    Fixed(Instant),
}

/// The lost signal of a lease's holds, shared with their guards.
#[derive(Debug)]
pub(crate) struct Signal {
    /// Set once: by the watchdog, a failed check, a newer incarnation, or
    /// shutdown.
    lost: AtomicBool,
    /// When `lost` was set.
    lost_at: Mutex<Option<Instant>>,
    /// Lower bound of the key's expiry in Redis (see the module docs).
    until: Mutex<Instant>,
    notify: Notify,
}

/// One (key, field) the client may hold.
#[derive(Debug)]
pub(crate) struct Lease {
    pub(crate) kind: &'static dyn Kind,
    pub(crate) conn: Arc<Conn>,
    pub(crate) key: Key,
    pub(crate) field: Str,
    /// The latch of this (key, field): see `call.rs`.
    pub(crate) latch: Key,
    /// The channel the release script publishes on.
    pub(crate) channel: Key,
    pub(crate) owner: u64,
    pub(crate) tag: u8,
    /// Live [`LeaseRef`]s: the record's users. The table drops an idle
    /// record when its last user goes; other references (the watchdog's
    /// registry and the batches it has in flight) do not keep it there.
    /// Goes from 0 to 1 only under the table's lock on the key.
    users: AtomicU32,
    pub(crate) watchdog: Watchdog,
    /// The client's counters (renewals and losses are counted per lease).
    pub(crate) stats: Arc<Counters>,
    /// One permit: the turn (see [`LeaseRef::turn`]). Inline, not a
    /// separately allocated mutex: a held lock costs one allocation less.
    turn: tokio::sync::Semaphore,
    /// Changed only under the turn, except the requirement counts (by
    /// guards, any time) and the watchdog's gen-checked updates.
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    signal: Arc<Signal>,
    incarnation: u64,
    /// Holds Redis counts for the field, as far as we know: live guards,
    /// releases not yet done, holds whose release failed.
    holds: u32,
    /// Live guards with a watchdog term.
    watched: u32,
    /// Deadlines of live guards with a fixed term.
    fixed: Vec<Instant>,
    /// Bumped by every acquire and release sent.
    gen: u64,
    /// Registered with the watchdog (`watched > 0`, or the release of the
    /// last watchdog hold not landed yet; and not lost).
    registered: bool,
}

impl State {
    /// Whether a live guard holds the lease (not only releases under way).
    fn has_live_holds(&self) -> bool {
        self.watched > 0 || !self.fixed.is_empty()
    }
}

/// Identity of a lease within a client.
#[derive(Debug)]
pub(crate) struct LeaseInit {
    pub(crate) kind: &'static dyn Kind,
    pub(crate) field: Str,
    pub(crate) latch: Key,
    pub(crate) channel: Key,
}

impl LeaseInit {
    /// The lease of `field` on the key named `key`, released on `channel`:
    /// its latch key is derived (see `call.rs`), sharing the field's bytes.
    pub(crate) fn new(kind: &'static dyn Kind, key: &str, field: &str, channel: Key) -> LeaseInit {
        let (latch, field) = super::latch_and_field(key, field);
        LeaseInit {
            kind,
            field,
            latch,
            channel,
        }
    }
}

/// The client's leases, by lock key.
#[derive(Debug, Default)]
pub(crate) struct Leases {
    /// Most keys have one record: kept inline in the map's slot.
    map: DashMap<Key, SmallVec<[Arc<Lease>; 1]>>,
    /// The client's counters, given to every lease.
    pub(crate) stats: Arc<Counters>,
}

/// A counted reference to a lease in a table; the last one (when no hold
/// is left) removes it.
#[derive(Debug)]
pub(crate) struct LeaseRef {
    lease: Option<Arc<Lease>>,
    table: Weak<Leases>,
}

/// A lease's turn, taken (see [`LeaseRef::turn`]); dropping it lets the
/// next acquire or release of the lease go.
///
/// It refers to the lease as any user of it does (a [`LeaseRef`]): a turn
/// that outlives the other references still lets the table drop the idle
/// record.
#[derive(Debug)]
pub(crate) struct Turn {
    lease: LeaseRef,
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.lease.turn.add_permits(1);
    }
}

/// A snapshot for a renewal batch: the lease and its `gen` when sent.
#[derive(Clone, Debug)]
pub(crate) struct Sent {
    pub(crate) lease: Arc<Lease>,
    pub(crate) gen: u64,
    pub(crate) incarnation: u64,
    /// Where the lease's signal was at the snapshot: only a prefetch hint
    /// for [`Sent::prefetch`], never read through.
    signal_at: usize,
}

// === impl Leases ===

impl Leases {
    /// The lease of (`key`, `owner`, `tag`), made with `init` if missing.
    pub(crate) fn get(
        self: &Arc<Self>,
        conn: &Arc<Conn>,
        watchdog: &Watchdog,
        key: &Key,
        owner: u64,
        tag: u8,
        init: &(dyn Fn() -> LeaseInit + Sync),
    ) -> LeaseRef {
        let mut entry = self.map.entry(key.clone()).or_default();
        let lease = match entry.iter().find(|l| l.owner == owner && l.tag == tag) {
            Some(lease) => lease.clone(),
            None => {
                let init = init();
                let lease = Arc::new(Lease {
                    kind: init.kind,
                    conn: conn.clone(),
                    key: key.clone(),
                    field: init.field,
                    latch: init.latch,
                    channel: init.channel,
                    owner,
                    tag,
                    users: AtomicU32::new(0),
                    watchdog: watchdog.clone(),
                    stats: self.stats.clone(),
                    turn: tokio::sync::Semaphore::const_new(1),
                    state: Mutex::new(State {
                        signal: Signal::new(Instant::now()),
                        incarnation: 0,
                        holds: 0,
                        watched: 0,
                        fixed: Vec::new(),
                        gen: 0,
                        registered: false,
                    }),
                });
                entry.push(lease.clone());
                lease
            }
        };
        // Counted under the entry's lock (see `remove_idle`).
        let lease = LeaseRef::new(lease, Arc::downgrade(self));
        drop(entry);
        lease
    }

    /// Every lease in the table (shutdown waits for their calls).
    pub(crate) fn all(self: &Arc<Self>) -> Vec<LeaseRef> {
        let mut out = Vec::new();
        for entry in self.map.iter() {
            for lease in entry.iter() {
                out.push(LeaseRef::new(lease.clone(), Arc::downgrade(self)));
            }
        }
        out
    }

    /// How many records the table keeps.
    pub(crate) fn records(&self) -> usize {
        self.map.iter().map(|entry| entry.len()).sum()
    }

    /// Every lease with holds counted (shutdown, reconnect checks).
    pub(crate) fn held(self: &Arc<Self>) -> Vec<LeaseRef> {
        let mut out = Vec::new();
        for entry in self.map.iter() {
            for lease in entry.iter().filter(|l| l.state.lock().holds > 0) {
                out.push(LeaseRef::new(lease.clone(), Arc::downgrade(self)));
            }
        }
        out
    }

    /// Ends the incarnation of every other lease on `mine`'s key that
    /// `mine` being held proves gone (see [`Kind::excludes`]).
    fn exclude_others(&self, mine: &Lease) {
        let Some(entry) = self.map.get(&mine.key) else {
            return;
        };
        for other in entry.iter() {
            if !std::ptr::eq(Arc::as_ptr(other), mine) && mine.kind.excludes(mine, other) {
                other.field_gone(
                    "another owner of this client acquired the lock: this hold was gone",
                );
            }
        }
    }

    /// The key was deleted (force-unlocked by this client): every lease of
    /// this client on it is gone.
    pub(crate) fn key_gone(&self, key: &Key, why: &str) {
        let leases: Vec<Arc<Lease>> = match self.map.get(key) {
            Some(entry) => entry.to_vec(),
            None => return,
        };
        for lease in leases {
            lease.field_gone(why);
        }
    }

    /// Drops the records of `key` that no [`LeaseRef`] uses and that hold
    /// nothing. Runs under the key's lock, as does every count of a first
    /// user (`get`, `all`, `held`), so a record is never dropped while
    /// being handed out. The watchdog may still refer to a dropped record
    /// for the rest of a cycle: it has no hold, so nothing the cycle does
    /// to it (a verdict, a loss) reaches a guard.
    fn remove_idle(&self, key: &Key) {
        self.map.remove_if_mut(key, |_, leases| {
            leases.retain(|l| l.users.load(Ordering::Acquire) > 0 || l.state.lock().holds > 0);
            // A burst of owners on one key (many tasks trying it at once)
            // leaves no large buffer behind while the key stays held.
            if leases.capacity() > 4 * leases.len().max(1) {
                leases.shrink_to_fit();
            }
            leases.is_empty()
        });
    }
}

// === impl LeaseRef ===

impl LeaseRef {
    pub(crate) fn lease(&self) -> &Arc<Lease> {
        self.lease
            .as_ref()
            .unwrap_or_else(|| unreachable!("taken only by drop"))
    }

    /// Counts a hold an acquire just took and returns its signal and
    /// incarnation (see [`Lease::acquired`]); other leases of this client
    /// that the hold excludes end at once.
    pub(crate) fn acquired(
        &self,
        count: u32,
        term: Term,
        sent: Instant,
        ttl: Duration,
    ) -> (Arc<Signal>, u64) {
        let lease = self.lease();
        let out = lease.acquired(count, term, sent, ttl);
        if let Some(table) = self.table.upgrade() {
            table.exclude_others(lease);
        }
        out
    }

    /// Waits for this lease's turn (one acquire or release at a time).
    ///
    /// Cancel safe: a dropped wait takes no turn.
    pub(crate) async fn turn(&self) -> Turn {
        let lease = self.lease();
        match lease.turn.acquire().await {
            // Kept by the `Turn` (which gives it back), not by a borrow of
            // the lease.
            Ok(permit) => permit.forget(),
            Err(_) => unreachable!("a lease's turn semaphore is never closed"),
        }
        Turn {
            lease: self.clone_ref(),
        }
    }

    /// The turn if it is free now (the teardown fallback never waits).
    pub(crate) fn try_turn(&self) -> Option<Turn> {
        let lease = self.lease();
        let permit = lease.turn.try_acquire().ok()?;
        permit.forget();
        Some(Turn {
            lease: self.clone_ref(),
        })
    }

    pub(crate) fn clone_ref(&self) -> LeaseRef {
        LeaseRef::new(self.lease().clone(), self.table.clone())
    }

    /// A new user of `lease`. Its first user is counted under the table's
    /// lock on the key; later ones while an earlier one lives.
    fn new(lease: Arc<Lease>, table: Weak<Leases>) -> LeaseRef {
        lease.users.fetch_add(1, Ordering::Relaxed);
        LeaseRef {
            lease: Some(lease),
            table,
        }
    }
}

impl std::ops::Deref for LeaseRef {
    type Target = Lease;
    fn deref(&self) -> &Lease {
        self.lease()
    }
}

impl Drop for LeaseRef {
    fn drop(&mut self) {
        let Some(lease) = self.lease.take() else {
            return;
        };
        if lease.users.fetch_sub(1, Ordering::AcqRel) == 1 {
            let key = lease.key.clone();
            drop(lease);
            if let Some(table) = self.table.upgrade() {
                table.remove_idle(&key);
            }
        }
    }
}

// === impl Lease ===

impl Lease {
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
    fn acquired(
        self: &Arc<Self>,
        count: u32,
        term: Term,
        sent: Instant,
        ttl: Duration,
    ) -> (Arc<Signal>, u64) {
        let register = {
            let mut s = self.state.lock();
            if count == 1 || s.signal.is_lost() {
                // A fresh field (count 1: whatever we counted was gone), or
                // trust lost: a new signal for the holds from here on.
                if count == 1 && s.holds > 0 {
                    tracing::debug!(key = ?self.key, stale = s.holds, "holds of an ended incarnation");
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
            let register = s.watched > 0 && !s.registered;
            if register {
                s.registered = true;
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
        match term {
            Term::Watchdog => s.watched = s.watched.saturating_sub(1),
            Term::Fixed(deadline) => {
                if let Some(i) = s.fixed.iter().position(|d| *d == deadline) {
                    s.fixed.swap_remove(i);
                }
            }
        }
    }

    /// A retired hold's release has an outcome, or will not be sent (its
    /// parts are dropped): stops the watchdog renewing the lease if no
    /// watchdog hold is left.
    pub(crate) fn release_done(&self) {
        let deregister = {
            let mut s = self.state.lock();
            let deregister = s.watched == 0 && s.registered;
            if deregister {
                s.registered = false;
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
        if let Some(d) = s.fixed.iter_mut().find(|d| **d == from) {
            *d = to;
        }
    }

    /// Live guards of this lease (their holds need the key; a guard
    /// unlocked or dropped no longer counts, even while its release is on
    /// its way).
    pub(crate) fn live_holds(&self) -> u32 {
        let s = self.state.lock();
        s.watched + s.fixed.len() as u32
    }

    /// Holds Redis counts for the field as far as this record knows (live
    /// guards and releases not yet done), in the current incarnation.
    pub(crate) fn holds(&self) -> u32 {
        self.state.lock().holds
    }

    /// Whether holds of `incarnation` can still be in Redis.
    pub(crate) fn is_current(&self, incarnation: u64) -> bool {
        self.state.lock().incarnation == incarnation
    }

    /// The TTL the key must keep while the remaining live holds need it,
    /// in ms; `fallback` when no live hold is left (the holds still counted
    /// are releases under way).
    pub(crate) fn requirement_ms(&self, fallback: Term) -> i64 {
        let now = Instant::now();
        let s = self.state.lock();
        let mut need: Option<Duration> = None;
        if s.watched > 0 {
            need = Some(self.watchdog.timeout());
        }
        for deadline in &s.fixed {
            let left = deadline.saturating_duration_since(now);
            need = Some(need.map_or(left, |n| n.max(left)));
        }
        let need = need.unwrap_or_else(|| match fallback {
            Term::Watchdog => self.watchdog.timeout(),
            Term::Fixed(deadline) => deadline.saturating_duration_since(now),
        });
        (need.as_millis().clamp(1, i64::MAX as u128)) as i64
    }

    /// Applies a release's reply: `count` holds given back, the key's TTL
    /// set to `ttl` at `sent` if holds remain.
    pub(crate) fn released(&self, reply: ReleaseReply, count: u32, sent: Instant, ttl: Duration) {
        match reply {
            ReleaseReply::NotHeld => {
                self.field_gone("a release found the field gone");
            }
            ReleaseReply::Remaining => {
                let mut s = self.state.lock();
                s.holds = s.holds.saturating_sub(count);
                s.signal.cut(sent + ttl);
            }
            ReleaseReply::Freed => {
                let mut s = self.state.lock();
                // Whatever else we counted is gone with the key.
                s.holds = 0;
                s.incarnation += 1;
                s.signal.mark_lost();
            }
        }
    }

    /// The field is known gone from Redis: its incarnation ends, its guards
    /// are told, its holds are no longer counted.
    pub(crate) fn field_gone(&self, why: &str) {
        let (signal, deregister) = {
            let mut s = self.state.lock();
            if s.holds == 0 && s.signal.is_lost_flag() {
                return;
            }
            // Reported once per loss: not again after `declare_lost`.
            if s.holds > 0 && !s.signal.is_lost_flag() {
                self.report_lost(why);
            }
            s.incarnation += 1;
            s.holds = 0;
            (s.signal.clone(), std::mem::take(&mut s.registered))
        };
        if deregister {
            self.watchdog.deregister(self);
        }
        // Guards are told last, once the record is settled.
        signal.mark_lost();
    }

    /// Declares the lease lost without knowing the field is gone (a renewal
    /// could not be confirmed in time). Holds stay counted: their releases
    /// are still sent.
    pub(crate) fn declare_lost(&self, why: &str) {
        let (signal, deregister) = {
            let mut s = self.state.lock();
            if s.signal.is_lost_flag() {
                return;
            }
            self.report_lost(why);
            (s.signal.clone(), std::mem::take(&mut s.registered))
        };
        if deregister {
            self.watchdog.deregister(self);
        }
        signal.mark_lost();
    }

    /// Counts a loss of a held lease and says so (a `WARN` event).
    fn report_lost(&self, why: &str) {
        self.stats.lost();
        tracing::warn!(lock = %KeyName(&self.key), owner = self.owner, why, "lease lost");
    }

    /// Shutdown: every hold is given back by the caller (returned: how
    /// many, and the incarnation to give them back under); the guards are
    /// told, and their own releases will give back nothing.
    pub(crate) fn drain(&self) -> (u32, u64) {
        let (holds, incarnation, signal, deregister) = {
            let mut s = self.state.lock();
            let holds = std::mem::take(&mut s.holds);
            s.watched = 0;
            s.fixed.clear();
            // Guards dropped later give back nothing: the drain does, under
            // the new incarnation.
            s.incarnation += 1;
            (
                holds,
                s.incarnation,
                s.signal.clone(),
                std::mem::take(&mut s.registered),
            )
        };
        if deregister {
            self.watchdog.deregister(self);
        }
        signal.mark_lost();
        (holds, incarnation)
    }

    /// A renewal snapshot of this lease (see [`Sent`]).
    pub(crate) fn snapshot(self: &Arc<Self>) -> Sent {
        self.clone().into_snapshot()
    }

    /// Asks for the record itself and its state (see [`prefetch`]).
    pub(crate) fn prefetch_record(&self) {
        prefetch(self);
        prefetch_span(&self.state);
    }

    /// Asks for the key's and the field's bytes (see [`prefetch`]). Reads
    /// the record: ask for it first, some leases earlier.
    pub(crate) fn prefetch_names(&self) {
        prefetch(self.key.as_bytes().as_ptr());
        prefetch(self.field.as_bytes().as_ptr());
    }

    /// [`snapshot`](Self::snapshot), keeping this reference.
    pub(crate) fn into_snapshot(self: Arc<Self>) -> Sent {
        let (gen, incarnation, signal_at) = {
            let s = self.state.lock();
            (s.gen, s.incarnation, Arc::as_ptr(&s.signal) as usize)
        };
        Sent {
            lease: self,
            gen,
            incarnation,
            signal_at,
        }
    }

    /// The TTL a renewal or check should set: the watchdog timeout while a
    /// watchdog hold lives; 0 (only check) otherwise.
    pub(crate) fn renew_ttl(&self) -> Duration {
        if self.state.lock().watched > 0 {
            self.watchdog.timeout()
        } else {
            Duration::ZERO
        }
    }
}

// === impl Sent ===

impl Sent {
    /// Asks for what [`renewed`](Self::renewed) will touch (the record,
    /// its state, its signal) a few leases ahead of the one being applied
    /// (see [`prefetch`]).
    pub(crate) fn prefetch(&self) {
        self.lease.prefetch_record();
        let signal = self.signal_at as *const u8;
        prefetch(signal);
        prefetch(signal.wrapping_add(std::mem::size_of::<Signal>() - 1));
    }

    /// A renewal sent at `sent` found the field and raised its TTL to at
    /// least `ttl`. (Not counted in the stats: the caller counts, once
    /// per batch.)
    ///
    /// The deadline rises no further than the live holds need now. A
    /// release counted as sent before this renewal's snapshot (so `gen`
    /// matches) may still reach Redis after the renewal, and it sets the
    /// TTL to what the holds left after it need: the watchdog timeout
    /// while a watchdog hold lives, else the latest fixed deadline. A
    /// release that could cut below that has retired its hold before, so
    /// it is seen here.
    pub(crate) fn renewed(&self, sent: Instant, ttl: Duration) {
        let s = self.lease.state.lock();
        if s.gen != self.gen || ttl.is_zero() {
            return;
        }
        let to = if s.watched > 0 {
            sent + ttl
        } else {
            match s.fixed.iter().max() {
                Some(&deadline) => deadline.min(sent + ttl),
                None => return,
            }
        };
        s.signal.extend(to);
    }

    /// A renewal of this lease got no answer in time (counted; whether
    /// it is lost is the watchdog's call).
    pub(crate) fn unanswered(&self) {
        self.lease.stats.renewal_failed();
    }

    /// A renewal found the field gone.
    pub(crate) fn gone(&self) {
        // With no live hold left, only releases are under way (the lease
        // is renewed until they land): their replies settle the lease.
        let current = {
            let s = self.lease.state.lock();
            s.gen == self.gen && s.incarnation == self.incarnation && s.has_live_holds()
        };
        if current {
            self.lease.field_gone("a renewal found the field gone");
        }
    }

    /// Whether the lease could expire before `verdict` (when a renewal sent
    /// now would be confirmed), so it must be declared lost now.
    pub(crate) fn expires_before(&self, verdict: Instant) -> bool {
        let s = self.lease.state.lock();
        s.gen == self.gen && s.has_live_holds() && s.signal.until() <= verdict
    }
}

/// Asks the CPU to start loading the memory at `p` into its cache. The
/// watchdog's passes over 100,000 leases touch records scattered over the
/// heap, and each atomic operation on the way (a lock, a reference count)
/// keeps the CPU from loading the next record early on its own: so each
/// pass asks for the records a few leases ahead (`cargo bench --bench
/// watchdog`, BENCHMARKS.md). A hint only: nothing is read, and an address
/// that is stale or not mapped costs nothing.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` is part of SSE, which every x86_64 CPU has; it
    // reads nothing and never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// [`prefetch`] of every cache line `value` spans.
#[inline(always)]
fn prefetch_span<T>(value: &T) {
    let start = value as *const T as *const u8;
    let mut at = 0;
    while at < std::mem::size_of::<T>() {
        prefetch(start.wrapping_add(at));
        at += 64;
    }
    prefetch(start.wrapping_add(std::mem::size_of::<T>().saturating_sub(1)));
}

// === impl Signal ===

impl Signal {
    pub(crate) fn new(until: Instant) -> Arc<Signal> {
        Arc::new(Signal::fresh(until))
    }

    fn fresh(until: Instant) -> Signal {
        Signal {
            lost: AtomicBool::new(false),
            lost_at: Mutex::new(None),
            until: Mutex::new(until),
            notify: Notify::new(),
        }
    }

    /// Puts a new signal until `until` in `slot`: in place if nothing else
    /// refers to the old one (no guard, watcher or task can tell them
    /// apart), saving an allocation on every fresh acquire.
    fn renew_in(slot: &mut Arc<Signal>, until: Instant) {
        match Arc::get_mut(slot) {
            Some(unshared) => *unshared = Signal::fresh(until),
            None => *slot = Signal::new(until),
        }
    }

    /// Lost: marked so, or the key may have expired.
    pub(crate) fn is_lost(&self) -> bool {
        self.is_lost_flag() || Instant::now() >= self.until()
    }

    fn is_lost_flag(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// Completes when the signal is lost.
    pub(crate) async fn lost(&self) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_lost() {
                return;
            }
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(self.until()) => {}
            }
        }
    }

    pub(crate) fn mark_lost(&self) {
        self.lost_at.lock().get_or_insert_with(Instant::now);
        self.lost.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Since when the signal is lost: when it was marked so, or the
    /// deadline it ran out at, whichever came first; `None` while not lost.
    pub(crate) fn lost_since(&self) -> Option<Instant> {
        let until = self.until();
        let marked = *self.lost_at.lock();
        match marked {
            Some(at) => Some(at.min(until)),
            None if Instant::now() >= until => Some(until),
            None => None,
        }
    }

    pub(crate) fn until(&self) -> Instant {
        *self.until.lock()
    }

    /// Raises the deadline to `to`, unless it has passed already: a signal
    /// lost by time stays lost (its guards may have been told, and lost is
    /// final), so it is marked lost instead of brought back.
    fn extend(&self, to: Instant) {
        let mut until = self.until.lock();
        if Instant::now() >= *until {
            drop(until);
            self.mark_lost();
            return;
        }
        if to > *until {
            *until = to;
        }
    }

    fn cut(&self, to: Instant) {
        let mut until = self.until.lock();
        if to < *until {
            *until = to;
            drop(until);
            // `lost()` sleeps until the old deadline: wake it to re-check.
            self.notify.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kind for bookkeeping tests: nothing is sent.
    #[derive(Debug)]
    struct Offline;

    impl Kind for Offline {
        fn release_call(&self, _: &Lease, _: u32, _: i64, _: u64) -> Call {
            unreachable!("nothing is sent in these tests")
        }
        fn acquire_reply(&self, _: &[i64]) -> AcquireReply {
            unreachable!("nothing is sent in these tests")
        }
        fn release_reply(&self, _: &[i64]) -> ReleaseReply {
            unreachable!("nothing is sent in these tests")
        }
        fn renewal(&self) -> &'static Renewal {
            unreachable!("nothing is sent in these tests")
        }
        fn excludes(&self, _: &Lease, _: &Lease) -> bool {
            true
        }
    }

    /// A lease record on a connection that never connects, and its table.
    fn offline_lease() -> (Arc<Leases>, LeaseRef) {
        let table = Arc::new(Leases::default());
        let conn = Arc::new(Conn::offline());
        let watchdog = Watchdog::new(Duration::from_secs(30)).unwrap();
        let key = Key::from("k");
        let lease = table.get(&conn, &watchdog, &key, 1, 0, &|| {
            LeaseInit::new(&Offline, "k", "f", Key::from("c"))
        });
        (table, lease)
    }

    /// A renewal that overtook a release on the wire (the release's call
    /// was counted as sent, then the cycle's snapshot was taken and its
    /// batch handed to the driver first) must not raise the deadline past
    /// what the release set: the release ran last, and cut the key's TTL
    /// to what the remaining fixed hold needs.
    #[tokio::test]
    async fn a_renewal_overtaken_by_the_last_watchdog_release_does_not_outlive_it() {
        let (_table, lease) = offline_lease();
        let start = Instant::now();
        let fixed = Term::Fixed(start + Duration::from_secs(3));
        // One watchdog hold, then the same owner re-enters with a 3 s lease.
        lease.acquired(1, Term::Watchdog, start, Duration::from_secs(30));
        let (signal, _) = lease.acquired(2, fixed, start, Duration::from_secs(30));
        // The watchdog hold is unlocked: retired, its release counted as sent.
        lease.retire(Term::Watchdog);
        let release_sent = Instant::now();
        lease.begin_call();
        // A cycle takes its snapshot now, and its batch reaches Redis
        // before the release does.
        let renewal = lease.lease().snapshot();
        let renewal_sent = Instant::now();
        // The release runs after it: one hold left, TTL cut to 3 s.
        let ttl = Duration::from_secs(3);
        lease.released(ReleaseReply::Remaining, 1, release_sent, ttl);
        let release_applied = Instant::now();
        // The renewal's reply is applied last.
        renewal.renewed(renewal_sent, Duration::from_secs(30));
        assert!(
            signal.until() <= release_applied + ttl,
            "the fixed hold's deadline is {:?} past what the release left in Redis",
            signal.until() - (release_applied + ttl)
        );
        lease.lease().watchdog.deregister(lease.lease());
    }

    /// While a watchdog hold lives, a renewal raises the deadline to send
    /// time + TTL; with only fixed holds, no further than the latest of
    /// their deadlines; with no live hold, not at all.
    #[tokio::test]
    async fn a_renewal_raises_the_deadline_as_far_as_the_live_holds_need() {
        let (_table, lease) = offline_lease();
        let start = Instant::now();
        let (signal, _) = lease.acquired(1, Term::Watchdog, start, Duration::from_secs(10));
        let sent = Instant::now();
        lease
            .lease()
            .snapshot()
            .renewed(sent, Duration::from_secs(30));
        assert_eq!(signal.until(), sent + Duration::from_secs(30));

        let deadline = start + Duration::from_secs(40);
        lease.acquired(2, Term::Fixed(deadline), start, Duration::from_secs(30));
        lease.retire(Term::Watchdog);
        let sent = Instant::now();
        lease
            .lease()
            .snapshot()
            .renewed(sent, Duration::from_secs(60));
        assert_eq!(signal.until(), deadline);

        lease.retire(Term::Fixed(deadline));
        lease
            .lease()
            .snapshot()
            .renewed(Instant::now(), Duration::from_secs(90));
        assert_eq!(signal.until(), deadline);
        lease.lease().watchdog.deregister(lease.lease());
    }

    /// Lost is final: a renewal that confirms a lease after its deadline
    /// passed (a late reply, a starved renewal thread) does not bring the
    /// guards back, who may already have been told.
    #[tokio::test]
    async fn a_signal_lost_by_time_stays_lost() {
        let signal = Signal::new(Instant::now() + Duration::from_millis(20));
        assert!(!signal.is_lost());
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert!(signal.is_lost());
        signal.extend(Instant::now() + Duration::from_secs(30));
        assert!(signal.is_lost(), "a late extension revived a lost signal");
        assert!(signal.lost_since().is_some());
    }

    /// A lease the watchdog declared lost at its bound stays lost when
    /// the renewal's reply comes late and is applied (`watchdog::verdict`).
    #[tokio::test]
    async fn a_declared_lost_signal_stays_lost() {
        let signal = Signal::new(Instant::now() + Duration::from_secs(10));
        signal.mark_lost();
        signal.extend(Instant::now() + Duration::from_secs(30));
        assert!(signal.is_lost(), "a late reply revived a declared loss");
    }

    /// Before its deadline, an extension raises it and never lowers it.
    #[tokio::test]
    async fn an_extension_only_raises_a_live_deadline() {
        let start = Instant::now();
        let signal = Signal::new(start + Duration::from_secs(10));
        signal.extend(start + Duration::from_secs(20));
        assert_eq!(signal.until(), start + Duration::from_secs(20));
        signal.extend(start + Duration::from_secs(5));
        assert_eq!(signal.until(), start + Duration::from_secs(20));
        assert!(!signal.is_lost());
    }
}

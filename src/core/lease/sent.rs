//! Renewal snapshots: what the watchdog sends for a lease ([`Sent`]: the
//! record, with its `gen` and incarnation when the batch was made), and how
//! the verdict that comes back is applied to the record.
//!
//! # Guarantees
//!
//! * **Every verdict of the current incarnation counts.** "Renewed" and
//!   "gone" are applied while the incarnation the snapshot was taken in is
//!   current, however many acquires and releases of the owner went by
//!   since; a verdict of an ended incarnation changes nothing.
//! * **Renewed no further than the live holds need now.**
//!   [`Sent::renewed`] raises the signal to the send time plus the TTL
//!   while a watchdog hold lives, to no later than the latest fixed
//!   deadline with only fixed holds, and not at all with no live hold: a
//!   release on its way sets the key's TTL to just that, even if it
//!   reaches Redis after the renewal.
//! * **"Gone" ends only live holds.** With no live hold left, only
//!   releases are under way, and their replies settle the record
//!   ([`Sent::gone`]).
//! * **The early warning defers to a newer call.** Whether a lease must be
//!   declared lost before its renewal is confirmed
//!   ([`Sent::expires_before`]) is asked only while no acquire or release
//!   was sent since the snapshot (`gen`).
//! * **Prefetching is a hint.** The watchdog's passes over many leases ask
//!   the CPU for records a few leases ahead ([`prefetch`]): nothing is
//!   read through a hint, and a stale address costs nothing.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Lease;
use crate::core::signal::Signal;

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

// === impl Lease ===

impl Lease {
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
        prefetch(self.names.key_bytes().as_ptr());
        prefetch(self.names.field_bytes().as_ptr());
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

    /// The TTL a renewal or check should set: what the live holds need.
    /// The watchdog timeout while a watchdog hold lives; for a kind that
    /// [renews fixed holds](crate::core::kind::Kind::renews_fixed), at
    /// least what is left until the latest fixed deadline too (the longer
    /// of the two: a fixed hold extended beyond the watchdog timeout beside
    /// a watchdog hold of the same owner needs the key that long, and its
    /// signal counts on it); 0 (only check) otherwise.
    pub(crate) fn renew_ttl(&self) -> Duration {
        let s = self.state.lock();
        let watched = if s.watched > 0 {
            self.watchdog.timeout()
        } else {
            Duration::ZERO
        };
        if !self.kind.renews_fixed() {
            return watched;
        }
        let fixed = s.fixed.latest().map_or(Duration::ZERO, |d| {
            d.saturating_duration_since(Instant::now())
        });
        watched.max(fixed)
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
    /// Applied while the incarnation it was sent in is current, whatever
    /// acquires and releases of the owner went by (a newer acquire that
    /// re-created the field ended that incarnation). The deadline rises no
    /// further than the live holds need now: a release on its way (sent
    /// before or after this renewal's snapshot) may reach Redis after the
    /// renewal, and it sets the TTL to what the holds left after it need:
    /// the watchdog timeout while a watchdog hold lives, else the latest
    /// fixed deadline. A release that could cut below that has retired its
    /// hold before it was sent, so it is seen here; a re-entry since only
    /// raised the TTL.
    pub(crate) fn renewed(&self, sent: Instant, ttl: Duration) {
        let s = self.lease.state.lock();
        if s.incarnation != self.incarnation || ttl.is_zero() {
            return;
        }
        let to = if s.watched > 0 {
            sent + ttl
        } else {
            match s.fixed.latest() {
                Some(deadline) => deadline.min(sent + ttl),
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
            s.incarnation == self.incarnation && s.has_live_holds()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::kind::ReleaseReply;
    use crate::core::lease::tests::{held_lease, offline_lease};
    use crate::core::lease::Term;

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

    /// Issue 29, item 1: a renewal's "gone" verdict counts however many
    /// calls of the owner (its own tries, each bumping `gen`) went by while
    /// it was on its way.
    #[tokio::test]
    async fn a_gone_verdict_counts_after_the_owners_own_tries() {
        let (_table, lease, _, signal) = held_lease();
        let renewal = lease.lease().snapshot();
        // The owner tries again and again meanwhile (refused: no hold).
        for _ in 0..3 {
            lease.begin_call();
        }
        renewal.gone();
        assert!(signal.is_lost(), "the verdict was thrown away");
        assert_eq!(lease.holds(), 0);
    }

    /// Issue 29, item 4: a renewal sent in an incarnation that has ended
    /// (the field was found gone, a new acquire re-created it) does not
    /// raise the new incarnation's deadline.
    #[tokio::test]
    async fn a_renewal_of_an_ended_incarnation_raises_nothing() {
        let (_table, lease, start, _) = held_lease();
        let renewal = lease.lease().snapshot();
        lease.field_gone("test: found gone");
        let deadline = start + Duration::from_secs(1);
        let (signal, _) = lease.acquired(1, Term::Fixed(deadline), start, Duration::from_secs(1));
        renewal.renewed(Instant::now(), Duration::from_secs(30));
        assert_eq!(signal.until(), deadline);
        lease.lease().watchdog.deregister(lease.lease());
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
}

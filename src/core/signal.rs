//! The lost signal of a lease's holds, shared with their guards: marked
//! lost once (by the watchdog, a failed check, a newer incarnation,
//! shutdown), or lost by itself once its deadline, a lower bound of the
//! key's expiry in Redis, has passed (see `lease/mod.rs`, "The invariant").

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// The lost signal of a lease's holds, shared with their guards.
///
/// Its times are atomics (nanoseconds after [`epoch`]), not mutexes around
/// `Instant`s: a held lock keeps one signal, and this halves it.
#[derive(Debug)]
pub(crate) struct Signal {
    /// When the signal was marked lost (set once: by the watchdog, a failed
    /// check, a newer incarnation, or shutdown); 0 while it is not.
    lost_at: AtomicU64,
    /// Lower bound of the key's expiry in Redis (see the module docs).
    until: AtomicU64,
    notify: Notify,
}

/// The instant [`Signal`] times count from: a day before the first signal
/// was made, so every time a signal is given (a send time plus a TTL, all
/// after the first record was made) is after it, and none is 0.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(|| {
        let now = Instant::now();
        now.checked_sub(Duration::from_secs(86_400)).unwrap_or(now)
    })
}

/// `at` as a [`Signal`] time. An instant before the epoch (none is given;
/// see [`epoch`]) becomes 1, the earliest: a deadline is never moved later.
fn to_ticks(at: Instant) -> u64 {
    let nanos = at.saturating_duration_since(epoch()).as_nanos();
    u64::try_from(nanos).unwrap_or(u64::MAX).max(1)
}

/// A [`Signal`] time as an instant.
fn from_ticks(ticks: u64) -> Instant {
    let at = Duration::from_nanos(ticks);
    epoch()
        .checked_add(at)
        .unwrap_or_else(|| epoch() + Duration::from_secs(1 << 40))
}

// === impl Signal ===

impl Signal {
    pub(crate) fn new(until: Instant) -> Arc<Signal> {
        Arc::new(Signal::fresh(until))
    }

    fn fresh(until: Instant) -> Signal {
        Signal {
            lost_at: AtomicU64::new(0),
            until: AtomicU64::new(to_ticks(until)),
            notify: Notify::new(),
        }
    }

    /// Puts a new signal until `until` in `slot`: in place if nothing else
    /// refers to the old one (no guard, watcher or task can tell them
    /// apart), saving an allocation on every fresh acquire.
    pub(crate) fn renew_in(slot: &mut Arc<Signal>, until: Instant) {
        match Arc::get_mut(slot) {
            Some(unshared) => *unshared = Signal::fresh(until),
            None => *slot = Signal::new(until),
        }
    }

    /// Lost: marked so, or the key may have expired.
    pub(crate) fn is_lost(&self) -> bool {
        self.is_lost_flag() || Instant::now() >= self.until()
    }

    /// Marked lost (not counting its deadline).
    pub(crate) fn is_lost_flag(&self) -> bool {
        self.lost_at.load(Ordering::Acquire) != 0
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
        // The first mark's time stays.
        let _ = self.lost_at.compare_exchange(
            0,
            to_ticks(Instant::now()),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        self.notify.notify_waiters();
    }

    /// Since when the signal is lost: when it was marked so, or the
    /// deadline it ran out at, whichever came first; `None` while not lost.
    pub(crate) fn lost_since(&self) -> Option<Instant> {
        let until = self.until();
        match self.lost_at.load(Ordering::Acquire) {
            0 if Instant::now() >= until => Some(until),
            0 => None,
            at => Some(from_ticks(at).min(until)),
        }
    }

    pub(crate) fn until(&self) -> Instant {
        from_ticks(self.until.load(Ordering::Acquire))
    }

    /// Raises the deadline to `to`, unless it has passed already: a signal
    /// lost by time stays lost (its guards may have been told, and lost is
    /// final), so it is marked lost instead of brought back.
    pub(crate) fn extend(&self, to: Instant) {
        let (now, to) = (to_ticks(Instant::now()), to_ticks(to));
        let mut until = self.until.load(Ordering::Acquire);
        loop {
            if now >= until {
                self.mark_lost();
                return;
            }
            if to <= until {
                return;
            }
            match self
                .until
                .compare_exchange_weak(until, to, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(seen) => until = seen,
            }
        }
    }

    pub(crate) fn cut(&self, to: Instant) {
        let to = to_ticks(to);
        if to < self.until.fetch_min(to, Ordering::AcqRel) {
            // `lost()` sleeps until the old deadline: wake it to re-check.
            self.notify.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    /// the renewal's reply comes late and is applied (`watchdog/verdict.rs`).
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

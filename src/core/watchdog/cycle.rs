//! The renewal cycle: the task that wakes every renew interval and renews
//! every lease and client record registered, all at once; the reconnect
//! [`check`], which does the same for one client's leases; and the thread
//! those tasks run on.
//!
//! # Guarantees
//!
//! * **A thread of their own.** Renewal tasks run on one current-thread
//!   runtime on the `leasehold-watchdog` thread, so a lease is renewed
//!   whichever runtime its client lives on, and the end of one runtime
//!   does not stop the renewal of another's leases. A task holds only a
//!   weak handle: it ends with its watchdog.
//! * **Records beside leases.** Each cycle renews every live client record
//!   (`Registry::beat`) beside the lease batches, bounded by half the
//!   interval like them; a missed tick delays the next one, never doubles
//!   it.
//! * **Fixed leases only checked.** A reconnect check renews the leases
//!   the watchdog renews (a renewal TTL, `Lease::renew_ttl`, that is not
//!   zero) and only checks the others (TTL 0).
//! * **Short work under the registry's locks.** A cycle takes only the
//!   leases' references there; their snapshots are taken in the one pass
//!   that groups them (`batch.rs`), each record asked for a few leases
//!   ahead ([`PREFETCH_AHEAD`]; see `prefetch` in `lease/sent.rs`).

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use super::batch::renew;
use super::handle::Inner;
use crate::core::lease::{Lease, LeaseRef, Sent};
use crate::core::registry::Registry;
use crate::core::FastMap;

/// How many leases ahead each pass of a cycle asks for a lease's memory
/// (see `prefetch` in `lease/sent.rs`): 4 and 16 did no better than 8 (BENCHMARKS.md).
pub(super) const PREFETCH_AHEAD: usize = 8;

/// The renewal task: holds only a weak handle, so it ends with the
/// watchdog.
pub(super) async fn run(inner: Weak<Inner>) {
    let Some(interval) = inner.upgrade().map(|i| i.interval) else {
        return;
    };
    let mut ticker = tokio::time::interval_at(Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        let leases = registered(&inner.leases);
        let span = tracing::debug_span!(
            "renewal",
            leases = leases.len(),
            calls = tracing::field::Empty,
            failures = tracing::field::Empty,
        );
        let failed_before = inner.failures.load(Ordering::Relaxed);
        let records: Vec<Arc<Registry>> = inner
            .records
            .iter()
            .filter_map(|r| r.value().upgrade())
            .collect();
        let bound = inner.interval / 2;
        let (calls, ()) = tokio::join!(
            renew(
                snapshots(leases),
                inner.timeout,
                inner.interval,
                inner.batch_size,
            )
            .instrument(span.clone()),
            async {
                futures_util::future::join_all(records.iter().map(|r| r.beat(bound))).await;
            }
        );
        inner.calls.fetch_add(calls, Ordering::Relaxed);
        // Failures of this cycle (and of a reconnect check running beside it).
        let failures = inner
            .failures
            .load(Ordering::Relaxed)
            .saturating_sub(failed_before);
        span.record("calls", calls);
        span.record("failures", failures);
    }
}

/// The registry's leases: only the references, taken under the registry's
/// locks (the rest of the work per lease is done in one pass by `renew`).
/// Each record is asked for a few entries before its reference count is
/// touched (see `prefetch` in `lease/sent.rs`).
fn registered(leases: &FastMap<usize, Arc<Lease>>) -> Vec<Arc<Lease>> {
    let mut out = Vec::with_capacity(leases.len());
    let mut window = std::collections::VecDeque::with_capacity(PREFETCH_AHEAD + 1);
    for entry in leases.iter() {
        entry.value().prefetch_record();
        window.push_back(entry);
        if window.len() > PREFETCH_AHEAD {
            out.extend(window.pop_front().map(|e| e.value().clone()));
        }
    }
    out.extend(window.iter().map(|e| e.value().clone()));
    out
}

/// Snapshots of `leases` as `renew` takes them, asking for each record a
/// few leases ahead and for its names a few after that (see
/// `prefetch` in `lease/sent.rs`).
fn snapshots(leases: Vec<Arc<Lease>>) -> impl Iterator<Item = Sent> {
    let mut rest = leases.into_iter();
    std::iter::from_fn(move || {
        let ahead = rest.as_slice();
        if let Some(far) = ahead.get(2 * PREFETCH_AHEAD) {
            far.prefetch_record();
        }
        if let Some(near) = ahead.get(PREFETCH_AHEAD) {
            near.prefetch_names();
        }
        rest.next().map(Lease::into_snapshot)
    })
}

/// Checks every lease of `leases` at once (after a reconnect): watchdog
/// leases are renewed, fixed ones only checked; the ones gone are lost.
pub(crate) async fn check(leases: Vec<LeaseRef>) -> u64 {
    let Some(first) = leases.first() else {
        return 0;
    };
    let watchdog = first.watchdog.clone();
    let interval = watchdog.inner.interval;
    let batch = watchdog.inner.batch_size;
    let sent: Vec<Sent> = leases.iter().map(|l| l.lease().snapshot()).collect();
    // Fixed leases: TTL 0 (check only); watchdog leases: renewed.
    let (watched, fixed): (Vec<Sent>, Vec<Sent>) = sent
        .into_iter()
        .partition(|s| !s.lease.renew_ttl().is_zero());
    let (a, b) = tokio::join!(
        renew(watched, watchdog.timeout(), interval, batch),
        renew(fixed, Duration::ZERO, interval, batch)
    );
    a + b
}

/// The runtime renewal tasks run on: one thread for the process.
pub(super) fn renewal_runtime() -> &'static tokio::runtime::Handle {
    static RUNTIME: OnceLock<tokio::runtime::Handle> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name("leasehold-watchdog")
            .build()
            .unwrap_or_else(|e| panic!("leasehold: cannot build the watchdog runtime: {e}"));
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("leasehold-watchdog".into())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))
            .unwrap_or_else(|e| panic!("leasehold: cannot start the watchdog thread: {e}"));
        handle
    })
}

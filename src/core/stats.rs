//! Observability: the counters every client keeps ([`Stats`]), their
//! mirror in the `metrics` facade (feature `metrics`), and the helpers the
//! engine's `tracing` spans use.
//!
//! # Where things are counted
//!
//! Every count is of the engine's own events, whatever the lock kind:
//!
//! * `acquire.rs`: acquisitions, timeouts, busy tries (contention), waits
//!   and their time — once per acquire, when it concludes;
//! * `wait.rs`: subscriptions taken by waiters;
//! * `hold.rs`: releases that ran (unlock, drop, shutdown, settling);
//! * `watchdog/verdict.rs` and `hold.rs`: leases renewed; `lease/release.rs`:
//!   leases lost (once per lost incarnation);
//! * `watchdog/`: leases whose renewal got no answer.
//!
//! Counting is a relaxed atomic add; with the `metrics` feature, also one
//! call into the installed recorder (a no-op without one). Neither
//! allocates.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A snapshot of what one [`Client`](crate::Client) has done since it was
/// built: [`Client::stats`](crate::Client::stats).
///
/// The counts are **per client** (every lock kind, every task of the
/// client), kept in plain atomics whether or not the `metrics` feature is
/// on; they only grow (except `channels`, the current number).
///
/// # Metrics
///
/// With the `metrics` feature, every count is also sent to the `metrics`
/// facade crate's recorder (installed by the application: Prometheus,
/// StatsD, …), summed over every client of the process, without labels
/// (lock names are unbounded):
///
/// | metric | type | field | what it counts |
/// | --- | --- | --- | --- |
/// | `leasehold_acquisitions_total` | counter | [`acquisitions`](Self::acquisitions) | acquires that took a hold (re-entries included) |
/// | `leasehold_acquire_timeouts_total` | counter | [`timeouts`](Self::timeouts) | acquires whose wait ran out (`Ok(None)`) |
/// | `leasehold_busy_attempts_total` | counter | [`busy_attempts`](Self::busy_attempts) | tries that found the lock held by another owner (contention) |
/// | `leasehold_waits_total` | counter | [`waits`](Self::waits) | acquires that had to wait (tried more than once) |
/// | `leasehold_wait_seconds` | histogram | [`wait_time`](Self::wait_time) (the sum) | for each acquire that waited: from its call to its outcome |
/// | `leasehold_releases_total` | counter | [`releases`](Self::releases) | release calls that ran (unlock, drop, shutdown) |
/// | `leasehold_renewals_total` | counter | [`renewals`](Self::renewals) | lease renewals Redis confirmed (watchdog cycles, reconnect checks, `extend`) |
/// | `leasehold_renewal_failures_total` | counter | [`renewal_failures`](Self::renewal_failures) | lease renewals that got no answer in time |
/// | `leasehold_leases_lost_total` | counter | [`leases_lost`](Self::leases_lost) | leases found gone or declared lost while held (once per loss) |
/// | `leasehold_subscriptions_total` | counter | [`subscriptions`](Self::subscriptions) | waiters that subscribed to a channel (one `SUBSCRIBE` per channel, however many) |
///
/// # Tracing
///
/// The engine records `tracing` spans at level `DEBUG` and one event at
/// level `WARN`, all with targets under `leasehold` (a filter such as
/// `leasehold=debug` selects them); no field is formatted unless a
/// subscriber records it:
///
/// | name | kind | fields |
/// | --- | --- | --- |
/// | `acquire` | span | `lock` (the key), `owner` ([`Owner::id`](crate::Owner::id)), `outcome` (`acquired`, `timeout`, `error`, `cancelled`), `attempts`, `wait_ms` |
/// | `release` | span | `lock`, `owner`, `holds` (given back), `outcome` (`freed`, `remaining`, `not_held`, `error`) |
/// | `renewal` | span | one watchdog cycle: `leases`, `calls`, `failures` (leases without an answer) |
/// | `lease lost` | event | `lock`, `owner`, `why` |
///
/// # Example
///
/// ```no_run
/// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
/// let guard = client.lock("orders:42").lock().await?;
/// guard.unlock().await?;
/// let stats = client.stats();
/// assert!(stats.acquisitions >= 1 && stats.releases >= 1);
/// println!("{stats:?}");
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Acquires that took a hold, re-entries included.
    pub acquisitions: u64,
    /// Acquires whose wait ran out without the lock.
    pub timeouts: u64,
    /// Tries that found the lock held by another owner.
    pub busy_attempts: u64,
    /// Acquires that had to wait (tried more than once).
    pub waits: u64,
    /// Total time spent by the acquires that waited, from call to outcome.
    pub wait_time: Duration,
    /// Release calls that ran.
    pub releases: u64,
    /// Lease renewals Redis confirmed.
    pub renewals: u64,
    /// Lease renewals that got no answer in time.
    pub renewal_failures: u64,
    /// Leases found gone or declared lost while held.
    pub leases_lost: u64,
    /// Waiters that subscribed to a channel.
    pub subscriptions: u64,
    /// Channels the client is subscribed to now.
    pub channels: usize,
}

/// The live counters of one client (see [`Stats`]). Changed by the engine
/// only, with relaxed adds: each count is exact, a snapshot is not one
/// instant across counts.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    acquisitions: AtomicU64,
    timeouts: AtomicU64,
    busy_attempts: AtomicU64,
    waits: AtomicU64,
    wait_nanos: AtomicU64,
    releases: AtomicU64,
    renewals: AtomicU64,
    renewal_failures: AtomicU64,
    leases_lost: AtomicU64,
    subscriptions: AtomicU64,
}

/// How an acquire ended, for its span and counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AcquireEnd {
    Acquired,
    Timeout,
    Error,
}

/// A key shown as text in span fields: formatted only when a subscriber
/// records it.
pub(crate) struct KeyName<'a>(pub(crate) &'a [u8]);

/// Adds 1 to `counter`, and to `metric` with the `metrics` feature.
macro_rules! count {
    ($counter:expr, $metric:literal) => {
        count!($counter, $metric, 1)
    };
    ($counter:expr, $metric:literal, $n:expr) => {{
        let n: u64 = $n;
        $counter.fetch_add(n, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        metrics::counter!($metric).increment(n);
    }};
}

// === impl Counters ===

impl Counters {
    /// An acquire concluded after `attempts` tries, `elapsed` after its
    /// call.
    pub(crate) fn acquire_ended(&self, outcome: AcquireEnd, attempts: u32, elapsed: Duration) {
        match outcome {
            AcquireEnd::Acquired => count!(self.acquisitions, "leasehold_acquisitions_total"),
            AcquireEnd::Timeout => count!(self.timeouts, "leasehold_acquire_timeouts_total"),
            AcquireEnd::Error => {}
        }
        if attempts > 1 {
            count!(self.waits, "leasehold_waits_total");
            let nanos = elapsed.as_nanos().min(u64::MAX as u128) as u64;
            self.wait_nanos.fetch_add(nanos, Ordering::Relaxed);
            #[cfg(feature = "metrics")]
            metrics::histogram!("leasehold_wait_seconds").record(elapsed.as_secs_f64());
        }
    }

    /// A try found the lock held by another owner.
    pub(crate) fn busy(&self) {
        count!(self.busy_attempts, "leasehold_busy_attempts_total");
    }

    /// A release call ran.
    pub(crate) fn released(&self) {
        count!(self.releases, "leasehold_releases_total");
    }

    /// Renewals of `n` leases were confirmed.
    pub(crate) fn renewed(&self, n: u64) {
        count!(self.renewals, "leasehold_renewals_total", n);
    }

    /// A renewal of one lease got no answer in time.
    pub(crate) fn renewal_failed(&self) {
        count!(self.renewal_failures, "leasehold_renewal_failures_total");
    }

    /// A held lease was found gone or declared lost.
    pub(crate) fn lost(&self) {
        count!(self.leases_lost, "leasehold_leases_lost_total");
    }

    /// A waiter subscribed to a channel.
    pub(crate) fn subscribed(&self) {
        count!(self.subscriptions, "leasehold_subscriptions_total");
    }

    /// The counts now; `channels` is filled in by the caller.
    pub(crate) fn snapshot(&self) -> Stats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            acquisitions: get(&self.acquisitions),
            timeouts: get(&self.timeouts),
            busy_attempts: get(&self.busy_attempts),
            waits: get(&self.waits),
            wait_time: Duration::from_nanos(get(&self.wait_nanos)),
            releases: get(&self.releases),
            renewals: get(&self.renewals),
            renewal_failures: get(&self.renewal_failures),
            leases_lost: get(&self.leases_lost),
            subscriptions: get(&self.subscriptions),
            channels: 0,
        }
    }
}

// === impl AcquireEnd ===

impl AcquireEnd {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            AcquireEnd::Acquired => "acquired",
            AcquireEnd::Timeout => "timeout",
            AcquireEnd::Error => "error",
        }
    }
}

impl fmt::Display for KeyName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(self.0))
    }
}

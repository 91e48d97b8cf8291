//! The [`Watchdog`] handle its clients share: its settings, the
//! process-wide one, and the registries of what the renewal cycle renews.
//!
//! # Guarantees
//!
//! * **Settings are fixed once shared.** The batch size and renew interval
//!   are set only on a watchdog not yet cloned or in use, and the interval
//!   leaves room for a failed renewal to be retried before a lease
//!   expires (at most `timeout / 2`).
//! * **One process-wide watchdog.** [`Watchdog::global`] is the one given
//!   to [`Watchdog::set_global`] or, if none was, one with a 30 s timeout
//!   made at its first use; a later `set_global` is refused and changes
//!   nothing.
//! * **Registering is a map entry.** A lease is registered and deregistered
//!   by its record, which keeps its own flag so each happens once
//!   (`lease/record.rs`); a client record while its client runs. The
//!   first registration starts the renewal task if none runs (`cycle.rs`);
//!   the task holds only a weak handle, and is aborted when the last
//!   handle goes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;

use super::cycle::{renewal_runtime, run};
use crate::core::lease::Lease;
use crate::core::registry::Registry;
use crate::core::FastMap;
use crate::error::{Error, Result};

/// Renews the leases of locks taken without a fixed lease, in batches, and
/// tells their guards when a lease is lost.
///
/// Every client uses the process-wide watchdog ([`Watchdog::global`]) unless
/// its builder is given another one
/// ([`ClientBuilder::watchdog`](crate::ClientBuilder::watchdog)) or its own
/// timeout ([`ClientBuilder::watchdog_timeout`](crate::ClientBuilder::watchdog_timeout)).
/// One watchdog runs one renewal task, started with its first lease, on a
/// thread leasehold keeps for renewals.
///
/// Renewal runs every [`renew_interval`](Self::renew_interval) (default
/// `timeout / 3`), each call bounded by half of it. A lease that cannot be
/// confirmed in time is declared lost while Redis still keeps it: with the
/// default interval, at least `timeout / 6` before it could expire.
///
/// # Example
///
/// ```no_run
/// use std::time::Duration;
/// use leasehold::{Client, Watchdog};
///
/// # async fn f() -> leasehold::Result<()> {
/// // Configure the process-wide watchdog once, before any client uses it.
/// Watchdog::new(Duration::from_secs(20))?.with_batch_size(500)?.set_global()?;
/// let a = Client::connect("redis://127.0.0.1:6379").await?;
/// let b = Client::connect("redis://127.0.0.1:6380").await?;
/// assert_eq!(a.watchdog().timeout(), Duration::from_secs(20));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Watchdog {
    pub(super) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) timeout: Duration,
    pub(super) interval: Duration,
    pub(super) batch_size: usize,
    /// Registered leases, by address. Changed by `register` / `deregister`
    /// (through the lease, which keeps its own `registered` flag).
    pub(super) leases: FastMap<usize, Arc<Lease>>,
    /// Client records renewed by the cycle, by address. Changed when a
    /// client starts and when it shuts down or closes.
    pub(super) records: FastMap<usize, std::sync::Weak<Registry>>,
    /// The renewal task, started with the first lease.
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Whether the renewal task runs: set when it is started, cleared when
    /// its future is dropped (it ends only by a panic, or aborted with the
    /// last handle). Read on every registration first, so the one that
    /// every acquire makes takes no process-wide lock.
    running: AtomicBool,
    /// Renewal script calls sent so far.
    pub(super) calls: AtomicU64,
    /// Lease renewals that got no answer in time, so far (`give_up`).
    pub(super) failures: AtomicU64,
}

/// Default number of leases renewed by one script call.
pub(crate) const DEFAULT_BATCH_SIZE: usize = 1000;

/// Default watchdog timeout (Redisson's `lockWatchdogTimeout`).
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The shortest timeout accepted.
const MIN_TIMEOUT: Duration = Duration::from_millis(30);

static GLOBAL: OnceLock<Watchdog> = OnceLock::new();

// === impl Watchdog ===

impl Watchdog {
    /// A watchdog that keeps leases for `timeout` and renews them every
    /// `timeout / 3`.
    ///
    /// Returns [`Error::InvalidArgument`] if `timeout` is under 30 ms or
    /// over about 34 years.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// let wd = leasehold::Watchdog::new(Duration::from_secs(30)).unwrap();
    /// assert_eq!(wd.timeout(), Duration::from_secs(30));
    /// assert!(leasehold::Watchdog::new(Duration::ZERO).is_err());
    /// ```
    pub fn new(timeout: Duration) -> Result<Watchdog> {
        if timeout < MIN_TIMEOUT {
            return Err(Error::invalid(format!(
                "watchdog timeout {timeout:?} is under the minimum {MIN_TIMEOUT:?}"
            )));
        }
        crate::core::lease_millis(timeout)?;
        Ok(Watchdog {
            inner: Arc::new(Inner {
                timeout,
                interval: timeout / 3,
                batch_size: DEFAULT_BATCH_SIZE,
                leases: FastMap::default(),
                records: FastMap::default(),
                task: Mutex::new(None),
                running: AtomicBool::new(false),
                calls: AtomicU64::new(0),
                failures: AtomicU64::new(0),
            }),
        })
    }

    /// The process-wide watchdog every client uses by default: the one
    /// given to [`set_global`](Self::set_global), or one with a 30 s
    /// timeout, made at the first call.
    ///
    /// # Example
    ///
    /// ```
    /// let wd = leasehold::Watchdog::global();
    /// assert!(wd.timeout() >= std::time::Duration::from_millis(30));
    /// ```
    pub fn global() -> Watchdog {
        GLOBAL
            .get_or_init(|| {
                Watchdog::new(DEFAULT_TIMEOUT)
                    .unwrap_or_else(|_| unreachable!("the default timeout is valid"))
            })
            .clone()
    }

    /// Makes this the process-wide watchdog. Call it once, before any
    /// client is built without a watchdog of its own (that is when the
    /// global one is first used); afterwards it fails with
    /// [`Error::InvalidArgument`] and changes nothing.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// let wd = leasehold::Watchdog::new(Duration::from_secs(12)).unwrap().set_global().unwrap();
    /// assert_eq!(leasehold::Watchdog::global().timeout(), Duration::from_secs(12));
    /// // A second configuration is refused.
    /// assert!(leasehold::Watchdog::new(Duration::from_secs(60)).unwrap().set_global().is_err());
    /// ```
    pub fn set_global(self) -> Result<Watchdog> {
        let mut installed = false;
        let global = GLOBAL.get_or_init(|| {
            installed = true;
            self.clone()
        });
        if installed {
            Ok(self)
        } else {
            Err(Error::invalid(format!(
                "the process-wide watchdog is already set (timeout {:?}): configure it once, before the first client is built",
                global.timeout()
            )))
        }
    }

    /// Sets how many leases one renewal script call carries (default
    /// 1000). Must be called before the watchdog is shared.
    ///
    /// Returns [`Error::InvalidArgument`] for 0, or if the watchdog is
    /// already shared (cloned or in use).
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// let wd = leasehold::Watchdog::new(Duration::from_secs(30)).unwrap()
    ///     .with_batch_size(200).unwrap();
    /// assert_eq!(wd.batch_size(), 200);
    /// ```
    pub fn with_batch_size(mut self, batch_size: usize) -> Result<Watchdog> {
        if batch_size == 0 {
            return Err(Error::invalid("watchdog batch size must be at least 1"));
        }
        self.configure()?.batch_size = batch_size;
        Ok(self)
    }

    /// Sets how often leases are renewed (default `timeout / 3`). It must
    /// leave room for a failed renewal to be retried before the lease
    /// expires: at most `timeout / 2`, and at least 10 ms.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// let wd = leasehold::Watchdog::new(Duration::from_secs(30)).unwrap()
    ///     .with_renew_interval(Duration::from_secs(5)).unwrap();
    /// assert_eq!(wd.renew_interval(), Duration::from_secs(5));
    /// assert!(leasehold::Watchdog::new(Duration::from_secs(30)).unwrap()
    ///     .with_renew_interval(Duration::from_secs(20)).is_err());
    /// ```
    pub fn with_renew_interval(mut self, interval: Duration) -> Result<Watchdog> {
        let timeout = self.inner.timeout;
        if interval > timeout / 2 || interval < Duration::from_millis(10) {
            return Err(Error::invalid(format!(
                "renew interval {interval:?} must be between 10 ms and half the timeout ({:?})",
                timeout / 2
            )));
        }
        self.configure()?.interval = interval;
        Ok(self)
    }

    fn configure(&mut self) -> Result<&mut Inner> {
        Arc::get_mut(&mut self.inner)
            .ok_or_else(|| Error::invalid("configure the watchdog before sharing it"))
    }

    /// How long a renewed lease lasts in Redis.
    ///
    /// # Example
    ///
    /// ```
    /// # use std::time::Duration;
    /// let wd = leasehold::Watchdog::new(Duration::from_secs(9)).unwrap();
    /// assert_eq!(wd.timeout(), Duration::from_secs(9));
    /// ```
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// How often leases are renewed (default `timeout / 3`).
    ///
    /// # Example
    ///
    /// ```
    /// # use std::time::Duration;
    /// let wd = leasehold::Watchdog::new(Duration::from_secs(30)).unwrap();
    /// assert_eq!(wd.renew_interval(), Duration::from_secs(10));
    /// ```
    pub fn renew_interval(&self) -> Duration {
        self.inner.interval
    }

    /// Leases per renewal script call.
    ///
    /// # Example
    ///
    /// ```
    /// # use std::time::Duration;
    /// let wd = leasehold::Watchdog::new(Duration::from_secs(30)).unwrap();
    /// assert_eq!(wd.batch_size(), 1000);
    /// ```
    pub fn batch_size(&self) -> usize {
        self.inner.batch_size
    }

    /// Number of leases being renewed (one per owner and lock, however
    /// many reentrant holds).
    ///
    /// # Example
    ///
    /// ```
    /// # use std::time::Duration;
    /// let wd = leasehold::Watchdog::new(Duration::from_secs(30)).unwrap();
    /// assert_eq!(wd.lease_count(), 0);
    /// ```
    pub fn lease_count(&self) -> usize {
        self.inner.leases.len()
    }

    /// Renewal script calls sent since the watchdog was made.
    ///
    /// # Example
    ///
    /// ```
    /// # use std::time::Duration;
    /// let wd = leasehold::Watchdog::new(Duration::from_secs(30)).unwrap();
    /// assert_eq!(wd.renewal_calls(), 0);
    /// ```
    pub fn renewal_calls(&self) -> u64 {
        self.inner.calls.load(Ordering::Relaxed)
    }

    /// Lease renewals that got no answer in time (call failed, or no
    /// reply within half the renew interval) since the watchdog was made,
    /// one per lease per cycle. A reply that comes later, within the
    /// interval, is still applied, but the renewal stays counted here.
    ///
    /// # Example
    ///
    /// ```
    /// # use std::time::Duration;
    /// let wd = leasehold::Watchdog::new(Duration::from_secs(30)).unwrap();
    /// assert_eq!(wd.renewal_failures(), 0);
    /// ```
    pub fn renewal_failures(&self) -> u64 {
        self.inner.failures.load(Ordering::Relaxed)
    }

    /// Starts renewing `lease`.
    pub(crate) fn register(&self, lease: Arc<Lease>) {
        self.inner
            .leases
            .insert(Arc::as_ptr(&lease) as usize, lease);
        self.start_task();
    }

    /// Stops renewing `lease`.
    pub(crate) fn deregister(&self, lease: &Lease) {
        self.inner.leases.remove(&(lease as *const Lease as usize));
    }

    /// Starts renewing a client's record.
    pub(crate) fn register_record(&self, record: &Arc<Registry>) {
        self.inner
            .records
            .insert(Arc::as_ptr(record) as usize, Arc::downgrade(record));
        self.start_task();
    }

    /// Stops renewing a client's record.
    pub(crate) fn deregister_record(&self, record: &Arc<Registry>) {
        self.inner.records.remove(&(Arc::as_ptr(record) as usize));
    }

    fn start_task(&self) {
        if self.inner.running.load(Ordering::Acquire) {
            return;
        }
        let mut task = self.inner.task.lock();
        if task.as_ref().is_none_or(|t| t.is_finished()) {
            self.inner.running.store(true, Ordering::Release);
            let inner = Arc::downgrade(&self.inner);
            // Clears `running` however the task ends (even dropped before
            // its first poll), so the next registration starts it again.
            let ended = Ended(inner.clone());
            *task = Some(renewal_runtime().spawn(async move {
                let _ended = ended;
                run(inner).await
            }));
        }
    }
}

/// Clears the watchdog's `running` flag when the renewal task's future is
/// dropped.
struct Ended(std::sync::Weak<Inner>);

impl Drop for Ended {
    fn drop(&mut self) {
        if let Some(inner) = self.0.upgrade() {
            inner.running.store(false, Ordering::Release);
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(task) = self.task.get_mut().take() {
            task.abort();
        }
    }
}

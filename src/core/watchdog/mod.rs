//! Lease renewal: one registry and one task per [`Watchdog`] for every
//! lease held through it, whatever the lock kind and client.
//!
//! # The cycle
//!
//! Every renew interval (default `timeout / 3`) the task takes a snapshot
//! of the registry, groups the leases by connection, by the kind's renewal
//! script and by where they live, and sends the batches all at once, each
//! bounded by half the interval:
//!
//! * **A single server**: batches of up to `batch_size` leases. A kind
//!   with a packed script (the hash locks) sends each batch's keys and
//!   fields in one argument (`pack.rs`): the driver then handles three
//!   values per call instead of two per lease; a batch is cut early once
//!   its argument reaches 512 KiB, to stay under any server's
//!   `proto-max-bulk-len`. A packed batch that fails is sent again with
//!   its keys declared.
//! * **A Redis 7+ cluster**: one batch per *node* (`renew_node_packed.lua`
//!   for the hash locks, `renew_read_node.lua` for read locks, which
//!   declare `allow-cross-slot-keys`), so 10,000 leases spread over every
//!   slot still cost about `leases / batch_size` calls per node. It
//!   declares no key and is sent to the node itself, so no redirection can
//!   bounce it; the entries the node no longer serves (a slot moved away,
//!   or moving) are sent again as one call per slot, all at once. A node batch that fails is sent once more. Older servers get
//!   per-slot batches, likewise sent concurrently. Per-slot calls follow
//!   redirections as every script call does (`script.rs`): a slot on the
//!   move costs a transaction, never a reply handed to the wrong request.
//!
//! For each lease the reply says renewed or gone:
//!
//! * renewed: Redis keeps it at least until *send time* + `timeout`, and
//!   the lease's signal learns so — unless an acquire or release of that
//!   lease was sent meanwhile (it knows better);
//! * gone: the field is missing; the lease's incarnation ends and its
//!   guards are told, unless a newer acquire already replaced it;
//! * no answer: if the lease could expire before the next cycle's verdict,
//!   it is declared lost *now*, while Redis still keeps it (at least
//!   `timeout / 6` before, with the default interval). The call goes on
//!   until the next cycle: a reply that comes by then is still applied
//!   (it says how long Redis keeps each key from the send time), so a
//!   server slower than the bound but faster than the interval keeps its
//!   leases.
//!
//! # Client records
//!
//! The same cycle renews the record of every client using the watchdog
//! (`registry.rs`): one `PEXPIRE` per client, sent beside the renewal
//! batches and bounded the same way; the task is started by the first
//! record as by the first lease.
//!
//! # Reconnect checks
//!
//! After any reconnect of a client's command connection, [`check`] sends
//! one batched renewal of every lease the client holds (fixed leases only
//! checked, not extended): a server that restarted without persistence, or
//! failed over, is noticed at once instead of at the next renewal.
//!
//! # Where the task runs
//!
//! Renewal tasks run on one small runtime of their own, on a thread named
//! `leasehold-watchdog`, so a lease is renewed whichever runtime its client
//! lives on, and the end of one runtime does not stop the renewal of
//! another's leases. A lease whose client's runtime is gone fails to renew
//! and is declared lost.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;

use super::lease::Lease;
use super::registry::Registry;
use super::FastMap;
use crate::error::{Error, Result};

mod batch;
mod cycle;
mod renewal;
mod send;
mod verdict;
pub(crate) use cycle::check;
use cycle::{renewal_runtime, run};
pub(crate) use renewal::{ttl_ms, Packed, Renewal};
pub(crate) use verdict::gone_entries;

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
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    timeout: Duration,
    interval: Duration,
    batch_size: usize,
    /// Registered leases, by address. Changed by `register` / `deregister`
    /// (through the lease, which keeps its own `registered` flag).
    leases: FastMap<usize, Arc<Lease>>,
    /// Client records renewed by the cycle, by address. Changed when a
    /// client starts and when it shuts down or closes.
    records: FastMap<usize, std::sync::Weak<Registry>>,
    /// The renewal task, started with the first lease.
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Renewal script calls sent so far.
    calls: AtomicU64,
    /// Lease renewals that got no answer in time, so far (`give_up`).
    failures: AtomicU64,
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
        super::lease_millis(timeout)?;
        Ok(Watchdog {
            inner: Arc::new(Inner {
                timeout,
                interval: timeout / 3,
                batch_size: DEFAULT_BATCH_SIZE,
                leases: FastMap::default(),
                records: FastMap::default(),
                task: Mutex::new(None),
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
        let mut task = self.inner.task.lock();
        if task.as_ref().map_or(true, |t| t.is_finished()) {
            *task = Some(renewal_runtime().spawn(run(Arc::downgrade(&self.inner))));
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

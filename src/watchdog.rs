//! Lease renewal: one registry and one task for every lease held through
//! a [`Watchdog`], however many locks and clients.
//!
//! # What it uses
//!
//! The `renew` script (`scripts/renew.lua`): for each (key, field) pair it
//! re-sets the lease if the field is still in the hash, and reports 0 if it
//! is gone. One call carries a batch of up to `batch_size` pairs, all on one
//! client's connection; on a Redis Cluster a batch also never spans two hash
//! slots (a script's keys must share one).
//!
//! # The cycle
//!
//! Every `timeout / 3` the task takes a snapshot of the registry, splits it
//! into batches and sends them all at once, each bounded by
//! `timeout / 6`. For each lease:
//!
//! * renewed: Redis now keeps it until *send time* + `timeout` (send time,
//!   not reply time, so the local view never runs ahead of Redis);
//! * field gone: the lease is lost; it leaves the registry and its guards'
//!   `lost()` completes;
//! * no answer (timeout, connection down): if the lease would expire before
//!   the next cycle's verdict, it is declared lost *now*. With renewals
//!   every `timeout / 3`, each bounded by `timeout / 6`, that is the second
//!   failed renewal in a row, at the latest `5/6 · timeout` after the last
//!   confirmed one: Redis still keeps the lease for at least `timeout / 6`.
//!   A holder cut off from Redis is therefore told before another process
//!   can take the lock (unless its own clock or process stalls for longer).
//!
//! # Registration
//!
//! [`Watchdog::register`] returns a [`Registration`] per hold. Holds of one
//! owner on one lock share one registry entry, counted; the entry leaves
//! the registry when its last `Registration` is dropped, which the lock
//! guard does in the same step as it releases (so renewal never outlives an
//! unlock), or when the lease is found lost.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use dashmap::DashMap;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::client::Conn;
use crate::error::{Error, Result};
use crate::scripts::Scripts;
use fred::bytes_utils::Str;
use fred::types::{Key, Value};

/// Renews the leases of locks taken without a fixed lease, in batches, and
/// tells their guards when a lease is lost.
///
/// A client builds its own watchdog unless it is given one with
/// [`ClientBuilder::watchdog`](crate::ClientBuilder::watchdog); several
/// clients (for example to different Redis servers) can share one, so the
/// process runs a single renewal task. The task starts with the first
/// lease and ends when the last handle is dropped.
///
/// Renewal runs every `timeout / 3`. A lease that cannot be confirmed in
/// time (two failed renewals in a row) is declared lost at least
/// `timeout / 6` before Redis would expire it.
///
/// # Example
///
/// ```no_run
/// use std::time::Duration;
/// use leasehold::{Client, Watchdog};
///
/// # async fn f() -> leasehold::Result<()> {
/// let watchdog = Watchdog::new(Duration::from_secs(30))?.with_batch_size(500)?;
/// let a = Client::builder().url("redis://127.0.0.1:6379").watchdog(watchdog.clone()).build().await?;
/// let b = Client::builder().url("redis://127.0.0.1:6380").watchdog(watchdog.clone()).build().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Watchdog {
    inner: Arc<Inner>,
}

/// One hold's claim on a watchdog lease. Dropping it gives the claim back;
/// the last claim removes the lease from the registry.
#[derive(Debug)]
pub(crate) struct Registration {
    inner: Arc<Inner>,
    key: LeaseKey,
    lease: Arc<Lease>,
}

/// The lost signal of one owner's hold(s) on one lock, shared with guards.
#[derive(Debug)]
pub(crate) struct LeaseState {
    /// Set once, by the watchdog (or at a fixed lease's deadline).
    lost: AtomicBool,
    notify: Notify,
    /// Until when Redis is known to keep the lease. Written by the
    /// acquiring task and by the watchdog's renewals.
    valid_until: Mutex<Instant>,
    /// A fixed lease is never renewed: it is lost at `valid_until`.
    fixed: bool,
}

#[derive(Debug)]
struct Inner {
    timeout: Duration,
    batch_size: usize,
    /// Leases by (connection, key, field). Changed by `register`, by the
    /// drop of a `Registration` and by the renewal task (on loss).
    leases: DashMap<LeaseKey, Slot>,
    /// The renewal task, started with the first lease.
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Renewal script calls sent so far.
    calls: AtomicU64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct LeaseKey {
    conn: u64,
    key: String,
    field: String,
}

#[derive(Debug)]
struct Slot {
    lease: Arc<Lease>,
    holds: usize,
}

#[derive(Debug)]
struct Lease {
    conn: Arc<Conn>,
    /// Reference-counted, so a renewal batch copies no bytes.
    key: Key,
    field: Str,
    state: Arc<LeaseState>,
}

/// Default number of leases renewed by one script call.
pub(crate) const DEFAULT_BATCH_SIZE: usize = 1000;
/// The shortest timeout accepted: renewal runs every timeout / 3.
const MIN_TIMEOUT: Duration = Duration::from_millis(30);

// === impl Watchdog ===

impl Watchdog {
    /// A watchdog that keeps leases for `timeout` and renews them every
    /// `timeout / 3`.
    ///
    /// Returns [`Error::InvalidArgument`] if `timeout` is under 30 ms or
    /// does not fit in whole milliseconds.
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
        crate::lock::lease_millis(timeout)?;
        Ok(Watchdog {
            inner: Arc::new(Inner {
                timeout,
                batch_size: DEFAULT_BATCH_SIZE,
                leases: DashMap::new(),
                task: Mutex::new(None),
                calls: AtomicU64::new(0),
            }),
        })
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
        let inner = Arc::get_mut(&mut self.inner)
            .ok_or_else(|| Error::invalid("set the batch size before sharing the watchdog"))?;
        inner.batch_size = batch_size;
        Ok(self)
    }

    /// How long a renewed lease lasts in Redis.
    ///
    /// # Example
    ///
    /// ```
    /// # use std::time::Duration;
    /// let wd = leasehold::Watchdog::new(Duration::from_secs(9)).unwrap();
    /// assert_eq!(wd.renew_interval(), Duration::from_secs(3));
    /// ```
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// How often leases are renewed: `timeout / 3`.
    ///
    /// # Example
    ///
    /// ```
    /// # use std::time::Duration;
    /// let wd = leasehold::Watchdog::new(Duration::from_secs(30)).unwrap();
    /// assert_eq!(wd.renew_interval(), Duration::from_secs(10));
    /// ```
    pub fn renew_interval(&self) -> Duration {
        self.inner.timeout / 3
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

    /// Registers one hold of `field` on `key`, acquired with a request sent
    /// at `sent`. Must be called inside a tokio runtime (it may start the
    /// renewal task).
    pub(crate) fn register(
        &self,
        conn: &Arc<Conn>,
        key: &str,
        field: &str,
        sent: Instant,
    ) -> Registration {
        let lease_key = LeaseKey {
            conn: conn.id,
            key: key.to_owned(),
            field: field.to_owned(),
        };
        let valid_until = sent + self.inner.timeout;
        let lease = {
            let mut slot = self
                .inner
                .leases
                .entry(lease_key.clone())
                .or_insert_with(|| Slot {
                    lease: Arc::new(Lease {
                        conn: conn.clone(),
                        key: key.into(),
                        field: field.into(),
                        state: LeaseState::new(valid_until, false),
                    }),
                    holds: 0,
                });
            slot.holds += 1;
            slot.lease.state.extend_to(valid_until);
            slot.lease.clone()
        };
        self.start_task();
        Registration {
            inner: self.inner.clone(),
            key: lease_key,
            lease,
        }
    }

    /// Stops renewing every lease of one connection (client shutdown).
    pub(crate) fn forget_conn(&self, conn: u64) {
        self.inner.leases.retain(|k, _| k.conn != conn);
    }

    /// Starts the renewal task, or starts it again if the runtime it ran
    /// on has shut down.
    fn start_task(&self) {
        let mut task = self.inner.task.lock();
        if task.as_ref().map_or(true, |t| t.is_finished()) {
            *task = Some(tokio::spawn(run(Arc::downgrade(&self.inner))));
        }
    }
}

impl Inner {
    fn interval(&self) -> Duration {
        self.timeout / 3
    }

    /// How long one renewal call may take before it counts as failed.
    fn renew_timeout(&self) -> Duration {
        self.timeout / 6
    }

    /// One renewal cycle over a snapshot of the registry.
    async fn cycle(self: &Arc<Self>) {
        let mut groups: BTreeMap<(u64, u16), Vec<Arc<Lease>>> = BTreeMap::new();
        for slot in self.leases.iter() {
            let lease = slot.lease.clone();
            let slot_id = if lease.conn.clustered {
                lease.key.cluster_hash()
            } else {
                0
            };
            groups
                .entry((lease.conn.id, slot_id))
                .or_default()
                .push(lease);
        }
        let mut batches = JoinSet::new();
        for (_, leases) in groups {
            for chunk in leases.chunks(self.batch_size) {
                batches.spawn(self.clone().renew(chunk.to_vec()));
            }
        }
        while batches.join_next().await.is_some() {}
    }

    /// Renews one batch (all on one connection and slot).
    async fn renew(self: Arc<Self>, batch: Vec<Arc<Lease>>) {
        let conn = batch[0].conn.clone();
        let mut keys = Vec::with_capacity(batch.len());
        let mut args: Vec<Value> = Vec::with_capacity(batch.len() + 1);
        args.push(
            crate::lock::lease_millis(self.timeout)
                .unwrap_or(i64::MAX)
                .into(),
        );
        for lease in &batch {
            keys.push(lease.key.clone());
            args.push(Value::String(lease.field.clone()));
        }
        let sent = Instant::now();
        self.calls.fetch_add(1, Ordering::Relaxed);
        let reply = tokio::time::timeout(
            self.renew_timeout(),
            Scripts::get()
                .renew
                .run::<Vec<i64>>(&conn.redis, keys, args),
        )
        .await;
        match reply {
            Ok(Ok(renewed)) if renewed.len() == batch.len() => {
                for (lease, renewed) in batch.iter().zip(renewed) {
                    if renewed == 1 {
                        lease.state.extend_to(sent + self.timeout);
                    } else {
                        self.declare_lost(lease, "the lock's field is gone");
                    }
                }
            }
            other => {
                let why = match other {
                    Ok(Ok(_)) => "renewal reply had the wrong length".to_owned(),
                    Ok(Err(e)) => e.to_string(),
                    Err(_) => "renewal timed out".to_owned(),
                };
                tracing::warn!(error = %why, leases = batch.len(), "lease renewal failed");
                // The next cycle sends at about `sent + interval` and has
                // its verdict `renew_timeout` later. A lease that would not
                // outlive that verdict (with some slack for a late tick) is
                // declared lost now, while Redis still keeps it.
                let next_verdict =
                    sent + self.interval() + self.renew_timeout() + self.timeout / 12;
                for lease in &batch {
                    if lease.state.valid_until() <= next_verdict {
                        self.declare_lost(lease, "renewal could not be confirmed in time");
                    }
                }
            }
        }
    }

    /// Removes `lease` from the registry, if it is still there, and tells
    /// its guards. A lease its holders already gave back is left alone.
    fn declare_lost(&self, lease: &Arc<Lease>, why: &str) {
        let key = LeaseKey {
            conn: lease.conn.id,
            key: lease.key.as_str().unwrap_or_default().to_owned(),
            field: lease.field.to_string(),
        };
        let removed = self
            .leases
            .remove_if(&key, |_, slot| Arc::ptr_eq(&slot.lease, lease))
            .is_some();
        if removed {
            tracing::warn!(key = %key.key, field = %key.field, why, "lease lost");
            lease.state.mark_lost();
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

/// The renewal task: holds only a weak handle, so it ends with the
/// watchdog.
async fn run(inner: Weak<Inner>) {
    let Some(interval) = inner.upgrade().map(|i| i.interval()) else {
        return;
    };
    let mut ticker = tokio::time::interval_at(Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        inner.cycle().await;
    }
}

// === impl Registration ===

impl Registration {
    /// The lost signal shared by the guards of this lease.
    pub(crate) fn state(&self) -> &Arc<LeaseState> {
        &self.lease.state
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let lease = &self.lease;
        self.inner.leases.remove_if_mut(&self.key, |_, slot| {
            if !Arc::ptr_eq(&slot.lease, lease) {
                return false; // lost and replaced: not ours
            }
            slot.holds -= 1;
            slot.holds == 0
        });
    }
}

// === impl LeaseState ===

impl LeaseState {
    pub(crate) fn new(valid_until: Instant, fixed: bool) -> Arc<LeaseState> {
        Arc::new(LeaseState {
            lost: AtomicBool::new(false),
            notify: Notify::new(),
            valid_until: Mutex::new(valid_until),
            fixed,
        })
    }

    /// A lost signal with no deadline (an epoch of holds).
    pub(crate) fn signal() -> Arc<LeaseState> {
        LeaseState::new(Instant::now(), false)
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire) || (self.fixed && Instant::now() >= self.valid_until())
    }

    /// Completes when the lease is lost (see [`LeaseState::is_lost`]).
    pub(crate) async fn lost(&self) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_lost() {
                return;
            }
            if self.fixed {
                tokio::select! {
                    _ = notified => {}
                    _ = tokio::time::sleep_until(self.valid_until()) => {}
                }
            } else {
                notified.await;
            }
        }
    }

    pub(crate) fn mark_lost(&self) {
        self.lost.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    fn valid_until(&self) -> Instant {
        *self.valid_until.lock()
    }

    fn extend_to(&self, until: Instant) {
        let mut valid = self.valid_until.lock();
        if until > *valid {
            *valid = until;
        }
    }
}

//! The lock verbs of the blocking API, written once: [`LockHandle`] over
//! the async [`crate::LockHandle`] of any lock kind at one key, and what
//! is particular to a kind (a fenced lock's token, a fair lock's keys).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Inner, LockGuard};
use crate::error::Result;
use crate::guard::LeaseSignal;
use crate::handle::must_acquire;
use crate::handle::raw::RawSingle;
use crate::handle::Holder;

/// A blocking lock of kind `R`: the async [`crate::LockHandle`] of the
/// same kind, by name, whose every call blocks the calling thread (the
/// thread is the owner). Cheap to clone. See the aliases [`Lock`],
/// [`FairLock`], [`FencedLock`], [`ReadLock`] and [`WriteLock`].
///
/// # Example
///
/// ```no_run
/// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
/// let lock = client.lock("orders:42");
/// if let Some(guard) = lock.try_lock()? {
///     // … critical section …
///     guard.unlock()?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct LockHandle<R> {
    lock: crate::LockHandle<R>,
    inner: Arc<Inner>,
}

/// A blocking [`Lock`](crate::Lock).
///
/// # Example
///
/// ```no_run
/// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
/// let guard = client.lock("orders:42").lock()?;
/// # Ok(()) }
/// ```
pub type Lock = LockHandle<crate::raw::Unfair>;

/// A blocking [`FairLock`](crate::FairLock): waiters are served in arrival
/// order, across threads, clients and processes.
///
/// # Example
///
/// ```no_run
/// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
/// let guard = client.fair_lock("printer").lock()?;
/// # Ok(()) }
/// ```
pub type FairLock = LockHandle<crate::raw::Fair>;

/// A blocking [`FencedLock`](crate::FencedLock): every guard carries a
/// token ([`LockGuard::token`]) larger than all taken before.
///
/// # Example
///
/// ```no_run
/// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
/// let token = client.fenced_lock("ledger").lock()?.token();
/// # Ok(()) }
/// ```
pub type FencedLock = LockHandle<crate::raw::Fenced>;

/// The read half of a blocking [`ReadWriteLock`](super::ReadWriteLock).
///
/// # Example
///
/// ```no_run
/// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
/// let guard = client.read_write_lock("config").read().lock()?;
/// # Ok(()) }
/// ```
pub type ReadLock = LockHandle<crate::raw::Read>;

/// The write half of a blocking [`ReadWriteLock`](super::ReadWriteLock).
///
/// # Example
///
/// ```no_run
/// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
/// let guard = client.read_write_lock("config").write().lock()?;
/// # Ok(()) }
/// ```
pub type WriteLock = LockHandle<crate::raw::Write>;

// === impl LockHandle ===

impl<R: RawSingle> LockHandle<R> {
    pub(super) fn new(lock: crate::LockHandle<R>, inner: Arc<Inner>) -> LockHandle<R> {
        LockHandle { lock, inner }
    }

    /// The lock's name (without the key prefix).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) {
    /// assert_eq!(client.lock("a").name(), "a");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The Redis key of the lock hash (prefix included).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) {
    /// let key = client.lock("a").key().to_owned();
    /// # }
    /// ```
    pub fn key(&self) -> &str {
        self.lock.key()
    }

    /// The unlock channel (see [`crate::LockHandle::channel`]).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) {
    /// assert!(client.lock("a").channel().starts_with("redisson_lock__channel:"));
    /// # }
    /// ```
    pub fn channel(&self) -> &str {
        self.lock.channel()
    }

    /// Runs `work` under the lock: blocks until the lock is held (a lease
    /// the watchdog renews), runs `work` on this thread, unlocks, and
    /// returns its output — or [`Error::Lost`](crate::Error::Lost) if the
    /// lease was lost before the unlock. Unlike the async
    /// [`with`](crate::LockHandle::with), a running closure cannot be
    /// cancelled: check `lease.is_lost()` where a stop matters.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let written = client.lock("orders:42").with(|lease| {
    ///     let mut written = 0;
    ///     for _batch in 0..10 {
    ///         if lease.is_lost() {
    ///             break;
    ///         }
    ///         written += 1; // … write one batch …
    ///     }
    ///     written
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn with<T>(&self, work: impl FnOnce(&LeaseSignal) -> T) -> Result<T> {
        let guard = self.inner.block_on(self.lock.lock())??;
        run(guard, work, &self.inner)
    }

    /// As [`with`](Self::with), waiting at most `wait` for the lock:
    /// `Ok(None)` if it was not acquired in time (`work` is not called).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let done = client.lock("report").try_with_for(Duration::from_secs(1), |_| "done")?;
    /// # Ok(()) }
    /// ```
    pub fn try_with_for<T>(
        &self,
        wait: Duration,
        work: impl FnOnce(&LeaseSignal) -> T,
    ) -> Result<Option<T>> {
        match self.inner.block_on(self.lock.try_lock_for(wait))?? {
            Some(guard) => run(guard, work, &self.inner).map(Some),
            None => Ok(None),
        }
    }

    /// Blocks until this thread holds the lock (see
    /// [`crate::LockHandle::lock`]).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let guard = client.lock("orders:42").lock()?;
    /// guard.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn lock(&self) -> Result<LockGuard> {
        self.take(None, None).map(must_acquire)
    }

    /// Blocks until held, with a fixed `lease` (see
    /// [`crate::LockHandle::lock_with_lease`]).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let guard = client.lock("orders:42").lock_with_lease(Duration::from_secs(10))?;
    /// # Ok(()) }
    /// ```
    pub fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        self.take(Some(lease), None).map(must_acquire)
    }

    /// One try, no wait (see [`crate::LockHandle::try_lock`]).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let guard = client.lock("orders:42").try_lock()?;
    /// # Ok(()) }
    /// ```
    pub fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.take(None, Some(Duration::ZERO))
    }

    /// Blocks up to `wait` for the lock (see
    /// [`crate::LockHandle::try_lock_for`]).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let guard = client.lock("orders:42").try_lock_for(Duration::from_millis(500))?;
    /// # Ok(()) }
    /// ```
    pub fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.take(None, Some(wait))
    }

    /// Blocks until `deadline` at most for the lock (see
    /// [`crate::LockHandle::try_lock_until`]).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::{Duration, Instant};
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let deadline = Instant::now() + Duration::from_secs(1);
    /// let guard = client.lock("orders:42").try_lock_until(deadline)?;
    /// # Ok(()) }
    /// ```
    pub fn try_lock_until(&self, deadline: Instant) -> Result<Option<LockGuard>> {
        self.try_lock_for(deadline.saturating_duration_since(Instant::now()))
    }

    /// Blocks up to `wait`, then holds with a fixed `lease` (see
    /// [`crate::LockHandle::try_lock_with_lease`]).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let lock = client.lock("orders:42");
    /// let guard = lock.try_lock_with_lease(Duration::from_secs(1), Duration::from_secs(10))?;
    /// # Ok(()) }
    /// ```
    pub fn try_lock_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<LockGuard>> {
        self.take(Some(lease), Some(wait))
    }

    /// Whether anyone holds the lock (see [`crate::LockHandle::is_locked`]).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let busy = client.lock("orders:42").is_locked()?;
    /// # Ok(()) }
    /// ```
    pub fn is_locked(&self) -> Result<bool> {
        self.inner.block_on(self.lock.is_locked())?
    }

    /// Whether this thread holds the lock.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let lock = client.lock("orders:42");
    /// let _guard = lock.lock()?;
    /// assert!(lock.is_held_by_current_thread()?);
    /// # Ok(()) }
    /// ```
    pub fn is_held_by_current_thread(&self) -> Result<bool> {
        self.inner.block_on(self.lock.is_held_by_current_task())?
    }

    /// How many holds this thread has on the lock.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// assert_eq!(client.lock("orders:42").hold_count()?, 0);
    /// # Ok(()) }
    /// ```
    pub fn hold_count(&self) -> Result<u32> {
        self.inner.block_on(self.lock.hold_count())?
    }

    /// The lock's remaining lease, or `None` if it is not held or has no
    /// expiry.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let left = client.lock("orders:42").remaining_lease()?;
    /// # Ok(()) }
    /// ```
    pub fn remaining_lease(&self) -> Result<Option<Duration>> {
        self.inner.block_on(self.lock.remaining_lease())?
    }

    /// Who holds the lock (see [`crate::LockHandle::holders`]).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// for h in client.lock("orders:42").holders()? {
    ///     println!("{}: {} holds", h.field, h.holds);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn holders(&self) -> Result<Vec<Holder>> {
        self.inner.block_on(self.lock.holders())?
    }

    /// Frees the lock whoever holds it (see
    /// [`crate::LockHandle::force_unlock`]).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let was_locked = client.lock("orders:42").force_unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn force_unlock(&self) -> Result<bool> {
        self.inner.block_on(self.lock.force_unlock())?
    }

    /// One acquire of the async handle, run on this thread.
    fn take(&self, lease: Option<Duration>, wait: Option<Duration>) -> Result<Option<LockGuard>> {
        let guard = self
            .inner
            .block_on(self.lock.raw().acquire(lease, wait))??;
        Ok(guard.map(|g| LockGuard::new(g, self.inner.clone())))
    }
}

// === impl FencedLock ===

impl FencedLock {
    /// The token counter's key (see [`crate::FencedLock::token_key`]).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) {
    /// assert_eq!(client.fenced_lock("a").token_key(), "redisson_lock_token:{a}");
    /// # }
    /// ```
    pub fn token_key(&self) -> &str {
        self.lock.token_key()
    }

    /// The last token handed out for this name (see
    /// [`crate::FencedLock::token`]).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let last = client.fenced_lock("ledger").token()?;
    /// # Ok(()) }
    /// ```
    pub fn token(&self) -> Result<Option<u64>> {
        self.inner.block_on(self.lock.token())?
    }

    /// Deletes the token counter of a retired name (see
    /// [`crate::FencedLock::delete_token`], and read its warning first).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let deleted = client.fenced_lock("order:42").delete_token()?;
    /// # Ok(()) }
    /// ```
    pub fn delete_token(&self) -> Result<bool> {
        self.inner.block_on(self.lock.delete_token())?
    }
}

// === impl FairLock ===

impl FairLock {
    /// The queue's key (see [`crate::FairLock::queue_key`]).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) {
    /// assert_eq!(client.fair_lock("a").queue_key(), "redisson_lock_queue:{a}");
    /// # }
    /// ```
    pub fn queue_key(&self) -> &str {
        self.lock.queue_key()
    }

    /// The waiters' timeouts key (see [`crate::FairLock::timeout_key`]).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) {
    /// assert_eq!(client.fair_lock("a").timeout_key(), "redisson_lock_timeout:{a}");
    /// # }
    /// ```
    pub fn timeout_key(&self) -> &str {
        self.lock.timeout_key()
    }
}

/// Runs `work` on this thread under `guard`, then unlocks.
pub(super) fn run<G: crate::raw::RawGuard, T>(
    guard: G,
    work: impl FnOnce(&LeaseSignal) -> T,
    inner: &Inner,
) -> Result<T> {
    let lease = guard.lease_signal();
    let output = work(&lease);
    inner.block_on(crate::handle::finish(guard, &lease, Some(output)))?
}

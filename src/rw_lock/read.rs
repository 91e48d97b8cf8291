//! The read half of a [`ReadWriteLock`](super::ReadWriteLock).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{must_acquire, Mode, Names};
use crate::error::Result;
use crate::guard::LockGuard;

/// The read half of a [`ReadWriteLock`](super::ReadWriteLock): held by any
/// number of owners at once, never together with another owner's write
/// lock. The same methods as [`Lock`](crate::Lock).
///
/// Reentrant: each acquire by the same [`Owner`](crate::Owner) adds a hold
/// (and a timeout key in Redis), each guard gives one back. An owner that
/// holds the write lock may take the read lock too. Leases are as for
/// [`Lock`](crate::Lock): renewed by the watchdog, or fixed with the
/// `_with_lease` variants; the hash and the owner's timeout keys live as
/// long as its longest live hold needs.
///
/// # Example
///
/// ```no_run
/// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
/// let read = client.read_write_lock("config").read();
/// let outer = read.lock().await?;
/// let inner = read.lock().await?; // same task: re-enters
/// assert_eq!(read.hold_count().await?, 2);
/// inner.unlock().await?;
/// outer.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct ReadLock {
    names: Arc<Names>,
}

// === impl ReadLock ===

impl ReadLock {
    pub(super) fn new(names: Arc<Names>) -> ReadLock {
        ReadLock { names }
    }

    /// The read-write lock's name (without the key prefix).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// assert_eq!(client.read_write_lock("a").read().name(), "a");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.names.name
    }

    /// The Redis key of the lock hash (prefix included).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// let key = client.read_write_lock("a").read().key().to_owned();
    /// # }
    /// ```
    pub fn key(&self) -> &str {
        &self.names.key_str
    }

    /// Waits until the current owner holds a read lock, with a lease the
    /// watchdog renews while the guard lives.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped future holds nothing. If an acquire it sent
    /// succeeds after it was dropped, the hold (and its timeout key) is
    /// given back at once; its subscription reference is released and an
    /// unused wake-up is passed to the next waiter. It loses only its place
    /// in the local queue.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let guard = client.read_write_lock("config").read().lock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<LockGuard> {
        self.acquire(None, None).await.map(must_acquire)
    }

    /// Like [`lock`](Self::lock), with a fixed `lease`: the hold expires
    /// `lease` after it was taken unless given back before; it is never
    /// renewed. [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// if `lease` is under 1 ms.
    ///
    /// # Cancel safety
    ///
    /// As for [`lock`](Self::lock).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let rw = client.read_write_lock("config");
    /// let guard = rw.read().lock_with_lease(Duration::from_secs(10)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        self.acquire(Some(lease), None).await.map(must_acquire)
    }

    /// Takes a read lock if no other owner writes, without waiting.
    /// `Ok(None)` if another owner holds the write lock.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped while the acquire is in
    /// flight and it succeeds, the hold is given back at once.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// if let Some(guard) = client.read_write_lock("config").read().try_lock().await? {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.acquire(None, Some(Duration::ZERO)).await
    }

    /// Waits up to `wait` for a read lock. `Ok(None)` if it was not
    /// acquired in time. `Duration::MAX` waits forever.
    ///
    /// # Cancel safety
    ///
    /// As for [`lock`](Self::lock).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let read = client.read_write_lock("config").read();
    /// if let Some(guard) = read.try_lock_for(Duration::from_millis(500)).await? {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.acquire(None, Some(wait)).await
    }

    /// Waits until `deadline` for a read lock. `Ok(None)` if it was not
    /// acquired in time.
    ///
    /// # Cancel safety
    ///
    /// As for [`lock`](Self::lock).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    /// let guard = client.read_write_lock("config").read().try_lock_until(deadline).await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_lock_until(&self, deadline: Instant) -> Result<Option<LockGuard>> {
        let wait = deadline.saturating_duration_since(Instant::now());
        self.acquire(None, Some(wait)).await
    }

    /// Waits up to `wait` for a read lock, then holds it with a fixed
    /// `lease` (never renewed). `Ok(None)` if it was not acquired in time.
    ///
    /// # Cancel safety
    ///
    /// As for [`lock`](Self::lock).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let read = client.read_write_lock("config").read();
    /// let guard = read.try_lock_with_lease(Duration::from_secs(1), Duration::from_secs(10)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_lock_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<LockGuard>> {
        self.acquire(Some(lease), Some(wait)).await
    }

    /// Whether anyone holds a read lock: the mode is `read`, or `write`
    /// with the writer also reading (Redisson's rule).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let read_locked = client.read_write_lock("config").read().is_locked().await?;
    /// # Ok(()) }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        self.names.is_locked(Mode::Read).await
    }

    /// Whether the current owner ([`Owner::current`](crate::Owner::current))
    /// holds a read lock.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let read = client.read_write_lock("config").read();
    /// let g = read.lock().await?;
    /// assert!(read.is_held_by_current_task().await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_held_by_current_task(&self) -> Result<bool> {
        Ok(self.hold_count().await? > 0)
    }

    /// How many read holds the current owner has (0 if none).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// assert_eq!(client.read_write_lock("config").read().hold_count().await?, 0);
    /// # Ok(()) }
    /// ```
    pub async fn hold_count(&self) -> Result<u32> {
        self.names.hold_count(Mode::Read).await
    }

    /// The lock hash's remaining lease (shared by every holder), or `None`
    /// if it is not held or has no expiry.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let left = client.read_write_lock("config").read().remaining_lease().await?;
    /// # Ok(()) }
    /// ```
    pub async fn remaining_lease(&self) -> Result<Option<Duration>> {
        self.names.remaining_lease().await
    }

    /// Frees the lock if it is in read mode, whoever reads, deleting the
    /// readers' timeout keys, and publishes `0`. Returns whether there was
    /// a read-mode lock to delete (a write-mode lock is left alone, as in
    /// Redisson). Guards of this client's holders report `lost` at once;
    /// guards elsewhere at their watchdog's next renewal (or when their
    /// fixed lease ends).
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, the delete may or may not have happened.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let was_read_locked = client.read_write_lock("config").read().force_unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        self.names.force_unlock(Mode::Read).await
    }

    /// The acquire every method above (and `MultiLock`) goes through.
    pub(crate) async fn acquire(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        self.names.acquire(Mode::Read, lease, wait).await
    }
}

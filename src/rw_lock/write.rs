//! The write half of a [`ReadWriteLock`](super::ReadWriteLock).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{must_acquire, Mode, Names};
use crate::error::Result;
use crate::guard::LockGuard;

/// The write half of a [`ReadWriteLock`](super::ReadWriteLock): held by
/// one owner at a time, never together with another owner's read or
/// write lock. The same methods as [`Lock`](crate::Lock).
///
/// Reentrant: each acquire by the same [`Owner`](crate::Owner) adds a
/// hold, each guard gives one back. The writer may also take the read lock
/// (a downgrade: take the read lock, give the write guard back, keep
/// reading). A read lock cannot be upgraded: an owner holding a read lock
/// gets [`Error::InvalidArgument`](crate::Error::InvalidArgument) from
/// [`lock`](Self::lock) at once, and `Ok(None)` from the bounded variants
/// at their deadline (see [`ReadWriteLock`](super::ReadWriteLock)).
///
/// Readers are preferred: a writer waits while readers keep coming in
/// (see [`ReadWriteLock`](super::ReadWriteLock), *Writer starvation*).
///
/// # Example
///
/// ```no_run
/// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
/// let rw = client.read_write_lock("config");
/// let w = rw.write().lock().await?;
/// let r = rw.read().lock().await?; // the writer may read
/// w.unlock().await?;               // still reading: other readers get in
/// r.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct WriteLock {
    names: Arc<Names>,
}

// === impl WriteLock ===

impl WriteLock {
    pub(super) fn new(names: Arc<Names>) -> WriteLock {
        WriteLock { names }
    }

    /// The read-write lock's name (without the key prefix).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// assert_eq!(client.read_write_lock("a").write().name(), "a");
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
    /// let key = client.read_write_lock("a").write().key().to_owned();
    /// # }
    /// ```
    pub fn key(&self) -> &str {
        &self.names.key_str
    }

    /// Waits until the current owner holds the write lock, with a lease the
    /// watchdog renews while the guard lives.
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) at once,
    /// sending nothing, if the current owner has a live read guard on this
    /// lock in this client: the wait could only end if another task gave
    /// that guard back (a read lock cannot be upgraded). Use
    /// [`try_lock_for`](Self::try_lock_for) to wait for a read guard moved
    /// to another task.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped future holds nothing. If an acquire it sent
    /// succeeds after it was dropped, the hold is given back at once; its subscription reference is released and an
    /// unused wake-up is passed to the next waiter. It loses only its place
    /// in the local queue.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let guard = client.read_write_lock("config").write().lock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<LockGuard> {
        self.acquire(None, None).await.map(must_acquire)
    }

    /// Like [`lock`](Self::lock), with a fixed `lease`: the hold expires
    /// `lease` after it was taken unless given back before; it is never
    /// renewed. [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// if `lease` is under 1 ms, or if the current owner holds a read lock
    /// (as for [`lock`](Self::lock)).
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
    /// let guard = rw.write().lock_with_lease(Duration::from_secs(10)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        self.acquire(Some(lease), None).await.map(must_acquire)
    }

    /// Takes the write lock if nobody else reads or writes (or the current
    /// owner already writes), without waiting. `Ok(None)` otherwise,
    /// including when the current owner holds a read lock.
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
    /// if let Some(guard) = client.read_write_lock("config").write().try_lock().await? {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.acquire(None, Some(Duration::ZERO)).await
    }

    /// Waits up to `wait` for the write lock. `Ok(None)` if it was not
    /// acquired in time. `Duration::MAX` waits forever. If the current
    /// owner holds a read lock, this waits for that hold to be given back
    /// (by a task the guard was moved to), and otherwise returns `Ok(None)`
    /// at the deadline.
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
    /// let write = client.read_write_lock("config").write();
    /// if let Some(guard) = write.try_lock_for(Duration::from_millis(500)).await? {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.acquire(None, Some(wait)).await
    }

    /// Waits until `deadline` for the write lock (as
    /// [`try_lock_for`](Self::try_lock_for)). `Ok(None)` if it was not
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
    /// let guard = client.read_write_lock("config").write().try_lock_until(deadline).await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_lock_until(&self, deadline: Instant) -> Result<Option<LockGuard>> {
        let wait = deadline.saturating_duration_since(Instant::now());
        self.acquire(None, Some(wait)).await
    }

    /// Waits up to `wait` for the write lock (as
    /// [`try_lock_for`](Self::try_lock_for)), then holds it with a fixed
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
    /// let write = client.read_write_lock("config").write();
    /// let guard = write.try_lock_with_lease(Duration::from_secs(1), Duration::from_secs(10)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_lock_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<LockGuard>> {
        self.acquire(Some(lease), Some(wait)).await
    }

    /// Whether anyone holds the write lock (the hash's mode is `write`).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let write_locked = client.read_write_lock("config").write().is_locked().await?;
    /// # Ok(()) }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        self.names.is_locked(Mode::Write).await
    }

    /// Whether the current owner ([`Owner::current`](crate::Owner::current))
    /// holds the write lock.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let write = client.read_write_lock("config").write();
    /// let g = write.lock().await?;
    /// assert!(write.is_held_by_current_task().await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_held_by_current_task(&self) -> Result<bool> {
        Ok(self.hold_count().await? > 0)
    }

    /// How many write holds the current owner has (0 if none).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// assert_eq!(client.read_write_lock("config").write().hold_count().await?, 0);
    /// # Ok(()) }
    /// ```
    pub async fn hold_count(&self) -> Result<u32> {
        self.names.hold_count(Mode::Write).await
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
    /// let left = client.read_write_lock("config").write().remaining_lease().await?;
    /// # Ok(()) }
    /// ```
    pub async fn remaining_lease(&self) -> Result<Option<Duration>> {
        self.names.remaining_lease().await
    }

    /// Frees the lock if it is in write mode, with any read holds its
    /// writer took (deleting their timeout keys), and publishes `1` (waking
    /// every waiter). Returns whether there was a write-mode lock to delete
    /// (a read-mode lock is left alone, as in Redisson). Guards of this
    /// client's holders report `lost` at once; guards elsewhere at their
    /// watchdog's next renewal (or when their fixed lease ends).
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, the delete may or may not have happened.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let was_write_locked = client.read_write_lock("config").write().force_unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        self.names.force_unlock(Mode::Write).await
    }

    /// The acquire every method above (and `MultiLock`) goes through.
    pub(crate) async fn acquire(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        self.names.acquire(Mode::Write, lease, wait).await
    }
}

//! The blocking guard: an async [`LockGuard`](crate::LockGuard) and the
//! client runtime it needs.

use std::sync::Arc;
use std::time::Duration;

use super::Inner;
use crate::error::Result;
use crate::owner::Owner;

/// One hold on a lock, taken through the blocking API; released when
/// dropped (from any thread), as [`crate::LockGuard`].
///
/// It keeps its client's runtime alive, so a guard outliving its
/// [`Client`](super::Client) handle still releases and is still renewed.
///
/// # Example
///
/// ```no_run
/// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
/// let guard = client.lock("orders:42").lock()?;
/// std::thread::spawn(move || {
///     // … finish the work on another thread …
///     guard.unlock()
/// }).join().unwrap()?;
/// # Ok(()) }
/// ```
#[must_use = "the lock is released when the guard is dropped, here at once: bind it to a name (`let _guard = …`); `let _ = …` drops it at once too"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct LockGuard {
    /// Dropped first: its release goes to the runtime `inner` keeps.
    guard: crate::LockGuard,
    inner: Arc<Inner>,
}

// === impl LockGuard ===

impl LockGuard {
    pub(super) fn new(guard: crate::LockGuard, inner: Arc<Inner>) -> LockGuard {
        LockGuard { guard, inner }
    }

    /// Releases this hold and reports the outcome (see
    /// [`LockGuard::unlock`](crate::LockGuard::unlock)). Inside a tokio
    /// runtime it returns [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// and the hold is given back in the background, as a drop does.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// client.lock("orders:42").lock()?.unlock()?;
    /// # Ok(()) }
    /// ```
    pub fn unlock(self) -> Result<()> {
        let LockGuard { guard, inner } = self;
        inner.block_on(guard.unlock())?
    }

    /// Extends a fixed lease (see
    /// [`LockGuard::extend`](crate::LockGuard::extend)).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let mut guard = client.lock("report").lock_with_lease(Duration::from_secs(10))?;
    /// guard.extend(Duration::from_secs(30))?;
    /// # Ok(()) }
    /// ```
    pub fn extend(&mut self, lease: Duration) -> Result<()> {
        self.inner.block_on(self.guard.extend(lease))?
    }

    /// Whether the lease is known to be lost (see
    /// [`LockGuard::is_lost`](crate::LockGuard::is_lost)).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let guard = client.lock("orders:42").lock()?;
    /// assert!(!guard.is_lost());
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Since when the lease is lost (see
    /// [`LockGuard::lost_since`](crate::LockGuard::lost_since)).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let guard = client.lock("orders:42").lock()?;
    /// assert!(guard.lost_since().is_none());
    /// # Ok(()) }
    /// ```
    pub fn lost_since(&self) -> Option<tokio::time::Instant> {
        self.guard.lost_since()
    }

    /// The lock's name (without the key prefix).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// assert_eq!(client.lock("a").lock()?.name(), "a");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        self.guard.name()
    }

    /// The lock's Redis key (prefix included).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let guard = client.lock("a").lock()?;
    /// assert_eq!(guard.key(), client.lock("a").key());
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &str {
        self.guard.key()
    }

    /// The fencing token of a fenced lock's hold (see
    /// [`crate::LockGuard::token`]); `None` for the other kinds.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let token = client.fenced_lock("ledger").lock()?.token();
    /// assert!(token.is_some());
    /// # Ok(()) }
    /// ```
    pub fn token(&self) -> Option<u64> {
        self.guard.token()
    }

    /// The owner the hold belongs to: the thread that took it.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let guard = client.lock("a").lock()?;
    /// assert_eq!(guard.owner(), leasehold::Owner::current());
    /// # Ok(()) }
    /// ```
    pub fn owner(&self) -> Owner {
        self.guard.owner()
    }
}

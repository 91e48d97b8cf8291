//! The blocking read-write lock: its two halves are blocking
//! [`LockHandle`]s.

use std::sync::Arc;

use super::{Inner, LockHandle, ReadLock, WriteLock};

/// A blocking [`ReadWriteLock`](crate::ReadWriteLock): many readers or one
/// writer, across threads and processes. Cheap to clone.
///
/// # Example
///
/// ```no_run
/// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
/// let rw = client.read_write_lock("config");
/// let r = rw.read().lock()?;
/// r.unlock()?;
/// let w = rw.write().lock()?;
/// w.unlock()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct ReadWriteLock {
    rw: crate::ReadWriteLock,
    inner: Arc<Inner>,
}

impl ReadWriteLock {
    pub(super) fn new(rw: crate::ReadWriteLock, inner: Arc<Inner>) -> ReadWriteLock {
        ReadWriteLock { rw, inner }
    }

    /// The read half: shared with other readers.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let guard = client.read_write_lock("config").read().lock()?;
    /// # Ok(()) }
    /// ```
    pub fn read(&self) -> ReadLock {
        LockHandle::new(self.rw.read(), self.inner.clone())
    }

    /// The write half: excludes readers and other writers.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let guard = client.read_write_lock("config").write().lock()?;
    /// # Ok(()) }
    /// ```
    pub fn write(&self) -> WriteLock {
        LockHandle::new(self.rw.write(), self.inner.clone())
    }

    /// The name given to [`Client::read_write_lock`](super::Client::read_write_lock).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) {
    /// assert_eq!(client.read_write_lock("a").name(), "a");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.rw.name()
    }

    /// The Redis key of the lock hash (prefix included).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) {
    /// assert_eq!(client.read_write_lock("a").key(), "a");
    /// # }
    /// ```
    pub fn key(&self) -> &str {
        self.rw.key()
    }
}

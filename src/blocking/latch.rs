//! The blocking count-down latch.

use std::sync::Arc;
use std::time::Duration;

use super::Inner;
use crate::error::Result;

/// A blocking [`CountDownLatch`](crate::CountDownLatch): threads wait until
/// a count set once reaches zero. Cheap to clone.
///
/// # Example
///
/// ```no_run
/// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
/// let latch = client.count_down_latch("boot");
/// latch.try_set_count(1)?;
/// latch.count_down()?;
/// latch.wait()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct CountDownLatch {
    latch: crate::CountDownLatch,
    inner: Arc<Inner>,
}

impl CountDownLatch {
    pub(super) fn new(latch: crate::CountDownLatch, inner: Arc<Inner>) -> CountDownLatch {
        CountDownLatch { latch, inner }
    }

    /// The request record's name (without the key prefix).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) {
    /// assert_eq!(client.count_down_latch("boot").name(), "boot");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.latch.name()
    }

    /// Sets the count if the request record has none (see
    /// [`CountDownLatch::try_set_count`](crate::CountDownLatch::try_set_count)).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let set = client.count_down_latch("boot").try_set_count(3)?;
    /// # Ok(()) }
    /// ```
    pub fn try_set_count(&self, count: u64) -> Result<bool> {
        self.inner.block_on(self.latch.try_set_count(count))?
    }

    /// Counts down by one (see
    /// [`CountDownLatch::count_down`](crate::CountDownLatch::count_down)).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// client.count_down_latch("boot").count_down()?;
    /// # Ok(()) }
    /// ```
    pub fn count_down(&self) -> Result<()> {
        self.inner.block_on(self.latch.count_down())?
    }

    /// Deletes the latch, waking its waiters; returns whether there was a
    /// count (see [`CountDownLatch::delete`](crate::CountDownLatch::delete)).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let deleted = client.count_down_latch("boot").delete()?;
    /// # Ok(()) }
    /// ```
    pub fn delete(&self) -> Result<bool> {
        self.inner.block_on(self.latch.delete())?
    }

    /// The count left (0 once released, or if never set).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let left = client.count_down_latch("boot").count()?;
    /// # Ok(()) }
    /// ```
    pub fn count(&self) -> Result<u64> {
        self.inner.block_on(self.latch.count())?
    }

    /// Blocks until the count is zero (see
    /// [`CountDownLatch::wait`](crate::CountDownLatch::wait)).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// client.count_down_latch("boot").wait()?;
    /// # Ok(()) }
    /// ```
    pub fn wait(&self) -> Result<()> {
        self.inner.block_on(self.latch.wait())?
    }

    /// Blocks up to `wait` for the count to reach zero: whether it did.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let ready = client.count_down_latch("boot").wait_for(Duration::from_secs(5))?;
    /// # Ok(()) }
    /// ```
    pub fn wait_for(&self, wait: Duration) -> Result<bool> {
        self.inner.block_on(self.latch.wait_for(wait))?
    }
}

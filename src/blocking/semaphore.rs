//! The blocking semaphore and its permit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::handle::run;
use super::Inner;
use crate::error::Result;
use crate::guard::LeaseSignal;

/// A blocking [`Semaphore`](crate::Semaphore) with leased permits, across
/// threads and processes. Cheap to clone.
///
/// # Example
///
/// ```no_run
/// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
/// let sem = client.semaphore("workers");
/// sem.try_set_permits(2)?;
/// let permit = sem.acquire()?;
/// permit.release()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Semaphore {
    sem: crate::Semaphore,
    inner: Arc<Inner>,
}

/// A permit taken through the blocking API; given back when dropped (from
/// any thread), as [`crate::Permit`].
///
/// # Example
///
/// ```no_run
/// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
/// let permit = client.semaphore("workers").acquire()?;
/// println!("{}", permit.id());
/// permit.release()?;
/// # Ok(()) }
/// ```
#[must_use = "the permit is given back when it is dropped, here at once: bind it to a name (`let _permit = …`)"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct Permit {
    /// Dropped first: its release goes to the runtime `inner` keeps.
    permit: crate::Permit,
    inner: Arc<Inner>,
}

impl Semaphore {
    pub(super) fn new(sem: crate::Semaphore, inner: Arc<Inner>) -> Semaphore {
        Semaphore { sem, inner }
    }

    /// The semaphore's name (without the key prefix).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) {
    /// assert_eq!(client.semaphore("workers").name(), "workers");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.sem.name()
    }

    /// Sets the number of permits if none was set (see
    /// [`Semaphore::try_set_permits`](crate::Semaphore::try_set_permits)).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let set = client.semaphore("workers").try_set_permits(3)?;
    /// # Ok(()) }
    /// ```
    pub fn try_set_permits(&self, permits: u64) -> Result<bool> {
        self.inner.block_on(self.sem.try_set_permits(permits))?
    }

    /// Adds (or, negative, removes) permits.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// client.semaphore("workers").add_permits(2)?;
    /// # Ok(()) }
    /// ```
    pub fn add_permits(&self, delta: i64) -> Result<()> {
        self.inner.block_on(self.sem.add_permits(delta))?
    }

    /// Frees every permit out, whoever holds it; returns how many were out
    /// (see [`Semaphore::force_release_all`](crate::Semaphore::force_release_all)).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let freed = client.semaphore("workers").force_release_all()?;
    /// # Ok(()) }
    /// ```
    pub fn force_release_all(&self) -> Result<u64> {
        self.inner.block_on(self.sem.force_release_all())?
    }

    /// How many permits are free now.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let free = client.semaphore("workers").available_permits()?;
    /// # Ok(()) }
    /// ```
    pub fn available_permits(&self) -> Result<u64> {
        self.inner.block_on(self.sem.available_permits())?
    }

    /// Blocks until a permit is held (a lease the watchdog renews).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let permit = client.semaphore("workers").acquire()?;
    /// # Ok(()) }
    /// ```
    pub fn acquire(&self) -> Result<Permit> {
        let permit = self.inner.block_on(self.sem.acquire())??;
        Ok(self.permit(permit))
    }

    /// Blocks until a permit is held, with a fixed `lease`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let permit = client.semaphore("workers").acquire_with_lease(Duration::from_secs(60))?;
    /// # Ok(()) }
    /// ```
    pub fn acquire_with_lease(&self, lease: Duration) -> Result<Permit> {
        let permit = self.inner.block_on(self.sem.acquire_with_lease(lease))??;
        Ok(self.permit(permit))
    }

    /// Takes a permit if one is free, without waiting.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let permit = client.semaphore("workers").try_acquire()?;
    /// # Ok(()) }
    /// ```
    pub fn try_acquire(&self) -> Result<Option<Permit>> {
        let permit = self.inner.block_on(self.sem.try_acquire())??;
        Ok(permit.map(|p| self.permit(p)))
    }

    /// Blocks up to `wait` for a permit.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let permit = client.semaphore("workers").try_acquire_for(Duration::from_secs(1))?;
    /// # Ok(()) }
    /// ```
    pub fn try_acquire_for(&self, wait: Duration) -> Result<Option<Permit>> {
        let permit = self.inner.block_on(self.sem.try_acquire_for(wait))??;
        Ok(permit.map(|p| self.permit(p)))
    }

    /// Blocks until `deadline` at most for a permit.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::{Duration, Instant};
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let deadline = Instant::now() + Duration::from_secs(1);
    /// let permit = client.semaphore("workers").try_acquire_until(deadline)?;
    /// # Ok(()) }
    /// ```
    pub fn try_acquire_until(&self, deadline: Instant) -> Result<Option<Permit>> {
        self.try_acquire_for(deadline.saturating_duration_since(Instant::now()))
    }

    /// Blocks up to `wait` for a permit, then holds it with a fixed `lease`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let sem = client.semaphore("workers");
    /// let permit = sem.try_acquire_with_lease(Duration::from_secs(1), Duration::from_secs(30))?;
    /// # Ok(()) }
    /// ```
    pub fn try_acquire_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<Permit>> {
        let permit = self
            .inner
            .block_on(self.sem.try_acquire_with_lease(wait, lease))??;
        Ok(permit.map(|p| self.permit(p)))
    }

    /// Runs `work` on this thread under a permit, then gives it back (as
    /// the blocking [`LockHandle::with`](super::LockHandle::with)).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let n = client.semaphore("workers").with(|_lease| 42)?;
    /// # Ok(()) }
    /// ```
    pub fn with<T>(&self, work: impl FnOnce(&LeaseSignal) -> T) -> Result<T> {
        let permit = self.inner.block_on(self.sem.acquire())??;
        run(permit, work, &self.inner)
    }

    /// As [`with`](Self::with), waiting at most `wait` for a permit:
    /// `Ok(None)` if none was free in time (`work` is not called).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let done = client.semaphore("workers").try_with_for(Duration::from_secs(1), |_| ())?;
    /// # Ok(()) }
    /// ```
    pub fn try_with_for<T>(
        &self,
        wait: Duration,
        work: impl FnOnce(&LeaseSignal) -> T,
    ) -> Result<Option<T>> {
        match self.inner.block_on(self.sem.try_acquire_for(wait))?? {
            Some(permit) => run(permit, work, &self.inner).map(Some),
            None => Ok(None),
        }
    }

    fn permit(&self, permit: crate::Permit) -> Permit {
        Permit {
            permit,
            inner: self.inner.clone(),
        }
    }
}

impl Permit {
    /// The permit id (see [`crate::Permit::id`]).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// assert_eq!(client.semaphore("workers").acquire()?.id().len(), 32);
    /// # Ok(()) }
    /// ```
    pub fn id(&self) -> &str {
        self.permit.id()
    }

    /// Gives the permit back and reports the outcome (see
    /// [`crate::Permit::release`]).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// client.semaphore("workers").acquire()?.release()?;
    /// # Ok(()) }
    /// ```
    pub fn release(self) -> Result<()> {
        let Permit { permit, inner } = self;
        inner.block_on(permit.release())?
    }

    /// Whether the permit's lease is known to be lost.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// assert!(!client.semaphore("workers").acquire()?.is_lost());
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.permit.is_lost()
    }

    /// The semaphore's name (without the key prefix).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// assert_eq!(client.semaphore("workers").acquire()?.name(), "workers");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        self.permit.name()
    }
}

//! The guard of one semaphore permit.
//!
//! A [`Permit`] owns one hold (see `core::hold`) of its own lease: the
//! permit id in the semaphore's zset. Dropping it gives the permit back in
//! the background; [`Permit::release`] gives it back and reports the
//! outcome.

use std::future::Future;
use std::sync::Arc;

use crate::core::kind::Hold;
use crate::error::{Error, Result};
use crate::guard::LeaseSignal;
use crate::handle::raw::{sealed, RawGuard};

/// One permit of a [`Semaphore`](crate::Semaphore), given back when
/// dropped.
///
/// A permit belongs to no task: it can be moved anywhere and released from
/// any task. [`release`](Permit::release) gives it back and reports the
/// outcome; dropping it gives it back in the background. Either way its
/// lease stops being renewed at once.
///
/// [`is_lost`](Permit::is_lost) and [`lost`](Permit::lost) tell the holder
/// when the permit is gone (another task may then use it): when a renewal
/// finds it gone or expired or cannot be confirmed in time, when its fixed
/// lease may have run out, or when a check after a reconnect finds it gone.
///
/// A permit bound to `_` (`let _ = sem.acquire().await?`) is dropped at
/// once, giving it back: bind it to a name (`let _permit = …`).
///
/// # Example
///
/// ```no_run
/// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
/// let permit = client.semaphore("workers").acquire().await?;
/// tokio::select! {
///     _ = permit.lost() => eprintln!("permit lost: abandon the job"),
///     _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => permit.release().await?,
/// }
/// # Ok(()) }
/// ```
#[must_use = "the permit is given back when it is dropped, here at once: bind it to a name (`let _permit = …`); `let _ = …` drops it at once too"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct Permit {
    /// Gives the permit back when dropped (see `core::hold`).
    hold: Hold,
    /// The permit id: 32 lowercase hex digits.
    id: Arc<str>,
    /// The semaphore's name (without the key prefix) and key.
    name: Arc<str>,
    key: Arc<str>,
}

// === impl Permit ===

impl Permit {
    pub(crate) fn new(hold: Hold, id: Arc<str>, name: Arc<str>, key: Arc<str>) -> Permit {
        Permit {
            hold,
            id,
            name,
            key,
        }
    }

    /// The permit id as Redisson shows it: 32 lowercase hex digits (the
    /// zset member is the same 16 bytes, raw). A Java
    /// `RPermitExpirableSemaphore` can release this permit by this id.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let permit = client.semaphore("workers").acquire().await?;
    /// assert_eq!(permit.id().len(), 32);
    /// # Ok(()) }
    /// ```
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Gives the permit back and reports the outcome; up to one waiter per
    /// client is woken for each free permit. The lease stops being renewed
    /// at once.
    ///
    /// Returns [`Error::NotHeld`] (changing nothing) if the permit was
    /// already gone: reclaimed after its lease ran out, or released by
    /// someone else by its id.
    ///
    /// # Cancel safety
    ///
    /// If this future is dropped, the permit is still given back (in the
    /// background, or settled by a background task if the release was
    /// already sent); only the outcome is not reported. Called outside a
    /// tokio runtime it returns [`Error::NoRuntime`] and gives the permit
    /// back in the background, as a drop does.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let permit = client.semaphore("workers").acquire().await?;
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    // A plain `fn`: an `async fn` would keep the permit twice in the
    // caller's future.
    pub fn release(self) -> impl Future<Output = Result<()>> + Send + 'static {
        let key = self.key;
        let release = self.hold.release();
        async move {
            match release.await {
                Ok(true) => Ok(()),
                Ok(false) => Err(Error::NotHeld {
                    name: key.to_string(),
                }),
                Err(e) => Err(e),
            }
        }
    }

    /// Whether the permit is known to be lost (see the type docs).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let permit = client.semaphore("workers").acquire().await?;
    /// assert!(!permit.is_lost());
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// Completes when the permit is lost: at once if it already is.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let permit = client.semaphore("workers").acquire().await?;
    /// tokio::select! {
    ///     _ = permit.lost() => { /* stop the job */ }
    ///     _ = async { /* the job */ } => {}
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) {
        self.hold.lost().await
    }

    /// The name of the semaphore this permit is of (without the key
    /// prefix).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let permit = client.semaphore("workers").acquire().await?;
    /// assert_eq!(permit.name(), "workers");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Redis key of the semaphore's free count (prefix included).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let permit = client.semaphore("workers").acquire().await?;
    /// assert_eq!(permit.key(), client.semaphore("workers").key());
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl sealed::Sealed for Permit {}

impl RawGuard for Permit {
    fn lease_signal(&self) -> LeaseSignal {
        LeaseSignal::of(&self.hold)
    }

    fn give_back(self) -> impl Future<Output = Result<()>> + Send + 'static {
        self.release()
    }

    fn what(&self) -> String {
        self.key.to_string()
    }
}

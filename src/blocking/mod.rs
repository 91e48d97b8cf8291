//! A blocking API for code without an async runtime: CLI tools, scripts,
//! synchronous services (feature `blocking`).
//!
//! A thin wrapper: every call runs the async API's own future to the end
//! — the one acquire, wait loop, watchdog and release path of the crate —
//! so the blocking API behaves exactly as the async one, wire format
//! included. What it adds:
//!
//! * **A runtime of its own.** Each [`Client`] owns a small multi-thread
//!   tokio runtime with one worker thread (`leasehold-blocking`). A call
//!   runs its future on the *calling* thread (`Runtime::block_on`), so
//!   threads calling at once make progress in parallel and no call hops
//!   to another thread; the worker drives the connections, unlock
//!   messages and background releases. (A current-thread runtime on a
//!   dedicated thread would funnel every call of every thread through
//!   that one thread.)
//! * **The calling thread is the owner.** Each call captures
//!   [`Owner::current`] on the calling thread — outside any runtime, a
//!   stable id of that thread — and runs inside `owner.scope(..)`. So a
//!   thread re-enters the locks it holds, and two threads are two owners
//!   that exclude each other, as `std::sync` users expect. A guard can
//!   still be moved to another thread and unlocked or dropped there.
//! * **Guards release on drop**, from any thread (the drop hands the
//!   release to the client's runtime, as for async guards).
//! * **No blocking inside a runtime.** A call made from inside a tokio
//!   runtime (an async task, `block_on`, `spawn_blocking`) returns
//!   [`Error::InvalidArgument`] at once, sending nothing: blocking a
//!   runtime's thread could deadlock it (a task on it may be the holder),
//!   and tokio would panic. Use the async API there.
//!
//! Dropping the last handle of a client (client, locks and guards) shuts
//! it down: remaining releases are finished and the connections closed.
//!
//! # Operators
//!
//! A blocking client is configured by the same
//! [`ClientBuilder`](crate::ClientBuilder) as an async one, so it keeps
//! the same record in Redis and its long waits are recorded the same way:
//! [`app_name`](crate::ClientBuilder::app_name),
//! [`record_waits_after`](crate::ClientBuilder::record_waits_after),
//! [`detect_deadlocks`](crate::ClientBuilder::detect_deadlocks) and
//! [`client_record`](crate::ClientBuilder::client_record) apply to it
//! before [`build_blocking`](crate::ClientBuilder::build_blocking). With
//! detection on, a blocked [`Lock::lock`] that closes a wait-for cycle
//! returns [`Error::Deadlock`]; [`Client::deadlocks`] lists the cycles.
//!
//! # Example
//!
//! ```no_run
//! # fn main() -> leasehold::Result<()> {
//! let client = leasehold::blocking::Client::connect("redis://127.0.0.1:6379")?;
//! let lock = client.lock("nightly-report");
//!
//! let guard = lock.lock()?;           // blocks until held; the watchdog keeps it
//! let again = lock.lock()?;           // same thread: re-enters
//! drop(again);
//! guard.unlock()?;
//!
//! let n = lock.with(|_lease| 6 * 7)?; // lock, run, unlock
//! assert_eq!(n, 42);
//! client.shutdown()
//! # }
//! ```

mod guard;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use guard::LockGuard;

use crate::error::{Error, Result};
use crate::guard::LeaseSignal;
use crate::lock::Holder;
use crate::operators::Deadlock;
use crate::owner::Owner;
use crate::{Stats, Watchdog};

/// A blocking [`Client`](crate::Client): the same connections and
/// watchdog, driven by a runtime the client owns.
///
/// Cheap to clone; clones share everything.
///
/// # Example
///
/// ```no_run
/// # fn main() -> leasehold::Result<()> {
/// use std::time::Duration;
/// let client = leasehold::Client::builder()
///     .url("redis://127.0.0.1:6379")
///     .key_prefix("app:")
///     .connect_retry(Duration::from_secs(10))
///     .app_name("nightly-report")
///     .detect_deadlocks(true)
///     .build_blocking()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Client {
    inner: Arc<Inner>,
}

/// A blocking [`Lock`](crate::Lock): the same lock, by name. Cheap to
/// clone.
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
pub struct Lock {
    lock: crate::Lock,
    inner: Arc<Inner>,
}

/// The async client and the runtime driving it. Kept alive by every
/// client, lock and guard handle.
#[derive(Debug)]
pub(crate) struct Inner {
    client: crate::Client,
    /// Taken only by the drop.
    runtime: Option<tokio::runtime::Runtime>,
}

// === impl Client ===

impl Client {
    /// Connects with default settings (see
    /// [`ClientBuilder::build_blocking`](crate::ClientBuilder::build_blocking)
    /// for the others).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn main() -> leasehold::Result<()> {
    /// let client = leasehold::blocking::Client::connect("redis://127.0.0.1:6379")?;
    /// # Ok(()) }
    /// ```
    pub fn connect(url: &str) -> Result<Client> {
        crate::Client::builder().url(url).build_blocking()
    }

    /// A handle to the lock called `name` (see
    /// [`Client::lock`](crate::Client::lock)).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) {
    /// assert_eq!(client.lock("a").name(), "a");
    /// # }
    /// ```
    pub fn lock(&self, name: &str) -> Lock {
        Lock {
            lock: self.inner.client.lock(name),
            inner: self.inner.clone(),
        }
    }

    /// The client's uuid (see [`Client::id`](crate::Client::id)).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) {
    /// println!("client {}", client.id());
    /// # }
    /// ```
    pub fn id(&self) -> uuid::Uuid {
        self.inner.client.id()
    }

    /// The watchdog renewing this client's leases.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) {
    /// println!("{} leases renewed", client.watchdog().lease_count());
    /// # }
    /// ```
    pub fn watchdog(&self) -> &Watchdog {
        self.inner.client.watchdog()
    }

    /// What this client has done since it was built (see
    /// [`Client::stats`](crate::Client::stats) and [`Stats`]).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) {
    /// println!("{} acquisitions", client.stats().acquisitions);
    /// # }
    /// ```
    pub fn stats(&self) -> Stats {
        self.inner.client.stats()
    }

    /// The wait-for cycles among every client on this Redis, blocking
    /// and async alike (see [`Client::deadlocks`](crate::Client::deadlocks)):
    /// empty when there is none. Only waits past their client's
    /// [`record_waits_after`](crate::ClientBuilder::record_waits_after)
    /// threshold are recorded. An operator's call: it reads every client
    /// record.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// for cycle in client.deadlocks()? {
    ///     eprintln!("deadlock: {cycle}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn deadlocks(&self) -> Result<Vec<Deadlock>> {
        self.inner.block_on(self.inner.client.deadlocks())?
    }

    /// Gives back every hold, stops renewing, closes the connections (see
    /// [`Client::shutdown`](crate::Client::shutdown)). Dropping the last
    /// handle does the same.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// client.shutdown()?;
    /// assert!(client.is_shut_down());
    /// # Ok(()) }
    /// ```
    pub fn shutdown(&self) -> Result<()> {
        self.inner.block_on(self.inner.client.shutdown())?
    }

    /// Whether [`shutdown`](Self::shutdown) was called.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) {
    /// assert!(!client.is_shut_down());
    /// # }
    /// ```
    pub fn is_shut_down(&self) -> bool {
        self.inner.client.is_shut_down()
    }
}

impl crate::ClientBuilder {
    /// Connects a blocking [`Client`](crate::blocking::Client) with this
    /// configuration, on a runtime of its own (feature `blocking`).
    ///
    /// Returns [`Error::InvalidArgument`] if called inside a tokio runtime
    /// (use [`build`](Self::build) there), and the errors of
    /// [`build`](Self::build).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn main() -> leasehold::Result<()> {
    /// use std::time::Duration;
    /// let client = leasehold::Client::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .app_name("importer")                           // in its record, for operators
    ///     .record_waits_after(Duration::from_millis(500)) // waits recorded past 0.5 s
    ///     .build_blocking()?;
    /// # Ok(()) }
    /// ```
    pub fn build_blocking(self) -> Result<Client> {
        refuse_inside_runtime()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("leasehold-blocking")
            .enable_all()
            .build()
            .map_err(|e| {
                Error::invalid(format!("cannot start the blocking client's runtime: {e}"))
            })?;
        let client = runtime.block_on(self.build())?;
        Ok(Client {
            inner: Arc::new(Inner {
                client,
                runtime: Some(runtime),
            }),
        })
    }
}

// === impl Lock ===

impl Lock {
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

    /// The unlock channel (see [`Lock::channel`](crate::Lock::channel)).
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
    /// returns its output — or [`Error::Lost`] if the lease was lost
    /// before the unlock. Unlike the async
    /// [`Lock::with`](crate::Lock::with), a running closure cannot be
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
    /// [`Lock::lock`](crate::Lock::lock)).
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
        self.guard(self.lock.lock())
    }

    /// Blocks until held, with a fixed `lease` (see
    /// [`Lock::lock_with_lease`](crate::Lock::lock_with_lease)).
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
        self.guard(self.lock.lock_with_lease(lease))
    }

    /// One try, no wait (see [`Lock::try_lock`](crate::Lock::try_lock)).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let guard = client.lock("orders:42").try_lock()?;
    /// # Ok(()) }
    /// ```
    pub fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.maybe_guard(self.lock.try_lock())
    }

    /// Blocks up to `wait` for the lock (see
    /// [`Lock::try_lock_for`](crate::Lock::try_lock_for)).
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
        self.maybe_guard(self.lock.try_lock_for(wait))
    }

    /// Blocks until `deadline` at most for the lock (see
    /// [`Lock::try_lock_until`](crate::Lock::try_lock_until)).
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
    /// [`Lock::try_lock_with_lease`](crate::Lock::try_lock_with_lease)).
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
        self.maybe_guard(self.lock.try_lock_with_lease(wait, lease))
    }

    /// Whether anyone holds the lock.
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

    /// The lock's remaining lease (see
    /// [`Lock::remaining_lease`](crate::Lock::remaining_lease)).
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

    /// Who holds the lock and for how long (see
    /// [`Lock::holders`](crate::Lock::holders)).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// for h in client.lock("orders:42").holders()? {
    ///     println!("{} ({} holds, {:?} left)", h.field, h.holds, h.remaining_lease);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn holders(&self) -> Result<Vec<Holder>> {
        self.inner.block_on(self.lock.holders())?
    }

    /// Deletes the lock whoever holds it (see
    /// [`Lock::force_unlock`](crate::Lock::force_unlock)).
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

    fn guard(&self, acquire: impl Future<Output = Result<crate::LockGuard>>) -> Result<LockGuard> {
        let guard = self.inner.block_on(acquire)??;
        Ok(LockGuard::new(guard, self.inner.clone()))
    }

    fn maybe_guard(
        &self,
        acquire: impl Future<Output = Result<Option<crate::LockGuard>>>,
    ) -> Result<Option<LockGuard>> {
        let guard = self.inner.block_on(acquire)??;
        Ok(guard.map(|g| LockGuard::new(g, self.inner.clone())))
    }
}

/// Runs `work` on this thread under `guard`, then unlocks.
fn run<T>(
    guard: crate::LockGuard,
    work: impl FnOnce(&LeaseSignal) -> T,
    inner: &Inner,
) -> Result<T> {
    let lease = guard.lease_signal();
    let output = work(&lease);
    inner.block_on(guard.finish(Some(output)))?
}

// === impl Inner ===

impl Inner {
    /// Runs `fut` to the end on this thread, as the thread's owner; refuses
    /// (sending nothing) inside a tokio runtime.
    pub(crate) fn block_on<F: Future>(&self, fut: F) -> Result<F::Output> {
        refuse_inside_runtime()?;
        let runtime = self
            .runtime
            .as_ref()
            .unwrap_or_else(|| unreachable!("taken only by the drop"));
        let owner = Owner::current();
        Ok(runtime.block_on(owner.scope(fut)))
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        if tokio::runtime::Handle::try_current().is_err() {
            // Finish releases under way and close the connections.
            let _ = runtime.block_on(self.client.shutdown());
            drop(runtime);
        } else {
            // Inside a runtime nothing may block: pending releases are
            // finished by the engine's teardown path (a fresh connection).
            runtime.shutdown_background();
        }
    }
}

/// A blocking call inside a tokio runtime could deadlock it (and tokio
/// panics on a nested `block_on`): refused.
fn refuse_inside_runtime() -> Result<()> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(Error::invalid(
            "a leasehold::blocking call was made inside a tokio runtime (an async task, \
             block_on or spawn_blocking): use the async API there; nothing was sent",
        ));
    }
    Ok(())
}

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
mod handle;
mod latch;
mod rw_lock;
mod semaphore;

use std::future::Future;
use std::sync::Arc;

pub use guard::LockGuard;
pub use handle::{FairLock, FencedLock, Lock, LockHandle, ReadLock, WriteLock};
pub use latch::CountDownLatch;
pub use rw_lock::ReadWriteLock;
pub use semaphore::{Permit, Semaphore};

use crate::error::{Error, Result};

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
        LockHandle::new(self.inner.client.lock(name), self.inner.clone())
    }

    /// A handle to the fair lock called `name` (see
    /// [`Client::fair_lock`](crate::Client::fair_lock)).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let guard = client.fair_lock("printer").lock()?;
    /// # Ok(()) }
    /// ```
    pub fn fair_lock(&self, name: &str) -> FairLock {
        LockHandle::new(self.inner.client.fair_lock(name), self.inner.clone())
    }

    /// A handle to the fenced lock called `name` (see
    /// [`Client::fenced_lock`](crate::Client::fenced_lock)).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let guard = client.fenced_lock("ledger").lock()?;
    /// assert!(guard.token().is_some());
    /// # Ok(()) }
    /// ```
    pub fn fenced_lock(&self, name: &str) -> FencedLock {
        LockHandle::new(self.inner.client.fenced_lock(name), self.inner.clone())
    }

    /// A handle to the read-write lock called `name` (see
    /// [`Client::read_write_lock`](crate::Client::read_write_lock)).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let guard = client.read_write_lock("config").read().lock()?;
    /// # Ok(()) }
    /// ```
    pub fn read_write_lock(&self, name: &str) -> ReadWriteLock {
        ReadWriteLock::new(self.inner.client.read_write_lock(name), self.inner.clone())
    }

    /// A handle to the semaphore called `name` (see
    /// [`Client::semaphore`](crate::Client::semaphore)).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let sem = client.semaphore("workers");
    /// sem.try_set_permits(3)?;
    /// let permit = sem.acquire()?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, name: &str) -> Semaphore {
        Semaphore::new(self.inner.client.semaphore(name), self.inner.clone())
    }

    /// A handle to the count-down latch called `name` (see
    /// [`Client::count_down_latch`](crate::Client::count_down_latch)).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::blocking::Client) -> leasehold::Result<()> {
    /// let latch = client.count_down_latch("boot");
    /// latch.try_set_count(2)?;
    /// # Ok(()) }
    /// ```
    pub fn count_down_latch(&self, name: &str) -> CountDownLatch {
        CountDownLatch::new(self.inner.client.count_down_latch(name), self.inner.clone())
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
    /// Connects a blocking [`Client`] with this
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

//! The two halves of a [`ReadWriteLock`](super::ReadWriteLock): the raw
//! kinds [`Read`] and [`Write`] behind [`ReadLock`] and [`WriteLock`]. Both
//! are the one hash of their read-write lock, taken in one `Mode`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::{Mode, Names};
use crate::error::Result;
use crate::guard::LockGuard;
use crate::handle::raw::{sealed, RawLock, RawSingle};
use crate::handle::Holder;
use crate::handle::LockHandle;

/// The read half of a [`ReadWriteLock`](super::ReadWriteLock): held by any
/// number of owners at once, never together with another owner's write
/// lock. The [`LockHandle`] of the read kind: every lock verb, as for a
/// [`Lock`](crate::Lock).
///
/// Reentrant: each acquire by the same [`Owner`](crate::Owner) adds a hold
/// (and a timeout key in Redis), each guard gives one back. An owner that
/// holds the write lock may take the read lock too. Leases are as for
/// [`Lock`](crate::Lock): renewed by the watchdog, or fixed with the
/// `_with_lease` variants; the hash and the owner's timeout keys live as
/// long as its longest live hold needs. `is_locked` and `force_unlock`
/// concern a lock in read mode only (a write-mode lock is left alone, as
/// in Redisson; the readers' timeout keys are deleted with it); `holders`
/// lists the readers (the writer's own reads included).
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
pub type ReadLock = LockHandle<Read>;

/// The write half of a [`ReadWriteLock`](super::ReadWriteLock): held by
/// one owner at a time, never together with another owner's read or
/// write lock. The [`LockHandle`] of the write kind: every lock verb, as
/// for a [`Lock`](crate::Lock).
///
/// Reentrant: each acquire by the same [`Owner`](crate::Owner) adds a
/// hold, each guard gives one back. The writer may also take the read lock
/// (a downgrade: take the read lock, give the write guard back, keep
/// reading). A read lock cannot be upgraded: an owner holding a read lock
/// gets [`Error::InvalidArgument`](crate::Error::InvalidArgument) from
/// [`lock`](LockHandle::lock) (and [`with`](LockHandle::with)) at once,
/// sending nothing, and `Ok(None)` from the bounded variants at their
/// deadline (see [`ReadWriteLock`](super::ReadWriteLock)). `is_locked` and
/// `force_unlock` concern a lock in write mode only; `holders` lists the
/// writer (its field ends in `:write`).
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
pub type WriteLock = LockHandle<Write>;

/// The raw kind of a [`ReadLock`] (see [`RawLock`]). Not used directly.
///
/// # Example
///
/// ```no_run
/// # fn f(client: leasehold::Client) {
/// let read: leasehold::LockHandle<leasehold::raw::Read> = client.read_write_lock("a").read();
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Read {
    names: Arc<Names>,
}

/// The raw kind of a [`WriteLock`] (see [`RawLock`]). Not used directly.
///
/// # Example
///
/// ```no_run
/// # fn f(client: leasehold::Client) {
/// let write: leasehold::LockHandle<leasehold::raw::Write> = client.read_write_lock("a").write();
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Write {
    names: Arc<Names>,
}

impl Read {
    pub(super) fn new(names: Arc<Names>) -> Read {
        Read { names }
    }

    pub(crate) fn client(&self) -> &crate::Client {
        &self.names.client
    }
}

impl Write {
    pub(super) fn new(names: Arc<Names>) -> Write {
        Write { names }
    }

    pub(crate) fn client(&self) -> &crate::Client {
        &self.names.client
    }
}

/// One half's raw traits: the shared `Names`, in its `Mode`.
macro_rules! half {
    ($kind:ident, $mode:expr) => {
        impl sealed::Sealed for $kind {}

        impl RawLock for $kind {
            type Guard = LockGuard;

            fn name(&self) -> &str {
                &self.names.name
            }

            fn acquire(
                &self,
                lease: Option<Duration>,
                wait: Option<Duration>,
            ) -> impl Future<Output = Result<Option<LockGuard>>> + Send + '_ {
                self.names.acquire($mode, lease, wait)
            }
        }

        impl RawSingle for $kind {
            fn key(&self) -> &str {
                &self.names.key_str
            }

            fn channel(&self) -> &str {
                &self.names.channel
            }

            fn is_locked(&self) -> impl Future<Output = Result<bool>> + Send + '_ {
                self.names.is_locked($mode)
            }

            fn client(&self) -> &crate::Client {
                &self.names.client
            }

            fn check(&self) -> Result<()> {
                self.names.check()
            }

            /// The write lock's field is its owner's with `:write` after it.
            fn field_suffix(&self) -> &'static str {
                $mode.suffix()
            }

            fn force_unlock(&self) -> impl Future<Output = Result<bool>> + Send + '_ {
                self.names.force_unlock($mode)
            }

            fn holders(&self) -> impl Future<Output = Result<Vec<Holder>>> + Send + '_ {
                self.names.holders($mode)
            }
        }
    };
}

half!(Read, Mode::Read);
half!(Write, Mode::Write);

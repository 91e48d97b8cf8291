//! What a lock kind gives [`LockHandle`](super::LockHandle): the raw
//! lock (`lock_api`'s `RawMutex` to its `Mutex<R, T>`).
//!
//! A kind is one small struct in its primitive's folder (`raw::Unfair` in
//! `lock/`, `raw::Fair` in `fair_lock/`, …) that knows its keys and how to
//! take one hold; the verbs, their rules and their docs live once in
//! `LockHandle`. The traits are sealed: the family is this crate's, and
//! their methods are the handle's plumbing, not API (hidden from the docs).

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use crate::core::kind::Key;

use super::{reads, Holder};
use crate::error::Result;
use crate::guard::LeaseSignal;

pub(crate) mod sealed {
    /// Only this crate's kinds and guards implement the raw traits.
    pub trait Sealed {}
}

/// A lock kind: how [`LockHandle`](super::LockHandle) takes one hold of it.
/// Implemented by [`Unfair`](crate::raw::Unfair) ([`Lock`](crate::Lock)),
/// [`Fair`](crate::raw::Fair), [`Fenced`](crate::raw::Fenced),
/// [`Read`](crate::raw::Read), [`Write`](crate::raw::Write),
/// [`Multi`](crate::raw::Multi) and [`Redlock`](crate::raw::Redlock); sealed.
/// Name it to write code generic over every lock kind.
///
/// # Example
///
/// ```no_run
/// use leasehold::{raw::RawLock, LockHandle};
///
/// // Works for a Lock, FairLock, FencedLock, ReadLock, WriteLock,
/// // MultiLock or RedLock.
/// async fn exclusive<R: RawLock>(lock: &LockHandle<R>) -> leasehold::Result<u32> {
///     lock.with(|_lease| async { 42 }).await
/// }
/// ```
pub trait RawLock: sealed::Sealed + Clone + Debug + Send + Sync + 'static {
    /// What a hold of this kind is: [`LockGuard`](crate::LockGuard), or
    /// [`MultiGuard`](crate::MultiGuard) for the kinds of several locks.
    type Guard: RawGuard;

    /// The lock's name, as given to its handle's constructor (without the
    /// key prefix).
    #[doc(hidden)]
    fn name(&self) -> &str;

    /// Takes one hold for the current owner: `lease: None` is the
    /// watchdog's lease; `wait: None` waits until held (never `Ok(None)`),
    /// `Some(ZERO)` tries once. Cancel safe: a dropped future holds
    /// nothing.
    #[doc(hidden)]
    fn acquire(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> impl Future<Output = Result<Option<Self::Guard>>> + Send + '_;
}

/// A lock kind kept at one Redis key, whose state can be read and
/// force-unlocked: every [`RawLock`] but [`Multi`](crate::raw::Multi) and
/// [`Redlock`](crate::raw::Redlock). Sealed.
///
/// # Example
///
/// ```no_run
/// use leasehold::{raw::RawSingle, LockHandle};
///
/// async fn report<R: RawSingle>(lock: &LockHandle<R>) -> leasehold::Result<()> {
///     for h in lock.holders().await? {
///         println!("{}: {} holds", h.field, h.holds);
///     }
///     Ok(())
/// }
/// ```
pub trait RawSingle: RawLock<Guard = crate::LockGuard> {
    /// The Redis key of the lock (prefix included).
    #[doc(hidden)]
    fn key(&self) -> &str;

    /// The kind's unlock channel (Redisson's name for it).
    #[doc(hidden)]
    fn channel(&self) -> &str;

    /// The client the handle was made by.
    #[doc(hidden)]
    fn client(&self) -> &crate::Client;

    /// Whether the handle may be used now: its client is not shut down,
    /// its name is valid, the server has what its scripts need. Every read
    /// checks it first.
    #[doc(hidden)]
    fn check(&self) -> Result<()>;

    /// What follows `<client>:<owner>` in this kind's hash field (the
    /// write lock's `:write`); the default: nothing.
    #[doc(hidden)]
    fn field_suffix(&self) -> &'static str {
        ""
    }

    /// Whether anyone holds the lock (in this kind's sense). The default:
    /// whether the hash exists (the lock family's hash lives exactly while
    /// someone holds it).
    #[doc(hidden)]
    fn is_locked(&self) -> impl Future<Output = Result<bool>> + Send + '_ {
        async move {
            self.check()?;
            self.client()
                .engine()
                .conn()
                .exists(&Key::from(self.key()))
                .await
        }
    }

    /// The holds the current owner has (0 if none). The default: its
    /// field's count.
    #[doc(hidden)]
    fn hold_count(&self) -> impl Future<Output = Result<u32>> + Send + '_ {
        async move {
            self.check()?;
            let key = Key::from(self.key());
            reads::hold_count_of(self.client(), &key, self.field_suffix()).await
        }
    }

    /// The key's remaining TTL, `None` if it has none or is gone.
    #[doc(hidden)]
    fn remaining_lease(&self) -> impl Future<Output = Result<Option<Duration>>> + Send + '_ {
        async move {
            self.check()?;
            self.client()
                .engine()
                .conn()
                .ttl(&Key::from(self.key()))
                .await
        }
    }

    /// Frees the lock whoever holds it (in this kind's sense).
    #[doc(hidden)]
    fn force_unlock(&self) -> impl Future<Output = Result<bool>> + Send + '_;

    /// The holders of this kind's fields of the lock hash. The default:
    /// every field is a holder's.
    #[doc(hidden)]
    fn holders(&self) -> impl Future<Output = Result<Vec<Holder>>> + Send + '_ {
        async move {
            self.check()?;
            let key = Key::from(self.key());
            reads::holders_of(self.client(), &key, reads::every_field).await
        }
    }
}

/// What a [`RawLock`] hands out: [`LockGuard`](crate::LockGuard),
/// [`MultiGuard`](crate::MultiGuard), and a semaphore's
/// [`Permit`](crate::Permit). Sealed. It lets the verbs that run work
/// under a hold (`with`) be written once.
///
/// # Example
///
/// ```no_run
/// use leasehold::raw::{RawGuard, RawLock};
///
/// // `lock` hands out the kind's guard, whichever it is.
/// async fn take<R: RawLock>(lock: &leasehold::LockHandle<R>) -> leasehold::Result<R::Guard>
/// where
///     R::Guard: RawGuard,
/// {
///     lock.lock().await
/// }
/// ```
pub trait RawGuard: sealed::Sealed + Send + Sized + 'static {
    /// The hold's lost signal, on its own (for the work).
    #[doc(hidden)]
    fn lease_signal(&self) -> LeaseSignal;

    /// Gives the hold back and reports the outcome (`Error::NotHeld` if it
    /// was gone). Dropped, it still gives the hold back.
    #[doc(hidden)]
    fn give_back(self) -> impl Future<Output = Result<()>> + Send + 'static;

    /// What `Error::Lost` names.
    #[doc(hidden)]
    fn what(&self) -> String;
}

// The lock kinds' guard (`guard.rs`); `MultiGuard` and `Permit` implement
// it beside their types.
impl sealed::Sealed for crate::LockGuard {}

impl RawGuard for crate::LockGuard {
    fn lease_signal(&self) -> LeaseSignal {
        crate::LockGuard::lease_signal(self)
    }

    fn give_back(self) -> impl Future<Output = Result<()>> + Send + 'static {
        self.unlock()
    }

    fn what(&self) -> String {
        self.key().to_owned()
    }
}

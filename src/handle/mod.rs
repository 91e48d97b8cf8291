//! The lock verbs, written once: [`LockHandle`] over a raw kind.
//!
//! Every lock kind of the family is a `LockHandle<R>` with its own raw
//! kind `R` (as `lock_api::Mutex<R, T>` is over a `RawMutex`):
//! [`Lock`](crate::Lock), [`FairLock`](crate::FairLock),
//! [`FencedLock`](crate::FencedLock), [`ReadLock`](crate::ReadLock),
//! [`WriteLock`](crate::WriteLock), [`MultiLock`](crate::MultiLock) and
//! [`RedLock`](crate::RedLock) are type aliases. The verbs below, their
//! rules and their docs are the same for each; what is particular to a
//! kind (a fenced lock's token, a fair lock's queue, a MultiLock's
//! members) is in that kind's own `impl` and in its alias's docs.
//!
//! * Every kind: [`lock`](LockHandle::lock),
//!   [`lock_with_lease`](LockHandle::lock_with_lease),
//!   [`try_lock`](LockHandle::try_lock),
//!   [`try_lock_for`](LockHandle::try_lock_for),
//!   [`try_lock_until`](LockHandle::try_lock_until),
//!   [`try_lock_with_lease`](LockHandle::try_lock_with_lease),
//!   [`with`](LockHandle::with), [`try_with_for`](LockHandle::try_with_for).
//! * Kinds at one key ([`RawSingle`]: all but MultiLock and RedLock):
//!   [`key`](LockHandle::key), [`channel`](LockHandle::channel),
//!   [`is_locked`](LockHandle::is_locked),
//!   [`is_held_by_current_task`](LockHandle::is_held_by_current_task),
//!   [`hold_count`](LockHandle::hold_count),
//!   [`remaining_lease`](LockHandle::remaining_lease),
//!   [`force_unlock`](LockHandle::force_unlock),
//!   [`holders`](LockHandle::holders).

mod holder;
pub(crate) mod raw;
pub(crate) mod reads;

pub use holder::Holder;

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::guard::LeaseSignal;
use raw::{RawGuard, RawLock, RawSingle};

/// A distributed lock of kind `R`, by name: every lock kind of the family
/// is one (see the aliases [`Lock`](crate::Lock),
/// [`FairLock`](crate::FairLock), [`FencedLock`](crate::FencedLock),
/// [`ReadLock`](crate::ReadLock), [`WriteLock`](crate::WriteLock),
/// [`MultiLock`](crate::MultiLock), [`RedLock`](crate::RedLock)). Cheap to
/// clone; nothing is sent until a method is called.
///
/// Holds belong to an [`Owner`](crate::Owner) (by default the current
/// tokio task), and the same owner can take the same lock again: each
/// acquire adds a hold, each guard gives one back. A hold taken with
/// [`lock`](Self::lock), [`try_lock`](Self::try_lock) or
/// [`try_lock_for`](Self::try_lock_for) keeps a lease of the watchdog
/// timeout that the [`Watchdog`](crate::Watchdog) renews while the guard
/// lives; the `_with_lease` variants set a fixed lease that is never
/// renewed.
///
/// # Example
///
/// ```no_run
/// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
/// let lock = client.lock("orders:42");
/// let outer = lock.lock().await?;
/// let inner = lock.lock().await?; // same task: re-enters
/// assert_eq!(lock.hold_count().await?, 2);
/// inner.unlock().await?;
/// outer.unlock().await?;
/// assert!(!lock.is_locked().await?);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct LockHandle<R> {
    raw: R,
}

// === impl LockHandle (every kind) ===

impl<R: RawLock> LockHandle<R> {
    pub(crate) fn from_raw(raw: R) -> LockHandle<R> {
        LockHandle { raw }
    }

    /// The kind's own part of the handle.
    pub(crate) fn raw(&self) -> &R {
        &self.raw
    }

    pub(crate) fn raw_mut(&mut self) -> &mut R {
        &mut self.raw
    }

    /// The name given to the handle's constructor (without the key
    /// prefix). A [`MultiLock`](crate::MultiLock)'s is its members' names,
    /// joined by `", "`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// assert_eq!(client.lock("a").name(), "a");
    /// assert_eq!(client.fair_lock("a").name(), "a");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.raw.name()
    }

    /// Waits until the lock is held by the current owner, with a lease the
    /// watchdog renews while the guard lives.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped future holds nothing. If an acquire it sent
    /// succeeds after it was dropped, the hold is given back at once (a
    /// fenced lock's token is then skipped; a fair lock's waiter leaves
    /// the queue; a MultiLock's members already taken are released in the
    /// background); its subscription reference is released and an unused
    /// wake-up is passed to the next waiter. It loses only its place in the
    /// local queue.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let guard = client.lock("orders:42").lock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<R::Guard> {
        self.raw.acquire(None, None).await.map(must_acquire)
    }

    /// Like [`lock`](Self::lock), with a fixed `lease`: the hold expires
    /// `lease` after it was taken unless given back before; it is never
    /// renewed. [`Error::InvalidArgument`] if `lease` is under 1 ms.
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
    /// let guard = client.lock("report").lock_with_lease(Duration::from_secs(10)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<R::Guard> {
        self.raw.acquire(Some(lease), None).await.map(must_acquire)
    }

    /// Takes the lock if it is free (or already held by the current owner,
    /// where the kind re-enters), without waiting. `Ok(None)` if someone
    /// else holds it.
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
    /// match client.lock("orders:42").try_lock().await? {
    ///     Some(guard) => { /* got it */ guard.unlock().await? }
    ///     None => { /* busy */ }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(&self) -> Result<Option<R::Guard>> {
        self.raw.acquire(None, Some(Duration::ZERO)).await
    }

    /// Waits up to `wait` for the lock. `Ok(None)` if it was not acquired
    /// in time. `Duration::MAX` waits forever.
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
    /// if let Some(guard) = client.lock("orders:42").try_lock_for(Duration::from_millis(500)).await? {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock_for(&self, wait: Duration) -> Result<Option<R::Guard>> {
        self.raw.acquire(None, Some(wait)).await
    }

    /// Waits until `deadline` for the lock. `Ok(None)` if it was not
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
    /// let guard = client.lock("orders:42").try_lock_until(deadline).await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_lock_until(&self, deadline: Instant) -> Result<Option<R::Guard>> {
        let wait = deadline.saturating_duration_since(Instant::now());
        self.raw.acquire(None, Some(wait)).await
    }

    /// Waits up to `wait` for the lock, then holds it with a fixed `lease`
    /// (never renewed). `Ok(None)` if it was not acquired in time.
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
    /// let lock = client.lock("orders:42");
    /// let guard = lock.try_lock_with_lease(Duration::from_secs(1), Duration::from_secs(10)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_lock_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<R::Guard>> {
        self.raw.acquire(Some(lease), Some(wait)).await
    }

    /// Runs `work` under the lock: waits for it (as [`lock`](Self::lock),
    /// a lease the watchdog renews), runs the future `work` returns,
    /// unlocks, and returns the future's output. The safe way to hold a
    /// lock: no guard to keep alive or forget.
    ///
    /// If the lease is lost while the future runs (force-unlocked,
    /// expired, or renewal not confirmed in time), the future is dropped
    /// at once — cancelled at its current `.await` — and `with` returns
    /// [`Error::Lost`]. It returns `Lost` too when the loss is seen only as
    /// the future ends (or by the unlock finding the hold gone): the work
    /// may then have run partly without the lock, and its output is
    /// dropped. The future gets a [`LeaseSignal`] to check the lease
    /// itself where a precise stop matters; for writes that must never
    /// land after a loss, fence them (README, "Fencing").
    ///
    /// The future runs in the caller's task, so it is the lock's owner:
    /// it re-enters the lock freely. A task it spawns is another owner
    /// (see [`Owner`](crate::Owner)).
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future drops `work`'s future (if it started)
    /// and gives the hold back in the background; a dropped wait holds
    /// nothing (as for [`lock`](Self::lock)).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn charge(_: u32) -> u32 { 0 }
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let receipt = client.lock("orders:42").with(|lease| async move {
    ///     // Cancelled here if the lease is lost; `lease.is_lost()` to check.
    ///     charge(42).await
    /// }).await?;
    /// let n = client.read_write_lock("config").write().with(|_| async { 1 }).await?;
    /// # Ok(()) }
    /// ```
    pub async fn with<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(LeaseSignal) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.lock().await?;
        run(guard, work).await
    }

    /// As [`with`](Self::with), but waits at most `wait` for the lock:
    /// `Ok(None)` if it was not acquired in time (`work` is not called).
    ///
    /// # Cancel safety
    ///
    /// As for [`with`](Self::with).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let lock = client.lock("nightly-report");
    /// match lock.try_with_for(Duration::from_secs(1), |_| async { 42 }).await? {
    ///     Some(n) => println!("done: {n}"),
    ///     None => println!("someone else is on it"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_with_for<F, Fut, T>(&self, wait: Duration, work: F) -> Result<Option<T>>
    where
        F: FnOnce(LeaseSignal) -> Fut,
        Fut: Future<Output = T>,
    {
        match self.try_lock_for(wait).await? {
            Some(guard) => run(guard, work).await.map(Some),
            None => Ok(None),
        }
    }
}

// === impl LockHandle (kinds at one key) ===

impl<R: RawSingle> LockHandle<R> {
    /// The Redis key of the lock hash (prefix included).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// let key = client.lock("a").key().to_owned();
    /// assert_eq!(client.fenced_lock("a").key(), key);
    /// # }
    /// ```
    pub fn key(&self) -> &str {
        self.raw.key()
    }

    /// The kind's unlock channel, as Redisson names it: for a lock,
    /// `redisson_lock__channel:{<key>}`, or `redisson_lock__channel:<key>`
    /// if the key contains `{` (Redisson's rule; key and channel then share
    /// the hash tag already in the key). A fair lock tells each waiter on
    /// `<this>:<waiter field>`; a read-write lock's halves share
    /// `redisson_rwlock:{<key>}`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// assert!(client.lock("a").channel().starts_with("redisson_lock__channel:{"));
    /// # }
    /// ```
    pub fn channel(&self) -> &str {
        self.raw.channel()
    }

    /// Whether anyone holds the lock (a read lock: whether it is in read
    /// mode; a write lock: in write mode).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let busy = client.lock("orders:42").is_locked().await?;
    /// # Ok(()) }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        self.raw.is_locked().await
    }

    /// Whether the current owner ([`Owner::current`](crate::Owner::current))
    /// holds the lock.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let lock = client.lock("orders:42");
    /// let g = lock.lock().await?;
    /// assert!(lock.is_held_by_current_task().await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_held_by_current_task(&self) -> Result<bool> {
        Ok(self.hold_count().await? > 0)
    }

    /// How many holds the current owner has on the lock (0 if none). A
    /// plain and a fenced handle of one name count the same holds.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let lock = client.lock("orders:42");
    /// assert_eq!(lock.hold_count().await?, 0);
    /// # Ok(()) }
    /// ```
    pub async fn hold_count(&self) -> Result<u32> {
        self.raw.hold_count().await
    }

    /// The lock key's remaining lease (shared by every holder), or `None`
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
    /// let left = client.lock("orders:42").remaining_lease().await?;
    /// # Ok(()) }
    /// ```
    pub async fn remaining_lease(&self) -> Result<Option<Duration>> {
        self.raw.remaining_lease().await
    }

    /// Frees the lock whoever holds it, and wakes its waiters (a fair
    /// lock: hands it to the head waiter, whose place is kept; a read lock:
    /// only a lock in read mode is freed, a write lock only one in write
    /// mode, as in Redisson; a fenced lock's token counter is left alone).
    /// Returns whether there was a lock to free. Guards of this client's
    /// holders report `lost` at once; guards in other clients at their
    /// watchdog's next renewal (or when their fixed lease ends). Runs once
    /// even if fred re-sends it after a reconnect.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, the delete may or may not have happened.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let was_locked = client.lock("orders:42").force_unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        self.raw.force_unlock().await
    }

    /// Who holds the lock and for how long: one [`Holder`] per holder's
    /// field of the lock hash, with the key's remaining TTL; empty if the
    /// lock is free. One read, consistent in itself (an operator's view:
    /// it may be out of date by the time it is printed). A fair lock's
    /// queued waiters are not holders; a read lock's holders are its
    /// readers, a write lock's its writer.
    ///
    /// A lock taken by this crate has one holder per owner (several holds
    /// of one owner are one holder with `holds > 1`).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let lock = client.lock("orders:42");
    /// let _guard = lock.lock().await?;
    /// let holders = lock.holders().await?;
    /// assert_eq!(holders[0].client, Some(client.id()));
    /// assert_eq!(holders[0].owner, Some(leasehold::Owner::current().id()));
    /// # Ok(()) }
    /// ```
    pub async fn holders(&self) -> Result<Vec<Holder>> {
        self.raw.holders().await
    }
}

pub(crate) fn must_acquire<G>(guard: Option<G>) -> G {
    // An acquire without a deadline only returns once it holds.
    guard.unwrap_or_else(|| unreachable!("acquire without a deadline returned no guard"))
}

/// Runs `f`'s work while `guard` holds, then gives the hold back: the work
/// is dropped (cancelled) as soon as the lease is lost. Returns its
/// output, or [`Error::Lost`] if the lease was lost before the give-back
/// (seen while the work ran, as it ended, or by the give-back finding the
/// hold gone). A failed give-back of a hold that was not lost still
/// returns the output: the release is then finished in the background,
/// as for a dropped guard.
///
/// Cancel safe: dropped, it drops the work and the guard (which releases
/// in the background).
pub(crate) async fn run<G, F, Fut, T>(guard: G, f: F) -> Result<T>
where
    G: RawGuard,
    F: FnOnce(LeaseSignal) -> Fut,
    Fut: Future<Output = T>,
{
    let signal = guard.lease_signal();
    let work = f(signal.clone());
    let output = {
        let mut work = std::pin::pin!(work);
        tokio::select! {
            biased;
            _ = signal.lost() => None,
            output = &mut work => Some(output),
        }
    };
    finish(guard, &signal, output).await
}

/// Gives `guard` back after work run under it (`output`: `None` if the
/// work was cancelled on a loss) and says what the caller gets (see
/// [`run`]).
pub(crate) async fn finish<G: RawGuard, T>(
    guard: G,
    signal: &LeaseSignal,
    output: Option<T>,
) -> Result<T> {
    let lost = output.is_none() || signal.is_lost();
    let name = guard.what();
    let released = guard.give_back().await;
    match (output, released) {
        (Some(output), Ok(())) if !lost => Ok(output),
        (Some(output), Err(e)) if !lost && !matches!(e, Error::NotHeld { .. }) => {
            tracing::debug!(lock = %name, error = %e, "unlock after the work failed; the hold is given back in the background");
            Ok(output)
        }
        _ => Err(Error::Lost { name }),
    }
}

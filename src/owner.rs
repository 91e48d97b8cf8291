//! Who holds a lock: the reentrancy identity (see [`Owner`]).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

/// The identity that locks are held by, within one [`Client`](crate::Client).
///
/// A hold is counted per *owner field* `<client-uuid>:<owner-id>` in the
/// lock hash. The client uuid is [`Client::id`](crate::Client::id); the
/// owner id is an `Owner`, chosen by [`Owner::current`] in this order:
///
/// 1. the owner set by an enclosing [`Owner::scope`];
/// 2. the id of the current tokio task ([`tokio::task::try_id`]);
/// 3. outside any task (inside `Runtime::block_on`, or with no runtime), a
///    stable id of the current OS thread.
///
/// # The identity rule
///
/// * Tokio task ids are unique among *live* tasks only; tokio documents that
///   an id may be reused after its task ends. A guard outliving its task is
///   still fine (the guard carries its owner), but a new task that happens
///   to get the old id would re-enter that lock.
/// * Every future joined inside one task (`join!`, `select!`,
///   `FuturesUnordered`, …) shares that task's id, **so those futures share
///   one owner and re-enter each other's locks instead of excluding each
///   other.** Give each such future its own owner with
///   `Owner::new().scope(fut)`, or spawn it as its own task.
/// * **A task spawned by a holder is a different owner**: if it locks what
///   its parent holds, it waits for the parent to unlock — and if the
///   parent awaits the child first, both wait forever, silently. To
///   re-enter on purpose, capture `Owner::current()` and run the spawned
///   work inside `owner.scope(..)`; to find out instead of hanging, take the
///   lock with [`try_lock_for`](crate::Lock::try_lock_for) in the child.
///
/// The three id sources never collide: task ids count up from 1, ids from
/// [`Owner::new`] start at 2⁶², thread ids at 2⁶³.
///
/// # Example
///
/// ```
/// use leasehold::Owner;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let fresh = Owner::new();
/// let inside = fresh.scope(async { Owner::current() }).await;
/// assert_eq!(inside, fresh);
/// assert_ne!(Owner::current(), fresh);
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner(u64);

tokio::task_local! {
    /// The owner set by `Owner::scope`, if any.
    static SCOPED: Owner;
}

const FRESH_BASE: u64 = 1 << 62;
const THREAD_BASE: u64 = 1 << 63;

/// Next id handed out by `Owner::new` (offset from `FRESH_BASE`).
static NEXT_FRESH: AtomicU64 = AtomicU64::new(1);
/// Next id handed to a thread that locks outside a task.
static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD_OWNER: Owner =
        Owner(THREAD_BASE | NEXT_THREAD.fetch_add(1, Ordering::Relaxed));
}

impl Owner {
    /// The owner the current code locks as.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let a = tokio::spawn(async { leasehold::Owner::current() }).await.unwrap();
    /// let b = tokio::spawn(async { leasehold::Owner::current() }).await.unwrap();
    /// assert_ne!(a, b); // two tasks, two owners
    /// # }
    /// ```
    pub fn current() -> Owner {
        if let Ok(owner) = SCOPED.try_with(|o| *o) {
            return owner;
        }
        if let Some(id) = tokio::task::try_id() {
            // `task::Id` only exposes its u64 through Display.
            if let Ok(id) = id.to_string().parse::<u64>() {
                return Owner(id);
            }
        }
        THREAD_OWNER.with(|o| *o)
    }

    /// A new owner, distinct from every other owner in this process.
    ///
    /// # Example
    ///
    /// ```
    /// assert_ne!(leasehold::Owner::new(), leasehold::Owner::new());
    /// ```
    #[allow(clippy::new_without_default)]
    pub fn new() -> Owner {
        Owner(FRESH_BASE | NEXT_FRESH.fetch_add(1, Ordering::Relaxed))
    }

    /// Runs `fut` with `self` as the current owner: locks taken inside it
    /// belong to `self`, whichever task polls it.
    ///
    /// The scope does not cross `tokio::spawn`: a task spawned inside it
    /// has its own owner unless it is scoped too.
    ///
    /// # A spawned child re-locking its parent's lock deadlocks silently
    ///
    /// A task spawned while its parent holds a lock is another owner. If
    /// the child locks that lock with `lock()`, it waits for the parent to
    /// unlock; if the parent awaits the child before unlocking, both wait
    /// forever, with no error and no log line. Either re-enter on purpose
    /// (run the child inside `Owner::current().scope(..)`, captured in the
    /// parent, as in the example below), or take the lock in the child with
    /// [`try_lock_for`](crate::Lock::try_lock_for): `Ok(None)` after the
    /// bound tells you the lock is held by someone else — here, the parent.
    /// See the identity rule on [`Owner`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn f(lock: leasehold::Lock) -> leasehold::Result<()> {
    /// let held = lock.lock().await?;
    /// let child = lock.clone();
    /// let found = tokio::spawn(async move {
    ///     // Another owner: `child.lock()` would wait for the parent forever.
    ///     child.try_lock_for(Duration::from_secs(5)).await
    /// }).await.unwrap()?;
    /// assert!(found.is_none(), "held by the parent, a different owner");
    /// held.unlock().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future drops `fut`; the scope itself holds
    /// nothing.
    ///
    /// # Example
    ///
    /// ```
    /// use leasehold::Owner;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let me = Owner::current();
    /// // Work in another task that re-enters the caller's locks on purpose:
    /// let same = tokio::spawn(me.scope(async { Owner::current() })).await.unwrap();
    /// assert_eq!(same, me);
    /// # }
    /// ```
    pub fn scope<F: Future>(self, fut: F) -> impl Future<Output = F::Output> {
        SCOPED.scope(self, fut)
    }

    /// The numeric id: the second half of the owner field in the lock hash.
    ///
    /// # Example
    ///
    /// ```
    /// let o = leasehold::Owner::new();
    /// assert!(o.id() >= 1 << 62);
    /// ```
    pub fn id(&self) -> u64 {
        self.0
    }

    /// The owner with `id` (an id [`Owner::id`] gave).
    pub(crate) fn from_id(id: u64) -> Owner {
        Owner(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_owner_is_stable_and_distinct_from_fresh() {
        let a = Owner::current();
        let b = Owner::current();
        assert_eq!(a, b);
        assert!(a.id() >= THREAD_BASE);
        let other = std::thread::spawn(Owner::current).join().unwrap();
        assert_ne!(a, other);
        assert!(Owner::new().id() >= FRESH_BASE && Owner::new().id() < THREAD_BASE);
    }

    #[test]
    fn block_on_uses_the_thread_owner() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let inside = rt.block_on(async { Owner::current() });
        assert_eq!(inside, Owner::current());
    }
}

//! [`MultiLock`]: every member or none (the algorithm is in the module
//! docs, `multi/mod.rs`).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{left, random_between, Member, MultiGuard};
use crate::core::lease_millis;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::handle::raw::{sealed, RawLock};
use crate::handle::LockHandle;

/// Several locks taken as one, all or nothing (Redisson's
/// `RedissonMultiLock`), on any clients.
///
/// The guard ([`MultiGuard`]) holds every member; it is lost as soon as any
/// member is. An acquire that cannot take every member gives back those it
/// took before it returns, and so does a dropped acquire: never a partial
/// hold.
///
/// Members are taken in one global order (by key, then server), whatever
/// the order given, so MultiLocks over overlapping sets never deadlock each
/// other, in one process or across many. While later members are waited for, earlier ones are held for at
/// most the [member wait](Self::with_member_wait); then everything is given
/// back and the attempt starts again, so a lock held for long by code
/// outside MultiLocks never keeps the others locked forever.
///
/// # When to use
///
/// When one operation needs several locks at once (a transfer between two
/// accounts with a lock each, maybe on different Redis deployments) and
/// must never hold some without the others. If the set is fixed, one lock
/// over a combined name is cheaper.
///
/// # Example
///
/// ```no_run
/// # async fn f(client: leasehold::Client, other: leasehold::Client) -> leasehold::Result<()> {
/// let multi = leasehold::MultiLock::new(vec![client.lock("a"), other.lock("b")]);
/// let guard = multi.lock().await?; // both, or (while waiting) neither
/// // … work on a and b …
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
pub type MultiLock = LockHandle<Multi>;

/// The raw kind of a [`MultiLock`] (see [`RawLock`]): its members and
/// member wait. Not used directly.
///
/// # Example
///
/// ```no_run
/// # fn f(a: leasehold::Client) {
/// let multi: leasehold::LockHandle<leasehold::raw::Multi> =
///     leasehold::MultiLock::new(vec![a.lock("x")]);
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Multi {
    /// In the global order (see the module docs).
    members: Arc<[Member]>,
    /// The longest a later member is waited for while earlier ones are held.
    member_wait: Duration,
    /// The members' names, joined by `", "`.
    name: Arc<str>,
}

/// Default for [`MultiLock::with_member_wait`].
const DEFAULT_MEMBER_WAIT: Duration = Duration::from_secs(1);
/// Pause before an attempt starts again: lets a task woken by the give-back
/// take what it waited for.
const RETRY_PAUSE: (Duration, Duration) = (Duration::from_millis(20), Duration::from_millis(100));

// === impl MultiLock ===

impl MultiLock {
    /// A MultiLock over `locks` (any lock handles, or [`Member`]s), on any
    /// clients. Nothing is sent until it is used. An empty set is reported
    /// as [`Error::InvalidArgument`] by every acquire.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(a: leasehold::Client, b: leasehold::Client) {
    /// let multi = leasehold::MultiLock::new(vec![a.lock("x"), b.lock("y")]);
    /// # }
    /// ```
    pub fn new<I>(locks: I) -> MultiLock
    where
        I: IntoIterator,
        I::Item: Into<Member>,
    {
        let mut members: Vec<Member> = locks.into_iter().map(Into::into).collect();
        members.sort_by_cached_key(Member::order);
        let name = members
            .iter()
            .map(Member::name)
            .collect::<Vec<_>>()
            .join(", ");
        LockHandle::from_raw(Multi {
            members: members.into(),
            member_wait: DEFAULT_MEMBER_WAIT,
            name: name.into(),
        })
    }

    /// Sets the longest a member after the first is waited for while the
    /// earlier ones are held (default 1 s). When it runs out, every member
    /// is given back and the attempt starts again (while the caller's wait
    /// allows). Zero: later members are tried once.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn f(a: leasehold::Client) {
    /// let multi = leasehold::MultiLock::new(vec![a.lock("x"), a.lock("y")])
    ///     .with_member_wait(Duration::from_millis(200));
    /// # }
    /// ```
    pub fn with_member_wait(mut self, wait: Duration) -> MultiLock {
        self.raw_mut().member_wait = wait;
        self
    }

    /// The members, in the order they are taken (by key, then server).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(a: leasehold::Client) {
    /// let multi = leasehold::MultiLock::new(vec![a.lock("y"), a.lock("x")]);
    /// assert_eq!(multi.members()[0].name(), "x");
    /// # }
    /// ```
    pub fn members(&self) -> &[Member] {
        &self.raw().members
    }
}

// === impl Multi ===

impl sealed::Sealed for Multi {}

impl RawLock for Multi {
    type Guard = MultiGuard;

    fn name(&self) -> &str {
        &self.name
    }

    /// The attempt loop (see the module docs). `wait: None` waits forever,
    /// zero tries each member once.
    async fn acquire(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<MultiGuard>> {
        if self.members.is_empty() {
            return Err(Error::invalid("a MultiLock needs at least one lock"));
        }
        if let Some(lease) = lease {
            lease_millis(lease)?;
        }
        let once = wait == Some(Duration::ZERO);
        let deadline = wait.and_then(|w| Instant::now().checked_add(w));
        loop {
            let last_error = match self.attempt(lease, deadline, once).await {
                Ok(Some(guard)) => return Ok(Some(guard)),
                Ok(None) => None,
                Err(e) if e.is_transient() && !once => Some(e),
                Err(e) => return Err(e),
            };
            let rest = left(deadline);
            if once || rest.is_some_and(|r| r.is_zero()) {
                return last_error.map_or(Ok(None), Err);
            }
            let pause = random_between(RETRY_PAUSE.0, RETRY_PAUSE.1);
            let pause = rest.map_or(pause, |r| pause.min(r));
            if let Some(e) = &last_error {
                tracing::debug!(error = %e, "multilock: retrying after a connection error");
            }
            tokio::time::sleep(pause).await;
        }
    }
}

impl Multi {
    /// One attempt: every member in order, or none. `Ok(None)`: a member
    /// was not taken in time (everything taken was given back).
    async fn attempt(
        &self,
        lease: Option<Duration>,
        deadline: Option<Instant>,
        once: bool,
    ) -> Result<Option<MultiGuard>> {
        let mut taken: Vec<LockGuard> = Vec::with_capacity(self.members.len());
        for member in self.members.iter() {
            let rest = left(deadline);
            let wait = if once {
                Some(Duration::ZERO)
            } else if taken.is_empty() {
                rest
            } else {
                Some(rest.map_or(self.member_wait, |r| r.min(self.member_wait)))
            };
            match member.acquire(lease, wait).await {
                Ok(Some(guard)) => taken.push(guard),
                Ok(None) => {
                    give_back(taken).await;
                    return Ok(None);
                }
                Err(e) => {
                    give_back(taken).await;
                    return Err(e);
                }
            }
        }
        let guard = MultiGuard::all(taken);
        if guard.is_lost() {
            // A fixed lease ran out before the last member was taken (or a
            // member was lost meanwhile): not a hold of all of them.
            give_back(guard.into_guards()).await;
            return Ok(None);
        }
        Ok(Some(guard))
    }
}

/// Gives back every hold of `taken` at once and waits for the releases.
/// Dropped half-way, the rest is released in the background.
async fn give_back(taken: Vec<LockGuard>) {
    futures_util::future::join_all(taken.into_iter().map(LockGuard::unlock)).await;
}

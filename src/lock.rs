//! The reentrant lock and its guard.
//!
//! # Keys, channel and scripts (Redisson `RLock` layout)
//!
//! Lock `name` (after the client's key prefix) is a Redis hash at `name`.
//! Each holder is a field `<client-uuid>:<owner-id>` (see [`Owner`]) whose
//! value is its hold count. Unlocks are announced with the message `0` on
//! `redisson_lock__channel:{name}`. The hash is changed only by the
//! `acquire`, `release` and `force_unlock` scripts; `is_locked`,
//! `hold_count` and `remaining_lease` are plain reads.
//!
//! # The wait loop
//!
//! 1. Run `acquire`. It returns nothing when the lock is now held, or the
//!    lock's remaining time to live.
//! 2. Subscribe to the unlock channel (shared with every other waiter of this
//!    client) and wait until Redis confirms it.
//! 3. Run `acquire` again: it catches an unlock published before step 2.
//! 4. Sleep until woken by an unlock message, or for `min(ttl, time left,
//!    recheck interval)`; then go to 3. A lock with no expiry (TTL -1) is
//!    re-checked every recheck interval, never waited on forever.
//! 5. Leave: drop the subscription reference (the last one unsubscribes),
//!    passing on a wake-up that was not used.
//!
//! Waiters of one client are woken one at a time, oldest first. Across
//! clients there is no queue: every client wakes its oldest waiter and they
//! race, so the lock is not fair between processes.
//!
//! # Drop and cancellation
//!
//! Each `acquire` or `release` runs inline in the caller's future, under
//! an `InFlight` guard (see `holds`). If the future is dropped while the
//! script is under way, the guard hands the call to a background task that
//! learns its outcome (a read queued behind the script) and settles it: an
//! acquire that ran is given back, a release that did not run is sent
//! again. Dropping a [`LockGuard`] stops its renewal at once and releases
//! its hold in the background.

use std::sync::Arc;
use std::time::Duration;

use fred::interfaces::{HashesInterface, KeysInterface};
use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::holds::{self, Acquire, InFlight, Release};
use crate::owner::Owner;
use crate::scripts::Scripts;
use crate::watchdog::{LeaseState, Registration};

/// A reentrant distributed lock, by name. Cheap to clone; nothing is sent
/// until a method is called.
///
/// Locks are held by an [`Owner`] (by default the current tokio task), and
/// the same owner can take the same lock again: each acquire adds a hold,
/// each guard gives one back, and the lock is free when the count reaches
/// zero. Read the [`Owner`] docs before using locks inside `join!` or
/// `select!`: futures joined in one task share one owner.
///
/// A lock taken with [`lock`](Lock::lock), [`try_lock`](Lock::try_lock) or
/// [`try_lock_for`](Lock::try_lock_for) keeps a lease of the watchdog
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
pub struct Lock {
    client: Client,
    name: Arc<str>,
    key: Arc<str>,
    channel: Arc<str>,
}

/// One hold on a [`Lock`], released when dropped.
///
/// The guard carries its owner, so it can be moved to and unlocked from
/// any task. [`unlock`](LockGuard::unlock) releases and reports the
/// outcome; dropping releases in the background. Either way the lease stops
/// being renewed at once.
///
/// [`is_lost`](LockGuard::is_lost) and [`lost`](LockGuard::lost) tell the
/// holder when the lease is gone (another process may then hold the lock):
/// for a watchdog lease, when a renewal finds the lock gone or cannot be
/// confirmed in time; for a fixed lease, when it runs out.
///
/// # Example
///
/// ```no_run
/// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
/// let guard = client.lock("orders:42").lock().await?;
/// tokio::select! {
///     _ = guard.lost() => eprintln!("lease lost: abandon the work"),
///     _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => guard.unlock().await?,
/// }
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock at once (in the background)"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct LockGuard {
    /// `Some` until `unlock` takes it (see `skip_drop`). When adding a
    /// field, update `skip_drop`.
    hold: Option<Hold>,
}

/// What one hold needs to be given back.
#[derive(Debug)]
struct Hold {
    lock: Lock,
    owner: Owner,
    field: String,
    lease_ms: i64,
    /// The lease's lost signal (watchdog, or fixed deadline).
    state: Arc<LeaseState>,
    /// The epoch of this owner's holds (see `holds`): lost once the owner
    /// re-acquired after this hold had expired. A stale hold gives nothing
    /// back.
    epoch: Arc<LeaseState>,
    /// Watchdog claim; `None` for a fixed lease. Dropped before the release
    /// is sent, so renewal never outlives an unlock.
    registration: Option<Registration>,
}

/// The longest lease accepted, about 34 years: Redis stores expiry times
/// in milliseconds since the epoch and rejects overflowing ones.
const MAX_LEASE: Duration = Duration::from_millis(1 << 40);

/// A lease in whole milliseconds, validated.
pub(crate) fn lease_millis(lease: Duration) -> Result<i64> {
    if lease < Duration::from_millis(1) {
        return Err(Error::invalid(format!("lease {lease:?} is under 1 ms")));
    }
    if lease > MAX_LEASE {
        return Err(Error::invalid(format!(
            "lease {lease:?} is over the maximum {MAX_LEASE:?}"
        )));
    }
    Ok(lease.as_millis() as i64)
}

enum Attempt {
    Acquired(LockGuard),
    /// Held by someone else; the lock's PTTL in ms (-1: no expiry).
    Held(i64),
}

/// A hold acquired by an attempt's task and not yet turned into a guard.
/// Dropped unclaimed (its caller was cancelled), it gives itself back.
struct Unclaimed {
    inner: Arc<crate::client::ClientInner>,
    target: Release,
    /// `Some` until claimed.
    epoch: Option<Arc<LeaseState>>,
}

/// First pause before retrying after a connection error while waiting.
const RETRY_FIRST: Duration = Duration::from_millis(50);
/// Longest pause between such retries.
const RETRY_MAX: Duration = Duration::from_secs(1);

// === impl Lock ===

impl Lock {
    pub(crate) fn new(client: Client, name: &str) -> Lock {
        let key = format!("{}{}", client.inner.key_prefix, name);
        // Redisson's rule: braces are added only to a name that has none,
        // so the channel shares the key's hash slot either way.
        let channel = if key.contains('{') {
            format!("redisson_lock__channel:{key}")
        } else {
            format!("redisson_lock__channel:{{{key}}}")
        };
        Lock {
            client,
            name: name.into(),
            key: key.into(),
            channel: channel.into(),
        }
    }

    /// The name given to [`Client::lock`] (without the key prefix).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// assert_eq!(client.lock("a").name(), "a");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Redis key of the lock hash (prefix included).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// let key = client.lock("a").key().to_owned();
    /// # }
    /// ```
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The unlock channel: `redisson_lock__channel:{<key>}`, or
    /// `redisson_lock__channel:<key>` if the key contains `{` (Redisson's
    /// rule; key and channel then share the hash tag already in the key).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// assert!(client.lock("a").channel().starts_with("redisson_lock__channel:{"));
    /// # }
    /// ```
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// Waits until the lock is held by the current owner, with a lease the
    /// watchdog renews while the guard lives.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped future holds nothing. If an acquire it sent
    /// succeeds after it was dropped, the hold is given back at once; its
    /// subscription reference is released and an unused wake-up is passed
    /// to the next waiter. It loses only its place in the local queue.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let guard = client.lock("orders:42").lock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<LockGuard> {
        self.acquire(None, None).await.map(must_acquire)
    }

    /// Like [`lock`](Self::lock), with a fixed `lease`: the lock expires
    /// `lease` after it was taken unless unlocked before; it is never
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
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        self.acquire(Some(lease), None).await.map(must_acquire)
    }

    /// Takes the lock if it is free (or already held by the current owner),
    /// without waiting. `Ok(None)` if someone else holds it.
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
    pub async fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.acquire(None, Some(Duration::ZERO)).await
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
    pub async fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.acquire(None, Some(wait)).await
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
    pub async fn try_lock_until(&self, deadline: Instant) -> Result<Option<LockGuard>> {
        let wait = deadline.saturating_duration_since(Instant::now());
        self.acquire(None, Some(wait)).await
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
    ) -> Result<Option<LockGuard>> {
        self.acquire(Some(lease), Some(wait)).await
    }

    /// Whether anyone holds the lock.
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
        self.check()?;
        let n: i64 = self.redis().exists(&*self.key).await?;
        Ok(n > 0)
    }

    /// Whether the current owner ([`Owner::current`]) holds the lock.
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

    /// How many holds the current owner has on the lock (0 if none).
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
        self.check()?;
        let field = self.field(Owner::current());
        let count: Option<i64> = self.redis().hget(&*self.key, field).await?;
        Ok(count.unwrap_or(0).clamp(0, u32::MAX as i64) as u32)
    }

    /// The lock's remaining lease, or `None` if it is not held or has no
    /// expiry.
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
        self.check()?;
        let ttl: i64 = self.redis().pttl(&*self.key).await?;
        Ok((ttl >= 0).then(|| Duration::from_millis(ttl as u64)))
    }

    /// Deletes the lock whoever holds it, and wakes its waiters. Returns
    /// whether there was a lock to delete. The holders' guards report
    /// `lost` at their watchdog's next renewal.
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
        self.check()?;
        let deleted: i64 = Scripts::get()
            .force_unlock
            .run(
                self.redis(),
                vec![(&*self.key).into(), (&*self.channel).into()],
                vec!["0".into(), self.client.inner.conn.publish_command().into()],
            )
            .await?;
        Ok(deleted == 1)
    }

    /// Whether the wait loop retries after `e` (until its deadline).
    fn retries(&self, e: &Error) -> bool {
        match e {
            Error::ReplicasMissing { .. } => self.client.inner.replicas.is_some_and(|r| r.retry),
            e => e.is_transient(),
        }
    }

    fn redis(&self) -> &fred::clients::Client {
        &self.client.inner.conn.redis
    }

    fn field(&self, owner: Owner) -> String {
        format!("{}:{}", self.client.inner.id, owner.id())
    }

    fn check(&self) -> Result<()> {
        self.client.check_open()?;
        if self.name.is_empty() {
            return Err(Error::invalid("lock name is empty"));
        }
        Ok(())
    }

    /// The wait loop (see the module docs). `wait: None` waits forever.
    ///
    /// Connection errors while waiting are retried (with back-off, and at
    /// once when the subscriber reconnects) until the deadline; then the
    /// last one is returned. Other errors are returned at once.
    async fn acquire(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        self.check()?;
        let lease_ms = lease_millis(lease.unwrap_or(self.client.inner.watchdog.timeout()))?;
        let deadline = wait.and_then(|w| Instant::now().checked_add(w));
        let owner = Owner::current();
        let target = Release {
            key: self.key.to_string(),
            channel: self.channel.to_string(),
            field: self.field(owner),
            lease_ms,
        };
        let fixed = lease.is_some();
        let mut subscription = None;
        let mut backoff = RETRY_FIRST;
        // 5. Every return drops `subscription`, leaving the queue.
        loop {
            self.client.check_open()?;
            // 1. / 3. Try (again, after subscribing or being woken).
            // Boxed: a waiting task keeps only this loop's small state, not
            // the script call's (which exists only while it is under way).
            let outcome = match Box::pin(self.attempt(owner, &target, fixed)).await {
                Ok(Attempt::Acquired(guard)) => return Ok(Some(guard)),
                Ok(Attempt::Held(_)) if subscription.is_none() && wait != Some(Duration::ZERO) => {
                    // 2. Subscribe, then try again at once. A subscription
                    // that cannot be confirmed before the deadline (the
                    // subscriber is reconnecting) ends the wait.
                    let subscribing = Box::pin(self.client.inner.pubsub.subscribe(&self.channel));
                    let subscribed = match deadline {
                        Some(d) => match tokio::time::timeout_at(d, subscribing).await {
                            Ok(subscribed) => subscribed,
                            Err(_) => return Ok(None),
                        },
                        None => subscribing.await,
                    };
                    match subscribed {
                        Ok(s) => {
                            subscription = Some(s);
                            continue;
                        }
                        Err(e) => Err(e),
                    }
                }
                Ok(Attempt::Held(ttl)) => Ok(ttl),
                Err(e) => Err(e),
            };
            // 4. Sleep until woken, or until the lease could have run out.
            let mut bound = self.client.inner.recheck_interval;
            let last_error = match outcome {
                Ok(ttl) => {
                    backoff = RETRY_FIRST;
                    if ttl >= 0 {
                        bound = bound.min(Duration::from_millis(ttl as u64 + 1));
                    }
                    None
                }
                Err(e) if self.retries(&e) && wait != Some(Duration::ZERO) => {
                    tracing::debug!(key = %self.key, error = %e, "retrying after a connection error");
                    bound = bound.min(backoff);
                    backoff = (backoff * 2).min(RETRY_MAX);
                    Some(e)
                }
                Err(e) => return Err(e),
            };
            if let Some(deadline) = deadline {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return last_error.map_or(Ok(None), Err);
                }
                bound = bound.min(left);
            }
            match &subscription {
                Some(s) => {
                    if !s.wait(bound).await {
                        s.refresh();
                    }
                }
                None => tokio::time::sleep(bound).await,
            }
        }
    }

    /// Runs `acquire` once, in the caller's future. Cancel safe through
    /// [`InFlight`]: a call dropped mid-flight is settled by a task that
    /// gives back a hold it may have taken.
    async fn attempt(&self, owner: Owner, target: &Release, fixed: bool) -> Result<Attempt> {
        let inner = &self.client.inner;
        let sent = Instant::now();
        let turn = inner.holds.turn(&target.key, &target.field).await;
        let before = inner.holds.count(&target.key, &target.field);
        let call = InFlight::acquire(inner.clone(), target.clone(), before, turn);
        let reply = holds::acquire(&inner.conn, target, before).await;
        call.finish();
        let mut epoch = match reply {
            Ok(Acquire::Held(count)) => inner.holds.acquired(target, count),
            Ok(Acquire::Busy(ttl)) => return Ok(Attempt::Held(ttl)),
            Err(e) => return Err(Error::Redis(e)),
        };
        if inner.replicas.is_some() {
            // Until enough replicas acknowledge it, the hold is unclaimed:
            // an error or a cancellation gives it back.
            let mut unclaimed = Unclaimed {
                inner: inner.clone(),
                target: target.clone(),
                epoch: Some(epoch),
            };
            if let Err(e) = replicas_acked(inner, target).await {
                // Given back before the error is reported: "not held".
                unclaimed.give_back().await?;
                return Err(e);
            }
            epoch = unclaimed.claim();
        }
        // No await from here on: the guard exists before we can be dropped.
        Ok(Attempt::Acquired(self.new_guard(
            owner,
            target.clone(),
            epoch,
            fixed,
            sent,
        )))
    }

    fn new_guard(
        &self,
        owner: Owner,
        target: Release,
        epoch: Arc<LeaseState>,
        fixed: bool,
        sent: Instant,
    ) -> LockGuard {
        let inner = &self.client.inner;
        let (state, registration) = if fixed {
            let until = sent + Duration::from_millis(target.lease_ms as u64);
            (LeaseState::new(until, true), None)
        } else {
            let registration = inner
                .watchdog
                .register(&inner.conn, &self.key, &target.field, sent);
            (registration.state().clone(), Some(registration))
        };
        LockGuard {
            hold: Some(Hold {
                lock: self.clone(),
                owner,
                field: target.field,
                lease_ms: target.lease_ms,
                state,
                epoch,
                registration,
            }),
        }
    }
}

/// With `wait_for_replicas`: whether enough replicas acknowledged the
/// acquire just made on this connection.
async fn replicas_acked(inner: &crate::client::ClientInner, target: &Release) -> Result<()> {
    let Some(wait) = inner.replicas else {
        return Ok(());
    };
    let acked = holds::wait_replicas(&inner.conn, &target.key, wait.replicas, wait.timeout).await?;
    if acked >= wait.replicas {
        Ok(())
    } else {
        Err(Error::ReplicasMissing {
            name: target.key.clone(),
            wanted: wait.replicas,
            acked,
        })
    }
}

fn must_acquire(guard: Option<LockGuard>) -> LockGuard {
    // `acquire` with no deadline only returns once it holds the lock.
    guard.unwrap_or_else(|| unreachable!("acquire without a deadline returned no guard"))
}

// === impl LockGuard ===

impl LockGuard {
    /// Releases this hold and reports the outcome. The lease stops being
    /// renewed at once.
    ///
    /// Returns [`Error::NotHeld`] (changing nothing) if the lease was
    /// already lost, so a lock now held by someone else is left alone.
    ///
    /// # Cancel safety
    ///
    /// If this future is dropped, the hold is still given back (in the
    /// background, or settled by a background task if the release was
    /// already sent); only the outcome is not reported.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let guard = client.lock("orders:42").lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn unlock(self) -> Result<()> {
        let mut hold = self.skip_drop();
        drop(hold.registration.take());
        let inner = hold.lock.client.inner.clone();
        if inner.is_shut_down() {
            return Err(Error::Shutdown);
        }
        let not_held = Error::NotHeld {
            name: hold.lock.key.to_string(),
        };
        if hold.epoch.is_lost() {
            // Re-acquired since this hold expired: it is not in Redis.
            return Err(not_held);
        }
        // Boxed: the caller's task does not carry the release's state.
        let released = Box::pin(
            Unclaimed {
                inner,
                target: hold.release(),
                epoch: Some(hold.epoch.clone()),
            }
            .give_back(),
        )
        .await?;
        if released {
            Ok(())
        } else {
            Err(not_held)
        }
    }

    /// Whether the lease is known to be lost (see the type docs).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let guard = client.lock("orders:42").lock().await?;
    /// assert!(!guard.is_lost());
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        let hold = self.hold();
        hold.state.is_lost() || hold.epoch.is_lost()
    }

    /// Completes when the lease is lost: at once if it already is.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let guard = client.lock("orders:42").lock().await?;
    /// tokio::select! {
    ///     _ = guard.lost() => { /* stop writing */ }
    ///     _ = async { /* work */ } => {}
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) {
        let hold = self.hold();
        tokio::select! {
            _ = hold.state.lost() => {}
            _ = hold.epoch.lost() => {}
        }
    }

    /// The lock this guard holds.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let guard = client.lock("orders:42").lock().await?;
    /// assert_eq!(guard.lock().name(), "orders:42");
    /// # Ok(()) }
    /// ```
    pub fn lock(&self) -> &Lock {
        &self.hold().lock
    }

    /// The owner the hold belongs to.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let guard = client.lock("orders:42").lock().await?;
    /// assert_eq!(guard.owner(), leasehold::Owner::current());
    /// # Ok(()) }
    /// ```
    pub fn owner(&self) -> Owner {
        self.hold().owner
    }

    fn hold(&self) -> &Hold {
        // Only `skip_drop` (which consumes the guard) takes the hold.
        self.hold
            .as_ref()
            .unwrap_or_else(|| unreachable!("guard without a hold"))
    }

    /// Takes the hold out so that `Drop` does nothing.
    fn skip_drop(mut self) -> Hold {
        self.hold
            .take()
            .unwrap_or_else(|| unreachable!("guard without a hold"))
    }
}

impl Hold {
    fn release(&self) -> Release {
        Release {
            key: self.lock.key.to_string(),
            channel: self.lock.channel.to_string(),
            field: self.field.clone(),
            lease_ms: self.lease_ms,
        }
    }
}

// === impl Unclaimed ===

impl Unclaimed {
    /// Gives the hold back now; `Ok(false)` if it was no longer held.
    ///
    /// Cancel safe: dropped before the release is sent, the hold goes back
    /// in the background (`Drop`); once sent, `InFlight` settles it.
    async fn give_back(mut self) -> Result<bool> {
        let inner = self.inner.clone();
        let turn = inner.holds.turn(&self.target.key, &self.target.field).await;
        let epoch = self.claim();
        let target = self.target.clone();
        let before = inner.holds.count(&target.key, &target.field);
        let call = InFlight::release(inner.clone(), target.clone(), before, epoch.clone(), turn);
        let released = Box::pin(holds::release(&inner.conn, &target, 1, before)).await;
        inner.holds.released(&target.key, &target.field, &epoch);
        call.finish();
        Ok(released?)
    }

    fn claim(&mut self) -> Arc<LeaseState> {
        self.epoch
            .take()
            .unwrap_or_else(|| unreachable!("a hold is claimed once"))
    }
}

impl Drop for Unclaimed {
    fn drop(&mut self) {
        if let Some(epoch) = self.epoch.take() {
            self.inner.release_in_background(self.target.clone(), epoch);
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let Some(mut hold) = self.hold.take() else {
            return;
        };
        drop(hold.registration.take());
        if !hold.epoch.is_lost() {
            let release = hold.release();
            hold.lock
                .client
                .inner
                .release_in_background(release, hold.epoch.clone());
        }
    }
}

//! The fenced lock (Redisson `RFencedLock`): a reentrant lock whose every
//! acquire takes a fencing token that only grows. When to use it and what
//! tokens promise: see [`FencedLock`].
//!
//! # Keys, channel and scripts
//!
//! Exactly the plain lock's (see [`Lock`](crate::Lock)), plus one counter:
//!
//! * the lock hash `name` (after the key prefix), field
//!   `<client-uuid>:<owner-id>` → hold count;
//! * the token counter `redisson_lock_token:{name}` (Redisson's rule: no
//!   braces are added to a name that has some), a string changed only by
//!   `INCR`, in the hash's slot;
//! * the channel `redisson_lock__channel:{name}`, message `0`.
//!
//! `scripts/acquire.lua` is the plain lock's acquire plus an `INCR` of the
//! counter on every success, re-entries included, and replies with the
//! token. Release, renewal and force-unlock are the plain lock's scripts,
//! untouched: the counter is never changed by them. `scripts/delete_token.lua`
//! deletes the counter unless the lock is held.
//!
//! So a fenced lock and a [`Lock`](crate::Lock) of the same name exclude
//! each other, and a Java `RFencedLock` or `RLock` of the name contends
//! with both. One owner may mix them: their holds are holds of one field,
//! counted in one lease record (the fenced lock acquires through the plain
//! lock, with its own script).
//!
//! # Waiting, dropping, cancelling
//!
//! As for the plain lock: the engine's wait loop (one local waiter woken
//! per unlock message), and every acquire and release under the engine's
//! rules. A dropped acquire holds nothing (a token it took is simply
//! skipped); a dropped guard releases in the background.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use fred::interfaces::KeysInterface;
use fred::types::Key;
use tokio::time::Instant;

use crate::client::Client;
use crate::core::prefix_name;
use crate::core::script::Script;
use crate::error::Result;
use crate::guard::LockGuard;
use crate::lock::Lock;

/// A reentrant distributed lock whose every acquire takes a fencing token
/// ([`LockGuard::token`]) larger than all tokens taken before, by anyone.
/// The same methods as [`Lock`](crate::Lock), plus [`token`](Self::token)
/// and [`delete_token`](Self::delete_token). Cheap to clone; nothing is
/// sent until a method is called.
///
/// Holders send their token with each write, and the protected resource
/// refuses tokens smaller than the largest it has seen (see *When to
/// use* below). Holds, leases, re-entry, the watchdog and waiting are the
/// plain lock's; a fenced lock and a [`Lock`](crate::Lock) of the same
/// name are one lock.
///
/// # When to use
///
/// A lock alone cannot stop a holder that *believes* it still holds: a
/// process paused for longer than its lease (GC, swapping, a stopped VM), a
/// request delayed in the network, or a failover that lost the lock's key
/// lets a second holder in while the first one still writes. The guard's
/// [`lost`](LockGuard::lost) signal fires only once the paused task runs
/// again, which is too late for a write already on its way.
///
/// **Fencing** closes that hole at the resource itself. Each acquire hands
/// out a token larger than every token handed out before; the holder sends
/// it with every write; the protected resource (a database row, a storage
/// service) keeps the largest token it has seen and refuses writes that
/// carry a smaller one. Once a newer holder has written, a late write of
/// an older one is refused, whatever the old holder believed. That check
/// needs no timing assumption, so it is the real safety net; the lock's
/// leases then only keep holders from getting in each other's way.
///
/// Use a fenced lock when a write under a lost lock would do harm and the
/// resource can check a number (a conditional update, a compare-and-set, a
/// column `fence` with `WHERE fence <= $token`). If the resource cannot
/// check tokens, a token buys nothing: use a [`Lock`](crate::Lock).
///
/// # Tokens
///
/// * **They only grow**: across owners, clients and processes, because one
///   atomic `INCR` on one key hands them out; across server restarts when
///   Redis persists every write (`appendonly yes`, `appendfsync always`;
///   with `everysec` a crash can lose the last second of increments).
///   Tokens that go back repeat: an old holder and a new one can then
///   carry the same token, and a resource must accept a token equal to
///   the largest it saw (a holder writes more than once), so it would take
///   both. Without persistence a restart forgets the counter (and the lock)
///   and tokens start again at 1. With asynchronous replication a failover
///   can lose the last increments: use
///   [`wait_for_replicas`](crate::ClientBuilder::wait_for_replicas) so a
///   guard is only returned once replicas have its increment.
/// * **Each guard has its own.** A re-entry takes a new, larger token; an
///   outer guard's token is then older than one the resource may have seen.
///   Write with the newest guard's token.
/// * **An acquire that fails or is dropped may still use up a token**
///   (the script ran, then the hold was given back). Tokens have gaps; they
///   never repeat.
///
/// # The token key never expires
///
/// A token counter with a TTL could vanish and restart at 1, breaking the
/// only promise tokens make. So, as in Redisson, it has none, and one small
/// key stays behind for every name ever locked (Redisson #6510 reports 25
/// million of them). For a fixed set of names that costs nothing. For
/// names made per item (`order:{id}`), delete the counters of names that
/// will never be locked again with [`FencedLock::delete_token`]. It refuses
/// while the lock is held, but it cannot know whether a paused process
/// still holds an old token, or whether the resource still remembers one:
/// after a delete, tokens start again at 1. Only delete a counter when the
/// name is retired for good, or when the resource forgets its largest token
/// for that name at the same time.
///
/// # Example
///
/// ```no_run
/// # async fn write_if_newer(token: u64, data: &str) -> leasehold::Result<()> { Ok(()) }
/// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
/// let lock = client.fenced_lock("ledger");
/// let guard = lock.lock().await?;
/// let token = guard.token().expect("a fenced lock's guard has a token");
/// // The resource keeps the largest token it saw and refuses smaller ones,
/// // so a holder that lost the lock in a pause cannot overwrite this.
/// write_if_newer(token, "balance = 42").await?;
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct FencedLock {
    /// The plain lock of the same name: its hash, field, channel, release
    /// and renewal are the fenced lock's.
    lock: Lock,
    token_key_str: Arc<str>,
    token_key: Key,
}

/// The fenced lock's own scripts, hashed once per process.
#[derive(Debug)]
struct Scripts {
    /// Take or re-enter, and take a token. Latched: re-sent with the same
    /// request id.
    acquire: Script,
    /// Delete the token counter unless the lock is held. Not retried.
    delete_token: Script,
}

fn scripts() -> &'static Scripts {
    static SCRIPTS: OnceLock<Scripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| Scripts {
        acquire: Script::latched("fenced_lock.acquire", include_str!("scripts/acquire.lua")),
        delete_token: Script::plain(
            "fenced_lock.delete_token",
            include_str!("scripts/delete_token.lua"),
        ),
    })
}

// === impl Client ===

impl Client {
    /// A handle to the fenced lock called `name` (the key prefix is added).
    /// Cheap; nothing is sent until it is used. An empty name is reported
    /// as [`Error::InvalidArgument`](crate::Error::InvalidArgument) by
    /// every call on the lock.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// let lock = client.fenced_lock("ledger");
    /// assert_eq!(lock.token_key(), "redisson_lock_token:{ledger}");
    /// # }
    /// ```
    pub fn fenced_lock(&self, name: &str) -> FencedLock {
        let lock = self.lock(name);
        let token_key = prefix_name("redisson_lock_token", lock.key());
        FencedLock {
            lock,
            token_key: Key::from(token_key.as_str()),
            token_key_str: token_key.into(),
        }
    }
}

// === impl FencedLock ===

impl FencedLock {
    /// The name given to [`Client::fenced_lock`] (without the key prefix).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// assert_eq!(client.fenced_lock("a").name(), "a");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The Redis key of the lock hash (prefix included): the plain lock's.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// assert_eq!(client.fenced_lock("a").key(), client.lock("a").key());
    /// # }
    /// ```
    pub fn key(&self) -> &str {
        self.lock.key()
    }

    /// The unlock channel: the plain lock's,
    /// `redisson_lock__channel:{<key>}`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// assert_eq!(client.fenced_lock("a").channel(), "redisson_lock__channel:{a}");
    /// # }
    /// ```
    pub fn channel(&self) -> &str {
        self.lock.channel()
    }

    /// The token counter's key: `redisson_lock_token:{<key>}`, or
    /// `redisson_lock_token:<key>` if the key contains `{` (Redisson's
    /// rule: it shares the lock's hash slot). It never expires (see
    /// [`FencedLock`], *The token key never expires*).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// assert_eq!(client.fenced_lock("user:{7}").token_key(), "redisson_lock_token:user:{7}");
    /// # }
    /// ```
    pub fn token_key(&self) -> &str {
        &self.token_key_str
    }

    /// Waits until the lock is held by the current owner, with a lease the
    /// watchdog renews while the guard lives. The guard's
    /// [`token`](LockGuard::token) is `Some`: a token larger than every
    /// token taken before.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped future holds nothing. If an acquire it sent
    /// succeeds after it was dropped, the hold is given back at once (the
    /// token it took is skipped); its subscription reference is released
    /// and an unused wake-up is passed to the next waiter. It loses only its
    /// place in the local queue.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let guard = client.fenced_lock("ledger").lock().await?;
    /// let token: Option<u64> = guard.token();
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<LockGuard> {
        self.acquire(None, None).await.map(must_acquire)
    }

    /// Like [`lock`](Self::lock), with a fixed `lease`: the lock expires
    /// `lease` after it was taken unless unlocked before; it is never
    /// renewed. [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// if `lease` is under 1 ms.
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
    /// let guard = client.fenced_lock("ledger").lock_with_lease(Duration::from_secs(10)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        self.acquire(Some(lease), None).await.map(must_acquire)
    }

    /// Takes the lock if it is free (or already held by the current owner),
    /// without waiting. `Ok(None)` if someone else holds it (no token is
    /// taken then).
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
    /// if let Some(guard) = client.fenced_lock("ledger").try_lock().await? {
    ///     guard.unlock().await?;
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
    /// let lock = client.fenced_lock("ledger");
    /// if let Some(guard) = lock.try_lock_for(Duration::from_millis(500)).await? {
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
    /// let guard = client.fenced_lock("ledger").try_lock_until(deadline).await?;
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
    /// let lock = client.fenced_lock("ledger");
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

    /// Whether anyone holds the lock (through a fenced or a plain handle).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let busy = client.fenced_lock("ledger").is_locked().await?;
    /// # Ok(()) }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        self.lock.is_locked().await
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
    /// let lock = client.fenced_lock("ledger");
    /// let g = lock.lock().await?;
    /// assert!(lock.is_held_by_current_task().await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_held_by_current_task(&self) -> Result<bool> {
        self.lock.is_held_by_current_task().await
    }

    /// How many holds the current owner has on the lock (0 if none),
    /// taken through fenced or plain handles.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let lock = client.fenced_lock("ledger");
    /// assert_eq!(lock.hold_count().await?, 0);
    /// # Ok(()) }
    /// ```
    pub async fn hold_count(&self) -> Result<u32> {
        self.lock.hold_count().await
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
    /// let left = client.fenced_lock("ledger").remaining_lease().await?;
    /// # Ok(()) }
    /// ```
    pub async fn remaining_lease(&self) -> Result<Option<Duration>> {
        self.lock.remaining_lease().await
    }

    /// Deletes the lock whoever holds it, and wakes its waiters, as
    /// [`Lock::force_unlock`](crate::Lock::force_unlock) does. Returns
    /// whether there was a lock to delete. The token counter is left alone:
    /// the next holder's token is still larger than every earlier one, so
    /// the resource refuses the late writes of the holder forced out.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, the delete may or may not have happened.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let was_locked = client.fenced_lock("ledger").force_unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        self.lock.force_unlock().await
    }

    /// The last token handed out for this name (`GET` of the counter, as
    /// Redisson's `getToken`), or `None` if none was ever taken (or the
    /// counter was deleted). A guard's own token is
    /// [`LockGuard::token`]; this one may be newer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let lock = client.fenced_lock("ledger");
    /// let guard = lock.lock().await?;
    /// assert!(lock.token().await? >= guard.token());
    /// # Ok(()) }
    /// ```
    pub async fn token(&self) -> Result<Option<u64>> {
        self.lock.check()?;
        let token: Option<i64> = self.lock.redis().get(self.token_key.clone()).await?;
        Ok(token.map(|t| t.max(0) as u64))
    }

    /// Deletes the token counter of a name that is no longer used, so it
    /// does not stay in Redis forever (see [`FencedLock`], *The token key
    /// never expires*). Returns `true` if it was deleted, `false` if nothing
    /// was: the lock is held (by anyone, through any handle: checked in the
    /// same step as the delete) or there was no counter.
    ///
    /// After a delete, tokens start again at 1. Call it only for a name
    /// retired for good (no process, not even a paused one, will write with
    /// an old token), or while the resource forgets its largest token for
    /// this name too; otherwise the resource refuses the new, smaller
    /// tokens, or two holders may carry equal ones.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, the delete may or may not have happened.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// // Order 42 is archived: its lock and the rows it fenced are gone.
    /// let deleted = client.fenced_lock("order:42").delete_token().await?;
    /// # Ok(()) }
    /// ```
    pub async fn delete_token(&self) -> Result<bool> {
        self.lock.check()?;
        let deleted: i64 = scripts()
            .delete_token
            .run(
                self.lock.redis(),
                &[Key::from(self.key()), self.token_key.clone()],
                &Vec::<fred::types::Value>::new(),
            )
            .await?;
        Ok(deleted == 1)
    }

    /// The client the lock is taken through (`MultiLock` orders its
    /// members by client id).
    pub(crate) fn client(&self) -> &Client {
        self.lock.client()
    }

    /// The plain lock's wait loop, with the fenced acquire script: every
    /// hold takes a token. `wait: None` waits forever.
    pub(crate) async fn acquire(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        self.lock
            .acquire_with(
                &scripts().acquire,
                std::slice::from_ref(&self.token_key),
                lease,
                wait,
            )
            .await
    }
}

fn must_acquire(guard: Option<LockGuard>) -> LockGuard {
    // `acquire` with no deadline only returns once it holds the lock.
    guard.unwrap_or_else(|| unreachable!("acquire without a deadline returned no guard"))
}

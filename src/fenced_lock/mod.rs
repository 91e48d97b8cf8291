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
//! token. Before its request record, `scripts/acquire_check.lua` answers a
//! try of a lock someone else holds at once (no record read or written);
//! every other acquire keeps its record, since a copy of it must be
//! answered with the token its first run took. A take of the free lock
//! is announced on the companion channel as the plain lock's is
//! (`core/takes.rs`). Release, renewal and force-unlock are the plain lock's scripts,
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

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::client::Client;
use crate::core::kind::Key;
use crate::core::script::Script;
use crate::error::Result;
use crate::guard::LockGuard;
use crate::handle::raw::{sealed, RawLock, RawSingle};
use crate::handle::LockHandle;
use crate::lock::{LockKind, Unfair};
use crate::naming::prefix_name;

/// A reentrant distributed lock whose every acquire takes a fencing token
/// ([`LockGuard::token`]) larger than all tokens taken before, by anyone.
/// The [`LockHandle`] of the fenced kind: every lock verb, as for a
/// [`Lock`](crate::Lock), plus [`token_key`](LockHandle::token_key),
/// [`token`](LockHandle::token) and
/// [`delete_token`](LockHandle::delete_token). Its guards' `token()` is
/// `Some`; a dropped acquire may use up a token (tokens have gaps, never
/// repeats). Its `force_unlock` leaves the token counter alone, so the next
/// holder's token is still larger than every earlier one. Cheap to clone;
/// nothing is sent until a method is called.
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
pub type FencedLock = LockHandle<Fenced>;

/// The raw kind of a [`FencedLock`] (see [`RawLock`]): the plain lock of
/// the same name (its hash, field, channel, release and renewal are the
/// fenced lock's) and the token counter. Not used directly.
///
/// # Example
///
/// ```no_run
/// # fn f(client: leasehold::Client) {
/// let lock: leasehold::LockHandle<leasehold::raw::Fenced> = client.fenced_lock("a");
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Fenced {
    lock: Unfair,
    token_key_str: Arc<str>,
    token_key: Key,
}

/// The lock's kind with the fenced acquire script: holds of the same
/// field as the plain lock's, in the same lease record.
static FENCED: LockKind = LockKind::with_acquire(&ACQUIRE);

/// Take or re-enter, and take a token. Recorded: re-sent with the same
/// request id.
static ACQUIRE: Script = Script::recorded_after(
    "fenced_lock.acquire",
    &[include_str!("scripts/acquire_check.lua")],
    &[include_str!("scripts/acquire.lua")],
);
/// Delete the token counter unless the lock is held. Not retried.
static DELETE_TOKEN: Script = Script::plain(
    "fenced_lock.delete_token",
    include_str!("scripts/delete_token.lua"),
);

/// The token counter's key prefix (Redisson's): `redisson_lock_token:{name}`.
pub(crate) const TOKEN_PREFIX: &str = "redisson_lock_token";

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
        let lock = Unfair::new(self, name);
        let token_key = prefix_name(TOKEN_PREFIX, RawSingle::key(&lock));
        LockHandle::from_raw(Fenced {
            lock,
            token_key: Key::from(token_key.as_str()),
            token_key_str: token_key.into(),
        })
    }
}

// === impl FencedLock ===

impl FencedLock {
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
        &self.raw().token_key_str
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
        self.raw().lock.check()?;
        let token = self
            .raw()
            .lock
            .client()
            .engine()
            .conn()
            .get_int(&self.raw().token_key)
            .await?;
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
        self.raw().lock.check()?;
        let deleted: i64 = self
            .raw()
            .lock
            .client()
            .engine()
            .conn()
            .eval(
                &DELETE_TOKEN,
                &[Key::from(self.key()), self.raw().token_key.clone()],
                &[],
            )
            .await?;
        Ok(deleted == 1)
    }
}

// === impl Fenced ===

impl Fenced {
    /// The client the lock is taken through (`MultiLock` orders its
    /// members by client id).
    pub(crate) fn client(&self) -> &Client {
        self.lock.client()
    }
}

impl sealed::Sealed for Fenced {}

impl RawLock for Fenced {
    type Guard = LockGuard;

    fn name(&self) -> &str {
        RawLock::name(&self.lock)
    }

    /// The plain lock's wait loop, with the fenced acquire script: every
    /// hold takes a token.
    fn acquire(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> impl Future<Output = Result<Option<LockGuard>>> + Send + '_ {
        self.lock
            .acquire_with(&FENCED, std::slice::from_ref(&self.token_key), lease, wait)
    }
}

/// The plain lock's hash: its reads (the provided ones) and its
/// force-unlock (the token counter is left alone).
impl RawSingle for Fenced {
    fn key(&self) -> &str {
        self.lock.key()
    }

    fn channel(&self) -> &str {
        self.lock.channel()
    }

    fn client(&self) -> &Client {
        RawSingle::client(&self.lock)
    }

    fn check(&self) -> Result<()> {
        RawSingle::check(&self.lock)
    }

    fn force_unlock(&self) -> impl Future<Output = Result<bool>> + Send + '_ {
        self.lock.force_unlock()
    }
}

/// Each script's pieces share only what they declare together
/// (`core/lua_lint.rs`).
#[cfg(test)]
mod lua_lint {
    use super::*;

    #[test]
    fn pieces_share_only_what_they_declare() {
        crate::core::lua_lint::check(&[&ACQUIRE, &DELETE_TOKEN]);
    }
}

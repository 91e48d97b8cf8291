//! The semaphore with leased permits (Redisson `RPermitExpirableSemaphore`)
//! and its permit.
//!
//! # When to use
//!
//! Use a [`Semaphore`] to cap how many tasks, across every process, do
//! something at once: N concurrent jobs, N connections to a fragile
//! service, N slots of a rate-limited API. Each [`Permit`] is a lease: a
//! holder that dies gives its permits back within the watchdog timeout,
//! never "some day". For one holder at a time use a [`Lock`](crate::Lock)
//! (reentrant, with an owner) instead; to wait until N things have
//! happened, a [`CountDownLatch`](crate::CountDownLatch).
//!
//! # Keys, channel and scripts
//!
//! Semaphore `name` (after the client's key prefix) is, as in Redisson:
//!
//! | key | type | contents |
//! | --- | --- | --- |
//! | `name` | string | the free permit count |
//! | `{name}:timeout` (`name:timeout` if the name has braces) | zset | one member per taken permit: its id as 16 raw bytes; score: its expiry in epoch ms, or `922337203685477` for Redisson's permits that never expire |
//! | `redisson_sc:{name}` (`redisson_sc:name` if the name has braces) | channel | a decimal count: how many waiters per client may retry |
//!
//! Scripts (beside this file): `acquire.lua` and `release.lua` (recorded:
//! idempotent by request id, see `core/call.rs`), `try_set_permits.lua`
//! `add_permits.lua` and `force_release_all.lua` (recorded, one request
//! record per call), `available.lua` and the watchdog's `renew.lua`. All
//! but `renew`, `try_set_permits`, `add_permits` and `force_release_all`
//! first *reclaim*: permits whose expiry has passed go back
//! to the free count (`reclaim.lua`).
//!
//! Expiry times are the clients' clocks (`SystemTime`), as in Redisson,
//! not Redis's: a client whose clock runs ahead by `d` reclaims other
//! clients' permits `d` early, and the holders are not told. A watchdog
//! permit always has at least two thirds of the watchdog timeout left (20
//! s by default), so it is safe while clocks agree to better than that; a
//! fixed lease is shortened by any skew. Keep the clocks of every client
//! of a semaphore synchronised (NTP).
//!
//! # Permits are leases
//!
//! Every permit is its own lease in the engine (kind `PermitKind`, a fresh owner per
//! permit, the request record `leasehold_latch:{name}:<id>`). A permit taken with a
//! fixed lease scores `now + lease` and is never renewed. A permit taken
//! without one scores `now + watchdog timeout` and the watchdog pushes its
//! score forward while the [`Permit`] lives, only while it is still in the
//! zset and not yet expired (never bringing back a reclaimed permit). So a
//! holder that is killed gives its permits back within the watchdog
//! timeout: the next script that reclaims frees them. (Redisson has no
//! watchdog for permits: a permit without a lease never expires, and one
//! whose holder dies is gone for good, issue #2045.)
//!
//! # Waiting, dropping, cancelling
//!
//! Waiting is the engine's wait loop (`core/wait.rs`): try, subscribe, try,
//! sleep until a message, the nearest permit expiry in the zset (the
//! acquire script reports it) or the client's recheck interval, repeat. A
//! message carries a count N (permits given back or added) and wakes up to
//! N local waiters, oldest first. All tries of one acquire use one permit
//! id, and an acquire whose reply was lost is recognised by that id, so a
//! permit is never taken twice. A dropped acquire holds nothing; a dropped
//! permit is given back in the background.
//!
//! # What a Java client sees
//!
//! Our permits are ordinary Redisson permits with a lease: a Java
//! `RPermitExpirableSemaphore` on the same name counts them as taken, sees
//! their lease (`getLeaseTime`) shrink and grow as the watchdog renews
//! them, can release one by its hex [`id`](Permit::id), and reclaims them
//! when they expire. Java permits taken without a lease (score
//! `922337203685477`) are never reclaimed by us either, and their release
//! messages wake our waiters.

mod permit;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::clock::epoch_ms;

use tokio::time::Instant;

use crate::client::Client;
use crate::core::kind::{
    wake_count, AcquireReply, Bytes, Key, Kind, Lease, Policy, ReleaseReply, Renewal, Reply,
    Request, Spec, Try, Value,
};
use crate::core::script::Script;
use crate::error::{Error, Result};
use crate::guard::LeaseSignal;
use crate::handle::run;
use crate::naming::{prefix_name, suffix_name};

pub use permit::Permit;

/// A semaphore whose permits are leases, by name. Cheap to clone; nothing
/// is sent until a method is called.
///
/// Set the number of permits once ([`try_set_permits`](Self::try_set_permits))
/// or change it ([`add_permits`](Self::add_permits)); each
/// [`acquire`](Self::acquire) takes one permit, held by the returned
/// [`Permit`] until it is released or dropped. Permits are not reentrant
/// and belong to no task: every acquire takes a new one.
///
/// Permits taken with [`acquire`](Self::acquire),
/// [`try_acquire`](Self::try_acquire) or
/// [`try_acquire_for`](Self::try_acquire_for) keep a lease of the watchdog
/// timeout that the [`Watchdog`](crate::Watchdog) renews while the permit
/// lives; the `_with_lease` variants set a fixed lease that is never
/// renewed.
///
/// Waiters of one client are woken oldest first, as many as permits came
/// back. Across clients there is no queue: the semaphore is not fair.
///
/// The keys are Redisson's `RPermitExpirableSemaphore`'s, and Java
/// clients can share the semaphore. One behaviour differs on purpose: a
/// Redisson permit taken without a lease never expires, so a holder that
/// dies keeps it for good (Redisson issue #2045); here it comes back
/// within the watchdog timeout. Permit expiry follows the clients' clocks,
/// as in Redisson: keep them synchronised.
///
/// # Example
///
/// ```no_run
/// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
/// let sem = client.semaphore("workers");
/// sem.try_set_permits(3).await?;
/// let permit = sem.acquire().await?;   // one of 3
/// assert_eq!(sem.available_permits().await?, 2);
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Semaphore {
    client: Client,
    name: Arc<str>,
    key_str: Arc<str>,
    key: Key,
    timeout_key: Key,
    channel: Arc<str>,
    channel_key: Key,
}

/// Take one permit. Recorded: re-sent with the same request id.
static ACQUIRE: Script = Script::recorded(
    "semaphore.acquire",
    &[
        include_str!("scripts/reclaim.lua"),
        include_str!("scripts/acquire.lua"),
    ],
);
/// Give one permit back; publishes the new count. Recorded.
static RELEASE: Script = Script::recorded(
    "semaphore.release",
    &[
        include_str!("scripts/reclaim.lua"),
        include_str!("scripts/release.lua"),
    ],
);
/// The watchdog's batch per slot (also one permit's renewal).
static RENEW: Script = Script::renewal("semaphore.renew", include_str!("scripts/renew.lua"));
/// Read the free count after reclaiming. Not retried.
static AVAILABLE: Script = Script::plain(
    "semaphore.available",
    concat!(
        include_str!("scripts/reclaim.lua"),
        include_str!("scripts/available.lua")
    ),
);
/// Set the free count if the semaphore is not set. Recorded, one
/// request record per call.
static TRY_SET_PERMITS: Script = Script::recorded(
    "semaphore.try_set_permits",
    &[include_str!("scripts/try_set_permits.lua")],
);
/// Add to the free count (a negative delta takes permits away).
/// Recorded, one request record per call.
static ADD_PERMITS: Script = Script::recorded(
    "semaphore.add_permits",
    &[include_str!("scripts/add_permits.lua")],
);
/// Free every permit out (an operator's force unlock). Recorded, one
/// request record per call.
static FORCE_RELEASE_ALL: Script = Script::recorded(
    "semaphore.force_release_all",
    &[include_str!("scripts/force_release_all.lua")],
);

/// The engine's view of a permit.
#[derive(Debug)]
struct PermitKind;

/// Owners of permits: one per permit, unique in the process.
static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);

/// Renewal of permits: their scores in the semaphore's zset (each entry
/// written by `PermitKind::renew_entry`).
static RENEWAL: Renewal = Renewal {
    slot: &RENEW,
    node: None,
    packed: None,
};

/// A fresh permit id: 16 random bytes as 32 lowercase hex digits.
fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// The zset member of a permit: its hex id as 16 raw bytes.
fn id_bytes(hex: &str) -> Value {
    let bytes: Vec<u8> = hex
        .as_bytes()
        .chunks(2)
        .map(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|digits| u8::from_str_radix(digits, 16).ok())
                .unwrap_or(0)
        })
        .collect();
    Value::Bytes(Bytes::from(bytes))
}

/// The zset of the semaphore a permit lease is of.
fn timeout_key_of(lease: &Lease) -> Key {
    Key::from(suffix_name(lease.key_str(), PERMITS_SUFFIX))
}

/// The channel's prefix (Redisson's): `redisson_sc:{name}`.
pub(crate) const CHANNEL_PREFIX: &str = "redisson_sc";
/// The permit set's suffix (Redisson's): `{name}:timeout`.
pub(crate) const PERMITS_SUFFIX: &str = "timeout";

// === impl Client ===

impl Client {
    /// A handle to the semaphore called `name` (the key prefix is added).
    /// Cheap; nothing is sent until it is used. An empty name is reported
    /// as [`Error::InvalidArgument`] by every call on the semaphore.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let sem = client.semaphore("workers");
    /// assert_eq!(sem.name(), "workers");
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, name: &str) -> Semaphore {
        let key = self.key(name);
        let channel = prefix_name(CHANNEL_PREFIX, &key);
        Semaphore {
            client: self.clone(),
            name: name.into(),
            key: Key::from(key.as_str()),
            timeout_key: Key::from(suffix_name(&key, PERMITS_SUFFIX)),
            key_str: key.into(),
            channel_key: Key::from(channel.as_str()),
            channel: channel.into(),
        }
    }
}

// === impl Semaphore ===

impl Semaphore {
    /// The name given to [`Client::semaphore`] (without the key prefix).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// assert_eq!(client.semaphore("a").name(), "a");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Redis key of the free permit count (prefix included).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// let key = client.semaphore("a").key().to_owned();
    /// # }
    /// ```
    pub fn key(&self) -> &str {
        &self.key_str
    }

    /// The channel permits are announced on: `redisson_sc:{<key>}`, or
    /// `redisson_sc:<key>` if the key contains `{` (Redisson's rule).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// assert_eq!(client.semaphore("a").channel(), "redisson_sc:{a}");
    /// # }
    /// ```
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// Sets the number of permits if the semaphore is not set yet, and
    /// wakes waiters. Returns whether it was set (`false`: it already was;
    /// nothing changed). [`Error::InvalidArgument`] if `permits` is over
    /// `i64::MAX`.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped once the call was sent, the permits may or
    /// may not have been set (at most once).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let sem = client.semaphore("workers");
    /// if sem.try_set_permits(3).await? {
    ///     println!("first here: 3 permits");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_set_permits(&self, permits: u64) -> Result<bool> {
        let permits = i64::try_from(permits)
            .map_err(|_| Error::invalid(format!("{permits} permits is over i64::MAX")))?;
        let reply = self
            .mutate(&TRY_SET_PERMITS, Value::Integer(permits))
            .await?;
        Ok(reply.first() == Some(&1))
    }

    /// Adds `delta` permits (a negative `delta` takes free permits away;
    /// the free count may go below zero, and acquires then wait until
    /// enough permits come back). A positive `delta` wakes up to `delta`
    /// waiters per client. The semaphore is set (from zero) if it was not.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped once the call was sent, the permits may or
    /// may not have been added (at most once: no copy of the call runs
    /// twice).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let sem = client.semaphore("workers");
    /// sem.add_permits(2).await?;   // two more jobs at once
    /// sem.add_permits(-1).await?;  // one fewer
    /// # Ok(()) }
    /// ```
    pub async fn add_permits(&self, delta: i64) -> Result<()> {
        if delta == 0 {
            return self.check();
        }
        self.mutate(&ADD_PERMITS, Value::Integer(delta))
            .await
            .map(drop)
    }

    /// Frees every permit out, whoever holds it (an operator's tool, as
    /// [`LockHandle::force_unlock`](crate::LockHandle::force_unlock) is for
    /// a lock): each goes back to the free count, and waiters are woken.
    /// Returns how many permits were out (0: none, nothing changed;
    /// expired permits not yet reclaimed count too). Runs once even if
    /// fred re-sends it after a reconnect: a copy arriving later never
    /// frees a permit taken after the first run.
    ///
    /// The [`Permit`]s of this client's holders report lost at once;
    /// holders in other clients learn it at their watchdog's next renewal
    /// (a permit with a fixed lease, when its lease ends). Their releases
    /// then give nothing back.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped once the call was sent, the permits may or
    /// may not have been freed (at most once).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let freed = client.semaphore("workers").force_release_all().await?;
    /// println!("{freed} permit(s) freed");
    /// # Ok(()) }
    /// ```
    pub async fn force_release_all(&self) -> Result<u64> {
        self.check()?;
        let engine = self.client.engine();
        let reply = engine
            .force_unlock(
                Request::new(
                    &FORCE_RELEASE_ALL,
                    [
                        self.key.clone(),
                        self.timeout_key.clone(),
                        self.channel_key.clone(),
                    ],
                )
                .publish(),
                (&self.key, &self.key_str),
                &self.client.id().to_string(),
            )
            .await?;
        Ok(match *reply {
            [1, n, ..] => n.max(0) as u64,
            _ => 0,
        })
    }

    /// The number of free permits (0 if the semaphore is not set, or if
    /// [`add_permits`](Self::add_permits) took more than were free).
    /// Expired permits are reclaimed first, as Redisson does.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped, expired permits may have been
    /// reclaimed, which any later call would do too.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let free = client.semaphore("workers").available_permits().await?;
    /// # Ok(()) }
    /// ```
    pub async fn available_permits(&self) -> Result<u64> {
        self.check()?;
        let free: i64 = Request::new(
            &AVAILABLE,
            [
                self.key.clone(),
                self.timeout_key.clone(),
                self.channel_key.clone(),
            ],
        )
        .arg(epoch_ms())
        .publish()
        .run_plain(self.client.engine().conn())
        .await?;
        Ok(free.max(0) as u64)
    }

    /// Waits until a permit is free and takes it, with a lease the
    /// watchdog renews while the [`Permit`] lives.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped future holds nothing. If an acquire it sent
    /// succeeds after it was dropped, the permit is given back at once; its
    /// subscription reference is released and an unused wake-up is passed
    /// to the next waiter. It loses only its place in the local queue.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let _permit = client.semaphore("workers").acquire().await?;
    /// // … at most N of these run at once …
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self) -> Result<Permit> {
        self.acquire_permit(None, None).await.map(must_acquire)
    }

    /// Like [`acquire`](Self::acquire), with a fixed `lease`: the permit
    /// expires `lease` after it was taken unless released before; it is
    /// never renewed. [`Error::InvalidArgument`] if `lease` is under 1 ms.
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let permit = client.semaphore("workers").acquire_with_lease(Duration::from_secs(60)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire_with_lease(&self, lease: Duration) -> Result<Permit> {
        self.acquire_permit(Some(lease), None)
            .await
            .map(must_acquire)
    }

    /// Takes a permit if one is free, without waiting. `Ok(None)` if none
    /// is.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped while the acquire is in
    /// flight and it succeeds, the permit is given back at once.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// match client.semaphore("workers").try_acquire().await? {
    ///     Some(permit) => { /* run the job */ permit.release().await? }
    ///     None => { /* full: try later */ }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self) -> Result<Option<Permit>> {
        self.acquire_permit(None, Some(Duration::ZERO)).await
    }

    /// Waits up to `wait` for a permit. `Ok(None)` if none was free in
    /// time. `Duration::MAX` waits forever.
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let sem = client.semaphore("workers");
    /// if let Some(permit) = sem.try_acquire_for(Duration::from_millis(500)).await? {
    ///     permit.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire_for(&self, wait: Duration) -> Result<Option<Permit>> {
        self.acquire_permit(None, Some(wait)).await
    }

    /// Waits until `deadline` for a permit (as
    /// [`LockHandle::try_lock_until`](crate::LockHandle::try_lock_until)).
    /// `Ok(None)` if none was free in time.
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    /// let permit = client.semaphore("workers").try_acquire_until(deadline).await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire_until(&self, deadline: Instant) -> Result<Option<Permit>> {
        let wait = deadline.saturating_duration_since(Instant::now());
        self.acquire_permit(None, Some(wait)).await
    }

    /// Runs `work` under a permit: waits for one (as
    /// [`acquire`](Self::acquire), a lease the watchdog renews), runs the
    /// future `work` returns, gives the permit back, and returns the
    /// future's output. If the permit's lease is lost meanwhile the future
    /// is dropped at once and `with` returns [`Error::Lost`]; see
    /// [`LockHandle::with`](crate::LockHandle::with), whose rules these
    /// are.
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future drops `work`'s future (if it started)
    /// and gives the permit back in the background; a dropped wait holds
    /// nothing.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let rows = client.semaphore("workers").with(|_lease| async { 42 }).await?;
    /// # Ok(()) }
    /// ```
    pub async fn with<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(LeaseSignal) -> Fut,
        Fut: Future<Output = T>,
    {
        let permit = self.acquire().await?;
        run(permit, work).await
    }

    /// As [`with`](Self::with), but waits at most `wait` for a permit:
    /// `Ok(None)` if none was free in time (`work` is not called).
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
    /// let sem = client.semaphore("workers");
    /// if sem.try_with_for(Duration::from_secs(1), |_| async {}).await?.is_none() {
    ///     println!("all workers busy");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_with_for<F, Fut, T>(&self, wait: Duration, work: F) -> Result<Option<T>>
    where
        F: FnOnce(LeaseSignal) -> Fut,
        Fut: Future<Output = T>,
    {
        match self.try_acquire_for(wait).await? {
            Some(permit) => run(permit, work).await.map(Some),
            None => Ok(None),
        }
    }

    /// Waits up to `wait` for a permit, then holds it with a fixed `lease`
    /// (never renewed). `Ok(None)` if none was free in time.
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let sem = client.semaphore("workers");
    /// let permit = sem.try_acquire_with_lease(Duration::from_secs(1), Duration::from_secs(30)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<Permit>> {
        self.acquire_permit(Some(lease), Some(wait)).await
    }

    fn check(&self) -> Result<()> {
        self.client.engine().check()?;
        if self.name.is_empty() {
            return Err(Error::invalid("semaphore name is empty"));
        }
        Ok(())
    }

    /// Runs a recorded script on the count and channel (one request record per
    /// call: see `Call::run_once`).
    async fn mutate(&self, script: &'static Script, arg: Value) -> Result<Reply> {
        self.check()?;
        let engine = self.client.engine();
        engine
            .run_once(
                Request::new(script, [self.key.clone(), self.channel_key.clone()])
                    .arg(arg)
                    .publish(),
                &self.key_str,
                &self.client.id().to_string(),
            )
            .await
    }

    /// The wait loop (see the module docs): one new permit id for all the
    /// tries. `wait: None` waits forever.
    pub(crate) async fn acquire_permit(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<Permit>> {
        self.check()?;
        let id: Arc<str> = new_id().into();
        let spec = Spec {
            kind: &PermitKind,
            // A fresh owner per acquire: a permit is one hold.
            owner: NEXT_OWNER.fetch_add(1, Ordering::Relaxed),
            key: &self.key,
            channel: &self.channel,
            // The permit's id.
            field: &id,
            release_channel: self.channel_key.as_bytes(),
            // The zset of permit expiries.
            keys: std::slice::from_ref(&self.timeout_key),
        };
        let hold = self.client.engine().acquire(spec, lease, wait).await?;
        Ok(hold.map(|hold| Permit::new(hold, id, self.name.clone(), self.key_str.clone())))
    }
}

fn must_acquire(permit: Option<Permit>) -> Permit {
    // `acquire` with no deadline only returns once it holds a permit.
    permit.unwrap_or_else(|| unreachable!("acquire without a deadline returned no permit"))
}

// === impl PermitKind ===

impl Kind for PermitKind {
    /// `KEYS[2]` is the zset of permit expiries (the spec's key), the
    /// permit's id its member.
    fn acquire(&self, lease: &Lease, at: &Try<'_>) -> Request {
        let now = epoch_ms();
        // Rounded up: the permit never expires before `sent + lease`, the
        // engine's idea of its end (`now` is floored).
        let expiry = now.saturating_add(at.lease_ms).saturating_add(1);
        Request::new(
            &ACQUIRE,
            std::iter::once(lease.key())
                .chain(at.keys.iter().cloned())
                .chain(std::iter::once(lease.channel())),
        )
        .arg(expiry)
        .arg(now)
        .publish()
        .arg(id_bytes(&lease.field()))
    }

    fn release(&self, lease: &Lease, _count: u32, _ttl_ms: i64) -> Request {
        // A permit is one hold: `count` is 1, and no TTL is left to keep.
        Request::new(
            &RELEASE,
            [lease.key(), timeout_key_of(lease), lease.channel()],
        )
        .arg(id_bytes(&lease.field()))
        .arg(epoch_ms())
        .publish()
    }

    fn busy_proves_gone(&self) -> bool {
        // A try is a new permit: a refusal says nothing of held ones.
        false
    }

    fn acquire_reply(&self, reply: &[i64]) -> AcquireReply {
        match reply {
            [1, ..] => AcquireReply::Held {
                count: 1,
                token: None,
            },
            // `{0, ms}`: retry after the nearest permit expiry.
            _ => AcquireReply::busy(reply),
        }
    }

    fn release_reply(&self, reply: &Reply) -> ReleaseReply {
        match reply.first() {
            Some(2) => ReleaseReply::Freed,
            _ => ReleaseReply::NotHeld,
        }
    }

    fn renewal(&self) -> &'static Renewal {
        &RENEWAL
    }

    /// The zset of permit expiries, the permit's id, and now (the script
    /// sets the score to now + TTL).
    fn renew_entry(&self, lease: &Lease, keys: &mut Vec<Key>, args: &mut Vec<Value>, _node: bool) {
        keys.push(timeout_key_of(lease));
        args.push(id_bytes(&lease.field()));
        args.push(epoch_ms().into());
    }

    fn wakes(&self) -> Policy {
        wake_count
    }

    fn excludes(&self, _mine: &Lease, _other: &Lease) -> bool {
        // Taking one permit proves nothing about the others.
        false
    }
}

/// Each script's pieces share only what they declare together
/// (`core/lua_lint.rs`).
#[cfg(test)]
mod lua_lint {
    use super::*;

    #[test]
    fn pieces_share_only_what_they_declare() {
        crate::core::lua_lint::check(&[
            &ACQUIRE,
            &ADD_PERMITS,
            &AVAILABLE,
            &FORCE_RELEASE_ALL,
            &RELEASE,
            &RENEW,
            &TRY_SET_PERMITS,
        ]);
    }
}

//! The fair lock (Redisson `RFairLock`): a reentrant lock whose waiters
//! are served in the order they arrived, across every client and process,
//! with one waiter woken per release.
//!
//! # Keys, channels and scripts
//!
//! For lock `name` (after the client's key prefix; Redisson's `prefixName`
//! rule: no braces are added to a name that has some, so every key and
//! channel below shares the name's hash slot):
//!
//! * the lock hash `name`: field `<client-uuid>:<owner-id>` → hold count,
//!   exactly as the plain lock's;
//! * the queue `redisson_lock_queue:{name}`: a list of waiters' fields,
//!   oldest first (`RPUSH` to join, `LPOP` when the head takes the lock);
//! * the timeouts `redisson_lock_timeout:{name}`: a zset, waiter field →
//!   the epoch milliseconds (client clock, as Redisson) after which the
//!   waiter counts as gone and is purged when it reaches the head, in
//!   Redisson's arithmetic (see "With Redisson" below);
//! * the grants `leasehold_grant:{name}` (leasehold only): a hash,
//!   `<field>` → `"<lease ms>:<nonce>:<alive until>"` for each queued
//!   leasehold waiter (written by its acquire when it queues; the nonce
//!   is that try's request id; `<alive until>` is its liveness sign,
//!   epoch ms, set by each of its tries; a suffix `:c` says that past it,
//!   its client's alive key vouches for it, see "Dead waiters"), and
//!   `!granted` →
//!   `"<nonce>:<field>"`: the field a release last granted the lock to
//!   and that grant's nonce, until that owner's next script on the lock
//!   or until the field is gone; the hash vanishes with its last entry;
//! * the alive keys `leasehold_alive:{name}:<client uuid>` (leasehold
//!   only): a string with a TTL of 5 s, one per client with waiters queued
//!   (see "Dead waiters");
//! * one channel per waiter, `redisson_lock__channel:{name}:<field>`: a
//!   release tells the head waiter only, on its own channel: `0`
//!   (Redisson's message) or `grant:<nonce>:<ms>` (below).
//!
//! Scripts (`scripts/`, each starting with the helpers of `queue.lua`;
//! `kind.rs` loads them):
//! `acquire.lua` and `release.lua` (recorded: idempotent by request id,
//! or, while the client's count proves a first run, by that count),
//! `force_unlock.lua`, `leave.lua` (a waiter that stopped waiting),
//! `kick.lua` (see `queue.rs`). Renewal is the plain lock's (`LockTask`).
//! Every script that finds the lock free purges gone waiters at the head
//! of the queue before it takes the lock or hands it over (and their
//! grant entries, and a `!granted` marker whose field is gone); a try of
//! a lock someone else holds only queues (its holder's release purges).
//! The acquire and the release check the lock before their request
//! record, as the plain lock's do (`core/script.rs`, "A check before the
//! record"): when Redis holds what the client counts, or a waiting try
//! of a lock someone else holds only queues its caller, no record is
//! read or written. A copy of a release finds the count its first run
//! left, or, where that run freed the lock (and perhaps granted it to the
//! head waiter), the field gone: it then changes nothing and answers
//! "gone", read as freed only if the request may have been sent twice
//! (`scripts/release_check.lua` says why no copy grants twice or frees a
//! later hold). The release is sent as its twin without the record while
//! the client's count is known (`core/script.rs`, "Sent without the
//! record").
//!
//! # One-hop handoff
//!
//! Every script that frees the lock (release, force-unlock, leave of a
//! head or of a granted waiter, kick) *hands it over*: if the head waiter
//! (after the purge) has a grant entry, the script makes it the holder
//! (`HSET name <field> 1`, `PEXPIRE name min(lease, GRANT)`, with
//! [`FairLock::GRANT`] = 5 s), pops it from the queue and the zset as its
//! own acquire would (other timeouts shift likewise), replaces its entry
//! by the `!granted` marker, and publishes `grant:<nonce>:<ms>` on its
//! channel; a Java head (no entry) is told `0` as in Redisson. The
//! release's reply says it granted, and to which field.
//!
//! If that field belongs to a client of this process (another task of the
//! same service, on the same or another [`Client`]), the
//! releasing client hands the waiter the same message itself before its
//! `unlock()` returns: Redis writes the release's reply before the
//! published message, so on a busy machine the message would reach even
//! a waiter in this process some tens of microseconds after the releaser
//! went on. Redis's copy then wakes nobody (`core/handoff.rs`, "Messages
//! handed over in this process"). A waiter in another process is told by
//! Redis's message alone.
//!
//! The waiter, handed that message with its wake-up, holds the lock
//! without another call if `<nonce>` is the request id of its latest try
//! (that try ran before the grant, found the lock busy and wrote the
//! nonce). The hold counts as an acquire that returned count 1 with TTL
//! `<ms>`, sent at `t_lb`: the later of that try's build time and the
//! send time of the latest timeout refresh that found the waiter still
//! queued (a grant pops it) — both before the grant ran, never the time
//! the message arrived. The guard's deadline is `t_lb + <ms>`, an
//! underestimate. A watchdog hold, or a fixed lease longer than the
//! grant, is then raised by one renewal of its own, in the background
//! (the watchdog timeout, or the fixed lease's remaining time), which
//! extends the signal from its send time; a watchdog hold registers with
//! the watchdog as usual.
//!
//! The `!granted` marker tells the owner's next script what the field's
//! hold is. Each acquire and leave says whether the client already counts
//! holds of the field: if it counts none, the marker means "granted, not
//! adopted" (the message was lost or not read yet): an acquire takes it
//! as a fresh hold (count 1, reply as a fresh acquire: no re-entry
//! counted) and a leave gives it back and hands the lock on. If it counts
//! some (it adopted), an acquire is a re-entry and the marker goes; a
//! release drops the marker too.
//!
//! * **Cancelled**: a wait dropped after the grant ran (whether or not it
//!   saw the message) leaves in the background (`Leave`, under the
//!   lease's turn), which gives the grant back at once. While another
//!   wait of the same owner is in progress, the leave leaves the entry
//!   and any grant to that wait (it is about to adopt it); the leave of
//!   the owner's last wait gives back whatever grant is left, whichever
//!   of the owner's waits it was made to. Only a leave that could not
//!   take the turn (at shutdown) is limited to grants whose nonce is one
//!   of its own wait's tries.
//! * **Gone**: a granted waiter that died holds the lock at most the grant
//!   lease; the releasing client, seeing the message reached nobody,
//!   kicks once the grant has run out (the next waiter also re-checks at
//!   its own bound).
//! * **Message lost** (a subscriber reconnect wakes every waiter; a
//!   refresh that finds the waiter popped wakes it too): the waiter's
//!   next acquire takes the grant as above.
//! * Not with a replicas requirement (`ClientBuilder::wait_for_replicas`):
//!   the waiter then takes a grant with its acquire script, which waits
//!   for the replicas as usual.
//!
//! # Waiting
//!
//! The engine's wait loop (`core/wait.rs`), on the waiter's own channel,
//! which stays subscribed until a second after the hold the wait got ends
//! (an owner that locks again soon starts subscribed, so queueing and
//! taking the lock cost one script call each): the first busy try queues
//! the waiter; it then sleeps until its message,
//! or until the lock's TTL (a holder that died), or, when the lock is free
//! and another waiter heads the queue, until that waiter's timeout (it may
//! be dead); the engine's re-check interval bounds every sleep of a
//! client's oldest waiter on the lock, which re-checks for the others
//! (they sleep until told, or an hour: `alive.rs`). One release wakes
//! exactly one waiter in the whole system: the head.
//!
//! What leasehold fixes of Redisson's fair lock (REDISSON-WIRE.md §14):
//!
//! * **Dead waiters**: a waiter is alive while its client is. Each client
//!   keeps one key per fair lock it waits on,
//!   `leasehold_alive:{name}:<client uuid>`, set every 2 s with a TTL of 5 s
//!   ([`FairLock::THREAD_WAIT`], Redisson: 5 minutes) however many of its
//!   tasks wait there, and only the oldest of them re-checks the lock
//!   (`alive.rs`): waiting costs Redis per client and lock, not per
//!   waiter. A client whose process died stops setting it: its waiters are
//!   purged by leasehold's scripts at most 5 s later, all of them at once
//!   (the entry's own sign, set by its last try, counts until then too).
//!   The client that released the lock to a dead waiter sees nobody
//!   received the message and checks again when the grant has run out
//!   (`queue.rs`). Waiters never spin on the script meanwhile. A waiter
//!   whose machine vanished without its connections being closed still
//!   looks subscribed to Redis: then the waiters behind it notice at their
//!   next re-check (the lock's remaining lease, at most the client's
//!   re-check interval, 30 s by default), plus the 5 s. Where a client
//!   cannot set the key (Dragonfly without undeclared keys, an ACL user
//!   without `~leasehold_alive:*`), each of its waiters refreshes its own
//!   sign every 2 s instead (2.5 Redis commands a second per waiter).
//! * **Dropped waiters** leave the queue at once (list and zset), in the
//!   background if their future was dropped. A waiter that timed out
//!   leaves before `try_lock_for` returns.
//! * **Nothing is left behind**: the queue and zset vanish with their last
//!   entry.
//!
//! # With Redisson
//!
//! A Java `RFairLock` and a leasehold fair lock of the same name are one
//! lock with one queue, served in arrival order whichever side each
//! waiter is on (`tests/fair_lock.rs`,
//! `java_and_leasehold_waiters_mixed_…`, and `tests/redisson_interop.rs`
//! against the real Redisson). Redisson purges a head whose score has
//! passed, gives a new waiter its predecessor's score plus one thread
//! wait (`fairLockWaitTimeout`, 5 minutes by default), and moves every
//! score one wait earlier on each acquire. Leasehold waiters keep their
//! scores in that arithmetic: at position `c` (0: the head), their
//! liveness sign plus `(c + 1)` × 5 minutes, set again at every try,
//! and leasehold's own acquire and leave move the others' scores as
//! Redisson's do. So no Java script ever purges a live leasehold waiter,
//! and a Java waiter queued behind one gets a full Java wait. Leasehold's
//! scripts purge a leasehold head by its liveness sign (seconds); Java's
//! by its score (minutes): a dead leasehold waiter holds up Java waiters
//! behind it, when a Java holder releases, as long as a dead Java waiter
//! would. The arithmetic assumes the Java side's thread wait is at most 5
//! minutes (the default; `tryLock(wait, …)` uses `wait`, shorter); with a
//! longer one, or a leasehold waiter that heads the queue for more than 5
//! minutes without a try (its client's oldest waiter tries at least every
//! re-check interval), a Java acquire can make a leasehold waiter look
//! dead, and if it heads the queue then, it is purged and queues again at
//! the tail at its next try, losing its place but not its wait.
//! Clocks of all clients must roughly agree (Redisson's rule).
//!
//! # Mixing handles
//!
//! A fair lock and a [`Lock`](crate::Lock) of the same name share the hash
//! (they exclude each other), but a plain lock's release tells no queued
//! waiter: use one kind per name. One owner cannot hold one name through
//! both kinds at once: while it holds one, an acquire of the other returns
//! [`Error::InvalidArgument`], sending
//! nothing (their holder field is one, so the client could not count the
//! holds apart).

mod acquire;
mod alive;
mod kind;
mod queue;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::client::Client;
use crate::clock::epoch_ms;
use crate::core::kind::{Feature, Request};
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::handle::raw::{sealed, RawLock, RawSingle};
use crate::handle::LockHandle;
use crate::naming::prefix_name;

pub(crate) use alive::{entry_alive_until, ALIVE_PREFIX};
pub(crate) use kind::{release_source, GRANTS_PREFIX, QUEUE_PREFIX, TIMEOUTS_PREFIX};
use kind::{Names, FORCE_UNLOCK};
use queue::{kick_if_unheard, GRANT, THREAD_WAIT};

/// A reentrant distributed lock that serves waiters in arrival order,
/// across every client and process (Redisson's `RFairLock`). Cheap to
/// clone; nothing is sent until a method is called.
///
/// The [`LockHandle`] of the fair kind: every lock verb, as for a
/// [`Lock`](crate::Lock), and the same [`LockGuard`]: holds, re-entry,
/// fixed or watchdog leases and `lost()` work exactly as there, plus
/// [`queue_key`](LockHandle::queue_key) and
/// [`timeout_key`](LockHandle::timeout_key). What differs is waiting: waiters join one queue in Redis and
/// each release wakes only the head waiter, so a busy lock costs one
/// acquire per handoff instead of one per waiting client, and nobody
/// waits behind later arrivals. A lock that is free is taken at once only
/// if nobody is queued. See the module docs for the keys and for what a
/// dead waiter costs (at most [`THREAD_WAIT`](LockHandle::THREAD_WAIT)). A
/// dropped wait leaves the queue; `force_unlock` hands the lock to the
/// head waiter (queued waiters keep their places); `holders` lists
/// holders only, not queued waiters.
///
/// # Example
///
/// ```no_run
/// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
/// let lock = client.fair_lock("printer");
/// let guard = lock.lock().await?; // served in arrival order
/// // … print …
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
pub type FairLock = LockHandle<Fair>;

/// The raw kind of a [`FairLock`] (see [`RawLock`]): its client, keys and
/// channels. Not used directly.
///
/// # Example
///
/// ```no_run
/// # fn f(client: leasehold::Client) {
/// let lock: leasehold::LockHandle<leasehold::raw::Fair> = client.fair_lock("a");
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Fair {
    client: Client,
    name: Arc<str>,
    key_str: Arc<str>,
    names: Names,
    /// `redisson_lock__channel:{name}`: a waiter listens on `<this>:<field>`.
    channel: Arc<str>,
}

// === impl Client ===

impl Client {
    /// A handle to the fair lock called `name` (the key prefix is added).
    /// Cheap; nothing is sent until it is used. An empty name is reported
    /// as [`Error::InvalidArgument`] by every call on the lock.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// let lock = client.fair_lock("printer");
    /// assert_eq!(lock.queue_key(), "redisson_lock_queue:{printer}");
    /// # }
    /// ```
    pub fn fair_lock(&self, name: &str) -> FairLock {
        let key = self.key(name);
        let channel = prefix_name("redisson_lock__channel", &key);
        LockHandle::from_raw(Fair {
            client: self.clone(),
            name: name.into(),
            names: Names::of(&key),
            key_str: key.into(),
            channel: channel.into(),
        })
    }
}

// === impl FairLock ===

impl FairLock {
    /// How long a waiter counts as alive after its client last showed up:
    /// 5 s (Redisson's `fairLockWaitTimeout`, 5 minutes there). A client
    /// with waiters on a fair lock renews one key for all of them every
    /// 2 s; a waiter whose process died holds up leasehold waiters for at
    /// most this long after its client's last renewal (Java waiters by
    /// Redisson's rules: see the module docs, "With Redisson").
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(leasehold::FairLock::THREAD_WAIT.as_secs(), 5);
    /// ```
    pub const THREAD_WAIT: Duration = THREAD_WAIT;

    /// The longest lease a release grants the waiter it hands the lock to
    /// (5 s; see the module docs, "One-hop handoff"): a granted waiter
    /// that has gone away holds the lock at most this long.
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(leasehold::FairLock::GRANT.as_secs(), 5);
    /// ```
    pub const GRANT: Duration = GRANT;

    /// The queue's key: `redisson_lock_queue:{<key>}` (no braces added to
    /// a key that has some).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// assert_eq!(client.fair_lock("a{b}").queue_key(), "redisson_lock_queue:a{b}");
    /// # }
    /// ```
    pub fn queue_key(&self) -> &str {
        self.raw().names.queue().as_str().unwrap_or_default()
    }

    /// The waiters' timeouts key: `redisson_lock_timeout:{<key>}`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// assert_eq!(client.fair_lock("a").timeout_key(), "redisson_lock_timeout:{a}");
    /// # }
    /// ```
    pub fn timeout_key(&self) -> &str {
        self.raw().names.timeouts().as_str().unwrap_or_default()
    }
}

// === impl Fair ===

impl Fair {
    /// The client the lock is taken through (`MultiLock` orders its
    /// members by client id).
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    fn check(&self) -> Result<()> {
        self.client.engine().check()?;
        if self.name.is_empty() {
            return Err(Error::invalid("lock name is empty"));
        }
        // The queue's scripts use LPOS (Redis 6.0.6).
        self.client.engine().require(Feature::Lpos)
    }
}

impl sealed::Sealed for Fair {}

impl RawLock for Fair {
    type Guard = LockGuard;

    fn name(&self) -> &str {
        &self.name
    }

    fn acquire(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> impl Future<Output = Result<Option<LockGuard>>> + Send + '_ {
        // The wait in the queue (`acquire.rs`).
        Fair::acquire(self, lease, wait)
    }
}

impl RawSingle for Fair {
    fn key(&self) -> &str {
        &self.key_str
    }

    /// `redisson_lock__channel:{name}`: a waiter listens on
    /// `<this>:<field>`.
    fn channel(&self) -> &str {
        &self.channel
    }

    fn client(&self) -> &Client {
        &self.client
    }

    fn check(&self) -> Result<()> {
        Fair::check(self)
    }

    /// Queued waiters keep their places: the head waiter is handed the
    /// lock.
    async fn force_unlock(&self) -> Result<bool> {
        self.check()?;
        let engine = self.client.engine();
        // The waiter the script hands the lock to held nothing when it was
        // sent: it keeps the grant (see `Engine::force_unlock`).
        let reply = engine
            .force_unlock(
                Request::new(&FORCE_UNLOCK, self.names.script_keys())
                    .arg(epoch_ms())
                    .publish()
                    .args(Names::hand_over_args()),
                (&self.names.key, &self.key_str),
                &self.client.id().to_string(),
            )
            .await?;
        if !reply.is_replay() {
            kick_if_unheard(engine.conn(), &self.names, &reply);
        }
        Ok(reply.first() == Some(&1))
    }
}

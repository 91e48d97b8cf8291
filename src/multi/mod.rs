//! Several locks as one: [`MultiLock`] holds every member or none
//! (Redisson's `RedissonMultiLock`), [`RedLock`] holds one name on N
//! independent servers while a majority of them do (the Redlock
//! algorithm). Both hand out a [`MultiGuard`].
//!
//! # When to use
//!
//! Use a **MultiLock** when one operation needs several locks at once — a
//! transfer between two accounts, each with its own lock, maybe on
//! different Redis deployments — and must never hold some of them without
//! the others. If the set is fixed, one lock over a combined name is
//! cheaper. Use a **RedLock** when you run several *independent* Redis
//! servers (no replication between them) and want a lock that survives the
//! loss of a minority of them. It costs N requests per acquire and per
//! unlock, and its waiters poll with random delays instead of being woken by
//! pub/sub. For one server, a primary with replicas, or a cluster, a
//! [`Lock`] (with
//! [`wait_for_replicas`](crate::ClientBuilder::wait_for_replicas) against
//! failovers) is simpler and faster. A RedLock is no fencing device; see
//! [What Redlock protects against](#what-redlock-protects-against-and-what-it-does-not).
//!
//! # Keys, channels, scripts
//!
//! None of their own. Every member is an ordinary lock of the family, with
//! its own keys, channel and scripts, on its own client. A Redisson
//! `RedissonMultiLock` or `RedissonRedLock` over the same `RLock`s contends
//! with them member by member.
//!
//! # MultiLock: the algorithm
//!
//! 1. **One global order.** [`MultiLock::new`] sorts the members by key,
//!    then server (the client's configured hosts and database), then
//!    client id, then kind. Every MultiLock, in any process, therefore takes
//!    the members it shares with another in the same order, so two
//!    MultiLocks can never wait for each other in a cycle. The key comes
//!    first because client ids differ between processes: ordered by client
//!    first, two processes could take the same two locks in opposite
//!    orders. Redisson takes members in list order, and two MultiLocks over
//!    the same locks in opposite orders deadlock (redisson #467, #1160).
//! 2. **The first member is waited for as long as the caller allows**,
//!    holding nothing meanwhile (pub/sub wake-ups, as for a single lock).
//! 3. **Each later member is waited for at most the member wait** (default
//!    1 s, [`MultiLock::with_member_wait`]), never past the caller's
//!    deadline, while the earlier members are held. Code outside MultiLocks
//!    may take the same locks in another order (a plain [`Lock`] holding B
//!    and waiting for A); the bound breaks that cycle instead of holding A
//!    forever.
//! 4. **All or nothing.** When a member is not taken in time, every member
//!    taken so far is given back, and the release is awaited, so they are
//!    free when the attempt ends. If the caller's wait allows, the attempt
//!    starts again from the first member after a random pause of 20–100 ms.
//!    A connection error is handled the same way until the deadline (then
//!    it is returned). Any other error is returned at once, after the give-back.
//! 5. **Leases.** With a fixed lease, each member's lease starts when that
//!    member is taken, and the guard is lost when the first of them ends.
//!    An attempt that took so long that the first lease already ran out is
//!    given back and retried. Redisson instead takes the members with
//!    twice the wait and shortens them afterwards. leasehold never shortens
//!    a key's TTL, since another hold of the same owner may need it.
//!
//! # RedLock: the algorithm
//!
//! [`RedLock::new`] takes N independent clients, N odd and at least 3, one
//! per Redis server. Each server holds an ordinary reentrant lock of the
//! name (`client.lock(name)` on each). A RedLock is therefore reentrant like
//! a [`Lock`], and the watchdog renews it like any other lease.
//!
//! 1. **A round** tries every server at once, in the caller's task (so as
//!    its [`Owner`](crate::Owner)), with a single try each, bounded by the
//!    server timeout (default 250 ms, [`RedLock::with_server_timeout`]).
//!    A server whose connection is known to be down (a single server that
//!    fred is reconnecting to) counts as failed at once instead of waiting
//!    out the timeout. The round waits for every answer, except once a
//!    majority (N/2 + 1) has acquired. The other servers then get as long
//!    again as the majority took, and the engine settles any it stops
//!    waiting for: a hold taken for nobody is given back. So a failed
//!    round has released everything it took before it reports.
//! 2. **Validity** is the time left on the majority's leases, as this
//!    client knows it. For each server, that is when its request was sent
//!    (or its latest renewal was) plus the lease. The majority's validity is
//!    the (N/2 + 1)-th longest of these, minus a clock-drift allowance of
//!    lease × 1 % + 2 ms. This is Redlock's `lease − elapsed − drift`, with
//!    the elapsed time counted from each request's own send time.
//! 3. **Held** when a majority acquired and the validity is positive.
//!    Otherwise every server that acquired is released (awaited, each within
//!    the server timeout; a slower release finishes in the background).
//!    If the wait allows, the round is retried after a random delay of up
//!    to the retry delay (default 200 ms, [`RedLock::with_retry_delay`]).
//! 4. **Outcomes.** When the wait runs out and a majority of servers
//!    answered (acquired, or found the lock busy), the lock is held
//!    elsewhere: `Ok(None)`. When fewer than a majority answered, the
//!    result is [`Error::NoQuorum`](crate::Error::NoQuorum), listing what
//!    each server answered ([`ServerResult`](crate::ServerResult)).
//!    Failures that cannot pass, such as a client that was shut down, end
//!    the wait at once if they leave no majority.
//!    `lock()` keeps retrying through outages.
//! 5. **Lost.** The guard is lost as soon as fewer than a majority of its
//!    holds are still valid on their servers, or the validity runs out.
//!    Either comes before Redis can let a majority of the holds expire.
//!    A server that restarts empty costs one hold. The guard keeps going on
//!    the others while they are a majority.
//! 6. **Unlock** releases every server at once, each within the server
//!    timeout (a slower release finishes in the background). It succeeds
//!    when a majority of the holds were still held.
//!
//! # What Redlock protects against, and what it does not
//!
//! Redlock tolerates the crash or partition of a minority of servers, with
//! no replication and no failover window. Its safety rests on timing
//! assumptions that a real system can break:
//!
//! * **Clocks.** A server whose clock jumps forward (an NTP step, an
//!   operator) expires keys early. Together with one more server, another
//!   client can then build a majority while this guard still counts its
//!   holds. The drift allowance covers clocks that run at slightly
//!   different rates, not jumps.
//! * **Process pauses and slow networks.** A holder paused for longer than
//!   the lease (GC, swapping, a stopped VM, a CPU-starved container) wakes
//!   up believing it holds the lock, and writes. [`MultiGuard::lost`] fires
//!   only once the task runs again, which is too late for a write already
//!   under way. A request delayed in the network past the lease has the
//!   same effect. Martin Kleppmann's "How to do distributed locking"
//!   (2016) describes these failures. Salvatore Sanfilippo's reply "Is
//!   Redlock safe?" is the other side. Both are worth reading before you
//!   rely on Redlock.
//! * **Restarts without persistence.** A server that restarts empty forgets
//!   its holds. If it rejoins before they would have expired, another
//!   client can form a majority with it. Keep a restarted server out for at
//!   least the longest lease, or run it with `appendfsync always`.
//!
//! The real safety net is a **fencing token**: a number that grows with
//! every acquire, checked by the resource itself, which rejects writes
//! carrying an older token than one it has seen. A paused holder's late
//! write is then refused, whatever the lock believed. A RedLock hands out
//! no tokens, since N servers have no common counter. A
//! [`FencedLock`] does ([`LockGuard::token`]). Where
//! correctness matters more than avoiding duplicate work, use fencing. Redisson itself deprecated its RedLock in
//! favour of replica-synced and fenced locks (redisson #2669, #5965).
//!
//! # Dropping and cancelling
//!
//! A dropped acquire of either kind holds nothing. A member acquire in
//! flight is settled by the engine (a hold taken for a caller that has gone
//! is given back). Members already taken are [`LockGuard`]s, released in
//! the background when dropped. A dropped [`MultiGuard`] releases every
//! member in the background.

mod guard;
mod multi_lock;
mod redlock;

use std::time::Duration;

use tokio::time::Instant;

use crate::error::Result;
use crate::fair_lock::{Fair, FairLock};
use crate::fenced_lock::{Fenced, FencedLock};
use crate::guard::LockGuard;
use crate::handle::raw::{RawLock, RawSingle};
use crate::lock::{Lock, Unfair};
use crate::rw_lock::{Read, ReadLock, Write, WriteLock};

pub use guard::MultiGuard;
pub use multi_lock::{Multi, MultiLock};
pub use redlock::{RedLock, Redlock};

/// One lock of a [`MultiLock`]: any kind of the lock family, on any
/// client. Made from a lock handle with `From` / `into()`;
/// [`MultiLock::new`] takes anything that converts.
///
/// # Example
///
/// ```no_run
/// use leasehold::{Member, MultiLock};
/// # fn f(a: leasehold::Client, b: leasehold::Client) {
/// let members: Vec<Member> = vec![a.lock("x").into(), b.lock("y").into()];
/// let multi = MultiLock::new(members);
/// assert_eq!(multi.members().len(), 2);
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Member(AnyLock);

/// Every kind a [`Member`] can be. Adding a kind: a variant here, a line
/// in `member_from!` below, and an arm in `with_lock!`.
#[derive(Clone, Debug)]
enum AnyLock {
    Lock(Unfair),
    Fenced(Fenced),
    Fair(Fair),
    Read(Read),
    Write(Write),
}

/// Runs `$body` with `$l` bound to the member's raw lock, whatever its
/// kind. Every kind has `acquire`, `name`, `key` and `client`.
macro_rules! with_lock {
    ($member:expr, $l:ident => $body:expr) => {
        match &$member.0 {
            AnyLock::Lock($l) => $body,
            AnyLock::Fenced($l) => $body,
            AnyLock::Fair($l) => $body,
            AnyLock::Read($l) => $body,
            AnyLock::Write($l) => $body,
        }
    };
}

/// `From<handle> for Member` for each kind: the member is the handle's
/// raw lock.
macro_rules! member_from {
    ($($(#[$doc:meta])* $handle:ty => $kind:ident;)*) => {
        $(
            $(#[$doc])*
            impl From<$handle> for Member {
                fn from(lock: $handle) -> Member {
                    Member(AnyLock::$kind(lock.raw().clone()))
                }
            }
        )*
    };
}

member_from! {
    Lock => Lock;
    /// A fenced member takes a token with each acquire, as on its own: read
    /// it from its guard in [`MultiGuard::guards`] ([`LockGuard::token`]).
    FencedLock => Fenced;
    /// A fair member waits in its lock's queue like any other waiter (and
    /// leaves it when the MultiLock's attempt gives up on it).
    FairLock => Fair;
    /// A read member shares the lock with other readers: a MultiLock of read
    /// halves keeps writers out of every member at once.
    ReadLock => Read;
    /// A write member excludes readers and writers of its lock.
    WriteLock => Write;
}

/// A random duration in `[low, high]`, for retry pauses that keep
/// contenders out of step (not for anything secret).
fn random_between(low: Duration, high: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let span = high.saturating_sub(low).as_nanos() as u64;
    if span == 0 {
        return low;
    }
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    low + Duration::from_nanos(hasher.finish() % (span + 1))
}

/// Time left until `deadline` (`None`: no deadline).
fn left(deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|d| d.saturating_duration_since(Instant::now()))
}

// === impl Member ===

impl Member {
    /// The member lock's name (without the key prefix).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// let m = leasehold::Member::from(client.lock("a"));
    /// assert_eq!(m.name(), "a");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        with_lock!(self, l => RawLock::name(l))
    }

    /// The member lock's Redis key (prefix included).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// let m = leasehold::Member::from(client.lock("a"));
    /// assert_eq!(m.key(), client.lock("a").key());
    /// # }
    /// ```
    pub fn key(&self) -> &str {
        with_lock!(self, l => RawSingle::key(l))
    }

    /// The id of the client the member is taken through
    /// ([`Client::id`](crate::Client::id)).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// let m = leasehold::Member::from(client.lock("a"));
    /// assert_eq!(m.client_id(), client.id());
    /// # }
    /// ```
    pub fn client_id(&self) -> uuid::Uuid {
        with_lock!(self, l => l.client().id())
    }

    /// The global order (see the module docs): key, server, client id,
    /// kind.
    fn order(&self) -> (String, String, uuid::Uuid, &'static str) {
        let client = with_lock!(self, l => l.client());
        let server = client.engine().conn().server_label();
        (
            self.key().to_owned(),
            server,
            client.id(),
            with_lock!(self, l => std::any::type_name_of_val(l)),
        )
    }

    /// Takes the member as its own lock would (`wait: None` waits forever,
    /// zero tries once). Cancel safe: a dropped call holds nothing.
    async fn acquire(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        with_lock!(self, l => RawLock::acquire(l, lease, wait).await)
    }
}

//! [`RedLock`]: one name on N independent servers, held while a majority
//! holds it (the algorithm, and what it does not protect against, are in
//! the module docs, `multi/mod.rs`).

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use super::{left, random_between, MultiGuard};
use crate::client::Client;
use crate::core::lease_millis;
use crate::error::{Error, Result, ServerOutcome, ServerResult};
use crate::guard::LockGuard;
use crate::handle::raw::{sealed, RawLock};
use crate::handle::LockHandle;
use crate::lock::Lock;

/// One lock name on N independent Redis servers, held while a majority
/// (N/2 + 1) of them hold it: the Redlock algorithm.
///
/// Each server holds an ordinary reentrant [`Lock`] of the name, through
/// the client given for it. A RedLock is therefore reentrant for the
/// current [`Owner`](crate::Owner), and the watchdog renews it. Every
/// server is tried at once, each within a short
/// [server timeout](Self::with_server_timeout). The lock is held when a
/// majority acquired with time left on their leases
/// ([`MultiGuard::validity`]). Otherwise everything taken is released and
/// the round is retried after a [random delay](Self::with_retry_delay)
/// until the wait runs out. Waiting polls: RedLock waiters are not woken
/// by unlock messages.
///
/// When a majority of the servers cannot be reached, the acquire fails with
/// [`Error::NoQuorum`], which lists what each server answered.
///
/// # When to use
///
/// When you run several *independent* Redis servers (no replication between
/// them) and want a lock that survives losing a minority of them. For one
/// server, a primary with replicas, or a cluster, a [`Lock`] is simpler
/// and faster.
///
/// # What it does not protect against
///
/// Redlock's safety rests on timing: bounded clock drift between the
/// servers, and holders that do not pause longer than their lease. A
/// server clock that jumps forward, a holder stalled by GC, swapping or a
/// stopped VM, or a request delayed in the network can let two owners act
/// at once. [`MultiGuard::lost`] fires only when the stalled task runs
/// again. A server that restarts empty forgets its holds: keep it out for
/// at least the longest lease, or persist with `appendfsync always`. See
/// Martin Kleppmann's "How to do distributed locking" (2016) and Salvatore
/// Sanfilippo's reply "Is Redlock safe?". The real safety net is a
/// **fencing token** that the protected resource checks, which rejects
/// writes with an older token. N independent servers share no counter, so
/// a RedLock has no token. The fenced lock has one (`LockGuard::token`).
///
/// # Example
///
/// ```no_run
/// # async fn f() -> leasehold::Result<()> {
/// use leasehold::{Client, RedLock};
/// let mut clients = Vec::new();
/// for url in ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"] {
///     clients.push(Client::connect(url).await?);
/// }
/// let red = RedLock::new(clients, "orders:42");
/// let guard = red.lock().await?;
/// println!("valid for {:?} unless renewed", guard.validity());
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
pub type RedLock = LockHandle<Redlock>;

/// The raw kind of a [`RedLock`] (see [`RawLock`]): one plain lock per
/// server and the algorithm's settings. Not used directly.
///
/// # Example
///
/// ```no_run
/// # fn f(a: leasehold::Client, b: leasehold::Client, c: leasehold::Client) {
/// let red: leasehold::LockHandle<leasehold::raw::Redlock> =
///     leasehold::RedLock::new(vec![a, b, c], "x");
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Redlock {
    name: Arc<str>,
    /// One per server, in the order the clients were given.
    locks: Arc<[Lock]>,
    quorum: usize,
    server_timeout: Duration,
    retry_delay: Duration,
    /// Why the RedLock cannot be used (reported by every acquire).
    invalid: Option<Arc<str>>,
}

/// Default for [`RedLock::with_server_timeout`].
const DEFAULT_SERVER_TIMEOUT: Duration = Duration::from_millis(250);
/// Default for [`RedLock::with_retry_delay`].
const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(200);

/// How one round ended.
enum Round {
    Held(MultiGuard),
    Failed(Vec<ServerResult>),
}

// === impl RedLock ===

impl RedLock {
    /// A RedLock of `name` over `clients`, one per independent Redis server
    /// (the key prefix of each client applies). Nothing is sent until it is
    /// used. An even number of clients, fewer than 3, two handles of the
    /// same client, or an empty name are reported as
    /// [`Error::InvalidArgument`] by every acquire.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(a: leasehold::Client, b: leasehold::Client, c: leasehold::Client) {
    /// let red = leasehold::RedLock::new(vec![a, b, c], "orders:42");
    /// assert_eq!(red.quorum(), 2);
    /// # }
    /// ```
    pub fn new<I>(clients: I, name: &str) -> RedLock
    where
        I: IntoIterator<Item = Client>,
    {
        let clients: Vec<Client> = clients.into_iter().collect();
        let n = clients.len();
        let mut ids: Vec<uuid::Uuid> = clients.iter().map(Client::id).collect();
        ids.sort_unstable();
        ids.dedup();
        let invalid = if n < 3 || n.is_multiple_of(2) {
            Some(format!(
                "a RedLock needs an odd number of servers, at least 3 (got {n})"
            ))
        } else if ids.len() != n {
            Some("a RedLock needs one client per server: the same client was given twice".into())
        } else if name.is_empty() {
            Some("lock name is empty".into())
        } else {
            None
        };
        LockHandle::from_raw(Redlock {
            name: name.into(),
            locks: clients.iter().map(|c| c.lock(name)).collect(),
            quorum: n / 2 + 1,
            server_timeout: DEFAULT_SERVER_TIMEOUT,
            retry_delay: DEFAULT_RETRY_DELAY,
            invalid: invalid.map(Into::into),
        })
    }

    /// Sets how long each server is given to answer one try, and one
    /// unlock (default 250 ms). Keep it small against the lease: the
    /// time a round takes comes off the lock's validity. Zero is reported
    /// as [`Error::InvalidArgument`] by every acquire.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn f(a: leasehold::Client, b: leasehold::Client, c: leasehold::Client) {
    /// let red = leasehold::RedLock::new(vec![a, b, c], "orders:42")
    ///     .with_server_timeout(Duration::from_millis(50));
    /// # }
    /// ```
    pub fn with_server_timeout(mut self, timeout: Duration) -> RedLock {
        let raw = self.raw_mut();
        if timeout.is_zero() && raw.invalid.is_none() {
            raw.invalid = Some("the server timeout must be above zero".into());
        }
        raw.server_timeout = timeout;
        self
    }

    /// Sets the longest random delay before a failed round is retried
    /// (default 200 ms; each delay is drawn from zero to this).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn f(a: leasehold::Client, b: leasehold::Client, c: leasehold::Client) {
    /// let red = leasehold::RedLock::new(vec![a, b, c], "orders:42")
    ///     .with_retry_delay(Duration::from_millis(50));
    /// # }
    /// ```
    pub fn with_retry_delay(mut self, delay: Duration) -> RedLock {
        self.raw_mut().retry_delay = delay;
        self
    }

    /// How many servers must hold the lock: N/2 + 1.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(a: leasehold::Client, b: leasehold::Client, c: leasehold::Client) {
    /// assert_eq!(leasehold::RedLock::new(vec![a, b, c], "x").quorum(), 2);
    /// # }
    /// ```
    pub fn quorum(&self) -> usize {
        self.raw().quorum
    }

    /// The lock on each server, in the order the clients were given: for
    /// reads such as [`Lock::is_locked`] on one server.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(red: leasehold::RedLock) -> leasehold::Result<()> {
    /// for lock in red.locks() {
    ///     println!("{}", lock.is_locked().await?);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn locks(&self) -> &[Lock] {
        &self.raw().locks
    }
}

// === impl Redlock ===

impl sealed::Sealed for Redlock {}

impl RawLock for Redlock {
    type Guard = MultiGuard;

    fn name(&self) -> &str {
        &self.name
    }

    /// The round loop (see the module docs). `wait: None` waits forever,
    /// zero runs one round.
    async fn acquire(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<MultiGuard>> {
        if let Some(why) = &self.invalid {
            return Err(Error::invalid(why.to_string()));
        }
        // The lease the validity is measured against: the fixed one, or the
        // longest watchdog timeout of the clients.
        let term = match lease {
            Some(lease) => {
                lease_millis(lease)?;
                lease
            }
            None => self
                .locks
                .iter()
                .map(|l| l.raw().client().watchdog().timeout())
                .max()
                .unwrap_or_default(),
        };
        let drift = term / 100 + Duration::from_millis(2);
        // An answer later than this would leave no validity anyway.
        let timeout = self
            .server_timeout
            .min(term.saturating_sub(drift))
            .max(Duration::from_millis(1));
        let once = wait == Some(Duration::ZERO);
        let deadline = wait.and_then(|w| Instant::now().checked_add(w));
        loop {
            let servers = match self.round(lease, timeout, drift).await {
                Round::Held(guard) => return Ok(Some(guard)),
                Round::Failed(servers) => servers,
            };
            let answered = servers
                .iter()
                .filter(|s| matches!(s.outcome, ServerOutcome::Acquired | ServerOutcome::Busy))
                .count();
            let lasting = servers
                .iter()
                .filter(|s| matches!(&s.outcome, ServerOutcome::Failed(e) if !e.is_transient()))
                .count();
            let hopeless = lasting > self.locks.len() - self.quorum;
            let rest = left(deadline);
            if hopeless || once || rest.is_some_and(|r| r.is_zero()) {
                if answered >= self.quorum && !hopeless {
                    return Ok(None);
                }
                return Err(Error::NoQuorum {
                    name: self.name.to_string(),
                    quorum: self.quorum,
                    servers,
                });
            }
            tracing::debug!(name = %self.name, answered, "redlock: no majority this round; retrying");
            let pause = random_between(Duration::ZERO, self.retry_delay);
            tokio::time::sleep(rest.map_or(pause, |r| pause.min(r))).await;
        }
    }
}

impl Redlock {
    /// One round: every server at once (see the module docs).
    async fn round(&self, lease: Option<Duration>, timeout: Duration, drift: Duration) -> Round {
        let n = self.locks.len();
        let started = Instant::now();
        let mut tries: FuturesUnordered<_> = self
            .locks
            .iter()
            .enumerate()
            .map(|(i, lock)| async move {
                if let Some(e) = known_down(lock.raw().client()) {
                    return (i, Ok(Err(e)));
                }
                let once = lock.raw().acquire(lease, Some(Duration::ZERO));
                (i, tokio::time::timeout(timeout, once).await)
            })
            .collect();
        let mut outcomes: Vec<Option<ServerOutcome>> = (0..n).map(|_| None).collect();
        let mut held: Vec<(usize, LockGuard)> = Vec::with_capacity(n);
        let mut grace: Option<Instant> = None;
        loop {
            let next = match grace {
                Some(until) => tokio::time::timeout_at(until, tries.next())
                    .await
                    .unwrap_or(None),
                None => tries.next().await,
            };
            let Some((i, answer)) = next else { break };
            outcomes[i] = Some(match answer {
                Ok(Ok(Some(guard))) => {
                    held.push((i, guard));
                    ServerOutcome::Acquired
                }
                Ok(Ok(None)) => ServerOutcome::Busy,
                Ok(Err(e)) => ServerOutcome::Failed(Box::new(e)),
                Err(_) => ServerOutcome::TimedOut,
            });
            if held.len() >= self.quorum && grace.is_none() {
                // The others get as long again as the majority took.
                grace = Some(Instant::now() + started.elapsed());
            }
        }
        // Tries still running (only after a majority acquired) are
        // dropped: the engine settles each and gives back a hold it took.
        drop(tries);
        held.sort_by_key(|(i, _)| *i);
        let guards: Vec<LockGuard> = held.into_iter().map(|(_, g)| g).collect();
        if guards.len() >= self.quorum {
            let guard = MultiGuard::quorum(guards, self.quorum, drift, timeout, self.name.clone());
            if !guard.is_lost() {
                return Round::Held(guard);
            }
            // Answers too late to leave any validity: not a hold.
            for o in outcomes.iter_mut() {
                if matches!(o, Some(ServerOutcome::Acquired)) {
                    *o = Some(ServerOutcome::TimedOut);
                }
            }
            release(guard.into_guards(), timeout).await;
        } else {
            release(guards, timeout).await;
        }
        Round::Failed(
            outcomes
                .into_iter()
                .zip(self.locks.iter())
                .enumerate()
                .map(|(server, (outcome, lock))| ServerResult {
                    server,
                    client: lock.raw().client().id(),
                    outcome: outcome.unwrap_or(ServerOutcome::TimedOut),
                })
                .collect(),
        )
    }
}

/// A connection error if `client` (a single server, not a cluster) is
/// known to be disconnected: its try would only wait out the server timeout.
fn known_down(client: &Client) -> Option<Error> {
    client.engine().conn().known_down()
}

/// Releases `guards` at once, each within `bound` (a slower release
/// finishes in the background), and waits for that.
async fn release(guards: Vec<LockGuard>, bound: Duration) {
    futures_util::future::join_all(
        guards
            .into_iter()
            .map(|g| tokio::time::timeout(bound, g.unlock())),
    )
    .await;
}

//! The engine: everything every primitive shares, and nothing that names a
//! primitive.
//!
//! # The promise
//!
//! **While a guard or permit is not lost, nobody else holds what it
//! holds** — on every path: unlock, drop, cancel, expiry, force-unlock,
//! re-acquire, reconnect, restart, shutdown, runtime teardown. A primitive
//! (the lock, the fair lock, the read-write lock, a semaphore …) is a
//! thin facade: its Lua scripts, the keys and fields they use, and a
//! [`Kind`](kind::Kind) telling the engine what to send to acquire and
//! release its holds and how to renew them. A primitive's folder imports
//! two engine modules, `kind` (the contract, and the door: every type the
//! contract and a facade use is re-exported there) and `script`; the
//! latch adds `wait`. The engine does the rest:
//!
//! | module | what it does |
//! | --- | --- |
//! | `conn` | the command and subscriber connections: no blind re-sends, reconnect forever, a fresh connection for teardown |
//! | `caps` | what the server can do (probed at connect): versions, script flags, undeclared keys, `LPOS`, `WAIT`; `Feature` checks |
//! | `script` | script handles (source + SHA, reloaded only on `NOSCRIPT`); *recorded* scripts, idempotent by request id |
//! | `call` | a mutation run to a **definite** outcome: after a timeout or a dropped connection the same request is sent again; its reply, replayed by the request record if it had already run, is the truth |
//! | `request` | what a primitive asks to send (`Request`: its script, keys, arguments and the places the engine fills); the engine adds the request record, its TTL and the request id |
//! | `forget` | request records deleted in batches once their calls have ended (only while they still hold that request) |
//! | `reset` | reconnecting a command connection found out of step with its replies, at most once a second, whoever finds it |
//! | `fence` | the late-copy bound: a command connection fred replaced is killed on the server (`CLIENT KILL ID`) before a reply that came after it is trusted |
//! | `kind` | **the contract and the door**: the trait `Kind` a primitive implements (what a try and a release send, the renewal scripts, how replies read, what a hold excludes, its waiting flags), and the types it and a facade use, re-exported |
//! | `lease` | one lease record per (key, owner, kind): the hold count, the live holds' needs (watchdog or fixed deadline), incarnations, the turn |
//! | `names` | a lease record's names (channel, request record key, key, field) in one buffer |
//! | `signal` | a lease's lost signal, shared with its guards: marked lost once, or lost by itself past a lower bound of the key's expiry |
//! | `backoff` | the pauses of every retry loop: doubling from a first pause up to a cap |
//! | `boxed` | futures boxed where they are built, not built and then copied into their box |
//! | `hold` | a hold's life: acquire under the turn, release on unlock or drop, calls abandoned mid-flight settled in the background |
//! | `background` | work that outlives its caller; finished on a fresh connection if the runtime shuts down under it |
//! | `open` | what keeps the connections open: every client handle and every hold; the last one closes them once the background work is written |
//! | `watchdog` | one task per watchdog renews every lease in batches (per node on a cluster) and checks every lease after a reconnect |
//! | `pack` | a renewal batch's entries packed into one argument |
//! | `pubsub` | one subscription per channel per client; messages wake one, all or N local waiters |
//! | `takes` | announcing that a try took a lock over waiters of other clients (`leasehold_lock__taken:{name}`) |
//! | `wait` | the one wait loop: try, subscribe, try, sleep until woken or the bound, repeat |
//! | `acquire` | `Engine::acquire`: the acquire every lock kind uses, from a `Spec` (plain data): its lease for the current owner, the wait loop, one recorded call per try |
//! | `handoff` | the contract's one extension, `Handoff`: a wait a release may hand the lock to (the fair lock), adopted without a call |
//! | `stats` | the client's counters (`Stats`), their `metrics` mirror, and what the `tracing` spans record |
//! | `registry` | the client's record in Redis (who it is, its long waits), renewed by the watchdog's cycle; reading every client's records and the wait-for graph |
//!
//! # How a hold stays true
//!
//! * **The key outlives every live hold.** Acquires and renewals only raise
//!   the key's TTL; a release sets it to the longest need of the holds that
//!   remain. A guard's signal knows a lower bound of the key's expiry
//!   (`until`, measured from when the command was *sent*) and reports lost
//!   by itself once it passes.
//! * **Nothing is counted twice or guessed.** Every mutation carries a
//!   request id; unknown outcomes are resolved by re-sending it, and a copy
//!   arriving late never runs again.
//! * **A stale guard touches nothing.** When a field is found gone (a
//!   re-acquire creates it anew, a release or renewal misses it) its
//!   incarnation ends; guards of an ended incarnation give back nothing,
//!   so they can never free a newer hold of the same owner.
//! * **The client tells its holders first.** A successful acquire ends
//!   every other local hold it excludes before the new guard is returned,
//!   and after a reconnect every lease is checked at once.
//! * **Nothing is left behind by leaving.** A dropped acquire settles its
//!   call in the background; a dropped guard releases in the background; a
//!   runtime shutting down under pending releases finishes them on a fresh
//!   connection before it is gone; a client dropped right after its guard
//!   (or its cancelled waiter) closes its connections only once that work
//!   is written, and a guard that outlives its client keeps them open;
//!   shutdown gives back every hold, including one whose acquire
//!   completes while it drains.

pub(crate) mod acquire;
pub(crate) mod background;
pub(crate) mod backoff;
pub(crate) mod boxed;
pub(crate) mod call;
pub(crate) mod caps;
pub(crate) mod conn;
pub(crate) mod fence;
pub(crate) mod forget;
pub(crate) mod handoff;
pub(crate) mod hold;
pub(crate) mod kind;
pub(crate) mod lease;
#[cfg(test)]
pub(crate) mod lua_lint;
pub(crate) mod names;
pub(crate) mod once;
pub(crate) mod open;
pub(crate) mod pack;
pub(crate) mod pubsub;
mod read;
pub(crate) mod registry;
pub(crate) mod request;
pub(crate) mod reset;
pub(crate) mod script;
pub(crate) mod signal;
pub(crate) mod stats;
pub(crate) mod takes;
pub(crate) mod wait;
pub(crate) mod watchdog;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use fred::interfaces::EventInterface;
use tokio::sync::broadcast::error::RecvError;

use crate::error::{Error, Result};
use background::Background;
use conn::{Conn, Settings};
use lease::Leases;
use pubsub::PubSub;
use registry::{Identity, Registry};
use watchdog::Watchdog;

/// A concurrent map the lock path reads on every call, with a fast hasher
/// (foldhash, seeded at random per map) instead of std's SipHash.
pub(crate) type FastMap<K, V> = dashmap::DashMap<K, V, foldhash::fast::RandomState>;

/// The engine of one client.
#[derive(Debug)]
pub(crate) struct Engine {
    conn: Arc<Conn>,
    pubsub: PubSub,
    leases: Arc<Leases>,
    /// What this client has done (`Client::stats`); shared with its leases.
    stats: Arc<stats::Counters>,
    background: Arc<Background>,
    watchdog: Watchdog,
    /// The client's record (who it is, its long waits); `None` when the
    /// client was built with `client_record(false)`.
    registry: Option<Arc<Registry>>,
    /// Longest a waiter sleeps without re-checking.
    recheck_interval: Duration,
    /// Replica acknowledgements required after each acquire, if any.
    replicas: Option<ReplicaWait>,
    /// Cleared when the runtime the client was built on shuts down.
    runtime_alive: Arc<AtomicBool>,
    shut_down: AtomicBool,
    /// How many reasons keep the connections open (`open.rs`).
    users: AtomicUsize,
    /// This client's registry listed for hand-overs in this process
    /// (`handoff.rs`), set once by `serve_here`; unlisted with the engine.
    listing: std::sync::OnceLock<handoff::Listing>,
}

/// `WAIT` after each acquire.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReplicaWait {
    pub(crate) replicas: u32,
    pub(crate) timeout: Duration,
    /// Retry (as after a connection error) instead of failing at once.
    pub(crate) retry: bool,
}

/// What the engine is built from.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    pub(crate) settings: Settings,
    pub(crate) sharded: Option<bool>,
    pub(crate) watchdog: Watchdog,
    pub(crate) recheck_interval: Duration,
    pub(crate) replicas: Option<ReplicaWait>,
    pub(crate) identity: Identity,
    /// Whether the client keeps a record (`ClientBuilder::client_record`).
    pub(crate) client_record: bool,
}

/// Clears a flag when dropped (with the task holding it).
struct ClearOnDrop(Arc<AtomicBool>);

/// The longest lease accepted, about 34 years: Redis stores expiry times
/// in milliseconds since the epoch and rejects overflowing ones.
pub(crate) const MAX_LEASE: Duration = Duration::from_millis(1 << 40);

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

// === impl Engine ===

impl Engine {
    /// Connects and starts the engine's tasks on the current runtime.
    ///
    /// Cancel safe: dropped half-way, it closes what it had opened.
    pub(crate) async fn start(options: Options) -> Result<Arc<Engine>> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let (conn, subscriber, task) = Conn::connect(options.settings, options.sharded).await?;
        if options.replicas.is_some() && !conn.info.wait && conn.settings.refuse_unsafe {
            conn.close().await;
            return Err(Error::Unsupported(
                "wait_for_replicas needs WAIT, which the server refuses or does not have"
                    .to_owned(),
            ));
        }
        let conn = Arc::new(conn);
        runtime.spawn(Conn::supervise(Arc::downgrade(&conn), task));
        let runtime_alive = Arc::new(AtomicBool::new(true));
        let sentinel = ClearOnDrop(runtime_alive.clone());
        runtime.spawn(async move {
            let _sentinel = sentinel;
            std::future::pending::<()>().await
        });
        let pubsub = PubSub::start(
            subscriber,
            conn.sharded,
            conn.clustered.then(|| conn.redis.cluster_change_rx()),
        );
        let reconnects = conn.redis.reconnect_rx();
        let leases: Arc<Leases> = Arc::default();
        let interval = options.watchdog.renew_interval();
        let registry = if options.client_record {
            let registry = Arc::new(Registry::new(
                &options.identity,
                options.watchdog.timeout(),
                interval * 3,
                conn.clone(),
            ));
            if let Err(e) = registry.write(&[]).await {
                tracing::debug!(error = %e, "client record not written (the watchdog retries)");
            }
            options.watchdog.register_record(&registry);
            Some(registry)
        } else {
            None
        };
        let engine = Arc::new(Engine {
            background: Background::new(runtime.clone(), conn.clone()),
            pubsub,
            stats: leases.stats.clone(),
            leases,
            watchdog: options.watchdog,
            registry,
            recheck_interval: options.recheck_interval,
            replicas: options.replicas,
            runtime_alive,
            shut_down: AtomicBool::new(false),
            users: AtomicUsize::new(0),
            listing: std::sync::OnceLock::new(),
            conn,
        });
        runtime.spawn(check_on_reconnect(Arc::downgrade(&engine), reconnects));
        Ok(engine)
    }

    // --- The engine's API: what primitives and the client use. Its fields
    // are private; the engine's own modules use them directly. ---

    /// What the server can do, probed at connect (`caps.rs`).
    pub(crate) fn server_info(&self) -> &caps::ServerInfo {
        &self.conn.info
    }

    /// `Err(Error::Unsupported)` if the server is known to be too old for
    /// `feature`.
    pub(crate) fn require(&self, feature: caps::Feature) -> Result<()> {
        self.conn.info.require(feature)
    }

    /// The command connection's fred client, for reads (`EXISTS`, `PTTL`,
    /// `HGET`, read-only scripts).
    pub(crate) fn redis(&self) -> &fred::clients::Client {
        &self.conn.redis
    }

    /// The command connection, for a primitive's own recorded or plain
    /// calls (`Call`, `Script::run`) and the work it leaves for later.
    pub(crate) fn conn(&self) -> &Arc<Conn> {
        &self.conn
    }

    /// Publishes `message` on `channel` from the client (for a channel a
    /// script may not touch: another slot on a cluster), with the command
    /// `Conn::publish_command` names.
    pub(crate) async fn publish(&self, channel: String, message: &'static str) -> Result<()> {
        self.conn.publish(channel, message).await
    }

    /// Whether the server is a cluster.
    pub(crate) fn clustered(&self) -> bool {
        self.conn.clustered
    }

    /// The lease record of (`key`, `owner`, `kind`) in this client, made
    /// with `init` the first time (see `lease::Leases::get`).
    ///
    /// A call of the same owner through another kind that shares the
    /// field, still on its way (`lease::Got::Settling`: a release, or an
    /// acquire dropped in flight and settled in the background), lands
    /// first: a dropped guard's release may not have taken its turn yet, so the
    /// table is asked again until those holds are given back, for up to a
    /// command timeout; then the owner is refused (holds whose release's
    /// outcome stayed unknown).
    ///
    /// Cancel safe: it only waits.
    pub(crate) async fn lease_of(
        &self,
        key: &fred::types::Key,
        owner: u64,
        kind: &'static dyn kind::Kind,
        init: &(dyn Fn() -> Result<names::LeaseNames> + Sync),
    ) -> Result<lease::LeaseRef> {
        let mut patience = None;
        loop {
            let got = self
                .leases
                .get(&self.conn, &self.watchdog, key, owner, kind, init)?;
            let other = match got {
                lease::Got::Lease(lease) => return Ok(lease),
                lease::Got::Settling(other) => other,
            };
            let until = *patience.get_or_insert_with(|| {
                tokio::time::Instant::now() + self.conn.settings.command_timeout
            });
            if tokio::time::Instant::now() >= until {
                return Err(Error::invalid(format!(
                    "the current owner still counts holds of `{}` through another lock kind \
                     whose release did not land: use one kind per name",
                    String::from_utf8_lossy(key.as_bytes())
                )));
            }
            drop(other.turn().await);
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// [`lease_of`](Self::lease_of) now, without waiting: `None` while
    /// another kind's release is on its way (this kind then holds nothing),
    /// or if the names are refused.
    pub(crate) fn lease_now(
        &self,
        key: &fred::types::Key,
        owner: u64,
        kind: &'static dyn kind::Kind,
        init: &(dyn Fn() -> Result<names::LeaseNames> + Sync),
    ) -> Option<lease::LeaseRef> {
        match self
            .leases
            .get(&self.conn, &self.watchdog, key, owner, kind, init)
        {
            Ok(lease::Got::Lease(lease)) => Some(lease),
            _ => None,
        }
    }

    /// Runs a recorded `script` that changes no lease (a count) to a
    /// definite outcome, with a request record of its own (see
    /// `call::Call::run_once`).
    pub(crate) async fn run_once(
        &self,
        request: request::Request,
        key: &str,
        client: &str,
    ) -> Result<call::Reply> {
        call::Call::run_once(&self.conn, request, key, client).await
    }

    /// Keeps `channel` subscribed while the returned pin lives (see
    /// `pubsub::PubSub::pin`).
    pub(crate) async fn pin(&self, channel: &str, policy: pubsub::Policy) -> pubsub::Pin {
        self.pubsub.pin(channel, policy).await
    }

    /// The waiter parked on `channel` in this client re-checks within one
    /// recheck interval (see `PubSub::recheck_by`): for a waiter another
    /// one re-checked for until now. No command is sent.
    pub(crate) fn recheck_within_interval(&self, channel: &str) {
        self.pubsub
            .recheck_by(channel, tokio::time::Instant::now() + self.recheck_interval);
    }

    /// Work that must finish after its caller has gone (see
    /// `background.rs`).
    pub(crate) fn spawn_job(&self, job: impl background::Job) {
        self.background.spawn(job);
    }

    /// The watchdog renewing this client's leases.
    pub(crate) fn watchdog(&self) -> &Watchdog {
        &self.watchdog
    }

    /// What this client has done so far (`Client::stats`).
    pub(crate) fn stats(&self) -> stats::Stats {
        let mut stats = self.stats.snapshot();
        stats.channels = self.pubsub.channel_count();
        stats
    }

    /// How many channels this client is subscribed to.
    pub(crate) fn channel_count(&self) -> usize {
        self.pubsub.channel_count()
    }

    /// Lists this client's registry process-wide by `id`, so a release by
    /// another client of this process can hand its waiters what it granted
    /// them (`handoff.rs`), until the engine is dropped. Once per engine.
    pub(crate) fn serve_here(&self, id: uuid::Uuid) {
        self.listing
            .get_or_init(|| handoff::serve_here(id, &self.pubsub));
    }

    /// For `__bench`: lease records in use, records parked, and what the
    /// record batches have done (see `lib.rs`).
    pub(crate) fn bench_counts(&self) -> (usize, usize, forget::Forgotten) {
        (
            self.leases.lease_records_in_use(),
            self.leases.parked(),
            self.conn.forgotten(),
        )
    }

    /// Whether a call may proceed: the client is open, its runtime lives,
    /// and the caller runs inside a tokio runtime.
    pub(crate) fn check(&self) -> Result<()> {
        if self.is_shut_down() {
            return Err(Error::Shutdown);
        }
        if !self.runtime_alive.load(Ordering::Acquire) {
            return Err(Error::RuntimeGone);
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime);
        }
        Ok(())
    }

    /// Runs a primitive's force-unlock `script` on `key` once (a recorded
    /// call with a record of its own, see `Call::run_once`), whose reply
    /// starts with 1 when it deleted the key; then this client's holds of
    /// the key end. Only the holds counted *before* the call was sent end:
    /// a hold taken after it (a waiter the script handed the lock to, a
    /// newer hold after a replayed reply) is not among them. `client`:
    /// the client's id, which names the call's record. Returns the reply.
    ///
    /// Cancel safe: dropped once sent, the script ran at most once (its
    /// holds then end at their next renewal).
    pub(crate) async fn force_unlock(
        &self,
        request: request::Request,
        (key, key_str): (&fred::types::Key, &str),
        client: &str,
    ) -> Result<call::Reply> {
        let holding = self.leases.holding(key);
        let reply = call::Call::run_once(&self.conn, request, key_str, client).await?;
        if reply.first() == Some(&1) {
            holding.gone("force-unlocked");
        }
        Ok(reply)
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shut_down.load(Ordering::SeqCst)
    }

    /// Gives back every hold, stops renewing, waits for background work,
    /// closes the connections. Idempotent.
    pub(crate) async fn shutdown(self: &Arc<Self>) -> Result<()> {
        if self.shut_down.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.pubsub.wake_all();
        let bound = self.conn.settings.command_timeout;
        // Calls under way finish first (an acquire completing now gives
        // its hold back itself), then every counted hold is given back.
        let _ = tokio::time::timeout(bound, async {
            for lease in self.leases.all() {
                drop(lease.turn().await);
            }
        })
        .await;
        let drained = hold::drain(self).await;
        let _ = tokio::time::timeout(bound, self.background.idle()).await;
        if let Some(registry) = &self.registry {
            self.watchdog.deregister_record(registry);
            let _ = tokio::time::timeout(bound, registry.delete()).await;
        }
        self.pubsub.quit().await;
        self.conn.close().await;
        drained
    }

    /// Closes the connections once every background job is done (bounded
    /// by the command timeout), unless `shutdown` did: nothing keeps them
    /// open any more (`open.rs`). On the client's runtime: the last reason
    /// may go outside any.
    fn close_when_idle(&self) {
        if self.is_shut_down() {
            return;
        }
        let (conn, pubsub) = (self.conn.clone(), self.pubsub.clone());
        let background = self.background.clone();
        let bound = self.conn.settings.command_timeout;
        if let Some(registry) = &self.registry {
            self.watchdog.deregister_record(registry);
        }
        let registry = self.registry.clone();
        // A runtime that has shut down drops the task unrun: its
        // connection tasks are gone with it.
        drop(self.background.runtime().spawn(async move {
            let _ = tokio::time::timeout(bound, background.idle()).await;
            if let Some(registry) = registry {
                let _ = tokio::time::timeout(bound, registry.delete()).await;
            }
            pubsub.quit().await;
            conn.close().await;
        }));
    }
}

impl Drop for ClearOnDrop {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// After every reconnect of the command connection, checks every lease the
/// client holds (see `watchdog::check`).
async fn check_on_reconnect(
    engine: Weak<Engine>,
    mut reconnects: tokio::sync::broadcast::Receiver<fred::types::config::Server>,
) {
    loop {
        match reconnects.recv().await {
            Ok(_) | Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => return,
        }
        let Some(engine) = engine.upgrade() else {
            return;
        };
        if engine.is_shut_down() {
            return;
        }
        let held = engine.leases.held();
        if !held.is_empty() {
            tracing::debug!(
                leases = held.len(),
                "command connection reconnected: checking every lease"
            );
            watchdog::check(held).await;
        }
    }
}

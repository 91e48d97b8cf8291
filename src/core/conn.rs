//! The two Redis connections of a client and how they are built.
//!
//! * The **command connection** (a fred `Client`) carries every script and
//!   read. fred may send a command again after a reconnect or a cluster
//!   redirection (its default of 3 attempts): every mutating script is
//!   recorded (see `call.rs`), so a copy sent again replays its recorded
//!   reply instead of running twice, and renewals and reads are idempotent.
//!   Fewer attempts are not an option on a cluster: with one attempt, fred
//!   cannot follow an `ASK` redirection, and its router task ends for good
//!   when it tries (the client then times out on every command).
//! * The **subscriber connection** carries every channel the client waits
//!   on (see `pubsub/mod.rs`).
//!
//! Both reconnect forever with exponential back-off (fred's default is to
//! never reconnect, after which every command hangs), every command has a
//! timeout, and a command connection that stops answering is closed and
//! reconnected. A `connect` dropped half-way closes what it opened. A
//! closed connection fails commands at once.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::{Client as FredClient, SubscriberClient};
use fred::interfaces::ClientLike;
use fred::types::config::{Config, ReconnectPolicy, Server};
use fred::types::{Builder, ClusterHash, CustomCommand, Key};

use super::background::spawn_here;
use super::backoff::Backoff;
use super::caps::{self, ServerInfo, ServerKind};
use super::fence::Fence;
use super::forget::{Forget, Forgotten, Route};
use super::reset::Resets;
use crate::clock::{ticks_ms, ticks_of};

type FredResult<T> = Result<T, fred::error::Error>;

/// The command connection, as the engine uses it.
#[derive(Debug)]
pub(crate) struct Conn {
    /// Unique per connection in this process.
    pub(crate) id: u64,
    pub(crate) redis: FredClient,
    pub(crate) clustered: bool,
    /// Channels use sharded pub/sub (SPUBLISH / SSUBSCRIBE).
    pub(crate) sharded: bool,
    /// Renewal and record batches go to a cluster node as one keyless
    /// script (no `#!lua` flags are needed for it on any server).
    pub(crate) node_batches: bool,
    pub(crate) settings: Settings,
    /// Set when the client closes the connection for good (shutdown):
    /// nothing is sent again after that.
    closed: AtomicBool,
    /// Resets of this connection as suspect, shared with the record
    /// batches (`reset.rs`).
    resets: Arc<Resets>,
    /// When the last refresh of fred's slot map on request started
    /// ([`Conn::refresh_slots_since`]); held while one runs, so that
    /// callers asking at once share it.
    last_refresh: tokio::sync::Mutex<Option<tokio::time::Instant>>,
    /// Since when renewals on this connection have gone unanswered (a
    /// `clock::ticks_ms` stamp: the send time of the first unanswered
    /// one); 0 while they are answered. See [`Conn::renewal_unanswered`].
    unanswered_since: AtomicU64,
    /// The command connections fred has had, to kill a replaced one on
    /// the server (`fence.rs`).
    pub(crate) fence: Arc<Fence>,
    /// Request records whose calls have ended, to delete (`forget.rs`).
    forget: Forget,
    /// Until when (a `clock::ticks_ms` stamp) requests must read their
    /// record even on what looks like a first run: a call ended with an unknown
    /// outcome, or a replaced connection could not be killed (see
    /// [`Conn::request_records_optional`]). 0: never set.
    unsettled_until: AtomicU64,
    /// What the server can do, probed at connect (`caps.rs`).
    pub(crate) info: ServerInfo,
}

/// Connection settings kept to build a fresh connection later (the
/// teardown fallback of `background.rs`).
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) config: Config,
    pub(crate) command_timeout: Duration,
    pub(crate) message_capacity: usize,
    /// How long a request record remembers a request (`call.rs`).
    pub(crate) record_ttl: Duration,
    /// Request ids of this client; shared by its fresh connections.
    pub(crate) rids: Arc<AtomicU64>,
    /// The client's key prefix: the permission probes at connect name a
    /// key and a channel under it (`caps.rs`).
    pub(crate) key_prefix: String,
    /// Refuse a server or user unsafe for locks at connect
    /// (`ClientBuilder::report_only` turns it off).
    pub(crate) refuse_unsafe: bool,
}

/// Closes fred clients that a dropped `connect` had started (fred's
/// connection tasks outlive their handles and reconnect forever).
struct QuitOnDrop(Vec<FredClient>, Option<SubscriberClient>);

static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

/// The command timeout of a closed connection (see `Conn::close`).
const CLOSED_COMMAND_TIMEOUT: Duration = Duration::from_millis(1);

// === impl Conn ===

impl Conn {
    /// A connection around the fred client `redis`, with a new id and
    /// what keeps its copies bounded and its records deleted: its fence
    /// (`named`: its connections carry the client's name), its resets, and
    /// the record batches that use both. Nothing unanswered or unsettled
    /// yet.
    fn new(
        redis: FredClient,
        clustered: bool,
        sharded: bool,
        node_batches: bool,
        settings: Settings,
        named: bool,
    ) -> Conn {
        let fence = Arc::new(Fence::new(&redis, named));
        let resets = Arc::<Resets>::default();
        let route = Route {
            clustered,
            per_node: node_batches,
        };
        let forget = Forget::new(&redis, route, fence.clone(), resets.clone());
        Conn {
            id: NEXT_CONN.fetch_add(1, Ordering::Relaxed),
            redis,
            clustered,
            sharded,
            node_batches,
            settings,
            closed: AtomicBool::new(false),
            last_refresh: tokio::sync::Mutex::new(None),
            unanswered_since: AtomicU64::new(0),
            fence,
            forget,
            resets,
            unsettled_until: AtomicU64::new(0),
            info: ServerInfo::unknown(),
        }
    }

    /// A connection that never connects, for unit tests of the engine's
    /// bookkeeping (nothing is sent on it).
    #[cfg(test)]
    pub(crate) fn offline() -> Conn {
        let config = Config::default();
        let redis = Builder::from_config(config.clone())
            .build()
            .unwrap_or_else(|e| panic!("an unconnected fred client: {e}"));
        let settings = Settings {
            config,
            command_timeout: Duration::from_secs(1),
            message_capacity: 16,
            record_ttl: Duration::from_secs(60),
            rids: Arc::new(AtomicU64::new(1)),
            key_prefix: String::new(),
            refuse_unsafe: true,
        };
        Conn::new(redis, false, false, true, settings, false)
    }

    /// Connects the command and subscriber connections (scripts are loaded
    /// on their first `NOSCRIPT`, see `script.rs`). `sharded`: `None` picks sharded pub/sub on a Redis 7+
    /// cluster, as Redisson's default does.
    ///
    /// Cancel safe: dropped half-way, it closes what it had opened.
    pub(crate) async fn connect(
        settings: Settings,
        sharded: Option<bool>,
    ) -> crate::Result<(Conn, SubscriberClient, fred::types::ConnectHandle)> {
        match Conn::connect_as(settings.clone(), sharded, true).await {
            // A user that may not name its connections (a managed Redis
            // that restricts `CLIENT`): connect without names; the fence
            // then kills a replaced connection by its id (`fence.rs`).
            Err(crate::Error::Redis(e)) if e.details().contains("client name") => {
                tracing::warn!(error = %e, "CLIENT SETNAME refused: connecting without connection names");
                Conn::connect_as(settings, sharded, false).await
            }
            other => other,
        }
    }

    /// [`connect`](Self::connect), naming every command connection after
    /// the client (`named`) or not.
    async fn connect_as(
        settings: Settings,
        sharded: Option<bool>,
        named: bool,
    ) -> crate::Result<(Conn, SubscriberClient, fred::types::ConnectHandle)> {
        let timeout = settings.command_timeout;
        let mut builder = Builder::from_config(settings.config.clone());
        builder
            .set_policy(ReconnectPolicy::new_exponential(0, 50, 2_000, 2))
            .with_connection_config(|c| {
                c.connection_timeout = timeout;
                c.internal_command_timeout = timeout;
                // Every connection carries the client's fred id as its
                // name, so a replaced one can be found and killed on the
                // server (`fence.rs`).
                c.auto_client_setname = named;
                // A write, an ASKING and the write after it (see the module
                // docs): recorded scripts make the re-sends harmless.
                c.max_command_attempts = 3;
                // No fred unresponsive-connection check: fred arms a timer
                // on every turn of its connection loop for it (about 14 %
                // of one connection's lock throughput). A connection that
                // stops answering is reset by `suspect` instead: a recorded
                // call that times out (`call.rs`), or renewals unanswered
                // for a command timeout (`renewal_unanswered`).
                c.unresponsive.max_timeout = None;
            })
            .with_performance_config(|p| {
                p.default_command_timeout = timeout;
                p.broadcast_channel_capacity = settings.message_capacity;
            });
        let redis = builder.build()?;
        let subscriber = builder
            .with_connection_config(|c| {
                c.max_command_attempts = 3;
                // The subscriber connection is quiet for long stretches.
                c.unresponsive.max_timeout = None;
            })
            .build_subscriber_client()?;
        let mut opened = QuitOnDrop(vec![redis.clone()], Some(subscriber.clone()));

        let connected = tokio::time::timeout(timeout, async {
            let task = redis.init().await?;
            subscriber.init().await?;
            Ok::<_, fred::error::Error>(task)
        })
        .await;
        let task = match connected {
            Ok(Ok(task)) => task,
            Ok(Err(e)) => return Err(crate::Error::Redis(e)),
            Err(_) => {
                return Err(crate::Error::Redis(fred::error::Error::new(
                    fred::error::ErrorKind::Timeout,
                    format!("could not connect to Redis within {timeout:?}"),
                )))
            }
        };
        let clustered = redis.is_clustered();
        let sharded = match sharded {
            Some(true) if !clustered => {
                return Err(crate::Error::invalid(
                    "sharded pub/sub needs a Redis Cluster",
                ))
            }
            Some(forced) => forced,
            // As Redisson decides it: a cluster whose nodes answer
            // `PUBSUB SHARDNUMSUB` (Redis 7+, Valkey) publishes with
            // SPUBLISH, so Java and Rust waiters hear each other.
            None => clustered && caps::sharded_pubsub_answers(&redis, timeout).await,
        };
        let info = caps::probe_server(&redis, timeout).await;
        if settings.refuse_unsafe {
            if let Some(why) = info.refusal() {
                return Err(crate::Error::Unsupported(why));
            }
            caps::check_permissions(&redis, sharded, &settings.key_prefix, timeout).await?;
        }
        let wait = caps::wait_answers(&redis, timeout).await;
        let undeclared_keys = info.kind != ServerKind::Dragonfly
            || caps::undeclared_keys_allowed(&redis, &settings.key_prefix, timeout).await;
        let alive_keys = caps::alive_keys_allowed(&redis, timeout).await;
        let mut conn = Conn::new(redis, clustered, sharded, clustered, settings, named);
        // Bounded like the connect: a server that does not answer leaves
        // the fence untrusted (records kept), which is safe.
        let _ = tokio::time::timeout(timeout, conn.fence.probe(&conn.redis)).await;
        conn.info = ServerInfo {
            sharded_pubsub: sharded,
            wait,
            fence: conn.fence.trusted(),
            undeclared_keys,
            alive_keys,
            ..info
        };
        if conn.info.can_evict_locks() {
            tracing::warn!(
                maxmemory = conn.info.maxmemory,
                policy = conn.info.maxmemory_policy.as_deref(),
                "the server may evict keys with a TTL under memory pressure: a held lock can be \
                 evicted and its holder is told only at the next renewal; use \
                 maxmemory-policy noeviction (or volatile-* with no lock keys at risk)"
            );
        }
        opened.0.clear();
        opened.1 = None;
        Ok((conn, subscriber, task))
    }

    /// A one-off command connection with the same configuration, for work
    /// that must finish after the client's runtime is gone. Its commands
    /// and connect are bounded by the command timeout; it does not
    /// reconnect.
    pub(crate) async fn fresh(&self) -> FredResult<Conn> {
        let timeout = self.settings.command_timeout;
        let mut builder = Builder::from_config(self.settings.config.clone());
        builder
            .with_connection_config(|c| {
                c.connection_timeout = timeout;
                c.internal_command_timeout = timeout;
                c.max_command_attempts = 3;
            })
            .with_performance_config(|p| p.default_command_timeout = timeout);
        let redis = builder.build()?;
        match tokio::time::timeout(timeout, redis.init()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                let _ = redis.quit().await;
                return Err(fred::error::Error::new(
                    fred::error::ErrorKind::Timeout,
                    "fresh connection timed out",
                ));
            }
        }
        Ok(Conn::new(
            redis,
            self.clustered,
            self.sharded,
            self.node_batches,
            self.settings.clone(),
            false,
        ))
    }

    /// Closes the connection for good: calls stop re-sending. fred keeps
    /// queueing commands sent to a quit client until their timeout, so the
    /// timeout is cut to 1 ms: a command sent afterwards (through
    /// `Client::redis`) fails at once instead of hanging.
    pub(crate) async fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let _ = self.redis.quit().await;
        let mut perf = self.redis.perf_config();
        perf.default_command_timeout = CLOSED_COMMAND_TIMEOUT;
        self.redis.update_perf_config(perf);
    }

    /// Whether [`close`](Self::close) was called.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The connection looks out of step with its replies: a reply that
    /// answers another request, or requests timing out while it claims to
    /// be connected (replies lost on the way, each later one consumed by an
    /// older request that already gave up; fred's unresponsive check does
    /// not see it, since replies keep arriving). Reconnects it, at most once
    /// a second; what was in flight fails and is sent again by its caller.
    pub(crate) fn suspect(&self, why: &str) {
        self.resets.suspect(&self.redis, why);
    }

    /// Kills on the server any command connection fred replaced since the
    /// last check (see `fence.rs`), before a reply that came after it is
    /// trusted. A failed kill is logged; the next call checks again.
    ///
    /// Cancel safe: a dropped sweep is done again by the next check.
    ///
    /// Returns whether fred had replaced a connection.
    pub(crate) async fn check_fence(&self) -> bool {
        if !self.fence.moved(&self.redis) {
            return false;
        }
        if let Err(e) = self.fence.sweep(&self.redis).await {
            tracing::warn!(error = %e, "could not kill a replaced command connection on the server; checking again at the next call");
            self.unsettled();
        }
        true
    }

    /// Whether a new request may skip reading its record when what its
    /// script reads proves the request's first run (the plain lock's
    /// checks, `core/script.rs`): true unless, within the last record TTL,
    /// a call of this client ended with an unknown outcome or a replaced
    /// connection could not be killed. Then a copy of an older request
    /// may still reach Redis, and only the record tells it apart.
    ///
    /// Never while the fence is not known to work (`fence.rs`, "When the
    /// fence is not known to work"): a copy of any earlier request may
    /// then reach Redis for as long as its record lives.
    pub(crate) fn request_records_optional(&self) -> bool {
        if !self.fence.trusted() {
            return false;
        }
        // Read on every lock call: the clock only once something was unsettled.
        let until = self.unsettled_until.load(Ordering::Relaxed);
        until == 0 || ticks_ms() >= until
    }

    /// A call ended with an unknown outcome (or a replaced connection
    /// could not be killed): requests read their records for a record TTL.
    pub(crate) fn unsettled(&self) {
        let until = ticks_ms() + self.settings.record_ttl.as_millis() as u64;
        self.unsettled_until.fetch_max(until, Ordering::Relaxed);
    }

    /// Hands over the request record `record`, which request `rid` wrote,
    /// once its call has ended for good: it is deleted soon (`forget.rs`).
    ///
    /// While the fence is not known to work, nothing is deleted early: the
    /// record keeps its TTL, which is then what bounds a late copy
    /// (`fence.rs`).
    pub(crate) fn forget_request_record(&self, record: Key, rid: u64) {
        if self.fence.trusted() {
            self.forget.push(record, rid);
        }
    }

    /// What deleting request records has made Redis do so far.
    pub(crate) fn forgotten(&self) -> Forgotten {
        self.forget.forgotten()
    }

    /// A renewal call on this connection was answered (in time or late).
    pub(crate) fn renewal_answered(&self) {
        if self.unanswered_since.load(Ordering::Relaxed) != 0 {
            self.unanswered_since.store(0, Ordering::Relaxed);
        }
    }

    /// A renewal call sent at `sent_at` got no answer. If none is answered
    /// for a command timeout from then, the connection is reset as
    /// suspect, as fred's unresponsive check would (the watchdog gives its
    /// calls up after an interval, before fred's own command timeout could
    /// tell, and stops sending once the leases are lost): one check is
    /// armed when renewals start going unanswered.
    pub(crate) fn renewal_unanswered(self: &Arc<Self>, sent_at: tokio::time::Instant) {
        let since = ticks_of(sent_at.into_std());
        if self
            .unanswered_since
            .compare_exchange(0, since, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return; // a check is armed already
        }
        let conn = Arc::downgrade(self);
        let at = sent_at + self.settings.command_timeout;
        spawn_here(async move {
            tokio::time::sleep_until(at).await;
            let Some(conn) = conn.upgrade() else {
                return;
            };
            // Still unanswered since then: reset, and arm afresh.
            if conn
                .unanswered_since
                .compare_exchange(since, 0, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
                && !conn.is_closed()
            {
                conn.suspect("renewals got no reply for a command timeout");
            }
        });
    }

    /// Refreshes fred's cluster slot map (`CLUSTER SLOTS`) unless a
    /// refresh started at or after `asked` (callers that ask at once share
    /// one). fred refreshes it on a `MOVED` it sees, but redirections met
    /// inside scripts (node batches) are reported in their replies, not
    /// seen by fred; and a slot map older than the question may still name
    /// the owner of a slot whose migration has ended since, whose renewal
    /// would then meet `MOVED` inside a transaction (fred answers that one
    /// by reconnecting after its policy's first delay, about 100 ms of a
    /// renewal's bound).
    pub(crate) async fn refresh_slots_since(&self, asked: tokio::time::Instant) {
        let mut last = self.last_refresh.lock().await;
        if last.is_some_and(|started| started >= asked) {
            return;
        }
        *last = Some(tokio::time::Instant::now());
        use fred::interfaces::ClusterInterface;
        if let Err(e) = self.redis.sync_cluster().await {
            tracing::debug!(error = %e, "could not refresh the cluster's slot map");
        }
    }

    /// Keeps fred's connection task running: if it ends while the
    /// connection is not closed (fred ends it for good on some errors, e.g.
    /// an `ASK` redirection it could not follow), starts it again. Without
    /// this the client would time out on every command from then on.
    pub(crate) async fn supervise(
        conn: std::sync::Weak<Conn>,
        mut task: fred::types::ConnectHandle,
    ) {
        let mut pauses = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
        loop {
            let ended = (&mut task).await;
            let Some(conn) = conn.upgrade() else { return };
            if conn.is_closed() {
                return;
            }
            tracing::error!(outcome = ?ended, "fred's connection task ended: starting it again");
            loop {
                tokio::time::sleep(pauses.next()).await;
                if conn.is_closed() {
                    return;
                }
                match tokio::time::timeout(conn.settings.command_timeout, conn.redis.init()).await {
                    Ok(Ok(restarted)) => {
                        task = restarted;
                        pauses.reset();
                        break;
                    }
                    other => {
                        tracing::warn!(outcome = ?other.map(|r| r.map(|_| ())), "restarting fred's connection task failed");
                    }
                }
            }
        }
    }

    /// A new request id: they only grow, per client.
    pub(crate) fn rid(&self) -> u64 {
        self.settings.rids.fetch_add(1, Ordering::Relaxed)
    }

    /// Publishes `message` on `channel` from the client, with the command
    /// [`publish_command`](Self::publish_command) names.
    pub(crate) async fn publish(
        &self,
        channel: String,
        message: &'static str,
    ) -> crate::Result<()> {
        use fred::interfaces::PubsubInterface;
        if self.sharded {
            self.redis.spublish::<i64, _, _>(channel, message).await?;
        } else {
            self.redis.publish::<i64, _, _>(channel, message).await?;
        }
        Ok(())
    }

    /// The command the scripts publish with.
    pub(crate) fn publish_command(&self) -> &'static str {
        if self.sharded {
            "spublish"
        } else {
            "publish"
        }
    }

    /// [`publish_command`](Self::publish_command) as a script argument
    /// (a static string: nothing copied per call).
    pub(crate) fn publish_arg(&self) -> fred::types::Value {
        super::call::static_arg(self.publish_command())
    }

    /// The request record TTL in milliseconds, as scripts take it.
    pub(crate) fn request_record_ttl_ms(&self) -> i64 {
        self.settings.record_ttl.as_millis().min(i64::MAX as u128) as i64
    }

    /// The cluster node serving `slot` (`None` on a single server, or while
    /// the slot has no known owner).
    pub(crate) fn node_of(&self, slot: u16) -> Option<Server> {
        if !self.clustered {
            return None;
        }
        use fred::interfaces::ClusterInterface;
        self.redis
            .cached_cluster_state()
            .and_then(|state| state.get_server(slot).cloned())
    }

    /// `WAIT replicas timeout` on the connection (and, on a cluster, the
    /// node) that ran a write to `key`; returns how many replicas
    /// acknowledged it.
    pub(crate) async fn wait_replicas(
        &self,
        key: &Key,
        replicas: u32,
        timeout: Duration,
    ) -> FredResult<u32> {
        let wait = CustomCommand::new_static("WAIT", ClusterHash::Custom(key.cluster_hash()), true);
        let timeout_ms = timeout.as_millis().max(1).to_string();
        let acked: i64 = self
            .redis
            .custom(wait, vec![replicas.to_string(), timeout_ms])
            .await?;
        Ok(acked.clamp(0, u32::MAX as i64) as u32)
    }
}

impl Drop for QuitOnDrop {
    fn drop(&mut self) {
        if self.0.is_empty() && self.1.is_none() {
            return;
        }
        let (clients, subscriber) = (std::mem::take(&mut self.0), self.1.take());
        let quit = async move {
            for c in clients {
                let _ = c.quit().await;
            }
            if let Some(s) = subscriber {
                let _ = s.quit().await;
            }
        };
        spawn_here(quit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After a call ends with an unknown outcome, new requests read their
    /// records for a record TTL (a copy of the older one may be on its
    /// way, and only the record tells it apart).
    #[test]
    fn an_unknown_outcome_makes_records_required() {
        let conn = Conn::offline();
        conn.fence.trust_for_test();
        assert!(conn.request_records_optional());
        conn.unsettled();
        assert!(!conn.request_records_optional());
    }

    /// A fence not known to work (not probed, refused, unnamed
    /// connections): requests always read their records.
    #[test]
    fn an_untrusted_fence_makes_records_required() {
        let conn = Conn::offline();
        assert!(!conn.fence.trusted());
        assert!(!conn.request_records_optional());
    }
}

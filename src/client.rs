//! The client: configuration, and the handle every primitive is made from.
//!
//! A [`Client`] wraps one engine (`core`): its two Redis connections, its
//! leases, its background work. Primitives are made from it by name:
//! [`Client::lock`] here, each in its own module.

use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client as FredClient;
use fred::types::config::Config;

use crate::core::backoff::Backoff;
use crate::core::conn::Settings;
use crate::core::open::Open;
use crate::core::registry::{self, Identity};
use crate::core::stats::Stats;
use crate::core::watchdog::Watchdog;
use crate::core::{Engine, Options, ReplicaWait};
use crate::error::{Error, Result};
use crate::operators::Deadlock;

/// A connection to Redis that hands out locks ([`Client::lock`](crate::Client::lock)).
///
/// Cheap to clone (an `Arc` inside); clones share the connections, the
/// watchdog and the client id. Call [`Client::shutdown`] when done: it
/// gives back every hold and closes the connections. A client dropped
/// without it closes its connections once its last handle *and* its last
/// guard are gone and their background releases are written: a guard
/// outlives its client (it is still renewed, and still gives the lock
/// back), and dropping a guard and then at once the client leaves nothing
/// held.
///
/// # Example
///
/// ```no_run
/// # async fn f() -> leasehold::Result<()> {
/// let client = leasehold::Client::connect("redis://127.0.0.1:6379").await?;
/// let guard = client.lock("orders:42").lock().await?;
/// // … critical section …
/// guard.unlock().await?;
/// client.shutdown().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Client {
    pub(crate) inner: Arc<ClientInner>,
}

/// Configures and connects a [`Client`].
///
/// # Example
///
/// ```no_run
/// use std::time::Duration;
/// # async fn f() -> leasehold::Result<()> {
/// let client = leasehold::Client::builder()
///     .url("redis://127.0.0.1:6379")
///     .watchdog_timeout(Duration::from_secs(30))
///     .key_prefix("app:")
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct ClientBuilder {
    url: Option<String>,
    config: Option<Config>,
    watchdog_timeout: Option<Duration>,
    watchdog: Option<Watchdog>,
    key_prefix: String,
    recheck_interval: Option<Duration>,
    command_timeout: Option<Duration>,
    message_capacity: Option<usize>,
    sharded_pubsub: Option<bool>,
    replicas: Option<ReplicaWait>,
    connect_retry: Option<Duration>,
    app_name: Option<String>,
    record_waits_after: Option<Duration>,
    detect_deadlocks: bool,
    client_record: Option<bool>,
    request_record_ttl: Option<Duration>,
    /// `false`: `build` does not refuse an unsafe server or user.
    report_only: bool,
}

#[derive(Debug)]
pub(crate) struct ClientInner {
    pub(crate) id: uuid::Uuid,
    /// `id` as text, with the `:` every owner field puts after it.
    field_prefix: Box<str>,
    pub(crate) key_prefix: String,
    /// The engine; this handle keeps its connections open (`core::open`).
    pub(crate) engine: Open,
}

/// Default cap on a waiter's sleep between re-checks.
const DEFAULT_RECHECK: Duration = Duration::from_secs(30);
/// Default timeout of one Redis command.
const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// Default number of unlock messages buffered before the stream lags.
const DEFAULT_MESSAGE_CAPACITY: usize = 4096;

/// The shortest time a request record remembers a request (see `core::call`).
const MIN_LATCH_TTL: Duration = Duration::from_secs(30);

/// First pause between connect attempts (`connect_retry`).
const CONNECT_RETRY_FIRST: Duration = Duration::from_millis(100);
/// Longest pause between connect attempts.
const CONNECT_RETRY_MAX: Duration = Duration::from_secs(2);

/// URL schemes of plain connections (fred's, without Unix sockets).
const PLAIN_SCHEMES: &[&str] = &[
    "redis",
    "redis-cluster",
    "redis-sentinel",
    "valkey",
    "valkey-cluster",
    "valkey-sentinel",
];
/// URL schemes of TLS connections. fred parses them without a TLS
/// feature too, then connects in plaintext: refused unless one is on.
const TLS_SCHEMES: &[&str] = &[
    "rediss",
    "rediss-cluster",
    "rediss-sentinel",
    "valkeys",
    "valkeys-cluster",
    "valkeys-sentinel",
];
const TLS_BUILT: bool = cfg!(any(feature = "tls-rustls", feature = "tls-native-tls"));

// === impl Client ===

impl Client {
    /// Connects with default settings.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the half-made client, whose connections
    /// then close in the background.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f() -> leasehold::Result<()> {
    /// let client = leasehold::Client::connect("redis://127.0.0.1:6379").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<Client> {
        Client::builder().url(url).build().await
    }

    /// Starts configuring a client.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f() -> leasehold::Result<()> {
    /// let client = leasehold::Client::builder().url("redis://127.0.0.1:6379").build().await?;
    /// # Ok(()) }
    /// ```
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// The client's uuid: the first half of every owner field it writes.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) {
    /// let field = format!("{}:{}", client.id(), leasehold::Owner::current().id());
    /// # }
    /// ```
    pub fn id(&self) -> uuid::Uuid {
        self.inner.id
    }

    /// The watchdog renewing this client's leases.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) {
    /// println!("{} leases renewed", client.watchdog().lease_count());
    /// # }
    /// ```
    pub fn watchdog(&self) -> &Watchdog {
        self.inner.engine.watchdog()
    }

    /// The fred client carrying this client's commands, for reads of your
    /// own. Do not send lock scripts through it by hand.
    ///
    /// After [`shutdown`](Self::shutdown) its connection is closed and
    /// every command sent through it (or a clone of it) fails at once with
    /// a fred timeout error (fred itself would queue it until the command
    /// timeout); check [`is_shut_down`](Self::is_shut_down).
    ///
    /// # Example
    ///
    /// ```no_run
    /// use fred::interfaces::KeysInterface;
    /// # async fn f(client: leasehold::Client) -> Result<(), fred::error::Error> {
    /// let n: i64 = client.redis().exists("orders:42").await?;
    /// # Ok(()) }
    /// ```
    pub fn redis(&self) -> &FredClient {
        self.inner.engine.redis()
    }

    /// What the client learned about its server at connect: its kind and
    /// version, whether it may evict a held lock, sharded pub/sub, `WAIT`,
    /// and whether the client can kill a connection it gave up on (see
    /// [`ServerInfo`](crate::ServerInfo)).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f() -> leasehold::Result<()> {
    /// let client = leasehold::Client::connect("redis://127.0.0.1:6379").await?;
    /// let info = client.server_info();
    /// println!("{} {:?}", info.kind, info.version);
    /// # Ok(()) }
    /// ```
    pub fn server_info(&self) -> &crate::ServerInfo {
        self.inner.engine.server_info()
    }

    /// Number of unlock channels this client is subscribed to: one per lock
    /// that at least one of its tasks is waiting for.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) {
    /// assert_eq!(client.subscribed_channels(), 0);
    /// # }
    /// ```
    pub fn subscribed_channels(&self) -> usize {
        self.inner.engine.channel_count()
    }

    /// What this client has done since it was built: acquisitions,
    /// contention, waits, releases, renewals, losses, subscriptions (see
    /// [`Stats`] for each count, the `metrics` feature's metric names and
    /// the `tracing` spans). Counted per client, whatever the lock kind;
    /// always on, no feature needed. Cheap: a few atomic loads.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let before = client.stats();
    /// client.lock("orders:42").lock().await?.unlock().await?;
    /// let after = client.stats();
    /// assert_eq!(after.acquisitions - before.acquisitions, 1);
    /// # Ok(()) }
    /// ```
    pub fn stats(&self) -> Stats {
        self.inner.engine.stats()
    }

    /// Gives back every hold this client handed out (waking waiters
    /// elsewhere), stops renewing its leases, and closes its connections.
    /// Every later call on the client, its locks or its guards returns
    /// [`Error::Shutdown`]; tasks waiting for a lock through it are woken
    /// and get `Error::Shutdown` too. Calling it twice is harmless.
    ///
    /// # Cancel safety
    ///
    /// The client is marked shut down and its leases forgotten at the first
    /// poll. If the future is dropped before the releases finish, the
    /// remaining holds expire with their leases and the connections close
    /// when the last handle and the last guard are dropped.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// client.shutdown().await?;
    /// assert!(matches!(client.lock("x").try_lock().await, Err(leasehold::Error::Shutdown)));
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(&self) -> Result<()> {
        self.inner.engine.engine().shutdown().await
    }

    /// Whether [`shutdown`](Self::shutdown) was called (on this client or
    /// a clone). After it every call fails with [`Error::Shutdown`], and
    /// commands sent through [`redis`](Self::redis) fail at once.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// client.shutdown().await?;
    /// assert!(client.is_shut_down());
    /// # Ok(()) }
    /// ```
    pub fn is_shut_down(&self) -> bool {
        self.inner.engine.is_shut_down()
    }

    /// The wait-for cycles among every client on this Redis (every
    /// primary of a cluster): each member holds a lock the next one waits
    /// for. Only waits that have lasted past their client's threshold
    /// ([`ClientBuilder::record_waits_after`], default 1 s) are recorded,
    /// so a cycle shows about a second after it closes. Empty when there
    /// is none. The same as `leasehold deadlocks` prints.
    ///
    /// Reads every client record (`SCAN`), then each lock waited for:
    /// an operator's call, not one for the lock path.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (reads only).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// for cycle in client.deadlocks().await? {
    ///     eprintln!("deadlock: {cycle}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn deadlocks(&self) -> Result<Vec<Deadlock>> {
        self.engine().check()?;
        registry::deadlocks_on(self.redis()).await
    }

    /// The engine, for primitives.
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        self.inner.engine.engine()
    }

    /// The owner field `<client-uuid>:<owner-id>` for `owner`, with
    /// `suffix` appended.
    pub(crate) fn field(&self, owner: u64, suffix: &str) -> String {
        crate::naming::owner_field(&self.inner.field_prefix, owner, suffix)
    }

    /// What every owner field of this client starts with: `<client-uuid>:`.
    pub(crate) fn field_prefix(&self) -> &str {
        &self.inner.field_prefix
    }

    /// `name` with the client's key prefix.
    pub(crate) fn key(&self, name: &str) -> String {
        crate::naming::concat([&self.inner.key_prefix, name])
    }

    /// The key prefix given to the builder ("" if none).
    pub(crate) fn key_prefix(&self) -> &str {
        &self.inner.key_prefix
    }
}

// === impl ClientBuilder ===

impl ClientBuilder {
    /// The Redis URL, e.g. `redis://user:pass@127.0.0.1:6379/0`.
    ///
    /// Schemes: `redis://` (one server), `redis-cluster://`,
    /// `redis-sentinel://`, their TLS forms `rediss://`,
    /// `rediss-cluster://`, `rediss-sentinel://`, and the same with
    /// `valkey` for `redis`. A TLS scheme needs one of leasehold's TLS
    /// features (`tls-rustls`, `tls-native-tls`): without one,
    /// [`build`](Self::build) refuses it with [`Error::InvalidArgument`]
    /// rather than connect in plaintext. Any other scheme (`http://`, …)
    /// is refused too.
    ///
    /// # Example
    ///
    /// ```
    /// let b = leasehold::Client::builder().url("redis://127.0.0.1:6379");
    /// ```
    pub fn url(mut self, url: &str) -> Self {
        self.url = Some(url.to_owned());
        self
    }

    /// A full fred [`Config`] instead of a URL.
    ///
    /// # Example
    ///
    /// ```
    /// let config = fred::types::config::Config::from_url("redis://127.0.0.1:6379").unwrap();
    /// let b = leasehold::Client::builder().config(config);
    /// ```
    pub fn config(mut self, config: Config) -> Self {
        self.config = Some(config);
        self
    }

    /// Gives this client a watchdog of its own with this timeout (the lease
    /// of locks taken without one, renewed every `timeout / 3`), instead of
    /// the process-wide [`Watchdog::global`] (30 s unless configured).
    /// Giving both this and a [`watchdog`](Self::watchdog) is an
    /// [`Error::InvalidArgument`] at [`build`](Self::build).
    ///
    /// # Example
    ///
    /// ```
    /// # use std::time::Duration;
    /// let b = leasehold::Client::builder().watchdog_timeout(Duration::from_secs(10));
    /// ```
    pub fn watchdog_timeout(mut self, timeout: Duration) -> Self {
        self.watchdog_timeout = Some(timeout);
        self
    }

    /// Uses `watchdog` instead of the process-wide one (for example one
    /// shared by some clients only).
    ///
    /// # Example
    ///
    /// ```
    /// # use std::time::Duration;
    /// let wd = leasehold::Watchdog::new(Duration::from_secs(30)).unwrap();
    /// let b = leasehold::Client::builder().watchdog(wd);
    /// ```
    pub fn watchdog(mut self, watchdog: Watchdog) -> Self {
        self.watchdog = Some(watchdog);
        self
    }

    /// A prefix put before every lock name (and so in its channel).
    ///
    /// # Example
    ///
    /// ```
    /// let b = leasehold::Client::builder().key_prefix("app:");
    /// ```
    pub fn key_prefix(mut self, prefix: &str) -> Self {
        self.key_prefix = prefix.to_owned();
        self
    }

    /// The longest a waiter sleeps before re-checking a lock that has no
    /// expiry, or whose remaining lease is longer. Default 30 s.
    ///
    /// # Example
    ///
    /// ```
    /// # use std::time::Duration;
    /// let b = leasehold::Client::builder().recheck_interval(Duration::from_secs(5));
    /// ```
    pub fn recheck_interval(mut self, interval: Duration) -> Self {
        self.recheck_interval = Some(interval);
        self
    }

    /// Timeout of each Redis command. Default 10 s.
    ///
    /// # Example
    ///
    /// ```
    /// # use std::time::Duration;
    /// let b = leasehold::Client::builder().command_timeout(Duration::from_secs(2));
    /// ```
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = Some(timeout);
        self
    }

    /// How long Redis keeps a request record (`leasehold_latch:…`) that
    /// is not deleted after its reply: the record of a call whose outcome
    /// is still unknown. While it lives, a re-sent copy of its request
    /// replays the first run's reply instead of running again; a call is
    /// re-sent for at most half of it, then settled in the background.
    /// Default: three command timeouts, at least 30 s. It must be at least
    /// twice the command timeout (so a re-send window spans a timeout);
    /// `build` refuses less.
    ///
    /// Copies of a request stuck on a connection the client replaced are
    /// not bounded by this TTL: that connection is killed on the server
    /// before a later reply is trusted (see the README's failure model).
    ///
    /// # Example
    ///
    /// ```
    /// # use std::time::Duration;
    /// let b = leasehold::Client::builder()
    ///     .command_timeout(Duration::from_secs(2))
    ///     .request_record_ttl(Duration::from_secs(10));
    /// ```
    pub fn request_record_ttl(mut self, ttl: Duration) -> Self {
        self.request_record_ttl = Some(ttl);
        self
    }

    /// How many unlock messages the subscriber connection buffers before
    /// the message stream lags (default 4096). A lag is not a loss of
    /// safety — every waiter then re-checks at once — but it costs one
    /// script call per waiter, so size it to the bursts of unlocks you
    /// expect.
    ///
    /// # Example
    ///
    /// ```
    /// let b = leasehold::Client::builder().message_capacity(16 * 1024);
    /// ```
    pub fn message_capacity(mut self, capacity: usize) -> Self {
        self.message_capacity = Some(capacity);
        self
    }

    /// Builds a client even where [`build`](Self::build) would refuse the
    /// server or user as unsafe for locks ([`Error::Unsupported`]: a user
    /// without the lock channels, scripts or the key prefix,
    /// `wait_for_replicas` without `WAIT`, Garnet), for a tool that reports
    /// on a deployment (`leasehold doctor`, [`Client::doctor`]). Such a
    /// client must not be used to take locks. Off by default.
    ///
    /// # Example
    ///
    /// ```
    /// let b = leasehold::Client::builder().report_only(true);
    /// ```
    pub fn report_only(mut self, report_only: bool) -> Self {
        self.report_only = report_only;
        self
    }

    /// Whether unlock messages use sharded pub/sub (`SPUBLISH` /
    /// `SSUBSCRIBE`, Redis 7+). By default they do on a Redis Cluster whose
    /// servers support it, as Redisson's default subscription mode does, so
    /// both contend through the same channels; on a single server or
    /// Sentinel they use plain `PUBLISH` / `SUBSCRIBE`. Sharded messages
    /// stay on the lock's shard instead of crossing the whole cluster.
    ///
    /// Returns an error at [`build`](Self::build) if sharded pub/sub is
    /// forced on a server that is not a cluster.
    ///
    /// # Example
    ///
    /// ```
    /// let b = leasehold::Client::builder().sharded_pubsub(false); // plain pub/sub even on a cluster
    /// ```
    pub fn sharded_pubsub(mut self, sharded: bool) -> Self {
        self.sharded_pubsub = Some(sharded);
        self
    }

    /// Replica-safe acquire: after each acquire, `WAIT` until `replicas`
    /// replicas have acknowledged the write, for at most `timeout`. If
    /// fewer do, the hold is given back and the acquire fails with
    /// [`Error::ReplicasMissing`] (or is retried, see
    /// [`retry_when_replicas_missing`](Self::retry_when_replicas_missing)).
    ///
    /// This narrows, but does not close, the failover window of
    /// asynchronous replication: a lock acknowledged by `replicas` replicas
    /// survives the failure of the primary if one of those replicas is
    /// promoted, and the lease's later renewals are not waited for.
    /// `WAIT` holds the command connection for the time it takes (about a
    /// round trip to the slowest replica when they are healthy), delaying
    /// other commands of the client queued behind it.
    ///
    /// # Example
    ///
    /// ```
    /// # use std::time::Duration;
    /// let b = leasehold::Client::builder().wait_for_replicas(1, Duration::from_millis(100));
    /// ```
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        let retry = self.replicas.is_some_and(|r| r.retry);
        self.replicas = Some(ReplicaWait {
            replicas,
            timeout,
            retry,
        });
        self
    }

    /// With [`wait_for_replicas`](Self::wait_for_replicas): instead of
    /// failing an acquire that too few replicas acknowledged, give the hold
    /// back and try again (with back-off) until the call's deadline, like
    /// after a connection error. `try_lock` still fails at once.
    ///
    /// # Example
    ///
    /// ```
    /// # use std::time::Duration;
    /// let b = leasehold::Client::builder()
    ///     .wait_for_replicas(1, Duration::from_millis(100))
    ///     .retry_when_replicas_missing(true);
    /// ```
    pub fn retry_when_replicas_missing(mut self, retry: bool) -> Self {
        if let Some(r) = &mut self.replicas {
            r.retry = retry;
        } else {
            self.replicas = Some(ReplicaWait {
                replicas: 0,
                timeout: Duration::ZERO,
                retry,
            });
        }
        self
    }

    /// Keeps trying to connect for up to `max_wait` when Redis cannot be
    /// reached yet (down, starting, loading its data, a cluster not ready):
    /// [`build`](Self::build) retries with back-off (100 ms, doubling up to
    /// 2 s) and returns the last error once `max_wait` has passed. Errors
    /// that cannot pass (bad credentials, bad settings) are returned at
    /// once.
    ///
    /// Which policy applies when:
    ///
    /// * **At `build()`**: by default one attempt, failing fast (as soon
    ///   as the connection is refused, or after the command timeout), so a
    ///   misconfigured service stops at start-up; with `connect_retry`, as
    ///   above.
    /// * **Once connected**: a lost connection is reconnected forever
    ///   (back-off up to 2 s). Meanwhile acquires keep waiting until their
    ///   own deadline, other calls fail with [`Error::Redis`], and watchdog
    ///   leases that cannot be renewed in time are reported lost.
    ///
    /// # Example
    ///
    /// ```
    /// # use std::time::Duration;
    /// // A service started with (or before) its Redis: wait up to 30 s.
    /// let b = leasehold::Client::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .connect_retry(Duration::from_secs(30));
    /// ```
    pub fn connect_retry(mut self, max_wait: Duration) -> Self {
        self.connect_retry = Some(max_wait);
        self
    }

    /// The app name in the client's record in Redis, which operators see
    /// (`leasehold clients`, `leasehold inspect`, [`Deadlock`]s). Default:
    /// the executable's name.
    ///
    /// # Example
    ///
    /// ```
    /// let b = leasehold::Client::builder().app_name("billing");
    /// ```
    pub fn app_name(mut self, app: &str) -> Self {
        self.app_name = Some(app.to_owned());
        self
    }

    /// How long a wait for a lock lasts before it is recorded in the
    /// client's record, for operators and deadlock detection. Shorter
    /// waits write nothing. Default 1 s. A client without a record
    /// ([`client_record(false)`](Self::client_record)) records no wait.
    ///
    /// # Example
    ///
    /// ```
    /// # use std::time::Duration;
    /// let b = leasehold::Client::builder().record_waits_after(Duration::from_millis(200));
    /// ```
    pub fn record_waits_after(mut self, threshold: Duration) -> Self {
        self.record_waits_after = Some(threshold);
        self
    }

    /// Deadlock detection (off by default): a recorded wait (see
    /// [`record_waits_after`](Self::record_waits_after)) looks every
    /// 500 ms for a wait-for cycle through itself across every client of
    /// this Redis. Of a cycle's waits, the youngest fails with
    /// [`Error::Deadlock`] (naming the cycle), so the others can proceed
    /// once its task releases what it holds. Only clients with detection
    /// on give up; a cycle whose youngest wait is another client's without
    /// detection is reported ([`Client::deadlocks`]) but not broken.
    /// Needs the client's record (see [`client_record`](Self::client_record)).
    ///
    /// # Example
    ///
    /// ```
    /// let b = leasehold::Client::builder().detect_deadlocks(true);
    /// ```
    pub fn detect_deadlocks(mut self, detect: bool) -> Self {
        self.detect_deadlocks = detect;
        self
    }

    /// Whether the client keeps its record in Redis (default `true`): the
    /// hash `leasehold:client:{<client-uuid>}` with its app name, host,
    /// pid, version and long waits, which the `leasehold` tool and
    /// [`Client::deadlocks`] read.
    ///
    /// With `false` the client writes nothing of its own: no `EVAL` when
    /// it starts, no `PEXPIRE` per renew interval, no `DEL` at shutdown,
    /// and no wait of its is ever recorded. Its holds still show in
    /// `leasehold inspect`, as foreign (no app, host or pid), and its
    /// waits take no part in deadlock detection. Locks behave the same
    /// either way, and the record costs nothing measurable on the lock
    /// path (BENCHMARKS.md, "Operators"): turn it off where the client
    /// may not write it — a Redis user whose ACL allows only the
    /// application's keys (the record's key does not take the
    /// [`key_prefix`](Self::key_prefix)) — or must not publish its host
    /// name and pid.
    ///
    /// [`build`](Self::build) refuses `client_record(false)` together with
    /// [`detect_deadlocks(true)`](Self::detect_deadlocks), which needs the
    /// record ([`Error::InvalidArgument`]).
    ///
    /// # Example
    ///
    /// ```
    /// // A Redis user allowed only `app:*` keys.
    /// let b = leasehold::Client::builder()
    ///     .url("redis://app-user:secret@127.0.0.1:6379")
    ///     .key_prefix("app:")
    ///     .client_record(false);
    /// ```
    pub fn client_record(mut self, keep: bool) -> Self {
        self.client_record = Some(keep);
        self
    }

    /// Connects both connections and starts the client's tasks.
    ///
    /// Fails with [`Error::InvalidArgument`] for a bad URL or setting, and
    /// with [`Error::Redis`] if Redis cannot be reached within the command
    /// timeout (or rejects the credentials); see
    /// [`connect_retry`](Self::connect_retry) to wait for a Redis that is
    /// not up yet.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future closes whatever connections it had opened.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f() -> leasehold::Result<()> {
    /// let client = leasehold::Client::builder().url("redis://127.0.0.1:6379").build().await?;
    /// # Ok(()) }
    /// ```
    pub async fn build(self) -> Result<Client> {
        let config = match (self.config, self.url) {
            (Some(config), _) => config,
            (None, Some(url)) => {
                check_scheme(&url)?;
                Config::from_url(&url)
                    .map_err(|e| Error::invalid(format!("bad Redis URL: {}", e.details())))?
            }
            (None, None) => return Err(Error::invalid("no Redis URL or config given")),
        };
        let watchdog = match (self.watchdog, self.watchdog_timeout) {
            (Some(_), Some(_)) => {
                return Err(Error::invalid(
                    "give the client either a watchdog or a watchdog timeout, not both",
                ))
            }
            (Some(watchdog), None) => watchdog,
            (None, Some(timeout)) => Watchdog::new(timeout)?,
            (None, None) => Watchdog::global(),
        };
        let recheck_interval = self.recheck_interval.unwrap_or(DEFAULT_RECHECK);
        if recheck_interval.is_zero() {
            return Err(Error::invalid("recheck interval must be above zero"));
        }
        let command_timeout = self.command_timeout.unwrap_or(DEFAULT_COMMAND_TIMEOUT);
        if command_timeout.is_zero() {
            return Err(Error::invalid("command timeout must be above zero"));
        }
        let replicas =
            match self.replicas {
                Some(r) if r.replicas == 0 => None,
                Some(r) if r.timeout < Duration::from_millis(1) => return Err(Error::invalid(
                    "the replica wait timeout must be at least 1 ms (WAIT 0 would block forever)",
                )),
                other => other,
            };
        let message_capacity = self.message_capacity.unwrap_or(DEFAULT_MESSAGE_CAPACITY);
        if message_capacity == 0 {
            return Err(Error::invalid("message capacity must be at least 1"));
        }
        let record_ttl = match self.request_record_ttl {
            Some(ttl) if ttl < command_timeout * 2 => {
                return Err(Error::invalid(format!(
                    "the request record TTL ({ttl:?}) must be at least twice the command \
                     timeout ({command_timeout:?})"
                )))
            }
            Some(ttl) => ttl,
            None => (command_timeout * 3).max(MIN_LATCH_TTL),
        };
        let settings = Settings {
            config,
            command_timeout,
            message_capacity,
            record_ttl,
            rids: Default::default(),
            key_prefix: self.key_prefix.clone(),
            refuse_unsafe: !self.report_only,
        };
        let client_record = self.client_record.unwrap_or(true);
        if self.detect_deadlocks && !client_record {
            return Err(Error::invalid(
                "deadlock detection needs the client record: \
                 detect_deadlocks(true) cannot go with client_record(false)",
            ));
        }
        let id = uuid::Uuid::new_v4();
        let identity = Identity {
            id,
            app: self.app_name.unwrap_or_else(registry::exe_name),
            threshold: self
                .record_waits_after
                .unwrap_or(registry::DEFAULT_THRESHOLD),
            detect: self.detect_deadlocks,
        };
        let options = Options {
            settings,
            sharded: self.sharded_pubsub,
            watchdog,
            recheck_interval,
            replicas,
            identity,
            client_record,
        };
        let engine = start_engine(options, self.connect_retry).await?;
        // A release by another client of this process can then hand this
        // client's waiters what it granted them directly.
        engine.serve_here(id);
        let inner = ClientInner {
            id,
            field_prefix: format!("{id}:").into(),
            key_prefix: self.key_prefix,
            engine: Open::new(engine),
        };
        Ok(Client {
            inner: Arc::new(inner),
        })
    }
}

/// Starts the engine; with a retry budget, failures that may pass (Redis
/// not up yet, loading, a cluster not ready) are retried with back-off
/// until `max_wait` has passed, the last attempt at the deadline.
async fn start_engine(options: Options, retry: Option<Duration>) -> Result<Arc<Engine>> {
    let Some(max_wait) = retry else {
        return Engine::start(options).await;
    };
    let deadline = tokio::time::Instant::now() + max_wait;
    let mut pauses = Backoff::new(CONNECT_RETRY_FIRST, CONNECT_RETRY_MAX);
    loop {
        let error = match Engine::start(options.clone()).await {
            Ok(engine) => return Ok(engine),
            Err(e) if e.is_transient() => e,
            Err(e) => return Err(e),
        };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Err(error);
        }
        let pause = pauses.next().min(left);
        tracing::info!(error = %error, retry_in = ?pause, "Redis not reachable yet: retrying");
        tokio::time::sleep(pause).await;
    }
}

/// Refuses a URL whose scheme is not Redis's, or asks for TLS that this
/// build cannot give. The error names the scheme only (a URL may hold a
/// password).
fn check_scheme(url: &str) -> Result<()> {
    let Some((scheme, _)) = url.split_once("://") else {
        return Err(Error::invalid(
            "bad Redis URL: no scheme (expected redis://host:port)",
        ));
    };
    let scheme = scheme.to_ascii_lowercase();
    if PLAIN_SCHEMES.contains(&scheme.as_str()) {
        Ok(())
    } else if TLS_SCHEMES.contains(&scheme.as_str()) {
        if TLS_BUILT {
            Ok(())
        } else {
            Err(Error::invalid(format!(
                "`{scheme}://` asks for TLS, but leasehold was built without a TLS feature: \
                 enable `tls-rustls` or `tls-native-tls` (refused rather than connect in plaintext)"
            )))
        }
    } else {
        Err(Error::invalid(format!(
            "unsupported URL scheme `{scheme}://`: use redis://, rediss:// (TLS), \
             redis-cluster:// or redis-sentinel:// (or their rediss- / valkey forms)"
        )))
    }
}

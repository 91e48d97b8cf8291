//! The client: connections, configuration, and what outlives a guard.
//!
//! A [`Client`] owns two Redis connections:
//!
//! * the **command connection** (a fred `Client`) carries every script and
//!   read. It is built with `max_command_attempts = 1`, so a lock script
//!   that was in flight when the connection dropped is *never re-sent*:
//!   the caller gets an error whose outcome is unknown
//!   ([`Error::is_outcome_unknown`]) instead of a hold counted twice;
//! * the **subscriber connection** carries every unlock channel (see the
//!   `pubsub` module).
//!
//! Both reconnect forever with exponential back-off (fred's default is to
//! never reconnect, after which every command hangs), and every command has
//! a timeout.
//!
//! Releases requested by dropped guards go through one background task of
//! the client, so a guard can be dropped anywhere (another runtime, no
//! runtime) without panicking. The client also counts every hold it has
//! handed out, so [`Client::shutdown`] can give them all back.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client as FredClient;
use fred::interfaces::{ClientLike, EventInterface};
use fred::types::config::{Config, ReconnectPolicy};
use fred::types::Builder;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::error::{Error, Result};
use crate::holds::{self, Holds, Release};
use crate::lock::Lock;
use crate::pubsub::PubSub;
use crate::scripts::Scripts;
use crate::watchdog::{LeaseState, Watchdog};

/// A connection to Redis that hands out [`Lock`]s.
///
/// Cheap to clone (an `Arc` inside); clones share the connections, the
/// watchdog and the client id. Call [`Client::shutdown`] when done: it
/// gives back every hold and closes the connections.
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
}

/// `WAIT` after each acquire (see [`ClientBuilder::wait_for_replicas`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReplicaWait {
    pub(crate) replicas: u32,
    pub(crate) timeout: Duration,
    /// Retry (as after a connection error) instead of failing at once.
    pub(crate) retry: bool,
}

/// The command connection as the watchdog and guards see it.
#[derive(Debug)]
pub(crate) struct Conn {
    /// Unique per client in this process; keys the watchdog registry.
    pub(crate) id: u64,
    pub(crate) redis: FredClient,
    pub(crate) clustered: bool,
    /// Unlock messages go through sharded pub/sub (SPUBLISH/SSUBSCRIBE).
    pub(crate) sharded: bool,
}

impl Conn {
    /// The command the scripts publish unlock messages with.
    pub(crate) fn publish_command(&self) -> &'static str {
        if self.sharded {
            "spublish"
        } else {
            "publish"
        }
    }
}

#[derive(Debug)]
pub(crate) struct ClientInner {
    pub(crate) id: uuid::Uuid,
    pub(crate) conn: Arc<Conn>,
    pub(crate) pubsub: PubSub,
    pub(crate) watchdog: Watchdog,
    pub(crate) key_prefix: String,
    /// Longest a waiter sleeps without re-checking when the lock has no
    /// expiry (PTTL -1).
    pub(crate) recheck_interval: Duration,
    /// Replica acknowledgements required after each acquire, if any.
    pub(crate) replicas: Option<ReplicaWait>,
    /// Holds handed out and not yet given back (see `holds`).
    pub(crate) holds: Holds,
    /// Releases of dropped guards, run by the releaser task.
    releases: mpsc::UnboundedSender<(Release, Arc<LeaseState>)>,
    shut_down: AtomicBool,
}

/// Default watchdog timeout (Redisson's `lockWatchdogTimeout`).
const DEFAULT_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(30);
/// Default cap on a waiter's sleep between re-checks.
const DEFAULT_RECHECK: Duration = Duration::from_secs(30);
/// Default timeout of one Redis command.
const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// Default number of unlock messages buffered before the stream lags.
const DEFAULT_MESSAGE_CAPACITY: usize = 4096;

static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

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

    /// A handle to the lock called `name` (the key prefix is added). Cheap;
    /// nothing is sent until it is used. An empty name is reported as
    /// [`Error::InvalidArgument`] by every call on the lock.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let lock = client.lock("orders:42");
    /// assert_eq!(lock.name(), "orders:42");
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, name: &str) -> Lock {
        Lock::new(self.clone(), name)
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
        &self.inner.watchdog
    }

    /// The fred client carrying this client's commands, for reads of your
    /// own. Do not send lock scripts through it by hand.
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
        &self.inner.conn.redis
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
        self.inner.pubsub.channel_count()
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
    /// when the last handle is dropped.
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
        let inner = &self.inner;
        if inner.shut_down.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        inner.watchdog.forget_conn(inner.conn.id);
        inner.pubsub.wake_all();
        let mut releases = JoinSet::new();
        for (release, count) in inner.holds.drain() {
            let conn = inner.conn.clone();
            releases.spawn(async move { holds::release(&conn, &release, count, count).await });
        }
        let mut first_error = None;
        while let Some(done) = releases.join_next().await {
            if let Ok(Err(e)) = done {
                first_error.get_or_insert(e);
            }
        }
        inner.pubsub.quit().await;
        let _ = inner.conn.redis.quit().await;
        match first_error {
            Some(e) => Err(Error::Redis(e)),
            None => Ok(()),
        }
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.inner.shut_down.load(Ordering::Acquire) {
            Err(Error::Shutdown)
        } else {
            Ok(())
        }
    }
}

impl ClientInner {
    /// Queues the release of a dropped guard's hold; never blocks or
    /// panics. The hold stays counted until the release completes.
    pub(crate) fn release_in_background(&self, release: Release, epoch: Arc<LeaseState>) {
        if !self.is_shut_down() {
            let _ = self.releases.send((release, epoch));
        }
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shut_down.load(Ordering::Acquire)
    }
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        if self.is_shut_down() {
            return;
        }
        // fred's connection tasks outlive their handles unless told to quit.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let redis = self.conn.redis.clone();
            let pubsub = self.pubsub.clone();
            handle.spawn(async move {
                pubsub.quit().await;
                let _ = redis.quit().await;
            });
        }
    }
}

/// Runs the releases of dropped guards, each in its own task.
async fn run_releases(
    inner: std::sync::Weak<ClientInner>,
    mut rx: mpsc::UnboundedReceiver<(Release, Arc<LeaseState>)>,
) {
    while let Some((release, epoch)) = rx.recv().await {
        let Some(inner) = inner.upgrade() else { return };
        tokio::spawn(async move {
            let _turn = inner.holds.turn(&release.key, &release.field).await;
            let before = inner.holds.count(&release.key, &release.field);
            if let Err(e) = holds::release(&inner.conn, &release, 1, before).await {
                tracing::warn!(key = %release.key, error = %e, "background release failed; the lease will expire");
            }
            inner.holds.released(&release.key, &release.field, &epoch);
        });
    }
}

// === impl ClientBuilder ===

impl ClientBuilder {
    /// The Redis URL, e.g. `redis://user:pass@127.0.0.1:6379/0`
    /// (`rediss://` needs a fred TLS feature).
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

    /// The lease of locks taken without one: kept alive by the watchdog,
    /// renewed every `timeout / 3`. Default 30 s. Ignored when a shared
    /// [`watchdog`](Self::watchdog) is given.
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

    /// Shares `watchdog` with other clients instead of building one.
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

    /// Connects both connections and starts the client's tasks.
    ///
    /// Fails with [`Error::InvalidArgument`] for a bad URL or setting, and
    /// with [`Error::Redis`] if Redis cannot be reached within the command
    /// timeout (or rejects the credentials).
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
            (None, Some(url)) => Config::from_url(&url)
                .map_err(|e| Error::invalid(format!("bad Redis URL: {}", e.details())))?,
            (None, None) => return Err(Error::invalid("no Redis URL or config given")),
        };
        let watchdog = match self.watchdog {
            Some(watchdog) => watchdog,
            None => Watchdog::new(self.watchdog_timeout.unwrap_or(DEFAULT_WATCHDOG_TIMEOUT))?,
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

        let mut builder = Builder::from_config(config);
        builder
            .set_policy(ReconnectPolicy::new_exponential(0, 50, 2_000, 2))
            .with_connection_config(|c| {
                c.connection_timeout = command_timeout;
                c.internal_command_timeout = command_timeout;
                c.max_command_attempts = 1;
                // A connection that stops answering is closed and
                // reconnected, failing what was in flight on it.
                c.unresponsive.max_timeout = Some(command_timeout);
                c.unresponsive.interval = (command_timeout / 4).max(Duration::from_millis(10));
            })
            .with_performance_config(|p| {
                p.default_command_timeout = command_timeout;
                p.broadcast_channel_capacity = message_capacity;
            });
        let redis = builder.build()?;
        let subscriber = builder
            .with_connection_config(|c| {
                c.max_command_attempts = 3;
                // The subscriber connection is quiet for long stretches.
                c.unresponsive.max_timeout = None;
            })
            .build_subscriber_client()?;

        let connected = tokio::time::timeout(command_timeout, async {
            redis.init().await?;
            subscriber.init().await?;
            Scripts::get().load_all(&redis).await?;
            Ok::<_, fred::error::Error>(())
        })
        .await;
        let failure = match connected {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(Error::Redis(e)),
            Err(_) => Some(Error::Redis(fred::error::Error::new(
                fred::error::ErrorKind::Timeout,
                format!("could not connect to Redis within {command_timeout:?}"),
            ))),
        };
        if let Some(e) = failure {
            let _ = redis.quit().await;
            let _ = subscriber.quit().await;
            return Err(e);
        }

        let clustered = redis.is_clustered();
        let supports_sharded = redis.server_version().map_or(true, |v| v.major >= 7);
        let sharded = match self.sharded_pubsub {
            Some(true) if !clustered => {
                let _ = redis.quit().await;
                let _ = subscriber.quit().await;
                return Err(Error::invalid("sharded pub/sub needs a Redis Cluster"));
            }
            Some(forced) => forced,
            None => clustered && supports_sharded,
        };
        let conn = Arc::new(Conn {
            id: NEXT_CONN.fetch_add(1, Ordering::Relaxed),
            clustered,
            sharded,
            redis,
        });
        let (releases, releases_rx) = mpsc::unbounded_channel();
        let inner = ClientInner {
            id: uuid::Uuid::new_v4(),
            pubsub: PubSub::start(
                subscriber,
                sharded,
                clustered.then(|| conn.redis.cluster_change_rx()),
            ),
            conn,
            watchdog,
            key_prefix: self.key_prefix,
            recheck_interval,
            replicas,
            holds: Holds::default(),
            releases,
            shut_down: AtomicBool::new(false),
        };
        let inner = Arc::new(inner);
        tokio::spawn(run_releases(Arc::downgrade(&inner), releases_rx));
        Ok(Client { inner })
    }
}

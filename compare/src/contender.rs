//! The locks under test, behind one enum so every scenario runs the same
//! code for each of them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fred::clients::Client as FredClient;
use fred::interfaces::{ClientLike, KeysInterface, LuaInterface};
use fred::types::config::Config;
use fred::types::{Builder, Expiration, SetOptions, Value};

/// The keys and arguments leasehold sends with its two lock scripts (see
/// `leasehold::__bench::lock_scripts` and `src/lock/scripts/*.lua`), for
/// the raw-fred baselines on one client or several: as leasehold sends
/// them on an uncontended lock + unlock (the twins without the request
/// record: a request id, no record key or TTL) or bare (the scripts'
/// bodies alone, see `leasehold::__bench::lock_script_bodies`: no request
/// id either). If leasehold's arguments change, change them here: every
/// raw-fred row follows.
mod raw_args {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::LEASE;

    /// Request ids, which must only grow per latch, as leasehold's do.
    fn rid() -> String {
        static RID: AtomicU64 = AtomicU64::new(1);
        RID.fetch_add(1, Ordering::Relaxed).to_string()
    }

    /// With `latched`, appends what leasehold's uncontended calls carry
    /// beside the bare scripts' arguments: a new request id (the last
    /// argument). They go without the request record's key and TTL: the
    /// scripts' checks prove the first run by the count (`core/script.rs`,
    /// "Sent without the record").
    fn latch(latched: bool, args: &mut Vec<String>) {
        if latched {
            args.push(rid());
        }
    }

    /// `acquire.lua` (after `acquire_check.lua`): KEYS = [lock],
    /// ARGV = [lease ms, owner field, 0 (the holds counted before: none),
    /// "" (no take announced), request id] (bare: without the request
    /// id).
    pub fn acquire(name: &str, field: &str, latched: bool) -> (Vec<String>, Vec<String>) {
        let mut keys = Vec::with_capacity(2);
        keys.push(name.to_owned());
        let mut args = Vec::with_capacity(6);
        args.extend([
            LEASE.as_millis().to_string(),
            field.to_owned(),
            "0".into(),
            String::new(),
        ]);
        latch(latched, &mut args);
        (keys, args)
    }

    /// `release.lua` (after `release_check.lua`): KEYS = [lock, unlock
    /// channel], ARGV = [TTL ms while holds remain, owner field,
    /// holds given back, publish command, the count expected (1: the one
    /// hold), request id] (bare: without the request id).
    pub fn release(name: &str, field: &str, latched: bool) -> (Vec<String>, Vec<String>) {
        let mut keys = Vec::with_capacity(3);
        keys.extend([
            name.to_owned(),
            format!("redisson_lock__channel:{{{name}}}"),
        ]);
        let mut args = Vec::with_capacity(7);
        args.extend([
            LEASE.as_millis().to_string(),
            field.to_owned(),
            "1".into(),
            "publish".into(),
            "1".into(),
        ]);
        latch(latched, &mut args);
        (keys, args)
    }
}
/// Compare-and-delete, the usual unlock of a `SET NX PX` lock.
const POLL_UNLOCK_LUA: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";
/// Lease of the baselines and of rslock (which has no default lease).
const LEASE: Duration = Duration::from_secs(30);
/// rslock has no default TTL; 10 s, as rlock's default.
const RSLOCK_TTL: Duration = Duration::from_secs(10);

static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

/// Which lock implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Leasehold,
    RawFred,
    /// Raw fred sending the bare bodies of the two scripts: the lock's
    /// logic without leasehold's request record (no latch GET and SET).
    RawFredBare,
    Poll10,
    Poll100,
    Rslock,
    Rlock,
    /// leasehold's `fair_lock`; only in the hot-lock report (not in `ALL`).
    LeaseholdFair,
    /// leasehold's lock on a client built with `client_record(false)`:
    /// side A of the operators A/B (`operators.rs`; not in `ALL`).
    LeaseholdNoRecord,
}

impl Kind {
    pub const ALL: [Kind; 7] = [
        Kind::Leasehold,
        Kind::RawFred,
        Kind::RawFredBare,
        Kind::Poll10,
        Kind::Poll100,
        Kind::Rslock,
        Kind::Rlock,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Kind::Leasehold => "leasehold",
            Kind::RawFred => "raw fred (2×EVALSHA, no waiting)",
            Kind::RawFredBare => "raw fred, bare scripts (no request record)",
            Kind::Poll10 => "polling SET NX PX, 10 ms",
            Kind::Poll100 => "polling SET NX PX, 100 ms",
            Kind::Rslock => "rslock 0.10 (defaults)",
            Kind::Rlock => "rlock 0.2 (defaults)",
            Kind::LeaseholdFair => "leasehold fair_lock",
            Kind::LeaseholdNoRecord => "leasehold, client_record(false)",
        }
    }

    pub fn short(self) -> &'static str {
        match self {
            Kind::Leasehold => "leasehold",
            Kind::RawFred => "rawfred",
            Kind::RawFredBare => "rawbare",
            Kind::Poll10 => "poll10",
            Kind::Poll100 => "poll100",
            Kind::Rslock => "rslock",
            Kind::Rlock => "rlock",
            Kind::LeaseholdFair => "fair",
            Kind::LeaseholdNoRecord => "norecord",
        }
    }

    /// The contender `short()` names.
    pub fn from_short(short: &str) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .chain([Kind::LeaseholdFair, Kind::LeaseholdNoRecord])
            .find(|k| k.short() == short)
    }

    /// Whether it can wait for a held lock (the raw baselines cannot).
    pub fn waits(self) -> bool {
        !matches!(self, Kind::RawFred | Kind::RawFredBare)
    }

    /// Whether the same task can take a lock it holds.
    pub fn reentrant(self) -> bool {
        matches!(
            self,
            Kind::Leasehold
                | Kind::RawFred
                | Kind::RawFredBare
                | Kind::LeaseholdFair
                | Kind::LeaseholdNoRecord
        )
    }
}

/// One client (connection) of a contender.
#[derive(Clone)]
pub enum Handle {
    Leasehold(leasehold::Client),
    LeaseholdFair(leasehold::Client),
    /// Both raw-fred baselines: `latched` sends leasehold's scripts as it
    /// does, otherwise their bare bodies.
    RawFred {
        redis: FredClient,
        acquire: String,
        release: String,
        id: String,
        latched: bool,
    },
    Poll {
        redis: FredClient,
        unlock: String,
        interval: Duration,
    },
    Rslock(rslock::LockManager),
    Rlock(rlock::async_lock::RLock),
}

/// One hold.
pub enum Guard {
    Leasehold(leasehold::LockGuard),
    RawFred { key: String, field: String },
    Poll { key: String, token: String },
    Rslock(rslock::LockGuard),
    Rlock(rlock::async_lock::RLockGuard),
}

pub async fn fred_client(url: &str) -> FredClient {
    let config = Config::from_url(url).expect("url");
    let mut builder = Builder::from_config(config);
    if std::env::var_os("LEASEHOLD_COMPARE_RAW_TIMEOUTS").is_some_and(|v| v != "0") {
        // The timeout leasehold's command connection runs with (its
        // default 10 s command timeout): each command then arms a timer,
        // as leasehold's do. (Like leasehold's, no unresponsive check:
        // fred arms a timer on every turn of its loop for that one.)
        let timeout = Duration::from_secs(10);
        builder
            .with_connection_config(|c| {
                c.connection_timeout = timeout;
                c.internal_command_timeout = timeout;
            })
            .with_performance_config(|p| p.default_command_timeout = timeout);
    }
    let client = builder.build().expect("fred client");
    client.init().await.expect("fred connect");
    client
}

impl Handle {
    pub async fn connect(kind: Kind, url: &str) -> Handle {
        match kind {
            Kind::Leasehold => Handle::Leasehold(
                leasehold::Client::connect(url)
                    .await
                    .expect("leasehold connect"),
            ),
            Kind::RawFred | Kind::RawFredBare => {
                let redis = fred_client(url).await;
                let latched = kind == Kind::RawFred;
                let [acquire, release] = if latched {
                    let (acquire, release) = leasehold::__bench::lock_scripts();
                    [acquire.to_owned(), release.to_owned()]
                } else {
                    bare_sources()
                };
                let acquire: String = redis.script_load(acquire).await.expect("load");
                let release: String = redis.script_load(release).await.expect("load");
                let id = format!("raw-{}", NEXT_TOKEN.fetch_add(1, Ordering::Relaxed));
                Handle::RawFred {
                    redis,
                    acquire,
                    release,
                    id,
                    latched,
                }
            }
            Kind::Poll10 | Kind::Poll100 => {
                let redis = fred_client(url).await;
                let unlock: String = redis.script_load(POLL_UNLOCK_LUA).await.expect("load");
                let interval = Duration::from_millis(if kind == Kind::Poll10 { 10 } else { 100 });
                Handle::Poll {
                    redis,
                    unlock,
                    interval,
                }
            }
            Kind::Rslock => Handle::Rslock(rslock::LockManager::new(vec![url.to_owned()])),
            Kind::Rlock => Handle::Rlock(
                rlock::async_lock::RLock::new(url)
                    .await
                    .expect("rlock connect"),
            ),
            Kind::LeaseholdFair => Handle::LeaseholdFair(
                leasehold::Client::connect(url)
                    .await
                    .expect("leasehold connect"),
            ),
            Kind::LeaseholdNoRecord => Handle::Leasehold(
                leasehold::Client::builder()
                    .url(url)
                    .client_record(false)
                    .build()
                    .await
                    .expect("leasehold connect"),
            ),
        }
    }

    /// Waits for the lock (the raw baseline sends one acquire and panics if
    /// the lock was held: it is only used uncontended).
    pub async fn lock(&self, name: &str) -> Guard {
        match self {
            Handle::Leasehold(c) => {
                Guard::Leasehold(c.lock(name).lock().await.expect("leasehold lock"))
            }
            Handle::LeaseholdFair(c) => {
                Guard::Leasehold(c.fair_lock(name).lock().await.expect("leasehold fair lock"))
            }
            Handle::RawFred {
                redis,
                acquire,
                id,
                latched,
                ..
            } => {
                // One field per task, as leasehold's owner.
                let task = tokio::task::try_id()
                    .map(|t| t.to_string())
                    .unwrap_or_default();
                let field = format!("{id}:{task}");
                let (keys, args) = raw_args::acquire(name, &field, *latched);
                let reply: Value = redis
                    .evalsha(acquire.as_str(), keys, args)
                    .await
                    .expect("raw acquire");
                assert!(
                    acquired(&reply),
                    "raw baseline used on a held lock: {reply:?}"
                );
                Guard::RawFred {
                    key: name.to_owned(),
                    field,
                }
            }
            Handle::Poll {
                redis, interval, ..
            } => {
                let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed).to_string();
                loop {
                    let set: Option<String> = redis
                        .set(
                            name,
                            token.as_str(),
                            Some(Expiration::PX(LEASE.as_millis() as i64)),
                            Some(SetOptions::NX),
                            false,
                        )
                        .await
                        .expect("SET NX");
                    if set.is_some() {
                        return Guard::Poll {
                            key: name.to_owned(),
                            token,
                        };
                    }
                    tokio::time::sleep(*interval).await;
                }
            }
            Handle::Rslock(m) => {
                Guard::Rslock(m.acquire(name, RSLOCK_TTL).await.expect("rslock acquire"))
            }
            Handle::Rlock(r) => Guard::Rlock(r.acquire_mutex(name).await.expect("rlock acquire")),
        }
    }

    pub async fn unlock(&self, guard: Guard) {
        match (self, guard) {
            (Handle::Leasehold(_) | Handle::LeaseholdFair(_), Guard::Leasehold(g)) => {
                g.unlock().await.expect("leasehold unlock")
            }
            (
                Handle::RawFred {
                    redis,
                    release,
                    latched,
                    ..
                },
                Guard::RawFred { key, field },
            ) => {
                let (keys, args) = raw_args::release(&key, &field, *latched);
                let freed: Vec<i64> = redis
                    .evalsha(release.as_str(), keys, args)
                    .await
                    .expect("raw release");
                // {0, rid} ({0} bare) means the field was missing.
                assert!(
                    freed.first().is_some_and(|&s| s > 0),
                    "raw release of a lock not held: {freed:?}"
                );
            }
            (Handle::Poll { redis, unlock, .. }, Guard::Poll { key, token }) => {
                let _: Value = redis
                    .evalsha(unlock.as_str(), key, token)
                    .await
                    .expect("poll unlock");
            }
            (Handle::Rslock(_), Guard::Rslock(g)) => g.release().await,
            (Handle::Rlock(_), Guard::Rlock(mut g)) => g.release().await.expect("rlock release"),
            _ => unreachable!("guard of another contender"),
        }
    }

    /// Whether this is a leasehold client (its renewals are counted by the
    /// process-wide watchdog, see `renewal_calls`).
    pub fn is_leasehold(&self) -> bool {
        matches!(self, Handle::Leasehold(_) | Handle::LeaseholdFair(_))
    }

    pub async fn close(&self) {
        match self {
            Handle::Leasehold(c) | Handle::LeaseholdFair(c) => {
                let _ = c.shutdown().await;
            }
            Handle::RawFred { redis, .. } | Handle::Poll { redis, .. } => {
                let _ = redis.quit().await;
            }
            Handle::Rslock(_) => {}
            Handle::Rlock(r) => r.shutdown().await,
        }
    }
}

/// The bare acquire and release scripts the raw-bare baseline sends: the
/// bodies alone, each run as `<body>\nreturn body()`.
pub fn bare_sources() -> [String; 2] {
    let (acquire, release) = leasehold::__bench::lock_script_bodies();
    [acquire, release].map(|body| format!("{body}\nreturn body()"))
}

/// Whether an `acquire.lua` reply means "now held": {1, count, rid}
/// (busy is {0, pttl, rid}); bare, without the rid (the twin's rid comes
/// last: `src/core/scripts/proved_epilogue.lua`).
pub fn acquired(reply: &Value) -> bool {
    match reply {
        Value::Array(items) => matches!(items.first(), Some(Value::Integer(1))),
        _ => false,
    }
}

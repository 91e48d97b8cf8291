//! What the server can do, learned once at connect: the one place in the
//! engine that asks (nothing else reads a version).
//!
//! # What is probed, and how
//!
//! * **Kind and version** (`INFO server`): Redis, Valkey (`valkey_version`,
//!   or `server_name:valkey`), Dragonfly (`dragonfly_version`), Garnet,
//!   KeyDB. Used for minimum versions ([`Feature`]) and for the kinds that
//!   cannot run lock scripts safely (see [`ServerInfo::refusal`]).
//! * **Eviction** (`INFO memory`): a `maxmemory` with a policy that may
//!   evict keys with a TTL (`allkeys-*`, `volatile-*`) can take a held
//!   lock; every lock key carries a TTL.
//! * **Sharded pub/sub**: a cluster whose nodes answer
//!   `PUBSUB SHARDNUMSUB` (as Redisson decides it; `conn.rs`).
//! * **`WAIT`**: `WAIT 0 0` answers at once where the command exists and
//!   is allowed.
//! * **Undeclared keys** (Dragonfly only): a script that reads a key it
//!   does not declare; refused unless Dragonfly runs with
//!   `--default_lua_flags=allow-undeclared-keys`. The read-write lock then
//!   answers `Error::Unsupported` instead of failing half-way (its read
//!   acquire wrote the hold count, then failed at the timeout key).
//! * **The fence** (`CLIENT LIST` / `CLIENT KILL`): `fence.rs`.
//! * **Permissions** ([`check_permissions`]): scripts, the key prefix, the
//!   request records, the lock channels; a refusal fails the connect.
//!
//! `INFO` may be refused (an ACL without `@dangerous`): the kind and
//! version are then unknown, and nothing is refused for them.
//!
//! Learned at connect; a failover to a server of another version is not
//! probed again (the deployments we know run one version per cluster).

use std::fmt;
use std::time::Duration;

use fred::clients::Client as FredClient;
use fred::interfaces::ClientLike;
use fred::types::{ClusterHash, CustomCommand, FromValue, Value};

/// The server software a client is connected to, from its `INFO`.
///
/// # Example
///
/// ```no_run
/// # async fn f() -> leasehold::Result<()> {
/// let client = leasehold::Client::connect("redis://127.0.0.1:6379").await?;
/// if client.server_info().kind == leasehold::ServerKind::Valkey {
///     println!("running on Valkey");
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ServerKind {
    /// Redis.
    Redis,
    /// Valkey.
    Valkey,
    /// Dragonfly: scripts may touch undeclared keys only when it runs with
    /// `--default_lua_flags=allow-undeclared-keys`.
    Dragonfly,
    /// Microsoft Garnet: Lua runs without atomicity unless it runs with
    /// `--lua-transaction-mode`, which a client cannot see; refused.
    Garnet,
    /// KeyDB.
    KeyDb,
    /// `INFO` was refused or named none of the above.
    Unknown,
}

/// What a client learned about its server at connect
/// ([`Client::server_info`](crate::Client::server_info)).
///
/// # Example
///
/// ```no_run
/// # async fn f() -> leasehold::Result<()> {
/// let client = leasehold::Client::connect("redis://127.0.0.1:6379").await?;
/// let info = client.server_info();
/// if info.can_evict_locks() {
///     eprintln!("maxmemory-policy {:?} may evict a held lock", info.maxmemory_policy);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerInfo {
    /// The server software.
    pub kind: ServerKind,
    /// Its version (major, minor, patch), if `INFO` was allowed.
    pub version: Option<(u32, u32, u32)>,
    /// `maxmemory` in bytes (0: no limit), if known.
    pub maxmemory: Option<u64>,
    /// `maxmemory-policy`, if known.
    pub maxmemory_policy: Option<String>,
    /// Unlock messages go with `SPUBLISH` (a cluster with sharded pub/sub).
    pub sharded_pubsub: bool,
    /// The server answers `WAIT` (for
    /// [`ClientBuilder::wait_for_replicas`](crate::ClientBuilder::wait_for_replicas)).
    pub wait: bool,
    /// The client can kill a connection it gave up on (`CLIENT LIST` and
    /// `CLIENT KILL` allowed, connections named): request records are then
    /// deleted once their calls end. Otherwise they keep their TTL.
    pub fence: bool,
    /// Scripts may touch keys they do not declare (every Redis and Valkey;
    /// Dragonfly only with `--default_lua_flags=allow-undeclared-keys`):
    /// the read-write lock's scripts need it.
    pub undeclared_keys: bool,
    /// The user may write `leasehold_alive:*` keys: with undeclared keys,
    /// a fair lock's waiters are kept alive by one key per client, not
    /// each by its own refresh (see [`FairLock`](crate::FairLock)).
    pub alive_keys: bool,
}

/// A command or behaviour a primitive needs from the server, with the
/// version that brought it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Feature {
    /// `LPOS` (the fair lock's queue): Redis 6.0.6.
    Lpos,
    /// Scripts that touch keys they do not declare (the read-write lock
    /// names its read holds' timeout keys inside Lua, as Redisson's does).
    UndeclaredKeys,
}

impl Feature {
    /// The first Redis version with it, and what needs it.
    fn needs(self) -> ((u32, u32, u32), &'static str) {
        match self {
            Feature::Lpos => ((6, 0, 6), "the fair lock (LPOS)"),
            Feature::UndeclaredKeys => ((0, 0, 0), "the read-write lock"),
        }
    }
}

impl ServerInfo {
    /// A server nothing is known of (`INFO` refused).
    pub(crate) fn unknown() -> ServerInfo {
        ServerInfo {
            kind: ServerKind::Unknown,
            version: None,
            maxmemory: None,
            maxmemory_policy: None,
            sharded_pubsub: false,
            wait: false,
            fence: false,
            undeclared_keys: true,
            alive_keys: true,
        }
    }

    /// Reads the kind, version and memory settings from an `INFO` reply
    /// (the default sections: server and memory among them).
    pub(crate) fn from_info(info: &str) -> ServerInfo {
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_owned())
        };
        let lower = info.to_ascii_lowercase();
        let (kind, version) = if let Some(v) = field("dragonfly_version") {
            (ServerKind::Dragonfly, Some(v))
        } else if lower.contains("garnet") {
            (
                ServerKind::Garnet,
                field("garnet_version").or(field("redis_version")),
            )
        } else if let Some(v) = field("valkey_version") {
            (ServerKind::Valkey, Some(v))
        } else if field("server_name").as_deref() == Some("valkey") {
            (ServerKind::Valkey, field("redis_version"))
        } else if lower.contains("keydb") {
            (ServerKind::KeyDb, field("redis_version"))
        } else if let Some(v) = field("redis_version") {
            (ServerKind::Redis, Some(v))
        } else {
            (ServerKind::Unknown, None)
        };
        ServerInfo {
            kind,
            version: version.as_deref().and_then(parse_version),
            maxmemory: field("maxmemory").and_then(|v| v.parse().ok()),
            maxmemory_policy: field("maxmemory_policy"),
            ..ServerInfo::unknown()
        }
    }

    /// Whether the server may evict a held lock under memory pressure: a
    /// `maxmemory` is set and its policy may evict keys with a TTL (every
    /// lock key has one). Unknown settings count as not.
    pub fn can_evict_locks(&self) -> bool {
        let limited = self.maxmemory.is_some_and(|m| m > 0);
        let evicts = self
            .maxmemory_policy
            .as_deref()
            .is_some_and(|p| p.starts_with("allkeys-") || p.starts_with("volatile-"));
        limited && evicts
    }

    /// Why a client must not run on this server at all, if it must not.
    pub(crate) fn refusal(&self) -> Option<String> {
        match self.kind {
            ServerKind::Garnet => Some(
                "Garnet runs Lua scripts without atomicity unless started with \
                 --lua-transaction-mode, which a client cannot check: leasehold's locks \
                 would not be safe there"
                    .to_owned(),
            ),
            _ => None,
        }
    }

    /// `Err(Error::Unsupported)` if the server is known to be older than
    /// `feature` needs; `Ok` when it is new enough or its version unknown.
    pub(crate) fn require(&self, feature: Feature) -> crate::Result<()> {
        let (min, what) = feature.needs();
        if feature == Feature::UndeclaredKeys {
            if self.undeclared_keys {
                return Ok(());
            }
            return Err(crate::Error::Unsupported(format!(
                "{what} needs scripts that touch keys they do not declare, which this {} \
                 refuses (Dragonfly: start it with --default_lua_flags=allow-undeclared-keys)",
                self.kind
            )));
        }
        match self.version {
            Some(v) if self.kind == ServerKind::Redis || self.kind == ServerKind::KeyDb => {
                if v < min {
                    return Err(crate::Error::Unsupported(format!(
                        "{what} needs Redis {}.{}.{} or later; the server is {}.{}.{}",
                        min.0, min.1, min.2, v.0, v.1, v.2
                    )));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

impl fmt::Display for ServerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ServerKind::Redis => "Redis",
            ServerKind::Valkey => "Valkey",
            ServerKind::Dragonfly => "Dragonfly",
            ServerKind::Garnet => "Garnet",
            ServerKind::KeyDb => "KeyDB",
            ServerKind::Unknown => "unknown server",
        })
    }
}

/// `"7.0.15"` → `(7, 0, 15)`; missing parts are 0 (also for the doctor's
/// reading of every primary's `INFO`).
pub(crate) fn parse_version(v: &str) -> Option<(u32, u32, u32)> {
    let mut parts = v.trim().trim_start_matches('v').split('.').map(|p| {
        p.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse::<u32>()
            .ok()
    });
    let major = parts.next()??;
    let minor = parts.next().flatten().unwrap_or(0);
    let patch = parts.next().flatten().unwrap_or(0);
    Some((major, minor, patch))
}

// === probes ===

/// `command args`, routed by `hash`, bounded by `timeout`: `None` if it
/// got no answer in time.
async fn ask<R: FromValue>(
    redis: &FredClient,
    command: &'static str,
    hash: ClusterHash,
    args: Vec<Value>,
    timeout: Duration,
) -> Option<Result<R, fred::error::Error>> {
    let cmd = CustomCommand::new_static(command, hash, false);
    tokio::time::timeout(timeout, redis.custom::<R, Value>(cmd, args))
        .await
        .ok()
}

/// Whether `e` is a refusal for lack of permission (an ACL).
pub(crate) fn refused(e: &fred::error::Error) -> bool {
    e.details().contains("NOPERM")
}

/// Whether the server answers `PUBSUB SHARDNUMSUB` (sharded pub/sub is
/// there), within `timeout`.
pub(crate) async fn sharded_pubsub_answers(redis: &FredClient, timeout: Duration) -> bool {
    let args = vec!["SHARDNUMSUB".into()];
    let answer = ask::<Value>(redis, "PUBSUB", ClusterHash::Random, args, timeout).await;
    matches!(answer, Some(Ok(_)))
}

/// The server's kind, version and memory settings from `INFO` (unknown
/// if refused or unanswered within `timeout`).
pub(crate) async fn probe_server(redis: &FredClient, timeout: Duration) -> ServerInfo {
    match ask::<String>(redis, "INFO", ClusterHash::Random, Vec::new(), timeout).await {
        Some(Ok(text)) => ServerInfo::from_info(&text),
        Some(Err(e)) => {
            tracing::debug!(error = %e, "INFO refused: the server's kind and version are unknown");
            ServerInfo::unknown()
        }
        None => ServerInfo::unknown(),
    }
}

/// Whether a script may read a key it does not declare (Dragonfly
/// refuses unless told otherwise): `EXISTS` of a key under the prefix
/// that nothing uses.
pub(crate) async fn undeclared_keys_allowed(
    redis: &FredClient,
    prefix: &str,
    timeout: Duration,
) -> bool {
    let key = format!("{prefix}leasehold:probe:undeclared");
    let args = vec![
        "return redis.call('exists', ARGV[1])".into(),
        Value::Integer(0),
        key.into(),
    ];
    let answer = ask::<Value>(redis, "EVAL", ClusterHash::Random, args, timeout).await;
    matches!(answer, Some(Ok(_)))
}

/// Whether the user may write `leasehold_alive:*` keys (a fair lock's
/// client keeps its waiters alive with one): `PEXPIRE` of one that nothing
/// uses (changes nothing); only a refusal (`NOPERM`) says no.
pub(crate) async fn alive_keys_allowed(redis: &FredClient, timeout: Duration) -> bool {
    let key = "leasehold_alive:probe";
    let slot = fred::util::redis_keyslot(key.as_bytes());
    let args = vec![key.into(), Value::Integer(1)];
    let answer = ask::<Value>(redis, "PEXPIRE", ClusterHash::Custom(slot), args, timeout).await;
    !matches!(answer, Some(Err(e)) if refused(&e))
}

/// Whether `WAIT 0 0` is answered (it returns at once: no replica is
/// asked for).
pub(crate) async fn wait_answers(redis: &FredClient, timeout: Duration) -> bool {
    let args = vec![Value::Integer(0), Value::Integer(0)];
    let answer = ask::<Value>(redis, "WAIT", ClusterHash::Random, args, timeout).await;
    matches!(answer, Some(Ok(_)))
}

/// Refuses a user that may not do what every lock needs, naming what it
/// lacks: run scripts, write keys under the client's prefix and the
/// request records beside them, publish on the lock channels. Each probe
/// changes nothing: `EVALSHA` of a script nobody loaded (`NOSCRIPT`), `PEXPIRE` of a key that does not exist, a
/// `0` published on the channel of a lock named `leasehold:probe`. Only a
/// refusal (`NOPERM`) fails; any other answer passes.
pub(crate) async fn check_permissions(
    redis: &FredClient,
    sharded: bool,
    prefix: &str,
    timeout: Duration,
) -> crate::Result<()> {
    let key = format!("{prefix}leasehold:probe");
    let channel = format!("redisson_lock__channel:{{{key}}}");
    let record: String = crate::naming::concat(crate::naming::request_record_parts(&key, "probe"));
    let slot = fred::util::redis_keyslot(key.as_bytes());
    let publish = if sharded { "SPUBLISH" } else { "PUBLISH" };
    let probes: [(&str, &'static str, Vec<Value>, ClusterHash, &str); 4] = [
        (
            "run Lua scripts (EVALSHA)",
            "EVALSHA",
            vec![
                "0000000000000000000000000000000000000000".into(),
                Value::Integer(0),
            ],
            ClusterHash::Random,
            "every lock change is a script",
        ),
        (
            "write keys under the key prefix (PEXPIRE)",
            "PEXPIRE",
            vec![key.as_str().into(), Value::Integer(1)],
            ClusterHash::Custom(slot),
            "locks are keys under the prefix",
        ),
        (
            "write request records (PEXPIRE leasehold_latch:{…})",
            "PEXPIRE",
            vec![record.as_str().into(), Value::Integer(1)],
            ClusterHash::Custom(slot),
            "every lock script reads and writes its request record beside the lock, at \
             leasehold_latch:{<lock key>}:… (grant ~leasehold_latch:* too)",
        ),
        (
            if sharded {
                "publish on the lock channels (SPUBLISH redisson_lock__channel:…)"
            } else {
                "publish on the lock channels (PUBLISH redisson_lock__channel:…)"
            },
            publish,
            vec![channel.as_str().into(), "0".into()],
            ClusterHash::Custom(slot),
            "a release would delete the lock and then fail at its PUBLISH, and waiters \
             would never be woken (grant the channels: &redisson_* or allchannels)",
        ),
    ];
    for (what, command, args, hash, why) in probes {
        if let Some(Err(e)) = ask::<Value>(redis, command, hash, args, timeout).await {
            if refused(&e) {
                return Err(crate::Error::Unsupported(format!(
                    "the Redis user may not {what}: {why} ({})",
                    e.details()
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_versions_are_read_from_info() {
        let redis = "# Server\r\nredis_version:7.0.15\r\n# Memory\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction\r\n";
        let info = ServerInfo::from_info(redis);
        assert_eq!(info.kind, ServerKind::Redis);
        assert_eq!(info.version, Some((7, 0, 15)));
        assert!(!info.can_evict_locks());

        let valkey = "redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n";
        let info = ServerInfo::from_info(valkey);
        assert_eq!(
            (info.kind, info.version),
            (ServerKind::Valkey, Some((8, 0, 1)))
        );

        let dragonfly = "redis_version:6.2.11\r\ndragonfly_version:df-v1.25.0\r\n";
        let info = ServerInfo::from_info(dragonfly);
        assert_eq!(info.kind, ServerKind::Dragonfly);

        let garnet = "redis_version:7.2.5\r\ngarnet_version:1.0.44\r\n";
        let info = ServerInfo::from_info(garnet);
        assert_eq!(info.kind, ServerKind::Garnet);
        assert!(info.refusal().is_some());

        let keydb = "redis_version:6.3.4\r\nexecutable:/usr/bin/keydb-server\r\n";
        assert_eq!(ServerInfo::from_info(keydb).kind, ServerKind::KeyDb);
        assert_eq!(ServerInfo::from_info("").kind, ServerKind::Unknown);
    }

    #[test]
    fn eviction_needs_a_limit_and_a_policy_that_evicts_keys_with_a_ttl() {
        let mut info = ServerInfo::from_info("maxmemory:1000\r\nmaxmemory_policy:volatile-lru\r\n");
        assert!(info.can_evict_locks());
        info.maxmemory_policy = Some("allkeys-lfu".into());
        assert!(info.can_evict_locks());
        info.maxmemory_policy = Some("noeviction".into());
        assert!(!info.can_evict_locks());
        info.maxmemory_policy = Some("volatile-ttl".into());
        info.maxmemory = Some(0);
        assert!(!info.can_evict_locks(), "no limit: nothing is evicted");
    }

    #[test]
    fn minimum_versions_are_enforced_only_where_known() {
        let old = ServerInfo::from_info("redis_version:6.0.5\r\n");
        let e = old.require(Feature::Lpos).unwrap_err();
        assert!(e.to_string().contains("6.0.6"), "{e}");
        assert!(ServerInfo::from_info("redis_version:6.0.6\r\n")
            .require(Feature::Lpos)
            .is_ok());
        assert!(ServerInfo::unknown().require(Feature::Lpos).is_ok());
        let mut dragonfly = ServerInfo::from_info("dragonfly_version:df-v1.25.0\r\n");
        assert!(dragonfly.require(Feature::UndeclaredKeys).is_ok());
        dragonfly.undeclared_keys = false;
        let e = dragonfly.require(Feature::UndeclaredKeys).unwrap_err();
        assert!(e.to_string().contains("allow-undeclared-keys"), "{e}");
        assert_eq!(parse_version("7.4"), Some((7, 4, 0)));
        assert_eq!(parse_version("x"), None);
    }
}

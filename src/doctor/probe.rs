//! What every check reads: the servers to look at (the one server, or
//! every primary of a cluster) with their `INFO`, and small helpers to
//! send one command and read its reply as text.

use std::collections::HashMap;

use fred::clients::Client as FredClient;
use fred::interfaces::{ClientLike, ClusterInterface};
use fred::types::config::Server;
use fred::types::{ClusterHash, CustomCommand, FromValue, Value};

use crate::client::Client;
use crate::core::script::on_node;

pub(super) type FredResult<T> = std::result::Result<T, fred::error::Error>;

/// The deployment the client is connected to.
#[derive(Debug)]
pub(super) struct Target {
    pub(super) clustered: bool,
    /// The command the lock scripts publish with (`publish`/`spublish`).
    pub(super) publish: &'static str,
    /// The one server (`server: None`) or every primary of a cluster.
    pub(super) nodes: Vec<Node>,
}

/// One server and its `INFO` (the default sections).
#[derive(Debug)]
pub(super) struct Node {
    /// `None`: the one server (or Sentinel's primary), reached without
    /// naming it.
    pub(super) server: Option<Server>,
    /// Its `INFO`, or why it could not be read.
    pub(super) info: std::result::Result<Info, String>,
}

/// `INFO`'s `field:value` lines.
#[derive(Debug, Default)]
pub(super) struct Info(HashMap<String, String>);

/// A server's kind, from `INFO server`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Redis,
    Valkey,
    Dragonfly,
    Garnet,
    KeyDb,
}

// === impl Target ===

impl Target {
    /// Finds the servers and reads each one's `INFO`.
    pub(super) async fn find(client: &Client) -> Target {
        let redis = client.redis();
        let clustered = client.engine().clustered();
        let servers: Vec<Option<Server>> = match redis.cached_cluster_state() {
            Some(state) if clustered => {
                state.unique_primary_nodes().into_iter().map(Some).collect()
            }
            _ => vec![None],
        };
        let mut nodes = Vec::with_capacity(servers.len());
        for server in servers {
            let info = cmd::<String>(redis, server.as_ref(), "INFO", vec![])
                .await
                .map(|text| Info::parse(&text))
                .map_err(|e| e.details().to_owned());
            nodes.push(Node { server, info });
        }
        Target {
            clustered,
            publish: client.engine().conn().publish_command(),
            nodes,
        }
    }

    /// The `INFO` of the nodes that answered it.
    pub(super) fn infos(&self) -> impl Iterator<Item = (&Node, &Info)> {
        self.nodes
            .iter()
            .filter_map(|n| n.info.as_ref().ok().map(|i| (n, i)))
    }

    /// Why `INFO` was refused, if every node refused it.
    pub(super) fn info_refused(&self) -> Option<&str> {
        if self.infos().next().is_some() {
            return None;
        }
        self.nodes
            .iter()
            .find_map(|n| n.info.as_ref().err())
            .map(String::as_str)
    }

    /// The lowest Redis-compatible version among the nodes.
    pub(super) fn version(&self) -> Option<(u32, u32, u32)> {
        self.infos().filter_map(|(_, i)| i.redis_version()).min()
    }
}

// === impl Node ===

impl Node {
    /// `host:port`, or `server` for the one server.
    pub(super) fn label(&self) -> String {
        match &self.server {
            Some(s) => format!("{}:{}", s.host, s.port),
            None => "server".to_owned(),
        }
    }
}

// === impl Info ===

impl Info {
    pub(super) fn parse(text: &str) -> Info {
        Info(
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
                .collect(),
        )
    }

    pub(super) fn get(&self, field: &str) -> Option<&str> {
        self.0.get(field).map(String::as_str)
    }

    /// A field as a number.
    pub(super) fn num(&self, field: &str) -> Option<i64> {
        self.get(field)?.parse().ok()
    }

    /// The server's kind and its own version text.
    pub(super) fn kind(&self) -> (Kind, String) {
        let name = self.get("server_name").unwrap_or("").to_ascii_lowercase();
        let own = |field: &str| self.get(field).unwrap_or("?").to_owned();
        if self.get("dragonfly_version").is_some() || name.contains("dragonfly") {
            (Kind::Dragonfly, own("dragonfly_version"))
        } else if self.get("garnet_version").is_some() || name.contains("garnet") {
            (Kind::Garnet, own("garnet_version"))
        } else if self.get("valkey_version").is_some() || name.contains("valkey") {
            (Kind::Valkey, own("valkey_version"))
        } else if name.contains("keydb") || self.0.keys().any(|k| k.contains("keydb")) {
            (Kind::KeyDb, own("redis_version"))
        } else {
            (Kind::Redis, own("redis_version"))
        }
    }

    /// `redis_version` as (major, minor, patch): the Redis version the
    /// server says it is compatible with.
    pub(super) fn redis_version(&self) -> Option<(u32, u32, u32)> {
        crate::core::caps::parse_version(self.get("redis_version")?)
    }
}

// === impl Kind ===

impl Kind {
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Redis => "Redis",
            Kind::Valkey => "Valkey",
            Kind::Dragonfly => "Dragonfly",
            Kind::Garnet => "Garnet",
            Kind::KeyDb => "KeyDB",
        }
    }
}

/// Sends `name args…` to `node` (or wherever the client routes a
/// command without a key).
pub(super) async fn cmd<R: FromValue>(
    redis: &FredClient,
    node: Option<&Server>,
    name: &'static str,
    args: Vec<Value>,
) -> FredResult<R> {
    let command = CustomCommand::new_static(name, ClusterHash::Random, false);
    match node {
        Some(server) => Box::pin(on_node(redis, server).custom(command, args)).await,
        None => Box::pin(redis.custom(command, args)).await,
    }
}

/// Sends `name args…` to the node serving `key`.
pub(super) async fn cmd_at<R: FromValue>(
    redis: &FredClient,
    key: &str,
    name: &'static str,
    args: Vec<Value>,
) -> FredResult<R> {
    let slot = fred::util::redis_keyslot(key.as_bytes());
    let command = CustomCommand::new_static(name, ClusterHash::Custom(slot), false);
    Box::pin(redis.custom(command, args)).await
}

/// `args` as command arguments.
pub(super) fn args(args: &[&str]) -> Vec<Value> {
    args.iter().map(|a| Value::from(a.to_string())).collect()
}

/// Whether `e` is a refusal for lack of permission (an ACL).
pub(super) fn refused(e: &fred::error::Error) -> bool {
    e.details().contains("NOPERM")
}

/// A `CONFIG GET` reply as (name, value) pairs (RESP2 flat array or RESP3
/// map).
pub(super) fn pairs(reply: Value) -> Vec<(String, String)> {
    let text = |v: Value| v.as_string().unwrap_or_default();
    match reply {
        Value::Map(map) => map
            .inner()
            .into_iter()
            .map(|(k, v)| (k.into_string().unwrap_or_default(), text(v)))
            .collect(),
        Value::Array(items) => {
            let mut out = Vec::new();
            let mut it = items.into_iter();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                out.push((text(k), text(v)));
            }
            out
        }
        _ => Vec::new(),
    }
}

/// `CONFIG GET name` on `node`: the value, or why it could not be read.
pub(super) async fn config_get(
    redis: &FredClient,
    node: Option<&Server>,
    name: &str,
) -> std::result::Result<Option<String>, String> {
    match cmd::<Value>(redis, node, "CONFIG", args(&["GET", name])).await {
        Ok(reply) => Ok(pairs(reply)
            .into_iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)),
        Err(e) => Err(e.details().to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::caps::parse_version;

    #[test]
    fn versions_and_kinds() {
        assert_eq!(parse_version("7.0.15"), Some((7, 0, 15)));
        assert_eq!(parse_version("6.2"), Some((6, 2, 0)));
        assert_eq!(parse_version("255.255.255"), Some((255, 255, 255)));
        assert_eq!(parse_version("x"), None);
        let info = Info::parse(
            "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n",
        );
        assert_eq!(info.kind(), (Kind::Valkey, "8.0.1".to_owned()));
        assert_eq!(info.redis_version(), Some((7, 2, 4)));
        let df = Info::parse("redis_version:6.2.11\ndragonfly_version:df-v1.21.2\n");
        assert_eq!(df.kind().0, Kind::Dragonfly);
        assert_eq!(Info::parse("redis_version:7.0.15").kind().0, Kind::Redis);
    }
}

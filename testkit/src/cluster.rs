//! Harness for a real Redis Cluster on loopback, built from `RedisServer`
//! processes and `redis-cli --cluster create`, using std only.

use crate::server::{info_field, RedisServer};
use std::fs::{self, File};
use std::io;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long the cluster may take to become healthy after `start`.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `redis-cli --cluster create` may run.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a replica may take to be promoted after its primary is killed.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(30);
/// Interval between health probes.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Number of hash slots in a Redis Cluster.
const SLOTS: usize = 16384;
/// Environment variable overriding the redis-cli binary.
const CLI_ENV: &str = "LEASEHOLD_REDIS_CLI";
/// Log lines of each node included in panic messages.
const LOG_TAIL_LINES: usize = 40;

/// A Redis Cluster of `primaries * (1 + replicas_per_primary)` local
/// `redis-server` processes on 127.0.0.1.
///
/// Nodes are addressed by their index in `nodes()`. Which index is a
/// primary is decided by `redis-cli` (and changes on failover), so use
/// `primaries()`, `replicas_of()` and `primary_for_key()` rather than
/// assuming an order. All processes are killed on drop.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    primaries: usize,
    replicas_per_primary: usize,
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
struct NodeInfo {
    id: String,
    port: u16,
    flags: Vec<String>,
    /// Id of the primary for replicas, `-` for primaries.
    master_id: String,
    /// Inclusive slot ranges served (primaries only).
    slots: Vec<(u16, u16)>,
}

impl NodeInfo {
    fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    /// Not flagged as failing (`fail`, `fail?`) or address-less.
    fn healthy(&self) -> bool {
        !self.has_flag("fail") && !self.has_flag("fail?") && !self.has_flag("noaddr")
    }

    fn is_primary(&self) -> bool {
        self.has_flag("master") && self.healthy()
    }

    fn is_replica(&self) -> bool {
        self.has_flag("slave") && self.healthy()
    }

    fn owns(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(lo, hi)| lo <= slot && slot <= hi)
    }
}

impl RedisCluster {
    /// Starts `primaries * (1 + replicas_per_primary)` cluster-enabled
    /// servers, joins them with `redis-cli --cluster create` and waits (up
    /// to 30 s, see `wait_ready`) until every node reports
    /// `cluster_state:ok` with all 16384 slots assigned and ok, every node
    /// sees `primaries` primaries each with `replicas_per_primary`
    /// replicas, and every replica is in sync with its primary.
    ///
    /// `primaries` must be at least 3 (a `redis-cli` requirement). Panics
    /// with `redis-cli` output and node logs on failure.
    pub fn start(primaries: usize, replicas_per_primary: usize) -> RedisCluster {
        assert!(
            primaries >= 3,
            "redis-cli --cluster create needs at least 3 primaries, got {primaries}"
        );
        let total = primaries * (1 + replicas_per_primary);
        let mut cluster = RedisCluster {
            nodes: Vec::with_capacity(total),
            primaries,
            replicas_per_primary,
        };
        for _ in 0..total {
            cluster.nodes.push(start_node());
        }
        cluster.create();
        cluster.wait_ready();
        cluster
    }

    /// Waits (up to 30 s) until the cluster has its full shape again:
    /// every node reports `cluster_state:ok` with all 16384 slots assigned
    /// and ok, sees `primaries` primaries each with `replicas_per_primary`
    /// replicas, replicas' links are up and every primary lists its
    /// replicas online. Requires every node to be running, e.g. after
    /// `kill_and_wait_failover` and `node_mut(i).restart()` (the restarted
    /// old primary rejoins as a replica). Panics with diagnostics if not.
    pub fn wait_ready(&self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        if let Err(why) = wait_until(deadline, || self.check_ready()) {
            panic!(
                "redis cluster not ready after {READY_TIMEOUT:?}: {why}\n{}\n{}",
                cli_output(self.nodes[0].dir()),
                self.diagnostics()
            );
        }
    }

    /// A fred URL for the cluster, with every node as a seed:
    /// `redis-cluster://127.0.0.1:P1?node=127.0.0.1:P2&node=127.0.0.1:P3...`.
    ///
    /// fred 10.1 (`Config::from_url` -> `from_url_clustered`) takes the
    /// first seed as the URL host and port and each further one from a
    /// repeated `node=host:port` query parameter:
    ///
    /// ```text
    /// redis|rediss[-cluster] :// [[username:]password@] host [:port][?[node=host1:port1][&node=host2:port2][&node=hostN:portN]]
    /// ```
    ///
    /// A comma-separated host list (`127.0.0.1:P1,127.0.0.1:P2`) is not
    /// accepted: the URL parser rejects the port.
    pub fn url(&self) -> String {
        let mut url = format!("redis-cluster://{}", self.nodes[0].addr());
        for (i, node) in self.nodes.iter().enumerate().skip(1) {
            url.push(if i == 1 { '?' } else { '&' });
            url.push_str("node=");
            url.push_str(&node.addr());
        }
        url
    }

    /// All nodes, primaries and replicas, in start order.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Node `i`, e.g. to `kill()` or `restart()` it. A restarted node keeps
    /// its port, cluster bus port and `nodes.conf`, so it rejoins the
    /// cluster with the same node id.
    pub fn node_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.nodes[i]
    }

    /// Index of the node currently serving `key`'s hash slot, according to
    /// `CLUSTER NODES` of a live node (preferring one with
    /// `cluster_state:ok`). Panics if no live node knows an owner.
    pub fn primary_for_key(&self, key: &str) -> usize {
        let node = self.view_node();
        let reply = node.cmd(&["CLUSTER", "KEYSLOT", key]);
        let slot: u16 = reply
            .parse()
            .unwrap_or_else(|_| panic!("CLUSTER KEYSLOT {key:?} on {}: {reply}", node.addr()));
        let topology = self.topology_of(node);
        let owner = topology
            .iter()
            .find(|n| n.has_flag("master") && n.owns(slot))
            .unwrap_or_else(|| {
                panic!(
                    "no node owns slot {slot} (key {key:?}) according to {}\n{}",
                    node.addr(),
                    self.diagnostics()
                )
            });
        self.index_of_port(owner.port).unwrap_or_else(|| {
            panic!(
                "slot {slot} owner 127.0.0.1:{} is not a node of this cluster",
                owner.port
            )
        })
    }

    /// Indices of the current, non-failed primaries that serve slots,
    /// ascending.
    pub fn primaries(&self) -> Vec<usize> {
        let topology = self.topology_of(self.view_node());
        let mut out: Vec<usize> = topology
            .iter()
            .filter(|n| n.is_primary() && !n.slots.is_empty())
            .filter_map(|n| self.index_of_port(n.port))
            .collect();
        out.sort_unstable();
        out
    }

    /// Indices of the current, non-failed replicas of node `primary`,
    /// ascending.
    pub fn replicas_of(&self, primary: usize) -> Vec<usize> {
        let topology = self.topology_of(self.view_node());
        let mut out: Vec<usize> = replicas_in(&topology, self.nodes[primary].port())
            .iter()
            .filter_map(|n| self.index_of_port(n.port))
            .collect();
        out.sort_unstable();
        out
    }

    /// Kills node `primary` with SIGKILL and waits (up to 30 s) until one
    /// of its replicas reports `role:master` and every surviving node
    /// reports `cluster_state:ok` and sees that replica as a primary.
    /// Returns the index of the promoted replica.
    ///
    /// Writes the replicas had not yet received are lost, as in production;
    /// call `wait_for_replicas(primary)` first to rule that out.
    ///
    /// Panics if `primary` is not a primary or has no replica.
    pub fn kill_and_wait_failover(&mut self, primary: usize) -> usize {
        let topology = self.topology_of(self.view_node());
        let port = self.nodes[primary].port();
        assert!(
            topology.iter().any(|n| n.port == port && n.is_primary()),
            "node {primary} (127.0.0.1:{port}) is not a primary\n{}",
            self.diagnostics()
        );
        let replicas: Vec<usize> = replicas_in(&topology, port)
            .iter()
            .filter_map(|n| self.index_of_port(n.port))
            .collect();
        assert!(
            !replicas.is_empty(),
            "node {primary} (127.0.0.1:{port}) has no replica to fail over to"
        );
        self.nodes[primary].kill();
        let deadline = Instant::now() + FAILOVER_TIMEOUT;
        let mut promoted = None;
        let result = wait_until(deadline, || {
            if promoted.is_none() {
                promoted = replicas.iter().copied().find(|&r| {
                    self.nodes[r]
                        .try_cmd(&["INFO", "replication"])
                        .is_ok_and(|info| info_field(&info, "role") == Some("master"))
                });
            }
            let Some(new) = promoted else {
                return Err(format!("no replica of {replicas:?} reports role:master"));
            };
            let new_port = self.nodes[new].port();
            for node in self.live_nodes() {
                let info = node
                    .try_cmd(&["CLUSTER", "INFO"])
                    .map_err(|e| format!("{}: {e}", node.addr()))?;
                if info_field(&info, "cluster_state") != Some("ok") {
                    return Err(format!("{} is not cluster_state:ok", node.addr()));
                }
                let view = node
                    .try_cmd(&["CLUSTER", "NODES"])
                    .map_err(|e| format!("{}: {e}", node.addr()))?;
                let sees_promoted = parse_nodes(&view)
                    .iter()
                    .any(|n| n.port == new_port && n.is_primary() && !n.slots.is_empty());
                if !sees_promoted {
                    return Err(format!(
                        "{} does not yet see 127.0.0.1:{new_port} as a primary",
                        node.addr()
                    ));
                }
            }
            Ok(())
        });
        if let Err(why) = result {
            panic!(
                "no failover of node {primary} (127.0.0.1:{port}) within {FAILOVER_TIMEOUT:?}: {why}\n{}",
                self.diagnostics()
            );
        }
        promoted.expect("set when the wait succeeds")
    }

    /// Subscribers of `channel` (routed by `key`'s slot): with sharded
    /// pub/sub (Redis 7+) `PUBSUB SHARDNUMSUB` on the slot's node; before
    /// Redis 7 a client subscribes plainly, on whichever node its
    /// subscriber connection is, so `PUBSUB NUMSUB` summed over every node.
    pub fn subscribers(&self, key: &str, channel: &str) -> u64 {
        let count = |reply: String| -> u64 {
            reply
                .lines()
                .nth(1)
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        if crate::server::server_major() >= 7 {
            count(self.cmd_on_key(key, &["PUBSUB", "SHARDNUMSUB", channel]))
        } else {
            self.nodes()
                .iter()
                .map(|n| count(n.cmd(&["PUBSUB", "NUMSUB", channel])))
                .sum()
        }
    }

    /// Runs one command on the node currently serving `key`'s slot and
    /// returns the rendered reply (see `RedisServer::cmd`).
    pub fn cmd_on_key(&self, key: &str, args: &[&str]) -> String {
        self.nodes[self.primary_for_key(key)].cmd(args)
    }

    /// Waits (up to 30 s) until every replica of node `primary` has
    /// processed the primary's current replication offset, i.e. every
    /// write the primary had accepted so far.
    ///
    /// Use this instead of `WAIT` through `RedisServer::cmd`: each `cmd`
    /// runs on a fresh connection, which has no writes of its own, so
    /// `WAIT` there returns at once without waiting for anything.
    pub fn wait_for_replicas(&self, primary: usize) {
        let node = &self.nodes[primary];
        let info = node.cmd(&["INFO", "replication"]);
        let target: u64 = info_field(&info, "master_repl_offset")
            .and_then(|o| o.parse().ok())
            .unwrap_or_else(|| panic!("{}: no master_repl_offset in\n{info}", node.addr()));
        let replicas = self.replicas_of(primary);
        let deadline = Instant::now() + READY_TIMEOUT;
        let result = wait_until(deadline, || {
            for &r in &replicas {
                let replica = &self.nodes[r];
                let info = replica
                    .try_cmd(&["INFO", "replication"])
                    .map_err(|e| format!("{}: {e}", replica.addr()))?;
                let offset: u64 = info_field(&info, "slave_repl_offset")
                    .and_then(|o| o.parse().ok())
                    .unwrap_or(0);
                if offset < target {
                    return Err(format!(
                        "{} is at offset {offset}, want {target}",
                        replica.addr()
                    ));
                }
            }
            Ok(())
        });
        if let Err(why) = result {
            panic!(
                "replicas of node {primary} did not catch up within {READY_TIMEOUT:?}: {why}\n{}",
                self.diagnostics()
            );
        }
    }

    /// Runs `redis-cli --cluster create` over all nodes.
    fn create(&self) {
        let out_dir = self.nodes[0].dir();
        let stdout = create_file(&out_dir.join("cluster-create.out"));
        let stderr = create_file(&out_dir.join("cluster-create.err"));
        let binary = std::env::var_os(CLI_ENV).unwrap_or_else(|| "redis-cli".into());
        let mut command = Command::new(&binary);
        command
            .args(["--cluster", "create"])
            .args(self.nodes.iter().map(RedisServer::addr))
            .arg("--cluster-replicas")
            .arg(self.replicas_per_primary.to_string())
            .arg("--cluster-yes")
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                panic!(
                    "{} not found: `cargo xtask test` installs redis-cli (with apt-get, as \
                     root), or install it (Debian/Ubuntu: apt-get install redis-tools; macOS: \
                     brew install redis), or set {CLI_ENV} to its path",
                    Path::new(&binary).display()
                )
            }
            Err(e) => panic!("failed to spawn {}: {e}", Path::new(&binary).display()),
        };
        let deadline = Instant::now() + CREATE_TIMEOUT;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "redis-cli --cluster create still running after {CREATE_TIMEOUT:?}\n{}\n{}",
                        cli_output(out_dir),
                        self.diagnostics()
                    );
                }
                Ok(None) => std::thread::sleep(POLL_INTERVAL),
                Err(e) => panic!("redis-cli: try_wait failed: {e}"),
            }
        };
        if !status.success() {
            panic!(
                "redis-cli --cluster create failed with {status}\n{}\n{}",
                cli_output(out_dir),
                self.diagnostics()
            );
        }
    }

    /// `Ok` once the cluster is fully formed, else what is still missing.
    fn check_ready(&self) -> Result<(), String> {
        for node in &self.nodes {
            let addr = node.addr();
            let info = node
                .try_cmd(&["CLUSTER", "INFO"])
                .map_err(|e| format!("{addr}: {e}"))?;
            for (field, want) in [
                ("cluster_state", "ok".to_owned()),
                ("cluster_slots_assigned", SLOTS.to_string()),
                ("cluster_slots_ok", SLOTS.to_string()),
                ("cluster_known_nodes", self.nodes.len().to_string()),
            ] {
                let got = info_field(&info, field);
                if got != Some(want.as_str()) {
                    return Err(format!("{addr}: {field} is {got:?}, want {want}"));
                }
            }
            let view = node
                .try_cmd(&["CLUSTER", "NODES"])
                .map_err(|e| format!("{addr}: {e}"))?;
            let topology = parse_nodes(&view);
            let primaries: Vec<&NodeInfo> = topology
                .iter()
                .filter(|n| n.is_primary() && !n.slots.is_empty())
                .collect();
            if primaries.len() != self.primaries {
                return Err(format!(
                    "{addr} sees {} primaries, want {}",
                    primaries.len(),
                    self.primaries
                ));
            }
            for primary in primaries {
                let n = replicas_in(&topology, primary.port).len();
                if n != self.replicas_per_primary {
                    return Err(format!(
                        "{addr} sees {n} replicas of 127.0.0.1:{}, want {}",
                        primary.port, self.replicas_per_primary
                    ));
                }
            }
            let repl = node
                .try_cmd(&["INFO", "replication"])
                .map_err(|e| format!("{addr}: {e}"))?;
            match info_field(&repl, "role") {
                Some("slave") if info_field(&repl, "master_link_status") != Some("up") => {
                    return Err(format!("{addr}: replica link to its primary is not up"));
                }
                // The replica side reports its link up before the primary
                // streams to it; until the primary lists it online, writes
                // may not reach it.
                Some("master") => {
                    let online = repl
                        .lines()
                        .filter(|l| l.starts_with("slave") && l.contains("state=online"))
                        .count();
                    if online != self.replicas_per_primary {
                        return Err(format!(
                            "{addr}: {online} online replicas, want {}",
                            self.replicas_per_primary
                        ));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Nodes whose process has not been killed through the harness.
    fn live_nodes(&self) -> impl Iterator<Item = &RedisServer> {
        self.nodes.iter().filter(|n| n.pid().is_some())
    }

    /// A live node to ask about the topology: the first one reporting
    /// `cluster_state:ok`, else the first one answering at all.
    fn view_node(&self) -> &RedisServer {
        let mut answering = None;
        for node in self.live_nodes() {
            if let Ok(info) = node.try_cmd(&["CLUSTER", "INFO"]) {
                if info_field(&info, "cluster_state") == Some("ok") {
                    return node;
                }
                answering.get_or_insert(node);
            }
        }
        answering.unwrap_or_else(|| panic!("no cluster node answers\n{}", self.diagnostics()))
    }

    fn topology_of(&self, node: &RedisServer) -> Vec<NodeInfo> {
        parse_nodes(&node.cmd(&["CLUSTER", "NODES"]))
    }

    fn index_of_port(&self, port: u16) -> Option<usize> {
        self.nodes.iter().position(|n| n.port() == port)
    }

    /// Per node: address, pid, its `CLUSTER NODES` view and its log tail.
    fn diagnostics(&self) -> String {
        let mut out = String::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let view = match node.pid() {
                Some(_) => node
                    .try_cmd(&["CLUSTER", "NODES"])
                    .unwrap_or_else(|e| format!("(CLUSTER NODES failed: {e})")),
                None => "(killed)".to_owned(),
            };
            let log = node.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
            out.push_str(&format!(
                "=== node {i} {} pid {:?} ===\n--- CLUSTER NODES ---\n{view}\n--- redis.log (tail) ---\n{tail}\n",
                node.addr(),
                node.pid()
            ));
        }
        out
    }
}

/// Starts one cluster-enabled server. The cluster bus port is picked
/// explicitly, afresh on each start attempt: the default (port + 10000) is
/// out of range for ports above 55535, which the harness's ephemeral ports
/// often are, and any picked port can be taken by a connection meanwhile.
///
/// Before Redis 7.0 there is no `--cluster-port`: the bus is at port +
/// 10000, so the node's port is picked below 55536 with that one free too.
fn start_node() -> RedisServer {
    let mut args = vec![
        "--cluster-enabled",
        "yes",
        // Relative to `--dir`, i.e. the server's own temp dir.
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        "1000",
        // A primary waits 5 s by default before a diskless full sync, to
        // batch replicas; nothing to batch here.
        "--repl-diskless-sync-delay",
        "0",
    ];
    if crate::server::server_major() >= 7 {
        args.extend(["--cluster-port", crate::server::FRESH_PORT]);
    } else {
        args.push(crate::server::BUS_AT_DEFAULT);
    }
    RedisServer::start_with(&args)
}

/// Healthy replicas of the primary listening on `port`.
fn replicas_in(topology: &[NodeInfo], port: u16) -> Vec<&NodeInfo> {
    let Some(primary) = topology.iter().find(|n| n.port == port) else {
        return Vec::new();
    };
    topology
        .iter()
        .filter(|n| n.is_replica() && n.master_id == primary.id)
        .collect()
}

/// Parses `CLUSTER NODES` output:
/// `<id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent>
/// <pong-recv> <config-epoch> <link-state> <slot> <slot> ...`.
fn parse_nodes(text: &str) -> Vec<NodeInfo> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return None;
            }
            let addr = fields[1].split(['@', ',']).next()?;
            let port = addr.rsplit(':').next()?.parse().ok()?;
            let slots = fields[8..]
                .iter()
                // `[slot->-id]` / `[slot-<-id]` are migration markers.
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((lo, hi)) => Some((lo.parse().ok()?, hi.parse().ok()?)),
                    None => s.parse().ok().map(|n| (n, n)),
                })
                .collect();
            Some(NodeInfo {
                id: fields[0].to_owned(),
                port,
                flags: fields[2].split(',').map(str::to_owned).collect(),
                master_id: fields[3].to_owned(),
                slots,
            })
        })
        .collect()
}

/// Polls `check` every 50 ms until it returns `Ok` or `deadline` passes;
/// then returns the last error.
fn wait_until(
    deadline: Instant,
    mut check: impl FnMut() -> Result<(), String>,
) -> Result<(), String> {
    loop {
        match check() {
            Ok(()) => return Ok(()),
            Err(why) if Instant::now() >= deadline => return Err(why),
            Err(_) => std::thread::sleep(POLL_INTERVAL),
        }
    }
}

fn create_file(path: &Path) -> File {
    File::create(path).unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()))
}

/// Output of `redis-cli --cluster create`, for panic messages.
fn cli_output(dir: &Path) -> String {
    let read = |name: &str| fs::read_to_string(dir.join(name)).unwrap_or_default();
    format!(
        "--- redis-cli --cluster create stdout ---\n{}\n--- redis-cli stderr ---\n{}",
        read("cluster-create.out"),
        read("cluster-create.err")
    )
}

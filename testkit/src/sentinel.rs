//! Harness for a Redis Sentinel deployment on loopback (one primary, one
//! replica, three sentinels), using std only.
//!
//! Sentinels are not `RedisServer`s: sentinel mode needs the config file
//! as the first argument (`redis-server <conf> --sentinel`; without it
//! redis exits with "Sentinel needs config file on disk to save state"),
//! while `RedisServer` always starts with `--port`. So this file has its
//! own small process wrapper and RESP client for them.

use crate::server::{command_on, free_port, info_field, log_since, make_temp_dir, RedisServer};
use std::fs::{self, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The monitored service name.
pub const SERVICE: &str = "mymaster";
/// Number of sentinels started.
const SENTINELS: usize = 3;
/// Bound of every wait for replication or sentinel state.
const WAIT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a sentinel process may take to answer PING.
const SENTINEL_READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Ports tried per sentinel before giving up.
const START_ATTEMPTS: usize = 5;
/// Interval between probes.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Logged by a sentinel once it has loaded its config and listens.
const SENTINEL_READY_LINE: &str = "Sentinel ID is";
/// Environment variable overriding the redis-server binary (as server.rs).
const BINARY_ENV: &str = "LEASEHOLD_REDIS_SERVER";
/// Log lines of each process included in panic messages.
const LOG_TAIL_LINES: usize = 40;

/// One primary, one replica and three sentinels monitoring them as
/// `mymaster`, all on 127.0.0.1. Everything is killed on drop.
///
/// `primary()` and `replica()` follow failovers: after
/// `kill_primary_and_wait_failover`, `primary()` is the promoted node and
/// `replica()` the killed one (bring it back with `start_replica`).
#[derive(Debug)]
pub struct SentinelSetup {
    /// `[0]` started as primary, `[1]` as its replica.
    servers: Vec<RedisServer>,
    /// Index in `servers` of the current primary.
    primary: usize,
    sentinels: Vec<Sentinel>,
}

impl SentinelSetup {
    /// Starts the primary, the replica (`--replicaof`), waits for the
    /// replication link, then starts three sentinels (quorum 2,
    /// down-after 2000 ms, failover-timeout 5000 ms, parallel-syncs 1) and
    /// waits (up to 30 s) until each reports the master with 1 replica and
    /// 2 other sentinels.
    pub fn start() -> SentinelSetup {
        // Either node may become the primary. By default a primary waits
        // 5 s before a diskless full sync, to batch replicas.
        let no_delay = ["--repl-diskless-sync-delay", "0"];
        let primary = RedisServer::start_with(&no_delay);
        let primary_port = primary.port().to_string();
        let replica = RedisServer::start_with(&[
            no_delay[0],
            no_delay[1],
            "--replicaof",
            "127.0.0.1",
            &primary_port,
        ]);
        let mut setup = SentinelSetup {
            servers: vec![primary, replica],
            primary: 0,
            sentinels: Vec::with_capacity(SENTINELS),
        };
        // Sentinels learn replicas from the primary's INFO, which they ask
        // at once on connecting and then only every 10 s: start them only
        // once the replica is attached.
        setup.wait("replica attached", |s| s.check_replication());
        let port = setup.primary().port();
        for _ in 0..SENTINELS {
            setup.sentinels.push(Sentinel::start(port));
        }
        setup.wait("sentinels ready", |s| s.check_sentinels());
        setup
    }

    /// A fred URL for the service `mymaster` with every sentinel as a
    /// seed:
    /// `redis-sentinel://127.0.0.1:S1?sentinelServiceName=mymaster&node=127.0.0.1:S2&node=127.0.0.1:S3`.
    ///
    /// fred 10.1 (`Config::from_url` -> `from_url_sentinel`) takes the
    /// first sentinel as the URL host and port, further sentinels from
    /// repeated `node=host:port` query parameters, and the (required)
    /// service name from `sentinelServiceName`:
    ///
    /// ```text
    /// redis|rediss[-sentinel] :// [[username1:]password1@] host [:port][/database][?[node=host1:port1][&node=host2:port2][&node=hostN:portN]
    ///                             [&sentinelServiceName=myservice][&sentinelUsername=username2][&sentinelPassword=password2]]
    /// ```
    pub fn url(&self) -> String {
        let mut url = format!(
            "redis-sentinel://127.0.0.1:{}?sentinelServiceName={SERVICE}",
            self.sentinels[0].port
        );
        for sentinel in &self.sentinels[1..] {
            url.push_str(&format!("&node=127.0.0.1:{}", sentinel.port));
        }
        url
    }

    /// The node that is currently the primary (as of the last failover
    /// done through this harness).
    pub fn primary(&self) -> &RedisServer {
        &self.servers[self.primary]
    }

    /// The other node: the replica, or the killed old primary after
    /// `kill_primary_and_wait_failover` until `start_replica`.
    pub fn replica(&self) -> &RedisServer {
        &self.servers[1 - self.primary]
    }

    /// Ports of the three sentinels.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|s| s.port).collect()
    }

    /// Runs one command on sentinel `i` and returns the rendered reply
    /// (rendered as `RedisServer::cmd` does). Panics if it is unreachable.
    pub fn sentinel_cmd(&self, i: usize, args: &[&str]) -> String {
        self.sentinels[i].cmd(args).unwrap_or_else(|e| {
            panic!(
                "sentinel 127.0.0.1:{}: command {args:?} failed: {e}",
                self.sentinels[i].port
            )
        })
    }

    /// The primary's port according to the first sentinel that answers
    /// `SENTINEL GET-MASTER-ADDR-BY-NAME mymaster`.
    pub fn current_primary_port(&self) -> u16 {
        let mut errors = Vec::new();
        for sentinel in &self.sentinels {
            match sentinel.master_port() {
                Ok(port) => return port,
                Err(e) => errors.push(format!("127.0.0.1:{}: {e}", sentinel.port)),
            }
        }
        panic!("no sentinel knows the primary: {}", errors.join("; "))
    }

    /// Kills the current primary with SIGKILL and waits (up to 30 s) until
    /// every sentinel reports the replica as the master and the replica
    /// reports `role:master`. The killed node stays down (see
    /// `start_replica`).
    pub fn kill_primary_and_wait_failover(&mut self) {
        let new = 1 - self.primary;
        assert!(
            self.servers[new].pid().is_some(),
            "no replica to fail over to: it was stopped (call start_replica first)"
        );
        self.servers[self.primary].kill();
        let new_port = self.servers[new].port();
        self.wait("failover", |s| {
            for sentinel in &s.sentinels {
                let port = sentinel.master_port().map_err(|e| e.to_string())?;
                if port != new_port {
                    return Err(format!(
                        "sentinel 127.0.0.1:{} reports master port {port}, want {new_port}",
                        sentinel.port
                    ));
                }
            }
            let info = s.servers[new]
                .try_cmd(&["INFO", "replication"])
                .map_err(|e| e.to_string())?;
            match info_field(&info, "role") {
                Some("master") => Ok(()),
                role => Err(format!("127.0.0.1:{new_port} has role {role:?}")),
            }
        });
        self.primary = new;
    }

    /// Kills the replica (SIGKILL), e.g. to test replica acknowledgement
    /// (`WAIT`) timeouts.
    pub fn stop_replica(&mut self) {
        let replica = 1 - self.primary;
        self.servers[replica].kill();
    }

    /// (Re)starts the replica node on its port, points it at the current
    /// primary if needed (after a failover it is the old primary, which
    /// comes back as an empty master), and waits (up to 30 s) until its
    /// link is up, the primary lists it online and every sentinel sees it
    /// as a healthy replica.
    pub fn start_replica(&mut self) {
        let replica = 1 - self.primary;
        self.servers[replica].restart();
        let primary_port = self.primary().port().to_string();
        let info = self.replica().cmd(&["INFO", "replication"]);
        if info_field(&info, "master_port") != Some(primary_port.as_str()) {
            let reply = self
                .replica()
                .cmd(&["REPLICAOF", "127.0.0.1", &primary_port]);
            assert_eq!(reply, "OK", "REPLICAOF on {}", self.replica().addr());
        }
        self.wait("replica restarted", |s| {
            s.check_replication()?;
            s.check_sentinels()
        });
    }

    /// Waits (up to 30 s) until the replica has processed the primary's
    /// current replication offset, i.e. every write the primary had
    /// accepted so far.
    ///
    /// Use this instead of `WAIT` through `RedisServer::cmd`: each `cmd`
    /// runs on a fresh connection, which has no writes of its own, so
    /// `WAIT` there returns at once without waiting for anything.
    pub fn wait_for_replica(&self) {
        let info = self.primary().cmd(&["INFO", "replication"]);
        let target: u64 = info_field(&info, "master_repl_offset")
            .and_then(|o| o.parse().ok())
            .unwrap_or_else(|| panic!("no master_repl_offset in\n{info}"));
        self.wait("replica catching up", |s| {
            let replica = s.replica();
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
            Ok(())
        });
    }

    /// `Ok` once the replica's link is up and the primary lists it online.
    fn check_replication(&self) -> Result<(), String> {
        let replica = self.replica();
        let info = replica
            .try_cmd(&["INFO", "replication"])
            .map_err(|e| format!("{}: {e}", replica.addr()))?;
        if info_field(&info, "master_link_status") != Some("up") {
            return Err(format!("{}: master_link_status is not up", replica.addr()));
        }
        let primary = self.primary();
        let info = primary
            .try_cmd(&["INFO", "replication"])
            .map_err(|e| format!("{}: {e}", primary.addr()))?;
        let online = info.lines().any(|l| {
            l.starts_with("slave")
                && l.contains(&format!("port={},", replica.port()))
                && l.contains("state=online")
        });
        if !online {
            return Err(format!(
                "{} does not list {} as an online replica",
                primary.addr(),
                replica.addr()
            ));
        }
        Ok(())
    }

    /// `Ok` once every sentinel sees the current primary as a healthy
    /// master with the replica healthy and two other sentinels.
    fn check_sentinels(&self) -> Result<(), String> {
        let primary_port = self.primary().port().to_string();
        let replica_port = self.replica().port().to_string();
        for sentinel in &self.sentinels {
            let at = format!("sentinel 127.0.0.1:{}", sentinel.port);
            let master = sentinel
                .cmd(&["SENTINEL", "MASTER", SERVICE])
                .map_err(|e| format!("{at}: {e}"))?;
            let master = fields(&master);
            for (field, want) in [
                ("port", primary_port.as_str()),
                ("flags", "master"),
                ("num-slaves", "1"),
                ("num-other-sentinels", "2"),
            ] {
                let got = master.iter().find(|(k, _)| *k == field).map(|(_, v)| *v);
                if got != Some(want) {
                    return Err(format!("{at}: {field} is {got:?}, want {want}"));
                }
            }
            let replicas = sentinel
                .cmd(&["SENTINEL", "REPLICAS", SERVICE])
                .map_err(|e| format!("{at}: {e}"))?;
            let healthy = records(&replicas).iter().any(|r| {
                r.iter().any(|&(k, v)| k == "port" && v == replica_port)
                    && r.iter().any(|&(k, v)| k == "flags" && v == "slave")
            });
            if !healthy {
                return Err(format!(
                    "{at}: replica port {replica_port} not listed with flags=slave"
                ));
            }
        }
        Ok(())
    }

    /// Polls `check` every 50 ms for up to 30 s; panics with diagnostics
    /// if it never succeeds.
    fn wait(&self, what: &str, check: impl Fn(&Self) -> Result<(), String>) {
        let deadline = Instant::now() + WAIT_TIMEOUT;
        loop {
            match check(self) {
                Ok(()) => return,
                Err(why) if Instant::now() >= deadline => panic!(
                    "sentinel setup: {what}: not done after {WAIT_TIMEOUT:?}: {why}\n{}",
                    self.diagnostics()
                ),
                Err(_) => std::thread::sleep(POLL_INTERVAL),
            }
        }
    }

    /// Log tails of every server and sentinel.
    fn diagnostics(&self) -> String {
        let mut out = String::new();
        for (i, server) in self.servers.iter().enumerate() {
            out.push_str(&format!(
                "=== server {i} {} pid {:?}{} ===\n{}\n",
                server.addr(),
                server.pid(),
                if i == self.primary { " (primary)" } else { "" },
                tail(&server.log())
            ));
        }
        for sentinel in &self.sentinels {
            out.push_str(&format!(
                "=== sentinel 127.0.0.1:{} ===\n{}\n",
                sentinel.port,
                tail(&sentinel.log())
            ));
        }
        out
    }
}

/// A `redis-server --sentinel` child process with its own temp dir
/// (config, log), killed (SIGKILL) and cleaned up on drop.
#[derive(Debug)]
struct Sentinel {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

impl Sentinel {
    /// Starts a sentinel monitoring `127.0.0.1:master_port` as `mymaster`,
    /// retrying on another port if the process exits during start-up.
    fn start(master_port: u16) -> Sentinel {
        let mut sentinel = Sentinel {
            child: None,
            port: 0,
            dir: make_temp_dir(),
        };
        let mut failures = Vec::new();
        for attempt in 1..=START_ATTEMPTS {
            let port = free_port();
            match sentinel.launch(port, master_port) {
                Ok(child) => {
                    sentinel.child = Some(child);
                    sentinel.port = port;
                    return sentinel;
                }
                Err(reason) => {
                    failures.push(format!("attempt {attempt} on port {port}: {reason}"));
                }
            }
        }
        panic!(
            "sentinel failed to start after {START_ATTEMPTS} attempts:\n{}\n--- log ---\n{}",
            failures.join("\n"),
            sentinel.log()
        );
    }

    /// Writes a fresh config for `port` and spawns the sentinel; `Err` if
    /// it exits before answering PING.
    fn launch(&self, port: u16, master_port: u16) -> Result<Child, String> {
        let conf = self.dir.join("sentinel.conf");
        let log = self.dir.join("sentinel.log");
        let log_offset = fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
        // `dir` and `logfile` as quoted strings: temp paths could contain
        // spaces. down-after is 2 s, not 1 s: a sentinel pings and
        // reconnects at most once a second, so with 1 s every sentinel
        // marked a just-promoted primary down 1.03 s after `+switch-master`
        // (seen in CI) and failed over a second time under the test.
        let text = format!(
            "port {port}\n\
             bind 127.0.0.1\n\
             daemonize no\n\
             dir {dir:?}\n\
             logfile {log:?}\n\
             sentinel monitor {SERVICE} 127.0.0.1 {master_port} 2\n\
             sentinel down-after-milliseconds {SERVICE} 2000\n\
             sentinel failover-timeout {SERVICE} 5000\n\
             sentinel parallel-syncs {SERVICE} 1\n",
            dir = self.dir.display().to_string(),
            log = log.display().to_string(),
        );
        fs::write(&conf, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", conf.display()));
        let stderr = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("stderr.log"))
            .unwrap_or_else(|e| panic!("cannot create stderr.log in {}: {e}", self.dir.display()));
        let binary = std::env::var_os(BINARY_ENV).unwrap_or_else(|| "redis-server".into());
        let mut child = Command::new(&binary)
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| {
                if e.kind() == io::ErrorKind::NotFound {
                    panic!(
                        "{} not found: `cargo xtask test` installs redis-server (with apt-get, \
                         as root), or install it (Debian/Ubuntu: apt-get install redis-server; \
                         macOS: brew install redis), or set {BINARY_ENV} to its path",
                        Path::new(&binary).display()
                    )
                }
                panic!("failed to spawn {}: {e}", Path::new(&binary).display())
            });
        let deadline = Instant::now() + SENTINEL_READY_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return Err(format!("sentinel exited with {status}")),
                Ok(None) => {}
                Err(e) => panic!("sentinel: try_wait failed: {e}"),
            }
            // The log check makes sure the PONG came from our process.
            let ours = log_since(&log, log_offset).contains(SENTINEL_READY_LINE);
            if ours && ping(port) {
                return Ok(child);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "sentinel on port {port} not ready after {SENTINEL_READY_TIMEOUT:?}\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn log(&self) -> String {
        let read = |name: &str| fs::read_to_string(self.dir.join(name)).unwrap_or_default();
        format!("{}{}", read("sentinel.log"), read("stderr.log"))
    }

    fn cmd(&self, args: &[&str]) -> io::Result<String> {
        run_command(self.port, args)
    }

    /// Port from `SENTINEL GET-MASTER-ADDR-BY-NAME mymaster`.
    fn master_port(&self) -> io::Result<u16> {
        let reply = self.cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE])?;
        reply
            .lines()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("unexpected GET-MASTER-ADDR-BY-NAME reply {reply:?}"),
                )
            })
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Key/value pairs of a rendered flat field/value array reply.
fn fields(reply: &str) -> Vec<(&str, &str)> {
    let lines: Vec<&str> = reply.split('\n').collect();
    lines.chunks_exact(2).map(|kv| (kv[0], kv[1])).collect()
}

/// Records of a rendered array of field/value arrays (e.g. `SENTINEL
/// REPLICAS`), split where a `name` field starts a new record.
fn records(reply: &str) -> Vec<Vec<(&str, &str)>> {
    let mut out: Vec<Vec<(&str, &str)>> = Vec::new();
    for (k, v) in fields(reply) {
        if k == "name" || out.is_empty() {
            out.push(Vec::new());
        }
        if let Some(record) = out.last_mut() {
            record.push((k, v));
        }
    }
    out
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}

/// Sends an inline `PING`; true on `+PONG`.
fn ping(port: u16) -> bool {
    run_command(port, &["PING"]).is_ok_and(|r| r == "PONG")
}

/// Runs one command on a sentinel or server port (see `command_on`).
fn run_command(port: u16, args: &[&str]) -> io::Result<String> {
    command_on(port, None, args)
}

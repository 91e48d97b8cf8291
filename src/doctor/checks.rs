//! The read-only checks of the server: kind and version, memory,
//! persistence, replication, cluster, round trip and clock. Each reads
//! what it can and says `not checked` for what it may not read.

use std::time::{Duration, Instant};

use fred::clients::Client as FredClient;
use fred::types::Value;

use super::probe::{self, args, cmd, config_get, Info, Kind, Target};
use super::{Check, Status};
use crate::client::Client;
use crate::clock::epoch_ms_precise;

/// Redis versions, as (major, minor, patch).
type Version = (u32, u32, u32);

/// `LPOS`, which the fair lock's scripts call.
const LPOS: Version = (6, 0, 6);
/// The oldest version the test suite runs against.
const TESTED: Version = (6, 2, 0);
/// Sharded pub/sub (`SPUBLISH`), on a cluster.
const SHARDED: Version = (7, 0, 0);
/// Hash slots of a Redis Cluster.
const SLOTS: i64 = 16384;

/// The `server` and `capabilities` checks.
pub(super) struct ServerChecks {
    pub(super) checks: Vec<Check>,
}

fn v(version: Version) -> String {
    format!("{}.{}.{}", version.0, version.1, version.2)
}

/// `server` (kind and version of every node) and `capabilities`.
pub(super) fn server(target: &Target) -> ServerChecks {
    if let Some(why) = target.info_refused() {
        let why = format!("INFO refused ({why})");
        return ServerChecks {
            checks: vec![
                Check::not_checked("server", why.clone())
                    .advise("allow INFO to the user (`+info`) to check the server"),
                Check::not_checked("capabilities", why),
            ],
        };
    }
    let mut status = Status::Ok;
    let mut found = Vec::new();
    let mut advice = Vec::new();
    for (node, info) in target.infos() {
        let (kind, own) = info.kind();
        let compat = info.redis_version();
        let mut what = match (kind, compat) {
            (Kind::Redis, _) => format!("Redis {own}"),
            (_, Some(c)) => format!("{} {own} (Redis {} compatible)", kind.name(), v(c)),
            (_, None) => format!("{} {own}", kind.name()),
        };
        if target.nodes.len() > 1 {
            what = format!("{} {what}", node.label());
        }
        found.push(what);
        let (s, a) = judge(kind, compat);
        status = status.max(s);
        if let Some(a) = a {
            if !advice.contains(&a) {
                advice.push(a);
            }
        }
    }
    found.dedup();
    let mut server = Check::new("server", status, found.join(", "));
    if !advice.is_empty() {
        server = server.advise(advice.join("; "));
    }
    ServerChecks {
        checks: vec![server, capabilities(target)],
    }
}

/// A server's verdict: its status and what to change.
fn judge(kind: Kind, compat: Option<Version>) -> (Status, Option<String>) {
    let reason = match kind {
        Kind::Dragonfly => Some((
            Status::Warn,
            "Dragonfly refuses keys a script does not declare unless started with \
             `--default_lua_flags=allow-undeclared-keys`; not in leasehold's test matrix",
        )),
        Kind::Garnet => Some((
            Status::Warn,
            "Garnet runs Lua scripts without atomicity unless started with \
             `--lua-transaction-mode`: two acquires can interleave; not in leasehold's test matrix",
        )),
        Kind::KeyDb => Some((
            Status::Warn,
            "KeyDB is not in leasehold's test matrix; with active replication or multi-master \
             two nodes accept writes, and two owners can hold one lock",
        )),
        Kind::Redis | Kind::Valkey => None,
    };
    if let Some((s, why)) = reason {
        return (s, Some(why.to_owned()));
    }
    match compat {
        None => (
            Status::Warn,
            Some("INFO has no redis_version: the version is unknown".to_owned()),
        ),
        Some(c) if c < LPOS => (
            Status::Fail,
            Some(format!(
                "upgrade to Redis {} or later (tested from {}): the fair lock's scripts call LPOS ({})",
                v(TESTED),
                v(TESTED),
                v(LPOS)
            )),
        ),
        Some(c) if c < TESTED => (
            Status::Warn,
            Some(format!(
                "every command leasehold sends exists here, but it is tested from Redis {} on",
                v(TESTED)
            )),
        ),
        Some(_) => (Status::Ok, None),
    }
}

/// `capabilities`: what the client sends on this server.
fn capabilities(target: &Target) -> Check {
    let Some(version) = target.version() else {
        return Check::not_checked("capabilities", "the version is unknown");
    };
    let mut found = vec![format!(
        "unlock messages by {}{}",
        target.publish.to_ascii_uppercase(),
        match (target.clustered, target.publish) {
            (true, "spublish") => " (sharded, cluster)",
            (true, _) if version < SHARDED => " (cluster before Redis 7: no sharded pub/sub)",
            (true, _) => " (cluster, sharded pub/sub turned off)",
            _ => "",
        }
    )];
    let mut missing = Vec::new();
    if version >= LPOS {
        found.push("fair lock: LPOS".to_owned());
    } else {
        missing.push("LPOS (6.0.6): FairLock's scripts fail");
    }
    if version >= (5, 0, 0) {
        found.push("fence: CLIENT ID, CLIENT LIST TYPE".to_owned());
    } else {
        missing.push("CLIENT ID / CLIENT LIST TYPE (5.0): the late-copy fence");
    }
    if version >= SHARDED {
        found.push("ACL DRYRUN".to_owned());
    } else {
        found.push("no ACL DRYRUN (permissions probed)".to_owned());
    }
    if missing.is_empty() {
        Check::ok("capabilities", found.join("; "))
    } else {
        Check::new(
            "capabilities",
            Status::Fail,
            format!("missing {}", missing.join(", ")),
        )
        .advise(format!("upgrade to Redis {} or later", v(TESTED)))
    }
}

/// Whether a `maxmemory-policy` evicts keys (every lock key has a TTL,
/// so the `volatile-*` ones can pick it too).
fn evicting(policy: &str) -> bool {
    policy.starts_with("allkeys-") || policy.starts_with("volatile-")
}

/// `memory`: can a held lock be evicted?
pub(super) async fn memory(redis: &FredClient, target: &Target) -> Check {
    let mut per_node: Vec<(String, Check)> = Vec::new();
    for node in &target.nodes {
        let info = node.info.as_ref().ok();
        let mut policy = info
            .and_then(|i| i.get("maxmemory_policy"))
            .map(str::to_owned);
        let mut max = info.and_then(|i| i.num("maxmemory"));
        if policy.is_none() {
            policy = config_get(redis, node.server.as_ref(), "maxmemory-policy")
                .await
                .ok()
                .flatten();
        }
        if max.is_none() {
            let got = config_get(redis, node.server.as_ref(), "maxmemory").await;
            max = got.ok().flatten().and_then(|m| m.parse().ok());
        }
        let (Some(policy), Some(max)) = (policy, max) else {
            continue;
        };
        let check = if max == 0 {
            let note = if evicting(&policy) {
                " (setting a maxmemory would make held locks evictable)"
            } else {
                ""
            };
            Check::ok(
                "memory",
                format!("maxmemory 0 (no limit), {policy}: nothing is evicted{note}"),
            )
        } else if evicting(&policy) {
            Check::new(
                "memory",
                Status::Warn,
                format!("maxmemory {} with {policy}: a held lock can be evicted (every lock key has a TTL)", bytes(max)),
            )
            .advise(
                "set maxmemory-policy noeviction on the Redis that keeps the locks (a full Redis then \
                 refuses new acquires instead of dropping held ones); an evicted lock is reported \
                 lost at its holder's next renewal, after another owner may have taken it",
            )
        } else {
            Check::ok(
                "memory",
                format!(
                    "maxmemory {}, {policy}: nothing held is evicted (a full Redis refuses writes)",
                    bytes(max)
                ),
            )
        };
        per_node.push((node.label(), check));
    }
    across(per_node).unwrap_or_else(|| {
        Check::not_checked(
            "memory",
            "maxmemory unknown (INFO memory and CONFIG GET refused)",
        )
    })
}

/// One check from the same check on each node: its text once when every
/// node agrees (with "on every primary" when there are several), else
/// the worst, naming its node.
fn across(mut per_node: Vec<(String, Check)>) -> Option<Check> {
    let many = per_node.len() > 1;
    let agree = per_node.windows(2).all(|w| w[0].1 == w[1].1);
    per_node.sort_by_key(|(_, c)| std::cmp::Reverse(c.status));
    let (label, mut check) = per_node.into_iter().next()?;
    if many {
        let at = if agree {
            "every primary".to_owned()
        } else {
            label
        };
        check.found = match check.found.split_once(": ") {
            Some((what, then)) => format!("{what} on {at}: {then}"),
            None => format!("{} on {at}", check.found),
        };
    }
    Some(check)
}

/// `persistence`: what a restart does to held locks.
pub(super) async fn persistence(redis: &FredClient, target: &Target, client: &Client) -> Check {
    let timeout = client.watchdog().timeout();
    let advice = format!(
        "enable AOF (appendonly yes, appendfsync everysec); where a restart can lose data, keep a \
         restarted Redis (or the services) from taking locks for longer than the longest lease \
         (the watchdog timeout: 30 s by default, {} s for this client), so no old holder is still at work",
        timeout.as_secs()
    );
    let mut per_node: Vec<(String, Check)> = Vec::new();
    for (node, info) in target.infos() {
        let check = if info.num("aof_enabled") == Some(1) {
            match config_get(redis, node.server.as_ref(), "appendfsync").await {
                Ok(Some(fsync)) if fsync == "no" => Check::new(
                    "persistence",
                    Status::Warn,
                    "AOF with appendfsync no: a crash can lose the last ~30 s of lock changes"
                        .to_owned(),
                )
                .advise(advice.clone()),
                Ok(Some(fsync)) => Check::ok(
                    "persistence",
                    format!("AOF, appendfsync {fsync}: a restart keeps held locks"),
                ),
                _ => Check::ok(
                    "persistence",
                    "AOF (appendfsync unknown: CONFIG GET refused): a restart keeps held locks"
                        .to_owned(),
                ),
            }
        } else {
            let found = match config_get(redis, node.server.as_ref(), "save").await {
                Ok(Some(save)) if !save.trim().is_empty() => format!(
                    "RDB snapshots only (save {save}): a restart brings back the last snapshot, \
                     losing locks taken since and bringing back released ones until their TTL"
                ),
                Ok(_) => "none (no AOF, no RDB): a restart drops every held lock".to_owned(),
                Err(_) => {
                    "no AOF (RDB schedule unknown: CONFIG GET refused): a restart loses held locks"
                        .to_owned()
                }
            };
            Check::new("persistence", Status::Warn, found).advise(advice.clone())
        };
        per_node.push((node.label(), check));
    }
    across(per_node)
        .unwrap_or_else(|| Check::not_checked("persistence", "INFO persistence refused"))
}

/// `replication`: replicas, `min-replicas-to-write`, `WAIT`.
pub(super) async fn replication(redis: &FredClient, target: &Target) -> Check {
    let wait = match cmd::<Value>(redis, None, "WAIT", args(&["0", "1"])).await {
        Ok(_) => "WAIT available".to_owned(),
        Err(e) if probe::refused(&e) => "WAIT refused to this user".to_owned(),
        Err(e) => format!("WAIT unavailable ({})", e.details()),
    };
    let Some((node, info)) = target.infos().next() else {
        return Check::not_checked("replication", format!("INFO replication refused; {wait}"));
    };
    let role = info.get("role").unwrap_or("?");
    if role == "slave" || role == "replica" {
        return Check::new(
            "replication",
            Status::Fail,
            format!(
                "connected to a replica ({}): lock scripts write, a replica refuses them",
                node.label()
            ),
        )
        .advise("connect to the primary (or through Sentinel / the cluster)");
    }
    if target.clustered {
        // Replicas per primary: the `cluster` check.
        return Check::new(
            "replication",
            Status::Warn,
            format!("cluster primaries replicate asynchronously; {wait}"),
        )
        .advise(
            "a failover can lose a lock the old primary had acknowledged (two owners): use \
             ClientBuilder::wait_for_replicas(1, ..) where that matters, and fencing tokens (FencedLock)",
        );
    }
    let replicas = info.num("connected_slaves").unwrap_or(0);
    let min = match config_get(redis, None, "min-replicas-to-write").await {
        Ok(Some(m)) => format!("min-replicas-to-write {m}"),
        _ => "min-replicas-to-write unknown (CONFIG GET refused)".to_owned(),
    };
    if replicas == 0 {
        Check::ok(
            "replication",
            format!("primary, no replicas: nothing to fail over to (a crash relies on persistence); {min}; {wait}"),
        )
    } else {
        Check::new(
            "replication",
            Status::Warn,
            format!("primary with {replicas} asynchronous replica(s); {min}; {wait}"),
        )
        .advise(
            "a failover can lose a lock the primary had acknowledged (two owners): use \
             ClientBuilder::wait_for_replicas(1, ..) (WAIT) where that matters, min-replicas-to-write 1, \
             and fencing tokens (FencedLock)",
        )
    }
}

/// `cluster`: slot coverage, and a replica for every primary.
pub(super) async fn cluster(redis: &FredClient) -> Check {
    let info = match cmd::<String>(redis, None, "CLUSTER", args(&["INFO"])).await {
        Ok(text) => Info::parse(&text),
        Err(e) => {
            return Check::not_checked("cluster", format!("CLUSTER INFO refused ({})", e.details()))
        }
    };
    let state = info.get("cluster_state").unwrap_or("?").to_owned();
    let slots_ok = info.num("cluster_slots_ok").unwrap_or(0);
    let nodes = cmd::<String>(redis, None, "CLUSTER", args(&["NODES"]))
        .await
        .ok();
    let found_slots = format!("cluster_state {state}, {slots_ok}/{SLOTS} slots ok");
    if state != "ok" || slots_ok < SLOTS {
        return Check::new("cluster", Status::Fail, found_slots)
            .advise("assign every slot to a healthy primary: locks whose name hashes to an uncovered slot fail");
    }
    let Some(nodes) = nodes else {
        return Check::not_checked(
            "cluster",
            format!("{found_slots}; replicas unknown (CLUSTER NODES refused)"),
        );
    };
    let (primaries, bare) = primaries_without_replica(&nodes);
    if bare.is_empty() {
        Check::ok(
            "cluster",
            format!("{found_slots}; {primaries} primaries, each with a replica"),
        )
    } else {
        Check::new(
            "cluster",
            Status::Warn,
            format!(
                "{found_slots}; {} of {primaries} primaries without a healthy replica: {}",
                bare.len(),
                bare.join(", ")
            ),
        )
        .advise(
            "give every primary a replica: while one without is down, the locks of its slots fail",
        )
    }
}

/// From `CLUSTER NODES`: how many primaries serve slots, and the
/// addresses of those with no healthy replica.
fn primaries_without_replica(nodes: &str) -> (usize, Vec<String>) {
    let lines: Vec<Vec<&str>> = nodes
        .lines()
        .map(|l| l.split(' ').collect())
        .filter(|f: &Vec<&str>| f.len() >= 8)
        .collect();
    let healthy = |flags: &str| {
        !flags
            .split(',')
            .any(|f| f == "fail" || f == "fail?" || f == "noaddr")
    };
    let primaries: Vec<&Vec<&str>> = lines
        .iter()
        .filter(|f| f[2].split(',').any(|x| x == "master") && healthy(f[2]) && f.len() > 8)
        .collect();
    let bare = primaries
        .iter()
        .filter(|p| {
            !lines
                .iter()
                .any(|r| r[3] == p[0] && r[2].split(',').any(|x| x == "slave") && healthy(r[2]))
        })
        .map(|p| p[1].split('@').next().unwrap_or(p[1]).to_owned())
        .collect();
    (primaries.len(), bare)
}

/// `latency`: `PING` round trips, one after the other.
pub(super) async fn latency(redis: &FredClient, pings: u32, client: &Client) -> Check {
    let mut times = Vec::with_capacity(pings as usize);
    for _ in 0..pings {
        let start = Instant::now();
        if let Err(e) = cmd::<Value>(redis, None, "PING", vec![]).await {
            return Check::not_checked("latency", format!("PING refused ({})", e.details()));
        }
        times.push(start.elapsed());
    }
    times.sort();
    let pick = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    let (p50, p99, max) = (pick(0.5), pick(0.99), times[times.len() - 1]);
    let found = format!(
        "PING p50 {}, p99 {}, max {} over {pings}",
        ms(p50),
        ms(p99),
        ms(max)
    );
    let bound = client.watchdog().timeout() / 12;
    if p99 > bound {
        Check::new("latency", Status::Warn, found).advise(format!(
            "p99 above {} (a twelfth of the watchdog timeout): each renewal is given a sixth, so \
             slow replies can get held leases declared lost; raise watchdog_timeout or bring Redis closer",
            ms(bound)
        ))
    } else {
        Check::ok("latency", found)
    }
}

/// `clock`: the server's `TIME` against this machine's clock.
pub(super) async fn clock(redis: &FredClient, target: &Target, tolerance: Duration) -> Check {
    let mut worst: Option<(f64, f64, String)> = None;
    for node in &target.nodes {
        let before = epoch_ms_precise();
        let reply = cmd::<Vec<String>>(redis, node.server.as_ref(), "TIME", vec![]).await;
        let after = epoch_ms_precise();
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                return Check::not_checked("clock", format!("TIME refused ({})", e.details()))
            }
        };
        let (Some(secs), Some(micros)) = (
            reply.first().and_then(|s| s.parse::<f64>().ok()),
            reply.get(1).and_then(|s| s.parse::<f64>().ok()),
        ) else {
            return Check::not_checked("clock", "TIME gave no time");
        };
        let server = secs * 1000.0 + micros / 1000.0;
        let offset = server - (before + after) / 2.0;
        let error = (after - before) / 2.0;
        if worst.as_ref().is_none_or(|w| offset.abs() > w.0.abs()) {
            worst = Some((offset, error, node.label()));
        }
    }
    let Some((offset, error, label)) = worst else {
        return Check::not_checked("clock", "no server");
    };
    let at = if target.nodes.len() > 1 {
        format!(
            ", the farthest of {} primaries ({label})",
            target.nodes.len()
        )
    } else {
        String::new()
    };
    let found = format!("server clock {offset:+.1} ms from this machine's (± {error:.1} ms){at}");
    if offset.abs() - error > tolerance.as_secs_f64() * 1000.0 {
        Check::new("clock", Status::Warn, found).advise(format!(
            "synchronise the clocks (NTP): the fair lock's queue timeouts and the semaphore's permit \
             expiries are client clock times, compared across machines (tolerated: {})",
            ms(tolerance)
        ))
    } else {
        Check::ok("clock", found)
    }
}

/// A byte count in the largest binary unit that divides it evenly-ish.
fn bytes(n: i64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{} {}", (value * 10.0).round() / 10.0, UNITS[unit])
}

/// A duration in ms with one decimal below 10 ms.
pub(super) fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_by_version() {
        assert_eq!(judge(Kind::Redis, Some((7, 0, 15))).0, Status::Ok);
        assert_eq!(judge(Kind::Redis, Some((6, 2, 14))).0, Status::Ok);
        assert_eq!(judge(Kind::Redis, Some((6, 0, 9))).0, Status::Warn);
        assert_eq!(judge(Kind::Redis, Some((6, 0, 5))).0, Status::Fail);
        assert_eq!(judge(Kind::Valkey, Some((7, 2, 4))).0, Status::Ok);
        assert_eq!(judge(Kind::Dragonfly, Some((6, 2, 11))).0, Status::Warn);
        assert_eq!(judge(Kind::Garnet, Some((7, 2, 5))).0, Status::Warn);
        assert!(evicting("allkeys-lru") && evicting("volatile-ttl") && !evicting("noeviction"));
    }

    #[test]
    fn primaries_and_their_replicas() {
        let nodes = "\
a 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460
b 127.0.0.1:7001@17001 master - 0 0 2 connected 5461-10922
c 127.0.0.1:7002@17002 master - 0 0 3 connected 10923-16383
d 127.0.0.1:7003@17003 slave a 0 0 1 connected
e 127.0.0.1:7004@17004 slave,fail b 0 0 2 connected
";
        let (n, bare) = primaries_without_replica(nodes);
        assert_eq!(n, 3);
        assert_eq!(bare, ["127.0.0.1:7001", "127.0.0.1:7002"]);
    }
}

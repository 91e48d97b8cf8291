//! Self-test of the cluster and sentinel harnesses in `tests/support`.
//!
//! Every wait in the harnesses is bounded; each test also checks that it
//! finished within its time budget.

use leasehold_testkit as support;

use std::collections::HashSet;
use std::time::{Duration, Instant};
use support::cluster::RedisCluster;
use support::sentinel::SentinelSetup;

/// Budget of each test (they run in parallel).
const BUDGET: Duration = Duration::from_secs(60);

fn keys() -> Vec<String> {
    (0..32).map(|i| format!("harness:key:{i}")).collect()
}

/// Sets and reads back keys across slots through `cmd_on_key`, checks
/// that `primary_for_key` names the owner (other primaries answer MOVED)
/// and that the keys spread over every primary.
fn check_keys(cluster: &RedisCluster) {
    let primaries = cluster.primaries();
    let mut owners = HashSet::new();
    for key in keys() {
        assert_eq!(cluster.cmd_on_key(&key, &["SET", &key, &key]), "OK");
        assert_eq!(cluster.cmd_on_key(&key, &["GET", &key]), key);
        let owner = cluster.primary_for_key(&key);
        assert!(primaries.contains(&owner), "{owner} not in {primaries:?}");
        owners.insert(owner);
        for &other in primaries.iter().filter(|&&p| p != owner) {
            let reply = cluster.nodes()[other].cmd(&["GET", &key]);
            assert!(reply.starts_with("-MOVED "), "{reply}");
        }
    }
    assert_eq!(owners.len(), primaries.len(), "keys did not spread");
    assert_eq!(
        cluster.primary_for_key("{tag}a"),
        cluster.primary_for_key("{tag}b")
    );
}

fn check_url(url: &str, prefix: &str, extra_nodes: usize) {
    assert!(url.starts_with(prefix), "{url}");
    assert_eq!(url.matches("node=127.0.0.1:").count(), extra_nodes, "{url}");
}

#[test]
fn cluster_without_replicas() {
    let t = Instant::now();
    let cluster = RedisCluster::start(3, 0);
    eprintln!("3x0 cluster started in {:?}", t.elapsed());
    assert_eq!(cluster.nodes().len(), 3);
    assert_eq!(cluster.primaries(), vec![0, 1, 2]);
    for p in 0..3 {
        assert!(cluster.replicas_of(p).is_empty());
    }
    check_url(&cluster.url(), "redis-cluster://127.0.0.1:", 2);
    check_keys(&cluster);
    assert!(t.elapsed() < BUDGET, "took {:?}", t.elapsed());
}

#[test]
fn cluster_with_replicas_fails_over() {
    let t = Instant::now();
    let mut cluster = RedisCluster::start(3, 1);
    eprintln!("3x1 cluster started in {:?}", t.elapsed());
    assert_eq!(cluster.nodes().len(), 6);
    let primaries = cluster.primaries();
    assert_eq!(primaries.len(), 3);
    let mut all: Vec<usize> = primaries.clone();
    for &p in &primaries {
        let replicas = cluster.replicas_of(p);
        assert_eq!(replicas.len(), 1, "replicas of {p}: {replicas:?}");
        all.extend(replicas);
    }
    all.sort_unstable();
    assert_eq!(all, (0..6).collect::<Vec<_>>());
    check_url(&cluster.url(), "redis-cluster://127.0.0.1:", 5);
    check_keys(&cluster);

    let key = "harness:failover";
    assert_eq!(cluster.cmd_on_key(key, &["SET", key, "v1"]), "OK");
    let old = cluster.primary_for_key(key);
    cluster.wait_for_replicas(old);
    let replica = cluster.replicas_of(old)[0];
    let f = Instant::now();
    let promoted = cluster.kill_and_wait_failover(old);
    eprintln!("cluster failover took {:?}", f.elapsed());
    assert_eq!(promoted, replica);
    assert_eq!(cluster.primary_for_key(key), promoted);
    assert_eq!(cluster.cmd_on_key(key, &["GET", key]), "v1");
    let primaries = cluster.primaries();
    assert!(primaries.contains(&promoted) && !primaries.contains(&old));

    // The killed node rejoins (same port, bus port and nodes.conf) as a
    // replica of the promoted one.
    let r = Instant::now();
    cluster.node_mut(old).restart();
    cluster.wait_ready();
    assert_eq!(cluster.replicas_of(promoted), vec![old]);
    eprintln!("old primary rejoined as replica in {:?}", r.elapsed());
    assert!(t.elapsed() < BUDGET, "took {:?}", t.elapsed());
}

#[test]
fn sentinel_setup_fails_over() {
    let t = Instant::now();
    let mut setup = SentinelSetup::start();
    eprintln!("sentinel setup started in {:?}", t.elapsed());
    let first = setup.primary().port();
    let second = setup.replica().port();
    assert_eq!(setup.current_primary_port(), first);
    assert_eq!(setup.sentinel_ports().len(), 3);
    let url = setup.url();
    check_url(&url, "redis-sentinel://127.0.0.1:", 2);
    assert!(url.contains("sentinelServiceName=mymaster"), "{url}");

    assert_eq!(setup.primary().cmd(&["SET", "k", "v1"]), "OK");
    setup.wait_for_replica();
    assert_eq!(setup.replica().cmd(&["GET", "k"]), "v1");
    setup.stop_replica();
    let info = setup.primary().cmd(&["INFO", "replication"]);
    assert!(info.contains("connected_slaves:0"), "{info}");
    assert_eq!(setup.primary().cmd(&["SET", "k", "v2"]), "OK");
    let r = Instant::now();
    setup.start_replica();
    eprintln!("replica restarted in {:?}", r.elapsed());
    setup.wait_for_replica();
    assert_eq!(setup.replica().cmd(&["GET", "k"]), "v2");

    let f = Instant::now();
    setup.kill_primary_and_wait_failover();
    eprintln!("sentinel failover took {:?}", f.elapsed());
    assert_eq!(setup.current_primary_port(), second);
    assert_eq!(setup.primary().port(), second);
    assert_eq!(setup.primary().cmd(&["GET", "k"]), "v2");
    assert_eq!(setup.primary().cmd(&["SET", "k", "v3"]), "OK");

    // The old primary comes back as a replica of the new one.
    let r = Instant::now();
    setup.start_replica();
    eprintln!("old primary re-attached in {:?}", r.elapsed());
    assert_eq!(setup.replica().port(), first);
    setup.wait_for_replica();
    assert_eq!(setup.replica().cmd(&["GET", "k"]), "v3");
    assert!(t.elapsed() < BUDGET, "took {:?}", t.elapsed());
}

//! Issue 45: the servers users run. What the client probes at connect,
//! what it refuses at build, and leases that no batch shape may cost: a
//! server or cluster over `maxmemory`, a server that refuses scripts with
//! no declared key. Runs on whichever server the harness starts
//! (`LEASEHOLD_REDIS_SERVER`: CI runs it on each of the matrix).

use leasehold_testkit as support;

use std::time::Duration;

use leasehold::{Client, Error, LockGuard, ServerKind};
use support::cluster::RedisCluster;
use support::fixture::{client_with, within};
use support::{Proxy, RedisServer};

const HANG: Duration = Duration::from_secs(60);
/// The watchdog timeout of these tests: renewed every second.
const WATCHDOG: Duration = Duration::from_secs(3);

/// Takes `n` watchdog locks through `c`, holds them for four watchdog
/// timeouts, and returns how many were told lost and how many of their
/// keys are gone (read through `exists`).
async fn hold_through(c: &Client, n: usize, exists: impl Fn(&str) -> bool) -> (usize, usize) {
    let mut guards: Vec<(String, LockGuard)> = Vec::new();
    for i in 0..n {
        let name = format!("held-{i}");
        let g = within(HANG, "lock", c.lock(&name).lock()).await.unwrap();
        guards.push((name, g));
    }
    tokio::time::sleep(WATCHDOG * 4).await;
    let lost = guards.iter().filter(|(_, g)| g.is_lost()).count();
    let gone = guards.iter().filter(|(name, _)| !exists(name)).count();
    drop(guards);
    (lost, gone)
}

/// A single server over `maxmemory` (`noeviction`) refuses writes that
/// add memory, but renewals (`PEXPIRE`) still run: every lease is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_over_maxmemory_keeps_every_watchdog_lease() {
    let server = RedisServer::start();
    let c = client_with(&server, |b| b.watchdog_timeout(WATCHDOG)).await;
    let mut guards = Vec::new();
    for i in 0..30 {
        guards.push(c.lock(&format!("held-{i}")).lock().await.unwrap());
    }
    assert_eq!(
        server.cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]),
        "OK"
    );
    assert_eq!(server.cmd(&["CONFIG", "SET", "maxmemory", "1"]), "OK");
    tokio::time::sleep(WATCHDOG * 4).await;
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    let gone = (0..30)
        .filter(|i| server.cmd(&["EXISTS", &format!("held-{i}")]) != "1")
        .count();
    assert_eq!(server.cmd(&["CONFIG", "SET", "maxmemory", "0"]), "OK");
    assert_eq!((lost, gone), (0, 0), "leases told lost, keys gone");
    for g in guards {
        g.unlock().await.unwrap();
    }
    c.shutdown().await.unwrap();
}

/// Issue 45, item 3: a cluster over `maxmemory` (`noeviction`). The node
/// batches carried `#!lua flags=allow-cross-slot-keys`, which a node over
/// `maxmemory` refuses up front: every lease on it was declared lost. With
/// no flags line the same batches run there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_over_maxmemory_keeps_every_watchdog_lease() {
    let cluster = RedisCluster::start(3, 0);
    let c = Client::builder()
        .url(&cluster.url())
        .watchdog_timeout(WATCHDOG)
        .build()
        .await
        .unwrap();
    let mut guards = Vec::new();
    for i in 0..30 {
        guards.push(c.lock(&format!("held-{i}")).lock().await.unwrap());
    }
    for node in cluster.nodes() {
        assert_eq!(
            node.cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]),
            "OK"
        );
        assert_eq!(node.cmd(&["CONFIG", "SET", "maxmemory", "1"]), "OK");
    }
    tokio::time::sleep(WATCHDOG * 4).await;
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    let gone = (0..30)
        .filter(|i| {
            cluster.cmd_on_key(&format!("held-{i}"), &["EXISTS", &format!("held-{i}")]) != "1"
        })
        .count();
    for node in cluster.nodes() {
        node.cmd(&["CONFIG", "SET", "maxmemory", "0"]);
    }
    assert_eq!((lost, gone), (0, 0), "leases told lost, keys gone");
    for g in guards {
        g.unlock().await.unwrap();
    }
    c.shutdown().await.unwrap();
}

/// A server that refuses scripts with no declared key (ElastiCache
/// Serverless; emulated by the proxy): the watchdog's keyless batches are
/// sent again with their keys declared, in the same cycle, and no lease
/// is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_refusing_keyless_scripts_keeps_every_watchdog_lease() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr()).await;
    proxy.refuse_keyless_scripts();
    let url = proxy.url();
    let c = client_with(&server, |b| b.url(&url).watchdog_timeout(WATCHDOG)).await;
    let (lost, gone) = hold_through(&c, 30, |name| server.cmd(&["EXISTS", name]) == "1").await;
    assert_eq!((lost, gone), (0, 0), "leases told lost, keys gone");
    c.shutdown().await.unwrap();
}

/// A server with a password and a user `app` (password `pw`) given
/// `rules` after `on >pw`.
fn server_with_user(rules: &[&str]) -> RedisServer {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]).with_password("s3cret");
    let mut cmd = vec!["ACL", "SETUSER", "app", "on", ">pw"];
    cmd.extend_from_slice(rules);
    assert_eq!(server.cmd(&cmd), "OK", "ACL SETUSER {rules:?}");
    server
}

async fn build_as_app(server: &RedisServer) -> leasehold::Result<Client> {
    Client::builder()
        .url(&format!("redis://app:pw@{}", server.addr()))
        .build()
        .await
}

/// Issue 45, item 4: a user without the lock channels (a Redis 7 user
/// gets `resetchannels` by default) would free a lock and then fail at
/// the release's `PUBLISH`, waking nobody. `build()` refuses it, naming
/// the permission.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_the_lock_channels_is_refused_at_build() {
    let server = server_with_user(&["~*", "resetchannels", "+@all"]);
    match build_as_app(&server).await {
        Err(Error::Unsupported(why)) => assert!(why.contains("PUBLISH"), "{why}"),
        other => panic!("a user without channels was not refused: {other:?}"),
    }
    // Control: with the channels the same user builds and locks.
    server.cmd(&["ACL", "SETUSER", "app", "allchannels"]);
    let c = build_as_app(&server).await.unwrap();
    c.lock("x").lock().await.unwrap().unlock().await.unwrap();
    c.shutdown().await.unwrap();
}

/// A user that may not run scripts, or not write under the key prefix, is
/// refused at build too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_scripts_or_keys_is_refused_at_build() {
    let server = server_with_user(&["~*", "&*", "+@all", "-evalsha"]);
    match build_as_app(&server).await {
        Err(Error::Unsupported(why)) => assert!(why.contains("scripts"), "{why}"),
        other => panic!("a user without scripts was not refused: {other:?}"),
    }
    server.cmd(&["ACL", "SETUSER", "app", "+evalsha", "resetkeys", "~other:*"]);
    match build_as_app(&server).await {
        Err(Error::Unsupported(why)) => assert!(why.contains("key prefix"), "{why}"),
        other => panic!("a user without the keys was not refused: {other:?}"),
    }
    // Keys under the prefix but not the request records beside them.
    match Client::builder()
        .url(&format!("redis://app:pw@{}", server.addr()))
        .key_prefix("other:")
        .build()
        .await
    {
        Err(Error::Unsupported(why)) => assert!(why.contains("leasehold_latch"), "{why}"),
        other => panic!("a user without the request records was not refused: {other:?}"),
    }
    // With a prefix it may write under, and the records, it builds.
    server.cmd(&["ACL", "SETUSER", "app", "~leasehold_latch:*"]);
    let c = Client::builder()
        .url(&format!("redis://app:pw@{}", server.addr()))
        .key_prefix("other:")
        .build()
        .await
        .unwrap();
    c.shutdown().await.unwrap();
}

/// `wait_for_replicas` without `WAIT` is refused at build, not at every
/// acquire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_replicas_without_wait_is_refused_at_build() {
    let server = server_with_user(&["~*", "&*", "+@all", "-wait"]);
    let built = Client::builder()
        .url(&format!("redis://app:pw@{}", server.addr()))
        .wait_for_replicas(1, Duration::from_millis(100))
        .build()
        .await;
    match built {
        Err(Error::Unsupported(why)) => assert!(why.contains("WAIT"), "{why}"),
        other => panic!("not refused: {other:?}"),
    }
    // Without the option the same user is fine.
    build_as_app(&server)
        .await
        .unwrap()
        .shutdown()
        .await
        .unwrap();
}

/// Issue 45, items 2 and 6: the server's kind, version and eviction policy
/// are probed once and available to programs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_is_probed_at_connect() {
    let server = RedisServer::start();
    let c = client_with(&server, |b| b).await;
    let info = c.server_info().clone();
    assert!(
        matches!(info.kind, ServerKind::Redis | ServerKind::Valkey),
        "{info:?}"
    );
    let major = support::server::server_major();
    assert_eq!(info.version.map(|v| v.0), Some(major), "{info:?}");
    assert!(!info.can_evict_locks(), "{info:?}");
    assert!(info.wait && info.fence && !info.sharded_pubsub, "{info:?}");
    c.shutdown().await.unwrap();

    server.cmd(&["CONFIG", "SET", "maxmemory", "100mb"]);
    server.cmd(&["CONFIG", "SET", "maxmemory-policy", "volatile-lru"]);
    let c = client_with(&server, |b| b).await;
    assert!(c.server_info().can_evict_locks(), "{:?}", c.server_info());
    c.shutdown().await.unwrap();
}

//! Renewal at scale on a Redis Cluster: one script call per node batch,
//! whatever the slots, and no lease lost while a slot migrates. In a file
//! of its own so that it never shares the machine with the other cluster
//! tests (test binaries run one after the other).

use leasehold_testkit as support;

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold::fred::interfaces::{HashesInterface, KeysInterface};
use leasehold::{Client, Watchdog};
use support::cluster::RedisCluster;
use support::fixture::within;

const HANG: Duration = Duration::from_secs(60);

/// The watchdog timeout (renewal every third of it, each call bounded by a
/// sixth): 1 s, as issue 9 asks, in an optimized build (`cargo xtask test`
/// runs this file once more with `--profile scale`); 3 s in a debug build, whose
/// client on a 2-core machine running three redis-servers misses 167 ms
/// call bounds whenever the test itself bursts (10,000 acquires, 20,000
/// reads) and then, rightly, declares leases lost.
/// `LEASEHOLD_SCALE_WATCHDOG_MS` overrides it.
const WATCHDOG: Duration = if cfg!(debug_assertions) {
    Duration::from_secs(3)
} else {
    Duration::from_secs(1)
};

/// 10,000 leases on a 3-primary cluster with a [`WATCHDOG`] timeout: for 10 s none
/// is lost, and each node sees at most `ceil(its leases / batch) + 2`
/// renewal calls per cycle — one script call per node batch, whatever the
/// slots (5,000 names spread over every slot, 500 sharing one). Then the
/// shared slot migrates to another node while renewals run (keys moved,
/// ASK and MOVED on the way: a node batch reports the keys it no longer
/// serves, which are renewed per slot, in a transaction while the slot is
/// migrating): no lease is lost, every guard still holds its lock, and
/// every unlock finds its hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_leases_renew_per_node_through_a_migration() {
    const LEASES: usize = 10_000;
    const HOT: usize = 500;
    const TASKS: usize = 50;
    if let Ok(filter) = std::env::var("LEASEHOLD_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    }
    let cluster = RedisCluster::start(3, 0);
    let timeout = std::env::var("LEASEHOLD_SCALE_WATCHDOG_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map_or(WATCHDOG, Duration::from_millis);
    let watchdog = Watchdog::new(timeout).unwrap();
    let batch = watchdog.batch_size();
    let c = Client::builder()
        .url(&cluster.url())
        .watchdog(watchdog.clone())
        .build()
        .await
        .unwrap();
    let names: Vec<String> = (0..LEASES)
        .map(|i| {
            if i < HOT {
                format!("{{hot}}:{i}")
            } else {
                format!("scale:{i}")
            }
        })
        .collect();
    let mut tasks = Vec::new();
    for chunk in names.chunks(LEASES / TASKS) {
        let (c, chunk) = (c.clone(), chunk.to_vec());
        tasks.push(tokio::spawn(async move {
            let mut guards = Vec::with_capacity(chunk.len());
            for name in &chunk {
                guards.push(c.lock(name).lock().await.unwrap());
            }
            guards
        }));
    }
    let mut guards = Vec::with_capacity(LEASES);
    for t in tasks {
        guards.extend(within(HANG, "10,000 acquires", t).await.unwrap());
    }
    assert_eq!(watchdog.lease_count(), LEASES);

    // Leases per primary, counted where the keys are.
    let primaries = cluster.primaries();
    let per_node: BTreeMap<usize, usize> = primaries
        .iter()
        .map(|&n| (n, support::fixture::lock_keys(&cluster.nodes()[n]).len()))
        .collect();
    assert_eq!(per_node.values().sum::<usize>(), LEASES);
    let calls = |node: usize| support::fixture::calls(&cluster.nodes()[node], "evalsha");
    let before: BTreeMap<usize, u64> = primaries.iter().map(|&n| (n, calls(n))).collect();
    let window = Duration::from_secs(10);
    tokio::time::sleep(window).await;
    let cycles = (window.as_millis() / watchdog.renew_interval().as_millis()) as u64 + 1;
    for (&node, &leases) in &per_node {
        let seen = calls(node) - before[&node];
        let bound = leases.div_ceil(batch) as u64 + 2;
        eprintln!(
            "node {node}: {leases} leases, {seen} renewal calls in {cycles} cycles ({:.1} per cycle, bound {bound})",
            seen as f64 / cycles as f64
        );
        assert!(
            seen <= cycles * bound,
            "node {node}: {seen} renewal calls in {cycles} cycles for {leases} leases"
        );
        assert!(
            seen >= cycles / 2,
            "node {node}: renewal barely ran ({seen})"
        );
    }
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    assert_eq!(lost, 0, "{lost} of {LEASES} leases lost in steady state");

    // The shared slot migrates while renewals run.
    let src = cluster.primary_for_key("{hot}:0");
    let dst = primaries.iter().copied().find(|&p| p != src).unwrap();
    let node = |i: usize| &cluster.nodes()[i];
    let slot = node(src).cmd(&["CLUSTER", "KEYSLOT", "{hot}:0"]);
    let (src_id, dst_id) = (
        node(src).cmd(&["CLUSTER", "MYID"]),
        node(dst).cmd(&["CLUSTER", "MYID"]),
    );
    assert_eq!(
        node(dst).cmd(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &src_id]),
        "OK"
    );
    assert_eq!(
        node(src).cmd(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &dst_id]),
        "OK"
    );
    let port = node(dst).port().to_string();
    loop {
        let keys = node(src).cmd(&["CLUSTER", "GETKEYSINSLOT", &slot, "50"]);
        let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
        if keys.is_empty() {
            break;
        }
        let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
        migrate.extend(keys.iter().copied());
        assert_eq!(node(src).cmd(&migrate), "OK");
        // Renewals meet the half-moved slot (ASK) between batches.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for &i in &primaries {
        assert_eq!(
            node(i).cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &dst_id]),
            "OK"
        );
    }
    // Several lease lengths after the move.
    tokio::time::sleep(Duration::from_secs(10)).await;
    // The promise: a guard that does not say lost holds its lock (nobody
    // else locks these names, so its field must be there). Checked field
    // by field through a client of its own (so the check's 20,000 reads do
    // not queue in front of the renewals on leasehold's connection), and
    // each guard asked *after* its key was read: a key found gone must
    // belong to a guard that says lost by then.
    let observer = Client::builder().url(&cluster.url()).build().await.unwrap();
    let mut held = tokio::task::JoinSet::new();
    for (i, g) in guards.iter().enumerate() {
        let (redis, name) = (observer.redis().clone(), g.name().to_owned());
        let field = format!("{}:{}", c.id(), g.owner().id());
        held.spawn(async move {
            let here = redis.hexists::<i64, _, _>(&name, &field).await;
            let pttl = redis.pttl::<i64, _>(&name).await;
            (i, here.unwrap(), pttl.unwrap())
        });
    }
    while let Some(done) = held.join_next().await {
        let (i, here, pttl) = done.unwrap();
        if here != 1 || pttl <= 0 {
            assert!(
                guards[i].is_lost(),
                "{}: the guard says held but its field is gone (HEXISTS {here}, PTTL {pttl})",
                guards[i].name()
            );
        }
    }
    observer.shutdown().await.unwrap();
    let lost: Vec<&str> = guards
        .iter()
        .filter(|g| g.is_lost())
        .map(|g| g.name())
        .collect();
    let lost_hot = lost.iter().filter(|n| n.starts_with("{hot}")).count();
    eprintln!(
        "migration: {} of {LEASES} leases declared lost ({lost_hot} in the migrating slot)",
        lost.len()
    );
    assert!(
        lost.is_empty(),
        "{} leases lost through the migration, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    let released: Vec<_> = guards
        .into_iter()
        .map(|g| (g.name().to_owned(), tokio::spawn(g.unlock())))
        .collect();
    for (name, r) in released {
        if let Err(e) = within(HANG, "unlock", r).await.unwrap() {
            panic!("{name}: unlock of a held guard failed: {e}");
        }
    }
    assert_eq!(watchdog.lease_count(), 0);
    c.shutdown().await.unwrap();
}

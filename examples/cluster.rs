//! leasehold on a Redis Cluster that the example starts itself: three
//! primaries on free loopback ports, each with one replica.
//!
//! Locks spread over every primary; unlock messages travel on sharded
//! pub/sub (each lock's channel lives on the lock's own shard); the
//! watchdog renews in per-slot batches. Then a primary is killed: the
//! cluster fails over, and the locks go on working.
//!
//! ```text
//! cargo run --example cluster
//! ```
//!
//! With `REDIS_CLUSTER_URL` set (e.g.
//! `redis-cluster://10.0.0.1:6379?node=10.0.0.2:6379`), it uses that
//! cluster instead and skips the failover.

use leasehold_testkit::cluster;

use std::time::{Duration, Instant};

use leasehold::fred::interfaces::KeysInterface;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut own = None;
    let url = match std::env::var("REDIS_CLUSTER_URL") {
        Ok(url) => url,
        Err(_) => {
            let started = Instant::now();
            let cluster = cluster::RedisCluster::start(3, 1);
            println!(
                "started a 3-primary cluster (1 replica each) in {:.1?}",
                started.elapsed()
            );
            let url = cluster.url();
            own = Some(cluster);
            url
        }
    };
    let client = leasehold::Client::builder()
        .url(&url)
        .watchdog_timeout(Duration::from_secs(10))
        .build()
        .await?;

    // 64 tasks, 8 locks spread over the shards, a counter per lock.
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..64 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let name = format!("orders:{}", t % 8);
            let lock = client.lock(&name);
            for _ in 0..25 {
                let guard = lock.lock().await?;
                let counter = format!("{{{name}}}:count");
                let n: Option<i64> = client.redis().get(&counter).await?;
                let () = client
                    .redis()
                    .set(&counter, n.unwrap_or(0) + 1, None, None, false)
                    .await?;
                guard.unlock().await?;
            }
            Ok::<_, leasehold::Error>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let mut total = 0;
    for i in 0..8 {
        let n: i64 = client.redis().get(format!("{{orders:{i}}}:count")).await?;
        total += n;
    }
    println!(
        "1,600 increments under 8 locks across the shards: counters add up to {total} in {:.2?}",
        started.elapsed()
    );
    assert_eq!(total, 1600, "mutual exclusion");

    if let Some(cluster) = own.as_mut() {
        // Fail over the primary of one held lock.
        let name = "orders:0";
        let guard = client.lock(name).lock().await?;
        let victim = cluster.primary_for_key(name);
        let started = Instant::now();
        cluster.kill_and_wait_failover(victim);
        println!(
            "killed the primary of `{name}`; failover took {:.1?}",
            started.elapsed()
        );
        if guard.is_lost() {
            println!("the lock did not survive the failover: its holder was told `lost`");
        } else {
            guard.unlock().await?;
            println!("the lock survived on the promoted replica and was unlocked there");
        }
        let again = client.lock(name).lock().await?;
        again.unlock().await?;
        println!("`{name}` locks and unlocks on the new primary");
    }
    client.shutdown().await?;
    Ok(())
}

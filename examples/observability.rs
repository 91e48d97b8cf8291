//! Observability: the engine's `tracing` spans printed by
//! `tracing-subscriber`, a `Client::stats()` snapshot, and (with the
//! `metrics` feature) the `metrics` counters, around a small contended run.
//!
//! ```text
//! cargo run --example observability
//! cargo run --example observability --features metrics
//! RUST_LOG=leasehold=debug,observability=info cargo run --example observability
//! ```
//!
//! With no `REDIS_URL`, a private `redis-server` is started on a free
//! loopback port and stopped at exit. The run: 4 tasks take one lock 5
//! times each (contended), one holder keeps a lock through a watchdog
//! renewal cycle, then another client force-unlocks it, and the holder's
//! lease is reported lost (a `WARN` event).

use leasehold_testkit::server;

use std::time::Duration;

use leasehold::Client;
use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // Spans print one line when they close, with every field recorded.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("leasehold=debug,observability=info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_span_events(FmtSpan::CLOSE)
        .with_target(false)
        .init();
    #[cfg(feature = "metrics")]
    let snapshotter = {
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install()?;
        snapshotter
    };

    let (_server, url) = match std::env::var("REDIS_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let server = server::RedisServer::start();
            let url = server.url();
            (Some(server), url)
        }
    };
    // A short watchdog timeout, so a renewal cycle shows within a second.
    let client = Client::builder()
        .url(&url)
        .watchdog_timeout(Duration::from_secs(1))
        .build()
        .await?;
    let other = Client::connect(&url).await?;

    // Contention: 4 tasks, one lock, 5 turns each.
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let lock = client.lock("observability:contended");
            tokio::spawn(async move {
                for _ in 0..5 {
                    lock.with(|_lease| tokio::time::sleep(Duration::from_millis(5)))
                        .await?;
                }
                Ok::<(), leasehold::Error>(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }

    // A lease kept through renewals, then lost to a force-unlock.
    let guard = client.lock("observability:lost").lock().await?;
    tokio::time::sleep(Duration::from_millis(800)).await;
    other.lock("observability:lost").force_unlock().await?;
    tokio::time::timeout(Duration::from_secs(10), guard.lost()).await?;
    drop(guard);

    let stats = client.stats();
    tracing::info!(?stats, "client stats");
    println!("\nClient::stats() after the run:");
    println!("  acquisitions      {}", stats.acquisitions);
    println!("  busy attempts     {}", stats.busy_attempts);
    println!(
        "  waits             {} ({:?} in total)",
        stats.waits, stats.wait_time
    );
    println!("  releases          {}", stats.releases);
    println!("  renewals          {}", stats.renewals);
    println!("  renewal failures  {}", stats.renewal_failures);
    println!("  leases lost       {}", stats.leases_lost);
    println!("  subscriptions     {}", stats.subscriptions);

    #[cfg(feature = "metrics")]
    {
        use metrics_util::debugging::DebugValue;
        println!("\nmetrics (summed over both clients):");
        let mut rows: Vec<(String, String)> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| {
                let value = match value {
                    DebugValue::Counter(n) => n.to_string(),
                    DebugValue::Gauge(g) => g.to_string(),
                    DebugValue::Histogram(h) => {
                        let sum: f64 = h.iter().map(|v| v.into_inner()).sum();
                        format!("{} samples, {:.1} ms in total", h.len(), sum * 1000.0)
                    }
                };
                (key.key().name().to_owned(), value)
            })
            .collect();
        rows.sort();
        for (name, value) in rows {
            println!("  {name:<36} {value}");
        }
    }

    assert_eq!(stats.acquisitions, 21);
    client.shutdown().await?;
    other.shutdown().await?;
    Ok(())
}

//! A job queue where arrival order matters: three services submit print
//! jobs for one printer, and the printer must print them in the order they
//! were submitted, whichever service sent them. A `FairLock` queues the
//! jobs in Redis, across clients (and processes), and hands the printer to
//! the oldest job at each release, waking only that job.
//!
//! ```text
//! cargo run --example fair_queue
//! ```
//!
//! With no `REDIS_URL`, a private `redis-server` is started on a free
//! loopback port and stopped at exit.

use leasehold_testkit::server;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::fred::interfaces::ClientLike;
use leasehold::fred::types::{ClusterHash, CustomCommand};
use leasehold::{Client, FairLock};

/// How many jobs wait in the printer's queue (`LLEN` of its queue key).
async fn waiting(client: &Client, printer: &FairLock) -> leasehold::Result<i64> {
    let llen = CustomCommand::new_static("LLEN", ClusterHash::FirstKey, false);
    Ok(client
        .redis()
        .custom(llen, vec![printer.queue_key().to_owned()])
        .await?)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (_server, url) = match std::env::var("REDIS_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let server = server::RedisServer::start();
            let url = server.url();
            (Some(server), url)
        }
    };
    // Three services, each with its own client (its own connections).
    let services = [
        Client::connect(&url).await?,
        Client::connect(&url).await?,
        Client::connect(&url).await?,
    ];
    let printer = services[0].fair_lock("printer");
    let printed = Arc::new(Mutex::new(Vec::new()));

    // The printer is busy while the jobs arrive.
    let busy = printer.lock().await?;
    let mut jobs = Vec::new();
    for job in 0..9 {
        let service = job % 3;
        let handle = services[service].fair_lock("printer");
        let printed = printed.clone();
        jobs.push(tokio::spawn(async move {
            // Waits in the queue; nobody who arrived later gets in first.
            handle
                .with(|_lease| async move {
                    tokio::time::sleep(Duration::from_millis(20)).await; // printing
                    printed
                        .lock()
                        .unwrap()
                        .push(format!("job {job} (service {service})"));
                })
                .await
        }));
        // The next job arrives once this one has its place in the queue.
        while waiting(&services[0], &printer).await? < job as i64 + 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    println!("9 jobs queued; the printer is free now");
    busy.unlock().await?;
    for job in jobs {
        job.await??;
    }

    let printed = printed.lock().unwrap().clone();
    for line in &printed {
        println!("printed {line}");
    }
    let expected: Vec<String> = (0..9)
        .map(|job| format!("job {job} (service {})", job % 3))
        .collect();
    assert_eq!(printed, expected, "printed out of arrival order");
    println!("every job printed in arrival order");
    for service in services {
        service.shutdown().await?;
    }
    Ok(())
}

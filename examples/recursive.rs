//! Recursive async code taking the same lock at every level.
//!
//! A tree of categories is re-priced top-down; each call locks the whole
//! catalogue, so a caller can re-price one subtree on its own or the whole
//! tree, and the lock is simply re-entered on the way down. Another task
//! trying the same lock meanwhile is kept out until the outermost hold is
//! released.
//!
//! ```text
//! cargo run --example recursive
//! ```
//!
//! With no `REDIS_URL`, a private `redis-server` is started on a free
//! loopback port and stopped at exit.

use leasehold_testkit::server;

use std::future::Future;
use std::pin::Pin;

use leasehold::{Lock, Result};

/// Re-prices `depth` levels of categories under `lock`, re-entering it at
/// each level. Returns the deepest hold count seen.
fn reprice(lock: Lock, depth: u32) -> Pin<Box<dyn Future<Output = Result<u32>> + Send>> {
    Box::pin(async move {
        let guard = lock.lock().await?;
        let holds = lock.hold_count().await?;
        let indent = (10 - depth as usize) * 2;
        println!("{:indent$}level {depth}: {holds} hold(s)", "");
        let deepest = if depth > 1 {
            reprice(lock.clone(), depth - 1).await?
        } else {
            holds
        };
        guard.unlock().await?;
        Ok(deepest)
    })
}

#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (_server, url) = match std::env::var("REDIS_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let server = server::RedisServer::start();
            let url = server.url();
            (Some(server), url)
        }
    };
    let client = leasehold::Client::connect(&url).await?;
    let lock = client.lock("catalogue");

    // Hold the lock before the outsider starts, so it has to wait.
    let top = lock.lock().await?;
    let outsider = {
        let lock = lock.clone();
        tokio::spawn(async move {
            // Another task: waits until the recursion has fully unwound.
            let guard = lock.lock().await?;
            println!("outsider: got the lock after the recursion released it");
            guard.unlock().await
        })
    };
    let deepest = reprice(lock.clone(), 10).await?;
    top.unlock().await?;
    outsider.await??;
    println!(
        "deepest hold count: {deepest}; locked now: {}",
        lock.is_locked().await?
    );
    client.shutdown().await?;
    Ok(())
}

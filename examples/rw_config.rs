//! Many readers of a shared configuration, one writer updating it, under a
//! leasehold read-write lock.
//!
//! The configuration is two plain keys, a version and a body naming that
//! version, written one after the other: only the lock keeps a reader from
//! seeing a new version with an old body. 12 reader tasks on 3 clients
//! read it in a loop under the read lock (many at once); one writer on its
//! own client publishes 10 new versions under the write lock.
//!
//! ```text
//! cargo run --example rw_config
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example rw_config
//! ```
//!
//! With no `REDIS_URL`, a private `redis-server` is started on a free
//! loopback port and stopped at exit. The exit code is non-zero if a
//! reader ever saw a half-written configuration.

use leasehold_testkit::server;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::fred::interfaces::KeysInterface;
use leasehold::{Client, ReadWriteLock};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const LOCK: &str = "rw_config:lock";
const VERSION: &str = "rw_config:version";
const BODY: &str = "rw_config:body";
const CLIENTS: usize = 3;
const READERS: usize = 12;
const VERSIONS: u64 = 10;

/// What the readers saw.
#[derive(Default)]
struct Seen {
    reads: AtomicU64,
    torn: AtomicU64,
    /// Readers holding the read lock right now, and the most at once.
    inside: AtomicUsize,
    most_inside: AtomicUsize,
    newest: AtomicU64,
}

/// Reads the configuration under the read lock until `done`.
async fn reader(client: Client, seen: Arc<Seen>, done: Arc<AtomicBool>) -> Result<(), BoxError> {
    let rw: ReadWriteLock = client.read_write_lock(LOCK);
    let redis = client.redis();
    while !done.load(Ordering::Relaxed) {
        let guard = rw.read().lock().await?;
        let now = seen.inside.fetch_add(1, Ordering::SeqCst) + 1;
        seen.most_inside.fetch_max(now, Ordering::SeqCst);
        let version: Option<u64> = redis.get(VERSION).await?;
        tokio::time::sleep(Duration::from_millis(3)).await; // parse, use …
        let body: Option<String> = redis.get(BODY).await?;
        seen.inside.fetch_sub(1, Ordering::SeqCst);
        guard.unlock().await?;
        let version = version.unwrap_or(0);
        if body.unwrap_or_default() != body_of(version) {
            seen.torn.fetch_add(1, Ordering::Relaxed);
        }
        seen.reads.fetch_add(1, Ordering::Relaxed);
        seen.newest.fetch_max(version, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// Publishes versions 1..=VERSIONS under the write lock; returns how long
/// each write lock took to get.
async fn writer(client: Client) -> Result<Vec<Duration>, BoxError> {
    let rw = client.read_write_lock(LOCK);
    let redis = client.redis();
    let mut waits = Vec::new();
    for version in 1..=VERSIONS {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let asked = Instant::now();
        let guard = rw.write().lock().await?;
        waits.push(asked.elapsed());
        let () = redis.set(VERSION, version, None, None, false).await?;
        tokio::time::sleep(Duration::from_millis(5)).await; // a slow writer
        let () = redis.set(BODY, body_of(version), None, None, false).await?;
        guard.unlock().await?;
        println!("writer: published version {version}");
    }
    Ok(waits)
}

fn body_of(version: u64) -> String {
    format!("settings of version {version}")
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let (_server, url) = match std::env::var("REDIS_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let server = server::RedisServer::start();
            let url = server.url();
            (Some(server), url)
        }
    };
    let mut clients = Vec::new();
    for _ in 0..=CLIENTS {
        clients.push(Client::connect(&url).await?);
    }
    let redis = clients[0].redis().clone();
    let () = redis.set(VERSION, 0, None, None, false).await?;
    let () = redis.set(BODY, body_of(0), None, None, false).await?;

    let seen = Arc::new(Seen::default());
    let done = Arc::new(AtomicBool::new(false));
    let mut readers = tokio::task::JoinSet::new();
    for i in 0..READERS {
        readers.spawn(reader(
            clients[i % CLIENTS].clone(),
            seen.clone(),
            done.clone(),
        ));
    }
    let started = Instant::now();
    let waits = writer(clients[CLIENTS].clone()).await?;
    done.store(true, Ordering::Relaxed);
    while let Some(finished) = readers.join_next().await {
        finished??;
    }

    let longest = waits.iter().max().copied().unwrap_or_default();
    let average = waits.iter().sum::<Duration>() / waits.len().max(1) as u32;
    println!(
        "{} reads by {READERS} readers on {CLIENTS} clients in {:.1?}; up to {} readers inside at once",
        seen.reads.load(Ordering::Relaxed),
        started.elapsed(),
        seen.most_inside.load(Ordering::SeqCst),
    );
    println!(
        "the writer published {VERSIONS} versions; newest seen by a reader: {}",
        seen.newest.load(Ordering::Relaxed)
    );
    println!("write lock waits: average {average:.1?}, longest {longest:.1?}");
    let torn = seen.torn.load(Ordering::Relaxed);
    println!("half-written configurations seen: {torn}");
    for client in &clients {
        client.shutdown().await?;
    }
    if torn > 0 {
        return Err(format!("{torn} readers saw a half-written configuration").into());
    }
    Ok(())
}

//! The blocking API: a synchronous program sharing one lock between
//! threads, re-entering it, and running work with `Lock::with`.
//!
//! ```text
//! cargo run --example blocking --features blocking
//! ```
//!
//! With no `REDIS_URL`, a private `redis-server` is started on a free
//! loopback port and stopped at exit. There is no async runtime in this
//! program: `leasehold::blocking::Client` owns a small one.

use leasehold_testkit::server;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::blocking::{Client, Lock};

/// Appends `line` to the shared ledger; re-enters the lock its caller
/// holds (the same thread is the same owner).
fn record(lock: &Lock, ledger: &Mutex<Vec<String>>, line: String) -> leasehold::Result<()> {
    let guard = lock.lock()?;
    ledger.lock().unwrap().push(line);
    guard.unlock()
}

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (_server, url) = match std::env::var("REDIS_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let server = server::RedisServer::start();
            let url = server.url();
            (Some(server), url)
        }
    };
    let client = Client::connect(&url)?;
    let ledger = Arc::new(Mutex::new(Vec::new()));

    // Four threads, one lock: each thread is its own owner, so they take
    // turns; inside, `record` re-enters the lock the thread holds.
    let workers: Vec<_> = (0..4)
        .map(|worker| {
            let lock = client.lock("ledger");
            let ledger = ledger.clone();
            std::thread::spawn(move || -> leasehold::Result<()> {
                for entry in 0..3 {
                    let guard = lock.lock()?;
                    assert_eq!(lock.hold_count()?, 1);
                    record(&lock, &ledger, format!("worker {worker}, entry {entry}"))?;
                    std::thread::sleep(Duration::from_millis(5));
                    guard.unlock()?;
                }
                Ok(())
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker panicked")?;
    }
    println!(
        "{} entries written by 4 threads",
        ledger.lock().unwrap().len()
    );

    // `with`: lock, run the closure on this thread, unlock.
    let lock = client.lock("ledger");
    let total = lock.with(|lease| {
        assert!(!lease.is_lost());
        ledger.lock().unwrap().len()
    })?;
    println!(
        "counted {total} entries under the lock; locked now: {}",
        lock.is_locked()?
    );

    // Who holds it, for operators.
    let guard = lock.lock()?;
    for h in lock.holders()? {
        println!(
            "holder: client {:?}, owner {:?}, {} hold(s), {:?} left",
            h.client, h.owner, h.holds, h.remaining_lease
        );
    }
    guard.unlock()?;
    client.shutdown()?;
    Ok(())
}

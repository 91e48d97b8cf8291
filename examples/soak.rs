//! A bounded soak: many tasks on a few hot locks, through direct and
//! proxied clients, with random cancellations and periodic connection cuts.
//!
//! Each critical section reads a counter with GET and writes it back plus
//! one with SET, so only the lock keeps the count right. At the end every
//! counter must equal the number of critical sections that completed under
//! its lock, no two tasks may have been inside one lock at once, and Redis
//! must hold no lock key. The exit code is non-zero otherwise.
//!
//! ```text
//! cargo run --example soak                    # ~60 s
//! cargo run --example soak -- --seconds 10
//! ```
//!
//! A private `redis-server` is started on a free loopback port; half the
//! clients reach it through a loopback TCP proxy whose connections are all
//! cut every couple of seconds. Counters are read and written on a direct
//! connection, so a cut never leaves a write's outcome unknown.

use leasehold_testkit::proxy;
use leasehold_testkit::server;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold::fred::interfaces::KeysInterface;
use leasehold::Client;
use tokio::time::{timeout, Instant};

use proxy::Proxy;
use server::RedisServer;

const LOCKS: usize = 4;
const CLIENTS: usize = 4; // even: direct, odd: through the proxy
const TASKS: usize = 32;
/// Longest wait for one `lock()` before it is cancelled.
const MAX_WAIT_MS: u64 = 300;
/// Bound on an unlock or a counter command (catches hangs).
const OP_LIMIT: Duration = Duration::from_secs(20);

/// A small xorshift64* generator; std only.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Per-lock tallies.
#[derive(Default)]
struct Tally {
    /// Critical sections completed (GET and SET both done under the lock).
    done: AtomicU64,
    /// `lock()` calls cancelled by their timeout.
    cancelled: AtomicU64,
    /// `lock()` calls that returned an error.
    lock_errors: AtomicU64,
    /// Critical sections whose guard reported the lease lost.
    lost: AtomicU64,
    /// Unlocks that returned an error.
    unlock_errors: AtomicU64,
    /// Times a task entered while another was inside.
    overlaps: AtomicU64,
    /// Whether a task is inside right now.
    inside: AtomicBool,
    /// When the last section completed (ms since the start).
    last_done_ms: AtomicU64,
    /// Longest time with no completed section (ms).
    max_gap_ms: AtomicU64,
}

fn parse_seconds() -> u64 {
    let args: Vec<String> = std::env::args().collect();
    let mut seconds = 60;
    let mut i = 1;
    while i < args.len() {
        match args[i].as_str() {
            "--seconds" => {
                seconds = args
                    .get(i + 1)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_else(|| {
                        eprintln!("--seconds needs a whole number");
                        std::process::exit(2);
                    });
                i += 2;
            }
            other => {
                eprintln!("unknown argument {other:?}; usage: soak [--seconds N]");
                std::process::exit(2);
            }
        }
    }
    seconds.max(1)
}

fn main() {
    let seconds = parse_seconds();
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let ok = rt.block_on(soak(&server, Duration::from_secs(seconds)));
    rt.shutdown_timeout(Duration::from_secs(5));
    drop(server);
    if !ok {
        std::process::exit(1);
    }
}

async fn soak(server: &RedisServer, run_for: Duration) -> bool {
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x9E37_79B9_7F4A_7C15);
    println!(
        "soak: {run_for:?}, seed {seed:#x}, redis at {}",
        server.url()
    );
    let proxy = Proxy::start(&server.addr()).await;
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        let url = if i % 2 == 0 {
            server.url()
        } else {
            proxy.url()
        };
        let c = Client::builder()
            .url(&url)
            .watchdog_timeout(Duration::from_secs(3))
            .command_timeout(Duration::from_secs(2))
            .build()
            .await
            .expect("connect");
        clients.push(c);
    }
    let data = Client::connect(&server.url()).await.expect("connect");
    for l in 0..LOCKS {
        let _: () = data
            .redis()
            .set(format!("soak:counter:{l}"), 0, None, None, false)
            .await
            .expect("reset counter");
    }
    let tallies: Arc<Vec<Tally>> = Arc::new((0..LOCKS).map(|_| Tally::default()).collect());
    let started = Instant::now();
    let deadline = started + run_for;

    let cutter = {
        let mut rng = Rng::new(seed ^ 0x00C0_FFEE);
        let proxy = &proxy;
        async move {
            let mut cuts = 0u64;
            loop {
                let pause = Duration::from_millis(1500 + rng.below(1500));
                if Instant::now() + pause >= deadline {
                    return cuts;
                }
                tokio::time::sleep(pause).await;
                proxy.cut_all();
                cuts += 1;
            }
        }
    };

    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let clients = clients.clone();
        let data = data.redis().clone();
        let tallies = tallies.clone();
        let mut rng = Rng::new(seed.wrapping_add((t as u64 + 1) * 0x9E37_79B9));
        tasks.push(tokio::spawn(async move {
            let mut hangs = Vec::new();
            while Instant::now() < deadline {
                let l = rng.below(LOCKS as u64) as usize;
                let c = &clients[rng.below(CLIENTS as u64) as usize];
                let tally = &tallies[l];
                let lock = c.lock(&format!("soak:lock:{l}"));
                let wait = Duration::from_millis(1 + rng.below(MAX_WAIT_MS));
                let guard = match timeout(wait, lock.lock()).await {
                    Err(_) => {
                        tally.cancelled.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    Ok(Err(_)) => {
                        tally.lock_errors.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                    Ok(Ok(g)) => g,
                };
                if tally.inside.swap(true, Ordering::AcqRel) {
                    tally.overlaps.fetch_add(1, Ordering::Relaxed);
                }
                let key = format!("soak:counter:{l}");
                let section = async {
                    let v: i64 = data.get(&key).await?;
                    if rng.below(4) == 0 {
                        tokio::time::sleep(Duration::from_millis(rng.below(5))).await;
                    }
                    data.set::<(), _, _>(&key, v + 1, None, None, false).await
                };
                match timeout(OP_LIMIT, section).await {
                    Ok(Ok(())) => {
                        tally.done.fetch_add(1, Ordering::Relaxed);
                        let now = started.elapsed().as_millis() as u64;
                        let last = tally.last_done_ms.swap(now, Ordering::Relaxed);
                        tally
                            .max_gap_ms
                            .fetch_max(now.saturating_sub(last), Ordering::Relaxed);
                    }
                    Ok(Err(e)) => hangs.push(format!("counter command failed: {e}")),
                    Err(_) => hangs.push("counter command hung".to_owned()),
                }
                if guard.is_lost() {
                    tally.lost.fetch_add(1, Ordering::Relaxed);
                    println!(
                        "{:?}: soak:lock:{l}: guard reported lost inside the critical section",
                        started.elapsed()
                    );
                }
                tally.inside.store(false, Ordering::Release);
                match timeout(OP_LIMIT, guard.unlock()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => {
                        tally.unlock_errors.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => hangs.push("unlock hung".to_owned()),
                }
            }
            hangs
        }));
    }

    let cuts = cutter.await;
    let mut problems = Vec::new();
    for (t, task) in tasks.into_iter().enumerate() {
        match timeout(Duration::from_secs(60), task).await {
            Ok(Ok(hangs)) => problems.extend(hangs.into_iter().map(|h| format!("task {t}: {h}"))),
            Ok(Err(e)) => problems.push(format!("task {t} panicked: {e}")),
            Err(_) => problems.push(format!("task {t} did not stop")),
        }
    }
    for c in &clients {
        if let Err(e) = timeout(OP_LIMIT, c.shutdown()).await.unwrap_or(Ok(())) {
            println!("shutdown: {e}");
        }
    }

    // Locks left behind by an unlock whose outcome was unknown expire with
    // their lease (3 s): give them a bounded time.
    let keys_deadline = Instant::now() + Duration::from_secs(15);
    let leftover = loop {
        let leftover = server
            .cmd(&["KEYS", "soak:lock:*"])
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect::<Vec<_>>();
        if leftover.is_empty() || Instant::now() >= keys_deadline {
            break leftover;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    println!();
    println!("| lock | sections | counter | cancelled | lock errors | lost | unlock errors | overlaps | longest gap |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let mut total = 0;
    for (l, tally) in tallies.iter().enumerate() {
        let counter: i64 = server
            .cmd(&["GET", &format!("soak:counter:{l}")])
            .parse()
            .unwrap_or(-1);
        let done = tally.done.load(Ordering::Relaxed);
        let overlaps = tally.overlaps.load(Ordering::Relaxed);
        total += done;
        println!(
            "| soak:lock:{l} | {done} | {counter} | {} | {} | {} | {} | {overlaps} | {} ms |",
            tally.cancelled.load(Ordering::Relaxed),
            tally.lock_errors.load(Ordering::Relaxed),
            tally.lost.load(Ordering::Relaxed),
            tally.unlock_errors.load(Ordering::Relaxed),
            tally.max_gap_ms.load(Ordering::Relaxed),
        );
        if counter != done as i64 {
            problems.push(format!(
                "soak:counter:{l} is {counter}, {done} sections completed"
            ));
        }
        if overlaps > 0 {
            problems.push(format!("soak:lock:{l}: {overlaps} overlapping holders"));
        }
    }
    println!("| total | {total} | | | | | | | |");
    println!("proxy cuts: {cuts}");
    if !leftover.is_empty() {
        problems.push(format!("lock keys left in Redis: {leftover:?}"));
    }
    let _ = data.shutdown().await;
    if total == 0 {
        problems.push("no critical section completed".to_owned());
    }
    if problems.is_empty() {
        println!("soak: OK");
        true
    } else {
        for p in &problems {
            println!("soak: FAIL: {p}");
        }
        false
    }
}

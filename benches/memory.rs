//! Process memory per held lock and per waiting task, against a real
//! loopback `redis-server` started here.
//!
//! A counting global allocator (a wrapper around `System`) gives the bytes
//! allocated and still live; RSS (`/proc/self/statm`) is shown beside it.
//! Each figure is a delta over N = 20,000 items, divided by N:
//!
//! * held lock: N guards from `lock()` on distinct names, kept in a `Vec`
//!   (the `Vec`'s own buffer is subtracted: it is the caller's container,
//!   while the guard's inline size is counted);
//! * waiting task: N spawned tasks blocked in `lock()` on one held lock; the
//!   cost of N tasks blocked on `std::future::pending()` is shown and
//!   subtracted, leaving what the wait itself adds;
//! * after release (or cancelling the waiters) the live bytes must come
//!   back: the remainder is printed as "retained".
//!
//! `cargo bench --bench memory`. Not a criterion bench (one-shot).

use leasehold_testkit::server;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leasehold::{Client, LockGuard};
use server::RedisServer;

/// Live heap bytes, counted around the system allocator.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
/// Allocation calls (alloc, alloc_zeroed, realloc) and bytes they asked for.
static ALLOCS: AtomicUsize = AtomicUsize::new(0);
static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

/// Counts one allocation call of `size` bytes (live, calls, bytes asked).
fn counted(size: usize) {
    LIVE.fetch_add(size, Ordering::Relaxed);
    ALLOCS.fetch_add(1, Ordering::Relaxed);
    ALLOCATED.fetch_add(size, Ordering::Relaxed);
}

// SAFETY: forwards to `System` unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            counted(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            counted(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            counted(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const N: usize = 20_000;
const ACQUIRERS: usize = 64;

fn live() -> i64 {
    LIVE.load(Ordering::Relaxed) as i64
}

fn rss() -> i64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: i64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Lets background tasks (releases, unsubscribes) finish.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// Waits until N more busy attempts were counted and none for a second
/// (each waiter tries once or twice, then parks); returns how long it took.
async fn park_all(client: &Client, busy_before: u64) -> Duration {
    let start = std::time::Instant::now();
    let (mut last, mut quiet) = (0, 0);
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let busy = client.stats().busy_attempts - busy_before;
        if busy >= N as u64 && busy == last {
            quiet += 1;
            if quiet == 10 {
                return start.elapsed();
            }
        } else {
            quiet = 0;
        }
        last = busy;
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "waiters never parked: {busy} busy attempts"
        );
    }
}

/// Allocation calls and bytes allocated so far.
fn allocated() -> (usize, usize) {
    (
        ALLOCS.load(Ordering::Relaxed),
        ALLOCATED.load(Ordering::Relaxed),
    )
}

/// Heap allocations and bytes allocated per uncontended `lock()` +
/// `unlock()` on one `Lock` handle (one task; the whole process counts, so
/// fred's and tokio's allocations for the two calls are included).
async fn allocations_per_pair(client: &Client) -> (f64, f64) {
    const PAIRS: usize = 10_000;
    let lock = client.lock("alloc:pair");
    let (a0, b0) = allocated();
    for _ in 0..PAIRS {
        let g = lock.lock().await.expect("lock");
        g.unlock().await.expect("unlock");
    }
    let (a1, b1) = allocated();
    (
        (a1 - a0) as f64 / PAIRS as f64,
        (b1 - b0) as f64 / PAIRS as f64,
    )
}

/// Heap allocations per `client.lock(name)` handle made and dropped,
/// without a call (the pattern `client.lock(&name).lock()` pays it per
/// acquire). The name is formatted before counting.
fn allocations_per_handle(client: &Client) -> f64 {
    const HANDLES: usize = 10_000;
    let names: Vec<String> = (0..HANDLES).map(|i| format!("alloc:handle:{i}")).collect();
    let (a0, _) = allocated();
    for name in &names {
        std::hint::black_box(client.lock(name));
    }
    let (a1, _) = allocated();
    (a1 - a0) as f64 / HANDLES as f64
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run());
}

async fn run() {
    let server = RedisServer::start();
    // default 30 s watchdog: no renewal runs during the measurement
    let client = Client::connect(&server.url()).await.expect("connect");
    // warm-up: scripts, connections, the watchdog task, the release task
    for i in 0..100 {
        let g = client
            .lock(&format!("warm:{i}"))
            .lock()
            .await
            .expect("lock");
        g.unlock().await.expect("unlock");
    }
    settle().await;
    let (allocs, bytes) = allocations_per_pair(&client).await;
    settle().await;

    println!("| item (N = {N}) | live heap bytes / item | RSS bytes / item | retained after release, bytes total |");
    println!("| --- | ---: | ---: | ---: |");

    // --- held locks, twice: what the first round leaves behind is capacity
    //     (maps keep their size) if the second round does not add to it
    let (live0, rss0) = (live(), rss());
    let (mut per_lock, mut rss_per_lock) = (0.0, 0.0);
    let mut retained = Vec::new();
    for round in 0..2 {
        let (live_a, rss_a) = (live(), rss());
        let (held, container) = hold_all(&client, round).await;
        settle().await;
        let (live_b, rss_b) = (live(), rss());
        if round == 0 {
            per_lock = (live_b - live_a - container) as f64 / N as f64;
            rss_per_lock = (rss_b - rss_a) as f64 / N as f64;
        }
        assert_eq!(client.watchdog().lease_count(), N);
        for g in held {
            g.unlock().await.expect("unlock");
        }
        settle().await;
        retained.push(live() - live0);
    }
    let _ = rss0;
    println!(
        "| held lock (`lock()`, watchdog lease; guard = {} B inline) | {per_lock:.0} | {rss_per_lock:.0} | {} after round 1, {} after round 2 |",
        std::mem::size_of::<LockGuard>(),
        retained[0],
        retained[1]
    );

    // --- baseline: N tasks parked on a pending future
    let (live2, rss2) = (live(), rss());
    let mut parked = tokio::task::JoinSet::new();
    for _ in 0..N {
        parked.spawn(std::future::pending::<()>());
    }
    settle().await;
    let (live3, rss3) = (live(), rss());
    let per_parked = (live3 - live2) as f64 / N as f64;
    let rss_per_parked = (rss3 - rss2) as f64 / N as f64;
    parked.abort_all();
    while parked.join_next().await.is_some() {}
    settle().await;

    // --- waiting tasks: N tasks in lock() on one held lock, twice: what
    //     the first round leaves behind is capacity if the second round
    //     does not add to it
    let lock = client.lock("busy");
    let future_size = std::mem::size_of_val(&lock.lock());
    let fair_future_size = std::mem::size_of_val(&client.fair_lock("busy").lock());
    settle().await;
    let live4 = live();
    let mut retained_waiters = Vec::new();
    let (mut per_waiter, mut rss_per_waiter, mut channels) = (0.0, 0.0, 0);
    for round in 0..2 {
        let holder = client.lock("busy").lock().await.expect("lock");
        settle().await;
        let (live_before, rss_before) = (live(), rss());
        let busy_before = client.stats().busy_attempts;
        let mut waiters = tokio::task::JoinSet::new();
        for _ in 0..N {
            let lock = lock.clone();
            waiters.spawn(async move {
                let g = lock.lock().await.expect("lock");
                g.unlock().await.expect("unlock");
            });
        }
        // every waiter has run its attempts and is parked: at least N busy
        // attempts more, then no attempt for a second
        let parked = park_all(&client, busy_before).await;
        if round == 0 {
            let (live5, rss5) = (live(), rss());
            per_waiter = (live5 - live_before) as f64 / N as f64;
            rss_per_waiter = (rss5 - rss_before) as f64 / N as f64;
            channels = client.subscribed_channels();
            eprintln!("round 1: waiters parked after {parked:?}");
        }
        waiters.abort_all();
        while waiters.join_next().await.is_some() {}
        holder.unlock().await.expect("unlock");
        settle().await;
        retained_waiters.push(live() - live4);
    }
    let retained_waiters = format!(
        "{} after round 1, {} after round 2",
        retained_waiters[0], retained_waiters[1]
    );
    println!(
        "| waiting task, total (spawned task in `lock()`; the `lock()` future is {future_size} B) | {per_waiter:.0} | {rss_per_waiter:.0} | {retained_waiters} |"
    );
    println!(
        "| of which a bare tokio task parked on `pending()` | {per_parked:.0} | {rss_per_parked:.0} | |"
    );
    println!(
        "| **waiting task, leasehold's share** (total − bare task) | **{:.0}** | {:.0} | |",
        per_waiter - per_parked,
        rss_per_waiter - rss_per_parked
    );
    println!("| **held lock** | **{per_lock:.0}** | {rss_per_lock:.0} | |");
    println!();
    println!("subscribed channels while the {N} tasks waited: {channels}");
    println!();
    println!("a `FairLock::lock()` future (a fair waiter's task carries it inline): {fair_future_size} B");
    println!();
    println!("uncontended lock() + unlock(), one task, one handle: {allocs:.1} heap allocations and {bytes:.0} bytes allocated per pair");
    println!();
    println!(
        "a `client.lock(name)` handle, made and dropped: {:.1} heap allocations",
        allocations_per_handle(&client)
    );
    client.shutdown().await.expect("shutdown");
}

/// Holds N locks (distinct names), taken by 64 tasks; returns the guards and
/// the size of the `Vec` buffer holding them.
async fn hold_all(client: &Client, round: usize) -> (Vec<LockGuard>, i64) {
    let mut guards: Vec<LockGuard> = Vec::with_capacity(N);
    let container = (guards.capacity() * std::mem::size_of::<LockGuard>()) as i64;
    let mut set = tokio::task::JoinSet::new();
    for t in 0..ACQUIRERS {
        let client = client.clone();
        set.spawn(async move {
            let mut mine = Vec::with_capacity(N / ACQUIRERS + 1);
            for i in (t..N).step_by(ACQUIRERS) {
                mine.push(
                    client
                        .lock(&format!("held:{round}:{i}"))
                        .lock()
                        .await
                        .expect("lock"),
                );
            }
            mine
        });
    }
    while let Some(mine) = set.join_next().await {
        guards.extend(mine.expect("acquirer"));
    }
    // the per-task Vecs are gone; the result Vec is the caller's container
    (guards, container)
}

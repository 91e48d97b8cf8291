//! The blocking API (`--features blocking`): exclusion across threads and
//! across processes, reentrancy on one thread, threads as owners, guards
//! released from any thread, calls refused inside a tokio runtime, and
//! what operators see of blocking clients (records, deadlocks).
//!
//! `cargo test --features blocking --test blocking`
#![cfg(feature = "blocking")]

use leasehold_testkit as support;

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::blocking::Client;
use leasehold::{Error, Owner};
use support::RedisServer;

const CHILD_URL: &str = "LEASEHOLD_BLOCKING_URL";
const CHILD_FILE: &str = "LEASEHOLD_BLOCKING_FILE";
/// Increments each child process makes.
const CHILD_ROUNDS: u64 = 25;
/// Bounds that only catch hangs.
const HANG: Duration = Duration::from_secs(30);

fn exists(server: &RedisServer, key: &str) -> bool {
    server.cmd(&["EXISTS", key]) == "1"
}

/// Polls `check` until it holds; panics after `limit` (catches hangs).
fn eventually(limit: Duration, what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Two threads of clients `a` and `b` cross: one takes `x` then waits for
/// `y`, the other `y` then `x` (both take their first lock before either
/// waits). Each returns whether it got its second lock (`false` only if
/// the wait ran out: a hang).
fn abba(
    a: &Client,
    b: &Client,
    x: &'static str,
    y: &'static str,
) -> [std::thread::JoinHandle<leasehold::Result<bool>>; 2] {
    let barrier = Arc::new(std::sync::Barrier::new(2));
    let cross = |c: &Client, first: &'static str, second: &'static str| {
        let (c, barrier) = (c.clone(), barrier.clone());
        std::thread::spawn(move || {
            let _first = c.lock(first).lock().expect("the first lock is free");
            barrier.wait();
            Ok(c.lock(second).try_lock_for(HANG)?.is_some())
        })
    };
    [cross(a, x, y), cross(b, y, x)]
}

/// 8 threads make 40 read-yield-write increments each of a plain counter
/// under one lock: the count is exact and no two threads are ever inside
/// at once.
#[test]
fn threads_exclude_each_other() {
    const THREADS: u64 = 8;
    const ROUNDS: u64 = 40;
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).unwrap();
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let lock = client.lock("threads");
            let (counter, inside) = (counter.clone(), inside.clone());
            std::thread::spawn(move || {
                for _ in 0..ROUNDS {
                    let guard = lock.lock().unwrap();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two threads inside");
                    // Not an atomic increment: a race would lose updates.
                    let seen = counter.load(Ordering::SeqCst);
                    std::thread::yield_now();
                    counter.store(seen + 1, Ordering::SeqCst);
                    inside.store(false, Ordering::SeqCst);
                    guard.unlock().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(counter.load(Ordering::SeqCst), THREADS * ROUNDS);
    assert!(!exists(&server, "threads"));
    let stats = client.stats();
    assert_eq!(stats.acquisitions, THREADS * ROUNDS);
    assert_eq!(stats.releases, THREADS * ROUNDS);
    client.shutdown().unwrap();
}

/// Not a test: a child process of `processes_exclude_each_other`. Makes
/// `CHILD_ROUNDS` read-sleep-write increments of a counter in a file,
/// each under the lock.
#[test]
#[ignore = "child process of processes_exclude_each_other"]
fn child_increments_under_the_lock() {
    let (Ok(url), Ok(file)) = (std::env::var(CHILD_URL), std::env::var(CHILD_FILE)) else {
        return;
    };
    let client = Client::connect(&url).unwrap();
    let lock = client.lock("processes");
    for _ in 0..CHILD_ROUNDS {
        lock.with(|lease| {
            let seen: u64 = std::fs::read_to_string(&file)
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            std::thread::sleep(Duration::from_millis(1));
            assert!(!lease.is_lost());
            std::fs::write(&file, (seen + 1).to_string()).unwrap();
        })
        .unwrap();
    }
    client.shutdown().unwrap();
}

/// 4 processes (this binary, re-executed) increment one file counter
/// under one lock: no increment is lost.
#[test]
fn processes_exclude_each_other() {
    const PROCESSES: u64 = 4;
    let server = RedisServer::start();
    let file = server.dir().join("counter");
    std::fs::write(&file, "0").unwrap();
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "child_increments_under_the_lock",
                    "--ignored",
                    "--quiet",
                ])
                .env(CHILD_URL, server.url())
                .env(CHILD_FILE, &file)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("re-exec the test binary")
        })
        .collect();
    for mut child in children {
        let status = child.wait().unwrap();
        assert!(status.success(), "child failed: {status}");
    }
    let count: u64 = std::fs::read_to_string(&file).unwrap().parse().unwrap();
    assert_eq!(count, PROCESSES * CHILD_ROUNDS, "increments were lost");
    assert!(!exists(&server, "processes"));
}

/// One thread re-enters the lock it holds; another thread is another
/// owner and is kept out; a guard moved to another thread releases there.
#[test]
fn a_thread_reenters_and_other_threads_wait() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).unwrap();
    let lock = client.lock("reentrant");
    let outer = lock.lock().unwrap();
    let inner = lock.try_lock().unwrap().expect("same thread: re-enters");
    assert_eq!(lock.hold_count().unwrap(), 2);
    assert!(lock.is_held_by_current_thread().unwrap());
    assert_eq!(outer.owner(), Owner::current());
    assert_eq!(inner.owner(), outer.owner());

    let other = std::thread::spawn({
        let lock = lock.clone();
        move || {
            assert_eq!(lock.hold_count().unwrap(), 0);
            assert!(!lock.is_held_by_current_thread().unwrap());
            assert!(lock
                .try_lock_for(Duration::from_millis(300))
                .unwrap()
                .is_none());
            Owner::current()
        }
    })
    .join()
    .unwrap();
    assert_ne!(other, outer.owner(), "two threads, one owner");

    // Holds move between threads with their owner.
    std::thread::spawn(move || inner.unlock().unwrap())
        .join()
        .unwrap();
    assert_eq!(lock.hold_count().unwrap(), 1);
    std::thread::spawn(move || drop(outer)).join().unwrap();
    eventually(Duration::from_secs(10), "dropped on another thread", || {
        !exists(&server, "reentrant")
    });

    // Now another thread gets it at once.
    let taken = std::thread::spawn({
        let lock = lock.clone();
        move || {
            let g = lock.try_lock().unwrap().expect("free");
            let owner = g.owner();
            g.unlock().unwrap();
            owner
        }
    })
    .join()
    .unwrap();
    assert_ne!(taken, Owner::current(), "another thread, another owner");
    client.shutdown().unwrap();
}

/// A blocking guard's watchdog lease is renewed while held, and `with`
/// returns the closure's output and unlocks.
#[test]
fn leases_are_renewed_and_with_unlocks() {
    let server = RedisServer::start();
    let client = leasehold::Client::builder()
        .url(&server.url())
        .watchdog_timeout(Duration::from_secs(1))
        .build_blocking()
        .unwrap();
    let lock = client.lock("renewed");
    let guard = lock.lock().unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    assert!(exists(&server, "renewed"), "the lease expired while held");
    assert!(!guard.is_lost());
    guard.unlock().unwrap();

    let mut fixed = lock.lock_with_lease(Duration::from_millis(300)).unwrap();
    fixed.extend(Duration::from_secs(5)).unwrap();
    std::thread::sleep(Duration::from_millis(600));
    assert!(!fixed.is_lost() && exists(&server, "renewed"));
    fixed.unlock().unwrap();

    let out = lock
        .with(|lease| {
            assert!(!lease.is_lost());
            assert_eq!(lock.hold_count().unwrap(), 1);
            "done"
        })
        .unwrap();
    assert_eq!(out, "done");
    assert!(!exists(&server, "renewed"));
    assert_eq!(lock.holders().unwrap(), vec![]);
    client.shutdown().unwrap();
    assert!(client.is_shut_down());
    assert!(matches!(lock.lock(), Err(Error::Shutdown)));
}

/// Blocking calls made inside a tokio runtime (a task, `block_on`,
/// `spawn_blocking`) return `InvalidArgument` at once — no panic, no
/// deadlock, nothing sent — and a blocking guard dropped there still
/// releases.
#[test]
fn calls_inside_a_tokio_runtime_are_refused() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).unwrap();
    let lock = client.lock("inside");
    let guard = lock.lock().unwrap();
    let url = server.url();

    let rt = tokio::runtime::Runtime::new().unwrap();
    let (in_task, in_block_on, in_blocking, connect) = rt.block_on(async {
        let lock2 = lock.clone();
        let in_task = tokio::spawn(async move { lock2.try_lock().map(|g| g.is_some()) })
            .await
            .unwrap();
        let in_block_on = lock.is_locked();
        let lock3 = lock.clone();
        let in_blocking = tokio::task::spawn_blocking(move || lock3.lock().map(|_| ()))
            .await
            .unwrap();
        let connect = Client::connect(&url).map(|_| ());
        (in_task, in_block_on, in_blocking, connect)
    });
    assert!(
        matches!(in_task, Err(Error::InvalidArgument(_))),
        "{in_task:?}"
    );
    assert!(
        matches!(in_block_on, Err(Error::InvalidArgument(_))),
        "{in_block_on:?}"
    );
    assert!(
        matches!(in_blocking, Err(Error::InvalidArgument(_))),
        "{in_blocking:?}"
    );
    assert!(
        matches!(connect, Err(Error::InvalidArgument(_))),
        "{connect:?}"
    );
    assert_eq!(
        lock.hold_count().unwrap(),
        1,
        "a refused call changed the lock"
    );

    // Unlocked inside a runtime: refused, and given back as a drop does.
    let unlocked = rt.block_on(async move { guard.unlock() });
    assert!(matches!(unlocked, Err(Error::InvalidArgument(_))));
    eventually(Duration::from_secs(10), "released", || {
        !exists(&server, "inside")
    });

    // The last handle dropped inside a runtime: no panic.
    let g = lock.lock().unwrap();
    rt.block_on(async move {
        drop(g);
        drop(lock);
        drop(client);
    });
    eventually(Duration::from_secs(10), "released at teardown", || {
        !exists(&server, "inside")
    });
}

/// A guard outliving every client and lock handle keeps the client's
/// runtime: it still unlocks; the last handle closes the client.
#[test]
fn a_guard_outlives_its_client_handle() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).unwrap();
    let guard = client.lock("outlived").lock().unwrap();
    drop(client);
    assert!(!guard.is_lost());
    guard.unlock().unwrap();
    assert!(!exists(&server, "outlived"));
}

/// The builder's operator options apply to a blocking client: its record
/// names its app; an ABBA cycle between threads of two blocking clients
/// is listed by `deadlocks()`; with `detect_deadlocks(true)` exactly one
/// of the two blocked waits returns `Error::Deadlock` and the other gets
/// its lock.
#[test]
fn operators_see_blocking_clients_and_their_deadlocks() {
    let server = RedisServer::start();
    let build = |app: &str, detect: bool| {
        leasehold::Client::builder()
            .url(&server.url())
            .app_name(app)
            .record_waits_after(Duration::from_millis(100))
            .detect_deadlocks(detect)
            .build_blocking()
            .unwrap()
    };
    let a = build("alpha", false);
    let b = build("beta", false);
    let record = format!("leasehold:client:{{{}}}", a.id());
    assert_eq!(server.cmd(&["HGET", &record, "app"]), "alpha");
    assert!(a.deadlocks().unwrap().is_empty());

    // Without detection: listed, until a force unlock breaks it.
    let [ta, tb] = abba(&a, &b, "x", "y");
    let deadline = Instant::now() + HANG;
    let cycles = loop {
        let cycles = a.deadlocks().unwrap();
        if !cycles.is_empty() {
            break cycles;
        }
        assert!(Instant::now() < deadline, "no cycle listed");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    let mut apps: Vec<Option<&str>> = cycles[0].members.iter().map(|m| m.app.as_deref()).collect();
    apps.sort();
    assert_eq!(apps, [Some("alpha"), Some("beta")], "{cycles:?}");
    assert!(a.lock("x").force_unlock().unwrap());
    assert!(ta.join().unwrap().unwrap(), "x's holder got y");
    assert!(tb.join().unwrap().unwrap(), "y's holder got x");
    a.shutdown().unwrap();
    b.shutdown().unwrap();

    // With detection: one wait gives up, the other goes on.
    let a = build("alpha", true);
    let b = build("beta", true);
    let outcomes: Vec<leasehold::Result<bool>> = abba(&a, &b, "p", "q")
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    let deadlocked = outcomes
        .iter()
        .filter(|o| matches!(o, Err(Error::Deadlock { .. })))
        .count();
    let acquired = outcomes.iter().filter(|o| matches!(o, Ok(true))).count();
    assert_eq!((deadlocked, acquired), (1, 1), "{outcomes:?}");
    // The ended waits' records go at their clients' next tick.
    eventually(HANG, "no cycle left", || a.deadlocks().unwrap().is_empty());
    a.shutdown().unwrap();
    b.shutdown().unwrap();
}

/// Every primitive is on `blocking::Client`, with the async API's verbs
/// (issue 32): two threads exclude each other on a fair lock, a fenced
/// lock's guards carry growing tokens, a read-write lock lets readers share
/// and keeps the writer out, a semaphore's permits are counted (and `with`
/// runs under one), and a latch releases its waiter.
#[test]
fn every_primitive_blocks_with_the_same_verbs() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).unwrap();

    // Fair lock: held against another thread, then handed to it.
    let fair = client.fair_lock("fair");
    let held = fair.lock().unwrap();
    assert_eq!(fair.hold_count().unwrap(), 1);
    let other = fair.clone();
    let waiter = std::thread::spawn(move || {
        assert!(
            other.try_lock().unwrap().is_none(),
            "held by the main thread"
        );
        other.try_lock_for(HANG).unwrap().is_some()
    });
    std::thread::sleep(Duration::from_millis(100));
    held.unlock().unwrap();
    assert!(
        waiter.join().unwrap(),
        "the waiting thread got the fair lock"
    );
    assert_eq!(fair.with(|_| 3).unwrap(), 3);

    // Fenced lock: tokens only grow.
    let fenced = client.fenced_lock("fenced");
    let first = fenced.lock().unwrap().token().unwrap();
    let second = fenced.lock().unwrap().token().unwrap();
    assert!(second > first);
    assert_eq!(fenced.token().unwrap(), Some(second));

    // Read-write lock: readers share, the writer waits for them.
    let rw = client.read_write_lock("rw");
    let read = rw.read().lock().unwrap();
    let (r, w) = (rw.read(), rw.write());
    let other = std::thread::spawn(move || {
        let shared = r.try_lock().unwrap().is_some();
        let writes = w.try_lock().unwrap().is_some();
        (shared, writes)
    });
    assert_eq!(other.join().unwrap(), (true, false));
    assert_eq!(rw.read().holders().unwrap().len(), 1);
    read.unlock().unwrap();
    assert!(rw.write().try_lock().unwrap().is_some());

    // Semaphore: two permits, a third waits in vain; `with` runs under one.
    let sem = client.semaphore("sem");
    assert!(sem.try_set_permits(2).unwrap());
    let p1 = sem.acquire().unwrap();
    let p2 = sem.try_acquire().unwrap().expect("a second permit");
    assert_eq!(sem.available_permits().unwrap(), 0);
    let deadline = Instant::now() + Duration::from_millis(200);
    assert!(sem.try_acquire_until(deadline).unwrap().is_none());
    p1.release().unwrap();
    drop(p2);
    eventually(HANG, "the dropped permit is back", || {
        sem.available_permits().unwrap() == 2
    });
    assert_eq!(sem.with(|_| 5).unwrap(), 5);

    // Latch: a thread waits until the count reaches zero.
    let latch = client.count_down_latch("latch");
    assert!(latch.try_set_count(1).unwrap());
    let l = latch.clone();
    let waiting = std::thread::spawn(move || l.wait_for(HANG).unwrap());
    latch.count_down().unwrap();
    assert!(waiting.join().unwrap());
    assert_eq!(latch.count().unwrap(), 0);
    client.shutdown().unwrap();
}

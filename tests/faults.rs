//! Faults with real processes and a real proxy, loopback only: a server
//! killed and restarted, a black-holed holder, a killed holder process, a
//! killed subscriber connection, an unlock flood, and a runtime shut down
//! under live guards and waiters.

use leasehold_testkit as support;

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::{Client, Error, LockGuard};
use support::fixture::{calls, client, client_with, eventually, exists, lock_keys, numsub, within};
use support::{Proxy, RedisServer};
use tokio::time::Instant;

/// Catches hangs; not a performance claim.
const HANG: Duration = Duration::from_secs(60);

/// PTTL of `key`, read directly from the server (not through any proxy).
fn pttl(server: &RedisServer, key: &str) -> i64 {
    server
        .cmd(&["PTTL", key])
        .parse()
        .expect("PTTL is an integer")
}

/// Channels matching `pattern` the server has subscribers for.
fn channel_count(server: &RedisServer, pattern: &str) -> usize {
    server
        .cmd(&["PUBSUB", "CHANNELS", pattern])
        .lines()
        .filter(|l| !l.is_empty())
        .count()
}

// --- (2) redis-server SIGKILLed and restarted --------------------------------

/// The server is SIGKILLed and restarted empty while one task holds a lock
/// (1 s watchdog) and 20 tasks on 2 clients wait for it. The holder is told
/// `lost`; the waiters re-subscribe and one of them gets the lock soon after
/// the restart; then all 20 get it, one at a time; nobody hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_killed_and_restarted_under_holder_and_waiters() {
    const WAITERS: usize = 20;
    const NAME: &str = "restart";
    let channel = format!("redisson_lock__channel:{{{NAME}}}");
    let mut server = RedisServer::start();
    let wd = Duration::from_secs(1);
    let holder = client_with(&server, |b| b.watchdog_timeout(wd)).await;
    let clients = [
        client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(2))).await,
        client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(2))).await,
    ];
    let guard = holder.lock(NAME).lock().await.unwrap();

    let inside = Arc::new(AtomicUsize::new(0));
    let acquired_at: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let lock = clients[i % 2].lock(NAME);
        let inside = inside.clone();
        let acquired_at = acquired_at.clone();
        tasks.push(tokio::spawn(async move {
            let g = lock.lock().await?;
            acquired_at.lock().unwrap().push(Instant::now());
            assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
            tokio::time::sleep(Duration::from_millis(20)).await;
            inside.fetch_sub(1, Ordering::SeqCst);
            g.unlock().await
        }));
    }
    eventually(Duration::from_secs(20), "both clients subscribed", || {
        numsub(&server, &channel) == 2
    })
    .await;

    server.kill();
    let killed = Instant::now();
    within(
        Duration::from_secs(10),
        "holder told lost while the server is down",
        guard.lost(),
    )
    .await;
    eprintln!("holder lost() fired {:?} after SIGKILL", killed.elapsed());
    // Stay down longer than any waiter's re-check bound (the 1 s lease), so
    // every waiter re-checks against a dead server at least once.
    let down_for = Duration::from_millis(2500);
    tokio::time::sleep(down_for.saturating_sub(killed.elapsed())).await;
    server.restart();
    let restarted = Instant::now();
    assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));

    // Both clients subscribe again, unless every waiter is already done
    // (then there is nothing left to subscribe for).
    let served = || acquired_at.lock().unwrap().len();
    eventually(
        Duration::from_secs(20),
        "waiters re-subscribe after the restart (or all were served)",
        || numsub(&server, &channel) == 2 || served() == WAITERS,
    )
    .await;
    eprintln!(
        "after the restart: {} of 2 clients subscribed, {} of {WAITERS} waiters served",
        numsub(&server, &channel),
        served()
    );
    eprintln!("re-subscribed {:?} after restart", restarted.elapsed());

    let first = within(Duration::from_secs(20), "a first waiter acquires", async {
        loop {
            if let Some(t) = acquired_at.lock().unwrap().first().copied() {
                return t;
            }
            if tasks.iter().all(|t| t.is_finished()) {
                return Instant::now(); // every task ended: errors checked below
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    eprintln!(
        "first waiter acquired {:?} after restart",
        first.saturating_duration_since(restarted)
    );

    let mut failures = Vec::new();
    within(HANG, "all 20 waiters get the lock in turn", async {
        for (i, t) in tasks.into_iter().enumerate() {
            if let Err(e) = t.await.unwrap() {
                failures.push(format!("waiter {i}: {e:?}"));
            }
        }
    })
    .await;
    // A waiter whose re-check runs while the server is down must keep
    // waiting, not return the connection error.
    assert!(
        failures.is_empty(),
        "lock() gave up during the outage: {failures:#?}"
    );
    assert_eq!(acquired_at.lock().unwrap().len(), WAITERS);
    assert!(
        first.saturating_duration_since(restarted) < Duration::from_secs(10),
        "first acquire {:?} after restart",
        first.saturating_duration_since(restarted)
    );
    assert!(!exists(&server, NAME));
    for c in clients.iter().chain([&holder]) {
        within(HANG, "shutdown", c.shutdown()).await.unwrap();
    }
}

// --- (3) the holder black-holed longer than its lease -------------------------

/// One run of the black-hole case with watchdog timeout `wd`: returns the
/// key's PTTL (ms) when `lost()` fired.
async fn blackholed_holder_is_told_before_expiry(wd: Duration) -> i64 {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr()).await;
    let name = format!("blackhole-{}", wd.as_millis());
    let holder = Client::builder()
        .url(&proxy.url())
        .watchdog_timeout(wd)
        .build()
        .await
        .unwrap();
    let other = client(&server).await;
    let guard = holder.lock(&name).lock().await.unwrap();
    // Let a few renewals happen first.
    tokio::time::sleep(wd).await;
    assert!(!guard.is_lost());

    proxy.blackhole();
    let cut = Instant::now();
    within(wd * 4, "lost() under a black hole", guard.lost()).await;
    let left = pttl(&server, &name);
    let after = cut.elapsed();
    eprintln!(
        "watchdog {wd:?}: lost() fired {after:?} after the black hole, with {left} ms of lease left"
    );
    assert!(
        left > 0,
        "lost() fired after the lease expired in Redis (PTTL {left})"
    );

    // A direct client gets the lock once the lease has run out.
    let g = within(
        wd * 4,
        "direct client gets the lock after expiry",
        other.lock(&name).try_lock_for(wd * 3),
    )
    .await
    .unwrap()
    .expect("acquired after the lease expired");
    let got = cut.elapsed();
    assert!(
        got >= after,
        "acquired at {got:?}, before lost() fired at {after:?}"
    );
    eprintln!("watchdog {wd:?}: direct client acquired {got:?} after the black hole");
    drop(guard); // lost: sends nothing
    g.unlock().await.unwrap();
    assert!(!exists(&server, &name));

    proxy.pass();
    proxy.cut_all();
    let _ = within(HANG, "holder shutdown", holder.shutdown()).await;
    other.shutdown().await.unwrap();
    left
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blackholed_holder_is_told_before_expiry_1s() {
    blackholed_holder_is_told_before_expiry(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blackholed_holder_is_told_before_expiry_3s() {
    blackholed_holder_is_told_before_expiry(Duration::from_secs(3)).await;
}

// --- (4) a holder process SIGKILLed ------------------------------------------

const CHILD_URL: &str = "LEASEHOLD_CHILD_URL";
const CHILD_WATCHDOG_MS: &str = "LEASEHOLD_CHILD_WATCHDOG_MS";
const CHILD_LOCK: &str = "crashy";

/// Not a test: the holder process of `killed_holder_process_*`. Runs only
/// when re-executed by the parent with `LEASEHOLD_CHILD_URL` set.
#[tokio::test]
#[ignore = "child process of killed_holder_process_frees_the_lock_without_polling"]
async fn child_holder_process() {
    let Ok(url) = std::env::var(CHILD_URL) else {
        return;
    };
    let wd_ms: u64 = std::env::var(CHILD_WATCHDOG_MS)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let c = Client::builder()
        .url(&url)
        .watchdog_timeout(Duration::from_millis(wd_ms))
        .build()
        .await
        .unwrap();
    let _guard = c.lock(CHILD_LOCK).lock().await.unwrap();
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "LOCKED").unwrap();
        out.flush().unwrap();
    }
    // "Forever": the parent kills us long before this.
    tokio::time::sleep(Duration::from_secs(300)).await;
}

/// Kills the child if the test panics before it does.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A holder process (2 s watchdog) is SIGKILLed: a waiter in this process
/// gets the lock within the watchdog timeout plus a little, and sends only
/// a handful of scripts meanwhile (no polling).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_process_frees_the_lock_without_polling() {
    let wd = Duration::from_secs(2);
    let server = RedisServer::start();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_holder_process",
            "--nocapture",
            "--ignored",
        ])
        .env(CHILD_URL, server.url())
        .env(CHILD_WATCHDOG_MS, wd.as_millis().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("re-exec the test binary");
    let stdout = child.stdout.take().unwrap();
    let mut child = KillOnDrop(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.trim() == "LOCKED" {
                let _ = tx.send(());
            }
        }
    });
    tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(60)))
        .await
        .unwrap()
        .expect("child printed LOCKED");
    assert!(exists(&server, CHILD_LOCK), "the child holds the lock");

    let waiter_client = client(&server).await;
    let lock = waiter_client.lock(CHILD_LOCK);
    let waiter = tokio::spawn(async move { lock.lock().await });
    eventually(Duration::from_secs(20), "waiter subscribed", || {
        numsub(&server, "redisson_lock__channel:{crashy}") == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let before = calls(&server, "evalsha");
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let killed = Instant::now();
    let guard = within(
        wd + Duration::from_secs(20),
        "waiter after the kill",
        waiter,
    )
    .await
    .unwrap()
    .unwrap();
    let took = killed.elapsed();
    let scripts = calls(&server, "evalsha") - before;
    eprintln!("waiter acquired {took:?} after SIGKILL, {scripts} EVALSHA meanwhile");
    assert!(
        took <= wd + Duration::from_secs(1),
        "took {took:?} for a {wd:?} watchdog lease"
    );
    assert!(scripts <= 10, "{scripts} scripts while waiting: polling");
    guard.unlock().await.unwrap();
    assert!(!exists(&server, CHILD_LOCK));
    waiter_client.shutdown().await.unwrap();
}

// --- (5) only the subscriber connection killed --------------------------------

/// `CLIENT KILL TYPE pubsub` while a task waits on a lock with a 30 s
/// lease and a 60 s re-check interval: once the subscriber is back, the
/// next release still wakes the waiter promptly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_subscriber_connection_still_wakes_the_waiter() {
    let server = RedisServer::start();
    let channel = "redisson_lock__channel:{subkill}";
    let holder = client(&server).await;
    let waiter_client = client_with(&server, |b| b.recheck_interval(Duration::from_secs(60))).await;
    let guard = holder.lock("subkill").lock().await.unwrap();
    let lock = waiter_client.lock("subkill");
    let waiter = tokio::spawn(async move { lock.lock().await });
    eventually(Duration::from_secs(20), "waiter subscribed", || {
        numsub(&server, channel) == 1
    })
    .await;

    let killed: u64 = server
        .cmd(&["CLIENT", "KILL", "TYPE", "pubsub"])
        .parse()
        .unwrap();
    assert!(killed >= 1, "killed {killed} pubsub connections");
    eventually(Duration::from_secs(20), "subscriber reconnected", || {
        numsub(&server, channel) == 1
    })
    .await;
    // Let the re-check after the reconnect run and go back to sleep.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished());

    guard.unlock().await.unwrap();
    let released = Instant::now();
    let g = within(
        Duration::from_secs(5),
        "the release wakes the waiter after the subscriber reconnected",
        waiter,
    )
    .await
    .unwrap()
    .unwrap();
    eprintln!("waiter woken {:?} after the release", released.elapsed());
    g.unlock().await.unwrap();
    holder.shutdown().await.unwrap();
    waiter_client.shutdown().await.unwrap();
}

// --- (6) an unlock flood ---------------------------------------------------------

/// 10,000 locks held by A, one waiter each on B (message buffer of 64, so
/// the unlock stream lags), all released at once: every waiter gets its
/// lock and B ends with no subscription.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_flood_with_a_lagging_subscriber() {
    const LOCKS: usize = 10_000;
    const TASKS: usize = 16;
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client_with(&server, |b| b.message_capacity(64)).await;
    let started = Instant::now();

    // A takes every lock (16 tasks, each a slice of the names).
    let mut takers = Vec::new();
    for t in 0..TASKS {
        let a = a.clone();
        takers.push(tokio::spawn(async move {
            let mut guards = Vec::new();
            for i in (t..LOCKS).step_by(TASKS) {
                guards.push(a.lock(&format!("flood:{i}")).lock().await.unwrap());
            }
            guards
        }));
    }
    let mut guards: Vec<LockGuard> = Vec::with_capacity(LOCKS);
    within(Duration::from_secs(300), "A takes 10,000 locks", async {
        for t in takers {
            guards.extend(t.await.unwrap());
        }
    })
    .await;
    assert_eq!(guards.len(), LOCKS);
    eprintln!("A holds {LOCKS} locks after {:?}", started.elapsed());

    let done = Arc::new(AtomicUsize::new(0));
    let mut waiters = Vec::with_capacity(LOCKS);
    for i in 0..LOCKS {
        let lock = b.lock(&format!("flood:{i}"));
        let done = done.clone();
        waiters.push(tokio::spawn(async move {
            let g = lock.lock().await?;
            done.fetch_add(1, Ordering::Relaxed);
            g.unlock().await
        }));
    }
    eventually(
        Duration::from_secs(300),
        "B subscribed to 10,000 channels",
        || channel_count(&server, "redisson_lock__channel:{flood:*") == LOCKS,
    )
    .await;
    assert_eq!(b.subscribed_channels(), LOCKS);
    eprintln!("B waits on {LOCKS} channels after {:?}", started.elapsed());

    let evalsha_before = calls(&server, "evalsha");
    let released = Instant::now();
    drop(guards); // every release at once, in the background
    let mut failures = Vec::new();
    within(
        Duration::from_secs(300),
        "every waiter gets its lock",
        async {
            for (i, w) in waiters.into_iter().enumerate() {
                if let Err(e) = w.await.unwrap() {
                    failures.push(format!("flood:{i}: {e:?}"));
                }
            }
        },
    )
    .await;
    let scripts = calls(&server, "evalsha") - evalsha_before;
    eprintln!(
        "all {LOCKS} waiters served {:?} after the release, {scripts} EVALSHA",
        released.elapsed()
    );
    assert!(failures.is_empty(), "{failures:#?}");
    assert_eq!(done.load(Ordering::Relaxed), LOCKS);
    eventually(Duration::from_secs(60), "B unsubscribed", || {
        b.subscribed_channels() == 0
            && channel_count(&server, "redisson_lock__channel:{flood:*") == 0
    })
    .await;
    assert_eq!(lock_keys(&server), Vec::<String>::new(), "no lock left");
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

// --- (7) a runtime shut down under live guards and waiters ----------------------

/// Guards and waiters alive when their runtime is shut down, the guards
/// then dropped outside any runtime: no panic, no hang. The abandoned
/// leases then expire in Redis.
#[test]
fn runtime_shut_down_under_guards_and_waiters() {
    let server = RedisServer::start();
    let url = server.url();
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (a, b, guards) = rt.block_on(async {
            let a = Client::builder()
                .url(&url)
                .watchdog_timeout(Duration::from_secs(2))
                .build()
                .await
                .unwrap();
            let b = Client::connect(&url).await.unwrap();
            let mut guards = vec![
                a.lock("rt:watchdog").lock().await.unwrap(),
                a.lock("rt:fixed")
                    .lock_with_lease(Duration::from_secs(2))
                    .await
                    .unwrap(),
            ];
            guards.push(a.lock("rt:watchdog").lock().await.unwrap()); // re-entered
            for i in 0..10 {
                let owner_client = if i % 2 == 0 { &a } else { &b };
                let lock = owner_client.lock("rt:watchdog");
                tokio::spawn(async move { lock.lock().await });
                let lock = b.lock("rt:fixed");
                tokio::spawn(async move { lock.try_lock_for(Duration::MAX).await });
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            (a, b, guards)
        });
        rt.shutdown_timeout(Duration::from_secs(5));
        // No runtime from here on.
        drop(guards);
        drop(a);
        drop(b);
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("runtime shutdown + drops outside a runtime hung");
    worker.join().expect("no panic");
    // Nobody releases or renews any more: the leases run out.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while exists(&server, "rt:watchdog") || exists(&server, "rt:fixed") {
        assert!(
            std::time::Instant::now() < deadline,
            "abandoned leases did not expire"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

// --- cancelled acquires retried at once by the same owner ---------------------

/// One task retries `timeout(short, lock.lock())` 2,000 times on a free
/// lock (timeouts of 0–2 ms cancel many acquires in flight). Every guard it
/// gets must be valid and unlock cleanly, and once the loop ends no hold
/// may be left in Redis (a leaked hold would stay for the 30 s lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquires_retried_by_the_same_owner() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.lock("retry");
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let (mut got, mut cancelled) = (0u32, 0u32);
    let mut problems = Vec::new();
    within(Duration::from_secs(120), "2,000 retries", async {
        for i in 0..2_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let wait = Duration::from_micros(seed % 2_000);
            match tokio::time::timeout(wait, lock.lock()).await {
                Err(_) => cancelled += 1,
                Ok(Err(e)) => problems.push(format!("{i}: lock: {e:?}")),
                Ok(Ok(g)) => {
                    got += 1;
                    if g.is_lost() {
                        problems.push(format!("{i}: fresh guard reported lost"));
                    }
                    if let Err(e) = g.unlock().await {
                        problems.push(format!("{i}: unlock: {e:?}"));
                    }
                }
            }
        }
    })
    .await;
    eprintln!("{got} acquired, {cancelled} cancelled, problems: {problems:#?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while exists(&server, "retry") && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let left = server.cmd(&["HGETALL", "retry"]);
    assert!(
        left.is_empty(),
        "hold left behind 5 s after the loop: HGETALL {left:?}, PTTL {} ms, \
         this task's owner field {}:{}",
        pttl(&server, "retry"),
        c.id(),
        leasehold::Owner::current().id()
    );
    assert!(problems.is_empty(), "{problems:#?}");
    c.shutdown().await.unwrap();
}

// --- an unlock dropped while it waits for its turn ----------------------------

/// An unlock dropped while it waits for its lease's turn (another hold of
/// the same owner is being released, its reply slowed by a proxy) still
/// gives its hold back. MultiLock and RedLock give members back with such
/// unlocks, and a dropped acquire may drop them there. Before the fix the
/// hold stayed in Redis, unrenewed, until its lease ran out (30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_dropped_while_waiting_for_its_turn_still_releases() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr()).await;
    let url = proxy.url();
    let c = client_with(&server, |b| b.url(&url)).await;
    let lock = c.lock("turn");
    for round in 0..3 {
        let first = lock.lock().await.unwrap();
        let second = lock.lock().await.unwrap();
        proxy.delay(Duration::from_millis(300));
        // The first unlock takes the turn and waits about 600 ms for its reply.
        let first = tokio::spawn(first.unlock());
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The second waits for that turn and is dropped meanwhile.
        let dropped = tokio::time::timeout(Duration::from_millis(50), second.unlock()).await;
        assert!(
            dropped.is_err(),
            "round {round}: the unlock was not cut short"
        );
        within(HANG, "the first unlock", first)
            .await
            .unwrap()
            .unwrap();
        proxy.pass();
        eventually(Duration::from_secs(10), "the lock is free", || {
            !exists(&server, "turn")
        })
        .await;
    }
    c.shutdown().await.unwrap();
}

// --- (3b) a connection that stops answering is reset --------------------------

/// A holder whose connection stops answering while only the watchdog talks
/// on it (no lock or unlock to time out) gets its command connection reset
/// once renewals have gone unanswered for a command timeout, and works
/// again when the network does. (fred's own unresponsive check is off on
/// the command connection: it costs a timer per turn of fred's loop.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connection_is_reset_by_unanswered_renewals() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr()).await;
    let holder = Client::builder()
        .url(&proxy.url())
        .watchdog_timeout(Duration::from_secs(3))
        .command_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let guard = holder.lock("silent").lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!guard.is_lost());
    let accepted = proxy.accepted_count();

    proxy.blackhole();
    within(HANG, "lost() under a black hole", guard.lost()).await;
    // Renewals every 1 s go unanswered; after 2 s of that the connection
    // is reset: fred opens a new one (held by the proxy while it is dark).
    let reset = within(HANG, "a new connection", async {
        while proxy.accepted_count() == accepted {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    reset.await;

    proxy.pass();
    drop(guard); // lost: sends nothing
    let g = within(HANG, "a lock after the network is back", async {
        loop {
            match holder
                .lock("after")
                .try_lock_for(Duration::from_secs(5))
                .await
            {
                Ok(Some(g)) => return g,
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    })
    .await;
    g.unlock().await.unwrap();
    let _ = within(HANG, "holder shutdown", holder.shutdown()).await;
}

/// Scripts flushed from two servers at once (`SCRIPT FLUSH`, as a restart
/// without persistence does), each with its own client, whose next locks
/// run together: both meet `NOSCRIPT`, and one's load may come while the
/// other is deciding whether its own is still needed. Every lock must
/// still be taken: a call that skipped its load for the other server's
/// loads again. Many rounds, since the interleaving is the runtime's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_flushed_on_two_servers_at_once_are_loaded_on_each() {
    let servers = [RedisServer::start(), RedisServer::start()];
    let a = client(&servers[0]).await;
    let b = client(&servers[1]).await;
    for round in 0..30 {
        for server in &servers {
            server.cmd(&["SCRIPT", "FLUSH"]);
        }
        let name = format!("flushed:{round}");
        let (lock_a, lock_b) = (a.lock(&name), b.lock(&name));
        let (got_a, got_b) = within(HANG, "two tries after a flush", async {
            tokio::join!(lock_a.try_lock(), lock_b.try_lock())
        })
        .await;
        let (got_a, got_b) = (got_a.unwrap(), got_b.unwrap());
        assert!(got_a.is_some() && got_b.is_some(), "round {round}");
        for guard in [got_a, got_b].into_iter().flatten() {
            guard.unlock().await.unwrap();
        }
    }
}

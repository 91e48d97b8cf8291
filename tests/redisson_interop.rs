//! leasehold beside the real Redisson 4.7.0 on one private redis-server.
//!
//! A small Java driver (`interop/java/`, compiled by `cargo xtask test`)
//! runs one Redisson client and takes line commands on stdin; each scenario
//! starts one such JVM and one or more leasehold clients, drives both sides
//! and checks what each sees: exclusion, wake-ups, watchdog renewals, force
//! unlocks, fencing tokens, semaphore permits, latches, the fair queue,
//! read/write mixing and crashes (the JVM is killed; a Rust holder is a
//! child process of this test binary, killed too). Both sides use a 3 s
//! watchdog, so lapsed leases show within seconds.
//!
//! The figures (wake-up latencies, acquisitions per side) are printed;
//! `cargo xtask test` shows them. Only correctness is asserted, plus
//! generous bounds that turn a hang into a failure.
//!
//! The driver and Redisson's classpath come from `LEASEHOLD_JAVA` and
//! `LEASEHOLD_INTEROP_CLASSPATH`, which `cargo xtask test` sets; without
//! them (a plain `cargo test`) every scenario prints one line saying it was
//! skipped, and passes, unless `LEASEHOLD_INTEROP_REQUIRED=1`.

use leasehold_testkit as support;

use std::collections::HashMap;
use std::env;
use std::future::Future;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold::fred::interfaces::KeysInterface;
use leasehold::fred::types::SetOptions;
use leasehold::{Client, LockGuard};
use support::fixture::{client_with, eventually, numsub, within};
use support::RedisServer;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The watchdog timeout of both sides (Redisson's `lockWatchdogTimeout`,
/// leasehold's `watchdog_timeout`): they must agree.
const WATCHDOG: Duration = Duration::from_secs(3);
/// A bound that only catches hangs.
const HANG: Duration = Duration::from_secs(60);
/// Time given to a waiter between its subscription showing on the server
/// and the release, so it is parked on its wait (not a timing claim: a
/// late waiter still gets the lock, its latency is just smaller).
const SETTLE: Duration = Duration::from_millis(150);
/// How long the exclusion and semaphore loops run.
const LOOP: Duration = Duration::from_secs(3);
/// Rounds of each wake-up latency measurement.
const ROUNDS: usize = 8;
/// The variable that makes `rust_holder_process` a crashing Rust holder.
const CHILD_ENV: &str = "LEASEHOLD_INTEROP_CHILD";
/// What that process prints once it holds the lock.
const HELD: &str = "rust-holder-holds";

// --- the Java side -----------------------------------------------------------

/// One reply line of the driver.
#[derive(Debug)]
struct Reply {
    ok: bool,
    /// Wall-clock µs just before the Redisson call.
    start_us: u64,
    /// Wall-clock µs just after it.
    end_us: u64,
    value: String,
}

impl Reply {
    fn ok(self, what: &str) -> Reply {
        assert!(self.ok, "java {what}: {}", self.value);
        self
    }
}

/// A command sent to the driver, its reply not yet read.
struct Pending {
    rx: oneshot::Receiver<Reply>,
    what: String,
}

impl Pending {
    async fn reply(self) -> Reply {
        let what = format!("java `{}`", self.what);
        within(HANG, &what, self.rx)
            .await
            .unwrap_or_else(|_| panic!("{what}: the driver exited without replying"))
    }

    /// The reply, which must be a success.
    async fn ok(self) -> Reply {
        let what = self.what.clone();
        self.reply().await.ok(&what)
    }
}

/// The driver process: one Redisson client, named worker threads.
struct Java {
    stdin: tokio::sync::Mutex<ChildStdin>,
    child: Mutex<Option<Child>>,
    pending: Arc<Mutex<HashMap<u64, oneshot::Sender<Reply>>>>,
    next: AtomicU64,
}

/// `LEASEHOLD_JAVA` and `LEASEHOLD_INTEROP_CLASSPATH`, or `None` after
/// printing why `test` is skipped (a panic if they are required).
fn java_env(test: &str) -> Option<(String, String)> {
    match (
        env::var("LEASEHOLD_JAVA"),
        env::var("LEASEHOLD_INTEROP_CLASSPATH"),
    ) {
        (Ok(java), Ok(classpath)) => Some((java, classpath)),
        _ => {
            let why = "LEASEHOLD_JAVA / LEASEHOLD_INTEROP_CLASSPATH are not set \
                       (`cargo xtask test` sets them: it finds Java and Redisson 4.7.0 and \
                       compiles the driver)";
            if env::var("LEASEHOLD_INTEROP_REQUIRED").is_ok_and(|v| v == "1") {
                panic!("{test}: the Redisson interop test cannot run: {why}");
            }
            println!("{test}: SKIPPED, no Redisson to test against: {why}");
            None
        }
    }
}

impl Java {
    /// Starts the driver on `server`, or `None` when the environment has no
    /// Java (see [`java_env`]).
    async fn start(test: &str, server: &RedisServer) -> Option<Arc<Java>> {
        let (java, classpath) = java_env(test)?;
        let mut child = Command::new(&java)
            .args([
                "-Xmx128m",
                "-XX:TieredStopAtLevel=1",
                "-Xshare:auto",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp",
                &classpath,
                "leasehold.interop.Driver",
                &server.url(),
                &WATCHDOG.as_millis().to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{test}: cannot start {java}: {e}"));
        let stdin = child.stdin.take().expect("piped stdin");
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let first = within(HANG, "the Java driver starting", lines.next_line())
            .await
            .expect("read the driver's stdout")
            .expect("the Java driver exited before it was ready");
        let id = first
            .strip_prefix("ready ")
            .unwrap_or_else(|| panic!("unexpected first line from the driver: {first}"))
            .to_owned();
        println!(
            "{test}: Redisson client {id} (watchdog {WATCHDOG:?}) on {}",
            server.addr()
        );
        let pending: Arc<Mutex<HashMap<u64, oneshot::Sender<Reply>>>> = Arc::default();
        tokio::spawn(read_replies(lines, pending.clone()));
        Some(Arc::new(Java {
            stdin: tokio::sync::Mutex::new(stdin),
            child: Mutex::new(Some(child)),
            pending,
            next: AtomicU64::new(1),
        }))
    }

    /// Sends `command` to `worker`'s thread.
    async fn send(&self, worker: &str, command: &str) -> Pending {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap().insert(id, tx);
        let line = format!("{id} {worker} {command}\n");
        let mut stdin = self.stdin.lock().await;
        stdin
            .write_all(line.as_bytes())
            .await
            .expect("write to the driver");
        stdin.flush().await.expect("flush to the driver");
        Pending {
            rx,
            what: format!("{worker} {command}"),
        }
    }

    /// Sends `command` to `worker` and waits for a successful reply.
    async fn call(&self, worker: &str, command: &str) -> Reply {
        self.send(worker, command).await.ok().await
    }

    /// Kills the JVM (SIGKILL, no clean-up of any kind) and returns when.
    async fn kill(&self) -> u64 {
        let child = self.child.lock().unwrap().take();
        let mut child = child.expect("the driver is running");
        let at = now_us();
        child.start_kill().expect("kill the driver");
        within(HANG, "the killed JVM exiting", child.wait())
            .await
            .expect("reap the driver");
        at
    }
}

/// Hands each reply line to its waiting [`Pending`]; at the end of the
/// output, drops the rest (they then report the driver gone).
async fn read_replies(
    mut lines: Lines<BufReader<ChildStdout>>,
    pending: Arc<Mutex<HashMap<u64, oneshot::Sender<Reply>>>>,
) {
    while let Ok(Some(line)) = lines.next_line().await {
        let mut words = line.splitn(5, ' ');
        let (Some(id), Some(status), Some(start), Some(end)) =
            (words.next(), words.next(), words.next(), words.next())
        else {
            eprintln!("java: {line}");
            continue;
        };
        let (Ok(id), Ok(start_us), Ok(end_us)) = (id.parse(), start.parse(), end.parse()) else {
            eprintln!("java: {line}");
            continue;
        };
        let reply = Reply {
            ok: status == "ok",
            start_us,
            end_us,
            value: words.next().unwrap_or("").to_owned(),
        };
        if let Some(tx) = pending.lock().unwrap().remove(&id) {
            let _ = tx.send(reply);
        }
    }
    pending.lock().unwrap().clear();
}

// --- shared steps --------------------------------------------------------------

/// Wall-clock µs since the epoch (comparable with the driver's).
fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_micros() as u64
}

/// `to - from` in ms, as a float for printing.
fn ms(from: u64, to: u64) -> f64 {
    (to as f64 - from as f64) / 1000.0
}

/// "p50 X ms, max Y ms (n samples)".
fn summary(samples_ms: &[f64]) -> String {
    let mut sorted = samples_ms.to_vec();
    sorted.sort_by(f64::total_cmp);
    format!(
        "p50 {:.2} ms, max {:.2} ms ({} samples)",
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1],
        sorted.len()
    )
}

/// A leasehold client of `server` with the shared watchdog timeout.
async fn rust_client(server: &RedisServer) -> Client {
    client_with(server, |b| b.watchdog_timeout(WATCHDOG)).await
}

/// Waits until `channel` has at least `n` subscribed connections on
/// `server`, then [`SETTLE`]s.
async fn subscribed(server: &RedisServer, channel: &str, n: u64) {
    eventually(HANG, &format!("{n} subscriber(s) of {channel}"), || {
        numsub(server, channel) >= n
    })
    .await;
    tokio::time::sleep(SETTLE).await;
}

/// The scenario's private redis-server, the Java driver on it and a
/// leasehold client of it; `None` (after saying so) without Java.
async fn scene(test: &str) -> Option<(RedisServer, Arc<Java>, Client)> {
    let server = RedisServer::start();
    let java = Java::start(test, &server).await?;
    let client = rust_client(&server).await;
    Some((server, java, client))
}

/// Spawns `acquire` and returns, with what it got, the wall-clock µs when
/// it got it.
fn timed<T: Send + 'static>(
    acquire: impl Future<Output = leasehold::Result<T>> + Send + 'static,
) -> JoinHandle<(u64, T)> {
    tokio::spawn(async move {
        let held = acquire.await.unwrap();
        (now_us(), held)
    })
}

/// Totals of a contention loop run by Java threads (replies
/// "acquisitions violations") and Rust tasks (the same pair), each printed
/// with `violation` naming what was counted: (Java acquisitions, Rust
/// acquisitions, violations).
async fn tally(
    test: &str,
    violation: &str,
    javas: Vec<Pending>,
    rusts: Vec<JoinHandle<(u64, u64)>>,
) -> (u64, u64, u64) {
    let (mut java_total, mut rust_total, mut violations) = (0, 0, 0);
    for (i, pending) in javas.into_iter().enumerate() {
        let reply = pending.ok().await;
        let (n, v) = reply.value.split_once(' ').expect("two numbers");
        let (n, v): (u64, u64) = (n.parse().unwrap(), v.parse().unwrap());
        println!("{test}: java thread {i}: {n} acquisitions, {v} {violation}");
        java_total += n;
        violations += v;
    }
    for (i, task) in rusts.into_iter().enumerate() {
        let (n, v) = within(HANG, "a rust loop", task).await.unwrap();
        println!("{test}: rust task {i}: {n} acquisitions, {v} {violation}");
        rust_total += n;
        violations += v;
    }
    (java_total, rust_total, violations)
}

/// The Redisson/leasehold unlock channel of a lock.
fn lock_channel(name: &str) -> String {
    format!("redisson_lock__channel:{{{name}}}")
}

// --- RLock ---------------------------------------------------------------------

/// Java threads and Rust tasks take one RLock in turns for a few seconds;
/// inside, each claims a marker with SET NX (a failed claim is an overlap)
/// and increments a counter without atomicity (a lost update shows an
/// overlap too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlock_excludes_across_java_threads_and_rust_tasks() {
    const TEST: &str = "rlock_exclusion";
    let Some((server, java, client)) = scene(TEST).await else {
        return;
    };
    let name = "interop:exclusion";
    let millis = LOOP.as_millis().to_string();
    let mut javas = Vec::new();
    for worker in ["j1", "j2"] {
        javas.push(
            java.send(worker, &format!("exclusive_loop lock {name} {millis}"))
                .await,
        );
    }
    let mut rusts = Vec::new();
    for _ in 0..2 {
        let client = client.clone();
        rusts.push(tokio::spawn(rust_exclusive_loop(client, name.to_owned())));
    }
    let (java_total, rust_total, overlaps) = tally(TEST, "overlaps", javas, rusts).await;
    let counter: u64 = server
        .cmd(&["GET", &format!("{name}:counter")])
        .parse()
        .unwrap();
    println!(
        "{TEST}: java {java_total} + rust {rust_total} acquisitions in {LOOP:?}, \
         counter {counter}, {overlaps} overlaps"
    );
    assert_eq!(overlaps, 0, "two holders inside the lock at once");
    assert_eq!(counter, java_total + rust_total, "a lost update");
    assert!(java_total > 0 && rust_total > 0, "both sides got the lock");
    client.shutdown().await.unwrap();
}

/// The Rust half of the exclusion loop; returns (acquisitions, overlaps).
async fn rust_exclusive_loop(client: Client, name: String) -> (u64, u64) {
    let lock = client.lock(&name);
    let redis = client.redis().clone();
    let (counter, inside) = (format!("{name}:counter"), format!("{name}:inside"));
    let deadline = tokio::time::Instant::now() + LOOP;
    let (mut acquisitions, mut overlaps) = (0, 0);
    while tokio::time::Instant::now() < deadline {
        let guard = lock.lock().await.unwrap();
        let claimed: Option<String> = redis
            .set(&inside, "rust", None, Some(SetOptions::NX), false)
            .await
            .unwrap();
        if claimed.is_none() {
            overlaps += 1;
        }
        let value: Option<String> = redis.get(&counter).await.unwrap();
        let next = value.map_or(0, |v| v.parse::<u64>().unwrap()) + 1;
        let _: () = redis
            .set(&counter, next.to_string(), None, None, false)
            .await
            .unwrap();
        let _: i64 = redis.del(&inside).await.unwrap();
        acquisitions += 1;
        guard.unlock().await.unwrap();
    }
    (acquisitions, overlaps)
}

/// Each side's unlock wakes the other side's waiter: the time from the
/// start of the unlock call to the waiter holding the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlock_unlock_wakes_the_other_side() {
    const TEST: &str = "rlock_wakeup";
    let Some((server, java, client)) = scene(TEST).await else {
        return;
    };
    let name = "interop:wakeup";
    let lock = client.lock(name);
    let channel = lock_channel(name);

    // Java holds, a Rust task waits, Java unlocks.
    let mut java_to_rust = Vec::new();
    for _ in 0..ROUNDS {
        java.call("j1", &format!("lock lock {name}")).await;
        let waiter = timed({
            let lock = lock.clone();
            async move { lock.lock().await }
        });
        subscribed(&server, &channel, 1).await;
        let unlock = java.call("j1", &format!("unlock lock {name}")).await;
        let (acquired, guard) = within(HANG, "rust waiter", waiter).await.unwrap();
        java_to_rust.push(ms(unlock.start_us, acquired));
        guard.unlock().await.unwrap();
    }

    // Rust holds, a Java thread waits, Rust unlocks.
    let mut rust_to_java = Vec::new();
    for _ in 0..ROUNDS {
        let guard = lock.lock().await.unwrap();
        let waiter = java.send("j2", &format!("lock lock {name}")).await;
        subscribed(&server, &channel, 1).await;
        let unlocked_at = now_us();
        guard.unlock().await.unwrap();
        let acquired = waiter.ok().await;
        rust_to_java.push(ms(unlocked_at, acquired.end_us));
        java.call("j2", &format!("unlock lock {name}")).await;
    }
    println!(
        "{TEST}: java unlock -> rust waiter holds: {}",
        summary(&java_to_rust)
    );
    println!(
        "{TEST}: rust unlock -> java waiter holds: {}",
        summary(&rust_to_java)
    );
    client.shutdown().await.unwrap();
}

/// A hold kept well past the watchdog timeout (3 s) by each side's
/// watchdog excludes the other side all along, and its unlock lets the
/// other side in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_renewals_keep_a_hold_past_the_timeout_both_ways() {
    const TEST: &str = "watchdog";
    const HOLD: Duration = Duration::from_secs(8);
    let Some((server, java, client)) = scene(TEST).await else {
        return;
    };
    let name = "interop:watchdog";
    let lock = client.lock(name);

    // Java holds for HOLD: Rust cannot get it in that time.
    java.call("j1", &format!("lock lock {name}")).await;
    let got = lock.try_lock_for(HOLD).await.unwrap();
    assert!(
        got.is_none(),
        "rust got the lock while Java's watchdog held it"
    );
    let pttl = server.cmd(&["PTTL", name]);
    println!("{TEST}: java held {HOLD:?} with a {WATCHDOG:?} watchdog; pttl now {pttl} ms");
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock().await.unwrap() })
    };
    subscribed(&server, &lock_channel(name), 1).await;
    java.call("j1", &format!("unlock lock {name}")).await;
    let guard = within(HANG, "rust waiter after the java unlock", waiter)
        .await
        .unwrap();

    // Rust holds for HOLD: Java cannot get it in that time.
    let tried = java
        .call("j2", &format!("try_lock lock {name} {}", HOLD.as_millis()))
        .await;
    assert_eq!(
        tried.value, "false",
        "java got the lock while leasehold's watchdog held it"
    );
    assert!(!guard.is_lost());
    let pttl = server.cmd(&["PTTL", name]);
    println!("{TEST}: rust held {HOLD:?} with a {WATCHDOG:?} watchdog; pttl now {pttl} ms");
    let waiter = java.send("j2", &format!("lock lock {name}")).await;
    subscribed(&server, &lock_channel(name), 1).await;
    guard.unlock().await.unwrap();
    waiter.ok().await;
    java.call("j2", &format!("unlock lock {name}")).await;
    client.shutdown().await.unwrap();
}

/// Java's forceUnlock wakes a Rust waiter and the Rust holder is told its
/// lease is lost; leasehold's force_unlock wakes a Java waiter, and the
/// Java holder's unlock then fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_wakes_the_other_side() {
    const TEST: &str = "force_unlock";
    let Some((server, java, client)) = scene(TEST).await else {
        return;
    };
    let name = "interop:force";
    let lock = client.lock(name);

    // Rust holds, a Rust task waits, Java forces.
    let holder = lock.lock().await.unwrap();
    let waiter = timed({
        let lock = lock.clone();
        async move { lock.lock().await }
    });
    subscribed(&server, &lock_channel(name), 1).await;
    let forced = java.call("j1", &format!("force_unlock lock {name}")).await;
    assert_eq!(forced.value, "true");
    let (acquired, guard) = within(HANG, "rust waiter after java's forceUnlock", waiter)
        .await
        .unwrap();
    within(HANG, "the rust holder told lost", holder.lost()).await;
    let lost_us = now_us();
    println!(
        "{TEST}: java forceUnlock -> rust waiter holds {:.2} ms, rust holder told lost after {:.0} ms",
        ms(forced.start_us, acquired),
        ms(forced.start_us, lost_us)
    );
    assert!(
        holder.unlock().await.is_err(),
        "the lost guard's unlock fails"
    );
    guard.unlock().await.unwrap();

    // Java holds, a Java thread waits, Rust forces.
    java.call("j1", &format!("lock lock {name}")).await;
    let waiter = java.send("j2", &format!("lock lock {name}")).await;
    subscribed(&server, &lock_channel(name), 1).await;
    let forced_at = now_us();
    assert!(lock.force_unlock().await.unwrap());
    let acquired = waiter.ok().await;
    let stale = java
        .send("j1", &format!("unlock lock {name}"))
        .await
        .reply()
        .await;
    println!(
        "{TEST}: rust force_unlock -> java waiter holds {:.2} ms; java holder's unlock: {} {}",
        ms(forced_at, acquired.end_us),
        if stale.ok { "ok" } else { "error" },
        stale.value
    );
    assert!(!stale.ok, "the forced-out java holder's unlock fails");
    java.call("j2", &format!("unlock lock {name}")).await;
    client.shutdown().await.unwrap();
}

// --- RFencedLock -----------------------------------------------------------------

/// Fencing tokens only grow, whichever side takes the lock, with and
/// without a wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_tokens_grow_across_both_sides() {
    const TEST: &str = "fenced";
    let Some((server, java, client)) = scene(TEST).await else {
        return;
    };
    let name = "interop:fenced";
    let lock = client.fenced_lock(name);
    let mut tokens: Vec<(&str, u64)> = Vec::new();
    for _ in 0..3 {
        let reply = java.call("j1", &format!("lock fenced {name}")).await;
        tokens.push(("java", reply.value.parse().unwrap()));
        java.call("j1", &format!("unlock fenced {name}")).await;
        let guard = lock.lock().await.unwrap();
        tokens.push(("rust", guard.token().expect("a fenced guard has a token")));
        guard.unlock().await.unwrap();
    }
    // Java holds, Rust waits.
    let reply = java.call("j1", &format!("lock fenced {name}")).await;
    tokens.push(("java", reply.value.parse().unwrap()));
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock().await.unwrap() })
    };
    subscribed(&server, &lock_channel(name), 1).await;
    java.call("j1", &format!("unlock fenced {name}")).await;
    let guard = within(HANG, "rust fenced waiter", waiter).await.unwrap();
    tokens.push(("rust (waited)", guard.token().unwrap()));
    // Rust holds, Java waits.
    let waiter = java.send("j2", &format!("lock fenced {name}")).await;
    subscribed(&server, &lock_channel(name), 1).await;
    guard.unlock().await.unwrap();
    tokens.push(("java (waited)", waiter.ok().await.value.parse().unwrap()));
    java.call("j2", &format!("unlock fenced {name}")).await;

    println!("{TEST}: tokens in acquisition order: {tokens:?}");
    assert!(
        tokens.windows(2).all(|w| w[0].1 < w[1].1),
        "tokens must strictly grow: {tokens:?}"
    );
    client.shutdown().await.unwrap();
}

// --- RPermitExpirableSemaphore -------------------------------------------------

/// Two Java threads and two Rust tasks share 2 permits for a few seconds;
/// an INCR inside counts the holders, never more than 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_permits_are_never_exceeded_across_both_sides() {
    const TEST: &str = "semaphore";
    const PERMITS: u64 = 2;
    let Some((server, java, client)) = scene(TEST).await else {
        return;
    };
    let name = "interop:sem";
    // Java sets the permits; leasehold reads them.
    let set = java.call("j0", &format!("sem_set {name} {PERMITS}")).await;
    assert_eq!(set.value, "true");
    let sem = client.semaphore(name);
    assert_eq!(sem.available_permits().await.unwrap(), PERMITS);
    assert!(
        !sem.try_set_permits(5).await.unwrap(),
        "already set by Java"
    );

    let millis = LOOP.as_millis();
    let mut javas = Vec::new();
    for worker in ["j1", "j2"] {
        javas.push(
            java.send(worker, &format!("sem_loop {name} {millis} {PERMITS}"))
                .await,
        );
    }
    let mut rusts = Vec::new();
    for _ in 0..2 {
        let client = client.clone();
        rusts.push(tokio::spawn(async move {
            let sem = client.semaphore(name);
            let redis = client.redis().clone();
            let in_use = format!("{name}:in_use");
            let deadline = tokio::time::Instant::now() + LOOP;
            let (mut acquisitions, mut overs) = (0u64, 0u64);
            while tokio::time::Instant::now() < deadline {
                let permit = sem.acquire().await.unwrap();
                let n: i64 = redis.incr(&in_use).await.unwrap();
                if n > PERMITS as i64 {
                    overs += 1;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                let _: i64 = redis.decr(&in_use).await.unwrap();
                acquisitions += 1;
                permit.release().await.unwrap();
            }
            (acquisitions, overs)
        }));
    }
    let above = format!("times above {PERMITS}");
    let (java_total, rust_total, overs) = tally(TEST, &above, javas, rusts).await;
    println!(
        "{TEST}: {PERMITS} permits, java {java_total} + rust {rust_total} acquisitions in {LOOP:?}, \
         {overs} times above"
    );
    assert_eq!(overs, 0, "more holders than permits");
    assert!(java_total > 0 && rust_total > 0, "both sides got permits");
    assert_eq!(sem.available_permits().await.unwrap(), PERMITS);
    let java_sees = java.call("j0", &format!("sem_available {name}")).await;
    assert_eq!(java_sees.value, PERMITS.to_string());

    // A Java release wakes a Rust waiter, and the reverse.
    let a = java.call("j1", &format!("sem_acquire {name}")).await.value;
    let b = java.call("j1", &format!("sem_acquire {name}")).await.value;
    let waiter = timed({
        let sem = sem.clone();
        async move { sem.acquire().await }
    });
    subscribed(&server, &format!("redisson_sc:{{{name}}}"), 1).await;
    let released = java.call("j1", &format!("sem_release {name} {a}")).await;
    let (acquired, permit) = within(HANG, "rust semaphore waiter", waiter).await.unwrap();
    let java_to_rust = ms(released.start_us, acquired);
    let waiter = java.send("j2", &format!("sem_acquire {name}")).await;
    subscribed(&server, &format!("redisson_sc:{{{name}}}"), 1).await;
    let released_at = now_us();
    permit.release().await.unwrap();
    let c = waiter.ok().await;
    println!(
        "{TEST}: java release -> rust waiter holds {java_to_rust:.2} ms; \
         rust release -> java waiter holds {:.2} ms",
        ms(released_at, c.end_us)
    );
    java.call("j1", &format!("sem_release {name} {b}")).await;
    java.call("j2", &format!("sem_release {name} {}", c.value))
        .await;
    assert_eq!(sem.available_permits().await.unwrap(), PERMITS);
    client.shutdown().await.unwrap();
}

// --- RCountDownLatch ---------------------------------------------------------------

/// A latch set on one side is counted down by both and opens the waiters
/// of both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_down_latch_opens_for_both_sides() {
    const TEST: &str = "latch";
    let Some((server, java, client)) = scene(TEST).await else {
        return;
    };
    for (setter, name) in [("java", "interop:latch-j"), ("rust", "interop:latch-r")] {
        let latch = client.count_down_latch(name);
        if setter == "java" {
            assert_eq!(
                java.call("j0", &format!("latch_set {name} 2")).await.value,
                "true"
            );
            assert!(!latch.try_set_count(5).await.unwrap());
        } else {
            assert!(latch.try_set_count(2).await.unwrap());
            assert_eq!(
                java.call("j0", &format!("latch_set {name} 5")).await.value,
                "false"
            );
        }
        assert_eq!(latch.count().await.unwrap(), 2);
        let rust_waiter = {
            let latch = latch.clone();
            tokio::spawn(async move {
                latch.wait().await.unwrap();
                now_us()
            })
        };
        let java_waiter = java
            .send("j1", &format!("latch_await {name} {}", HANG.as_millis()))
            .await;
        let channel = format!("redisson_countdownlatch__channel__{{{name}}}");
        subscribed(&server, &channel, 2).await;
        // One count from each side; the side set second counts last.
        let last_at = if setter == "java" {
            java.call("j0", &format!("latch_count_down {name}")).await;
            assert_eq!(
                java.call("j0", &format!("latch_count {name}")).await.value,
                "1"
            );
            let at = now_us();
            latch.count_down().await.unwrap();
            at
        } else {
            latch.count_down().await.unwrap();
            assert_eq!(latch.count().await.unwrap(), 1);
            java.call("j0", &format!("latch_count_down {name}"))
                .await
                .start_us
        };
        let rust_open = within(HANG, "rust latch waiter", rust_waiter)
            .await
            .unwrap();
        let java_open = java_waiter.ok().await;
        assert_eq!(java_open.value, "true", "java's await saw the latch open");
        println!(
            "{TEST}: set by {setter}, last count-down by {}: rust waiter opens {:.2} ms, java waiter {:.2} ms",
            if setter == "java" { "rust" } else { "java" },
            ms(last_at, rust_open),
            ms(last_at, java_open.end_us)
        );
        assert_eq!(latch.count().await.unwrap(), 0);
    }
    client.shutdown().await.unwrap();
}

// --- RFairLock -----------------------------------------------------------------

/// Waiters queued Java, Rust, Java, Rust behind a holder get the fair lock
/// in that order, each soon after the one before lets go; and the same with
/// the sides swapped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_queue_serves_mixed_waiters_in_arrival_order() {
    const TEST: &str = "fair_queue";
    const SERVED_WITHIN_MS: f64 = 10_000.0;
    let Some((server, java, client)) = scene(TEST).await else {
        return;
    };
    let mut failures = Vec::new();
    for (first, name) in [("java", "interop:fair-j"), ("rust", "interop:fair-r")] {
        let order = fair_round(&server, &java, &client, first, name).await;
        let expected: Vec<&str> = if first == "java" {
            vec!["J1", "R1", "J2", "R2"]
        } else {
            vec!["R1", "J1", "R2", "J2"]
        };
        let labels: Vec<&str> = order.iter().map(|(l, _)| *l).collect();
        let gaps: Vec<String> = order
            .iter()
            .map(|(l, after)| format!("{l} +{after:.0} ms"))
            .collect();
        println!("{TEST}: holder {first}, queued {expected:?}; served {gaps:?} (ms after the previous release)");
        // A waiter is woken by the release before it (or, if a wake-up is
        // lost, by a re-check soon after); 10 s is far beyond either.
        let slow = order.iter().any(|(_, after)| *after > SERVED_WITHIN_MS);
        if labels != expected || slow {
            failures.push(format!(
                "holder {first}: queued {expected:?}, served {gaps:?}"
            ));
        }
    }
    client.shutdown().await.unwrap();
    assert!(failures.is_empty(), "out of order: {failures:?}");
}

/// One round of [`fair_queue_serves_mixed_waiters_in_arrival_order`]:
/// returns each waiter's label in the order served, with the ms from the
/// previous release to its acquisition.
async fn fair_round(
    server: &RedisServer,
    java: &Arc<Java>,
    client: &Client,
    first: &str,
    name: &'static str,
) -> Vec<(&'static str, f64)> {
    const HOLD: Duration = Duration::from_millis(100);
    let lock = client.fair_lock(name);
    let queue = lock.queue_key().to_owned();
    // The holder.
    let holder: Option<LockGuard> = if first == "java" {
        java.call("j0", &format!("lock fair {name}")).await;
        None
    } else {
        Some(lock.lock().await.unwrap())
    };
    // (label, acquired µs, released µs)
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(&'static str, u64, u64)>();
    let sides: [&str; 4] = if first == "java" {
        ["java", "rust", "java", "rust"]
    } else {
        ["rust", "java", "rust", "java"]
    };
    let (mut j, mut r) = (0, 0);
    for (queued, side) in sides.into_iter().enumerate() {
        let tx = tx.clone();
        if side == "java" {
            j += 1;
            let label = if j == 1 { "J1" } else { "J2" };
            let worker = format!("jw{j}");
            let pending = java.send(&worker, &format!("lock fair {name}")).await;
            let java = java.clone();
            tokio::spawn(async move {
                let acquired = pending.ok().await.end_us;
                tokio::time::sleep(HOLD).await;
                let released = java.call(&worker, &format!("unlock fair {name}")).await;
                let _ = tx.send((label, acquired, released.start_us));
            });
        } else {
            r += 1;
            let label = if r == 1 { "R1" } else { "R2" };
            let lock = lock.clone();
            tokio::spawn(async move {
                let guard = lock.lock().await.unwrap();
                let acquired = now_us();
                tokio::time::sleep(HOLD).await;
                let released = now_us();
                guard.unlock().await.unwrap();
                let _ = tx.send((label, acquired, released));
            });
        }
        let want = (queued + 1).to_string();
        eventually(
            HANG,
            &format!("{side} waiter {} queued", queued + 1),
            || server.cmd(&["LLEN", &queue]) == want,
        )
        .await;
    }
    drop(tx);
    let released = now_us();
    match holder {
        Some(guard) => guard.unlock().await.unwrap(),
        None => {
            java.call("j0", &format!("unlock fair {name}")).await;
        }
    }
    let mut served = Vec::new();
    while let Some(event) = within(HANG, "the fair waiters", rx.recv()).await {
        served.push(event);
    }
    served.sort_by_key(|(_, acquired, _)| *acquired);
    let mut previous = released;
    served
        .into_iter()
        .map(|(label, acquired, released)| {
            let gap = ms(previous, acquired);
            previous = released;
            (label, gap)
        })
        .collect()
}

// --- RReadWriteLock ------------------------------------------------------------

/// Readers of both sides share; a writer of either side is kept out until
/// the last reader of both sides leaves, and a writer's unlock wakes the
/// other side's readers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_lock_mixes_readers_and_writers_of_both_sides() {
    const TEST: &str = "rw_mixing";
    let Some((server, java, client)) = scene(TEST).await else {
        return;
    };
    let name = "interop:rw";
    let rw = client.read_write_lock(name);
    let channel = format!("redisson_rwlock:{{{name}}}");

    // Java reads first: a Rust reader shares, a Rust writer waits for both.
    java.call("j1", &format!("lock read {name}")).await;
    let rust_reader = rw.read().try_lock().await.unwrap().expect("readers share");
    assert!(
        rw.write().try_lock().await.unwrap().is_none(),
        "readers exclude a writer"
    );
    let writer = timed({
        let rw = rw.clone();
        async move { rw.write().lock().await }
    });
    subscribed(&server, &channel, 1).await;
    java.call("j1", &format!("unlock read {name}")).await;
    tokio::time::sleep(SETTLE).await;
    assert!(!writer.is_finished(), "the rust reader still holds");
    let last_read = now_us();
    rust_reader.unlock().await.unwrap();
    let (acquired, write_guard) = within(HANG, "rust writer", writer).await.unwrap();
    println!(
        "{TEST}: java+rust readers, rust writer in {:.2} ms after the last (rust) read unlock",
        ms(last_read, acquired)
    );
    // Java is kept out while Rust writes; Rust's write unlock wakes a Java reader.
    assert_eq!(
        java.call("j2", &format!("try_lock read {name} 0"))
            .await
            .value,
        "false"
    );
    let java_reader = java.send("j2", &format!("lock read {name}")).await;
    subscribed(&server, &channel, 1).await;
    let unlocked = now_us();
    write_guard.unlock().await.unwrap();
    let woke = java_reader.ok().await;
    println!(
        "{TEST}: rust write unlock -> java reader holds {:.2} ms",
        ms(unlocked, woke.end_us)
    );
    java.call("j2", &format!("unlock read {name}")).await;

    // Rust reads first: a Java reader shares, a Java writer waits for both.
    let rust_reader = rw.read().lock().await.unwrap();
    assert_eq!(
        java.call("j1", &format!("try_lock read {name} 0"))
            .await
            .value,
        "true",
        "readers share"
    );
    assert_eq!(
        java.call("j3", &format!("try_lock write {name} 0"))
            .await
            .value,
        "false",
        "readers exclude a writer"
    );
    let java_writer = java.send("j3", &format!("lock write {name}")).await;
    subscribed(&server, &channel, 1).await;
    rust_reader.unlock().await.unwrap();
    let last_read = java.call("j1", &format!("unlock read {name}")).await;
    let wrote = java_writer.ok().await;
    println!(
        "{TEST}: rust+java readers, java writer in {:.2} ms after the last (java) read unlock",
        ms(last_read.start_us, wrote.end_us)
    );
    // Rust is kept out while Java writes; Java's write unlock wakes a Rust reader.
    assert!(rw.read().try_lock().await.unwrap().is_none());
    let reader = timed({
        let rw = rw.clone();
        async move { rw.read().lock().await }
    });
    subscribed(&server, &channel, 1).await;
    let unlocked = java.call("j3", &format!("unlock write {name}")).await;
    let (acquired, guard) = within(HANG, "rust reader", reader).await.unwrap();
    println!(
        "{TEST}: java write unlock -> rust reader holds {:.2} ms",
        ms(unlocked.start_us, acquired)
    );
    guard.unlock().await.unwrap();
    client.shutdown().await.unwrap();
}

/// A reader with a fixed lease shares the lock with a watchdog reader of
/// the other side whose process dies: no writer may get in before the
/// fixed lease ends. Rust's fixed-lease reader with a dying Java reader,
/// then Java's fixed-lease reader with a dying Rust reader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_lease_reader_outlives_a_dead_co_reader_of_the_other_side() {
    const TEST: &str = "rw_dead_co_reader";
    const LEASE: Duration = Duration::from_secs(15);
    let Some((server, java, client)) = scene(TEST).await else {
        return;
    };
    let writer_client = rust_client(&server).await;
    let mut failures = Vec::new();

    // Rust reads with a fixed lease; Java reads with its watchdog and dies.
    let name = "interop:rw-dead-java";
    let reader = client
        .read_write_lock(name)
        .read()
        .lock_with_lease(LEASE)
        .await
        .unwrap();
    let lease_end = now_us() + LEASE.as_micros() as u64;
    java.call("j1", &format!("lock read {name}")).await;
    // Let Java's watchdog renew at least once.
    tokio::time::sleep(WATCHDOG).await;
    let killed = java.kill().await;
    let left = Duration::from_micros(lease_end.saturating_sub(now_us()));
    let writer = writer_client
        .read_write_lock(name)
        .write()
        .try_lock_for(left.saturating_sub(Duration::from_millis(500)))
        .await
        .unwrap();
    if let Some(guard) = writer {
        let at = now_us();
        failures.push(format!(
            "rust fixed-lease reader, java watchdog reader killed: a writer got in {:.1} s after the kill \
             with {:.1} s left on the rust reader's {LEASE:?} lease (reader lost: {})",
            ms(killed, at) / 1000.0,
            ms(at, lease_end) / 1000.0,
            reader.is_lost()
        ));
        guard.unlock().await.unwrap();
    } else {
        println!("{TEST}: rust fixed-lease reader kept the writer out until its lease end");
    }
    drop(reader);

    // Java reads with a fixed lease; a Rust watchdog reader (a child
    // process) dies. The JVM of the first half is gone: start another.
    drop(java);
    let Some(java) = Java::start(TEST, &server).await else {
        return;
    };
    let name = "interop:rw-dead-rust";
    java.call("j1", &format!("lock read {name} {}", LEASE.as_millis()))
        .await;
    let lease_end = now_us() + LEASE.as_micros() as u64;
    let mut child = RustHolder::start(&server, "read", name).await;
    tokio::time::sleep(WATCHDOG).await;
    let killed = child.kill().await;
    let left = Duration::from_micros(lease_end.saturating_sub(now_us()));
    let writer = writer_client
        .read_write_lock(name)
        .write()
        .try_lock_for(left.saturating_sub(Duration::from_millis(500)))
        .await
        .unwrap();
    if let Some(guard) = writer {
        let at = now_us();
        failures.push(format!(
            "java fixed-lease reader, rust watchdog reader killed: a writer got in {:.1} s after the kill \
             with {:.1} s left on the java reader's {LEASE:?} lease",
            ms(killed, at) / 1000.0,
            ms(at, lease_end) / 1000.0
        ));
        guard.unlock().await.unwrap();
    } else {
        println!("{TEST}: java fixed-lease reader kept the writer out until its lease end");
    }
    client.shutdown().await.unwrap();
    writer_client.shutdown().await.unwrap();
    assert!(failures.is_empty(), "{failures:#?}");
}

// --- crashes -------------------------------------------------------------------

/// A killed JVM's lock is taken by a Rust waiter once Redisson's
/// watchdog lease lapses; a killed Rust holder's lock (and a Rust client
/// dropped with its guard) is taken by a Java waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_holder_of_either_side_lets_the_other_in() {
    const TEST: &str = "crash";
    let server = RedisServer::start();
    let Some(java) = Java::start(TEST, &server).await else {
        return;
    };
    let name = "interop:crash";
    let channel = lock_channel(name);

    // A Rust process holding the lock is killed: Java gets it.
    let mut child = RustHolder::start(&server, "lock", name).await;
    let waiter = java.send("j1", &format!("lock lock {name}")).await;
    subscribed(&server, &channel, 1).await;
    tokio::time::sleep(WATCHDOG).await; // past one timeout: renewals kept it
    assert!(
        support::fixture::exists(&server, name),
        "renewed by the child"
    );
    let killed = child.kill().await;
    let got = waiter.ok().await;
    println!(
        "{TEST}: rust holder process killed -> java waiter holds after {:.0} ms (watchdog {WATCHDOG:?})",
        ms(killed, got.end_us)
    );
    java.call("j1", &format!("unlock lock {name}")).await;

    // A Rust client dropped with its guard (no shutdown): Java gets it.
    let client = rust_client(&server).await;
    let guard = client.lock(name).lock().await.unwrap();
    let waiter = java.send("j1", &format!("lock lock {name}")).await;
    subscribed(&server, &channel, 1).await;
    let dropped = now_us();
    drop(guard);
    drop(client);
    let got = waiter.ok().await;
    println!(
        "{TEST}: rust guard and client dropped -> java waiter holds after {:.2} ms",
        ms(dropped, got.end_us)
    );
    java.call("j1", &format!("unlock lock {name}")).await;

    // The JVM holding the lock is killed: Rust gets it.
    let client = rust_client(&server).await;
    java.call("j1", &format!("lock lock {name}")).await;
    let waiter = timed({
        let lock = client.lock(name);
        async move { lock.lock().await }
    });
    subscribed(&server, &channel, 1).await;
    tokio::time::sleep(WATCHDOG).await; // past one timeout: renewals kept it
    assert!(!waiter.is_finished(), "java's watchdog kept the lock");
    let killed = java.kill().await;
    let (acquired, guard) = within(HANG, "rust waiter after the JVM died", waiter)
        .await
        .unwrap();
    println!(
        "{TEST}: JVM holder killed -> rust waiter holds after {:.0} ms (watchdog {WATCHDOG:?})",
        ms(killed, acquired)
    );
    guard.unlock().await.unwrap();
    client.shutdown().await.unwrap();
}

/// A Rust holder in a process of its own (this test binary, run again with
/// [`CHILD_ENV`] set, running [`rust_holder_process`]), to be killed.
struct RustHolder {
    child: Child,
}

impl RustHolder {
    /// Starts the child and returns once it holds `kind` (`lock` or `read`)
    /// of `name` with its watchdog.
    async fn start(server: &RedisServer, kind: &str, name: &str) -> RustHolder {
        let exe = env::current_exe().expect("the test binary's path");
        let mut child = Command::new(exe)
            .args([
                "--exact",
                "rust_holder_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, format!("{} {kind} {name}", server.url()))
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the rust holder process");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        within(HANG, "the rust holder process taking the lock", async {
            while let Some(line) = lines.next_line().await.unwrap() {
                // libtest writes "test rust_holder_process ... " first.
                if line.contains(HELD) {
                    return;
                }
            }
            panic!("the rust holder process exited without the lock");
        })
        .await;
        RustHolder { child }
    }

    /// SIGKILL; returns when.
    async fn kill(&mut self) -> u64 {
        let at = now_us();
        self.child.start_kill().expect("kill the rust holder");
        within(HANG, "the killed rust holder exiting", self.child.wait())
            .await
            .unwrap();
        at
    }
}

/// Not a scenario: the body of [`RustHolder`]'s process. Does nothing
/// unless [`CHILD_ENV`] is set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_holder_process() {
    let Ok(spec) = env::var(CHILD_ENV) else {
        return;
    };
    let words: Vec<&str> = spec.split(' ').collect();
    let [url, kind, name] = words[..] else {
        panic!("{CHILD_ENV}={spec}: want URL KIND NAME");
    };
    let client = Client::builder()
        .url(url)
        .watchdog_timeout(WATCHDOG)
        .build()
        .await
        .unwrap();
    let guard = match kind {
        "lock" => client.lock(name).lock().await.unwrap(),
        "read" => client.read_write_lock(name).read().lock().await.unwrap(),
        other => panic!("unknown kind {other}"),
    };
    println!("{HELD} {name}");
    // Killed long before this ends.
    tokio::time::sleep(HANG).await;
    drop(guard);
}

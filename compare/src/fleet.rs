//! What waiting costs Redis at fleet scale (issue 48,
//! `LEASEHOLD_COMPARE_ONLY=fleet`): the commands and CPU time redis-server
//! spends while 100, 1,000 and 10,000 tasks wait for held locks, while as
//! many leases are held with nobody waiting, and how long a killed
//! client's waiters hold up a live one.
//!
//! # Waiting fleets
//!
//! For each size n, kind (`FairLock`, `Lock`) and layout: a holder client
//! takes the lock(s) with `lock()` (no lease: its watchdog renews them);
//! 10 other `leasehold::Client`s (one connection each) carry n waiting
//! tasks, waiter i on client `i % 10`. Layout *1 lock*: every waiter on
//! the one lock; *10 locks*: waiter i on lock `(i / 10) % 10`, so each
//! lock has n / 10 waiters, from all 10 clients. A waiter is a spawned
//! task calling `lock().await` (if it ever gets the lock it drops the
//! guard at once: it holds nothing; the table says if that happened).
//!
//! Settling: the waiters are all spawned at once; the run then polls until
//! they have made their first try (fair: the `LLEN` of the locks' queues
//! sums to n; plain, whose waiters leave nothing in Redis: the clients'
//! `Stats::busy_attempts` grew by n), and in any case [`WARM_UP`] (35 s)
//! from the first spawn, so that every waiter has slept its first
//! re-check out (a waiter re-checks after the holder's remaining lease,
//! at most 30 s) and the window sees the steady state, not the arrival.
//! The *queued in* column is the first of the two; a fleet that does not
//! get there (no progress for [`QUEUE_STALL`]) is reported with how far
//! it got, and measured anyway.
//!
//! The window (60 s, `LEASEHOLD_FLEET_WINDOW_SECS`; 15 s with
//! `LEASEHOLD_COMPARE_QUICK=1`) is bracketed by two readings of `INFO cpu
//! commandstats` (`server_work.rs`): every command the server ran,
//! scripts' inner commands included, and its CPU time. The readings are
//! server-wide, so they count everything the scenario's 11 clients do:
//! the waiters, the holder's watchdog (1 or 10 leases), the clients'
//! records. Inside the window one raw connection reads `INFO
//! commandstats` every second, for the busiest second (waiters that
//! re-check together show as bursts the average hides); its `INFO`s are
//! taken off the counts, and its CPU is in the idle baseline, which is
//! measured the same way (the sampler running, no other client) before
//! the first scenario. *CPU above idle* is the window's CPU per second
//! less that baseline (negative when within noise of it).
//!
//! The work is periodic (watchdog renewals every 10 s, waiters' re-checks
//! after the holder's remaining lease, fair waiters' refreshes every
//! 2 s), and waiters spawned together run in step, so a window sees a
//! whole number of periods only by luck: 60 s is 6 renewal periods and 2
//! of a 30 s re-check, and a window shorter than the longest period (the
//! quick run's 15 s) may miss the re-checks altogether. The busiest
//! second shows the bursts.
//!
//! Cleanup, in an application's order: abort the waiting tasks (a dropped
//! acquire leaves the queue in the background: up to [`SETTLE_LIMIT`] is
//! given for the fair queues to empty), unlock the holder's guards, shut
//! every client down, then poll `DBSIZE` from [`SETTLE`] up to
//! [`SETTLE_LIMIT`] until it reads 0. Keys still there are named (with
//! their TTL) and the database is flushed so the next scenario starts
//! empty.
//!
//! # Held leases
//!
//! n plain `Lock`s, each held with `lock()` (watchdog) by one of 10
//! clients (lock i by client `i % 10`), nobody waiting: the watchdog's
//! renewal cost. Warm-up [`HELD_WARM_UP`] (15 s, past the first renewal
//! at 10 s), then the same window and cleanup.
//!
//! # A dead client's hold-up
//!
//! Holder H holds one lock; a victim process V (this binary again,
//! `--fleet-victim <fair|plain> <url> <name> <n>`) connects, starts n
//! waiters on the lock and prints `ready` once its client has counted n
//! busy tries (each waiter's first); for the fair lock the run then waits
//! for `LLEN redisson_lock_queue:{<name>}` to reach n. Then W, a live
//! waiter in this process, starts (fair: until the queue holds n + 1, W
//! behind V's waiters; plain: until W's first busy try), 300 ms more, V is
//! killed (SIGKILL), H unlocks, and the time from H's `unlock()` call to
//! W's `lock()` returning is measured: n = 1, 10, 100, 3 rounds each,
//! fair and plain (plain waiters are not queued, so W should be served at
//! once), each round on a lock of its own.
//!
//! # Run time
//!
//! The full run took 26 min on a 2-core machine (at 2887713): 12 waiting
//! fleets of 35 s warm-up + 60 s window + 3–45 s of cleanup (the 10,000
//! fair waiters' the longest), 3 held-lease rows of ~80 s, 10 s of idle
//! baseline, ~1.3 min of dead-client rounds; longer if 10,000 fair
//! waiters take more than the warm-up to queue (the table says how long
//! they took). With `LEASEHOLD_COMPARE_QUICK=1` (sizes 100 and 1,000,
//! 15 s windows) 10 min. `LEASEHOLD_FLEET_SIZES=100,1000` picks sizes,
//! `LEASEHOLD_FLEET_PARTS=waiting,held,dead` parts, and
//! `LEASEHOLD_FLEET_WARMUP_SECS` the waiters' warm-up (for development:
//! a shorter one measures the arrival too).
//!
//! Output: three markdown tables on stdout, progress on stderr, and
//! `docs/fleet.svg` (Redis commands/s against n, log-log, one line per
//! kind × layout and one for held leases).

use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client as FredClient;
use fred::interfaces::ClientLike;
use leasehold::{Client, LockGuard};
use leasehold_testkit::server::RedisServer;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::contender::fred_client;
use crate::server_work::{Delta, Work};
use crate::{cpu_ns, Stats};

/// Clients carrying the waiters (or the held leases).
const CLIENTS: usize = 10;
/// Locks of the spread layout.
const SPREAD: usize = 10;
/// From the first waiter's spawn to the window, at least.
const WARM_UP: Duration = Duration::from_secs(35);
/// From the last lease taken to the window (the watchdog renews every
/// 10 s at the default 30 s lease).
const HELD_WARM_UP: Duration = Duration::from_secs(15);
/// A fleet whose queue (or count of first tries) has not grown for this
/// long is taken as settled where it is.
const QUEUE_STALL: Duration = Duration::from_secs(30);
/// The longest wait for a fleet to queue.
const QUEUE_LIMIT: Duration = Duration::from_secs(600);
/// The sampler's interval inside the window.
const SAMPLE: Duration = Duration::from_secs(1);
/// Cleanup: `DBSIZE` is read from this long after the clients shut down…
const SETTLE: Duration = Duration::from_secs(3);
/// …until it reads 0 or this long has passed.
const SETTLE_LIMIT: Duration = Duration::from_secs(10);
/// The idle baseline's window.
const IDLE: Duration = Duration::from_secs(10);
/// Dead-client rounds per size, and the victim's sizes.
const DEAD_ROUNDS: usize = 3;
const DEAD_SIZES: [usize; 3] = [1, 10, 100];
/// The longest a dead-client round waits for W.
const DEAD_LIMIT: Duration = Duration::from_secs(90);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Fair,
    Plain,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    One,
    Spread,
}

/// What a row measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum What {
    Waiting(Kind, Layout),
    Held,
}

/// A lock handle of either kind.
enum Handle {
    /// Boxed: a `FairLock` is some 200 bytes, a `Lock` one pointer.
    Fair(Box<leasehold::FairLock>),
    Plain(leasehold::Lock),
}

/// Sizes, window and parts of one run.
struct Plan {
    sizes: Vec<usize>,
    window: Duration,
    warm_up: Duration,
    waiting: bool,
    held: bool,
    dead: bool,
}

/// What one window saw.
struct Window {
    work: Delta,
    secs: f64,
    /// Commands in the busiest sampled second, per second.
    peak: f64,
    /// This process's CPU time over the window, ms per second.
    client_cpu: f64,
}

/// One row of the waiting or held table.
struct Measured {
    n: usize,
    what: What,
    /// How long the fleet took to queue (or to take its leases), or how
    /// far it got.
    ready: String,
    window: Window,
    /// Unlock channels the 10 clients were subscribed to, summed.
    channels: usize,
    keys_during: u64,
    /// Waiters whose `lock()` returned the lock / an error (both should be
    /// 0: the locks stay held).
    acquired: u64,
    errors: u64,
    cleanup: Cleanup,
    /// What went wrong in the cleanup (the holder's unlock failing).
    notes: Vec<String>,
}

/// What the cleanup left.
struct Cleanup {
    /// From the abort (or the first unlock) to `DBSIZE` 0 or the limit.
    took: Duration,
    keys_after: u64,
    /// Up to 5 leftover keys with their TTL.
    leftover: Vec<String>,
}

/// One dead-client round.
struct HoldUp {
    took: Option<Duration>,
    note: String,
}

/// Runs the parts the plan names and prints their tables.
pub async fn run(server: &RedisServer, quick: bool) {
    let started = Instant::now();
    let plan = Plan::from_env(quick);
    let raw = fred_client(&server.url()).await;
    eprintln!(
        "[fleet] sizes {:?}, window {} s, warm-up {} s; waiting {}, held {}, dead {}",
        plan.sizes,
        plan.window.as_secs(),
        plan.warm_up.as_secs(),
        plan.waiting,
        plan.held,
        plan.dead
    );
    let idle_window = window(server, &raw, IDLE).await;
    let idle = idle_window.work.cpu_us as f64 / idle_window.secs;
    eprintln!(
        "[fleet] idle redis-server (sampler on): {idle:.0} µs CPU/s, {:.2} commands/s",
        idle_window.work.commands() as f64 / idle_window.secs
    );

    let mut rows = Vec::new();
    if plan.waiting {
        for &n in &plan.sizes {
            for layout in [Layout::One, Layout::Spread] {
                for kind in [Kind::Fair, Kind::Plain] {
                    let m = waiting(server, &raw, kind, layout, n, &plan).await;
                    progress(&m, idle);
                    rows.push(m);
                }
            }
        }
    }
    if plan.held {
        for &n in &plan.sizes {
            let m = held(server, &raw, n, &plan).await;
            progress(&m, idle);
            rows.push(m);
        }
    }
    let mut dead = Vec::new();
    if plan.dead {
        for kind in [Kind::Fair, Kind::Plain] {
            for n in DEAD_SIZES {
                let mut rounds = Vec::new();
                for round in 0..DEAD_ROUNDS {
                    let h = hold_up(server, &raw, kind, n, round).await;
                    eprintln!(
                        "[fleet] dead client, {} with {n} dead waiters, round {}: {} {}",
                        kind.label(),
                        round + 1,
                        h.took
                            .map(|d| format!("{:.3} s", d.as_secs_f64()))
                            .unwrap_or_else(|| "not served".into()),
                        h.note
                    );
                    rounds.push(h);
                }
                dead.push((kind, n, rounds));
            }
        }
    }
    let dead_cleanup = if plan.dead {
        Some(settle(&raw, Instant::now()).await)
    } else {
        None
    };
    let _ = raw.quit().await;

    let took = started.elapsed();
    println!(
        "\n## What waiting costs Redis at fleet scale (issue 48): {CLIENTS} clients, window {} s, warm-up {} s; run took {:.1} min\n",
        plan.window.as_secs(),
        plan.warm_up.as_secs(),
        took.as_secs_f64() / 60.0
    );
    println!(
        "Idle redis-server (no client but the sampler): {idle:.0} µs CPU per second, taken off the CPU columns. Commands are `INFO commandstats` calls (scripts' inner commands included), server-wide: the waiters', the holder's watchdog's (1 or 10 leases) and every client's record upkeep. *Busiest second*: the most commands in one of the window's 1 s samples.\n"
    );
    if plan.window < Duration::from_secs(30) {
        println!(
            "**A {} s window is shorter than the waiters' re-check period (up to the 30 s lease): periodic work may fall outside it. Use the full run's 60 s for numbers.**\n",
            plan.window.as_secs()
        );
    }
    if plan.waiting {
        waiting_report(&rows, idle);
    }
    if plan.held {
        held_report(&rows, idle);
    }
    if plan.dead {
        dead_report(&dead, dead_cleanup.as_ref());
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/fleet.svg");
    let series = plot_series(&rows);
    if !series.is_empty() {
        match crate::plot::fleet_commands(&path, &series) {
            Ok(()) => eprintln!("[fleet] wrote {}", path.display()),
            Err(e) => eprintln!("[fleet] plot failed: {e}"),
        }
    }
    eprintln!("[fleet] done in {:.1} min", took.as_secs_f64() / 60.0);
}

/// The victim process (`--fleet-victim <fair|plain> <url> <name> <n>`):
/// n waiters on the lock, `ready` once its client has counted n busy
/// tries, then nothing until it is killed.
pub async fn victim(args: &[String]) {
    let [kind, url, name, n] = args else {
        eprintln!("usage: --fleet-victim <fair|plain> <url> <name> <n>");
        std::process::exit(2);
    };
    let kind = match kind.as_str() {
        "fair" => Kind::Fair,
        "plain" => Kind::Plain,
        _ => {
            eprintln!("--fleet-victim: kind is fair or plain");
            std::process::exit(2);
        }
    };
    let n: u64 = n.parse().expect("n");
    let client = Client::connect(url).await.expect("victim connect");
    for _ in 0..n {
        let h = Handle::of(&client, kind, name);
        tokio::spawn(async move {
            let guard = h.lock().await;
            // Holds whatever it got until the process is killed.
            std::future::pending::<()>().await;
            drop(guard);
        });
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while client.stats().busy_attempts < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!("ready {}", client.stats().busy_attempts);
    use std::io::Write;
    let _ = std::io::stdout().flush();
    std::future::pending::<()>().await;
}

// === the scenarios ===

/// n waiters of `kind` in `layout` on held locks: see the module docs.
async fn waiting(
    server: &RedisServer,
    raw: &FredClient,
    kind: Kind,
    layout: Layout,
    n: usize,
    plan: &Plan,
) -> Measured {
    let url = server.url();
    eprintln!(
        "[fleet] {n} waiters, {}, {}: starting",
        layout.label(),
        kind.label()
    );
    let holder = Client::connect(&url).await.expect("holder connect");
    let names: Vec<String> = (0..layout.locks())
        .map(|j| format!("fleet:{}:{}:{n}:{j}", kind.short(), layout.short()))
        .collect();
    let mut guards = Vec::new();
    for name in &names {
        let guard = Handle::of(&holder, kind, name).lock().await;
        guards.push(guard.expect("holder lock"));
    }
    let queues: Vec<String> = names
        .iter()
        .filter_map(|name| Handle::of(&holder, kind, name).queue_key())
        .collect();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(Client::connect(&url).await.expect("waiter client connect"));
    }
    let busy_before = busy(&clients);
    let acquired = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));

    let started = Instant::now();
    let mut tasks = JoinSet::new();
    for i in 0..n {
        let h = Handle::of(
            &clients[i % CLIENTS],
            kind,
            &names[(i / CLIENTS) % names.len()],
        );
        let (acquired, errors) = (acquired.clone(), errors.clone());
        tasks.spawn(async move {
            match h.lock().await {
                Ok(guard) => {
                    acquired.fetch_add(1, Ordering::Relaxed);
                    drop(guard);
                }
                Err(_) => {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    let spawned = started.elapsed();
    let ready = settle_fleet(started, n as u64, raw, &queues, &clients, busy_before).await;
    let ready = format!("{ready} (spawned in {:.0} ms)", spawned.as_secs_f64() * 1e3);
    eprintln!(
        "[fleet] {n} waiters, {}, {}: {ready}",
        layout.label(),
        kind.label()
    );
    tokio::time::sleep_until(started + plan.warm_up).await;
    let channels = clients.iter().map(Client::subscribed_channels).sum();
    let keys_during = dbsize(raw).await;
    let window = window(server, raw, plan.window).await;

    let cleanup_start = Instant::now();
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    // The aborted waiters leave their queues in the background.
    while !queues.is_empty() && cleanup_start.elapsed() < SETTLE_LIMIT {
        if queued(raw, &queues).await == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut notes = Vec::new();
    for guard in guards {
        if let Err(e) = guard.unlock().await {
            eprintln!("[fleet] holder unlock: {e}");
            notes.push(format!("holder's unlock: {e}"));
        }
    }
    notes.dedup();
    for c in &clients {
        let _ = c.shutdown().await;
    }
    let _ = holder.shutdown().await;
    let cleanup = settle(raw, cleanup_start).await;
    Measured {
        n,
        what: What::Waiting(kind, layout),
        ready,
        window,
        channels,
        keys_during,
        acquired: acquired.load(Ordering::Relaxed),
        errors: errors.load(Ordering::Relaxed),
        cleanup,
        notes,
    }
}

/// n leases held by 10 clients, nobody waiting.
async fn held(server: &RedisServer, raw: &FredClient, n: usize, plan: &Plan) -> Measured {
    let url = server.url();
    eprintln!("[fleet] {n} held leases: starting");
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(Client::connect(&url).await.expect("client connect"));
    }
    let started = Instant::now();
    let mut takers = JoinSet::new();
    for (c, client) in clients.iter().enumerate() {
        let client = client.clone();
        takers.spawn(async move {
            let mut guards: Vec<LockGuard> = Vec::new();
            for i in (c..n).step_by(CLIENTS) {
                let lock = client.lock(&format!("fleet:held:{n}:{i}"));
                guards.push(lock.lock().await.expect("held lock"));
            }
            guards
        });
    }
    let mut guards = Vec::new();
    while let Some(g) = takers.join_next().await {
        guards.push(g.expect("taker task"));
    }
    let ready = format!("{n} taken in {:.2} s", started.elapsed().as_secs_f64());
    eprintln!("[fleet] {n} held leases: {ready}");
    tokio::time::sleep(HELD_WARM_UP).await;
    let channels = clients.iter().map(Client::subscribed_channels).sum();
    let keys_during = dbsize(raw).await;
    let window = window(server, raw, plan.window).await;

    let cleanup_start = Instant::now();
    let mut unlockers = JoinSet::new();
    for batch in guards {
        unlockers.spawn(async move {
            let mut errors = 0u64;
            for guard in batch {
                if guard.unlock().await.is_err() {
                    errors += 1;
                }
            }
            errors
        });
    }
    let mut errors = 0;
    while let Some(e) = unlockers.join_next().await {
        errors += e.unwrap_or(0);
    }
    for c in &clients {
        let _ = c.shutdown().await;
    }
    let cleanup = settle(raw, cleanup_start).await;
    Measured {
        n,
        what: What::Held,
        ready,
        window,
        channels,
        keys_during,
        acquired: 0,
        errors,
        cleanup,
        notes: Vec::new(),
    }
}

/// One dead-client round: see the module docs.
async fn hold_up(
    server: &RedisServer,
    raw: &FredClient,
    kind: Kind,
    n: usize,
    round: usize,
) -> HoldUp {
    let url = server.url();
    let name = format!("fleet:dead:{}:{n}:{round}", kind.short());
    let h = Client::connect(&url).await.expect("holder connect");
    let lock = Handle::of(&h, kind, &name);
    let queue = lock.queue_key();
    let guard = lock.lock().await.expect("holder lock");
    let exe = std::env::current_exe().expect("own executable");
    let mut victim = Command::new(exe)
        .args(["--fleet-victim", kind.short(), &url, &name, &n.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the victim process");
    let mut lines = BufReader::new(victim.stdout.take().expect("victim stdout")).lines();
    let ready = tokio::time::timeout(Duration::from_secs(60), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.starts_with("ready") {
                return Some(line);
            }
        }
        None
    })
    .await
    .ok()
    .flatten();
    let mut note = Vec::new();
    if ready.is_none() {
        note.push("the victim never said ready".to_owned());
    }
    if let Some(q) = &queue {
        let full = move || async move { int(raw, "LLEN", &[q]).await >= n as u64 };
        if !wait_until(Duration::from_secs(30), full).await {
            note.push(format!(
                "V's queue reached only {}",
                int(raw, "LLEN", &[q]).await
            ));
        }
    }
    let w = Client::connect(&url).await.expect("W connect");
    let (tx, rx) = tokio::sync::oneshot::channel();
    let wl = Handle::of(&w, kind, &name);
    let wait = tokio::spawn(async move {
        let got = wl.lock().await;
        let _ = tx.send((Instant::now(), got));
    });
    let queued = match &queue {
        Some(q) => {
            let behind = move || async move { int(raw, "LLEN", &[q]).await > n as u64 };
            wait_until(Duration::from_secs(30), behind).await
        }
        None => {
            let w = &w;
            let tried = move || async move { w.stats().busy_attempts >= 1 };
            wait_until(Duration::from_secs(30), tried).await
        }
    };
    if !queued {
        note.push("W not seen queued".to_owned());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    if let Some(q) = &queue {
        note.push(format!(
            "queue {} at the kill",
            int(raw, "LLEN", &[q]).await
        ));
    }
    let _ = victim.kill().await;
    let t0 = Instant::now();
    if let Err(e) = guard.unlock().await {
        note.push(format!("H's unlock: {e}"));
    }
    let took = match tokio::time::timeout(DEAD_LIMIT, rx).await {
        Ok(Ok((at, Ok(g)))) => {
            let _ = g.unlock().await;
            Some(at - t0)
        }
        Ok(Ok((_, Err(e)))) => {
            note.push(format!("W's lock(): {e}"));
            None
        }
        _ => {
            note.push(format!("W not served within {} s", DEAD_LIMIT.as_secs()));
            wait.abort();
            None
        }
    };
    let _ = w.shutdown().await;
    let _ = h.shutdown().await;
    HoldUp {
        took,
        note: note.join("; "),
    }
}

// === measuring ===

/// Two readings of `INFO cpu commandstats` around `len`, with one
/// `INFO commandstats` per [`SAMPLE`] on `raw` between them (taken off).
async fn window(server: &RedisServer, raw: &FredClient, len: Duration) -> Window {
    let before = Work::read(server);
    let cpu_before = cpu_ns();
    let start = Instant::now();
    let mut last = total_calls(raw).await;
    let mut last_at = Instant::now();
    let mut samples = 1u64;
    let mut peak = 0f64;
    let mut tick = start;
    while start.elapsed() < len {
        tick += SAMPLE;
        tokio::time::sleep_until(tick.min(start + len)).await;
        let calls = total_calls(raw).await;
        let at = Instant::now();
        samples += 1;
        // The previous sample's INFO is in this reading.
        let d = calls.saturating_sub(last).saturating_sub(1);
        peak = peak.max(d as f64 / (at - last_at).as_secs_f64().max(1e-3));
        (last, last_at) = (calls, at);
    }
    let secs = start.elapsed().as_secs_f64();
    let client_cpu = cpu_ns().saturating_sub(cpu_before) as f64 / 1e6 / secs;
    let mut work = Work::read(server).since(&before);
    if let Some(info) = work.by_command.get_mut("info") {
        *info = info.saturating_sub(samples);
        if *info == 0 {
            work.by_command.remove("info");
        }
    }
    Window {
        work,
        secs,
        peak,
        client_cpu,
    }
}

/// Every command's `calls` summed (one `INFO commandstats`).
async fn total_calls(raw: &FredClient) -> u64 {
    let info: String = raw
        .custom(fred::cmd!("INFO"), vec!["commandstats"])
        .await
        .unwrap_or_default();
    info.lines()
        .filter_map(|l| l.strip_prefix("cmdstat_")?.split_once(":calls="))
        .filter_map(|(_, rest)| rest.split(',').next()?.parse::<u64>().ok())
        .sum()
}

/// An integer reply (`LLEN`, `DBSIZE`); 0 on an error.
async fn int<S: AsRef<str>>(raw: &FredClient, cmd: &'static str, args: &[S]) -> u64 {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    raw.custom::<i64, _>(fred::cmd!(cmd), args)
        .await
        .map(|v| v.max(0) as u64)
        .unwrap_or(0)
}

/// `DBSIZE`; 0 on an error.
async fn dbsize(raw: &FredClient) -> u64 {
    int(raw, "DBSIZE", &[] as &[&str]).await
}

/// Polls every 100 ms until the fleet has made n first tries (fair: the
/// `queues`' lengths sum to n; plain: the `clients`' busy tries grew by
/// n since `busy_before`), stops growing for [`QUEUE_STALL`], or
/// [`QUEUE_LIMIT`] has passed since `started`.
async fn settle_fleet(
    started: Instant,
    n: u64,
    raw: &FredClient,
    queues: &[String],
    clients: &[Client],
    busy_before: u64,
) -> String {
    let mut best = 0;
    let mut best_at = Instant::now();
    let mut said = Instant::now();
    loop {
        let c = if queues.is_empty() {
            busy(clients).saturating_sub(busy_before)
        } else {
            queued(raw, queues).await
        };
        if c >= n {
            return format!("{:.1} s", started.elapsed().as_secs_f64());
        }
        if c > best {
            (best, best_at) = (c, Instant::now());
        }
        if best_at.elapsed() > QUEUE_STALL || started.elapsed() > QUEUE_LIMIT {
            return format!(
                "**{} of {} after {:.0} s**",
                thousands(best),
                thousands(n),
                started.elapsed().as_secs_f64()
            );
        }
        if said.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "[fleet]   {} of {} after {:.0} s",
                thousands(c),
                thousands(n),
                started.elapsed().as_secs_f64()
            );
            said = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Tries that found a lock held, summed over `clients`.
fn busy(clients: &[Client]) -> u64 {
    clients.iter().map(|c| c.stats().busy_attempts).sum()
}

/// The `queues`' lengths, summed.
async fn queued(raw: &FredClient, queues: &[String]) -> u64 {
    let mut sum = 0;
    for q in queues {
        sum += int(raw, "LLEN", &[q]).await;
    }
    sum
}

/// Polls `done` every 20 ms for at most `limit`.
async fn wait_until<F, Fut>(limit: Duration, mut done: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if done().await {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The keys left, grouped by their name up to its first `{` (`leasehold_latch:{…`,
/// `leasehold:client:{…`), with the longest TTL among up to 20 of each
/// group: "100 × `leasehold_latch:{…` (TTL ≤ 29.8 s)"; the 5 largest groups.
async fn leftover_keys(raw: &FredClient) -> Vec<String> {
    let names: Vec<String> = raw
        .custom(fred::cmd!("KEYS"), vec!["*"])
        .await
        .unwrap_or_default();
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for name in names {
        let group = match name.split_once('{') {
            Some((head, _)) => format!("{head}{{…"),
            None => name.clone(),
        };
        match groups.iter_mut().find(|g| g.0 == group) {
            Some(g) => g.1.push(name),
            None => groups.push((group, vec![name])),
        }
    }
    groups.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
    let mut out = Vec::new();
    for (group, names) in groups.iter().take(5) {
        let mut longest = -2i64;
        for name in names.iter().take(20) {
            let ttl = raw
                .custom::<i64, _>(fred::cmd!("PTTL"), vec![name.as_str()])
                .await
                .unwrap_or(-2);
            // -1 (no TTL) outranks any TTL.
            if ttl == -1 || longest == -1 {
                longest = -1;
            } else {
                longest = longest.max(ttl);
            }
        }
        let ttl = match longest {
            -1 => "**no TTL**".to_owned(),
            t if t >= 0 => format!("TTL ≤ {:.1} s", t as f64 / 1e3),
            _ => "gone".to_owned(),
        };
        out.push(format!("{} × `{group}` ({ttl})", names.len()));
    }
    if groups.len() > 5 {
        out.push(format!("{} more groups", groups.len() - 5));
    }
    out
}

/// After a scenario's clients are gone: `DBSIZE` from [`SETTLE`] until 0
/// or [`SETTLE_LIMIT`]; names what is left, then flushes it.
async fn settle(raw: &FredClient, since: Instant) -> Cleanup {
    let settled = Instant::now();
    tokio::time::sleep(SETTLE).await;
    let mut keys = dbsize(raw).await;
    while keys > 0 && settled.elapsed() < SETTLE_LIMIT {
        tokio::time::sleep(Duration::from_millis(250)).await;
        keys = dbsize(raw).await;
    }
    let took = since.elapsed();
    let mut leftover = Vec::new();
    if keys > 0 {
        leftover = leftover_keys(raw).await;
        eprintln!("[fleet]   {keys} keys left: {}", leftover.join(", "));
        let _: Result<(), _> = raw
            .custom(fred::cmd!("FLUSHALL"), Vec::<String>::new())
            .await;
    }
    Cleanup {
        took,
        keys_after: keys,
        leftover,
    }
}

// === reports ===

fn progress(m: &Measured, idle: f64) {
    let w = &m.window;
    eprintln!(
        "[fleet] {} {}: {:.1} commands/s (busiest second {:.0}), Redis CPU {:.0} µs/s above idle, this process {:.1} ms/s; {} channels, {} keys while waiting, {} after cleanup ({:.1} s); acquired {}, errors {}; {}",
        thousands(m.n as u64),
        m.what.label(),
        w.work.commands() as f64 / w.secs,
        w.peak,
        w.work.cpu_us as f64 / w.secs - idle,
        w.client_cpu,
        m.channels,
        m.keys_during,
        m.cleanup.keys_after,
        m.cleanup.took.as_secs_f64(),
        m.acquired,
        m.errors,
        top(&w.work, w.secs, 6)
    );
}

fn waiting_report(rows: &[Measured], idle: f64) {
    println!("### Waiters on held locks (10 clients; the holder is an 11th)\n");
    println!("| waiters | layout | kind | queued in | Redis cmds/s | per 1,000 waiters | busiest second | Redis CPU µs/s (above idle) | per 1,000 | this process CPU ms/s | channels subscribed | keys while waiting | keys after cleanup | top commands (per s) |");
    println!("| ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |");
    for m in rows {
        let What::Waiting(kind, layout) = m.what else {
            continue;
        };
        let mut ready = m.ready.clone();
        if m.acquired > 0 || m.errors > 0 {
            ready.push_str(&format!(
                "; **{} got the lock, {} errors**",
                m.acquired, m.errors
            ));
        }
        row(m, idle, &[layout.label(), kind.label(), &ready]);
    }
    println!();
}

fn held_report(rows: &[Measured], idle: f64) {
    println!("### Held leases, nobody waiting (plain `Lock`s, watchdog, 10 clients)\n");
    println!("| leases | taken | Redis cmds/s | per 1,000 leases | busiest second | Redis CPU µs/s (above idle) | per 1,000 | this process CPU ms/s | channels subscribed | keys while held | keys after cleanup | top commands (per s) |");
    println!("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |");
    for m in rows.iter().filter(|m| m.what == What::Held) {
        let mut ready = m.ready.clone();
        if m.errors > 0 {
            ready.push_str(&format!("; **{} unlock errors**", m.errors));
        }
        row(m, idle, &[&ready]);
    }
    println!();
}

/// One table row: n, the `lead` cells, then the measured ones.
fn row(m: &Measured, idle: f64, lead: &[&str]) {
    let w = &m.window;
    let per_s = w.work.commands() as f64 / w.secs;
    let cpu = w.work.cpu_us as f64 / w.secs - idle;
    let per_k = |v: f64| v / m.n as f64 * 1e3;
    let mut after = if m.cleanup.keys_after == 0 {
        "0".to_owned()
    } else {
        format!(
            "**{}**: {} (flushed)",
            m.cleanup.keys_after,
            m.cleanup.leftover.join(", ")
        )
    };
    for note in &m.notes {
        after.push_str(&format!("; {note}"));
    }
    if m.cleanup.took > SETTLE + SETTLE_LIMIT {
        after.push_str(&format!(
            "; cleanup took {:.0} s",
            m.cleanup.took.as_secs_f64()
        ));
    }
    // Redis's CPU near a core's: the counts are what it could serve.
    let busy = w.work.cpu_us as f64 / w.secs / 1e4;
    let cpu_cell = if busy >= 50.0 {
        format!("{cpu:.0} (**Redis at {busy:.0} % of a core**)")
    } else {
        format!("{cpu:.0}")
    };
    println!(
        "| {} | {} | {per_s:.1} | {:.1} | {:.0} | {cpu_cell} | {:.0} | {:.1} | {} | {} | {after} | {} |",
        thousands(m.n as u64),
        lead.join(" | "),
        per_k(per_s),
        w.peak,
        per_k(cpu),
        w.client_cpu,
        m.channels,
        m.keys_during,
        top(&w.work, w.secs, 5)
    );
}

fn dead_report(dead: &[(Kind, usize, Vec<HoldUp>)], cleanup: Option<&Cleanup>) {
    println!("### A dead client's hold-up: V's waiters queued first, V killed (SIGKILL), then H unlocks; time until live waiter W holds the lock\n");
    println!("| kind | V's waiters | W holds the lock after (median of {DEAD_ROUNDS}) | each round | notes |");
    println!("| --- | ---: | ---: | --- | --- |");
    for (kind, n, rounds) in dead {
        let took: Vec<f64> = rounds
            .iter()
            .filter_map(|r| r.took.map(|d| d.as_secs_f64()))
            .collect();
        let median = if took.is_empty() {
            "n/a".to_owned()
        } else {
            secs(Stats::of(&took).p50)
        };
        let each: Vec<String> = rounds
            .iter()
            .map(|r| r.took.map(|d| secs(d.as_secs_f64())).unwrap_or("—".into()))
            .collect();
        let notes: Vec<&str> = rounds.iter().map(|r| r.note.as_str()).collect();
        let notes = if notes.iter().all(|n| *n == notes[0]) {
            notes[0].to_owned()
        } else {
            notes
                .iter()
                .enumerate()
                .filter(|(_, n)| !n.is_empty())
                .map(|(i, n)| format!("round {}: {n}", i + 1))
                .collect::<Vec<_>>()
                .join("; ")
        };
        println!(
            "| {} | {n} | {median} | {} | {notes} |",
            kind.label(),
            each.join(", "),
        );
    }
    if let Some(c) = cleanup {
        if c.keys_after == 0 {
            println!("\nKeys after the dead-client rounds: 0.");
        } else {
            println!(
                "\nKeys {:.0} s after the last dead-client round: {} ({}).",
                c.took.as_secs_f64(),
                c.keys_after,
                c.leftover.join(", ")
            );
        }
    }
    println!();
}

/// Redis commands/s by n, one series per kind × layout (a color per
/// kind, dashed for 10 locks) and one for held leases.
fn plot_series(rows: &[Measured]) -> Vec<crate::plot::FleetSeries> {
    let mut series: Vec<(What, Vec<(f64, f64)>)> = Vec::new();
    for m in rows {
        let y = m.window.work.commands() as f64 / m.window.secs;
        match series.iter_mut().find(|(w, _)| *w == m.what) {
            Some((_, points)) => points.push((m.n as f64, y)),
            None => series.push((m.what, vec![(m.n as f64, y)])),
        }
    }
    series
        .into_iter()
        .map(|(w, points)| {
            let (color, dashed) = match w {
                What::Waiting(Kind::Fair, layout) => (0, layout == Layout::Spread),
                What::Waiting(Kind::Plain, layout) => (1, layout == Layout::Spread),
                What::Held => (4, false),
            };
            (w.label(), color, dashed, points)
        })
        .collect()
}

/// The `k` commands run most, per second: "evalsha 12.3/s, …".
fn top(work: &Delta, secs: f64, k: usize) -> String {
    let mut v: Vec<(&String, &u64)> = work.by_command.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    v.iter()
        .take(k)
        .map(|(name, &n)| format!("{} {:.1}/s", name.replace('|', "\\|"), n as f64 / secs))
        .collect::<Vec<_>>()
        .join(", ")
}

fn secs(s: f64) -> String {
    if s < 1.0 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

/// 10000 → "10,000".
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

// === impl Plan ===

impl Plan {
    fn from_env(quick: bool) -> Plan {
        let secs = |var: &str| {
            std::env::var(var)
                .ok()
                .and_then(|v| v.parse().ok())
                .map(Duration::from_secs)
        };
        let sizes = std::env::var("LEASEHOLD_FLEET_SIZES")
            .ok()
            .map(|v| {
                v.split(',')
                    .filter_map(|s| s.trim().replace('_', "").parse().ok())
                    .filter(|&n: &usize| n > 0)
                    .collect::<Vec<usize>>()
            })
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| {
                if quick {
                    vec![100, 1_000]
                } else {
                    vec![100, 1_000, 10_000]
                }
            });
        let parts = std::env::var("LEASEHOLD_FLEET_PARTS").unwrap_or_default();
        let part = |p: &str| parts.is_empty() || parts.split(',').any(|s| s.trim() == p);
        Plan {
            sizes,
            window: secs("LEASEHOLD_FLEET_WINDOW_SECS").unwrap_or(Duration::from_secs(if quick {
                15
            } else {
                60
            })),
            warm_up: secs("LEASEHOLD_FLEET_WARMUP_SECS").unwrap_or(WARM_UP),
            waiting: part("waiting"),
            held: part("held"),
            dead: part("dead"),
        }
    }
}

// === impl Kind, Layout, What ===

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Fair => "FairLock",
            Kind::Plain => "Lock",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Kind::Fair => "fair",
            Kind::Plain => "plain",
        }
    }
}

impl Layout {
    fn locks(self) -> usize {
        match self {
            Layout::One => 1,
            Layout::Spread => SPREAD,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Layout::One => "1 lock",
            Layout::Spread => "10 locks",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Layout::One => "one",
            Layout::Spread => "spread",
        }
    }
}

impl What {
    fn label(self) -> String {
        match self {
            What::Waiting(kind, layout) => format!("{}, {}", kind.label(), layout.label()),
            What::Held => "held leases, nobody waiting".to_owned(),
        }
    }
}

// === impl Handle ===

impl Handle {
    fn of(client: &Client, kind: Kind, name: &str) -> Handle {
        match kind {
            Kind::Fair => Handle::Fair(Box::new(client.fair_lock(name))),
            Kind::Plain => Handle::Plain(client.lock(name)),
        }
    }

    async fn lock(&self) -> leasehold::Result<LockGuard> {
        match self {
            Handle::Fair(l) => l.lock().await,
            Handle::Plain(l) => l.lock().await,
        }
    }

    /// The fair lock's queue key.
    fn queue_key(&self) -> Option<String> {
        match self {
            Handle::Fair(l) => Some(l.queue_key().to_owned()),
            Handle::Plain(_) => None,
        }
    }
}

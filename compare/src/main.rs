//! The comparison report: leasehold against a raw-fred ceiling, two polling
//! baselines and published peer crates, every scenario in one run against
//! one loopback `redis-server` started here.
//!
//! `cargo run --release -p leasehold-compare` prints markdown tables and
//! writes `docs/handoff-latency.svg`. `LEASEHOLD_COMPARE_QUICK=1` shortens
//! every phase and runs fewer rounds (for development; numbers are then
//! noisier). `LEASEHOLD_COMPARE_ONLY=hot` runs only the 32-client hot-lock
//! table; `LEASEHOLD_COMPARE_ONLY=handoff` only PING and the handoff
//! latency of leasehold's lock and fair lock;
//! `LEASEHOLD_COMPARE_ONLY=operators` only the A/B of the client record
//! (issue 33, `operators.rs`); `LEASEHOLD_COMPARE_ONLY=primitives` only
//! the Redis commands and CPU per operation of every leasehold primitive
//! (`primitives.rs`); `LEASEHOLD_COMPARE_ONLY=fleet` only what waiting
//! fleets of 100 to 10,000 tasks and as many held leases cost Redis, and
//! a dead client's hold-up (issue 48, `fleet.rs`). The Python peer runs
//! from `compare/.venv`, which the report creates when it is missing (see
//! `python.rs`).

use leasehold_testkit::server;

mod across;
mod contender;
mod fleet;
mod hot;
mod json;
mod monitor;
mod operators;
mod paired;
mod plot;
mod primitives;
mod python;
mod server_work;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::interfaces::{ClientLike, KeysInterface};
use tokio::task::JoinSet;
use tokio::time::Instant;

use contender::{fred_client, Guard, Handle, Kind};
use monitor::Monitor;
use server::RedisServer;
use server_work::Work;

/// Bounds and sizes of every phase.
#[derive(Clone, Copy)]
struct Plan {
    uncontended_ops: usize,
    phase: Duration,
    /// Interleaved rounds of the 64-task throughput phase.
    rounds: usize,
    /// Window and interleaved rounds of the 32-client hot lock.
    hot_window: Duration,
    hot_rounds: usize,
    handoff_rounds: usize,
    handoff_limit: Duration,
    exclusion_per_task: u64,
    waiters: usize,
    waiters_window: Duration,
    waiters_window_leasehold: Duration,
}

const TASKS: usize = 64;
const CLIENTS: usize = 4;
/// Every scenario is abandoned after this, and reported as incomplete.
const SCENARIO_LIMIT: Duration = Duration::from_secs(90);

#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub n: usize,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Stats {
    pub fn of(samples: &[f64]) -> Stats {
        if samples.is_empty() {
            return Stats::default();
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let q = |p: f64| s[((s.len() - 1) as f64 * p).round() as usize];
        Stats {
            n: s.len(),
            mean: s.iter().sum::<f64>() / s.len() as f64,
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            max: s[s.len() - 1],
        }
    }
}

#[derive(Default)]
struct Row {
    uncontended: Option<Stats>,
    requests_per_op: Option<(f64, String)>,
    ops_1: Option<f64>,
    ops_64: Option<f64>,
    ops_64_range: Option<(f64, f64, f64)>,
    reentrant: Option<Stats>,
    reentrant_requests: Option<(f64, String)>,
    handoff: Option<Vec<f64>>,
    hot: Option<(f64, f64)>,
    exclusion: Option<String>,
    waiters: Option<(f64, f64, String)>,
}

fn quick() -> bool {
    std::env::var_os("LEASEHOLD_COMPARE_QUICK").is_some_and(|v| v != "0")
}

/// `LEASEHOLD_COMPARE_ONLY=hot`: only the 32-client hot-lock table (a
/// smoke run while developing a contender), in `LEASEHOLD_COMPARE_ROUNDS`
/// rounds (default: the plan's).
fn only_hot() -> bool {
    std::env::var_os("LEASEHOLD_COMPARE_ONLY").is_some_and(|v| v == "hot")
}

/// `LEASEHOLD_COMPARE_ONLY=handoff`: only PING and the handoff latency of
/// leasehold's lock and fair lock.
fn only_handoff() -> bool {
    std::env::var_os("LEASEHOLD_COMPARE_ONLY").is_some_and(|v| v == "handoff")
}

/// `LEASEHOLD_COMPARE_ONLY=throughput`: only the 64-task uncontended
/// throughput of leasehold, raw fred and raw fred with the bare scripts
/// (see [`AB`]), on 1 and on 4 clients, in `LEASEHOLD_COMPARE_ROUNDS`
/// (default 7) interleaved rounds of 1 s each: the A/B run for a change to
/// the lock path.
fn only_throughput() -> bool {
    std::env::var_os("LEASEHOLD_COMPARE_ONLY").is_some_and(|v| v == "throughput")
}

/// `LEASEHOLD_COMPARE_ONLY=operators`: only issue 33's A/B, the client
/// record and wait recording on against `client_record(false)` (see
/// `operators.rs`).
fn only_operators() -> bool {
    std::env::var_os("LEASEHOLD_COMPARE_ONLY").is_some_and(|v| v == "operators")
}

/// `LEASEHOLD_COMPARE_ONLY=primitives`: only the Redis commands and CPU
/// time per uncontended operation of every leasehold primitive (see
/// `primitives.rs`): `LEASEHOLD_COMPARE_ROUNDS` (default 3) rounds of
/// `LEASEHOLD_COMPARE_PAIRS` (default 2,000) operations each.
fn only_primitives() -> bool {
    std::env::var_os("LEASEHOLD_COMPARE_ONLY").is_some_and(|v| v == "primitives")
}

/// `LEASEHOLD_COMPARE_ROUNDS`, or `default`.
fn rounds_or(default: usize) -> usize {
    std::env::var("LEASEHOLD_COMPARE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `LEASEHOLD_COMPARE_CLIENTS`, or `default`: the clients of the
/// many-client throughput row, or of each side of the paired run.
fn clients_or(default: usize) -> usize {
    std::env::var("LEASEHOLD_COMPARE_CLIENTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    match args.first().map(String::as_str) {
        Some("--handoff-peer") => runtime.block_on(across::peer(&args[1..])),
        Some("--pairs") => runtime.block_on(pairs(&args[1..])),
        Some("--handoffs") => runtime.block_on(operators::handoffs(&args[1..])),
        Some("--hot") => runtime.block_on(operators::hot_acquisitions(&args[1..])),
        Some("--lock-script") => lock_script(&args[1..]),
        Some("--fleet-victim") => runtime.block_on(fleet::victim(&args[1..])),
        _ => runtime.block_on(run()),
    }
}

/// `--lock-script twin|bare acquire|release`: prints the source of one
/// of the lock's two scripts as the raw-fred baselines send it (`twin`:
/// leasehold's, sent without the request record; `bare`: the bodies
/// alone), for `compare/redis_instructions.py`.
fn lock_script(args: &[String]) {
    let twin = leasehold::__bench::lock_scripts();
    let [bare_acquire, bare_release] = contender::bare_sources();
    let source = match (
        args.first().map(String::as_str),
        args.get(1).map(String::as_str),
    ) {
        (Some("twin"), Some("acquire")) => twin.0.to_owned(),
        (Some("twin"), Some("release")) => twin.1.to_owned(),
        (Some("bare"), Some("acquire")) => bare_acquire,
        (Some("bare"), Some("release")) => bare_release,
        _ => {
            eprintln!("usage: leasehold-compare --lock-script twin|bare acquire|release");
            std::process::exit(2);
        }
    };
    print!("{source}");
}

/// `--pairs <contender> <N>` (`leasehold`, `rawfred`, `rawbare`, ...: see
/// `Kind::short`): `N` uncontended lock + unlock pairs from one task, as
/// the throughput rows make them, against a loopback `redis-server` it
/// starts. Run under callgrind by `compare/instructions.sh`, which takes
/// the difference of an `N` and a `2N` run as the cost of `N` pairs
/// (start-up and shutdown cancel out): instruction counts do not move with
/// the machine's load, so a change to the lock path shows in them where
/// the throughput rounds are too noisy to tell.
async fn pairs(args: &[String]) {
    let (Some(kind), Some(Ok(n))) = (
        args.first().and_then(|k| Kind::from_short(k)),
        args.get(1).map(|n| n.parse::<u64>()),
    ) else {
        eprintln!("usage: leasehold-compare --pairs leasehold|rawfred|rawbare|norecord|… N");
        std::process::exit(2);
    };
    let server = RedisServer::start();
    let handle = Handle::connect(kind, &server.url()).await;
    for _ in 0..n {
        let guard = handle.lock("pairs").await;
        handle.unlock(guard).await;
    }
    handle.close().await;
}

async fn run() {
    let plan = if quick() {
        Plan {
            uncontended_ops: 300,
            phase: Duration::from_millis(700),
            rounds: 3,
            hot_window: Duration::from_millis(700),
            hot_rounds: 3,
            handoff_rounds: 30,
            handoff_limit: Duration::from_secs(4),
            exclusion_per_task: 3,
            waiters: 1000,
            waiters_window: Duration::from_secs(2),
            waiters_window_leasehold: Duration::from_secs(3),
        }
    } else {
        Plan {
            uncontended_ops: 3000,
            phase: Duration::from_secs(3),
            rounds: 5,
            hot_window: Duration::from_secs(3),
            hot_rounds: 5,
            handoff_rounds: 201,
            handoff_limit: Duration::from_secs(30),
            exclusion_per_task: 10,
            waiters: 1000,
            waiters_window: Duration::from_secs(5),
            // leasehold waiters re-check once per remaining lease (up to the
            // 30 s watchdog timeout): the window must cover a full cycle.
            waiters_window_leasehold: Duration::from_secs(40),
        }
    };
    let server = RedisServer::start();
    let url = server.url();
    eprintln!(
        "redis-server {} at {url}",
        server
            .cmd(&["INFO", "server"])
            .lines()
            .find(|l| l.starts_with("redis_version"))
            .unwrap_or("?")
    );

    if only_operators() {
        operators::ab(&server).await;
        return;
    }
    if only_primitives() {
        let pairs = std::env::var("LEASEHOLD_COMPARE_PAIRS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2_000);
        primitives::run(&server, rounds_or(3), pairs).await;
        return;
    }
    if std::env::var_os("LEASEHOLD_COMPARE_ONLY").is_some_and(|v| v == "fleet") {
        fleet::run(&server, quick()).await;
        return;
    }
    if std::env::var_os("LEASEHOLD_COMPARE_ONLY").is_some_and(|v| v == "throughput-paired") {
        paired::run(&server, rounds_or(60), clients_or(CLIENTS)).await;
        return;
    }
    // No Python peer in the throughput A/B: it need not set up the venv.
    if only_throughput() {
        throughput_ab(&server).await;
        return;
    }

    let python = if only_handoff() {
        Err("not in the handoff-only run".to_owned())
    } else {
        python::prepare()
    };
    if let (Err(why), false) = (&python, only_handoff()) {
        eprintln!("python-redis-lock skipped: {why}");
    }
    if only_hot() {
        let rounds = rounds_or(plan.hot_rounds);
        let hot32 = hot::run(&server, &python, plan.hot_window, rounds, SCENARIO_LIMIT).await;
        hot::report(&hot32, rounds, plan.hot_window, &python);
        return;
    }

    let ping = ping_rtt(&url, plan.uncontended_ops).await;
    eprintln!("PING round trip: p50 {:.1} µs", ping.p50);

    if only_handoff() {
        let mut rows = vec![(Kind::Leasehold, Row::default())];
        eprintln!("[handoff] {}", Kind::Leasehold.label());
        rows[0].1.handoff = bounded(handoff(Kind::Leasehold, &url, plan)).await;
        eprintln!("[handoff] {}", Kind::LeaseholdFair.label());
        let fair = bounded(handoff(Kind::LeaseholdFair, &url, plan)).await;
        let extra = extra_handoffs(fair, &url, plan).await;
        handoff_report(&ping, &rows, &extra);
        return;
    }

    let mut rows: Vec<(Kind, Row)> = Kind::ALL.iter().map(|k| (*k, Row::default())).collect();

    for (kind, row) in rows.iter_mut() {
        eprintln!("[uncontended] {}", kind.label());
        uncontended(*kind, &server, plan, row).await;
    }
    eprintln!("[uncontended] leasehold RedLock, 3 servers");
    let redlock = bounded(redlock_uncontended(plan)).await;
    // 64-task throughput: interleaved rounds, median (the VM is noisy).
    // Every contender on one client, then leasehold and the raw-fred
    // baselines on CLIENTS clients (their order rotates every round).
    let mut rates: Vec<Vec<Rate>> = vec![Vec::new(); rows.len()];
    let mut multi = Multi::default();
    for round in 0..plan.rounds {
        eprintln!("[throughput, 64 tasks] round {}", round + 1);
        for (i, (kind, _)) in rows.iter().enumerate() {
            rates[i].push(throughput(*kind, &server, plan.phase / 3, round, 1).await);
        }
        multi.push(ab_round(&server, plan.phase / 3, round, CLIENTS, |_| true).await);
    }
    let single = Multi {
        rates: AB.map(|(kind, _)| rates[index(&rows, kind)].clone()),
    };
    for ((_, row), r) in rows.iter_mut().zip(&rates) {
        let r: Vec<f64> = r.iter().map(|r| r.per_s).collect();
        row.ops_64 = Some(Stats::of(&r).p50);
        row.ops_64_range = Some((
            Stats::of(&r).p50,
            r.iter().copied().fold(f64::MAX, f64::min),
            Stats::of(&r).max,
        ));
    }
    for (kind, row) in rows.iter_mut().filter(|(k, _)| k.reentrant()) {
        eprintln!("[reentrant] {}", kind.label());
        reentrant(*kind, &server, plan, row).await;
    }
    for (kind, row) in rows.iter_mut().filter(|(k, _)| k.waits()) {
        eprintln!("[handoff] {}", kind.label());
        row.handoff = bounded(handoff(*kind, &url, plan)).await;
    }
    // The fair lock's one-hop grant, measured the same way.
    eprintln!("[handoff] {}", Kind::LeaseholdFair.label());
    let fair_handoff = bounded(handoff(Kind::LeaseholdFair, &url, plan)).await;
    let extra = extra_handoffs(fair_handoff.clone(), &url, plan).await;
    for (kind, row) in rows.iter_mut().filter(|(k, _)| k.waits()) {
        eprintln!("[hot lock] {}", kind.label());
        row.hot = bounded(hot(*kind, &url, plan)).await;
    }
    let hot32 = hot::run(
        &server,
        &python,
        plan.hot_window,
        plan.hot_rounds,
        SCENARIO_LIMIT,
    )
    .await;
    for (kind, row) in rows.iter_mut().filter(|(k, _)| k.waits()) {
        eprintln!("[exclusion] {}", kind.label());
        row.exclusion = Some(
            bounded(exclusion(*kind, &url, plan))
                .await
                .unwrap_or_else(|| "incomplete (scenario limit)".to_owned()),
        );
    }
    for (kind, row) in rows.iter_mut().filter(|(k, _)| k.waits()) {
        eprintln!("[1000 waiters] {}", kind.label());
        row.waiters = waiters(*kind, &server, plan).await;
    }

    report(
        &ping,
        &rows,
        &extra,
        redlock.as_ref(),
        plan,
        [&single, &multi],
    );
    hot::report(&hot32, plan.hot_rounds, plan.hot_window, &python);
    waiters_report(&rows, plan);
    let mut series: Vec<(&str, Vec<f64>)> = rows
        .iter()
        .filter_map(|(k, r)| r.handoff.as_ref().map(|h| (k.label(), h.clone())))
        .collect();
    if let Some(h) = &fair_handoff {
        series.push((Kind::LeaseholdFair.label(), h.clone()));
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/handoff-latency.svg");
    match plot::handoff_cdf(&path, &series, ping.p50) {
        Ok(()) => eprintln!("wrote {}", path.display()),
        Err(e) => eprintln!("plot failed: {e}"),
    }
}

/// Runs a scenario with the global bound; `None` if it ran out of time.
async fn bounded<T>(scenario: impl std::future::Future<Output = T>) -> Option<T> {
    tokio::time::timeout(SCENARIO_LIMIT, scenario).await.ok()
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

async fn ping_rtt(url: &str, n: usize) -> Stats {
    let redis = fred_client(url).await;
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let _: String = redis.ping(None).await.expect("ping");
        samples.push(us(t.elapsed()));
    }
    let _ = redis.quit().await;
    Stats::of(&samples)
}

/// Scenario 1: uncontended lock + unlock on distinct names, 1 and 64 tasks,
/// and the requests one lock + unlock sends.
async fn uncontended(kind: Kind, server: &RedisServer, plan: Plan, row: &mut Row) {
    let url = server.url();
    let h = Handle::connect(kind, &url).await;
    let name = format!("uc:{}", kind.short());
    // warm-up (scripts loaded, connections made)
    for _ in 0..50 {
        let g = h.lock(&name).await;
        h.unlock(g).await;
    }
    let mut samples = Vec::with_capacity(plan.uncontended_ops);
    let start = Instant::now();
    for _ in 0..plan.uncontended_ops {
        let t = Instant::now();
        let g = h.lock(&name).await;
        h.unlock(g).await;
        samples.push(us(t.elapsed()));
        if start.elapsed() > plan.phase * 3 {
            break;
        }
    }
    row.ops_1 = Some(samples.len() as f64 / start.elapsed().as_secs_f64());
    row.uncontended = Some(Stats::of(&samples));

    // requests per lock + unlock, counted by MONITOR
    let mon = Monitor::start(server.port());
    Monitor::settle().await;
    let before = mon.counts();
    let n = 100;
    for _ in 0..n {
        let g = h.lock(&name).await;
        h.unlock(g).await;
    }
    Monitor::settle().await;
    let d = mon.counts().minus(&before);
    drop(mon);
    row.requests_per_op = Some((d.requests() as f64 / n as f64, d.summary()));

    h.close().await;
}

/// Uncontended lock + unlock of a leasehold `RedLock` over 3 more private
/// redis-servers (started here, loopback), one task: the latencies (µs),
/// ops/s, and the requests per lock + unlock summed over the 3 servers
/// (MONITOR on each), to set beside the plain lock's row of the same run.
async fn redlock_uncontended(plan: Plan) -> (Stats, f64, (f64, String)) {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let mut clients = Vec::new();
    for s in &servers {
        clients.push(
            leasehold::Client::connect(&s.url())
                .await
                .expect("connect to a RedLock server"),
        );
    }
    let red = leasehold::RedLock::new(clients.clone(), "uc:redlock");
    for _ in 0..50 {
        let g = red.lock().await.expect("RedLock lock");
        g.unlock().await.expect("RedLock unlock");
    }
    let mut samples = Vec::with_capacity(plan.uncontended_ops);
    let start = Instant::now();
    for _ in 0..plan.uncontended_ops {
        let t = Instant::now();
        let g = red.lock().await.expect("RedLock lock");
        g.unlock().await.expect("RedLock unlock");
        samples.push(us(t.elapsed()));
        if start.elapsed() > plan.phase * 3 {
            break;
        }
    }
    let rate = samples.len() as f64 / start.elapsed().as_secs_f64();

    let monitors: Vec<Monitor> = servers.iter().map(|s| Monitor::start(s.port())).collect();
    Monitor::settle().await;
    let before: Vec<_> = monitors.iter().map(Monitor::counts).collect();
    let n = 100;
    for _ in 0..n {
        let g = red.lock().await.expect("RedLock lock");
        g.unlock().await.expect("RedLock unlock");
    }
    Monitor::settle().await;
    let mut requests = 0;
    let mut by_server = Vec::new();
    for (m, b) in monitors.iter().zip(&before) {
        let d = m.counts().minus(b);
        requests += d.requests();
        by_server.push(d.summary());
    }
    drop(monitors);
    for c in &clients {
        let _ = c.shutdown().await;
    }
    let requests = (
        requests as f64 / n as f64,
        format!("per server: {}", by_server.join(" / ")),
    );
    (Stats::of(&samples), rate, requests)
}

/// The contenders of the interleaved throughput A/B, with the names their
/// columns use: leasehold, then its two ceilings, raw fred sending its
/// scripts as it does and with their bare bodies (no request record).
const AB: [(Kind, &str); 3] = [
    (Kind::Leasehold, "leasehold"),
    (Kind::RawFred, "raw fred"),
    (Kind::RawFredBare, "raw bare"),
];

/// One 64-task throughput run ([`throughput`]).
#[derive(Clone, Copy, Default)]
struct Rate {
    /// Lock + unlock pairs/s.
    per_s: f64,
    /// Commands Redis ran per pair, scripts' inner commands included
    /// (`INFO commandstats`, see `server_work.rs`).
    commands: f64,
    /// Redis's CPU time per pair, µs (`INFO cpu`, see `server_work.rs`).
    redis_cpu_us: f64,
    /// The kernel's share of it, %.
    redis_sys_percent: f64,
    /// This process's CPU time per pair, µs (every thread; connect and
    /// close are in it, the same for every contender).
    cpu_us: f64,
}

/// Per-round 64-task throughput of each of [`AB`] (in its order), round
/// `i` of all of them measured back to back.
#[derive(Default)]
struct Multi {
    rates: [Vec<Rate>; 3],
}

impl Multi {
    /// Adds a round of [`ab_round`].
    fn push(&mut self, round: [Rate; 3]) {
        for (rates, rate) in self.rates.iter_mut().zip(round) {
            rates.push(rate);
        }
    }

    /// `AB[i]`'s pairs/s, per round.
    fn per_s(&self, i: usize) -> Vec<f64> {
        self.rates[i].iter().map(|r| r.per_s).collect()
    }

    /// leasehold / `AB[i]`, per round.
    fn ratios(&self, i: usize) -> Vec<f64> {
        self.per_s(0)
            .iter()
            .zip(self.per_s(i))
            .map(|(a, b)| a / b)
            .collect()
    }

    /// `AB[i]`'s commands per pair, median over the rounds.
    fn commands(&self, i: usize) -> f64 {
        let c: Vec<f64> = self.rates[i].iter().map(|r| r.commands).collect();
        Stats::of(&c).p50
    }

    /// `AB[i]`'s client CPU µs per pair (this process, every thread),
    /// median over the rounds.
    fn client_cpu(&self, i: usize) -> f64 {
        let c: Vec<f64> = self.rates[i].iter().map(|r| r.cpu_us).collect();
        Stats::of(&c).p50
    }

    /// `AB[i]`'s Redis CPU µs per 1,000 pairs, per round.
    fn redis_cpu(&self, i: usize) -> Vec<f64> {
        self.rates[i].iter().map(|r| r.redis_cpu_us * 1e3).collect()
    }
}

/// One round of [`AB`] on `clients` clients: each contender `keep` allows
/// runs [`throughput`] for `phase`, back to back, in an order that rotates
/// with `round`; the others' rates stay zero.
async fn ab_round(
    server: &RedisServer,
    phase: Duration,
    round: usize,
    clients: usize,
    keep: impl Fn(Kind) -> bool,
) -> [Rate; 3] {
    let mut order = [0, 1, 2];
    order.rotate_left(round % AB.len());
    let mut rates = [Rate::default(); 3];
    for i in order.into_iter().filter(|&i| keep(AB[i].0)) {
        rates[i] = throughput(AB[i].0, server, phase, round, clients).await;
    }
    rates
}

fn index(rows: &[(Kind, Row)], kind: Kind) -> usize {
    rows.iter()
        .position(|(k, _)| *k == kind)
        .expect("contender")
}

/// See [`only_throughput`]. Each round runs the contenders of [`AB`] back
/// to back (the order rotates), on 1 client and then on `CLIENTS`, prints
/// every round's rates and ratios, then the report's throughput table.
async fn throughput_ab(server: &RedisServer) {
    let rounds = rounds_or(7);
    // `LEASEHOLD_COMPARE_CONTENDER=leasehold|raw|rawbare`: one side only
    // (to profile it alone); the ratios are then meaningless.
    let only = std::env::var("LEASEHOLD_COMPARE_CONTENDER").ok();
    let keep = |kind: Kind| match only.as_deref() {
        None => true,
        Some("raw") => kind == Kind::RawFred,
        Some(short) => kind.short() == short,
    };
    let phase = Duration::from_secs(1);
    // `LEASEHOLD_COMPARE_CLIENTS=N`: N clients instead of `CLIENTS` in the
    // second row (to see how each side scales with connections).
    let many = clients_or(CLIENTS);
    let mut by_clients = [Multi::default(), Multi::default()];
    for round in 0..rounds {
        for (multi, clients) in by_clients.iter_mut().zip([1, many]) {
            let rates = ab_round(server, phase, round, clients, keep).await;
            let sides: Vec<String> = AB
                .iter()
                .zip(&rates)
                .map(|((_, name), r)| {
                    format!(
                        "{name} {:.0}/s ({:.1} µs CPU/pair, {:.2} commands/pair, {:.2} µs Redis CPU/pair, {:.0} % sys)",
                        r.per_s, r.cpu_us, r.commands, r.redis_cpu_us, r.redis_sys_percent
                    )
                })
                .collect();
            eprintln!(
                "round {} on {clients} client(s): {}; leasehold / raw fred {:.2}x, / raw bare {:.2}x",
                round + 1,
                sides.join(", "),
                rates[0].per_s / rates[1].per_s,
                rates[0].per_s / rates[2].per_s
            );
            multi.push(rates);
        }
    }
    let [single, multi] = &by_clients;
    throughput_report(rounds, [single, multi], [1, many]);
}

/// CPU time (ns) of every thread of this process.
pub fn cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| t.ok())
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Uncontended lock + unlock from 64 tasks (one name each) on `clients`
/// clients (task t on client t % clients), for `phase`: pairs/s, and the
/// commands, client CPU and Redis CPU per pair (the server readings span
/// the tasks' run, not connect and close).
async fn throughput(
    kind: Kind,
    server: &RedisServer,
    phase: Duration,
    round: usize,
    clients: usize,
) -> Rate {
    let cpu = cpu_ns();
    let mut handles = Vec::with_capacity(clients);
    for _ in 0..clients {
        handles.push(Handle::connect(kind, &server.url()).await);
    }
    let before = Work::read(server);
    let (ops, took) = throughput_on(&handles, kind, phase, round).await;
    let work = Work::read(server).since(&before);
    for h in &handles {
        h.close().await;
    }
    let pairs = ops.max(1) as f64;
    Rate {
        per_s: ops as f64 / took.as_secs_f64(),
        commands: work.commands() as f64 / pairs,
        redis_cpu_us: work.cpu_us as f64 / pairs,
        redis_sys_percent: work.sys_percent(),
        cpu_us: cpu_ns().saturating_sub(cpu) as f64 / 1e3 / pairs,
    }
}

/// [`throughput`] on clients already connected (task t on
/// `handles[t % handles.len()]`): the pairs made, and the time until the
/// last task ended. The clients stay open.
async fn throughput_on(
    handles: &[Handle],
    kind: Kind,
    phase: Duration,
    round: usize,
) -> (u64, Duration) {
    let clients = handles.len();
    let ops = Arc::new(AtomicU64::new(0));
    let mut tasks = JoinSet::new();
    let deadline = Instant::now() + phase;
    let start = Instant::now();
    for t in 0..TASKS {
        let h = handles[t % clients].clone();
        let ops = ops.clone();
        let name = format!("uc64:{}:{clients}:{round}:{t}", kind.short());
        tasks.spawn(async move {
            while Instant::now() < deadline {
                let g = h.lock(&name).await;
                h.unlock(g).await;
                ops.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    (ops.load(Ordering::Relaxed), start.elapsed())
}

/// Scenario 2: acquire of a lock the task already holds.
async fn reentrant(kind: Kind, server: &RedisServer, plan: Plan, row: &mut Row) {
    let h = Handle::connect(kind, &server.url()).await;
    let name = format!("re:{}", kind.short());
    let outer = h.lock(&name).await;
    let mut samples = Vec::with_capacity(plan.uncontended_ops);
    for _ in 0..plan.uncontended_ops {
        let t = Instant::now();
        let g = h.lock(&name).await;
        samples.push(us(t.elapsed()));
        h.unlock(g).await;
    }
    row.reentrant = Some(Stats::of(&samples));

    let mon = Monitor::start(server.port());
    Monitor::settle().await;
    let before = mon.counts();
    let n = 100;
    let mut inner: Vec<Guard> = Vec::with_capacity(n);
    for _ in 0..n {
        inner.push(h.lock(&name).await);
    }
    Monitor::settle().await;
    let d = mon.counts().minus(&before);
    drop(mon);
    row.reentrant_requests = Some((d.requests() as f64 / n as f64, d.summary()));
    for g in inner.into_iter().rev() {
        h.unlock(g).await;
    }
    h.unlock(outer).await;
    h.close().await;
}

/// Scenario 3: two tasks on two clients ping-pong one lock. Acquisition k
/// goes to side k % 2; a side calls `lock()` only once acquisition k - 1
/// happened (so it always waits, and cannot barge back in). A handoff is
/// the time from the holder's `unlock()` returning to the other side's
/// `lock()` returning (µs; negative if the waiter got in before the holder
/// saw its own reply). The holder keeps the lock 2 ms + uniform(0, 100) ms,
/// so a poller's phase against the unlock is random, as in real use.
async fn handoff(kind: Kind, url: &str, plan: Plan) -> Vec<f64> {
    let a = Handle::connect(kind, url).await;
    let b = Handle::connect(kind, url).await;
    let name = format!("handoff:{}", kind.short());
    let samples = handoff_on(
        &a,
        &b,
        &name,
        plan.handoff_rounds as u64,
        plan.handoff_limit,
    )
    .await;
    a.close().await;
    b.close().await;
    samples
}

/// [`handoff`] between two clients already connected, on lock `name`:
/// `rounds` acquisitions, abandoned after `limit`. The clients stay open.
async fn handoff_on(a: &Handle, b: &Handle, name: &str, rounds: u64, limit: Duration) -> Vec<f64> {
    let deadline = Instant::now() + limit;
    let (turn, _) = tokio::sync::watch::channel(0u64);
    let turn = Arc::new(turn);
    let mut sides = JoinSet::new();
    for (first, h) in [(1u64, a.clone()), (2u64, b.clone())] {
        let (name, turn) = (name.to_owned(), turn.clone());
        sides.spawn(async move {
            let mut turns = turn.subscribe();
            let say = |k| {
                turn.send_replace(k);
            };
            across::side(&h, &name, first, rounds, &mut turns, &say, deadline).await
        });
    }
    let mut log = Vec::new();
    while let Some(side) = sides.join_next().await {
        log.extend(side.expect("side"));
    }
    across::samples(log)
}

/// 2 ms + a pseudo-random 0..100 ms, fixed per acquisition number.
fn hold(k: u64) -> Duration {
    let mut x = k.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    x ^= x >> 29;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 32;
    Duration::from_micros(2_000 + x % 100_000)
}

/// Scenario 4: 64 tasks on 4 clients take and give back one lock for a
/// fixed time; handoffs per second.
async fn hot(kind: Kind, url: &str, plan: Plan) -> (f64, f64) {
    let mut handles = Vec::new();
    for _ in 0..CLIENTS {
        handles.push(Handle::connect(kind, url).await);
    }
    let name = format!("hot:{}", kind.short());
    let count = Arc::new(AtomicU64::new(0));
    let changes = Arc::new(AtomicU64::new(0));
    let last = Arc::new(AtomicU64::new(u64::MAX));
    let deadline = Instant::now() + plan.phase;
    let start = Instant::now();
    let mut tasks = JoinSet::new();
    for t in 0..TASKS {
        let h = handles[t % CLIENTS].clone();
        let (name, count, changes, last) =
            (name.clone(), count.clone(), changes.clone(), last.clone());
        tasks.spawn(async move {
            while Instant::now() < deadline {
                let g = h.lock(&name).await;
                if Instant::now() < deadline {
                    count.fetch_add(1, Ordering::Relaxed);
                    // under the lock: the previous holder is exact
                    if last.swap(t as u64, Ordering::Relaxed) != t as u64 {
                        changes.fetch_add(1, Ordering::Relaxed);
                    }
                }
                h.unlock(g).await;
            }
        });
    }
    tokio::time::sleep_until(deadline).await;
    let secs = start.elapsed().as_secs_f64();
    let rate = (
        count.load(Ordering::Relaxed) as f64 / secs,
        changes.load(Ordering::Relaxed) as f64 / secs,
    );
    while tasks.join_next().await.is_some() {}
    for h in &handles {
        h.close().await;
    }
    rate
}

/// Mutual exclusion: 64 tasks on 4 clients each add 1 to a counter with a
/// non-atomic GET + SET under the lock; the total must be exact.
async fn exclusion(kind: Kind, url: &str, plan: Plan) -> String {
    let mut handles = Vec::new();
    for _ in 0..CLIENTS {
        handles.push(Handle::connect(kind, url).await);
    }
    let checker = fred_client(url).await;
    let name = format!("excl:{}", kind.short());
    let counter = format!("counter:{}", kind.short());
    let _: () = checker
        .set(&counter, 0, None, None, false)
        .await
        .expect("SET");
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = JoinSet::new();
    for t in 0..TASKS {
        let h = handles[t % CLIENTS].clone();
        let (name, counter, checker, done) =
            (name.clone(), counter.clone(), checker.clone(), done.clone());
        tasks.spawn(async move {
            for _ in 0..plan.exclusion_per_task {
                let g = h.lock(&name).await;
                let v: i64 = checker.get(&counter).await.expect("GET");
                tokio::task::yield_now().await;
                let _: () = checker
                    .set(&counter, v + 1, None, None, false)
                    .await
                    .expect("SET");
                done.fetch_add(1, Ordering::Relaxed);
                h.unlock(g).await;
            }
        });
    }
    let start = Instant::now();
    while tasks.join_next().await.is_some() {}
    let took = start.elapsed();
    let got: i64 = checker.get(&counter).await.expect("GET");
    let expected = done.load(Ordering::Relaxed);
    let _ = checker.quit().await;
    for h in &handles {
        h.close().await;
    }
    let verdict = if got == expected as i64 {
        "exact"
    } else {
        "**WRONG**"
    };
    format!("{verdict}: {got}/{expected} in {:.2} s", took.as_secs_f64())
}

/// Commands sent while 1,000 tasks (on 4 clients) wait for a held lock.
/// Returns (client requests/s, all commands/s incl. script internals, top
/// commands).
async fn waiters(kind: Kind, server: &RedisServer, plan: Plan) -> Option<(f64, f64, String)> {
    let url = server.url();
    let holder = Handle::connect(kind, &url).await;
    let name = format!("wait:{}", kind.short());
    let held = holder.lock(&name).await;
    let mut handles = Vec::new();
    for _ in 0..CLIENTS {
        handles.push(Handle::connect(kind, &url).await);
    }
    let mut tasks = JoinSet::new();
    for t in 0..plan.waiters {
        let h = handles[t % CLIENTS].clone();
        let name = name.clone();
        tasks.spawn(async move {
            let g = h.lock(&name).await;
            h.unlock(g).await;
        });
    }
    // let every waiter start waiting (subscribe, first re-check)
    tokio::time::sleep(Duration::from_secs(2)).await;
    let window = if kind == Kind::Leasehold {
        plan.waiters_window_leasehold
    } else {
        plan.waiters_window
    };
    let mon = Monitor::start(server.port());
    Monitor::settle().await;
    let before = mon.counts();
    let total_before = total_commands(server);
    let t = Instant::now();
    tokio::time::sleep(window).await;
    let after = mon.counts();
    let total_after = total_commands(server);
    let secs = t.elapsed().as_secs_f64();
    drop(mon);
    let mut d = after.minus(&before);
    d.by_command.remove("info"); // our own probe
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    holder.unlock(held).await;
    holder.close().await;
    for h in &handles {
        h.close().await;
    }
    // total_commands_processed also counts INFO itself and the MONITOR'd
    // commands inside scripts.
    let all = total_after.saturating_sub(total_before).saturating_sub(1) as f64 / secs;
    let per_s: Vec<String> = d
        .by_command
        .iter()
        .map(|(k, v)| format!("{k} {:.1}/s", *v as f64 / secs))
        .collect();
    Some((d.requests() as f64 / secs, all, per_s.join(", ")))
}

fn total_commands(server: &RedisServer) -> u64 {
    server
        .cmd(&["INFO", "stats"])
        .lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn fmt_opt<T>(v: &Option<T>, f: impl Fn(&T) -> String) -> String {
    v.as_ref().map(f).unwrap_or_else(|| "n/a".to_owned())
}

fn report(
    ping: &Stats,
    rows: &[(Kind, Row)],
    extra: &[(String, Option<Vec<f64>>)],
    redlock: Option<&(Stats, f64, (f64, String))>,
    plan: Plan,
    pairs: [&Multi; 2],
) {
    let raw = rows
        .iter()
        .find(|(k, _)| *k == Kind::RawFred)
        .map(|(_, r)| r);
    println!("## Run\n");
    println!(
        "loopback PING round trip (fred): p50 {:.1} µs, p90 {:.1} µs, mean {:.1} µs (n = {})\n",
        ping.p50, ping.p90, ping.mean, ping.n
    );

    println!("## Uncontended lock + unlock (distinct names)\n");
    println!("| contender | requests / op (MONITOR) | p50 µs | p99 µs | p50 / PING | ops/s, 1 task | ops/s, 64 tasks on 1 client: median of {} (min–max) | × raw fred @64 (medians) |", plan.rounds);
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (kind, r) in rows {
        let ratio = match (r.ops_64, raw.and_then(|r| r.ops_64)) {
            (Some(a), Some(b)) => format!("{:.2}", a / b),
            _ => "n/a".into(),
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            kind.label(),
            fmt_opt(&r.requests_per_op, |(n, s)| format!("{n:.2} ({s})")),
            fmt_opt(&r.uncontended, |s| format!("{:.1}", s.p50)),
            fmt_opt(&r.uncontended, |s| format!("{:.1}", s.p99)),
            fmt_opt(&r.uncontended, |s| format!("{:.2}", s.p50 / ping.p50)),
            fmt_opt(&r.ops_1, |v| format!("{v:.0}")),
            fmt_opt(&r.ops_64_range, |(m, lo, hi)| format!(
                "{m:.0} ({lo:.0}–{hi:.0})"
            )),
            ratio
        );
    }
    // RedLock over 3 more loopback servers: every server asked at once.
    match redlock {
        Some((s, rate, (requests, by))) => println!(
            "| leasehold RedLock, 3 servers | {requests:.2} ({by}) | {:.1} | {:.1} | {:.2} | {rate:.0} | n/a | n/a |",
            s.p50,
            s.p99,
            s.p50 / ping.p50
        ),
        None => println!("| leasehold RedLock, 3 servers | incomplete (scenario limit) | | | | | | |"),
    }
    let plain = rows
        .iter()
        .find(|(k, _)| *k == Kind::Leasehold)
        .and_then(|(_, r)| r.uncontended.as_ref());
    if let (Some((red, _, _)), Some(plain)) = (redlock, plain) {
        println!(
            "\nRedLock (3 servers) p50 / leasehold Lock p50, same run: {:.2}",
            red.p50 / plain.p50
        );
    }

    throughput_report(plan.rounds, pairs, [1, CLIENTS]);

    println!("\n## Reentrant acquire (lock already held by the same task)\n");
    println!("| contender | requests / acquire | p50 µs | p99 µs | p50 / PING |");
    println!("| --- | --- | ---: | ---: | ---: |");
    for (kind, r) in rows {
        if !kind.reentrant() {
            println!("| {} | not reentrant | | | |", kind.label());
            continue;
        }
        println!(
            "| {} | {} | {} | {} | {} |",
            kind.label(),
            fmt_opt(&r.reentrant_requests, |(n, s)| format!("{n:.2} ({s})")),
            fmt_opt(&r.reentrant, |s| format!("{:.1}", s.p50)),
            fmt_opt(&r.reentrant, |s| format!("{:.1}", s.p99)),
            fmt_opt(&r.reentrant, |s| format!("{:.2}", s.p50 / ping.p50)),
        );
    }

    handoff_report(ping, rows, extra);

    println!("\n## Hot lock and mutual exclusion (64 tasks on 4 clients, one lock)\n");
    println!("| contender | acquisitions/s | handoffs/s (holder changed) | exact counter (GET+SET under the lock) |");
    println!("| --- | ---: | ---: | --- |");
    for (kind, r) in rows.iter().filter(|(k, _)| k.waits()) {
        println!(
            "| {} | {} | {} | {} |",
            kind.label(),
            fmt_opt(&r.hot, |v| format!("{:.0}", v.0)),
            fmt_opt(&r.hot, |v| format!("{:.0}", v.1)),
            r.exclusion.clone().unwrap_or_else(|| "n/a".into())
        );
    }
}

/// The 64-task throughput table: for 1 and for `CLIENTS` clients, each of
/// [`AB`]'s pairs/s, leasehold's ratio to each raw-fred baseline per round
/// (the runs of a round are neighbours in time, so a ratio is less exposed
/// to the VM's slow drifts than a ratio of medians) and their median, the
/// commands per pair and Redis's CPU time per 1,000 pairs.
fn throughput_report(rounds: usize, pairs: [&Multi; 2], clients: [usize; 2]) {
    println!(
        "\n## Uncontended throughput, 64 tasks: leasehold against raw fred (the same two EVALSHA) and raw fred with the bare scripts (no request record), {rounds} interleaved rounds\n",
    );
    let mut head = String::from("| clients (64 tasks, one name each) |");
    for (_, name) in AB {
        head += &format!(" {name} pairs/s: median (min–max) |");
    }
    for (_, name) in &AB[1..] {
        head += &format!(" leasehold / {name}, per round | median of the ratios |");
    }
    let names: Vec<&str> = AB.iter().map(|(_, name)| *name).collect();
    head += &format!(
        " commands / pair, {} (INFO, in scripts too) |",
        names.join(" / ")
    );
    for name in &names {
        head += &format!(" Redis CPU µs / 1,000 pairs, {name}: median (min–max) |");
    }
    head += &format!(" client CPU µs / pair, {}: medians |", names.join(" / "));
    println!("{head}");
    println!(
        "| --- | ---: | ---: | ---: | --- | ---: | --- | ---: | --- | ---: | ---: | ---: | --- |"
    );
    for (clients, m) in clients.into_iter().zip(pairs) {
        let mut line = format!("| {clients} |");
        for i in 0..AB.len() {
            line += &format!(" {} |", spread(&m.per_s(i), 0));
        }
        for i in 1..AB.len() {
            let ratios = m.ratios(i);
            let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
            let median = if ratios.is_empty() {
                "n/a".to_owned()
            } else {
                format!("{:.2}", Stats::of(&ratios).p50)
            };
            line += &format!(" {} | {median} |", each.join(", "));
        }
        let commands: Vec<String> = (0..AB.len())
            .map(|i| format!("{:.2}", m.commands(i)))
            .collect();
        line += &format!(" {} |", commands.join(" / "));
        for i in 0..AB.len() {
            line += &format!(" {} |", spread(&m.redis_cpu(i), 0));
        }
        let cpu: Vec<String> = (0..AB.len())
            .map(|i| format!("{:.1}", m.client_cpu(i)))
            .collect();
        line += &format!(" {} |", cpu.join(" / "));
        println!("{line}");
    }
}

/// The handoff-latency table: every waiting contender of `rows`, then the
/// fair lock's one-hop grant.
/// The handoff rows beyond one per contender: the fair lock's one-hop
/// grant (`fair`, measured in this process as the others), then leasehold's
/// lock and fair lock with the waiter in another process (`across.rs`).
async fn extra_handoffs(
    fair: Option<Vec<f64>>,
    url: &str,
    plan: Plan,
) -> Vec<(String, Option<Vec<f64>>)> {
    let mut extra = vec![(
        format!("{} (one-hop grant)", Kind::LeaseholdFair.label()),
        fair,
    )];
    for kind in [Kind::Leasehold, Kind::LeaseholdFair] {
        eprintln!("[handoff, two processes] {}", kind.label());
        let rounds = plan.handoff_rounds as u64;
        let samples = bounded(across::handoff(kind, url, rounds, plan.handoff_limit)).await;
        extra.push((
            format!("{}, waiter in another process", kind.label()),
            samples,
        ));
    }
    extra
}

fn handoff_report(ping: &Stats, rows: &[(Kind, Row)], extra: &[(String, Option<Vec<f64>>)]) {
    println!("\n## Handoff latency (unlock() returned → other client's lock() returned; holder keeps the lock 2–102 ms)\n");
    let p100 = rows
        .iter()
        .find(|(k, _)| *k == Kind::Poll100)
        .and_then(|(_, r)| r.handoff.as_ref())
        .map(|h| Stats::of(h).p50);
    println!(
        "| contender | n | p50 µs | p90 µs | p99 µs | max µs | p50 / PING | poll-100ms p50 / p50 |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let row = |label: &str, samples: Option<&Vec<f64>>| match samples {
        Some(h) => {
            let s = Stats::of(h);
            println!(
                "| {label} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {} |",
                s.n,
                s.p50,
                s.p90,
                s.p99,
                s.max,
                s.p50 / ping.p50,
                p100.map(|p| format!("{:.0}×", p / s.p50))
                    .unwrap_or_default()
            );
        }
        None => println!("| {label} | incomplete | | | | | | |"),
    };
    for (kind, r) in rows.iter().filter(|(k, _)| k.waits()) {
        row(kind.label(), r.handoff.as_ref());
    }
    // The fair lock's one-hop grant (target: p50 <= 0.6 × PING), and both
    // locks with the waiter in another process.
    for (label, samples) in extra {
        row(label, samples.as_ref());
    }
}

/// "median (min–max)" of per-round values.
pub fn spread(v: &[f64], decimals: usize) -> String {
    if v.is_empty() {
        return "n/a".into();
    }
    let lo = v.iter().copied().fold(f64::MAX, f64::min);
    let s = Stats::of(v);
    format!("{:.d$} ({lo:.d$}–{:.d$})", s.p50, s.max, d = decimals)
}

fn waiters_report(rows: &[(Kind, Row)], plan: Plan) {
    let poll100 = rows
        .iter()
        .find(|(k, _)| *k == Kind::Poll100)
        .map(|(_, r)| r);
    println!(
        "\n## Load caused by {} tasks (4 clients) waiting on a held lock\n",
        plan.waiters
    );
    let base = poll100.and_then(|r| r.waiters.as_ref()).map(|w| w.0);
    println!("| contender | client requests/s (MONITOR) | % of polling-100ms | all commands/s incl. inside scripts | requests by command |");
    println!("| --- | ---: | ---: | ---: | --- |");
    for (kind, r) in rows.iter().filter(|(k, _)| k.waits()) {
        match &r.waiters {
            Some((req, all, by)) => println!(
                "| {} | {:.1} | {} | {:.1} | {} |",
                kind.label(),
                req,
                base.map(|b| format!("{:.2} %", req / b * 100.0))
                    .unwrap_or_default(),
                all,
                by
            ),
            None => println!("| {} | n/a | | | |", kind.label()),
        }
    }
}

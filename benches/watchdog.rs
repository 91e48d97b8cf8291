//! The cost of the watchdog's renewal cycle for 1,000 / 10,000 / 100,000
//! held leases, measured from outside against a real loopback
//! `redis-server` (a fresh one per size).
//!
//! Each size holds N locks taken with `lock()` (64 acquiring tasks) on one
//! client whose watchdog timeout is 3 s (a cycle every 1 s), then measures
//! over 5 cycles:
//!
//! * renewal script calls: `Watchdog::renewal_calls()` delta and the
//!   server's `cmdstat_evalsha` delta (nothing else sends EVALSHA then);
//! * server time in those calls (`cmdstat_evalsha` usec delta);
//! * cycle wall time: from the cycle's first call being sent to the server
//!   having run all of them (INFO polled every ~1 ms; an upper bound);
//! * CPU of this process and of redis-server (sum of
//!   `/proc/<pid>/task/*/schedstat`, ns), as a share of one core;
//! * leases declared lost by the end (renewals not confirmed in time).
//!
//! The same with 30,000 leases on a Redis cluster of 3 primaries (node
//! batches), and 100,000 at the default 30 s timeout.
//!
//! `cargo bench --bench watchdog`; `LEASEHOLD_BENCH_WATCHDOG_MAX=10000`
//! skips the larger sizes. Not a criterion bench: one cycle is a
//! background event that cannot be driven by an iteration loop.

use std::sync::Arc;
use std::time::Duration;

use leasehold::{Client, LockGuard, Watchdog};
use leasehold_testkit::cluster::RedisCluster;
use leasehold_testkit::server::RedisServer;
use tokio::sync::Mutex;
use tokio::time::Instant;

const TIMEOUT: Duration = Duration::from_secs(3);
const CYCLES: u32 = 5;
const ACQUIRERS: usize = 64;

fn main() {
    // criterion-style flags (`--bench`) are ignored.
    let max: usize = std::env::var("LEASEHOLD_BENCH_WATCHDOG_MAX")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!("| redis | held leases | batch | renew interval | acquire time | cycles run | calls / cycle (watchdog) | EVALSHA / cycle (server) | ceil(N/batch) | cycle wall ms | server ms / cycle | process CPU ms / cycle | process CPU % of 1 core | redis-server CPU % of 1 core | leases lost |");
    println!(
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for n in [1_000usize, 10_000, 100_000] {
        if n > max {
            continue;
        }
        rt.block_on(measure(Redis::server(), n, TIMEOUT, CYCLES));
    }
    // the default watchdog timeout (30 s: a cycle every 10 s), 2 cycles
    if 100_000 <= max {
        rt.block_on(measure(
            Redis::server(),
            100_000,
            Duration::from_secs(30),
            2,
        ));
    }
    // A Redis 7 cluster of 3 primaries: one batch per node per call.
    if 30_000 <= max {
        rt.block_on(measure(Redis::cluster(), 30_000, TIMEOUT, CYCLES));
    }
}

/// Where the leases live: one server, or a cluster of 3 primaries.
enum Redis {
    Server(RedisServer),
    Cluster(RedisCluster),
}

impl Redis {
    fn server() -> Redis {
        Redis::Server(RedisServer::start())
    }

    fn cluster() -> Redis {
        Redis::Cluster(RedisCluster::start(3, 0))
    }

    fn name(&self) -> &'static str {
        match self {
            Redis::Server(_) => "server",
            Redis::Cluster(_) => "cluster ×3",
        }
    }

    fn url(&self) -> String {
        match self {
            Redis::Server(s) => s.url(),
            Redis::Cluster(c) => c.url(),
        }
    }

    fn nodes(&self) -> &[RedisServer] {
        match self {
            Redis::Server(s) => std::slice::from_ref(s),
            Redis::Cluster(c) => c.nodes(),
        }
    }

    /// CPU time (ns) of every redis-server process.
    fn cpu_ns(&self) -> u64 {
        self.nodes().iter().map(|n| cpu_ns(n.pid())).sum()
    }
}

async fn measure(server: Redis, n: usize, timeout: Duration, cycles: u32) {
    let watchdog = Watchdog::new(timeout).expect("watchdog");
    let batch = watchdog.batch_size();
    let client = Client::builder()
        .url(&server.url())
        .watchdog(watchdog.clone())
        .build()
        .await
        .expect("connect");

    // Hold n locks, acquired by 64 tasks.
    let guards: Arc<Mutex<Vec<LockGuard>>> = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for t in 0..ACQUIRERS {
        let (client, guards) = (client.clone(), guards.clone());
        set.spawn(async move {
            let mut mine = Vec::new();
            for i in (t..n).step_by(ACQUIRERS) {
                mine.push(client.lock(&format!("wd:{i}")).lock().await.expect("lock"));
            }
            guards.lock().await.extend(mine);
        });
    }
    while set.join_next().await.is_some() {}
    let acquire_time = start.elapsed();
    // Leases declared lost from here on (or while acquiring) are counted
    // in the last column, not asserted: a size the machine cannot renew in
    // time is a result.

    let expected = n.div_ceil(batch) as u64;
    let interval = watchdog.renew_interval();

    // 1. Cost: start between two cycles (one has just run), then sleep
    //    exactly CYCLES intervals with nothing else running in the process.
    let (started, before) = cycle(&server, &watchdog).await;
    let _ = cycle_done(&server, &watchdog, started, before + expected).await;
    // Calls per cycle, as the last one sent (a cluster sends one batch or
    // more per node).
    let calls_before = watchdog.renewal_calls();
    next_cycle(&watchdog).await;
    let per_cycle = (watchdog.renewal_calls() - calls_before).max(1) as f64;
    let t0 = Instant::now();
    let (calls0, (evalsha0, usec0)) = (watchdog.renewal_calls(), evalsha(&server));
    let (cpu0, srv0) = (cpu_ns(None), server.cpu_ns());
    tokio::time::sleep(interval * cycles).await;
    let (cpu1, srv1) = (cpu_ns(None), server.cpu_ns());
    let wall = t0.elapsed();
    let (calls1, (evalsha1, usec1)) = (watchdog.renewal_calls(), evalsha(&server));

    // 2. Cycle wall time (polling, so not in the CPU window above).
    let mut walls = Vec::new();
    for _ in 0..cycles {
        let (started, before) = cycle(&server, &watchdog).await;
        walls.push(cycle_done(&server, &watchdog, started, before + expected).await);
    }

    // The window is `cycles` intervals long but may hold one cycle fewer
    // (phase jitter, or cycles that ran long): per-cycle figures divide
    // by the cycles the server ran. (The watchdog counts a cycle's calls
    // when it ends, so its counter misses one still in flight.)
    let n_cycles = ((evalsha1 - evalsha0) as f64 / per_cycle).max(1.0);
    let wall_ms: Vec<String> = walls
        .iter()
        .map(|w| format!("{:.0}", w.as_secs_f64() * 1e3))
        .collect();
    let pct = |ns: u64| ns as f64 / wall.as_nanos() as f64 * 100.0;
    println!(
        "| {} | {n} | {batch} | {:?} | {:.2} s | {:.1} | {:.1} | {:.1} | {expected} | {} | {:.1} | {:.1} | {:.2} % | {:.2} % | {} |",
        server.name(),
        interval,
        acquire_time.as_secs_f64(),
        n_cycles,
        (calls1 - calls0) as f64 / n_cycles,
        (evalsha1 - evalsha0) as f64 / n_cycles,
        wall_ms.join(" / "),
        (usec1 - usec0) as f64 / 1e3 / n_cycles,
        (cpu1 - cpu0) as f64 / 1e6 / n_cycles,
        pct(cpu1 - cpu0),
        pct(srv1 - srv0),
        // Declared lost (renewals not confirmed in time): the machine could
        // not keep up at this size and interval.
        n - watchdog.lease_count(),
    );

    drop(guards);
    let _ = tokio::time::timeout(Duration::from_secs(60), client.shutdown()).await;
}

/// Polls the server (~1 ms) until its EVALSHA count reaches `target`,
/// bounded by one interval; returns the time since `started`.
async fn cycle_done(
    server: &Redis,
    watchdog: &Watchdog,
    started: Instant,
    target: u64,
) -> Duration {
    let limit = started + watchdog.renew_interval();
    loop {
        let (now, _) = evalsha(server);
        if now >= target || Instant::now() >= limit {
            return started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Waits for the next cycle with the server's EVALSHA count read just
/// before (between cycles, so none is in flight); returns when the cycle
/// was seen to start and the count the cycle's calls add up from.
async fn cycle(server: &Redis, watchdog: &Watchdog) -> (Instant, u64) {
    let before = evalsha(server).0;
    (next_cycle(watchdog).await, before)
}

/// Waits for the watchdog's next cycle to start (its call counter moves);
/// returns when it was seen.
async fn next_cycle(watchdog: &Watchdog) -> Instant {
    let calls = watchdog.renewal_calls();
    let limit = Instant::now() + watchdog.renew_interval() * 3;
    while watchdog.renewal_calls() == calls && Instant::now() < limit {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    Instant::now()
}

/// (calls, usec) of EVALSHA, summed over the nodes.
fn evalsha(server: &Redis) -> (u64, u64) {
    server
        .nodes()
        .iter()
        .map(evalsha_on)
        .fold((0, 0), |(c, u), (c1, u1)| (c + c1, u + u1))
}

/// (calls, usec) of EVALSHA on one server.
fn evalsha_on(server: &RedisServer) -> (u64, u64) {
    let stats = server.cmd(&["INFO", "commandstats"]);
    let Some(line) = stats.lines().find(|l| l.starts_with("cmdstat_evalsha:")) else {
        return (0, 0);
    };
    let field = |name: &str| {
        line.split([':', ','])
            .find_map(|kv| kv.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("calls="), field("usec="))
}

/// CPU time (ns) of every thread of a process (this one for `None`).
fn cpu_ns(pid: Option<u32>) -> u64 {
    let dir = match pid {
        Some(pid) => format!("/proc/{pid}/task"),
        None => "/proc/self/task".to_owned(),
    };
    let Ok(tasks) = std::fs::read_dir(dir) else {
        return 0;
    };
    tasks
        .filter_map(|t| t.ok())
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| {
            s.split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
        })
        .sum()
}

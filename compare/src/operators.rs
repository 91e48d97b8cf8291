//! Issue 33's hot-path A/B (`LEASEHOLD_COMPARE_ONLY=operators`): what the
//! client record and the wait recording cost the lock path.
//!
//! * **A**: leasehold's lock on a client built with
//!   `client_record(false)`: no record, no wait ever registered.
//! * **B**: the default client: its record (written at start, renewed by
//!   the watchdog's cycle) and every wait that finds the lock busy
//!   registered for recording (recorded only past 1 s).
//!
//! Both run in the same process against one `redis-server`, in
//! interleaved rounds: A then B, then B then A, and so on
//! (`LEASEHOLD_COMPARE_ROUNDS`, default 15: about 3.5 minutes;
//! `LEASEHOLD_COMPARE_SCENARIO=one|64|hot|handoff` runs one scenario).
//! Each block connects its own clients, warms them up, measures, and
//! closes them, so one side's record never lives through the other's
//! block. The scenarios:
//!
//! | scenario | measured | time per operation |
//! | --- | --- | --- |
//! | uncontended, 1 task | lock + unlock of one name, back to back, for [`WINDOW`] | µs per pair |
//! | uncontended, 64 tasks on 1 client | one name per task, for [`WINDOW`] | 1 / (pairs per µs) |
//! | hot lock, 64 tasks on 4 clients | one name, nothing done under it, for [`WINDOW`]: most tries find it busy and wait | µs per acquisition (all acquisitions over all the time) |
//! | handoff, 2 clients | the comparison report's handoff ([`crate::handoff_on`]): the holder keeps the lock 2–102 ms, the other waits | p50 of unlock returned → other's lock returned, µs |
//!
//! Per round the ratio B/A of the time per operation (above 1: B is
//! slower), and of this process's CPU time per operation (every thread:
//! the client's own work, which is where recording could cost; it moves
//! less with the other processes on the machine than the time does);
//! reported with each side's median (min–max) over the rounds.
//! Per block, the commands Redis ran: `INFO commandstats` deltas, the
//! commands scripts run included and `INFO` itself left out, divided by
//! the block's operations (pairs, acquisitions).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold_testkit::server::RedisServer;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::contender::{Handle, Kind};
use crate::{spread, Stats, CLIENTS, TASKS};

/// Length of each timed block but the handoff's.
pub const WINDOW: Duration = Duration::from_secs(1);
/// Acquisitions per handoff block (about 52 ms each).
const HANDOFF_ROUNDS: u64 = 41;
/// A handoff block is abandoned after this.
const HANDOFF_LIMIT: Duration = Duration::from_secs(30);
/// Lock + unlock pairs each new client makes before a block.
const WARM_UP: usize = 50;

/// The two sides, in the order of the first round.
const SIDES: [Kind; 2] = [Kind::LeaseholdNoRecord, Kind::Leasehold];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Scenario {
    OneTask,
    Tasks64,
    Hot,
    Handoff,
}

impl Scenario {
    const ALL: [Scenario; 4] = [
        Scenario::OneTask,
        Scenario::Tasks64,
        Scenario::Hot,
        Scenario::Handoff,
    ];

    fn label(self) -> String {
        match self {
            Scenario::OneTask => "uncontended lock + unlock, 1 task (µs per pair)".into(),
            Scenario::Tasks64 => {
                format!("uncontended, {TASKS} tasks on 1 client (µs per pair of throughput)")
            }
            Scenario::Hot => format!(
                "hot lock, {TASKS} tasks on {CLIENTS} clients (µs per acquisition of throughput)"
            ),
            Scenario::Handoff => "handoff between 2 clients, holder keeps 2–102 ms (p50 µs)".into(),
        }
    }

    /// The name `LEASEHOLD_COMPARE_SCENARIO` picks it by.
    fn short(self) -> &'static str {
        match self {
            Scenario::OneTask => "one",
            Scenario::Tasks64 => "64",
            Scenario::Hot => "hot",
            Scenario::Handoff => "handoff",
        }
    }

    /// Every scenario, or the one `LEASEHOLD_COMPARE_SCENARIO` names
    /// (`one`, `64`, `hot`, `handoff`): more rounds of one in the same time.
    fn chosen() -> Vec<Scenario> {
        let only = std::env::var("LEASEHOLD_COMPARE_SCENARIO").ok();
        Scenario::ALL
            .into_iter()
            .filter(|s| only.as_deref().is_none_or(|o| o == s.short()))
            .collect()
    }

    fn unit(self) -> &'static str {
        match self {
            Scenario::Hot | Scenario::Handoff => "acquisition",
            _ => "pair",
        }
    }
}

/// One block: time per operation (µs), this process's CPU time per
/// operation (µs, every thread: less moved by the other processes on the
/// machine than the time is), and commands per operation.
#[derive(Clone, Copy)]
struct Block {
    us: f64,
    cpu_us: f64,
    commands: f64,
}

/// Every command the server has run, scripts' inner commands included,
/// but `INFO` (the probe itself), as `tests/redis_work.rs` counts them.
fn commands(server: &RedisServer) -> u64 {
    server
        .cmd(&["INFO", "commandstats"])
        .lines()
        .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info:"))
        .filter_map(|l| l.split("calls=").nth(1))
        .filter_map(|rest| rest.split(',').next())
        .filter_map(|n| n.parse::<u64>().ok())
        .sum()
}

async fn connect(kind: Kind, url: &str, n: usize) -> Vec<Handle> {
    let mut handles = Vec::with_capacity(n);
    for _ in 0..n {
        let h = Handle::connect(kind, url).await;
        for _ in 0..WARM_UP {
            let g = h.lock("ops-ab:warm-up").await;
            h.unlock(g).await;
        }
        handles.push(h);
    }
    handles
}

async fn close(handles: &[Handle]) {
    for h in handles {
        h.close().await;
    }
}

/// One block of `scenario` for `kind` in round `round`.
async fn block(scenario: Scenario, kind: Kind, server: &RedisServer, round: usize) -> Block {
    let url = server.url();
    let name = format!("ops-ab:{}:{round}", kind.short());
    let clients = match scenario {
        Scenario::OneTask | Scenario::Tasks64 => 1,
        Scenario::Hot => CLIENTS,
        Scenario::Handoff => 2,
    };
    let handles = connect(kind, &url, clients).await;
    let before = commands(server);
    let cpu = crate::cpu_ns();
    let (us, ops) = match scenario {
        Scenario::OneTask => {
            let h = &handles[0];
            let start = Instant::now();
            let mut pairs = 0u64;
            while start.elapsed() < WINDOW {
                let g = h.lock(&name).await;
                h.unlock(g).await;
                pairs += 1;
            }
            (us(start.elapsed()) / pairs as f64, pairs)
        }
        Scenario::Tasks64 => {
            let (pairs, took) = crate::throughput_on(&handles, kind, WINDOW, round).await;
            (us(took) / pairs as f64, pairs)
        }
        Scenario::Hot => {
            let (acquisitions, took) = hot(&handles, &name).await;
            (us(took) / acquisitions as f64, acquisitions)
        }
        Scenario::Handoff => {
            let samples = crate::handoff_on(
                &handles[0],
                &handles[1],
                &name,
                HANDOFF_ROUNDS,
                HANDOFF_LIMIT,
            )
            .await;
            if samples.len() + 1 < HANDOFF_ROUNDS as usize {
                eprintln!("  handoff block incomplete: {} samples", samples.len());
            }
            (Stats::of(&samples).p50, HANDOFF_ROUNDS)
        }
    };
    let cpu_us = (crate::cpu_ns() - cpu) as f64 / 1e3 / ops.max(1) as f64;
    let spent = commands(server) - before;
    close(&handles).await;
    Block {
        us,
        cpu_us,
        commands: spent as f64 / ops.max(1) as f64,
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// `TASKS` tasks on `handles` take and give back lock `name`, nothing
/// done under it, until [`WINDOW`] has passed: every acquisition (also
/// those finishing after the window) and the time until the last task
/// ended.
async fn hot(handles: &[Handle], name: &str) -> (u64, Duration) {
    let count = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + WINDOW;
    let mut tasks = JoinSet::new();
    for t in 0..TASKS {
        let h = handles[t % handles.len()].clone();
        let (name, count) = (name.to_owned(), count.clone());
        tasks.spawn(async move {
            while Instant::now() < deadline {
                let g = h.lock(&name).await;
                count.fetch_add(1, Ordering::Relaxed);
                h.unlock(g).await;
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.expect("hot-lock task");
    }
    (count.load(Ordering::Relaxed), start.elapsed())
}

/// Runs the A/B and prints its table (markdown, on stdout).
pub async fn ab(server: &RedisServer) {
    let rounds: usize = std::env::var("LEASEHOLD_COMPARE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    // [scenario][side] → blocks, one per round.
    let scenarios = Scenario::chosen();
    let mut blocks: Vec<[Vec<Block>; 2]> = scenarios.iter().map(|_| Default::default()).collect();
    for round in 0..rounds {
        for (s, &scenario) in scenarios.iter().enumerate() {
            let mut order = [0, 1];
            if round % 2 == 1 {
                order.reverse();
            }
            for side in order {
                let b = block(scenario, SIDES[side], server, round).await;
                blocks[s][side].push(b);
            }
            let [a, b] = [&blocks[s][0], &blocks[s][1]].map(|v| v[round]);
            eprintln!(
                "round {} {}: A {:.1} µs, CPU {:.1} µs, {:.2} commands/{}; B {:.1} µs, CPU {:.1} µs, {:.2}; B/A {:.3}, CPU {:.3}",
                round + 1,
                scenario.label(),
                a.us,
                a.cpu_us,
                a.commands,
                scenario.unit(),
                b.us,
                b.cpu_us,
                b.commands,
                b.us / a.us,
                b.cpu_us / a.cpu_us,
            );
        }
    }
    println!(
        "## Operators A/B: client record and wait recording on (B, the default) against `client_record(false)` (A)\n"
    );
    println!(
        "{rounds} interleaved rounds (A B, B A, …), {} s blocks (handoff: {HANDOFF_ROUNDS} acquisitions), one redis-server. Time per operation: median (min–max) over the rounds; B/A above 1 means B is slower. Commands: INFO commandstats per operation, scripts' inner commands included.\n",
        WINDOW.as_secs_f64()
    );
    println!("| scenario | A: µs | B: µs | B/A per round | B/A median (min–max) | client CPU µs per op, A | client CPU µs per op, B | CPU B/A median (min–max) | commands per op, A | commands per op, B |");
    println!("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (s, &scenario) in scenarios.iter().enumerate() {
        let [a, b] = [&blocks[s][0], &blocks[s][1]];
        let time = |v: &[Block]| v.iter().map(|b| b.us).collect::<Vec<f64>>();
        let cpu = |v: &[Block]| v.iter().map(|b| b.cpu_us).collect::<Vec<f64>>();
        let cmds = |v: &[Block]| v.iter().map(|b| b.commands).collect::<Vec<f64>>();
        let ratios: Vec<f64> = a.iter().zip(b).map(|(a, b)| b.us / a.us).collect();
        let cpu_ratios: Vec<f64> = a.iter().zip(b).map(|(a, b)| b.cpu_us / a.cpu_us).collect();
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            scenario.label(),
            spread(&time(a), 1),
            spread(&time(b), 1),
            ratios
                .iter()
                .map(|r| format!("{r:.3}"))
                .collect::<Vec<_>>()
                .join(", "),
            spread(&ratios, 3),
            spread(&cpu(a), 1),
            spread(&cpu(b), 1),
            spread(&cpu_ratios, 3),
            spread(&cmds(a), 2),
            spread(&cmds(b), 2),
        );
    }
}

/// How long a holder keeps the lock once the other side's try found it
/// busy, in `--handoffs`: long enough for the waiter to subscribe and
/// park, also under callgrind (which runs the process many times slower).
const PARK: Duration = Duration::from_millis(30);

/// `--handoffs <norecord|leasehold> <N>`: `N` handoffs of one lock between
/// two tasks on two clients of that kind, against a loopback
/// `redis-server` it starts: the holder waits until the other side has
/// tried and found the lock busy (its client's `busy_attempts`), keeps the
/// lock [`PARK`] longer, and unlocks; the waiter is woken and takes it;
/// then the roles swap. Each handoff is a wait that starts (and, on side
/// B, is registered for recording: a contended acquire's extra work) and
/// ends. Run under callgrind by `compare/instructions.sh` (`WHAT=handoffs`)
/// for instructions per handoff, which do not move with the machine's load.
pub async fn handoffs(args: &[String]) {
    let (Some(kind), Some(Ok(n))) = (
        args.first().and_then(|k| Kind::from_short(k)),
        args.get(1).map(|n| n.parse::<u64>()),
    ) else {
        eprintln!("usage: leasehold-compare --handoffs norecord|leasehold N");
        std::process::exit(2);
    };
    let server = RedisServer::start();
    let url = server.url();
    let clients = [
        Handle::connect(kind, &url).await,
        Handle::connect(kind, &url).await,
    ];
    let stats = |h: &Handle| match h {
        Handle::Leasehold(c) => c.stats().busy_attempts,
        _ => panic!("--handoffs runs leasehold's lock only"),
    };
    let name = "ops-ab:handoffs";
    let mut held = clients[0].lock(name).await;
    for k in 0..n {
        let (holder, waiter) = if k % 2 == 0 {
            (&clients[0], &clients[1])
        } else {
            (&clients[1], &clients[0])
        };
        let busy = stats(waiter);
        let taking = tokio::spawn({
            let waiter = waiter.clone();
            async move { waiter.lock(name).await }
        });
        while stats(waiter) == busy {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(PARK).await;
        holder.unlock(held).await;
        held = taking.await.expect("the waiter's task");
    }
    clients[n as usize % 2].unlock(held).await;
    for c in &clients {
        c.close().await;
    }
}

/// `--hot <norecord|leasehold> <N>`: the hot-lock scenario of the A/B
/// ([`TASKS`] tasks on [`CLIENTS`] clients of that kind, one lock, nothing
/// done under it) until `N` acquisitions in all, against a loopback
/// `redis-server` it starts. Run under callgrind by
/// `compare/instructions.sh` (`WHAT=hot`) for instructions per contended
/// acquisition; how many tries find the lock busy moves with the race, so
/// the count moves more between runs than a pair's or a handoff's.
pub async fn hot_acquisitions(args: &[String]) {
    let (Some(kind), Some(Ok(n))) = (
        args.first().and_then(|k| Kind::from_short(k)),
        args.get(1).map(|n| n.parse::<u64>()),
    ) else {
        eprintln!("usage: leasehold-compare --hot norecord|leasehold N");
        std::process::exit(2);
    };
    let server = RedisServer::start();
    let url = server.url();
    let mut handles = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        handles.push(Handle::connect(kind, &url).await);
    }
    let count = Arc::new(AtomicU64::new(0));
    let mut tasks = JoinSet::new();
    for t in 0..TASKS {
        let h = handles[t % CLIENTS].clone();
        let count = count.clone();
        tasks.spawn(async move {
            while count.load(Ordering::Relaxed) < n {
                let g = h.lock("ops-ab:hot").await;
                count.fetch_add(1, Ordering::Relaxed);
                h.unlock(g).await;
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.expect("hot-lock task");
    }
    close(&handles).await;
}

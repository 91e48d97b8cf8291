//! Hot lock, one contender per client: 32 contenders, each with its own
//! client (connection), loop lock → critical section → unlock on one lock
//! name for a fixed time, in interleaved rounds.
//!
//! The critical section is the exact-counter check: a non-atomic `GET` +
//! `SET counter+1` through a second connection of the contender's own.
//!
//! Per round and contender kind it records acquisitions (inside the
//! window), handoffs (the holder changed), acquisitions per contender, the
//! acquire requests the server saw, from `INFO commandstats` deltas (see
//! [`Attempts`] for why not `MONITOR`), and everything the server did for
//! the round: every command it ran (scripts' inner commands included) and
//! its CPU time (`server_work.rs`). The reading after waits
//! [`SETTLE`] once the last contender is done, so that leasehold's request
//! records, deleted in batches every 100 ms, are in the round that made
//! them. The readings span the contenders' run, not their connecting (the
//! Python peer's and rslock's connections are made inside it: their
//! `CLIENT SETINFO`s and the like are counted, a few per contender).
//!
//! Adding a contender is one entry in [`CONTENDERS`]. leasehold's
//! `fair_lock` counts as `lock()` does: its acquire and release are one
//! `EVALSHA` each; a "kick" `EVALSHA` (a release whose head waiter was not
//! listening) and a waiter's refresh `EVALSHA` (every 2 s of one wait)
//! would count as acquire requests (neither happens while the lock is
//! handed on every few milliseconds).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::interfaces::{ClientLike, KeysInterface};
use leasehold_testkit::server::RedisServer;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::contender::{fred_client, Handle, Kind};
use crate::python::Python;
use crate::server_work::{Delta, Work};
use crate::spread;

/// Contenders (and clients) per kind.
pub const CLIENTS: usize = 32;

/// How long the reading after a round waits once every contender is done:
/// three of leasehold's 100 ms record batches.
pub const SETTLE: Duration = Duration::from_millis(300);

/// One kind of contender.
pub struct Contender {
    pub label: &'static str,
    /// Key names: `hot32:<short>:<round>`.
    pub short: &'static str,
    pub driver: Driver,
    pub attempts: Attempts,
}

#[derive(Clone, Copy)]
pub enum Driver {
    /// In this process: 32 [`Handle`]s, each its own client, one task each.
    Rust(Kind),
    /// The Python driver: 32 OS processes, each its own connections.
    Python,
}

/// How acquire requests are counted: the `INFO commandstats` delta of
/// `command` over the round, minus the requests of that same command the
/// scenario knows exactly that it sent for something else.
///
/// Why `INFO commandstats` and not `MONITOR`: the server keeps those
/// counters anyway, so counting costs nothing during a timed, CPU-bound
/// round on 2 shared cores. `MONITOR` would tell an acquire `EVALSHA` from
/// a release by its SHA, but the server would copy every command, including
/// each command a script runs, to the monitor connection and the report
/// would parse them, slowing the script-heavy contenders most. The price
/// is the subtraction, which needs exact client-side counts: the rows of
/// the uncontended table (`MONITOR`) check that a lock + unlock is one
/// acquire and one release request.
pub struct Attempts {
    pub command: &'static str,
    pub minus: &'static [Known],
}

/// Requests of the counted command that are not acquire attempts.
#[derive(Clone, Copy)]
pub enum Known {
    /// One release `EVALSHA` per unlock (every acquisition is unlocked).
    Unlocks,
    /// The critical section's `SET counter` (one per acquisition).
    CriticalSets,
    /// Watchdog renewal `EVALSHA`s (`Watchdog::renewal_calls`).
    Renewals,
}

/// leasehold's `lock()`: acquire and release are both `EVALSHA`.
pub const LEASEHOLD_ATTEMPTS: Attempts = Attempts {
    command: "evalsha",
    minus: &[Known::Unlocks, Known::Renewals],
};

/// An acquire attempt is a `SET … NX`; the critical section's `SET` is not.
pub const SET_NX_ATTEMPTS: Attempts = Attempts {
    command: "set",
    minus: &[Known::CriticalSets],
};

pub const CONTENDERS: &[Contender] = &[
    Contender {
        label: "leasehold",
        short: "leasehold",
        driver: Driver::Rust(Kind::Leasehold),
        attempts: LEASEHOLD_ATTEMPTS,
    },
    Contender {
        label: "leasehold fair_lock",
        short: "fair",
        driver: Driver::Rust(Kind::LeaseholdFair),
        attempts: LEASEHOLD_ATTEMPTS,
    },
    Contender {
        label: "polling SET NX PX, 10 ms",
        short: "poll10",
        driver: Driver::Rust(Kind::Poll10),
        attempts: SET_NX_ATTEMPTS,
    },
    Contender {
        label: "rslock 0.10 (defaults: 3 tries 0-200 ms apart, then again)",
        short: "rslock",
        driver: Driver::Rust(Kind::Rslock),
        attempts: SET_NX_ATTEMPTS,
    },
    Contender {
        label: "python-redis-lock (BLPOP wake-up, a process each)",
        short: "pyredislock",
        driver: Driver::Python,
        attempts: SET_NX_ATTEMPTS,
    },
];

/// One round of one contender kind.
pub struct Round {
    /// Acquisitions inside the window, per contender.
    pub per_contender: Vec<u64>,
    pub handoffs: u64,
    pub window: Duration,
    /// Every acquisition, also those that completed after the deadline (each
    /// ran the critical section and was unlocked).
    pub total: u64,
    /// Acquire requests (commandstats, corrected); `None` if the
    /// correction came out negative (a premise of [`Attempts`] is wrong).
    pub attempts: Option<u64>,
    pub counter: i64,
    /// What the server did for the round: every command (the contenders'
    /// and their scripts', less the readings' own `INFO`) and its CPU time.
    pub work: Delta,
}

impl Round {
    pub fn acquisitions(&self) -> u64 {
        self.per_contender.iter().sum()
    }
}

/// Every round of one contender kind, or why it was skipped.
pub struct Outcome {
    pub rounds: Vec<Result<Round, String>>,
    pub skipped: Option<String>,
}

/// Runs `rounds` interleaved rounds (the order rotates every round).
pub async fn run(
    server: &RedisServer,
    python: &Result<Python, String>,
    window: Duration,
    rounds: usize,
    limit: Duration,
) -> Vec<Outcome> {
    let mut out: Vec<Outcome> = CONTENDERS
        .iter()
        .map(|c| Outcome {
            rounds: Vec::new(),
            skipped: match (c.driver, python) {
                (Driver::Python, Err(why)) => Some(why.clone()),
                _ => None,
            },
        })
        .collect();
    for round in 0..rounds {
        for j in 0..CONTENDERS.len() {
            let i = (j + round) % CONTENDERS.len();
            if out[i].skipped.is_some() {
                continue;
            }
            let c = &CONTENDERS[i];
            eprintln!(
                "[hot lock, {CLIENTS} clients] round {} {}",
                round + 1,
                c.label
            );
            let r = tokio::time::timeout(limit, one(c, server, python, window, round))
                .await
                .unwrap_or_else(|_| Err("incomplete (scenario limit)".into()));
            match &r {
                Ok(r) => eprintln!(
                    "  {} acquisitions in the window, {} in all, {} acquire requests, counter {}; Redis: {} commands, {} µs CPU ({:.0} % sys); per acquisition: {}",
                    r.acquisitions(),
                    r.total,
                    r.attempts
                        .map_or_else(|| "inconsistent".into(), |a| a.to_string()),
                    r.counter,
                    r.work.commands(),
                    r.work.cpu_us,
                    r.work.sys_percent(),
                    r.work.per_op(r.total)
                ),
                Err(e) => eprintln!("  failed: {e}"),
            }
            out[i].rounds.push(r);
        }
    }
    out
}

async fn one(
    c: &Contender,
    server: &RedisServer,
    python: &Result<Python, String>,
    window: Duration,
    round: usize,
) -> Result<Round, String> {
    let url = server.url();
    let name = format!("hot32:{}:{round}", c.short);
    let counter = format!("hot32-counter:{}:{round}", c.short);
    let setup = fred_client(&url).await;
    let _: () = setup
        .set(&counter, 0, None, None, false)
        .await
        .map_err(|e| e.to_string())?;
    let (run, before, after, renewals) = match c.driver {
        Driver::Rust(kind) => {
            let mut handles = Vec::with_capacity(CLIENTS);
            let mut checkers = Vec::with_capacity(CLIENTS);
            for _ in 0..CLIENTS {
                handles.push(Handle::connect(kind, &url).await);
                checkers.push(fred_client(&url).await);
            }
            let renew_before = renewal_calls(&handles);
            let before = Work::read(server);
            let run = rust(&handles, &checkers, &name, &counter, window).await;
            tokio::time::sleep(SETTLE).await;
            let after = Work::read(server);
            let renew_after = renewal_calls(&handles);
            for (h, checker) in handles.iter().zip(&checkers) {
                h.close().await;
                let _ = checker.quit().await;
            }
            (run, before, after, renew_after - renew_before)
        }
        Driver::Python => {
            let py = python.as_ref().map_err(Clone::clone)?;
            let before = Work::read(server);
            let run = py.hot(&url, &name, &counter, CLIENTS, window).await?;
            tokio::time::sleep(SETTLE).await;
            let after = Work::read(server);
            let run = (run.acquisitions, run.handoffs, run.critical_sections);
            (run, before, after, 0)
        }
    };
    // read here, not taken from the contender's own report
    let counter: i64 = setup.get(&counter).await.map_err(|e| e.to_string())?;
    let _ = setup.quit().await;
    let (per_contender, handoffs, total) = run;
    let work = after.since(&before);
    let delta = work
        .by_command
        .get(c.attempts.command)
        .copied()
        .unwrap_or(0);
    let known: u64 = c
        .attempts
        .minus
        .iter()
        .map(|k| match k {
            Known::Unlocks | Known::CriticalSets => total,
            Known::Renewals => renewals,
        })
        .sum();
    Ok(Round {
        per_contender,
        handoffs,
        window,
        total,
        attempts: delta.checked_sub(known),
        counter,
        work,
    })
}

/// 32 tasks, one per handle (client) and checker connection. Returns
/// (acquisitions per contender inside the window, handoffs, every
/// acquisition).
async fn rust(
    handles: &[Handle],
    checkers: &[fred::clients::Client],
    name: &str,
    counter: &str,
    window: Duration,
) -> (Vec<u64>, u64, u64) {
    let counts: Arc<Vec<AtomicU64>> = Arc::new((0..CLIENTS).map(|_| AtomicU64::new(0)).collect());
    let handoffs = Arc::new(AtomicU64::new(0));
    let total = Arc::new(AtomicU64::new(0));
    let last = Arc::new(AtomicU64::new(u64::MAX));
    let deadline = Instant::now() + window;
    let mut tasks = JoinSet::new();
    for (t, (h, checker)) in handles.iter().zip(checkers).enumerate() {
        let (h, checker) = (h.clone(), checker.clone());
        let (name, counter) = (name.to_owned(), counter.to_owned());
        let (counts, handoffs, total, last) = (
            counts.clone(),
            handoffs.clone(),
            total.clone(),
            last.clone(),
        );
        tasks.spawn(async move {
            while Instant::now() < deadline {
                let g = h.lock(&name).await;
                if Instant::now() < deadline {
                    counts[t].fetch_add(1, Ordering::Relaxed);
                    // under the lock: the previous holder is exact
                    if last.swap(t as u64, Ordering::Relaxed) != t as u64 {
                        handoffs.fetch_add(1, Ordering::Relaxed);
                    }
                }
                let v: i64 = checker.get(&counter).await.expect("GET");
                tokio::task::yield_now().await;
                let _: () = checker
                    .set(&counter, v + 1, None, None, false)
                    .await
                    .expect("SET");
                total.fetch_add(1, Ordering::Relaxed);
                h.unlock(g).await;
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.expect("contender task");
    }
    (
        counts.iter().map(|c| c.load(Ordering::Relaxed)).collect(),
        handoffs.load(Ordering::Relaxed),
        total.load(Ordering::Relaxed),
    )
}

/// The table: one row per contender kind, medians (min–max) over rounds.
pub fn report(
    outcomes: &[Outcome],
    rounds: usize,
    window: Duration,
    python: &Result<Python, String>,
) {
    println!(
        "\n## Hot lock, {CLIENTS} contenders on {CLIENTS} clients (one lock; {} s per round, median of {rounds} interleaved rounds (min–max))\n",
        window.as_secs_f64()
    );
    match python {
        Ok(py) => println!(
            "Python peer: {}, one OS process per contender.\n",
            py.versions
        ),
        Err(why) => println!("Python peer skipped: {why}\n"),
    }
    println!("| contender | acquisitions/s | handoffs/s (holder changed) | acquire requests / acquisition (INFO commandstats) | Redis commands / acquisition (all, in scripts too) | Redis CPU µs / 1,000 acquisitions | fewest acquisitions by one contender | most by one contender | every contender served | exact counter (GET+SET under the lock) |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |");
    for (c, o) in CONTENDERS.iter().zip(outcomes) {
        if let Some(why) = &o.skipped {
            println!("| {} | skipped: {why} | | | | | | | | |", c.label);
            continue;
        }
        let ok: Vec<&Round> = o.rounds.iter().filter_map(|r| r.as_ref().ok()).collect();
        let failed: Vec<&String> = o.rounds.iter().filter_map(|r| r.as_ref().err()).collect();
        let rate = |f: &dyn Fn(&Round) -> f64| -> Vec<f64> { ok.iter().map(|r| f(r)).collect() };
        let acq = rate(&|r| r.acquisitions() as f64 / r.window.as_secs_f64());
        let hand = rate(&|r| r.handoffs as f64 / r.window.as_secs_f64());
        let per: Vec<f64> = ok
            .iter()
            .filter_map(|r| r.attempts.map(|a| a as f64 / r.total.max(1) as f64))
            .collect();
        let inconsistent = ok.iter().filter(|r| r.attempts.is_none()).count();
        let acquisitions = |r: &Round| r.total.max(1) as f64;
        let commands = rate(&|r| r.work.commands() as f64 / acquisitions(r));
        let cpu = rate(&|r| r.work.cpu_us as f64 / acquisitions(r) * 1e3);
        let fewest = rate(&|r| r.per_contender.iter().copied().min().unwrap_or(0) as f64);
        let most = rate(&|r| r.per_contender.iter().copied().max().unwrap_or(0) as f64);
        let served = ok
            .iter()
            .filter(|r| r.per_contender.iter().all(|&n| n > 0))
            .count();
        let least_served = ok
            .iter()
            .map(|r| r.per_contender.iter().filter(|&&n| n > 0).count())
            .min()
            .unwrap_or(0);
        let exact = ok.iter().filter(|r| r.counter == r.total as i64).count();
        let increments: u64 = ok.iter().map(|r| r.total).sum();
        let mut served_text = format!("all {CLIENTS} in {served}/{} rounds", ok.len());
        if served < ok.len() {
            served_text += &format!(" (worst round: {least_served}/{CLIENTS} served)");
        }
        let mut exact_text = if exact == ok.len() {
            format!(
                "exact in {exact}/{} rounds ({increments} increments)",
                ok.len()
            )
        } else {
            let wrong: Vec<String> = ok
                .iter()
                .filter(|r| r.counter != r.total as i64)
                .map(|r| format!("{}/{}", r.counter, r.total))
                .collect();
            format!("**WRONG** in {} rounds ({})", wrong.len(), wrong.join(", "))
        };
        if !failed.is_empty() {
            exact_text += &format!("; {} rounds failed: {}", failed.len(), failed[0]);
        }
        let mut per_text = spread(&per, 2);
        if inconsistent > 0 {
            per_text += &format!(" ({inconsistent} rounds: count inconsistent)");
        }
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            c.label,
            spread(&acq, 0),
            spread(&hand, 0),
            per_text,
            spread(&commands, 1),
            spread(&cpu, 0),
            spread(&fewest, 0),
            spread(&most, 0),
            served_text,
            exact_text
        );
    }
}

/// Watchdog renewal script calls sent so far for `handles`: leasehold
/// clients built without a watchdog of their own share the process-wide
/// one, so it is counted once.
fn renewal_calls(handles: &[Handle]) -> u64 {
    if handles.iter().any(Handle::is_leasehold) {
        leasehold::Watchdog::global().renewal_calls()
    } else {
        0
    }
}

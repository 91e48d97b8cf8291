//! Redis's work per uncontended operation of every leasehold primitive
//! (`LEASEHOLD_COMPARE_ONLY=primitives`): the commands the server runs
//! (scripts' inner commands included) and its CPU time, per operation pair.
//!
//! One pair is what a caller does to use the primitive once: lock +
//! unlock of `Lock`, `FairLock`, `FencedLock`, `ReadLock`, `WriteLock`, a
//! `MultiLock` of two locks and a `RedLock` of three servers; acquire +
//! release of one of a `Semaphore`'s permits (one permit, set before);
//! `try_set_count(1)` + `count_down()` of a `CountDownLatch` (the count
//! set, then counted down to zero, which deletes the latch and wakes its
//! waiters: there are none).
//!
//! Each measurement: a new client (three for the RedLock, one per server)
//! and a new name; 100 pairs of warm-up; [`SETTLE`]; a reading of the
//! server (`server_work.rs`); `pairs` pairs from one task; [`SETTLE`]
//! again, so that the request records leasehold deletes in background
//! batches every 100 ms are counted (their commands are in the total;
//! `leasehold::__bench::forgotten` says how many); a second reading; the
//! client shut down. The readings span only that client's work, its
//! background included (the client record's `PEXPIRE` every 10 s, the
//! batches), and the server's own idle work for the window (printed beside
//! the table: `serverCron`). Rounds are interleaved, the order of the
//! primitives rotating every round.

use std::time::Duration;

use leasehold::Client;
use leasehold_testkit::server::RedisServer;
use tokio::time::Instant;

use crate::server_work::{self, Delta, Work};
use crate::{spread, Stats};

/// Wait after the warm-up and after the measured pairs: three of
/// leasehold's 100 ms record batches.
const SETTLE: Duration = Duration::from_millis(300);
/// Pairs before the first reading (scripts loaded, records parked).
const WARM_UP: usize = 100;

/// Every primitive, in the table's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Primitive {
    Lock,
    Fair,
    Fenced,
    Read,
    Write,
    Semaphore,
    Latch,
    Multi,
    RedLock,
}

/// A primitive's handle, on its client(s).
enum Target {
    Lock(leasehold::Lock),
    Fair(leasehold::FairLock),
    Fenced(leasehold::FencedLock),
    Read(leasehold::ReadLock),
    Write(leasehold::WriteLock),
    Semaphore(leasehold::Semaphore),
    Latch(leasehold::CountDownLatch),
    Multi(leasehold::MultiLock),
    RedLock(leasehold::RedLock),
}

/// One measurement of one primitive.
struct Measured {
    /// Per server, summed over the RedLock's three.
    work: Delta,
    pairs: u64,
    took: Duration,
    /// `forgotten` over the measurement, summed over clients: (record
    /// batches, records read, records deleted).
    forgotten: (u64, u64, u64),
}

const ALL: [Primitive; 9] = [
    Primitive::Lock,
    Primitive::Fair,
    Primitive::Fenced,
    Primitive::Read,
    Primitive::Write,
    Primitive::Semaphore,
    Primitive::Latch,
    Primitive::Multi,
    Primitive::RedLock,
];

/// Runs `rounds` interleaved rounds of `pairs` pairs per primitive and
/// prints the table. The RedLock runs on three servers started here.
pub async fn run(server: &RedisServer, rounds: usize, pairs: usize) {
    let red: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let idle = server_work::idle_cpu_per_s(server, Duration::from_secs(2)).await;
    eprintln!("[primitives] idle redis-server: {idle:.0} µs CPU per second");
    let mut results: Vec<Vec<Measured>> = ALL.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for j in 0..ALL.len() {
            let i = (j + round) % ALL.len();
            let p = ALL[i];
            let servers: Vec<&RedisServer> = if p == Primitive::RedLock {
                red.iter().collect()
            } else {
                vec![server]
            };
            let m = measure(p, &servers, round, pairs).await;
            eprintln!(
                "[primitives] round {} {}: {:.2} commands and {:.0} µs Redis CPU ({:.0} % sys) per pair ({}); {:.1} µs per pair; record batches {:?}",
                round + 1,
                p.label(),
                m.work.commands() as f64 / m.pairs as f64,
                m.work.cpu_us as f64 / m.pairs as f64,
                m.work.sys_percent(),
                m.work.per_op(m.pairs),
                m.took.as_secs_f64() * 1e6 / m.pairs as f64,
                m.forgotten
            );
            results[i].push(m);
        }
    }
    report(&results, rounds, pairs, idle);
}

async fn measure(p: Primitive, servers: &[&RedisServer], round: usize, pairs: usize) -> Measured {
    let mut clients = Vec::with_capacity(servers.len());
    for s in servers {
        clients.push(Client::connect(&s.url()).await.expect("leasehold connect"));
    }
    let name = format!("prim:{}:{round}", p.short());
    let target = p.target(&clients, &name).await;
    for _ in 0..WARM_UP {
        target.pair().await;
    }
    tokio::time::sleep(SETTLE).await;
    let forgotten = |clients: &[Client]| {
        clients
            .iter()
            .map(leasehold::__bench::forgotten)
            .fold((0, 0, 0), |a, f| (a.0 + f.0, a.1 + f.1, a.2 + f.2))
    };
    let forgot_before = forgotten(&clients);
    let before: Vec<Work> = servers.iter().map(|s| Work::read(s)).collect();
    let start = Instant::now();
    for _ in 0..pairs {
        target.pair().await;
    }
    let took = start.elapsed();
    tokio::time::sleep(SETTLE).await;
    let mut work = Delta::default();
    for (s, b) in servers.iter().zip(&before) {
        work.add(&Work::read(s).since(b));
    }
    let forgot_after = forgotten(&clients);
    for c in &clients {
        let _ = c.shutdown().await;
    }
    Measured {
        work,
        pairs: pairs as u64,
        took,
        forgotten: (
            forgot_after.0 - forgot_before.0,
            forgot_after.1 - forgot_before.1,
            forgot_after.2 - forgot_before.2,
        ),
    }
}

fn report(results: &[Vec<Measured>], rounds: usize, pairs: usize, idle: f64) {
    println!(
        "\n## Redis work per uncontended operation, every primitive (one task, {pairs} pairs after {WARM_UP} of warm-up, {rounds} interleaved rounds: median (min–max))\n"
    );
    println!(
        "Idle redis-server (no client): {idle:.0} µs CPU per second, in each row's CPU for its window (the pairs plus {} ms of settling). The RedLock's columns are summed over its 3 servers.\n",
        SETTLE.as_millis()
    );
    println!("| primitive | one pair | Redis commands / pair (INFO commandstats, in scripts too) | by command, per pair (first round) | of which request-record batches: EVAL / GET / DEL per pair | Redis CPU µs / 1,000 pairs | of which in the kernel (sys) | µs per pair, one task (wall) |");
    println!("| --- | --- | ---: | --- | --- | ---: | ---: | ---: |");
    for (p, ms) in ALL.iter().zip(results) {
        let Some(first) = ms.first() else { continue };
        let commands: Vec<f64> = ms
            .iter()
            .map(|m| m.work.commands() as f64 / m.pairs as f64)
            .collect();
        let cpu: Vec<f64> = ms
            .iter()
            .map(|m| m.work.cpu_us as f64 / m.pairs as f64 * 1e3)
            .collect();
        let sys: Vec<f64> = ms.iter().map(|m| m.work.sys_percent()).collect();
        let wall: Vec<f64> = ms
            .iter()
            .map(|m| m.took.as_secs_f64() * 1e6 / m.pairs as f64)
            .collect();
        let n: u64 = ms.iter().map(|m| m.pairs).sum();
        let batches = ms.iter().fold((0, 0, 0), |a, m| {
            (
                a.0 + m.forgotten.0,
                a.1 + m.forgotten.1,
                a.2 + m.forgotten.2,
            )
        });
        println!(
            "| {} | {} | {} | {} | {:.3} / {:.3} / {:.3} | {} | {:.0} % | {} |",
            p.label(),
            p.what(),
            spread(&commands, 2),
            first.work.per_op(first.pairs),
            batches.0 as f64 / n as f64,
            batches.1 as f64 / n as f64,
            batches.2 as f64 / n as f64,
            spread(&cpu, 0),
            Stats::of(&sys).p50,
            spread(&wall, 1)
        );
    }
}

// === impl Primitive ===

impl Primitive {
    fn label(self) -> &'static str {
        match self {
            Primitive::Lock => "Lock",
            Primitive::Fair => "FairLock",
            Primitive::Fenced => "FencedLock",
            Primitive::Read => "ReadLock",
            Primitive::Write => "WriteLock",
            Primitive::Semaphore => "Semaphore",
            Primitive::Latch => "CountDownLatch",
            Primitive::Multi => "MultiLock of 2 locks",
            Primitive::RedLock => "RedLock, 3 servers",
        }
    }

    fn short(self) -> &'static str {
        match self {
            Primitive::Lock => "lock",
            Primitive::Fair => "fair",
            Primitive::Fenced => "fenced",
            Primitive::Read => "read",
            Primitive::Write => "write",
            Primitive::Semaphore => "semaphore",
            Primitive::Latch => "latch",
            Primitive::Multi => "multi",
            Primitive::RedLock => "redlock",
        }
    }

    /// What one pair is.
    fn what(self) -> &'static str {
        match self {
            Primitive::Semaphore => "`acquire()` + `release()` of 1 permit (of 1)",
            Primitive::Latch => "`try_set_count(1)` + `count_down()`",
            _ => "`lock()` + `unlock()`",
        }
    }

    /// The handle on `clients` (one, or the RedLock's three); sets up what
    /// a pair needs (the semaphore's permit).
    async fn target(self, clients: &[Client], name: &str) -> Target {
        let c = &clients[0];
        match self {
            Primitive::Lock => Target::Lock(c.lock(name)),
            Primitive::Fair => Target::Fair(c.fair_lock(name)),
            Primitive::Fenced => Target::Fenced(c.fenced_lock(name)),
            Primitive::Read => Target::Read(c.read_write_lock(name).read()),
            Primitive::Write => Target::Write(c.read_write_lock(name).write()),
            Primitive::Semaphore => {
                let sem = c.semaphore(name);
                assert!(
                    sem.try_set_permits(1).await.expect("try_set_permits"),
                    "semaphore {name} already set"
                );
                Target::Semaphore(sem)
            }
            Primitive::Latch => Target::Latch(c.count_down_latch(name)),
            Primitive::Multi => Target::Multi(leasehold::MultiLock::new(vec![
                c.lock(&format!("{name}:a")),
                c.lock(&format!("{name}:b")),
            ])),
            Primitive::RedLock => Target::RedLock(leasehold::RedLock::new(clients.to_vec(), name)),
        }
    }
}

// === impl Target ===

impl Target {
    /// One use of the primitive; panics on an error (nothing else uses
    /// these names).
    async fn pair(&self) {
        let r = match self {
            Target::Lock(l) => l.lock().await.expect("lock").unlock().await,
            Target::Fair(l) => l.lock().await.expect("lock").unlock().await,
            Target::Fenced(l) => l.lock().await.expect("lock").unlock().await,
            Target::Read(l) => l.lock().await.expect("lock").unlock().await,
            Target::Write(l) => l.lock().await.expect("lock").unlock().await,
            Target::Multi(l) => l.lock().await.expect("lock").unlock().await,
            Target::RedLock(l) => l.lock().await.expect("lock").unlock().await,
            Target::Semaphore(s) => s.acquire().await.expect("acquire").release().await,
            Target::Latch(l) => {
                assert!(
                    l.try_set_count(1).await.expect("try_set_count"),
                    "latch already set"
                );
                l.count_down().await
            }
        };
        r.expect("unlock / release / count_down");
    }
}

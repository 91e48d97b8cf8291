//! What one operation makes Redis do: commands per uncontended lock +
//! unlock (INFO commandstats, the commands scripts run included), counted
//! exactly — a count, not a timing. BENCHMARKS.md has the same figures
//! beside the peers'.

use leasehold_testkit as support;

use std::time::Duration;

use leasehold::__bench::forgotten;
use support::fixture::{client, lock_keys};
use support::RedisServer;

/// Every command the server has run, scripts' inner commands included,
/// but the `INFO` calls that read the count.
fn commands(server: &RedisServer) -> u64 {
    let info = server.cmd(&["INFO", "commandstats"]);
    info.lines()
        .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info:"))
        .filter_map(|l| l.split("calls=").nth(1))
        .filter_map(|rest| rest.split(',').next())
        .map(|n| n.parse::<u64>().expect("calls is a number"))
        .sum()
}

/// Uncontended pairs each count runs.
const PAIRS: u64 = 100;

/// Longer than the request records' deletion takes (`core/forget.rs`:
/// batches 100 ms apart).
const SETTLE: Duration = Duration::from_millis(400);

/// The request records (`leasehold_latch:…`) on the server.
fn request_records(server: &RedisServer) -> Vec<String> {
    server
        .cmd(&["KEYS", "leasehold_latch:*"])
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Commands the server runs for [`PAIRS`] uncontended lock + unlock pairs
/// of one lock (`fair`: a fair lock), after a warm-up pair (scripts
/// loaded, connections up); checks no lock key is left after the last
/// release.
async fn uncontended(fair: bool) -> u64 {
    let server = RedisServer::start();
    let c = client(&server).await;
    let (fair_lock, lock) = (c.fair_lock("work"), c.lock("work"));
    let pair = || async {
        let guard = if fair {
            fair_lock.lock().await.unwrap()
        } else {
            lock.lock().await.unwrap()
        };
        guard.unlock().await.unwrap();
    };
    pair().await;
    // The warm-up's request records are deleted before counting starts
    // (`core/forget.rs` deletes them in batches, 100 ms apart).
    tokio::time::sleep(SETTLE).await;
    let before = (commands(&server), forgotten(&c));
    for _ in 0..PAIRS {
        pair().await;
    }
    tokio::time::sleep(SETTLE).await;
    let after = (commands(&server), forgotten(&c));
    // The batches that deleted the records: one EVALSHA each, a GET per
    // record read, a DEL per record deleted.
    let forgetting =
        (after.1 .0 - before.1 .0) + (after.1 .1 - before.1 .1) + (after.1 .2 - before.1 .2);
    let spent = after.0 - before.0 - forgetting;
    println!(
        "{PAIRS} uncontended {}lock + unlock pairs: {spent} Redis commands ({:.2} per pair), \
         and {forgetting} more deleting request records ({:.2} per pair)",
        if fair { "fair " } else { "" },
        spent as f64 / PAIRS as f64,
        forgetting as f64 / PAIRS as f64,
    );
    assert!(
        forgetting <= 3 * (after.1 .0 - before.1 .0),
        "at most one record per batch in a loop over one lock"
    );
    assert!(
        request_records(&server).is_empty(),
        "request records left: {:?}",
        request_records(&server)
    );
    assert!(
        lock_keys(&server).is_empty(),
        "keys left: {:?}",
        lock_keys(&server)
    );
    c.shutdown().await.unwrap();
    spent
}

/// An uncontended `lock()` + `unlock()` of the plain lock: 2 scripts (one
/// round trip each), and inside them PTTL, HINCRBY, PEXPIRE to take a new
/// key, HGET, DEL, PUBLISH to free it, and the request record's GET and
/// SET on each side: 12 commands (14 before the scripts read the key's
/// state with one command each).
#[tokio::test]
async fn an_uncontended_lock_and_unlock_costs_twelve_commands() {
    assert_eq!(
        uncontended(false).await,
        12 * PAIRS,
        "Redis commands per pair changed"
    );
}

/// The same count for the fair lock: 2 scripts, and inside them EXISTS
/// (queue, grants), PTTL, HSET, PEXPIRE to take a free lock nobody waits
/// for, HGET, EXISTS, DEL to free it, and the request record's GET and SET
/// on each side: 13 commands (34 before the scripts took the uncontended
/// case first; issue 31's bound is 14).
#[tokio::test]
async fn an_uncontended_fair_lock_and_unlock_costs_thirteen_commands() {
    assert_eq!(
        uncontended(true).await,
        13 * PAIRS,
        "Redis commands per pair changed"
    );
}

/// `CLIENTS` tasks, each on its own client, take and give back one lock
/// (`fair`: a fair lock) for 2 s; prints the commands the server ran, per
/// command; returns (acquisitions, commands).
async fn hot(fair: bool) -> (u64, u64) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    const CLIENTS: usize = 32;
    let server = RedisServer::start();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(client(&server).await);
    }
    for c in &clients {
        if fair {
            c.fair_lock("hot")
                .lock()
                .await
                .unwrap()
                .unlock()
                .await
                .unwrap();
        } else {
            c.lock("hot").lock().await.unwrap().unlock().await.unwrap();
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let taken = Arc::new(AtomicU64::new(0));
    server.cmd(&["CONFIG", "RESETSTAT"]);
    let mut tasks = tokio::task::JoinSet::new();
    for c in &clients {
        let (fair_lock, lock) = (c.fair_lock("hot"), c.lock("hot"));
        let (stop, taken) = (stop.clone(), taken.clone());
        tasks.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let guard = if fair {
                    fair_lock.lock().await.unwrap()
                } else {
                    lock.lock().await.unwrap()
                };
                taken.fetch_add(1, Ordering::Relaxed);
                guard.unlock().await.unwrap();
            }
        });
    }
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let spent = commands(&server);
    let taken = taken.load(Ordering::Relaxed);
    let info = server.cmd(&["INFO", "commandstats"]);
    for line in info.lines().filter(|l| l.starts_with("cmdstat_")) {
        println!("{}", line.split(",usec").next().unwrap_or(line));
    }
    let per = spent as f64 / taken as f64;
    println!("{CLIENTS} contenders, {taken} acquisitions: {spent} Redis commands ({per:.1} per acquisition)");
    for c in clients {
        c.shutdown().await.unwrap();
    }
    (taken, spent)
}

/// The fair lock under contention: 32 tasks, each on its own client, take
/// and give back one lock for 2 s. Every acquisition is a handoff through
/// the queue (a grant in the release); printed per command, with a loose
/// bound that catches per-waiter work in the handoff (one command per
/// queued waiter would add 31). Issue 31 measured 49 per acquisition;
/// 51.3 here before the handoff's timeout shift became one ZADD, the
/// grant's TTL raise was deferred past short holds and the release read
/// the count once and the scripts stopped reading the head, the grant
/// marker and the lock's existence twice: 39.3. (Its target, 12, is not met yet.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_fair_lock_costs_a_bounded_number_of_commands_per_acquisition() {
    let (taken, spent) = hot(true).await;
    assert!(taken > 0);
    let per = spent as f64 / taken as f64;
    assert!(per < 64.0, "{per:.1} commands per acquisition");
}

/// The plain lock under the same contention: every unlock wakes a waiter
/// of each client (as Redisson's does), and each woken try that loses the
/// race costs the latch's GET and SET, PTTL and HEXISTS: 122.7 commands
/// per acquisition measured (issue 31 measured 202 and wants at most 40;
/// not met). The bound only catches a herd that grows further.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_plain_lock_costs_a_bounded_number_of_commands_per_acquisition() {
    let (taken, spent) = hot(false).await;
    assert!(taken > 0);
    let per = spent as f64 / taken as f64;
    assert!(per < 250.0, "{per:.1} commands per acquisition");
}

/// Issue 29, item 5: Redis is left as it was found. 3,000 lock + unlock
/// pairs on distinct names (a lock per order id) left 3,000 request
/// records for their TTL (60 s; about 310 B of Redis memory each); now a
/// record goes once its call has ended, and 5 s after the last release at
/// most 1 % of them may be left (none is expected). Prints the memory
/// Redis holds per pair before and after.
#[tokio::test]
async fn distinct_locks_leave_no_request_records_behind() {
    const NAMES: usize = 3_000;
    let server = RedisServer::start();
    let c = client(&server).await;
    let memory = || -> i64 {
        server
            .cmd(&["INFO", "memory"])
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("used_memory")
    };
    let before = memory();
    for order in 0..NAMES {
        let guard = c.lock(&format!("order:{order}")).lock().await.unwrap();
        guard.unlock().await.unwrap();
    }
    let right_after = memory();
    let left_right_after = request_records(&server).len();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let left = request_records(&server).len();
    println!(
        "{NAMES} pairs on distinct names: {left_right_after} request records right after the \
         last release ({:.0} B of Redis memory per pair), {left} after 5 s ({:.0} B per pair)",
        (right_after - before) as f64 / NAMES as f64,
        (memory() - before) as f64 / NAMES as f64,
    );
    assert!(
        left <= NAMES / 100,
        "{left} request records left 5 s after the last release"
    );
    assert!(lock_keys(&server).is_empty());
    c.shutdown().await.unwrap();
}

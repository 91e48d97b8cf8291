//! What one operation makes Redis do: commands per uncontended lock +
//! unlock (INFO commandstats, the commands scripts run included), counted
//! exactly — a count, not a timing. BENCHMARKS.md has the same figures
//! beside the peers'.

use leasehold_testkit as support;

use support::fixture::client;
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

/// An uncontended `lock()` + `unlock()` of the plain lock: 2 scripts (one
/// round trip each), and inside them PTTL, HINCRBY, PEXPIRE to take a new
/// key, HGET, DEL, PUBLISH to free it, and the request record's GET and
/// SET on each side: 12 commands (14 before the scripts read the key's
/// state with one command each).
#[tokio::test]
async fn an_uncontended_lock_and_unlock_costs_twelve_commands() {
    let server = RedisServer::start();
    let c = client(&server).await;
    // Warm: scripts loaded, connections up.
    let lock = c.lock("work");
    lock.lock().await.unwrap().unlock().await.unwrap();
    const PAIRS: u64 = 100;
    let before = commands(&server);
    for _ in 0..PAIRS {
        lock.lock().await.unwrap().unlock().await.unwrap();
    }
    let spent = commands(&server) - before;
    println!(
        "{PAIRS} uncontended lock + unlock pairs: {spent} Redis commands ({:.2} per pair)",
        spent as f64 / PAIRS as f64
    );
    assert_eq!(spent, 12 * PAIRS, "Redis commands per pair changed");
    c.shutdown().await.unwrap();
}

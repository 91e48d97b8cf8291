//! No lease record is left behind: whatever path a hold or a try takes
//! (unlocked, dropped, an acquire cancelled at any point, a waiter
//! cancelled, a release settled in the background), the client's table of
//! lease records is empty once nothing is held or under way.
//!
//! A record that outlives its last user is memory that never comes back
//! (one per lock name and task), so the cases run many rounds with random
//! cancellation points.

use leasehold_testkit as support;

use std::time::Duration;

use leasehold::Client;
use support::fixture::{client, client_with, within};
use support::RedisServer;
use tokio::task::JoinSet;

const ROUNDS: u64 = 300;

/// A small deterministic generator (xorshift): the cancellation points.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Waits until `client` keeps no lease record (background settles may
/// still be finishing), then checks it.
async fn assert_no_records(client: &Client, what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let left = leasehold::__bench::lease_records(client);
        if left == 0 {
            // Idle records kept for their next acquire are bounded.
            let parked = leasehold::__bench::parked_records(client);
            assert!(
                parked <= leasehold::__bench::IDLE_RECORDS,
                "{what}: {parked} idle records parked"
            );
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: {left} lease records left after 30 s with nothing held"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_record_is_left_behind_on_any_path() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut tasks = JoinSet::new();
    for round in 0..ROUNDS {
        let name = format!("records:{}", round % 8);
        // Mostly under a loopback round trip and a script: cancelled
        // before, while and just after the call is under way.
        let cancel_after = Duration::from_micros(next(&mut seed) % 800);
        let path = next(&mut seed) % 4;
        let (a, b) = (a.clone(), b.clone());
        tasks.spawn(async move {
            match path {
                // Acquire cancelled at a random point (before, during or
                // after its script), on a lock the other client may hold.
                0 => {
                    let _ = tokio::time::timeout(cancel_after, a.lock(&name).lock()).await;
                }
                // Held, then dropped without unlock: released in the
                // background.
                1 => {
                    if let Ok(Ok(g)) =
                        tokio::time::timeout(Duration::from_secs(20), a.lock(&name).lock()).await
                    {
                        drop(g);
                    }
                }
                // Held, then an unlock cancelled at a random point.
                2 => {
                    if let Ok(Ok(g)) =
                        tokio::time::timeout(Duration::from_secs(20), a.lock(&name).lock()).await
                    {
                        let _ = tokio::time::timeout(cancel_after, g.unlock()).await;
                    }
                }
                // The other client holds it briefly; this one waits and
                // unlocks, or gives up.
                _ => {
                    let held = b.lock(&name).try_lock().await.ok().flatten();
                    let lock = a.lock(&name);
                    if let Ok(Some(g)) = lock.try_lock_for(cancel_after * 4).await {
                        g.unlock().await.ok();
                    }
                    drop(held);
                }
            }
        });
    }
    within(Duration::from_secs(120), "all rounds", async {
        while let Some(r) = tasks.join_next().await {
            r.expect("round task");
        }
    })
    .await;
    assert_no_records(&a, "client a").await;
    assert_no_records(&b, "client b").await;
    // And the locks are all free: nothing was left held either.
    for i in 0..8 {
        let name = format!("records:{i}");
        let g = within(
            Duration::from_secs(30),
            "a final lock",
            a.lock(&name).lock(),
        )
        .await
        .expect("lock");
        g.unlock().await.expect("unlock");
    }
    assert_no_records(&a, "client a, after the final locks").await;
}

/// A record whose last user goes while a renewal cycle that carries its
/// lease is under way is still removed: the watchdog's own references to
/// a lease (its registry, the batch in flight) do not keep the record in
/// the table after the cycle.
///
/// Thousands of held leases make each cycle (snapshot, call, verdicts)
/// last long enough that short-lived locks, taken before a cycle's
/// snapshot and released before its verdicts are applied, fall inside it
/// many times over the rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_in_flight_does_not_keep_a_record() {
    const HELD: usize = 3_000;
    const CHURNERS: u64 = 16;
    let server = RedisServer::start();
    // A cycle every 100 ms.
    let c = client_with(&server, |b| b.watchdog_timeout(Duration::from_millis(300))).await;
    let mut held = Vec::with_capacity(HELD);
    for i in 0..HELD {
        held.push(
            c.lock(&format!("records:held:{i}"))
                .lock()
                .await
                .expect("lock"),
        );
    }
    let mut tasks = JoinSet::new();
    for t in 0..CHURNERS {
        let c = c.clone();
        tasks.spawn(async move {
            let mut seed = 0x2545_f491_4f6c_dd1d_u64 ^ (t + 1);
            for round in 0..40u64 {
                // Unique names: a leaked record is never reused.
                let name = format!("records:churn:{t}:{round}");
                let g = c.lock(&name).lock().await.expect("lock");
                // Held across 0 to 3 cycle starts.
                tokio::time::sleep(Duration::from_millis(next(&mut seed) % 300)).await;
                g.unlock().await.expect("unlock");
            }
        });
    }
    within(Duration::from_secs(120), "the churning tasks", async {
        while let Some(r) = tasks.join_next().await {
            r.expect("churning task");
        }
    })
    .await;
    for g in held {
        g.unlock().await.expect("unlock");
    }
    assert_no_records(&c, "after short holds beside renewal cycles").await;
}

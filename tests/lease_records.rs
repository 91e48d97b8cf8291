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
use support::fixture::{client, within};
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

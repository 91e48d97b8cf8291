//! A guard that is not lost holds its lock in Redis: stale releases never
//! free a newer hold, and mixed leases never let the key expire before the
//! longest live hold (issue 9, holes 1–3, and a renewal racing a
//! re-acquire).
//!
//! Each case runs 20 rounds at once, one task (one owner) and one lock name
//! per round, because the holes are races.

use leasehold_testkit as support;

use std::time::Duration;

use leasehold::{Client, LockGuard, Owner};
use support::fixture::{client, client_with, within};
use support::RedisServer;
use tokio::task::JoinSet;

const ROUNDS: usize = 20;
const HANG: Duration = Duration::from_secs(60);

/// The hold count of `owner` (a field of `client`) on `key`, read from the
/// server directly; 0 when the field is missing.
fn count(server: &RedisServer, key: &str, client: &Client, owner: Owner) -> u32 {
    let field = format!("{}:{}", client.id(), owner.id());
    let reply = server.cmd(&["HGET", key, &field]);
    reply.parse().unwrap_or(0)
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    server
        .cmd(&["PTTL", key])
        .parse()
        .expect("PTTL is an integer")
}

/// The promise, checked from outside: if another client can take the lock,
/// the guard must already say it is lost.
async fn assert_exclusive(other: &Client, key: &str, guard: &LockGuard, what: &str) {
    if let Some(g) = other.lock(key).try_lock().await.unwrap() {
        let lost = guard.is_lost();
        g.unlock().await.unwrap();
        assert!(
            lost,
            "{what}: another client took `{key}` while the guard is not lost"
        );
    }
}

/// Runs `round(i)` for every round at once, each in its own task (its own
/// owner), and fails with the first round's panic.
async fn rounds<F, Fut>(round: F)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut set = JoinSet::new();
    for i in 0..ROUNDS {
        set.spawn(round(i));
    }
    within(HANG, "all rounds", async {
        while let Some(done) = set.join_next().await {
            if let Err(e) = done {
                std::panic::resume_unwind(e.into_panic());
            }
        }
    })
    .await;
}

/// Hole 1: a fixed lease runs out in Redis, its guard is dropped, and the
/// same task locks again at once. The dropped guard's release must not
/// free the new hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_background_release_keeps_the_new_hold() {
    let server = std::sync::Arc::new(RedisServer::start());
    let a = client(&server).await;
    let b = client(&server).await;
    let (s, a2, b2) = (server.clone(), a.clone(), b.clone());
    rounds(move |i| {
        let (server, a, b) = (s.clone(), a2.clone(), b2.clone());
        async move {
            let key = format!("hole1:{i}");
            let lock = a.lock(&key);
            let old = lock
                .lock_with_lease(Duration::from_millis(100))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(250)).await; // ran out in Redis
            drop(old);
            let new = lock.lock_with_lease(Duration::from_secs(20)).await.unwrap();
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert_eq!(
                count(&server, &key, &a, Owner::current()),
                1,
                "round {i}: the new hold is gone from Redis"
            );
            assert!(!new.is_lost(), "round {i}: the new guard says lost");
            assert_exclusive(&b, &key, &new, "hole 1").await;
            new.unlock().await.unwrap();
        }
    })
    .await;
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// Hole 2: a watchdog guard is force-unlocked by another client, dropped,
/// and the same task locks again: the old release must not free the new
/// hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_after_force_unlock_keeps_the_new_hold() {
    let server = std::sync::Arc::new(RedisServer::start());
    let a = client(&server).await;
    let b = client(&server).await;
    let (s, a2, b2) = (server.clone(), a.clone(), b.clone());
    rounds(move |i| {
        let (server, a, b) = (s.clone(), a2.clone(), b2.clone());
        async move {
            let key = format!("hole2:{i}");
            let lock = a.lock(&key);
            let old = lock.lock().await.unwrap();
            assert!(b.lock(&key).force_unlock().await.unwrap());
            drop(old);
            let new = lock.lock().await.unwrap();
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert_eq!(
                count(&server, &key, &a, Owner::current()),
                1,
                "round {i}: the new hold is gone from Redis"
            );
            assert!(!new.is_lost(), "round {i}: the new guard says lost");
            assert_exclusive(&b, &key, &new, "hole 2").await;
            new.unlock().await.unwrap();
        }
    })
    .await;
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// Hole 3a: a 60 s fixed lease, then a re-entrant watchdog hold (1 s
/// timeout) given back after 500 ms. The key must keep the 60 s lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shorter_reentrant_hold_does_not_shorten_the_lease() {
    let server = std::sync::Arc::new(RedisServer::start());
    let a = client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(1))).await;
    let b = client(&server).await;
    let (s, a2, b2) = (server.clone(), a.clone(), b.clone());
    rounds(move |i| {
        let (server, a, b) = (s.clone(), a2.clone(), b2.clone());
        async move {
            let key = format!("hole3a:{i}");
            let lock = a.lock(&key);
            let long = lock.lock_with_lease(Duration::from_secs(60)).await.unwrap();
            let inner = lock.lock().await.unwrap();
            tokio::time::sleep(Duration::from_millis(500)).await;
            inner.unlock().await.unwrap();
            tokio::time::sleep(Duration::from_secs(3)).await;
            assert!(!long.is_lost(), "round {i}: the 60 s guard says lost");
            assert_exclusive(&b, &key, &long, "hole 3a").await;
            let left = pttl(&server, &key);
            assert!(
                left > 50_000,
                "round {i}: the key's TTL is {left} ms, under the 60 s hold's"
            );
            long.unlock().await.unwrap();
        }
    })
    .await;
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// Hole 3b: a watchdog hold, then a nested 300 ms fixed hold. The key must
/// not expire under the outer watchdog hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_short_lease_does_not_end_the_outer_hold() {
    let server = std::sync::Arc::new(RedisServer::start());
    let a = client(&server).await; // 30 s watchdog: renewals every 10 s
    let b = client(&server).await;
    let (a2, b2) = (a.clone(), b.clone());
    rounds(move |i| {
        let (a, b) = (a2.clone(), b2.clone());
        async move {
            let key = format!("hole3b:{i}");
            let lock = a.lock(&key);
            let outer = lock.lock().await.unwrap();
            let nested = lock
                .lock_with_lease(Duration::from_millis(300))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert_exclusive(&b, &key, &outer, "hole 3b (nested guard alive)").await;
            drop(nested);
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert_exclusive(&b, &key, &outer, "hole 3b (nested guard dropped)").await;
            assert!(
                !outer.is_lost(),
                "round {i}: the outer watchdog guard says lost"
            );
            outer.unlock().await.unwrap();
        }
    })
    .await;
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// Hole 3c: a watchdog hold dropped, then at once a 300 ms fixed hold. The
/// new guard's deadline is the key's: once it says lost the key is gone,
/// and until then nobody else holds the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_deadline_matches_the_key() {
    let server = std::sync::Arc::new(RedisServer::start());
    let a = client(&server).await;
    let b = client(&server).await;
    let (s, a2, b2) = (server.clone(), a.clone(), b.clone());
    rounds(move |i| {
        let (server, a, b) = (s.clone(), a2.clone(), b2.clone());
        async move {
            let key = format!("hole3c:{i}");
            let lock = a.lock(&key);
            drop(lock.lock().await.unwrap());
            let short = lock
                .lock_with_lease(Duration::from_millis(300))
                .await
                .unwrap();
            assert_exclusive(&b, &key, &short, "hole 3c").await;
            within(
                Duration::from_secs(10),
                "the 300 ms guard is lost",
                short.lost(),
            )
            .await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            let left = pttl(&server, &key);
            assert!(
                left < 0,
                "round {i}: the guard says lost but the key lives on ({left} ms)"
            );
            drop(short);
        }
    })
    .await;
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A renewal sent just before a re-acquire that reports the field gone
/// must not mark the new hold lost or stop its renewal. Holder through a
/// 50 ms delay (renewals take 100 ms there and back), 300 ms renewal
/// interval; the force-unlock and re-acquire land at random points of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_racing_a_reacquire_keeps_the_new_hold() {
    let server = std::sync::Arc::new(RedisServer::start());
    let proxy = support::Proxy::start(&server.addr()).await;
    let url = proxy.url();
    let a = client_with(&server, |b| {
        b.url(&url).watchdog_timeout(Duration::from_millis(900))
    })
    .await;
    let b = client(&server).await;
    proxy.delay(Duration::from_millis(50));
    let (s, a2, b2) = (server.clone(), a.clone(), b.clone());
    rounds(move |i| {
        let (server, a, b) = (s.clone(), a2.clone(), b2.clone());
        async move {
            let key = format!("renew-race:{i}");
            let lock = a.lock(&key);
            let old = lock.lock().await.unwrap();
            tokio::time::sleep(Duration::from_millis(17 * i as u64)).await;
            b.lock(&key).force_unlock().await.unwrap();
            drop(old);
            let new = lock.lock().await.unwrap();
            // Several renewal cycles.
            tokio::time::sleep(Duration::from_millis(2000)).await;
            assert!(!new.is_lost(), "round {i}: the new hold was declared lost");
            assert_eq!(
                count(&server, &key, &a, Owner::current()),
                1,
                "round {i}: the new hold is gone from Redis"
            );
            assert_exclusive(&b, &key, &new, "renewal race").await;
            new.unlock().await.unwrap();
        }
    })
    .await;
    proxy.pass();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// Issue 29, item 1: the key of a held lock is deleted (an operator's
/// `DEL`, an eviction) and another client takes the lock, while the
/// holder's own task keeps trying the same lock (a retry loop, a nested
/// `lock()`). Its own refused try proves its field is gone: the guard is
/// told at once, not when its 30 s lease would have run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owners_own_tries_do_not_hide_a_lost_lease() {
    let server = RedisServer::start();
    let a = client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(30))).await;
    let b = client(&server).await;
    for round in 0..5 {
        let name = format!("own-tries-{round}");
        let lock = a.lock(&name);
        let guard = lock.lock().await.unwrap();
        server.cmd(&["DEL", &name]);
        let theirs = b.lock(&name).try_lock().await.unwrap();
        let theirs = theirs.expect("the lock is free once its key is deleted");
        // Well under the 30 s lease and its 10 s renewal interval.
        within(
            Duration::from_secs(8),
            "the holder is told its lease is gone",
            async {
                while !guard.is_lost() {
                    assert!(lock.try_lock().await.unwrap().is_none());
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
        )
        .await;
        theirs.unlock().await.unwrap();
        drop(guard);
    }
}

/// Issue 29, item 4: short fixed re-entries in a loop under an outer
/// watchdog guard (each one an acquire and a release of the owner) must
/// not throw the watchdog's renewal verdicts away: Redis keeps renewing
/// the lock, so the outer guard must not read lost. The client goes
/// through a proxy that delays every chunk by 20 ms, so that a re-entry is
/// always under way while a renewal's reply travels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_fixed_re_entries_do_not_make_a_renewed_guard_read_lost() {
    let server = RedisServer::start();
    let proxy = support::Proxy::start(&server.addr()).await;
    proxy.delay(Duration::from_millis(20));
    let a = Client::builder()
        .url(&proxy.url())
        .watchdog_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let b = client(&server).await;
    let lock = a.lock("re-entries");
    let outer = lock.lock().await.unwrap();
    let end = tokio::time::Instant::now() + Duration::from_secs(6);
    within(HANG, "the re-entry loop", async {
        while tokio::time::Instant::now() < end {
            let inner = lock
                .lock_with_lease(Duration::from_millis(50))
                .await
                .unwrap();
            inner.unlock().await.unwrap();
            assert!(
                !outer.is_lost(),
                "the outer guard reads lost while the watchdog renews it (PTTL {})",
                pttl(&server, "re-entries")
            );
        }
    })
    .await;
    assert_exclusive(&b, "re-entries", &outer, "after the re-entries").await;
    assert!(!outer.is_lost());
    outer.unlock().await.unwrap();
}

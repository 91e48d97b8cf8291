//! Reentrancy: one owner, many holds; guards that move between tasks.

use leasehold_testkit as support;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use leasehold::{Lock, Owner};
use support::fixture::{client, exists, within};
use support::RedisServer;

/// Locking three times gives three holds (in Redis too); after two unlocks
/// another task still cannot take it; the third unlock frees it.
#[tokio::test]
async fn three_holds_need_three_unlocks() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.lock("re");
    let g1 = lock.lock().await.unwrap();
    let g2 = lock.lock().await.unwrap();
    let g3 = lock
        .try_lock()
        .await
        .unwrap()
        .expect("re-entry never waits");
    assert_eq!(lock.hold_count().await.unwrap(), 3);
    assert!(lock.is_held_by_current_task().await.unwrap());
    let field = format!("{}:{}", c.id(), Owner::current().id());
    assert_eq!(server.cmd(&["HGET", "re", &field]), "3");

    g3.unlock().await.unwrap();
    g2.unlock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    let other = lock.clone();
    let stolen = tokio::spawn(async move { other.try_lock().await.unwrap().is_some() })
        .await
        .unwrap();
    assert!(
        !stolen,
        "another task must not get a lock with one hold left"
    );
    assert!(
        !lock.is_held_by_current_task().await.unwrap() || lock.hold_count().await.unwrap() == 1
    );

    g1.unlock().await.unwrap();
    assert!(!exists(&server, "re"));
    assert_eq!(lock.hold_count().await.unwrap(), 0);
    c.shutdown().await.unwrap();
}

fn recurse(lock: Lock, depth: u32) -> Pin<Box<dyn Future<Output = u32> + Send>> {
    Box::pin(async move {
        let guard = lock.lock().await.unwrap();
        let holds = lock.hold_count().await.unwrap();
        let deepest = if depth > 1 {
            recurse(lock.clone(), depth - 1).await
        } else {
            holds
        };
        guard.unlock().await.unwrap();
        deepest
    })
}

/// A recursive async fn (depth 10) taking the same lock at every level.
#[tokio::test]
async fn recursive_async_fn_reenters() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.lock("recursive");
    let deepest = within(
        Duration::from_secs(30),
        "recursion",
        recurse(lock.clone(), 10),
    )
    .await;
    assert_eq!(deepest, 10, "ten nested holds at the bottom");
    assert!(!lock.is_locked().await.unwrap());
    c.shutdown().await.unwrap();
}

/// A guard moved into another task unlocks there; the lock is then free.
#[tokio::test]
async fn guard_moves_to_another_task() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.lock("moved");
    let guard = lock.lock().await.unwrap();
    let owner = guard.owner();
    let unlocked_elsewhere = tokio::spawn(async move {
        assert_ne!(Owner::current(), owner, "a different task");
        guard.unlock().await
    });
    unlocked_elsewhere.await.unwrap().unwrap();
    assert!(!lock.is_locked().await.unwrap());
    // And a guard dropped in another task is released too.
    let guard = lock.lock().await.unwrap();
    tokio::spawn(async move { drop(guard) }).await.unwrap();
    support::fixture::eventually(Duration::from_secs(10), "background release", || {
        !exists(&server, "moved")
    })
    .await;
    c.shutdown().await.unwrap();
}

/// `Owner::scope` lets a spawned task re-enter its parent's lock on purpose,
/// and gives joined futures separate owners.
#[tokio::test]
async fn owner_scope_reenters_and_separates() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.lock("scoped");
    let guard = lock.lock().await.unwrap();

    let me = Owner::current();
    let l = lock.clone();
    let reentered = tokio::spawn(me.scope(async move { l.try_lock().await.unwrap() }))
        .await
        .unwrap()
        .expect("same owner re-enters from another task");
    assert_eq!(lock.hold_count().await.unwrap(), 2);
    drop(reentered);

    // A fresh owner in the same task is excluded.
    let excluded = Owner::new().scope(lock.try_lock()).await.unwrap();
    assert!(excluded.is_none());
    guard.unlock().await.unwrap();
    support::fixture::eventually(Duration::from_secs(10), "all holds released", || {
        !exists(&server, "scoped")
    })
    .await;
    c.shutdown().await.unwrap();
}

/// A hold that expired while its guard lived, then the same task locks
/// again: the stale guard reports lost, and its unlock gives back nothing
/// (the new hold stays).
#[tokio::test]
async fn stale_guard_cannot_release_a_newer_hold() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.lock("epoch");
    let stale = lock.lock().await.unwrap();
    server.cmd(&["DEL", "epoch"]); // the lease ran out
    let fresh = lock.lock().await.unwrap();
    assert!(
        stale.is_lost(),
        "re-acquiring from zero marks older holds stale"
    );
    within(Duration::from_secs(5), "stale lost()", stale.lost()).await;
    assert!(!fresh.is_lost());
    assert!(matches!(
        stale.unlock().await,
        Err(leasehold::Error::NotHeld { .. })
    ));
    assert_eq!(
        lock.hold_count().await.unwrap(),
        1,
        "the new hold is intact"
    );
    // Dropping a stale guard gives back nothing either.
    let stale2 = lock.lock().await.unwrap(); // count 2, same epoch as `fresh`
    server.cmd(&["DEL", "epoch"]);
    let fresh2 = lock.lock().await.unwrap();
    drop(stale2);
    drop(fresh);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(lock.hold_count().await.unwrap(), 1, "only fresh2's hold");
    fresh2.unlock().await.unwrap();
    assert!(!exists(&server, "epoch"));
    c.shutdown().await.unwrap();
}

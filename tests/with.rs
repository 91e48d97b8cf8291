//! `Lock::with`: work run under a lock, cancelled when the lease is lost,
//! unlocked after.

use leasehold_testkit as support;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold::Error;
use support::fixture::{client, client_with, eventually, exists, within};
use support::RedisServer;

/// Sets its flag when dropped: tells that a future was cancelled.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Another client force-unlocks the lock while the work runs (watchdog
/// 1 s): the holder's watchdog finds the lease gone, the work is dropped
/// at its `.await`, `with` returns `Error::Lost`, and the new holder's lock
/// is left alone. 5 rounds.
#[tokio::test]
async fn with_cancels_the_work_on_force_unlock() {
    let server = RedisServer::start();
    let a = client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(1))).await;
    let b = client(&server).await;
    for round in 0..5 {
        let name = format!("with:{round}");
        let cancelled = Arc::new(AtomicBool::new(false));
        let finished = Arc::new(AtomicBool::new(false));
        let started = Arc::new(tokio::sync::Notify::new());
        let run = tokio::spawn({
            let lock = a.lock(&name);
            let (cancelled, finished, started) =
                (cancelled.clone(), finished.clone(), started.clone());
            async move {
                lock.with(|lease| async move {
                    let _cancel = SetOnDrop(cancelled);
                    assert!(!lease.is_lost());
                    started.notify_one();
                    // Longer than any bound below: only a cancel ends it.
                    tokio::time::sleep(Duration::from_secs(120)).await;
                    finished.store(true, Ordering::SeqCst);
                })
                .await
            }
        });
        within(
            Duration::from_secs(10),
            "the work starts",
            started.notified(),
        )
        .await;
        assert!(b.lock(&name).force_unlock().await.unwrap());
        let taker = b.lock(&name).try_lock().await.unwrap().expect("free");

        let outcome = within(Duration::from_secs(20), "with() after the loss", run)
            .await
            .unwrap();
        match outcome {
            Err(Error::Lost { name: lost }) => assert_eq!(lost, name),
            other => panic!("round {round}: expected Lost, got {other:?}"),
        }
        assert!(cancelled.load(Ordering::SeqCst), "the work was not dropped");
        assert!(!finished.load(Ordering::SeqCst), "the work ran to its end");
        assert!(!taker.is_lost(), "round {round}: the new holder lost it");
        assert!(b.lock(&name).is_locked().await.unwrap());
        assert_eq!(b.lock(&name).hold_count().await.unwrap(), 1);
        taker.unlock().await.unwrap();
    }
    assert_eq!(a.watchdog().lease_count(), 0);
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// The normal path: the work runs as the lock's owner (it re-enters), its
/// output is returned, and the lock is free once `with` returns — also
/// when the work's own result is an error.
#[tokio::test]
async fn with_returns_the_output_and_unlocks() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.lock("with-ok");
    let out = lock
        .with(|lease| {
            let lock = lock.clone();
            async move {
                assert!(!lease.is_lost());
                assert!(lease.lost_since().is_none());
                assert_eq!(lock.hold_count().await.unwrap(), 1);
                let inner = lock.lock().await.unwrap(); // same task: re-enters
                assert_eq!(lock.hold_count().await.unwrap(), 2);
                inner.unlock().await.unwrap();
                7
            }
        })
        .await
        .unwrap();
    assert_eq!(out, 7);
    assert!(!exists(&server, "with-ok"), "with() left the lock held");

    let failed: Result<u32, String> = lock
        .with(|_| async { Err("the work failed".to_owned()) })
        .await
        .unwrap();
    assert_eq!(failed, Err("the work failed".to_owned()));
    assert!(!exists(&server, "with-ok"));
    c.shutdown().await.unwrap();
}

/// A loss seen only by the unlock (another client force-unlocked the lock
/// just before the work returned, before the watchdog could notice) is
/// reported as `Lost`, not as the work's output.
#[tokio::test]
async fn a_loss_found_by_the_unlock_is_reported() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let other = b.lock("with-late");
    let outcome = a
        .lock("with-late")
        .with(|_| async move {
            other.force_unlock().await.unwrap();
            "done"
        })
        .await;
    assert!(
        matches!(outcome, Err(Error::Lost { .. })),
        "expected Lost, got {outcome:?}"
    );
    assert!(!exists(&server, "with-late"));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// `try_with_for` gives up after its wait without calling the work, and
/// runs it once the lock is free.
#[tokio::test]
async fn try_with_for_waits_a_bounded_time() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let held = b.lock("with-busy").lock().await.unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    let none = a
        .lock("with-busy")
        .try_with_for(Duration::from_millis(200), |_| async move {
            counted.fetch_add(1, Ordering::SeqCst);
        })
        .await
        .unwrap();
    assert!(none.is_none());
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "the work ran without the lock"
    );
    held.unlock().await.unwrap();
    let some = a
        .lock("with-busy")
        .try_with_for(Duration::from_secs(5), |_| async { "ran" })
        .await
        .unwrap();
    assert_eq!(some, Some("ran"));
    assert!(!exists(&server, "with-busy"));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A `with` future dropped while its work runs drops the work and gives
/// the hold back.
#[tokio::test]
async fn dropping_with_drops_the_work_and_releases() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let cancelled = Arc::new(AtomicBool::new(false));
    let started = Arc::new(tokio::sync::Notify::new());
    let run = tokio::spawn({
        let lock = c.lock("with-dropped");
        let (cancelled, started) = (cancelled.clone(), started.clone());
        async move {
            lock.with(|_| async move {
                let _cancel = SetOnDrop(cancelled);
                started.notify_one();
                std::future::pending::<()>().await
            })
            .await
        }
    });
    within(
        Duration::from_secs(10),
        "the work starts",
        started.notified(),
    )
    .await;
    assert!(exists(&server, "with-dropped"));
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled());
    assert!(cancelled.load(Ordering::SeqCst));
    eventually(Duration::from_secs(10), "the hold given back", || {
        !exists(&server, "with-dropped")
    })
    .await;
    c.shutdown().await.unwrap();
}

//! Waiting without polling: pub/sub wake-ups, bounded re-checks, deadlines
//! and cancellation.

use leasehold_testkit as support;

use std::time::Duration;

use support::fixture::{calls, client, client_with, eventually, exists, numsub, within};
use support::RedisServer;
use tokio::time::Instant;

const HANG: Duration = Duration::from_secs(60);

/// 50 tasks on 2 clients wait 2 s on a held lock: Redis sees a small,
/// fixed number of scripts per waiter (not one per poll), and one
/// subscription per client (not per task).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_costs_a_constant_per_waiter() {
    const WAITERS: usize = 50;
    let server = RedisServer::start();
    let holder = client(&server).await;
    let clients = [client(&server).await, client(&server).await];
    let guard = holder.lock("busy").lock().await.unwrap();

    let before = calls(&server, "evalsha");
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let lock = clients[i % 2].lock("busy");
        tasks.push(tokio::spawn(async move {
            let g = lock.lock().await.unwrap();
            g.unlock().await.unwrap();
        }));
    }
    eventually(Duration::from_secs(20), "both clients subscribed", || {
        numsub(&server, "redisson_lock__channel:{busy}") == 2
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let during = calls(&server, "evalsha") - before;
    // Each waiter: one acquire, one re-check after subscribing, and at most
    // one more for a shared wake-up permit.
    assert!(
        during <= 3 * WAITERS as u64,
        "{during} scripts for {WAITERS} waiters over 2 s: that is polling"
    );
    assert_eq!(
        numsub(&server, "redisson_lock__channel:{busy}"),
        2,
        "one SUBSCRIBE per client"
    );
    assert_eq!(clients[0].subscribed_channels(), 1);

    guard.unlock().await.unwrap();
    within(HANG, "every waiter gets the lock in turn", async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await;
    eventually(Duration::from_secs(10), "unsubscribed", || {
        numsub(&server, "redisson_lock__channel:{busy}") == 0
    })
    .await;
    assert_eq!(
        clients[0].subscribed_channels() + clients[1].subscribed_channels(),
        0
    );
    for c in clients.iter().chain([&holder]) {
        c.shutdown().await.unwrap();
    }
}

/// With a 30 s watchdog lease, a waiter on another client gets the lock
/// well under a second after the holder unlocks (a re-check would take
/// up to 30 s).
#[tokio::test]
async fn waiter_wakes_promptly_on_unlock() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let guard = a.lock("prompt").lock().await.unwrap();
    let lock_b = b.lock("prompt");
    let waiter = tokio::spawn(async move {
        let g = lock_b.lock().await.unwrap();
        (Instant::now(), g)
    });
    eventually(Duration::from_secs(10), "waiter subscribed", || {
        numsub(&server, "redisson_lock__channel:{prompt}") == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    guard.unlock().await.unwrap();
    let unlocked = Instant::now();
    let (acquired, g) = within(HANG, "waiter", waiter).await.unwrap();
    let handoff = acquired.duration_since(unlocked);
    assert!(handoff < Duration::from_secs(1), "handoff took {handoff:?}");
    g.unlock().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A holder with a 1 s lease that never unlocks, or a raw DEL with no
/// message: the waiter still gets the lock soon after the lease ends.
#[tokio::test]
async fn no_stranding_without_a_message() {
    let server = RedisServer::start();
    let waiter_client = client(&server).await;
    let lock = waiter_client.lock("stranded");

    // A holder that vanished: 1 s lease, never released, no message.
    server.cmd(&["HSET", "stranded", "gone:1", "1"]);
    server.cmd(&["PEXPIRE", "stranded", "1000"]);
    let g = within(
        Duration::from_secs(10),
        "lease expiry wakes the waiter",
        lock.lock(),
    )
    .await
    .unwrap();
    g.unlock().await.unwrap();

    // A raw DEL, no PUBLISH: found at the re-check bounded by the TTL.
    server.cmd(&["HSET", "stranded", "gone:2", "1"]);
    server.cmd(&["PEXPIRE", "stranded", "1500"]);
    let l = lock.clone();
    let waiter = tokio::spawn(async move { l.lock().await.unwrap() });
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.cmd(&["DEL", "stranded"]);
    let g = within(Duration::from_secs(10), "silent delete", waiter)
        .await
        .unwrap();
    g.unlock().await.unwrap();

    // No expiry at all: the recheck interval bounds the wait.
    let quick = client_with(&server, |b| b.recheck_interval(Duration::from_millis(300))).await;
    server.cmd(&["HSET", "stranded", "gone:3", "1"]);
    let l = quick.lock("stranded");
    let waiter = tokio::spawn(async move { l.lock().await.unwrap() });
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.cmd(&["DEL", "stranded"]);
    let g = within(
        Duration::from_secs(10),
        "persistent key deleted silently",
        waiter,
    )
    .await
    .unwrap();
    g.unlock().await.unwrap();
    waiter_client.shutdown().await.unwrap();
    quick.shutdown().await.unwrap();
}

/// The waiters of one channel share its re-check clock: a waiter parked
/// with the long default bound (a key with no TTL) is re-checked as soon
/// as a later waiter asks for an earlier one (the key now expires soon).
/// Whichever of the two takes the lock after the silent expiry, it takes it
/// long before the 30 s recheck interval.
#[tokio::test]
async fn an_earlier_recheck_moves_the_channel_clock_for_every_waiter() {
    let server = RedisServer::start();
    let c = client(&server).await;
    server.cmd(&["HSET", "shared-clock", "gone:1", "1"]);
    let mut first = {
        let l = c.lock("shared-clock");
        tokio::spawn(async move { l.lock().await })
    };
    // The first waiter parks with the 30 s recheck interval.
    eventually(Duration::from_secs(10), "first waiter parked", || {
        c.stats().busy_attempts >= 2
    })
    .await;
    server.cmd(&["PEXPIRE", "shared-clock", "400"]);
    let mut second = {
        let l = c.lock("shared-clock");
        tokio::spawn(async move { l.lock().await })
    };
    let (g, other) = within(
        Duration::from_secs(10),
        "a waiter after the expiry",
        async {
            tokio::select! {
                g = &mut first => (g, true),
                g = &mut second => (g, false),
            }
        },
    )
    .await;
    let other = if other { second } else { first };
    g.unwrap().unwrap().unlock().await.unwrap();
    // The unlock's message lets the other in.
    within(Duration::from_secs(10), "the other waiter", other)
        .await
        .unwrap()
        .unwrap()
        .unlock()
        .await
        .unwrap();
    c.shutdown().await.unwrap();
}

/// `try_lock_for(w)` on a held lock gives up no sooner than `w`, and not
/// much later.
#[tokio::test]
async fn try_lock_for_respects_its_deadline() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let guard = a.lock("deadline").lock().await.unwrap();
    for wait in [
        Duration::ZERO,
        Duration::from_millis(300),
        Duration::from_millis(700),
    ] {
        let started = Instant::now();
        let got = b.lock("deadline").try_lock_for(wait).await.unwrap();
        let took = started.elapsed();
        assert!(got.is_none());
        assert!(took >= wait, "gave up after {took:?}, before {wait:?}");
        assert!(
            took < wait + Duration::from_secs(5),
            "gave up after {took:?} for {wait:?}"
        );
    }
    // A deadline that cannot be represented waits like `lock()`.
    let lock_b = b.lock("deadline");
    let forever = tokio::spawn(async move { lock_b.try_lock_for(Duration::MAX).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    guard.unlock().await.unwrap();
    let g = within(HANG, "Duration::MAX waiter", forever)
        .await
        .unwrap()
        .unwrap();
    assert!(g.is_some());
    drop(g);
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// `lock()` futures dropped at every point (racing the acquire reply, or
/// while waiting) leave no hold behind and no subscription.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquires_leave_nothing_behind() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let other = client(&server).await;
    let lock = c.lock("cancel");

    // Racing the reply: cut the future off after 0..2 ms, in many tasks.
    for round in 0..200u64 {
        let l = lock.clone();
        let limit = Duration::from_micros((round * 37) % 2000);
        tokio::spawn(async move {
            if let Ok(Ok(g)) = tokio::time::timeout(limit, l.lock()).await {
                drop(g);
            }
        })
        .await
        .unwrap();
    }
    eventually(
        Duration::from_secs(30),
        "every abandoned hold given back",
        || !exists(&server, "cancel"),
    )
    .await;

    // While waiting: 20 waiters on a held lock, aborted.
    let guard = other.lock("cancel").lock().await.unwrap();
    let mut waiters = Vec::new();
    for _ in 0..20 {
        let l = lock.clone();
        waiters.push(tokio::spawn(async move { l.lock().await.map(drop) }));
    }
    eventually(Duration::from_secs(30), "waiters subscribed", || {
        c.subscribed_channels() == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    for w in &waiters {
        w.abort();
    }
    for w in waiters {
        assert!(w.await.unwrap_err().is_cancelled());
    }
    eventually(Duration::from_secs(30), "subscription dropped", || {
        c.subscribed_channels() == 0 && numsub(&server, "redisson_lock__channel:{cancel}") == 0
    })
    .await;
    guard.unlock().await.unwrap();

    // Aborted right as the lock is handed over: still nothing left.
    let guard = other.lock("cancel").lock().await.unwrap();
    let l = lock.clone();
    let w = tokio::spawn(async move { l.lock().await.map(drop) });
    eventually(Duration::from_secs(30), "waiter subscribed", || {
        c.subscribed_channels() == 1
    })
    .await;
    guard.unlock().await.unwrap();
    w.abort();
    let _ = w.await;
    eventually(Duration::from_secs(30), "nothing held", || {
        !exists(&server, "cancel")
    })
    .await;
    eventually(Duration::from_secs(30), "no subscription", || {
        c.subscribed_channels() == 0
    })
    .await;
    // The lock still works for everyone.
    let g = within(HANG, "lock after the storm", other.lock("cancel").lock())
        .await
        .unwrap();
    g.unlock().await.unwrap();
    c.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
}

/// FIFO among one client's waiters: they get the lock in arrival order.
#[tokio::test]
async fn local_waiters_are_served_in_order() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let c = client(&server).await;
    let guard = holder.lock("fifo").lock().await.unwrap();
    let order = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..5 {
        let l = c.lock("fifo");
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let g = l.lock().await.unwrap();
            order.lock().push(i);
            g.unlock().await.unwrap();
        }));
        // Let each waiter queue before the next arrives.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    guard.unlock().await.unwrap();
    within(HANG, "all waiters", async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await;
    assert_eq!(*order.lock(), vec![0, 1, 2, 3, 4]);
    holder.shutdown().await.unwrap();
    c.shutdown().await.unwrap();
}

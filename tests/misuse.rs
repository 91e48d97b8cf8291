//! Bad input and misuse: clear errors, never a panic.

use leasehold_testkit as support;

use std::time::Duration;

use leasehold::{Client, Error, Watchdog};
use support::fixture::{client, client_with, exists};
use support::RedisServer;

fn is_invalid<T: std::fmt::Debug>(r: leasehold::Result<T>) -> bool {
    matches!(r, Err(Error::InvalidArgument(_)))
}

#[tokio::test]
async fn bad_arguments_are_rejected_before_sending() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let empty = c.lock("");
    assert!(is_invalid(empty.lock().await));
    assert!(is_invalid(empty.try_lock().await));
    assert!(is_invalid(empty.try_lock_for(Duration::from_secs(1)).await));
    assert!(is_invalid(empty.is_locked().await));
    assert!(is_invalid(empty.hold_count().await));
    assert!(is_invalid(empty.remaining_lease().await));
    assert!(is_invalid(empty.force_unlock().await));

    let lock = c.lock("ok");
    assert!(is_invalid(lock.lock_with_lease(Duration::ZERO).await));
    assert!(is_invalid(
        lock.lock_with_lease(Duration::from_micros(500)).await
    ));
    assert!(is_invalid(
        lock.try_lock_with_lease(Duration::ZERO, Duration::MAX)
            .await
    ));
    assert!(!exists(&server, "ok"), "nothing was sent");

    // Days-long leases and zero waits are fine.
    let g = lock
        .try_lock_with_lease(Duration::ZERO, Duration::from_secs(3 * 86_400))
        .await
        .unwrap()
        .unwrap();
    assert!(lock.remaining_lease().await.unwrap().unwrap() > Duration::from_secs(86_400));
    g.unlock().await.unwrap();

    assert!(Watchdog::new(Duration::ZERO).is_err());
    assert!(Watchdog::new(Duration::from_secs(1))
        .unwrap()
        .with_batch_size(0)
        .is_err());
    assert!(is_invalid(Client::builder().url("not a url").build().await));
    assert!(is_invalid(Client::builder().build().await));
    c.shutdown().await.unwrap();
}

#[tokio::test]
async fn unreachable_server_fails_within_the_timeout() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = std::time::Instant::now();
    let r = Client::builder()
        .url(&format!("redis://127.0.0.1:{port}"))
        .command_timeout(Duration::from_millis(500))
        .build()
        .await;
    assert!(matches!(r, Err(Error::Redis(_))), "got {r:?}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "connect must not retry forever"
    );
}

#[tokio::test]
async fn unlock_after_expiry_is_not_held() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let g = c
        .lock("short")
        .lock_with_lease(Duration::from_millis(50))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(g.is_lost());
    assert!(matches!(g.unlock().await, Err(Error::NotHeld { .. })));
    // Someone else's lock is not touched by a stale guard.
    let stale = c
        .lock("short")
        .lock_with_lease(Duration::from_millis(50))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let other = client(&server).await;
    let fresh = other.lock("short").lock().await.unwrap();
    assert!(matches!(stale.unlock().await, Err(Error::NotHeld { .. })));
    assert!(exists(&server, "short"));
    fresh.unlock().await.unwrap();
    c.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
}

#[tokio::test]
async fn everything_after_shutdown_is_shutdown() {
    let server = RedisServer::start();
    // A watchdog of its own: the process-wide one counts other tests' leases.
    let c = client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(30))).await;
    let other = client(&server).await;
    let lock = c.lock("bye");
    let held = c.lock("held-at-shutdown").lock().await.unwrap();
    let _again = c.lock("held-at-shutdown").lock().await.unwrap();
    let blocker = other.lock("blocked").lock().await.unwrap();
    let waiting = {
        let l = c.lock("blocked");
        tokio::spawn(async move { l.lock().await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;

    c.shutdown().await.unwrap();
    assert!(
        !exists(&server, "held-at-shutdown"),
        "shutdown gave back both holds"
    );
    assert!(
        matches!(waiting.await.unwrap(), Err(Error::Shutdown)),
        "waiters are told"
    );
    assert!(matches!(lock.lock().await, Err(Error::Shutdown)));
    assert!(matches!(lock.try_lock().await, Err(Error::Shutdown)));
    assert!(matches!(lock.is_locked().await, Err(Error::Shutdown)));
    assert!(matches!(lock.force_unlock().await, Err(Error::Shutdown)));
    assert!(matches!(held.unlock().await, Err(Error::Shutdown)));
    c.shutdown().await.unwrap(); // twice is fine
    assert_eq!(c.watchdog().lease_count(), 0);
    blocker.unlock().await.unwrap();
    other.shutdown().await.unwrap();
}

/// Guards dropped after their runtime is gone, or with no runtime at all:
/// no panic.
#[test]
fn guard_dropped_outside_a_runtime_does_not_panic() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (c, guard, fixed) = rt.block_on(async {
        let c = client(&server).await;
        let g = c.lock("orphan").lock().await.unwrap();
        let f = c
            .lock("orphan-fixed")
            .lock_with_lease(Duration::from_secs(5))
            .await
            .unwrap();
        (c, g, f)
    });
    drop(rt);
    drop(guard);
    drop(fixed);
    drop(c);
}

/// A `build()` dropped half-way (here while the connections wait for their
/// first replies through a slow proxy) closes the connections it opened:
/// they do not stay, nor reconnect forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_build_leaves_no_connection_behind() {
    let server = RedisServer::start();
    let proxy = support::Proxy::start(&server.addr()).await;
    proxy.delay(Duration::from_millis(300));
    for _ in 0..5 {
        let build = leasehold::Client::builder().url(&proxy.url()).build();
        assert!(
            tokio::time::timeout(Duration::from_millis(150), build)
                .await
                .is_err(),
            "build finished before it could be cancelled"
        );
    }
    proxy.pass();
    assert!(
        proxy
            .wait_connection_count(0, Duration::from_secs(10))
            .await,
        "{} connections of cancelled builds remain",
        proxy.connection_count()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(proxy.connection_count(), 0, "a cancelled build reconnected");
}

/// One owner holding one name through two lock kinds that share its hash
/// field (a plain or fenced lock, a fair lock, a read lock: all
/// `<client>:<owner>`) is refused with `InvalidArgument`, sending nothing:
/// the client keeps one record per kind, so the second kind's acquire
/// found the field at one more than it counted and was answered as if it
/// had taken a hold (a replay), and the owner had two guards for one
/// hold in Redis; the first unlock freed the lock while the other guard
/// still read "not lost", and another client got in. Each direction,
/// and a fenced lock (the plain lock's own kind) still re-enters.
#[tokio::test]
async fn one_owner_cannot_hold_one_name_through_two_kinds() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let plain = a.lock("mixed");
    let fair = a.fair_lock("mixed");
    let read = a.read_write_lock("mixed").read();

    let held = plain.lock().await.unwrap();
    assert!(is_invalid(fair.try_lock().await), "plain, then fair");
    assert!(is_invalid(fair.lock().await), "plain, then fair (waiting)");
    assert!(is_invalid(read.try_lock().await), "plain, then read");
    let fenced = a.fenced_lock("mixed").try_lock().await.unwrap();
    let fenced = fenced.expect("a fenced handle is the plain lock's kind");
    fenced.unlock().await.unwrap();
    assert_eq!(server.cmd(&["HVALS", "mixed"]), "1", "one hold left");
    held.unlock().await.unwrap();
    let other = b.lock("mixed").try_lock().await.unwrap().expect("free");
    other.unlock().await.unwrap();

    let held = fair.lock().await.unwrap();
    assert!(is_invalid(plain.try_lock().await), "fair, then plain");
    held.unlock().await.unwrap();
    // Once the other kind's holds are given back, the name is free to use.
    plain.lock().await.unwrap().unlock().await.unwrap();
}

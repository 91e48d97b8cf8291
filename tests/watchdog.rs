//! The shared watchdog: renewal, batching, loss detection.

use leasehold_testkit as support;

use std::time::Duration;

use leasehold::{Error, Watchdog};
use support::fixture::{calls, client, client_with, eventually, exists, lock_keys, within};
use support::RedisServer;

/// With a 1 s watchdog timeout, a lock held for 5 s stays held: its TTL
/// keeps being pushed back and the guard is never lost.
#[tokio::test]
async fn lease_is_renewed_while_held() {
    let server = RedisServer::start();
    let c = client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(1))).await;
    let lock = c.lock("renewed");
    let guard = lock.lock().await.unwrap();
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(exists(&server, "renewed"), "lease expired while held");
        assert!(!guard.is_lost());
    }
    let ttl = lock.remaining_lease().await.unwrap().expect("has a lease");
    assert!(ttl <= Duration::from_secs(1));
    guard.unlock().await.unwrap();
    assert!(!exists(&server, "renewed"));
    assert_eq!(c.watchdog().lease_count(), 0, "registry empty after unlock");
    c.shutdown().await.unwrap();
}

/// 1,000 held locks are renewed with at most ceil(1000 / batch) + 1 script
/// calls per interval; after unlocking, keys and registry are empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_leases_renew_in_batches() {
    const LOCKS: usize = 1000;
    const BATCH: usize = 100;
    let server = RedisServer::start();
    let watchdog = Watchdog::new(Duration::from_millis(900))
        .unwrap()
        .with_batch_size(BATCH)
        .unwrap();
    let c = client_with(&server, |b| b.watchdog(watchdog.clone())).await;
    let mut guards = Vec::new();
    for i in 0..LOCKS {
        guards.push(c.lock(&format!("many:{i}")).lock().await.unwrap());
    }
    assert_eq!(watchdog.lease_count(), LOCKS);

    let interval = watchdog.renew_interval(); // 300 ms
    let window = interval * 10;
    let (ours_before, server_before) = (watchdog.renewal_calls(), calls(&server, "evalsha"));
    tokio::time::sleep(window).await;
    let ours = watchdog.renewal_calls() - ours_before;
    let seen = calls(&server, "evalsha") - server_before;
    // Cycles that can start in the window: 10, plus one at an edge.
    let cycles = 11u64;
    let per_cycle = LOCKS.div_ceil(BATCH) as u64 + 1;
    assert!(
        ours >= 5 * (LOCKS / BATCH) as u64,
        "renewal barely ran: {ours} calls"
    );
    assert!(
        seen <= cycles * per_cycle,
        "{seen} renew calls in {cycles} cycles"
    );
    assert!(
        seen <= ours + per_cycle,
        "Redis saw {seen}, the watchdog sent {ours}"
    );
    for i in (0..LOCKS).step_by(97) {
        assert!(
            exists(&server, &format!("many:{i}")),
            "lease of many:{i} expired"
        );
    }
    for g in guards {
        g.unlock().await.unwrap();
    }
    assert_eq!(watchdog.lease_count(), 0);
    assert_eq!(
        lock_keys(&server),
        Vec::<String>::new(),
        "no lock state left"
    );
    c.shutdown().await.unwrap();
}

/// Another client force-unlocks: the holder's `lost()` completes within
/// about one renewal interval; its `unlock()` reports `NotHeld` and leaves
/// the new holder's lock alone.
#[tokio::test]
async fn force_unlock_is_reported_as_lost() {
    let server = RedisServer::start();
    let a = client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(1))).await;
    let b = client(&server).await;
    let guard = a.lock("stolen").lock().await.unwrap();
    assert!(b.lock("stolen").force_unlock().await.unwrap());
    let new_holder = b
        .lock("stolen")
        .try_lock()
        .await
        .unwrap()
        .expect("free after force_unlock");

    within(
        Duration::from_secs(10),
        "lost() after force_unlock",
        guard.lost(),
    )
    .await;
    assert!(guard.is_lost());
    assert_eq!(
        a.watchdog().lease_count(),
        0,
        "a lost lease leaves the registry"
    );
    match guard.unlock().await {
        Err(Error::NotHeld { name }) => assert_eq!(name, "stolen"),
        other => panic!("expected NotHeld, got {other:?}"),
    }
    assert!(
        b.lock("stolen").is_locked().await.unwrap(),
        "the new holder keeps it"
    );
    assert!(!new_holder.is_lost());
    new_holder.unlock().await.unwrap();
    assert!(
        !b.lock("stolen").force_unlock().await.unwrap(),
        "nothing left to delete"
    );
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A fixed lease is not renewed: the key expires and the guard reports
/// lost at its deadline.
#[tokio::test]
async fn fixed_lease_expires_and_reports_lost() {
    let server = RedisServer::start();
    // A watchdog of its own: the process-wide one counts other tests' leases.
    let c = client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(30))).await;
    let guard = c
        .lock("fixed")
        .lock_with_lease(Duration::from_millis(400))
        .await
        .unwrap();
    assert_eq!(
        c.watchdog().lease_count(),
        0,
        "fixed leases are not renewed"
    );
    within(
        Duration::from_secs(10),
        "fixed lease deadline",
        guard.lost(),
    )
    .await;
    eventually(Duration::from_secs(10), "key expired", || {
        !exists(&server, "fixed")
    })
    .await;
    assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));
    c.shutdown().await.unwrap();
}

/// One watchdog shared by two clients renews both clients' leases.
#[tokio::test]
async fn one_watchdog_serves_two_clients() {
    let server = RedisServer::start();
    let other = RedisServer::start();
    let watchdog = Watchdog::new(Duration::from_millis(600)).unwrap();
    let a = client_with(&server, |b| b.watchdog(watchdog.clone())).await;
    let b = client_with(&other, |b| b.watchdog(watchdog.clone())).await;
    let ga = a.lock("wd").lock().await.unwrap();
    let gb = b.lock("wd").lock().await.unwrap();
    assert_eq!(watchdog.lease_count(), 2);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(exists(&server, "wd") && exists(&other, "wd"));
    drop(ga);
    gb.unlock().await.unwrap();
    eventually(Duration::from_secs(10), "both released", || {
        !exists(&server, "wd") && !exists(&other, "wd")
    })
    .await;
    // The dropped guard's lease leaves the watchdog once its background
    // release has landed (a moment after the key is gone).
    eventually(Duration::from_secs(10), "renewal ended", || {
        watchdog.lease_count() == 0
    })
    .await;
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// `extend` renews a fixed lease on demand: a 300 ms lease extended to
/// 5 s is still held, and not lost, a second later; the key's TTL is never
/// lowered by a shorter extend.
#[tokio::test]
async fn extend_keeps_a_fixed_lease() {
    let server = RedisServer::start();
    let c = client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(30))).await;
    let lock = c.lock("extended");
    let mut guard = lock
        .lock_with_lease(Duration::from_millis(300))
        .await
        .unwrap();
    guard.extend(Duration::from_secs(5)).await.unwrap();
    assert_eq!(c.watchdog().lease_count(), 0, "still a fixed lease");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(exists(&server, "extended"), "the extended lease expired");
    assert!(!guard.is_lost(), "the guard's deadline follows the extend");
    let left = lock.remaining_lease().await.unwrap().unwrap();
    assert!(
        left > Duration::from_secs(2),
        "TTL {left:?} after 1 s of 5 s"
    );

    // A shorter extend leaves the longer TTL alone.
    guard.extend(Duration::from_millis(100)).await.unwrap();
    let left = lock.remaining_lease().await.unwrap().unwrap();
    assert!(
        left > Duration::from_secs(2),
        "a short extend lowered the TTL to {left:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!guard.is_lost());
    guard.unlock().await.unwrap();
    assert!(!exists(&server, "extended"));
    c.shutdown().await.unwrap();
}

/// The extended deadline is what the owner's other holds keep the key
/// for: releasing a second (reentrant) hold sets the TTL to the extended
/// hold's need, not its old 300 ms.
#[tokio::test]
async fn extended_deadline_outlives_a_reentrant_release() {
    let server = RedisServer::start();
    let c = client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(30))).await;
    let lock = c.lock("extended-reentrant");
    let mut outer = lock
        .lock_with_lease(Duration::from_millis(300))
        .await
        .unwrap();
    let inner = lock
        .lock_with_lease(Duration::from_millis(300))
        .await
        .unwrap();
    outer.extend(Duration::from_secs(5)).await.unwrap();
    inner.unlock().await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        exists(&server, "extended-reentrant"),
        "the release cut the extended lease"
    );
    assert!(!outer.is_lost());
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    outer.unlock().await.unwrap();
    c.shutdown().await.unwrap();
}

/// A lost guard cannot be extended: after its lease ran out, or after
/// another client force-unlocked it (found by the extend itself), `extend`
/// returns `NotHeld` and creates nothing. A watchdog guard is refused.
#[tokio::test]
async fn extend_refuses_lost_and_watchdog_guards() {
    let server = RedisServer::start();
    let c = client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(30))).await;
    let other = client(&server).await;

    let mut expired = c
        .lock("extend-expired")
        .lock_with_lease(Duration::from_millis(200))
        .await
        .unwrap();
    within(Duration::from_secs(10), "lease end", expired.lost()).await;
    match expired.extend(Duration::from_secs(5)).await {
        Err(Error::NotHeld { name }) => assert_eq!(name, "extend-expired"),
        other => panic!("extend of an expired guard: {other:?}"),
    }
    // `lost` fires at a lower bound of the expiry: the key goes soon after.
    eventually(Duration::from_secs(10), "expired key gone", || {
        !exists(&server, "extend-expired")
    })
    .await;

    let mut stolen = c
        .lock("extend-stolen")
        .lock_with_lease(Duration::from_secs(30))
        .await
        .unwrap();
    assert!(other.lock("extend-stolen").force_unlock().await.unwrap());
    let taker = other
        .lock("extend-stolen")
        .try_lock()
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(
        stolen.extend(Duration::from_secs(5)).await,
        Err(Error::NotHeld { .. })
    ));
    assert!(stolen.is_lost(), "the extend found the hold gone: lost");
    assert!(!taker.is_lost());
    assert!(matches!(stolen.unlock().await, Err(Error::NotHeld { .. })));
    assert!(
        other.lock("extend-stolen").is_locked().await.unwrap(),
        "the new holder keeps it"
    );
    taker.unlock().await.unwrap();

    let mut watched = c.lock("extend-watched").lock().await.unwrap();
    assert!(matches!(
        watched.extend(Duration::from_secs(5)).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        c.lock("x")
            .lock_with_lease(Duration::from_secs(1))
            .await
            .unwrap()
            .extend(Duration::ZERO)
            .await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(!watched.is_lost());
    watched.unlock().await.unwrap();
    c.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
}

/// A watchdog lease is renewed until its release has landed, not only
/// until `unlock()` is called: a release held up (a busy client, a moving
/// slot, here a stalled connection) must not let the key expire under a
/// hold that was never lost. (Before, the lease left the watchdog when
/// `unlock()` began; under load in `tests/cluster_scale.rs`, releases
/// that took longer than the lease's remaining time found the field gone
/// and returned `NotHeld`.)
#[tokio::test]
async fn lease_is_renewed_until_its_release_lands() {
    let server = RedisServer::start();
    let proxy = support::Proxy::start(&server.addr()).await;
    let url = proxy.url();
    let c = client_with(&server, |b| {
        b.url(&url).watchdog_timeout(Duration::from_secs(30))
    })
    .await;
    let guard = c.lock("slow-release").lock().await.unwrap();
    assert_eq!(c.watchdog().lease_count(), 1);
    proxy.blackhole();
    let unlock = tokio::spawn(guard.unlock());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!unlock.is_finished(), "the release is held up");
    assert_eq!(
        c.watchdog().lease_count(),
        1,
        "the lease is still renewed while its release is on its way"
    );
    proxy.pass();
    within(Duration::from_secs(30), "the release lands", unlock)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        c.watchdog().lease_count(),
        0,
        "renewal ends with the release"
    );
    assert!(!exists(&server, "slow-release"));
    c.shutdown().await.unwrap();
}

/// A server that answers renewals late — after half the renew interval,
/// within the interval — keeps its leases: the late reply still says how
/// long Redis keeps each key (from when the renewal was sent), so the
/// guard is not lost. Before, a reply that missed the half-interval bound
/// was dropped unread, and two such cycles declared a lock lost that Redis
/// kept renewed all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_renewal_replies_still_keep_the_lease() {
    let server = RedisServer::start();
    let proxy = support::Proxy::start(&server.addr()).await;
    let url = proxy.url();
    // A cycle every 1 s, each renewal bounded by 0.5 s.
    let c = client_with(&server, |b| {
        b.url(&url).watchdog_timeout(Duration::from_secs(3))
    })
    .await;
    let guard = c.lock("late").lock().await.unwrap();
    // One renewal at full speed first, so the server has the script.
    let calls = c.watchdog().renewal_calls();
    eventually(Duration::from_secs(10), "a first renewal", || {
        c.watchdog().renewal_calls() > calls
    })
    .await;
    // 350 ms each way: every renewal is answered about 0.7 s after it
    // was sent.
    proxy.delay(Duration::from_millis(350));
    let failures = c.watchdog().renewal_failures();
    for second in 0..8 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(exists(&server, "late"), "{second} s: the key expired");
        assert!(
            !guard.is_lost(),
            "{second} s: declared lost while Redis kept it"
        );
    }
    assert!(
        c.watchdog().renewal_failures() > failures,
        "the renewals were answered late (the scenario happened)"
    );
    proxy.pass();
    within(Duration::from_secs(30), "unlock", guard.unlock())
        .await
        .unwrap();
    assert!(!exists(&server, "late"));
    c.shutdown().await.unwrap();
}

/// One packed renewal batch carries every name as bytes, whatever its
/// length (the three MessagePack string sizes) or content: all are
/// renewed, and the one whose field was deleted (in the middle of the
/// batch) is the only one reported lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_packed_batch_renews_any_name_and_finds_the_gone_one() {
    let server = RedisServer::start();
    let c = client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(1))).await;
    let big = "x".repeat(64 * 1024); // 65,536 bytes: the 32-bit length form
    let mid = "m".repeat(40_000); // the 16-bit length form
    let names: Vec<&str> = vec![
        "a",
        "thirty-one bytes long, exactly!",
        "thirty-two bytes long, exactly!!",
        "ünïcødé 🔒 名前",
        "nul\0byte",
        "cr\r\nlf\n",
        "{a}b{",
        &mid,
        &big,
    ];
    // The last 5-bit length, and the first 16-bit one.
    assert_eq!((names[1].len(), names[2].len()), (31, 32));
    let mut guards = Vec::new();
    for name in &names {
        guards.push((name, c.lock(name).lock().await.unwrap()));
    }
    assert_eq!(c.watchdog().lease_count(), names.len());
    // Delete one holder's field behind the client's back.
    let victim = "ünïcødé 🔒 名前";
    let (_, guard) = guards.iter().find(|(n, _)| **n == victim).unwrap();
    let field = format!("{}:{}", c.id(), guard.owner().id());
    assert_eq!(server.cmd(&["HDEL", victim, &field]), "1");
    within(
        Duration::from_secs(10),
        "the victim is found gone",
        guard.lost(),
    )
    .await;
    // Three more cycles: everyone else is still held and renewed.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (name, guard) in &guards {
        let shown: String = name.chars().take(20).collect();
        if **name == victim {
            assert!(guard.is_lost());
            continue;
        }
        assert!(!guard.is_lost(), "{shown:?} lost");
        let pttl: i64 = server.cmd(&["PTTL", name]).parse().unwrap();
        assert!(pttl > 0, "{shown:?}: PTTL {pttl}");
    }
    for (_, guard) in guards {
        let _ = guard.unlock().await;
    }
    assert_eq!(
        lock_keys(&server),
        Vec::<String>::new(),
        "no lock state left"
    );
    c.shutdown().await.unwrap();
}

/// A packed batch stays under the smallest `proto-max-bulk-len` a server
/// accepts (1 MB): 40 leases with 60 KB names (2.4 MB of entries) on such a
/// server are renewed, and none is lost. Before, the whole batch went as
/// one argument, which the server refused as a protocol error (closing
/// the connection), and the leases could not be renewed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packed_batches_fit_the_smallest_bulk_limit() {
    let server = RedisServer::start_with(&["--proto-max-bulk-len", "1mb"]);
    let c = client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(1))).await;
    let names: Vec<String> = (0..40)
        .map(|i| format!("{i:02}{}", "n".repeat(60_000)))
        .collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(c.lock(name).lock().await.unwrap());
    }
    let calls = c.watchdog().renewal_calls();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(c.watchdog().renewal_calls() > calls, "renewals were sent");
    for (name, guard) in names.iter().zip(&guards) {
        assert!(!guard.is_lost(), "{}: lost", &name[..2]);
        assert!(exists(&server, name), "{}: expired", &name[..2]);
    }
    assert_eq!(c.watchdog().renewal_failures(), 0, "no renewal failed");
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    assert_eq!(
        lock_keys(&server),
        Vec::<String>::new(),
        "no lock state left"
    );
    c.shutdown().await.unwrap();
}

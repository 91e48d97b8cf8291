//! The count-down latch: waiters released promptly by the last count-down,
//! honest timeouts, no hang on a deleted latch or a lost message, cancelled
//! waits leave nothing behind, a lost reply never counts down twice, and
//! names with braces on a cluster. (Wire compatibility with Redisson:
//! `tests/redisson_compat.rs`.)

use leasehold_testkit as support;

use std::time::Duration;

use leasehold::Error;
use support::cluster::RedisCluster;
use support::fixture::{client, client_with, eventually, numsub, within};
use support::{Proxy, RedisServer};
use tokio::time::Instant;

/// Catches hangs; not a performance claim.
const HANG: Duration = Duration::from_secs(60);

/// A recheck interval long enough that a waiter woken quickly was woken
/// by a message.
const NO_RECHECK: Duration = Duration::from_secs(60);

/// 10 waiters on 2 clients: not released by the first two count-downs,
/// all released promptly after the third (by its message: the recheck
/// interval is 60 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_waiters_released_promptly_by_the_last_count_down() {
    let server = RedisServer::start();
    let clients = [
        client_with(&server, |b| b.recheck_interval(NO_RECHECK)).await,
        client_with(&server, |b| b.recheck_interval(NO_RECHECK)).await,
    ];
    let counter = client(&server).await;
    let latch = counter.count_down_latch("boot");
    assert!(latch.try_set_count(3).await.unwrap());
    assert!(!latch.try_set_count(7).await.unwrap(), "already running");
    assert_eq!(latch.count().await.unwrap(), 3);

    let mut waiters = Vec::new();
    for i in 0..10 {
        let l = clients[i % 2].count_down_latch("boot");
        waiters.push(tokio::spawn(async move {
            l.wait().await.unwrap();
            Instant::now()
        }));
    }
    eventually(Duration::from_secs(20), "both clients subscribed", || {
        numsub(&server, "redisson_countdownlatch__channel__{boot}") == 2
    })
    .await;
    latch.count_down().await.unwrap();
    latch.count_down().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(waiters.iter().all(|w| !w.is_finished()), "released early");
    assert_eq!(latch.count().await.unwrap(), 1);

    let last = Instant::now();
    latch.count_down().await.unwrap();
    let mut slowest = Duration::ZERO;
    for w in waiters {
        let done = within(HANG, "a waiter", w).await.unwrap();
        slowest = slowest.max(done.saturating_duration_since(last));
    }
    eprintln!("10 waiters released at most {slowest:?} after the last count_down");
    assert!(
        slowest < NO_RECHECK / 4,
        "woken by a re-check, not the message"
    );
    assert_eq!(latch.count().await.unwrap(), 0);
    assert_eq!(server.cmd(&["EXISTS", "boot"]), "0", "deleted at zero");
    // Reached zero: it can be set again.
    assert!(latch.try_set_count(1).await.unwrap());
    for c in clients.iter().chain([&counter]) {
        c.shutdown().await.unwrap();
    }
}

/// `wait_for` runs out honestly: `false`, no error, no sooner than asked;
/// it says `true` at once for a latch at zero or not set.
#[tokio::test]
async fn wait_for_times_out_honestly() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let latch = c.count_down_latch("slow");
    assert!(
        within(HANG, "unset latch", latch.wait_for(Duration::from_secs(30)))
            .await
            .unwrap()
    );
    within(HANG, "unset latch", latch.wait()).await.unwrap();
    latch.try_set_count(1).await.unwrap();
    for wait in [Duration::ZERO, Duration::from_millis(300)] {
        let started = Instant::now();
        let reached = latch.wait_for(wait).await.unwrap();
        let took = started.elapsed();
        assert!(!reached);
        assert!(took >= wait, "gave up after {took:?}, before {wait:?}");
        assert!(took < wait + Duration::from_secs(5), "took {took:?}");
    }
    assert_eq!(latch.count().await.unwrap(), 1, "waiting changes nothing");
    latch.count_down().await.unwrap();
    assert!(latch.wait_for(Duration::ZERO).await.unwrap());

    let empty = c.count_down_latch("");
    assert!(matches!(empty.wait().await, Err(Error::InvalidArgument(_))));
    assert!(matches!(
        latch.try_set_count(u64::MAX).await,
        Err(Error::InvalidArgument(_))
    ));
    c.shutdown().await.unwrap();
    assert!(matches!(latch.wait().await, Err(Error::Shutdown)));
}

/// A raw `DEL` + `PUBLISH … 1` (Redisson's delete) releases waiters (the
/// recheck interval is 60 s: the message did it); a raw `DEL` with no
/// message, or a count set to 0 with no message (a lost `0`), is noticed
/// within the recheck interval.
#[tokio::test]
async fn deleted_latch_or_lost_message_leaves_no_waiter_hanging() {
    let server = RedisServer::start();
    let slow = client_with(&server, |b| b.recheck_interval(NO_RECHECK)).await;
    let latch = slow.count_down_latch("gone");
    latch.try_set_count(5).await.unwrap();
    let l = latch.clone();
    let waiter = tokio::spawn(async move { l.wait().await });
    eventually(Duration::from_secs(10), "waiter subscribed", || {
        numsub(&server, "redisson_countdownlatch__channel__{gone}") == 1
    })
    .await;
    server.cmd(&["DEL", "gone"]);
    server.cmd(&["PUBLISH", "redisson_countdownlatch__channel__{gone}", "1"]);
    within(
        Duration::from_secs(10),
        "woken by the delete message",
        waiter,
    )
    .await
    .unwrap()
    .unwrap();

    let recheck = Duration::from_millis(500);
    let quick = client_with(&server, |b| b.recheck_interval(recheck)).await;
    let latch = quick.count_down_latch("quiet");
    for (what, raw) in [
        ("count set to 0, no message", &["SET", "quiet", "0"][..]),
        ("deleted, no message", &["DEL", "quiet"][..]),
    ] {
        server.cmd(&["SET", "quiet", "4"]);
        let l = latch.clone();
        let waiter = tokio::spawn(async move { l.wait().await });
        eventually(Duration::from_secs(10), "waiter subscribed", || {
            numsub(&server, "redisson_countdownlatch__channel__{quiet}") == 1
        })
        .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        server.cmd(raw);
        let silent = Instant::now();
        within(Duration::from_secs(10), what, waiter)
            .await
            .unwrap()
            .unwrap();
        eprintln!(
            "{what}: noticed after {:?} (recheck {recheck:?})",
            silent.elapsed()
        );
    }
    slow.shutdown().await.unwrap();
    quick.shutdown().await.unwrap();
}

/// Waits cut off at random points, many rounds on 2 clients, while the
/// count goes down: nothing is left subscribed or queued, the count is
/// exactly what the count-downs made it, and the latch still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_waits_leave_nothing_behind() {
    let server = RedisServer::start();
    let clients = [client(&server).await, client(&server).await];
    let latch = clients[0].count_down_latch("cancel");
    latch.try_set_count(100).await.unwrap();
    let mut tasks = Vec::new();
    for t in 0..10u64 {
        let l = clients[(t % 2) as usize].count_down_latch("cancel");
        tasks.push(tokio::spawn(async move {
            for round in 0..40u64 {
                let limit = Duration::from_micros((t * 7919 + round * 104_729) % 6000);
                if round % 2 == 0 {
                    let _ = tokio::time::timeout(limit, l.wait()).await;
                } else {
                    let _ = tokio::time::timeout(limit, l.wait_for(Duration::from_secs(5))).await;
                }
            }
        }));
    }
    for _ in 0..20 {
        latch.count_down().await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    within(HANG, "every round", async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await;
    assert_eq!(latch.count().await.unwrap(), 80);
    eventually(Duration::from_secs(30), "no subscription left", || {
        clients[0].subscribed_channels() + clients[1].subscribed_channels() == 0
            && numsub(&server, "redisson_countdownlatch__channel__{cancel}") == 0
    })
    .await;
    // Aborted waiters, then the latch opens for a fresh one.
    let mut waiters = Vec::new();
    for i in 0..6 {
        let l = clients[i % 2].count_down_latch("cancel");
        waiters.push(tokio::spawn(async move { l.wait().await }));
    }
    eventually(Duration::from_secs(30), "waiters subscribed", || {
        numsub(&server, "redisson_countdownlatch__channel__{cancel}") == 2
    })
    .await;
    for w in &waiters {
        w.abort();
    }
    for w in waiters {
        assert!(w.await.unwrap_err().is_cancelled());
    }
    eventually(Duration::from_secs(30), "unsubscribed", || {
        clients[0].subscribed_channels() + clients[1].subscribed_channels() == 0
    })
    .await;
    let l = clients[1].count_down_latch("cancel");
    let waiter = tokio::spawn(async move { l.wait().await });
    for _ in 0..80 {
        latch.count_down().await.unwrap();
    }
    within(HANG, "fresh waiter", waiter).await.unwrap().unwrap();
    for c in &clients {
        c.shutdown().await.unwrap();
    }
}

/// Count-downs whose replies are lost with the connection: each is sent
/// again and counts once.
#[tokio::test]
async fn lost_replies_never_count_down_twice() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr()).await;
    let url = proxy.url();
    let c = client_with(&server, |b| {
        b.url(&url).command_timeout(Duration::from_secs(2))
    })
    .await;
    let latch = c.count_down_latch("cut");
    // Warm: scripts cached, so a dropped reply is one of a script that ran.
    latch.try_set_count(1).await.unwrap();
    latch.count_down().await.unwrap();
    proxy.drop_replies_once();
    assert!(within(HANG, "set across a cut", latch.try_set_count(5))
        .await
        .unwrap());
    for left in (1..5).rev() {
        proxy.drop_replies_once();
        within(HANG, "count-down across a cut", latch.count_down())
            .await
            .unwrap();
        assert_eq!(server.cmd(&["GET", "cut"]), left.to_string());
    }
    c.shutdown().await.unwrap();
}

/// `delete` deletes the count and wakes every waiter (by its message:
/// the recheck interval is 60 s), says whether there was a count, and the
/// latch can be set again. A delete held back in the network (answered on
/// a new connection) whose copy reaches Redis after the latch was set
/// again deletes nothing; a reply lost with the connection is sent again
/// and deletes once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_wakes_waiters_and_runs_once() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr()).await;
    let url = proxy.url();
    let c = client_with(&server, |b| b.url(&url).recheck_interval(NO_RECHECK)).await;
    let latch = c.count_down_latch("del");
    assert!(!latch.delete().await.unwrap(), "no count: nothing deleted");
    assert!(latch.try_set_count(3).await.unwrap());
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let latch = latch.clone();
            tokio::spawn(async move { latch.wait().await })
        })
        .collect();
    eventually(HANG, "the waiters subscribed", || {
        numsub(&server, latch.channel()) >= 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    assert!(latch.delete().await.unwrap());
    for w in waiters {
        within(HANG, "a waiter goes on", w).await.unwrap().unwrap();
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "woken by the message"
    );
    assert_eq!(server.cmd(&["EXISTS", "del"]), "0");

    // Held back in the network, then the latch is set again.
    assert!(latch.try_set_count(1).await.unwrap());
    proxy.stall_next_matching(b"$7\r\npublish\r\n");
    assert!(within(HANG, "answered on a new connection", latch.delete())
        .await
        .unwrap());
    assert_eq!(proxy.stalled_count(), 1, "the request was held back");
    assert!(latch.try_set_count(2).await.unwrap());
    proxy.release_stalled();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        latch.count().await.unwrap(),
        2,
        "a late copy deleted a new count"
    );

    proxy.drop_replies_once();
    assert!(within(HANG, "deleted across a cut", latch.delete())
        .await
        .unwrap());
    assert!(latch.try_set_count(4).await.unwrap());
    proxy.drop_replies_once();
    assert!(within(HANG, "deleted across a cut", latch.delete())
        .await
        .unwrap());
    assert_eq!(server.cmd(&["EXISTS", "del"]), "0");
    c.shutdown().await.unwrap();
}

/// On a cluster a name with braces puts Redisson's latch channel in
/// another slot than the key: set, count-down, delete and wake-ups still work
/// (our scripts leave the channel out and the client publishes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brace_names_work_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let c = leasehold::Client::builder()
        .url(&cluster.url())
        .recheck_interval(NO_RECHECK)
        .build()
        .await
        .unwrap();
    for name in ["{a}b", "plain"] {
        let latch = c.count_down_latch(name);
        assert!(latch.try_set_count(2).await.unwrap(), "{name}");
        let l = latch.clone();
        let waiter = tokio::spawn(async move { l.wait().await });
        let channel = latch.channel().to_owned();
        eventually(Duration::from_secs(20), "waiter subscribed", || {
            cluster.subscribers(&channel, &channel) == 1
        })
        .await;
        latch.count_down().await.unwrap();
        assert_eq!(latch.count().await.unwrap(), 1);
        latch.count_down().await.unwrap();
        within(Duration::from_secs(10), "woken by the message", waiter)
            .await
            .unwrap()
            .unwrap();
        // A delete wakes a waiter the same way.
        assert!(latch.try_set_count(1).await.unwrap(), "{name}");
        let l = latch.clone();
        let waiter = tokio::spawn(async move { l.wait().await });
        eventually(Duration::from_secs(20), "waiter subscribed", || {
            cluster.subscribers(&channel, &channel) == 1
        })
        .await;
        assert!(latch.delete().await.unwrap(), "{name}");
        within(
            Duration::from_secs(10),
            "woken by the delete's message",
            waiter,
        )
        .await
        .unwrap()
        .unwrap();
        assert!(!latch.delete().await.unwrap(), "{name}: deleted already");
    }
    c.shutdown().await.unwrap();
}

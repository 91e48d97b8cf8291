//! The fair lock (issue 10): arrival order across clients, one acquire per
//! handoff (no herd), dropped and killed waiters, Redisson's RFairLock wire
//! format (a raw-command "Java" waiter), cancellation, a cluster, and the
//! rest of the `Lock` contract.

use leasehold_testkit as support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::{Client, FairLock, Member, MultiLock, Owner};
use support::cluster::RedisCluster;
use support::fixture::{calls, client, client_with, eventually, exists, lock_keys, numsub, within};
use support::RedisServer;
use tokio::task::JoinSet;
use tokio::time::Instant;

const HANG: Duration = Duration::from_secs(60);

fn llen(server: &RedisServer, key: &str) -> u64 {
    server.cmd(&["LLEN", key]).trim().parse().unwrap_or(0)
}

fn zcard(server: &RedisServer, key: &str) -> u64 {
    server.cmd(&["ZCARD", key]).trim().parse().unwrap_or(0)
}

/// The queue, oldest first.
fn queue(server: &RedisServer, lock: &FairLock) -> Vec<String> {
    server
        .cmd(&["LRANGE", lock.queue_key(), "0", "-1"])
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The owner field of the current task on `client`.
fn my_field(client: &Client) -> String {
    format!("{}:{}", client.id(), Owner::current().id())
}

/// Waits until the queue holds `n` waiters and each of them listens on
/// its own channel.
async fn queued(server: &RedisServer, lock: &FairLock, n: usize) {
    eventually(HANG, &format!("{n} waiters queued and listening"), || {
        let q = queue(server, lock);
        q.len() == n
            && q.iter()
                .all(|f| numsub(server, &format!("{}:{f}", lock.channel())) >= 1)
    })
    .await;
}

/// EVALSHA calls once they stop moving (every waiter has made its tries).
async fn settled_evalsha(server: &RedisServer) -> u64 {
    let mut last = calls(server, "evalsha");
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = calls(server, "evalsha");
        if now == last {
            return now;
        }
        last = now;
    }
}

// === order ===

/// 12 waiters on 3 clients, queued one after the other behind a holder,
/// get the lock in exactly that order; nothing is left afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_on_three_clients_are_served_in_arrival_order() {
    let server = RedisServer::start();
    let clients = [
        client(&server).await,
        client(&server).await,
        client(&server).await,
    ];
    let holder = clients[0].fair_lock("fifo").lock().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = JoinSet::new();
    for i in 0..12 {
        let lock = clients[i % 3].fair_lock("fifo");
        let order = order.clone();
        tasks.spawn(async move {
            let guard = lock.lock().await.unwrap();
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(5)).await;
            guard.unlock().await.unwrap();
        });
        queued(&server, &clients[0].fair_lock("fifo"), i + 1).await;
    }
    holder.unlock().await.unwrap();
    within(HANG, "every waiter served", async {
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
    })
    .await;
    assert_eq!(*order.lock().unwrap(), (0..12).collect::<Vec<_>>());
    eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
}

/// A free lock with a queue is not taken by a newcomer (it queues), and a
/// `try_lock` neither takes it nor queues.
#[tokio::test]
async fn a_newcomer_does_not_jump_the_queue() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let lock = a.fair_lock("nojump");
    let holder = lock.lock().await.unwrap();
    let waiter = {
        let lock = b.fair_lock("nojump");
        tokio::spawn(async move { lock.lock().await.unwrap().unlock().await.unwrap() })
    };
    queued(&server, &lock, 1).await;
    let other = b.fair_lock("nojump");
    let tried = tokio::spawn(async move { other.try_lock().await.unwrap().is_none() });
    assert!(tried.await.unwrap(), "try_lock took a lock that was held");
    assert_eq!(llen(&server, lock.queue_key()), 1, "try_lock queued");
    holder.unlock().await.unwrap();
    within(HANG, "the queued waiter", waiter).await.unwrap();
    eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
}

// === herd ===

/// 50 tasks on 10 clients wait on a held fair lock. From then on, each
/// unlock costs at most 2 acquire-script calls in the whole system (in
/// practice one: the head's), not one per client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlock_wakes_one_waiter_in_the_whole_system() {
    const CLIENTS: usize = 10;
    const TASKS: usize = 50;
    let server = RedisServer::start();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(client(&server).await);
    }
    let lock = clients[0].fair_lock("herd");
    let holder = lock.lock().await.unwrap();
    let mut tasks = JoinSet::new();
    for i in 0..TASKS {
        let lock = clients[i % CLIENTS].fair_lock("herd");
        tasks.spawn(async move {
            let guard = lock.lock().await.unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
            guard.unlock().await.unwrap();
        });
    }
    queued(&server, &lock, TASKS).await;
    let before = settled_evalsha(&server).await;
    let zadd_before = calls(&server, "zadd");
    holder.unlock().await.unwrap();
    within(HANG, "every waiter served", async {
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
    })
    .await;
    let scripts = calls(&server, "evalsha") - before;
    let unlocks = TASKS as u64 + 1;
    // Every unlock is one release script; the rest are acquires, and
    // the renewal each granted watchdog hold sends to raise its grant
    // lease (one-hop handoff: then no acquire), and kicks (none expected
    // here).
    let acquires = scripts - unlocks;
    println!(
        "{unlocks} unlocks: {acquires} acquire or raise scripts ({:.2} per unlock), {} timeout refreshes (ZADD)",
        acquires as f64 / unlocks as f64,
        calls(&server, "zadd") - zadd_before
    );
    assert!(
        acquires <= 2 * unlocks,
        "{acquires} acquire scripts for {unlocks} unlocks"
    );
    eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
}

// === leaving ===

/// A dropped waiter leaves the list and the zset at once (both keys are
/// gone with their last entry), and one that times out has left by the
/// time `try_lock_for` returns.
#[tokio::test]
async fn a_dropped_or_timed_out_waiter_leaves_the_queue() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let lock = a.fair_lock("leave");
    let holder = lock.lock().await.unwrap();
    let waiter = {
        let lock = b.fair_lock("leave");
        tokio::spawn(async move { lock.lock().await })
    };
    queued(&server, &lock, 1).await;
    assert_eq!(zcard(&server, lock.timeout_key()), 1);
    waiter.abort();
    eventually(HANG, "the dropped waiter left", || {
        !exists(&server, lock.queue_key()) && !exists(&server, lock.timeout_key())
    })
    .await;

    let other = b.fair_lock("leave");
    let timed_out = tokio::spawn(async move {
        other
            .try_lock_for(Duration::from_millis(300))
            .await
            .unwrap()
            .is_none()
    });
    assert!(timed_out.await.unwrap());
    assert!(
        !exists(&server, lock.queue_key()),
        "the timed-out waiter is still queued"
    );
    assert!(!exists(&server, lock.timeout_key()));
    holder.unlock().await.unwrap();
    assert!(lock_keys(&server).is_empty(), "{:?}", lock_keys(&server));
}

/// A waiter that got the lock keeps its own channel subscribed while its
/// guard lives (so locking again soon queues with one call), and lets it
/// go a moment after the guard is gone: nothing stays subscribed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiters_channel_lives_with_its_guard_then_goes() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let lock = a.fair_lock("keeps-channel");
    let holder = lock.lock().await.unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let waiter = {
        let lock = b.fair_lock("keeps-channel");
        tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            let _ = rx.await;
            guard.unlock().await.unwrap();
        })
    };
    queued(&server, &lock, 1).await;
    let channel = format!("{}:{}", lock.channel(), queue(&server, &lock)[0]);
    holder.unlock().await.unwrap();
    eventually(HANG, "the waiter holds the lock", || {
        server.cmd(&["HLEN", lock.name()]).trim() == "1" && queue(&server, &lock).is_empty()
    })
    .await;
    // Longer than the linger: the guard itself keeps the channel.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        numsub(&server, &channel),
        1,
        "the holder's channel was let go"
    );
    tx.send(()).unwrap();
    within(HANG, "the waiter unlocks", waiter).await.unwrap();
    eventually(HANG, "the channel is let go after the guard", || {
        numsub(&server, &channel) == 0
    })
    .await;
    assert!(lock_keys(&server).is_empty(), "{:?}", lock_keys(&server));
}

/// A waiter dropped from the middle of the queue leaves it at once; the
/// waiter behind it is served next.
#[tokio::test]
async fn a_waiter_dropped_mid_queue_leaves_it_at_once() {
    let server = RedisServer::start();
    let (a, b, c) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let lock = a.fair_lock("mid");
    let holder = lock.lock().await.unwrap();
    let first = {
        let lock = b.fair_lock("mid");
        tokio::spawn(async move { lock.lock().await })
    };
    queued(&server, &lock, 1).await;
    let second = {
        let lock = c.fair_lock("mid");
        tokio::spawn(async move { lock.lock().await.unwrap().unlock().await.unwrap() })
    };
    queued(&server, &lock, 2).await;
    first.abort();
    eventually(HANG, "the dropped waiter left", || {
        llen(&server, lock.queue_key()) == 1 && zcard(&server, lock.timeout_key()) == 1
    })
    .await;
    holder.unlock().await.unwrap();
    within(HANG, "the second waiter", second).await.unwrap();
    eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
}

/// Two waits of one owner overlap, as when `timeout(lock.lock())` is
/// retried at once: the cancelled wait leaves the queue in the background
/// while the next one has already queued (same field, same entry). The
/// old wait's leave must not take the new wait's place, or nobody tells
/// the new waiter when the lock is freed (it would re-check only after
/// its refresh found it gone). 10 rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_wait_does_not_unqueue_the_next_wait_of_its_owner() {
    overlapping_waits("overlap", false, Then::SecondGetsTheLock).await;
}

/// Two waits of one owner overlap and the *older* one tries last (it was
/// woken after the newer one queued: here by a re-check message on the
/// owner's channel, in production by a late subscribe confirmation or a
/// re-check). Cancelled, the older wait must still leave the place to the
/// newer one: the entry is the owner's, and another wait of it is still
/// waiting. 10 rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_wait_that_tried_last_leaves_the_place_to_a_live_wait_of_its_owner() {
    overlapping_waits("overlap-late", true, Then::SecondGetsTheLock).await;
}

/// As above, and then the newer wait is cancelled too: it is the owner's
/// last wait, so its leave must take the owner out of the queue, although
/// the entry carries the older wait's (later) request id. Before, it kept
/// the entry as if a newer wait had written it: the next release granted
/// the lock to a field nobody waited for, and everyone else waited for the
/// grant to run out (5 s), then for their own re-check. 10 rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_of_two_cancelled_waits_of_one_owner_leaves_the_queue() {
    overlapping_waits("overlap-both", true, Then::SecondCancelledToo).await;
}

/// What [`overlapping_waits`] does once the first wait was cancelled.
#[derive(PartialEq)]
enum Then {
    /// The holder unlocks: the second wait must get the lock.
    SecondGetsTheLock,
    /// The second wait is cancelled too: the owner must leave the queue,
    /// and the holder's unlock free the lock for anyone.
    SecondCancelledToo,
}

/// 10 rounds of: a holder on another client; a first wait of one owner
/// queues, then a second wait of the same owner (its try re-writes the
/// owner's grant entry); if `first_tries_last`, the first wait is woken
/// and tries again after the second; the first wait is cancelled, and the
/// owner must still be queued; then as `then` says.
async fn overlapping_waits(prefix: &str, first_tries_last: bool, then: Then) {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    for round in 0..10 {
        let name = format!("{prefix}:{round}");
        let lock = b.fair_lock(&name);
        let holder = a.fair_lock(&name).lock().await.unwrap();
        let owner = Owner::new();
        let field = format!("{}:{}", b.id(), owner.id());
        let grants = format!("leasehold_grant:{{{name}}}");
        let entry = || server.cmd(&["HGET", &grants, &field]);
        let first = {
            let lock = lock.clone();
            tokio::spawn(owner.scope(async move { lock.lock().await }))
        };
        queued(&server, &lock, 1).await;
        let first_entry = entry();
        let second = {
            let lock = lock.clone();
            tokio::spawn(owner.scope(async move { lock.lock().await.map(|g| !g.is_lost()) }))
        };
        // The second wait's try ran: it re-wrote the entry (its request id).
        eventually(HANG, "the second wait queued", || {
            let now = entry();
            !now.is_empty() && now != first_entry
        })
        .await;
        if first_tries_last {
            let second_entry = entry();
            // "0" wakes one waiter of the owner's channel: the first (it
            // queued first). Its try re-writes the entry after the second
            // wait's.
            let channel = format!("{}:{field}", lock.channel());
            server.cmd(&["PUBLISH", &channel, "0"]);
            eventually(HANG, "a wait tried again", || entry() != second_entry).await;
        }
        first.abort();
        assert!(first.await.unwrap_err().is_cancelled());
        // The first wait's leave runs in the background; give it time.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(queue(&server, &lock), vec![field.clone()], "round {round}");
        if then == Then::SecondCancelledToo {
            second.abort();
            assert!(second.await.unwrap_err().is_cancelled());
            eventually(HANG, "the owner's last wait left the queue", || {
                queue(&server, &lock).is_empty()
                    && server.cmd(&["HEXISTS", &grants, &field]).trim() == "0"
            })
            .await;
            holder.unlock().await.unwrap();
            // Nobody was granted the lock: it is free for anyone at once.
            let next = a.fair_lock(&name).try_lock().await.unwrap();
            assert!(
                next.is_some(),
                "round {round}: granted to a wait that had gone"
            );
            next.unwrap().unlock().await.unwrap();
            eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
            continue;
        }
        holder.unlock().await.unwrap();
        assert!(within(HANG, "the second wait", second)
            .await
            .unwrap()
            .unwrap());
        eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
    }
}

/// A client shut down while one of its tasks waits: the wait ends with
/// `Error::Shutdown`, and the waiter's entry holds nobody up for longer
/// than its timeout (it leaves the queue in the background; if shutdown
/// closed the connection first, the entry runs out and is purged).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_a_wait_without_blocking_the_queue() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let lock = a.fair_lock("shutdown");
    let holder = lock.lock().await.unwrap();
    let waiter = {
        let lock = b.fair_lock("shutdown");
        tokio::spawn(async move { lock.lock().await.map(drop) })
    };
    queued(&server, &lock, 1).await;
    b.shutdown().await.unwrap();
    let ended = within(HANG, "the wait after shutdown", waiter)
        .await
        .unwrap();
    assert!(
        matches!(ended, Err(leasehold::Error::Shutdown)),
        "{ended:?}"
    );
    let next = {
        let lock = a.fair_lock("shutdown");
        tokio::spawn(async move { lock.lock().await.unwrap().unlock().await.unwrap() })
    };
    holder.unlock().await.unwrap();
    within(
        FairLock::THREAD_WAIT + Duration::from_secs(20),
        "the next waiter",
        next,
    )
    .await
    .unwrap();
    eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
}

const CHILD_URL: &str = "LEASEHOLD_FAIR_URL";
const CHILD_NAME: &str = "LEASEHOLD_FAIR_NAME";

/// Not a test: the body of a child process that queues for the fair lock
/// named by the parent and waits until it is killed.
#[tokio::test]
#[ignore = "child process of a_killed_waiter_holds_the_queue_up_for_a_bounded_time"]
async fn child_waits_in_the_queue() {
    let (Ok(url), Ok(name)) = (std::env::var(CHILD_URL), std::env::var(CHILD_NAME)) else {
        return;
    };
    let client = Client::connect(&url).await.unwrap();
    let _guard = client.fair_lock(&name).lock().await.unwrap();
    std::future::pending::<()>().await;
}

/// A waiter process killed (SIGKILL) at the head of the queue delays the
/// waiter behind it by at most the thread wait (5 s) after the unlock,
/// plus a generous margin (a hang check); then nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_waiter_holds_the_queue_up_for_a_bounded_time() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let lock = a.fair_lock("killed");
    let holder = lock.lock().await.unwrap();
    let mut child = support::fixture::child("child_waits_in_the_queue")
        .env(CHILD_URL, server.url())
        .env(CHILD_NAME, "killed")
        .spawn()
        .expect("re-exec the test binary");
    queued(&server, &lock, 1).await;
    let waiter = {
        let lock = b.fair_lock("killed");
        tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            let at = Instant::now();
            guard.unlock().await.unwrap();
            at
        })
    };
    queued(&server, &lock, 2).await;
    let dead = format!("{}:{}", lock.channel(), queue(&server, &lock)[0]);
    child.kill().unwrap();
    child.wait().unwrap();
    // Redis has seen the process's connections close.
    eventually(HANG, "the killed waiter unsubscribed", || {
        numsub(&server, &dead) == 0
    })
    .await;
    let unlocked = Instant::now();
    holder.unlock().await.unwrap();
    let bound = FairLock::THREAD_WAIT + Duration::from_secs(20);
    let acquired = within(bound, "the waiter behind the killed one", waiter)
        .await
        .unwrap();
    println!(
        "the waiter behind the killed one held the lock {:?} after the unlock",
        acquired - unlocked
    );
    eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
}

// === cancellation ===

/// Many rounds of acquires dropped at random points (queued, told, mid
/// script), on a lock held or free: afterwards nothing is held or queued,
/// and another client takes the lock at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_acquire_holds_nothing_and_leaves_nothing_queued() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    for round in 0..150u64 {
        let lock = a.fair_lock("cancel");
        let holder = if round % 2 == 0 {
            Some(b.fair_lock("cancel").lock().await.unwrap())
        } else {
            None
        };
        let cut = Duration::from_micros((round * 397) % 3000);
        let attempt = {
            let lock = lock.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(cut, lock.lock()).await;
            })
        };
        if round % 3 == 0 {
            tokio::time::sleep(cut / 2).await;
            attempt.abort();
        }
        let _ = attempt.await;
        if let Some(holder) = holder {
            holder.unlock().await.unwrap();
        }
        let other = b.fair_lock("cancel");
        let guard = within(HANG, "the lock after a dropped acquire", async move {
            other.lock().await.unwrap()
        })
        .await;
        guard.unlock().await.unwrap();
        eventually(HANG, "nothing left after the round", || {
            lock_keys(&server).is_empty()
        })
        .await;
    }
}

// === wire ===

/// A plain fred subscriber on `channel`, listening as a Java waiter does.
async fn listen(
    server: &RedisServer,
    channel: &str,
) -> (
    leasehold::fred::clients::SubscriberClient,
    tokio::sync::broadcast::Receiver<leasehold::fred::types::Message>,
) {
    use leasehold::fred::interfaces::{ClientLike, EventInterface, PubsubInterface};
    let listener = leasehold::fred::types::Builder::from_config(
        leasehold::fred::types::config::Config::from_url(&server.url()).unwrap(),
    )
    .build_subscriber_client()
    .unwrap();
    listener.init().await.unwrap();
    let rx = listener.message_rx();
    listener.subscribe(channel).await.unwrap();
    eventually(HANG, "listener subscribed", || numsub(server, channel) >= 1).await;
    (listener, rx)
}

fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A raw-command "Java" waiter (REDISSON-WIRE.md §3.3: ZADD its timeout,
/// RPUSH its name; listening on `redisson_lock__channel:{name}:<field>`)
/// queued ahead of a leasehold waiter is woken first, with `0`, on its own
/// channel only; once it has taken and released the lock as Redisson does,
/// the leasehold waiter is woken and takes it. A Java head is never
/// granted the lock (one-hop handoff is for leasehold waiters only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_waiter_ahead_is_served_first_then_the_leasehold_waiter() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let lock = a.fair_lock("wire");
    let holder = lock.lock().await.unwrap();
    let java = "6f1c3d52-1111-4222-8333-944455556666:77";
    let java_channel = format!("{}:{java}", lock.channel());
    assert_eq!(
        java_channel,
        format!("redisson_lock__channel:{{wire}}:{java}")
    );
    let (_listener, mut rx) = listen(&server, &java_channel).await;
    let score = (epoch_ms() + 300_000).to_string();
    server.cmd(&["ZADD", lock.timeout_key(), &score, java]);
    server.cmd(&["RPUSH", lock.queue_key(), java]);

    let waiter = {
        let lock = b.fair_lock("wire");
        tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            let field = my_field(&b);
            guard.unlock().await.unwrap();
            field
        })
    };
    queued(&server, &lock, 2).await;
    let leasehold_field = queue(&server, &lock)[1].clone();
    let leasehold_channel = format!("{}:{leasehold_field}", lock.channel());
    let (_spy, mut spy_rx) = listen(&server, &leasehold_channel).await;

    holder.unlock().await.unwrap();
    let message = within(HANG, "the Java waiter's message", rx.recv())
        .await
        .unwrap();
    assert_eq!(message.channel.to_string(), java_channel);
    assert_eq!(message.value.as_bytes(), Some(&b"0"[..]));
    assert!(
        spy_rx.try_recv().is_err(),
        "the leasehold waiter was told too"
    );
    assert!(!waiter.is_finished());
    // No grant to a Java head: the lock is free, the Java waiter still
    // queued, and the grant hash holds only the leasehold waiter's entry.
    assert!(!exists(&server, "wire"), "a Java head was granted the lock");
    let grants = server.cmd(&["HKEYS", "leasehold_grant:{wire}"]);
    assert_eq!(
        grants.lines().collect::<Vec<_>>(),
        [leasehold_field.as_str()]
    );

    // The Java waiter takes the lock (it heads the queue; the lock is free)
    // and releases it as Redisson does.
    assert_eq!(queue(&server, &lock)[0], java);
    server.cmd(&["LPOP", lock.queue_key()]);
    server.cmd(&["ZREM", lock.timeout_key(), java]);
    server.cmd(&["HSET", "wire", java, "1"]);
    server.cmd(&["PEXPIRE", "wire", "30000"]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiter.is_finished(),
        "the leasehold waiter took a held lock"
    );
    server.cmd(&["DEL", "wire"]);
    let head = queue(&server, &lock)[0].clone();
    assert_eq!(head, leasehold_field);
    server.cmd(&["PUBLISH", &format!("{}:{head}", lock.channel()), "0"]);
    let served = within(HANG, "the leasehold waiter", waiter).await.unwrap();
    assert_eq!(served, leasehold_field);
    let told = within(HANG, "the leasehold waiter's message", spy_rx.recv())
        .await
        .unwrap();
    assert_eq!(told.value.as_bytes(), Some(&b"0"[..]));
    eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
}

/// A Java acquire moves every timeout one Java wait (5 minutes) earlier,
/// so a leasehold waiter can be purged from the head by the next release
/// while it is alive. Its next timeout refresh (every 2 s) finds the entry
/// gone and makes it re-check at once: it takes the lock, instead of
/// sleeping for the holder's whole lease (30 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_purged_by_a_java_decrement_is_not_stranded() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let lock = a.fair_lock("decrement");
    let holder = lock.lock().await.unwrap();
    let waiter = {
        let lock = b.fair_lock("decrement");
        tokio::spawn(async move { lock.lock().await.unwrap().unlock().await.unwrap() })
    };
    queued(&server, &lock, 1).await;
    let field = queue(&server, &lock)[0].clone();
    // As a Java acquire does to every queued waiter.
    server.cmd(&["ZINCRBY", lock.timeout_key(), "-300000", &field]);
    // The release purges the "dead" head and tells nobody.
    holder.unlock().await.unwrap();
    within(Duration::from_secs(20), "the purged waiter", waiter)
        .await
        .unwrap();
    eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
}

/// Redisson's fair acquire, blocking variant (REDISSON-WIRE.md §3.2–3.3),
/// written from its documented steps. KEYS [name, queue, timeouts]; ARGV
/// [lease ms, field, wait ms, now]. Nil when acquired, else a wait hint.
const JAVA_FAIR_ACQUIRE: &str = r#"
local now = tonumber(ARGV[4])
while true do
    local head = redis.call('lindex', KEYS[2], 0)
    if not head then break end
    local t = redis.call('zscore', KEYS[3], head)
    if t and tonumber(t) <= now then
        redis.call('zrem', KEYS[3], head)
        redis.call('lpop', KEYS[2])
    else
        break
    end
end
if redis.call('exists', KEYS[1]) == 0 and (redis.call('exists', KEYS[2]) == 0
        or redis.call('lindex', KEYS[2], 0) == ARGV[2]) then
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], ARGV[2])
    for _, k in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
        redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), k)
    end
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if redis.call('zscore', KEYS[3], ARGV[2]) then
    return math.max(0, redis.call('pttl', KEYS[1]))
end
local last = redis.call('lindex', KEYS[2], -1)
local ttl
if last and last ~= ARGV[2] and redis.call('zscore', KEYS[3], last) then
    ttl = tonumber(redis.call('zscore', KEYS[3], last)) - now
else
    ttl = redis.call('pttl', KEYS[1])
end
if redis.call('zadd', KEYS[3], ttl + tonumber(ARGV[3]) + now, ARGV[2]) == 1 then
    redis.call('rpush', KEYS[2], ARGV[2])
end
return ttl
"#;

/// Redisson's fair unlock (§3.6) without its latch. KEYS [name, queue,
/// timeouts, channel stem]; ARGV [lease ms, field, now].
const JAVA_FAIR_UNLOCK: &str = r#"
local now = tonumber(ARGV[3])
while true do
    local head = redis.call('lindex', KEYS[2], 0)
    if not head then break end
    local t = redis.call('zscore', KEYS[3], head)
    if t and tonumber(t) <= now then
        redis.call('zrem', KEYS[3], head)
        redis.call('lpop', KEYS[2])
    else
        break
    end
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return nil
end
if redis.call('hincrby', KEYS[1], ARGV[2], -1) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[1])
    return 0
end
redis.call('del', KEYS[1])
local head = redis.call('lindex', KEYS[2], 0)
if head then
    redis.call('publish', KEYS[4] .. ':' .. head, '0')
end
return 1
"#;

/// One run of Redisson's fair acquire ([`JAVA_FAIR_ACQUIRE`]) for Java
/// waiter `field` on `lock` (30 s lease, 5-minute thread wait): nil when
/// acquired, else the wait hint.
async fn java_fair_acquire(
    redis: &leasehold::fred::clients::Client,
    lock: &FairLock,
    field: &str,
) -> leasehold::fred::types::Value {
    use leasehold::fred::interfaces::LuaInterface;
    use leasehold::fred::types::Value;
    let keys = vec![
        lock.key().to_owned(),
        lock.queue_key().to_owned(),
        lock.timeout_key().to_owned(),
    ];
    let args: Vec<Value> = vec![
        30_000.into(),
        field.into(),
        300_000.into(),
        (epoch_ms() as i64).into(),
    ];
    redis.eval(JAVA_FAIR_ACQUIRE, keys, args).await.unwrap()
}

/// Redisson's fair unlock ([`JAVA_FAIR_UNLOCK`]) of Java holder `field`;
/// asserts it freed the lock.
async fn java_fair_unlock(redis: &leasehold::fred::clients::Client, lock: &FairLock, field: &str) {
    use leasehold::fred::interfaces::LuaInterface;
    use leasehold::fred::types::Value;
    let keys = vec![
        lock.key().to_owned(),
        lock.queue_key().to_owned(),
        lock.timeout_key().to_owned(),
        lock.channel().to_owned(),
    ];
    let args: Vec<Value> = vec![30_000.into(), field.into(), (epoch_ms() as i64).into()];
    let freed: Value = redis.eval(JAVA_FAIR_UNLOCK, keys, args).await.unwrap();
    assert_eq!(freed, Value::Integer(1));
}

/// A Java `RFairLock` waiter driven by Redisson's scripts (default thread
/// wait, 5 minutes): listens on its own channel, acquires, records
/// `label`, unlocks.
async fn java_fair_waiter(
    server: Arc<RedisServer>,
    lock: FairLock,
    field: String,
    label: &'static str,
    order: Arc<Mutex<Vec<&'static str>>>,
) {
    use leasehold::fred::types::Value;
    let redis = support::fixture::client(&server).await;
    let channel = format!("{}:{field}", lock.channel());
    let (_listener, mut rx) = listen(&server, &channel).await;
    loop {
        let reply = java_fair_acquire(redis.redis(), &lock, &field).await;
        let Value::Integer(ttl) = reply else { break };
        // Redisson waits for its message or the hint (0: it spins; a
        // floor keeps this test from spinning hot).
        let bound = Duration::from_millis(ttl.clamp(20, 1000) as u64);
        let _ = tokio::time::timeout(bound, rx.recv()).await;
    }
    order.lock().unwrap().push(label);
    tokio::time::sleep(Duration::from_millis(5)).await;
    java_fair_unlock(redis.redis(), &lock, &field).await;
}

/// Java waiters (Redisson's scripts, 5-minute thread wait) and leasehold
/// waiters queued alternately behind a holder are served in arrival
/// order; nobody is stranded, nothing is left. (Issue 30: a Java acquire
/// moves every timeout 5 minutes earlier; leasehold waiters' timeouts
/// were 5 s ahead, so they were purged and queued again behind later
/// arrivals.) Both holders: a leasehold one, then a Java one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_and_leasehold_waiters_mixed_are_served_in_arrival_order() {
    use leasehold::fred::types::Value;
    let server = Arc::new(RedisServer::start());
    let (a, b) = (client(&server).await, client(&server).await);
    let java = support::fixture::client(&server).await;
    for (round, java_holder) in [false, true].into_iter().enumerate() {
        let name = format!("mixed-{round}");
        let lock = a.fair_lock(&name);
        let holder_field = "6f1c3d52-1111-4222-8333-944455556699:99";
        let holder = if java_holder {
            let taken = java_fair_acquire(java.redis(), &lock, holder_field).await;
            assert_eq!(taken, Value::Null, "the Java holder takes the free lock");
            None
        } else {
            Some(lock.lock().await.unwrap())
        };
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = JoinSet::new();
        let labels = ["java 1", "leasehold 1", "java 2", "leasehold 2"];
        for (i, label) in labels.into_iter().enumerate() {
            let order = order.clone();
            if i % 2 == 0 {
                let field = format!("6f1c3d52-1111-4222-8333-94445555666{i}:{i}");
                tasks.spawn(java_fair_waiter(
                    server.clone(),
                    b.fair_lock(&name),
                    field,
                    label,
                    order,
                ));
            } else {
                let lock = b.fair_lock(&name);
                tasks.spawn(async move {
                    let guard = lock.lock().await.unwrap();
                    order.lock().unwrap().push(label);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    guard.unlock().await.unwrap();
                });
            }
            eventually(HANG, "queued", || {
                llen(&server, lock.queue_key()) == i as u64 + 1
            })
            .await;
        }
        match holder {
            Some(guard) => guard.unlock().await.unwrap(),
            None => java_fair_unlock(java.redis(), &lock, holder_field).await,
        }
        within(HANG, "every Java and leasehold waiter", async {
            while let Some(done) = tasks.join_next().await {
                done.unwrap();
            }
        })
        .await;
        let order = order.lock().unwrap().clone();
        println!(
            "holder {}: served {order:?}",
            if java_holder { "java" } else { "leasehold" }
        );
        assert_eq!(order, labels, "java holder: {java_holder}");
    }
    eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
}

/// A foreign holder field (a Java `RFairLock` holder) blocks the fair
/// lock: `try_lock` fails without queueing, a bounded wait times out and
/// leaves; once the field is gone the lock is taken.
#[tokio::test]
async fn a_foreign_holder_blocks_the_fair_lock() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let lock = a.fair_lock("foreign");
    server.cmd(&[
        "HSET",
        "foreign",
        "6f1c3d52-1111-4222-8333-944455556666:1",
        "1",
    ]);
    server.cmd(&["PEXPIRE", "foreign", "30000"]);
    assert!(lock.is_locked().await.unwrap());
    assert!(lock.try_lock().await.unwrap().is_none());
    assert!(!exists(&server, lock.queue_key()));
    assert!(lock
        .try_lock_for(Duration::from_millis(200))
        .await
        .unwrap()
        .is_none());
    assert!(!exists(&server, lock.queue_key()));
    assert_eq!(lock.holders().await.unwrap()[0].owner, Some(1));
    server.cmd(&["DEL", "foreign"]);
    let guard = lock.try_lock().await.unwrap().expect("free now");
    guard.unlock().await.unwrap();
    assert!(lock_keys(&server).is_empty());
}

// === the lock contract ===

/// Re-entry, hold counts, fixed leases, force-unlock (with `lost()`), a
/// watchdog lease that outlives its timeout, `with`, and a MultiLock
/// member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_contract() {
    let server = RedisServer::start();
    let a = client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(1))).await;
    let b = client(&server).await;
    let lock = a.fair_lock("contract");
    let outer = lock.lock().await.unwrap();
    let inner = lock.lock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 2);
    assert!(lock.is_held_by_current_task().await.unwrap());
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!outer.is_lost(), "the watchdog did not keep the lease");
    assert!(b.fair_lock("contract").try_lock().await.unwrap().is_none());
    inner.unlock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    outer.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());

    let fixed = lock
        .lock_with_lease(Duration::from_millis(400))
        .await
        .unwrap();
    assert!(lock.remaining_lease().await.unwrap().is_some());
    within(HANG, "a fixed lease runs out", fixed.lost()).await;
    drop(fixed);
    eventually(HANG, "the key expired", || !exists(&server, "contract")).await;

    let held = lock.lock().await.unwrap();
    assert!(b.fair_lock("contract").force_unlock().await.unwrap());
    within(HANG, "lost after a force-unlock elsewhere", held.lost()).await;
    drop(held);

    let n = lock.with(|_| async { 7 }).await.unwrap();
    assert_eq!(n, 7);
    let multi = MultiLock::new(vec![
        Member::from(a.fair_lock("m1")),
        Member::from(a.lock("m2")),
    ]);
    let both = multi.lock().await.unwrap();
    assert!(a.fair_lock("m1").is_locked().await.unwrap());
    both.unlock().await.unwrap();
    assert!(!a.fair_lock("m1").is_locked().await.unwrap());
    assert!(lock.try_lock().await.unwrap().is_some());
    a.shutdown().await.unwrap();
    eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
}

// === cluster ===

/// On a 3-primary cluster (sharded pub/sub), names with and without
/// braces: every key and channel of one lock shares its slot, three
/// waiters on two clients are served in order, nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_every_key_shares_the_locks_slot() {
    let cluster = RedisCluster::start(3, 0);
    let url = cluster.url();
    let a = Client::builder().url(&url).build().await.unwrap();
    let b = Client::builder().url(&url).build().await.unwrap();
    for name in ["fair:plain", "{tag}fair", "x{y}z"] {
        let lock = a.fair_lock(name);
        let holder = lock.lock().await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = JoinSet::new();
        for i in 0..3 {
            let lock = if i % 2 == 0 { &b } else { &a }.fair_lock(name);
            let order = order.clone();
            tasks.spawn(async move {
                let guard = lock.lock().await.unwrap();
                order.lock().unwrap().push(i);
                guard.unlock().await.unwrap();
            });
            let want = (i + 1).to_string();
            eventually(HANG, "queued", || {
                cluster.cmd_on_key(name, &["LLEN", lock_queue(name).as_str()]) == want
            })
            .await;
        }
        holder.unlock().await.unwrap();
        within(HANG, "every waiter on the cluster", async {
            while let Some(done) = tasks.join_next().await {
                done.unwrap();
            }
        })
        .await;
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2], "{name}");
        for key in [
            name.to_owned(),
            lock_queue(name),
            lock.timeout_key().to_owned(),
        ] {
            assert_eq!(
                cluster.cmd_on_key(name, &["EXISTS", &key]),
                "0",
                "{key} left"
            );
        }
    }
}

fn lock_queue(name: &str) -> String {
    if name.contains('{') {
        format!("redisson_lock_queue:{name}")
    } else {
        format!("redisson_lock_queue:{{{name}}}")
    }
}

/// Issue 29, item 4: a force-unlock hands the fair lock to the head
/// waiter, here a task of the very client that force-unlocks. Ending the
/// client's holds of the key after the reply must not end the hold the
/// same script just granted to that waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlock_keeps_the_grant_it_hands_to_a_local_waiter() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    for round in 0..10 {
        let name = format!("granted-{round}");
        let held = b.fair_lock(&name).lock().await.unwrap();
        let lock = a.fair_lock(&name);
        let waiting = tokio::spawn({
            let lock = lock.clone();
            async move { lock.lock().await.unwrap() }
        });
        queued(&server, &lock, 1).await;
        assert!(lock.force_unlock().await.unwrap());
        let granted = within(HANG, "the head waiter is handed the lock", waiting)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !granted.is_lost(),
            "round {round}: the force-unlock ended the hold it granted"
        );
        granted.unlock().await.unwrap();
        drop(held);
    }
}

/// A leasehold waiter that gives up moves the timeouts of the waiters
/// behind it one Java wait (5 minutes) earlier, as Redisson's
/// `acquireFailed` does, and leaves the ones ahead alone: a Java waiter
/// queued behind it keeps Redisson's arithmetic (its predecessor's
/// timeout plus one wait).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaving_waiter_moves_the_timeouts_behind_it_as_redisson_does() {
    let server = Arc::new(RedisServer::start());
    let (a, b) = (client(&server).await, client(&server).await);
    let java = support::fixture::client(&server).await;
    let lock = a.fair_lock("leaving");
    let holder = lock.lock().await.unwrap();
    let ahead = "6f1c3d52-1111-4222-8333-944455556601:1";
    let behind = "6f1c3d52-1111-4222-8333-944455556602:2";
    assert_ne!(
        java_fair_acquire(java.redis(), &lock, ahead).await,
        leasehold::fred::types::Value::Null
    );
    let leaving = {
        let lock = b.fair_lock("leaving");
        tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(2)).await.unwrap() })
    };
    eventually(HANG, "the leasehold waiter queued", || {
        llen(&server, lock.queue_key()) == 2
    })
    .await;
    java_fair_acquire(java.redis(), &lock, behind).await;
    assert_eq!(llen(&server, lock.queue_key()), 3);
    let score = |field: &str| -> i64 {
        server
            .cmd(&["ZSCORE", lock.timeout_key(), field])
            .parse::<f64>()
            .expect("a score") as i64
    };
    let (ahead_before, behind_before) = (score(ahead), score(behind));
    assert!(within(HANG, "the leaving waiter", leaving)
        .await
        .unwrap()
        .is_none());
    assert_eq!(queue(&server, &lock), [ahead, behind]);
    assert_eq!(
        score(ahead),
        ahead_before,
        "a waiter ahead keeps its timeout"
    );
    assert_eq!(
        score(behind),
        behind_before - 300_000,
        "a waiter behind moves one Java wait"
    );
    holder.unlock().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// Issue 29, item 2: a late copy of a wait's leave gives back nothing a
/// later wait of the same owner adopted. The leave of a timed-out wait is
/// held back in the proxy while the client's connection dies (fred sends
/// it again on the new connection); the owner then waits again and is
/// handed the lock by the holder's release. When the held copy of the old
/// leave reaches Redis after that, the owner's adopted hold must stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_copy_of_a_leave_gives_back_no_later_grant() {
    let server = RedisServer::start();
    let proxy = support::Proxy::start(&server.addr()).await;
    let url = proxy.url();
    let holder = client(&server).await;
    let waiter = client_with(&server, |b| {
        b.url(&url).command_timeout(Duration::from_secs(2))
    })
    .await;
    for round in 0..3 {
        let name = format!("late-leave-{round}");
        let held = holder.fair_lock(&name).lock().await.unwrap();
        let lock = waiter.fair_lock(&name);
        let (proxy_ref, server_ref) = (&proxy, &server);
        // One task, so both waits are one owner.
        let granted = Owner::new()
            .scope(async {
                let field = my_field(&waiter);
                let first = tokio::spawn({
                    let lock = lock.clone();
                    let owner = Owner::current();
                    owner.scope(async move { lock.try_lock_for(Duration::from_millis(800)).await })
                });
                queued(server_ref, &lock, 1).await;
                // The leave: "publish" then 0 (the owner counts no hold).
                proxy_ref.stall_next_matching(b"\r\n$7\r\npublish\r\n$1\r\n0\r\n");
                let first = within(HANG, "the first wait times out", first)
                    .await
                    .unwrap()
                    .unwrap();
                assert!(first.is_none(), "round {round}: the lock is held");
                assert_eq!(
                    proxy_ref.stalled_count(),
                    round + 1,
                    "the leave is held back"
                );
                let second = tokio::spawn({
                    let lock = lock.clone();
                    let owner = Owner::current();
                    owner.scope(async move { lock.lock().await })
                });
                queued(server_ref, &lock, 1).await;
                (second, field)
            })
            .await;
        let (second, field) = granted;
        held.unlock().await.unwrap();
        let guard = within(HANG, "the second wait is handed the lock", second)
            .await
            .unwrap()
            .unwrap();
        // The old leave's copy arrives now.
        let before = calls(&server, "evalsha");
        proxy.release_stalled();
        eventually(HANG, "the held copy of the leave reaches Redis", || {
            calls(&server, "evalsha") > before
        })
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let on_server = server.cmd(&["HEXISTS", &name, &field]) == "1";
        assert!(
            on_server && !guard.is_lost(),
            "round {round}: a late copy of the first wait's leave gave back the second \
             wait's hold (field on server: {on_server}, guard lost: {})",
            guard.is_lost()
        );
        guard.unlock().await.unwrap();
    }
}

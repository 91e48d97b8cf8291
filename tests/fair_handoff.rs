//! The fair lock's one-hop handoff: a release makes a queued leasehold
//! head the holder and tells it `grant:<nonce>:<ms>`; the waiter adopts
//! the hold without a call. Cancelled, dead and deaf granted waiters, the
//! adopted guard's deadline, and mutual exclusion under churn.

use leasehold_testkit as support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::fred::interfaces::{HashesInterface, KeysInterface};
use leasehold::{Client, FairLock, LockGuard, Owner};
use support::fixture::{
    calls, client, client_with, dump_keys, eventually, exists, lock_keys, numsub, within,
};
use support::history::{check, Section};
use support::{Proxy, RedisServer};
use tokio::task::JoinSet;
use tokio::time::Instant;

const HANG: Duration = Duration::from_secs(60);

/// The grant hash of lock `name` (no key prefix, no braces in the name).
fn grants(name: &str) -> String {
    format!("leasehold_grant:{{{name}}}")
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

/// Waits until the queue holds `n` waiters, each listening on its own
/// channel.
async fn queued(server: &RedisServer, lock: &FairLock, n: usize) {
    eventually(HANG, &format!("{n} waiters queued and listening"), || {
        let q = queue(server, lock);
        q.len() == n
            && q.iter()
                .all(|f| numsub(server, &format!("{}:{f}", lock.channel())) >= 1)
    })
    .await;
}

/// A client whose scripts a test counts: it records no long wait (that
/// record is written with an `EVAL` whenever a wait passes the threshold,
/// which a count of the locks' scripts must not see).
async fn counting_client(server: &RedisServer) -> leasehold::Client {
    client_with(server, |b| b.record_waits_after(Duration::from_secs(3600))).await
}

/// The scripts `clients` have sent to delete request records so far
/// (`core/forget.rs`), to leave out of a count of the locks' own scripts.
fn forgetting(clients: &[&leasehold::Client]) -> u64 {
    clients
        .iter()
        .map(|c| leasehold::__bench::forgotten(c).0)
        .sum()
}

/// The locks' own script calls once they stop moving (the waiter made
/// its tries): the server's `EVALSHA` and `EVAL` calls but the record
/// batches of `clients`, both read until neither moves (a batch is counted
/// by its client before it is sent, so one on its way shows as a move).
async fn settled_scripts(server: &RedisServer, clients: &[&leasehold::Client]) -> u64 {
    let count = || {
        let batches = forgetting(clients);
        (batches, calls(server, "evalsha") + calls(server, "eval"))
    };
    let mut last = count();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = count();
        if now == last {
            return now.1 - now.0;
        }
        last = now;
    }
}

/// Takes and gives back `lock` once, which loads the fair lock's scripts
/// into the server (a first EVALSHA may be refused).
async fn loaded(lock: &FairLock) {
    lock.lock().await.unwrap().unlock().await.unwrap();
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    server.cmd(&["PTTL", key]).trim().parse().unwrap()
}

fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A waiter task on `client`: takes `lock` (fixed `lease`, or the
/// watchdog's), sends its guard and field back.
fn waiter(
    client: &Client,
    name: &str,
    lease: Option<Duration>,
) -> tokio::task::JoinHandle<(LockGuard, String)> {
    let lock = client.fair_lock(name);
    let client = client.clone();
    tokio::spawn(async move {
        let guard = match lease {
            Some(lease) => lock.lock_with_lease(lease).await.unwrap(),
            None => lock.lock().await.unwrap(),
        };
        (guard, format!("{}:{}", client.id(), Owner::current().id()))
    })
}

// === one hop ===

/// After the holder's `unlock()`, a queued leasehold waiter on another
/// client holds the lock with no acquire script of its own: the only
/// script the server runs is the release. The release made the waiter's
/// field the holder with a TTL of at most the grant lease (here its
/// fixed 3 s lease), popped it from the queue and zset, and marked the
/// grant; its unlock frees everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_lock_to_the_head_in_one_hop() {
    let server = RedisServer::start();
    let (a, b) = (
        counting_client(&server).await,
        counting_client(&server).await,
    );
    let lock = a.fair_lock("hop");
    loaded(&lock).await;
    let holder = lock.lock().await.unwrap();
    let waiting = waiter(&b, "hop", Some(Duration::from_secs(3)));
    queued(&server, &lock, 1).await;
    let field = queue(&server, &lock)[0].clone();
    assert_eq!(
        server
            .cmd(&["HGET", &grants("hop"), &field])
            .split(':')
            .next(),
        Some("3000"),
        "the waiter's grant entry holds its lease"
    );
    let before = settled_scripts(&server, &[&a, &b]).await;
    holder.unlock().await.unwrap();
    let (guard, got) = within(HANG, "the handed-over guard", waiting)
        .await
        .unwrap();
    let scripts = settled_scripts(&server, &[&a, &b]).await - before;
    assert_eq!(got, field);
    assert_eq!(
        scripts, 1,
        "{scripts} scripts: the waiter ran its own acquire"
    );
    assert_eq!(server.cmd(&["HGET", "hop", &field]), "1");
    let ttl = pttl(&server, "hop");
    assert!(ttl > 0 && ttl <= 3000, "TTL {ttl} ms");
    assert!(queue(&server, &lock).is_empty());
    assert_eq!(server.cmd(&["ZCARD", lock.timeout_key()]), "0");
    let marker = server.cmd(&["HGET", &grants("hop"), "!granted"]);
    assert!(
        marker.ends_with(&format!(":{field}")),
        "grant marker {marker:?}"
    );
    assert!(!guard.is_lost());
    assert_eq!(
        b.fair_lock("hop").hold_count().await.unwrap(),
        0,
        "another owner"
    );
    guard.unlock().await.unwrap();
    eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
}

/// A watchdog waiter is granted the grant lease (5 s), adopts it, and its
/// background renewal raises the TTL to the watchdog timeout; the guard
/// stays good throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_watchdog_hold_is_raised_to_the_watchdog_timeout() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let lock = a.fair_lock("raise");
    let holder = lock.lock().await.unwrap();
    let waiting = waiter(&b, "raise", None);
    queued(&server, &lock, 1).await;
    holder.unlock().await.unwrap();
    let (guard, field) = within(HANG, "the handed-over guard", waiting)
        .await
        .unwrap();
    assert_eq!(server.cmd(&["HGET", "raise", &field]), "1");
    let grant = leasehold::FairLock::GRANT.as_millis() as i64;
    eventually(HANG, "the TTL raised past the grant lease", || {
        pttl(&server, "raise") > grant
    })
    .await;
    assert!(!guard.is_lost());
    assert!(guard.lost_since().is_none());
    guard.unlock().await.unwrap();
    eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
}

/// The owner re-enters a lock it adopted while the grant marker is still
/// there (its first script on the lock since the grant): a re-entry
/// (count 2), not a second "fresh" grant that would end the first guard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentry_after_adoption_counts_as_a_reentry() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let lock = a.fair_lock("again");
    let holder = lock.lock().await.unwrap();
    let lock_b = b.fair_lock("again");
    let waiting = tokio::spawn(async move {
        let first = lock_b.lock().await.unwrap();
        let second = lock_b.lock().await.unwrap();
        let count = lock_b.hold_count().await.unwrap();
        (first, second, count)
    });
    queued(&server, &lock, 1).await;
    let field = queue(&server, &lock)[0].clone();
    holder.unlock().await.unwrap();
    let (first, second, count) = within(HANG, "both holds", waiting).await.unwrap();
    assert_eq!(count, 2);
    assert_eq!(server.cmd(&["HGET", "again", &field]), "2");
    assert!(!first.is_lost(), "the re-entry ended the adopted hold");
    assert_ne!(
        server.cmd(&["HGET", &grants("again"), "!granted"]),
        field,
        "the re-entry left the grant marker"
    );
    second.unlock().await.unwrap();
    assert!(exists(&server, "again"));
    first.unlock().await.unwrap();
    eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
}

// === in this process ===

/// When the head waiter is on a client of this process (here another
/// client, as a second service instance in one process would be), the
/// release hands it the grant itself, without waiting for Redis to carry
/// the message: the waiter's connections are cut off (a blackholed proxy)
/// just before the release, and it still holds the lock. Without the
/// direct hand-over it would sleep until its re-check (the holder's 30 s
/// lease) and then need Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_lock_to_a_waiter_of_this_process_directly() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr()).await;
    let a = client(&server).await;
    let b = client_with(&server, |builder| builder.url(&proxy.url())).await;
    let lock = a.fair_lock("here");
    loaded(&b.fair_lock("here")).await;
    let holder = lock.lock().await.unwrap();
    let waiting = waiter(&b, "here", Some(Duration::from_secs(3)));
    queued(&server, &lock, 1).await;
    let field = queue(&server, &lock)[0].clone();
    // The try's reply reaches the waiter and it goes back to sleep on its
    // channel (microseconds; a second leaves room for a busy machine).
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.blackhole();
    holder.unlock().await.unwrap();
    let (_guard, got) = within(
        Duration::from_secs(15),
        "the waiter, cut off from Redis, to hold the lock",
        waiting,
    )
    .await
    .unwrap();
    assert_eq!(got, field);
    assert_eq!(server.cmd(&["HGET", "here", &field]), "1");
    proxy.pass();
}

/// Two clients of one process hand a fair lock back and forth 30 times
/// (fixed 4 s leases: no raise after a grant). Every acquisition costs
/// one script (the try that queued the waiter, or the first uncontended
/// one) and every release one: the grant reaches the waiter twice (from
/// the releasing client, then from Redis), and the second copy must not
/// wake the owner's next wait for a try that cannot succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_handed_twice_wakes_its_waiter_once() {
    const ROUNDS: u64 = 30;
    let server = RedisServer::start();
    let (a, b) = (
        counting_client(&server).await,
        counting_client(&server).await,
    );
    for c in [&a, &b] {
        loaded(&c.fair_lock("twice")).await;
    }
    let before = settled_scripts(&server, &[&a, &b]).await;
    let (turn, _) = tokio::sync::watch::channel(0u64);
    let turn = Arc::new(turn);
    let mut sides = JoinSet::new();
    for (first, c) in [(1u64, a.clone()), (2u64, b.clone())] {
        let turn = turn.clone();
        sides.spawn(async move {
            let lock = c.fair_lock("twice");
            let mut rx = turn.subscribe();
            let mut k = first;
            while k <= ROUNDS {
                // Queue while the other side holds (its turn is k - 1).
                rx.wait_for(|t| *t + 1 >= k).await.unwrap();
                let guard = lock.lock_with_lease(Duration::from_secs(4)).await.unwrap();
                turn.send_replace(k);
                tokio::time::sleep(Duration::from_millis(50)).await;
                guard.unlock().await.unwrap();
                k += 2;
            }
        });
    }
    within(HANG, "30 handoffs", async {
        while let Some(side) = sides.join_next().await {
            side.unwrap();
        }
    })
    .await;
    let scripts = settled_scripts(&server, &[&a, &b]).await - before;
    assert!(
        scripts <= 2 * ROUNDS + 2,
        "{scripts} scripts for {ROUNDS} acquisitions and releases: a grant woke its waiter again"
    );
    eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
}

// === cancelled, dead, deaf ===

/// 150 rounds: a waiter's future is dropped at a spread of moments around the
/// holder's unlock (before, as, or after the grant runs). Whatever it
/// saw, the lock never sits with nobody for the grant lease: the next
/// waiter holds it well before a grant would have run out (bound: GRANT
/// minus a second; a given-back grant takes two round trips), and nothing
/// is left in Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_cancelled_as_it_is_granted_gives_the_lock_back_at_once() {
    const ROUNDS: u64 = 150;
    let server = RedisServer::start();
    let (a, b, c) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let lock = a.fair_lock("cancel");
    let bound = leasehold::FairLock::GRANT - Duration::from_secs(1);
    let (mut adopted, mut granted_then_dropped) = (0, 0);
    for round in 0..ROUNDS {
        let holder = lock.lock().await.unwrap();
        let cancelled = waiter(&b, "cancel", None);
        queued(&server, &lock, 1).await;
        let cancelled_field = queue(&server, &lock)[0].clone();
        let next = waiter(&c, "cancel", None);
        queued(&server, &lock, 2).await;
        // 0–1.2 ms after the unlock starts (it takes about one round
        // trip): before, as and after the grant runs.
        let delay = Duration::from_micros((round * 7919) % 1200);
        let unlock = tokio::spawn(async move { holder.unlock().await.unwrap() });
        let started = Instant::now();
        while started.elapsed() < delay {
            tokio::task::yield_now().await;
        }
        cancelled.abort();
        let freed = Instant::now();
        match cancelled.await {
            Ok((guard, _)) => {
                // It won the race: it holds the lock; give it back.
                adopted += 1;
                guard.unlock().await.unwrap();
            }
            Err(e) => {
                assert!(e.is_cancelled());
                // Granted, then dropped before it adopted (the background
                // leave may already have given it back).
                if server.cmd(&["HGET", "cancel", &cancelled_field]) == "1" {
                    granted_then_dropped += 1;
                }
            }
        }
        unlock.await.unwrap();
        let (guard, _) = within(HANG, "the next waiter", next).await.unwrap();
        let took = freed.elapsed();
        assert!(
            took < bound,
            "round {round}: the next waiter waited {took:?} (a grant left with nobody?)"
        );
        guard.unlock().await.unwrap();
        eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
    }
    println!(
        "{ROUNDS} rounds: the cancelled waiter got the lock first in {adopted}, \
         was seen granted after it was dropped in {granted_then_dropped}"
    );
}

/// 200 rounds: one owner's wait is cut short (its queue leave runs in the
/// background, possibly after a try of the next wait) and the owner waits
/// again at once, while the holder unlocks at a spread of moments. The
/// old wait's leave must never give back a grant made to the new wait:
/// when the new wait's guard arrives, the owner holds the lock in Redis
/// (count 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_leave_never_gives_back_a_newer_waits_grant() {
    const ROUNDS: u64 = 200;
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let lock = a.fair_lock("stale");
    for round in 0..ROUNDS {
        let holder = lock.lock().await.unwrap();
        let lock_b = b.fair_lock("stale");
        let cut = Duration::from_micros((round * 7919) % 1500);
        let owner = tokio::spawn(async move {
            let started = Instant::now();
            let first = async {
                while started.elapsed() < cut {
                    tokio::task::yield_now().await;
                }
            };
            // The first wait is cut short; the second starts at once.
            tokio::select! {
                guard = lock_b.lock() => guard.unwrap().unlock().await.unwrap(),
                () = first => {}
            }
            let guard = lock_b.lock().await.unwrap();
            (guard, lock_b.hold_count().await.unwrap())
        });
        let pause = Duration::from_micros((round * 104_729) % 2500);
        let started = Instant::now();
        while started.elapsed() < pause {
            tokio::task::yield_now().await;
        }
        holder.unlock().await.unwrap();
        let (guard, count) = within(HANG, "the owner's second wait", owner)
            .await
            .unwrap();
        assert_eq!(
            count, 1,
            "round {round}: the owner's hold is gone from Redis"
        );
        assert!(!guard.is_lost());
        guard.unlock().await.unwrap();
        eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
    }
}

/// A granted waiter that never adopts (a raw-command waiter with a grant
/// entry, nobody listening: a dead process) holds the lock for at most
/// the grant lease; the leasehold waiter behind it then gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_granted_waiter_holds_the_lock_at_most_the_grant_lease() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let lock = a.fair_lock("dead");
    let holder = lock.lock().await.unwrap();
    let dead = "0b1c3d52-1111-4222-8333-944455556666:9";
    let score = (epoch_ms() + 60_000).to_string();
    server.cmd(&["ZADD", lock.timeout_key(), &score, dead]);
    server.cmd(&["RPUSH", lock.queue_key(), dead]);
    server.cmd(&["HSET", &grants("dead"), dead, "30000:1"]);
    let next = waiter(&b, "dead", None);
    eventually(HANG, "the leasehold waiter queued", || {
        queue(&server, &lock).len() == 2
    })
    .await;
    holder.unlock().await.unwrap();
    let freed = Instant::now();
    assert_eq!(
        server.cmd(&["HGET", "dead", dead]),
        "1",
        "the dead head was granted"
    );
    let ttl = pttl(&server, "dead");
    let grant = leasehold::FairLock::GRANT.as_millis() as i64;
    assert!(ttl > 0 && ttl <= grant, "grant TTL {ttl} ms");
    let (guard, _) = within(HANG, "the next waiter", next).await.unwrap();
    println!(
        "the next waiter got the lock {:?} after the release",
        freed.elapsed()
    );
    guard.unlock().await.unwrap();
    eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
}

/// A grant whose message never reaches the waiter (done here by hand: the
/// release's effects without the PUBLISH) is taken by the waiter's next
/// script (after its timeout refresh finds it popped): as a fresh hold,
/// count 1, not a re-entry; one unlock frees the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_whose_message_is_lost_is_taken_by_the_next_script() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let lock = a.fair_lock("deaf");
    let raw_holder = "0b1c3d52-1111-4222-8333-944455556666:1";
    server.cmd(&["HSET", "deaf", raw_holder, "1"]);
    server.cmd(&["PEXPIRE", "deaf", "60000"]);
    let lock_b = b.fair_lock("deaf");
    let waiting = tokio::spawn(async move {
        let guard = lock_b.lock().await.unwrap();
        let count = lock_b.hold_count().await.unwrap();
        (guard, count)
    });
    queued(&server, &lock, 1).await;
    let field = queue(&server, &lock)[0].clone();
    // The grant, as release.lua does it, minus the message: in one script,
    // so the waiter's timeout refresh (every 2 s) cannot see it half done.
    const GRANT: &str = "local entry = redis.call('hget', KEYS[3], ARGV[1]) \
        local nonce = string.match(entry, ':(%d+)$') \
        redis.call('del', KEYS[1]) \
        redis.call('hset', KEYS[1], ARGV[1], 1) \
        redis.call('pexpire', KEYS[1], 5000) \
        redis.call('lpop', KEYS[2]) \
        redis.call('zrem', KEYS[4], ARGV[1]) \
        redis.call('hdel', KEYS[3], ARGV[1]) \
        redis.call('hset', KEYS[3], '!granted', nonce .. ':' .. ARGV[1]) \
        return nonce";
    let nonce = server.cmd(&[
        "EVAL",
        GRANT,
        "4",
        "deaf",
        lock.queue_key(),
        &grants("deaf"),
        lock.timeout_key(),
        &field,
    ]);
    assert!(!nonce.is_empty(), "the waiter had no grant entry");
    let (guard, count) = within(HANG, "the deaf waiter's guard", waiting)
        .await
        .unwrap();
    assert_eq!(count, 1, "the grant was counted as a re-entry");
    assert_eq!(server.cmd(&["HGET", "deaf", &field]), "1");
    assert!(!guard.is_lost());
    guard.unlock().await.unwrap();
    assert!(!exists(&server, "deaf"), "one unlock frees the key");
    eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
}

/// 10 rounds: the waiter's subscriber connection is killed right before
/// the release, so the grant message may reach nobody. The waiter still
/// ends up holding the lock exactly once (count 1), and one unlock frees
/// the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_subscriber_was_killed_still_adopts_once() {
    const ROUNDS: usize = 10;
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let lock = a.fair_lock("killed");
    for _ in 0..ROUNDS {
        let holder = lock.lock().await.unwrap();
        let lock_b = b.fair_lock("killed");
        let waiting = tokio::spawn(async move {
            let guard = lock_b.lock().await.unwrap();
            let count = lock_b.hold_count().await.unwrap();
            (guard, count)
        });
        queued(&server, &lock, 1).await;
        let _ = server.try_cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]);
        holder.unlock().await.unwrap();
        let (guard, count) = within(HANG, "the waiter's guard", waiting).await.unwrap();
        assert_eq!(count, 1);
        guard.unlock().await.unwrap();
        assert!(!exists(&server, "killed"), "one unlock frees the key");
    }
    eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
}

// === deadline ===

/// A granted fixed-lease waiter (300 ms) reports lost no later than Redis
/// lets the key go: its deadline counts from a time before the grant (its
/// latest try), never from when the message arrived. The waiter's client
/// sits behind a proxy delaying every chunk 40 ms (so the message arrives
/// well after the grant ran); five rounds; a direct connection polls the
/// key every millisecond.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_fixed_lease_is_lost_no_later_than_the_key_goes() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr()).await;
    let (a, probe) = (client(&server).await, client(&server).await);
    let b = client_with(&server, |builder| builder.url(&proxy.url())).await;
    proxy.delay(Duration::from_millis(40));
    let lock = a.fair_lock("deadline");
    for round in 0..5 {
        let holder = lock.lock().await.unwrap();
        let waiting = waiter(&b, "deadline", Some(Duration::from_millis(300)));
        queued(&server, &lock, 1).await;
        holder.unlock().await.unwrap();
        let (guard, field) = within(HANG, "the granted guard", waiting).await.unwrap();
        // The first poll that finds the key gone was sent after it went.
        let gone_by = within(HANG, "the key to expire", async {
            loop {
                let held: Option<i64> = probe.redis().hget("deadline", &field).await.unwrap();
                if held.is_none() {
                    return Instant::now();
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await;
        let lost = guard.lost_since();
        assert!(
            lost.is_some_and(|lost| lost <= gone_by),
            "round {round}: the key was gone while the guard trusted it (lost since {:?})",
            lost.map(|l| l.saturating_duration_since(gone_by))
        );
        drop(guard);
        eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
    }
}

// === churn ===

/// 3 clients × 3 tasks, 60 rounds each, on one fair lock: random waits,
/// fixed and watchdog leases, random cancellations around releases, and
/// every client's pub/sub connection killed every 150–400 ms (grant
/// messages lost). Every section takes a fencing token; no two owners
/// ever trust the lock at once, and nothing is left in Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_handoff_keeps_mutual_exclusion_under_churn() {
    const CLIENTS: usize = 3;
    const TASKS: usize = 3;
    const ROUNDS: u64 = 60;
    let server = Arc::new(RedisServer::start());
    let fence = client(&server).await;
    let sections = Arc::new(Mutex::new(Vec::new()));
    let cancelled = Arc::new(AtomicU64::new(0));
    let mut tasks = JoinSet::new();
    for c in 0..CLIENTS {
        let client = client(&server).await;
        for t in 0..TASKS {
            let (client, fence) = (client.clone(), fence.clone());
            let (sections, cancelled) = (sections.clone(), cancelled.clone());
            tasks.spawn(async move {
                let owner = format!("{c}:{t}");
                let lock = client.fair_lock("churn");
                let mut x = (c * 31 + t * 7 + 1) as u64;
                let mut rand = move |n: u64| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x % n
                };
                for _ in 0..ROUNDS {
                    let how = rand(3);
                    let wait = Duration::from_millis(rand(300));
                    let acquire = async {
                        match how {
                            0 => lock.lock().await.map(Some),
                            1 => lock.try_lock_for(wait).await,
                            _ => lock
                                .lock_with_lease(Duration::from_millis(2_000))
                                .await
                                .map(Some),
                        }
                    };
                    let got = if rand(4) == 0 {
                        let limit = Duration::from_millis(rand(30));
                        match tokio::time::timeout(limit, acquire).await {
                            Ok(got) => got,
                            Err(_) => {
                                cancelled.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                        }
                    } else {
                        acquire.await
                    };
                    let Some(guard) = got.unwrap() else { continue };
                    let token: u64 = fence.redis().incr("fence:churn").await.unwrap();
                    let start = Instant::now();
                    tokio::time::sleep(Duration::from_millis(rand(5))).await;
                    let end = Instant::now();
                    let mut s =
                        Section::new("churn", &owner, token, start.into_std(), end.into_std());
                    if let Some(lost) = guard.lost_since() {
                        s = s.lost_at(lost.into_std());
                    }
                    sections.lock().unwrap().push(s);
                    if rand(2) == 0 {
                        guard.unlock().await.unwrap();
                    } else {
                        drop(guard);
                    }
                }
            });
        }
    }
    let kills = Arc::new(AtomicU64::new(0));
    let chaos = {
        let (server, kills) = (server.clone(), kills.clone());
        tokio::spawn(async move {
            let mut x = 88_172_645_463_325_252u64;
            loop {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                tokio::time::sleep(Duration::from_millis(150 + x % 250)).await;
                let _ = server.try_cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]);
                kills.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    within(Duration::from_secs(300), "every task's rounds", async {
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
    })
    .await;
    chaos.abort();
    let sections = sections.lock().unwrap().clone();
    let mut spans: Vec<_> = sections.iter().map(|s| (s.start, s.end)).collect();
    spans.sort();
    let longest_idle = spans
        .windows(2)
        .map(|w| w[1].0.saturating_duration_since(w[0].1))
        .max()
        .unwrap_or_default();
    println!(
        "{} sections, {} cancelled acquires, {} pub/sub kills, longest idle gap {longest_idle:?}",
        sections.len(),
        cancelled.load(Ordering::Relaxed),
        kills.load(Ordering::Relaxed)
    );
    if let Err(violations) = check(&sections) {
        panic!("mutual exclusion broken: {violations:#?}");
    }
    let _: () = fence.redis().del("fence:churn").await.unwrap();
    // Every task has ended: whatever it held or queued is given back at
    // once, in the background (a leftover would block the next user).
    let left_at = Instant::now();
    let mut told = false;
    while !lock_keys(&server).is_empty() {
        if !told && left_at.elapsed() > Duration::from_secs(5) {
            println!(
                "keys left 5 s after every task ended:{}",
                dump_keys(&server)
            );
            told = true;
        }
        assert!(
            left_at.elapsed() < HANG,
            "keys left after every task ended:{}",
            dump_keys(&server)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

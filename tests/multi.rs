//! MultiLock: all or nothing on every path (a busy member, a member
//! waited for too long, a dropped acquire, a dropped guard), one global
//! order so overlapping MultiLocks never deadlock, and a guard lost as soon
//! as any member is.
//!
//! Members live on two independent servers (two clients), as a MultiLock
//! over several Redis deployments would.

use leasehold_testkit as support;

use std::time::Duration;

use leasehold::fred::interfaces::KeysInterface;
use leasehold::{Client, Error, Lock, MultiLock};
use support::fixture::{client, client_with, eventually, lock_keys, within};
use support::RedisServer;
use tokio::task::JoinSet;

const HANG: Duration = Duration::from_secs(120);

/// Two servers, a client on each, and a second pair of clients (another
/// process, as far as the locks can tell).
struct Setup {
    servers: [RedisServer; 2],
    mine: [Client; 2],
    theirs: [Client; 2],
}

async fn setup() -> Setup {
    let servers = [RedisServer::start(), RedisServer::start()];
    let mine = [client(&servers[0]).await, client(&servers[1]).await];
    let theirs = [client(&servers[0]).await, client(&servers[1]).await];
    Setup {
        servers,
        mine,
        theirs,
    }
}

impl Setup {
    /// Lock `name` on server `s` through this side's client.
    fn lock(&self, s: usize, name: &str) -> Lock {
        self.mine[s].lock(name)
    }

    /// Keys of lock state left on either server.
    fn held(&self) -> Vec<String> {
        self.servers.iter().flat_map(lock_keys).collect()
    }

    async fn shutdown(self) {
        for c in self.mine.iter().chain(&self.theirs) {
            within(HANG, "shutdown", c.shutdown()).await.unwrap();
        }
    }
}

/// 4 members on 2 servers; one of them is held by another client. Whatever
/// its place in the order, `try_lock` returns `None` and none of the other
/// members stays held; with it free, `try_lock` takes all four.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_is_all_or_nothing() {
    let s = setup().await;
    let names = [(0, "m:a"), (1, "m:b"), (0, "m:c"), (1, "m:d")];
    let multi = MultiLock::new(names.iter().map(|(srv, n)| s.lock(*srv, n)));
    for &(srv, name) in &names {
        let other = s.theirs[srv].lock(name).lock().await.unwrap();
        for round in 0..5 {
            assert!(
                multi.try_lock().await.unwrap().is_none(),
                "busy member {name}, round {round}: try_lock took it"
            );
            assert_eq!(
                s.held(),
                vec![name.to_owned()],
                "busy member {name}, round {round}: only the busy member may be held"
            );
        }
        other.unlock().await.unwrap();
    }
    let guard = multi.try_lock().await.unwrap().expect("all four are free");
    assert_eq!(guard.guards().len(), 4);
    let mut held = s.held();
    held.sort();
    assert_eq!(held, vec!["m:a", "m:b", "m:c", "m:d"]);
    guard.unlock().await.unwrap();
    assert!(s.held().is_empty());
    s.shutdown().await;
}

/// A member held elsewhere for longer than the wait: `try_lock_for` gives
/// up with `None`, holding nothing, and again after the member wait cut
/// its attempts short several times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_for_gives_everything_back() {
    let s = setup().await;
    let multi = MultiLock::new(vec![s.lock(0, "w:a"), s.lock(1, "w:b"), s.lock(0, "w:c")])
        .with_member_wait(Duration::from_millis(100));
    let last = multi.members().last().unwrap().clone();
    let busy = s.theirs[if last.client_id() == s.mine[0].id() {
        0
    } else {
        1
    }]
    .lock(last.name())
    .lock()
    .await
    .unwrap();
    let got = within(
        HANG,
        "try_lock_for",
        multi.try_lock_for(Duration::from_millis(700)),
    )
    .await
    .unwrap();
    assert!(got.is_none());
    assert_eq!(s.held(), vec![last.key().to_owned()]);
    busy.unlock().await.unwrap();
    let guard = multi
        .try_lock_for(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("free now");
    guard.unlock().await.unwrap();
    s.shutdown().await;
}

/// The deadlock a MultiLock must not hold forever: a plain lock holds B and
/// then waits for A, while a MultiLock over {A, B} holds A (first in the
/// order) and waits for B. The member wait makes the MultiLock give A
/// back, so both finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_members_are_not_held_forever() {
    let s = setup().await;
    for round in 0..5 {
        let (a, b) = (format!("d{round}:a"), format!("d{round}:b"));
        let multi = MultiLock::new(vec![s.lock(0, &b), s.lock(0, &a)])
            .with_member_wait(Duration::from_millis(200));
        assert_eq!(multi.members()[0].name(), a, "A is taken first");
        let plain_b = s.theirs[0].lock(&b);
        let plain_a = s.theirs[0].lock(&a);
        let held_b = plain_b.lock().await.unwrap();
        let m = tokio::spawn(async move {
            let g = multi.lock().await.unwrap();
            g.unlock().await.unwrap();
        });
        // The MultiLock takes A and waits for B.
        eventually(HANG, "the MultiLock holds A", || {
            support::fixture::exists(&s.servers[0], &a)
        })
        .await;
        let p = tokio::spawn(async move {
            let held_a = plain_a.lock().await.unwrap();
            held_a.unlock().await.unwrap();
            held_b.unlock().await.unwrap();
        });
        within(
            HANG,
            "the plain lock and the MultiLock both finish",
            async {
                p.await.unwrap();
                m.await.unwrap();
            },
        )
        .await;
    }
    assert!(s.held().is_empty());
    s.shutdown().await;
}

/// Two MultiLocks over overlapping sets, listed in opposite orders, 8 tasks
/// each, 25 rounds per task: every task finishes (no deadlock), and a
/// counter kept with a non-atomic GET + SET under the shared members is
/// exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_multilocks_never_deadlock() {
    const TASKS: usize = 8;
    const ROUNDS: usize = 25;
    let s = setup().await;
    let forward = MultiLock::new(vec![
        s.lock(0, "o:a"),
        s.lock(1, "o:b"),
        s.lock(0, "o:c"),
        s.lock(1, "o:x"),
    ]);
    let backward = MultiLock::new(vec![
        s.theirs[1].lock("o:y"),
        s.theirs[0].lock("o:c"),
        s.theirs[1].lock("o:b"),
        s.theirs[0].lock("o:a"),
    ]);
    let mut tasks = JoinSet::new();
    for (multi, redis) in [
        (forward, s.mine[0].clone()),
        (backward, s.theirs[0].clone()),
    ] {
        for _ in 0..TASKS {
            let (multi, redis) = (multi.clone(), redis.clone());
            tasks.spawn(async move {
                for _ in 0..ROUNDS {
                    let g = multi.lock().await.unwrap();
                    assert!(!g.is_lost());
                    let n: Option<i64> = redis.redis().get("o:counter").await.unwrap();
                    tokio::task::yield_now().await;
                    let () = redis
                        .redis()
                        .set("o:counter", n.unwrap_or(0) + 1, None, None, false)
                        .await
                        .unwrap();
                    g.unlock().await.unwrap();
                }
            });
        }
    }
    within(HANG, "every task of both MultiLocks", async {
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
    })
    .await;
    assert_eq!(
        s.servers[0].cmd(&["GET", "o:counter"]),
        (2 * TASKS * ROUNDS).to_string()
    );
    let held: Vec<String> = s.held().into_iter().filter(|k| k != "o:counter").collect();
    assert!(held.is_empty(), "{held:?}");
    s.shutdown().await;
}

/// 300 rounds of `timeout(random 0–6 ms, lock())` on 3 members over 2
/// servers, with another task taking one member now and then: a dropped
/// acquire, at whatever point, leaves nothing held once things settle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_acquires_leave_nothing_held() {
    let s = setup().await;
    let multi = MultiLock::new(vec![s.lock(0, "c:a"), s.lock(1, "c:b"), s.lock(0, "c:c")])
        .with_member_wait(Duration::from_millis(3));
    let rival = s.theirs[1].lock("c:b");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let disturber = tokio::spawn(async move {
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            let g = rival.lock().await.unwrap();
            tokio::time::sleep(Duration::from_millis(2)).await;
            g.unlock().await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let (mut got, mut cancelled) = (0, 0);
    within(HANG, "300 rounds", async {
        for _ in 0..300 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let wait = Duration::from_micros(seed % 6_000);
            match tokio::time::timeout(wait, multi.lock()).await {
                Err(_) => cancelled += 1,
                Ok(g) => {
                    got += 1;
                    drop(g.unwrap()); // released in the background
                }
            }
        }
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    disturber.await.unwrap();
    eprintln!("{got} acquired, {cancelled} cancelled");
    assert!(
        cancelled > 0,
        "no acquire was cancelled: make the timeouts shorter"
    );
    eventually(
        Duration::from_secs(20),
        "nothing held on either server",
        || s.held().is_empty(),
    )
    .await;
    s.shutdown().await;
}

/// A dropped guard releases every member (in the background).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_guard_releases_every_member() {
    let s = setup().await;
    let multi = MultiLock::new(vec![s.lock(0, "g:a"), s.lock(1, "g:b")]);
    let guard = multi.lock().await.unwrap();
    assert_eq!(s.held().len(), 2);
    drop(guard);
    eventually(Duration::from_secs(20), "both members released", || {
        s.held().is_empty()
    })
    .await;
    s.shutdown().await;
}

/// The guard is lost as soon as any member is: one member force-unlocked
/// by another client is noticed by the watchdog (1 s timeout), the guard
/// reports lost, and unlock says the member was not held while still
/// releasing the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_is_lost_when_any_member_is() {
    let servers = [RedisServer::start(), RedisServer::start()];
    let wd = |b: leasehold::ClientBuilder| b.watchdog_timeout(Duration::from_secs(1));
    let mine = [
        client_with(&servers[0], wd).await,
        client_with(&servers[1], wd).await,
    ];
    let other = client(&servers[1]).await;
    let multi = MultiLock::new(vec![mine[0].lock("l:a"), mine[1].lock("l:b")]);
    let guard = multi.lock().await.unwrap();
    assert!(!guard.is_lost());
    assert!(guard.validity() > Duration::ZERO);
    assert!(other.lock("l:b").force_unlock().await.unwrap());
    within(Duration::from_secs(20), "lost()", guard.lost()).await;
    assert!(guard.is_lost());
    assert_eq!(guard.validity(), Duration::ZERO);
    assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));
    assert!(
        lock_keys(&servers[0]).is_empty(),
        "the other member was released"
    );
    for c in mine.iter().chain([&other]) {
        c.shutdown().await.unwrap();
    }
}

/// A fixed lease: the guard's validity is at most the lease, and the guard
/// reports lost once the first member's lease ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_lease_guard_is_lost_when_it_ends() {
    let s = setup().await;
    let multi = MultiLock::new(vec![s.lock(0, "f:a"), s.lock(1, "f:b")]);
    let lease = Duration::from_millis(500);
    let guard = multi.lock_with_lease(lease).await.unwrap();
    assert!(guard.validity() <= lease);
    within(
        Duration::from_secs(20),
        "lost() at the lease's end",
        guard.lost(),
    )
    .await;
    assert!(guard.is_lost());
    eventually(Duration::from_secs(20), "the keys expired", || {
        s.held().is_empty()
    })
    .await;
    assert!(matches!(guard.unlock().await, Err(Error::NotHeld { .. })));
    s.shutdown().await;
}

/// Re-entrant: the same task takes the MultiLock twice; each member counts
/// two holds, and the members stay held until both guards are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multilock_is_reentrant() {
    let s = setup().await;
    let (a, b) = (s.lock(0, "r:a"), s.lock(1, "r:b"));
    let multi = MultiLock::new(vec![a.clone(), b.clone()]);
    let outer = multi.lock().await.unwrap();
    let inner = multi.try_lock().await.unwrap().expect("re-enters");
    assert_eq!(a.hold_count().await.unwrap(), 2);
    assert_eq!(b.hold_count().await.unwrap(), 2);
    inner.unlock().await.unwrap();
    assert_eq!(s.held().len(), 2);
    outer.unlock().await.unwrap();
    assert!(s.held().is_empty());
    s.shutdown().await;
}

/// Bad input is `InvalidArgument`, before anything is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_invalid_argument() {
    let s = setup().await;
    let empty = MultiLock::new(Vec::<Lock>::new());
    assert!(matches!(empty.lock().await, Err(Error::InvalidArgument(_))));
    let multi = MultiLock::new(vec![s.lock(0, "i:a")]);
    assert!(matches!(
        multi.lock_with_lease(Duration::ZERO).await,
        Err(Error::InvalidArgument(_))
    ));
    let nameless = MultiLock::new(vec![s.lock(0, "i:a"), s.lock(1, "")]);
    assert!(matches!(
        nameless.try_lock().await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(s.held().is_empty(), "nothing left by a failed acquire");
    s.shutdown().await;
}

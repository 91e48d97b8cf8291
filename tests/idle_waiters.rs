//! What waiting costs Redis (issue 48): a client's waiters on one lock are
//! kept alive and re-checked by the client, not each by itself, so the
//! commands Redis runs while they wait grow with clients and locks, not
//! with waiters; and a client that dies with waiters queued holds a fair
//! lock's queue up for a bounded time (real processes, `SIGKILL`).
//!
//! Commands are counted with `INFO stats` (`total_commands_processed`,
//! the commands scripts run included) over a window in which only the
//! test's own clients are connected. The bounds are loose (several times
//! what the design costs, many times below what one refresh or re-check
//! per waiter costs), so a busy machine cannot flake them.

use leasehold_testkit as support;

use std::time::Duration;

use leasehold::{Client, FairLock};
use support::fixture::{client, client_with, eventually, lock_keys, numsub, within};
use support::RedisServer;
use tokio::task::JoinSet;
use tokio::time::Instant;

const HANG: Duration = Duration::from_secs(60);

/// Commands the server has run, scripts' inner commands included.
fn commands(server: &RedisServer) -> u64 {
    server
        .cmd(&["INFO", "stats"])
        .lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("INFO stats has total_commands_processed")
}

/// Commands per second over `window`, less the two `INFO` calls.
async fn rate(server: &RedisServer, window: Duration) -> f64 {
    let before = commands(server);
    tokio::time::sleep(window).await;
    let after = commands(server);
    after.saturating_sub(before).saturating_sub(1) as f64 / window.as_secs_f64()
}

fn llen(server: &RedisServer, key: &str) -> usize {
    server.cmd(&["LLEN", key]).trim().parse().unwrap_or(0)
}

/// Waits (bounded) until every task of `waiters` has ended well.
async fn served(waiters: &mut JoinSet<()>) {
    within(HANG, "every waiter served", async {
        while let Some(done) = waiters.join_next().await {
            done.unwrap();
        }
    })
    .await;
}

/// Starts `n` waits of `lock` spread over `clients`, each dropped at the
/// end of the test (the JoinSet).
fn fair_waiters(clients: &[Client], name: &str, n: usize) -> JoinSet<()> {
    let mut tasks = JoinSet::new();
    for i in 0..n {
        let lock = clients[i % clients.len()].fair_lock(name);
        tasks.spawn(async move {
            let guard = lock.lock().await.unwrap();
            guard.unlock().await.unwrap();
        });
    }
    tasks
}

/// 100 fair waiters on two clients cost Redis a few commands a second in
/// all (each client sets one alive key every 2 s, and its oldest waiter
/// re-checks at the lock's TTL), where each waiter refreshing its own
/// place cost 2.5 commands a second per waiter (about 250 in all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_waiters_cost_redis_per_client_not_per_waiter() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let clients = [client(&server).await, client(&server).await];
    let lock = holder.fair_lock("idle");
    let guard = lock.lock().await.unwrap();
    let mut waiters = fair_waiters(&clients, "idle", 100);
    eventually(HANG, "100 waiters queued", || {
        llen(&server, lock.queue_key()) == 100
    })
    .await;
    // Past the first alive-key writes and the first tries' settling.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let per_s = rate(&server, Duration::from_secs(8)).await;
    println!("100 fair waiters on 2 clients: {per_s:.1} Redis commands/s");
    assert!(
        per_s < 20.0,
        "100 idle fair waiters cost Redis {per_s:.1} commands/s"
    );
    // Still served in order, and nothing is left.
    guard.unlock().await.unwrap();
    served(&mut waiters).await;
    eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
}

/// 100 plain waiters on two clients with a 1 s recheck interval: the
/// channel's clock re-checks one waiter per client and second, not every
/// waiter (which cost about 100 tries a second).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_waiters_recheck_once_per_client_and_lock() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let fast = |b: leasehold::ClientBuilder| b.recheck_interval(Duration::from_secs(1));
    let clients = [
        client_with(&server, fast).await,
        client_with(&server, fast).await,
    ];
    let guard = holder.lock("idle").lock().await.unwrap();
    let mut waiters = JoinSet::new();
    for i in 0..100 {
        let lock = clients[i % 2].lock("idle");
        waiters.spawn(async move {
            let guard = lock.lock().await.unwrap();
            guard.unlock().await.unwrap();
        });
    }
    eventually(HANG, "both clients subscribed", || {
        numsub(&server, "redisson_lock__channel:{idle}") == 2
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let per_s = rate(&server, Duration::from_secs(6)).await;
    println!("100 plain waiters on 2 clients, recheck 1 s: {per_s:.1} Redis commands/s");
    assert!(
        per_s < 60.0,
        "100 idle plain waiters cost Redis {per_s:.1} commands/s"
    );
    guard.unlock().await.unwrap();
    served(&mut waiters).await;
    eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
}

/// A lock whose holder is gone (its fixed lease runs out; nobody
/// publishes) is found free by the oldest waiter of each client; when that
/// one gives up first, the next waiter of its client takes over the
/// re-checking (within the recheck interval) instead of sleeping until
/// its own bound (an hour).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_waiter_of_a_client_rechecks_when_its_first_gives_up() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let waiting = client_with(&server, |b| b.recheck_interval(Duration::from_secs(2))).await;
    let lock = holder.fair_lock("gone");
    // A holder that never unlocks: its lease runs out in 6 s.
    let guard = lock.lock_with_lease(Duration::from_secs(6)).await.unwrap();
    std::mem::forget(guard);
    let first = {
        let lock = waiting.fair_lock("gone");
        tokio::spawn(async move { drop(lock.lock().await) })
    };
    eventually(HANG, "the first waiter queued", || {
        llen(&server, lock.queue_key()) == 1
    })
    .await;
    let second = {
        let lock = waiting.fair_lock("gone");
        tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            guard.unlock().await.unwrap();
        })
    };
    eventually(HANG, "the second waiter queued", || {
        llen(&server, lock.queue_key()) == 2
    })
    .await;
    // The first gives up (its leave runs in the background).
    first.abort();
    let _ = first.await;
    let started = Instant::now();
    within(HANG, "the second waiter took the lock", second)
        .await
        .unwrap();
    println!(
        "the second waiter held the lock {:?} after the first gave up",
        started.elapsed()
    );
}

const CHILD_URL: &str = "LEASEHOLD_IDLE_URL";
const CHILD_NAME: &str = "LEASEHOLD_IDLE_NAME";
const CHILD_WAITERS: &str = "LEASEHOLD_IDLE_WAITERS";

/// Not a test: the body of a child process that queues the number of
/// waiters the parent names on its fair lock and waits until it is
/// killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of the killed-client tests"]
async fn child_queues_waiters() {
    let (Ok(url), Ok(name), Ok(n)) = (
        std::env::var(CHILD_URL),
        std::env::var(CHILD_NAME),
        std::env::var(CHILD_WAITERS),
    ) else {
        return;
    };
    let client = Client::connect(&url).await.unwrap();
    let n: usize = n.parse().unwrap();
    let _waiters = fair_waiters(&[client], &name, n);
    std::future::pending::<()>().await;
}

/// A child process with `n` waiters queued on `lock` (all of them ahead of
/// anything queued later).
async fn spawn_child(server: &RedisServer, lock: &FairLock, n: usize) -> std::process::Child {
    let before = llen(server, lock.queue_key());
    let child = support::fixture::child("child_queues_waiters")
        .env(CHILD_URL, server.url())
        .env(CHILD_NAME, lock.name())
        .env(CHILD_WAITERS, n.to_string())
        .spawn()
        .expect("re-exec the test binary");
    eventually(HANG, "the child's waiters queued", || {
        llen(server, lock.queue_key()) == before + n
    })
    .await;
    child
}

/// A client process killed (`SIGKILL`) with 20 waiters at the head of the
/// queue: the waiter behind them gets the lock a bounded time after the
/// unlock (the grant to the first dead waiter runs out, 5 s, and the rest
/// are gone with their client's alive key), not 20 grants later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_client_with_queued_waiters_holds_the_queue_up_for_a_bounded_time() {
    let server = RedisServer::start();
    let (holder, live) = (client(&server).await, client(&server).await);
    let lock = holder.fair_lock("killed-many");
    let guard = lock.lock().await.unwrap();
    let mut child = spawn_child(&server, &lock, 20).await;
    // Queued long enough that the child's alive key was written.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let waiter = {
        let lock = live.fair_lock("killed-many");
        tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            let at = Instant::now();
            guard.unlock().await.unwrap();
            at
        })
    };
    eventually(HANG, "the live waiter queued behind", || {
        llen(&server, lock.queue_key()) == 21
    })
    .await;
    child.kill().unwrap();
    child.wait().unwrap();
    let unlocked = Instant::now();
    guard.unlock().await.unwrap();
    let bound = FairLock::THREAD_WAIT + FairLock::GRANT + Duration::from_secs(20);
    let acquired = within(bound, "the waiter behind the killed client", waiter)
        .await
        .unwrap();
    println!(
        "the waiter behind 20 killed waiters held the lock {:?} after the unlock",
        acquired - unlocked
    );
    eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
}

/// The holder's lease runs out (nobody unlocks) while a killed client's
/// waiters head the queue: the live waiter behind them, the oldest of its
/// client, re-checks, finds them gone with their client's alive key, and
/// takes the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_whose_holder_and_first_waiters_died_goes_to_the_live_waiter() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let live = client_with(&server, |b| b.recheck_interval(Duration::from_secs(2))).await;
    let lock = holder.fair_lock("all-gone");
    std::mem::forget(lock.lock_with_lease(Duration::from_secs(8)).await.unwrap());
    let mut child = spawn_child(&server, &lock, 5).await;
    let waiter = {
        let lock = live.fair_lock("all-gone");
        tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            guard.unlock().await.unwrap();
        })
    };
    eventually(HANG, "the live waiter queued behind", || {
        llen(&server, lock.queue_key()) == 6
    })
    .await;
    child.kill().unwrap();
    child.wait().unwrap();
    within(HANG, "the live waiter took the lock", waiter)
        .await
        .unwrap();
    eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
}

/// A user that may not write `leasehold_alive:*` keys: its waiters refresh
/// their own places (entries without `:c`), and are served in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_alive_key_each_waiter_refreshes_its_own_place() {
    let server = RedisServer::start();
    server.cmd(&[
        "ACL",
        "SETUSER",
        "noalive",
        "on",
        ">pw",
        "~fb:*",
        "~redisson_*",
        "~leasehold_latch:*",
        "~leasehold:client:*",
        "~leasehold_grant:*",
        "&*",
        "+@all",
    ]);
    let holder = client_with(&server, |b| b.key_prefix("fb:")).await;
    let url = server.url().replace("redis://", "redis://noalive:pw@");
    let user = Client::builder()
        .url(&url)
        .key_prefix("fb:")
        .build()
        .await
        .unwrap();
    let lock = holder.fair_lock("fallback");
    let guard = lock.lock().await.unwrap();
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = JoinSet::new();
    for i in 0..5 {
        let lock = user.fair_lock("fallback");
        let order = order.clone();
        waiters.spawn(async move {
            let guard = lock.lock().await.unwrap();
            order.lock().unwrap().push(i);
            guard.unlock().await.unwrap();
        });
        eventually(HANG, "queued", || llen(&server, lock_queue()) == i + 1).await;
    }
    // Past the first refresh: the entries still carry their own signs.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let entries = server.cmd(&["HVALS", "leasehold_grant:{fb:fallback}"]);
    assert!(
        !entries.is_empty() && !entries.contains(":c"),
        "entries: {entries}"
    );
    guard.unlock().await.unwrap();
    served(&mut waiters).await;
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    eventually(HANG, "no key left", || lock_keys(&server).is_empty()).await;
}

fn lock_queue() -> &'static str {
    "redisson_lock_queue:{fb:fallback}"
}

/// Waiters on ten locks cost one alive key per client on a single server:
/// `SET`s in a window are about one per client and 2 s, not one per
/// client, lock and 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_waiters_on_many_locks_renew_one_key_per_client() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let clients = [client(&server).await, client(&server).await];
    let mut guards = Vec::new();
    let mut waiters = Vec::new();
    for l in 0..10 {
        let name = format!("many-{l}");
        guards.push(holder.fair_lock(&name).lock().await.unwrap());
        waiters.push(fair_waiters(&clients, &name, 10));
    }
    eventually(HANG, "100 waiters queued", || {
        (0..10).all(|l| llen(&server, &format!("redisson_lock_queue:{{many-{l}}}")) == 10)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = support::fixture::calls(&server, "set");
    let per_s = rate(&server, Duration::from_secs(8)).await;
    let sets = support::fixture::calls(&server, "set") - before;
    println!(
        "100 fair waiters on 10 locks, 2 clients: {per_s:.1} Redis commands/s, {sets} SETs in 8 s"
    );
    assert!(sets <= 12, "{sets} SETs of alive keys in 8 s (2 clients)");
    assert!(per_s < 20.0, "{per_s:.1} commands/s");
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    for mut w in waiters {
        served(&mut w).await;
    }
}

/// On a cluster a client keeps one alive key per lock, in the lock's slot
/// (a script reads its own slot's keys only): waiters queued past their
/// own signs stay queued, and are served in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_alive_key_is_in_the_locks_slot() {
    let cluster = support::cluster::RedisCluster::start(3, 0);
    let url = cluster.url();
    let a = Client::builder().url(&url).build().await.unwrap();
    let b = Client::builder().url(&url).build().await.unwrap();
    let name = "alive-cluster";
    let lock = a.fair_lock(name);
    let queue_key = lock.queue_key().to_owned();
    let holder = lock.lock().await.unwrap();
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = JoinSet::new();
    for i in 0..4 {
        let lock = if i % 2 == 0 { &b } else { &a }.fair_lock(name);
        let order = order.clone();
        tasks.spawn(async move {
            let guard = lock.lock().await.unwrap();
            order.lock().unwrap().push(i);
            guard.unlock().await.unwrap();
        });
        let want = (i + 1).to_string();
        eventually(HANG, "queued", || {
            cluster.cmd_on_key(name, &["LLEN", queue_key.as_str()]) == want
        })
        .await;
    }
    // Past every waiter's own sign (5 s): their clients' keys keep them.
    tokio::time::sleep(FairLock::THREAD_WAIT + Duration::from_secs(2)).await;
    let alive = format!("leasehold_alive:{{{name}}}:{}", a.id());
    assert_eq!(cluster.cmd_on_key(name, &["EXISTS", &alive]), "1");
    // A single try of another client finds the lock busy.
    assert!(b.fair_lock(name).try_lock().await.unwrap().is_none());
    assert_eq!(cluster.cmd_on_key(name, &["LLEN", queue_key.as_str()]), "4");
    holder.unlock().await.unwrap();
    within(HANG, "every waiter on the cluster", async {
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
    })
    .await;
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
}

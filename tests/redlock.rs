//! RedLock over 3 independent redis-servers: held by a majority with one
//! server down, a clean failure (saying which servers failed) with two
//! down, a guard that keeps its majority across a server restarted empty
//! or is told lost when it cannot, exclusion between RedLock instances,
//! and dropped acquires that leave nothing held anywhere.

use leasehold_testkit as support;

use std::time::Duration;

use leasehold::fred::interfaces::KeysInterface;
use leasehold::{Client, ClientBuilder, Error, RedLock, ServerOutcome};
use support::fixture::{client, client_with, eventually, lock_keys, within};
use support::RedisServer;
use tokio::task::JoinSet;

const HANG: Duration = Duration::from_secs(120);
/// Generous: the machine is shared, and a slow answer is not what these
/// tests are about (except where a server is down).
const SERVER_TIMEOUT: Duration = Duration::from_secs(1);

struct Servers {
    servers: Vec<RedisServer>,
}

impl Servers {
    fn start() -> Servers {
        Servers {
            servers: (0..3).map(|_| RedisServer::start()).collect(),
        }
    }

    /// One client per server, configured by `f`.
    async fn clients(&self, f: fn(ClientBuilder) -> ClientBuilder) -> Vec<Client> {
        let mut clients = Vec::new();
        for s in &self.servers {
            clients.push(client_with(s, f).await);
        }
        clients
    }

    /// Lock keys left on server `i`.
    fn held(&self, i: usize) -> Vec<String> {
        lock_keys(&self.servers[i])
    }

    /// Lock keys left on every running server.
    fn held_anywhere(&mut self) -> Vec<String> {
        let mut all = Vec::new();
        for s in self.servers.iter_mut() {
            if s.is_running() {
                all.extend(lock_keys(s));
            }
        }
        all
    }
}

fn plain(b: ClientBuilder) -> ClientBuilder {
    b.command_timeout(Duration::from_secs(2))
}

fn watchdog_1s(b: ClientBuilder) -> ClientBuilder {
    b.command_timeout(Duration::from_secs(2))
        .watchdog_timeout(Duration::from_secs(1))
}

async fn shutdown(clients: &[Client]) {
    for c in clients {
        // A client of a dead server may take its command timeout to close.
        let _ = tokio::time::timeout(Duration::from_secs(30), c.shutdown()).await;
    }
}

/// With one of 3 servers killed, a RedLock still acquires (on the other
/// two), its guard is valid, and unlock leaves nothing held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_with_one_server_killed() {
    let mut s = Servers::start();
    let clients = s.clients(plain).await;
    s.servers[2].kill();
    let red = RedLock::new(clients.clone(), "one-down").with_server_timeout(SERVER_TIMEOUT);
    for round in 0..5 {
        let guard = within(
            HANG,
            "try_lock_for",
            red.try_lock_for(Duration::from_secs(20)),
        )
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("round {round}: not acquired with 2 of 3 servers up"));
        assert_eq!(guard.guards().len(), 2, "held on the two live servers");
        assert!(!guard.is_lost());
        assert!(guard.validity() > Duration::ZERO);
        assert_eq!(s.held(0), vec!["one-down"]);
        assert_eq!(s.held(1), vec!["one-down"]);
        within(HANG, "unlock", guard.unlock()).await.unwrap();
        assert!(s.held(0).is_empty() && s.held(1).is_empty());
    }
    shutdown(&clients).await;
}

/// With two of 3 servers killed, `try_lock_for` fails with `NoQuorum`,
/// which says which servers failed and that the live one acquired, and
/// nothing stays held on the live server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_cleanly_with_two_servers_killed() {
    let mut s = Servers::start();
    let clients = s.clients(plain).await;
    s.servers[0].kill();
    s.servers[2].kill();
    let red =
        RedLock::new(clients.clone(), "two-down").with_server_timeout(Duration::from_millis(300));
    let err = within(
        HANG,
        "try_lock_for",
        red.try_lock_for(Duration::from_secs(2)),
    )
    .await
    .expect_err("no majority with 2 of 3 servers down");
    let text = err.to_string();
    eprintln!("{text}");
    let Error::NoQuorum {
        name,
        quorum,
        servers,
    } = err
    else {
        panic!("expected NoQuorum, got {text}");
    };
    assert_eq!((name.as_str(), quorum, servers.len()), ("two-down", 2, 3));
    for r in &servers {
        assert_eq!(r.client, clients[r.server].id());
        let live = r.server == 1;
        match (&r.outcome, live) {
            (ServerOutcome::Acquired, true) => {}
            (ServerOutcome::TimedOut | ServerOutcome::Failed(_), false) => {}
            (other, _) => panic!("server {}: unexpected outcome {other}", r.server),
        }
    }
    assert!(
        text.contains("1 of 3 servers acquired (given back), 2 needed"),
        "{text}"
    );
    assert!(
        text.contains("server 0") && text.contains("server 2"),
        "{text}"
    );
    assert!(
        s.held(1).is_empty(),
        "the live server was released: {:?}",
        s.held(1)
    );
    // `try_lock` says the same after a single round.
    assert!(matches!(red.try_lock().await, Err(Error::NoQuorum { .. })));
    assert!(s.held(1).is_empty());
    shutdown(&clients).await;
}

/// A server is killed and restarted empty while the RedLock is held (1 s
/// watchdog): its hold is lost, the guard keeps its majority on the other
/// two, and another RedLock still cannot get in. Then a second server is
/// restarted empty: the guard is told lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_server_keeps_the_majority_or_loses_it() {
    let mut s = Servers::start();
    let clients = s.clients(watchdog_1s).await;
    let others = s.clients(plain).await;
    let red = RedLock::new(clients.clone(), "restart").with_server_timeout(SERVER_TIMEOUT);
    let rival = RedLock::new(others.clone(), "restart").with_server_timeout(SERVER_TIMEOUT);
    let guard = red.lock().await.unwrap();
    assert_eq!(guard.guards().len(), 3);

    s.servers[0].restart();
    within(
        HANG,
        "server 0's hold reported lost",
        guard.guards()[0].lost(),
    )
    .await;
    // Stay a while: several renewals go by on the other two.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!guard.is_lost(), "2 of 3 holds are a majority");
    assert!(guard.validity() > Duration::ZERO);
    assert!(
        rival.try_lock().await.unwrap().is_none(),
        "another RedLock got in while the guard holds a majority"
    );
    eventually(HANG, "the rival gave back server 0", || {
        s.held(0).is_empty()
    })
    .await;

    s.servers[1].restart();
    within(HANG, "the guard reported lost", guard.lost()).await;
    assert!(guard.is_lost());
    assert_eq!(guard.validity(), Duration::ZERO);
    let got = rival
        .try_lock_for(Duration::from_secs(20))
        .await
        .unwrap()
        .expect("free on servers 0 and 1 now");
    assert!(
        guard.unlock().await.is_err(),
        "the lost guard's unlock reports it"
    );
    got.unlock().await.unwrap();
    shutdown(&clients).await;
    shutdown(&others).await;
}

/// 8 tasks on 2 RedLock instances (each over its own clients of the same 3
/// servers) add 1 to a counter with a non-atomic GET + SET under the lock,
/// 25 times each: the total is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_counter_across_two_redlocks() {
    const TASKS: usize = 8;
    const ROUNDS: usize = 25;
    let s = Servers::start();
    let data = RedisServer::start();
    let store = client(&data).await;
    let sets = [s.clients(plain).await, s.clients(plain).await];
    let reds = [
        RedLock::new(sets[0].clone(), "counter").with_retry_delay(Duration::from_millis(30)),
        RedLock::new(sets[1].clone(), "counter").with_retry_delay(Duration::from_millis(30)),
    ];
    let mut tasks = JoinSet::new();
    for t in 0..TASKS {
        let red = reds[t % 2].clone().with_server_timeout(SERVER_TIMEOUT);
        let store = store.clone();
        tasks.spawn(async move {
            for _ in 0..ROUNDS {
                let g = red.lock().await.unwrap();
                let n: Option<i64> = store.redis().get("counter").await.unwrap();
                tokio::task::yield_now().await;
                let () = store
                    .redis()
                    .set("counter", n.unwrap_or(0) + 1, None, None, false)
                    .await
                    .unwrap();
                g.unlock().await.unwrap();
            }
        });
    }
    within(HANG, "every increment", async {
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
    })
    .await;
    assert_eq!(data.cmd(&["GET", "counter"]), (TASKS * ROUNDS).to_string());
    for i in 0..3 {
        assert!(s.held(i).is_empty());
    }
    shutdown(&sets[0]).await;
    shutdown(&sets[1]).await;
    store.shutdown().await.unwrap();
}

/// 300 rounds of `timeout(random 0–8 ms, lock())`, with a rival RedLock
/// taking the lock now and then: a dropped acquire leaves nothing held on
/// any server once things settle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_acquires_leave_nothing_held() {
    let mut s = Servers::start();
    let clients = s.clients(plain).await;
    let others = s.clients(plain).await;
    let red = RedLock::new(clients.clone(), "cancel")
        .with_server_timeout(SERVER_TIMEOUT)
        .with_retry_delay(Duration::from_millis(2));
    let rival = RedLock::new(others.clone(), "cancel").with_server_timeout(SERVER_TIMEOUT);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let disturber = tokio::spawn(async move {
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            if let Ok(Some(g)) = rival.try_lock().await {
                tokio::time::sleep(Duration::from_millis(3)).await;
                g.unlock().await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let mut seed = 0xD1B5_4A32_D192_ED03u64;
    let (mut got, mut cancelled) = (0, 0);
    within(HANG, "300 rounds", async {
        for _ in 0..300 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let wait = Duration::from_micros(seed % 8_000);
            match tokio::time::timeout(wait, red.lock()).await {
                Err(_) => cancelled += 1,
                Ok(g) => {
                    got += 1;
                    drop(g.unwrap());
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
        "nothing held on any server",
        || s.held_anywhere().is_empty(),
    )
    .await;
    shutdown(&clients).await;
    shutdown(&others).await;
}

/// Busy elsewhere is `Ok(None)`, not an error; re-entrant for the same
/// task; a fixed lease's validity is below the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_reentrant_and_fixed_lease() {
    let s = Servers::start();
    let clients = s.clients(plain).await;
    let others = s.clients(plain).await;
    let red = RedLock::new(clients.clone(), "basics").with_server_timeout(SERVER_TIMEOUT);
    let rival = RedLock::new(others.clone(), "basics").with_server_timeout(SERVER_TIMEOUT);
    let lease = Duration::from_secs(10);
    let outer = red.lock_with_lease(lease).await.unwrap();
    assert!(outer.validity() < lease);
    assert!(outer.validity() > Duration::from_secs(5));
    let inner = red.try_lock().await.unwrap().expect("re-enters");
    for lock in red.locks() {
        assert_eq!(lock.hold_count().await.unwrap(), 2);
    }
    assert!(rival.try_lock().await.unwrap().is_none());
    assert!(rival
        .try_lock_for(Duration::from_millis(300))
        .await
        .unwrap()
        .is_none());
    inner.unlock().await.unwrap();
    outer.unlock().await.unwrap();
    let g = rival.try_lock().await.unwrap().expect("free now");
    g.unlock().await.unwrap();
    for i in 0..3 {
        assert!(s.held(i).is_empty());
    }
    shutdown(&clients).await;
    shutdown(&others).await;
}

/// The watchdog keeps a RedLock's validity up (1 s timeout, renewed every
/// ~333 ms): after several lease lengths it is still held and valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_keeps_the_validity_up() {
    let s = Servers::start();
    let clients = s.clients(watchdog_1s).await;
    let red = RedLock::new(clients.clone(), "renewed").with_server_timeout(SERVER_TIMEOUT);
    let guard = red.lock().await.unwrap();
    assert!(guard.validity() <= Duration::from_secs(1));
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(!guard.is_lost(), "renewed by the watchdog");
    assert!(guard.validity() > Duration::ZERO);
    guard.unlock().await.unwrap();
    shutdown(&clients).await;
}

/// Bad configurations are `InvalidArgument` at every acquire, before
/// anything is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_invalid_argument() {
    let server = RedisServer::start();
    let mut c = Vec::new();
    for _ in 0..4 {
        c.push(client(&server).await);
    }
    let cases = [
        RedLock::new(c[..2].to_vec(), "x"),
        RedLock::new(c[..4].to_vec(), "x"),
        RedLock::new(Vec::new(), "x"),
        RedLock::new(vec![c[0].clone(), c[1].clone(), c[0].clone()], "x"),
        RedLock::new(c[..3].to_vec(), ""),
        RedLock::new(c[..3].to_vec(), "x").with_server_timeout(Duration::ZERO),
    ];
    for (i, red) in cases.iter().enumerate() {
        assert!(
            matches!(red.try_lock().await, Err(Error::InvalidArgument(_))),
            "case {i}"
        );
    }
    let red = RedLock::new(c[..3].to_vec(), "x");
    assert!(matches!(
        red.lock_with_lease(Duration::ZERO).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(lock_keys(&server).is_empty());
    shutdown(&c).await;
}

//! A random history against the promise "while a guard is not lost, nobody
//! else holds the lock".
//!
//! Several clients, each behind its own fault proxy, run tasks that take a
//! few locks in every way the API allows — `lock`, `try_lock_for`, fixed
//! leases, re-entry, unlock or drop, acquires cancelled mid-flight — while
//! a chaos task cuts connections, black-holes and heals them (which also
//! drops bytes on live connections), slows them down, kills the pub/sub
//! connections and force-unlocks locks. Every critical section takes a
//! fencing token (`INCR`) and records its span and, if its guard was lost,
//! since when. `history::check_with` must find no two owners trusting one
//! lock at once (a force-unlock by another client cuts the sections it
//! overrode), and nothing but the fencing counters and latch keys may be
//! left in Redis at the end.
//!
//! One more client connects as an ACL user that may not `CLIENT LIST` /
//! `CLIENT KILL` (its fence is not trusted: every request carries its
//! record and records keep their TTL), and one task of every client
//! switches kinds on the same names, taking the fair lock or the plain
//! lock at random (they share the holder field; issue 44, items 1 and 3).
//!
//! `LEASEHOLD_HISTORY_SECS` (default 12) sets the length,
//! `LEASEHOLD_HISTORY_SEED` replays a run (the seed is printed; timing still
//! varies), and `LEASEHOLD_HISTORY_FORCE_UNLOCK=0` leaves force-unlocks out
//! (then every overlap would be the engine's fault, with no override to
//! excuse it).

use leasehold_testkit as support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::fred::interfaces::KeysInterface;
use leasehold::raw::RawLock;
use leasehold::{Client, LockGuard, LockHandle, Owner};
use support::history::{check_with, Override, Section};
use support::{Proxy, RedisServer};
use tokio::time::Instant;

/// Clients as the default user; one more connects as a restricted user.
const CLIENTS: usize = 3;
const TASKS_PER_CLIENT: usize = 4;
const LOCKS: usize = 3;

/// A small deterministic generator (xorshift64*).
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }
}

#[derive(Default)]
struct Log {
    sections: Mutex<Vec<Section>>,
    overrides: Mutex<Vec<Override>>,
    faults: AtomicU64,
    cancelled: AtomicU64,
    errors: AtomicU64,
}

fn lock_name(i: usize) -> String {
    format!("hist:{i}")
}

/// One acquire of `lock`, in the way `how` picks.
async fn acquire<R: RawLock<Guard = LockGuard>>(
    lock: &LockHandle<R>,
    how: u64,
    wait: Duration,
    lease: Duration,
) -> leasehold::Result<Option<LockGuard>> {
    match how {
        0 => lock.lock().await.map(Some),
        1 => lock.try_lock_for(wait).await,
        2 => lock.lock_with_lease(lease).await.map(Some),
        _ => lock.try_lock_with_lease(wait, lease).await,
    }
}

/// One task's loop until `stop`. `fence` is a client on a direct
/// connection: the fencing token is instrumentation, not under test.
/// `switcher`: the task takes the fair lock or the plain lock of a name at
/// random.
#[allow(clippy::too_many_arguments)]
async fn worker(
    client: Client,
    fence: Client,
    label: String,
    switcher: bool,
    mut rng: Rng,
    log: Arc<Log>,
    stop: Arc<AtomicBool>,
) {
    let owner = format!("{label}:{}", Owner::current().id());
    let mut name = lock_name(0);
    while !stop.load(Ordering::Relaxed) {
        // Often the same lock again at once (a stale release of the last
        // hold must not free the new one).
        if !rng.chance(40) {
            name = lock_name(rng.below(LOCKS as u64) as usize);
        }
        let fair = switcher && rng.chance(50);
        let lease = rng.ms(150, 600);
        let wait = rng.ms(0, 400);
        let how = rng.below(4);
        let requested = Instant::now();
        let acquire = async {
            if fair {
                acquire(&client.fair_lock(&name), how, wait, lease).await
            } else {
                acquire(&client.lock(&name), how, wait, lease).await
            }
        };
        let got = if rng.chance(15) {
            // Cancelled at a random point, often mid-flight.
            match tokio::time::timeout(rng.ms(0, 15), acquire).await {
                Ok(got) => got,
                Err(_) => {
                    log.cancelled.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            }
        } else {
            acquire.await
        };
        let guard = match got {
            Ok(Some(guard)) => guard,
            Ok(None) => continue,
            Err(_) => {
                log.errors.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let worker = Worker {
            client: &client,
            fence: &fence,
            owner: &owner,
            log: &log,
            fair,
        };
        worker.section(&name, guard, requested, &mut rng).await;
    }
}

/// What a worker's sections need.
struct Worker<'a> {
    client: &'a Client,
    fence: &'a Client,
    owner: &'a str,
    log: &'a Log,
    /// The section's guard is a fair lock's (re-entered as one).
    fair: bool,
}

impl Worker<'_> {
    /// Holds `guard` for a random short while and records the section.
    async fn section(&self, name: &str, guard: LockGuard, requested: Instant, rng: &mut Rng) {
        let (client, fence, owner, log) = (self.client, self.fence, self.owner, self.log);
        // The fencing token, taken while holding the lock.
        let token: u64 = match fence.redis().incr(format!("fence:{name}")).await {
            Ok(t) => t,
            Err(_) => {
                drop(guard);
                return;
            }
        };
        let start = Instant::now();
        if guard.is_lost() {
            drop(guard);
            return;
        }
        let work = rng.ms(1, 40);
        tokio::select! {
            _ = guard.lost() => {}
            _ = tokio::time::sleep(work) => {}
        }
        // Re-entry now and then: the same owner takes the lock again.
        if rng.chance(20) && !guard.is_lost() {
            let inner = if self.fair {
                client
                    .fair_lock(name)
                    .try_lock_for(Duration::from_millis(50))
                    .await
            } else {
                client
                    .lock(name)
                    .try_lock_for(Duration::from_millis(50))
                    .await
            };
            if let Ok(Some(inner)) = inner {
                tokio::time::sleep(rng.ms(0, 5)).await;
                if rng.chance(50) {
                    let _ = inner.unlock().await;
                }
            }
        }
        let end = Instant::now();
        let mut s = Section::new(name, owner, token, start.into_std(), end.into_std())
            .requested_at(requested.into_std());
        if let Some(lost) = guard.lost_since() {
            s = s.lost_at(lost.into_std());
        }
        log.sections.lock().unwrap().push(s);
        if rng.chance(50) {
            let _ = guard.unlock().await;
        } else {
            drop(guard);
        }
    }
}

/// Faults until `stop`.
async fn chaos(
    server: Arc<RedisServer>,
    proxies: Arc<Vec<Proxy>>,
    admin: Client,
    mut rng: Rng,
    log: Arc<Log>,
    stop: Arc<AtomicBool>,
) {
    let kinds = match std::env::var("LEASEHOLD_HISTORY_FORCE_UNLOCK").as_deref() {
        Ok("0") => 5,
        _ => 6,
    };
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(rng.ms(100, 500)).await;
        let proxy = &proxies[rng.below(proxies.len() as u64) as usize];
        log.faults.fetch_add(1, Ordering::Relaxed);
        match rng.below(kinds) {
            0 => proxy.cut_all(),
            1 => {
                // A black hole healed without closing the connections: the
                // bytes it ate are gone and replies come out of step.
                proxy.blackhole();
                tokio::time::sleep(rng.ms(50, 1500)).await;
                proxy.pass();
            }
            2 => {
                proxy.blackhole();
                tokio::time::sleep(rng.ms(50, 800)).await;
                proxy.cut_all();
                proxy.pass();
            }
            3 => {
                proxy.delay(rng.ms(5, 60));
                tokio::time::sleep(rng.ms(100, 600)).await;
                proxy.pass();
            }
            4 => {
                let _ = server.try_cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]);
            }
            _ => {
                let name = lock_name(rng.below(LOCKS as u64) as usize);
                let at = Instant::now();
                if let Ok(true) = admin.lock(&name).force_unlock().await {
                    log.overrides.lock().unwrap().push(Override {
                        lock: name,
                        at: at.into_std(),
                        done: Instant::now().into_std(),
                    });
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_history_keeps_mutual_exclusion() {
    let secs: u64 = std::env::var("LEASEHOLD_HISTORY_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let seed: u64 = std::env::var("LEASEHOLD_HISTORY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
                | 1
        });
    eprintln!("history: seed {seed} (LEASEHOLD_HISTORY_SEED to replay), {secs} s");
    if let Ok(filter) = std::env::var("LEASEHOLD_HISTORY_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    }
    let mut rng = Rng(seed);

    let server = Arc::new(RedisServer::start());
    // A user that may not list or kill clients (issue 44, item 1).
    let mut rules = vec![
        "ACL",
        "SETUSER",
        "restricted",
        "on",
        ">pw",
        "~*",
        "&*",
        "+@all",
    ];
    let denied = support::fixture::deny_client_subcommands(&["list", "kill"]);
    rules.extend(denied.iter().map(String::as_str));
    assert_eq!(server.cmd(&rules), "OK");
    let mut proxies = Vec::new();
    let mut clients = Vec::new();
    for c in 0..=CLIENTS {
        let proxy = Proxy::start(&server.addr()).await;
        let url = if c == CLIENTS {
            format!("redis://restricted:pw@{}", proxy.addr())
        } else {
            proxy.url()
        };
        let client = Client::builder()
            .url(&url)
            .watchdog_timeout(Duration::from_secs(1))
            .command_timeout(Duration::from_secs(1))
            .recheck_interval(Duration::from_secs(2))
            .build()
            .await
            .unwrap();
        proxies.push(proxy);
        clients.push(client);
    }
    let proxies = Arc::new(proxies);
    // Direct: force-unlocks and fencing tokens are not under test.
    let admin = Client::connect(&server.url()).await.unwrap();
    let log = Arc::new(Log::default());
    let stop = Arc::new(AtomicBool::new(false));

    let mut tasks = Vec::new();
    assert!(
        !clients[CLIENTS].server_info().fence,
        "the restricted user's fence is not trusted"
    );
    for (c, client) in clients.iter().enumerate() {
        for t in 0..TASKS_PER_CLIENT {
            tasks.push(tokio::spawn(worker(
                client.clone(),
                admin.clone(),
                format!("c{c}"),
                t == 0,
                Rng(rng.next() | 1),
                log.clone(),
                stop.clone(),
            )));
        }
    }
    let chaos_task = tokio::spawn(chaos(
        server.clone(),
        proxies.clone(),
        admin.clone(),
        Rng(rng.next() | 1),
        log.clone(),
        stop.clone(),
    ));

    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    chaos_task.await.unwrap();
    for p in proxies.iter() {
        p.pass();
    }
    for t in tasks {
        if tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .is_err()
        {
            let state: Vec<String> = (0..LOCKS)
                .map(|i| {
                    let name = lock_name(i);
                    format!(
                        "{name}: {:?} PTTL {}",
                        server.cmd(&["HGETALL", &name]),
                        server.cmd(&["PTTL", &name])
                    )
                })
                .collect();
            let conns: Vec<usize> = proxies.iter().map(|p| p.connection_count()).collect();
            {
                use leasehold::fred::interfaces::ClientLike;
                for (i, c) in clients.iter().enumerate() {
                    let ping = tokio::time::timeout(
                        Duration::from_secs(3),
                        c.redis().ping::<String>(None),
                    )
                    .await;
                    eprintln!(
                        "client {i}: fred state {:?}, connected {}, ping {ping:?}",
                        c.redis().state(),
                        c.redis().is_connected()
                    );
                    let fresh = Client::connect(&proxies[i].url()).await;
                    let fresh_ping = match &fresh {
                        Ok(f) => format!(
                            "{:?}",
                            tokio::time::timeout(
                                Duration::from_secs(3),
                                f.redis().ping::<String>(None)
                            )
                            .await
                        ),
                        Err(e) => format!("connect failed: {e}"),
                    };
                    eprintln!("client {i}: a fresh client through its proxy: {fresh_ping}");
                }
            }
            panic!(
                "seed {seed}: a worker hung after the faults stopped; locks: {state:#?}\nproxy connections: {conns:?}\nclients: {}",
                server.cmd(&["CLIENT", "LIST"])
            );
        }
    }
    for c in &clients {
        let _ = tokio::time::timeout(Duration::from_secs(30), c.shutdown())
            .await
            .expect("shutdown hung");
    }
    admin.shutdown().await.unwrap();

    let sections = log.sections.lock().unwrap().clone();
    let overrides = log.overrides.lock().unwrap().clone();
    let lost = sections.iter().filter(|s| s.lost_at.is_some()).count();
    eprintln!(
        "history: {} sections ({lost} told lost), {} faults ({} force-unlocks), {} cancelled acquires, {} errors",
        sections.len(),
        log.faults.load(Ordering::Relaxed),
        overrides.len(),
        log.cancelled.load(Ordering::Relaxed),
        log.errors.load(Ordering::Relaxed),
    );
    assert!(
        sections.len() > 50,
        "too little happened to judge: {} sections",
        sections.len()
    );
    if let Err(violations) = check_with(&sections, &overrides) {
        panic!(
            "seed {seed}: {} violations, first: {:#?}\noverrides: {overrides:#?}",
            violations.len(),
            &violations[..violations.len().min(3)]
        );
    }
    // Nothing left but the fencing counters (and latch keys, which expire).
    let left: Vec<String> = support::fixture::lock_keys(&server)
        .into_iter()
        .filter(|k| !k.starts_with("fence:"))
        .collect();
    assert_eq!(
        left,
        Vec::<String>::new(),
        "seed {seed}: lock state left in Redis"
    );
}

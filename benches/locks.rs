//! Criterion benches of leasehold against a real loopback `redis-server`
//! started here:
//!
//! 1. `uncontended`: lock + unlock on distinct names, 1 and 64 tasks, next to
//!    the raw-fred ceiling (the same two EVALSHA calls, nothing else);
//! 2. `reentrant`: acquire of a lock the task already holds;
//! 3. `handoff`: holder's `unlock()` returning → the other client's `lock()`
//!    returning, two tasks on two clients ping-ponging one lock;
//! 4. `hot_lock`: 64 tasks on 4 clients taking one lock (time per
//!    acquisition).
//!
//! `cargo bench --bench locks`. The whole file runs in about a minute.
//! The side-by-side comparison with polling locks and peer crates is
//! `cargo run --release -p leasehold-compare`.

use leasehold_testkit::history::handoffs;
use leasehold_testkit::server;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput};
use leasehold::fred::clients::Client as FredClient;
use leasehold::fred::interfaces::{ClientLike, LuaInterface};
use leasehold::fred::types::config::Config;
use leasehold::fred::types::{Builder, Value};
use leasehold::Client;
use server::RedisServer;
use tokio::runtime::Runtime;
use tokio::time::Instant;

const TASKS: u64 = 64;
const CLIENTS: usize = 4;

fn main() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
        .configure_from_args();
    uncontended(&mut c, &rt, &server);
    reentrant(&mut c, &rt, &server);
    handoff(&mut c, &rt, &server);
    hot_lock(&mut c, &rt, &server);
    c.final_summary();
}

/// The raw-fred ceiling: exactly the EVALSHA calls of an uncontended
/// leasehold lock + unlock.
#[derive(Clone)]
struct Raw {
    redis: FredClient,
    acquire: String,
    release: String,
}

impl Raw {
    async fn connect(url: &str) -> Raw {
        let redis = Builder::from_config(Config::from_url(url).expect("url"))
            .build()
            .expect("fred");
        redis.init().await.expect("connect");
        let (acquire_lua, release_lua) = leasehold::__bench::lock_scripts();
        let acquire = redis.script_load(acquire_lua).await.expect("load");
        let release = redis.script_load(release_lua).await.expect("load");
        Raw {
            redis,
            acquire,
            release,
        }
    }

    /// One lock + unlock, with request ids that only grow, as leasehold's.
    async fn lock_unlock(&self, key: &str, field: &str) {
        static RID: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(1);
        let rid = || RID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let reply: Vec<i64> = self
            .redis
            .evalsha(
                self.acquire.as_str(),
                vec![key],
                vec![
                    Value::from(30000),
                    field.into(),
                    0.into(),
                    // No take announced (src/lock/scripts/acquire.lua).
                    "".into(),
                    rid().into(),
                ],
            )
            .await
            .expect("acquire");
        // {1, count, rid} when the lock is now held (the twin's reply:
        // the rid last, src/core/scripts/proved_epilogue.lua)
        assert_eq!(
            reply.first(),
            Some(&1),
            "raw acquire of a held lock: {reply:?}"
        );
        let channel = format!("redisson_lock__channel:{{{key}}}");
        let freed: Vec<i64> = self
            .redis
            .evalsha(
                self.release.as_str(),
                vec![key, channel.as_str()],
                vec![
                    Value::from(30000),
                    field.into(),
                    1.into(),
                    "publish".into(),
                    1.into(),
                    rid().into(),
                ],
            )
            .await
            .expect("release");
        assert_eq!(freed.first(), Some(&2), "raw release: {freed:?}");
    }
}

fn uncontended(c: &mut Criterion, rt: &Runtime, server: &RedisServer) {
    let url = server.url();
    let client = rt.block_on(Client::connect(&url)).expect("connect");
    let raw = rt.block_on(Raw::connect(&url));
    let mut g = c.benchmark_group("uncontended");
    g.throughput(Throughput::Elements(1));
    for tasks in [1, TASKS] {
        g.bench_function(
            BenchmarkId::new("leasehold", format!("{tasks}_tasks")),
            |b| {
                b.to_async(rt).iter_custom(|iters| {
                    let client = client.clone();
                    async move {
                        let start = Instant::now();
                        let mut set = tokio::task::JoinSet::new();
                        for t in 0..tasks {
                            let lock = client.lock(&format!("uc:{t}"));
                            let n = share(iters, tasks, t);
                            set.spawn(async move {
                                for _ in 0..n {
                                    let g = lock.lock().await.expect("lock");
                                    g.unlock().await.expect("unlock");
                                }
                            });
                        }
                        while set.join_next().await.is_some() {}
                        start.elapsed()
                    }
                })
            },
        );
        g.bench_function(
            BenchmarkId::new("raw_fred", format!("{tasks}_tasks")),
            |b| {
                b.to_async(rt).iter_custom(|iters| {
                    let raw = raw.clone();
                    async move {
                        let start = Instant::now();
                        let mut set = tokio::task::JoinSet::new();
                        for t in 0..tasks {
                            let raw = raw.clone();
                            let n = share(iters, tasks, t);
                            set.spawn(async move {
                                let key = format!("raw:{t}");
                                for _ in 0..n {
                                    raw.lock_unlock(&key, "bench:1").await;
                                }
                            });
                        }
                        while set.join_next().await.is_some() {}
                        start.elapsed()
                    }
                })
            },
        );
    }
    g.finish();
    rt.block_on(client.shutdown()).expect("shutdown");
    rt.block_on(async { raw.redis.quit().await }).expect("quit");
}

/// Iterations of task `t` when `iters` are shared among `tasks`.
fn share(iters: u64, tasks: u64, t: u64) -> u64 {
    iters / tasks + u64::from(t < iters % tasks)
}

fn reentrant(c: &mut Criterion, rt: &Runtime, server: &RedisServer) {
    let client = rt
        .block_on(Client::connect(&server.url()))
        .expect("connect");
    let mut g = c.benchmark_group("reentrant");
    g.throughput(Throughput::Elements(1));
    g.bench_function("acquire_held_lock", |b| {
        b.to_async(rt).iter_custom(|iters| {
            let lock = client.lock("reentrant");
            async move {
                tokio::spawn(async move {
                    let outer = lock.lock().await.expect("lock");
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let start = Instant::now();
                        let inner = lock.lock().await.expect("re-enter");
                        total += start.elapsed();
                        inner.unlock().await.expect("unlock");
                    }
                    outer.unlock().await.expect("unlock");
                    total
                })
                .await
                .expect("task")
            }
        })
    });
    g.finish();
    rt.block_on(client.shutdown()).expect("shutdown");
}

fn handoff(c: &mut Criterion, rt: &Runtime, server: &RedisServer) {
    let url = server.url();
    let a = rt.block_on(Client::connect(&url)).expect("connect");
    let b_client = rt.block_on(Client::connect(&url)).expect("connect");
    let mut g = c.benchmark_group("handoff");
    g.sample_size(10);
    g.bench_function("unlock_to_next_lock_two_clients", |b| {
        b.to_async(rt).iter_custom(|iters| {
            let (a, b) = (a.clone(), b_client.clone());
            async move { ping_pong(a, b, iters).await }
        })
    });
    g.finish();
    rt.block_on(a.shutdown()).expect("shutdown");
    rt.block_on(b_client.shutdown()).expect("shutdown");
}

/// `iters` handoffs between a task on `a` and a task on `b`; returns the sum
/// of (holder's unlock() returned → waiter's lock() returned), each clamped
/// at zero (the waiter can see its reply before the holder sees its own).
/// The holder unlocks only once the waiter's client is subscribed to the
/// channel (so the waiter is waiting, not polling), and never races back in.
async fn ping_pong(a: Client, b: Client, iters: u64) -> Duration {
    let (turn, _) = tokio::sync::watch::channel(0u64);
    let turn = Arc::new(turn);
    let mut sides = tokio::task::JoinSet::new();
    for (parity, me, other) in [(1u64, a.clone(), b.clone()), (0, b, a)] {
        let turn = turn.clone();
        sides.spawn(async move {
            let lock = me.lock("handoff");
            let mut rx = turn.subscribe();
            let mut log = Vec::new();
            let mut k = if parity == 1 { 1 } else { 2 };
            while k <= iters + 1 {
                rx.wait_for(|t| *t + 1 >= k).await.expect("turn");
                let g = lock.lock().await.expect("lock");
                let acquired = Instant::now();
                turn.send_replace(k);
                // wait until the other side is subscribed (bounded: 1 s)
                let until = Instant::now() + Duration::from_secs(1);
                while k <= iters && other.subscribed_channels() == 0 && Instant::now() < until {
                    tokio::task::yield_now().await;
                }
                g.unlock().await.expect("unlock");
                log.push((k, acquired, Instant::now()));
                k += 2;
            }
            log
        });
    }
    let mut log = Vec::new();
    while let Some(side) = sides.join_next().await {
        log.extend(side.expect("side"));
    }
    handoffs(log)
        .into_iter()
        .map(|(unl, acq)| acq.saturating_duration_since(unl))
        .sum()
}

fn hot_lock(c: &mut Criterion, rt: &Runtime, server: &RedisServer) {
    let url = server.url();
    let clients: Vec<Client> = (0..CLIENTS)
        .map(|_| rt.block_on(Client::connect(&url)).expect("connect"))
        .collect();
    let mut g = c.benchmark_group("hot_lock");
    g.throughput(Throughput::Elements(1));
    g.bench_function("64_tasks_4_clients", |b| {
        b.to_async(rt).iter_custom(|iters| {
            let clients = clients.clone();
            async move {
                let left = Arc::new(AtomicI64::new(iters as i64));
                let start = Instant::now();
                let mut set = tokio::task::JoinSet::new();
                for t in 0..TASKS as usize {
                    let lock = clients[t % CLIENTS].lock("hot");
                    let left = left.clone();
                    set.spawn(async move {
                        while left.fetch_sub(1, Ordering::Relaxed) > 0 {
                            let g = lock.lock().await.expect("lock");
                            g.unlock().await.expect("unlock");
                        }
                    });
                }
                while set.join_next().await.is_some() {}
                start.elapsed()
            }
        })
    });
    g.finish();
    for client in clients {
        rt.block_on(client.shutdown()).expect("shutdown");
    }
}

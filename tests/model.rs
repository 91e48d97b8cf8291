//! Model test: random sequences of lock operations by 3 owners on 2
//! clients, checked after every step against a reference model of hold
//! counts and guard validity, and against the lock hash in Redis.

use leasehold_testkit as support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use leasehold::{Client, Error, LockGuard, Owner};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use support::fixture::client;
use support::RedisServer;

const OWNERS: usize = 3;
/// Owners 0 and 1 lock through client A, owner 2 through client B.
const CLIENT_OF: [usize; OWNERS] = [0, 0, 1];
/// How long `Lock` waits (`try_lock_for`) when another owner holds it.
const SHORT_WAIT: Duration = Duration::from_millis(100);
/// Bound on any single step: catches hangs.
const STEP_LIMIT: Duration = Duration::from_secs(30);

#[derive(Clone, Debug)]
enum Op {
    /// `try_lock_for(SHORT_WAIT)` by an owner.
    Lock(usize),
    /// `try_lock()` by an owner.
    TryLock(usize),
    /// `unlock()` of one of the owner's outstanding guards (index mod len).
    Unlock(usize, usize),
    /// Drop of one of the owner's outstanding guards (background release).
    Drop(usize, usize),
    /// `force_unlock()` (through client A).
    ForceUnlock,
    /// The lease runs out: raw `DEL`, no message.
    Expire,
}

fn op() -> impl Strategy<Value = Op> {
    let owner = 0..OWNERS;
    prop_oneof![
        4 => owner.clone().prop_map(Op::Lock),
        4 => owner.clone().prop_map(Op::TryLock),
        3 => (owner.clone(), 0..8usize).prop_map(|(o, i)| Op::Unlock(o, i)),
        3 => (owner, 0..8usize).prop_map(|(o, i)| Op::Drop(o, i)),
        1 => Just(Op::ForceUnlock),
        1 => Just(Op::Expire),
    ]
}

struct Ctx {
    server: RedisServer,
    clients: [Client; 2],
    owners: [Owner; OWNERS],
}

/// One outstanding guard and the epoch it was taken in. A guard is valid
/// while no force-unlock or expiry happened since (the epoch is current).
struct Held {
    guard: LockGuard,
    epoch: u64,
}

struct Model {
    epoch: u64,
    guards: [Vec<Held>; OWNERS],
}

impl Model {
    /// Holds per owner: its valid guards.
    fn count(&self, owner: usize) -> usize {
        self.guards[owner]
            .iter()
            .filter(|h| h.epoch == self.epoch)
            .count()
    }

    fn held_by_other(&self, owner: usize) -> bool {
        (0..OWNERS).any(|o| o != owner && self.count(o) > 0)
    }
}

static CASE: AtomicU64 = AtomicU64::new(0);

fn field(ctx: &Ctx, owner: usize) -> String {
    format!(
        "{}:{}",
        ctx.clients[CLIENT_OF[owner]].id(),
        ctx.owners[owner].id()
    )
}

/// The lock hash as the server has it.
fn redis_hash(server: &RedisServer, key: &str) -> BTreeMap<String, String> {
    let reply = server.cmd(&["HGETALL", key]);
    let lines: Vec<&str> = reply.lines().filter(|l| !l.is_empty()).collect();
    lines
        .chunks(2)
        .map(|kv| (kv[0].to_owned(), kv.get(1).unwrap_or(&"").to_string()))
        .collect()
}

fn expected_hash(ctx: &Ctx, model: &Model) -> BTreeMap<String, String> {
    (0..OWNERS)
        .filter(|&o| model.count(o) > 0)
        .map(|o| (field(ctx, o), model.count(o).to_string()))
        .collect()
}

fn check(ctx: &Ctx, model: &Model, key: &str, step: &str) -> Result<(), TestCaseError> {
    let actual = redis_hash(&ctx.server, key);
    let holders = actual
        .values()
        .filter(|v| v.parse::<i64>().unwrap_or(0) > 0)
        .count();
    prop_assert!(
        holders <= 1,
        "two owners hold {key} after {step}: {actual:?}"
    );
    let expected = expected_hash(ctx, model);
    prop_assert_eq!(&actual, &expected, "Redis vs model after {}", step);
    Ok(())
}

async fn step<T>(
    what: &str,
    fut: impl std::future::Future<Output = T>,
) -> Result<T, TestCaseError> {
    tokio::time::timeout(STEP_LIMIT, fut)
        .await
        .map_err(|_| TestCaseError::fail(format!("hung: {what}")))
}

async fn run_case(ctx: &Ctx, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let key = format!("model:{}", CASE.fetch_add(1, Ordering::Relaxed));
    let mut model = Model {
        epoch: 0,
        guards: Default::default(),
    };
    let result = run_ops(ctx, &key, &ops, &mut model).await;
    // Clean up whatever the case left, valid or not.
    for guards in &mut model.guards {
        guards.clear();
    }
    ctx.server.cmd(&["DEL", &key]);
    result
}

async fn run_ops(ctx: &Ctx, key: &str, ops: &[Op], model: &mut Model) -> Result<(), TestCaseError> {
    for (n, op) in ops.iter().enumerate() {
        let what = format!("step {n}: {op:?}");
        match *op {
            Op::Lock(o) | Op::TryLock(o) => {
                let lock = ctx.clients[CLIENT_OF[o]].lock(key);
                let got = step(
                    &what,
                    ctx.owners[o].scope(async {
                        match op {
                            Op::Lock(_) => lock.try_lock_for(SHORT_WAIT).await,
                            _ => lock.try_lock().await,
                        }
                    }),
                )
                .await?
                .map_err(|e| TestCaseError::fail(format!("{what}: {e:?}")))?;
                let busy = model.held_by_other(o);
                prop_assert_eq!(
                    got.is_some(),
                    !busy,
                    "{}: acquired vs held by another",
                    &what
                );
                if let Some(guard) = got {
                    prop_assert_eq!(guard.owner(), ctx.owners[o]);
                    model.guards[o].push(Held {
                        guard,
                        epoch: model.epoch,
                    });
                }
            }
            Op::Unlock(o, i) => {
                if model.guards[o].is_empty() {
                    continue;
                }
                let held = model.guards[o].remove(i % model.guards[o].len());
                let valid = held.epoch == model.epoch;
                let before = redis_hash(&ctx.server, key);
                let result = step(&what, ctx.owners[o].scope(held.guard.unlock())).await?;
                if valid {
                    prop_assert!(result.is_ok(), "{}: valid guard: {:?}", &what, result);
                } else {
                    // A stale guard must not give back a newer hold of the
                    // same owner taken after the expiry (hold epochs).
                    prop_assert!(
                        matches!(result, Err(Error::NotHeld { .. })),
                        "{}: stale guard: {:?}",
                        &what,
                        result
                    );
                    prop_assert_eq!(
                        &redis_hash(&ctx.server, key),
                        &before,
                        "{}: a stale unlock changed Redis",
                        &what
                    );
                }
            }
            Op::Drop(o, i) => {
                if model.guards[o].is_empty() {
                    continue;
                }
                let held = model.guards[o].remove(i % model.guards[o].len());
                drop(held.guard);
                // Wait until Redis reflects the background release (a valid
                // guard), then give a stray release time to land (a stale
                // one must not change anything).
                let expected = expected_hash(ctx, model);
                let deadline = tokio::time::Instant::now() + STEP_LIMIT;
                while redis_hash(&ctx.server, key) != expected {
                    if tokio::time::Instant::now() >= deadline {
                        break; // reported by `check` below
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Op::ForceUnlock => {
                let busy = (0..OWNERS).any(|o| model.count(o) > 0);
                let deleted = step(&what, ctx.clients[0].lock(key).force_unlock())
                    .await?
                    .map_err(|e| TestCaseError::fail(format!("{what}: {e:?}")))?;
                prop_assert_eq!(deleted, busy, "{}: force_unlock result", &what);
                model.epoch += 1;
            }
            Op::Expire => {
                ctx.server.cmd(&["DEL", key]);
                model.epoch += 1;
            }
        }
        check(ctx, model, key, &what)?;
    }
    Ok(())
}

/// 48 random sequences of 20–40 operations.
#[test]
fn random_operations_match_the_model() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = RedisServer::start();
    let clients = rt.block_on(async { [client(&server).await, client(&server).await] });
    let ctx = Ctx {
        server,
        clients,
        owners: [Owner::new(), Owner::new(), Owner::new()],
    };
    let mut runner = TestRunner::new(Config {
        cases: 48,
        max_shrink_iters: 200,
        max_shrink_time: 60_000,
        failure_persistence: None,
        ..Config::default()
    });
    let started = std::time::Instant::now();
    let outcome = runner.run(&proptest::collection::vec(op(), 20..=40), |ops| {
        rt.block_on(run_case(&ctx, ops))
    });
    eprintln!("model test ran in {:?}", started.elapsed());
    rt.block_on(async {
        for c in &ctx.clients {
            c.shutdown().await.unwrap();
        }
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
}

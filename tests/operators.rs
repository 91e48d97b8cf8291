//! Operators (issue 33): client records, long waits, deadlocks — against a
//! real redis-server.

use leasehold_testkit as support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use leasehold::{client_records, Client, ClientRecord, Error, Owner};
use support::fixture::{abba, calls, client_with, eventually, within};
use support::RedisServer;

const HANG: Duration = Duration::from_secs(30);

async fn record_of(c: &Client) -> Option<ClientRecord> {
    record_seen_by(c, c.id()).await
}

/// Waits (bounded as a hang) until `c`'s record shows a recorded wait
/// (`recorded`) or none.
async fn until_waits_recorded(c: &Client, recorded: bool, what: &str) {
    within(HANG, what, async {
        while record_of(c).await.unwrap().waits.is_empty() == recorded {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// The record of client `id`, read through `via` (open).
async fn record_seen_by(via: &Client, id: uuid::Uuid) -> Option<ClientRecord> {
    client_records(via.redis())
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.id == id)
}

fn record_key(c: &Client) -> String {
    format!("leasehold:client:{{{}}}", c.id())
}

/// A client's record says who it is, lives while the client does (renewed
/// by the watchdog's cycle past its TTL), and goes with `shutdown` or with
/// the last handle.
#[tokio::test]
async fn records_appear_and_vanish_with_their_clients() {
    let server = RedisServer::start();
    let short = |b: leasehold::ClientBuilder| b.watchdog_timeout(Duration::from_millis(300));
    let a = client_with(&server, |b| short(b).app_name("billing")).await;
    let r = record_of(&a).await.expect("a record once built");
    assert_eq!(r.app.as_deref(), Some("billing"));
    assert_eq!(r.pid, Some(std::process::id()));
    assert!(r.host.as_deref().is_some_and(|h| !h.is_empty()), "{r:?}");
    assert_eq!(r.version.as_deref(), Some(env!("CARGO_PKG_VERSION")));
    assert_eq!(r.watchdog_ms, Some(300));
    assert!(r.waits.is_empty());
    let pttl: i64 = server
        .cmd(&["PTTL", &record_key(&a)])
        .trim()
        .parse()
        .unwrap();
    assert!(pttl > 0 && pttl <= 300, "TTL three renew intervals: {pttl}");
    // Several TTLs later it is still there: the watchdog renews it, with
    // no lock held.
    let pexpires = calls(&server, "pexpire");
    let hsets = calls(&server, "hset");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(
        record_of(&a).await.is_some(),
        "renewed by the watchdog's cycle"
    );
    // The record's traffic: one PEXPIRE per renew interval (100 ms here),
    // nothing else.
    let beats = calls(&server, "pexpire") - pexpires;
    println!(
        "record renewals in 1.2 s at a 100 ms renew interval: {beats}; record size: {} B (MEMORY USAGE)",
        server.cmd(&["MEMORY", "USAGE", &record_key(&a)]).trim()
    );
    assert!((2..=14).contains(&beats), "{beats}");
    assert_eq!(calls(&server, "hset"), hsets, "no rewrite while it lives");

    // The default app name is the executable's.
    let b = client_with(&server, short).await;
    let app = record_of(&b).await.unwrap().app.unwrap();
    assert!(app.starts_with("operators"), "{app}");

    a.shutdown().await.unwrap();
    assert!(
        record_seen_by(&b, a.id()).await.is_none(),
        "shutdown deletes the record"
    );
    let key = record_key(&b);
    drop(b);
    eventually(HANG, "the record of a dropped client goes", || {
        server.cmd(&["EXISTS", &key]) == "0"
    })
    .await;
}

/// A wait past the threshold is recorded (owner field, lock, start) and
/// removed when it is cancelled or ends; a short wait writes nothing.
#[tokio::test]
async fn a_long_wait_is_recorded_and_leaves_no_record() {
    let server = RedisServer::start();
    let a = client_with(&server, |b| b.app_name("holder")).await;
    let b = client_with(&server, |b| {
        b.app_name("waiter")
            .record_waits_after(Duration::from_millis(200))
    })
    .await;
    let held = a.lock("orders").lock().await.unwrap();

    // Cancelled.
    let owner = Owner::new();
    let lock = b.lock("orders");
    let waiter = tokio::spawn(owner.scope(async move { lock.lock().await.map(drop) }));
    let mut seen = None;
    within(HANG, "the long wait is recorded", async {
        while seen.is_none() {
            seen = record_of(&b).await.and_then(|r| r.waits.first().cloned());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let w = seen.unwrap();
    assert_eq!(w.field, format!("{}:{}", b.id(), owner.id()));
    assert_eq!(w.lock, "orders");
    waiter.abort();
    let _ = waiter.await;
    until_waits_recorded(&b, false, "a cancelled wait leaves no record").await;

    // Finished.
    let lock = b.lock("orders");
    let waiter = tokio::spawn(async move { lock.lock().await.map(drop) });
    until_waits_recorded(&b, true, "the second wait is recorded").await;
    held.unlock().await.unwrap();
    within(HANG, "the waiter gets the lock", waiter)
        .await
        .unwrap()
        .unwrap();
    until_waits_recorded(&b, false, "a finished wait leaves no record").await;

    // Short: no write at all.
    let hsets = calls(&server, "hset");
    let held = a.lock("orders").lock().await.unwrap();
    let lock = b.lock("orders");
    let waiter = tokio::spawn(async move { lock.lock().await.map(drop) });
    tokio::time::sleep(Duration::from_millis(30)).await;
    held.unlock().await.unwrap();
    within(HANG, "the short waiter gets the lock", waiter)
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(calls(&server, "hset"), hsets, "a short wait writes nothing");

    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// `client_record(false)`: the client writes no record and records no
/// wait, however long (its locks work as usual); detection, which needs
/// the record, is refused with it.
#[tokio::test]
async fn a_client_without_a_record_writes_none() {
    let server = RedisServer::start();
    let a = client_with(&server, |b| b.app_name("holder")).await;
    let hsets = calls(&server, "hset");
    let b = client_with(&server, |b| {
        b.client_record(false)
            .record_waits_after(Duration::from_millis(50))
            .watchdog_timeout(Duration::from_millis(300))
    })
    .await;
    assert!(record_of(&b).await.is_none(), "no record once built");
    assert!(record_seen_by(&b, a.id()).await.is_some(), "a's is read");

    // A wait many thresholds long, over several renew intervals.
    let held = a.lock("orders").lock().await.unwrap();
    let lock = b.lock("orders");
    let waiter = tokio::spawn(async move { lock.lock().await.map(drop) });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(record_of(&b).await.is_none(), "no record while it waits");
    held.unlock().await.unwrap();
    within(HANG, "the waiter gets the lock", waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(calls(&server, "hset"), hsets, "nothing written");
    assert!(server.cmd(&["EXISTS", &record_key(&b)]) == "0");
    b.shutdown().await.unwrap();

    let refused = Client::builder()
        .url(&server.url())
        .client_record(false)
        .detect_deadlocks(true)
        .build()
        .await;
    assert!(
        matches!(refused, Err(Error::InvalidArgument(_))),
        "{refused:?}"
    );
    a.shutdown().await.unwrap();
}

/// The other side of the cross-process ABBA test: run by it, as a child
/// process of this test binary (does nothing when run by the harness).
#[tokio::test]
async fn peer_process() {
    let Ok(url) = std::env::var("LEASEHOLD_OPERATORS_PEER") else {
        return;
    };
    let c = Client::builder()
        .url(&url)
        .app_name("peer")
        .build()
        .await
        .unwrap();
    let _y = c.lock("y").lock().await.unwrap();
    println!("HOLDING y");
    // Waits for x (held by the parent) until the parent kills it.
    let _x = c.lock("x").lock().await;
}

/// Kills a child process when dropped (a failed test leaves none).
struct Reap(u32);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-9")
            .arg(self.0.to_string())
            .status();
    }
}

/// An ABBA cycle between two clients in two processes: the parent holds
/// `x` and waits for `y`, a child process holds `y` and waits for `x`.
/// `Client::deadlocks` reports it within 2 s of closing (bounded here at a
/// generous multiple; the measured figure is printed).
#[tokio::test]
async fn an_abba_cycle_across_processes_is_reported() {
    let server = RedisServer::start();
    let c = client_with(&server, |b| b.app_name("parent")).await;
    // One owner holds x and then waits for y.
    let owner = Owner::new();
    let x = owner.scope(c.lock("x").lock()).await.unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["peer_process", "--exact", "--nocapture", "--test-threads=1"])
        .env("LEASEHOLD_OPERATORS_PEER", server.url())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _reap = Reap(child.id());
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let holding = tokio::task::spawn_blocking(move || {
        lines.any(|l| l.is_ok_and(|l| l.contains("HOLDING y")))
    });
    assert!(within(HANG, "the peer holds y", holding).await.unwrap());

    let lock = c.lock("y");
    let waiter = tokio::spawn(owner.scope(async move { lock.lock().await.map(drop) }));
    let closed = tokio::time::Instant::now();
    let cycles = within(HANG, "the cycle is reported", async {
        loop {
            let cycles = c.deadlocks().await.unwrap();
            if !cycles.is_empty() {
                return cycles;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let took = closed.elapsed();
    println!("ABBA across processes reported by Client::deadlocks after {took:?}");
    assert!(took < Duration::from_secs(6), "reported after {took:?}");
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    let members = &cycles[0].members;
    assert_eq!(members.len(), 2, "{cycles:?}");
    let mine = members
        .iter()
        .find(|m| m.field == format!("{}:{}", c.id(), owner.id()))
        .expect("the parent's waiting owner is a member");
    assert_eq!((mine.holds.as_str(), mine.waits_for.as_str()), ("x", "y"));
    assert_eq!(mine.app.as_deref(), Some("parent"));
    let peer = members.iter().find(|m| m.field != mine.field).unwrap();
    assert_eq!((peer.holds.as_str(), peer.waits_for.as_str()), ("y", "x"));
    assert_eq!(peer.app.as_deref(), Some("peer"));

    child.kill().unwrap();
    child.wait().unwrap();
    waiter.abort();
    drop(x);
    c.shutdown().await.unwrap();
}

/// With `detect_deadlocks(true)`, of an ABBA cycle between two clients
/// exactly one wait (the youngest) fails with `Error::Deadlock`, and the
/// other gets its lock once the loser's task lets go of what it held.
#[tokio::test]
async fn detection_fails_exactly_one_wait_of_a_cycle() {
    let server = RedisServer::start();
    let detect = |app: &'static str| {
        move |b: leasehold::ClientBuilder| b.app_name(app).detect_deadlocks(true)
    };
    let a = client_with(&server, detect("alpha")).await;
    let b = client_with(&server, detect("beta")).await;
    let [ta, tb] = abba(&a, &b, "x", "y");
    let (ra, rb) = within(HANG, "one wait fails, the other gets its lock", async {
        tokio::join!(ta, tb)
    })
    .await;
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    println!(
        "alpha: {:?} after {:?}; beta: {:?} after {:?}",
        ra.0, ra.1, rb.0, rb.1
    );
    let failed: Vec<_> = [&ra.0, &rb.0].into_iter().filter(|r| r.is_err()).collect();
    assert_eq!(failed.len(), 1, "exactly one wait fails: {ra:?} {rb:?}");
    match failed[0] {
        Err(Error::Deadlock { name, cycle }) => {
            assert!(name == "x" || name == "y", "{name}");
            assert_eq!(cycle.members.len(), 2, "{cycle:?}");
            let loser = if ra.0.is_err() { &ra } else { &rb };
            println!(
                "deadlock detected {:?} after the wait began: {}",
                loser.1,
                failed[0].as_ref().unwrap_err()
            );
            assert!(loser.1 < Duration::from_secs(8), "{:?}", loser.1);
        }
        other => panic!("not a deadlock error: {other:?}"),
    }
    within(HANG, "no wait record is left", async {
        loop {
            let all = client_records(a.redis()).await.unwrap();
            if all.iter().all(|r| r.waits.is_empty()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(a.deadlocks().await.unwrap().is_empty());
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// On a cluster: the records of clients are found on every primary (their
/// keys spread over slots), and an ABBA cycle over locks on different
/// nodes is reported and broken as on one server.
#[tokio::test]
async fn records_and_deadlocks_on_a_cluster() {
    let cluster = support::cluster::RedisCluster::start(3, 0);
    let connect = |app: &'static str| {
        Client::builder()
            .url(&cluster.url())
            .app_name(app)
            .record_waits_after(Duration::from_millis(200))
            .detect_deadlocks(true)
            .build()
    };
    let clients = [
        connect("c0").await.unwrap(),
        connect("c1").await.unwrap(),
        connect("c2").await.unwrap(),
    ];
    let seen = client_records(clients[0].redis()).await.unwrap();
    for c in &clients {
        assert!(seen.iter().any(|r| r.id == c.id()), "{seen:?}");
    }
    // Two lock names on different primaries.
    let (x, y) = ("orders:1", "orders:2");
    assert_ne!(cluster.primary_for_key(x), cluster.primary_for_key(y));
    let [ta, tb] = abba(&clients[0], &clients[1], x, y);
    let (ra, rb) = within(HANG, "the cycle is broken", async { tokio::join!(ta, tb) }).await;
    let (ra, rb) = (ra.unwrap().0, rb.unwrap().0);
    assert_eq!(
        [&ra, &rb]
            .iter()
            .filter(|r| matches!(r, Err(Error::Deadlock { .. })))
            .count(),
        1,
        "{ra:?} {rb:?}"
    );
    assert!(ra.is_ok() || rb.is_ok(), "{ra:?} {rb:?}");
    for c in &clients {
        c.shutdown().await.unwrap();
    }
}

/// Through Sentinel: the record is written on the primary and read back,
/// with a long wait in it, and gone after shutdown.
#[tokio::test]
async fn records_through_sentinel() {
    let setup = support::sentinel::SentinelSetup::start();
    let connect = |app: &'static str| {
        Client::builder()
            .url(&setup.url())
            .app_name(app)
            .record_waits_after(Duration::from_millis(100))
            .build()
    };
    let a = connect("sentinel-a").await.unwrap();
    let b = connect("sentinel-b").await.unwrap();
    let r = record_of(&a).await.expect("a record through sentinel");
    assert_eq!(r.app.as_deref(), Some("sentinel-a"));
    let held = a.lock("s").lock().await.unwrap();
    let lock = b.lock("s");
    let waiter = tokio::spawn(async move { lock.lock().await.map(drop) });
    until_waits_recorded(&b, true, "the long wait is recorded").await;
    held.unlock().await.unwrap();
    within(HANG, "the waiter gets the lock", waiter)
        .await
        .unwrap()
        .unwrap();
    a.shutdown().await.unwrap();
    assert!(record_seen_by(&b, a.id()).await.is_none());
    b.shutdown().await.unwrap();
}

/// `leasehold::inspect` names every kind from its keys, with its holders,
/// a fair lock's queue, a semaphore's permits and a fenced lock's token;
/// `inspect_name` finds one object, and its `force_unlock` frees it with
/// its kind's own operation (the `leasehold` tool's `inspect` and
/// `unlock --force` are these calls).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_names_every_kind_and_frees_one() {
    use leasehold::{inspect, inspect_name, ObjectKind};
    let server = RedisServer::start();
    let c = client_with(&server, |b| b.app_name("ops")).await;
    let lock = c.lock("obj:lock").lock().await.unwrap();
    let fenced = c.fenced_lock("obj:fenced").lock().await.unwrap();
    let fair = c.fair_lock("obj:fair").lock().await.unwrap();
    let waiter = {
        let fair = c.fair_lock("obj:fair");
        tokio::spawn(async move { fair.lock().await.map(drop) })
    };
    let read = c.read_write_lock("obj:rw").read().lock().await.unwrap();
    let sem = c.semaphore("obj:sem");
    sem.try_set_permits(3).await.unwrap();
    let permit = sem.acquire().await.unwrap();
    c.count_down_latch("obj:latch")
        .try_set_count(2)
        .await
        .unwrap();
    // The fair waiter is queued.
    within(HANG, "the fair waiter is queued", async {
        while inspect_name(c.redis(), "obj:fair")
            .await
            .unwrap()
            .unwrap()
            .queue
            .is_empty()
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;

    let objects = inspect(c.redis(), "obj:*").await.unwrap();
    let kinds: Vec<(&str, ObjectKind)> =
        objects.iter().map(|o| (o.name.as_str(), o.kind)).collect();
    assert_eq!(
        kinds,
        [
            ("obj:fair", ObjectKind::FairLock),
            ("obj:fenced", ObjectKind::FencedLock),
            ("obj:latch", ObjectKind::SemaphoreOrLatch),
            ("obj:lock", ObjectKind::Lock),
            ("obj:rw", ObjectKind::ReadWriteLock),
            ("obj:sem", ObjectKind::Semaphore),
        ]
    );
    let by_name = |n: &str| objects.iter().find(|o| o.name == n).unwrap();
    let holder = &by_name("obj:lock").holders[0];
    assert_eq!(holder.client.as_deref(), Some(c.id().to_string().as_str()));
    assert_eq!((holder.holds, holder.app.as_deref()), (1, Some("ops")));
    assert!(by_name("obj:lock").ttl_ms > 0);
    assert_eq!(
        by_name("obj:fenced").token,
        fenced.token().map(|t| t as i64)
    );
    assert_eq!(by_name("obj:rw").mode.as_deref(), Some("read"));
    assert_eq!(
        (by_name("obj:sem").permits.len(), by_name("obj:sem").count),
        (1, Some(2))
    );
    assert_eq!(by_name("obj:latch").count, Some(2));
    let queued = &by_name("obj:fair").queue[0];
    assert!(queued.timeout_in_ms.is_some_and(|t| t > 0), "{queued:?}");
    assert!(inspect_name(c.redis(), "obj:none").await.unwrap().is_none());

    // Freed by its kind's force unlock: the fair lock goes to its waiter.
    let o = inspect_name(c.redis(), "obj:fair").await.unwrap().unwrap();
    assert!(o.force_unlock(&c).await.unwrap());
    within(HANG, "the fair waiter gets the freed lock", waiter)
        .await
        .unwrap()
        .unwrap();
    // The old guard no longer holds it (its unlock says so or finds it lost).
    let _ = fair.unlock().await;
    let o = inspect_name(c.redis(), "obj:sem").await.unwrap().unwrap();
    assert!(o.force_unlock(&c).await.unwrap());
    assert_eq!(sem.available_permits().await.unwrap(), 3);
    drop(permit);
    for g in [lock, fenced, read] {
        g.unlock().await.unwrap();
    }
    c.shutdown().await.unwrap();
}

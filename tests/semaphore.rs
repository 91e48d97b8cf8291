//! The semaphore with leased permits: never over-admitted (checked in
//! Redis), permits of a killed holder come back, releases wake as many
//! waiters as permits came back, waiting without polling, cancellation,
//! lost replies, fixed leases and renewal, bad input, a cluster. (Wire
//! compatibility with Redisson: `tests/redisson_compat.rs`.)

use leasehold_testkit as support;

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold::fred::interfaces::LuaInterface;
use leasehold::{Client, Error};
use support::cluster::RedisCluster;
use support::fixture::{calls, client, client_with, eventually, numsub, within};
use support::{Proxy, RedisServer};
use tokio::time::Instant;

/// Catches hangs; not a performance claim.
const HANG: Duration = Duration::from_secs(60);

/// (free count, taken permits) of semaphore `name`, read in one script.
async fn state(client: &Client, name: &str) -> (i64, i64) {
    let timeout = format!("{{{name}}}:timeout");
    let reply: Vec<i64> = client
        .redis()
        .eval(
            "return {tonumber(redis.call('get', KEYS[1]) or '0'), redis.call('zcard', KEYS[2])}",
            vec![name.to_owned(), timeout],
            Vec::<String>::new(),
        )
        .await
        .expect("read the semaphore");
    (reply[0], reply[1])
}

/// The same from the test's own connection to the server.
fn server_state(server: &RedisServer, name: &str) -> (i64, i64) {
    let free = server.cmd(&["GET", name]).parse().unwrap_or(0);
    let taken = server
        .cmd(&["ZCARD", &format!("{{{name}}}:timeout")])
        .parse()
        .unwrap();
    (free, taken)
}

// --- never over-admitted -----------------------------------------------------

/// 16 tasks on 2 clients race for 3 permits, 25 rounds each, mixing
/// `acquire`, `try_acquire_for`, fixed leases, `release` and drop. While a
/// task holds a permit, Redis shows at most 3 taken and free + taken = 3,
/// and no more than 3 tasks are inside at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_tasks_never_exceed_three_permits() {
    const TASKS: usize = 16;
    const ROUNDS: usize = 25;
    let server = RedisServer::start();
    let clients = [client(&server).await, client(&server).await];
    let sem = clients[0].semaphore("pool");
    assert!(sem.try_set_permits(3).await.unwrap());
    assert!(!sem.try_set_permits(5).await.unwrap(), "set only once");

    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let c = clients[t % 2].clone();
        let sem = c.semaphore("pool");
        let (inside, most) = (inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            let mut held = 0;
            for round in 0..ROUNDS {
                let permit = match (t + round) % 4 {
                    0 => sem.acquire().await.unwrap(),
                    1 => sem
                        .acquire_with_lease(Duration::from_secs(30))
                        .await
                        .unwrap(),
                    _ => match sem
                        .try_acquire_for(Duration::from_millis(50))
                        .await
                        .unwrap()
                    {
                        Some(p) => p,
                        None => continue,
                    },
                };
                held += 1;
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                assert!(now <= 3, "{now} tasks inside");
                let (free, taken) = state(&c, "pool").await;
                assert!(taken <= 3, "Redis shows {taken} permits taken");
                assert_eq!(free + taken, 3, "free {free} + taken {taken}");
                assert!(free >= 0);
                tokio::time::sleep(Duration::from_millis((round % 3) as u64)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                if round % 2 == 0 {
                    permit.release().await.unwrap();
                } else {
                    drop(permit);
                }
            }
            held
        }));
    }
    let mut held = 0;
    within(Duration::from_secs(120), "every round", async {
        for t in tasks {
            held += t.await.unwrap();
        }
    })
    .await;
    eprintln!(
        "{held} permits taken, at most {} at once",
        most.load(Ordering::SeqCst)
    );
    assert!(held >= TASKS * ROUNDS / 2);
    eventually(Duration::from_secs(30), "every permit back", || {
        server_state(&server, "pool") == (3, 0)
    })
    .await;
    assert_eq!(sem.available_permits().await.unwrap(), 3);
    for c in &clients {
        c.shutdown().await.unwrap();
    }
}

// --- a holder process SIGKILLed ----------------------------------------------

const CHILD_URL: &str = "LEASEHOLD_SEM_CHILD_URL";
const CHILD_WATCHDOG_MS: &str = "LEASEHOLD_SEM_CHILD_WATCHDOG_MS";
const CHILD_SEM: &str = "crashy-sem";

/// Not a test: the holder process of `killed_holder_process_*`. Runs only
/// when re-executed by the parent with `LEASEHOLD_SEM_CHILD_URL` set.
#[tokio::test]
#[ignore = "child process of killed_holder_process_gives_its_permits_back"]
async fn child_permit_holder_process() {
    let Ok(url) = std::env::var(CHILD_URL) else {
        return;
    };
    let wd_ms: u64 = std::env::var(CHILD_WATCHDOG_MS)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let c = Client::builder()
        .url(&url)
        .watchdog_timeout(Duration::from_millis(wd_ms))
        .build()
        .await
        .unwrap();
    let sem = c.semaphore(CHILD_SEM);
    let _a = sem.acquire().await.unwrap();
    let _b = sem.acquire().await.unwrap();
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "ACQUIRED").unwrap();
        out.flush().unwrap();
    }
    // "Forever": the parent kills us long before this.
    tokio::time::sleep(Duration::from_secs(300)).await;
}

/// Kills the child if the test panics before it does.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A process holding both permits of a semaphore (watchdog leases, 2 s
/// timeout, renewed while it lived) is SIGKILLed: a waiter here gets a
/// permit within the watchdog timeout, with a handful of scripts meanwhile
/// (it sleeps until the nearest expiry, no polling), and both permits are
/// back in the count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_process_gives_its_permits_back() {
    let wd = Duration::from_secs(2);
    let server = RedisServer::start();
    let waiter_client = client(&server).await;
    let sem = waiter_client.semaphore(CHILD_SEM);
    assert!(sem.try_set_permits(2).await.unwrap());
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_permit_holder_process",
            "--nocapture",
            "--ignored",
        ])
        .env(CHILD_URL, server.url())
        .env(CHILD_WATCHDOG_MS, wd.as_millis().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("re-exec the test binary");
    let stdout = child.stdout.take().unwrap();
    let mut child = KillOnDrop(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.trim() == "ACQUIRED" {
                let _ = tx.send(());
            }
        }
    });
    tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(60)))
        .await
        .unwrap()
        .expect("child printed ACQUIRED");
    assert_eq!(
        server_state(&server, CHILD_SEM),
        (0, 2),
        "the child holds both"
    );
    // Renewed while the child lives: still held after three timeouts.
    tokio::time::sleep(wd * 3).await;
    assert_eq!(server_state(&server, CHILD_SEM), (0, 2), "renewed");

    let s = sem.clone();
    let waiter = tokio::spawn(async move { s.acquire().await });
    eventually(Duration::from_secs(20), "waiter subscribed", || {
        numsub(&server, "redisson_sc:{crashy-sem}") == 1
    })
    .await;
    let before = calls(&server, "evalsha");
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let killed = Instant::now();
    let permit = within(wd + HANG, "waiter after the kill", waiter)
        .await
        .unwrap()
        .unwrap();
    let took = killed.elapsed();
    let scripts = calls(&server, "evalsha") - before;
    eprintln!("waiter got a permit {took:?} after SIGKILL, {scripts} EVALSHA meanwhile");
    assert!(
        took <= wd + Duration::from_secs(2),
        "took {took:?} for a {wd:?} watchdog lease"
    );
    assert!(scripts <= 10, "{scripts} scripts while waiting: polling");
    assert_eq!(server_state(&server, CHILD_SEM), (1, 1), "both came back");
    permit.release().await.unwrap();
    assert_eq!(server_state(&server, CHILD_SEM), (2, 0));
    waiter_client.shutdown().await.unwrap();
}

// --- wake-ups ----------------------------------------------------------------

/// Six waiters on one client: `add_permits(2)` lets exactly two in, with
/// one acquire each (the others are not woken), and releases hand the
/// permits on until everyone has had one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_permits_wakes_that_many_waiters() {
    const WAITERS: usize = 6;
    let server = RedisServer::start();
    // Waiters must be woken by messages, not by re-checks.
    let c = client_with(&server, |b| b.recheck_interval(Duration::from_secs(60))).await;
    let sem = c.semaphore("grow");
    assert!(sem.try_set_permits(0).await.unwrap());
    // Load the script now: a NOSCRIPT reply counts as an EVALSHA call.
    sem.add_permits(1).await.unwrap();
    sem.add_permits(-1).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let (sem, tx) = (sem.clone(), tx.clone());
        tasks.push(tokio::spawn(async move {
            let permit = sem.acquire().await.unwrap();
            tx.send((i, permit)).unwrap();
        }));
    }
    eventually(Duration::from_secs(20), "waiters subscribed", || {
        numsub(&server, "redisson_sc:{grow}") == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = calls(&server, "evalsha");
    sem.add_permits(2).await.unwrap();
    let mut permits = Vec::new();
    for _ in 0..2 {
        permits.push(within(HANG, "a woken waiter", rx.recv()).await.unwrap());
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(rx.try_recv().is_err(), "a third waiter got in");
    let scripts = calls(&server, "evalsha") - before;
    eprintln!("add_permits(2) with {WAITERS} waiters: {scripts} EVALSHA");
    // add_permits itself, then one acquire per woken waiter.
    assert!(
        scripts <= 3,
        "{scripts} scripts: more than two waiters woke"
    );
    assert_eq!(server_state(&server, "grow"), (0, 2));

    // Each release wakes one more waiter.
    let mut served = permits.len();
    while let Some((_, permit)) = permits.pop() {
        permit.release().await.unwrap();
        if served < WAITERS {
            permits.push(within(HANG, "handed on", rx.recv()).await.unwrap());
            served += 1;
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(server_state(&server, "grow"), (2, 0));
    c.shutdown().await.unwrap();
}

/// `force_release_all` frees every permit out, whoever holds it (this
/// client's and another client's), wakes a waiter and says how many it
/// freed; this client's permit reports lost at once, and the other
/// client's release gives nothing back a second time. With no permit out
/// it changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_all_frees_every_permit_and_wakes_waiters() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let sem = a.semaphore("forced");
    assert!(sem.try_set_permits(2).await.unwrap());
    let mine = sem.acquire().await.unwrap();
    let theirs = b.semaphore("forced").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let sem = b.semaphore("forced");
        async move { sem.acquire().await }
    });
    eventually(HANG, "the waiter subscribed", || {
        numsub(&server, "redisson_sc:{forced}") >= 1
    })
    .await;
    assert_eq!(server_state(&server, "forced"), (0, 2));

    assert_eq!(sem.force_release_all().await.unwrap(), 2);
    assert!(mine.is_lost(), "this client's permit is lost at once");
    let woken = within(HANG, "the waiter is woken", waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(server_state(&server, "forced"), (1, 1));
    // Freed already: gives nothing back.
    assert!(matches!(theirs.release().await, Err(Error::NotHeld { .. })));
    drop(mine);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(server_state(&server, "forced"), (1, 1));
    woken.release().await.unwrap();
    assert_eq!(server_state(&server, "forced"), (2, 0));
    assert_eq!(sem.force_release_all().await.unwrap(), 0);
    assert_eq!(server_state(&server, "forced"), (2, 0));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A `force_release_all` held back in the network (the proxy holds its
/// request and closes the connection; the client gets its answer on a new
/// one) whose copy reaches Redis after another permit was taken frees
/// nothing; a reply lost with the connection is sent again and frees once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_all_runs_once() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr()).await;
    let url = proxy.url();
    let c = client_with(&server, |b| b.url(&url)).await;
    let other = client(&server).await;
    let sem = c.semaphore("once");
    assert!(sem.try_set_permits(1).await.unwrap());
    // The script cached.
    assert_eq!(sem.force_release_all().await.unwrap(), 0);

    let first = other.semaphore("once").acquire().await.unwrap();
    proxy.stall_next_matching(b"$7\r\npublish\r\n");
    assert_eq!(
        within(
            HANG,
            "answered on a new connection",
            sem.force_release_all()
        )
        .await
        .unwrap(),
        1
    );
    assert_eq!(proxy.stalled_count(), 1, "the request was held back");
    assert!(matches!(first.release().await, Err(Error::NotHeld { .. })));
    let second = other.semaphore("once").acquire().await.unwrap();
    proxy.release_stalled();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        server_state(&server, "once"),
        (0, 1),
        "a late copy freed a permit taken after it"
    );
    assert!(!second.is_lost());

    proxy.drop_replies_once();
    assert_eq!(
        within(HANG, "freed across a cut", sem.force_release_all())
            .await
            .unwrap(),
        1
    );
    assert_eq!(server_state(&server, "once"), (1, 0), "freed once");
    assert!(matches!(second.release().await, Err(Error::NotHeld { .. })));
    c.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
}

/// 20 waiters on 2 clients wait 2 s for a held permit (30 s watchdog
/// lease): Redis sees a small, fixed number of scripts per waiter and one
/// subscription per client; then everyone gets the permit in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_costs_a_constant_per_waiter() {
    const WAITERS: usize = 20;
    let server = RedisServer::start();
    let holder = client(&server).await;
    let clients = [client(&server).await, client(&server).await];
    let sem = holder.semaphore("busy");
    sem.try_set_permits(1).await.unwrap();
    let permit = sem.acquire().await.unwrap();

    let before = calls(&server, "evalsha");
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let sem = clients[i % 2].semaphore("busy");
        tasks.push(tokio::spawn(async move {
            sem.acquire().await.unwrap().release().await.unwrap();
        }));
    }
    eventually(Duration::from_secs(20), "both clients subscribed", || {
        numsub(&server, "redisson_sc:{busy}") == 2
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let during = calls(&server, "evalsha") - before;
    eprintln!("{WAITERS} waiters over 2 s: {during} EVALSHA");
    assert!(
        during <= 3 * WAITERS as u64,
        "{during} scripts for {WAITERS} waiters over 2 s: that is polling"
    );
    assert_eq!(clients[0].subscribed_channels(), 1);

    permit.release().await.unwrap();
    within(HANG, "every waiter gets the permit in turn", async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await;
    assert_eq!(server_state(&server, "busy"), (1, 0));
    eventually(Duration::from_secs(10), "unsubscribed", || {
        numsub(&server, "redisson_sc:{busy}") == 0
    })
    .await;
    for c in clients.iter().chain([&holder]) {
        c.shutdown().await.unwrap();
    }
}

// --- cancellation ------------------------------------------------------------

/// Acquires cut off at random points (racing the reply, while waiting, as
/// a permit is handed over), many rounds on 2 clients: afterwards no
/// permit is left taken, the count is back, no subscription is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquires_leave_nothing_behind() {
    let server = RedisServer::start();
    let clients = [client(&server).await, client(&server).await];
    let sem = clients[0].semaphore("cancel");
    sem.try_set_permits(2).await.unwrap();

    // Racing the reply: cut off after 0..3 ms, one at a time.
    for round in 0..200u64 {
        let s = clients[(round % 2) as usize].semaphore("cancel");
        let limit = Duration::from_micros((round * 37) % 3000);
        tokio::spawn(async move {
            if let Ok(Ok(p)) = tokio::time::timeout(limit, s.acquire()).await {
                drop(p);
            }
        })
        .await
        .unwrap();
    }
    eventually(
        Duration::from_secs(30),
        "every abandoned permit back",
        || server_state(&server, "cancel") == (2, 0),
    )
    .await;

    // Contended: 12 tasks, random timeouts around waiting acquires and
    // holds, 30 rounds each.
    let mut tasks = Vec::new();
    for t in 0..12u64 {
        let s = clients[(t % 2) as usize].semaphore("cancel");
        tasks.push(tokio::spawn(async move {
            for round in 0..30u64 {
                let limit = Duration::from_micros((t * 7919 + round * 104_729) % 8000);
                let attempt = async {
                    let p = if round % 3 == 0 {
                        s.try_acquire_for(Duration::from_millis(5)).await?
                    } else {
                        Some(s.acquire().await?)
                    };
                    tokio::time::sleep(Duration::from_micros(round * 100)).await;
                    Ok::<_, Error>(p)
                };
                let _ = tokio::time::timeout(limit, attempt).await;
            }
        }));
    }
    within(HANG, "contended rounds", async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await;
    eventually(
        Duration::from_secs(30),
        "contended: every permit back",
        || server_state(&server, "cancel") == (2, 0),
    )
    .await;

    // Aborted while waiting, and right as a permit is handed over.
    let a = sem.acquire().await.unwrap();
    let b = sem.acquire().await.unwrap();
    let mut waiters = Vec::new();
    for i in 0..10 {
        let s = clients[i % 2].semaphore("cancel");
        waiters.push(tokio::spawn(async move { s.acquire().await.map(drop) }));
    }
    eventually(Duration::from_secs(30), "waiters subscribed", || {
        numsub(&server, "redisson_sc:{cancel}") == 2
    })
    .await;
    a.release().await.unwrap();
    for w in &waiters {
        w.abort();
    }
    drop(b);
    for w in waiters {
        let _ = w.await;
    }
    eventually(
        Duration::from_secs(30),
        "aborted: every permit back",
        || server_state(&server, "cancel") == (2, 0),
    )
    .await;
    eventually(Duration::from_secs(30), "no subscription", || {
        clients[0].subscribed_channels() + clients[1].subscribed_channels() == 0
            && numsub(&server, "redisson_sc:{cancel}") == 0
    })
    .await;
    // Still works for everyone.
    let p = within(HANG, "acquire after the storm", sem.acquire())
        .await
        .unwrap();
    p.release().await.unwrap();
    for c in &clients {
        c.shutdown().await.unwrap();
    }
}

/// Acquires, releases and added permits whose replies are lost with the
/// connection: each is sent again and counts once.
#[tokio::test]
async fn lost_replies_never_take_or_give_twice() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr()).await;
    let url = proxy.url();
    let c = client_with(&server, |b| {
        b.url(&url).command_timeout(Duration::from_secs(2))
    })
    .await;
    let sem = c.semaphore("cut");
    // Warm: scripts cached, so a dropped reply is one of a script that ran.
    sem.try_set_permits(2).await.unwrap();
    sem.acquire().await.unwrap().release().await.unwrap();
    sem.add_permits(1).await.unwrap();
    sem.add_permits(-1).await.unwrap();

    proxy.drop_replies_once();
    let p = within(HANG, "acquire across a cut", sem.acquire())
        .await
        .unwrap();
    assert_eq!(server_state(&server, "cut"), (1, 1));
    proxy.drop_replies_once();
    within(HANG, "release across a cut", p.release())
        .await
        .unwrap();
    assert_eq!(server_state(&server, "cut"), (2, 0));
    proxy.drop_replies_once();
    within(HANG, "add across a cut", sem.add_permits(3))
        .await
        .unwrap();
    assert_eq!(server_state(&server, "cut"), (5, 0));
    proxy.drop_replies_once();
    let p = within(HANG, "try_acquire across a cut", sem.try_acquire())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(server_state(&server, "cut"), (4, 1));
    proxy.drop_replies_once();
    drop(p);
    eventually(HANG, "dropped across a cut", || {
        server_state(&server, "cut") == (5, 0)
    })
    .await;
    c.shutdown().await.unwrap();
}

// --- leases ------------------------------------------------------------------

/// A permit with a fixed 500 ms lease is lost when it ends; the next
/// acquire reclaims it, and its late release changes nothing.
#[tokio::test]
async fn fixed_lease_permits_expire_and_are_reclaimed() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let sem = c.semaphore("lease");
    sem.try_set_permits(1).await.unwrap();
    let short = sem
        .acquire_with_lease(Duration::from_millis(500))
        .await
        .unwrap();
    assert_eq!(short.id().len(), 32);
    assert!(short
        .id()
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    within(Duration::from_secs(10), "lost at lease end", short.lost()).await;
    assert!(short.is_lost());
    let next = within(HANG, "reclaimed", sem.acquire()).await.unwrap();
    assert!(matches!(short.release().await, Err(Error::NotHeld { .. })));
    assert_eq!(
        server_state(&server, "lease"),
        (0, 1),
        "no permit given twice"
    );
    next.release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    c.shutdown().await.unwrap();
}

/// A watchdog permit whose entry is removed behind its back (as a Java
/// release by id does) or found expired is reported lost at the next
/// renewal and never brought back; the count stays right.
#[tokio::test]
async fn renewal_never_brings_back_a_permit() {
    let server = RedisServer::start();
    let c = client_with(&server, |b| b.watchdog_timeout(Duration::from_millis(900))).await;
    let sem = c.semaphore("renew");
    sem.try_set_permits(2).await.unwrap();
    let a = sem.acquire().await.unwrap();
    let b = sem.acquire().await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!a.is_lost() && !b.is_lost(), "renewed past the timeout");

    // `a` released by someone else: removed and counted back.
    let zset = "{renew}:timeout";
    let removed = server.cmd(&[
        "EVAL",
        "local m = redis.call('zrange', KEYS[2], 0, -1) \
         local n = redis.call('zrem', KEYS[2], m[1]) \
         redis.call('incrby', KEYS[1], n) return n",
        "2",
        "renew",
        zset,
    ]);
    assert_eq!(removed, "1");
    within(Duration::from_secs(10), "one of them lost", async {
        tokio::select! {
            _ = a.lost() => {}
            _ = b.lost() => {}
        }
    })
    .await;
    let (lost, kept) = if a.is_lost() { (a, b) } else { (b, a) };
    // The other one's score pushed into the past: expired, not renewed.
    let expire_all = "for _, m in ipairs(redis.call('zrange', KEYS[1], 0, -1)) do \
        redis.call('zadd', KEYS[1], 'xx', 1, m) end return 0";
    server.cmd(&["EVAL", expire_all, "1", zset]);
    within(Duration::from_secs(10), "expired permit lost", kept.lost()).await;
    let (_, taken) = server_state(&server, "renew");
    assert_eq!(taken, 1, "the expired permit was not renewed");
    assert!(matches!(lost.release().await, Err(Error::NotHeld { .. })));
    assert!(matches!(kept.release().await, Err(Error::NotHeld { .. })));
    assert_eq!(sem.available_permits().await.unwrap(), 2);
    assert_eq!(server_state(&server, "renew"), (2, 0));
    c.shutdown().await.unwrap();
}

/// Shutdown gives every permit back; bad input is refused before anything
/// is sent.
#[tokio::test]
async fn shutdown_and_bad_input() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let sem = c.semaphore("misc");
    assert_eq!(sem.available_permits().await.unwrap(), 0, "not set");
    assert!(sem.try_acquire().await.unwrap().is_none());
    sem.add_permits(3).await.unwrap();
    sem.add_permits(-1).await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 2);
    let p = sem.try_acquire().await.unwrap().unwrap();
    let q = sem
        .try_acquire_with_lease(Duration::ZERO, Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    assert_ne!(p.id(), q.id());
    assert!(sem.try_acquire().await.unwrap().is_none());
    sem.add_permits(-5).await.unwrap();
    assert_eq!(
        sem.available_permits().await.unwrap(),
        0,
        "negative shows 0"
    );
    sem.add_permits(5).await.unwrap();

    let empty = c.semaphore("");
    assert!(matches!(
        empty.acquire().await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        empty.add_permits(1).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        sem.acquire_with_lease(Duration::ZERO).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        sem.try_set_permits(u64::MAX).await,
        Err(Error::InvalidArgument(_))
    ));

    c.shutdown().await.unwrap();
    assert_eq!(
        server_state(&server, "misc"),
        (2, 0),
        "shutdown gave both back"
    );
    assert!(matches!(sem.acquire().await, Err(Error::Shutdown)));
    drop((p, q));
}

/// On a 3-primary cluster (sharded pub/sub): permits of names with and
/// without braces are renewed past the watchdog timeout, and a release
/// wakes a waiter on another client by its message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn works_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let build = || {
        Client::builder()
            .url(&cluster.url())
            .watchdog_timeout(Duration::from_millis(900))
            .recheck_interval(Duration::from_secs(60))
            .build()
    };
    let (a, b) = (build().await.unwrap(), build().await.unwrap());
    for name in ["{user:1}:slots", "plain"] {
        let sem = a.semaphore(name);
        assert!(sem.try_set_permits(1).await.unwrap());
        let permit = sem.acquire().await.unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(!permit.is_lost(), "{name}: renewed on the cluster");
        let other = b.semaphore(name);
        let waiter = tokio::spawn(async move { other.acquire().await });
        let channel = sem.channel().to_owned();
        eventually(Duration::from_secs(20), "waiter subscribed", || {
            cluster.subscribers(&channel, &channel) == 1
        })
        .await;
        permit.release().await.unwrap();
        let next = within(Duration::from_secs(10), "woken by the release", waiter)
            .await
            .unwrap()
            .unwrap();
        next.release().await.unwrap();
        assert_eq!(sem.available_permits().await.unwrap(), 1);
    }
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

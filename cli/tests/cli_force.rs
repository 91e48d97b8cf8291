//! `leasehold unlock --force` against a real redis-server, with the
//! network in between (issue 44, item 4): the tool's force unlock runs at
//! most once, whatever the network does with its request, and does what
//! the library's own force unlock of the kind does.
//!
//! The held-back copy: the proxy holds the force unlock's request back
//! (`stall_next_matching`) and closes the tool's end of that connection,
//! so the request is answered on a new connection; a later holder takes
//! the object; then the held copy reaches Redis. It must free nothing.

use leasehold_testkit as support;

use std::process::{Command, Output};
use std::time::Duration;

use leasehold::{Client, Owner};
use support::fixture::{client, client_with, eventually, numsub, within};
use support::proxy::Proxy;
use support::RedisServer;

const BIN: &str = env!("CARGO_BIN_EXE_leasehold");
/// Bounds that only catch hangs.
const HANG: Duration = Duration::from_secs(30);
/// A bulk string "publish": an argument of every force unlock (old and
/// new), of no read the tool sends.
const PUBLISH_ARG: &[u8] = b"$7\r\npublish\r\n";

/// `leasehold unlock --force --url URL NAME`, off the test's runtime.
async fn force(url: &str, name: &str) -> Output {
    let args = vec![
        "unlock".to_owned(),
        "--force".to_owned(),
        "--url".to_owned(),
        url.to_owned(),
        name.to_owned(),
    ];
    let run = tokio::task::spawn_blocking(move || {
        Command::new(BIN)
            .args(&args)
            .output()
            .expect("run leasehold")
    });
    within(HANG, "leasehold unlock --force", run).await.unwrap()
}

fn said(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn field_of(c: &Client) -> String {
    format!("{}:{}", c.id(), Owner::current().id())
}

/// Runs the tool's force unlock of `name` through a proxy that holds its
/// request back (the tool gets its answer on a new connection), checks it
/// freed something, runs `then` (a later holder takes the object), then
/// lets the held copy reach Redis and waits a little for it to run.
async fn force_with_a_late_copy<F, Fut, T>(
    server: &RedisServer,
    name: &str,
    freed: &str,
    then: F,
) -> T
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let proxy = Proxy::start(&server.addr()).await;
    proxy.stall_next_matching(PUBLISH_ARG);
    let out = force(&proxy.url(), name).await;
    assert!(out.status.success(), "{}", said(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(freed),
        "{}",
        said(&out)
    );
    assert_eq!(
        proxy.stalled_count(),
        1,
        "the force unlock was held back in the network"
    );
    let later = then().await;
    proxy.release_stalled();
    // The held bytes go to the server on their connection (if Redis still
    // has it), then that connection closes.
    eventually(HANG, "the held connection closed", || {
        proxy.connection_count() == 0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    later
}

/// A lock: a late copy of the force unlock frees the next holder's lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_copy_of_a_forced_lock_unlock_frees_no_later_holder() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let held = a.lock("x").lock().await.unwrap();
    let (b_guard, b_field) = force_with_a_late_copy(&server, "x", "freed lock `x`", || async {
        within(HANG, "B takes the lock", b.lock("x").lock())
            .await
            .map(|g| (g, field_of(&b)))
            .unwrap()
    })
    .await;
    drop(held);
    assert_eq!(
        server.cmd(&["HGET", "x", &b_field]),
        "1",
        "a late copy of `unlock --force` freed the lock B took after it"
    );
    assert!(a.lock("x").try_lock().await.unwrap().is_none());
    b_guard.unlock().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A fair lock: the force unlock hands the lock to the waiter at the
/// head of the queue (B), and a late copy must not free it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_copy_of_a_forced_fair_unlock_frees_no_later_holder() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let held = a.fair_lock("f").lock().await.unwrap();
    let owner = Owner::new();
    let b_field = format!("{}:{}", b.id(), owner.id());
    let lock = b.fair_lock("f");
    let waiting = tokio::spawn(owner.scope(async move { lock.lock().await }));
    eventually(HANG, "B queued and listening", || {
        server.cmd(&["LINDEX", "redisson_lock_queue:{f}", "0"]) == b_field
            && numsub(&server, &format!("redisson_lock__channel:{{f}}:{b_field}")) > 0
    })
    .await;
    let b_guard = force_with_a_late_copy(&server, "f", "freed fair_lock `f`", || async {
        within(HANG, "B, the head waiter, takes the lock", waiting)
            .await
            .unwrap()
            .unwrap()
    })
    .await;
    drop(held);
    assert_eq!(
        server.cmd(&["HGET", "f", &b_field]),
        "1",
        "a late copy of `unlock --force` freed the fair lock B took after it"
    );
    b_guard.unlock().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A read-write lock in write mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_copy_of_a_forced_rw_unlock_frees_no_later_holder() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let held = a.read_write_lock("rw").write().lock().await.unwrap();
    let (b_guard, b_field) =
        force_with_a_late_copy(&server, "rw", "freed rw_lock `rw`", || async {
            within(
                HANG,
                "B takes the write lock",
                b.read_write_lock("rw").write().lock(),
            )
            .await
            .map(|g| (g, field_of(&b)))
            .unwrap()
        })
        .await;
    drop(held);
    assert_eq!(
        server.cmd(&["HGET", "rw", &format!("{b_field}:write")]),
        "1",
        "a late copy of `unlock --force` freed the write lock B took after it"
    );
    b_guard.unlock().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A semaphore: a late copy of "free every permit out" frees the permit B
/// took after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_copy_of_a_forced_semaphore_release_frees_no_later_permit() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let sem = a.semaphore("pool");
    assert!(sem.try_set_permits(1).await.unwrap());
    let held = sem.acquire().await.unwrap();
    let b_permit = force_with_a_late_copy(
        &server,
        "pool",
        "freed semaphore `pool`: 1 permit",
        || async {
            within(HANG, "B takes the permit", b.semaphore("pool").acquire())
                .await
                .unwrap()
        },
    )
    .await;
    drop(held);
    assert_eq!(
        server.cmd(&["ZCARD", "{pool}:timeout"]),
        "1",
        "a late copy of `unlock --force` freed the permit B took after it"
    );
    assert_eq!(b.semaphore("pool").available_permits().await.unwrap(), 0);
    b_permit.release().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A latch: a late copy of the delete deletes the count set after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_copy_of_a_forced_latch_delete_deletes_no_later_count() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let latch = a.count_down_latch("gate");
    assert!(latch.try_set_count(1).await.unwrap());
    // A waiter names the kind (a bare count nobody waits on is left alone).
    let waiter = tokio::spawn({
        let latch = latch.clone();
        async move { latch.wait().await }
    });
    eventually(HANG, "the latch waiter subscribed", || {
        numsub(&server, latch.channel()) > 0
    })
    .await;
    force_with_a_late_copy(&server, "gate", "freed latch `gate`", || async {
        within(HANG, "the waiter goes on", waiter)
            .await
            .unwrap()
            .unwrap();
        // The latch is set again.
        assert!(latch.try_set_count(2).await.unwrap());
    })
    .await;
    assert_eq!(
        latch.count().await.unwrap(),
        2,
        "a late copy of `unlock --force` deleted the count set after it"
    );
    a.shutdown().await.unwrap();
}

/// A fair lock with a waiter: the force unlock hands the lock to the head
/// waiter, as `FairLock::force_unlock` does (the waiter's place is kept),
/// in the same step: the waiter holds it even before it hears of it (its
/// client is cut off here, so it cannot take the lock by itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_fair_unlock_hands_the_lock_to_the_head_waiter() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let proxy = Proxy::start(&server.addr()).await;
    let w = client_with(&server, |builder| {
        builder
            .url(&proxy.url())
            .command_timeout(Duration::from_secs(2))
    })
    .await;
    let held = a.fair_lock("q").lock().await.unwrap();
    let owner = Owner::new();
    let w_field = format!("{}:{}", w.id(), owner.id());
    let lock = w.fair_lock("q");
    let waiting = tokio::spawn(owner.scope(async move { lock.lock().await }));
    eventually(HANG, "W queued and listening", || {
        server.cmd(&["LINDEX", "redisson_lock_queue:{q}", "0"]) == w_field
            && numsub(&server, &format!("redisson_lock__channel:{{q}}:{w_field}")) > 0
    })
    .await;
    // W hears nothing from now on and sends nothing.
    proxy.blackhole();
    let out = force(&server.url(), "q").await;
    assert!(out.status.success(), "{}", said(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("freed fair_lock `q`"),
        "{}",
        said(&out)
    );
    assert_eq!(
        server.cmd(&["HGET", "q", &w_field]),
        "1",
        "the head waiter was handed the lock ({})",
        support::fixture::dump_keys(&server)
    );
    assert!(a.fair_lock("q").try_lock().await.unwrap().is_none());
    drop(held);
    waiting.abort();
    proxy.pass();
    a.shutdown().await.unwrap();
    let _ = w.shutdown().await;
}

/// On a cluster: the force unlock wakes a waiter on the channel the
/// library's clients listen on (the tool's client chooses publish or
/// spublish as every leasehold client does), promptly (its recheck
/// interval is 60 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_unlock_on_a_cluster_wakes_the_waiter() {
    let cluster = support::cluster::RedisCluster::start(3, 0);
    let url = cluster.url();
    let a = Client::builder().url(&url).build().await.unwrap();
    let b = Client::builder()
        .url(&url)
        .recheck_interval(Duration::from_secs(60))
        .build()
        .await
        .unwrap();
    let held = a.lock("c:x").lock().await.unwrap();
    let lock = b.lock("c:x");
    let waiting = tokio::spawn(async move { lock.lock().await });
    eventually(HANG, "B subscribed", || b.subscribed_channels() > 0).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = tokio::time::Instant::now();
    let out = force(&url, "c:x").await;
    assert!(out.status.success(), "{}", said(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("freed lock `c:x`"),
        "{}",
        said(&out)
    );
    let guard = within(HANG, "B is woken and takes the lock", waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "B was woken by the message, not by a re-check"
    );
    drop(held);
    guard.unlock().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

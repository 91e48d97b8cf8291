//! Watchdog configuration errors: a process-wide watchdog configured after
//! it was used, a client given both a watchdog and a timeout, renew
//! intervals and batch sizes out of range. Each is an
//! `Error::InvalidArgument`, never silently ignored.
//!
//! The process-wide watchdog is set once per process, and the tests of one
//! binary share a process (in parallel threads): the cases that touch it
//! run in child processes (this binary, re-executed), one case per child.
//! The other tests here never build a client on the global watchdog.

use leasehold_testkit as support;

use std::process::{Command, Stdio};
use std::time::Duration;

use leasehold::{Client, Error, Watchdog};
use support::fixture::client_with;
use support::RedisServer;

const CHILD_URL: &str = "LEASEHOLD_WATCHDOG_CONFIG_URL";

fn is_invalid<T: std::fmt::Debug>(r: &leasehold::Result<T>) -> bool {
    matches!(r, Err(Error::InvalidArgument(_)))
}

/// Runs the ignored child test `test` in a process of its own.
fn run_child(test: &str, url: &str) {
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--ignored", "--quiet", "--test-threads=1"])
        .env(CHILD_URL, url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .status()
        .expect("re-exec the test binary");
    assert!(status.success(), "child {test} failed: {status}");
}

/// The process-wide watchdog, once in each order: configured before its
/// first use (clients then use it), and used before a configuration (which
/// is then refused and changes nothing).
#[test]
fn global_watchdog_is_configured_once_before_use() {
    let server = RedisServer::start();
    run_child("child_configure_then_use", &server.url());
    run_child("child_use_then_configure", &server.url());
}

#[tokio::test]
#[ignore = "child process of global_watchdog_is_configured_once_before_use"]
async fn child_configure_then_use() {
    let url = std::env::var(CHILD_URL).expect("run by the parent test");
    let configured = Watchdog::new(Duration::from_secs(12))
        .unwrap()
        .with_renew_interval(Duration::from_secs(2))
        .unwrap()
        .with_batch_size(50)
        .unwrap()
        .set_global()
        .expect("the first configuration is taken");
    assert_eq!(configured.timeout(), Duration::from_secs(12));

    // A second configuration is refused, before or after a client.
    let again = Watchdog::new(Duration::from_secs(60)).unwrap().set_global();
    assert!(is_invalid(&again), "second set_global: {again:?}");

    let a = Client::connect(&url).await.unwrap();
    let b = Client::connect(&url).await.unwrap();
    for c in [&a, &b] {
        assert_eq!(c.watchdog().timeout(), Duration::from_secs(12));
        assert_eq!(c.watchdog().renew_interval(), Duration::from_secs(2));
        assert_eq!(c.watchdog().batch_size(), 50);
    }
    // One watchdog for both clients: their leases are counted together.
    let ga = a.lock("global:a").lock().await.unwrap();
    let gb = b.lock("global:b").lock().await.unwrap();
    assert_eq!(Watchdog::global().lease_count(), 2);
    assert_eq!(a.watchdog().lease_count(), 2);
    ga.unlock().await.unwrap();
    gb.unlock().await.unwrap();

    let late = Watchdog::new(Duration::from_secs(60)).unwrap().set_global();
    assert!(is_invalid(&late), "set_global after use: {late:?}");
    assert_eq!(Watchdog::global().timeout(), Duration::from_secs(12));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[tokio::test]
#[ignore = "child process of global_watchdog_is_configured_once_before_use"]
async fn child_use_then_configure() {
    let url = std::env::var(CHILD_URL).expect("run by the parent test");
    // The first client without a watchdog of its own makes the global one
    // with the default timeout.
    let c = Client::connect(&url).await.unwrap();
    assert_eq!(c.watchdog().timeout(), Duration::from_secs(30));

    let late = Watchdog::new(Duration::from_secs(60)).unwrap().set_global();
    match &late {
        Err(Error::InvalidArgument(why)) => {
            assert!(why.contains("already set"), "unclear message: {why}")
        }
        other => panic!("set_global after the global watchdog was used: {other:?}"),
    }
    // Nothing changed: the global watchdog and the client keep 30 s.
    assert_eq!(Watchdog::global().timeout(), Duration::from_secs(30));
    let d = Client::connect(&url).await.unwrap();
    assert_eq!(d.watchdog().timeout(), Duration::from_secs(30));
    let g = d.lock("used-first").lock().await.unwrap();
    assert!(
        d.lock("used-first")
            .remaining_lease()
            .await
            .unwrap()
            .unwrap()
            > Duration::from_secs(20),
        "the lease is the global watchdog's 30 s"
    );
    g.unlock().await.unwrap();
    c.shutdown().await.unwrap();
    d.shutdown().await.unwrap();
}

/// A builder given both a shared watchdog and a timeout of its own fails
/// at `build()`, in either order, before connecting (a requested 60 s
/// never silently becomes the shared watchdog's lease).
#[tokio::test]
async fn watchdog_and_timeout_together_are_refused() {
    let wd = Watchdog::new(Duration::from_secs(6)).unwrap();
    // Nothing listens on port 1: the error comes before any connection.
    let both = Client::builder()
        .url("redis://127.0.0.1:1")
        .watchdog(wd.clone())
        .watchdog_timeout(Duration::from_secs(60))
        .build()
        .await;
    assert!(is_invalid(&both), "watchdog then timeout: {both:?}");
    let both = Client::builder()
        .url("redis://127.0.0.1:1")
        .watchdog_timeout(Duration::from_secs(60))
        .watchdog(wd.clone())
        .build()
        .await;
    assert!(is_invalid(&both), "timeout then watchdog: {both:?}");

    // Either alone is fine, and is what the client uses.
    let server = RedisServer::start();
    let shared = client_with(&server, |b| b.watchdog(wd.clone())).await;
    assert_eq!(shared.watchdog().timeout(), Duration::from_secs(6));
    let own = client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(60))).await;
    assert_eq!(own.watchdog().timeout(), Duration::from_secs(60));
    let g = own.lock("own-timeout").lock().await.unwrap();
    let left = own.lock("own-timeout").remaining_lease().await.unwrap();
    assert!(left.unwrap() > Duration::from_secs(30), "lease {left:?}");
    g.unlock().await.unwrap();
    shared.shutdown().await.unwrap();
    own.shutdown().await.unwrap();
}

/// A renew interval must leave room for a failed renewal to be retried
/// before the lease ends: above `timeout / 2` (or under 10 ms) is refused.
#[test]
fn renew_interval_above_half_the_timeout_is_refused() {
    let timeout = Duration::from_secs(3);
    let wd = || Watchdog::new(timeout).unwrap();
    let at_half = wd().with_renew_interval(timeout / 2);
    assert_eq!(at_half.unwrap().renew_interval(), timeout / 2);
    let above = wd().with_renew_interval(timeout / 2 + Duration::from_millis(1));
    assert!(is_invalid(&above), "interval above timeout/2: {above:?}");
    let equal = wd().with_renew_interval(timeout);
    assert!(is_invalid(&equal), "interval = timeout: {equal:?}");
    let tiny = wd().with_renew_interval(Duration::from_millis(9));
    assert!(is_invalid(&tiny), "interval under 10 ms: {tiny:?}");
    assert_eq!(
        wd().renew_interval(),
        Duration::from_secs(1),
        "default timeout/3"
    );

    // Other bad settings: a zero batch, a timeout under 30 ms, and any
    // change to a watchdog already shared.
    assert!(is_invalid(&wd().with_batch_size(0)));
    assert!(is_invalid(&Watchdog::new(Duration::from_millis(29))));
    let shared = wd();
    let _clone = shared.clone();
    assert!(is_invalid(&shared.clone().with_batch_size(10)));
    assert!(is_invalid(
        &shared.with_renew_interval(Duration::from_millis(500))
    ));
}

//! Hostile input: odd lock names, extreme leases and waits, and servers
//! that want credentials.

use leasehold_testkit as support;

use std::time::Duration;

use leasehold::{Client, Error, Owner};
use support::fixture::{client, exists, lock_keys, within};
use support::RedisServer;
use tokio::time::Instant;

const HANG: Duration = Duration::from_secs(60);

/// Subscribers of `channel`. The count is the reply's last line: a channel
/// name may itself contain line breaks.
fn numsub_any(server: &RedisServer, channel: &str) -> u64 {
    server
        .cmd(&["PUBSUB", "NUMSUB", channel])
        .lines()
        .last()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Polls `check` until it holds, panicking after `limit`.
async fn wait_until(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Lock, re-enter, read the owner field raw, wake a waiter on another
/// client, unlock: `name` behaves like any other name.
async fn ordinary_name(server: &RedisServer, a: &Client, b: &Client, name: &str) {
    let shown: String = name.chars().take(40).collect();
    let me = Owner::new();
    let field = format!("{}:{}", a.id(), me.id());
    let lock = a.lock(name);
    assert_eq!(lock.key(), name);
    let (g1, g2) = me
        .scope(async {
            let g1 = lock.lock().await.unwrap();
            let g2 = lock.lock().await.unwrap();
            assert_eq!(lock.hold_count().await.unwrap(), 2, "{shown:?}: reentrant");
            assert!(lock.is_locked().await.unwrap());
            assert!(lock.remaining_lease().await.unwrap().is_some());
            (g1, g2)
        })
        .await;
    assert_eq!(
        server.cmd(&["HGET", name, &field]),
        "2",
        "{shown:?}: raw HGET of the owner field"
    );
    assert_eq!(server.cmd(&["HLEN", name]), "1");

    let other = b.lock(name);
    let waiter = tokio::spawn(async move { other.lock().await });
    wait_until(
        Duration::from_secs(20),
        &format!("{shown:?}: waiter subscribed"),
        || numsub_any(server, lock.channel()) == 1,
    )
    .await;
    g2.unlock().await.unwrap();
    assert_eq!(server.cmd(&["HGET", name, &field]), "1");
    g1.unlock().await.unwrap();
    let g = within(
        Duration::from_secs(10),
        &format!("{shown:?}: waiter woken"),
        waiter,
    )
    .await
    .unwrap()
    .unwrap();
    let b_field = format!("{}:{}", b.id(), g.owner().id());
    assert_eq!(server.cmd(&["HGET", name, &b_field]), "1");
    g.unlock().await.unwrap();
    assert!(!exists(server, name), "{shown:?}: freed");
    wait_until(
        Duration::from_secs(10),
        &format!("{shown:?}: unsubscribed"),
        || numsub_any(server, lock.channel()) == 0,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_names_are_ordinary_names() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let big = "x".repeat(64 * 1024);
    let names = [
        "with spaces in it",
        "{a}b{",
        "}{",
        "{}",
        "quote\"d 'and' `back`",
        "ünïcødé 🔒 名前",
        "nul\0byte",
        "cr\r\nlf\n",
        "\"]]--",
        "--[[ lua ]]",
        "redisson_lock__channel:{x}",
        "*?[glob]",
        "\\back\\slash",
        "\t\u{7f}\u{1}",
        &big,
    ];
    for name in names {
        within(HANG, "one odd name", ordinary_name(&server, &a, &b, name)).await;
    }
    assert_eq!(
        lock_keys(&server),
        Vec::<String>::new(),
        "no lock state left"
    );
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[tokio::test]
async fn extreme_leases() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.lock("lease");

    // 1 ms: expires, reported lost, unlock is NotHeld.
    let g = lock
        .lock_with_lease(Duration::from_millis(1))
        .await
        .unwrap();
    within(Duration::from_secs(10), "1 ms lease lost", g.lost()).await;
    assert!(g.is_lost());
    wait_until(Duration::from_secs(10), "1 ms lease expired", || {
        !exists(&server, "lease")
    })
    .await;
    assert!(matches!(g.unlock().await, Err(Error::NotHeld { .. })));

    // Days.
    let g = lock
        .lock_with_lease(Duration::from_secs(5 * 86_400))
        .await
        .unwrap();
    let pttl: i64 = server.cmd(&["PTTL", "lease"]).parse().unwrap();
    assert!(pttl > 4 * 86_400_000, "PTTL {pttl}");
    assert!(!g.is_lost());
    g.unlock().await.unwrap();
    assert!(!exists(&server, "lease"));

    // The largest supported lease works; anything above is rejected.
    let max = Duration::from_millis(1 << 40);
    let g = lock.lock_with_lease(max).await.unwrap();
    let pttl: i64 = server.cmd(&["PTTL", "lease"]).parse().unwrap();
    assert!(pttl > (1 << 40) - 60_000, "PTTL {pttl}");
    g.unlock().await.unwrap();
    for over in [
        max + Duration::from_millis(1),
        Duration::from_secs(100 * 365 * 86_400),
        Duration::MAX,
    ] {
        let r = lock.lock_with_lease(over).await;
        assert!(
            matches!(r, Err(Error::InvalidArgument(_))),
            "{over:?}: {r:?}"
        );
        let r = lock.try_lock_with_lease(Duration::ZERO, over).await;
        assert!(
            matches!(r, Err(Error::InvalidArgument(_))),
            "{over:?}: {r:?}"
        );
    }
    assert!(!exists(&server, "lease"), "nothing was sent");
    c.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extreme_waits() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;

    // Zero wait: free → acquired; held → None at once.
    let g = within(
        Duration::from_secs(10),
        "zero wait, free",
        a.lock("wait").try_lock_for(Duration::ZERO),
    )
    .await
    .unwrap()
    .expect("free");
    let started = Instant::now();
    let r = within(
        Duration::from_secs(10),
        "zero wait, held",
        b.lock("wait").try_lock_for(Duration::ZERO),
    )
    .await
    .unwrap();
    assert!(r.is_none());
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    // Duration::MAX: waits until released.
    let lock = b.lock("wait");
    let waiter = tokio::spawn(async move { lock.try_lock_for(Duration::MAX).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished(), "Duration::MAX gave up early");
    g.unlock().await.unwrap();
    let g = within(Duration::from_secs(10), "Duration::MAX wait", waiter)
        .await
        .unwrap()
        .unwrap()
        .expect("acquired after the release");
    g.unlock().await.unwrap();

    // Duration::MAX wait with a fixed lease too.
    let g = a
        .lock("wait")
        .try_lock_with_lease(Duration::MAX, Duration::from_secs(60))
        .await
        .unwrap()
        .expect("free");
    g.unlock().await.unwrap();
    assert!(!exists(&server, "wait"));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// Lock and unlock through `url`, with a waiter on a second client woken by
/// the release (so both connections of both clients authenticated).
async fn works_through(url: &str, name: &str) {
    let a = Client::connect(url).await.unwrap();
    let b = Client::connect(url).await.unwrap();
    let g = a.lock(name).lock().await.unwrap();
    let lock = b.lock(name);
    let waiter = tokio::spawn(async move { lock.lock().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    g.unlock().await.unwrap();
    let g = within(Duration::from_secs(10), "waiter woken", waiter)
        .await
        .unwrap()
        .unwrap();
    g.unlock().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// Connecting with `url` fails with an error, within a bound.
async fn rejected(url: &str) -> Error {
    let started = Instant::now();
    let r = within(
        Duration::from_secs(30),
        "connect with bad credentials",
        Client::builder()
            .url(url)
            .command_timeout(Duration::from_secs(2))
            .build(),
    )
    .await;
    eprintln!("{url}: {r:?} after {:?}", started.elapsed());
    match r {
        Err(e) => e,
        Ok(c) => {
            // Connected anyway: the first command must fail instead.
            let e = within(
                Duration::from_secs(30),
                "first command with bad credentials",
                c.lock("x").try_lock(),
            )
            .await
            .expect_err("a command without valid credentials succeeded");
            let _ = c.shutdown().await;
            e
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requirepass_server() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]).with_password("s3cret");
    let port = server.port();
    works_through(&format!("redis://:s3cret@127.0.0.1:{port}"), "pw").await;
    let e = rejected(&format!("redis://:wrong@127.0.0.1:{port}")).await;
    assert!(matches!(e, Error::Redis(_)), "{e:?}");
    let e = rejected(&format!("redis://127.0.0.1:{port}")).await;
    assert!(matches!(e, Error::Redis(_)), "{e:?}");
    assert_eq!(
        lock_keys(&server),
        Vec::<String>::new(),
        "no lock state left"
    );
}

/// A user that may not name its connections, nor list or kill clients
/// (a managed Redis that restricts `CLIENT`): the client still connects
/// and locks (connections are not named; a replaced one is killed by its
/// id where that is allowed; the fence is not trusted, so requests carry
/// their records and records keep their TTL: `tests/unchecked.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_client_setname_still_locks() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]).with_password("s3cret");
    let mut rules = vec!["ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all"];
    let denied = support::fixture::deny_client_subcommands(&["setname", "list", "kill"]);
    rules.extend(denied.iter().map(String::as_str));
    assert_eq!(server.cmd(&rules), "OK");
    let port = server.port();
    within(
        Duration::from_secs(60),
        "locks through a user without CLIENT SETNAME",
        works_through(&format!("redis://app:pw@127.0.0.1:{port}"), "restricted"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_user() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]).with_password("s3cret");
    assert_eq!(
        server.cmd(&["ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all"]),
        "OK"
    );
    let port = server.port();
    works_through(&format!("redis://app:pw@127.0.0.1:{port}"), "acl").await;
    let e = rejected(&format!("redis://app:nope@127.0.0.1:{port}")).await;
    assert!(matches!(e, Error::Redis(_)), "{e:?}");
    let e = rejected(&format!("redis://nobody:pw@127.0.0.1:{port}")).await;
    assert!(matches!(e, Error::Redis(_)), "{e:?}");
    assert_eq!(
        lock_keys(&server),
        Vec::<String>::new(),
        "no lock state left"
    );
}

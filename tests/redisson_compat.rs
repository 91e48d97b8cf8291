//! The Redisson `RLock` wire format, checked with raw commands.

use leasehold_testkit as support;

use std::time::Duration;

use support::fixture::{client, within};
use support::RedisServer;

/// A foreign field blocks us; DEL + PUBLISH of "0" on the Redisson channel
/// wakes our waiter; our hold is `HGET name <uuid>:<task>` = count.
#[tokio::test]
async fn raw_redisson_commands_interoperate() {
    let server = RedisServer::start();
    // Waiters must be woken by the message, not by a re-check.
    let c = support::fixture::client_with(&server, |b| b.recheck_interval(Duration::from_secs(60)))
        .await;
    let lock = c.lock("shared-with-java");
    assert_eq!(lock.channel(), "redisson_lock__channel:{shared-with-java}");

    // A Java holder: field "x:1", lease one minute.
    server.cmd(&["HSET", "shared-with-java", "x:1", "1"]);
    server.cmd(&["PEXPIRE", "shared-with-java", "60000"]);
    assert!(
        lock.try_lock().await.unwrap().is_none(),
        "foreign holder blocks us"
    );
    assert!(lock.is_locked().await.unwrap());

    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock().await.unwrap() })
    };
    support::fixture::eventually(Duration::from_secs(10), "waiter subscribed", || {
        support::fixture::numsub(&server, "redisson_lock__channel:{shared-with-java}") == 1
    })
    .await;
    // What Redisson's unlock does when the count reaches zero.
    server.cmd(&["DEL", "shared-with-java"]);
    server.cmd(&["PUBLISH", "redisson_lock__channel:{shared-with-java}", "0"]);
    let guard = within(
        Duration::from_secs(10),
        "wake-up by the Redisson message",
        waiter,
    )
    .await
    .unwrap();

    // Our hold, as a Java client would read it.
    let task_owner = guard.owner();
    let field = format!("{}:{}", c.id(), task_owner.id());
    assert_eq!(server.cmd(&["HGET", "shared-with-java", &field]), "1");
    assert_eq!(server.cmd(&["HLEN", "shared-with-java"]), "1");
    let ttl: i64 = server.cmd(&["PTTL", "shared-with-java"]).parse().unwrap();
    assert!(
        ttl > 0 && ttl <= 30_000,
        "watchdog lease of 30 s, got {ttl}"
    );
    guard.unlock().await.unwrap();
    assert_eq!(server.cmd(&["EXISTS", "shared-with-java"]), "0");
    c.shutdown().await.unwrap();
}

/// Our unlock publishes "0" on the Redisson channel, as a Java waiter
/// expects.
#[tokio::test]
async fn unlock_publishes_zero_on_the_redisson_channel() {
    let server = RedisServer::start();
    let c = client(&server).await;
    // A plain fred client listening like a Java waiter would.
    let listener = leasehold::fred::types::Builder::from_config(
        leasehold::fred::types::config::Config::from_url(&server.url()).unwrap(),
    )
    .build_subscriber_client()
    .unwrap();
    use leasehold::fred::interfaces::{ClientLike, EventInterface, PubsubInterface};
    listener.init().await.unwrap();
    let mut rx = listener.message_rx();
    listener
        .subscribe("redisson_lock__channel:{j}")
        .await
        .unwrap();
    support::fixture::eventually(Duration::from_secs(10), "listener subscribed", || {
        support::fixture::numsub(&server, "redisson_lock__channel:{j}") == 1
    })
    .await;
    let guard = c.lock("j").lock().await.unwrap();
    guard.unlock().await.unwrap();
    let msg = within(Duration::from_secs(10), "unlock message", rx.recv())
        .await
        .unwrap();
    assert_eq!(&*msg.channel, "redisson_lock__channel:{j}");
    assert_eq!(msg.value.as_string().as_deref(), Some("0"));
    listener.quit().await.unwrap();
    c.shutdown().await.unwrap();
}

/// Redisson adds braces to the channel only when the name has none, so key
/// and channel share a cluster slot; we name channels the same way.
#[tokio::test]
async fn channel_names_follow_redissons_brace_rule() {
    let server = RedisServer::start();
    let c = client(&server).await;
    assert_eq!(c.lock("plain").channel(), "redisson_lock__channel:{plain}");
    assert_eq!(
        c.lock("user:{42}:cart").channel(),
        "redisson_lock__channel:user:{42}:cart"
    );
    let prefixed = support::fixture::client_with(&server, |b| b.key_prefix("app:")).await;
    assert_eq!(
        prefixed.lock("x").channel(),
        "redisson_lock__channel:{app:x}"
    );
    c.shutdown().await.unwrap();
    prefixed.shutdown().await.unwrap();
}

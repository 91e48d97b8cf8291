//! Client configuration: honest transport (URL schemes), the connect retry
//! policy, and a client after `shutdown()`.

use leasehold_testkit as support;

use std::time::Duration;

use leasehold::{Client, Error};
use support::fixture::within;
use support::RedisServer;

fn invalid_message<T: std::fmt::Debug>(r: leasehold::Result<T>) -> String {
    match r {
        Err(Error::InvalidArgument(why)) => why,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

/// Connections the server has accepted so far.
#[cfg(not(any(feature = "tls-rustls", feature = "tls-native-tls")))]
fn connections(server: &RedisServer) -> u64 {
    let info = server.cmd(&["INFO", "stats"]);
    info.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO stats has total_connections_received")
}

/// Without a TLS feature, `rediss://` (and its cluster, sentinel and
/// valkey forms) is refused with a clear error instead of connecting in
/// plaintext — here to a real plain server that would have answered.
#[cfg(not(any(feature = "tls-rustls", feature = "tls-native-tls")))]
#[tokio::test]
async fn tls_urls_without_a_tls_feature_are_refused() {
    let server = RedisServer::start();
    let addr = server.addr();
    let before = connections(&server);
    for scheme in [
        "rediss",
        "REDISS",
        "rediss-cluster",
        "rediss-sentinel",
        "valkeys",
    ] {
        let url = format!("{scheme}://user:secret@{addr}");
        let why = invalid_message(Client::connect(&url).await);
        assert!(
            why.contains("TLS") && why.contains("tls-rustls"),
            "{scheme}: {why}"
        );
        assert!(
            !why.contains("secret"),
            "the password leaked into the error: {why}"
        );
    }
    // Each count reads INFO on a connection of its own.
    assert_eq!(
        connections(&server),
        before + 1,
        "a refused URL opened a connection"
    );
    // The plain scheme to the same server works.
    let c = Client::connect(&server.url()).await.unwrap();
    c.shutdown().await.unwrap();
}

/// Schemes that are not Redis's are refused before connecting, even with
/// a Redis server listening there; so is a URL without a scheme.
#[tokio::test]
async fn non_redis_schemes_are_refused() {
    let server = RedisServer::start();
    let addr = server.addr();
    for url in [
        format!("http://{addr}"),
        format!("https://{addr}"),
        format!("tcp://{addr}"),
        "redis+unix:///tmp/redis.sock".to_owned(),
        addr.clone(),
        String::new(),
    ] {
        let why = invalid_message(Client::connect(&url).await);
        assert!(why.contains("scheme"), "{url:?}: {why}");
    }
    for scheme in ["redis", "valkey", "Redis"] {
        let c = Client::connect(&format!("{scheme}://{addr}"))
            .await
            .unwrap();
        c.shutdown().await.unwrap();
    }
}

/// A Redis that comes up 1 s after `build()` began is reached with a
/// connect retry policy; without one, `build()` fails at once (a refused
/// connection is not waited on).
#[tokio::test]
async fn connect_retry_waits_for_a_late_server() {
    let mut server = RedisServer::start();
    let url = server.url();
    server.kill();

    let refused = within(
        Duration::from_secs(8),
        "build() without a retry policy",
        Client::connect(&url),
    )
    .await;
    assert!(matches!(refused, Err(Error::Redis(_))), "{refused:?}");

    let starter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        server.restart();
        server
    });
    let client = within(
        Duration::from_secs(60),
        "build() with a retry policy",
        Client::builder()
            .url(&url)
            .connect_retry(Duration::from_secs(30))
            .build(),
    )
    .await
    .expect("reached the late server");
    let server = starter.join().unwrap();
    let guard = client.lock("late").lock().await.unwrap();
    assert_eq!(server.cmd(&["EXISTS", "late"]), "1");
    guard.unlock().await.unwrap();
    client.shutdown().await.unwrap();
}

/// The retry budget runs out: the last error is returned; and errors that
/// cannot pass (a wrong password) are not retried.
#[tokio::test]
async fn connect_retry_gives_up_and_skips_lasting_errors() {
    let mut server = RedisServer::start_with(&["--requirepass", "right"]);
    let wrong = format!("redis://:wrong@{}", server.addr());
    let auth = within(
        Duration::from_secs(8),
        "a wrong password with a long retry budget",
        Client::builder()
            .url(&wrong)
            .connect_retry(Duration::from_secs(300))
            .build(),
    )
    .await;
    assert!(matches!(auth, Err(Error::Redis(_))), "{auth:?}");

    let url = format!("redis://:right@{}", server.addr());
    server.kill();
    let gave_up = within(
        Duration::from_secs(30),
        "a retry budget of 1 s",
        Client::builder()
            .url(&url)
            .connect_retry(Duration::from_secs(1))
            .build(),
    )
    .await;
    assert!(matches!(gave_up, Err(Error::Redis(_))), "{gave_up:?}");
}

/// After `shutdown()`, commands sent through `client.redis()` fail at once
/// instead of waiting out the command timeout (fred queues commands on a
/// quit client), and `is_shut_down` says why.
#[tokio::test]
async fn redis_commands_after_shutdown_fail_fast() {
    use leasehold::fred::interfaces::KeysInterface;

    let server = RedisServer::start();
    // A long command timeout: a queued command would wait 30 s.
    let client = Client::builder()
        .url(&server.url())
        .command_timeout(Duration::from_secs(30))
        .build()
        .await
        .unwrap();
    let redis = client.redis().clone();
    let n: i64 = redis.exists("k").await.unwrap();
    assert_eq!(n, 0);
    assert!(!client.is_shut_down());
    client.shutdown().await.unwrap();
    assert!(client.is_shut_down());
    for r in [client.redis(), &redis] {
        let after = within(
            Duration::from_secs(10),
            "a command after shutdown",
            r.exists::<i64, _>("k"),
        )
        .await;
        assert!(after.is_err(), "a command after shutdown: {after:?}");
    }
    assert!(matches!(
        client.lock("x").try_lock().await,
        Err(Error::Shutdown)
    ));
}

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
        format!("redis+unix:///tmp/redis.sock"),
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

//! Replica-safe acquire: `WAIT` for replica acknowledgements after each
//! acquire, against a real primary and replica on loopback.

use leasehold_testkit as support;

use std::time::Duration;

use leasehold::Error;
use support::fixture::{client_with, eventually, exists};
use support::RedisServer;

fn info_field(server: &RedisServer, field: &str) -> Option<String> {
    let info = server.cmd(&["INFO", "replication"]);
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_owned())
}

async fn primary_and_replica() -> (RedisServer, RedisServer) {
    let primary = RedisServer::start();
    let port = primary.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    eventually(Duration::from_secs(30), "replica in sync", || {
        info_field(&replica, "master_link_status").as_deref() == Some("up")
    })
    .await;
    (primary, replica)
}

#[tokio::test]
async fn acknowledged_acquires_succeed_and_missing_replicas_are_reported() {
    let (primary, mut replica) = primary_and_replica().await;
    let c = client_with(&primary, |b| {
        b.wait_for_replicas(1, Duration::from_millis(500))
    })
    .await;
    let lock = c.lock("replicated");

    let g = lock.lock().await.unwrap();
    assert_eq!(
        replica.cmd(&["EXISTS", "replicated"]),
        "1",
        "acknowledged, so on the replica"
    );
    g.unlock().await.unwrap();

    // The replica goes away: the acquire reports it instead of pretending.
    replica.kill();
    eventually(Duration::from_secs(30), "primary sees no replica", || {
        info_field(&primary, "connected_slaves").as_deref() == Some("0")
    })
    .await;
    match lock.try_lock().await {
        Err(Error::ReplicasMissing {
            name,
            wanted,
            acked,
        }) => {
            assert_eq!((name.as_str(), wanted, acked), ("replicated", 1, 0));
        }
        other => panic!("expected ReplicasMissing, got {other:?}"),
    }
    assert!(
        !exists(&primary, "replicated"),
        "the unreplicated hold was given back"
    );
    match lock.lock().await {
        Err(Error::ReplicasMissing { .. }) => {}
        other => panic!("lock() without retry fails at once, got {other:?}"),
    }

    // Retrying until the deadline, then reporting the last failure.
    let retrying = client_with(&primary, |b| {
        b.wait_for_replicas(1, Duration::from_millis(50))
            .retry_when_replicas_missing(true)
    })
    .await;
    let started = std::time::Instant::now();
    let r = retrying
        .lock("replicated")
        .try_lock_for(Duration::from_millis(600))
        .await;
    assert!(matches!(r, Err(Error::ReplicasMissing { .. })), "got {r:?}");
    assert!(started.elapsed() >= Duration::from_millis(600));
    assert!(!exists(&primary, "replicated"));

    // The replica comes back: a retrying lock() gets through.
    let waiting = {
        let lock = retrying.lock("replicated");
        tokio::spawn(async move { lock.lock().await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    replica.restart();
    let g = tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .expect("retrying lock() after the replica returned")
        .unwrap()
        .unwrap();
    g.unlock().await.unwrap();
    c.shutdown().await.unwrap();
    retrying.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_zero_wait_timeout_is_rejected() {
    let server = RedisServer::start();
    let r = leasehold::Client::builder()
        .url(&server.url())
        .wait_for_replicas(1, Duration::ZERO)
        .build()
        .await;
    assert!(matches!(r, Err(Error::InvalidArgument(_))));
}

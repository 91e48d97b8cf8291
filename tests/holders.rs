//! `Lock::holders`: who holds a lock and for how long, for operators —
//! leasehold holders, Redisson-style fields written by hand, and fields of
//! other shapes.

use leasehold_testkit as support;

use std::time::Duration;

use leasehold::{Error, Owner};
use support::fixture::{client, client_with};
use support::RedisServer;

/// A free lock has no holders; a held one has exactly its owner, with the
/// hold count and the key's remaining TTL.
#[tokio::test]
async fn holders_name_the_client_and_owner() {
    let server = RedisServer::start();
    let c = client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(30))).await;
    let lock = c.lock("who");
    assert!(lock.holders().await.unwrap().is_empty());

    let outer = lock.lock().await.unwrap();
    let inner = lock.lock().await.unwrap();
    let holders = lock.holders().await.unwrap();
    assert_eq!(holders.len(), 1, "{holders:?}");
    let h = &holders[0];
    assert_eq!(h.client, Some(c.id()));
    assert_eq!(h.owner, Some(Owner::current().id()));
    assert_eq!(h.field, format!("{}:{}", c.id(), Owner::current().id()));
    assert_eq!(h.holds, 2);
    let left = h.remaining_lease.expect("a watchdog lease expires");
    assert!(
        left <= Duration::from_secs(30) && left > Duration::from_secs(20),
        "{left:?}"
    );
    inner.unlock().await.unwrap();
    outer.unlock().await.unwrap();
    assert!(lock.holders().await.unwrap().is_empty());

    // Another task's fixed lease, seen from this task.
    let other = tokio::spawn({
        let lock = lock.clone();
        async move {
            let g = lock.lock_with_lease(Duration::from_secs(5)).await.unwrap();
            (Owner::current(), g)
        }
    });
    let (owner, guard) = other.await.unwrap();
    let holders = lock.holders().await.unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].owner, Some(owner.id()));
    assert_ne!(holders[0].owner, Some(Owner::current().id()));
    assert!(holders[0].remaining_lease.unwrap() <= Duration::from_secs(5));
    guard.unlock().await.unwrap();

    assert!(matches!(
        c.lock("").holders().await,
        Err(Error::InvalidArgument(_))
    ));
    c.shutdown().await.unwrap();
}

/// Fields written by other clients: a Redisson (Java) holder
/// `<uuid>:<thread id>` parses like ours; a write-lock field
/// (`…:write`), a foreign field and a non-numeric count are kept raw. A
/// key without expiry has no remaining lease.
#[tokio::test]
async fn raw_and_java_style_holders() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let java = "3b5a6f0e-4c1d-4a8e-9f2b-7d6c5e4f3a21";
    server.cmd(&["HSET", "java-held", &format!("{java}:57"), "3"]);
    server.cmd(&["PEXPIRE", "java-held", "20000"]);
    let holders = c.lock("java-held").holders().await.unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].client, Some(java.parse().unwrap()));
    assert_eq!(holders[0].owner, Some(57));
    assert_eq!(holders[0].holds, 3);
    assert!(holders[0].remaining_lease.unwrap() <= Duration::from_secs(20));

    server.cmd(&["HSET", "odd", &format!("{java}:57:write"), "1"]);
    server.cmd(&["HSET", "odd", "someone-else", "x"]);
    let mut holders = c.lock("odd").holders().await.unwrap();
    holders.sort_by(|a, b| a.field.cmp(&b.field));
    assert_eq!(holders.len(), 2);
    assert_eq!(holders[0].field, format!("{java}:57:write"));
    assert_eq!(
        (holders[0].client, holders[0].owner, holders[0].holds),
        (None, None, 1)
    );
    assert_eq!(holders[1].field, "someone-else");
    assert_eq!(
        (holders[1].client, holders[1].owner, holders[1].holds),
        (None, None, 0)
    );
    assert_eq!(holders[0].remaining_lease, None, "no expiry");

    // A key of another type is a Redis error, not a panic.
    server.cmd(&["SET", "a-string", "1"]);
    assert!(matches!(
        c.lock("a-string").holders().await,
        Err(Error::Redis(_))
    ));
    c.shutdown().await.unwrap();
}

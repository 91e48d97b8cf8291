//! Redis Sentinel: 1 primary, 1 replica and 3 sentinels on loopback; the
//! primary fails over while a task waits for a lock.

use leasehold_testkit as support;

use std::time::Duration;

use leasehold::Client;
use support::fixture::within;
use support::sentinel::SentinelSetup;

const HANG: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_gets_the_lock_from_the_new_primary() {
    let mut setup = SentinelSetup::start();
    let connect = || async {
        Client::builder()
            .url(&setup.url())
            .watchdog_timeout(Duration::from_secs(10))
            .build()
            .await
            .expect("connect through the sentinels")
    };
    let holder = connect().await;
    let waiter_client = connect().await;

    let guard = holder.lock("sentinel:job").lock().await.unwrap();
    setup.wait_for_replica(); // the lock is on the replica too
    let waiter = {
        let lock = waiter_client.lock("sentinel:job");
        tokio::spawn(async move { lock.lock().await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let old_port = setup.current_primary_port();

    setup.kill_primary_and_wait_failover();
    assert_ne!(setup.current_primary_port(), old_port);

    // The replicated lock survived the failover: the holder still holds it
    // on the new primary, and its unlock there wakes the waiter.
    within(HANG, "holder's unlock on the new primary", guard.unlock())
        .await
        .expect("the replicated hold survived the failover");
    let got = within(HANG, "waiter after failover", waiter)
        .await
        .unwrap()
        .unwrap();
    let field = format!("{}:{}", waiter_client.id(), got.owner().id());
    assert_eq!(
        setup.primary().cmd(&["HGET", "sentinel:job", &field]),
        "1",
        "held on the new primary"
    );
    got.unlock().await.unwrap();
    assert_eq!(setup.primary().cmd(&["EXISTS", "sentinel:job"]), "0");
    holder.shutdown().await.unwrap();
    waiter_client.shutdown().await.unwrap();
}

//! Reconnects of the command connection against the promise "while a guard
//! is not lost, nobody else holds the lock": a server restarted without
//! persistence (issue 9, hole 4) and an acquire whose connection was black
//! -holed and then cut (hole 6).

use leasehold_testkit as support;

use std::sync::Arc;
use std::time::Duration;

use leasehold::Client;
use support::fixture::{client, client_with, eventually, numsub, within};
use support::{Proxy, RedisServer};
use tokio::time::Instant;

const HANG: Duration = Duration::from_secs(60);

/// Hole 4. A holder (60 s watchdog: its next renewal is 20 s away) and two
/// waiters, one on the holder's own client and one on another client. The
/// server is killed and restarted empty. The holder must be told `lost`
/// right after its client reconnects (long before the next renewal), and
/// the waiter on its own client must not be handed the lock while the
/// holder's guard still says it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_without_persistence_tells_the_holder_first() {
    const NAME: &str = "restarted";
    let mut server = RedisServer::start();
    let wd = Duration::from_secs(60);
    let a = client_with(&server, |b| b.watchdog_timeout(wd)).await;
    let b = client_with(&server, |b| b.watchdog_timeout(wd)).await;
    let holder = Arc::new(a.lock(NAME).lock().await.unwrap());

    // The waiter on the holder's client records whether the holder's guard
    // was already lost when it got the lock.
    let (lock_a, h) = (a.lock(NAME), holder.clone());
    let same_client = tokio::spawn(async move {
        let g = lock_a.lock().await.unwrap();
        let holder_lost = h.is_lost();
        g.unlock().await.unwrap();
        holder_lost
    });
    let lock_b = b.lock(NAME);
    let other_client = tokio::spawn(async move {
        let g = lock_b.lock().await.unwrap();
        let at = Instant::now();
        g.unlock().await.unwrap();
        at
    });
    eventually(Duration::from_secs(20), "both clients subscribed", || {
        numsub(&server, "redisson_lock__channel:{restarted}") == 2
    })
    .await;

    server.kill();
    server.restart();
    let restarted = Instant::now();
    within(
        Duration::from_secs(10),
        "holder told lost soon after the restart (its next renewal is 20 s away)",
        holder.lost(),
    )
    .await;
    let told = restarted.elapsed();
    let b_at = within(HANG, "the other client's waiter", other_client)
        .await
        .unwrap();
    eprintln!(
        "holder told lost {told:?} after the restart; other client's waiter acquired {:?} after it",
        b_at.saturating_duration_since(restarted)
    );
    let holder_lost = within(HANG, "the same client's waiter", same_client)
        .await
        .unwrap();
    assert!(
        holder_lost,
        "the holder's own client handed the lock to another task while the holder's guard said it holds"
    );
    let holder = Arc::try_unwrap(holder).unwrap();
    assert!(
        holder.unlock().await.is_err(),
        "the lost hold is not in Redis"
    );
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// Hole 6. Another client holds the lock (watchdog lease) the whole time.
/// A waiter's command connection is black-holed from before it calls
/// `lock()`; after a few seconds the connection is cut (and later healed).
/// The waiter must never be handed a guard while the holder still holds.
async fn blackholed_then_cut(heal_after_cut: bool) {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr()).await;
    let url = proxy.url();
    let holder_client = client(&server).await;
    let waiter_client: Client = client_with(&server, |b| {
        b.url(&url).command_timeout(Duration::from_secs(2))
    })
    .await;
    let holder = holder_client.lock("phantom").lock().await.unwrap();

    proxy.blackhole();
    let lock = waiter_client.lock("phantom");
    let waiter = tokio::spawn(async move { lock.lock().await });
    tokio::time::sleep(Duration::from_millis(3800)).await;
    proxy.cut_all();
    if heal_after_cut {
        tokio::time::sleep(Duration::from_millis(200)).await;
        proxy.pass();
    }
    // Give the waiter time to (wrongly) return.
    let deadline = Instant::now() + Duration::from_secs(8);
    while Instant::now() < deadline && !waiter.is_finished() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if waiter.is_finished() {
        let outcome = waiter.await.unwrap();
        if let Ok(g) = &outcome {
            panic!(
                "the waiter got a guard (lost: {}) while another client holds the lock (field {:?})",
                g.is_lost(),
                server.cmd(&["HGETALL", "phantom"])
            );
        }
        eprintln!("the waiter returned {outcome:?}");
    } else {
        // Still waiting, as it should: let it have the lock now.
        proxy.pass();
        holder.unlock().await.unwrap();
        let g = within(HANG, "waiter after the unlock", waiter)
            .await
            .unwrap()
            .unwrap();
        assert!(!g.is_lost());
        g.unlock().await.unwrap();
        proxy.pass();
        holder_client.shutdown().await.unwrap();
        within(HANG, "waiter shutdown", waiter_client.shutdown())
            .await
            .unwrap();
        return;
    }
    proxy.pass();
    let _ = holder.unlock().await;
    holder_client.shutdown().await.unwrap();
    let _ = within(HANG, "waiter shutdown", waiter_client.shutdown()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blackholed_then_cut_acquire_never_yields_a_phantom_guard() {
    blackholed_then_cut(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blackholed_cut_and_healed_acquire_never_yields_a_phantom_guard() {
    blackholed_then_cut(true).await;
}

/// Hole 6, the mechanism. A black hole that drops a waiter's acquire and
/// then heals *without* closing the connection leaves the connection one
/// reply out of step: the next reply that arrives (here, another task's
/// successful acquire of a free lock on the same client) answers the
/// dropped acquire. Before replies were checked against their request, the
/// waiter took that `{1, 1}` for its own and returned a guard Redis never
/// granted, while another client held the lock. 10 rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_out_of_step_never_yields_a_phantom_guard() {
    let server = RedisServer::start();
    let holder_client = client(&server).await;
    for round in 0..10 {
        let proxy = Proxy::start(&server.addr()).await;
        let url = proxy.url();
        // A long command timeout: the connection is not closed as
        // unresponsive while the black hole lasts.
        let waiter_client: Client = client_with(&server, |b| b.url(&url)).await;
        let name = format!("phantom:{round}");
        let holder = holder_client.lock(&name).lock().await.unwrap();

        proxy.blackhole();
        let lock = waiter_client.lock(&name);
        let waiter = tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(3)).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        proxy.pass();
        // Traffic after the heal: a free lock taken by another task.
        let other = waiter_client.lock(&format!("free:{round}"));
        let other_task =
            tokio::spawn(async move { other.try_lock_for(Duration::from_secs(3)).await });

        let got = within(HANG, "the waiter", waiter).await.unwrap();
        if let Ok(Some(g)) = &got {
            panic!(
                "round {round}: the waiter got a guard (lost: {}) while another client holds `{name}`: {:?}",
                g.is_lost(),
                server.cmd(&["HGETALL", &name])
            );
        }
        let _ = within(HANG, "the other task", other_task).await.unwrap();
        holder.unlock().await.unwrap();
        within(HANG, "waiter shutdown", waiter_client.shutdown())
            .await
            .ok();
    }
    holder_client.shutdown().await.unwrap();
}

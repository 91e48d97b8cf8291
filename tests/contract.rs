//! The lock contract, one test body run for every lock kind (issue 32):
//! every kind is a `LockHandle` with the same verbs, so the same code
//! checks each. `single` is the contract of the kinds at one key (Lock,
//! FairLock, FencedLock, ReadLock, WriteLock); `every` the verbs every
//! kind has, MultiLock and RedLock included.
//!
//! Each body takes the handle under test and a *rival*: a handle whose
//! holds exclude it (the same lock, or a read lock's write half), used
//! from other owners.

use leasehold_testkit as support;

use std::time::Duration;

use std::future::Future;
use std::pin::Pin;

use leasehold::raw::{RawLock, RawSingle};
use leasehold::{Client, Error, LockGuard, LockHandle, MultiGuard, Owner};
use support::fixture::{client, client_with, within};
use support::RedisServer;

/// Bounds that only catch hangs.
const HANG: Duration = Duration::from_secs(20);

/// Gives a guard of any kind back (the test's own name for `unlock`).
trait Release {
    fn release(self) -> Pin<Box<dyn Future<Output = leasehold::Result<()>> + Send>>;
}

impl Release for LockGuard {
    fn release(self) -> Pin<Box<dyn Future<Output = leasehold::Result<()>> + Send>> {
        Box::pin(self.unlock())
    }
}

impl Release for MultiGuard {
    fn release(self) -> Pin<Box<dyn Future<Output = leasehold::Result<()>> + Send>> {
        Box::pin(self.unlock())
    }
}

/// Whether `rival`, tried by a new owner, is refused now.
async fn rival_refused<Q: RawLock>(rival: &LockHandle<Q>) -> bool {
    let rival = rival.clone();
    Owner::new()
        .scope(async move { rival.try_lock().await.unwrap().is_none() })
        .await
}

/// The verbs every kind has: each way of taking the lock holds it against
/// a rival, gives it back, and runs work under it.
async fn every<R, Q>(lock: &LockHandle<R>, rival: &LockHandle<Q>)
where
    R: RawLock<Guard: Release>,
    Q: RawLock<Guard: Release>,
{
    // lock: held against the rival until given back.
    let guard = within(HANG, "lock", lock.lock()).await.unwrap();
    assert!(rival_refused(rival).await, "{}: lock excludes", lock.name());
    release(guard).await;
    // try_lock, try_lock_for, try_lock_until, with fixed leases too.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let guards = vec![
        lock.try_lock().await.unwrap(),
        lock.try_lock_for(Duration::from_secs(5)).await.unwrap(),
        lock.try_lock_until(deadline).await.unwrap(),
        lock.try_lock_with_lease(Duration::from_secs(5), Duration::from_secs(30))
            .await
            .unwrap(),
    ];
    for (i, guard) in guards.into_iter().enumerate() {
        let guard = guard.unwrap_or_else(|| panic!("{}: try #{i} got the lock", lock.name()));
        assert!(
            rival_refused(rival).await,
            "{}: try #{i} excludes",
            lock.name()
        );
        release(guard).await;
    }
    let guard = lock.lock_with_lease(Duration::from_secs(30)).await.unwrap();
    assert!(rival_refused(rival).await);
    release(guard).await;
    // with / try_with_for: the work runs under the lock, then it is free.
    let rival2 = rival.clone();
    let n = lock
        .with(|lease| async move {
            assert!(!lease.is_lost());
            assert!(rival_refused(&rival2).await);
            7
        })
        .await
        .unwrap();
    assert_eq!(n, 7);
    let n = lock
        .try_with_for(Duration::from_secs(5), |_| async { 8 })
        .await
        .unwrap();
    assert_eq!(n, Some(8));
    // Free again: a rival gets it, and then the lock waits in vain.
    let rival = rival.clone();
    let taken = Owner::new()
        .scope(async move { rival.try_lock().await.unwrap().expect("free after with") })
        .await;
    let other = lock.clone();
    let refused = Owner::new()
        .scope(async move {
            let started = tokio::time::Instant::now();
            let got = other
                .try_lock_for(Duration::from_millis(300))
                .await
                .unwrap();
            (got.is_none(), started.elapsed())
        })
        .await;
    assert!(refused.0, "{}: a held lock is not taken", lock.name());
    assert!(refused.1 >= Duration::from_millis(300), "waited its wait");
    let none = Owner::new()
        .scope({
            let lock = lock.clone();
            async move {
                lock.try_with_for(Duration::ZERO, |_| async { 0 })
                    .await
                    .unwrap()
            }
        })
        .await;
    assert!(none.is_none());
    release(taken).await;
    // Bad input is an error, not a panic.
    assert!(matches!(
        lock.lock_with_lease(Duration::ZERO).await,
        Err(Error::InvalidArgument(_))
    ));
}

async fn release<G: Release>(guard: G) {
    within(HANG, "the release", guard.release()).await.unwrap();
}

/// The contract of a kind at one key, on `lock` (client `a`), with
/// `rival` on another client of the same server and `forcer` the same
/// kind and name on a third client, for force-unlocks.
async fn single<R: RawSingle, Q: RawSingle>(
    lock: LockHandle<R>,
    rival: LockHandle<Q>,
    forcer: LockHandle<R>,
) {
    every(&lock, &rival).await;
    assert!(!lock.is_locked().await.unwrap());
    assert_eq!(lock.hold_count().await.unwrap(), 0);
    assert!(lock.holders().await.unwrap().is_empty());
    assert_eq!(lock.remaining_lease().await.unwrap(), None);

    // Held twice by this owner: counted, listed, leased.
    let outer = lock.lock().await.unwrap();
    let inner = lock.try_lock().await.unwrap().expect("re-enters");
    assert!(lock.is_locked().await.unwrap());
    assert!(lock.is_held_by_current_task().await.unwrap());
    assert_eq!(lock.hold_count().await.unwrap(), 2);
    let holders = lock.holders().await.unwrap();
    assert_eq!(holders.len(), 1, "{}: {holders:?}", lock.name());
    assert_eq!(holders[0].owner, Some(Owner::current().id()));
    assert_eq!(holders[0].holds, 2);
    assert!(lock.remaining_lease().await.unwrap().is_some());
    assert_eq!(outer.name(), lock.name());
    assert_eq!(outer.key(), lock.key());
    let other = lock.clone();
    let elsewhere = tokio::spawn(async move { other.hold_count().await.unwrap() });
    assert_eq!(elsewhere.await.unwrap(), 0, "another task is another owner");
    inner.unlock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 1);

    // Forced out from another client: the guard is lost, its unlock
    // says so and leaves the next holder alone.
    assert!(
        forcer.force_unlock().await.unwrap(),
        "force_unlock freed it"
    );
    within(HANG, "the guard learns it is lost", outer.lost()).await;
    assert!(outer.is_lost());
    let rival_guard = Owner::new()
        .scope({
            let rival = rival.clone();
            async move { rival.try_lock_for(HANG).await.unwrap().expect("free") }
        })
        .await;
    assert!(matches!(outer.unlock().await, Err(Error::NotHeld { .. })));
    assert!(!rival_guard.is_lost());
    rival_guard.unlock().await.unwrap();

    // with: lost while the work runs → Error::Lost, the work dropped.
    let lost = lock
        .with(|_lease| async move {
            forcer.force_unlock().await.unwrap();
            tokio::time::sleep(HANG).await;
            unreachable!("cancelled on the loss")
        })
        .await;
    assert!(matches!(lost, Err(Error::Lost { .. })), "{lost:?}");
    assert!(!lock.force_unlock().await.unwrap(), "nothing left to free");
}

/// The three clients of [`single`]: the holder's, whose watchdog finds a
/// forced-out lease fast, the rival's and the forcer's.
async fn three_clients(server: &RedisServer) -> (Client, Client, Client) {
    let holder = client_with(server, |b| b.watchdog_timeout(Duration::from_secs(1))).await;
    (holder, client(server).await, client(server).await)
}

#[tokio::test]
async fn the_lock_keeps_the_contract() {
    let server = RedisServer::start();
    let (a, b, c) = three_clients(&server).await;
    single(a.lock("plain"), b.lock("plain"), c.lock("plain")).await;
}

#[tokio::test]
async fn the_fair_lock_keeps_the_contract() {
    let server = RedisServer::start();
    let (a, b, c) = three_clients(&server).await;
    single(
        a.fair_lock("fair"),
        b.fair_lock("fair"),
        c.fair_lock("fair"),
    )
    .await;
}

#[tokio::test]
async fn the_fenced_lock_keeps_the_contract() {
    let server = RedisServer::start();
    let (a, b, c) = three_clients(&server).await;
    single(
        a.fenced_lock("fenced"),
        b.fenced_lock("fenced"),
        c.fenced_lock("fenced"),
    )
    .await;
    // Its own extra: every guard carries a larger token.
    let first = a.fenced_lock("fenced").lock().await.unwrap();
    let second = a.fenced_lock("fenced").lock().await.unwrap();
    assert!(second.token() > first.token());
}

#[tokio::test]
async fn the_read_lock_keeps_the_contract() {
    let server = RedisServer::start();
    let (a, b, c) = three_clients(&server).await;
    // Readers share: the rival of a read lock is the write half.
    single(
        a.read_write_lock("rw").read(),
        b.read_write_lock("rw").write(),
        c.read_write_lock("rw").read(),
    )
    .await;
}

#[tokio::test]
async fn the_write_lock_keeps_the_contract() {
    let server = RedisServer::start();
    let (a, b, c) = three_clients(&server).await;
    single(
        a.read_write_lock("rw").write(),
        b.read_write_lock("rw").write(),
        c.read_write_lock("rw").write(),
    )
    .await;
    // A reader is a rival of the writer too.
    let w = a.read_write_lock("rw").write().lock().await.unwrap();
    assert!(rival_refused(&b.read_write_lock("rw").read()).await);
    w.unlock().await.unwrap();
}

#[tokio::test]
async fn the_multi_lock_keeps_the_contract() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let multi = leasehold::MultiLock::new(vec![a.lock("m1"), a.lock("m2")]);
    let rival = leasehold::MultiLock::new(vec![b.lock("m2"), b.lock("m3")]);
    every(&multi, &rival).await;
    // Read and write halves are members too: two readers share, a writer
    // is kept out of both.
    let readers = leasehold::MultiLock::new(vec![
        leasehold::Member::from(a.read_write_lock("r1").read()),
        leasehold::Member::from(a.read_write_lock("r2").read()),
    ]);
    let other_readers = leasehold::MultiLock::new(vec![
        leasehold::Member::from(b.read_write_lock("r1").read()),
        leasehold::Member::from(b.read_write_lock("r2").read()),
    ]);
    let writer = leasehold::MultiLock::new(vec![leasehold::Member::from(
        b.read_write_lock("r2").write(),
    )]);
    let held = readers.lock().await.unwrap();
    assert!(!rival_refused(&other_readers).await, "readers share");
    assert!(
        rival_refused(&writer).await,
        "a writer waits for the readers"
    );
    held.unlock().await.unwrap();
}

#[tokio::test]
async fn the_redlock_keeps_the_contract() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let mut mine = Vec::new();
    let mut theirs = Vec::new();
    for s in &servers {
        mine.push(client(s).await);
        theirs.push(client(s).await);
    }
    let red = leasehold::RedLock::new(mine, "red");
    let rival = leasehold::RedLock::new(theirs, "red");
    every(&red, &rival).await;
}

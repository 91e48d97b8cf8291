//! Reentrant distributed locks for async Rust on Redis, compatible with
//! Redisson's `RLock`.
//!
//! * **Reentrant**: a lock is a Redis hash whose field
//!   `<client-uuid>:<owner-id>` counts the holds of one [`Owner`] (by
//!   default the current tokio task), so recursive async code can take the
//!   same lock again.
//! * **No polling**: a waiter subscribes to the lock's unlock channel and is
//!   woken by the release, with a bounded re-check so a lost message cannot
//!   strand it.
//! * **One watchdog**: a single task renews every lease the process holds,
//!   in batches, and tells each guard when its lease is lost.
//! * **Redisson's key layout**: Java (Redisson) and Rust services can
//!   contend for the same locks.
//!
//! # Example
//!
//! ```no_run
//! # async fn f() -> leasehold::Result<()> {
//! let client = leasehold::Client::connect("redis://127.0.0.1:6379").await?;
//! let lock = client.lock("orders:42");
//!
//! let guard = lock.lock().await?;      // waits; the watchdog keeps the lease
//! let again = lock.lock().await?;      // same task: re-enters (2 holds)
//! drop(again);                         // gives one hold back
//! guard.unlock().await?;               // frees the lock, wakes one waiter
//!
//! client.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! # Guarantees and their limits
//!
//! * While a guard's lease is valid, no other owner holds the lock, on any
//!   client in any process, as long as Redis keeps its data (a single
//!   server, or a primary that does not fail over).
//! * A lease ends: by unlock or drop; by expiry if the holder stops renewing
//!   (crash, partition); by [`Lock::force_unlock`]. The holder is told by
//!   [`LockGuard::lost`] — for watchdog leases *before* Redis can expire the
//!   lease, when renewal cannot be confirmed in time.
//! * Not guaranteed: exclusion across a failover with asynchronous
//!   replication (the replica may not have the lock), or across a process
//!   pause longer than the lease (a GC-like stall). Protect the resource
//!   itself with a fencing check where that matters: a [`FencedLock`]
//!   hands each acquire a token that only grows.
//! * Futures joined inside one task share an owner (see [`Owner`]).
//!
//! # Cancel safety
//!
//! Every async method documents what a dropped future leaves behind. In
//! short: a dropped acquire holds nothing, a dropped `unlock` still
//! releases, and a dropped guard releases in the background.

#![deny(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    unused_must_use
)]
#![warn(rust_2018_idioms)]

#[cfg(feature = "blocking")]
pub mod blocking;
mod client;
mod core;
mod error;
mod fair_lock;
mod fenced_lock;
mod guard;
mod latch;
mod lock;
mod multi;
mod owner;
mod rw_lock;
mod semaphore;

pub use crate::core::watchdog::Watchdog;
pub use client::{Client, ClientBuilder};
pub use error::{Error, Result, ServerOutcome, ServerResult};
pub use fair_lock::FairLock;
pub use fenced_lock::FencedLock;
pub use guard::{LeaseSignal, LockGuard};
pub use latch::CountDownLatch;
pub use lock::{Holder, Lock};
pub use multi::{Member, MultiGuard, MultiLock, RedLock};
pub use owner::Owner;
pub use rw_lock::{ReadLock, ReadWriteLock, WriteLock};
pub use semaphore::{Permit, Semaphore};

/// Not part of the API: what the benchmarks' bare-fred baseline needs to
/// send exactly the requests leasehold sends.
#[doc(hidden)]
pub mod __bench {
    /// The lock's `acquire` and `release` scripts, as sent. Acquire: KEYS
    /// `[lock, latch]`, ARGV `[lease ms, field, latch ttl ms, rid]`;
    /// release: KEYS `[lock, channel, latch]`, ARGV `[ttl ms, field, 1,
    /// "publish", latch ttl ms, rid]`; the latch is
    /// `leasehold_latch:{lock}:<field>` and the rid grows per latch.
    pub fn lock_scripts() -> (&'static str, &'static str) {
        crate::lock::script_sources()
    }
}

/// The Redis client crate leasehold is built on, for configuration
/// ([`ClientBuilder::config`]) and raw commands ([`Client::redis`]).
pub use fred;

#[cfg(test)]
mod bounds {
    //! Which public types may cross tasks.
    fn is_send_sync<T: Send + Sync>() {}
    fn is_unpin<T: Unpin>() {}

    #[test]
    fn public_types_are_send_and_sync() {
        is_send_sync::<crate::Client>();
        is_send_sync::<crate::Lock>();
        is_send_sync::<crate::FencedLock>();
        is_send_sync::<crate::LockGuard>();
        is_send_sync::<crate::LeaseSignal>();
        is_send_sync::<crate::Owner>();
        is_send_sync::<crate::ReadWriteLock>();
        is_send_sync::<crate::ReadLock>();
        is_send_sync::<crate::WriteLock>();
        is_send_sync::<crate::Watchdog>();
        is_send_sync::<crate::Error>();
        is_unpin::<crate::LockGuard>();
        is_send_sync::<crate::MultiLock>();
        is_send_sync::<crate::RedLock>();
        is_send_sync::<crate::MultiGuard>();
        is_send_sync::<crate::Member>();
        is_unpin::<crate::MultiGuard>();
        is_send_sync::<crate::Semaphore>();
        is_send_sync::<crate::Permit>();
        is_unpin::<crate::Permit>();
        is_send_sync::<crate::CountDownLatch>();
        is_send_sync::<crate::Holder>();
        #[cfg(feature = "blocking")]
        {
            is_send_sync::<crate::blocking::Client>();
            is_send_sync::<crate::blocking::Lock>();
            is_send_sync::<crate::blocking::LockGuard>();
        }
    }

    #[allow(dead_code)]
    fn futures_are_send(
        lock: crate::Lock,
        guard: crate::LockGuard,
        client: crate::Client,
        multi_guard: crate::MultiGuard,
        rw: crate::ReadWriteLock,
    ) {
        fn send<T: Send>(_: T) {}
        send(lock.lock());
        send(lock.try_lock_for(std::time::Duration::ZERO));
        send(lock.force_unlock());
        send(lock.with(|_| async {}));
        send(lock.try_with_for(std::time::Duration::ZERO, |l| async move { l.lost().await }));
        send(lock.hold_count());
        let fenced = client.fenced_lock("f");
        send(fenced.lock());
        send(fenced.try_lock_for(std::time::Duration::ZERO));
        send(fenced.token());
        send(fenced.delete_token());
        send(rw.read().lock());
        send(rw.write().try_lock_for(std::time::Duration::ZERO));
        send(rw.read().force_unlock());
        send(rw.write().is_locked());
        send(guard.lost());
        send(guard.unlock());
        send(client.shutdown());
        let multi = crate::MultiLock::new(vec![lock.clone()]);
        send(multi.lock());
        send(multi.try_lock_for(std::time::Duration::ZERO));
        let red = crate::RedLock::new(vec![client.clone()], "x");
        send(red.lock());
        send(red.try_lock());
        send(multi_guard.lost());
        send(multi_guard.unlock());
        let sem = client.semaphore("s");
        send(sem.acquire());
        send(sem.try_acquire_for(std::time::Duration::ZERO));
        send(sem.available_permits());
        send(sem.add_permits(1));
        let latch = client.count_down_latch("l");
        send(latch.wait());
        send(latch.count_down());
        send(crate::Client::connect(""));
    }
}

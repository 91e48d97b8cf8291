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
//! The safe way: run the work under the lock. It is cancelled if the
//! lease is lost, and the lock is released after.
//!
//! ```no_run
//! # async fn charge(_: u32) -> u32 { 0 }
//! # async fn f() -> leasehold::Result<()> {
//! let client = leasehold::Client::connect("redis://127.0.0.1:6379").await?;
//! let lock = client.lock("orders:42");
//!
//! let receipt = lock.with(|_lease| async move {
//!     charge(42).await            // dropped at an .await if the lease is lost
//! }).await?;                      // Err(Error::Lost { .. }) then
//! # let _ = receipt;
//! # Ok(()) }
//! ```
//!
//! With guards, for holds that outlive one block of code:
//!
//! ```no_run
//! # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
//! let lock = client.lock("orders:42");
//! let guard = lock.lock().await?;      // waits; the watchdog keeps the lease
//! let again = lock.lock().await?;      // same task: re-enters (2 holds)
//! drop(again);                         // gives one hold back
//! guard.unlock().await?;               // frees the lock, wakes one waiter
//! // `let _ = lock.lock().await?;` would release at once: bind guards to a name.
//!
//! client.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! # The identity rule
//!
//! A lock is held by an [`Owner`]: by default the current tokio task
//! (outside a task, the current thread). A guard carries its owner, so it
//! can move between tasks. Two consequences to know:
//!
//! * futures joined in one task (`join!`, `select!`) share its owner and
//!   re-enter each other's locks instead of excluding each other: give each
//!   its own with `Owner::new().scope(fut)`;
//! * a task spawned by a holder is another owner: locking what its parent
//!   holds, it waits for the parent — forever, if the parent awaits it.
//!   Capture `Owner::current()` and use `owner.scope(..)` to re-enter on
//!   purpose, or `try_lock_for` to find out instead of hanging.
//!
//! [`Owner`] has the full rule (task ids are unique among live tasks only).
//!
//! # Waiting
//!
//! Every acquire that waits runs one loop, shared by every lock kind:
//!
//! 1. try (one script call);
//! 2. busy: subscribe to the lock's unlock channel (one subscription per
//!    channel per client, however many tasks wait), then try again;
//! 3. sleep until an unlock message wakes this waiter, or for the holder's
//!    remaining lease (at most the recheck interval), then try again.
//!
//! A lost message costs at most one lease of waiting, never a hang; after
//! a reconnect every waiter re-checks at once. No polling otherwise.
//!
//! # Failure model
//!
//! * **Guaranteed**: while a guard's lease is valid, no other owner holds
//!   the lock, on any client in any process, as long as Redis keeps its
//!   data (a single server, or a primary that does not fail over).
//! * A lease ends by unlock or drop; by expiry if the holder stops renewing
//!   (crash, partition); by [`Lock::force_unlock`]. The holder is told by
//!   [`LockGuard::lost`] — for watchdog leases *before* Redis can expire the
//!   lease, when renewal cannot be confirmed in time. A dropped acquire
//!   holds nothing; nothing is counted twice after a lost reply.
//! * **Not guaranteed**: exclusion across a failover with asynchronous
//!   replication (the replica may not have the lock), or across a process
//!   pause longer than the lease (a GC-like stall). Protect the resource
//!   itself with a fencing check where that matters: a [`FencedLock`]
//!   hands each acquire a token that only grows.
//!
//! The README's *Failure model* section has the table of faults (killed
//! holders, restarts, black-holed connections, lost replies) and what
//! each does, every row exercised by a test.
//!
//! # Observability
//!
//! The engine records `tracing` spans for every acquire (lock, owner,
//! outcome, attempts, wait time), release and watchdog renewal cycle, and
//! a `WARN` event when a held lease is lost; [`Client::stats`] counts the
//! same events per client, and the `metrics` feature sends them to the
//! `metrics` facade. [`Stats`] lists every span, field and metric name;
//! `examples/observability.rs` prints them around a contended run.
//!
//! # Cancel safety
//!
//! Every async method documents what a dropped future leaves behind. In
//! short: a dropped acquire holds nothing, a dropped `unlock` still
//! releases, and a dropped guard releases in the background.
//!
//! # Feature flags
//!
//! * `blocking`: `leasehold::blocking`, a blocking client for code without an async
//!   runtime (its own small runtime; the calling thread is the owner).
//! * `metrics`: counters and a wait-time histogram through the `metrics`
//!   facade crate, for the recorder the application installs (the names:
//!   [`Stats`]). [`Client::stats`] gives the same counts without it.
//! * `tls-rustls`, `tls-native-tls`: TLS (`rediss://` URLs, or a fred
//!   `TlsConnector` in [`ClientBuilder::config`]). Without one, a
//!   `rediss://` URL is refused rather than connected in plaintext.

#![deny(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    unused_must_use
)]
#![warn(rust_2018_idioms)]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// The first lines of every recorded script (`script.rs`, `SHARED`), as a
/// literal for `concat!` (the bare-script baselines of `lock/`).
macro_rules! shared_lua {
    () => {
        "-- shared by the pieces of a recorded script (core/script.rs, SHARED)
local early, early_replay, read_record, write_record = nil, false, true, true
local found = {}
"
    };
}

#[cfg(feature = "blocking")]
#[cfg_attr(docsrs, doc(cfg(feature = "blocking")))]
pub mod blocking;
mod client;
mod clock;
mod core;
mod doctor;
mod error;
mod fair_lock;
mod fenced_lock;
mod guard;
mod handle;
mod inspect;
mod latch;
mod lock;
mod multi;
mod naming;
mod operators;
mod owner;
mod rw_lock;
mod semaphore;

pub use crate::core::caps::{ServerInfo, ServerKind};
pub use crate::core::registry::{client_records, deadlocks_on};
pub use crate::core::stats::Stats;
pub use crate::core::watchdog::Watchdog;
pub use client::{Client, ClientBuilder};
pub use doctor::{Check, DoctorOptions, DoctorReport, Status};
pub use error::{Error, Result, ServerOutcome, ServerResult};
pub use fair_lock::FairLock;
pub use fenced_lock::FencedLock;
pub use guard::{LeaseSignal, LockGuard};
pub use handle::Holder;
pub use handle::LockHandle;
pub use inspect::{
    inspect, inspect_name, LockObject, ObjectHolder, ObjectKind, ObjectWaiter, PermitOut,
    QueuedWaiter,
};
pub use latch::CountDownLatch;
pub use lock::Lock;
pub use multi::{Member, MultiGuard, MultiLock, RedLock};
pub use operators::{ClientRecord, Deadlock, DeadlockMember, WaitRecord};
pub use owner::Owner;
pub use rw_lock::{ReadLock, ReadWriteLock, WriteLock};
pub use semaphore::{Permit, Semaphore};

/// The raw lock kinds behind [`LockHandle`]: each lock kind of the family
/// is a `LockHandle` over one of them (as `lock_api::Mutex<R, T>` is over
/// a `RawMutex`), so every kind has the same verbs, written once. Name the
/// traits to write code generic over lock kinds; the kinds themselves are
/// not used directly.
///
/// # Example
///
/// ```no_run
/// use leasehold::{raw::RawSingle, LockHandle};
///
/// async fn busy<R: RawSingle>(lock: &LockHandle<R>) -> leasehold::Result<bool> {
///     lock.is_locked().await
/// }
/// ```
pub mod raw {
    pub use crate::fair_lock::Fair;
    pub use crate::fenced_lock::Fenced;
    pub use crate::handle::raw::{RawGuard, RawLock, RawSingle};
    pub use crate::lock::Unfair;
    /// The former name of [`Unfair`] (it named no property of the lock).
    #[deprecated(note = "renamed `Unfair`: waiters take it in no order")]
    pub type Plain = Unfair;
    pub use crate::multi::{Multi, Redlock};
    pub use crate::rw_lock::{Read, Write};
}

/// Not part of the API: what the benchmarks' bare-fred baseline needs to
/// send exactly the requests leasehold sends.
#[doc(hidden)]
pub mod __bench {
    /// The lock's `acquire` and `release` scripts as an uncontended lock +
    /// unlock sends them: the twins without the request record, whose
    /// checks prove the first run by the count. Acquire: KEYS `[lock]`,
    /// ARGV `[lease ms, field, 0, "", rid]` (0: the holds counted before;
    /// "": no take announced); release: KEYS `[lock, channel]`, ARGV `[ttl
    /// ms, field, 1, "publish", expected count (1), rid]`; the rid grows
    /// per lock and owner.
    pub fn lock_scripts() -> (&'static str, &'static str) {
        crate::lock::script_sources()
    }

    /// The bodies of the lock's `acquire` and `release` scripts, without
    /// the request record: each is its check (`acquire_check.lua`,
    /// `release_check.lua`) and defines `local function body()`, and reads
    /// KEYS and ARGV as [`lock_scripts`] sends them, less the request record
    /// (the last key) and the request record TTL and rid (the last two arguments).
    /// Sent as `<body>\nreturn body()`, it runs the lock's logic alone,
    /// with no request record, and replies without the rid in front.
    pub fn lock_script_bodies() -> (&'static str, &'static str) {
        crate::lock::script_bodies()
    }

    /// The lease records `client` keeps in use (one per lock key and owner
    /// that holds, waits or has a call or release under way): 0 once
    /// nothing is held, waited for or being settled. The idle records it
    /// keeps parked for their next acquire are not counted (see
    /// [`parked_records`]); a record idle but not parked is (a leak). For
    /// tests that nothing is left behind.
    pub fn lease_records(client: &crate::Client) -> usize {
        client.engine().bench_counts().0
    }

    /// The idle lease records `client` keeps parked for their next acquire:
    /// at most [`IDLE_RECORDS`].
    pub fn parked_records(client: &crate::Client) -> usize {
        client.engine().bench_counts().1
    }

    /// What deleting request records has made Redis do through `client`
    /// so far: (script calls, records read, records deleted). Each call is
    /// one `EVALSHA`, each record read one `GET`, each record deleted one
    /// `DEL` (see `core/forget.rs`). For tests that count Redis commands.
    pub fn forgotten(client: &crate::Client) -> (u64, u64, u64) {
        let f = client.engine().bench_counts().2;
        (f.calls, f.checked, f.deleted)
    }

    /// The fair lock's `release` script as a release sends it while the
    /// client's count is known: the twin without the request record.
    /// KEYS `[lock, queue, timeouts, channel stem, grants]`; ARGV `[ttl
    /// ms, field, holds to give back, "publish", now (epoch ms), thread
    /// wait ms, grant ms, expected count, rid]`; the reply ends with the
    /// rid as it was sent. For tests that send a copy of a release by hand.
    pub fn fair_release_script() -> &'static str {
        crate::fair_lock::release_source()
    }

    /// How many idle lease records a client keeps at most.
    pub const IDLE_RECORDS: usize = crate::core::lease::IDLE_RECORDS;
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
        is_send_sync::<crate::Stats>();
        is_send_sync::<crate::Deadlock>();
        is_send_sync::<crate::ClientRecord>();
        is_send_sync::<crate::DoctorReport>();
        is_send_sync::<crate::DoctorOptions>();
        is_send_sync::<crate::LockObject>();
        is_send_sync::<crate::ObjectKind>();
        #[cfg(feature = "blocking")]
        {
            is_send_sync::<crate::blocking::Client>();
            is_send_sync::<crate::blocking::Lock>();
            is_send_sync::<crate::blocking::FairLock>();
            is_send_sync::<crate::blocking::ReadWriteLock>();
            is_send_sync::<crate::blocking::Semaphore>();
            is_send_sync::<crate::blocking::Permit>();
            is_send_sync::<crate::blocking::CountDownLatch>();
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
        send(rw.read().with(|_| async {}));
        send(rw.write().holders());
        send(fenced.holders());
        send(crate::inspect(client.redis(), "*"));
        send(crate::inspect_name(client.redis(), "n"));
        let c = client.clone();
        send(async move { crate::LockObject::default().force_unlock(&c).await });
        let fair = client.fair_lock("fa");
        send(fair.with(|_| async {}));
        send(fair.try_lock_until(tokio::time::Instant::now()));
        send(guard.lost());
        send(guard.unlock());
        send(client.shutdown());
        send(client.deadlocks());
        send(client.doctor());
        let multi = crate::MultiLock::new(vec![lock.clone()]);
        send(multi.lock());
        send(multi.try_lock_for(std::time::Duration::ZERO));
        send(multi.with(|_| async {}));
        let red = crate::RedLock::new(vec![client.clone()], "x");
        send(red.lock());
        send(red.try_lock());
        send(multi_guard.lost());
        send(multi_guard.unlock());
        let sem = client.semaphore("s");
        send(sem.acquire());
        send(sem.try_acquire_for(std::time::Duration::ZERO));
        send(sem.available_permits());
        send(sem.with(|_| async {}));
        send(sem.try_acquire_until(tokio::time::Instant::now()));
        send(sem.add_permits(1));
        send(sem.force_release_all());
        let latch = client.count_down_latch("l");
        send(latch.wait());
        send(latch.count_down());
        send(latch.delete());
        send(crate::Client::connect(""));
    }
}

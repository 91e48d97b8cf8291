//! Ordinary exits and runtimes must not leave a lock held for a full lease
//! (issue 9, hole 5): a guard dropped as `main` returns, a lock call polled
//! outside a tokio runtime, a client used after its runtime is gone.

use leasehold_testkit as support;

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake};
use std::time::Duration;

use leasehold::{Client, Error};
use support::fixture::{calls, client, eventually, exists, lock_keys};
use support::RedisServer;

const CHILD_URL: &str = "LEASEHOLD_EXIT_URL";
const CHILD_KEY: &str = "LEASEHOLD_EXIT_KEY";

/// Not a test: the body of a child process. Connects, takes the lock named
/// by the parent, and returns while holding it, so the guard (then the
/// client, then the runtime) is dropped exactly as when a
/// `#[tokio::main]` function returns (`#[tokio::test]` expands to the same
/// `Runtime::block_on`). No `shutdown()`.
async fn child_body() {
    let (Ok(url), Ok(key)) = (std::env::var(CHILD_URL), std::env::var(CHILD_KEY)) else {
        return;
    };
    let client = Client::connect(&url).await.unwrap();
    let guard = client.lock(&key).lock().await.unwrap();
    assert!(!guard.is_lost());
    // Returning drops `guard`, then `client`, then the runtime.
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "child process of guard_dropped_as_main_returns_is_released"]
async fn child_exit_multi_thread() {
    child_body().await;
}

#[tokio::test]
#[ignore = "child process of guard_dropped_as_main_returns_is_released"]
async fn child_exit_current_thread() {
    child_body().await;
}

/// Runs the child `test` once with lock `key`; returns when it has exited.
fn run_child(server: &RedisServer, test: &str, key: &str) {
    let status = support::fixture::child(test)
        .env(CHILD_URL, server.url())
        .env(CHILD_KEY, key)
        .status()
        .expect("re-exec the test binary");
    assert!(status.success(), "child {test} failed: {status}");
}

/// Hole 5a. 60 processes (both runtime flavors) each take a lock and return
/// from their async `main` with the guard alive and without `shutdown()`.
/// The moment each process has exited, its lock must be free: the release
/// may not race the runtime's teardown.
#[test]
fn guard_dropped_as_main_returns_is_released() {
    const RUNS: usize = 60;
    const PARALLEL: usize = 4;
    let server = Arc::new(RedisServer::start());
    let mut held = Vec::new();
    let workers: Vec<_> = (0..PARALLEL)
        .map(|w| {
            let server = server.clone();
            std::thread::spawn(move || {
                let mut held = Vec::new();
                for run in (w..RUNS).step_by(PARALLEL) {
                    let key = format!("exit:{run}");
                    let test = if run % 2 == 0 {
                        "child_exit_multi_thread"
                    } else {
                        "child_exit_current_thread"
                    };
                    run_child(&server, test, &key);
                    if exists(&server, &key) {
                        held.push(format!(
                            "{key} ({test}): PTTL {}",
                            server.cmd(&["PTTL", &key])
                        ));
                    }
                }
                held
            })
        })
        .collect();
    for w in workers {
        held.extend(w.join().unwrap());
    }
    assert!(
        held.is_empty(),
        "{} of {RUNS} locks still held after their process exited: {held:#?}",
        held.len()
    );
}

/// Polls `fut` to completion on the current thread with no tokio runtime.
fn block_on_without_runtime<F: Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Arc::new(Unpark(std::thread::current())).into();
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "hung outside a runtime"
        );
        std::thread::park_timeout(Duration::from_millis(50));
    }
}

/// Hole 5b. Lock calls polled by an executor that is not tokio (here a
/// bare `block_on`) fail with `Error::NoRuntime` before anything is sent:
/// no panic, no script, no lock left held.
#[test]
fn lock_polled_outside_a_runtime_fails_before_sending() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(Client::connect(&server.url())).unwrap();
    let lock = client.lock("outside");
    let scripts = calls(&server, "evalsha");

    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        (
            block_on_without_runtime(lock.lock()),
            block_on_without_runtime(lock.try_lock()),
            block_on_without_runtime(lock.try_lock_for(Duration::from_millis(100))),
            block_on_without_runtime(lock.lock_with_lease(Duration::from_secs(30))),
        )
    }));
    let (a, b, c, d) = outcome.expect("a lock call outside a runtime panicked");
    assert!(matches!(a, Err(Error::NoRuntime)), "lock(): {a:?}");
    assert!(matches!(b, Err(Error::NoRuntime)), "try_lock(): {b:?}");
    assert!(matches!(c, Err(Error::NoRuntime)), "try_lock_for(): {c:?}");
    assert!(
        matches!(d, Err(Error::NoRuntime)),
        "lock_with_lease(): {d:?}"
    );
    assert_eq!(calls(&server, "evalsha"), scripts, "a script was sent");
    assert!(!exists(&server, "outside"), "the lock is held");

    // A guard taken inside the runtime and unlocked outside it: the hold
    // is still given back (in the background, through the client's runtime).
    let guard = rt.block_on(lock.lock()).unwrap();
    let unlocked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        block_on_without_runtime(guard.unlock())
    }))
    .expect("unlock outside a runtime panicked");
    assert!(
        matches!(unlocked, Err(Error::NoRuntime)),
        "unlock(): {unlocked:?}"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while exists(&server, "outside") {
        assert!(
            std::time::Instant::now() < deadline,
            "the hold was not given back"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    rt.block_on(client.shutdown()).unwrap();
}

/// Hole 5c. The client's runtime is dropped and the client is then used
/// from another runtime: every call fails at once with a clear error
/// instead of hanging, and nothing is held.
#[test]
fn client_used_after_its_runtime_is_gone_fails_at_once() {
    let server = RedisServer::start();
    let first = tokio::runtime::Runtime::new().unwrap();
    let client = first.block_on(Client::connect(&server.url())).unwrap();
    drop(first);

    let second = tokio::runtime::Runtime::new().unwrap();
    let outcome = second.block_on(async {
        tokio::time::timeout(Duration::from_secs(20), async {
            let lock = client.lock("orphaned-runtime");
            (
                lock.lock().await,
                lock.try_lock().await,
                lock.is_locked().await,
            )
        })
        .await
    });
    let (a, b, c) = outcome.expect("a call on a client whose runtime is gone hung");
    assert!(matches!(a, Err(Error::RuntimeGone)), "lock(): {a:?}");
    assert!(matches!(b, Err(Error::RuntimeGone)), "try_lock(): {b:?}");
    assert!(matches!(c, Err(Error::RuntimeGone)), "is_locked(): {c:?}");
    assert!(!exists(&server, "orphaned-runtime"));
    second.block_on(async { client.shutdown().await }).unwrap();
}

/// A hold whose acquire completes while `shutdown()` drains is given back
/// too: 20 rounds of 16 acquires racing a shutdown that lands at a
/// different point each round; afterwards no lock is left in Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_acquired_while_shutdown_drains_are_given_back() {
    let server = RedisServer::start();
    for round in 0..20u64 {
        let c = client(&server).await;
        let tasks: Vec<_> = (0..16)
            .map(|i| {
                let lock = c.lock(&format!("drain:{round}:{i}"));
                tokio::spawn(async move { lock.lock().await })
            })
            .collect();
        tokio::time::sleep(Duration::from_micros(150 * round)).await;
        c.shutdown().await.ok();
        for t in tasks {
            let _ = t.await.unwrap();
        }
        eventually(Duration::from_secs(10), "every hold given back", || {
            lock_keys(&server).is_empty()
        })
        .await;
    }
}

// --- a client handle dropped while its work is not done -------------------

/// A long lease, so that a key gone within `RELEASED` was released, not
/// expired.
const LONG_LEASE: Duration = Duration::from_secs(120);
/// The bound on a background release (catches a hang or a lost release).
const RELEASED: Duration = Duration::from_secs(30);

/// A client whose watchdog leases are `LONG_LEASE`.
async fn long_lease_client(server: &RedisServer) -> Client {
    support::fixture::client_with(server, |b| b.watchdog_timeout(LONG_LEASE)).await
}

/// Waits (up to `RELEASED`) until no lock key is left: what `name`'s
/// round held or queued was given back.
async fn nothing_left(server: &RedisServer, name: &str) {
    eventually(RELEASED, &format!("{name}: nothing left"), || {
        lock_keys(server).is_empty()
    })
    .await;
}

/// The usual end of a task that owns its client: the guard is dropped,
/// then at once the client. The guard's release runs in the background;
/// the client's connections must stay open until it is written, or the
/// lock stays held for its whole lease. 30 rounds of each kind (the
/// release and the close race on two worker threads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_dropped_right_after_its_guard_still_releases_it() {
    let server = RedisServer::start();
    for round in 0..60u32 {
        let a = long_lease_client(&server).await;
        let name = format!("gone:{round}");
        let guard = if round % 2 == 0 {
            a.lock(&name).lock().await.unwrap()
        } else {
            a.fair_lock(&name).lock().await.unwrap()
        };
        drop(guard);
        drop(a);
        nothing_left(&server, &name).await;
    }
}

/// A fair-lock waiter cancelled just before its client is dropped leaves
/// the queue before the connections close. Otherwise its entry stays at
/// the head for the thread wait, the next release grants the lock to the
/// dead waiter (held by nobody until the grant runs out) and the grant's
/// marker is left in Redis for good. 60 rounds, cancelled at a different
/// point each (before its try is sent, with it under way, once queued).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_waiter_cancelled_as_its_client_drops_leaves_the_queue() {
    let server = RedisServer::start();
    let holder = long_lease_client(&server).await;
    for round in 0..60u64 {
        let name = format!("queue:{round}");
        let guard = holder.fair_lock(&name).lock().await.unwrap();
        let b = client(&server).await;
        let lock = b.fair_lock(&name);
        // The task owns the last handle: it goes with the task's future,
        // right after the wait's.
        drop(b);
        let waiting = tokio::spawn(async move { lock.lock().await });
        tokio::time::sleep(Duration::from_micros(round * 50)).await;
        waiting.abort();
        let _ = waiting.await;
        guard.unlock().await.unwrap();
        nothing_left(&server, &name).await;
    }
}

/// A guard that outlives its client (the client handle was dropped first)
/// still holds its lease and gives it back: the connections stay open
/// while a guard needs them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_outliving_its_client_still_unlocks() {
    let server = RedisServer::start();
    for round in 0..10u32 {
        let a = long_lease_client(&server).await;
        let name = format!("outlives:{round}");
        let guard = a.lock(&name).lock().await.unwrap();
        drop(a);
        // Let a close of the dropped client run, if one is coming.
        tokio::time::sleep(Duration::from_millis(100)).await;
        if round % 2 == 0 {
            guard.unlock().await.unwrap();
        } else {
            drop(guard);
        }
        nothing_left(&server, &name).await;
    }
}

/// `unlock()` and `release()` build their future when called and send
/// nothing until it is polled. Dropped unpolled, or after one poll (the
/// release under way), the lock or permit still comes back: another
/// client gets it long before the 120 s lease could run out. 40 rounds:
/// each kind, unpolled and polled once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlock_or_release_dropped_early_still_gives_back() {
    let server = RedisServer::start();
    let a = long_lease_client(&server).await;
    let b = client(&server).await;
    for round in 0..40u32 {
        let polled = round % 2 == 1;
        let name = format!("dropped-unlock:{round}");
        if round % 4 < 2 {
            let guard = a.lock(&name).lock().await.unwrap();
            drop_early(guard.unlock(), polled).await;
            let taken = b.lock(&name).try_lock_for(RELEASED).await.unwrap();
            taken.expect("the lock came back").unlock().await.unwrap();
        } else {
            let sem = a.semaphore(&name);
            assert!(sem.try_set_permits(1).await.unwrap());
            let permit = sem.acquire().await.unwrap();
            drop_early(permit.release(), polled).await;
            let taken = b.semaphore(&name).try_acquire_for(RELEASED).await.unwrap();
            taken
                .expect("the permit came back")
                .release()
                .await
                .unwrap();
            assert_eq!(sem.available_permits().await.unwrap(), 1);
            // The count stays by design; the test removes it.
            server.cmd(&["DEL", sem.key()]);
        }
        nothing_left(&server, &name).await;
    }
}

/// Drops `release` without polling it, or after polling it once.
async fn drop_early<F: Future>(release: F, polled: bool) {
    if polled {
        // `timeout` polls the future once before it looks at the clock.
        let _ = tokio::time::timeout(Duration::ZERO, release).await;
    } else {
        drop(release);
    }
}

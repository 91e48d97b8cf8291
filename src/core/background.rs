//! Work that must finish after its caller has gone: releases of dropped
//! guards, and calls abandoned mid-flight (see `hold.rs`).
//!
//! Jobs run as tasks on the client's runtime. A job is written so that it
//! can run again from the start (its calls are recorded, their request ids
//! fixed once chosen), which gives the one rule that matters here:
//!
//! **A job cut off before it finished is finished synchronously on a fresh
//! connection.** That happens when the runtime shuts down under it — most
//! often as `#[tokio::main]` returns with a guard just dropped. Tokio drops
//! unfinished tasks at shutdown (and does not wait for `spawn_blocking`
//! work started then on a multi-thread runtime), so the dropped task itself
//! runs every pending job on a one-off connection in an OS thread it waits
//! for, bounded by the command timeout. The runtime's teardown, and so the
//! process exit, waits until the releases are written. A job queued after
//! the runtime is gone takes the same path.
//!
//! [`Background::idle`] lets shutdown wait until every job is done.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::interfaces::ClientLike;
use parking_lot::Mutex;
use tokio::sync::Notify;

use super::conn::Conn;

/// A boxed future, as jobs return them.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Work that must be finished.
pub(crate) trait Job: Send + Sync + 'static {
    /// Does the work on `conn`. `fallback`: on a one-off connection while
    /// the client's runtime is gone (never wait for another task then).
    /// Must be safe to run again from the start.
    fn run<'a>(&'a self, conn: &'a Arc<Conn>, fallback: bool) -> BoxFuture<'a, ()>;

    /// Orders jobs cut off together (the request id they started with).
    fn order(&self) -> u64;
}

/// The jobs of one client.
#[derive(Debug)]
pub(crate) struct Background {
    runtime: tokio::runtime::Handle,
    conn: Arc<Conn>,
    /// Jobs not finished, by id.
    pending: Mutex<Vec<Arc<Pending>>>,
    idle: Notify,
    next: AtomicU64,
}

struct Pending {
    id: u64,
    job: Box<dyn Job>,
    /// Taken by a fallback run: the task must not run it again.
    taken: AtomicBool,
}

/// Runs one job's task; if dropped unfinished, finishes every pending job
/// synchronously.
struct Tracked {
    background: Arc<Background>,
    pending: Arc<Pending>,
    finished: bool,
}

// === impl Background ===

impl Background {
    pub(crate) fn new(runtime: tokio::runtime::Handle, conn: Arc<Conn>) -> Arc<Background> {
        Arc::new(Background {
            runtime,
            conn,
            pending: Mutex::new(Vec::new()),
            idle: Notify::new(),
            next: AtomicU64::new(1),
        })
    }

    /// Starts `job` on the client's runtime. Never blocks or fails; if the
    /// runtime is gone the job runs at once on a one-off connection.
    pub(crate) fn spawn(self: &Arc<Self>, job: impl Job) {
        let pending = Arc::new(Pending {
            id: self.next.fetch_add(1, Ordering::Relaxed),
            job: Box::new(job),
            taken: AtomicBool::new(false),
        });
        self.pending.lock().push(pending.clone());
        let tracked = Tracked {
            background: self.clone(),
            pending,
            finished: false,
        };
        // On a runtime that has shut down, the future is dropped at once,
        // and `Tracked::drop` finishes the job.
        drop(self.runtime.spawn(tracked.run()));
    }

    /// The client's runtime (jobs run on it).
    pub(crate) fn runtime(&self) -> &tokio::runtime::Handle {
        &self.runtime
    }

    /// Completes once no job is pending.
    pub(crate) async fn idle(&self) {
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.pending.lock().is_empty() {
                return;
            }
            notified.await;
        }
    }

    fn done(&self, id: u64) {
        let mut pending = self.pending.lock();
        pending.retain(|p| p.id != id);
        if pending.is_empty() {
            self.idle.notify_waiters();
        }
    }

    /// Runs every pending job on a one-off connection, in an OS thread
    /// this thread waits for (we may be inside a runtime that is shutting
    /// down, where `block_on` is not allowed).
    fn fallback(&self) {
        let mut jobs: Vec<Arc<Pending>> = self
            .pending
            .lock()
            .drain(..)
            .filter(|p| !p.taken.swap(true, Ordering::AcqRel))
            .collect();
        self.idle.notify_waiters();
        if jobs.is_empty() {
            return;
        }
        jobs.sort_by_key(|p| p.job.order());
        let conn = self.conn.clone();
        let bound = conn.settings.command_timeout;
        let count = jobs.len();
        let worker = std::thread::Builder::new()
            .name("leasehold-teardown".into())
            .spawn(move || {
                let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                runtime.block_on(async move {
                    let fresh = match conn.fresh().await {
                        Ok(fresh) => Arc::new(fresh),
                        Err(e) => {
                            tracing::warn!(error = %e, jobs = count, "teardown: no connection; the holds will expire with their leases");
                            return;
                        }
                    };
                    for p in jobs {
                        if tokio::time::timeout(bound, p.job.run(&fresh, true))
                            .await
                            .is_err()
                        {
                            tracing::warn!("teardown: a release timed out; its hold will expire with its lease");
                        }
                    }
                    let _ = tokio::time::timeout(Duration::from_millis(200), fresh.redis.quit()).await;
                });
            });
        match worker {
            Ok(worker) => {
                tracing::debug!(
                    jobs = count,
                    "teardown: finishing background jobs on a fresh connection"
                );
                let _ = worker.join();
            }
            Err(e) => tracing::warn!(error = %e, "teardown: could not start a thread"),
        }
    }
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending").field("id", &self.id).finish()
    }
}

// === impl Tracked ===

impl Tracked {
    async fn run(mut self) {
        if !self.pending.taken.load(Ordering::Acquire) {
            let conn = self.background.conn.clone();
            self.pending.job.run(&conn, false).await;
        }
        self.finished = true;
        self.background.done(self.pending.id);
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if !self.finished && !self.pending.taken.load(Ordering::Acquire) {
            self.background.fallback();
        }
    }
}
/// Spawns `task` on the current tokio runtime, if there is one: work a
/// drop, a timer or a reply sets off for later (a delayed check, a
/// connection reset, letting a channel go after a while). Outside a
/// runtime there is nothing to run it on: `false`, and `task` is dropped
/// (callers say what that means for them).
pub(crate) fn spawn_here<F>(task: F) -> bool
where
    F: Future<Output = ()> + Send + 'static,
{
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            drop(runtime.spawn(task));
            true
        }
        Err(_) => false,
    }
}

//! The guard every lock kind hands out.
//!
//! A [`LockGuard`] owns one hold (see `core::hold`): dropping it gives the
//! hold back in the background, [`LockGuard::unlock`] gives it back and
//! reports the outcome. It carries its owner, so it can move between tasks.
//!
//! [`LeaseSignal`] is a guard's lost signal on its own, for work run under
//! a lock by [`LockHandle::with`](crate::LockHandle::with): the work
//! watches it, the runner (`handle::run`) cancels the work when it fires.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::core::hold::Hold;
use crate::core::pubsub::Lingering;
use crate::core::signal::Signal;
use crate::error::{Error, Result};
use crate::owner::Owner;

/// One hold on a lock (of any kind: [`Lock`](crate::Lock) and the rest of
/// the family), released when dropped.
///
/// The guard carries its owner, so it can be moved to and unlocked from
/// any task. [`unlock`](LockGuard::unlock) releases and reports the
/// outcome; dropping releases in the background. Either way the hold stops
/// counting at once; the watchdog keeps the key's lease until the release
/// has landed (another hold of the owner may still need it), then lets it
/// go.
///
/// [`is_lost`](LockGuard::is_lost) and [`lost`](LockGuard::lost) tell the
/// holder when the lease is gone (another process may then hold the lock):
/// when a renewal finds the lock gone or cannot be confirmed in time, when
/// the key may have expired (the longest of the owner's holds ran out), or
/// when this client sees the lock taken by another owner, force-unlocked,
/// or gone after a reconnect.
///
/// A guard bound to `_` (`let _ = lock.lock().await?`) is dropped at once,
/// releasing the lock: bind it to a name (`let _guard = …`), or run the
/// work with [`Lock::with`](crate::Lock::with), which holds no guard to
/// forget. The compiler warns about a guard not bound at all (its
/// `#[must_use]` message says this); `let _ =` silences that warning, but
/// rustc's `let_underscore_drop` lint (allowed by default:
/// `#![warn(let_underscore_drop)]`) flags it.
///
/// # Example
///
/// ```no_run
/// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
/// let guard = client.lock("orders:42").lock().await?;
/// tokio::select! {
///     _ = guard.lost() => eprintln!("lease lost: abandon the work"),
///     _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => guard.unlock().await?,
/// }
/// # Ok(()) }
/// ```
#[must_use = "the lock is released when the guard is dropped, here at once: bind it to a name (`let _guard = …`); `let _ = …` drops it at once too"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct LockGuard {
    /// Gives the hold back when dropped (see `core::hold`).
    hold: Hold,
    /// Where the lock's name (without the key prefix) starts in its key,
    /// which the hold's lease record keeps.
    name_at: usize,
    owner: Owner,
    /// A channel subscription kept while the guard lives, and a moment
    /// after (the fair lock's waiter channel).
    linger: Option<Lingering>,
}

/// Whether the lease of the lock a [`Lock::with`](crate::Lock::with) work
/// runs under is lost; handed to the work.
///
/// Cheap to clone; it only watches (dropping it releases nothing). The
/// work does not have to watch it — `with` cancels the work when the lease
/// is lost — but work that must stop at a precise point (before a write,
/// say) can check [`is_lost`](Self::is_lost) there.
///
/// # Example
///
/// ```no_run
/// # async fn write(_: u32) {}
/// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
/// client.lock("orders:42").with(|lease| async move {
///     for batch in 0..10 {
///         if lease.is_lost() {
///             return; // stop before the next write
///         }
///         write(batch).await;
///     }
/// }).await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct LeaseSignal {
    watch: Watch,
}

/// What a [`LeaseSignal`] watches.
#[derive(Clone, Debug)]
enum Watch {
    /// One hold's lease.
    One(Arc<Signal>),
    /// Several holds, of which `quorum` must stay valid (a
    /// [`MultiGuard`](crate::MultiGuard)'s members).
    Quorum(Arc<Quorum>),
}

/// Several leases, of which `quorum` must stay valid, `drift` before their
/// ends (a MultiLock's: all of them, no drift; a RedLock's: a majority,
/// less its clock-drift allowance).
#[derive(Debug)]
struct Quorum {
    members: Vec<Arc<Signal>>,
    quorum: usize,
    drift: Duration,
}

// === impl LeaseSignal ===

impl LeaseSignal {
    /// Whether the lease is known to be lost (as
    /// [`LockGuard::is_lost`]).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// client.lock("a").with(|lease| async move { assert!(!lease.is_lost()) }).await?;
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        match &self.watch {
            Watch::One(signal) => signal.is_lost(),
            Watch::Quorum(q) => q.valid_until() <= Instant::now(),
        }
    }

    /// Completes when the lease is lost (as [`LockGuard::lost`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// client.lock("a").with(|lease| async move {
    ///     let watcher = tokio::spawn(async move { lease.lost().await; eprintln!("lost") });
    ///     // … work …
    ///     watcher.abort();
    /// }).await?;
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) {
        match &self.watch {
            Watch::One(signal) => signal.lost().await,
            Watch::Quorum(q) => q.lost().await,
        }
    }

    /// Since when the lease is lost (as [`LockGuard::lost_since`]).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// client.lock("a").with(|lease| async move { assert!(lease.lost_since().is_none()) }).await?;
    /// # Ok(()) }
    /// ```
    pub fn lost_since(&self) -> Option<Instant> {
        match &self.watch {
            Watch::One(signal) => signal.lost_since(),
            Watch::Quorum(q) => Some(q.valid_until()).filter(|end| *end <= Instant::now()),
        }
    }

    /// The signal of one hold.
    pub(crate) fn of(hold: &Hold) -> LeaseSignal {
        LeaseSignal {
            watch: Watch::One(hold.signal()),
        }
    }

    /// A signal of several holds, lost once fewer than `quorum` of them
    /// stay valid `drift` before their ends (`quorum` 0: lost at once).
    pub(crate) fn quorum(members: Vec<LeaseSignal>, quorum: usize, drift: Duration) -> LeaseSignal {
        let members = members
            .into_iter()
            .flat_map(|m| match m.watch {
                Watch::One(signal) => vec![signal],
                Watch::Quorum(q) => q.members.clone(),
            })
            .collect();
        LeaseSignal {
            watch: Watch::Quorum(Arc::new(Quorum {
                members,
                quorum,
                drift,
            })),
        }
    }

    /// How long the holds stay valid if nothing is renewed from now on
    /// (zero once lost).
    pub(crate) fn validity(&self) -> Duration {
        let end = match &self.watch {
            Watch::One(signal) if signal.is_lost() => return Duration::ZERO,
            Watch::One(signal) => signal.until(),
            Watch::Quorum(q) => q.valid_until(),
        };
        end.saturating_duration_since(Instant::now())
    }
}

// === impl Quorum ===

impl Quorum {
    /// When the quorum stops being valid: the quorum-th latest end among
    /// the members, less the drift. A member's end is when it was lost, or
    /// the lower bound of its key's expiry this client knows (raised by
    /// each renewal). In the past once lost.
    fn valid_until(&self) -> Instant {
        let now = Instant::now();
        let mut ends: Vec<Instant> = self
            .members
            .iter()
            .map(|m| m.lost_since().unwrap_or_else(|| m.until()))
            .collect();
        if self.quorum == 0 || ends.len() < self.quorum {
            return now.checked_sub(Duration::from_nanos(1)).unwrap_or(now);
        }
        ends.sort_unstable_by(|a, b| b.cmp(a));
        let end = ends[self.quorum - 1];
        end.checked_sub(self.drift).unwrap_or(end.min(now))
    }

    /// Completes when the quorum is lost.
    async fn lost(&self) {
        use futures_util::stream::{FuturesUnordered, StreamExt};
        loop {
            let end = self.valid_until();
            if end <= Instant::now() {
                return;
            }
            // Wake when a member is lost, or when the validity would run
            // out (a renewal may have moved it on by then: look again).
            let mut members: FuturesUnordered<_> = self
                .members
                .iter()
                .filter(|m| !m.is_lost())
                .map(|m| m.lost())
                .collect();
            tokio::select! {
                _ = members.next() => {}
                _ = tokio::time::sleep_until(end) => {}
            }
        }
    }
}

// === impl LockGuard ===

impl LockGuard {
    /// A guard of `hold`, on a lock whose key is the client's key prefix
    /// (`name_at` bytes) followed by the lock's name.
    pub(crate) fn new(hold: Hold, name_at: usize, owner: Owner) -> LockGuard {
        LockGuard {
            hold,
            name_at,
            owner,
            linger: None,
        }
    }

    /// This guard, keeping `keep` while it lives.
    pub(crate) fn keeping(mut self, keep: Lingering) -> LockGuard {
        self.linger = Some(keep);
        self
    }

    /// Releases this hold and reports the outcome. The hold stops counting
    /// at once (the key's lease is renewed until the release has landed).
    ///
    /// Returns [`Error::NotHeld`] (changing nothing) if the hold was found
    /// gone: known lost in this client (force-unlocked, taken over, found
    /// gone by a renewal), or missing from Redis when the release ran. A
    /// lock now held by someone else is left alone either way. A guard
    /// that reads lost only because its renewal was not confirmed in time
    /// still sends its release, which frees the lock if Redis still held
    /// it for this owner.
    ///
    /// # Cancel safety
    ///
    /// If this future is dropped, the hold is still given back (in the
    /// background, or settled by a background task if the release was
    /// already sent); only the outcome is not reported. Called outside a
    /// tokio runtime it returns [`Error::NoRuntime`] and gives the hold back
    /// in the background, as a drop does.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let guard = client.lock("orders:42").lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    // A plain `fn`: an `async fn` would keep the guard twice in the
    // caller's future (a task that waits, then unlocks, carries it).
    pub fn unlock(self) -> impl Future<Output = Result<()>> + Send + 'static {
        // A counted reference (the record may go with the hold).
        let key = self.hold.key();
        let release = self.hold.release();
        // The channel is kept until the release is done.
        let keep = self.linger;
        async move {
            let released = release.await;
            drop(keep);
            match released {
                Ok(true) => Ok(()),
                Ok(false) => Err(Error::NotHeld {
                    name: key_text(&key).to_owned(),
                }),
                Err(e) => Err(e),
            }
        }
    }

    /// Extends a fixed lease on demand: the lock's key is kept at least
    /// `lease` from now (its TTL is raised, never lowered), and this
    /// guard's deadline, [`is_lost`](Self::is_lost) and
    /// [`lost`](Self::lost) follow. One script call (the renewal script
    /// the watchdog uses, for this one lease).
    ///
    /// For guards with a fixed lease (`lock_with_lease`,
    /// `try_lock_with_lease`). A guard whose lease the
    /// [`Watchdog`](crate::Watchdog) renews needs no extending: `extend`
    /// refuses it with [`Error::InvalidArgument`], sending nothing.
    ///
    /// Returns [`Error::NotHeld`] if the lease is already lost (expired,
    /// force-unlocked, or found gone by this call): a lost lease is never
    /// brought back. [`Error::InvalidArgument`] for a `lease` under 1 ms.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped, the key may or may not have been
    /// extended; the guard still holds (its deadline as before the call,
    /// as far as `is_lost` is concerned), and a later unlock of another
    /// hold of the same owner may keep the key until the requested
    /// deadline. Call `extend` again to know.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let mut guard = client.lock("report").lock_with_lease(Duration::from_secs(10)).await?;
    /// // … the work takes longer than planned …
    /// guard.extend(Duration::from_secs(30)).await?; // held for 30 s more
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn extend(&mut self, lease: Duration) -> Result<()> {
        match self.hold.extend(lease).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(Error::NotHeld {
                name: self.key().to_owned(),
            }),
            Err(e) => Err(e),
        }
    }

    /// Whether the lease is known to be lost (see the type docs).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let guard = client.lock("orders:42").lock().await?;
    /// assert!(!guard.is_lost());
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// Completes when the lease is lost: at once if it already is.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let guard = client.lock("orders:42").lock().await?;
    /// tokio::select! {
    ///     _ = guard.lost() => { /* stop writing */ }
    ///     _ = async { /* work */ } => {}
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) {
        self.hold.lost().await
    }

    /// Since when the lease is lost: the instant it was declared lost, or
    /// the deadline it ran out at (whichever came first); `None` while the
    /// guard holds. Use it to tell what was done after the loss, e.g. to
    /// undo writes made past that instant.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let guard = client.lock("orders:42").lock().await?;
    /// let started = tokio::time::Instant::now();
    /// // … work …
    /// if let Some(lost) = guard.lost_since() {
    ///     eprintln!("lost {:?} into the work", lost.saturating_duration_since(started));
    /// }
    /// # Ok(()) }
    /// ```
    pub fn lost_since(&self) -> Option<tokio::time::Instant> {
        self.hold.lost_since()
    }

    /// The name of the lock this guard holds (without the key prefix).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let guard = client.lock("orders:42").lock().await?;
    /// assert_eq!(guard.name(), "orders:42");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        self.key().get(self.name_at..).unwrap_or_default()
    }

    /// The Redis key of the lock this guard holds (prefix included).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let guard = client.lock("orders:42").lock().await?;
    /// assert_eq!(guard.key(), client.lock("orders:42").key());
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &str {
        self.hold.key_str()
    }

    /// The fencing token this hold's acquire took: `Some` for a fenced
    /// lock, `None` for the other kinds.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let guard = client.lock("orders:42").lock().await?;
    /// assert_eq!(guard.token(), None); // a plain lock takes no token
    /// # Ok(()) }
    /// ```
    pub fn token(&self) -> Option<u64> {
        self.hold.token()
    }

    /// This guard's lost signal, on its own.
    pub(crate) fn lease_signal(&self) -> LeaseSignal {
        LeaseSignal::of(&self.hold)
    }

    /// The owner the hold belongs to.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let guard = client.lock("orders:42").lock().await?;
    /// assert_eq!(guard.owner(), leasehold::Owner::current());
    /// # Ok(()) }
    /// ```
    pub fn owner(&self) -> Owner {
        self.owner
    }
}

/// A lock key as text: every key is made from a `&str` (a non-text key
/// would read as "").
fn key_text(key: &crate::core::kind::Key) -> &str {
    key.as_str().unwrap_or_default()
}

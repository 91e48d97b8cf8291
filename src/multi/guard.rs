//! [`MultiGuard`]: the holds of a [`MultiLock`](super::MultiLock) or a
//! [`RedLock`](super::RedLock), and when they stop counting.
//!
//! The guard owns one [`LockGuard`] per member held, and a quorum: how many
//! of them must still be valid (every one for a MultiLock, a majority of
//! the servers for a RedLock). Its validity is the quorum-th longest of
//! the members' `valid_until` (a lower bound of each key's expiry, raised
//! by renewals), minus a drift allowance (RedLock only). It is lost as
//! soon as that is in the past, which covers both "fewer than a quorum of
//! members are still held" and "their leases ran out". Dropping the guard
//! drops every member guard, and each releases in the background.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::guard::{LeaseSignal, LockGuard};
use crate::handle::raw::{sealed, RawGuard};

/// The holds of a [`MultiLock`](crate::MultiLock) (every member) or of a
/// [`RedLock`](crate::RedLock) (the servers that acquired, at least a
/// majority). Dropping it releases every member in the background.
///
/// [`is_lost`](Self::is_lost) and [`lost`](Self::lost) report when the
/// guard no longer holds what it promises. For a MultiLock, that is as soon
/// as any member is lost (see [`LockGuard`]). For a RedLock, it is as soon
/// as fewer than a majority of its holds are still valid, or the
/// [`validity`](Self::validity) runs out. Either way, it happens before
/// Redis could let another owner in.
///
/// A guard bound to `_` (`let _ = multi.lock().await?`) is dropped at once,
/// releasing everything: bind it to a name (`let _guard = …`).
///
/// # Example
///
/// ```no_run
/// # async fn f(a: leasehold::Client, b: leasehold::Client) -> leasehold::Result<()> {
/// let guard = leasehold::MultiLock::new(vec![a.lock("x"), b.lock("y")]).lock().await?;
/// tokio::select! {
///     _ = guard.lost() => eprintln!("a member was lost: abandon the work"),
///     _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => guard.unlock().await?,
/// }
/// # Ok(()) }
/// ```
#[must_use = "every member is released when the guard is dropped, here at once: bind it to a name (`let _guard = …`); `let _ = …` drops it at once too"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct MultiGuard {
    /// The member holds; each releases itself when dropped.
    guards: Vec<LockGuard>,
    /// How many of `guards` must stay valid (and be released for
    /// `unlock` to succeed).
    quorum: usize,
    /// Lost once fewer than `quorum` of the members stay valid, less the
    /// RedLock's clock-drift allowance (see `LeaseSignal::quorum`).
    signal: LeaseSignal,
    /// Bound on each member's unlock (RedLock: the server timeout); a
    /// slower release finishes in the background.
    unlock_bound: Option<Duration>,
    /// What `unlock` names in `Error::NotHeld`.
    name: Arc<str>,
}

// === impl MultiGuard ===

impl MultiGuard {
    /// A MultiLock's guard: every member must stay held.
    pub(crate) fn all(guards: Vec<LockGuard>) -> MultiGuard {
        let name = guards
            .iter()
            .map(LockGuard::key)
            .collect::<Vec<_>>()
            .join(", ");
        MultiGuard {
            quorum: guards.len(),
            signal: signal_of(&guards, guards.len(), Duration::ZERO),
            guards,
            unlock_bound: None,
            name: name.into(),
        }
    }

    /// A RedLock's guard: `quorum` of `guards` must stay valid, `drift`
    /// before their leases end.
    pub(crate) fn quorum(
        guards: Vec<LockGuard>,
        quorum: usize,
        drift: Duration,
        unlock_bound: Duration,
        name: Arc<str>,
    ) -> MultiGuard {
        MultiGuard {
            signal: signal_of(&guards, quorum, drift),
            guards,
            quorum,
            unlock_bound: Some(unlock_bound),
            name,
        }
    }

    /// Releases every member at once and reports the outcome. Each lease
    /// stops being renewed at once.
    ///
    /// For a MultiLock, it returns the first member's error if any member
    /// was not held any more ([`Error::NotHeld`]) or failed. The others are
    /// released all the same. For a RedLock, it succeeds when a majority of
    /// the servers released a hold that was still theirs. Each server gets
    /// the server timeout, and a slower release finishes in the background.
    ///
    /// # Cancel safety
    ///
    /// If this future is dropped, every member is still released (in the
    /// background); only the outcome is not reported.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(a: leasehold::Client) -> leasehold::Result<()> {
    /// let guard = leasehold::MultiLock::new(vec![a.lock("x"), a.lock("y")]).lock().await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn unlock(self) -> Result<()> {
        let bound = self.unlock_bound;
        let results = futures_util::future::join_all(self.guards.into_iter().map(|g| async move {
            let key = g.key().to_owned();
            match bound {
                None => g.unlock().await,
                Some(bound) => tokio::time::timeout(bound, g.unlock())
                    .await
                    .unwrap_or_else(|_| Err(unlock_timed_out(&key, bound))),
            }
        }))
        .await;
        let released = results.iter().filter(|r| r.is_ok()).count();
        if released >= self.quorum {
            return Ok(());
        }
        Err(results
            .into_iter()
            .find_map(Result::err)
            .unwrap_or_else(|| Error::NotHeld {
                name: self.name.to_string(),
            }))
    }

    /// Whether the guard is lost (see the type docs).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(a: leasehold::Client) -> leasehold::Result<()> {
    /// let guard = leasehold::MultiLock::new(vec![a.lock("x"), a.lock("y")]).lock().await?;
    /// assert!(!guard.is_lost());
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.signal.is_lost()
    }

    /// Completes when the guard is lost: at once if it already is.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(a: leasehold::Client) -> leasehold::Result<()> {
    /// let guard = leasehold::MultiLock::new(vec![a.lock("x"), a.lock("y")]).lock().await?;
    /// tokio::select! {
    ///     _ = guard.lost() => { /* stop writing */ }
    ///     _ = async { /* work */ } => {}
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) {
        self.signal.lost().await
    }

    /// How long the guard stays valid if nothing is renewed from now on:
    /// the time left of the quorum's leases, as this client knows them
    /// (raised by each watchdog renewal), less the drift allowance for a
    /// RedLock. Zero once the guard is lost.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn f(a: leasehold::Client, b: leasehold::Client, c: leasehold::Client) -> leasehold::Result<()> {
    /// let red = leasehold::RedLock::new(vec![a, b, c], "orders:42");
    /// let guard = red.lock_with_lease(Duration::from_secs(10)).await?;
    /// assert!(guard.validity() <= Duration::from_secs(10));
    /// # Ok(()) }
    /// ```
    pub fn validity(&self) -> Duration {
        self.signal.validity()
    }

    /// The member holds: every member of a MultiLock (in the order they
    /// were taken), or the servers of a RedLock that acquired (in the order
    /// the clients were given). Each tells its own key and whether it is
    /// lost.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(a: leasehold::Client) -> leasehold::Result<()> {
    /// let guard = leasehold::MultiLock::new(vec![a.lock("x"), a.lock("y")]).lock().await?;
    /// let keys: Vec<&str> = guard.guards().iter().map(|g| g.key()).collect();
    /// # Ok(()) }
    /// ```
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The member guards, taken out (their drops release them).
    pub(crate) fn into_guards(self) -> Vec<LockGuard> {
        self.guards
    }
}

impl sealed::Sealed for MultiGuard {}

impl RawGuard for MultiGuard {
    fn lease_signal(&self) -> LeaseSignal {
        self.signal.clone()
    }

    fn give_back(self) -> impl std::future::Future<Output = Result<()>> + Send + 'static {
        self.unlock()
    }

    fn what(&self) -> String {
        self.name.to_string()
    }
}

/// The lost signal of `guards`, of which `quorum` must stay valid `drift`
/// before their ends.
fn signal_of(guards: &[LockGuard], quorum: usize, drift: Duration) -> LeaseSignal {
    LeaseSignal::quorum(
        guards.iter().map(LockGuard::lease_signal).collect(),
        quorum,
        drift,
    )
}

fn unlock_timed_out(key: &str, bound: Duration) -> Error {
    Error::timed_out(format!(
        "the unlock of `{key}` got no answer within {bound:?}; it goes on in the background"
    ))
}

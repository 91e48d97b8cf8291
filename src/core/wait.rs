//! The one wait loop every primitive waits with.
//!
//! 1. Try (the primitive's attempt: one latched script call). If the
//!    channel's subscription is already confirmed (another waiter of this
//!    client, or a pin), the waiter joins it first and skips 2 and 3.
//! 2. Busy: subscribe to the primitive's channel (shared with every other
//!    waiter of this client) and wait until Redis confirms it.
//! 3. Try again: it catches a release published before step 2.
//! 4. Sleep until woken by a message, or for `min(retry hint, time left,
//!    recheck interval)`; then go to 3. A busy attempt with no known expiry
//!    is re-checked every recheck interval, never waited on forever. The
//!    re-check is kept by the channel's clock (one per channel, see
//!    `Subscription::wait`), so a parked waiter carries no timer; only the
//!    last wait before a deadline has its own (boxed) timer.
//! 5. Leave: drop the subscription reference (the last one unsubscribes).
//!
//! A woken waiter holds its wake-up through its attempt and gives it up
//! only when the attempt has concluded; a waiter dropped in between passes
//! it on (see `pubsub.rs`). A wake-up that arrives during an attempt is
//! kept for the next wait (the attempt may have run before the release). Connection errors while waiting are retried
//! with back-off until the deadline (then the last one is returned);
//! other errors end the wait at once.

use std::future::Future;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::pubsub::Policy;
use super::Engine;
use crate::error::{Error, Result};

/// One try's result.
#[derive(Debug)]
pub(crate) enum Step<T> {
    Done(T),
    /// Not this time; try again after about this long (`None`: no hint).
    Busy(Option<Duration>),
}

/// First pause before retrying after a connection error while waiting.
const RETRY_FIRST: Duration = Duration::from_millis(50);
/// Longest pause between such retries.
const RETRY_MAX: Duration = Duration::from_secs(1);

/// Waits until `attempt` succeeds, for up to `wait` (`None`: forever;
/// zero: one try). `Ok(None)` when the time ran out.
///
/// # Cancel safety
///
/// Cancel safe if `attempt` is: a dropped wait leaves the channel's queue,
/// passes on a wake-up it held, and drops its subscription reference.
pub(crate) fn wait_for<'a, T, F, Fut>(
    engine: &'a Arc<Engine>,
    channel: &'a str,
    policy: Policy,
    wait: Option<Duration>,
    mut attempt: F,
) -> impl Future<Output = Result<Option<T>>> + 'a
where
    F: FnMut() -> Fut + 'a,
    Fut: Future<Output = Result<Step<T>>> + 'a,
    T: 'a,
{
    // Not an `async fn` around it: no second future layer per waiter.
    wait_for_handed(engine, channel, policy, wait, move |_| attempt())
}

/// [`wait_for`], giving each attempt the message handed to the waiter
/// with the wake-up it holds, if any (see `pubsub::Wake::OneWith`).
///
/// # Cancel safety
///
/// As for [`wait_for`].
// Written out on purpose (see the comment in the body).
#[allow(clippy::manual_async_fn)]
pub(crate) fn wait_for_handed<'a, T, F, Fut>(
    engine: &'a Arc<Engine>,
    channel: &'a str,
    policy: Policy,
    wait: Option<Duration>,
    mut attempt: F,
) -> impl Future<Output = Result<Option<T>>> + 'a
where
    F: FnMut(Option<Box<[u8]>>) -> Fut + 'a,
    Fut: Future<Output = Result<Step<T>>> + 'a,
    T: 'a,
{
    // An `async` block, not an `async fn`: no second copy of the
    // arguments in every waiting task's future.
    async move {
        let deadline = wait.and_then(|w| Instant::now().checked_add(w));
        let once = wait == Some(Duration::ZERO);
        // Already subscribed (another waiter, or a pin): no second try needed.
        let mut subscription = if once {
            None
        } else {
            engine.pubsub.join_subscribed(channel)
        };
        let mut backoff = RETRY_FIRST;
        loop {
            engine.check()?;
            // The attempt and its outcome are scoped to this block, read
            // in a plain function: nothing of them stays in this future
            // while it waits (a parked waiter carries only the wait's own
            // state).
            let then = {
                let held = subscription.as_ref().is_some_and(|s| s.holds_wake_up());
                let handed = subscription
                    .as_ref()
                    .filter(|_| held)
                    .and_then(|s| s.take_handed());
                let outcome = attempt(handed).await;
                if let Some(s) = subscription.as_ref().filter(|_| held) {
                    s.consumed_by(&outcome);
                }
                match next(engine, outcome, subscription.is_none() && !once, once) {
                    Ok(ControlFlow::Break(value)) => return Ok(Some(value)),
                    Ok(ControlFlow::Continue(then)) => then,
                    Err(e) => return Err(e),
                }
            };
            let mut bound = engine.recheck_interval;
            let last_error = match then {
                Then::Subscribe => {
                    // Subscribe, then try again at once. A subscription that
                    // cannot be confirmed before the deadline (the subscriber
                    // is reconnecting) ends the wait.
                    // Boxed: a parked waiter's future has no room for a
                    // subscribe (most waiters join a confirmed channel).
                    let subscribed = match deadline {
                        Some(d) => {
                            let subscribing = engine.pubsub.subscribe(channel, policy);
                            match Box::pin(tokio::time::timeout_at(d, subscribing)).await {
                                Ok(subscribed) => subscribed,
                                Err(_) => return Ok(None),
                            }
                        }
                        None => Box::pin(engine.pubsub.subscribe(channel, policy)).await,
                    };
                    match subscribed {
                        Ok(s) => {
                            engine.stats.subscribed();
                            subscription = Some(s);
                            continue;
                        }
                        Err(e) if e.is_transient() => {
                            bound = bound.min(backoff);
                            backoff = (backoff * 2).min(RETRY_MAX);
                            Some(Box::new(e))
                        }
                        Err(e) => return Err(e),
                    }
                }
                Then::Busy(retry) => {
                    backoff = RETRY_FIRST;
                    if let Some(retry) = retry {
                        bound = bound.min(retry);
                    }
                    None
                }
                Then::Retry(e) => {
                    tracing::debug!(channel = %channel, error = %e, "retrying after a connection error");
                    bound = bound.min(backoff);
                    backoff = (backoff * 2).min(RETRY_MAX);
                    Some(e)
                }
            };
            // Whether the deadline comes before any re-check.
            let mut ends = false;
            if let Some(deadline) = deadline {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return last_error.map_or(Ok(None), |e| Err(*e));
                }
                if left <= bound {
                    bound = left;
                    ends = true;
                }
            }
            match &subscription {
                Some(s) => {
                    let woken = if ends {
                        // This wait's own timer, not the channel's clock
                        // (which would re-check every waiter at this
                        // waiter's deadline); boxed, as only the last wait
                        // of a timed acquire needs it.
                        let woken = Box::pin(tokio::time::timeout(bound, s.woken())).await;
                        woken.unwrap_or(false) || s.holds_wake_up()
                    } else {
                        s.wait(bound).await
                    };
                    if !woken {
                        s.refresh();
                    }
                }
                // Not subscribed (it failed): back-off, boxed for the same
                // reason as the subscribe.
                None => Box::pin(tokio::time::sleep(bound)).await,
            }
        }
    }
}

/// What the wait loop does after an attempt that did not conclude it.
enum Then {
    /// Busy, and not subscribed yet: subscribe, then try again.
    Subscribe,
    /// Busy: wait for a wake-up, at most about this long.
    Busy(Option<Duration>),
    /// A connection error: wait with back-off, then try again (boxed: it is
    /// kept through the wait, for a deadline that runs out).
    Retry(Box<Error>),
}

/// Reads an attempt's `outcome`: `Break` with the value it got, `Continue`
/// with what to do next, or the error that ends the wait. `subscribe`:
/// busy means subscribe next; `once`: a single try, no retry.
fn next<T>(
    engine: &Engine,
    outcome: Result<Step<T>>,
    subscribe: bool,
    once: bool,
) -> Result<ControlFlow<T, Then>> {
    match outcome {
        Ok(Step::Done(value)) => Ok(ControlFlow::Break(value)),
        Ok(Step::Busy(_)) if subscribe => Ok(ControlFlow::Continue(Then::Subscribe)),
        Ok(Step::Busy(retry)) => Ok(ControlFlow::Continue(Then::Busy(retry))),
        Err(e) if retries(engine, &e) && !once => {
            Ok(ControlFlow::Continue(Then::Retry(Box::new(e))))
        }
        Err(e) => Err(e),
    }
}

/// Whether the wait loop retries after `e` (until its deadline).
fn retries(engine: &Engine, e: &Error) -> bool {
    match e {
        Error::ReplicasMissing { .. } => engine.replicas.is_some_and(|r| r.retry),
        e => e.is_transient(),
    }
}

impl super::pubsub::Subscription {
    /// An attempt concluded: a wake-up it held is used up, unless the
    /// attempt failed on the connection (then the waiter keeps trying, and
    /// the wake-up with it).
    fn consumed_by<T>(&self, outcome: &Result<Step<T>>) {
        if outcome.is_ok() {
            self.consumed();
        }
    }
}

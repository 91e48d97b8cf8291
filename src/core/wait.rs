//! The one wait loop every primitive waits with.
//!
//! 1. Try (the primitive's attempt: one recorded script call). If the
//!    channel's subscription is already confirmed (another waiter of this
//!    client, or a pin), the waiter joins it first and skips 2 and 3; if
//!    the channel is hot (takes were announced on its companion, see
//!    `takes.rs`), the first try waits for a deferred wake-up (4) as the
//!    other clients' waiters do, instead of barging in ahead of them.
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
//!    A wait that got what it waited for may keep the channel subscribed
//!    a moment longer ([`Attempts::linger`]): its owner, back soon,
//!    starts its next wait subscribed (step 1) and skips steps 2 and 3.
//!
//! A woken waiter holds its wake-up through its attempt and gives it up
//! only when the attempt has concluded; a waiter dropped in between passes
//! it on (see `pubsub/queue.rs`). A wake-up that arrives during an attempt is
//! kept for the next wait (the attempt may have run before the release).
//!
//! A wait for an owner's lock ([`Attempts::waits_for`]) that is busy at
//! its first try starts a `registry::Waiting`: past the client's threshold
//! it is recorded in the client's record, and dropped with the wait (it
//! ended, failed or was cancelled) it removes that record. With deadlock
//! detection on, each sleep also ends when the watch finds this wait the
//! one of a wait-for cycle to give up: the wait fails with
//! `Error::Deadlock`. Connection errors while waiting are retried
//! with back-off until the deadline (then the last one is returned);
//! other errors end the wait at once.

use std::future::Future;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use fred::types::Key;
use tokio::time::Instant;

use super::background::BoxFuture;
use super::backoff::Backoff;
use super::pubsub::Policy;
use super::registry::Waiting;
use super::Engine;
use crate::error::{Error, Result};
use crate::operators::Deadlock;

/// One try's result.
#[derive(Debug)]
pub(crate) enum Step<T> {
    Done(T),
    /// Not this time; try again after about this long (`None`: no hint).
    Busy(Option<Duration>),
}

/// The longest a re-checking waiter goes without a try (see
/// [`Attempts::probe`]): below Redisson's fair-lock thread wait (5
/// minutes), so a Java script never finds the place of a leasehold waiter
/// that re-checks out of date.
pub(crate) const FULL_EVERY: Duration = Duration::from_secs(4 * 60);

/// First pause before retrying after a connection error while waiting.
const RETRY_FIRST: Duration = Duration::from_millis(50);
/// Longest pause between such retries.
const RETRY_MAX: Duration = Duration::from_secs(1);

/// What a wait tries, and where it listens between tries: the one thing
/// a caller of the wait loop ([`wait_with`]) describes. The loop keeps it
/// by value in its future, so a parked waiter carries one copy of it and
/// nothing borrowed from the caller's own future.
pub(crate) trait Attempts: Send {
    /// What a successful attempt gives.
    type Output: Send;

    /// Runs once, at the wait's first poll, before any attempt; an error
    /// ends the wait (with no call to [`concluded`](Self::concluded)).
    fn start(&mut self) -> Result<()> {
        Ok(())
    }

    /// The channel the wait listens on (shared with every other waiter of
    /// the client on it).
    fn channel(&self) -> &str;

    /// What a message on [`channel`](Self::channel) wakes.
    fn policy(&self) -> Policy;

    /// The channel on which tries announce that they took what they
    /// wanted, if they do (`takes.rs`): subscribed with
    /// [`channel`](Self::channel).
    fn companion(&self) -> Option<&str> {
        None
    }

    /// One try, given the message handed to the waiter with the wake-up it
    /// holds, if any (see `pubsub::Wake::OneWith`), and whether a try that
    /// takes the lock announces it on the [`companion`](Self::companion)
    /// (see `Subscription::announces`). The wait loop keeps the future
    /// inline while it runs: box a large one.
    fn attempt(
        &mut self,
        handed: Option<Box<[u8]>>,
        announce: bool,
    ) -> impl Future<Output = Result<Step<Self::Output>>> + Send + '_;

    /// The lock key and owner this wait is for, if it is an owner's wait
    /// that operators should see (recorded once it lasts, see
    /// `registry.rs`).
    fn waits_for(&self) -> Option<(&Key, u64)> {
        None
    }

    /// How long a wait sleeps after a busy attempt, at most: `interval` is
    /// the client's recheck interval, `hint` the attempt's own (the lock's
    /// remaining TTL, if known). The default: [`shorter_bound`]. A waiter
    /// that another one re-checks for (a fair lock's waiter behind its
    /// client's first one) may sleep longer.
    fn recheck_bound(&self, interval: Duration, hint: Option<Duration>) -> Duration {
        shorter_bound(interval, hint)
    }

    /// How long the channel stays subscribed after a wait that got what
    /// it waited for (`None`: the last subscription leaves it at once).
    /// For a primitive whose owners come back soon (see
    /// `Subscription::linger`).
    fn linger(&self) -> Option<Duration> {
        None
    }

    /// A re-check of the channel's clock asks this first, if there is one:
    /// one command that tells whether the thing waited for is still held
    /// (`Some`, with its remaining TTL if it has one); `None` (free, or
    /// not known) tries. For a primitive whose key exists exactly while
    /// someone holds it (the lock family): a parked waiter's periodic
    /// re-check then costs one `PTTL`, not a script. A try is made anyway
    /// at least every [`FULL_EVERY`] (a fair waiter's try also renews its
    /// place in the queue).
    fn probe(&self) -> Option<BoxFuture<'static, Option<Option<Duration>>>> {
        None
    }

    /// The wait concluded with `outcome` (not called when it is dropped).
    fn concluded(&mut self, _outcome: &Result<Option<Self::Output>>) {}
}

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
    attempt: F,
) -> impl Future<Output = Result<Option<T>>> + Send + 'a
where
    F: FnMut() -> Fut + Send + 'a,
    Fut: Future<Output = Result<Step<T>>> + Send + 'a,
    T: Send + 'a,
{
    wait_with(
        engine,
        wait,
        Closure {
            channel,
            policy,
            attempt,
        },
    )
}

/// [`wait_for`]'s attempts: a closure.
struct Closure<'a, F> {
    channel: &'a str,
    policy: Policy,
    attempt: F,
}

impl<'a, T, F, Fut> Attempts for Closure<'a, F>
where
    F: FnMut() -> Fut + Send,
    Fut: Future<Output = Result<Step<T>>> + Send + 'a,
    T: Send,
{
    type Output = T;

    fn channel(&self) -> &str {
        self.channel
    }

    fn policy(&self) -> Policy {
        self.policy
    }

    fn attempt(
        &mut self,
        _handed: Option<Box<[u8]>>,
        _announce: bool,
    ) -> impl Future<Output = Result<Step<T>>> + Send + '_ {
        (self.attempt)()
    }
}

/// Waits until an attempt of `attempts` succeeds, for up to `wait`
/// (`None`: forever; zero: one try). `Ok(None)` when the time ran out.
///
/// # Cancel safety
///
/// As for [`wait_for`].
// Written out on purpose (see the comment in the body).
#[allow(clippy::manual_async_fn)]
pub(crate) fn wait_with<'a, A: Attempts + 'a>(
    engine: &'a Arc<Engine>,
    wait: Option<Duration>,
    mut attempts: A,
) -> impl Future<Output = Result<Option<A::Output>>> + Send + 'a {
    // An `async` block, not an `async fn`: no second copy of the
    // arguments in every waiting task's future.
    async move {
        let result = 'wait: {
            // Not started: nothing to conclude.
            attempts.start()?;
            let deadline = wait.and_then(|w| Instant::now().checked_add(w));
            let once = wait == Some(Duration::ZERO);
            // Already subscribed (another waiter, or a pin): no second try
            // needed.
            let mut subscription = if once {
                None
            } else {
                engine.pubsub.join_subscribed(attempts.channel())
            };
            // On a hot channel the first try waits for a wake-up too (see
            // `takes.rs`: no barging in ahead of deferred wake-ups).
            let mut skip_try = subscription.as_ref().is_some_and(|s| s.defers_first_try());
            // A try made with a wake-up lost the race: other clients try
            // too, so a take is announced to them (see `takes.rs`).
            let mut raced = false;
            let mut pauses = Backoff::new(RETRY_FIRST, RETRY_MAX);
            // Made at the first busy try; dropped with the wait. Boxed:
            // a parked waiter's future carries one pointer of it.
            let mut waiting: Option<Box<Waiting>> = None;
            // The last sleep was ended by the channel's clock: this
            // waiter's attempt re-checks for the channel's waiters.
            let mut rechecked = false;
            // When this wait last tried (a probe does not count).
            let mut last_try = Instant::now();
            loop {
                if let Err(e) = engine.check() {
                    break 'wait Err(e);
                }
                // The attempt and its outcome are scoped to this block,
                // read in a plain function: nothing of them stays in this
                // future while it waits (a parked waiter carries only the
                // wait's own state).
                let then = if std::mem::take(&mut skip_try) {
                    Then::Busy(None)
                } else if let Some(ttl) = probe(&attempts, rechecked, last_try).await {
                    // Still held: no try (see `Attempts::probe`).
                    Then::Busy(ttl)
                } else {
                    last_try = Instant::now();
                    let held = subscription.as_ref().is_some_and(|s| s.holds_wake_up());
                    let handed = subscription
                        .as_ref()
                        .filter(|_| held)
                        .and_then(|s| s.take_handed());
                    let sent = Instant::now();
                    let announce = subscription.as_ref().is_some_and(|s| s.announces(raced));
                    let outcome = attempts.attempt(handed, announce).await;
                    if let Some(s) = subscription.as_ref() {
                        s.observe(sent.elapsed());
                        if held {
                            raced |= matches!(outcome, Ok(Step::Busy(_)));
                            s.consumed_by(&outcome);
                        }
                    }
                    match next(engine, outcome, subscription.is_none() && !once, once) {
                        Ok(ControlFlow::Break(value)) => {
                            // What freed it may have freed more: the next
                            // parked waiter re-checks now.
                            if let Some(s) = subscription.as_ref().filter(|_| rechecked) {
                                s.recheck_next();
                            }
                            if let (Some(s), Some(linger)) =
                                (subscription.take(), attempts.linger())
                            {
                                s.linger(linger);
                            }
                            break 'wait Ok(Some(value));
                        }
                        Ok(ControlFlow::Continue(then)) => then,
                        Err(e) => break 'wait Err(e),
                    }
                };
                if waiting.is_none() && !once {
                    waiting = attempts
                        .waits_for()
                        .and_then(|(key, owner)| engine.registry.as_ref()?.start_wait(key, owner))
                        .map(Box::new);
                }
                let mut bound = engine.recheck_interval;
                let last_error = match then {
                    Then::Subscribe => {
                        // Subscribe, then try again at once. A subscription
                        // that cannot be confirmed before the deadline (the
                        // subscriber is reconnecting) ends the wait. Boxed: a
                        // parked waiter's future has no room for a subscribe
                        // (most waiters join a confirmed channel).
                        let subscribing = engine.pubsub.subscribe(
                            attempts.channel(),
                            attempts.policy(),
                            attempts.companion(),
                        );
                        let subscribed = match deadline {
                            Some(d) => {
                                match Box::pin(tokio::time::timeout_at(d, subscribing)).await {
                                    Ok(subscribed) => subscribed,
                                    Err(_) => break 'wait Ok(None),
                                }
                            }
                            None => Box::pin(subscribing).await,
                        };
                        match subscribed {
                            Ok(s) => {
                                engine.stats.subscribed();
                                subscription = Some(s);
                                continue;
                            }
                            Err(e) if e.is_transient() => {
                                bound = bound.min(pauses.next());
                                Some(Box::new(e))
                            }
                            Err(e) => break 'wait Err(e),
                        }
                    }
                    Then::Busy(retry) => {
                        pauses.reset();
                        bound = attempts.recheck_bound(bound, retry);
                        None
                    }
                    Then::Retry(e) => {
                        tracing::debug!(channel = %attempts.channel(), error = %e, "retrying after a connection error");
                        bound = bound.min(pauses.next());
                        Some(e)
                    }
                };
                // Whether the deadline comes before any re-check.
                let mut ends = false;
                if let Some(deadline) = deadline {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break 'wait last_error.map_or(Ok(None), |e| Err(*e));
                    }
                    if left <= bound {
                        bound = left;
                        ends = true;
                    }
                }
                // The sleep, written once and expanded twice: inline for
                // most waits (a parked waiter's future carries only what
                // it awaits), boxed and raced with "give up" for a wait
                // with deadlock detection on.
                macro_rules! sleep {
                    () => {
                        match &subscription {
                            Some(s) => {
                                let woken = if ends {
                                    // This wait's own timer, not the channel's clock
                                    // (which would re-check every waiter at this
                                    // waiter's deadline); boxed, as only the last
                                    // wait of a timed acquire needs it.
                                    let woken =
                                        Box::pin(tokio::time::timeout(bound, s.woken())).await;
                                    woken.unwrap_or(false) || s.holds_wake_up()
                                } else {
                                    s.wait(bound).await
                                };
                                if !woken {
                                    s.refresh();
                                }
                                rechecked = !woken && !ends;
                            }
                            // Not subscribed (it failed): back-off, boxed for the
                            // same reason as the subscribe.
                            None => Box::pin(tokio::time::sleep(bound)).await,
                        }
                    };
                }
                let slept = match waiting.as_deref().filter(|w| w.detects()) {
                    Some(w) => Box::pin(unless_deadlocked(w, async { sleep!() })).await,
                    None => {
                        sleep!();
                        Ok(())
                    }
                };
                if let Err(cycle) = slept {
                    let name = attempts
                        .waits_for()
                        .map(|(key, _)| String::from_utf8_lossy(key.as_bytes()).into_owned())
                        .unwrap_or_default();
                    break 'wait Err(Error::Deadlock {
                        name,
                        cycle: Box::new(cycle),
                    });
                }
            }
        };
        attempts.concluded(&result);
        result
    }
}

/// The usual sleep after a busy attempt: the recheck `interval`, or the
/// attempt's `hint` if that is shorter.
pub(super) fn shorter_bound(interval: Duration, hint: Option<Duration>) -> Duration {
    hint.map_or(interval, |hint| interval.min(hint))
}

/// After a re-check of the channel's clock (`rechecked`) and a try less
/// than [`FULL_EVERY`] ago: what [`Attempts::probe`] says (`None`: try).
fn probe<A: Attempts>(
    attempts: &A,
    rechecked: bool,
    last_try: Instant,
) -> impl Future<Output = Option<Option<Duration>>> + Send + 'static {
    let probe = (rechecked && last_try.elapsed() < FULL_EVERY)
        .then(|| attempts.probe())
        .flatten();
    async move {
        match probe {
            Some(probe) => probe.await,
            None => None,
        }
    }
}

/// Runs `sleep`, unless `waiting` finds first that this wait is the one
/// of a wait-for cycle to give up.
async fn unless_deadlocked<F: Future<Output = ()>>(
    waiting: &Waiting,
    sleep: F,
) -> std::result::Result<(), Deadlock> {
    tokio::select! {
        biased;
        cycle = waiting.deadlocked() => Err(cycle),
        () = sleep => Ok(()),
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

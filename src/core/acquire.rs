//! The acquire every lock kind uses: the current owner's lease, the one
//! wait loop, one latched script call per try.
//!
//! A primitive describes what it acquires ([`Spec`]: the key and tag of its
//! leases, the channel its releases are announced on and what a message
//! there wakes) and how one try is sent ([`Build`]: its acquire script's
//! call); the engine does the rest — lease records, turns, unknown
//! outcomes, cancellation, waiting (see `hold.rs` and `wait.rs`).
//!
//! A primitive whose releases may hand the lock straight to a waiter
//! ([`acquire_handed`]) also says how to read a message handed to the
//! waiter with its wake-up ([`Handoff`]): a message that grants this wait
//! the hold is *adopted* instead of sending a try (`hold::adopt`), with the
//! lease's signal counted from a time the primitive proves was before the
//! grant ([`Granted::since`]), never from when the message arrived.
//!
//! Each acquire runs in an `acquire` span (`lock`, `owner`, then
//! `outcome`, `attempts`, `wait_ms` when it concludes) and is counted once
//! in the client's [`Counters`] when it concludes; a dropped acquire
//! records `outcome = "cancelled"` and counts nothing.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fred::types::Key;
use tokio::time::Instant;
use tracing::field::Empty;
use tracing::Span;

use super::call::Call;
use super::hold::{self, Attempt, Hold, Request};
use super::lease::{Lease, LeaseInit, LeaseRef, Term};
use super::pubsub::Policy;
use super::stats::{Counters, KeyName, Outcome};
use super::wait::{self, Step};
use super::{lease_millis, Engine};
use crate::error::Result;

/// What to acquire, for whom, how long to wait and keep it.
pub(crate) struct Spec<'a> {
    /// The key the lease is of.
    pub(crate) key: &'a Key,
    /// Tells this primitive's leases on the key from others'.
    pub(crate) tag: u8,
    /// The owner id (see `Owner`).
    pub(crate) owner: u64,
    /// Makes the lease record, the first time this owner acquires.
    pub(crate) init: &'a (dyn Fn() -> Result<LeaseInit> + Sync),
    /// Where releases are announced, and what a message there wakes.
    pub(crate) channel: &'a str,
    pub(crate) policy: Policy,
    /// A fixed lease; `None`: the watchdog keeps it.
    pub(crate) lease: Option<Duration>,
    /// How long to wait; `None`: forever; zero: one try.
    pub(crate) wait: Option<Duration>,
}

/// A hold a message handed to a waiter: the primitive's script made the
/// waiter's field the holder (count 1) and set the key's TTL to at least
/// `ttl`, at some time after `since` (a send time of one of the waiter's
/// own calls whose reply showed it still waiting).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Granted {
    pub(crate) since: Instant,
    pub(crate) ttl: Duration,
}

/// Reads a message handed to a waiter with its wake-up: `Some` if it
/// grants this very wait the hold; `None` makes the waiter try as for any
/// wake-up.
pub(crate) type Handoff<'a> = &'a (dyn Fn(&[u8]) -> Option<Granted> + Sync);

/// Builds one try's call from the lease record, the lease in milliseconds
/// and the request id.
pub(crate) type Build<'a> = &'a (dyn Fn(&Lease, i64, u64) -> Call + Sync);

/// One acquire's span and counts; dropped before `end`, it records the
/// acquire as cancelled.
struct Observed {
    /// Boxed, and only when enabled: a disabled span would still take
    /// 40 B in every waiting task's future.
    span: Option<Box<Span>>,
    started: Instant,
    /// Tries so far (bumped by the wait loop's attempt closure).
    attempts: u32,
    ended: bool,
}

/// Acquires per `spec`; `Ok(None)` when the wait ran out.
///
/// # Cancel safety
///
/// Cancel safe: a dropped acquire holds nothing (an acquire under way is
/// settled in the background and a hold it took given back), leaves the
/// channel's queue and passes on a wake-up it held.
pub(crate) fn acquire<'a>(
    engine: &'a Arc<Engine>,
    spec: Spec<'a>,
    build: Build<'a>,
) -> impl Future<Output = Result<Option<Hold>>> + 'a {
    // Not an `async fn` around it: that would carry a second copy of the
    // arguments in every waiting task's future.
    acquire_handed(engine, spec, build, None)
}

/// [`acquire`], adopting a hold a message hands the waiter (see
/// [`Handoff`]) instead of trying again. Not with a replicas requirement
/// (the grant's replication cannot be waited for here): then the waiter
/// tries as for any wake-up.
///
/// # Cancel safety
///
/// As for [`acquire`]. A wait dropped after its grant ran but before it
/// was adopted holds nothing locally: the primitive gives the grant back.
// Written out on purpose (see the comment in the body).
#[allow(clippy::manual_async_fn)]
pub(crate) fn acquire_handed<'a>(
    engine: &'a Arc<Engine>,
    spec: Spec<'a>,
    build: Build<'a>,
    handoff: Option<Handoff<'a>>,
) -> impl Future<Output = Result<Option<Hold>>> + 'a {
    // An `async` block, not an `async fn`: an `async fn` keeps its
    // arguments twice in its future (as captures and as locals), 128 B
    // more in every waiting task. The arguments are one value, so each
    // try's closure refers to them with one pointer, not one per field.
    let acquiring = Acquiring {
        engine,
        spec,
        build,
        handoff,
    };
    async move {
        let acquiring = &acquiring;
        let (engine, spec) = (acquiring.engine, &acquiring.spec);
        engine.check()?;
        lease_millis(acquiring.lease())?;
        let mut observed = Observed::start(spec);
        let attempts = &mut observed.attempts;
        let result = {
            let wait = wait::wait_for_handed(
                engine,
                spec.channel,
                spec.policy,
                spec.wait,
                move |handed| {
                    *attempts += 1;
                    acquiring.attempt(handed)
                },
            );
            // In the acquire's span, entered at each poll (as
            // `Instrument` does, without a second copy of the span).
            let mut wait = std::pin::pin!(wait);
            let span = observed.span.as_deref();
            std::future::poll_fn(|cx| {
                let _entered = span.map(Span::enter);
                wait.as_mut().poll(cx)
            })
            .await
        };
        observed.end(
            &engine.stats,
            match &result {
                Ok(Some(_)) => Outcome::Acquired,
                Ok(None) => Outcome::Timeout,
                Err(_) => Outcome::Error,
            },
        );
        result
    }
}

/// An acquire's arguments, kept together in its future.
struct Acquiring<'a> {
    engine: &'a Arc<Engine>,
    spec: Spec<'a>,
    build: Build<'a>,
    handoff: Option<Handoff<'a>>,
}

impl<'a> Acquiring<'a> {
    /// The lease a hold is taken for: the spec's, or the watchdog's.
    fn lease(&self) -> Duration {
        self.spec.lease.unwrap_or(self.engine.watchdog.timeout())
    }

    /// One try, given the message handed to the waiter with its wake-up.
    fn attempt(
        &'a self,
        handed: Option<Box<[u8]>>,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<Step<Hold>>> + Send + 'a>> {
        let (engine, spec) = (self.engine, &self.spec);
        let granted = match (handed, self.handoff) {
            (Some(message), Some(read)) if engine.replicas.is_none() => read(&message),
            _ => None,
        };
        // The lease record is taken per try, not for the whole wait: a
        // parked waiter keeps none (a record it made is dropped again when
        // the try finds the lock busy), so N waiters on one key cost N
        // parked futures, not N records in the key's table.
        let lease = engine.leases.get(
            &engine.conn,
            &engine.watchdog,
            spec.key,
            spec.owner,
            spec.tag,
            spec.init,
        );
        Box::pin(async move {
            let lease = lease?;
            match granted {
                Some(granted) => adopt(engine, &lease, spec.lease, granted).await,
                None => {
                    let lease_ms = lease_millis(self.lease())?;
                    attempt(engine, &lease, spec.lease.is_some(), lease_ms, self.build).await
                }
            }
        })
    }
}

/// One try. Cancel safe (see `hold::acquire`).
async fn attempt(
    engine: &Arc<Engine>,
    lease: &LeaseRef,
    fixed: bool,
    lease_ms: i64,
    build: Build<'_>,
) -> Result<Step<Hold>> {
    let ttl = Duration::from_millis(lease_ms as u64);
    let attempt = hold::acquire(engine, lease, |rid| Request {
        call: build(lease, lease_ms, rid),
        term: if fixed {
            Term::Fixed(Instant::now() + ttl)
        } else {
            Term::Watchdog
        },
        ttl,
    })
    .await?;
    Ok(match attempt {
        Attempt::Held(hold) => Step::Done(hold),
        Attempt::Busy(retry) => {
            engine.stats.busy();
            Step::Busy(retry)
        }
    })
}

/// Adopts a handed hold (see [`Granted`]). Cancel safe (see `hold::adopt`).
async fn adopt(
    engine: &Arc<Engine>,
    lease: &LeaseRef,
    fixed: Option<Duration>,
    granted: Granted,
) -> Result<Step<Hold>> {
    let term = match fixed {
        Some(lease) => Term::Fixed(Instant::now() + lease),
        None => Term::Watchdog,
    };
    hold::adopt(engine, lease, term, granted.since, granted.ttl)
        .await
        .map(Step::Done)
}

// === impl Observed ===

impl Observed {
    fn start(spec: &Spec<'_>) -> Observed {
        let span = tracing::debug_span!(
            "acquire",
            lock = %KeyName(spec.key.as_bytes()),
            owner = spec.owner,
            outcome = Empty,
            attempts = Empty,
            wait_ms = Empty,
        );
        Observed {
            span: (!span.is_disabled()).then(|| Box::new(span)),
            started: Instant::now(),
            attempts: 0,
            ended: false,
        }
    }

    /// The acquire concluded: count it and close the span's fields.
    fn end(&mut self, counters: &Counters, outcome: Outcome) {
        self.ended = true;
        let elapsed = self.started.elapsed();
        counters.acquire_ended(outcome, self.attempts, elapsed);
        self.record(outcome.as_str(), elapsed);
    }

    fn record(&self, outcome: &'static str, elapsed: Duration) {
        let Some(span) = &self.span else { return };
        span.record("outcome", outcome);
        span.record("attempts", self.attempts);
        span.record("wait_ms", elapsed.as_millis() as u64);
    }
}

impl Drop for Observed {
    fn drop(&mut self) {
        if !self.ended {
            self.record("cancelled", self.started.elapsed());
        }
    }
}

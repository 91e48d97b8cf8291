//! The acquire every lock kind uses: the current owner's lease, the one
//! wait loop, one recorded script call per try.
//!
//! A primitive describes what it acquires and how one try is sent (a
//! [`Target`]: the key and kind of its leases, the channel its releases
//! are announced on and what a message there wakes, its acquire script's
//! call); the engine does the rest — lease records, turns, unknown
//! outcomes, cancellation, waiting (see `hold.rs` and `wait.rs`). The
//! target is kept by value in the wait loop's future, the only layer of an
//! acquire: a parked waiter carries its arguments once.
//!
//! A primitive whose releases may hand the lock straight to a waiter also
//! says how to read a message handed to the waiter with its wake-up
//! ([`Target::handoff`]): a message that grants this wait the hold is
//! *adopted* instead of sending a try (`hold::adopt`), with the lease's
//! signal counted from a time the primitive proves was before the grant
//! ([`Granted::since`]), never from when the message arrived.
//!
//! Each acquire runs in an `acquire` span (`lock`, `owner`, then
//! `outcome`, `attempts`, `wait_ms` when it concludes) and is counted once
//! in the client's [`Counters`] when it concludes; a dropped acquire
//! records `outcome = "cancelled"` and counts nothing. Its tries run in
//! the span (events of the parked wait itself do not).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fred::types::Key;
use tokio::time::Instant;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use super::call::Call;
use super::hold::{self, Attempt, Hold, Request};
use super::kind::Kind;
use super::lease::{Lease, LeaseRef, Term};
use super::names::LeaseNames;
use super::pubsub::Policy;
use super::stats::{AcquireEnd, Counters, KeyName};
use super::takes::taken_channel;
use super::wait::{self, Step};
use super::{lease_millis, Engine};
use crate::error::Result;

/// What a primitive acquires, and how one try of it is sent: the one
/// thing a primitive tells the engine (see the module docs). The acquire
/// keeps it by value in its future: a primitive's target is a few
/// references, so a parked waiter carries them once.
pub(crate) trait Target: Send + Sync {
    /// The owner the acquire is for, read once at its first poll (the
    /// owner of the task that polls it).
    fn owner(&self) -> u64;

    /// Checks the primitive's own arguments (a name, a lease), once at
    /// the first poll.
    fn check(&self) -> Result<()> {
        Ok(())
    }

    /// The key the lease is of.
    fn key(&self) -> &Key;

    /// The kind of the leases it takes: how they are released and renewed,
    /// and, by its identity, which record of the key is theirs.
    fn kind(&self) -> &'static dyn Kind;

    /// Where releases are announced.
    fn channel(&self) -> &str;

    /// What a message on the channel wakes.
    fn policy(&self) -> Policy;

    /// The names of `owner`'s lease record (key, field, request record,
    /// channel), the first time it acquires.
    fn init(&self, owner: u64) -> Result<LeaseNames>;

    /// One try's call, from the lease record, the lease in milliseconds
    /// and the request id.
    fn build(&self, lease: &Lease, lease_ms: i64, rid: u64) -> Call;

    /// Whether this primitive's tries announce a take of a free lock on
    /// the companion of its channel (`takes.rs`) when asked to
    /// ([`build_announcing`](Self::build_announcing)).
    fn announces_takes(&self) -> bool {
        false
    }

    /// [`build`](Self::build), for a try that, if it takes the free lock,
    /// announces it on the channel `announce` (`takes.rs`). Only called
    /// with `Some` for a target that [announces takes](Self::announces_takes).
    fn build_announcing(
        &self,
        lease: &Lease,
        lease_ms: i64,
        rid: u64,
        _announce: Option<&str>,
    ) -> Call {
        self.build(lease, lease_ms, rid)
    }

    /// How long the channel stays subscribed after an acquire that waited
    /// on it (see `wait::Attempts::linger`); `None` (the default): not at
    /// all.
    fn linger(&self) -> Option<Duration> {
        None
    }

    /// Reads a message handed to a waiter with its wake-up: `Some` if it
    /// grants this very wait the hold (it is then adopted, see
    /// [`Granted`]); `None` (the default) makes the waiter try as for any
    /// wake-up.
    fn handoff(&self, _message: &[u8]) -> Option<Granted> {
        None
    }
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

/// One acquire's span and counts; dropped before `end`, it records the
/// acquire as cancelled.
struct Observed {
    /// Boxed, and only when enabled: a disabled span would still take
    /// 40 B in every waiting task's future.
    span: Option<Box<Span>>,
    started: Instant,
    /// Tries so far.
    attempts: u32,
    ended: bool,
}

/// Acquires `target` with a fixed `lease` (`None`: the watchdog keeps
/// it), waiting up to `wait` (`None`: forever; zero: one try); `Ok(None)`
/// when the wait ran out. A message the target reads as a grant (see
/// [`Target::handoff`]) is adopted instead of trying again, unless the
/// client has a replicas requirement (the grant's replication cannot be
/// waited for here).
///
/// # Cancel safety
///
/// Cancel safe: a dropped acquire holds nothing (an acquire under way is
/// settled in the background and a hold it took given back), leaves the
/// channel's queue and passes on a wake-up it held. A wait dropped after
/// a grant to it ran but before it was adopted holds nothing locally: the
/// primitive gives the grant back.
pub(crate) fn acquire<'a, T: Target + 'a>(
    engine: &'a Arc<Engine>,
    target: T,
    lease: Option<Duration>,
    wait: Option<Duration>,
) -> impl Future<Output = Result<Option<Hold>>> + Send + 'a {
    // The wait loop's future is the acquire's: one layer, the arguments
    // kept once (in `Acquiring`).
    wait::wait_with(
        engine,
        wait,
        Acquiring {
            engine,
            target,
            lease,
            owner: 0,
            observed: None,
            companion: None,
        },
    )
}

/// An acquire's attempts (see [`wait::Attempts`]).
struct Acquiring<'a, T> {
    engine: &'a Arc<Engine>,
    target: T,
    lease: Option<Duration>,
    /// Read at the start.
    owner: u64,
    /// Made at the start.
    observed: Option<Observed>,
    /// The channel takes are announced on, if the target announces them
    /// (made at the start).
    companion: Option<Box<str>>,
}

impl<T: Target> Acquiring<'_, T> {
    /// The lease a hold is taken for: the target's, or the watchdog's.
    fn lease_ms(&self) -> Result<i64> {
        lease_millis(self.lease.unwrap_or(self.engine.watchdog.timeout()))
    }
}

impl<T: Target> wait::Attempts for Acquiring<'_, T> {
    type Output = Hold;

    fn start(&mut self) -> Result<()> {
        self.engine.check()?;
        self.target.check()?;
        self.lease_ms()?;
        self.owner = self.target.owner();
        self.observed = Some(Observed::start(self.target.key(), self.owner));
        if self.target.announces_takes() {
            self.companion = taken_channel(self.target.channel()).map(Box::from);
        }
        Ok(())
    }

    fn channel(&self) -> &str {
        self.target.channel()
    }

    fn policy(&self) -> Policy {
        self.target.policy()
    }

    fn companion(&self) -> Option<&str> {
        self.companion.as_deref()
    }

    fn attempt(
        &mut self,
        handed: Option<Box<[u8]>>,
        announce: bool,
    ) -> impl Future<Output = Result<Step<Hold>>> + Send + '_ {
        if let Some(observed) = &mut self.observed {
            observed.attempts += 1;
        }
        let this = &*self;
        let engine = this.engine;
        let granted = match handed {
            Some(message) if engine.replicas.is_none() => this.target.handoff(&message),
            _ => None,
        };
        // The lease record is taken per try, not for the whole wait: a
        // parked waiter keeps none (a record it made is dropped again when
        // the try finds the lock busy), so N waiters on one key cost N
        // parked futures, not N records in the key's table.
        let lease = engine.leases.get(
            &engine.conn,
            &engine.watchdog,
            this.target.key(),
            this.owner,
            this.target.kind(),
            &|| this.target.init(this.owner),
        );
        // Where to announce a take, if the wait loop asks for it.
        let announce = this.companion.as_deref().filter(|_| announce);
        let attempt = async move {
            let lease = lease?;
            match granted {
                Some(granted) => adopt(engine, &lease, this.lease, granted).await,
                None => {
                    let lease_ms = this.lease_ms()?;
                    let fixed = this.lease.is_some();
                    attempt(engine, &lease, fixed, lease_ms, &this.target, announce).await
                }
            }
        };
        // Boxed: a try's future is several KiB, and a parked waiter has
        // no room for it. In the acquire's span when it is enabled.
        let span = this.observed.as_ref().and_then(|o| o.span.as_deref());
        let boxed: std::pin::Pin<Box<dyn Future<Output = _> + Send + '_>> = match span {
            Some(span) => Box::pin(attempt.instrument(span.clone())),
            None => Box::pin(attempt),
        };
        boxed
    }

    fn waits_for(&self) -> Option<(&Key, u64)> {
        Some((self.target.key(), self.owner))
    }

    fn linger(&self) -> Option<Duration> {
        self.target.linger()
    }

    fn concluded(&mut self, outcome: &Result<Option<Hold>>) {
        if let Some(observed) = &mut self.observed {
            observed.end(
                &self.engine.stats,
                match outcome {
                    Ok(Some(_)) => AcquireEnd::Acquired,
                    Ok(None) => AcquireEnd::Timeout,
                    Err(_) => AcquireEnd::Error,
                },
            );
        }
    }
}

/// One try (announcing a take on `announce`, if given). Cancel safe (see
/// `hold::acquire`).
async fn attempt<T: Target>(
    engine: &Arc<Engine>,
    lease: &LeaseRef,
    fixed: bool,
    lease_ms: i64,
    target: &T,
    announce: Option<&str>,
) -> Result<Step<Hold>> {
    let ttl = Duration::from_millis(lease_ms as u64);
    let attempt = hold::acquire(engine, lease, |rid| Request {
        call: match announce {
            Some(_) => target.build_announcing(lease, lease_ms, rid, announce),
            None => target.build(lease, lease_ms, rid),
        },
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
    fn start(key: &Key, owner: u64) -> Observed {
        let span = tracing::debug_span!(
            "acquire",
            lock = %KeyName(key.as_bytes()),
            owner = owner,
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
    fn end(&mut self, counters: &Counters, outcome: AcquireEnd) {
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

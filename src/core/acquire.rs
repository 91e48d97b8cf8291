//! The acquire every lock kind uses: the current owner's lease, the one
//! wait loop, one recorded script call per try.
//!
//! A primitive describes what it acquires as plain data (a [`Spec`]: its
//! [`Kind`], the owner, the key, the channel its releases are announced
//! on, the field, its own extra keys), having checked its own arguments
//! first, and calls [`Engine::acquire`]. The kind says what one try sends
//! ([`Kind::acquire`]) and how its reply is read ([`Kind::acquire_reply`]);
//! the engine does the rest — lease records, turns, unknown outcomes,
//! cancellation, waiting (see `hold.rs` and `wait.rs`). The spec is kept
//! by value in the wait loop's future, the only layer of an acquire: a
//! parked waiter carries its arguments once.
//!
//! A primitive whose releases may hand the lock straight to a waiter
//! acquires with [`Engine::acquire_or_adopt`] and its wait's [`Handoff`]
//! (the contract's extension, `handoff.rs`): a message handed to the
//! waiter that grants this wait the hold is then *adopted*
//! (`handoff::adopt`) instead of sending a try. [`Engine::acquire`] is
//! that with [`NoHandoff`], which costs a waiter nothing.
//!
//! Each acquire runs in an `acquire` span (`lock`, `owner`, then
//! `outcome`, `attempts`, `wait_ms` when it concludes) and is counted once
//! in the client's [`Counters`] when it concludes; a dropped acquire
//! records `outcome = "cancelled"` and counts nothing. Its tries run in
//! the span (events of the parked wait itself do not).

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use fred::interfaces::KeysInterface;
use fred::types::Key;
use tokio::time::Instant;
use tracing::field::Empty;
use tracing::{Instrument, Span};

use super::background::BoxFuture;
use super::boxed::boxed_in_place;
use super::handoff::{self, Handoff, NoHandoff};
use super::hold::{self, AcquireCall, Hold};
use super::kind::{Kind, Try};
use super::lease::{LeaseRef, Term};
use super::names::LeaseNames;
use super::pubsub::Policy;
use super::stats::{AcquireEnd, Counters, KeyName};
use super::takes::taken_channel;
use super::wait::{self, Step};
use super::{lease_millis, Engine};
use crate::error::{Error, Result};
use crate::naming::owner_field;

/// What a primitive acquires: the one description it hands the engine
/// (see the module docs), built after its own arguments were checked.
/// Plain data: the engine reads it, and calls its kind. Small, since a
/// parked waiter carries it.
#[derive(Clone)]
pub(crate) struct Spec<'a> {
    /// The kind of the leases it takes: what a try sends, how leases are
    /// released and renewed, and, by its identity, which record of the
    /// key is theirs.
    pub(crate) kind: &'static dyn Kind,
    /// Whose acquire it is; 0: the task that first polls the acquire
    /// ([`Kind::owner_at_first_poll`]).
    pub(crate) owner: u64,
    /// The key the lease is of.
    pub(crate) key: &'a Key,
    /// Where the wait listens for releases.
    pub(crate) channel: &'a str,
    /// The holder's field, or with [`Kind::field_of_owner`] the client's
    /// prefix of its owners' fields (`Client::field` with no suffix): made
    /// into the owner's field the first time the owner acquires (see
    /// [`Spec::lease_names`]).
    pub(crate) field: &'a str,
    /// The channel the lease's releases are published on (not always
    /// where a wait listens: a waiter may listen on a channel of its own).
    pub(crate) release_channel: &'a [u8],
    /// The primitive's own keys for its tries, after the lease's key
    /// ([`Try::keys`]).
    pub(crate) keys: &'a [Key],
}

/// One acquire's span and counts; dropped before `end`, it records the
/// acquire as cancelled.
struct Observed {
    /// Boxed, and only when enabled: a disabled span would still take
    /// its full size in every waiting task's future.
    span: Option<Box<Span>>,
    started: Instant,
    /// Tries so far.
    attempts: u32,
    ended: bool,
}

// === impl Engine ===

impl Engine {
    /// Acquires what `spec` describes, each try sent as its kind says
    /// ([`Kind::acquire`]), with a fixed `lease` (`None`: the watchdog
    /// keeps it), waiting up to `wait` (`None`: forever; zero: one try);
    /// `Ok(None)` when the wait ran out. For a primitive without the
    /// handoff: [`acquire_or_adopt`](Self::acquire_or_adopt) with
    /// [`NoHandoff`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped acquire holds nothing (an acquire under way
    /// is settled in the background and a hold it took given back), leaves
    /// the channel's queue and passes on a wake-up it held.
    pub(crate) fn acquire<'a>(
        self: &'a Arc<Self>,
        spec: Spec<'a>,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> impl Future<Output = Result<Option<Hold>>> + Send + 'a {
        self.acquire_or_adopt(spec, NoHandoff, lease, wait)
    }

    /// The lease record `spec` names (its key, owner and kind), made the
    /// first time; a release of the same owner through another kind of the
    /// same field lands first (see `Engine::lease_of`). For a primitive
    /// that keeps a record across its acquire's tries (the fair lock's
    /// queue entry).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    pub(crate) async fn lease_for(&self, spec: &Spec<'_>) -> Result<LeaseRef> {
        let owner = spec.owner;
        self.lease_of(spec.key, owner, spec.kind, &|| spec.lease_names(owner))
            .await
    }

    /// How many live holds the client counts now for the lease `spec`
    /// names (0 without a record, or while another kind's release of its
    /// field is on its way). Sends nothing.
    pub(crate) fn live_holds(&self, spec: &Spec<'_>) -> u32 {
        let owner = spec.owner;
        self.lease_now(spec.key, owner, spec.kind, &|| spec.lease_names(owner))
            .map_or(0, |lease| lease.live_holds())
    }

    /// As [`acquire`](Self::acquire), for a primitive with the handoff
    /// (`handoff.rs`): each try is sent as `handoff` says
    /// ([`Handoff::acquire`]), and a message handed to the waiter that it
    /// reads as a grant is adopted instead of trying again, unless the
    /// client has a replicas requirement (the grant's replication cannot be
    /// waited for here).
    ///
    /// # Cancel safety
    ///
    /// As for [`acquire`](Self::acquire). A wait dropped after a grant to
    /// it ran but before it was adopted holds nothing locally: the
    /// primitive gives the grant back.
    pub(crate) fn acquire_or_adopt<'a, H: Handoff + 'a>(
        self: &'a Arc<Self>,
        spec: Spec<'a>,
        handoff: H,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> impl Future<Output = Result<Option<Hold>>> + Send + 'a {
        // The wait loop's future is the acquire's: one layer, the
        // arguments kept once (in `Acquiring`).
        wait::wait_with(
            self,
            wait,
            Acquiring {
                engine: self,
                spec,
                handoff,
                lease,
                observed: None,
                companion: OnceLock::new(),
            },
        )
    }
}

/// An acquire's attempts (see [`wait::Attempts`]).
struct Acquiring<'a, H> {
    engine: &'a Arc<Engine>,
    /// Its owner is set (not 0) from the start on.
    spec: Spec<'a>,
    /// Zero-sized ([`NoHandoff`]) for a primitive without the handoff.
    handoff: H,
    lease: Option<Duration>,
    /// Made at the start.
    observed: Option<Observed>,
    /// The channel takes are announced on, if the spec announces them:
    /// made when the wait first needs it (it subscribes), never on an
    /// acquire whose first try succeeds.
    companion: OnceLock<Option<Box<str>>>,
}

// === impl Spec ===

impl Spec<'_> {
    /// The names of `owner`'s lease record: made only when the owner has
    /// no record yet (its first acquire of the key, or its record left the
    /// idle ring), since making them allocates (their buffer, and with
    /// [`Kind::field_of_owner`] the field), which an acquire that finds
    /// its record does not pay.
    pub(crate) fn lease_names(&self, owner: u64) -> Result<LeaseNames> {
        let key = std::str::from_utf8(self.key.as_bytes())
            .map_err(|_| Error::invalid("lock name is not UTF-8"))?;
        if self.kind.field_of_owner() {
            LeaseNames::new(
                key,
                &owner_field(self.field, owner, ""),
                self.release_channel,
            )
        } else {
            LeaseNames::new(key, self.field, self.release_channel)
        }
    }
}

// === impl Acquiring ===

impl<H> Acquiring<'_, H> {
    /// The lease a hold is taken for: the spec's, or the watchdog's.
    fn lease_ms(&self) -> Result<i64> {
        lease_millis(self.lease.unwrap_or(self.engine.watchdog.timeout()))
    }
}

impl<H: Handoff> wait::Attempts for Acquiring<'_, H> {
    type Output = Hold;

    fn start(&mut self) -> Result<()> {
        self.engine.check()?;
        self.lease_ms()?;
        if self.spec.owner == 0 {
            self.spec.owner = self.spec.kind.owner_at_first_poll();
        }
        self.observed = Some(Observed::start(self.spec.key, self.spec.owner));
        Ok(())
    }

    fn channel(&self) -> &str {
        self.spec.channel
    }

    fn policy(&self) -> Policy {
        self.spec.kind.wakes()
    }

    fn companion(&self) -> Option<&str> {
        self.companion
            .get_or_init(|| {
                let announces = self.spec.kind.announces_takes();
                announces
                    .then(|| taken_channel(self.spec.channel))
                    .flatten()
            })
            .as_deref()
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
            Some(message) if engine.replicas.is_none() => this.handoff.granted(&message),
            _ => None,
        };
        // The lease record is taken per try, not for the whole wait: a
        // parked waiter keeps none (a record it made is dropped again when
        // the try finds the lock busy), so N waiters on one key cost N
        // parked futures, not N records in the key's table.
        let owner = this.spec.owner;
        let names = move || this.spec.lease_names(owner);
        // Where to announce a take, if the wait loop asks for it.
        let announce = if announce { this.companion() } else { None };
        let attempt = move || async move {
            let kind = this.spec.kind;
            // A release of this owner through another kind of the same
            // field still on its way lands first (`Engine::lease_of`).
            let lease = engine.lease_of(this.spec.key, owner, kind, &names).await?;
            match granted {
                Some(granted) => handoff::adopt(engine, &lease, this.lease, granted)
                    .await
                    .map(Step::Done),
                None => {
                    let lease_ms = this.lease_ms()?;
                    let fixed = this.lease.is_some();
                    let at = Try {
                        lease_ms,
                        keys: this.spec.keys,
                        announce,
                    };
                    attempt(engine, &lease, fixed, &at, kind, &this.handoff).await
                }
            }
        };
        // Boxed: a try's future is several KiB, and a parked waiter has
        // no room for it. Built in its box (`core/boxed.rs`). In the
        // acquire's span when it is enabled.
        let span = this.observed.as_ref().and_then(|o| o.span.as_deref());
        let boxed: std::pin::Pin<Box<dyn Future<Output = _> + Send + '_>> = match span {
            Some(span) => boxed_in_place(|| attempt().instrument(span.clone())),
            None => boxed_in_place(attempt),
        };
        boxed
    }

    fn waits_for(&self) -> Option<(&Key, u64)> {
        Some((self.spec.key, self.spec.owner))
    }

    fn recheck_bound(&self, interval: Duration, hint: Option<Duration>) -> Duration {
        self.handoff
            .covered_for()
            .unwrap_or_else(|| wait::shorter_bound(interval, hint))
    }

    fn probe(&self) -> Option<BoxFuture<'static, Option<Option<Duration>>>> {
        if !self.spec.kind.held_while_key_lives() {
            return None;
        }
        let (engine, key) = (self.engine.clone(), self.spec.key.clone());
        Some(Box::pin(async move {
            let ttl: i64 = engine.redis().pttl(key).await.ok()?;
            match ttl {
                -1 => Some(None),
                ttl if ttl > 0 => Some(Some(Duration::from_millis(ttl as u64 + 1))),
                _ => None,
            }
        }))
    }

    fn linger(&self) -> Option<Duration> {
        self.spec.kind.linger()
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
async fn attempt<H: Handoff>(
    engine: &Arc<Engine>,
    lease: &LeaseRef,
    fixed: bool,
    at: &Try<'_>,
    kind: &dyn Kind,
    handoff: &H,
) -> Result<Step<Hold>> {
    let lease_ms = at.lease_ms;
    let ttl = Duration::from_millis(lease_ms as u64);
    let attempt = hold::acquire(engine, lease, |rid| AcquireCall {
        call: {
            handoff.numbered(rid);
            handoff.acquire(kind, lease, at).for_lease(lease, rid)
        },
        term: if fixed {
            Term::Fixed(Instant::now() + ttl)
        } else {
            Term::Watchdog
        },
        ttl,
    })
    .await?;
    if let Step::Busy(_) = attempt {
        engine.stats.busy();
    }
    Ok(attempt)
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

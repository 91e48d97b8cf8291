//! The fair lock's acquire: the engine's wait loop on the waiter's own
//! channel, with the queue kept on the side (refresh, leave; `queue.rs`),
//! and the adoption of a lock a release granted the waiter (see the
//! module docs, "One-hop handoff").

use std::sync::Arc;
use std::time::Duration;

use fred::types::Value;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::alive::{Member, BEHIND};
use super::kind::{waiter_channel, FairKind, ACQUIRE, LINGER};
use super::queue::{self, now_ms, Leave, Queued, THREAD_WAIT};
use super::Fair;
use crate::core::acquire::{acquire, acquire_or_adopt, Profile, Spec, Tries};
use crate::core::handoff::{Granted, Handoff};
use crate::core::hold::Hold;
use crate::core::lease::Lease;
use crate::core::pubsub::Wake;
use crate::core::request::{Before, Request};
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::owner::Owner;

/// What a waiter knows of its own calls, to read a grant message: the
/// latest try it built (its request id, which the acquire script records
/// as the waiter's grant nonce, and a time before it was sent), and the
/// send time of the latest refresh that found it still queued.
#[derive(Debug, Default)]
struct Calls {
    last_try: Mutex<Option<(u64, Instant)>>,
    seen: Mutex<Option<Instant>>,
    /// The first and last request ids of this wait's tries (shared with
    /// its `Leave`).
    tries: Arc<Mutex<Option<(u64, u64)>>>,
}

/// The waiter's channel policy: `grant:…` (the release made this waiter
/// the holder) wakes one waiter handing it the message; anything else
/// (Redisson's `0`) wakes one.
pub(super) fn wake_or_grant(message: &[u8]) -> Wake {
    if message.starts_with(b"grant:") {
        Wake::OneWith
    } else {
        Wake::One
    }
}

// === impl Fair ===

impl Fair {
    /// Waits in the queue (see the module docs). `wait: None` waits
    /// forever; zero tries once without queueing.
    pub(crate) async fn acquire(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        self.check()?;
        let engine = self.client.engine();
        let owner = Owner::current();
        let field = self.client.field(owner.id(), "");
        let waits = wait != Some(Duration::ZERO);
        let own_channel: Arc<str> = waiter_channel(&self.channel, &field).into();
        let calls = Calls::default();
        // A wait is kept alive by the client, with the client's other
        // waits on this lock (`alive.rs`), or else by its own refreshes.
        let member = waits
            .then(|| Member::join(engine, self.client.id(), &self.names, &own_channel))
            .flatten();
        let tries = FairTries {
            lock: self,
            calls: &calls,
            waits,
            member: member.as_ref(),
        };
        if !waits {
            let spec = self.spec(owner.id(), &field, &own_channel);
            let hold = acquire(engine, spec, tries, lease, wait).await?;
            return Ok(hold.map(|h| self.guard(h, owner)));
        }
        // The waiter's channel stays subscribed from now until a moment
        // after the hold it gets ends, so an owner that locks again and
        // again queues and is told with one script call each.
        let pin = engine.pin(&own_channel, wake_or_grant).await;
        // Dropped from here on, the waiter leaves the queue (and gives
        // back a grant it did not adopt).
        let lease_ref = engine
            .lease_of(&self.names.key, owner.id(), &FairKind, &|| {
                self.spec(owner.id(), &field, &own_channel)
                    .lease_names(owner.id())
            })
            .await?;
        let field_str = lease_ref.field();
        let mut queued = Queued::new(
            engine.clone(),
            Leave {
                lease: lease_ref,
                names: self.names.clone(),
                tries: calls.tries.clone(),
                id: Default::default(),
            },
        );
        let outcome = {
            let spec = self.spec(owner.id(), &field, &own_channel);
            let acquiring = acquire_or_adopt(engine, spec, tries, &calls, lease, wait);
            if member.is_some() {
                acquiring.await
            } else {
                let refreshing = queue::refresh(
                    engine.conn(),
                    &self.names,
                    &field_str,
                    &own_channel,
                    &calls.seen,
                );
                tokio::select! {
                    outcome = acquiring => outcome,
                    never = refreshing => match never {},
                }
            }
        };
        match &outcome {
            Ok(Some(_)) => queued.disarm(),
            // The client or its runtime is gone: the background job (on a
            // fresh connection if need be) leaves the queue.
            Err(Error::Shutdown | Error::NoRuntime | Error::RuntimeGone) => drop(queued),
            _ => queued.leave_now().await,
        }
        // The waiter's channel stays with the guard, and a moment after
        // it (no task is spawned on the way to the caller: a spawn here
        // slowed the handoff measurably, BENCHMARKS.md, "Code figures
        // moved out of comments").
        Ok(outcome?.map(|h| self.guard(h, owner).keeping(pin.lingering(LINGER))))
    }

    /// What a wait of `owner` (holding `field`, listening on its own
    /// channel) acquires (see `core::acquire::Spec`).
    fn spec<'a>(&'a self, owner: u64, field: &'a str, own_channel: &'a str) -> Spec<'a> {
        Spec {
            profile: &FAIR_PROFILE,
            owner,
            key: &self.names.key,
            channel: own_channel,
            field,
            release_channel: self.names.channel.as_bytes(),
        }
    }

    fn guard(&self, hold: Hold, owner: Owner) -> LockGuard {
        LockGuard::new(hold, self.client.key_prefix().len(), owner)
    }
}

/// What every wait of a fair lock shares. Its channel does not linger:
/// the waiter's own channel is pinned instead (see `acquire`).
static FAIR_PROFILE: Profile = Profile {
    // The lock's hash exists exactly while someone holds it (a grant
    // included).
    held_while_key_lives: true,
    ..Profile::of(&FairKind, wake_or_grant)
};

/// How one wait of a fair lock sends its tries (see
/// `core::acquire::Tries`).
#[derive(Clone, Copy)]
struct FairTries<'a> {
    lock: &'a Fair,
    calls: &'a Calls,
    /// Queue if busy (not a single try).
    waits: bool,
    /// Its place in its client's group of waits on this lock, if the
    /// client keeps them alive (`alive.rs`).
    member: Option<&'a Member>,
}

impl Tries for FairTries<'_> {
    /// A wait behind its client's oldest wait on the lock is re-checked
    /// for by that one (`alive.rs`): it sleeps until told, or `BEHIND`.
    fn covered_for(&self) -> Option<Duration> {
        self.member.filter(|m| !m.is_first()).map(|_| BEHIND)
    }

    /// The try's request id is its grant nonce (see `Calls`' handoff).
    /// Under the lease's turn: numbered before it is sent.
    fn numbered(&self, rid: u64) {
        let calls = self.calls;
        *calls.last_try.lock() = Some((rid, Instant::now()));
        let mut tries = calls.tries.lock();
        *tries = Some((tries.map_or(rid, |(first, _)| first), rid));
    }

    fn request(&self, lease: &Lease, lease_ms: i64, _announce: Option<&str>) -> Request {
        // Never asked to announce (no takes).
        let names = &self.lock.names;
        Request::new(
            &ACQUIRE,
            [
                names.key.clone(),
                names.queue.clone(),
                names.timeouts.clone(),
                names.grants.clone(),
            ],
        )
        .arg(lease_ms)
        .arg(Value::String(lease.field()))
        .arg(now_ms())
        .arg(THREAD_WAIT.as_millis() as i64)
        .arg(i64::from(self.waits))
        .arg(i64::from(lease.holds() > 0))
        .expected_holds(Before::Acquire)
        .arg(self.member.map_or(0, Member::mark))
    }
}

// === impl Calls ===

/// The fair lock's handoff (`core/handoff.rs`): a wait's grant messages
/// are read against its own calls.
impl Handoff for Calls {
    /// Reads a grant message `grant:<nonce>:<ttl ms>`: it grants this wait
    /// the lock if its nonce is the request id of the latest try this
    /// wait built (that try ran, found the lock busy and recorded the
    /// nonce, all before the grant: a try that ran after it would have
    /// taken the grant itself). The grant therefore ran after that try
    /// was built, and after any later refresh that found the waiter
    /// queued (a grant pops it, and nothing queues it again but a try):
    /// the latest of those times is the adoption's lower bound. Never the
    /// time the message arrived.
    fn granted(&self, message: &[u8]) -> Option<Granted> {
        let text = std::str::from_utf8(message).ok()?;
        let mut parts = text.strip_prefix("grant:")?.split(':');
        let nonce: u64 = parts.next()?.parse().ok()?;
        let ttl_ms: u64 = parts.next()?.parse().ok()?;
        let (rid, built) = (*self.last_try.lock())?;
        if rid != nonce || ttl_ms == 0 {
            return None;
        }
        let since = match *self.seen.lock() {
            Some(seen) if seen > built => seen,
            _ => built,
        };
        Some(Granted {
            since,
            ttl: Duration::from_millis(ttl_ms),
        })
    }
}

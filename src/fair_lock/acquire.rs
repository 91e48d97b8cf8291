//! The fair lock's acquire: the engine's wait loop on the waiter's own
//! channel, with the queue kept on the side (refresh, leave; `queue.rs`),
//! and the adoption of a lock a release granted the waiter (see the
//! module docs, "One-hop handoff").

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::alive::{Member, BEHIND};
use super::kind::{try_request, waiter_channel, FairKind, LINGER};
use super::queue::{self, Leave, Queued};
use super::Fair;
use crate::core::kind::{Granted, Handoff, Hold, Kind, Lease, Request, Spec, Try};
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
        let own_channel: Arc<str> = waiter_channel(&self.channel, &field).into();
        if wait == Some(Duration::ZERO) {
            // One try, not queued: the kind's own request.
            let spec = self.spec(owner.id(), &field, &own_channel);
            let hold = engine.acquire(spec, lease, wait).await?;
            return Ok(hold.map(|h| self.guard(h, owner)));
        }
        let calls = Calls::default();
        // A wait is kept alive by the client, with the client's other
        // waits on this lock (`alive.rs`), or else by its own refreshes.
        let member = Member::join(engine, self.client.id(), &self.names, &own_channel);
        let tries = FairWait {
            calls: &calls,
            member: member.as_ref(),
        };
        // The waiter's channel stays subscribed from now until a moment
        // after the hold it gets ends, so an owner that locks again and
        // again queues and is told with one script call each.
        let pin = engine.pin(&own_channel, FairKind.wakes()).await;
        // Dropped from here on, the waiter leaves the queue (and gives
        // back a grant it did not adopt).
        let lease_ref = engine
            .lease_for(&self.spec(owner.id(), &field, &own_channel))
            .await?;
        let field_str = lease_ref.field();
        let mut queued = Queued::new(
            engine.clone(),
            Leave {
                lease: lease_ref,
                names: self.names.clone(),
                tries: calls.tries.clone(),
            },
        );
        let outcome = {
            let spec = self.spec(owner.id(), &field, &own_channel);
            let acquiring = engine.acquire_or_adopt(spec, tries, lease, wait);
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
            kind: &FairKind,
            owner,
            key: &self.names.key,
            channel: own_channel,
            field,
            release_channel: self.names.channel.as_bytes(),
            // `acquire.lua`'s KEYS[2..4] (`FairKind::acquire`).
            keys: self.names.try_keys(),
        }
    }

    fn guard(&self, hold: Hold, owner: Owner) -> LockGuard {
        LockGuard::new(hold, self.client.key_prefix().len(), owner)
    }
}

/// One queued wait of a fair lock: the contract's extension (see
/// `core::handoff::Handoff`): its tries, their numbering, its grants.
#[derive(Clone, Copy)]
struct FairWait<'a> {
    calls: &'a Calls,
    /// Its place in its client's group of waits on this lock, if the
    /// client keeps them alive (`alive.rs`).
    member: Option<&'a Member>,
}

impl Handoff for FairWait<'_> {
    /// A wait behind its client's oldest wait on the lock is re-checked
    /// for by that one (`alive.rs`): it sleeps until told, or `BEHIND`.
    fn covered_for(&self) -> Option<Duration> {
        self.member.filter(|m| !m.is_first()).map(|_| BEHIND)
    }

    /// The try's request id is its grant nonce (see `Calls::granted`).
    /// Under the lease's turn: numbered before it is sent.
    fn numbered(&self, rid: u64) {
        let calls = self.calls;
        *calls.last_try.lock() = Some((rid, Instant::now()));
        let mut tries = calls.tries.lock();
        *tries = Some((tries.map_or(rid, |(first, _)| first), rid));
    }

    /// The kind's try, queueing if busy and marked as a member of its
    /// client's group of waits (`alive.rs`).
    fn acquire(&self, _kind: &dyn Kind, lease: &Lease, at: &Try<'_>) -> Request {
        try_request(lease, at, true, self.member.map_or(0, Member::mark))
    }

    fn granted(&self, message: &[u8]) -> Option<Granted> {
        self.calls.granted(message)
    }
}

// === impl Calls ===

impl Calls {
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

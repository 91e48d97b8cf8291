//! The one-hop handoff: a release hands the lock straight to a waiter,
//! which holds it without another call. A capability a primitive opts
//! into (as `lock_api`'s `RawMutexFair` extends `RawMutex`); everything
//! the engine does for it is here, and the rest of the engine knows it
//! only as the [`Handoff`] an acquire may be given.
//!
//! # What a grant is
//!
//! A primitive whose release scripts free the lock for a known head waiter
//! may *grant* it instead: the script makes the waiter's field the holder
//! (count 1), sets the key's TTL to at least a grant TTL, and publishes a
//! message addressed to that one waiter, on a channel only it listens on,
//! carrying a nonce the waiter's own latest call recorded and the grant
//! TTL. The waiter's channel policy answers that message with
//! `Wake::OneWith`: the wake-up queue wakes one waiter *handing it the
//! message* (`pubsub/queue.rs`: a general mechanism of the queue, which
//! the handoff uses; the wait loop gives the message to the next try,
//! `Subscription::take_handed`).
//!
//! # Adopting without a call
//!
//! The acquire reads a handed message with the primitive's
//! [`Handoff::granted`]. A message it accepts is a [`Granted`], and the
//! hold is *adopted* ([`adopt`]): counted under the lease's turn as if an
//! acquire sent at [`Granted::since`] had returned count 1 with the
//! grant's TTL, without a call to Redis. That is safe because:
//!
//! * **`since` came before the grant.** It is a send time of one of the
//!   waiter's own calls whose reply showed it still waiting (its latest
//!   try, or a later call that found it still queued). The grant ran after
//!   that call, so it set the key's TTL at some time after `since`: the
//!   hold's signal, `since + ttl`, can only end early, never late. The
//!   time the message *arrived* is never used (it may be any time after
//!   the grant).
//! * **The nonce names this very wait.** The primitive accepts a grant
//!   only if its nonce is the one its latest try recorded (the fair lock:
//!   that try's request id). A grant for an older wait of the same owner,
//!   or a message it cannot read, is a plain wake-up: the waiter tries as
//!   for any other.
//! * **A client with a replicas requirement never adopts** (the grant's
//!   replication cannot be waited for here): it tries, and its try finds
//!   the grant as its own acquire would.
//!
//! If the hold's term needs the key longer than the grant's TTL (a
//! watchdog hold, a longer fixed lease), one renewal of this lease raises
//! it in the background, a third of the grant's TTL later and only if the
//! hold still lives then ([`raise`]): a hot lock held for microseconds
//! costs Redis nothing more. Its confirmation extends the signal from its
//! send time; a reply finding the field gone ends the incarnation; a
//! failure leaves the signal to run out at `since + ttl` (unless the
//! watchdog renews it first). The counting itself is `hold::count_granted`,
//! kept in `hold.rs` because it builds a `Hold` from that file's private
//! constructor; this file is its only caller.
//!
//! # Messages handed over in this process
//!
//! A release whose reply names the waiter it granted, whose client lives
//! in this same process, hands the grant message over at once with
//! [`hand_here`] (from its kind's `Kind::after_release`), without waiting
//! for Redis to carry it: Redis writes the release's reply before the
//! published message, so the message would reach even a waiter in this
//! process some tens of microseconds after the releaser went on. Each
//! client's subscription registry is listed process-wide by client id
//! ([`serve_here`], at the client's build; the [`Listing`] it returns is
//! kept by the engine and takes it off the list when dropped). The
//! message is delivered as if it had come from Redis
//! (`pubsub::WeakPubSub::deliver`), so the channel's policy applies.
//!
//! The waiter then gets the same message twice: the hand-over, and Redis's
//! copy, in either order. The second copy wakes nobody and leaves no
//! permit: a grant is unique (its nonce), and a channel drops a `OneWith`
//! message equal to the last one it delivered (`WakeQueue::handed_last`,
//! `pubsub/queue.rs`). A waiter in another process is told by Redis's
//! message alone.
//!
//! # Cancel
//!
//! * A wait dropped after a grant to it ran but before it adopted it
//!   (waiting for the lease's turn, or never woken) holds nothing
//!   locally: nothing was counted, and the primitive gives the grant back
//!   (the fair lock's leave, which finds its field granted).
//! * A woken waiter dropped before its try passes the wake-up on, but not
//!   the message: a handed message is never passed on nor kept as a
//!   permit. The next waiter re-checks as for any wake-up.
//! * Once counted, an adopted hold is a hold like any other: its guard's
//!   drop gives it back.
//!
//! # How a primitive opts in
//!
//! It implements [`Handoff`] for its waits (reading its grant messages),
//! acquires with `Engine::acquire_or_adopt` instead of `Engine::acquire`
//! (which passes [`NoHandoff`]), sets a channel policy that answers its grant messages
//! with `Wake::OneWith`, and calls [`hand_here`] from its kind's
//! `Kind::after_release` for a release that granted. The acquire is
//! generic over the handoff, so a primitive without it pays nothing: the
//! zero-sized [`NoHandoff`] adds no byte to a waiter's future, and its
//! `granted` returning `None` leaves the adopt branch dead in its
//! monomorphised acquire.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use tokio::time::Instant;

use super::background::spawn_here;
use super::hold::{self, Hold};
use super::kind::{Kind, Try};
use super::lease::{Lease, LeaseRef, Term};
use super::pubsub::{PubSub, WeakPubSub};
use super::request::Request;
use super::Engine;
use crate::error::Result;

/// The contract's one extension (see `kind.rs`): a wait of a primitive
/// whose releases may hand the lock straight to it (the fair lock). How a
/// message handed to the waiter with its wake-up is read, and what of a
/// wait differs from its kind's defaults: its tries' arguments, the request
/// ids they are numbered with, who re-checks for it.
pub(crate) trait Handoff: Send + Sync {
    /// `Some` if `message` grants this very wait the hold (it is then
    /// adopted, see [`Granted`]); `None` makes the waiter try as for any
    /// wake-up. Never called without a handed message, nor for a client
    /// with a replicas requirement.
    fn granted(&self, message: &[u8]) -> Option<Granted>;

    /// What one try of this wait sends. The default: the kind's
    /// ([`Kind::acquire`]).
    fn acquire(&self, kind: &dyn Kind, lease: &Lease, at: &Try<'_>) -> Request {
        kind.acquire(lease, at)
    }

    /// The request id the engine gives the try about to be built (under
    /// the lease's turn): a handoff that names tries by it (the fair
    /// lock's grants) keeps it. The default: nothing.
    fn numbered(&self, _rid: u64) {}

    /// `Some(bound)` while another waiter re-checks for this one (a fair
    /// lock's waiter behind its client's first one): after a busy try it
    /// sleeps until told, at most `bound`, instead of the usual bound
    /// (`wait::Attempts::recheck_bound`). The default: `None`.
    fn covered_for(&self) -> Option<Duration> {
        None
    }
}

/// The handoff of a primitive that has none: reads no message as a grant.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NoHandoff;

/// A hold a message handed to a waiter: the primitive's script made the
/// waiter's field the holder (count 1) and set the key's TTL to at least
/// `ttl`, at some time after `since` (a send time of one of the waiter's
/// own calls whose reply showed it still waiting).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Granted {
    pub(crate) since: Instant,
    pub(crate) ttl: Duration,
}

/// A client's registry listed for [`hand_here`] (see the module docs);
/// dropping it takes the registry off the list. Kept by the engine.
#[derive(Debug)]
pub(crate) struct Listing {
    id: uuid::Uuid,
    pubsub: WeakPubSub,
}

/// Every client's registry in this process, by client id (see the module
/// docs). Entries are added by [`serve_here`] and removed by their
/// [`Listing`]'s drop.
fn here() -> &'static DashMap<uuid::Uuid, WeakPubSub> {
    static HERE: std::sync::OnceLock<DashMap<uuid::Uuid, WeakPubSub>> = std::sync::OnceLock::new();
    HERE.get_or_init(DashMap::new)
}

/// Lists `pubsub` as client `id`'s, so that [`hand_here`] reaches it, until
/// the returned listing is dropped.
pub(crate) fn serve_here(id: uuid::Uuid, pubsub: &PubSub) -> Listing {
    let pubsub = pubsub.downgrade();
    here().insert(id, pubsub.clone());
    Listing { id, pubsub }
}

/// Delivers `message` on `channel` to the client of this process whose id
/// is `client`, as if it had arrived from Redis (its channel's policy
/// applies). For a message a script just published to one waiter: Redis's
/// own copy is then dropped as a duplicate (see the module docs). Does
/// nothing if no such client lives here, or it is not subscribed to
/// `channel`.
pub(crate) fn hand_here(client: uuid::Uuid, channel: &str, message: &[u8]) {
    let listed = here().get(&client).map(|entry| entry.clone());
    if let Some(pubsub) = listed {
        pubsub.deliver(channel, message);
    }
}

/// Adopts a hold `granted` to `lease`'s field (see the module docs): counts
/// it without a call, with a `fixed` lease or (`None`) the watchdog's, and
/// raises the key's TTL in the background if that term needs it longer
/// than the grant's.
///
/// Cancel safe: dropped while waiting for the lease's turn, nothing is
/// counted (the caller's primitive gives the grant back).
pub(crate) async fn adopt(
    engine: &Arc<Engine>,
    lease: &LeaseRef,
    fixed: Option<Duration>,
    granted: Granted,
) -> Result<Hold> {
    let term = match fixed {
        Some(lease) => Term::Fixed(Instant::now() + lease),
        None => Term::Watchdog,
    };
    let Granted { since, ttl } = granted;
    let hold = hold::count_granted(engine, lease, term, since, ttl).await?;
    let need = Duration::from_millis(lease.requirement_ms(term) as u64);
    if need > ttl {
        raise(lease.clone_ref(), need, ttl / 3);
    }
    Ok(hold)
}

/// One renewal of `lease` with `ttl`, in the background (see [`adopt`]),
/// sent `after` from now, and only if the holds it was started for are
/// still live then: a hold given back within `after` (the common case
/// of a hot lock: held for microseconds) costs Redis nothing more. The
/// grant's own TTL covers the hold until the raise lands (`after` is a
/// third of it).
fn raise(lease: LeaseRef, ttl: Duration, after: Duration) {
    let incarnation = lease.incarnation();
    spawn_here(async move {
        tokio::time::sleep(after).await;
        if lease.live_holds() == 0 || !lease.is_current(incarnation) {
            return;
        }
        let ttl_ms = (ttl.as_millis().clamp(1, i64::MAX as u128)) as i64;
        if let Err(e) = hold::renew_one(&lease, ttl_ms).await {
            tracing::debug!(key = %lease.key_str(), error = %e, "could not raise an adopted hold's TTL; its signal runs out with the grant");
        }
    });
}

// === impl NoHandoff ===

impl Handoff for NoHandoff {
    #[inline]
    fn granted(&self, _message: &[u8]) -> Option<Granted> {
        None
    }
}

// === impl Listing ===

impl Drop for Listing {
    fn drop(&mut self) {
        here().remove_if(&self.id, |_, listed| listed.is(&self.pubsub));
    }
}

#[cfg(all(test, not(leasehold_loom)))]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::core::pubsub::tests::{registry_with, wake_or_hand};

    /// A message handed over in this process reaches the listed client's
    /// waiter; the same message from Redis afterwards wakes nobody. Another
    /// client id, or a channel not subscribed, takes nothing. The listing
    /// goes when it is dropped.
    #[tokio::test]
    async fn a_message_handed_here_reaches_the_listed_client_until_its_listing_goes() {
        let (registry, mut subs) = registry_with(1, wake_or_hand);
        let w = subs.pop().unwrap();
        let id = uuid::Uuid::new_v4();
        let listing = serve_here(id, &registry);
        assert!(!w.wait(Duration::ZERO).await);
        hand_here(id, "c", b"grant:7:5000");
        assert!(
            w.wait(Duration::from_secs(5)).await,
            "the hand-over woke nobody"
        );
        assert_eq!(w.take_handed().as_deref(), Some(&b"grant:7:5000"[..]));
        w.consumed();
        hand_here(id, "c", b"grant:7:5000");
        assert!(
            !w.wait(Duration::ZERO).await,
            "the second copy woke the waiter"
        );
        hand_here(uuid::Uuid::new_v4(), "c", b"grant:8:5000");
        hand_here(id, "other", b"grant:8:5000");
        assert!(!w.wait(Duration::ZERO).await);
        drop(listing);
        assert!(here().get(&id).is_none(), "the listing outlived its drop");
        hand_here(id, "c", b"grant:9:5000");
        assert!(
            !w.wait(Duration::ZERO).await,
            "an unlisted client was handed a message"
        );
    }
}

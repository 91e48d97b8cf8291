//! The one-hop handoff: a release hands what it frees straight to a waiter.
//!
//! # Messages handed over in this process
//!
//! A release whose reply names the waiter it granted, whose client lives
//! in this same process, hands the grant message over at once with
//! [`hand_here`], without waiting for Redis to carry it: each client's
//! subscription registry is listed process-wide by client id
//! ([`serve_here`], at the client's build; the [`Listing`] it returns
//! takes it off the list when dropped). The message is delivered as if it
//! had come from Redis (`pubsub::WeakPubSub::deliver`), so the channel's
//! policy applies. The waiter then gets the same message twice (the
//! hand-over, and Redis's copy, in either order); a grant is unique (it
//! carries a nonce) and handed with the wake-up (`Wake::OneWith`), and a
//! channel drops a `OneWith` message equal to the last one it delivered,
//! so the second copy wakes nobody and leaves no permit
//! (`pubsub/queue.rs`, `WakeQueue::handed_last`).

use dashmap::DashMap;

use super::pubsub::{PubSub, WeakPubSub};

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

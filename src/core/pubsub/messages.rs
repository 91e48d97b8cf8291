//! Messages: how a message on a channel becomes wake-ups, whether Redis
//! carried it or this process delivered it.
//!
//! * The messages task ([`run_messages`]) reads fred's message stream and
//!   hands each message to its channel's entry (`Shared::deliver`), which
//!   wakes what the channel's policy (`policy.rs`) says; on a hot channel
//!   an unlock's wake-up may be deferred. A message on a companion channel
//!   is a take announced (`ChannelState::taken`, `channel.rs`).
//! * [`WeakPubSub::deliver`] hands a message to the same path from this
//!   process (the handoff, `handoff.rs`), and keeps nothing alive. A
//!   message handed to one waiter may come both ways: the wake-up queue
//!   drops the second copy (see `pubsub`'s module docs, "Messages
//!   delivered twice").
//! * Whatever may have lost messages wakes every waiter to re-check
//!   (`Shared::wake_all`): a lagging stream (tokio broadcast `Lagged`) at
//!   once; a reconnect of the subscriber connection, or a cluster topology
//!   change seen by the command connection, once every channel is
//!   subscribed again (`Op::Resubscribe`, `commands.rs`).

use fred::types::ClusterStateChange;
use tokio::sync::broadcast::{error::RecvError, Receiver as Broadcast};

use super::commands::Op;
use super::queue::Wake;
use super::registry::Shared;

/// A registry that may be gone: delivers a message as if it had come from
/// Redis while its registry lives, and keeps nothing of it alive.
#[derive(Clone, Debug)]
pub(crate) struct WeakPubSub(pub(super) std::sync::Weak<Shared>);

// === impl WeakPubSub ===

impl WeakPubSub {
    /// Delivers `message` on `channel` as if it had arrived from Redis (its
    /// channel's policy applies; see `pubsub`'s module docs, "Messages
    /// delivered twice"). Does nothing if the registry is gone or not
    /// subscribed to `channel`.
    pub(crate) fn deliver(&self, channel: &str, message: &[u8]) {
        if let Some(shared) = self.0.upgrade() {
            shared.deliver(channel, message);
        }
    }

    /// Whether both are references to one registry.
    pub(crate) fn is(&self, other: &WeakPubSub) -> bool {
        self.0.ptr_eq(&other.0)
    }
}

// === impl Shared ===

impl Shared {
    /// A message on `channel`: wakes what the channel's policy says.
    pub(super) fn deliver(&self, channel: &str, message: &[u8]) {
        let Some(entry) = self.channels.get(channel).map(|e| e.clone()) else {
            if let Some(entry) = self.companions.get(channel).map(|e| e.clone()) {
                entry.state.lock().taken(&entry, message);
            }
            return;
        };
        {
            let wake = (entry.policy)(message);
            let mut state = entry.state.lock();
            match wake {
                // A hot lock: the wake-up may come after a short delay
                // (see `pubsub`'s module docs, "Announced takes").
                Wake::One if state.hot() => {
                    if !state.defer(&entry) {
                        state.wakeups.wake_one();
                    }
                }
                wake => state.wakeups.wake(wake, message),
            }
        }
    }

    /// Wakes every waiter of every channel to re-check (reconnect, lag,
    /// shutdown).
    pub(super) fn wake_all(&self) {
        for entry in self.channels.iter() {
            entry.state.lock().wakeups.wake(Wake::All, b"");
        }
    }
}

// === the messages task ===

/// Routes unlock messages to their channel's waiters; wakes everybody on
/// lag, reconnect or cluster topology change (after re-subscribing).
pub(super) async fn run_messages(
    shared: std::sync::Weak<Shared>,
    mut messages: Broadcast<fred::types::Message>,
    mut reconnects: Broadcast<fred::types::config::Server>,
    mut cluster_changes: Option<Broadcast<Vec<ClusterStateChange>>>,
) {
    loop {
        tokio::select! {
            message = messages.recv() => {
                let Some(shared) = shared.upgrade() else { return };
                match message {
                    Ok(message) => shared.deliver(&message.channel, message.value.as_bytes().unwrap_or_default()),
                    Err(RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "unlock messages lagged: waking every waiter");
                        shared.wake_all();
                    }
                    Err(RecvError::Closed) => return,
                }
            }
            reconnect = reconnects.recv() => {
                let Some(shared) = shared.upgrade() else { return };
                match reconnect {
                    Ok(_) | Err(RecvError::Lagged(_)) => {
                        tracing::debug!("subscriber reconnected: re-subscribing");
                        let _ = shared.ops.send(Op::Resubscribe);
                    }
                    Err(RecvError::Closed) => return,
                }
            }
            change = next_change(&mut cluster_changes) => {
                let Some(shared) = shared.upgrade() else { return };
                match change {
                    Ok(_) | Err(RecvError::Lagged(_)) => {
                        tracing::debug!("cluster topology changed: re-subscribing");
                        let _ = shared.ops.send(Op::Resubscribe);
                    }
                    // The command connection is gone; keep serving messages.
                    Err(RecvError::Closed) => cluster_changes = None,
                }
            }
        }
    }
}

/// The next topology change, or never for a client that is not a cluster.
async fn next_change(
    rx: &mut Option<Broadcast<Vec<ClusterStateChange>>>,
) -> std::result::Result<Vec<ClusterStateChange>, RecvError> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

// Under `cfg(leasehold_loom)` pubsub's tests other than the loom models
// are left out (see `sync.rs`).
#[cfg(all(test, not(leasehold_loom)))]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::core::pubsub::tests::{channel_with_policy, registry_with, wake_or_hand};

    /// A message a policy hands over goes with the wake-up to the oldest
    /// waiter only; a wake-up kept as a permit carries none.
    #[tokio::test]
    async fn a_handed_message_goes_to_the_woken_waiter_only() {
        fn hand(_: &[u8]) -> Wake {
            Wake::OneWith
        }
        let (shared, mut subs) = channel_with_policy(2, hand);
        let w2 = subs.pop().unwrap();
        let w1 = subs.pop().unwrap();
        assert!(!w1.wait(Duration::ZERO).await);
        assert!(!w2.wait(Duration::ZERO).await);
        shared.deliver("c", b"grant");
        assert!(w1.wait(Duration::from_secs(5)).await);
        assert_eq!(w1.take_handed().as_deref(), Some(&b"grant"[..]));
        assert_eq!(w2.take_handed(), None);
        w1.consumed();
        // Nobody queued: a permit, without the message. (A new message:
        // a second copy of the last one would be dropped.)
        drop(w2);
        shared.deliver("c", b"grant 2");
        assert!(w1.wait(Duration::ZERO).await);
        assert_eq!(w1.take_handed(), None);
    }

    /// A message delivered by this process and then by Redis (the same
    /// `OneWith` message twice) wakes the waiter once and leaves no permit;
    /// the next, different message wakes again. A registry that is gone
    /// or a channel not subscribed takes nothing.
    #[tokio::test]
    async fn a_message_delivered_twice_wakes_once() {
        let (registry, mut subs) = registry_with(1, wake_or_hand);
        let w = subs.pop().unwrap();
        let shared = registry.shared.clone();
        let here = registry.downgrade();
        assert!(!w.wait(Duration::ZERO).await);
        here.deliver("c", b"grant:7:5000");
        assert!(
            w.wait(Duration::from_secs(5)).await,
            "the delivery woke nobody"
        );
        assert_eq!(w.take_handed().as_deref(), Some(&b"grant:7:5000"[..]));
        w.consumed();
        // Redis's copy: dropped, no permit left for the next wait.
        shared.deliver("c", b"grant:7:5000");
        assert!(
            !w.wait(Duration::ZERO).await,
            "the second copy woke the waiter"
        );
        here.deliver("other", b"grant:8:5000");
        assert!(!w.wait(Duration::ZERO).await);
        // A new message wakes again, from either path.
        shared.deliver("c", b"grant:9:5000");
        assert!(w.wait(Duration::from_secs(5)).await);
        w.consumed();
        drop((w, registry, shared));
        // Gone: nothing to deliver to.
        here.deliver("c", b"grant:10:5000");
    }
}

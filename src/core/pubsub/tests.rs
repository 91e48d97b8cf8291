//! Fixtures for pubsub's unit tests (each file keeps its own tests) and
//! for other modules' (`handoff.rs`): a registry with one channel, `c`, on
//! a subscriber client that never connects, so only the local queue is
//! exercised. Built only for tests, and not under `cfg(leasehold_loom)`
//! (see `sync.rs`).

use std::sync::Arc;

use tokio::sync::mpsc;

use super::channel::Channel;
use super::policy::{wake_one, Policy};
use super::queue::{Waiter, Wake};
use super::registry::{PubSub, Shared};
use super::subscription::Subscription;
use crate::core::FastMap;

/// A registry with one channel, `c`, and `n` subscriptions of it, on
/// a subscriber client that never connects (for other modules' tests).
pub(crate) fn registry_with(n: usize, policy: Policy) -> (PubSub, Vec<Subscription>) {
    let (shared, subs) = channel_with_policy(n, policy);
    (PubSub { shared }, subs)
}

/// `grant:…` wakes one waiter handing it the message, anything else one.
pub(crate) fn wake_or_hand(message: &[u8]) -> Wake {
    if message.starts_with(b"grant:") {
        Wake::OneWith
    } else {
        Wake::One
    }
}

/// A channel entry with `n` subscriptions, on a subscriber client that
/// never connects (only the local queue is exercised).
pub(super) fn channel_with(n: usize) -> (Arc<Shared>, Vec<Subscription>) {
    channel_with_policy(n, wake_one)
}

pub(super) fn channel_with_policy(n: usize, policy: Policy) -> (Arc<Shared>, Vec<Subscription>) {
    channel_with_companion_of(n, policy, None)
}

/// `n` subscriptions of channel `c`, with takes announced on
/// `companion` if given.
pub(super) fn channel_with_companion_of(
    n: usize,
    policy: Policy,
    companion: Option<&str>,
) -> (Arc<Shared>, Vec<Subscription>) {
    let subscriber = fred::types::Builder::default_centralized()
        .build_subscriber_client()
        .unwrap();
    let (ops, _) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        subscriber,
        sharded: false,
        channels: FastMap::default(),
        companions: FastMap::default(),
        ops,
    });
    let name: Arc<str> = "c".into();
    let companion = companion.map(Arc::<str>::from);
    let channel = Arc::new(Channel::new(name.clone(), policy, companion.clone()));
    shared.channels.insert(name, channel.clone());
    if let Some(companion) = companion {
        shared.companions.insert(companion, channel.clone());
    }
    let subs = (0..n)
        .map(|_| {
            // As `subscribe` does: counted and queued at the back.
            let waiter = Waiter::new();
            channel.state.lock().wakeups.join(&waiter);
            Subscription {
                shared: shared.clone(),
                channel: channel.clone(),
                waiter,
            }
        })
        .collect();
    (shared, subs)
}

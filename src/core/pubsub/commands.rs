//! The commands task: SUBSCRIBE and UNSUBSCRIBE for the registry's
//! channels, in the order the registry queued them.
//!
//! # Order
//!
//! Every subscription command goes through one unbounded queue ([`Op`])
//! to one task ([`run_ops`]), which runs them one after the other: an
//! UNSUBSCRIBE of a channel's old entry, queued before the SUBSCRIBE of
//! its new one (`registry.rs`), is sent first. Consecutive commands of
//! one kind, taken from the queue together (up to [`OPS_BATCH`]), are
//! sent as one; a channel's companion goes with it.
//!
//! # Confirmation
//!
//! fred resolves `SUBSCRIBE` when the frame is written, not when Redis has
//! processed it, so after each batch the task sends a `PING` on the same
//! connection and waits for its reply ([`subscribe_confirmed`]); only then
//! is the entry marked subscribed (`Ready`), which completes
//! `PubSub::subscribe`. Sharded `SSUBSCRIBE`s (one per hash slot) are
//! resolved by fred with the server's reply.
//!
//! # Reconnects
//!
//! On [`Op::Resubscribe`] (queued by the messages task after a reconnect
//! or a cluster topology change) the task subscribes to every channel
//! again, then wakes every waiter to re-check: messages published while
//! the connection was down are lost.

use std::sync::Arc;

use fred::clients::SubscriberClient;
use fred::interfaces::{ClientLike, PubsubInterface};
use fred::types::config::Options;
use fred::types::{ClusterHash, Value};
use tokio::sync::mpsc;

use super::channel::{Channel, Ready};
use super::registry::Shared;

/// A subscription command for [`run_ops`], queued by the registry, by a
/// `Subscription` (`refresh`) or by the messages task (`Resubscribe`).
#[derive(Debug)]
pub(super) enum Op {
    Subscribe(Arc<Channel>),
    /// Subscribe again to a sharded channel that may have moved.
    Refresh(Arc<str>),
    Unsubscribe(Arc<str>),
    /// The connection came back: subscribe to everything again, then wake
    /// every waiter.
    Resubscribe,
}

/// Most channels sent in one SUBSCRIBE / UNSUBSCRIBE.
const OPS_BATCH: usize = 1024;

/// Runs subscription commands in order, batching runs of the same kind.
pub(super) async fn run_ops(
    shared: std::sync::Weak<Shared>,
    subscriber: SubscriberClient,
    sharded: bool,
    mut rx: mpsc::UnboundedReceiver<Op>,
) {
    let mut batch = Vec::with_capacity(OPS_BATCH);
    while rx.recv_many(&mut batch, OPS_BATCH).await > 0 {
        let mut ops = batch.drain(..).peekable();
        while let Some(op) = ops.next() {
            match op {
                Op::Subscribe(first) => {
                    let mut entries = vec![first];
                    while let Some(Op::Subscribe(_)) = ops.peek() {
                        if let Some(Op::Subscribe(next)) = ops.next() {
                            entries.push(next);
                        }
                    }
                    let names: Vec<Arc<str>> = entries
                        .iter()
                        .flat_map(|e| std::iter::once(e.name.clone()).chain(e.companion.clone()))
                        .collect();
                    let outcome = subscribe_confirmed(&subscriber, sharded, names).await;
                    for entry in entries {
                        entry.ready.send_replace(match &outcome {
                            Ok(()) => Ready::Subscribed,
                            Err(e) => Ready::Failed(e.clone()),
                        });
                    }
                }
                Op::Refresh(first) => {
                    let mut names = vec![first];
                    while let Some(Op::Refresh(_)) = ops.peek() {
                        if let Some(Op::Refresh(next)) = ops.next() {
                            names.push(next);
                        }
                    }
                    if let Err(e) = subscribe_confirmed(&subscriber, sharded, names).await {
                        tracing::debug!(error = %e, "refreshing sharded subscriptions failed");
                    }
                }
                Op::Unsubscribe(first) => {
                    let mut names = vec![first];
                    while let Some(Op::Unsubscribe(_)) = ops.peek() {
                        if let Some(Op::Unsubscribe(next)) = ops.next() {
                            names.push(next);
                        }
                    }
                    if let Err(e) = unsubscribe(&subscriber, sharded, names).await {
                        tracing::debug!(error = %e, "UNSUBSCRIBE failed");
                    }
                }
                Op::Resubscribe => {
                    let Some(shared) = shared.upgrade() else {
                        return;
                    };
                    let names: Vec<Arc<str>> = shared
                        .channels
                        .iter()
                        .map(|e| e.key().clone())
                        .chain(shared.companions.iter().map(|e| e.key().clone()))
                        .collect();
                    for chunk in names.chunks(OPS_BATCH) {
                        if let Err(e) =
                            subscribe_confirmed(&subscriber, sharded, chunk.to_vec()).await
                        {
                            tracing::warn!(error = %e, "re-subscribing after a reconnect failed");
                        }
                    }
                    shared.wake_all();
                }
            }
        }
    }
}

/// Subscribes to `names` and returns once Redis has processed it.
///
/// Plain: SUBSCRIBE resolves when written, so a PING follows on the same
/// connection (on a cluster, to the node fred sends this client's
/// SUBSCRIBEs to): its reply proves the SUBSCRIBE was processed. Sharded:
/// one SSUBSCRIBE per hash slot, each routed to the slot's node, and fred
/// resolves it with the server's reply.
///
/// A `NOSUB` error is not this subscribe's: Valkey 8.0.0–8.0.1 answer an
/// `UNSUBSCRIBE` sent outside subscribed mode with an error (valkey#1265,
/// reverted in 8.0.2), which fred hands to the next command on the
/// connection. Cleaning up the connection must never fail an acquire, so
/// the subscribe is sent again (at most twice).
async fn subscribe_confirmed(
    subscriber: &SubscriberClient,
    sharded: bool,
    names: Vec<Arc<str>>,
) -> std::result::Result<(), fred::error::Error> {
    let mut left = 2;
    loop {
        match subscribe_once(subscriber, sharded, names.clone()).await {
            Err(e) if left > 0 && is_stray_unsubscribe_error(&e) => {
                tracing::debug!(error = %e, "a stray UNSUBSCRIBE error: subscribing again");
                left -= 1;
            }
            other => return other,
        }
    }
}

/// An error reply meant for an `UNSUBSCRIBE` / `SUNSUBSCRIBE` sent outside
/// subscribed mode (Valkey 8.0.0–8.0.1).
fn is_stray_unsubscribe_error(e: &fred::error::Error) -> bool {
    let details = e.details();
    details.starts_with("NOSUB") || details.contains("not in subscribed mode")
}

async fn subscribe_once(
    subscriber: &SubscriberClient,
    sharded: bool,
    names: Vec<Arc<str>>,
) -> std::result::Result<(), fred::error::Error> {
    if names.is_empty() {
        return Ok(());
    }
    if sharded {
        for (_, group) in by_slot(names) {
            subscriber.ssubscribe(strs(group)).await?;
        }
        return Ok(());
    }
    subscriber.subscribe(strs(names)).await?;
    if subscriber.is_clustered() {
        let slot = fred::util::redis_keyslot(subscriber.id().as_bytes());
        let same_node = Options {
            cluster_hash: Some(ClusterHash::Custom(slot)),
            ..Options::default()
        };
        subscriber
            .with_options(&same_node)
            .ping::<Value>(None)
            .await?;
    } else {
        subscriber.ping::<Value>(None).await?;
    }
    Ok(())
}

async fn unsubscribe(
    subscriber: &SubscriberClient,
    sharded: bool,
    names: Vec<Arc<str>>,
) -> std::result::Result<(), fred::error::Error> {
    if sharded {
        for (_, group) in by_slot(names) {
            subscriber.sunsubscribe(strs(group)).await?;
        }
        Ok(())
    } else {
        subscriber.unsubscribe(strs(names)).await
    }
}

fn strs(names: Vec<Arc<str>>) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// Channels grouped by hash slot (a sharded command takes one slot).
fn by_slot(names: Vec<Arc<str>>) -> std::collections::BTreeMap<u16, Vec<Arc<str>>> {
    let mut groups: std::collections::BTreeMap<u16, Vec<Arc<str>>> = Default::default();
    for name in names {
        groups
            .entry(fred::util::redis_keyslot(name.as_bytes()))
            .or_default()
            .push(name);
    }
    groups
}

//! Channels and wake-ups: one subscription per channel per client, however
//! many tasks wait.
//!
//! # What it uses
//!
//! One fred `SubscriberClient` carries every channel this client waits on
//! (unlock channels, semaphore and latch channels): one connection, or on
//! a cluster with sharded pub/sub (SSUBSCRIBE, Redis 7+) one per node
//! owning a channel's slot. Nothing here sends commands on the command
//! connection.
//!
//! # Wake policies
//!
//! What a message means is the channel's [`Policy`], set by the primitive
//! that subscribes, decided from the message's text: wake **one** waiter
//! for every message ([`wake_one`]: an unlock), **all** of them on `1` and
//! one otherwise ([`wake_all_on_one`]: a write unlock lets every reader
//! in), or up to **N** for a message carrying a count ([`wake_count`]:
//! permits given back). A reconnect or a lagging stream wakes everyone.
//! A policy may also wake one waiter *handing it the message*
//! ([`Wake::OneWith`]): a message addressed to one waiter that carries
//! what it waited for; the wait loop gives it to the waiter's next
//! attempt ([`Subscription::take_handed`]). A handed message is never kept
//! as a permit nor passed on: a waiter that cannot use it re-checks as
//! for any wake-up.
//!
//! # Messages delivered twice
//!
//! A message may reach a channel twice: once delivered by this process
//! itself ([`WeakPubSub::deliver`], as the handoff does, `handoff.rs`) and
//! once carried by Redis, in either order. Messages handed to one waiter
//! (`OneWith`) are unique (they carry a request id), so a channel drops a
//! `OneWith` message equal to the last one it delivered: the second copy
//! wakes nobody and leaves no permit (`WakeQueue::handed_last`).
//!
//! # How waiting works
//!
//! A waiting task holds a [`Subscription`]: a counted reference to the
//! channel's [`Channel`](channel::Channel) entry plus its own
//! [`Waiter`](queue::Waiter) slot. The first
//! reference to a channel sends `SUBSCRIBE`; the last one to leave sends
//! `UNSUBSCRIBE`. Both go through one ordered queue and one task, so an
//! `UNSUBSCRIBE` of a channel's old entry can never overtake the
//! `SUBSCRIBE` of its new one. fred resolves `SUBSCRIBE` when the frame is
//! written, not when Redis has processed it, so after each batch of
//! `SUBSCRIBE`s the task sends a `PING` on the same connection and waits
//! for its reply: when it arrives, Redis has processed the subscription,
//! and only then is [`PubSub::subscribe`] complete.
//!
//! Wake-ups go to the oldest queued waiters first (FIFO). A woken waiter
//! *holds* its wake-up until it has made its attempt and calls
//! [`Subscription::consumed`]; if it is dropped before that (cancelled
//! mid-attempt), the wake-up passes to the next waiter. A waiter that lost
//! the race goes back to the *front* of the queue. When no waiter is queued
//! (all are between a wake-up and their next wait), a wake-up is kept as a
//! permit that the next [`Subscription::wait`] takes at once, so no message
//! is lost between a failed attempt and the next wait. That queue is
//! `queue.rs` ([`WakeQueue`](queue::WakeQueue)): its invariants are
//! written there, and
//! checked there by loom models.
//!
//! # Announced takes
//!
//! A lock's channel may have a companion channel on which leasehold
//! acquires announce that they took the lock (see `takes.rs`): it is
//! subscribed and unsubscribed with the channel, and a take announced
//! there voids the channel's deferred and kept wake-ups and bounds its
//! waiters' re-checks by the new holder's lease. On a channel where takes
//! were announced in the last second by many clients, most clients defer
//! an unlock's wake-up a moment, so that a client that tries at once can
//! announce its take before the others try.
//!
//! # Drop, cancel and reconnect
//!
//! * Dropping a `Subscription` removes its waiter from the queue; if it
//!   holds a wake-up it did not consume, the wake-up passes to the next
//!   waiter. The last reference unsubscribes.
//! * On a reconnect of the subscriber connection, messages published while
//!   it was down are lost: every channel is subscribed again and then every
//!   local waiter is woken to re-check at once. The same happens when the
//!   command connection sees a cluster topology change (a slot moved, a
//!   failover): Redis drops sharded subscriptions of a slot that moves,
//!   and re-subscribing follows the slot to its new owner. A lagging message stream
//!   (tokio broadcast `Lagged`) also wakes every waiter.
//! * The caller bounds every wait by the lock's remaining TTL, so even a
//!   lost message cannot strand a waiter past the lease. The bound is kept
//!   by one clock per channel (a task that runs while a re-check is due),
//!   not by a timer in each parked waiter: it re-checks every queued
//!   waiter at the earliest bound any of them asked for.

use std::sync::Arc;

use fred::clients::SubscriberClient;
use fred::interfaces::{ClientLike, EventInterface};
use fred::types::ClusterStateChange;
use tokio::sync::broadcast::Receiver as Broadcast;
use tokio::sync::mpsc;

use super::FastMap;
use crate::error::{Error, Result};
use channel::{Channel, Ready};
use commands::{run_ops, Op};
use messages::run_messages;
use queue::Waiter;

pub(crate) use messages::WeakPubSub;
pub(crate) use policy::{wake_all_on_one, wake_count, wake_one, Policy};
pub(crate) use queue::Wake;
pub(crate) use subscription::{Lingering, Pin, Subscription};

mod channel;
mod commands;
mod messages;
mod policy;
mod queue;
mod subscription;
mod sync;

/// The subscription registry of one client.
#[derive(Clone, Debug)]
pub(crate) struct PubSub {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    subscriber: SubscriberClient,
    /// Channels are sharded (SSUBSCRIBE); see `Subscription::refresh`.
    sharded: bool,
    /// Live channel entries. An entry is inserted by the first subscriber
    /// and removed by the last one to leave, under the map's shard lock,
    /// which is also where its SUBSCRIBE / UNSUBSCRIBE is queued.
    channels: FastMap<Arc<str>, Arc<Channel>>,
    /// The entries of `channels` that have a companion channel, by the
    /// companion's name: inserted and removed with the entry (under the
    /// `channels` shard lock, taken first).
    companions: FastMap<Arc<str>, Arc<Channel>>,
    /// Ordered subscription commands for the `run_ops` task.
    ops: mpsc::UnboundedSender<Op>,
}

// === impl PubSub ===

impl PubSub {
    /// Starts the registry's two tasks on the current runtime: the ordered
    /// subscription queue and the message loop. Both end when the
    /// subscriber connection is closed (`quit`).
    /// `cluster_changes`: topology changes seen by the command connection
    /// (a cluster client re-syncs its slot map after MOVED, failovers,
    /// resharding); each one re-subscribes every channel, which moves
    /// sharded subscriptions to the slot's new owner, and wakes every
    /// waiter.
    pub(crate) fn start(
        subscriber: SubscriberClient,
        sharded: bool,
        cluster_changes: Option<Broadcast<Vec<ClusterStateChange>>>,
    ) -> PubSub {
        let (ops, ops_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            subscriber,
            sharded,
            channels: FastMap::default(),
            companions: FastMap::default(),
            ops,
        });
        let messages = shared.subscriber.message_rx();
        let reconnects = shared.subscriber.reconnect_rx();
        tokio::spawn(run_ops(
            Arc::downgrade(&shared),
            shared.subscriber.clone(),
            sharded,
            ops_rx,
        ));
        tokio::spawn(run_messages(
            Arc::downgrade(&shared),
            messages,
            reconnects,
            cluster_changes,
        ));
        PubSub { shared }
    }

    /// Joins `channel`'s waiters, subscribing if this is the first one, and
    /// returns once Redis has confirmed the subscription. If this makes
    /// the channel's entry, its `companion` (on which takes are announced,
    /// see the module docs) is subscribed with it.
    ///
    /// The waiter is queued from this moment, so an unlock published right
    /// after the subscription is confirmed is not missed.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the `Subscription` it was building, which
    /// releases its reference (and unsubscribes if it was the last).
    pub(crate) async fn subscribe(
        &self,
        channel: &str,
        policy: Policy,
        companion: Option<&str>,
    ) -> Result<Subscription> {
        let waiter = Waiter::new();
        let entry = self.join(channel, policy, Some(&waiter), companion).await;
        let sub = Subscription {
            shared: self.shared.clone(),
            channel: entry,
            waiter,
        };
        let mut ready = sub.channel.ready.subscribe();
        let outcome = ready
            .wait_for(|r| !matches!(r, Ready::Pending))
            .await
            .map(|r| r.clone());
        match outcome {
            Ok(Ready::Failed(e)) => Err(Error::Redis(e)),
            Ok(Ready::Subscribed) => Ok(sub),
            Ok(_) | Err(_) => Err(Error::Shutdown),
        }
    }

    /// Takes a reference to `channel`'s entry (subscribing if this is the
    /// first), with `waiter` queued at the back if given.
    async fn join(
        &self,
        channel: &str,
        policy: Policy,
        waiter: Option<&Waiter>,
        companion: Option<&str>,
    ) -> Arc<Channel> {
        loop {
            // The name is copied only for a new entry: most joins find one.
            let found = self.shared.channels.get(channel).map(|e| e.clone());
            let entry = match found {
                Some(entry) => entry,
                None => {
                    let name: Arc<str> = Arc::from(channel);
                    self.shared
                        .channels
                        .entry(name.clone())
                        .or_insert_with(|| {
                            let companion = companion.map(Arc::<str>::from);
                            let entry = Arc::new(Channel::new(name, policy, companion.clone()));
                            if let Some(companion) = companion {
                                self.shared.companions.insert(companion, entry.clone());
                            }
                            if self.shared.ops.send(Op::Subscribe(entry.clone())).is_err() {
                                // The queue's task is gone (runtime shut down).
                                entry.ready.send_replace(Ready::Closed);
                            }
                            entry
                        })
                        .clone()
                }
            };
            let joined = {
                let mut state = entry.state.lock();
                if !state.closed {
                    match waiter {
                        Some(waiter) => state.wakeups.join(waiter),
                        None => state.pins += 1,
                    }
                }
                !state.closed
            };
            if joined {
                return entry;
            }
            // The last reference is removing it right now; a fresh entry
            // will be made once it is gone.
            tokio::task::yield_now().await;
        }
    }

    /// Keeps `channel` subscribed while the returned [`Pin`] lives,
    /// without a waiter (so it takes no wake-up): subscribes now if this is
    /// the first reference, without waiting for Redis to confirm. A
    /// primitive whose owner waits on the same channel again and again
    /// keeps it open between waits, so each wait starts subscribed (see
    /// [`join_subscribed`](Self::join_subscribed)).
    ///
    /// Cancel safe: nothing is held until it returns.
    pub(crate) async fn pin(&self, channel: &str, policy: Policy) -> Pin {
        let entry = self.join(channel, policy, None, None).await;
        Pin {
            shared: self.shared.clone(),
            channel: entry,
        }
    }

    /// Joins `channel`'s waiters only if Redis has confirmed the channel's
    /// subscription already (no command is sent): a waiter that joins this
    /// way before its first try cannot miss a message published after
    /// that try, so it needs no second try after subscribing.
    pub(crate) fn join_subscribed(&self, channel: &str) -> Option<Subscription> {
        let entry = self.shared.channels.get(channel)?.clone();
        if !matches!(*entry.ready.borrow(), Ready::Subscribed) {
            return None;
        }
        let waiter = Waiter::new();
        {
            let mut state = entry.state.lock();
            if state.closed {
                return None;
            }
            state.wakeups.join(&waiter);
        }
        Some(Subscription {
            shared: self.shared.clone(),
            channel: entry,
            waiter,
        })
    }

    /// A reference to this registry that does not keep it alive (see
    /// [`WeakPubSub`]).
    pub(crate) fn downgrade(&self) -> WeakPubSub {
        WeakPubSub(Arc::downgrade(&self.shared))
    }

    /// Wakes every waiter of every channel (reconnect, lag, shutdown).
    pub(crate) fn wake_all(&self) {
        self.shared.wake_all();
    }

    /// Number of channels this client is subscribed to (or subscribing).
    pub(crate) fn channel_count(&self) -> usize {
        self.shared.channels.len()
    }

    /// Closes the subscriber connection; the registry's tasks then end.
    pub(crate) async fn quit(&self) {
        let _ = self.shared.subscriber.quit().await;
    }
}

impl Shared {
    /// One reference to `channel` (`pin`: a [`Pin`]; else a
    /// `Subscription`, which has left the channel's queue) is gone; the
    /// last one unsubscribes.
    fn release(&self, channel: &Arc<Channel>, pin: bool) {
        let mut state = channel.state.lock();
        if pin {
            state.pins -= 1;
        }
        if state.refs() > 0 {
            return;
        }
        state.closed = true;
        if let Some(takes) = &mut state.takes {
            takes.clear();
        }
        // Nothing left to re-check: the clock ends now, not at its time.
        if state.recheck_at.take().is_some() {
            channel.clock.notify_one();
        }
        drop(state);
        let name = &channel.name;
        let ops = &self.ops;
        let companions = &self.companions;
        self.channels.remove_if(name, |_, entry| {
            let ours = Arc::ptr_eq(entry, channel);
            if ours {
                // Queued under the shard lock, so it precedes any SUBSCRIBE
                // of a newer entry for this channel.
                let _ = ops.send(Op::Unsubscribe(name.clone()));
                if let Some(companion) = &channel.companion {
                    companions.remove_if(companion, |_, entry| Arc::ptr_eq(entry, channel));
                    let _ = ops.send(Op::Unsubscribe(companion.clone()));
                }
            }
            ours
        });
    }
}

// Under `cfg(leasehold_loom)` the queue's synchronisation works only inside a loom
// model (see `sync.rs`).
#[cfg(all(test, not(leasehold_loom)))]
pub(crate) mod tests {
    use std::time::Duration;

    use super::*;

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

    pub(super) fn channel_with_policy(
        n: usize,
        policy: Policy,
    ) -> (Arc<Shared>, Vec<Subscription>) {
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

    /// A pin keeps the channel's entry (and subscription) without a
    /// waiter: it takes no wake-up, and the entry goes with the last
    /// reference, pin or waiter.
    #[tokio::test]
    async fn a_pin_keeps_the_channel_and_takes_no_wake_up() {
        let (shared, mut subs) = channel_with(1);
        let w = subs.pop().unwrap();
        let channel = shared.channels.get("c").unwrap().clone();
        channel.state.lock().pins += 1;
        let pin = Pin {
            shared: shared.clone(),
            channel: channel.clone(),
        };
        assert!(!w.wait(Duration::ZERO).await);
        shared.deliver("c", b"0");
        assert!(
            w.wait(Duration::from_secs(5)).await,
            "the pin took the wake-up"
        );
        w.consumed();
        drop(w);
        assert!(
            shared.channels.contains_key("c"),
            "the pin did not keep the channel"
        );
        drop(pin);
        assert!(!shared.channels.contains_key("c"));
    }

    /// The same on a hot channel, where the message's wake-up is
    /// deferred: a waiter that joins before it is due does not get it.
    #[tokio::test(start_paused = true)]
    async fn a_deferred_message_to_a_pinned_channel_wakes_no_later_waiter() {
        let (shared, mut subs) = channel_with_companion_of(1, wake_one, Some("t"));
        let w = subs.pop().unwrap();
        let registry = PubSub {
            shared: shared.clone(),
        };
        w.linger(Duration::from_secs(60));
        for c in 0..64 {
            shared.deliver("t", format!("30000 client{c}:1").as_bytes());
        }
        for _ in 0..16 {
            shared.deliver("c", b"0");
        }
        let channel = shared.channels.get("c").unwrap().clone();
        channel.ready.send_replace(Ready::Subscribed);
        let joined = registry
            .join_subscribed("c")
            .expect("the pin kept the channel");
        assert!(
            !joined.wait(crate::core::takes::MAX_DELAY * 2).await,
            "a message from before the waiter joined woke it"
        );
    }

    /// A message that comes while only a pin holds the channel (no
    /// waiter: e.g. the unlock a lingering owner's own release announced)
    /// is no news to a waiter that joins later, whose first try comes
    /// after it joined: it keeps no permit, so that waiter's first wait
    /// parks instead of trying again at once.
    #[tokio::test]
    async fn a_message_to_a_pinned_channel_keeps_no_permit() {
        let (shared, mut subs) = channel_with(1);
        let w = subs.pop().unwrap();
        let registry = PubSub {
            shared: shared.clone(),
        };
        w.linger(Duration::from_secs(60));
        shared.deliver("c", b"0");
        let channel = shared.channels.get("c").unwrap().clone();
        channel.ready.send_replace(Ready::Subscribed);
        let joined = registry
            .join_subscribed("c")
            .expect("the pin kept the channel");
        assert!(
            !joined.wait(Duration::ZERO).await,
            "a message from before the waiter joined woke it"
        );
        // A message after it joined still wakes it.
        shared.deliver("c", b"0");
        assert!(joined.wait(Duration::from_secs(5)).await);
    }
}

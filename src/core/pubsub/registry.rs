//! The subscription registry of one client ([`PubSub`]): its map of
//! channel entries, and how a reference joins an entry and leaves it.
//!
//! # Joining and leaving
//!
//! * The first reference to a channel inserts its entry into `channels`
//!   (`join`), and the last one to leave removes it (`release`), each
//!   under the map's shard lock for the channel's name. That is also where
//!   the entry's SUBSCRIBE and UNSUBSCRIBE are queued for the commands task
//!   (`commands.rs`), which runs them in order: the UNSUBSCRIBE of a
//!   channel's old entry is queued before the SUBSCRIBE of its new one.
//! * A `join` that finds an entry `closed` (its last reference is
//!   removing it) yields and tries again, so it joins the next entry.
//! * An entry with a companion channel is listed in `companions` under the
//!   companion's name for as long as it is in `channels`, so that a take
//!   announced there reaches it (`messages.rs`).
//! * [`PubSub::subscribe`] returns once Redis has confirmed the entry's
//!   subscription; [`PubSub::pin`] subscribes without waiting for that,
//!   and [`PubSub::join_subscribed`] joins only an entry already confirmed.
//!
//! [`PubSub::start`] spawns the registry's two tasks: the commands task
//! (`commands.rs`) and the messages task (`messages.rs`).

use std::sync::Arc;

use fred::clients::SubscriberClient;
use fred::interfaces::{ClientLike, EventInterface};
use fred::types::ClusterStateChange;
use tokio::sync::broadcast::Receiver as Broadcast;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::channel::{Channel, Ready};
use super::commands::{run_ops, Op};
use super::messages::{run_messages, WeakPubSub};
use super::policy::Policy;
use super::queue::Waiter;
use super::subscription::{Pin, Subscription};
use crate::core::FastMap;
use crate::error::{Error, Result};

/// The subscription registry of one client.
#[derive(Clone, Debug)]
pub(crate) struct PubSub {
    pub(super) shared: Arc<Shared>,
}

/// What the registry's handles and tasks share.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) subscriber: SubscriberClient,
    /// Channels are sharded (SSUBSCRIBE); see `Subscription::refresh`.
    pub(super) sharded: bool,
    /// Live channel entries. An entry is inserted by the first subscriber
    /// and removed by the last one to leave, under the map's shard lock,
    /// which is also where its SUBSCRIBE / UNSUBSCRIBE is queued.
    pub(super) channels: FastMap<Arc<str>, Arc<Channel>>,
    /// The entries of `channels` that have a companion channel, by the
    /// companion's name: inserted and removed with the entry (under the
    /// `channels` shard lock, taken first).
    pub(super) companions: FastMap<Arc<str>, Arc<Channel>>,
    /// Ordered subscription commands for the `run_ops` task.
    pub(super) ops: mpsc::UnboundedSender<Op>,
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
    /// see `pubsub`'s module docs) is subscribed with it.
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

    /// Asks `channel`'s clock (if the channel is open here) to re-check its
    /// oldest parked waiter at `at` at the latest: for a waiter that
    /// another one re-checked for until now (see `Attempts::recheck_bound`).
    /// No command is sent.
    pub(crate) fn recheck_by(&self, channel: &str, at: Instant) {
        let Some(entry) = self.shared.channels.get(channel).map(|e| e.clone()) else {
            return;
        };
        let mut state = entry.state.lock();
        if !state.closed {
            state.recheck_by(&entry, at);
        }
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

// === impl Shared ===

impl Shared {
    /// One reference to `channel` (`pin`: a [`Pin`]; else a
    /// `Subscription`, which has left the channel's queue) is gone; the
    /// last one unsubscribes.
    pub(super) fn release(&self, channel: &Arc<Channel>, pin: bool) {
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

// Under `cfg(leasehold_loom)` pubsub's tests other than the loom models
// are left out (see `sync.rs`).
#[cfg(all(test, not(leasehold_loom)))]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::core::pubsub::policy::wake_one;
    use crate::core::pubsub::tests::{channel_with, channel_with_companion_of};

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

    /// Channel "c" confirmed by Redis, joined through `registry` as a
    /// waiter that arrives after the pin.
    fn join_confirmed(shared: &Arc<Shared>, registry: &PubSub) -> Subscription {
        let channel = shared.channels.get("c").unwrap().clone();
        channel.ready.send_replace(Ready::Subscribed);
        registry
            .join_subscribed("c")
            .expect("the pin kept the channel")
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
        let joined = join_confirmed(&shared, &registry);
        assert!(
            !joined.wait(Duration::ZERO).await,
            "a message from before the waiter joined woke it"
        );
        // A message after it joined still wakes it.
        shared.deliver("c", b"0");
        assert!(joined.wait(Duration::from_secs(5)).await);
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
        let joined = join_confirmed(&shared, &registry);
        assert!(
            !joined.wait(crate::core::takes::MAX_DELAY * 2).await,
            "a message from before the waiter joined woke it"
        );
    }
}

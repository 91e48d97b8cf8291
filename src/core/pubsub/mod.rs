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
//!
//! # Files
//!
//! | file | its one job |
//! | --- | --- |
//! | `registry.rs` | [`PubSub`]: the map of channel entries; a reference joins an entry, the last to leave removes it |
//! | `channel.rs` | a channel's entry and its state; the channel's clock; announced takes applied to its queue |
//! | `subscription.rs` | the handles a waiter holds: [`Subscription`], [`Pin`], [`Lingering`] |
//! | `commands.rs` | the commands task: SUBSCRIBE / UNSUBSCRIBE in order, each confirmed by Redis |
//! | `messages.rs` | the messages task and [`WeakPubSub`]: a message becomes wake-ups; a reconnect or lag wakes everyone |
//! | `policy.rs` | what a message means: [`Policy`] and the policies primitives pick |
//! | `queue.rs` | the wake-up queue of one entry, with its loom models |
//! | `sync.rs` | the queue's synchronisation: the usual types, or loom's |
//! | `tests.rs` | fixtures for the unit tests (built for tests only) |

mod channel;
mod commands;
mod messages;
mod policy;
mod queue;
mod registry;
mod subscription;
mod sync;
// Under `cfg(leasehold_loom)` the queue's synchronisation works only inside
// a loom model (see `sync.rs`).
#[cfg(all(test, not(leasehold_loom)))]
pub(crate) mod tests;

pub(crate) use messages::WeakPubSub;
pub(crate) use policy::{wake_all_on_one, wake_count, wake_one, Policy};
pub(crate) use queue::Wake;
pub(crate) use registry::PubSub;
pub(crate) use subscription::{Lingering, Pin, Subscription};

//! The handles a waiter holds: a [`Subscription`] (a counted reference to
//! a channel's entry plus the waiter's own slot in its wake-up queue), a
//! [`Pin`] (a reference without a waiter, which keeps the channel
//! subscribed) and a [`Lingering`] pin (kept a while after it is dropped).
//!
//! # Waiting
//!
//! [`Subscription::wait`] returns at once if the waiter holds a wake-up or
//! a permit is kept for it; otherwise it parks, queued (at the back when
//! it joined, at the front after a lost race: `queue.rs`), until a
//! wake-up comes or the channel's clock re-checks every queued waiter at
//! the earliest bound any of them asked for (`channel.rs`). A woken
//! waiter holds its wake-up until [`Subscription::consumed`].
//!
//! # Drop and cancel
//!
//! * A cancelled wait loses nothing: a wake-up delivered to it stays with
//!   the subscription, for its next wait.
//! * Dropping a `Subscription` leaves the queue; a wake-up it holds and
//!   did not consume passes to the next waiter (a message handed with it
//!   does not). The last reference of either kind to leave removes the
//!   entry and unsubscribes (`Shared::release`, `registry.rs`).
//! * A dropped [`Lingering`] pin is held by a task for its linger time;
//!   outside a runtime it is let go at once.
//!
//! # Sharded channels
//!
//! Redis drops a moved slot's shard subscriptions without a word to fred:
//! after a wait that ended without a message, [`Subscription::refresh`]
//! subscribes a sharded channel again (at most once per
//! [`REFRESH_EVERY`]).

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use super::channel::Channel;
use super::commands::Op;
use super::queue::Waiter;
use super::registry::Shared;
use crate::core::background::spawn_here;

/// A waiting task's reference to a channel. Dropping it leaves the queue
/// (passing on an unused wake-up) and, for the last reference, unsubscribes.
#[derive(Debug)]
pub(crate) struct Subscription {
    pub(super) shared: Arc<Shared>,
    pub(super) channel: Arc<Channel>,
    pub(super) waiter: Waiter,
}

/// A reference to a channel without a waiter (see
/// [`PubSub::pin`](super::PubSub::pin)): the channel stays subscribed
/// while it lives; the last reference to leave unsubscribes.
#[derive(Debug)]
pub(crate) struct Pin {
    pub(super) shared: Arc<Shared>,
    pub(super) channel: Arc<Channel>,
}

/// A [`Pin`] that keeps its channel subscribed for a while after it is
/// dropped (see [`Pin::lingering`]).
#[derive(Debug)]
pub(crate) struct Lingering {
    pin: Option<Pin>,
    linger_ms: u32,
}

/// A waiter's wait (see [`Subscription::wait`]).
struct Park<'a> {
    sub: &'a Subscription,
    recheck: Option<Duration>,
    parked: bool,
}

/// Shortest time between two refreshes of one sharded channel.
const REFRESH_EVERY: Duration = Duration::from_secs(1);

// === impl Subscription ===

impl Subscription {
    /// Waits for a wake-up (a message, a reconnect) or for about `bound`
    /// to pass, whichever is first. Returns whether it was woken; a woken
    /// waiter holds the wake-up until [`consumed`](Self::consumed).
    ///
    /// The bound is kept by the channel's clock, not by a timer in each
    /// waiter: the clock wakes every queued waiter of the channel at the
    /// earliest re-check any of them asked for. The waiters of one channel
    /// wait on the same thing and ask for about the same bound (the recheck
    /// interval, or the lock's remaining TTL), so one clock per channel
    /// re-checks as often as one timer per waiter did, and a parked waiter
    /// carries no timer. A waiter woken early that way re-checks once more
    /// than it asked for; a wait that must end at its own time (a
    /// deadline) uses [`woken`](Self::woken) under its own timer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. A wake-up delivered to a cancelled wait stays with this
    /// subscription: the next `wait` returns at once, or dropping the
    /// subscription passes it on.
    pub(crate) fn wait(&self, bound: Duration) -> impl Future<Output = bool> + '_ {
        self.park(Some(bound))
    }

    /// Waits for a wake-up only; it may also end (returning `false`) when
    /// the channel's clock re-checks every waiter for another one.
    ///
    /// # Cancel safety
    ///
    /// As for [`wait`](Self::wait).
    pub(crate) fn woken(&self) -> impl Future<Output = bool> + '_ {
        self.park(None)
    }

    /// A wait, as a plain future (an `async fn` would keep `recheck`
    /// twice in every parked waiter).
    fn park(&self, recheck: Option<Duration>) -> Park<'_> {
        Park {
            sub: self,
            recheck,
            parked: false,
        }
    }

    /// The first poll of a wait: returns at once if a wake-up is here
    /// (held, or a permit), else queues the waiter (if it is not) and asks
    /// the clock for the re-check. `None`: parked.
    fn start_wait(&self, recheck: Option<Duration>) -> Option<bool> {
        let mut state = self.channel.state.lock();
        if state.wakeups.begin_wait(&self.waiter) {
            return Some(true);
        }
        if recheck == Some(Duration::ZERO) {
            return Some(false);
        }
        if let Some(bound) = recheck {
            let now = Instant::now();
            let at = match &state.takes {
                Some(takes) => takes.bound(now, now + bound),
                None => now + bound,
            };
            state.recheck_every = bound;
            state.recheck_by(&self.channel, at);
        }
        None
    }

    /// This waiter's wait ended by a re-check of the channel's clock, and
    /// its attempt got what it waited for: the next parked waiter
    /// re-checks now (see `channel.rs`, "The clock").
    pub(crate) fn recheck_next(&self) {
        self.channel.state.lock().recheck_next(&self.channel);
    }

    /// The attempt a wake-up led to has concluded (the lock was taken, by
    /// this waiter or another): the wake-up is used up.
    pub(crate) fn consumed(&self) {
        self.waiter.consumed();
    }

    /// Whether this waiter holds a wake-up now. Read before an attempt: a
    /// wake-up that arrives *during* the attempt (whose script may have run
    /// before the release it announces) is not used up by it, so the next
    /// `wait` returns at once.
    pub(crate) fn holds_wake_up(&self) -> bool {
        self.waiter.holds_wake_up()
    }

    /// A try of this waiter took `rtt` (it sets the delays of a hot
    /// channel's wake-ups, see `pubsub`'s module docs).
    pub(crate) fn observe(&self, rtt: Duration) {
        if let Some(takes) = &mut self.channel.state.lock().takes {
            takes.observe(rtt);
        }
    }

    /// Whether a try of this waiter that takes the lock announces it on
    /// the channel's companion (see `pubsub`'s module docs): if the
    /// channel has one, and either this wait lost a race after a wake-up
    /// (`raced`: other clients try after each unlock) or many clients won
    /// the lock lately. A lock passed between a few clients announces nothing, and
    /// a crowd's channel cools down once the crowd is gone.
    pub(crate) fn announces(&self, raced: bool) -> bool {
        let state = self.channel.state.lock();
        state
            .takes
            .as_ref()
            .is_some_and(|takes| raced || takes.crowded(Instant::now()))
    }

    /// Whether a wait that joined the channel should make its first try
    /// only when woken: on a hot channel (see `pubsub`'s module docs) its
    /// first try is drawn as an unlock's wake-up is, at once or deferred,
    /// so an owner that just released does not barge in ahead of the
    /// waiters whose wake-ups are deferred. A take announced before a deferred
    /// wake-up is due voids it: the lock was taken after this waiter
    /// joined, and its release (or its lease's end) wakes it.
    pub(crate) fn defers_first_try(&self) -> bool {
        let mut state = self.channel.state.lock();
        state.hot() && state.defer(&self.channel)
    }

    /// Takes the message handed over with the wake-up this waiter holds
    /// (see [`Wake::OneWith`](super::Wake::OneWith)), if any. Read with
    /// `holds_wake_up`, before the attempt.
    pub(crate) fn take_handed(&self) -> Option<Box<[u8]>> {
        self.waiter.take_handed()
    }
}

impl Subscription {
    /// Leaves the channel's queue as dropping it does (passing on an
    /// unused wake-up), but keeps the channel subscribed `linger` longer:
    /// a waiter that got what it waited for and will likely wait on the
    /// same channel again soon (a hot lock's owner) then finds it
    /// confirmed (see
    /// [`PubSub::join_subscribed`](super::PubSub::join_subscribed))
    /// instead of subscribing again, and skips the second try after
    /// subscribing.
    pub(crate) fn linger(self, linger: Duration) {
        self.channel.state.lock().pins += 1;
        let pin = Pin {
            shared: self.shared.clone(),
            channel: self.channel.clone(),
        };
        drop(self);
        drop(pin.lingering(linger));
    }

    /// Call after a wait that ended without a message. On a sharded
    /// channel, subscribes again (at most once a second per channel): when
    /// a slot moves to another node, Redis drops its shard subscriptions
    /// without a word to fred, and only a client that itself hits MOVED
    /// learns of it. SSUBSCRIBE is idempotent and follows MOVED to the
    /// slot's new owner.
    pub(crate) fn refresh(&self) {
        if !self.shared.sharded {
            return;
        }
        let mut refreshed = self.channel.refreshed.lock();
        if refreshed.elapsed() < REFRESH_EVERY {
            return;
        }
        *refreshed = std::time::Instant::now();
        let _ = self.shared.ops.send(Op::Refresh(self.channel.name.clone()));
        if let Some(companion) = &self.channel.companion {
            let _ = self.shared.ops.send(Op::Refresh(companion.clone()));
        }
    }
}

impl Pin {
    /// This pin, kept `linger` longer once dropped: the owner of a hold
    /// keeps its channel while it holds and a moment after, so locking
    /// again soon needs no new subscription. Nothing is spawned until the
    /// drop, so taking the hold costs no task.
    pub(crate) fn lingering(self, linger: Duration) -> Lingering {
        Lingering {
            pin: Some(self),
            linger_ms: linger.as_millis().min(u128::from(u32::MAX)) as u32,
        }
    }
}

impl Future for Park<'_> {
    type Output = bool;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<bool> {
        if !self.parked {
            if let Some(woken) = self.sub.start_wait(self.recheck) {
                return Poll::Ready(woken);
            }
            self.parked = true;
        }
        self.sub.waiter.poll_parked(cx)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        // A wake-up this waiter never used is handed on (a message handed
        // to this waiter is not).
        self.channel.state.lock().wakeups.leave(&self.waiter);
        self.shared.release(&self.channel, false);
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        self.shared.release(&self.channel, true);
    }
}

impl Drop for Lingering {
    fn drop(&mut self) {
        let Some(pin) = self.pin.take() else { return };
        // Outside a runtime the task, and the pin in it, is dropped: the
        // channel is let go at once.
        let linger = Duration::from_millis(u64::from(self.linger_ms));
        spawn_here(async move {
            tokio::time::sleep(linger).await;
            drop(pin);
        });
    }
}

// Under `cfg(leasehold_loom)` pubsub's tests other than the loom models
// are left out (see `sync.rs`).
#[cfg(all(test, not(leasehold_loom)))]
mod tests {
    use super::*;
    use crate::core::pubsub::tests::channel_with;

    /// Whether a long wait of `w` returns woken; it must return within 5 s
    /// (a hang fails the test).
    async fn woken_soon(w: &Subscription) -> bool {
        tokio::time::timeout(Duration::from_secs(5), w.wait(Duration::from_secs(60)))
            .await
            .expect("the wait outlived the test bound")
    }

    /// Two waiters of channel `c` that both waited (a zero bound returns
    /// at once; the first is the oldest), and one unlock message: the
    /// first returns from its wait holding the wake-up.
    async fn two_woken_first() -> (Arc<Shared>, Subscription, Subscription) {
        let (shared, mut subs) = channel_with(2);
        let second = subs.pop().unwrap();
        let first = subs.pop().unwrap();
        assert!(!first.wait(Duration::ZERO).await);
        assert!(!second.wait(Duration::ZERO).await);
        shared.deliver("c", b"0");
        assert!(first.wait(Duration::from_secs(5)).await);
        (shared, first, second)
    }

    /// A waiter woken while it was not waiting (between two waits) takes
    /// the wake-up at its next wait; once that attempt concluded, nothing
    /// of the wake-up is left to wake the wait after it for nothing.
    #[tokio::test]
    async fn a_wake_up_taken_between_waits_leaves_nothing_behind() {
        let (shared, mut subs) = channel_with(1);
        let w = subs.pop().unwrap();
        assert!(!w.wait(Duration::ZERO).await);
        shared.deliver("c", b"0");
        assert!(w.wait(Duration::from_secs(5)).await);
        w.consumed();
        assert!(
            !w.wait(Duration::ZERO).await,
            "a used wake-up woke the next wait"
        );
    }

    /// A waiter woken by a message, then dropped during the attempt the
    /// wake-up led to (before it concluded), passes the wake-up to the next
    /// waiter instead of swallowing it.
    #[tokio::test]
    async fn a_waiter_cancelled_during_its_attempt_passes_the_wake_up_on() {
        let (_shared, w1, w2) = two_woken_first().await;
        drop(w1);
        assert!(
            woken_soon(&w2).await,
            "the wake-up was swallowed by the cancelled waiter"
        );
    }

    /// A waiter whose attempt concluded (it lost the race) uses up the
    /// wake-up: dropping it then wakes nobody.
    #[tokio::test]
    async fn a_concluded_attempt_uses_the_wake_up() {
        let (_shared, w1, w2) = two_woken_first().await;
        w1.consumed();
        drop(w1);
        assert!(!w2.wait(Duration::from_millis(50)).await);
    }

    /// A wake-up that arrives while an attempt is under way (the waiter
    /// held none when it began) is not used up by that attempt: the next
    /// wait returns at once. (The attempt's script may have run before the
    /// release the message announces.)
    #[tokio::test]
    async fn a_wake_up_during_an_attempt_is_kept_for_the_next_wait() {
        let (shared, mut subs) = channel_with(1);
        let w = subs.pop().unwrap();
        // A bounded wait ran out; the waiter is still queued.
        assert!(!w.wait(Duration::ZERO).await);
        // As the wait loop does around an attempt:
        let held = w.holds_wake_up();
        shared.deliver("c", b"0"); // arrives mid-attempt
        if held {
            w.consumed();
        }
        assert!(
            woken_soon(&w).await,
            "the wake-up that arrived mid-attempt was lost"
        );
    }

    /// Waiters dropped while queued are skipped by wake-ups (the next live
    /// waiter gets it) and compacted away once they are most of the queue,
    /// so joining and leaving cost O(1) however many wait.
    #[tokio::test]
    async fn dropped_waiters_are_skipped_and_compacted() {
        let (shared, mut subs) = channel_with(1000);
        let last = subs.pop().unwrap();
        let first = subs.remove(0);
        for s in &subs {
            assert!(!s.wait(Duration::ZERO).await);
        }
        drop(subs); // 998 waiters leave
        let channel = shared.channels.get("c").unwrap().clone();
        {
            let state = channel.state.lock();
            assert!(
                state.wakeups.len() < 100,
                "queue not compacted: {} entries",
                state.wakeups.len()
            );
        }
        shared.deliver("c", b"0");
        assert!(
            first.wait(Duration::from_secs(5)).await,
            "first was skipped"
        );
        shared.deliver("c", b"0");
        assert!(last.wait(Duration::from_secs(5)).await, "last was skipped");
        assert_eq!(channel.state.lock().wakeups.permits(), 0);
    }
}

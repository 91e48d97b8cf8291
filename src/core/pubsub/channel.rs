//! A channel's entry: what the registry keeps for one subscribed channel,
//! shared by every `Subscription` and `Pin` of it, and the channel's clock.
//!
//! # State, and who changes it
//!
//! An entry ([`Channel`]) is made by the first reference to its channel and
//! leaves the registry's map with the last one (`registry.rs`). Its name,
//! companion and policy never change. `ready` is written by the commands
//! task (`commands.rs`) once Redis has confirmed (or refused) the
//! SUBSCRIBE. Everything else is its [`ChannelState`], changed only under
//! the entry's lock: the wake-up queue (`queue.rs`), the count of pins,
//! `closed`, the clock's next re-check and the announced takes.
//!
//! # The clock
//!
//! Every wait is bounded, but a parked waiter carries no timer: one task
//! per channel ([`run_clock`]), started when first asked and ending when
//! nothing is due, sleeps until the earliest re-check any queued waiter
//! asked for and then ends the oldest parked waiter's wait (`recheck_by`,
//! [`WakeQueue::recheck_first`]): every waiter of a channel waits for the
//! same thing, so one attempt re-checks for all of them, and the steady
//! cost of a long wait grows with the channels a client waits on, not with
//! its waiters. If others are parked behind it, the clock comes back one
//! bound later (the bound the last wait asked for): the re-checked waiter
//! may not wait again (it got what it waited for, or was dropped). One that
//! got what it waited for passes the re-check on at once
//! ([`ChannelState::recheck_next`]): what freed it may have freed more (a
//! latch, permits). It also gives the wake-ups deferred on a
//! hot channel at their time. A waiter asking for an earlier re-check
//! moves the clock earlier for all of them; the last reference to leave
//! clears what is due, and the clock ends.
//!
//! # Announced takes
//!
//! On a channel with a companion (see `pubsub`'s module docs, "Announced
//! takes"), a take announced there ([`ChannelState::taken`]) voids the
//! deferred and kept wake-ups and bounds the queued waiters' re-check by
//! the new holder's lease; on a hot channel an unlock's wake-up is drawn
//! at once or deferred ([`ChannelState::defer`]). What a take means and
//! how the draw goes is `takes.rs`; this file applies it to the queue.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::policy::Policy;
use super::queue::WakeQueue;
use crate::core::takes::Takes;

/// One subscribed channel's entry in the registry, shared by its
/// `Subscription`s and `Pin`s (see the module docs).
#[derive(Debug)]
pub(super) struct Channel {
    pub(super) name: Arc<str>,
    /// The channel on which takes of the lock are announced, subscribed
    /// with this one (see the module docs, "Announced takes").
    pub(super) companion: Option<Arc<str>>,
    pub(super) policy: Policy,
    /// When the subscription was last renewed by `refresh`.
    pub(super) refreshed: Mutex<std::time::Instant>,
    /// Whether Redis confirmed the SUBSCRIBE. Written by the `run_ops` task.
    pub(super) ready: watch::Sender<Ready>,
    /// Tells the channel's clock task that `recheck_at` moved earlier.
    pub(super) clock: Notify,
    /// Everything else, changed only under this lock.
    pub(super) state: Mutex<ChannelState>,
}

/// An entry's state, changed only under its lock.
#[derive(Debug, Default)]
pub(super) struct ChannelState {
    /// The waiters and kept wake-ups (`queue.rs`); its members are this
    /// entry's live `Subscription`s.
    pub(super) wakeups: WakeQueue,
    /// Live `Pin`s of this entry (they never wait: no members of
    /// `wakeups`, so they keep no permit).
    pub(super) pins: usize,
    /// Set when the last reference (`refs`) left; the entry is leaving the
    /// map.
    pub(super) closed: bool,
    /// The earliest re-check a parked waiter asked for: the channel's clock
    /// wakes every queued waiter then (see
    /// [`Subscription::wait`](super::Subscription::wait)).
    pub(super) recheck_at: Option<Instant>,
    /// The channel's clock task is running (it ends when nothing is due).
    pub(super) clock_running: bool,
    /// The bound the last parked wait asked for: how soon the clock comes
    /// back for the waiters behind one it re-checked.
    pub(super) recheck_every: std::time::Duration,
    /// Takes announced on the companion channel, if there is one.
    pub(super) takes: Option<Box<Takes>>,
}

/// Where the entry's SUBSCRIBE stands: written by the commands task,
/// awaited by `PubSub::subscribe`.
#[derive(Clone, Debug)]
pub(super) enum Ready {
    Pending,
    Subscribed,
    Failed(fred::error::Error),
    /// The registry's tasks are gone.
    Closed,
}

// === impl Channel ===

impl Channel {
    pub(super) fn new(name: Arc<str>, policy: Policy, companion: Option<Arc<str>>) -> Channel {
        let takes = companion.is_some().then(|| Box::new(Takes::new()));
        Channel {
            name,
            companion,
            policy,
            refreshed: Mutex::new(std::time::Instant::now()),
            ready: watch::Sender::new(Ready::Pending),
            clock: Notify::new(),
            state: Mutex::new(ChannelState {
                takes,
                ..ChannelState::default()
            }),
        }
    }
}

impl ChannelState {
    /// Live references to the entry: its `Subscription`s and `Pin`s.
    pub(super) fn refs(&self) -> usize {
        self.wakeups.members() + self.pins
    }

    /// Whether the channel's unlock messages wake after a delay (see the
    /// module docs, "Announced takes").
    pub(super) fn hot(&self) -> bool {
        self.takes
            .as_ref()
            .is_some_and(|takes| takes.hot(Instant::now()))
    }

    /// Draws whether a wake-up on a hot channel (see [`hot`](Self::hot))
    /// is deferred; if so, keeps it for the clock to give at its time and
    /// returns `true`. With no subscription now (only pins) it is
    /// dropped (`true`): there is nobody to defer it for; an immediate
    /// wake-up would keep no permit either, and a waiter that joins
    /// before its time tries after joining anyway.
    pub(super) fn defer(&mut self, channel: &Arc<Channel>) -> bool {
        if self.wakeups.members() == 0 {
            return true;
        }
        let Some(takes) = &mut self.takes else {
            return false;
        };
        if !takes.defer(Instant::now()) {
            return false;
        }
        self.run_clock(channel);
        true
    }

    /// A take was announced with `message`: the deferred and kept
    /// wake-ups came from messages before it and are void; queued waiters
    /// re-check by the end of the new holder's lease at the latest.
    pub(super) fn taken(&mut self, channel: &Arc<Channel>, message: &[u8]) {
        let Some(takes) = &mut self.takes else { return };
        let now = Instant::now();
        let Some(ttl) = takes.taken(now, message) else {
            return;
        };
        self.wakeups.void_permits();
        if !self.wakeups.is_empty() {
            self.recheck_every = ttl;
            self.recheck_by(channel, now + ttl);
        }
    }

    /// Asks the channel's clock to re-check every queued waiter at `at`
    /// (or earlier, if another waiter asked for that), starting the clock
    /// if it is not running.
    pub(super) fn recheck_by(&mut self, channel: &Arc<Channel>, at: Instant) {
        if self.recheck_at.is_some_and(|due| due <= at) {
            return;
        }
        self.recheck_at = Some(at);
        self.run_clock(channel);
    }

    /// Tells the channel's clock that something may be due earlier,
    /// starting it if it is not running.
    fn run_clock(&mut self, channel: &Arc<Channel>) {
        if self.clock_running {
            channel.clock.notify_one();
        } else {
            self.clock_running = true;
            tokio::spawn(run_clock(channel.clone()));
        }
    }

    /// What the clock waits for next: a re-check, or a deferred wake-up.
    fn clock_due(&self) -> Option<Instant> {
        let deferred = self.takes.as_ref().and_then(|takes| takes.due());
        match (self.recheck_at, deferred) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The clock's time came: gives the deferred wake-ups due by `now`,
    /// and re-checks every queued waiter if that is due.
    fn clock_ticked(&mut self, now: Instant) {
        let due = self.takes.as_mut().map_or(0, |takes| takes.take_due(now));
        for _ in 0..due {
            self.wakeups.wake_one();
        }
        // The oldest parked waiter re-checks for all of them.
        if self.recheck_at.is_some_and(|at| at <= now) {
            self.recheck_at = None;
            if self.wakeups.recheck_first() {
                self.recheck_at = Some(now + self.recheck_every);
            }
        }
    }

    /// A re-checked waiter got what it waited for: the next parked waiter
    /// re-checks at once (see the module docs, "The clock").
    pub(super) fn recheck_next(&mut self, channel: &Arc<Channel>) {
        if self.wakeups.recheck_first() {
            self.recheck_by(channel, Instant::now() + self.recheck_every);
        }
    }
}

// === the clock ===

/// for, then wakes every queued waiter (see
/// [`Subscription::wait`](super::Subscription::wait)), and
/// gives deferred wake-ups at their time (see "Announced takes" in the
/// module docs); ends when nothing is due (the next wait that asks, or
/// the next deferred wake-up, starts it again).
async fn run_clock(channel: Arc<Channel>) {
    loop {
        let moved = channel.clock.notified();
        let mut moved = std::pin::pin!(moved);
        // Enabled before `recheck_at` is read: a move after the read is seen.
        moved.as_mut().enable();
        let due = {
            let mut state = channel.state.lock();
            match state.clock_due() {
                Some(due) => due,
                None => {
                    state.clock_running = false;
                    return;
                }
            }
        };
        tokio::select! {
            () = tokio::time::sleep_until(due) => {}
            () = moved => continue,
        }
        channel.state.lock().clock_ticked(Instant::now());
    }
}

// Under `cfg(leasehold_loom)` pubsub's tests other than the loom models
// are left out (see `sync.rs`).
#[cfg(all(test, not(leasehold_loom)))]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::core::pubsub::policy::wake_one;
    use crate::core::pubsub::registry::Shared;
    use crate::core::pubsub::subscription::Subscription;
    use crate::core::pubsub::tests::{channel_with, channel_with_companion_of};

    /// A channel `c` with the companion `t` (takes announced there), and
    /// one subscription.
    fn channel_with_companion() -> (Arc<Shared>, Subscription) {
        let (shared, mut subs) = channel_with_companion_of(1, wake_one, Some("t"));
        (shared, subs.pop().unwrap())
    }

    /// A take announced on the companion voids a kept wake-up (it came
    /// from an unlock before the take) and bounds a parked waiter's
    /// re-check by the new holder's lease: nobody is stranded past it.
    #[tokio::test(start_paused = true)]
    async fn a_take_voids_kept_wake_ups_and_bounds_the_recheck() {
        let (shared, w) = channel_with_companion();
        // Woken (which takes it out of the queue), then trying.
        shared.deliver("c", b"0");
        assert!(w.wait(Duration::ZERO).await);
        w.consumed();
        // An unlock during the attempt is kept as a permit; a take after
        // it voids it.
        shared.deliver("c", b"0");
        shared.deliver("t", b"300 6a2a8c5e-3f7e-4a43-9e9b-7e5b1f0c9d11:7");
        let start = Instant::now();
        assert!(
            !w.wait(Duration::from_secs(60)).await,
            "a wake-up from before the take woke the waiter"
        );
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(300),
            "the re-check was not bounded by the announced lease"
        );
    }

    /// On a hot channel with many recent winners, most unlocks wake after
    /// a short delay; a take announced before then voids the wake-up, and
    /// without one it comes within the delay's cap.
    #[tokio::test(start_paused = true)]
    async fn a_hot_unlock_wakes_after_a_delay_unless_a_take_comes_first() {
        let (shared, w) = channel_with_companion();
        // Woken (out of the queue) and trying: wake-ups are kept for it.
        shared.deliver("c", b"0");
        assert!(w.wait(Duration::ZERO).await);
        w.consumed();
        for c in 0..64 {
            shared.deliver("t", format!("1000 client{c}:1").as_bytes());
        }
        // An unlock until one is deferred (most are; one at once is kept
        // as a permit, which a take voids).
        let deferred = |shared: &Shared| loop {
            shared.deliver("c", b"0");
            let channel = shared.channels.get("c").unwrap().clone();
            let state = channel.state.lock();
            if state.takes.as_ref().unwrap().due().is_some() {
                assert_eq!(state.wakeups.permits(), 0);
                break;
            }
            // Kept as a permit, or (once the waiter is queued again after
            // its timed-out wait below) handed to the waiter itself.
            assert!(state.wakeups.permits() <= 1);
            drop(state);
            shared.deliver("t", b"1000 x:1");
        };
        deferred(&shared);
        shared.deliver("t", b"1000 y:1");
        tokio::time::sleep(crate::core::takes::MAX_DELAY).await;
        assert!(
            !w.wait(Duration::ZERO).await,
            "a voided unlock woke the waiter"
        );
        // Without a take, the deferred unlock comes within the cap.
        deferred(&shared);
        tokio::time::sleep(crate::core::takes::MAX_DELAY).await;
        assert!(w.wait(Duration::ZERO).await, "the unlock never came");
    }

    /// A parked waiter is re-checked by its channel's clock at its bound,
    /// without a message; a second waiter asking for an earlier re-check
    /// moves the clock earlier, and the clock re-checks the oldest parked
    /// waiter then, for both. The other is re-checked one bound later only
    /// if the first does not wait again. The clock ends when nothing is due.
    #[tokio::test(start_paused = true)]
    async fn the_channel_clock_rechecks_the_oldest_waiter_at_the_earliest_bound() {
        let (_shared, mut subs) = channel_with(2);
        let w2 = subs.pop().unwrap();
        let w1 = subs.pop().unwrap();
        let start = Instant::now();
        assert!(!w1.wait(Duration::from_secs(1)).await, "no message came");
        assert_eq!(start.elapsed(), Duration::from_secs(1));

        let start = Instant::now();
        let long = tokio::spawn(async move {
            let woken = w1.wait(Duration::from_secs(60)).await;
            (woken, w1)
        });
        tokio::task::yield_now().await;
        let short = tokio::spawn(async move {
            let woken = w2.wait(Duration::from_millis(100)).await;
            (woken, w2, Instant::now())
        });
        let (woken, w1) = long.await.unwrap();
        assert!(!woken);
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(100),
            "the earlier bound did not move the clock"
        );
        // w1 does not wait again: w2 is re-checked one bound later.
        let (woken, _w2, at) = short.await.unwrap();
        assert!(!woken);
        assert_eq!(at - start, Duration::from_millis(200));
        // Nothing is due: the clock has ended.
        tokio::task::yield_now().await;
        let state = w1.channel.state.lock();
        assert!(state.recheck_at.is_none() && !state.clock_running);
    }

    /// A re-checked waiter that got what it waited for passes the re-check
    /// on at once (what freed it may have freed more); one that waits
    /// again keeps the others parked.
    #[tokio::test(start_paused = true)]
    async fn a_recheck_that_got_its_wait_passes_on_at_once() {
        let (_shared, mut subs) = channel_with(3);
        let w3 = subs.pop().unwrap();
        let w2 = subs.pop().unwrap();
        let w1 = Arc::new(subs.pop().unwrap());
        let start = Instant::now();
        let parked: Vec<_> = [w2, w3]
            .into_iter()
            .map(|w| {
                tokio::spawn(async move {
                    let woken = w.wait(Duration::from_secs(10)).await;
                    (woken, Instant::now())
                })
            })
            .collect();
        tokio::task::yield_now().await;
        // The oldest (w1 parks first) is re-checked at 1 s...
        let first = {
            let w1 = w1.clone();
            tokio::spawn(async move { w1.wait(Duration::from_secs(1)).await })
        };
        assert!(!first.await.unwrap());
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        // ...and got what it waited for: the next one re-checks now.
        w1.recheck_next();
        let mut ends = Vec::new();
        for p in parked {
            let (woken, at) = p.await.unwrap();
            assert!(!woken);
            ends.push(at - start);
        }
        ends.sort();
        assert_eq!(ends[0], Duration::from_secs(1), "not passed on at once");
        assert!(ends[1] > Duration::from_secs(1), "both woken at once");
    }

    /// A message wakes a parked waiter before its re-check. The re-check
    /// still due then comes at its own time (one early re-check for the
    /// next wait), not at once.
    #[tokio::test(start_paused = true)]
    async fn a_message_wakes_before_the_recheck_and_the_next_wait_parks_again() {
        let (shared, mut subs) = channel_with(1);
        let w = Arc::new(subs.pop().unwrap());
        let parked = {
            let w = w.clone();
            tokio::spawn(async move { w.wait(Duration::from_secs(10)).await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        shared.deliver("c", b"0");
        assert!(parked.await.unwrap(), "the message did not wake it");
        w.consumed();
        let start = Instant::now();
        assert!(!w.wait(Duration::from_secs(30)).await);
        assert!(
            start.elapsed() >= Duration::from_secs(9),
            "the re-check still due ended the new wait at once"
        );
    }
}

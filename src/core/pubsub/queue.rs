//! The wake-up queue of one channel entry: which local waiter a message
//! wakes, and what happens to a wake-up nobody is waiting for. Pure state
//! and wakers: no Redis, no runtime, no clock (the channel's clock and
//! announced takes are in `channel.rs` and call in here), so its model tests
//! run under loom (`loom_tests`, built with `--cfg leasehold_loom`; see
//! `sync.rs`).
//!
//! # The algorithm
//!
//! A [`WakeQueue`] lives inside its channel's state, under the channel's
//! lock: every `&mut self` method runs with that lock held. Its members are
//! the channel's live subscriptions, one [`Waiter`] each.
//!
//! * **FIFO.** A waiter joins at the back ([`WakeQueue::join`]). A wake-up
//!   goes to the oldest queued waiter: it leaves the queue, its `woken`
//!   flag is set and its task is woken.
//! * **A woken waiter holds its wake-up** until its attempt concluded
//!   ([`Waiter::consumed`]). A wait that begins while it holds one returns
//!   at once ([`WakeQueue::begin_wait`]).
//! * **A loser goes back to the front.** A waiter that begins a wait while
//!   not queued (it was woken, and lost the race) is queued first: it
//!   keeps the place it had.
//! * **No lost wake-up between two waits.** A wake-up that finds no queued
//!   waiter is kept as a *permit*, which the next wait of any member takes
//!   at once (a member that takes one while still queued from joining is
//!   skipped by the next wake-up: it holds one already). Permits are capped at one per member (none while there is
//!   none: a waiter that joins later tries after joining, so a message
//!   before that is no news to it).
//! * **Cancel safety.** A waiter that leaves ([`WakeQueue::leave`]: its
//!   subscription is dropped) while queued is marked gone, and skipped by
//!   the next wake-up (gone waiters are compacted away once they are most
//!   of the queue, so joining and leaving are O(1)). One that leaves
//!   holding a wake-up passes it to the next waiter, or keeps it as a
//!   permit. A message handed with it is not passed on.
//! * **Handed messages** ([`Wake::OneWith`]): the woken waiter gets the
//!   message too ([`Waiter::take_handed`]); kept as a permit, a wake-up
//!   carries none. A second copy of the last handed message wakes nobody
//!   (the same message handed over in this process and then carried by
//!   Redis, see `mod.rs`).
//! * **Re-checks and takes.** The channel's clock ends the oldest parked
//!   waiter's wait without a wake-up ([`WakeQueue::recheck_first`]): one
//!   attempt re-checks for every waiter of the channel; a take
//!   announced on the channel's companion voids the permits
//!   ([`WakeQueue::void_permits`]): they came from messages before it.
//!
//! # Memory ordering
//!
//! A waiter's `queued`, `gone` and `rechecked` flags and its handed
//! message are written under the channel lock only (`consumed` and
//! `take_handed` take the message under its own small lock). `woken` is
//! set under the channel lock (Release) before the waiter's task is woken;
//! the parked task registers its waker *before* it reads the flags
//! (Acquire), so a wake-up set after that read wakes the registration.
//! `woken` is cleared by the waiter's own task (`consumed`, outside the
//! lock) or by `leave` (under it).

use std::collections::VecDeque;
use std::task::{Context, Poll};

use super::sync::atomic::{AtomicBool, Ordering};
use super::sync::{Arc, AtomicWaker, Mutex};

/// How many waiters a message wakes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    One,
    All,
    /// Up to this many (none for 0). Wake-ups beyond the queued waiters
    /// are kept as permits for waiters between two waits, as for `One`.
    N(usize),
    /// One, handing it the message (see the module docs of `pubsub`).
    /// With no waiter queued it is kept as a plain permit, without the
    /// message. Such a message must be unique (e.g. carry a request id): a
    /// channel drops a second copy of the last one it delivered, which is
    /// how a message handed over in this process and then carried by Redis
    /// wakes once.
    OneWith,
}

/// The wake-up queue of one channel entry (see the module docs). It is
/// changed only under the channel's lock, which the caller of every
/// `&mut self` method holds.
#[derive(Debug, Default)]
pub(super) struct WakeQueue {
    /// The channel's live subscriptions, queued or not (`join` counts one
    /// in, `leave` out).
    members: usize,
    /// Waiters blocked in a wait, oldest first, and gone ones not yet
    /// taken out (`Slot::gone`): joining, waiting again and leaving are
    /// O(1) however many wait, and wakers skip the gone ones.
    queue: VecDeque<Waiter>,
    /// Gone waiters still in `queue`; it is compacted when they are most
    /// of it.
    stale: usize,
    /// Wake-ups that found no queued waiter, kept for the next waits (at
    /// most one per member).
    permits: usize,
    /// The last `OneWith` message delivered, until its second copy comes.
    handed_last: Option<Box<[u8]>>,
}

/// One subscription's place in its channel's [`WakeQueue`], shared by the
/// subscription and the queue (a counted reference: a clone is cheap).
#[derive(Clone, Debug)]
pub(super) struct Waiter(Arc<Slot>);

#[derive(Debug, Default)]
struct Slot {
    /// Holds a wake-up it has not consumed; set by wakers (under the
    /// channel lock) and by `begin_wait` taking a permit, cleared by
    /// `consumed` and `leave`.
    woken: AtomicBool,
    /// In its channel's queue (changed under the channel lock).
    queued: AtomicBool,
    /// Its subscription left while it was queued (under the lock).
    gone: AtomicBool,
    /// The channel's clock passed a re-check time while it was queued:
    /// its wait ends without a wake-up (set under the channel lock).
    rechecked: AtomicBool,
    /// The message handed over with the wake-up ([`Wake::OneWith`]).
    handed: Mutex<Option<Box<[u8]>>>,
    /// The task parked in a wait, woken after `woken` or `rechecked` is
    /// set. Not a `Notify`: its `Notified` future would grow every parked
    /// waiter's future, and its stored permit would outlive
    /// the wake-up (the flag is the wake-up).
    waker: AtomicWaker,
}

/// Gone waiters before the queue is worth compacting.
const COMPACT_AT: usize = 32;

// === impl WakeQueue ===

impl WakeQueue {
    /// The live subscriptions of the channel.
    pub(super) fn members(&self) -> usize {
        self.members
    }

    /// Whether the queue has no entry (gone ones not yet taken out count).
    pub(super) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Queue entries, gone ones not yet taken out included.
    #[cfg(all(test, not(leasehold_loom)))]
    pub(super) fn len(&self) -> usize {
        self.queue.len()
    }

    /// Kept wake-ups.
    #[cfg(all(test, not(leasehold_loom)))]
    pub(super) fn permits(&self) -> usize {
        self.permits
    }

    /// `waiter` joins the channel: it is counted and queued at the back.
    pub(super) fn join(&mut self, waiter: &Waiter) {
        self.members += 1;
        waiter.0.queued.store(true, Ordering::Relaxed);
        self.queue.push_back(waiter.clone());
    }

    /// `waiter`'s subscription is dropped: it leaves the queue (marked
    /// gone, taken out by the next waker or compaction), and a wake-up it
    /// holds and did not consume passes to the next waiter (a message
    /// handed with it does not).
    pub(super) fn leave(&mut self, waiter: &Waiter) {
        let slot = &waiter.0;
        if slot.queued.swap(false, Ordering::Relaxed) {
            slot.gone.store(true, Ordering::Relaxed);
            self.stale += 1;
            if self.stale >= COMPACT_AT && self.stale * 2 >= self.queue.len() {
                self.queue.retain(|w| !w.0.gone.load(Ordering::Relaxed));
                self.stale = 0;
                // A crowd that left gives its memory back (the channel
                // may stay open a while: a pin, a lingering hold).
                if self.queue.capacity() > 4 * self.queue.len().max(16) {
                    self.queue.shrink_to_fit();
                }
            }
        }
        self.members -= 1;
        self.permits = self.permits.min(self.members);
        if slot.woken.swap(false, Ordering::AcqRel) {
            self.wake_one();
        }
    }

    /// The start of `waiter`'s wait: whether it holds a wake-up now (one
    /// it held, or a permit it takes). If not, it is queued (at the front
    /// if it was not: woken before, it lost the race and keeps its place)
    /// and its wait parks ([`Waiter::poll_parked`]).
    pub(super) fn begin_wait(&mut self, waiter: &Waiter) -> bool {
        let slot = &waiter.0;
        if slot.woken.load(Ordering::Acquire) {
            return true;
        }
        if self.permits > 0 {
            self.permits -= 1;
            slot.woken.store(true, Ordering::Release);
            return true;
        }
        if !slot.queued.load(Ordering::Relaxed) {
            slot.queued.store(true, Ordering::Relaxed);
            self.queue.push_front(waiter.clone());
        }
        // A re-check passed before this wait is not this wait's: the
        // attempt just made was the re-check.
        slot.rechecked.store(false, Ordering::Relaxed);
        false
    }

    /// A message whose policy said `wake` came: wakes that many queued
    /// waiters, keeping permits for what finds none.
    pub(super) fn wake(&mut self, wake: Wake, message: &[u8]) {
        match wake {
            Wake::One => self.wake_one(),
            // The second copy of a message handed over in this process.
            Wake::OneWith if self.handed_last.as_deref() == Some(message) => {
                self.handed_last = None;
            }
            Wake::OneWith => {
                self.handed_last = Some(message.into());
                self.wake_one_with(Some(message));
            }
            Wake::All => {
                while !self.queue.is_empty() {
                    self.wake_one();
                }
                // Waiters between two waits re-check too.
                self.permits = self.members;
            }
            Wake::N(n) => {
                // More than the queue plus one permit per member would
                // change nothing (permits are capped at that).
                for _ in 0..n.min(self.queue.len() + self.members) {
                    self.wake_one();
                }
            }
        }
    }

    /// Wakes the oldest queued waiter, or keeps a permit if none is queued.
    pub(super) fn wake_one(&mut self) {
        self.wake_one_with(None);
    }

    /// As `wake_one`, handing the woken waiter `message` (a permit keeps
    /// none). Gone waiters on the way are taken out, and so are waiters
    /// that already hold a wake-up (one that took a permit at its first
    /// wait, still queued from joining): one `consumed` would end both.
    fn wake_one_with(&mut self, message: Option<&[u8]>) {
        loop {
            match self.queue.pop_front() {
                Some(waiter) if waiter.0.gone.load(Ordering::Relaxed) => self.stale -= 1,
                Some(waiter) if waiter.0.woken.load(Ordering::Acquire) => {
                    waiter.0.queued.store(false, Ordering::Relaxed);
                }
                Some(waiter) => {
                    let slot = &waiter.0;
                    slot.queued.store(false, Ordering::Relaxed);
                    *slot.handed.lock() = message.map(Box::from);
                    slot.woken.store(true, Ordering::Release);
                    slot.waker.wake();
                    return;
                }
                None => {
                    self.permits = (self.permits + 1).min(self.members);
                    return;
                }
            }
        }
    }

    /// The channel's clock is due: the oldest parked waiter re-checks, for
    /// every waiter of the channel (they wait for the same thing, so one
    /// attempt tells what all of theirs would). Waiters that are attempting
    /// already (woken, or re-checked and not parked again) are passed over.
    /// Returns whether another waiter is parked behind it (the clock then
    /// comes back for them, see `channel.rs`).
    pub(super) fn recheck_first(&mut self) -> bool {
        let mut parked = self.queue.iter().map(|w| &*w.0).filter(|slot| {
            !(slot.gone.load(Ordering::Relaxed)
                || slot.woken.load(Ordering::Acquire)
                || slot.rechecked.load(Ordering::Relaxed))
        });
        match parked.next() {
            Some(first) => {
                recheck(first);
                parked.next().is_some()
            }
            None => false,
        }
    }

    /// A take was announced: the kept wake-ups came from messages before
    /// it, and are void.
    pub(super) fn void_permits(&mut self) {
        self.permits = 0;
    }
}

/// Ends a parked waiter's wait without a wake-up (under the channel lock).
fn recheck(slot: &Slot) {
    slot.rechecked.store(true, Ordering::Release);
    slot.waker.wake();
}

// === impl Waiter ===

impl Waiter {
    /// A waiter of no channel yet (see [`WakeQueue::join`]).
    pub(super) fn new() -> Waiter {
        Waiter(Arc::new(Slot::default()))
    }

    /// A parked wait's poll (after [`WakeQueue::begin_wait`] returned
    /// `false`): ready with `true` once woken, with `false` once the
    /// channel's clock re-checked it.
    pub(super) fn poll_parked(&self, cx: &mut Context<'_>) -> Poll<bool> {
        let slot = &self.0;
        // Registered before the flags are read: a waker that sets one
        // after the read wakes this registration.
        slot.waker.register(cx.waker());
        if slot.woken.load(Ordering::Acquire) {
            Poll::Ready(true)
        } else if slot.rechecked.load(Ordering::Acquire) {
            Poll::Ready(false)
        } else {
            Poll::Pending
        }
    }

    /// Whether it holds a wake-up now.
    pub(super) fn holds_wake_up(&self) -> bool {
        self.0.woken.load(Ordering::Acquire)
    }

    /// The attempt a wake-up led to has concluded: the wake-up (and a
    /// message handed with it) is used up.
    pub(super) fn consumed(&self) {
        self.0.handed.lock().take();
        self.0.woken.store(false, Ordering::Release);
    }

    /// Takes the message handed over with the wake-up it holds, if any.
    pub(super) fn take_handed(&self) -> Option<Box<[u8]>> {
        self.0.handed.lock().take()
    }
}

#[cfg(all(test, not(leasehold_loom)))]
mod tests {
    use super::*;

    #[test]
    fn wake_n_wakes_at_most_n_queued_waiters() {
        let mut queue = WakeQueue::default();
        let waiters: Vec<Waiter> = (0..5).map(|_| Waiter::new()).collect();
        for w in &waiters {
            queue.join(w);
        }
        queue.wake(Wake::N(2), b"2");
        let woken = |w: &[Waiter]| w.iter().filter(|w| w.holds_wake_up()).count();
        assert_eq!(woken(&waiters), 2);
        assert!(waiters[0].holds_wake_up() && waiters[1].holds_wake_up());
        queue.wake(Wake::N(0), b"0");
        assert_eq!(woken(&waiters), 2);
        assert_eq!(queue.permits, 0);
        // A huge count wakes the rest and keeps at most one permit per member.
        queue.wake(Wake::N(usize::MAX), b"x");
        assert_eq!(woken(&waiters), 5);
        assert_eq!(queue.permits, 5);
    }

    /// A waiter that joins while a permit is kept takes it at its first
    /// wait, still queued. The next message must not go to it (it already
    /// holds a wake-up, and one `consumed` ends both): it goes to the next
    /// waiter, or is kept for the waiter between two waits. Found by the
    /// loom models: the second message was lost, and the other waiter
    /// slept until its re-check (up to 30 s, or the lock's TTL).
    #[test]
    fn a_message_skips_a_queued_waiter_that_holds_a_wake_up() {
        let mut queue = WakeQueue::default();
        let (a, b) = (Waiter::new(), Waiter::new());
        queue.join(&a);
        assert!(!queue.begin_wait(&a));
        // A is woken, tries and loses: between two waits.
        queue.wake(Wake::One, b"0");
        assert!(a.holds_wake_up());
        a.consumed();
        // A message while nobody is queued is kept.
        queue.wake(Wake::One, b"0");
        assert_eq!(queue.permits(), 1);
        // B joins and takes it at its first wait.
        queue.join(&b);
        assert!(queue.begin_wait(&b));
        // Another message: not for B, which holds one.
        queue.wake(Wake::One, b"0");
        b.consumed();
        assert!(
            queue.begin_wait(&a),
            "the second message was lost: A's next wait parks"
        );
    }
}

/// Model tests of the queue (see the module docs): run with
/// `RUSTFLAGS="--cfg leasehold_loom" cargo test --lib loom` (about 8 s for
/// all of them in a debug build, 1.5 s with `--release`, whose build takes
/// twice as long; `.ci/run` builds for debug). Each model has a channel's queue under
/// its lock, as `mod.rs` keeps it, and two or three threads: waiters
/// waiting as `Subscription::wait` does (its `Park`: `begin_wait` under
/// the lock, then parked until woken), leaving as a dropped
/// `Subscription` does, and messages delivered as `Shared::deliver` does.
/// There is no re-check clock here: a wait lasts until it is woken, so a
/// lost wake-up leaves a thread parked for ever, which loom reports as a
/// deadlock.
#[cfg(all(test, leasehold_loom))]
mod loom_tests {
    use std::future::poll_fn;

    use loom::thread;

    use super::*;

    /// Explores every interleaving with up to three preemptions, or
    /// `LOOM_MAX_PREEMPTIONS` if set.
    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound.get_or_insert(3);
        builder.check(f);
    }

    type Channel = Arc<Mutex<WakeQueue>>;

    /// A channel with `n` members, all queued oldest first (as after
    /// subscribing).
    fn channel_with(n: usize) -> (Channel, Vec<Waiter>) {
        let mut queue = WakeQueue::default();
        let waiters: Vec<Waiter> = (0..n).map(|_| Waiter::new()).collect();
        for w in &waiters {
            queue.join(w);
        }
        (Arc::new(Mutex::new(queue)), waiters)
    }

    /// A wait with no bound: whether it was woken (always, here).
    fn wait(channel: &Channel, waiter: &Waiter) -> bool {
        if channel.lock().begin_wait(waiter) {
            return true;
        }
        loom::future::block_on(poll_fn(|cx| waiter.poll_parked(cx)))
    }

    /// A message of the plain unlock policy (`wake_one`).
    fn unlock(channel: &Channel) {
        channel.lock().wake(Wake::One, b"0");
    }

    /// `waiter`'s subscription is dropped (`Drop for Subscription`).
    fn drop_subscription(channel: &Channel, waiter: Waiter) {
        channel.lock().leave(&waiter);
    }

    /// A waiter that was woken, made its attempt and lost (it is between
    /// two waits, not queued), and a message published meanwhile: its next
    /// wait returns woken, whichever comes first. Nothing is left behind.
    #[test]
    fn loom_a_message_between_two_waits_wakes_the_next_wait() {
        model(|| {
            let (channel, mut waiters) = channel_with(1);
            let w = waiters.pop().unwrap();
            unlock(&channel);
            assert!(channel.lock().begin_wait(&w));
            w.consumed();
            assert!(channel.lock().is_empty());

            let publisher = {
                let channel = channel.clone();
                thread::spawn(move || unlock(&channel))
            };
            assert!(wait(&channel, &w), "the message was lost");
            publisher.join().unwrap();

            assert!(w.holds_wake_up());
            let queue = channel.lock();
            assert_eq!(queue.permits, 0, "the wake-up was kept twice");
            assert!(queue.is_empty());
            assert_eq!(queue.members, 1);
        });
    }

    /// Two queued waiters, one message: the oldest wakes, the other stays
    /// parked (it holds nothing, its wait has not returned) until a second
    /// message wakes it.
    #[test]
    fn loom_one_message_wakes_one_of_two_waiters() {
        model(|| {
            let (channel, waiters) = channel_with(2);
            let returned2 = Arc::new(AtomicBool::new(false));
            let threads: Vec<_> = waiters
                .iter()
                .enumerate()
                .map(|(i, w)| {
                    let (channel, w) = (channel.clone(), w.clone());
                    let returned2 = returned2.clone();
                    thread::spawn(move || {
                        assert!(wait(&channel, &w));
                        if i == 1 {
                            returned2.store(true, Ordering::SeqCst);
                        }
                    })
                })
                .collect();

            unlock(&channel);
            assert!(
                waiters[0].holds_wake_up(),
                "the oldest waiter was not woken"
            );
            assert!(!waiters[1].holds_wake_up(), "one message woke two waiters");
            assert!(
                !returned2.load(Ordering::SeqCst),
                "the second waiter's wait returned without a wake-up"
            );

            unlock(&channel);
            for t in threads {
                t.join().unwrap();
            }
            assert!(waiters.iter().all(Waiter::holds_wake_up));
            let queue = channel.lock();
            assert_eq!(queue.permits, 0);
            assert!(queue.is_empty());
        });
    }

    /// A woken waiter dropped before its attempt concluded (a cancelled
    /// lock future) passes the wake-up to the next queued waiter.
    #[test]
    fn loom_a_woken_waiter_dropped_before_consumed_passes_the_wake_up_on() {
        model(|| {
            let (channel, mut waiters) = channel_with(2);
            let w2 = waiters.pop().unwrap();
            let w1 = waiters.pop().unwrap();
            let cancelled = {
                let channel = channel.clone();
                thread::spawn(move || {
                    assert!(wait(&channel, &w1));
                    drop_subscription(&channel, w1);
                })
            };
            let next = {
                let (channel, w2) = (channel.clone(), w2.clone());
                thread::spawn(move || wait(&channel, &w2))
            };

            unlock(&channel);
            cancelled.join().unwrap();
            assert!(
                next.join().unwrap(),
                "the dropped waiter swallowed the wake-up"
            );

            let queue = channel.lock();
            assert_eq!(queue.members, 1);
            assert_eq!(queue.permits, 0, "the wake-up was passed on twice");
            assert!(queue.is_empty());
        });
    }

    /// A waiter dropped while queued (before or after the message came):
    /// the message still wakes the other waiter, and the dropped one
    /// leaves nothing in the queue and no permit.
    #[test]
    fn loom_a_waiter_dropped_while_queued_leaves_nothing_behind() {
        model(|| {
            let (channel, mut waiters) = channel_with(2);
            let w2 = waiters.pop().unwrap();
            let w1 = waiters.pop().unwrap();
            let dropped = {
                let channel = channel.clone();
                thread::spawn(move || drop_subscription(&channel, w1))
            };
            let next = {
                let (channel, w2) = (channel.clone(), w2.clone());
                thread::spawn(move || wait(&channel, &w2))
            };

            unlock(&channel);
            dropped.join().unwrap();
            assert!(next.join().unwrap(), "the message was lost");

            let queue = channel.lock();
            assert_eq!(queue.members, 1);
            assert_eq!(queue.permits, 0);
            assert_eq!(
                (queue.queue.len(), queue.stale),
                (0, 0),
                "left in the queue"
            );
        });
    }

    /// A waiter dropped while queued takes no permit: the permit kept for
    /// a waiter between two waits is still there for its next wait.
    #[test]
    fn loom_a_waiter_dropped_while_queued_takes_no_permit() {
        model(|| {
            // w0 was woken and lost; a message found nobody queued; then
            // w1 joined.
            let (channel, mut waiters) = channel_with(1);
            let w0 = waiters.pop().unwrap();
            unlock(&channel);
            assert!(channel.lock().begin_wait(&w0));
            w0.consumed();
            unlock(&channel);
            let w1 = Waiter::new();
            channel.lock().join(&w1);

            let dropped = {
                let channel = channel.clone();
                thread::spawn(move || drop_subscription(&channel, w1))
            };
            assert!(wait(&channel, &w0), "the permit was lost");
            dropped.join().unwrap();

            let mut queue = channel.lock();
            assert_eq!((queue.members, queue.permits), (1, 0));
            // The gone waiter is only a stale entry: the next message
            // skips it and is kept as a permit.
            w0.consumed();
            queue.wake(Wake::One, b"0");
            assert_eq!((queue.queue.len(), queue.stale, queue.permits), (0, 0, 1));
        });
    }

    /// A message that wakes all wakes every queued waiter, and keeps a
    /// permit for each member (waiters between two waits re-check too).
    #[test]
    fn loom_wake_all_wakes_every_waiter() {
        model(|| {
            let (channel, waiters) = channel_with(2);
            let threads: Vec<_> = waiters
                .iter()
                .map(|w| {
                    let (channel, w) = (channel.clone(), w.clone());
                    thread::spawn(move || wait(&channel, &w))
                })
                .collect();

            channel.lock().wake(Wake::All, b"1");
            for t in threads {
                assert!(t.join().unwrap(), "a waiter was left parked");
            }
            let queue = channel.lock();
            assert!(queue.is_empty());
            assert_eq!(queue.permits, 2);
        });
    }

    /// A message handed to one waiter and its second copy (the hand-over
    /// in this process and Redis's copy, in either order) wake one waiter
    /// once, handing it the message; the other waiter is not woken.
    #[test]
    fn loom_a_handed_message_and_its_copy_wake_once() {
        model(|| {
            let (channel, waiters) = channel_with(2);
            let copies: Vec<_> = (0..2)
                .map(|_| {
                    let channel = channel.clone();
                    thread::spawn(move || channel.lock().wake(Wake::OneWith, b"grant:7"))
                })
                .collect();

            assert!(wait(&channel, &waiters[0]));
            assert_eq!(waiters[0].take_handed().as_deref(), Some(&b"grant:7"[..]));
            for t in copies {
                t.join().unwrap();
            }
            assert!(!waiters[1].holds_wake_up(), "the second copy woke a waiter");
            let queue = channel.lock();
            assert_eq!(queue.permits, 0, "the second copy was kept");
            assert_eq!(queue.queue.len(), 1);
        });
    }

    /// A message that arrives while an attempt is under way (the wait loop
    /// reads `holds_wake_up` before it, and consumes only a wake-up it
    /// held) is not used up by that attempt: the next wait returns at once.
    #[test]
    fn loom_a_wake_up_during_an_attempt_is_kept_for_the_next_wait() {
        model(|| {
            // A bounded wait ran out: the waiter is queued.
            let (channel, waiters) = channel_with(1);
            let w = &waiters[0];
            assert!(!channel.lock().begin_wait(w));

            let publisher = {
                let channel = channel.clone();
                thread::spawn(move || unlock(&channel))
            };
            let held = w.holds_wake_up();
            // ... the attempt ...
            if held {
                w.consumed();
            }
            publisher.join().unwrap();

            // Used by an attempt that began after it, or kept.
            assert_eq!(channel.lock().begin_wait(w), !held);
        });
    }
}

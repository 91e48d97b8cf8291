//! Announced takes: a hot lock's unlock message wakes a few clients, not
//! every one.
//!
//! # The herd
//!
//! Redisson's unlock message (`0` on `redisson_lock__channel:{name}`)
//! reaches every client subscribed to the channel, and each wakes one of
//! its waiters, which tries at once. With N clients waiting, one try wins
//! and N - 1 lose, each a script with its reads: on a hot lock almost all
//! of Redis's work is lost tries. A client cannot tell from `0` whether
//! the lock is still free; the message must stay `0` (a Redisson waiter
//! must be woken by a leasehold release, and a leasehold waiter by a
//! Redisson release).
//!
//! # What is added
//!
//! A leasehold acquire that takes a free lock while its client listens on
//! the lock's channel, after it lost a race for it (a try after a wake-up
//! found it taken) or while many clients win it (more than `SPREAD` in
//! the last second), announces it on a *companion* channel,
//! `leasehold_lock__taken:{name}` (same hash slot; Redisson subscribes to
//! no such channel, so it sees nothing of it), with the message
//! `<lease ms> <owner field>`. A client listening on a lock's channel also
//! listens on its companion (one subscription entry, `pubsub/channel.rs`), and:
//!
//! * **a take voids the wake-ups before it**: the deferred wake-ups and
//!   the kept ones (permits) the channel has when a take is announced came
//!   from messages published before the take (both channels reach the
//!   client on one connection, in Redis's order). The lock has been taken
//!   since: its holder's release publishes `0` again, and its lease is
//!   announced, so every queued waiter re-checks by then at the latest
//!   ([`Takes::bound`]): nobody is stranded past the holder's TTL.
//! * **on a hot channel most clients wait a moment before trying**: a
//!   channel is hot for a second after a take was announced on it. With
//!   `contenders` the clients that won the lock in the last second, its
//!   `0` wakes a waiter at once with probability `SPREAD / contenders`
//!   (always, for `SPREAD` contenders or fewer), else after a fallback
//!   delay: twice the time a try of this client takes (at least a
//!   millisecond, tokio's timer tick), plus up to one more such time at
//!   random (capped at [`MAX_DELAY`]). One of the clients woken at once
//!   wins, and its announcement reaches the others about one try's time
//!   later, voiding their deferred wake-ups: about `SPREAD` clients try
//!   per unlock, however many wait, and a lock with few contenders is
//!   handed over as fast as before. Only when no client tried at once (or
//!   the winner announced nothing: a Redisson client, a fenced lock) do
//!   the deferred wake-ups come, a millisecond or two later. A client
//!   with no waiter queued keeps the wake-up as a permit at its time, as
//!   for any message.
//! * **a new wait on a hot channel does not barge**: its first try is
//!   deferred the same way (as if an unlock had just woken it), so an
//!   owner that just released a hot lock and locks again does not win
//!   every time against waiters whose wake-ups are deferred.
//!
//! A Redisson acquire announces nothing: the deferred wake-ups then come
//! at their time and try, as without announcements (a few milliseconds
//! later at most). Nothing here changes a key, a script's effect on the
//! lock, or what is published on the unlock channel.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use tokio::time::Instant;

/// How long after an announced take a channel is hot, and how long a
/// winner counts as a contender.
const HOT: Duration = Duration::from_secs(1);

/// Tries per unlock aimed at on a hot channel.
const SPREAD: u32 = 4;

/// Longest delay of a wake-up on a hot channel.
pub(crate) const MAX_DELAY: Duration = Duration::from_millis(20);

/// Shortest fallback delay: tokio's timer tick (a shorter sleep lasts as
/// long).
const MIN_DELAY: Duration = Duration::from_millis(1);

/// A try's round trip before any was measured.
const FIRST_RTT: Duration = Duration::from_millis(1);

/// The companion channel of a lock's unlock channel `unlock`
/// (`redisson_lock__channel:<tail>`): `leasehold_lock__taken:<tail>`, in
/// the same hash slot. `None` for a channel of another form.
pub(crate) fn taken_channel(unlock: &str) -> Option<Box<str>> {
    const HEAD: &str = "leasehold_lock__taken";
    let tail = unlock.strip_prefix("redisson_lock__channel")?;
    // Sized once: no reallocation on the way to the box.
    let mut name = String::with_capacity(HEAD.len() + tail.len());
    name.push_str(HEAD);
    name.push_str(tail);
    Some(name.into_boxed_str())
}

/// What a channel with a companion knows of the takes announced there.
/// Kept under its channel's lock.
#[derive(Debug)]
pub(crate) struct Takes {
    /// Deferred wake-ups, one per unlock message (or deferred first try),
    /// by the time each is due.
    pending: Vec<Instant>,
    /// When the last take was announced.
    last: Option<Instant>,
    /// When the lease of the last announced take ends, at the latest.
    holder_until: Option<Instant>,
    /// The clients that won recently (a hash of the client id), and when.
    winners: Vec<(u64, Instant)>,
    /// A try's round trip, smoothed.
    rtt: Duration,
    /// xorshift state for the delays.
    rng: u64,
}

impl Takes {
    pub(crate) fn new() -> Takes {
        // Any odd seed that differs between channels and processes.
        let seed = uuid::Uuid::new_v4().as_u64_pair().0 | 1;
        Takes {
            pending: Vec::new(),
            last: None,
            holder_until: None,
            winners: Vec::new(),
            rtt: FIRST_RTT,
            rng: seed,
        }
    }

    /// Whether a take was announced in the last second.
    pub(crate) fn hot(&self, now: Instant) -> bool {
        self.last
            .is_some_and(|last| now.saturating_duration_since(last) < HOT)
    }

    /// Whether more than `SPREAD` clients won the lock in the last second.
    pub(crate) fn crowded(&self, now: Instant) -> bool {
        self.contenders(now) > u64::from(SPREAD)
    }

    /// The clients that won the lock in the last second.
    fn contenders(&self, now: Instant) -> u64 {
        self.winners
            .iter()
            .filter(|(_, at)| now.saturating_duration_since(*at) < HOT)
            .count() as u64
    }

    /// Draws whether one wake-up comes at once (`false`) or is deferred
    /// (`true`: it is kept, due after the fallback delay).
    pub(crate) fn defer(&mut self, now: Instant) -> bool {
        match self.delay(now) {
            Some(delay) => {
                self.pending.push(now + delay);
                true
            }
            None => false,
        }
    }

    /// `None` (at once) with probability `SPREAD / contenders`, else the
    /// fallback delay (see the module docs).
    fn delay(&mut self, now: Instant) -> Option<Duration> {
        let contenders = self.contenders(now);
        if contenders <= u64::from(SPREAD) || self.random() % contenders < u64::from(SPREAD) {
            return None;
        }
        let spread = self.rtt.as_nanos().max(1) as u64;
        let delay = (self.rtt * 2).max(MIN_DELAY) + Duration::from_nanos(self.random() % spread);
        Some(delay.min(MAX_DELAY))
    }

    /// xorshift64.
    fn random(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// A take was announced with `message` (`<lease ms> <owner field>`):
    /// drops the deferred wake-ups and returns the holder's lease, or
    /// `None` (nothing changes) for a message that is not one.
    pub(crate) fn taken(&mut self, now: Instant, message: &[u8]) -> Option<Duration> {
        let text = std::str::from_utf8(message).ok()?;
        let (ttl, field) = text.split_once(' ')?;
        let ttl = Duration::from_millis(ttl.parse::<u64>().ok()?);
        let client = field.rsplit_once(':').map_or(field, |(client, _)| client);
        let mut hasher = DefaultHasher::new();
        client.hash(&mut hasher);
        let client = hasher.finish();
        self.winners
            .retain(|(c, at)| *c != client && now.saturating_duration_since(*at) < HOT);
        self.winners.push((client, now));
        self.pending.clear();
        self.last = Some(now);
        let until = now + ttl;
        self.holder_until = Some(until);
        Some(ttl)
    }

    /// The earliest deferred wake-up.
    pub(crate) fn due(&self) -> Option<Instant> {
        self.pending.iter().min().copied()
    }

    /// Takes out the deferred wake-ups due by `now`; returns how many.
    pub(crate) fn take_due(&mut self, now: Instant) -> usize {
        let before = self.pending.len();
        self.pending.retain(|due| *due > now);
        before - self.pending.len()
    }

    /// Drops every deferred wake-up (the channel closes).
    pub(crate) fn clear(&mut self) {
        self.pending.clear();
    }

    /// A try of this client took `rtt`.
    pub(crate) fn observe(&mut self, rtt: Duration) {
        // Smoothed by 1/8, as TCP's.
        self.rtt = (self.rtt * 7 + rtt) / 8;
    }

    /// `at`, or the end of the last announced lease if that comes first:
    /// a waiter re-checks by then even if no unlock is announced.
    pub(crate) fn bound(&self, now: Instant, at: Instant) -> Instant {
        match self.holder_until {
            Some(until) if until > now => at.min(until),
            _ => at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_companion_shares_the_tail_and_slot() {
        assert_eq!(
            taken_channel("redisson_lock__channel:{a}").as_deref(),
            Some("leasehold_lock__taken:{a}")
        );
        assert_eq!(
            taken_channel("redisson_lock__channel:{a}b").as_deref(),
            Some("leasehold_lock__taken:{a}b")
        );
        assert_eq!(taken_channel("redisson_rwlock:{a}"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_take_voids_deferred_wake_ups_and_bounds_the_recheck() {
        let mut takes = Takes::new();
        let now = Instant::now();
        assert!(!takes.hot(now));
        assert_eq!(takes.taken(now, b"nonsense"), None);
        assert!(!takes.hot(now));
        assert_eq!(
            takes.taken(now, b"250 6a2a8c5e-3f7e-4a43-9e9b-7e5b1f0c9d11:7"),
            Some(Duration::from_millis(250))
        );
        assert!(takes.hot(now));
        // Few contenders: at once.
        assert!(!takes.defer(now));
        for c in 0..64 {
            takes.taken(now, format!("1000 client{c}:1").as_bytes());
        }
        while !takes.defer(now) {}
        let due = takes.due().expect("a deferred wake-up");
        assert!(due - now >= MIN_DELAY && due - now <= MAX_DELAY);
        takes.taken(now, b"30000 x:1");
        assert_eq!(takes.due(), None, "a take voids the deferred wake-up");
        // The last announced lease bounds a re-check.
        let far = now + Duration::from_secs(60);
        assert_eq!(takes.bound(now, far), now + Duration::from_secs(30));
        assert!(!takes.hot(now + HOT));
    }

    #[test]
    fn about_spread_wake_ups_come_at_once_however_many_contend() {
        let mut takes = Takes::new();
        let now = Instant::now();
        takes.rtt = Duration::from_millis(4);
        for c in 0..SPREAD {
            takes.taken(now, format!("1000 client{c}:1").as_bytes());
        }
        assert!((0..100).all(|_| takes.delay(now).is_none()));
        for c in 0..64 {
            takes.taken(now, format!("1000 client{c}:1").as_bytes());
        }
        let draws: Vec<Option<Duration>> = (0..6400).map(|_| takes.delay(now)).collect();
        let at_once = draws.iter().filter(|d| d.is_none()).count();
        // 6400 x 4 / 64 = 400 expected.
        assert!((250..550).contains(&at_once), "{at_once} of 6400 at once");
        for delay in draws.into_iter().flatten() {
            assert!(delay >= Duration::from_millis(8) && delay <= Duration::from_millis(12));
        }
        takes.rtt = Duration::from_secs(1);
        let capped = (0..100).filter_map(|_| takes.delay(now)).max().unwrap();
        assert_eq!(capped, MAX_DELAY);
    }
}

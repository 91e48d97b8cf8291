//! Exponential back-off: the pause before the next retry, doubling from
//! a first pause up to a cap. One place for the rule every retry loop of
//! the crate follows (connecting, re-sending a call whose outcome is
//! unknown, restarting fred's connection task, a wait's connection
//! errors).

use std::time::Duration;

/// The pauses of one retry loop: `first`, then twice the last, at most
/// `max`; [`reset`](Backoff::reset) after a success. Whole milliseconds
/// (small: it lives in every waiting task's future).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Backoff {
    first_ms: u32,
    max_ms: u32,
    next_ms: u32,
}

impl Backoff {
    pub(crate) fn new(first: Duration, max: Duration) -> Backoff {
        let ms = |d: Duration| u32::try_from(d.as_millis()).unwrap_or(u32::MAX).max(1);
        let first_ms = ms(first);
        Backoff {
            first_ms,
            max_ms: ms(max).max(first_ms),
            next_ms: first_ms,
        }
    }

    /// The pause to take now; the one after it doubles (up to the cap).
    pub(crate) fn next(&mut self) -> Duration {
        let pause = self.next_ms;
        self.next_ms = self.next_ms.saturating_mul(2).min(self.max_ms);
        Duration::from_millis(u64::from(pause))
    }

    /// After a success: the next pause is the first again.
    pub(crate) fn reset(&mut self) {
        self.next_ms = self.first_ms;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_cap_and_reset() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(50), ms(300));
        let taken: Vec<_> = (0..5).map(|_| b.next()).collect();
        assert_eq!(taken, [ms(50), ms(100), ms(200), ms(300), ms(300)]);
        b.reset();
        assert_eq!(b.next(), ms(50));
    }
}

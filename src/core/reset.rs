//! Reconnecting a command connection found out of step with its replies,
//! at most once a second, whoever finds it: a lock call given another
//! request's reply or timing out (`call.rs`), renewals unanswered for a
//! command timeout (`conn.rs`), a record batch given another command's
//! reply or none (`forget.rs`). One rate limit for all of them: a burst of
//! such findings reconnects once.

use std::sync::atomic::{AtomicU64, Ordering};

use fred::clients::Client as FredClient;
use fred::interfaces::ClientLike;

use super::background::spawn_here;
use crate::clock::ticks_ms;

/// Whether at least a second passed since the time in `last` (a
/// `clock::ticks_ms` stamp); if so, sets it to now. One caller wins a race.
/// `last` 0 means never: the first call passes (the clock may have
/// started just now, by this very call).
pub(crate) fn once_a_second(last: &AtomicU64) -> bool {
    let now = ticks_ms();
    let then = last.load(Ordering::Relaxed);
    (then == 0 || now.saturating_sub(then) >= 1000)
        && last
            .compare_exchange(then, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
}

/// The resets of one command connection.
#[derive(Debug, Default)]
pub(crate) struct Resets {
    /// When the connection was last reset as suspect (a `clock::ticks_ms` stamp).
    last: AtomicU64,
}

impl Resets {
    /// Reconnects `redis`, unless it was reset less than a second ago (or
    /// there is no runtime to do it on); what was in flight fails and is
    /// sent again by its caller.
    pub(crate) fn suspect(&self, redis: &FredClient, why: &str) {
        if !once_a_second(&self.last) {
            return;
        }
        tracing::warn!(why, "command connection suspect: reconnecting");
        let redis = redis.clone();
        spawn_here(async move {
            let _ = redis.force_reconnection().await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first reset of a process passes, even when it is the call that
    /// starts the clock (it was skipped: a request that timed out right
    /// after start did not reconnect a stuck connection).
    #[test]
    fn the_first_reset_passes_then_once_a_second() {
        let last = AtomicU64::new(0);
        assert!(once_a_second(&last), "the first reset");
        assert!(!once_a_second(&last), "a second one at once");
    }
}

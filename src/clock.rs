//! The crate's two clocks, in one place.
//!
//! * [`epoch_ms`]: the wall clock, in milliseconds since the Unix epoch
//!   ([`epoch_ms_precise`] with their fraction, for the doctor's clock
//!   check).
//!   What goes to Redis as a time: Redisson's scripts score fair waiters
//!   and permits with the client's `System.currentTimeMillis()`, so ours
//!   do too; a client record's start and a wait's start are shown to
//!   operators with it. It may jump; nothing that bounds a hold reads it.
//! * [`ticks_ms`]: a monotonic count of milliseconds since the first call
//!   in this process, never 0 (0 is kept for "never" by the atomics that
//!   store it). For "at most once a second" and "until" stamps kept in an
//!   `AtomicU64`. Everything else that measures time locally uses
//!   `tokio::time::Instant` directly (a hold's signal, the wait loop).

use std::sync::LazyLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Origin of [`ticks_ms`].
static BASE: LazyLock<Instant> = LazyLock::new(Instant::now);

/// The wall clock in epoch milliseconds (0 before 1970, saturating far
/// in the future). See the module docs.
pub(crate) fn epoch_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis().min(i64::MAX as u128) as i64)
}

/// The wall clock in epoch milliseconds with their fraction: for the
/// doctor's comparison with the server's `TIME` (microseconds), where a
/// whole millisecond is too coarse.
pub(crate) fn epoch_ms_precise() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// Monotonic milliseconds since the first call in this process, plus one:
/// never 0. See the module docs.
pub(crate) fn ticks_ms() -> u64 {
    BASE.elapsed().as_millis() as u64 + 1
}

/// The [`ticks_ms`] stamp of `at` (an instant before the first call
/// reads as 1).
pub(crate) fn ticks_of(at: Instant) -> u64 {
    at.saturating_duration_since(*BASE).as_millis() as u64 + 1
}

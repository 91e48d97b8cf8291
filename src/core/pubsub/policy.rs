//! What a message on a channel means: a channel's [`Policy`] reads each
//! message's text and says how many local waiters it wakes ([`Wake`]).
//!
//! The primitive that subscribes picks the policy; the registry applies it
//! to every message of the channel, whether Redis carried it or this
//! process delivered it (`messages.rs`). A policy is a plain function of
//! the message and keeps no state: what its [`Wake`] then does (which
//! waiters, kept permits, a second copy dropped) is the wake-up queue's
//! (`queue.rs`). A reconnect or a lagging stream wakes every waiter
//! whatever the policy.

use super::queue::Wake;

/// What a message on a channel means: how many local waiters it wakes.
pub(crate) type Policy = fn(&[u8]) -> Wake;

/// One unlock message (Redisson's `0`) wakes one waiter.
pub(crate) fn wake_one(_: &[u8]) -> Wake {
    Wake::One
}

/// The message `1` wakes every waiter, any other message one (Redisson's
/// `LockPubSub`: `0` is its unlock message, `1` its "read unlock" message,
/// sent when a release may let several waiters in at once).
pub(crate) fn wake_all_on_one(message: &[u8]) -> Wake {
    if message == b"1" {
        Wake::All
    } else {
        Wake::One
    }
}

/// A message that is a decimal count wakes up to that many waiters, and
/// none for a count <= 0 (Redisson's semaphore messages). A message that
/// is not a number wakes every waiter to re-check.
pub(crate) fn wake_count(message: &[u8]) -> Wake {
    let count = std::str::from_utf8(message)
        .ok()
        .and_then(|text| text.trim().parse::<i64>().ok());
    match count {
        Some(n) if n <= 0 => Wake::N(0),
        Some(n) => Wake::N(usize::try_from(n).unwrap_or(usize::MAX)),
        None => Wake::All,
    }
}

// Under `cfg(leasehold_loom)` pubsub's tests other than the loom models
// are left out (see `sync.rs`).
#[cfg(all(test, not(leasehold_loom)))]
mod tests {
    use super::*;

    #[test]
    fn policies_read_the_message() {
        assert_eq!(wake_one(b"1"), Wake::One);
        assert_eq!(wake_all_on_one(b"1"), Wake::All);
        assert_eq!(wake_all_on_one(b"0"), Wake::One);
        assert_eq!(wake_all_on_one(b"10"), Wake::One);
        assert_eq!(wake_all_on_one(b""), Wake::One);
    }

    #[test]
    fn wake_count_reads_decimal_counts() {
        assert_eq!(wake_count(b"3"), Wake::N(3));
        assert_eq!(wake_count(b"0"), Wake::N(0));
        assert_eq!(wake_count(b"-2"), Wake::N(0));
        assert_eq!(wake_count(b"x"), Wake::All);
        assert_eq!(wake_count(b""), Wake::All);
    }
}

//! What a primitive tells the engine about its leases (a [`Kind`]): how
//! to give a hold back, how to read its scripts' replies, how the watchdog
//! renews them, and which other leases a hold of it excludes.

use std::any::TypeId;
use std::time::Duration;

use super::call::Reply;
use super::lease::Lease;
use super::request::Request;
use super::watchdog::Renewal;

/// What a primitive tells the engine about its leases: how to give a hold
/// back, how to read its scripts' replies, how the watchdog renews them.
pub(crate) trait Kind: std::fmt::Debug + Send + Sync + 'static {
    /// The kind's identity: its type. Leases of one kind on one key and
    /// owner share one record; kinds that count the same holds (the plain
    /// and the fenced lock) are one kind. No hand-picked tag.
    fn id(&self) -> TypeId {
        TypeId::of::<Self>()
    }

    /// What gives back `count` holds of `lease` (the engine makes it a
    /// recorded call: `request.rs`); `ttl_ms` is the TTL the key keeps if
    /// holds remain.
    fn release(&self, lease: &Lease, count: u32, ttl_ms: i64) -> Request;
    /// Reads an acquire script's reply (without the request id). The
    /// default reads the lock family's shape: `{1, count, …}` held (the
    /// field's new hold count), `{0, pttl}` busy (retry after the key's
    /// TTL; -1: none known).
    fn acquire_reply(&self, reply: &[i64]) -> AcquireReply {
        match reply {
            [1, count, ..] => AcquireReply::Held {
                count: (*count).clamp(1, u32::MAX as i64) as u32,
                token: None,
            },
            _ => AcquireReply::busy(reply),
        }
    }
    /// Reads a release script's reply (without the request id). The
    /// default reads the lock family's shape: `{1}` holds remain, `{2}`
    /// freed, `{0}` the field was gone, `{3}` [gone where the release
    /// would have freed it](ReleaseReply::Gone).
    fn release_reply(&self, reply: &Reply) -> ReleaseReply {
        match reply.first() {
            Some(1) => ReleaseReply::Remaining,
            Some(2) => ReleaseReply::Freed,
            Some(3) => ReleaseReply::Gone,
            _ => ReleaseReply::NotHeld,
        }
    }
    /// Called with every release reply of `lease` once it is applied, for
    /// follow-up work the kind starts itself (e.g. a task that checks later
    /// that the waiter its release told took over, or handing a waiter of
    /// this process what the release granted it). Runs before the caller's
    /// unlock returns, so it must not block; the default does nothing.
    fn after_release(&self, _lease: &Lease, _reply: &Reply) {}
    /// How the watchdog renews (or checks) this kind's leases.
    fn renewal(&self) -> &'static Renewal;
    /// Whether a refused acquire of a lease proves that the lease's field
    /// is missing from Redis (every lock kind: a try of an owner whose
    /// field exists re-enters). Then an owner's own refused try ends the
    /// holds it counted (see [`Lease::busy_seen`]). A semaphore's try is a
    /// new permit, which proves nothing of the others.
    fn busy_proves_gone(&self) -> bool {
        true
    }
    /// Whether the watchdog also renews this kind's fixed-term holds, up
    /// to their deadline and never past it: for a key another library's
    /// owners share and may cut the TTL of (Redisson's read renewal *sets*
    /// the read-write hash's TTL to its own watchdog timeout). Such a
    /// kind's renewal entries carry their own TTL (see
    /// [`Lease::renew_ttl`]). The default: fixed holds are never renewed.
    fn renews_fixed(&self) -> bool {
        false
    }
    /// Whether holding `mine` proves that `other` (another owner's lease on
    /// the same key, of any kind) cannot be held: then a successful acquire
    /// of `mine` ends `other`'s incarnation at once.
    fn excludes(&self, mine: &Lease, other: &Lease) -> bool;
}

/// What an acquire script found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// The caller now holds it: the field's new hold count, and a fencing
    /// token if the kind hands them out.
    Held { count: u32, token: Option<u64> },
    /// Someone else holds it; retry after about this long (`None`: no
    /// expiry is known, re-check at the client's recheck interval).
    Busy(Option<Duration>),
}

/// What a release script found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReleaseReply {
    /// The field was missing: nothing was held, nothing changed.
    NotHeld,
    /// Given back; holds of the field remain.
    Remaining,
    /// Given back; the lock is free (and waiters were told).
    Freed,
    /// The field was gone where the release would have freed the lock:
    /// a copy of this request freed it before, or the hold was lost
    /// before the request ran, and Redis keeps nothing that tells which
    /// (the release wrote no request record: its first run was proved by
    /// the count). Only a [`Kind`] returns it; `Lease::apply_release`
    /// settles it as [`Freed`](Self::Freed) or [`NotHeld`](Self::NotHeld).
    Gone,
}

// === impl AcquireReply ===

impl AcquireReply {
    /// A refusal in the lock family's shape, `{_, pttl, …}`: retry after
    /// the key's TTL, and 1 ms more (-1, or no TTL: none known).
    pub(crate) fn busy(reply: &[i64]) -> AcquireReply {
        match reply {
            [_, ttl, ..] if *ttl >= 0 => {
                AcquireReply::Busy(Some(Duration::from_millis(*ttl as u64 + 1)))
            }
            _ => AcquireReply::Busy(None),
        }
    }
}

//! How a kind of lease is renewed: the scripts a kind gives the watchdog
//! ([`Renewal`], and [`PackedScripts`] where it packs a batch in one
//! argument) and the TTL argument they take ([`ttl_ms`]); each lease's
//! entry is written by its kind (`Kind::renew_entry`, `Kind::renew_packed`).
//!
//! # The scripts' contract
//!
//! Every renewal script of every kind takes the same arguments and gives
//! the same reply (see [`Renewal`]): a nonce, the TTL (0: only check),
//! then the entries; it answers with the nonce and the entries whose hold
//! is gone, and a node script also with those its node does not serve.
//! It changes nothing but the TTLs of the fields it finds, so the
//! watchdog may send a batch again (`send.rs`).

use std::time::Duration;

use crate::core::script::Script;

/// The scripts one kind of lease is renewed with: plain data a
/// [`Kind`](crate::core::kind::Kind) returns; each lease adds its entry
/// with the kind's `renew_entry` or `renew_packed`.
///
/// Every script takes `ARGV[1]` = a nonce, `ARGV[2]` = the TTL in ms (0:
/// only check), then one entry per lease, and replies `{nonce, i for each
/// entry whose hold is gone}`: the nonce tells the batch's reply from any
/// other (a connection out of step). A node script may also answer `-i`
/// for an entry whose key the node does not serve (a slot moved or moving;
/// `redis.pcall` catches the refusal): those entries are sent again per
/// slot.
#[derive(Debug)]
pub(crate) struct Renewal {
    /// Declared keys, one hash slot per call.
    pub(crate) slot: &'static Script,
    /// Every slot of one node per call (Redis 7+ clusters): no declared
    /// key (the call is sent to the node itself), the entries are
    /// arguments; same reply. For a kind without packed scripts.
    pub(crate) node: Option<&'static Script>,
    /// Scripts that take the batch's entries packed in one argument
    /// (`ARGV[3]`, see `pack.rs`) after the same nonce and TTL, and give
    /// the same replies as their unpacked counterparts, if the kind has them
    /// (else a single server's batches go as slot calls, a node's with
    /// `node`).
    pub(crate) packed: Option<PackedScripts>,
}

/// A kind's packed renewal scripts (see [`Renewal::packed`]).
#[derive(Debug)]
pub(crate) struct PackedScripts {
    /// For a single server.
    pub(crate) server: &'static Script,
    /// For one cluster node, as [`Renewal::node`].
    pub(crate) node: &'static Script,
}

/// A TTL as the scripts take it.
pub(crate) fn ttl_ms(ttl: Duration) -> i64 {
    ttl.as_millis().min(i64::MAX as u128) as i64
}

// === impl Renewal ===

impl Renewal {
    /// Whether the kind has a script for whole-node batches.
    pub(super) fn per_node(&self) -> bool {
        self.packed.is_some() || self.node.is_some()
    }
}

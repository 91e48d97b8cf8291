//! A cycle's leases cut into calls: grouped by connection, by the kind's
//! renewal and by where they live ([`Target`]: the single server, a
//! cluster node or a slot), each group cut into chunks of up to
//! `batch_size` leases, in one pass over the leases; then every chunk is
//! sent at once (`send.rs`).
//!
//! # Guarantees
//!
//! * **A whole node per call.** On a cluster, for a kind with a node
//!   script, leases are grouped by the node their slot is on; otherwise
//!   (a slot with no known node) by slot.
//! * **A bounded argument.** A chunk sent packed (a single server or a
//!   node, for a kind with packed scripts) has its entries packed as they
//!   are added, and takes no more once its argument reaches 512 KiB: it
//!   stays under the smallest `proto-max-bulk-len` a server accepts.
//! * **Every call counted.** [`renew`] returns the number of script calls
//!   sent, calls sent again included.

use std::collections::HashMap;
use std::time::Duration;

use fred::types::config::Server;
use tokio::task::JoinSet;

use super::renewal::Renewal;
use super::send::send_batch;
use crate::core::conn::Conn;
use crate::core::lease::Sent;
use crate::core::pack::Pack;

/// The leases one renewal call can carry: one connection, one renewal
/// kind, one target.
type Group = (u64, usize, Target);

/// Up to a batch of one group's leases: one call.
pub(super) struct Chunk {
    pub(super) leases: Vec<Sent>,
    /// Their entries, packed as they were added, if the chunk is sent
    /// packed.
    pub(super) pack: Option<Pack>,
}

/// Where a batch goes.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(super) enum Target {
    Server,
    Slot(u16),
    Node(Server),
}

/// A packed chunk takes no more entries once its argument is this long, so
/// the argument stays under 1 MB (the smallest `proto-max-bulk-len` a
/// server accepts) unless one entry is itself near that size.
const PACK_BUDGET: usize = 512 * 1024;

/// Renews (or, with `ttl` 0, checks) `leases` in batches; returns the
/// number of script calls sent.
pub(super) async fn renew(
    leases: impl IntoIterator<Item = Sent>,
    ttl: Duration,
    interval: Duration,
    batch: usize,
) -> u64 {
    // Groups by (connection, renewal kind, target), cut into chunks of
    // `batch` as leases are added (packed at once where the chunk will be
    // sent packed): one pass over the leases. The group of the previous
    // lease is tried first; a single server has one group per kind.
    let mut groups: Vec<(Group, &'static Renewal, Vec<Chunk>)> = Vec::new();
    let mut index: HashMap<Group, usize> = HashMap::new();
    let mut last = usize::MAX;
    for sent in leases {
        let lease = &sent.lease;
        let renewal = lease.kind.renewal();
        let target = target(&lease.conn, lease.key_bytes(), renewal);
        let group = (lease.conn.id, renewal as *const Renewal as usize, target);
        if groups.get(last).is_none_or(|(g, ..)| *g != group) {
            last = *index.entry(group.clone()).or_insert_with(|| {
                groups.push((group, renewal, Vec::new()));
                groups.len() - 1
            });
        }
        let ((_, _, target), renewal, chunks) = &mut groups[last];
        let chunk = match chunks.last_mut() {
            Some(chunk) if chunk.leases.len() < batch && !chunk.pack_full() => chunk,
            _ => {
                let packed = match target {
                    Target::Server | Target::Node(_) => renewal.packed.is_some(),
                    Target::Slot(_) => false,
                };
                chunks.push(Chunk::new(batch, packed));
                let Some(chunk) = chunks.last_mut() else {
                    continue;
                };
                chunk
            }
        };
        if let Some(pack) = &mut chunk.pack {
            lease.kind.renew_packed(lease, pack);
        }
        chunk.leases.push(sent);
    }
    let mut calls = 0;
    let mut batches = JoinSet::new();
    for ((_, _, target), _, chunks) in groups {
        for chunk in chunks {
            calls += 1;
            batches.spawn(send_batch(chunk, target.clone(), ttl, interval));
        }
    }
    while let Some(done) = batches.join_next().await {
        calls += done.unwrap_or(0);
    }
    calls
}

fn target(conn: &Conn, key: &[u8], renewal: &Renewal) -> Target {
    if !conn.clustered {
        return Target::Server;
    }
    let slot = fred::util::redis_keyslot(key);
    if conn.node_batches && renewal.per_node() {
        conn.node_of(slot).map_or(Target::Slot(slot), Target::Node)
    } else {
        Target::Slot(slot)
    }
}

// === impl Chunk ===

impl Chunk {
    fn pack_full(&self) -> bool {
        self.pack.as_ref().is_some_and(|p| p.len() >= PACK_BUDGET)
    }

    fn new(batch: usize, packed: bool) -> Chunk {
        // Room for a full batch, bounded: a huge batch size grows as needed.
        let room = batch.min(4096);
        Chunk {
            leases: Vec::with_capacity(room),
            pack: packed.then(|| Pack::with_capacity(room * 64)),
        }
    }
}

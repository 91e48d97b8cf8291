//! Lease renewal: one registry and one task per [`Watchdog`] for every
//! lease held through it, whatever the lock kind and client.
//!
//! # The cycle
//!
//! Every renew interval (default `timeout / 3`) the task takes a snapshot
//! of the registry, groups the leases by connection, by the kind's renewal
//! script and by where they live, and sends the batches all at once, each
//! bounded by half the interval:
//!
//! * **A single server**: batches of up to `batch_size` leases. A kind
//!   with a packed script (the hash locks) sends each batch's keys and
//!   fields in one argument (`pack.rs`): the driver then handles three
//!   values per call instead of two per lease; a batch is cut early once
//!   its argument reaches 512 KiB, to stay under any server's
//!   `proto-max-bulk-len`. A packed batch that fails is sent again with
//!   its keys declared.
//! * **A cluster** (any version): one batch per *node*
//!   (`renew_node_packed.lua` for the hash locks, `renew_read_node.lua` for
//!   read locks; no `#!lua` flags line, which a node over `maxmemory`
//!   would refuse up front), so 10,000 leases spread over every
//!   slot still cost about `leases / batch_size` calls per node. It
//!   declares no key and is sent to the node itself, so no redirection can
//!   bounce it; the entries the node no longer serves (a slot moved away,
//!   or moving) are sent again as one call per slot, all at once. A node batch that fails is sent once more. A slot
//!   with no known node gets per-slot batches, likewise sent concurrently. Per-slot calls follow
//!   redirections as every script call does (`script.rs`): a slot on the
//!   move costs a transaction, never a reply handed to the wrong request.
//!
//! For each lease the reply says renewed or gone:
//!
//! * renewed: Redis keeps it at least until *send time* + `timeout`, and
//!   the lease's signal learns so — unless an acquire or release of that
//!   lease was sent meanwhile (it knows better);
//! * gone: the field is missing; the lease's incarnation ends and its
//!   guards are told, unless a newer acquire already replaced it;
//! * no answer: if the lease could expire before the next cycle's verdict,
//!   it is declared lost *now*, while Redis still keeps it (at least
//!   `timeout / 6` before, with the default interval). The call goes on
//!   until the next cycle: a reply that comes by then is still applied
//!   (it says how long Redis keeps each key from the send time), so a
//!   server slower than the bound but faster than the interval keeps its
//!   leases.
//!
//! # Client records
//!
//! The same cycle renews the record of every client using the watchdog
//! (`registry.rs`): one `PEXPIRE` per client, sent beside the renewal
//! batches and bounded the same way; the task is started by the first
//! record as by the first lease.
//!
//! # Reconnect checks
//!
//! After any reconnect of a client's command connection, [`check`] sends
//! one batched renewal of every lease the client holds (fixed leases only
//! checked, not extended): a server that restarted without persistence, or
//! failed over, is noticed at once instead of at the next renewal.
//!
//! # Where the task runs
//!
//! Renewal tasks run on one small runtime of their own, on a thread named
//! `leasehold-watchdog`, so a lease is renewed whichever runtime its client
//! lives on, and the end of one runtime does not stop the renewal of
//! another's leases. A lease whose client's runtime is gone fails to renew
//! and is declared lost.
//!
//! # Files
//!
//! | file | its one job |
//! | --- | --- |
//! | `handle.rs` | [`Watchdog`]: its settings, the process-wide one, registering leases and client records |
//! | `cycle.rs` | the renewal task and its thread: every interval, every lease and client record renewed; the reconnect [`check`] |
//! | `renewal.rs` | how a kind is renewed: [`Renewal`] and [`PackedScripts`], their replies (each lease's entry is its kind's: `Kind::renew_entry`) |
//! | `batch.rs` | a cycle's leases cut into calls: grouped by connection, renewal and target (server, node or slot), chunked |
//! | `send.rs` | one chunk sent: whole (to a node, or packed) or per slot, in a transaction for a migrating slot; sent again on failure |
//! | `verdict.rs` | a reply read and applied (renewed, gone, elsewhere); no reply in time: leases that could expire declared lost |

mod batch;
mod cycle;
mod handle;
mod renewal;
mod send;
mod verdict;

pub(crate) use cycle::check;
pub use handle::Watchdog;
pub(crate) use renewal::{ttl_ms, PackedScripts, Renewal};
pub(crate) use verdict::gone_entries;

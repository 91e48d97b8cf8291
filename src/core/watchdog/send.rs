//! One chunk sent: whole (to a cluster node, or packed to a single server)
//! or as one call per slot, and what is sent again when a call fails or a
//! node does not serve some of its keys.
//!
//! # Guarantees
//!
//! * **No redirection can bounce a node call.** A node batch declares no
//!   key and goes to the node itself; the entries whose keys the node does
//!   not serve come back as such and are sent again per slot, all at once.
//! * **A migrating slot costs a transaction, never a reply handed to the
//!   wrong request.** Entries a node does not serve, in a slot fred still
//!   maps to that node after a refresh, are at the importing node: they
//!   are renewed there in a transaction (`ASKING`, see `script.rs`).
//!   Other per-slot calls follow redirections as every script call does.
//! * **A whole batch is sent at most twice.** It changes nothing but the
//!   TTLs of the fields it finds, so one whose reply is lost or garbled is
//!   sent once more (a packed one with its keys declared, per slot); then
//!   it is given up (`verdict.rs`).
//! * **No batch shape can cost a lease.** A node batch the server refuses
//!   with an error (a keyless script where keys must be declared, a
//!   script it will not run now) goes again in the same cycle as per-slot
//!   calls with their keys declared; and no per-slot call carries more
//!   than [`MAX_ARGS`] arguments.
//! * **Bounded.** Each call's verdict is awaited until half the interval
//!   from the chunk's start, and entries sent again elsewhere get a bound
//!   of their own (`verdict.rs`: a late reply still counts until the next
//!   cycle).

use std::collections::HashMap;
use std::time::Duration;

use fred::bytes::Bytes;
use fred::types::config::Server;
use fred::types::Value;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::batch::{Chunk, Target};
use super::renewal::ttl_ms;
use super::verdict::{apply, give_up, verdict, BatchEnd};
use crate::core::lease::Sent;
use crate::core::script::Script;
use crate::error::server_code;

/// The most arguments (keys included) one per-slot call carries, with the
/// command, script and key count: ElastiCache Serverless refuses a request
/// of more than 3,999 arguments.
const MAX_ARGS: usize = 3_990;

/// How a whole batch goes in one call.
enum Whole {
    /// To one cluster node, the entries as arguments, or packed.
    Node(Server, &'static Script, Option<Bytes>),
    /// To a single server, the entries packed in one argument.
    Packed(&'static Script, Bytes),
}

/// How per-slot renewals are sent.
#[derive(Clone, Debug)]
enum Route {
    /// As every script call: fred follows redirections.
    Plain,
    /// Entries that node reported it does not serve, at the given time:
    /// if fred still maps their slot to it after a refresh started since,
    /// the slot is migrating and the keys are at the importing node,
    /// reachable only with `ASKING`: renewed in a transaction (see
    /// `script.rs`).
    NotOn(Server, Instant),
}

/// Sends one batch (one connection, one renewal kind, one target); returns
/// the extra calls sent (a batch sent again, or entries the node did not
/// serve sent per slot).
pub(super) async fn send_batch(
    chunk: Chunk,
    target: Target,
    ttl: Duration,
    interval: Duration,
) -> u64 {
    let until = Instant::now() + interval / 2;
    let Chunk {
        leases: batch,
        pack,
    } = chunk;
    let renewal = batch[0].lease.kind.renewal();
    let whole = match (target, renewal.node, &renewal.packed, pack) {
        (Target::Node(node), _, Some(packed), Some(pack)) => {
            Whole::Node(node, packed.node, Some(pack.finish()))
        }
        (Target::Node(node), Some(script), ..) => Whole::Node(node, script, None),
        (Target::Server, _, Some(packed), Some(pack)) => {
            Whole::Packed(packed.server, pack.finish())
        }
        _ => {
            per_slot(vec![batch], ttl, interval, until, Route::Plain).await;
            return 0;
        }
    };
    let conn = batch[0].lease.conn.clone();
    // A whole batch changes nothing but TTLs of fields it finds, so it is
    // sent once more if its reply is lost or garbled (not split per slot:
    // a thousand single-slot calls at once would only add load). A packed
    // batch is sent again with its keys declared, which also serves a
    // server that refuses scripts touching undeclared keys.
    let mut extra = 0;
    for last in [false, true] {
        let nonce = conn.rid() as i64;
        let mut args: Vec<Value> = Vec::with_capacity(3 + batch.len() * 2);
        args.push(Value::Integer(nonce));
        args.push(Value::Integer(ttl_ms(ttl)));
        match &whole {
            Whole::Node(_, _, Some(pack)) | Whole::Packed(_, pack) => {
                args.push(Value::Bytes(pack.clone()));
            }
            Whole::Node(_, _, None) => {
                for sent in &batch {
                    sent.lease
                        .kind
                        .renew_entry(&sent.lease, &mut Vec::new(), &mut args, true);
                }
            }
        }
        let sent_at = Instant::now();
        let call = async {
            match &whole {
                // No declared key: sent to the node itself, nothing can
                // redirect it; the script answers `-i` for each entry the
                // node does not serve.
                Whole::Node(node, script, _) => {
                    script.run_on::<Vec<i64>>(&conn.redis, node, args).await
                }
                Whole::Packed(script, _) => script.run::<Vec<i64>>(&conn.redis, &[], &args).await,
            }
        };
        match verdict(call, &conn, nonce, &batch, sent_at, until, ttl, interval).await {
            BatchEnd::Verdict(verdict) => {
                let elsewhere = apply(&batch, verdict, sent_at, ttl);
                if let (false, Whole::Node(node, ..)) = (elsewhere.is_empty(), &whole) {
                    tracing::debug!(
                        leases = elsewhere.len(),
                        "keys not on the node: renewing them per slot"
                    );
                    let asked = Instant::now();
                    let route = Route::NotOn(node.clone(), asked);
                    let fresh = asked + interval / 2;
                    extra += per_slot(vec![elsewhere], ttl, interval, fresh, route).await;
                } else {
                    // Only a node batch answers "not here".
                    debug_assert!(elsewhere.is_empty());
                    give_up(&elsewhere, sent_at, interval);
                }
                return extra;
            }
            BatchEnd::Late => return extra,
            BatchEnd::Failed(e) if !last => {
                tracing::debug!(error = %e, leases = batch.len(), "batch failed: sending it again");
                // A server that answered with an error refused the batch's
                // shape (a keyless script on ElastiCache Serverless, a
                // script a node will not run now): the same leases go
                // again in this cycle as per-slot calls with their keys
                // declared, which such a server runs.
                if matches!(whole, Whole::Packed(..)) || server_code(&e).is_some() {
                    return extra + per_slot(vec![batch], ttl, interval, until, Route::Plain).await;
                }
                extra += 1;
            }
            BatchEnd::Failed(e) => {
                tracing::warn!(error = %e, leases = batch.len(), "lease renewal failed");
                give_up(&batch, sent_at, interval);
                return extra;
            }
        }
    }
    extra
}

/// Renews `batches` as one call per slot (on a single server, one call),
/// all at once, within `until`; returns the number of calls sent.
async fn per_slot(
    batches: Vec<Vec<Sent>>,
    ttl: Duration,
    interval: Duration,
    until: Instant,
    route: Route,
) -> u64 {
    // One group per slot (a single server: one group).
    let mut slots: HashMap<u16, Vec<Sent>> = HashMap::new();
    for sent in batches.into_iter().flatten() {
        let slot = if sent.lease.conn.clustered {
            fred::util::redis_keyslot(sent.lease.key_bytes())
        } else {
            0
        };
        slots.entry(slot).or_default().push(sent);
    }
    let Some(conn) = slots
        .values()
        .next()
        .map(|leases| leases[0].lease.conn.clone())
    else {
        return 0;
    };
    // Slots fred still maps to the node that does not serve them: moved
    // (fred's map is stale: refreshed, once for every batch that asks at
    // the same time) or migrating (the keys are at the importing node: a
    // transaction reaches them).
    let mut migrating = std::collections::HashSet::new();
    if let Route::NotOn(node, asked) = &route {
        let stale = |slot: &u16| conn.node_of(*slot).as_ref() == Some(node);
        if slots.keys().any(stale) {
            conn.refresh_slots_since(*asked).await;
            migrating.extend(slots.keys().copied().filter(stale));
        }
    }
    // Each slot's leases cut into calls of at most MAX_ARGS arguments.
    let mut calls_per_slot: Vec<(u16, Vec<Sent>)> = Vec::with_capacity(slots.len());
    for (slot, mut leases) in slots {
        let per_lease = {
            let (mut keys, mut args) = (Vec::new(), Vec::new());
            let lease = &leases[0].lease;
            lease.kind.renew_entry(lease, &mut keys, &mut args, false);
            (keys.len() + args.len()).max(1)
        };
        let most = ((MAX_ARGS - 2) / per_lease).max(1);
        while leases.len() > most {
            let rest = leases.split_off(most);
            calls_per_slot.push((slot, leases));
            leases = rest;
        }
        calls_per_slot.push((slot, leases));
    }
    let calls = calls_per_slot.len() as u64;
    let mut set = JoinSet::new();
    for (slot, leases) in calls_per_slot {
        let in_transaction = migrating.contains(&slot);
        set.spawn(async move {
            let renewal = leases[0].lease.kind.renewal();
            let conn = leases[0].lease.conn.clone();
            let nonce = conn.rid() as i64;
            let mut keys = Vec::with_capacity(leases.len());
            let mut args = Vec::with_capacity(2 + leases.len());
            args.push(Value::Integer(nonce));
            args.push(Value::Integer(ttl_ms(ttl)));
            for sent in &leases {
                sent.lease.kind.renew_entry(&sent.lease, &mut keys, &mut args, false);
            }
            let sent_at = Instant::now();
            let call = async {
                if in_transaction {
                    renewal.slot.run_in_transaction::<Vec<i64>>(&conn.redis, keys, args).await
                } else {
                    renewal.slot.run::<Vec<i64>>(&conn.redis, &keys, &args).await
                }
            };
            match verdict(call, &conn, nonce, &leases, sent_at, until, ttl, interval).await {
                BatchEnd::Verdict(verdict) => {
                    // A per-slot script serves every key it names: nothing
                    // comes back as "elsewhere".
                    let elsewhere = apply(&leases, verdict, sent_at, ttl);
                    debug_assert!(elsewhere.is_empty());
                    give_up(&elsewhere, sent_at, interval);
                }
                BatchEnd::Late => {}
                BatchEnd::Failed(e) => {
                    tracing::warn!(error = %e, leases = leases.len(), in_transaction, "lease renewal (per slot) failed");
                    give_up(&leases, sent_at, interval);
                }
            }
        });
    }
    while set.join_next().await.is_some() {}
    calls
}

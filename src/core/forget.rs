//! Request records are deleted once their calls have ended, so Redis is
//! left as it was found.
//!
//! A recorded call writes a request record (`call.rs`; a call sent only as
//! a twin without the record, `script.rs`, writes none and hands nothing
//! over). It is needed
//! while its call is in progress: a re-sent copy finds it and replays the
//! first run's reply. Once the call's reply is in, and the connection that
//! answered is the only one of the client on that server that could still
//! hold a copy (fred's replaced connections are killed first: `fence.rs`),
//! no copy of the request can reach Redis any more, and the record is
//! waste: Redis memory for the record's TTL, for every lock name used (a
//! lock per order id leaves one per order; BENCHMARKS.md, "Sizes behind
//! the code").
//!
//! So the owner of a call hands its record to [`Forget`] when it is done
//! with the call (never before: a background job that may be run again
//! from the start forgets its records only at its end). Records are
//! deleted in batches every [`EVERY`]: one script call for a single
//! server (`scripts/forget.lua`), one per node on a Redis 7 cluster
//! (`scripts/forget_node.lua`, sent to the node by address), one per slot
//! on an older cluster. A record is deleted only while it holds the
//! newest request handed over for it or an older one: the calls of one
//! record run one at a time under its owner's turn, so an older request's
//! call has ended too (a later call that wrote no record, a refused try,
//! must not keep an older record alive), while a newer request of the
//! same owner may have written it since and still need it. A call whose
//! outcome stayed unknown is never handed over: its record keeps its TTL.
//!
//! Cost: one script call per batch (and node), and a `GET` (and a `DEL`)
//! per distinct record in the batch; a lock taken and given back in a loop
//! costs one record per batch, not per pair. The batches are sent with
//! `EVAL` (the script is short): in `INFO commandstats` this housekeeping
//! counts apart from the lock scripts' `EVALSHA`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client as FredClient;
use fred::types::config::Server;
use fred::types::{Key, Value};

use super::fence::Fence;
use super::reset::Resets;
use super::script::Script;

/// How long records handed over wait before they are deleted together.
pub(crate) const EVERY: Duration = Duration::from_millis(100);

/// The most records one script call deletes.
const BATCH: usize = 512;

/// The batch script by declared keys (one slot).
static BY_KEYS: Script = Script::plain("forget", include_str!("scripts/forget.lua"));
/// The batch script per cluster node.
static BY_NODE: Script = Script::plain("forget_node", include_str!("scripts/forget_node.lua"));

/// Where a client's batches go.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Route {
    /// A Redis Cluster.
    pub(crate) clustered: bool,
    /// Its servers take script flags (Redis 7+): one call per node.
    pub(crate) per_node: bool,
}

/// Where one group of records goes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Target {
    /// The single server, or one slot (by declared keys).
    Slot(u16),
    /// One cluster node, by address.
    Node(Server),
}

/// Request records to delete, and the task that deletes them.
#[derive(Debug)]
pub(crate) struct Forget {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The command connection the batches go on.
    redis: FredClient,
    route: Route,
    /// Checked before a batch (a replaced connection whose kill failed may
    /// still hold a copy).
    fence: Arc<Fence>,
    /// The connection's resets, shared with its lock calls.
    resets: Arc<Resets>,
    /// (record, request id) handed over since the last batch.
    queue: parking_lot::Mutex<Vec<(Key, u64)>>,
    /// A task is due to delete the queue.
    armed: AtomicBool,
    /// Script calls made, records checked and records deleted (for tests
    /// that count Redis commands: `__bench::forgotten`).
    calls: AtomicU64,
    checked: AtomicU64,
    deleted: AtomicU64,
}

/// What [`Forget`] has made Redis do: script calls, records read (one
/// `GET` each), records deleted (one `DEL` each).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Forgotten {
    pub(crate) calls: u64,
    pub(crate) checked: u64,
    pub(crate) deleted: u64,
}

impl Forget {
    /// Deletes records on `redis` (routed by `route`), checking `fence`
    /// first and resetting the connection through `resets` when a batch
    /// finds it out of step.
    pub(crate) fn new(
        redis: &FredClient,
        route: Route,
        fence: Arc<Fence>,
        resets: Arc<Resets>,
    ) -> Forget {
        Forget {
            inner: Arc::new(Inner {
                redis: redis.clone(),
                route,
                fence,
                resets,
                queue: parking_lot::Mutex::default(),
                armed: AtomicBool::new(false),
                calls: AtomicU64::new(0),
                checked: AtomicU64::new(0),
                deleted: AtomicU64::new(0),
            }),
        }
    }

    /// Hands over `record`, which request `rid` wrote and whose call has
    /// ended: it is deleted within about [`EVERY`], unless a newer request
    /// has written it by then. Without a runtime to delete it on, the
    /// record keeps its TTL.
    pub(crate) fn push(&self, record: Key, rid: u64) {
        self.inner.queue.lock().push((record, rid));
        if self.inner.armed.load(Ordering::Relaxed) || self.inner.armed.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.inner.queue.lock().clear();
            self.inner.armed.store(false, Ordering::Release);
            return;
        };
        let inner = self.inner.clone();
        drop(runtime.spawn(async move { inner.run().await }));
    }

    /// What the batches have made Redis do so far.
    pub(crate) fn forgotten(&self) -> Forgotten {
        Forgotten {
            calls: self.inner.calls.load(Ordering::Relaxed),
            checked: self.inner.checked.load(Ordering::Relaxed),
            deleted: self.inner.deleted.load(Ordering::Relaxed),
        }
    }
}

impl Inner {
    /// Deletes batches every [`EVERY`] until the queue stays empty.
    async fn run(&self) {
        let (redis, fence) = (&self.redis, &self.fence);
        loop {
            tokio::time::sleep(EVERY).await;
            let batch = std::mem::take(&mut *self.queue.lock());
            if batch.is_empty() {
                self.armed.store(false, Ordering::Release);
                // A push that saw the task armed just before: go on.
                if self.queue.lock().is_empty() || self.armed.swap(true, Ordering::AcqRel) {
                    return;
                }
                continue;
            }
            // The fence stopped being trusted since these were handed
            // over (a refusal): they keep their TTL.
            if !fence.trusted() {
                tracing::debug!(
                    records = batch.len(),
                    "records kept: the fence is not known to work"
                );
                continue;
            }
            // A connection replaced since a reply was trusted, and not yet
            // killed (its kill failed): a copy may still be on it.
            if fence.moved(redis) || fence.dirty() {
                if let Err(e) = fence.sweep(redis).await {
                    tracing::debug!(error = %e, records = batch.len(), "records kept: a replaced connection could not be killed");
                    continue;
                }
            }
            self.delete(batch).await;
        }
    }

    /// Deletes `batch` (the newest request per record), one call per
    /// target and per [`BATCH`] records.
    async fn delete(&self, batch: Vec<(Key, u64)>) {
        let (redis, route) = (&self.redis, self.route);
        let mut newest: HashMap<Key, u64> = HashMap::with_capacity(batch.len());
        for (record, rid) in batch {
            let at = newest.entry(record).or_insert(rid);
            *at = (*at).max(rid);
        }
        let mut groups: HashMap<Target, Vec<(Key, u64)>> = HashMap::new();
        for (record, rid) in newest {
            groups
                .entry(target(redis, route, &record))
                .or_default()
                .push((record, rid));
        }
        for (target, group) in groups {
            for chunk in group.chunks(BATCH) {
                self.calls.fetch_add(1, Ordering::Relaxed);
                self.checked
                    .fetch_add(chunk.len() as u64, Ordering::Relaxed);
                let sent = match &target {
                    Target::Slot(_) => {
                        let keys: Vec<Key> =
                            chunk.iter().map(|(record, _)| record.clone()).collect();
                        let args: Vec<Value> = chunk
                            .iter()
                            .map(|(_, rid)| Value::Integer(*rid as i64))
                            .collect();
                        BY_KEYS.eval::<Value>(redis, None, keys, args).await
                    }
                    Target::Node(node) => {
                        let args = chunk
                            .iter()
                            .flat_map(|(record, rid)| {
                                [Value::from(record.clone()), Value::Integer(*rid as i64)]
                            })
                            .collect();
                        BY_NODE
                            .eval::<Value>(redis, Some(node), Vec::new(), args)
                            .await
                    }
                };
                match sent.map(|reply| forgot(&reply)) {
                    Ok(Some(deleted)) => {
                        self.deleted.fetch_add(deleted, Ordering::Relaxed);
                    }
                    outcome => {
                        // A reply meant for another command, or none in
                        // time: the connection may be out of step with its
                        // replies (requests lost on the way), and the lock
                        // calls behind this one would take the wrong ones.
                        // Start it afresh, as a lock call would
                        // (`reset.rs`).
                        tracing::debug!(
                            ?outcome,
                            records = chunk.len(),
                            "records not deleted; they run out with their TTL"
                        );
                        let timed_out = matches!(&outcome, Err(e) if e.kind() == &fred::error::ErrorKind::Timeout);
                        if matches!(outcome, Ok(None)) || timed_out {
                            self.resets.suspect(
                                redis,
                                "a record batch got another command's reply, or none",
                            );
                        }
                    }
                }
            }
        }
    }
}

/// The count in a batch's reply (`{"forgot", n}`), or `None` if it is
/// not one.
fn forgot(reply: &Value) -> Option<u64> {
    match reply {
        Value::Array(items) => match items.as_slice() {
            [word, n] if word.as_str().as_deref() == Some("forgot") => {
                n.as_i64().map(|n| n.max(0) as u64)
            }
            _ => None,
        },
        _ => None,
    }
}

/// Where `record`'s batch goes.
fn target(redis: &FredClient, route: Route, record: &Key) -> Target {
    if !route.clustered {
        return Target::Slot(0);
    }
    let slot = fred::util::redis_keyslot(record.as_bytes());
    if route.per_node {
        use fred::interfaces::ClusterInterface;
        if let Some(node) = redis
            .cached_cluster_state()
            .and_then(|state| state.get_server(slot).cloned())
        {
            return Target::Node(node);
        }
    }
    Target::Slot(slot)
}

/// Each script's pieces share only what they declare together
/// (`core/lua_lint.rs`).
#[cfg(test)]
mod lua_lint {
    use super::*;

    #[test]
    fn pieces_share_only_what_they_declare() {
        crate::core::lua_lint::check(&[&BY_KEYS, &BY_NODE]);
    }
}

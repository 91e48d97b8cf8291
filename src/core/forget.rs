//! Request records are deleted once their calls have ended, so Redis is
//! left as it was found.
//!
//! Every latched call writes a request record (`call.rs`). It is needed
//! while its call is in progress: a re-sent copy finds it and replays the
//! first run's reply. Once the call's reply is in, and the connection that
//! answered is the only one of the client on that server that could still
//! hold a copy (fred's replaced connections are killed first: `fence.rs`),
//! no copy of the request can reach Redis any more, and the record is
//! waste: about 300 B of Redis memory for the record's TTL, for every lock
//! name used (a lock per order id leaves one per order).
//!
//! So the owner of a call hands its record to [`Forget`] when it is done
//! with the call (never before: a background job that may be run again
//! from the start forgets its records only at its end). Records are
//! deleted in batches every [`EVERY`] by one script call per slot
//! (`scripts/forget.lua`): a record is deleted only while it still holds
//! the request handed over, since a newer request of the same owner may
//! have written it since. A call whose outcome stayed unknown is never
//! handed over: its record keeps its TTL.
//!
//! Cost: one script call per batch and per slot, and a `GET` (and a `DEL`)
//! per distinct record in the batch; a lock taken and given back in a loop
//! costs one record per batch, not per pair.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use fred::clients::Client as FredClient;
use fred::types::{Key, Value};

use super::fence::Fence;
use super::script::Script;

/// How long records handed over wait before they are deleted together.
pub(crate) const EVERY: Duration = Duration::from_millis(100);

/// The most records one script call deletes.
const BATCH: usize = 512;

fn script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| Script::plain("forget", include_str!("scripts/forget.lua")))
}

/// Request records to delete, and the task that deletes them.
#[derive(Debug, Default)]
pub(crate) struct Forget {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
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
    /// Hands over `record`, which request `rid` wrote and whose call has
    /// ended: it is deleted within about [`EVERY`], unless a newer request
    /// has written it by then. Without a runtime to delete it on, the
    /// record keeps its TTL.
    pub(crate) fn push(
        &self,
        redis: &FredClient,
        clustered: bool,
        fence: &Arc<Fence>,
        record: Key,
        rid: u64,
    ) {
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
        let (inner, redis, fence) = (self.inner.clone(), redis.clone(), fence.clone());
        drop(runtime.spawn(async move { inner.run(&redis, clustered, &fence).await }));
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
    async fn run(&self, redis: &FredClient, clustered: bool, fence: &Fence) {
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
            // A connection replaced since a reply was trusted, and not yet
            // killed (its kill failed): a copy may still be on it.
            if fence.moved(redis) {
                if let Err(e) = fence.sweep(redis).await {
                    tracing::debug!(error = %e, records = batch.len(), "records kept: a replaced connection could not be killed");
                    continue;
                }
            }
            self.delete(redis, clustered, batch).await;
        }
    }

    /// Deletes `batch` (the newest request per record), one call per slot
    /// and per [`BATCH`] records.
    async fn delete(&self, redis: &FredClient, clustered: bool, batch: Vec<(Key, u64)>) {
        let mut newest: HashMap<Key, u64> = HashMap::with_capacity(batch.len());
        for (record, rid) in batch {
            let at = newest.entry(record).or_insert(rid);
            *at = (*at).max(rid);
        }
        let mut groups: HashMap<u16, Vec<(Key, u64)>> = HashMap::new();
        for (record, rid) in newest {
            let slot = if clustered {
                fred::util::redis_keyslot(record.as_bytes())
            } else {
                0
            };
            groups.entry(slot).or_default().push((record, rid));
        }
        for group in groups.values() {
            for chunk in group.chunks(BATCH) {
                let keys: Vec<Key> = chunk.iter().map(|(record, _)| record.clone()).collect();
                let args: Vec<Value> = chunk
                    .iter()
                    .map(|(_, rid)| Value::Integer(*rid as i64))
                    .collect();
                self.calls.fetch_add(1, Ordering::Relaxed);
                self.checked
                    .fetch_add(chunk.len() as u64, Ordering::Relaxed);
                match script().run::<i64>(redis, &keys, &args).await {
                    Ok(deleted) => {
                        self.deleted
                            .fetch_add(deleted.max(0) as u64, Ordering::Relaxed);
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, records = chunk.len(), "records not deleted; they run out with their TTL");
                    }
                }
            }
        }
    }
}

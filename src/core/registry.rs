//! The client's record and its long waits (see `operators.rs` for the
//! format), and reading every client's records back.
//!
//! * **The record** `leasehold:client:{<uuid>}` (a hash) is written once
//!   when the client starts (`HSET` + `PEXPIRE` in one `MULTI`/`EXEC`, so
//!   it never exists without its TTL; no script: scripts are the lock
//!   path's),
//!   renewed by its watchdog's cycle with one `PEXPIRE` (written again if
//!   that finds it gone: a restarted server), and deleted by `shutdown`
//!   (or when the last handle goes). Nothing on the lock path touches it.
//! * **A long wait** ([`Waiting`]) is made by the wait loop at its first
//!   busy attempt. It spawns one task that sleeps for the threshold, then
//!   adds `wait:<n>` to the record (with the info fields, so a record that
//!   had expired is whole again); a wait that ends before writes nothing.
//!   Dropping the `Waiting` (the wait ended, failed or was cancelled)
//!   aborts the task and, if it had started writing, removes the field in
//!   the background (`HDEL`, sent after the write on the same connection).
//! * **Deadlock detection** (`detect_deadlocks(true)`): after writing,
//!   the task reads the wait-for graph every [`CHECK_EVERY`]; if this wait
//!   is on a cycle and is the youngest wait of it, it tells the wait loop,
//!   which fails with `Error::Deadlock`. Every member sees the same
//!   records, so exactly one of them gives up.
//!
//! Reading: `SCAN` for `leasehold:client:*` (on every primary of a
//! cluster), `HGETALL` each record; for the graph, `HGETALL` of each lock
//! waited for (a key of another type has no holders).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fred::clients::Client as FredClient;
use fred::interfaces::{ClientLike, HashesInterface, KeysInterface, TransactionInterface};
use fred::types::{Key, Value};
use futures_util::TryStreamExt;
use parking_lot::Mutex;
use tokio::sync::Notify;

use super::conn::Conn;
use crate::error::Result;
use crate::operators::{
    find_cycles, parse_record, record_id, wait_value, ClientRecord, Deadlock, Wait, RECORD_PREFIX,
    WAIT_FIELD,
};

/// How often a long wait looks for a deadlock through itself.
pub(crate) const CHECK_EVERY: Duration = Duration::from_millis(500);
/// How long a wait lasts before it is recorded, by default.
pub(crate) const DEFAULT_THRESHOLD: Duration = Duration::from_secs(1);

/// Who a client says it is, and how it records its waits.
#[derive(Clone, Debug)]
pub(crate) struct Identity {
    pub(crate) id: uuid::Uuid,
    pub(crate) app: String,
    /// A wait is recorded once it has lasted this long.
    pub(crate) threshold: Duration,
    /// Whether a long wait fails when it closes a wait-for cycle.
    pub(crate) detect: bool,
}

/// One client's record (see the module docs).
#[derive(Debug)]
pub(crate) struct Registry {
    key: Key,
    /// `<uuid>:`: a waiting owner's field is this and its id.
    field_prefix: String,
    /// The info fields and values.
    info: Vec<(&'static str, String)>,
    /// The record's TTL, ms.
    ttl_ms: i64,
    threshold: Duration,
    detect: bool,
    conn: Arc<Conn>,
    /// The next wait's number.
    next_wait: AtomicU64,
}

/// A wait the wait loop keeps while it waits; dropped, it leaves no record.
#[derive(Debug)]
pub(crate) struct Waiting {
    shared: Arc<WaitShared>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Debug)]
struct WaitShared {
    registry: Arc<Registry>,
    field: String,
    lock: String,
    /// `wait:<n>`.
    name: String,
    since_ms: u64,
    /// Set by the task before it sends the record: the drop removes it.
    written: AtomicBool,
    /// Set by the task when this wait is the one to give up.
    deadlock: Mutex<Option<Deadlock>>,
    found: Notify,
}

/// Now, epoch ms.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The host name, as the kernel knows it.
fn host_name() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The executable's name (the default app name).
pub(crate) fn exe_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The record key of client `id`.
pub(crate) fn record_key(id: uuid::Uuid) -> String {
    format!("{RECORD_PREFIX}{{{id}}}")
}

// === impl Registry ===

impl Registry {
    /// The record of `identity`, kept for `ttl` unless renewed.
    pub(crate) fn new(
        identity: &Identity,
        watchdog_timeout: Duration,
        ttl: Duration,
        conn: Arc<Conn>,
    ) -> Registry {
        let info: Vec<(&str, String)> = vec![
            ("app", identity.app.clone()),
            ("host", host_name()),
            ("pid", std::process::id().to_string()),
            ("version", env!("CARGO_PKG_VERSION").to_owned()),
            ("started_ms", now_ms().to_string()),
            ("watchdog_ms", watchdog_timeout.as_millis().to_string()),
        ];
        Registry {
            key: Key::from(record_key(identity.id)),
            field_prefix: format!("{}:", identity.id),
            info,
            ttl_ms: ttl.as_millis().max(1) as i64,
            threshold: identity.threshold,
            detect: identity.detect,
            conn,
            next_wait: AtomicU64::new(1),
        }
    }

    fn redis(&self) -> &FredClient {
        &self.conn.redis
    }

    /// Writes the record whole, with `extra` field/value pairs.
    pub(crate) async fn write(&self, extra: Option<(&str, String)>) -> Result<()> {
        let mut pairs: Vec<(&str, String)> = self.info.clone();
        pairs.extend(extra);
        let trx = self.redis().multi();
        trx.hset::<(), _, _>(self.key.clone(), pairs).await?;
        trx.pexpire::<(), _>(self.key.clone(), self.ttl_ms, None)
            .await?;
        let _: Value = trx.exec(true).await?;
        Ok(())
    }

    /// The watchdog's cycle: one `PEXPIRE`; the whole record again if it
    /// was gone. Bounded by `bound`.
    pub(crate) async fn beat(&self, bound: Duration) {
        let beat = async {
            let renewed: i64 = self
                .redis()
                .pexpire(self.key.clone(), self.ttl_ms, None)
                .await?;
            if renewed == 0 {
                self.write(None).await?;
            }
            Ok::<_, crate::error::Error>(())
        };
        match tokio::time::timeout(bound, beat).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!(error = %e, "client record not renewed"),
            Err(_) => tracing::debug!("client record not renewed in time"),
        }
    }

    /// Deletes the record (shutdown).
    pub(crate) async fn delete(&self) {
        let _: std::result::Result<i64, _> = self.redis().del(self.key.clone()).await;
    }

    /// Starts watching a wait of `owner` for `lock`; `None` when there is
    /// no runtime to run the watch on.
    pub(crate) fn start_wait(self: &Arc<Self>, lock: &[u8], owner: u64) -> Option<Waiting> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let n = self.next_wait.fetch_add(1, Ordering::Relaxed);
        let shared = Arc::new(WaitShared {
            registry: self.clone(),
            field: format!("{}{owner}", self.field_prefix),
            lock: String::from_utf8_lossy(lock).into_owned(),
            name: format!("{WAIT_FIELD}{n}"),
            since_ms: now_ms(),
            written: AtomicBool::new(false),
            deadlock: Mutex::new(None),
            found: Notify::new(),
        });
        let task = runtime.spawn(watch(shared.clone()));
        Some(Waiting { shared, task })
    }
}

/// A long wait's task: records it after the threshold, then (with
/// detection on) looks for a cycle through it every [`CHECK_EVERY`].
async fn watch(wait: Arc<WaitShared>) {
    let registry = &wait.registry;
    tokio::time::sleep(registry.threshold).await;
    wait.written.store(true, Ordering::SeqCst);
    let pair = (
        wait.name.as_str(),
        wait_value(&wait.field, wait.since_ms, &wait.lock),
    );
    if let Err(e) = registry.write(Some(pair)).await {
        tracing::debug!(error = %e, "long wait not recorded");
    }
    if !registry.detect {
        return;
    }
    loop {
        match graph(registry.redis()).await {
            Ok((waits, holders)) => {
                if let Some(cycle) = youngest_in_cycle(&wait, &waits, &holders) {
                    *wait.deadlock.lock() = Some(cycle);
                    wait.found.notify_one();
                    return;
                }
            }
            Err(e) => tracing::debug!(error = %e, "deadlock check failed"),
        }
        tokio::time::sleep(CHECK_EVERY).await;
    }
}

/// A cycle through `wait` in which it is the youngest wait, if any.
fn youngest_in_cycle(
    wait: &WaitShared,
    waits: &[Wait],
    holders: &BTreeMap<String, Vec<String>>,
) -> Option<Deadlock> {
    let since = |field: &str, lock: &str| {
        waits
            .iter()
            .filter(|w| w.field == field && w.lock == lock)
            .map(|w| w.since_ms)
            .max()
            .unwrap_or(0)
    };
    find_cycles(waits, holders).into_iter().find(|cycle| {
        let mine = cycle
            .members
            .iter()
            .any(|m| m.field == wait.field && m.waits_for == wait.lock);
        let youngest = cycle
            .members
            .iter()
            .max_by_key(|m| (since(&m.field, &m.waits_for), m.field.clone()));
        mine && youngest.is_some_and(|m| m.field == wait.field && m.waits_for == wait.lock)
    })
}

// === impl Waiting ===

impl Waiting {
    /// Completes when this wait is the one of a cycle to give up.
    pub(crate) async fn deadlocked(&self) -> Deadlock {
        loop {
            let found = self.shared.found.notified();
            if let Some(cycle) = self.shared.deadlock.lock().take() {
                return cycle;
            }
            found.await;
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.task.abort();
        if !self.shared.written.load(Ordering::SeqCst) {
            return;
        }
        let shared = self.shared.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            drop(runtime.spawn(async move {
                let r = &shared.registry;
                let _: std::result::Result<i64, _> =
                    r.redis().hdel(r.key.clone(), shared.name.as_str()).await;
            }));
        }
    }
}

// === reading ===

/// Every client record on the Redis `redis` is connected to (every
/// primary of a cluster), oldest first.
///
/// # Cancel safety
///
/// Cancel safe (reads only).
///
/// # Example
///
/// ```no_run
/// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
/// let records = leasehold::client_records(client.redis()).await?;
/// assert!(records.iter().any(|r| r.id == client.id()));
/// # Ok(()) }
/// ```
pub async fn client_records(redis: &FredClient) -> Result<Vec<ClientRecord>> {
    let pattern = format!("{RECORD_PREFIX}*");
    let keys: Vec<Key> = if redis.is_clustered() {
        redis
            .scan_cluster_buffered(pattern, Some(1000), None)
            .try_collect()
            .await?
    } else {
        redis
            .scan_buffered(pattern, Some(1000), None)
            .try_collect()
            .await?
    };
    let mut records = Vec::with_capacity(keys.len());
    for key in keys {
        let Some(id) = key.as_str().and_then(record_id) else {
            continue;
        };
        let pairs: Vec<(String, String)> = match redis.hgetall::<Value, _>(key).await? {
            Value::Map(map) => map
                .inner()
                .into_iter()
                .filter_map(|(k, v)| Some((k.as_str()?.to_string(), v.as_string()?)))
                .collect(),
            _ => continue,
        };
        if pairs.is_empty() {
            continue; // expired between SCAN and HGETALL
        }
        records.push(parse_record(id, pairs));
    }
    records.sort_by_key(|r| (r.started_ms, r.id));
    Ok(records)
}

/// The wait-for cycles among every client on the Redis `redis` is
/// connected to (what [`Client::deadlocks`](crate::Client::deadlocks)
/// returns, without a client of one's own: the `leasehold` tool uses it).
///
/// # Cancel safety
///
/// Cancel safe (reads only).
///
/// # Example
///
/// ```no_run
/// # async fn f(redis: leasehold::fred::clients::Client) -> leasehold::Result<()> {
/// for cycle in leasehold::deadlocks_on(&redis).await? {
///     eprintln!("{cycle}");
/// }
/// # Ok(()) }
/// ```
pub async fn deadlocks_on(redis: &FredClient) -> Result<Vec<Deadlock>> {
    let (waits, holders) = graph(redis).await?;
    Ok(find_cycles(&waits, &holders))
}

/// Every recorded wait, and the holder fields of each lock waited for.
async fn graph(redis: &FredClient) -> Result<(Vec<Wait>, BTreeMap<String, Vec<String>>)> {
    let mut waits = Vec::new();
    for r in client_records(redis).await? {
        for w in r.waits {
            waits.push(Wait {
                field: w.field,
                lock: w.lock,
                since_ms: w.since_ms,
                app: r.app.clone(),
            });
        }
    }
    let mut holders = BTreeMap::new();
    for w in &waits {
        if holders.contains_key(&w.lock) {
            continue;
        }
        // Another type (a semaphore's count): no holder fields.
        let fields = match redis.hgetall::<Value, _>(w.lock.as_str()).await {
            Ok(Value::Map(map)) => map
                .inner()
                .into_keys()
                .filter_map(|k| k.as_str().map(|s| s.to_string()))
                .filter(|f| f != "mode")
                .collect(),
            _ => Vec::new(),
        };
        holders.insert(w.lock.clone(), fields);
    }
    Ok((waits, holders))
}

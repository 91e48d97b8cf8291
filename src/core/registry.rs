//! The client's record and its long waits (see `operators.rs` for the
//! format), and reading every client's records back.
//!
//! * **The record** `leasehold:client:{<uuid>}` (a hash) is written once
//!   when the client starts (`HSET` + `PEXPIRE` in one `EVAL`, so it
//!   never exists without its TTL),
//!   renewed by its watchdog's cycle with one `PEXPIRE` (written again if
//!   that finds it gone: a restarted server), and deleted by `shutdown`
//!   (or when the last handle goes). Nothing on the lock path touches it.
//! * **A long wait** ([`Waiting`]) is registered by the wait loop at its
//!   first busy attempt: an entry in the client's local table, no task and
//!   no timer of its own. One ticker per client (started by the first
//!   wait, stopped when none is left; every quarter of the threshold, at
//!   most every [`CHECK_EVERY`]) adds a field `wait:<n>` for each wait that
//!   has lasted past the threshold, all in one write (with the info
//!   fields, so a record that had expired is whole again); a wait that
//!   ends before writes nothing. Dropping the `Waiting` (the wait ended,
//!   failed or was cancelled) removes its entry, and a written one's field
//!   goes at the next tick (one `HDEL` for every wait that ended), always
//!   after its write: the ticker sends both.
//! * **Deadlock detection** (`detect_deadlocks(true)`): while the client
//!   has written waits, the ticker reads the wait-for graph every
//!   [`CHECK_EVERY`]; each local wait that is on a cycle and is the
//!   youngest wait of it is told, and its wait loop fails with
//!   `Error::Deadlock`. Every member sees the same records, so exactly one
//!   of them gives up.
//!
//! Reading: `SCAN` for `leasehold:client:*` (on every primary of a
//! cluster), `HGETALL` each record; for the graph, `HGETALL` of each lock
//! waited for (a key of another type has no holders).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::clock::epoch_ms;

use fred::clients::Client as FredClient;
use fred::interfaces::{ClientLike, HashesInterface, KeysInterface, LuaInterface};
use fred::types::{Key, Value};
use futures_util::TryStreamExt;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::conn::Conn;
use crate::error::Result;
use crate::operators::{
    find_cycles, parse_record, record_id, wait_value, ClientRecord, Deadlock, Wait, RECORD_PREFIX,
    WAIT_FIELD,
};

/// Writes field/value pairs (`ARGV[2..]`) and sets the TTL (`ARGV[1]`,
/// ms) in one step, so a record never exists without its TTL. Sent with
/// `EVAL` (rare: at the start, and when waits become long), not as a
/// transaction: fred's `MULTI`/`EXEC` was seen to leave a client unable
/// to send anything after connection faults (the randomized history test,
/// seed 1795722936499170105). Idempotent: a re-send changes nothing.
const WRITE: &str = "redis.call('hset', KEYS[1], unpack(ARGV, 2)) \
    redis.call('pexpire', KEYS[1], ARGV[1]) return 1";

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
    /// The client's waits under way, by number, and the written ones
    /// that ended. Changed by `start_wait` and `Waiting::drop` (adding and
    /// removing) and by the ticker (marking written, taking `ended`).
    waits: Mutex<Waits>,
    /// Whether the ticker runs (it stops when there is nothing to do).
    ticking: AtomicBool,
}

#[derive(Debug, Default)]
struct Waits {
    live: HashMap<u64, LocalWait>,
    /// Numbers of written waits that ended: their fields go next tick.
    ended: Vec<u64>,
}

/// One wait under way (a few words: no task, no timer of its own).
#[derive(Debug)]
struct LocalWait {
    /// The lock key (a reference-counted copy of the acquire's).
    lock: Key,
    owner: u64,
    since_ms: u64,
    started: Instant,
    written: bool,
    /// With detection on: where the ticker says "give up".
    found: Option<Arc<Found>>,
}

/// "This wait is the one of a cycle to give up", from the ticker to the
/// wait loop.
#[derive(Debug, Default)]
struct Found {
    cycle: Mutex<Option<Deadlock>>,
    notify: Notify,
}

/// A wait the wait loop keeps while it waits; dropped, it leaves no record.
#[derive(Debug)]
pub(crate) struct Waiting {
    registry: Arc<Registry>,
    n: u64,
    found: Option<Arc<Found>>,
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
pub(crate) fn client_record_key(id: uuid::Uuid) -> String {
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
            ("started_ms", epoch_ms().to_string()),
            ("watchdog_ms", watchdog_timeout.as_millis().to_string()),
        ];
        Registry {
            key: Key::from(client_record_key(identity.id)),
            field_prefix: format!("{}:", identity.id),
            info,
            ttl_ms: ttl.as_millis().max(1) as i64,
            threshold: identity.threshold,
            detect: identity.detect,
            conn,
            next_wait: AtomicU64::new(1),
            waits: Mutex::default(),
            ticking: AtomicBool::new(false),
        }
    }

    fn redis(&self) -> &FredClient {
        &self.conn.redis
    }

    /// Writes the record whole, with `extra` field/value pairs.
    pub(crate) async fn write(&self, extra: &[(String, String)]) -> Result<()> {
        let mut args: Vec<&str> = Vec::with_capacity(1 + 2 * (self.info.len() + extra.len()));
        let ttl = self.ttl_ms.to_string();
        args.push(&ttl);
        for (f, v) in &self.info {
            args.extend([*f, v.as_str()]);
        }
        for (f, v) in extra {
            args.extend([f.as_str(), v.as_str()]);
        }
        let _: Value = self.redis().eval(WRITE, self.key.clone(), args).await?;
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
                // Lost (a restart, a failover): written again with the
                // live waits it recorded, or a real cycle goes unseen.
                self.write(&self.written_waits()).await?;
            }
            Ok::<_, crate::error::Error>(())
        };
        match tokio::time::timeout(bound, beat).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!(error = %e, "client record not renewed"),
            Err(_) => tracing::debug!("client record not renewed in time"),
        }
    }

    /// The fields of the live waits already written to the record.
    fn written_waits(&self) -> Vec<(String, String)> {
        let waits = self.waits.lock();
        waits
            .live
            .iter()
            .filter(|(_, w)| w.written)
            .map(|(n, w)| {
                let lock = String::from_utf8_lossy(w.lock.as_bytes()).into_owned();
                let field = format!("{}{}", self.field_prefix, w.owner);
                (
                    format!("{WAIT_FIELD}{n}"),
                    wait_value(&field, w.since_ms, &lock),
                )
            })
            .collect()
    }

    /// Deletes the record (shutdown).
    pub(crate) async fn delete(&self) {
        let _: std::result::Result<i64, _> = self.redis().del(self.key.clone()).await;
    }

    /// Registers a wait of `owner` for `lock` (a map entry: nothing is
    /// sent unless it lasts past the threshold). `None` outside a runtime.
    pub(crate) fn start_wait(self: &Arc<Self>, lock: &Key, owner: u64) -> Option<Waiting> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let n = self.next_wait.fetch_add(1, Ordering::Relaxed);
        let found = self.detect.then(Arc::<Found>::default);
        self.waits.lock().live.insert(
            n,
            LocalWait {
                lock: lock.clone(),
                owner,
                since_ms: epoch_ms().max(0) as u64,
                started: Instant::now(),
                written: false,
                found: found.clone(),
            },
        );
        self.tick_on(&runtime);
        Some(Waiting {
            registry: self.clone(),
            n,
            found,
        })
    }

    /// Starts the ticker unless it runs.
    fn tick_on(self: &Arc<Self>, runtime: &tokio::runtime::Handle) {
        // Read first: while the ticker runs (a busy lock: waits start all
        // the time), a wait only reads the flag's cache line instead of
        // writing it from every thread.
        if !self.ticking.load(Ordering::Acquire) && !self.ticking.swap(true, Ordering::AcqRel) {
            drop(runtime.spawn(ticker(Arc::downgrade(self))));
        }
    }

    /// The tick period: a quarter of the threshold, at most the deadlock
    /// check period.
    fn period(&self) -> Duration {
        (self.threshold / 4).clamp(Duration::from_millis(10), CHECK_EVERY)
    }

    /// One tick: records the waits that have lasted, removes the written
    /// ones that ended (one command each, for every wait at once), and
    /// with detection on looks for cycles. Whether there is more to do.
    async fn tick(&self, last_check: &mut Option<Instant>) -> bool {
        let (new, ended) = {
            let mut waits = self.waits.lock();
            let mut new = Vec::new();
            for (n, w) in waits.live.iter_mut() {
                if !w.written && w.started.elapsed() >= self.threshold {
                    w.written = true;
                    let lock = String::from_utf8_lossy(w.lock.as_bytes()).into_owned();
                    let field = format!("{}{}", self.field_prefix, w.owner);
                    new.push((
                        format!("{WAIT_FIELD}{n}"),
                        wait_value(&field, w.since_ms, &lock),
                    ));
                }
            }
            (new, std::mem::take(&mut waits.ended))
        };
        if !new.is_empty() {
            if let Err(e) = self.write(&new).await {
                tracing::debug!(error = %e, "long waits not recorded");
            }
        }
        if !ended.is_empty() {
            let fields: Vec<String> = ended.iter().map(|n| format!("{WAIT_FIELD}{n}")).collect();
            let removed: std::result::Result<i64, _> =
                self.redis().hdel(self.key.clone(), fields).await;
            if let Err(e) = removed {
                // Sent again next tick: a field left behind is a phantom
                // wait that can close a false deadlock cycle.
                tracing::debug!(error = %e, "ended waits not removed: trying again");
                self.waits.lock().ended.extend(ended);
            }
        }
        let watched = self.detect && {
            let waits = self.waits.lock();
            waits.live.values().any(|w| w.written)
        };
        if watched && last_check.is_none_or(|t| t.elapsed() >= CHECK_EVERY) {
            *last_check = Some(Instant::now());
            self.check_deadlocks().await;
        }
        let waits = self.waits.lock();
        !(waits.live.is_empty() && waits.ended.is_empty())
    }

    /// Tells each local written wait that is the youngest of a cycle.
    async fn check_deadlocks(&self) {
        let (waits, holders) = match graph(self.redis()).await {
            Ok(graph) => graph,
            Err(e) => {
                tracing::debug!(error = %e, "deadlock check failed");
                return;
            }
        };
        let cycles = find_cycles(&waits, &holders);
        if cycles.is_empty() {
            return;
        }
        let local = self.waits.lock();
        for w in local.live.values().filter(|w| w.written) {
            let Some(found) = &w.found else { continue };
            let field = format!("{}{}", self.field_prefix, w.owner);
            let lock = String::from_utf8_lossy(w.lock.as_bytes());
            if let Some(cycle) = youngest_in_cycle(&field, &lock, &cycles, &waits) {
                *found.cycle.lock() = Some(cycle);
                found.notify.notify_one();
            }
        }
    }
}

/// The client's ticker: runs while it has waits, every `period`; holds
/// the registry weakly.
async fn ticker(registry: std::sync::Weak<Registry>) {
    struct Stop(std::sync::Weak<Registry>);
    impl Drop for Stop {
        fn drop(&mut self) {
            if let Some(r) = self.0.upgrade() {
                r.ticking.store(false, Ordering::Release);
            }
        }
    }
    let _stop = Stop(registry.clone());
    let mut last_check = None;
    loop {
        let Some(period) = registry.upgrade().map(|r| r.period()) else {
            return;
        };
        tokio::time::sleep(period).await;
        let Some(r) = registry.upgrade() else { return };
        if !r.tick(&mut last_check).await {
            // Idle: stop, unless a wait came meanwhile.
            r.ticking.store(false, Ordering::Release);
            let waits = r.waits.lock();
            let idle = waits.live.is_empty() && waits.ended.is_empty();
            drop(waits);
            if idle || r.ticking.swap(true, Ordering::AcqRel) {
                return;
            }
        }
    }
}

/// Of `cycles`, one through the wait of `field` for `lock` in which it is
/// the youngest wait (ties: the greatest field), if any.
fn youngest_in_cycle(
    field: &str,
    lock: &str,
    cycles: &[Deadlock],
    waits: &[Wait],
) -> Option<Deadlock> {
    let since = |field: &str, lock: &str| {
        waits
            .iter()
            .filter(|w| w.field == field && w.lock == lock)
            .map(|w| w.since_ms)
            .max()
            .unwrap_or(0)
    };
    cycles
        .iter()
        .find(|cycle| {
            let mine = cycle
                .members
                .iter()
                .any(|m| m.field == field && m.waits_for == lock);
            let youngest = cycle
                .members
                .iter()
                .max_by_key(|m| (since(&m.field, &m.waits_for), m.field.clone()));
            mine && youngest.is_some_and(|m| m.field == field && m.waits_for == lock)
        })
        .cloned()
}

// === impl Waiting ===

impl Waiting {
    /// Whether this wait may be told to give up (detection is on).
    pub(crate) fn detects(&self) -> bool {
        self.found.is_some()
    }

    /// Completes when this wait is the one of a cycle to give up (never
    /// without detection).
    pub(crate) async fn deadlocked(&self) -> Deadlock {
        let Some(found) = &self.found else {
            return std::future::pending().await;
        };
        loop {
            let notified = found.notify.notified();
            if let Some(cycle) = found.cycle.lock().take() {
                return cycle;
            }
            notified.await;
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let r = &self.registry;
        let mut waits = r.waits.lock();
        if let Some(w) = waits.live.remove(&self.n) {
            if w.written {
                waits.ended.push(self.n);
                drop(waits);
                // The ticker removes the field (after any write of it).
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    r.tick_on(&runtime);
                }
            }
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

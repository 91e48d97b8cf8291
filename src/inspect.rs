//! Every lock-family object on a Redis, read from the keys it is made of
//! (the `leasehold` tool's `inspect`, `watch` and `unlock --force`).
//!
//! | kind | keys |
//! | --- | --- |
//! | [`ObjectKind::Lock`] | hash `name`, fields `<uuid>:<id>` → hold count |
//! | [`ObjectKind::FencedLock`] | the same hash, and the string `redisson_lock_token:{name}` |
//! | [`ObjectKind::FairLock`] | the same hash (while held), list `redisson_lock_queue:{name}`, zset `redisson_lock_timeout:{name}` (score: the waiter's dead-by time, epoch ms), hash `leasehold_grant:{name}` (leasehold's waiters' entries) |
//! | [`ObjectKind::ReadWriteLock`] | hash `name` with a `mode` field (`read`/`write`); `<uuid>:<id>` readers, `<uuid>:<id>:write` the writer |
//! | [`ObjectKind::Semaphore`] | string count `name` and zset `{name}:timeout` (raw 16-byte permit id → expiry, epoch ms); or the count alone, with subscribers on `redisson_sc:{name}` |
//! | [`ObjectKind::CountDownLatch`] | an integer string `name` with subscribers on `redisson_countdownlatch__channel__{name}` |
//! | [`ObjectKind::SemaphoreOrLatch`] | an integer string `name` and nothing else |
//!
//! (`{name}` is `name` itself when it has braces: Redisson's `prefixName`
//! and `suffixName` rules; the latch's channel always adds braces.) The
//! names come from the primitives' own modules: this file names no key.
//!
//! A semaphore with no permit out and a latch are the same thing in
//! Redis: one integer string (a semaphore's permit set is a zset, which
//! Redis deletes with its last member). The count does not tell them
//! apart either. Who listens does: waiters of a semaphore subscribe to its
//! channel, waiters of a latch to the latch's (leasehold and Redisson
//! alike, classic or sharded pub/sub), so `PUBSUB NUMSUB` and `PUBSUB
//! SHARDNUMSUB` name the kind while anyone waits. With nobody waiting on
//! either (or someone on both) the kind is
//! [`ObjectKind::SemaphoreOrLatch`] rather than a guess. Skipped: client
//! records, request records, a fair lock's grants and alive keys,
//! Redisson's unlock latches and read-hold timeout keys.
//!
//! Reads only, key by key: a snapshot of a moving keyspace is not atomic
//! (an object may show a holder that has just left).

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use fred::clients::Client as FredClient;
use fred::interfaces::{
    ClientLike, ClusterInterface, HashesInterface, KeysInterface, ListInterface, PubsubInterface,
    SortedSetsInterface,
};
use fred::types::{Key, Value};
use futures_util::TryStreamExt;

use crate::client::Client;
use crate::clock::epoch_ms;
use crate::error::Result;
use crate::naming::{prefix_name, suffix_name, REQUEST_RECORD_PREFIX};
use crate::operators::{ClientRecord, RECORD_PREFIX};
use crate::{fair_lock, fenced_lock, latch, rw_lock, semaphore};

/// Redisson's unlock latch (its `RLock` waits for a release's result
/// there): not an object of its own.
const REDISSON_UNLOCK_LATCH: &str = "redisson_unlock_latch:";
/// Redisson's score for a permit that never expires.
const NO_EXPIRY: f64 = 922_337_203_685_477.0;

/// What a lock-family object is, read from its keys (see the module docs).
///
/// # Example
///
/// ```
/// use leasehold::ObjectKind;
/// assert_eq!(ObjectKind::FairLock.as_str(), "fair_lock");
/// assert_eq!(ObjectKind::SemaphoreOrLatch.to_string(), "semaphore-or-latch");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ObjectKind {
    /// A [`Lock`](crate::Lock) (or Redisson's `RLock`).
    #[default]
    Lock,
    /// A [`FencedLock`](crate::FencedLock): a lock with a token counter.
    FencedLock,
    /// A [`FairLock`](crate::FairLock): a lock with a queue.
    FairLock,
    /// A [`ReadWriteLock`](crate::ReadWriteLock).
    ReadWriteLock,
    /// A [`Semaphore`](crate::Semaphore): permits out, or waiters on its
    /// channel.
    Semaphore,
    /// A [`CountDownLatch`](crate::CountDownLatch) someone waits on.
    CountDownLatch,
    /// A bare count nobody waits on: a semaphore with no permit out or a
    /// latch; Redis does not tell them apart.
    SemaphoreOrLatch,
}

impl ObjectKind {
    /// The kind's name as the `leasehold` tool prints it: `lock`,
    /// `fenced_lock`, `fair_lock`, `rw_lock`, `semaphore`, `latch`,
    /// `semaphore-or-latch`.
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(leasehold::ObjectKind::ReadWriteLock.as_str(), "rw_lock");
    /// ```
    pub fn as_str(&self) -> &'static str {
        match self {
            ObjectKind::Lock => "lock",
            ObjectKind::FencedLock => "fenced_lock",
            ObjectKind::FairLock => "fair_lock",
            ObjectKind::ReadWriteLock => "rw_lock",
            ObjectKind::Semaphore => "semaphore",
            ObjectKind::CountDownLatch => "latch",
            ObjectKind::SemaphoreOrLatch => "semaphore-or-latch",
        }
    }
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One lock-family object as [`inspect`] finds it.
///
/// # Example
///
/// ```no_run
/// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
/// for o in leasehold::inspect(client.redis(), "orders:*").await? {
///     println!("{} ({}): {} holder(s)", o.name, o.kind, o.holders.len());
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct LockObject {
    /// The object's key (its name, with any key prefix).
    pub name: String,
    /// What it is.
    pub kind: ObjectKind,
    /// `PTTL` of its main key: -1 no expiry, -2 missing (a free fair or
    /// fenced lock, a permit set whose count is gone).
    pub ttl_ms: i64,
    /// Who holds it (locks): one per hash field.
    pub holders: Vec<ObjectHolder>,
    /// Waits that lasted past their client's threshold, longest first
    /// (from the client records; any kind).
    pub waiters: Vec<ObjectWaiter>,
    /// A read-write lock's mode: `read` or `write`.
    pub mode: Option<String>,
    /// A fair lock's queue, in order.
    pub queue: Vec<QueuedWaiter>,
    /// A fenced lock's last token handed out.
    pub token: Option<i64>,
    /// A semaphore's available permits; a latch's count.
    pub count: Option<i64>,
    /// A semaphore's permits out.
    pub permits: Vec<PermitOut>,
}

/// One holder of a lock object: a hash field and what its client's
/// record says.
///
/// # Example
///
/// ```no_run
/// # fn f(h: &leasehold::ObjectHolder) {
/// println!("{} x{} ({})", h.field, h.holds, h.app.as_deref().unwrap_or("foreign"));
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ObjectHolder {
    /// The hash field: `<uuid>:<id>`, or `<uuid>:<id>:write`.
    pub field: String,
    /// The client's uuid (the field's first part).
    pub client: Option<String>,
    /// The owner id (the field's second part).
    pub owner: Option<u64>,
    /// Its hold count.
    pub holds: i64,
    /// The holder's client record: application name…
    pub app: Option<String>,
    /// …host…
    pub host: Option<String>,
    /// …and process id (none for Redisson or a client without a record).
    pub pid: Option<u32>,
}

/// A wait on an object, from its client's record (waits that lasted past
/// the client's threshold).
///
/// # Example
///
/// ```no_run
/// # fn f(w: &leasehold::ObjectWaiter) {
/// println!("{} has waited {} ms", w.field, w.waiting_ms);
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ObjectWaiter {
    /// The waiting owner's field.
    pub field: String,
    /// Its client's application name.
    pub app: Option<String>,
    /// How long it has waited, ms.
    pub waiting_ms: u64,
}

/// One entry of a fair lock's queue.
///
/// # Example
///
/// ```no_run
/// # fn f(q: &leasehold::QueuedWaiter) {
/// println!("{} times out in {:?} ms", q.field, q.timeout_in_ms);
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueuedWaiter {
    /// The waiter's field.
    pub field: String,
    /// Its client's application name (none for Redisson).
    pub app: Option<String>,
    /// Until its entry times out (the earlier of its timeout score and
    /// its leasehold entry's sign, minus now), ms.
    pub timeout_in_ms: Option<i64>,
}

/// One permit out of a semaphore.
///
/// # Example
///
/// ```no_run
/// # fn f(p: &leasehold::PermitOut) {
/// println!("{}: {:?}", p.id, p.expires_in_ms);
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitOut {
    /// The permit's id, in hex (16 raw bytes on the wire).
    pub id: String,
    /// Until it expires, ms; `None`: it never does (Redisson's permits
    /// taken without a lease).
    pub expires_in_ms: Option<i64>,
}

/// Every lock-family object whose name matches the glob `pattern` (`*`,
/// `?`, `[abc]`, `[a-z]`, `\x`, as Redis's `MATCH`), on the Redis `redis`
/// is connected to (every primary of a cluster), by name.
///
/// Scans the whole keyspace (`SCAN`, 1,000 keys a step): the companions of
/// an object (a fair lock's queue, a fenced lock's token) have names the
/// pattern does not match. An operator's tool, not a hot path.
///
/// # Cancel safety
///
/// Cancel safe (reads only).
///
/// # Example
///
/// ```no_run
/// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
/// for o in leasehold::inspect(client.redis(), "*").await? {
///     println!("{} {} ttl {} ms", o.name, o.kind, o.ttl_ms);
/// }
/// # Ok(()) }
/// ```
pub async fn inspect(redis: &FredClient, pattern: &str) -> Result<Vec<LockObject>> {
    let keys = scan_all(redis).await?;
    build(redis, keys, |name| glob(pattern, name)).await
}

/// The lock-family object named exactly `name` (a key, with any key
/// prefix), if there is one: reads only the keys such an object would
/// have.
///
/// # Cancel safety
///
/// Cancel safe (reads only).
///
/// # Example
///
/// ```no_run
/// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
/// if let Some(o) = leasehold::inspect_name(client.redis(), "orders:42").await? {
///     println!("{} is a {}", o.name, o.kind);
/// }
/// # Ok(()) }
/// ```
pub async fn inspect_name(redis: &FredClient, name: &str) -> Result<Option<LockObject>> {
    let keys = [
        name.to_owned(),
        prefix_name(fair_lock::QUEUE_PREFIX, name),
        prefix_name(fair_lock::TIMEOUTS_PREFIX, name),
        prefix_name(fenced_lock::TOKEN_PREFIX, name),
        suffix_name(name, semaphore::PERMITS_SUFFIX),
    ];
    let mut present = Vec::new();
    for k in keys {
        let n: i64 = redis.exists(k.as_str()).await?;
        if n > 0 {
            present.push(k);
        }
    }
    Ok(build(redis, present, |n| n == name)
        .await?
        .into_iter()
        .next())
}

impl LockObject {
    /// Frees the object with its kind's own force unlock, through
    /// `client` (on the same Redis): a lock, fenced lock or read-write
    /// lock is deleted and its waiters woken
    /// ([`LockHandle::force_unlock`](crate::LockHandle::force_unlock)); a
    /// fair lock is handed to its head waiter, whose place is kept; a
    /// semaphore's permits out all go back
    /// ([`Semaphore::force_release_all`](crate::Semaphore::force_release_all));
    /// a latch is deleted ([`CountDownLatch::delete`](crate::CountDownLatch::delete)).
    /// Each runs exactly once (a request record per call): a copy the
    /// network delivers late never frees what someone took after it. A
    /// bare count ([`ObjectKind::SemaphoreOrLatch`]) is left as it is:
    /// deleting it would wipe a semaphore's free permits. Whether anything
    /// was freed.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped while sent, the force unlock may or may
    /// not have run (it runs at most once).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// if let Some(o) = leasehold::inspect_name(client.redis(), "orders:42").await? {
    ///     let freed = o.force_unlock(&client).await?;
    ///     println!("freed: {freed}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self, client: &Client) -> Result<bool> {
        let n = self.name.as_str();
        match self.kind {
            ObjectKind::Lock => client.lock(n).force_unlock().await,
            ObjectKind::FencedLock => client.fenced_lock(n).force_unlock().await,
            ObjectKind::FairLock => client.fair_lock(n).force_unlock().await,
            ObjectKind::ReadWriteLock => {
                // The mode seen first; the other if the lock changed mode since.
                let rw = client.read_write_lock(n);
                let write_first = self.mode.as_deref() == Some("write");
                for write in [write_first, !write_first] {
                    let freed = if write {
                        rw.write().force_unlock().await?
                    } else {
                        rw.read().force_unlock().await?
                    };
                    if freed {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
            ObjectKind::Semaphore => Ok(client.semaphore(n).force_release_all().await? > 0),
            ObjectKind::CountDownLatch => client.count_down_latch(n).delete().await,
            ObjectKind::SemaphoreOrLatch => Ok(false),
        }
    }
}

// === reading ===

/// `{name}` → `name`; a name with braces is kept as it is (the inverse
/// of [`prefix_name`]'s and [`suffix_name`]'s rule).
fn untag(rest: &str) -> String {
    match rest.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
        Some(inner) if !inner.contains(['{', '}']) => inner.to_owned(),
        _ => rest.to_owned(),
    }
}

/// The name under `prefix:` (see [`prefix_name`]), if `key` has it.
fn under<'a>(key: &'a str, prefix: &str) -> Option<&'a str> {
    key.strip_prefix(prefix)?.strip_prefix(':')
}

/// Glob match (`*`, `?`, `[abc]`, `[a-z]`, `\x`), as Redis's `MATCH`.
fn glob(pattern: &str, text: &str) -> bool {
    fn go(p: &[char], t: &[char]) -> bool {
        match p.first() {
            None => t.is_empty(),
            Some('*') => (0..=t.len()).any(|i| go(&p[1..], &t[i..])),
            Some('?') => !t.is_empty() && go(&p[1..], &t[1..]),
            Some('[') => {
                let Some(end) = p.iter().position(|&c| c == ']') else {
                    return t.first() == Some(&'[') && go(&p[1..], &t[1..]);
                };
                let Some(&c) = t.first() else { return false };
                let class = &p[1..end];
                let (negate, class) = match class.first() {
                    Some('^') => (true, &class[1..]),
                    _ => (false, class),
                };
                let mut hit = false;
                let mut i = 0;
                while i < class.len() {
                    if i + 2 < class.len() && class[i + 1] == '-' {
                        hit |= class[i] <= c && c <= class[i + 2];
                        i += 3;
                    } else {
                        hit |= class[i] == c;
                        i += 1;
                    }
                }
                hit != negate && go(&p[end + 1..], &t[1..])
            }
            Some('\\') if p.len() > 1 => t.first() == Some(&p[1]) && go(&p[2..], &t[1..]),
            Some(c) => t.first() == Some(c) && go(&p[1..], &t[1..]),
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    go(&p, &t)
}

/// Whether a hash field has a lock holder's shape: `<id>:<digits>` or
/// `<id>:<digits>:write`.
fn holder_shaped(field: &str) -> bool {
    let mut parts = field.split(':');
    let (Some(id), Some(n)) = (parts.next(), parts.next()) else {
        return false;
    };
    let tail_ok = match parts.next() {
        None => true,
        Some("write") => parts.next().is_none(),
        Some(_) => false,
    };
    !id.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && tail_ok
}

/// Keys that are part of no object (or of one only as its bookkeeping).
fn bookkeeping(key: &str) -> bool {
    key.starts_with(RECORD_PREFIX)
        || under(key, REQUEST_RECORD_PREFIX).is_some()
        || under(key, fair_lock::GRANTS_PREFIX).is_some()
        || under(key, fair_lock::ALIVE_PREFIX).is_some()
        || key.starts_with(REDISSON_UNLOCK_LATCH)
        || read_timeout_key(key)
}

/// Whether `key` has the read-hold timeout mark between two colons
/// (`{name}:<field>:rwlock_timeout:<n>`), without building the pattern for
/// every key of a scan.
fn read_timeout_key(key: &str) -> bool {
    let mark = rw_lock::READ_TIMEOUT_MARK;
    key.match_indices(mark)
        .any(|(at, _)| key[..at].ends_with(':') && key[at + mark.len()..].starts_with(':'))
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.to_string()),
        Value::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::Integer(n) => Some(n.to_string()),
        Value::Double(d) => Some(d.to_string()),
        _ => None,
    }
}

async fn scan_all(redis: &FredClient) -> Result<Vec<String>> {
    let keys: Vec<Key> = if redis.is_clustered() {
        redis
            .scan_cluster_buffered("*", Some(1000), None)
            .try_collect()
            .await?
    } else {
        redis
            .scan_buffered("*", Some(1000), None)
            .try_collect()
            .await?
    };
    Ok(keys.into_iter().filter_map(|k| k.into_string()).collect())
}

/// The pieces of the keyspace that make up objects, by object name.
#[derive(Default)]
struct Layout {
    hashes: Vec<String>,
    strings: Vec<String>,
    queues: BTreeMap<String, String>,
    timeouts: BTreeMap<String, String>,
    tokens: BTreeMap<String, String>,
    permits: BTreeMap<String, String>,
}

async fn layout(redis: &FredClient, keys: Vec<String>) -> Result<Layout> {
    let mut l = Layout::default();
    for key in keys {
        if bookkeeping(&key) {
            continue;
        }
        let kind: String = redis.r#type(key.as_str()).await?;
        match kind.as_str() {
            "hash" => l.hashes.push(key),
            "list" => {
                if let Some(rest) = under(&key, fair_lock::QUEUE_PREFIX) {
                    l.queues.insert(untag(rest), key);
                }
            }
            "zset" => {
                if let Some(rest) = under(&key, fair_lock::TIMEOUTS_PREFIX) {
                    l.timeouts.insert(untag(rest), key);
                } else if let Some(rest) = key
                    .strip_suffix(semaphore::PERMITS_SUFFIX)
                    .and_then(|r| r.strip_suffix(':'))
                {
                    l.permits.insert(untag(rest), key);
                }
            }
            "string" => {
                if let Some(rest) = under(&key, fenced_lock::TOKEN_PREFIX) {
                    l.tokens.insert(untag(rest), key);
                } else {
                    l.strings.push(key);
                }
            }
            _ => {}
        }
    }
    Ok(l)
}

async fn build(
    redis: &FredClient,
    keys: Vec<String>,
    wanted: impl Fn(&str) -> bool,
) -> Result<Vec<LockObject>> {
    let l = layout(redis, keys).await?;
    let records: HashMap<String, ClientRecord> = crate::client_records(redis)
        .await?
        .into_iter()
        .map(|r| (r.id.to_string(), r))
        .collect();
    let now = epoch_ms().max(0) as u64;
    let mut objects: BTreeMap<String, LockObject> = BTreeMap::new();
    let object = |name: &str, kind: ObjectKind, ttl_ms: i64| LockObject {
        name: name.to_owned(),
        kind,
        ttl_ms,
        ..LockObject::default()
    };

    for key in &l.hashes {
        if !wanted(key) {
            continue;
        }
        let fields: HashMap<String, String> = redis.hgetall(key.as_str()).await?;
        let mode = fields.get("mode").cloned();
        if mode.is_none() && !fields.keys().any(|f| holder_shaped(f)) {
            continue; // an application's hash
        }
        let kind = if mode.is_some() {
            ObjectKind::ReadWriteLock
        } else if l.tokens.contains_key(key) {
            ObjectKind::FencedLock
        } else if l.queues.contains_key(key) || l.timeouts.contains_key(key) {
            ObjectKind::FairLock
        } else {
            ObjectKind::Lock
        };
        let mut holders: Vec<ObjectHolder> = fields
            .iter()
            .filter(|(f, _)| f.as_str() != "mode")
            .map(|(f, v)| holder(f, v, &records))
            .collect();
        holders.sort_by(|a, b| a.field.cmp(&b.field));
        let mut o = object(key, kind, redis.pttl(key.as_str()).await?);
        o.holders = holders;
        o.mode = mode;
        objects.insert(key.clone(), o);
    }
    // Free fair and fenced locks: only their companions are left.
    for (name, kind) in l
        .queues
        .keys()
        .chain(l.timeouts.keys())
        .map(|n| (n, ObjectKind::FairLock))
        .chain(l.tokens.keys().map(|n| (n, ObjectKind::FencedLock)))
    {
        if wanted(name) && !objects.contains_key(name) {
            objects.insert(name.clone(), object(name, kind, -2));
        }
    }
    for key in &l.strings {
        if !wanted(key) {
            continue;
        }
        let value: Option<String> = redis.get(key.as_str()).await?;
        let Some(count) = value.and_then(|v| v.trim().parse::<i64>().ok()) else {
            continue;
        };
        let kind = if l.permits.contains_key(key) {
            ObjectKind::Semaphore
        } else {
            count_kind(redis, key).await?
        };
        let mut o = object(key, kind, redis.pttl(key.as_str()).await?);
        o.count = Some(count);
        objects.insert(key.clone(), o);
    }
    // Permit sets whose count key is gone still show their permits.
    for name in l.permits.keys() {
        if wanted(name) && !objects.contains_key(name) {
            objects.insert(name.clone(), object(name, ObjectKind::Semaphore, -2));
        }
    }

    for o in objects.values_mut() {
        match o.kind {
            ObjectKind::Semaphore => o.permits = permits(redis, &l.permits, &o.name, now).await?,
            ObjectKind::FairLock => o.queue = queue(redis, &l, &o.name, &records, now).await?,
            ObjectKind::FencedLock => {
                if let Some(k) = l.tokens.get(&o.name) {
                    let t: Option<String> = redis.get(k.as_str()).await?;
                    o.token = t.and_then(|t| t.parse().ok());
                }
            }
            _ => {}
        }
        for r in records.values() {
            for w in r.waits.iter().filter(|w| w.lock == o.name) {
                o.waiters.push(ObjectWaiter {
                    field: w.field.clone(),
                    app: r.app.clone(),
                    waiting_ms: now.saturating_sub(w.since_ms),
                });
            }
        }
        o.waiters.sort_by_key(|w| std::cmp::Reverse(w.waiting_ms));
    }
    Ok(objects.into_values().collect())
}

/// The kind of a bare count `name` (no permit set): by who is subscribed
/// to a semaphore's and to a latch's channel (see the module docs).
async fn count_kind(redis: &FredClient, name: &str) -> Result<ObjectKind> {
    let semaphore = subscribers(redis, &prefix_name(semaphore::CHANNEL_PREFIX, name)).await?;
    let latch = subscribers(redis, &latch::channel_of(name)).await?;
    Ok(match (semaphore > 0, latch > 0) {
        (true, false) => ObjectKind::Semaphore,
        (false, true) => ObjectKind::CountDownLatch,
        _ => ObjectKind::SemaphoreOrLatch,
    })
}

/// Connections subscribed to `channel`: classic subscribers (on every
/// primary of a cluster, where each node counts only its own) and sharded
/// ones (on the channel's node; none before Redis 7, which has no
/// sharded pub/sub).
async fn subscribers(redis: &FredClient, channel: &str) -> Result<u64> {
    let mut n = 0;
    if redis.is_clustered() {
        let primaries = redis
            .cached_cluster_state()
            .map(|s| s.unique_primary_nodes())
            .unwrap_or_default();
        for node in primaries {
            n += numsub_count(redis.with_cluster_node(node).pubsub_numsub(channel).await?);
        }
    } else {
        n += numsub_count(redis.pubsub_numsub(channel).await?);
    }
    if let Ok(sharded) = redis.pubsub_shardnumsub(channel).await {
        n += numsub_count(sharded);
    }
    Ok(n)
}

/// The counts of a `PUBSUB NUMSUB` / `SHARDNUMSUB` reply (channel, count
/// pairs: an array in RESP2, a map in RESP3), summed.
fn numsub_count(reply: Value) -> u64 {
    let count = |v: &Value| match v {
        Value::Integer(n) => (*n).max(0) as u64,
        _ => 0,
    };
    match reply {
        Value::Array(items) => items.iter().skip(1).step_by(2).map(count).sum(),
        Value::Map(map) => map.inner().values().map(count).sum(),
        _ => 0,
    }
}

fn holder(field: &str, value: &str, records: &HashMap<String, ClientRecord>) -> ObjectHolder {
    let mut parts = field.splitn(3, ':');
    let client = parts.next().filter(|c| !c.is_empty()).map(str::to_owned);
    let owner = parts.next().and_then(|o| o.parse().ok());
    let record = client.as_ref().and_then(|c| records.get(c));
    ObjectHolder {
        field: field.to_owned(),
        client,
        owner,
        holds: value.trim().parse().unwrap_or(0),
        app: record.and_then(|r| r.app.clone()),
        host: record.and_then(|r| r.host.clone()),
        pid: record.and_then(|r| r.pid),
    }
}

/// A ZRANGE … WITHSCORES reply as (member, score) pairs (RESP2 or 3).
fn pairs(reply: Value) -> Vec<(Value, f64)> {
    let Value::Array(items) = reply else {
        return Vec::new();
    };
    let score = |v: &Value| text(v).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
    if items.iter().all(|i| matches!(i, Value::Array(_))) {
        return items
            .into_iter()
            .filter_map(|i| match i {
                Value::Array(mut p) if p.len() == 2 => {
                    let s = score(&p[1]);
                    Some((p.swap_remove(0), s))
                }
                _ => None,
            })
            .collect();
    }
    items
        .chunks(2)
        .filter(|c| c.len() == 2)
        .map(|c| (c[0].clone(), score(&c[1])))
        .collect()
}

async fn permits(
    redis: &FredClient,
    sets: &BTreeMap<String, String>,
    name: &str,
    now: u64,
) -> Result<Vec<PermitOut>> {
    let Some(key) = sets.get(name) else {
        return Ok(Vec::new());
    };
    let reply: Value = redis
        .zrange(key.as_str(), 0, -1, None, false, None, true)
        .await?;
    Ok(pairs(reply)
        .into_iter()
        .map(|(id, score)| PermitOut {
            id: match id {
                Value::Bytes(b) => b.iter().map(|x| format!("{x:02x}")).collect(),
                other => text(&other).unwrap_or_default(),
            },
            expires_in_ms: (score < NO_EXPIRY).then(|| score as i64 - now as i64),
        })
        .collect())
}

async fn queue(
    redis: &FredClient,
    l: &Layout,
    name: &str,
    records: &HashMap<String, ClientRecord>,
    now: u64,
) -> Result<Vec<QueuedWaiter>> {
    let Some(list) = l.queues.get(name) else {
        return Ok(Vec::new());
    };
    let fields: Vec<String> = redis.lrange(list.as_str(), 0, -1).await?;
    let mut out = Vec::with_capacity(fields.len());
    // A leasehold waiter's entry in the grants hash carries the sign its
    // place runs out by (its score follows Redisson's arithmetic, minutes
    // ahead, for Java's scripts): the earlier of the two is shown.
    let grants = prefix_name(fair_lock::GRANTS_PREFIX, name);
    for field in fields {
        let mut score: Option<f64> = match l.timeouts.get(name) {
            Some(z) => redis.zscore(z.as_str(), field.as_str()).await?,
            None => None,
        };
        let entry: Option<String> = redis.hget(grants.as_str(), field.as_str()).await?;
        if let Some(alive) = entry.as_deref().and_then(fair_lock::entry_alive_until) {
            score = Some(score.map_or(alive, |s| s.min(alive)));
        }
        let app = field
            .split(':')
            .next()
            .and_then(|c| records.get(c))
            .and_then(|r| r.app.clone());
        out.push(QueuedWaiter {
            timeout_in_ms: score.map(|s| s as i64 - now as i64),
            field,
            app,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_and_names() {
        assert!(glob("*", "a:b"));
        assert!(glob("orders:*", "orders:42"));
        assert!(!glob("orders:?", "orders:42"));
        assert!(glob("o[a-z]ders", "orders"));
        assert_eq!(untag("{x}"), "x");
        assert_eq!(untag("{a}b"), "{a}b");
        assert_eq!(
            under("redisson_lock_queue:{x}", fair_lock::QUEUE_PREFIX),
            Some("{x}")
        );
        assert!(holder_shaped("3f:1"));
        assert!(holder_shaped("3f:1:write"));
        assert!(!holder_shaped("mode"));
        assert!(!holder_shaped("a:b"));
    }

    #[test]
    fn bookkeeping_keys_are_no_objects() {
        for key in [
            "leasehold:client:{0f1e}",
            "leasehold_latch:{a}:x:1",
            "leasehold_grant:{a}",
            "leasehold_alive:0f1e",
            "leasehold_alive:{a}:0f1e",
            "redisson_unlock_latch:{a}:1",
            "{a}:x:1:rwlock_timeout:1",
        ] {
            assert!(bookkeeping(key), "{key}");
        }
        for key in [
            "a",
            "redisson_lock_queue:{a}",
            "{a}:timeout",
            "leasehold_latches",
        ] {
            assert!(!bookkeeping(key), "{key}");
        }
    }

    #[test]
    fn fair_entries_and_numsub_replies() {
        assert_eq!(
            fair_lock::entry_alive_until("30000:7:1700000000000"),
            Some(1.7e12)
        );
        assert_eq!(
            fair_lock::entry_alive_until("30000:7:1700000000000:C"),
            Some(1.7e12)
        );
        assert_eq!(
            fair_lock::entry_alive_until("30000:7:1700000000000:c"),
            Some(1.7e12)
        );
        assert_eq!(fair_lock::entry_alive_until("grant"), None);
        let reply = Value::Array(vec!["a".into(), 2.into(), "b".into(), 1.into()]);
        assert_eq!(numsub_count(reply), 3);
        assert_eq!(numsub_count(Value::Array(Vec::new())), 0);
        assert_eq!(
            latch::channel_of("{a}b"),
            "redisson_countdownlatch__channel__{{a}b}"
        );
    }
}

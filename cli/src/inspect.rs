//! Finding lock-family objects by their key layout (REDISSON-WIRE.md), and
//! showing them.
//!
//! | kind | keys |
//! | --- | --- |
//! | `lock` | hash `name`, fields `<uuid>:<id>` → hold count |
//! | `fenced_lock` | the same hash, and the string `redisson_lock_token:{name}` |
//! | `fair_lock` | the same hash (while held), list `redisson_lock_queue:{name}`, zset `redisson_lock_timeout:{name}` (score: the waiter's dead-by time, epoch ms) |
//! | `rw_lock` | hash `name` with a `mode` field (`read`/`write`); `<uuid>:<id>` readers, `<uuid>:<id>:write` the writer |
//! | `semaphore` | string count `name` and zset `{name}:timeout` (raw 16-byte permit id → expiry, epoch ms); or the count alone, with subscribers on `redisson_sc:{name}` |
//! | `latch` | an integer string `name` with subscribers on `redisson_countdownlatch__channel__{name}` |
//! | `semaphore-or-latch` | an integer string `name` and nothing else |
//!
//! (`{name}` is `name` itself when it has braces: Redisson's `prefixName`
//! and `suffixName` rules; the latch's channel always adds braces.)
//!
//! A semaphore with no permit out and a latch are the same thing in
//! Redis: one integer string (a semaphore's permit set is a zset, which
//! Redis deletes with its last member; neither has another key). The
//! count does not tell them apart either: a latch may be set to any
//! count, 0 included, and a semaphore may have any number free. What
//! does is who listens: waiters of a semaphore subscribe to
//! `redisson_sc:{name}`, waiters of a latch to
//! `redisson_countdownlatch__channel__{name}` (leasehold and Redisson
//! alike, classic or sharded pub/sub), so `PUBSUB NUMSUB` and `PUBSUB
//! SHARDNUMSUB` name the kind while anyone waits. With nobody waiting on
//! either channel (or someone on both), the kind is reported as
//! `semaphore-or-latch` rather than guessed; its JSON has `count`. Skipped:
//! client records, latch keys (`leasehold_latch:`, `redisson_unlock_latch:`),
//! a fair lock's grants being handed over (`leasehold_grant:`) and
//! read-hold timeout keys (`…:rwlock_timeout:<n>`).

use std::collections::{BTreeMap, HashMap};

use fred::interfaces::{
    ClientLike, ClusterInterface, HashesInterface, KeysInterface, ListInterface, PubsubInterface,
    SortedSetsInterface,
};
use fred::prelude::Client as Redis;
use fred::types::{Key, Value};
use futures_util::TryStreamExt;
use leasehold::ClientRecord;
use serde_json::{json, Value as Json};

use crate::Result;

/// One object as `inspect` shows it.
#[derive(Debug, Default)]
pub(crate) struct Object {
    pub(crate) name: String,
    pub(crate) kind: &'static str,
    /// PTTL of the main key: -1 no expiry, -2 missing (a free fair or
    /// fenced lock).
    pub(crate) ttl_ms: i64,
    pub(crate) holders: Vec<Holder>,
    pub(crate) waiters: Vec<Waiter>,
    /// rw_lock: `read` / `write`.
    pub(crate) mode: Option<String>,
    /// fair_lock: the queue, in order.
    pub(crate) queue: Vec<Queued>,
    /// fenced_lock: the last token handed out.
    pub(crate) token: Option<i64>,
    /// semaphore: available permits; latch and semaphore-or-latch: the
    /// count.
    pub(crate) count: Option<i64>,
    /// semaphore: permits out.
    pub(crate) permits: Vec<PermitOut>,
}

#[derive(Debug)]
pub(crate) struct Holder {
    pub(crate) field: String,
    pub(crate) client: Option<String>,
    pub(crate) owner: Option<u64>,
    pub(crate) holds: i64,
    pub(crate) app: Option<String>,
    pub(crate) host: Option<String>,
    pub(crate) pid: Option<u32>,
}

#[derive(Debug)]
pub(crate) struct Waiter {
    pub(crate) field: String,
    pub(crate) app: Option<String>,
    pub(crate) waiting_ms: u64,
}

#[derive(Debug)]
pub(crate) struct Queued {
    pub(crate) field: String,
    pub(crate) app: Option<String>,
    /// Until its entry times out (dead-by score − now).
    pub(crate) timeout_in_ms: Option<i64>,
}

#[derive(Debug)]
pub(crate) struct PermitOut {
    pub(crate) id: String,
    /// None: the permit never expires.
    pub(crate) expires_in_ms: Option<i64>,
}

/// Redisson's score for a permit that never expires.
const NO_EXPIRY: f64 = 922_337_203_685_477.0;

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `{name}` → `name`; a name with braces is kept as it is.
fn untag(rest: &str) -> String {
    match rest.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
        Some(inner) if !inner.contains(['{', '}']) => inner.to_owned(),
        _ => rest.to_owned(),
    }
}

/// `prefix:{name}` (or `prefix:name` when the name has braces).
fn prefixed(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// `{name}:suffix` (or `name:suffix` when the name has braces).
fn suffixed(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// Glob match (`*`, `?`, `[abc]`, `[a-z]`, `\x`), as Redis's `MATCH`.
pub(crate) fn glob(pattern: &str, text: &str) -> bool {
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

fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.to_string()),
        Value::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::Integer(n) => Some(n.to_string()),
        Value::Double(d) => Some(d.to_string()),
        _ => None,
    }
}

async fn scan_all(redis: &Redis) -> Result<Vec<String>> {
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

/// The pieces of the keyspace that make up objects.
#[derive(Default)]
struct Layout {
    hashes: Vec<String>,
    strings: Vec<String>,
    queues: BTreeMap<String, String>,
    timeouts: BTreeMap<String, String>,
    tokens: BTreeMap<String, String>,
    permits: BTreeMap<String, String>,
}

async fn layout(redis: &Redis, keys: Vec<String>) -> Result<Layout> {
    let mut l = Layout::default();
    for key in keys {
        if key.starts_with("leasehold:client:")
            || key.starts_with("leasehold_latch:")
            || key.starts_with("leasehold_grant:")
            || key.starts_with("leasehold_alive:")
            || key.starts_with("redisson_unlock_latch:")
            || key.contains(":rwlock_timeout:")
        {
            continue;
        }
        let kind: String = redis.r#type(key.as_str()).await?;
        match kind.as_str() {
            "hash" => l.hashes.push(key),
            "list" => {
                if let Some(rest) = key.strip_prefix("redisson_lock_queue:") {
                    l.queues.insert(untag(rest), key);
                }
            }
            "zset" => {
                if let Some(rest) = key.strip_prefix("redisson_lock_timeout:") {
                    l.timeouts.insert(untag(rest), key);
                } else if let Some(rest) = key.strip_suffix(":timeout") {
                    l.permits.insert(untag(rest), key);
                }
            }
            "string" => {
                if let Some(rest) = key.strip_prefix("redisson_lock_token:") {
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

/// Every object whose name matches `pattern`.
pub(crate) async fn inspect(redis: &Redis, pattern: &str) -> Result<Vec<Object>> {
    let keys = scan_all(redis).await?;
    build(redis, keys, |name| glob(pattern, name)).await
}

/// The object named exactly `name`, if any.
pub(crate) async fn inspect_exact(redis: &Redis, name: &str) -> Result<Vec<Object>> {
    let keys = vec![
        name.to_owned(),
        prefixed("redisson_lock_queue", name),
        prefixed("redisson_lock_timeout", name),
        prefixed("redisson_lock_token", name),
        suffixed(name, "timeout"),
    ];
    let mut present = Vec::new();
    for k in keys {
        let n: i64 = redis.exists(k.as_str()).await?;
        if n > 0 {
            present.push(k);
        }
    }
    build(redis, present, |n| n == name).await
}

async fn build(
    redis: &Redis,
    keys: Vec<String>,
    wanted: impl Fn(&str) -> bool,
) -> Result<Vec<Object>> {
    let l = layout(redis, keys).await?;
    let records: HashMap<String, ClientRecord> = leasehold::client_records(redis)
        .await?
        .into_iter()
        .map(|r| (r.id.to_string(), r))
        .collect();
    let now = now_ms();
    let mut objects: BTreeMap<String, Object> = BTreeMap::new();

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
            "rw_lock"
        } else if l.tokens.contains_key(key) {
            "fenced_lock"
        } else if l.queues.contains_key(key) || l.timeouts.contains_key(key) {
            "fair_lock"
        } else {
            "lock"
        };
        let mut holders: Vec<Holder> = fields
            .iter()
            .filter(|(f, _)| f.as_str() != "mode")
            .map(|(f, v)| holder(f, v, &records))
            .collect();
        holders.sort_by(|a, b| a.field.cmp(&b.field));
        objects.insert(
            key.clone(),
            Object {
                name: key.clone(),
                kind,
                ttl_ms: redis.pttl(key.as_str()).await?,
                holders,
                mode,
                ..Object::default()
            },
        );
    }
    // Free fair and fenced locks: only their companions are left.
    for (name, kind) in l
        .queues
        .keys()
        .chain(l.timeouts.keys())
        .map(|n| (n, "fair_lock"))
        .chain(l.tokens.keys().map(|n| (n, "fenced_lock")))
    {
        if wanted(name) && !objects.contains_key(name) {
            objects.insert(
                name.clone(),
                Object {
                    name: name.clone(),
                    kind,
                    ttl_ms: -2,
                    ..Object::default()
                },
            );
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
            "semaphore"
        } else {
            count_kind(redis, key).await?
        };
        objects.insert(
            key.clone(),
            Object {
                name: key.clone(),
                kind,
                ttl_ms: redis.pttl(key.as_str()).await?,
                count: Some(count),
                ..Object::default()
            },
        );
    }
    // Permit sets whose count key is gone still show their permits.
    for name in l.permits.keys() {
        if wanted(name) && !objects.contains_key(name) {
            objects.insert(
                name.clone(),
                Object {
                    name: name.clone(),
                    kind: "semaphore",
                    ttl_ms: -2,
                    ..Object::default()
                },
            );
        }
    }

    for o in objects.values_mut() {
        match o.kind {
            "semaphore" => o.permits = permits(redis, &l.permits, &o.name, now).await?,
            "fair_lock" => o.queue = queue(redis, &l, &o.name, &records, now).await?,
            "fenced_lock" => {
                if let Some(k) = l.tokens.get(&o.name) {
                    let t: Option<String> = redis.get(k.as_str()).await?;
                    o.token = t.and_then(|t| t.parse().ok());
                }
            }
            _ => {}
        }
        for r in records.values() {
            for w in r.waits.iter().filter(|w| w.lock == o.name) {
                o.waiters.push(Waiter {
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
async fn count_kind(redis: &Redis, name: &str) -> Result<&'static str> {
    let semaphore = subscribers(redis, &prefixed("redisson_sc", name)).await?;
    let latch = subscribers(redis, &latch_channel(name)).await?;
    Ok(match (semaphore > 0, latch > 0) {
        (true, false) => "semaphore",
        (false, true) => "latch",
        _ => "semaphore-or-latch",
    })
}

/// The latch's channel: braces always added (Redisson's rule for it).
fn latch_channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

/// Connections subscribed to `channel`: classic subscribers (on every
/// primary of a cluster, where each node counts only its own) and sharded
/// ones (on the channel's node; none before Redis 7, which has no
/// sharded pub/sub).
async fn subscribers(redis: &Redis, channel: &str) -> Result<u64> {
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

fn holder(field: &str, value: &str, records: &HashMap<String, ClientRecord>) -> Holder {
    let mut parts = field.splitn(3, ':');
    let client = parts.next().filter(|c| !c.is_empty()).map(str::to_owned);
    let owner = parts.next().and_then(|o| o.parse().ok());
    let record = client.as_ref().and_then(|c| records.get(c));
    Holder {
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
    redis: &Redis,
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
    redis: &Redis,
    l: &Layout,
    name: &str,
    records: &HashMap<String, ClientRecord>,
    now: u64,
) -> Result<Vec<Queued>> {
    let Some(list) = l.queues.get(name) else {
        return Ok(Vec::new());
    };
    let fields: Vec<String> = redis.lrange(list.as_str(), 0, -1).await?;
    let mut out = Vec::with_capacity(fields.len());
    // leasehold's grant hash beside the queue: a leasehold waiter's entry
    // "<lease>:<nonce>:<alive until>[:c|:C]" carries the liveness sign its
    // scripts purge it by (with ":c", once it has passed, its client's
    // `leasehold_alive:` key keeps it); its score follows Redisson's
    // arithmetic (minutes ahead, for Java's scripts).
    let grants = prefixed("leasehold_grant", name);
    for field in fields {
        let mut score: Option<f64> = match l.timeouts.get(name) {
            Some(z) => redis.zscore(z.as_str(), field.as_str()).await?,
            None => None,
        };
        let entry: Option<String> = redis.hget(grants.as_str(), field.as_str()).await?;
        let alive = entry
            .as_deref()
            .and_then(|e| e.splitn(3, ':').nth(2))
            .and_then(|a| {
                a.trim_end_matches(['c', 'C'])
                    .trim_end_matches(':')
                    .parse::<f64>()
                    .ok()
            });
        if let Some(alive) = alive {
            score = Some(score.map_or(alive, |s| s.min(alive)));
        }
        let app = field
            .split(':')
            .next()
            .and_then(|c| records.get(c))
            .and_then(|r| r.app.clone());
        out.push(Queued {
            timeout_in_ms: score.map(|s| s as i64 - now as i64),
            field,
            app,
        });
    }
    Ok(out)
}

/// Frees `o` with the library's own force unlock of its kind, through a
/// leasehold client on the same server (`redis`'s config: one server, a
/// cluster or Sentinel, as given): a lock, fenced lock or read-write lock
/// is deleted and its waiters woken; a fair lock is handed to its head
/// waiter, whose place is kept; a semaphore's permits out all go back
/// ([`leasehold::Semaphore::force_release_all`]); a latch is deleted
/// ([`leasehold::CountDownLatch::delete`]). Each runs exactly once (a
/// request record per call): a copy the network delivers late never frees
/// what someone took after it. Publish or spublish is the client's choice.
/// The client keeps no record. Whether anything was freed.
pub(crate) async fn force_unlock(redis: &Redis, o: &Object) -> Result<bool> {
    let client = leasehold::Client::builder()
        .config(redis.client_config())
        .client_record(false)
        .build()
        .await?;
    let freed = force_unlock_with(&client, o).await;
    let closed = client.shutdown().await;
    let freed = freed?;
    closed?;
    Ok(freed)
}

async fn force_unlock_with(client: &leasehold::Client, o: &Object) -> leasehold::Result<bool> {
    let n = o.name.as_str();
    match o.kind {
        "lock" => client.lock(n).force_unlock().await,
        "fenced_lock" => client.fenced_lock(n).force_unlock().await,
        "fair_lock" => client.fair_lock(n).force_unlock().await,
        "rw_lock" => {
            // The mode seen first; the other if the lock changed mode since.
            let rw = client.read_write_lock(n);
            let write_first = o.mode.as_deref() == Some("write");
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
        "semaphore" => Ok(client.semaphore(n).force_release_all().await? > 0),
        "latch" => client.count_down_latch(n).delete().await,
        _ => Ok(false),
    }
}

// === output ===

pub(crate) fn ms(ms: i64) -> String {
    match ms {
        m if m < 0 => "-".to_owned(),
        m if m < 1000 => format!("{m}ms"),
        m if m < 60_000 => format!("{:.1}s", m as f64 / 1000.0),
        m => format!("{}m{:02}s", m / 60_000, (m % 60_000) / 1000),
    }
}

fn short(field: &str) -> String {
    // The uuid's first 8 characters and the rest: `3f2a1b0c…:7`.
    match field.split_once(':') {
        Some((id, rest)) if id.len() > 8 => format!("{}…:{rest}", &id[..8]),
        _ => field.to_owned(),
    }
}

fn who(app: &Option<String>, host: &Option<String>, pid: Option<u32>) -> String {
    match (app, host, pid) {
        (Some(app), Some(host), Some(pid)) => format!("{app}@{host}/{pid}"),
        (Some(app), _, _) => app.clone(),
        _ => "foreign".to_owned(),
    }
}

/// The inspect table.
pub(crate) fn table(objects: &[Object], _now: u64) -> String {
    let mut rows = vec![[
        "NAME".to_owned(),
        "KIND".to_owned(),
        "TTL".to_owned(),
        "HOLDERS".to_owned(),
        "WAITERS".to_owned(),
    ]];
    for o in objects {
        let mut holders: Vec<String> = o
            .holders
            .iter()
            .map(|h| {
                format!(
                    "{} x{} {}",
                    short(&h.field),
                    h.holds,
                    who(&h.app, &h.host, h.pid)
                )
            })
            .collect();
        if let Some(mode) = &o.mode {
            holders.insert(0, format!("[{mode}]"));
        }
        match o.kind {
            "semaphore" => holders.push(format!(
                "{} out, {} free{}",
                o.permits.len(),
                o.count.unwrap_or(0),
                o.permits
                    .iter()
                    .map(|p| format!(
                        " {}…({})",
                        &p.id[..p.id.len().min(8)],
                        p.expires_in_ms.map_or("no expiry".into(), ms)
                    ))
                    .collect::<String>()
            )),
            "latch" => holders.push(format!("count {}", o.count.unwrap_or(0))),
            "semaphore-or-latch" => holders.push(format!(
                "count {} (no permit out, nobody waiting)",
                o.count.unwrap_or(0)
            )),
            "fenced_lock" => holders.push(format!("token {}", o.token.unwrap_or(0))),
            _ => {}
        }
        let mut waiters: Vec<String> = o
            .waiters
            .iter()
            .map(|w| {
                format!(
                    "{} {} {}",
                    short(&w.field),
                    w.app.as_deref().unwrap_or("?"),
                    ms(w.waiting_ms as i64)
                )
            })
            .collect();
        if !o.queue.is_empty() {
            waiters.push(format!(
                "queue: {}",
                o.queue
                    .iter()
                    .map(|q| format!(
                        "{} {}",
                        short(&q.field),
                        q.app.as_deref().unwrap_or("foreign")
                    ))
                    .collect::<Vec<_>>()
                    .join(" < ")
            ));
        }
        rows.push([
            o.name.clone(),
            o.kind.to_owned(),
            ms(o.ttl_ms),
            if holders.is_empty() {
                "-".to_owned()
            } else {
                holders.join(", ")
            },
            if waiters.is_empty() {
                "-".to_owned()
            } else {
                waiters.join(", ")
            },
        ]);
    }
    render(&rows)
}

/// Rows as left-aligned columns.
pub(crate) fn render<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < N {
                line.extend(std::iter::repeat_n(
                    ' ',
                    widths[i] - cell.chars().count() + 2,
                ));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

// === impl Object ===

impl Object {
    pub(crate) fn to_json(&self) -> Json {
        let holders: Vec<Json> = self
            .holders
            .iter()
            .map(|h| {
                json!({"field": h.field, "client": h.client, "owner": h.owner, "holds": h.holds,
                       "app": h.app, "host": h.host, "pid": h.pid})
            })
            .collect();
        let waiters: Vec<Json> = self
            .waiters
            .iter()
            .map(|w| json!({"field": w.field, "app": w.app, "waiting_ms": w.waiting_ms}))
            .collect();
        let mut o = json!({
            "name": self.name,
            "kind": self.kind,
            "ttl_ms": if self.ttl_ms == -2 { Json::Null } else { json!(self.ttl_ms) },
            "holders": holders,
            "waiters": waiters,
        });
        let extra = o.as_object_mut().expect("an object");
        match self.kind {
            "rw_lock" => {
                extra.insert("mode".into(), json!(self.mode));
            }
            "fair_lock" => {
                let queue: Vec<Json> = self
                    .queue
                    .iter()
                    .map(|q| json!({"field": q.field, "app": q.app, "timeout_in_ms": q.timeout_in_ms}))
                    .collect();
                extra.insert("queue".into(), json!(queue));
            }
            "fenced_lock" => {
                extra.insert("token".into(), json!(self.token));
            }
            "semaphore" => {
                extra.insert("available".into(), json!(self.count));
                let permits: Vec<Json> = self
                    .permits
                    .iter()
                    .map(|p| json!({"id": p.id, "expires_in_ms": p.expires_in_ms}))
                    .collect();
                extra.insert("permits".into(), json!(permits));
            }
            "latch" | "semaphore-or-latch" => {
                extra.insert("count".into(), json!(self.count));
            }
            _ => {}
        }
        o
    }
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
            prefixed("redisson_lock_queue", "x"),
            "redisson_lock_queue:{x}"
        );
        assert_eq!(suffixed("x", "timeout"), "{x}:timeout");
        assert!(holder_shaped("3f:1"));
        assert!(holder_shaped("3f:1:write"));
        assert!(!holder_shaped("mode"));
        assert!(!holder_shaped("a:b"));
    }

    #[test]
    fn numsub_replies() {
        let reply = Value::Array(vec!["a".into(), 2.into(), "b".into(), 1.into()]);
        assert_eq!(numsub_count(reply), 3);
        assert_eq!(numsub_count(Value::Array(Vec::new())), 0);
        assert_eq!(
            latch_channel("{a}b"),
            "redisson_countdownlatch__channel__{{a}b}"
        );
    }
}

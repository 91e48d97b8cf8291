//! What operators see: client records, long waits, and the deadlocks
//! among them ([`Client::deadlocks`](crate::Client::deadlocks)), for the
//! `leasehold` command-line tool in `cli/` (every lock-family object on a
//! Redis is `inspect.rs`'s: it reads the primitives' key names, which the
//! engine, reading these records, must not).
//!
//! # Records
//!
//! Each client keeps one Redis hash, `leasehold:client:{<client-uuid>}`
//! (the uuid is its hash tag, so every record lives wholly in one cluster
//! slot), with the fields `app`, `host`, `pid`, `version`, `started_ms`
//! (epoch ms) and `watchdog_ms`, and one field `wait:<n>` per wait that
//! has lasted past the client's threshold (default 1 s): its value is
//! `<owner field> <since epoch ms> <lock key>`. The record's TTL is three
//! renew intervals of the client's watchdog; the watchdog's cycle renews it
//! (one `PEXPIRE` per client per cycle, not per lock), `shutdown` deletes
//! it, a client that dies leaves it to expire.
//!
//! # The wait-for graph
//!
//! A wait record says owner field W waits for lock L; L's hash holds
//! fields H (`<uuid>:<id>`, or `<uuid>:<id>:write` for a write lock: the
//! owner is the part before any third `:`); each gives an edge W → H. A
//! deadlock is a cycle of that graph. This file knows nothing of Redis:
//! it is the pure part ([`find_cycles`]) and the public types; the engine
//! (`core/registry.rs`) reads the records and the lock hashes.

use std::collections::BTreeMap;
use std::fmt;

/// A wait-for cycle: each member holds a lock the next one waits for,
/// and the last holds what the first waits for.
///
/// # Example
///
/// ```no_run
/// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
/// for cycle in client.deadlocks().await? {
///     eprintln!("deadlock: {cycle}");
///     for m in &cycle.members {
///         eprintln!("  {} ({:?}) holds {} and waits for {}", m.field, m.app, m.holds, m.waits_for);
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Deadlock {
    /// The members, in wait order: member `i` waits for a lock member
    /// `i + 1` holds (the last waits for one the first holds). Starts at
    /// the smallest field, so one cycle always reads the same.
    pub members: Vec<DeadlockMember>,
}

/// One member of a [`Deadlock`].
///
/// # Example
///
/// ```no_run
/// # fn f(m: &leasehold::DeadlockMember) {
/// println!("{} of {} waits for {}", m.field, m.app.as_deref().unwrap_or("?"), m.waits_for);
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct DeadlockMember {
    /// The owner field `<client-uuid>:<owner-id>`.
    pub field: String,
    /// The app name of its client's record ([`ClientBuilder::app_name`](crate::ClientBuilder::app_name)).
    pub app: Option<String>,
    /// The lock it holds that the previous member waits for (the key,
    /// prefix included).
    pub holds: String,
    /// The lock it waits for (the key, prefix included).
    pub waits_for: String,
}

/// One client's record, as [`client_records`](crate::client_records)
/// reads it: who the client is, and which of its waits have lasted.
///
/// # Example
///
/// ```no_run
/// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
/// for r in leasehold::client_records(client.redis()).await? {
///     println!("{} {:?} on {:?} pid {:?}: {} long waits", r.id, r.app, r.host, r.pid, r.waits.len());
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientRecord {
    /// The client's uuid ([`Client::id`](crate::Client::id)).
    pub id: uuid::Uuid,
    /// [`ClientBuilder::app_name`](crate::ClientBuilder::app_name).
    pub app: Option<String>,
    /// The host the client runs on.
    pub host: Option<String>,
    /// The client's process id.
    pub pid: Option<u32>,
    /// The leasehold version the client was built with.
    pub version: Option<String>,
    /// When the client was built, epoch ms.
    pub started_ms: Option<u64>,
    /// The client's watchdog timeout, ms.
    pub watchdog_ms: Option<u64>,
    /// Its waits that have lasted past its threshold.
    pub waits: Vec<WaitRecord>,
}

/// One wait of a [`ClientRecord`]: an owner has waited for a lock since
/// `since_ms`.
///
/// # Example
///
/// ```no_run
/// # fn f(w: &leasehold::WaitRecord, now_ms: u64) {
/// println!("{} waits for {} since {} ms", w.field, w.lock, now_ms.saturating_sub(w.since_ms));
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaitRecord {
    /// The waiting owner's field `<client-uuid>:<owner-id>`.
    pub field: String,
    /// The key of the lock (or semaphore) waited for, prefix included.
    pub lock: String,
    /// When the wait started, epoch ms.
    pub since_ms: u64,
}

/// The record key's prefix; the key is `leasehold:client:{<uuid>}`.
pub(crate) const RECORD_PREFIX: &str = "leasehold:client:";
/// The prefix of a wait's field in a record: `wait:<n>`.
pub(crate) const WAIT_FIELD: &str = "wait:";

/// The uuid of a record key, if it is one.
pub(crate) fn record_id(key: &str) -> Option<uuid::Uuid> {
    let tagged = key.strip_prefix(RECORD_PREFIX)?;
    uuid::Uuid::try_parse(tagged.strip_prefix('{')?.strip_suffix('}')?).ok()
}

/// A wait's value in a record: `<field> <since ms> <lock key>`.
pub(crate) fn wait_value(field: &str, since_ms: u64, lock: &str) -> String {
    format!("{field} {since_ms} {lock}")
}

/// Reads a record's fields (`HGETALL`).
pub(crate) fn parse_record(id: uuid::Uuid, pairs: Vec<(String, String)>) -> ClientRecord {
    let mut r = ClientRecord {
        id,
        app: None,
        host: None,
        pid: None,
        version: None,
        started_ms: None,
        watchdog_ms: None,
        waits: Vec::new(),
    };
    for (field, value) in pairs {
        match field.as_str() {
            "app" => r.app = Some(value),
            "host" => r.host = Some(value),
            "pid" => r.pid = value.parse().ok(),
            "version" => r.version = Some(value),
            "started_ms" => r.started_ms = value.parse().ok(),
            "watchdog_ms" => r.watchdog_ms = value.parse().ok(),
            f if f.starts_with(WAIT_FIELD) => {
                let mut parts = value.splitn(3, ' ');
                if let (Some(field), Some(since), Some(lock)) =
                    (parts.next(), parts.next(), parts.next())
                {
                    r.waits.push(WaitRecord {
                        field: field.to_owned(),
                        lock: lock.to_owned(),
                        since_ms: since.parse().unwrap_or(0),
                    });
                }
            }
            _ => {}
        }
    }
    r.waits
        .sort_by(|a, b| (a.since_ms, &a.field).cmp(&(b.since_ms, &b.field)));
    r
}

/// One wait as its client's record shows it (input of [`find_cycles`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Wait {
    /// The waiting owner's field `<client-uuid>:<owner-id>`.
    pub(crate) field: String,
    /// The lock key waited for.
    pub(crate) lock: String,
    /// When the wait started, epoch ms.
    pub(crate) since_ms: u64,
    /// The app of the waiting client's record.
    pub(crate) app: Option<String>,
}

/// The owner part of a holder field: `<uuid>:<id>` of `<uuid>:<id>:write`
/// (and of `<uuid>:<id>` itself).
pub(crate) fn owner_of(field: &str) -> &str {
    match field.match_indices(':').nth(1) {
        Some((at, _)) => &field[..at],
        None => field,
    }
}

/// The cycles of the wait-for graph made of `waits` and `holders` (lock
/// key → its holder fields), each once. A field with several waits counts
/// each of them.
pub(crate) fn find_cycles(
    waits: &[Wait],
    holders: &BTreeMap<String, Vec<String>>,
) -> Vec<Deadlock> {
    // field → [(lock waited for, field holding it)]
    let mut edges: BTreeMap<&str, Vec<(&str, &str)>> = BTreeMap::new();
    for w in waits {
        for h in holders.get(&w.lock).into_iter().flatten() {
            let h = owner_of(h);
            if h != w.field {
                edges.entry(&w.field).or_default().push((&w.lock, h));
            }
        }
    }
    let app_of = |field: &str| {
        waits
            .iter()
            .find(|w| w.field == field)
            .and_then(|w| w.app.clone())
    };
    let mut seen = std::collections::HashSet::new();
    let mut cycles = Vec::new();
    // Depth-first from each field, keeping only cycles whose smallest
    // field is the start (each cycle found once).
    for &start in edges.keys() {
        let mut path: Vec<(&str, &str)> = Vec::new(); // (field, lock it waits for)
        walk(start, start, &edges, &mut path, &mut |path| {
            let members: Vec<DeadlockMember> = path
                .iter()
                .enumerate()
                .map(|(i, &(field, waits_for))| {
                    let before = path[(i + path.len() - 1) % path.len()];
                    DeadlockMember {
                        field: field.to_owned(),
                        app: app_of(field),
                        holds: before.1.to_owned(),
                        waits_for: waits_for.to_owned(),
                    }
                })
                .collect();
            let cycle = Deadlock { members };
            if seen.insert(cycle.clone()) {
                cycles.push(cycle);
            }
        });
    }
    cycles
}

/// A path of the graph: (field, the lock it waits for) per step.
type Path<'a> = [(&'a str, &'a str)];

/// Extends `path` from `at`; calls `found` for each path back to `start`
/// through fields not smaller than it.
fn walk<'a>(
    start: &'a str,
    at: &'a str,
    edges: &BTreeMap<&'a str, Vec<(&'a str, &'a str)>>,
    path: &mut Vec<(&'a str, &'a str)>,
    found: &mut dyn FnMut(&Path<'a>),
) {
    // Bounded: a cycle longer than this is not reported.
    if path.len() >= 16 {
        return;
    }
    for &(lock, next) in edges.get(at).into_iter().flatten() {
        path.push((at, lock));
        if next == start {
            found(path);
        } else if next > start && !path.iter().any(|&(f, _)| f == next) {
            walk(start, next, edges, path, found);
        }
        path.pop();
    }
}

// === impl Deadlock ===

impl fmt::Display for Deadlock {
    /// `a (app) holds x, waits for y -> b (app) holds y, waits for x`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, m) in self.members.iter().enumerate() {
            if i > 0 {
                f.write_str(" -> ")?;
            }
            write!(
                f,
                "{} ({}) holds `{}`, waits for `{}`",
                m.field,
                m.app.as_deref().unwrap_or("?"),
                m.holds,
                m.waits_for
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(field: &str, lock: &str) -> Wait {
        Wait {
            field: field.into(),
            lock: lock.into(),
            since_ms: 0,
            app: Some(format!("app-{field}")),
        }
    }

    /// Lock → holder fields.
    fn held(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<String>> {
        pairs
            .iter()
            .map(|(lock, field)| (lock.to_string(), vec![field.to_string()]))
            .collect()
    }

    #[test]
    fn an_abba_cycle_is_found_once() {
        let waits = [wait("u1:1", "b"), wait("u2:7", "a")];
        let holders = held(&[("a", "u1:1"), ("b", "u2:7:write")]);
        let cycles = find_cycles(&waits, &holders);
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        let m = &cycles[0].members;
        assert_eq!(m[0].field, "u1:1");
        assert_eq!((m[0].holds.as_str(), m[0].waits_for.as_str()), ("a", "b"));
        assert_eq!((m[1].holds.as_str(), m[1].waits_for.as_str()), ("b", "a"));
        assert_eq!(m[1].app.as_deref(), Some("app-u2:7"));
    }

    #[test]
    fn a_chain_is_no_cycle_and_reentry_is_no_edge() {
        let waits = [wait("u1:1", "b"), wait("u2:2", "c"), wait("u3:3", "c")];
        let holders = held(&[("b", "u2:2"), ("c", "u3:3")]);
        assert!(find_cycles(&waits, &holders).is_empty());
        assert_eq!(owner_of("u:1:write"), "u:1");
        assert_eq!(owner_of("u:1"), "u:1");
    }

    #[test]
    fn a_three_way_cycle() {
        let waits = [wait("c:3", "a"), wait("a:1", "b"), wait("b:2", "c")];
        let holders = held(&[("a", "a:1"), ("b", "b:2"), ("c", "c:3")]);
        let cycles = find_cycles(&waits, &holders);
        assert_eq!(cycles.len(), 1);
        let fields: Vec<_> = cycles[0].members.iter().map(|m| m.field.as_str()).collect();
        assert_eq!(fields, ["a:1", "b:2", "c:3"]);
        assert_eq!(cycles[0].members[0].holds, "a");
    }
}

//! A client keeps its fair-lock waiters alive, not each waiter.
//!
//! A waiter queued in a fair lock must show that it is alive, or a dead
//! one would hold the queue up for good (Redisson gives each waiter five
//! minutes). Waiting must not cost Redis per waiter, though: a service
//! with a thousand tasks queued should cost what one client does. So:
//!
//! * **One key per client** (per client and lock on a cluster). While a
//!   client has waits on fair locks that have lasted a moment ([`FRESH`]),
//!   one task of the client sets `leasehold_alive:<client uuid>` (on a
//!   cluster `leasehold_alive:{name}:<client uuid>` for each such lock:
//!   a script reads keys of its lock's slot only) with a TTL of one thread
//!   wait ([`THREAD_WAIT`], 5 s) every [`REFRESH_EVERY`] (2 s): one `SET`
//!   per 2 s, however many of its tasks wait. Each of its waiters' grant
//!   entries says `:C` (`:c`): once the entry's own sign (set by its last
//!   try) has passed, the queue's scripts count it alive while its
//!   client's key lives (`gone_at` in `scripts/queue.lua`). A client that
//!   dies stops setting the key: all its waiters count as gone at most a
//!   thread wait later, together. A wait shorter than `FRESH` (a hot
//!   lock) writes nothing.
//! * **One re-check per client and lock.** The waits of a client on one
//!   lock form a group, oldest first. The oldest re-checks as any waiter
//!   does (at the lock's remaining TTL, at most every recheck interval):
//!   it is the one that finds a dead holder's lock free, and dead waiters
//!   ahead gone. The others are told their turn (a release grants the
//!   head waiter the lock) and otherwise re-check every [`BEHIND`] (an
//!   hour), the bound of a lost message. When the oldest leaves, the next one
//!   re-checks within the recheck interval (and sends nothing at once: a
//!   hot lock hands over every few milliseconds).
//! * **Where it cannot work** (scripts may not touch keys they do not
//!   declare: Dragonfly by default; or the user may not write the key),
//!   each waiter refreshes its own sign every 2 s (`queue::refresh`), as
//!   before. [`Member::join`] decides, from what the client probed at
//!   connect.
//!
//! The groups and the keys to renew live in one process-wide table, keyed
//! by client id and lock key: a few words per waiting task.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::kind::Names;
use super::queue::{REFRESH_EVERY, THREAD_WAIT};
use crate::core::kind::{spawn_here, Conn, Engine, Key};

/// How often a waiter that is not its group's oldest re-checks: the bound
/// of a lost message for it (its group's oldest re-checks for the rest,
/// and a reconnect of the subscriber wakes every waiter). Each such try
/// costs about 9 Redis commands: 2.5 commands a second per 1,000 waiters
/// at one hour (BENCHMARKS.md, "waiting costs Redis per client").
pub(crate) const BEHIND: Duration = Duration::from_secs(60 * 60);

/// How long a wait lasts before its client's alive key is written for it
/// (its own sign, written by its try, covers THREAD_WAIT).
const FRESH: Duration = Duration::from_secs(1);

/// Every client's fair waits, by client id.
static CLIENTS: LazyLock<Mutex<HashMap<uuid::Uuid, Beats>>> = LazyLock::new(Default::default);

/// One client's fair waits (see the module docs).
#[derive(Default)]
struct Beats {
    /// Its groups, by lock key.
    groups: HashMap<Key, Group>,
    /// One alive key for the whole client (not a cluster), else one per
    /// lock.
    one_key: bool,
    /// Its renewal task runs.
    running: bool,
}

/// The waits of one client on one lock, oldest first.
#[derive(Default)]
struct Group {
    next: u64,
    /// Each wait's own channel (a pin of its waiter), by join order.
    members: BTreeMap<u64, Arc<str>>,
    /// When the group was made (its key is written once it is `FRESH`).
    since: Option<Instant>,
}

/// One wait's place in its client's group for a lock; dropped when the
/// wait ends (see the module docs).
pub(super) struct Member {
    engine: Arc<Engine>,
    client: uuid::Uuid,
    /// The lock's key.
    key: Key,
    seq: u64,
    one_key: bool,
}

impl Member {
    /// Joins the group of `client`'s waits on the lock `names`, the wait
    /// listening on `channel`; `None` if the client cannot keep waiters
    /// alive (probed at connect: `ServerInfo::undeclared_keys` and
    /// `alive_keys`); then the waiter refreshes its own sign. Sends
    /// nothing.
    pub(super) fn join(
        engine: &Arc<Engine>,
        client: uuid::Uuid,
        names: &Names,
        channel: &Arc<str>,
    ) -> Option<Member> {
        let info = engine.server_info();
        if !(info.undeclared_keys && info.alive_keys) {
            return None;
        }
        let one_key = !engine.conn().clustered;
        let mut clients = CLIENTS.lock();
        let beats = clients.entry(client).or_default();
        beats.one_key = one_key;
        let group = beats.groups.entry(names.key.clone()).or_default();
        let seq = group.next;
        group.next += 1;
        group.members.insert(seq, channel.clone());
        group.since.get_or_insert_with(Instant::now);
        if !beats.running {
            beats.running = spawn_here(renew(client, Arc::downgrade(engine.conn())));
        }
        Some(Member {
            engine: engine.clone(),
            client,
            key: names.key.clone(),
            seq,
            one_key,
        })
    }

    /// How the acquire script marks this wait's entry (`ARGV[8]` of
    /// `scripts/acquire.lua`): 1 kept alive by its client's key for the
    /// lock (`:c`), 2 by its client's one key (`:C`).
    pub(super) fn mark(&self) -> i64 {
        if self.one_key {
            2
        } else {
            1
        }
    }

    /// Whether this is the oldest wait of its group (it re-checks for
    /// the others).
    pub(super) fn is_first(&self) -> bool {
        CLIENTS
            .lock()
            .get(&self.client)
            .and_then(|b| b.groups.get(&self.key))
            .and_then(|g| g.members.keys().next().copied())
            == Some(self.seq)
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let next = {
            let mut clients = CLIENTS.lock();
            let Some(beats) = clients.get_mut(&self.client) else {
                return;
            };
            let Some(group) = beats.groups.get_mut(&self.key) else {
                return;
            };
            let first = group.members.keys().next() == Some(&self.seq);
            group.members.remove(&self.seq);
            let next = group.members.values().next().filter(|_| first).cloned();
            if group.members.is_empty() {
                beats.groups.remove(&self.key);
            }
            next
        };
        // The next wait re-checks for the group from now on: by one
        // recheck interval at the latest (no command now).
        if let Some(channel) = next {
            self.engine.recheck_within_interval(&channel);
        }
    }
}

/// The alive key (see `alive_key` in `scripts/queue.lua`, which names it
/// the same way): `leasehold_alive:<uuid>` for the whole client
/// (`one_key`), else `leasehold_alive:{name}:<uuid>` for the lock `key`.
fn alive_key(one_key: bool, key: &Key, client: uuid::Uuid) -> Key {
    if one_key {
        return Key::from(format!("{ALIVE_PREFIX}:{client}"));
    }
    let name = String::from_utf8_lossy(key.as_bytes());
    Key::from(crate::naming::prefix_name(ALIVE_PREFIX, &name) + ":" + &client.to_string())
}

/// The alive keys' prefix: `leasehold_alive:`.
pub(crate) const ALIVE_PREFIX: &str = "leasehold_alive";

/// When a waiter's grant entry (`<lease>:<nonce>:<alive until>[:c|:C]`,
/// see `scripts/queue.lua`) says its place runs out, epoch ms; `None` for
/// an entry of another shape.
pub(crate) fn entry_alive_until(entry: &str) -> Option<f64> {
    let alive = entry.splitn(3, ':').nth(2)?;
    alive
        .trim_end_matches(['c', 'C'])
        .trim_end_matches(':')
        .parse::<f64>()
        .ok()
}

/// The client's renewal task: every `REFRESH_EVERY`, sets the alive key of
/// each lock it has waits on that are `FRESH` (concurrently: one round
/// trip); ends when it has none (the next wait starts it again).
async fn renew(client: uuid::Uuid, conn: Weak<Conn>) {
    loop {
        tokio::time::sleep(REFRESH_EVERY).await;
        let keys: Vec<Key> = {
            let mut clients = CLIENTS.lock();
            let Some(beats) = clients.get_mut(&client) else {
                return;
            };
            if conn.strong_count() == 0 {
                // The client is gone.
                clients.remove(&client);
                return;
            }
            if beats.groups.is_empty() {
                // Nothing is kept of a client that waits no more: its
                // next wait starts the task again.
                clients.remove(&client);
                return;
            }
            let fresh = beats
                .groups
                .iter()
                .filter(|(_, g)| g.since.is_some_and(|s| s.elapsed() >= FRESH))
                .map(|(key, _)| key);
            if beats.one_key {
                fresh
                    .take(1)
                    .map(|key| alive_key(true, key, client))
                    .collect()
            } else {
                fresh.map(|key| alive_key(false, key, client)).collect()
            }
        };
        let Some(conn) = conn.upgrade() else { continue };
        // Each alive key kept for a thread wait.
        let sets = keys.iter().map(|key| conn.set_for(key, THREAD_WAIT));
        for result in futures_util::future::join_all(sets).await {
            if let Err(e) = result {
                tracing::debug!(error = %e, "fair lock: an alive key was not renewed; the next round tries again");
            }
        }
    }
}

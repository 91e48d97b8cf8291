//! What this client holds, and the two script calls that change it:
//! acquire and release, each run to a known outcome.
//!
//! # The hold table
//!
//! For every (lock key, owner field) the client counts the holds it has
//! handed out and not yet seen given back: live guards plus releases in
//! flight. Redis keeps the same count in the lock hash. Two things follow:
//!
//! * **Epochs.** When an acquire creates the field afresh (count 1) while
//!   the table still counts holds for it, those holds are stale: their
//!   lease ran out or was force-unlocked and the owner has now taken the
//!   lock anew. The old *epoch* is marked lost, so a stale guard reports
//!   `lost`, and its unlock or drop gives back nothing: it can never undo a
//!   hold of the new epoch.
//! * **Reconciliation.** An acquire or release that fails with a
//!   connection error or a timeout may or may not have run (fred does not
//!   re-send it: `max_command_attempts = 1`). The call then reads the
//!   field's count, a read queued behind the script on the same
//!   connection, and compares it with the table: one more (acquire) or one
//!   less (release) than expected means the script ran. A release found not
//!   to have run is sent again, now safely. If Redis cannot be read in time,
//!   the error is returned; the hold, if any, expires with its lease.
//!
//! # One call at a time per owner and lock
//!
//! Acquires and releases of one (key, field) take a *turn*: they run one
//! after the other, each from its script call to its update of the table.
//! Several can be under way for one owner (a cancelled acquire still
//! running while the same task retries; futures joined in one task), and
//! without turns their updates could reach the table out of Redis order,
//! and a reconciliation could read a count another call had moved. With
//! turns the table and Redis agree at every step of every call. Different
//! owners and locks never wait for each other.
//!
//! Shutdown drains the table and gives every counted hold back at once.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use fred::interfaces::HashesInterface;
use tokio::time::Instant;

use crate::client::{ClientInner, Conn};
use crate::scripts::Scripts;
use crate::watchdog::LeaseState;

type FredResult<T> = Result<T, fred::error::Error>;

/// The client's holds, by (key, field).
#[derive(Debug, Default)]
pub(crate) struct Holds {
    /// Changed by acquires (`acquired`), completed releases (`released`)
    /// and shutdown (`drain`).
    map: DashMap<(String, String), Record>,
    /// The turn of each (key, field) with a call under way or waiting;
    /// an entry leaves when its last user is done (`Turn::drop`).
    turns: Arc<Turns>,
}

type Turns = DashMap<(String, String), Arc<tokio::sync::Mutex<()>>>;

/// The right to run the one acquire or release of a (key, field) under
/// way. Dropping it lets the next call go.
#[derive(Debug)]
pub(crate) struct Turn {
    turns: Arc<Turns>,
    key: (String, String),
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

#[derive(Debug)]
struct Record {
    /// Lost signal of the current epoch; guards keep a clone.
    epoch: Arc<LeaseState>,
    count: u32,
    channel: String,
    lease_ms: i64,
}

/// One hold to give back.
#[derive(Clone, Debug)]
pub(crate) struct Release {
    pub(crate) key: String,
    pub(crate) channel: String,
    pub(crate) field: String,
    pub(crate) lease_ms: i64,
}

/// What an acquire found.
#[derive(Debug)]
pub(crate) enum Acquire {
    /// The caller now holds the lock; the field's new hold count.
    Held(u32),
    /// Someone else holds it; PTTL in ms (-1: no expiry).
    Busy(i64),
}

/// How long reconciliation keeps trying to read the outcome.
const RECONCILE_FOR: Duration = Duration::from_secs(5);

// === impl Holds ===

impl Holds {
    /// Waits for the turn of (key, field).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped wait takes no turn and leaves the queue.
    pub(crate) async fn turn(&self, key: &str, field: &str) -> Turn {
        let key = (key.to_owned(), field.to_owned());
        // Declared before the wait: if the wait is dropped, it goes first
        // (releasing its reference) and the turn's drop can then remove
        // the entry.
        let mut turn = Turn {
            turns: self.turns.clone(),
            key,
            guard: None,
        };
        let wait = self
            .turns
            .entry(turn.key.clone())
            .or_default()
            .clone()
            .lock_owned();
        turn.guard = Some(wait.await);
        turn
    }

    /// Holds counted for (key, field): live guards plus releases in flight.
    pub(crate) fn count(&self, key: &str, field: &str) -> u32 {
        self.map
            .get(&(key.to_owned(), field.to_owned()))
            .map_or(0, |r| r.count)
    }

    /// Counts a hold just acquired (the field's count is now `count`) and
    /// returns its epoch. Starts a new epoch, marking the old one lost, if
    /// Redis had no holds left while the table still counted some.
    pub(crate) fn acquired(&self, release: &Release, count: u32) -> Arc<LeaseState> {
        let mut record = self
            .map
            .entry((release.key.clone(), release.field.clone()))
            .or_insert_with(|| Record {
                epoch: LeaseState::signal(),
                count: 0,
                channel: release.channel.clone(),
                lease_ms: release.lease_ms,
            });
        if count == 1 && record.count > 0 {
            tracing::debug!(key = %release.key, stale = record.count, "holds of an expired epoch");
            record.epoch.mark_lost();
            record.epoch = LeaseState::signal();
            record.count = 0;
        }
        record.count += 1;
        record.lease_ms = release.lease_ms;
        record.epoch.clone()
    }

    /// Uncounts a hold whose release completed (or that turned out stale).
    /// A hold of an older epoch is not counted any more: nothing changes.
    pub(crate) fn released(&self, key: &str, field: &str, epoch: &Arc<LeaseState>) {
        self.map
            .remove_if_mut(&(key.to_owned(), field.to_owned()), |_, record| {
                if !Arc::ptr_eq(&record.epoch, epoch) {
                    return false;
                }
                record.count = record.count.saturating_sub(1);
                record.count == 0
            });
    }

    /// Empties the table (shutdown): every epoch is marked lost, and the
    /// holds to give back are returned with their counts.
    pub(crate) fn drain(&self) -> Vec<(Release, u32)> {
        let keys: Vec<_> = self.map.iter().map(|e| e.key().clone()).collect();
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            if let Some(((key, field), record)) = self.map.remove(&key) {
                record.epoch.mark_lost();
                let release = Release {
                    key,
                    field,
                    channel: record.channel,
                    lease_ms: record.lease_ms,
                };
                out.push((release, record.count));
            }
        }
        out
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        drop(self.guard.take());
        // The map's own reference is the last one: nobody waits.
        self.turns
            .remove_if(&self.key, |_, mutex| Arc::strong_count(mutex) == 1);
    }
}

// === impl InFlight ===

/// A script call under way for a caller, holding the call's turn.
///
/// The call runs inline in the caller's future, with no task of its own.
/// If that future is dropped before the call completes (the caller was
/// cancelled), `drop` hands the turn to a task that learns the outcome,
/// by reading the field's count queued behind the script, and settles it:
/// an acquire that ran is given back, a release that did not run is sent
/// again and then uncounted. Without a runtime (it is shutting down)
/// nothing is sent and the hold expires with its lease.
#[derive(Debug)]
pub(crate) struct InFlight {
    inner: Arc<ClientInner>,
    target: Release,
    /// The table's count when the call was sent.
    before: u32,
    call: Call,
    /// `Some` until the call completes (`finish`) or is handed over.
    turn: Option<Turn>,
}

#[derive(Debug)]
enum Call {
    Acquire,
    Release(Arc<LeaseState>),
}

impl InFlight {
    /// An acquire about to be sent, with the table at `before`.
    pub(crate) fn acquire(
        inner: Arc<ClientInner>,
        target: Release,
        before: u32,
        turn: Turn,
    ) -> InFlight {
        InFlight::start(inner, target, before, Call::Acquire, turn)
    }

    /// A release of a hold of `epoch` about to be sent.
    pub(crate) fn release(
        inner: Arc<ClientInner>,
        target: Release,
        before: u32,
        epoch: Arc<LeaseState>,
        turn: Turn,
    ) -> InFlight {
        InFlight::start(inner, target, before, Call::Release(epoch), turn)
    }

    fn start(
        inner: Arc<ClientInner>,
        target: Release,
        before: u32,
        call: Call,
        turn: Turn,
    ) -> InFlight {
        InFlight {
            inner,
            target,
            before,
            call,
            turn: Some(turn),
        }
    }

    /// The call completed and the caller has its reply: ends the turn.
    pub(crate) fn finish(mut self) {
        self.turn = None;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let Some(turn) = self.turn.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (inner, target, before) = (self.inner.clone(), self.target.clone(), self.before);
        let call = std::mem::replace(&mut self.call, Call::Acquire);
        runtime.spawn(async move {
            let conn = &inner.conn;
            match call {
                Call::Acquire => {
                    if let Some(now) = read_count(conn, &target).await {
                        if now == before + 1 {
                            // It ran for a caller that has gone.
                            if let Err(e) = release(conn, &target, 1, now).await {
                                tracing::warn!(key = %target.key, error = %e, "could not give back an abandoned acquire");
                            }
                        }
                    }
                }
                Call::Release(epoch) => {
                    if read_count(conn, &target).await == Some(before) {
                        // It did not run: the hold is still there.
                        if let Err(e) = release(conn, &target, 1, before).await {
                            tracing::warn!(key = %target.key, error = %e, "could not finish an abandoned release");
                        }
                    }
                    inner.holds.released(&target.key, &target.field, &epoch);
                }
            }
            drop(turn);
        });
    }
}

// === the script calls ===

/// Runs `acquire` once. On an unknown outcome, finds out whether it ran;
/// `before` is the table's count for the field when it was sent.
pub(crate) async fn acquire(conn: &Conn, target: &Release, before: u32) -> FredResult<Acquire> {
    let reply = Scripts::get()
        .acquire
        .run::<Vec<i64>>(
            &conn.redis,
            vec![target.key.as_str().into()],
            vec![target.lease_ms.into(), target.field.as_str().into()],
        )
        .await;
    match reply {
        Ok(reply) => match reply.as_slice() {
            [1, count] => Ok(Acquire::Held(clamp_count(*count))),
            [0, ttl] => Ok(Acquire::Busy(*ttl)),
            other => Err(protocol_error(format!("acquire replied {other:?}"))),
        },
        Err(e) if crate::error::outcome_unknown(&e) => match read_count(conn, target).await {
            Some(now) if now == before + 1 => {
                tracing::info!(key = %target.key, "acquire outcome was unknown: it ran");
                Ok(Acquire::Held(now))
            }
            Some(_) => {
                tracing::info!(key = %target.key, "acquire outcome was unknown: it did not run");
                Err(e)
            }
            None => Err(e),
        },
        Err(e) => Err(e),
    }
}

/// Gives back `count` holds. `Ok(false)` if the field was not there (the
/// lease was lost). On an unknown outcome, finds out whether it ran and
/// sends it again if not; `before` is the table's count for the field.
pub(crate) async fn release(
    conn: &Conn,
    target: &Release,
    count: u32,
    before: u32,
) -> FredResult<bool> {
    let mut resent = false;
    loop {
        match run_release(conn, target, count).await {
            Ok(reply) => return Ok(reply.is_some()),
            Err(e) if crate::error::outcome_unknown(&e) && !resent => {
                match read_count(conn, target).await {
                    Some(now) if now + count <= before => return Ok(true),
                    Some(now) if now == before => {
                        tracing::info!(key = %target.key, "release did not run: sending it again");
                        resent = true;
                    }
                    _ => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
    }
}

async fn run_release(conn: &Conn, target: &Release, count: u32) -> FredResult<Option<i64>> {
    Scripts::get()
        .release
        .run(
            &conn.redis,
            vec![target.key.as_str().into(), target.channel.as_str().into()],
            vec![
                target.lease_ms.into(),
                target.field.as_str().into(),
                "0".into(),
                i64::from(count).into(),
                conn.publish_command().into(),
            ],
        )
        .await
}

/// `WAIT replicas timeout` on the connection (and, on a cluster, the node)
/// that ran the acquire; returns how many replicas acknowledged.
pub(crate) async fn wait_replicas(
    conn: &Conn,
    key: &str,
    replicas: u32,
    timeout: Duration,
) -> FredResult<u32> {
    use fred::interfaces::ClientLike;
    use fred::types::{ClusterHash, CustomCommand};
    let slot = fred::util::redis_keyslot(key.as_bytes());
    let wait = CustomCommand::new_static("WAIT", ClusterHash::Custom(slot), true);
    let timeout_ms = timeout.as_millis().max(1).to_string();
    let acked: i64 = conn
        .redis
        .custom(wait, vec![replicas.to_string(), timeout_ms])
        .await?;
    Ok(clamp_count(acked))
}

/// Reads the field's hold count, retrying for a while; `None` if Redis
/// could not be read.
async fn read_count(conn: &Conn, target: &Release) -> Option<u32> {
    let deadline = Instant::now() + RECONCILE_FOR;
    let mut pause = Duration::from_millis(10);
    loop {
        match conn
            .redis
            .hget::<Option<i64>, _, _>(target.key.as_str(), target.field.as_str())
            .await
        {
            Ok(count) => return Some(clamp_count(count.unwrap_or(0))),
            Err(e) if Instant::now() + pause < deadline => {
                tracing::debug!(error = %e, "reconciling: read failed, retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(500));
            }
            Err(e) => {
                tracing::warn!(key = %target.key, error = %e, "could not reconcile an unknown outcome");
                return None;
            }
        }
    }
}

fn clamp_count(count: i64) -> u32 {
    count.clamp(0, u32::MAX as i64) as u32
}

fn protocol_error(details: String) -> fred::error::Error {
    fred::error::Error::new(fred::error::ErrorKind::Protocol, details)
}

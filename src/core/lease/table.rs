//! The lease table ([`Leases`]): the client's lease records by lock key,
//! and the ring of idle records kept for their next acquire.
//!
//! # What it keeps
//!
//! One record per (key, owner, kind). The map is keyed by a hash of the
//! lock key ([`Prehashed`] passes it on): a slot keeps no copy of the key,
//! only the records whose keys hash alike (most keys: one, inline), and a
//! lookup compares the records' own keys.
//!
//! # Guarantees
//!
//! * **No record goes while handed out.** A record is found or made, and
//!   its first user ([`LeaseRef`]) counted, under the map's lock on the
//!   key's entry; it is dropped (`remove_idle`) only under that lock, and
//!   only when no user is left, it is not parked and Redis counts no hold
//!   for it.
//! * **One kind per field.** An owner holding a field through one kind is
//!   refused a record of another kind on the same field
//!   (`refuse_other_kinds`): each would count the other's holds.
//! * **A bounded ring of parked records.** A record whose last user goes
//!   after it held and gave everything back is parked
//!   ([`Leases::park`]): the ring keeps the last [`IDLE_RECORDS`], oldest
//!   out first. A parked record pushed out while in use stays in the table
//!   while used, and is parked anew when its last user goes; a record that
//!   never held (a waiter's) goes at once.
//! * **Losses across records.** A call that may delete a key ends exactly
//!   the holds that held it when it was sent ([`Leases::holding`]); a
//!   fresh hold ends the other records of its key that it proves gone
//!   ([`Leases::exclude_others`]).

use std::any::TypeId;
use std::collections::VecDeque;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use dashmap::DashMap;
use fred::types::Key;
use parking_lot::Mutex;
use smallvec::SmallVec;

use super::record::PARKED;
use super::{Lease, LeaseRef};
use crate::core::conn::Conn;
use crate::core::kind::Kind;
use crate::core::names::LeaseNames;
use crate::core::stats::Counters;
use crate::core::watchdog::Watchdog;
use crate::error::Result;

/// How many idle lease records a client keeps for their next acquire (see
/// the module docs): a bounded memory cost (BENCHMARKS.md, "Sizes behind
/// the code"), and enough for the locks a busy service takes over and
/// over.
pub(crate) const IDLE_RECORDS: usize = 256;

/// The client's leases, by lock key.
#[derive(Debug)]
pub(crate) struct Leases {
    /// By a hash of the key (`keys`): the slot keeps no copy of the key,
    /// and a lookup compares the records' own keys. Most keys have one
    /// record: kept inline in the map's slot.
    map: DashMap<u64, SmallVec<[Arc<Lease>; 1]>, BuildHasherDefault<Prehashed>>,
    /// Hashes the keys for `map`: seeded per table (as the standard one is),
    /// and fast on short keys, where SipHash was a visible share of a
    /// lock + unlock's client work (BENCHMARKS.md).
    keys: foldhash::fast::RandomState,
    /// Parked records, oldest first (see [`Leases::park`]); at most
    /// `idle_capacity`.
    idle: Mutex<VecDeque<Arc<Lease>>>,
    idle_capacity: usize,
    /// Tests only: every key hashes alike, so records of different keys
    /// share entries.
    #[cfg(test)]
    all_collide: bool,
    /// The client's counters, given to every lease.
    pub(crate) stats: Arc<Counters>,
}

impl Default for Leases {
    fn default() -> Leases {
        Leases {
            map: DashMap::default(),
            keys: foldhash::fast::RandomState::default(),
            idle: Mutex::new(VecDeque::new()),
            idle_capacity: IDLE_RECORDS,
            #[cfg(test)]
            all_collide: false,
            stats: Arc::default(),
        }
    }
}

/// Leases that held a key when a call that may delete it was sent (see
/// [`Leases::holding`]).
#[derive(Debug)]
pub(crate) struct Holding(Vec<(Arc<Lease>, u64)>);

impl Holding {
    /// The key was deleted: the holds taken in are gone (those whose
    /// incarnation is still the one seen; any later one came after).
    pub(crate) fn gone(self, why: &str) {
        for (lease, incarnation) in self.0 {
            if lease.is_current(incarnation) {
                lease.field_gone(why);
            }
        }
    }
}

/// Passes on a hash made already (the [`Leases`] map's keys are hashes of
/// the lock keys).
#[derive(Default)]
pub(crate) struct Prehashed(u64);

impl Hasher for Prehashed {
    fn write(&mut self, bytes: &[u8]) {
        // Not used by `u64`'s `Hash`; folded in all the same.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

// === impl Leases ===

/// Refuses a lease of `kind` on `field` of `key` while `owner` holds the same
/// field through another kind (a plain and a fair lock, or a plain and a
/// read lock, of one name: their fields are one). Each kind keeps its own
/// record, so each would count the other's holds as its own: a try of the
/// second kind finds the field one above what it counts and is answered
/// as a hold it took, and the owner has two guards for one hold in Redis.
/// Kinds of one field on one record (a plain and a fenced lock) share a
/// kind and are not refused. One comparison per record of the key.
///
/// A record of the other kind with a call under way is waited for too
/// (`Got::Settling`), even with no hold counted: an acquire dropped in
/// flight has its hold in Redis before a background job counts it and
/// gives it back (under the record's turn), and a try of this kind sent
/// meanwhile would take that hold for its own, then lose it to the
/// give-back with its guard still trusted.
fn refuse_other_kinds(
    entry: &[Arc<Lease>],
    field: &[u8],
    key: &[u8],
    owner: u64,
    kind: TypeId,
) -> Result<Option<Arc<Lease>>> {
    // Counted holds, not only live ones: a release of the other kind still
    // on its way (or whose outcome stayed unknown) counts in the field too,
    // and a try of this kind would read it as its own. And a call under
    // way: its hold may be in the field before it is counted.
    let other = entry.iter().find(|l| {
        l.owner == owner
            && l.kind.id() != kind
            && l.key_bytes() == key
            && l.field_bytes() == field
            && (l.holds() > 0 || l.in_call())
    });
    match other {
        None => Ok(None),
        // Only calls under way (releases, or an acquire being settled): the
        // caller waits for them.
        Some(other) if other.live_holds() == 0 => Ok(Some(other.clone())),
        Some(_) => Err(crate::Error::invalid(format!(
            "the current owner holds `{}` through another lock kind (a lock, fair lock or read \
             lock of one name share their holder field): give those holds back first, or use \
             one kind per name",
            String::from_utf8_lossy(key)
        ))),
    }
}

/// What [`Leases::get`] found.
pub(crate) enum Got {
    /// The record to use.
    Lease(LeaseRef),
    /// A record of another kind of the same owner sharing the field, with
    /// no live hold but a call under way: a release, or an acquire whose
    /// caller is gone and which a background job settles. The caller waits
    /// for its turn (the call has then landed, or its outcome is settled)
    /// and asks again.
    Settling(LeaseRef),
}

impl Leases {
    /// The lease of (`key`, `owner`, `kind`), made with `init` if missing.
    pub(crate) fn get(
        self: &Arc<Self>,
        conn: &Arc<Conn>,
        watchdog: &Watchdog,
        key: &Key,
        owner: u64,
        kind: &'static dyn Kind,
        init: &(dyn Fn() -> Result<LeaseNames> + Sync),
    ) -> Result<Got> {
        let key = key.as_bytes();
        let hash = self.hash(key);
        let id = kind.id();
        let matches =
            |l: &&Arc<Lease>| l.owner == owner && l.kind.id() == id && l.key_bytes() == key;
        // Found (a parked or used record: the common case) under the
        // entry's shared lock, which also keeps `remove_idle` out while
        // the user is counted.
        if let Some(entry) = self.map.get(&hash) {
            if let Some(lease) = entry.iter().find(matches) {
                if let Some(other) =
                    refuse_other_kinds(&entry, lease.field_bytes(), key, owner, id)?
                {
                    return Ok(Got::Settling(LeaseRef::new(other, Arc::downgrade(self))));
                }
                return Ok(Got::Lease(LeaseRef::new(
                    lease.clone(),
                    Arc::downgrade(self),
                )));
            }
        }
        let mut entry = self.map.entry(hash).or_default();
        let found = entry.iter().find(matches);
        let lease = match found {
            Some(lease) => {
                if let Some(other) =
                    refuse_other_kinds(&entry, lease.field_bytes(), key, owner, id)?
                {
                    return Ok(Got::Settling(LeaseRef::new(other, Arc::downgrade(self))));
                }
                lease.clone()
            }
            None => {
                let names = init()?;
                debug_assert_eq!(names.key_bytes(), key);
                if let Some(other) =
                    refuse_other_kinds(&entry, names.field_bytes(), key, owner, id)?
                {
                    return Ok(Got::Settling(LeaseRef::new(other, Arc::downgrade(self))));
                }
                let lease = Arc::new(Lease::new(
                    kind,
                    conn.clone(),
                    names,
                    owner,
                    watchdog.clone(),
                    self.stats.clone(),
                ));
                entry.push(lease.clone());
                lease
            }
        };
        // Counted under the entry's lock (see `remove_idle`).
        let lease = LeaseRef::new(lease, Arc::downgrade(self));
        drop(entry);
        Ok(Got::Lease(lease))
    }

    /// The map's hash of `key`.
    fn hash(&self, key: &[u8]) -> u64 {
        #[cfg(test)]
        if self.all_collide {
            return 0;
        }
        self.keys.hash_one(key)
    }

    /// Every lease in the table (shutdown waits for their calls).
    pub(crate) fn all(self: &Arc<Self>) -> Vec<LeaseRef> {
        let mut out = Vec::new();
        for entry in self.map.iter() {
            for lease in entry.iter() {
                out.push(LeaseRef::new(lease.clone(), Arc::downgrade(self)));
            }
        }
        out
    }

    /// How many records the table keeps, parked ones included.
    #[cfg(test)]
    pub(crate) fn lease_records(&self) -> usize {
        self.map.iter().map(|entry| entry.len()).sum()
    }

    /// How many records the table keeps that are not parked idle ones: in
    /// use, holding, or (a leak) neither and not parked.
    pub(crate) fn lease_records_in_use(&self) -> usize {
        self.map
            .iter()
            .map(|entry| entry.iter().filter(|l| !l.is_idle_parked()).count())
            .sum()
    }

    /// Tests: lets every parked record go.
    #[cfg(test)]
    fn park_none(&self) {
        let all: Vec<Arc<Lease>> = self.idle.lock().drain(..).collect();
        for old in all {
            self.let_go(old);
        }
    }

    /// `old` is no longer kept (out of the ring, or never parked): dropped
    /// from the table with any other idle record of its key, unless in use
    /// or holding.
    fn let_go(&self, old: Arc<Lease>) {
        old.flags.fetch_and(!PARKED, Ordering::AcqRel);
        let hash = self.hash(old.key_bytes());
        drop(old);
        self.remove_idle(hash);
    }

    /// How many records are parked (at most [`IDLE_RECORDS`]).
    pub(crate) fn parked(&self) -> usize {
        self.idle.lock().len()
    }

    /// Keeps `lease`, whose last user just went, for its next acquire if it
    /// held and gave everything back; otherwise drops it (and any other
    /// idle record of its key) from the table. The ring keeps the last
    /// `idle_capacity` parked records: the oldest goes when it is full (if
    /// it is in use again, it stays in the table, and is parked anew when
    /// its last user goes).
    pub(super) fn park(&self, lease: Arc<Lease>) {
        let evicted = if lease.settled_after_holding()
            && lease.flags.fetch_or(PARKED, Ordering::AcqRel) & PARKED == 0
        {
            let mut idle = self.idle.lock();
            idle.push_back(lease);
            if idle.len() > self.idle_capacity {
                idle.pop_front()
            } else {
                None
            }
        } else if lease.is_parked() {
            // Already in the ring.
            None
        } else {
            Some(lease)
        };
        if let Some(old) = evicted {
            self.let_go(old);
        }
    }

    /// Every lease with holds counted (shutdown, reconnect checks).
    pub(crate) fn held(self: &Arc<Self>) -> Vec<LeaseRef> {
        let mut out = Vec::new();
        for entry in self.map.iter() {
            for lease in entry.iter().filter(|l| l.state.lock().holds > 0) {
                out.push(LeaseRef::new(lease.clone(), Arc::downgrade(self)));
            }
        }
        out
    }

    /// Ends the incarnation of every other lease on `mine`'s key that
    /// `mine` being held proves gone (see [`Kind::excludes`]).
    pub(super) fn exclude_others(&self, mine: &Lease) {
        let Some(entry) = self.map.get(&self.hash(mine.key_bytes())) else {
            return;
        };
        for other in entry.iter().filter(|l| l.key_bytes() == mine.key_bytes()) {
            if !std::ptr::eq(Arc::as_ptr(other), mine) && mine.kind.excludes(mine, other) {
                other.field_gone(
                    "another owner of this client acquired the lock: this hold was gone",
                );
            }
        }
    }

    /// The key was deleted (force-unlocked by this client): every lease of
    /// this client holding it now is gone.
    #[cfg(test)]
    pub(crate) fn key_gone(&self, key: &Key, why: &str) {
        self.holding(key).gone(why);
    }

    /// The leases of this client that hold `key` now, each with its
    /// incarnation: taken before a call that may delete the key (a
    /// force-unlock), so that its reply ends exactly these holds. A hold
    /// that comes after (the waiter the same script hands the lock to, a
    /// newer hold after a replayed reply) is not among them.
    pub(crate) fn holding(&self, key: &Key) -> Holding {
        let key = key.as_bytes();
        let Some(entry) = self.map.get(&self.hash(key)) else {
            return Holding(Vec::new());
        };
        let held = entry
            .iter()
            .filter(|l| l.key_bytes() == key)
            .filter_map(|l| {
                let s = l.state.lock();
                (s.holds > 0).then(|| (l.clone(), s.incarnation))
            })
            .collect();
        Holding(held)
    }

    /// Drops the records of `key` that no [`LeaseRef`] uses and that hold
    /// nothing. Runs under the key's lock, as does every count of a first
    /// user (`get`, `all`, `held`), so a record is never dropped while
    /// being handed out. The watchdog may still refer to a dropped record
    /// for the rest of a cycle: it has no hold, so nothing the cycle does
    /// to it (a verdict, a loss) reaches a guard.
    /// Records of other keys with the same hash share the entry; the test
    /// drops only idle ones, so it holds for them too.
    fn remove_idle(&self, hash: u64) {
        self.map.remove_if_mut(&hash, |_, leases| {
            leases.retain(|l| {
                l.users.load(Ordering::Acquire) > 0 || l.is_parked() || l.state.lock().holds > 0
            });
            // A burst of owners on one key (many tasks trying it at once)
            // leaves no large buffer behind while the key stays held.
            if leases.capacity() > 4 * leases.len().max(1) {
                leases.shrink_to_fit();
            }
            leases.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::core::conn::Conn;
    use crate::core::kind::ReleaseReply;
    use crate::core::lease::tests::offline_ref;
    use crate::core::lease::Term;
    use crate::core::watchdog::Watchdog;

    /// Records of keys whose hashes collide share one map entry: each is
    /// found by its own key, one key's loss reaches only its records, and
    /// an idle one goes without taking the others.
    #[test]
    fn keys_whose_hashes_collide_keep_their_own_records() {
        let table = Arc::new(Leases {
            all_collide: true,
            ..Leases::default()
        });
        let conn = Arc::new(Conn::offline());
        let watchdog = Watchdog::new(Duration::from_secs(30)).unwrap();
        let get = |key: &'static str| offline_ref(&table, &conn, &watchdog, key);
        let (a, b) = (get("a"), get("b"));
        assert!(!Arc::ptr_eq(a.lease(), b.lease()));
        assert_eq!((a.key_bytes(), b.key_bytes()), (&b"a"[..], &b"b"[..]));
        assert!(Arc::ptr_eq(get("a").lease(), a.lease()));
        assert_eq!(table.lease_records(), 2);

        let start = Instant::now();
        let (signal_a, _) = a.acquired(1, Term::Watchdog, start, Duration::from_secs(30));
        let (signal_b, _) = b.acquired(1, Term::Watchdog, start, Duration::from_secs(30));
        table.key_gone(&Key::from("a"), "force-unlocked");
        assert!(signal_a.is_lost());
        assert!(!signal_b.is_lost());

        // `b` holds nothing once drained; dropping its last user parks its
        // record (it held), and the ring letting it go drops it only.
        b.drain();
        drop(b);
        assert_eq!(
            (table.lease_records(), table.lease_records_in_use()),
            (2, 1)
        );
        table.park_none();
        assert_eq!(table.lease_records(), 1);
        assert_eq!(get("a").key_bytes(), b"a");
    }

    /// Takes a fixed hold of `lease` and gives it back: the record settled
    /// after holding, its user still live.
    fn held_and_settled(lease: LeaseRef) -> LeaseRef {
        let start = Instant::now();
        let term = Term::Fixed(start + Duration::from_secs(30));
        lease.acquired(1, term, start, Duration::from_secs(30));
        lease.retire(term);
        lease.released(ReleaseReply::Freed, 1, start, Duration::ZERO);
        lease.release_done();
        lease
    }

    /// A record that held and gave everything back is parked when its last
    /// user goes, and found again by the next acquire; the ring keeps at
    /// most its capacity, oldest out; a record that never held (a waiter's
    /// busy try) goes at once; a parked record in use when the ring lets it
    /// go stays while used, and is parked anew when its last user goes.
    #[test]
    fn idle_records_are_parked_and_the_ring_is_bounded() {
        let table = Arc::new(Leases {
            idle_capacity: 2,
            ..Leases::default()
        });
        let conn = Arc::new(Conn::offline());
        let watchdog = Watchdog::new(Duration::from_secs(30)).unwrap();
        let get = |key: &'static str| offline_ref(&table, &conn, &watchdog, key);

        let first = held_and_settled(get("k0"));
        let record = Arc::downgrade(first.lease());
        drop(first);
        assert_eq!(
            (
                table.lease_records(),
                table.parked(),
                table.lease_records_in_use()
            ),
            (1, 1, 0)
        );
        let again = held_and_settled(get("k0"));
        assert!(
            std::ptr::eq(Arc::as_ptr(again.lease()), record.as_ptr()),
            "found again"
        );
        assert_eq!(table.lease_records_in_use(), 1);

        // k0 in use while k1 and k2 push it out of the ring: it stays.
        for key in ["k1", "k2"] {
            drop(held_and_settled(get(key)));
        }
        assert_eq!((table.lease_records(), table.parked()), (3, 2));
        // Its last user goes: parked anew, the oldest (k1) goes.
        drop(again);
        assert_eq!((table.lease_records(), table.parked()), (2, 2));
        assert!(record.upgrade().is_some(), "k0 parked anew");

        // A record that never held goes at once.
        let waiter = get("w");
        assert_eq!(table.lease_records(), 3);
        drop(waiter);
        assert_eq!(
            (
                table.lease_records(),
                table.parked(),
                table.lease_records_in_use()
            ),
            (2, 2, 0)
        );
    }
}

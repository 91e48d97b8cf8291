//! A lease's users: [`LeaseRef`], the counted reference that guards,
//! waiters, calls in flight and background jobs keep to a record, and
//! [`Turn`], the one acquire or release of a lease that may run at a time.
//!
//! # Guarantees
//!
//! * **Counted users.** Each `LeaseRef` counts one user of its record. The
//!   first is counted under the table's lock on the key (`table.rs`), later
//!   ones while an earlier one lives. The last one to go hands the record
//!   back to its table ([`Leases::park`]): parked if it held and gave
//!   everything back, else dropped unless Redis may still count holds for
//!   it. A parked record stays in the ring while users come and go.
//! * **One call at a time.** Acquires and releases of one lease run one at
//!   a time, from sending the script to updating the record
//!   ([`LeaseRef::turn`]: a one-permit semaphore inside the record).
//!   Waiting for the turn is cancel safe: a dropped wait takes no turn.
//!   Dropping the [`Turn`] lets the next call go. A `Turn` is a user of
//!   the record like any other, so a turn that outlives the other
//!   references still lets the table drop the idle record.
//! * **Exclusions only on fresh replies.** [`LeaseRef::acquired_by`]
//!   counts a hold on the record; only a reply that tells Redis as it is
//!   now ([`Taken::fresh`]) also ends the other records of the key that
//!   the hold proves gone (a replay describes Redis at the first run).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::{Lease, Leases, Term};
use crate::core::signal::Signal;

/// A counted reference to a lease in a table; the last one (when no hold
/// is left) removes it.
#[derive(Debug)]
pub(crate) struct LeaseRef {
    lease: Option<Arc<Lease>>,
    table: Weak<Leases>,
}

/// A lease's turn, taken (see [`LeaseRef::turn`]); dropping it lets the
/// next acquire or release of the lease go.
///
/// It refers to the lease as any user of it does (a [`LeaseRef`]): a turn
/// that outlives the other references still lets the table drop the idle
/// record.
#[derive(Debug)]
pub(crate) struct Turn {
    lease: LeaseRef,
}

/// How an acquire's hold was taken (see [`LeaseRef::acquired_by`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Taken {
    /// The incarnation when the acquire was sent ([`Lease::begin_call`]).
    pub(crate) began: u64,
    /// The reply tells Redis as it is now (not a replay, not a settle
    /// job's late answer).
    pub(crate) fresh: bool,
}

// === impl LeaseRef ===

impl LeaseRef {
    pub(crate) fn lease(&self) -> &Arc<Lease> {
        self.lease
            .as_ref()
            .unwrap_or_else(|| unreachable!("taken only by drop"))
    }

    /// Counts a hold an acquire just took and returns its signal and
    /// incarnation (see [`Lease::acquired`]); other leases of this client
    /// that the hold excludes end at once.
    #[cfg(test)]
    pub(crate) fn acquired(
        &self,
        count: u32,
        term: Term,
        sent: Instant,
        ttl: Duration,
    ) -> (Arc<Signal>, u64) {
        let began = self.state.lock().incarnation;
        self.acquired_by(count, term, sent, ttl, Taken { began, fresh: true })
    }

    /// Counts a hold an acquire took (see [`Lease::acquired`]) and returns
    /// its signal and incarnation. A `fresh` reply (Redis now, not a
    /// replay of a first run nor a settle job's late answer) also ends the
    /// other leases of this client that the hold excludes: a replay
    /// describes Redis when the request first ran, and a newer hold of
    /// another owner may have come since.
    pub(crate) fn acquired_by(
        &self,
        count: u32,
        term: Term,
        sent: Instant,
        ttl: Duration,
        taken: Taken,
    ) -> (Arc<Signal>, u64) {
        let lease = self.lease();
        let out = lease.acquired(count, term, sent, ttl, taken.began);
        if taken.fresh {
            if let Some(table) = self.table.upgrade() {
                table.exclude_others(lease);
            }
        }
        out
    }

    /// Waits for this lease's turn (one acquire or release at a time).
    ///
    /// Cancel safe: a dropped wait takes no turn.
    pub(crate) async fn turn(&self) -> Turn {
        let lease = self.lease();
        match lease.turn.acquire().await {
            // Kept by the `Turn` (which gives it back), not by a borrow of
            // the lease.
            Ok(permit) => permit.forget(),
            Err(_) => unreachable!("a lease's turn semaphore is never closed"),
        }
        Turn {
            lease: self.clone_ref(),
        }
    }

    /// The turn if it is free now (the teardown fallback never waits).
    pub(crate) fn try_turn(&self) -> Option<Turn> {
        let lease = self.lease();
        let permit = lease.turn.try_acquire().ok()?;
        permit.forget();
        Some(Turn {
            lease: self.clone_ref(),
        })
    }

    pub(crate) fn clone_ref(&self) -> LeaseRef {
        LeaseRef::new(self.lease().clone(), self.table.clone())
    }

    /// A new user of `lease`. Its first user is counted under the table's
    /// lock on the key; later ones while an earlier one lives.
    pub(super) fn new(lease: Arc<Lease>, table: Weak<Leases>) -> LeaseRef {
        lease.users.fetch_add(1, Ordering::Relaxed);
        LeaseRef {
            lease: Some(lease),
            table,
        }
    }
}

impl std::ops::Deref for LeaseRef {
    type Target = Lease;
    fn deref(&self) -> &Lease {
        self.lease()
    }
}

impl Drop for LeaseRef {
    fn drop(&mut self) {
        let Some(lease) = self.lease.take() else {
            return;
        };
        // A parked record stays in the ring: nothing to do (the common
        // case, a lock taken again and again).
        if lease.users.fetch_sub(1, Ordering::AcqRel) == 1 && !lease.is_parked() {
            if let Some(table) = self.table.upgrade() {
                table.park(lease);
            }
        }
    }
}

// === impl Turn ===

impl Drop for Turn {
    fn drop(&mut self) {
        self.lease.turn.add_permits(1);
    }
}

#[cfg(test)]
mod tests {
    use fred::types::Key;

    use super::*;
    use crate::core::conn::Conn;
    use crate::core::lease::tests::Offline;
    use crate::core::names::LeaseNames;
    use crate::core::watchdog::Watchdog;

    /// Issue 29, item 4: a replayed acquire reply (Redis at its first run)
    /// does not end another owner's newer hold on the same key.
    #[tokio::test]
    async fn a_replayed_acquire_ends_no_other_owners_hold() {
        let table = Arc::new(Leases::default());
        let conn = Arc::new(Conn::offline());
        let watchdog = Watchdog::new(Duration::from_secs(30)).unwrap();
        let of = |owner: u64, field: &'static str| {
            let got = table
                .get(&conn, &watchdog, &Key::from("k"), owner, &Offline, &|| {
                    LeaseNames::new("k", field, b"c")
                })
                .expect("short names");
            match got {
                super::super::Got::Lease(lease) => lease,
                super::super::Got::Settling(_) => unreachable!("one kind"),
            }
        };
        let (mine, theirs) = (of(1, "f1"), of(2, "f2"));
        let start = Instant::now();
        let (their_signal, _) = theirs.acquired(1, Term::Watchdog, start, Duration::from_secs(30));
        let began = mine.begin_call();
        let replay = Taken {
            began,
            fresh: false,
        };
        mine.acquired_by(1, Term::Watchdog, start, Duration::from_secs(30), replay);
        assert!(
            !their_signal.is_lost(),
            "a replay ended another owner's hold"
        );
        let fresh = Taken { began, fresh: true };
        mine.acquired_by(2, Term::Watchdog, start, Duration::from_secs(30), fresh);
        assert!(
            their_signal.is_lost(),
            "a fresh acquire ends what it excludes"
        );
        for l in [&mine, &theirs] {
            l.lease().watchdog.deregister(l.lease());
        }
    }
}

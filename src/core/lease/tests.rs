//! Fixtures for the lease files' unit tests (each file keeps its own
//! tests): a kind that sends nothing ([`Offline`]), and records of it in a
//! table on a connection that never connects, so only the bookkeeping is
//! exercised. Built only for tests.

use std::sync::Arc;
use std::time::Duration;

use fred::types::Key;
use tokio::time::Instant;

use super::{Lease, LeaseRef, Leases, Term};
use crate::core::call::Reply;
use crate::core::conn::Conn;
use crate::core::kind::{AcquireReply, Kind, ReleaseReply};
use crate::core::names::LeaseNames;
use crate::core::signal::Signal;
use crate::core::watchdog::{Renewal, Watchdog};

/// A kind for bookkeeping tests: nothing is sent.
#[derive(Debug)]
pub(super) struct Offline;

impl Kind for Offline {
    fn acquire(&self, _: &Lease, _: &crate::core::kind::Try<'_>) -> crate::core::request::Request {
        unreachable!("nothing is sent in these tests")
    }
    fn release(&self, _: &Lease, _: u32, _: i64) -> crate::core::request::Request {
        unreachable!("nothing is sent in these tests")
    }
    fn acquire_reply(&self, _: &[i64]) -> AcquireReply {
        unreachable!("nothing is sent in these tests")
    }
    fn release_reply(&self, _: &Reply) -> ReleaseReply {
        unreachable!("nothing is sent in these tests")
    }
    fn renewal(&self) -> &'static Renewal {
        unreachable!("nothing is sent in these tests")
    }
    fn excludes(&self, _: &Lease, _: &Lease) -> bool {
        true
    }
}

/// The record of `key` (owner 1, field "f") in `table`, on `conn`.
pub(super) fn offline_ref(
    table: &Arc<Leases>,
    conn: &Arc<Conn>,
    watchdog: &Watchdog,
    key: &'static str,
) -> LeaseRef {
    let got = table
        .get(conn, watchdog, &Key::from(key), 1, &Offline, &|| {
            LeaseNames::new(key, "f", b"c")
        })
        .expect("short names");
    match got {
        super::Got::Lease(lease) => lease,
        super::Got::Settling(_) => unreachable!("one kind in these tests"),
    }
}

/// A lease record on a connection that never connects, and its table.
pub(crate) fn offline_lease() -> (Arc<Leases>, LeaseRef) {
    let table = Arc::new(Leases::default());
    let conn = Arc::new(Conn::offline());
    let watchdog = Watchdog::new(Duration::from_secs(30)).unwrap();
    let lease = offline_ref(&table, &conn, &watchdog, "k");
    (table, lease)
}

/// An offline lease (see `offline_lease`) with one watchdog hold (30 s
/// TTL) taken at the instant returned, and that hold's signal.
pub(super) fn held_lease() -> (Arc<Leases>, LeaseRef, Instant, Arc<Signal>) {
    let (table, lease) = offline_lease();
    let start = Instant::now();
    let (signal, _) = lease.acquired(1, Term::Watchdog, start, Duration::from_secs(30));
    (table, lease, start, signal)
}

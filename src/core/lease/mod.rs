//! Leases: what the client holds, one lease record per (lock key, owner,
//! kind): kinds that share a field (the plain and the fenced lock) are one
//! kind.
//!
//! A [`Lease`] is the client's view of one hash field in Redis (or, for a
//! semaphore, one permit): how many holds Redis counts for it, which live
//! guards need it and until when, and the signal those guards watch.
//!
//! # The invariant
//!
//! While a guard's [`Signal`](crate::core::signal::Signal) is not lost, the field it holds exists in
//! Redis. Five things keep it:
//!
//! * **Requirements.** Each live hold needs the key until a deadline: a
//!   fixed lease's end, or "renewed by the watchdog". Acquires and renewals
//!   only ever *raise* the key's TTL; a release sets it to the longest
//!   requirement of the holds that remain. So the key never expires before
//!   the longest live hold, whatever mix of leases the owner took.
//! * **`until`.** The signal's deadline is a lower bound of the key's expiry:
//!   raised by an acquire or renewal to its *send* time plus the TTL it set,
//!   cut by a release to what it set. A guard whose `until` passed reports
//!   lost by itself, even if no task is left to tell it.
//! * **Incarnations.** When the field is found gone (an acquire recreates it
//!   with count 1, a release or renewal finds it missing), the incarnation
//!   ends: its signal is marked lost and its holds are no longer counted.
//!   A guard of an older incarnation gives back nothing, so it can never
//!   free a newer hold of the same owner.
//! * **Turns.** Acquires and releases of one lease run one at a time (the
//!   *turn*), from sending the script to updating this record, so the
//!   record follows Redis step by step. Each one bumps `gen`.
//! * **Every verdict counts.** A renewal's or a check's reply is applied if
//!   the incarnation it was sent in is still current, however many calls
//!   of the owner went by meanwhile (an owner retrying its own lock in a
//!   loop must not hide that its field is gone, nor make a renewed lease
//!   read lost): "gone" ends the incarnation, "renewed" raises the signal
//!   no further than the live holds need *now*. A refused try of the owner
//!   itself proves its field is gone ([`Lease::busy_seen`]); a re-entry
//!   that ran before its field was found gone is lost from the start
//!   ([`Lease::acquired`]). Only the early warning
//!   ([`Sent::expires_before`]) still defers to a newer call (`gen`).
//!
//! # Lifetime
//!
//! Records live in the client's [`Leases`] table while anything refers to
//! them ([`LeaseRef`]: guards, waiters, calls in flight, background jobs) or
//! Redis may still count holds for them. A record whose holds were all
//! given back stays a while longer, *parked*: the table keeps the last
//! [`IDLE_RECORDS`] such records, so a lock taken again and again (the
//! common case: the same names, over and over) finds its record, names and
//! signal ready instead of making them anew on every acquire. A parked
//! record is in the state any record is between two incarnations (no
//! holds, its last signal lost), the state a waiter's record is in while
//! its owner waits; the next acquire starts a new incarnation in it as it
//! would in a new record.
//!
//! # Files
//!
//! | file | its one job |
//! | --- | --- |
//! | `table.rs` | [`Leases`]: the records by lock key (one kind per field), the ring of parked records, losses across the records of a key |
//! | `lease_ref.rs` | a record's users: [`LeaseRef`] (counted; the last one hands the record back to the table) and its [`Turn`] (one acquire or release at a time) |
//! | `record.rs` | a record, [`Lease`]: its names, holds and their [`Term`]s, what they need of the key, its registration with the watchdog |
//! | `release.rs` | how holds end: a release's reply applied, a field found gone, a lease declared lost, a shutdown's drain |
//! | `sent.rs` | renewal snapshots, [`Sent`]: what the watchdog sends for a lease and how its verdict is applied; prefetch hints for its passes |
//! | `tests.rs` | fixtures for the unit tests (built for tests only) |

mod lease_ref;
mod record;
mod release;
mod sent;
mod table;
#[cfg(test)]
pub(crate) mod tests;

pub(crate) use lease_ref::{LeaseRef, Taken, Turn};
pub(crate) use record::{Lease, Term};
pub(crate) use sent::Sent;
pub(crate) use table::{Got, Leases, IDLE_RECORDS};

//! A renewal's reply read and applied: each entry renewed, gone, or
//! elsewhere (on a node that does not serve it); a batch with no reply in
//! time is given up, and each lease in it that could expire before the
//! next verdict is declared lost while Redis still keeps it.
//!
//! # Guarantees
//!
//! * **A reply answers its batch.** Its first element must be the
//!   batch's nonce ([`gone_entries`]); any other reply fails the call, and
//!   the connection is suspected out of step.
//! * **Lost early, never late.** A lease whose renewal got no verdict in
//!   time and that could expire before the next cycle's verdict (with
//!   slack for a late tick) is declared lost now, while Redis still keeps
//!   it: at least `timeout / 6` before, with the default interval.
//! * **A late reply still counts.** The call goes on for half an interval
//!   more; a reply by then tells how long Redis keeps each lease from the
//!   send time, and is applied (entries a node said it does not serve stay
//!   given up).
//! * **The connection hears whether renewals are answered.** A reply or a
//!   server error is an answer; fred's timeout or a lost connection is not.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::cycle::PREFETCH_AHEAD;
use crate::core::conn::Conn;
use crate::core::lease::Sent;

/// What became of a renewal call.
pub(super) enum BatchEnd {
    /// Its reply came in time: the gone (`i`) and elsewhere (`-i`) entries.
    Verdict(Vec<i64>),
    /// It failed in time.
    Failed(fred::error::Error),
    /// No reply in time: given up, and a late reply applied if one came.
    Late,
}

/// The indices of gone entries in a renewal's reply, after checking the
/// reply answers this batch (its first element is the batch's nonce).
pub(crate) fn gone_entries(
    conn: &Conn,
    nonce: i64,
    reply: Vec<i64>,
) -> std::result::Result<Vec<i64>, fred::error::Error> {
    match reply.split_first() {
        Some((&first, gone)) if first == nonce => Ok(gone.to_vec()),
        _ => {
            conn.suspect("a renewal reply answered another request");
            Err(fred::error::Error::new(
                fred::error::ErrorKind::IO,
                format!("renewal reply {reply:?} is not for batch {nonce}"),
            ))
        }
    }
}

/// Applies a renewal's verdict to its batch (`i`: gone, `-i`: not on that
/// node) and returns the entries that must be sent again elsewhere.
pub(super) fn apply(
    batch: &[Sent],
    verdict: Vec<i64>,
    sent_at: Instant,
    ttl: Duration,
) -> Vec<Sent> {
    let mut verdict = verdict.into_iter().peekable();
    let mut elsewhere = Vec::new();
    let mut renewed = 0;
    for (i, sent) in batch.iter().enumerate() {
        if let Some(ahead) = batch.get(i + PREFETCH_AHEAD) {
            ahead.prefetch();
        }
        let index = i as i64 + 1;
        match verdict.peek() {
            Some(&v) if v == index => {
                verdict.next();
                sent.gone();
            }
            Some(&v) if v == -index => {
                verdict.next();
                elsewhere.push(sent.clone());
            }
            _ => {
                renewed += 1;
                sent.renewed(sent_at, ttl);
            }
        }
    }
    // One batch, one client: its counters are every lease's.
    if let (Some(first), false) = (batch.first(), ttl.is_zero()) {
        first.lease.stats.renewed(renewed);
    }
    elsewhere
}

/// Waits for a renewal call's verdict until `until`. Without one by then,
/// the batch is given up (see [`give_up`]) but the call goes on until the
/// next cycle would start (half an interval more): a reply that comes by
/// then still tells how long Redis keeps each lease it found, counted
/// from `sent_at`, and is applied. (Entries a node said it does not serve
/// stay given up.) A server slower than the bound but answering within
/// the interval so keeps its leases.
#[allow(clippy::too_many_arguments)]
pub(super) async fn verdict(
    call: impl std::future::Future<Output = std::result::Result<Vec<i64>, fred::error::Error>>,
    conn: &Arc<Conn>,
    nonce: i64,
    batch: &[Sent],
    sent_at: Instant,
    until: Instant,
    ttl: Duration,
    interval: Duration,
) -> BatchEnd {
    let mut call = std::pin::pin!(call);
    match tokio::time::timeout_at(until, call.as_mut()).await {
        Ok(reply) => {
            answered(conn, &reply, sent_at);
            match reply.and_then(|r| gone_entries(conn, nonce, r)) {
                Ok(verdict) => BatchEnd::Verdict(verdict),
                Err(e) => BatchEnd::Failed(e),
            }
        }
        Err(_) => {
            tracing::warn!(leases = batch.len(), "lease renewal timed out");
            give_up(batch, sent_at, interval);
            match tokio::time::timeout_at(until + interval / 2, call).await {
                Ok(late) => {
                    answered(conn, &late, sent_at);
                    if let Ok(verdict) = late.and_then(|r| gone_entries(conn, nonce, r)) {
                        tracing::debug!(leases = batch.len(), "late renewal reply applied");
                        apply(batch, verdict, sent_at, ttl);
                    }
                }
                Err(_) => conn.renewal_unanswered(sent_at),
            }
            BatchEnd::Late
        }
    }
}

/// Tells `conn` whether a renewal call that ended got an answer: any
/// reply or server error did; fred's own timeout or a lost connection did
/// not.
fn answered(
    conn: &Arc<Conn>,
    reply: &std::result::Result<Vec<i64>, fred::error::Error>,
    sent_at: Instant,
) {
    match reply {
        Err(e)
            if matches!(e.kind(), fred::error::ErrorKind::Timeout)
                || crate::error::outcome_unknown(e) =>
        {
            conn.renewal_unanswered(sent_at);
        }
        _ => conn.renewal_answered(),
    }
}

/// A renewal that got no answer: leases that would not outlive the next
/// cycle's verdict (with some slack for a late tick) are declared lost
/// now, while Redis still keeps them.
pub(super) fn give_up(batch: &[Sent], sent_at: Instant, interval: Duration) {
    let next_verdict = sent_at + interval + interval / 2 + interval / 4;
    if let Some(first) = batch.first() {
        let failures = &first.lease.watchdog.inner.failures;
        failures.fetch_add(batch.len() as u64, Ordering::Relaxed);
    }
    for sent in batch {
        sent.unanswered();
        if sent.expires_before(next_verdict) {
            sent.lease
                .declare_lost("renewal could not be confirmed in time");
        }
    }
}

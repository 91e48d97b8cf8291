//! A request a primitive needs sent exactly once under a lease's turn, now
//! or, if its caller goes first, in the background: the fair lock's leave
//! of its queue.
//!
//! The primitive says what to send ([`Once::request`], built under the
//! turn, so after every call of the lease still being settled) and what a
//! reply that ran asks for ([`Once::ran`]). The engine does the rest, the
//! same way for every such request:
//!
//! * **once:** its request id is chosen when it is first sent and kept, so
//!   a run again (a background job cut off by a runtime shutdown and
//!   finished on a fresh connection) sends the same request; the request
//!   record turns a copy into a replay, or into nothing when a newer
//!   request of the owner ran first ([`Settled::Stale`]);
//! * **after its caller:** [`Armed`] sends it when asked, or, dropped still
//!   armed (the caller's future was dropped), as a background job the
//!   client's shutdown waits for.

use std::sync::Arc;

use tokio::time::Instant;

use super::background::{BoxFuture, Job};
use super::call::{Reply, Settled};
use super::conn::Conn;
use super::lease::LeaseRef;
use super::request::{Request, RequestId};
use super::Engine;

/// What a primitive asks to be sent once (see the module docs).
pub(crate) trait Once: std::fmt::Debug + Send + Sync + 'static {
    /// The lease whose turn the request waits for, and whose request record
    /// it is recorded on.
    fn lease(&self) -> &LeaseRef;

    /// The request to send, built under the lease's turn; `None` sends
    /// nothing. `under_turn` is false only for a shutdown's last run that
    /// found the turn taken (it must not wait for another task).
    fn request(&self, under_turn: bool) -> Option<Request>;

    /// The reply of the request, which ran (now or when first sent).
    fn ran(&self, conn: &Arc<Conn>, reply: &Reply);

    /// For the log: what the request does ("leave the fair lock's queue").
    fn what(&self) -> &'static str;
}

/// A [`Once`] with its request id (chosen when first sent).
#[derive(Debug)]
struct Pending<O> {
    once: O,
    id: RequestId,
}

impl<O: Once> Pending<O> {
    async fn send(&self, conn: &Arc<Conn>, under_turn: bool) {
        let lease = self.once.lease();
        let Some(request) = self.once.request(under_turn) else {
            return;
        };
        let call = request.for_lease_once(lease, &self.id);
        match call.run(conn, Instant::now()).await {
            Ok(Settled::Ran(reply)) => {
                call.forget_request_record(conn);
                self.once.ran(conn, &reply);
            }
            Ok(Settled::Stale) => {
                tracing::debug!(key = ?lease.key(), what = self.once.what(), "a newer request of the owner ran first; this one is void");
            }
            Err(e) => {
                tracing::warn!(key = ?lease.key(), what = self.once.what(), error = %e, "could not send a request once");
            }
        }
    }
}

impl<O: Once> Job for Pending<O> {
    fn run<'a>(&'a self, conn: &'a Arc<Conn>, fallback: bool) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let lease = self.once.lease();
            let turn = if fallback {
                lease.try_turn()
            } else {
                Some(lease.turn().await)
            };
            self.send(conn, turn.is_some()).await;
        })
    }

    fn order(&self) -> u64 {
        u64::MAX
    }
}

/// A [`Once`] not sent yet: [`send_now`](Self::send_now), or
/// [`disarm`](Self::disarm), or dropped armed, sent in the background.
pub(crate) struct Armed<O: Once> {
    engine: Arc<Engine>,
    pending: Option<Pending<O>>,
}

impl<O: Once> Armed<O> {
    pub(crate) fn new(engine: Arc<Engine>, once: O) -> Armed<O> {
        Armed {
            engine,
            pending: Some(Pending {
                once,
                id: RequestId::default(),
            }),
        }
    }

    /// What it sends, while armed.
    pub(crate) fn get(&self) -> Option<&O> {
        self.pending.as_ref().map(|p| &p.once)
    }

    /// Nothing is to be sent.
    pub(crate) fn disarm(&mut self) {
        self.pending = None;
    }

    /// Sends it now, under the lease's turn.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it stays armed until the request has settled, so a
    /// drop half-way sends it in the background (the same request: its id
    /// is kept).
    pub(crate) async fn send_now(&mut self) {
        if let Some(pending) = &self.pending {
            pending.run(self.engine.conn(), false).await;
        }
        self.pending = None;
    }
}

impl<O: Once> Drop for Armed<O> {
    fn drop(&mut self) {
        if let Some(pending) = self.pending.take() {
            self.engine.spawn_job(pending);
        }
    }
}

//! The late-copy bound: a command connection fred has replaced is killed
//! on the server before a reply that came after it is trusted.
//!
//! # Why
//!
//! A request record (`call.rs`) makes a copy of a latched script harmless
//! only while the record lives: a copy that reaches Redis after that runs
//! again. Copies come from connections the client has given up on: fred
//! sends a command again on a new connection after a reconnect, and
//! `Call::run` after a timeout, while the bytes of the first send may still
//! sit in a socket buffer or in a network path that heals later (a
//! partition, a stalled proxy). The server-side end of such a connection
//! is still open, and whatever reaches it runs.
//!
//! # The rule
//!
//! fred caches each command connection's server-side id (`CLIENT ID`) when
//! it connects, before it re-sends anything on it. After every latched
//! call's reply, [`Fence::moved`] compares those ids with the ones this
//! fence last saw; if fred replaced a connection, [`Fence::sweep`] sends
//! `CLIENT KILL ID <old>` to that server on the new connection and only
//! then is the reply returned. Once the kill is answered the old
//! connection is closed on the server: bytes still on their way to it are
//! never read. So:
//!
//! * every copy of a request sent before its reply on the connection that
//!   answered has run (Redis answers a connection's commands in order);
//! * every copy on a connection fred replaced is dead once the reply is
//!   returned.
//!
//! A late copy therefore can only run while its call is still in progress
//! (when the record answers it), never after the caller has moved on. The
//! request record then only has to live as long as its call, which is what
//! lets records be deleted once their reply is in (`forget.rs`).
//!
//! # Limits
//!
//! * A user without the `CLIENT KILL` permission (an ACL without
//!   `@admin`/`@dangerous`): the kill is refused, a warning is logged once,
//!   and the bound is the record's TTL again.
//! * A server that left a cluster's map cannot be reached to kill its old
//!   connection; its slots moved away, so its copies find keys that are not
//!   served there any more.
//! * If the kill itself fails (the server unreachable again), the reply is
//!   still returned (it is the truth about the first run) and the next
//!   call's check sweeps again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use fred::clients::Client as FredClient;
use fred::interfaces::{ClientInterface, ClientLike};
use fred::types::config::{Options, Server};
use fred::types::{ClusterHash, CustomCommand, Value};

type FredResult<T> = Result<T, fred::error::Error>;

/// The command connections a client has seen, by server.
#[derive(Debug, Default)]
pub(crate) struct Fence {
    /// The server-side id (`CLIENT ID`) of the command connection to each
    /// server, as of the last sweep.
    seen: parking_lot::Mutex<HashMap<Server, i64>>,
    /// One sweep at a time.
    sweeping: tokio::sync::Mutex<()>,
    /// `CLIENT KILL` was refused (no permission): warned once.
    refused: AtomicBool,
}

impl Fence {
    /// A fence that has seen `redis`'s current connections.
    pub(crate) fn new(redis: &FredClient) -> Fence {
        Fence {
            seen: parking_lot::Mutex::new(redis.connection_ids()),
            ..Fence::default()
        }
    }

    /// Whether fred has replaced (or added) a command connection since the
    /// last sweep. One lock and a copy of a small map.
    pub(crate) fn moved(&self, redis: &FredClient) -> bool {
        let now = redis.connection_ids();
        let seen = self.seen.lock();
        now.iter().any(|(server, id)| seen.get(server) != Some(id))
    }

    /// Kills on the server every command connection fred has replaced since
    /// the last sweep, and remembers the new ones. Returns once each
    /// replaced connection is known closed there (killed, or already
    /// gone), or the first error (the servers not done stay to sweep
    /// again).
    ///
    /// Cancel safe: dropped half-way, what was not remembered is swept
    /// again next time (killing a connection twice is harmless).
    pub(crate) async fn sweep(&self, redis: &FredClient) -> FredResult<()> {
        let _one = self.sweeping.lock().await;
        let now = redis.connection_ids();
        let stale: Vec<(Server, i64, i64)> = {
            let seen = self.seen.lock();
            now.iter()
                .filter_map(|(server, id)| match seen.get(server) {
                    Some(old) if old != id => Some((server.clone(), *old, *id)),
                    _ => None,
                })
                .collect()
        };
        for (server, old, new) in stale {
            self.kill(redis, &server, old).await?;
            tracing::debug!(%server, old, new, "killed a replaced command connection on the server");
            self.seen.lock().insert(server, new);
        }
        // Servers first seen now (a new cluster node, or the first
        // connection): nothing of ours was there before.
        let mut seen = self.seen.lock();
        for (server, id) in now {
            seen.entry(server).or_insert(id);
        }
        Ok(())
    }

    /// `CLIENT KILL ID old` on `server`. A refusal for lack of permission is
    /// logged once and counts as done (nothing better can be done).
    async fn kill(&self, redis: &FredClient, server: &Server, old: i64) -> FredResult<()> {
        let options = Options {
            cluster_node: Some(server.clone()),
            ..Options::default()
        };
        let command = CustomCommand::new_static("CLIENT", ClusterHash::Random, false);
        let args: Vec<Value> = vec!["KILL".into(), "ID".into(), old.into()];
        match Box::pin(
            redis
                .with_options(&options)
                .custom::<Value, _>(command, args),
        )
        .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.details().contains("NOPERM") => {
                if !self.refused.swap(true, Ordering::Relaxed) {
                    tracing::warn!(error = %e, "CLIENT KILL refused: a copy of a request stuck on a replaced connection may run later than its call (bounded by the request record's TTL only)");
                }
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

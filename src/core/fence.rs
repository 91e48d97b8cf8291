//! The late-copy bound: a command connection fred has replaced is killed
//! on the server before a reply that came after it is trusted.
//!
//! # Why
//!
//! A request record (`call.rs`) makes a copy of a recorded script harmless
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
//! Every command connection of a client carries the client's fred id as
//! its name (`CLIENT SETNAME`, on every connect), and fred caches each
//! connection's server-side id (`CLIENT ID`) when it connects, before it
//! re-sends anything on it. After every recorded call's reply,
//! [`Fence::moved`] compares those ids with the ones this fence last saw;
//! if fred replaced a connection, [`Fence::sweep`] lists the server's
//! clients (`CLIENT LIST TYPE normal`) and kills every one with the
//! client's name but the current one (`CLIENT KILL ID`), and only then is
//! the reply returned. That catches a connection fred had and dropped
//! between two sweeps too. Once the kill is answered the old connection is
//! closed on the server: bytes still on their way to it are never read.
//! So:
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
//!   and the bound is the record's TTL again. Without `CLIENT LIST`, or
//!   without `CLIENT SETNAME` (the client then connects with unnamed
//!   connections), only the connection the fence last saw is killed, by
//!   its id: one fred made and dropped between two sweeps is not.
//! * A server that left a cluster's map cannot be reached to kill its old
//!   connection; its slots moved away, so its copies find keys that are not
//!   served there any more.
//! * If the kill itself fails (the server unreachable again), the reply is
//!   still returned (it is the truth about the first run) and the next
//!   call's check sweeps again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use fred::clients::Client as FredClient;
use fred::interfaces::{ClientInterface, ClientLike};
use fred::types::config::Server;
use fred::types::{ClusterHash, CustomCommand, Value};

use super::script::on_node;

type FredResult<T> = Result<T, fred::error::Error>;

/// The command connections a client has seen, by server.
#[derive(Debug, Default)]
pub(crate) struct Fence {
    /// The server-side id (`CLIENT ID`) of the command connection to each
    /// server, as of the last sweep.
    /// Hashed with foldhash: looked up after every call's reply.
    seen: parking_lot::Mutex<HashMap<Server, i64, foldhash::fast::RandomState>>,
    /// One sweep at a time.
    sweeping: tokio::sync::Mutex<()>,
    /// `CLIENT KILL` was refused (no permission): warned once.
    refused: AtomicBool,
    /// The client's connections carry its name (`CLIENT SETNAME` was
    /// allowed): a sweep finds them by it. Otherwise it kills the
    /// connection it last saw, by id.
    named: bool,
    /// Sweeps that found a replaced connection (see [`sweeps`](Self::sweeps)).
    swept: AtomicU64,
}

impl Fence {
    /// How many sweeps have found a connection fred replaced: a call that
    /// sees this move while under way may have been sent again by fred,
    /// though another call's check swept before its own did.
    pub(crate) fn sweeps(&self) -> u64 {
        self.swept.load(Ordering::Acquire)
    }

    /// A fence that has seen `redis`'s current connections; `named`: they
    /// carry the client's name.
    pub(crate) fn new(redis: &FredClient, named: bool) -> Fence {
        Fence {
            seen: parking_lot::Mutex::new(redis.connection_ids().into_iter().collect()),
            named,
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

    /// Kills on the server every command connection of this client but the
    /// current one, on each server where fred replaced the connection since
    /// the last sweep, and remembers the new ones. Returns once each such
    /// connection is known closed there (killed, or already gone), or the
    /// first error (the servers not done stay to sweep again).
    ///
    /// Cancel safe: dropped half-way, what was not remembered is swept
    /// again next time (killing a connection twice is harmless).
    pub(crate) async fn sweep(&self, redis: &FredClient) -> FredResult<()> {
        let _one = self.sweeping.lock().await;
        let now = redis.connection_ids();
        let moved: Vec<(Server, Option<i64>, i64)> = {
            let seen = self.seen.lock();
            now.iter()
                .filter(|(server, id)| seen.get(*server) != Some(*id))
                .map(|(server, id)| (server.clone(), seen.get(server).copied(), *id))
                .collect()
        };
        if !moved.is_empty() {
            self.swept.fetch_add(1, Ordering::AcqRel);
        }
        for (server, old, current) in moved {
            self.sweep_server(redis, &server, old, current).await?;
            self.seen.lock().insert(server, current);
        }
        Ok(())
    }

    /// Kills every connection named as `redis` on `server` but `current`
    /// (`old`, the one last seen, if the server's client list is refused).
    async fn sweep_server(
        &self,
        redis: &FredClient,
        server: &Server,
        old: Option<i64>,
        current: i64,
    ) -> FredResult<()> {
        let on_server = on_node(redis, server);
        let client = || CustomCommand::new_static("CLIENT", ClusterHash::Random, false);
        let by_id = || old.filter(|old| *old != current).into_iter().collect();
        let ours: Vec<i64> = if self.named {
            let list = Box::pin(on_server.custom::<String, Value>(
                client(),
                vec!["LIST".into(), "TYPE".into(), "normal".into()],
            ))
            .await;
            match list {
                Ok(list) => ours(&list, redis.id(), current),
                Err(e) if refused(&e) => by_id(),
                Err(e) => return Err(e),
            }
        } else {
            by_id()
        };
        for id in ours {
            let kill = vec!["KILL".into(), "ID".into(), Value::Integer(id)];
            match Box::pin(on_server.custom::<Value, Value>(client(), kill)).await {
                Ok(_) => {
                    tracing::debug!(%server, id, current, "killed a replaced command connection on the server");
                }
                Err(e) if refused(&e) => {
                    if !self.refused.swap(true, Ordering::Relaxed) {
                        tracing::warn!(error = %e, "CLIENT KILL refused: a copy of a request stuck on a replaced connection may run later than its call (bounded by the request record's TTL only)");
                    }
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Whether `e` is a refusal for lack of permission (an ACL).
fn refused(e: &fred::error::Error) -> bool {
    e.details().contains("NOPERM")
}

/// The ids in a `CLIENT LIST` reply of the connections named `name`, but
/// `current`.
fn ours(list: &str, name: &str, current: i64) -> Vec<i64> {
    list.lines()
        .filter(|line| {
            line.split(' ')
                .any(|f| f.strip_prefix("name=") == Some(name))
        })
        .filter_map(|line| line.split(' ').find_map(|f| f.strip_prefix("id=")))
        .filter_map(|id| id.parse().ok())
        .filter(|id| *id != current)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::ours;

    #[test]
    fn a_client_list_yields_the_other_connections_of_the_name() {
        let list = "id=3 addr=127.0.0.1:5 laddr=127.0.0.1:6379 fd=8 name=fred-abc age=9 cmd=evalsha\n\
                    id=4 addr=127.0.0.1:6 laddr=127.0.0.1:6379 fd=9 name=other age=9 cmd=get\n\
                    id=7 addr=127.0.0.1:7 laddr=127.0.0.1:6379 fd=10 name=fred-abc age=1 cmd=client|list\n\
                    id=9 addr=127.0.0.1:8 laddr=127.0.0.1:6379 fd=11 name=fred-abcd age=1 cmd=get\n";
        assert_eq!(ours(list, "fred-abc", 7), vec![3]);
        assert_eq!(ours(list, "fred-abc", 1), vec![3, 7]);
        assert!(ours("", "fred-abc", 7).is_empty());
    }
}

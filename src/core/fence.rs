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
//! # When the fence is not known to work
//!
//! Everything above holds only while the fence can do its job. It is
//! *trusted* only if the client's connections carry its name and the user
//! may both list and kill clients: [`Fence::probe`] asks the server once
//! at connect (`CLIENT LIST TYPE master`, `CLIENT KILL ID <i64::MAX>`: neither
//! lists nor kills anything of anyone), and a refusal met later by a sweep
//! takes the trust away for good (an ACL changed under a running client).
//! An untrusted fence cannot promise that a copy is dead once its call
//! returned, so the client falls back to what needs no fence:
//!
//! * no request is sent as a twin without its record, and no check skips
//!   the record (`Conn::records_optional` is false): every mutation reads
//!   and writes its request record, so a late copy of an older request
//!   finds a newer request id there and never runs;
//! * no record is deleted early (`forget.rs` is off): each keeps its TTL
//!   (`ClientBuilder::request_record_ttl`), and **that TTL is the bound**:
//!   a copy held back in the network for longer than it may run again.
//!
//! A sweep that fails for another reason (the server unreachable for a
//! moment) leaves the fence *dirty*: the replaced connection may still
//! deliver a copy of a twin sent on it, and a twin reads no record. Until
//! a sweep succeeds, every call sweeps before it is sent and sends nothing
//! while the sweep fails ([`Fence::dirty`]); records are required for a
//! record TTL after it (`Conn::unsettled`), and none is deleted while the
//! fence is dirty.
//!
//! A server that left a cluster's map cannot be reached to kill its old
//! connection; its slots moved away, so its copies find keys that are not
//! served there any more.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use fred::clients::Client as FredClient;
use fred::interfaces::{ClientInterface, ClientLike};
use fred::types::config::Server;
use fred::types::{ClusterHash, CustomCommand, Value};

use super::caps::refused;
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
    /// `CLIENT LIST` or `CLIENT KILL` was refused (no permission): warned
    /// once.
    refused: AtomicBool,
    /// The fence is known to work (see the module docs): the connections
    /// are named and the user may list and kill clients. Set by
    /// [`probe`](Fence::probe); cleared for good by a refusal.
    trusted: AtomicBool,
    /// A sweep failed: a replaced connection may still be open on the
    /// server. Set and cleared by [`sweep`](Fence::sweep).
    dirty: AtomicBool,
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
    /// It is not trusted until [`probe`](Self::probe) says so.
    pub(crate) fn new(redis: &FredClient, named: bool) -> Fence {
        Fence {
            seen: parking_lot::Mutex::new(redis.connection_ids().into_iter().collect()),
            named,
            ..Fence::default()
        }
    }

    /// Whether the fence is known to work: a reply returned after a sweep
    /// means every other connection of the client is dead on the server.
    /// If not, requests always carry their records and records keep their
    /// TTL (see the module docs).
    pub(crate) fn trusted(&self) -> bool {
        self.trusted.load(Ordering::Acquire)
    }

    /// Trusts the fence without a probe (unit tests of an offline
    /// connection).
    #[cfg(test)]
    pub(crate) fn trust_for_test(&self) {
        self.trusted.store(true, Ordering::Release);
    }

    /// Whether a sweep failed and none has succeeded since: a replaced
    /// connection may still be open on the server.
    pub(crate) fn dirty(&self) -> bool {
        self.dirty.load(Ordering::Acquire)
    }

    /// Asks each server `redis` is connected to whether this user may list
    /// and kill clients, without listing or killing anything of anyone
    /// (`CLIENT LIST TYPE master`: the connection to this server's own
    /// primary, if any; `CLIENT KILL ID` of an id no connection has), and
    /// trusts the fence only if every server allows both and the
    /// connections are named. An answer other than a reply or a refusal
    /// (a timeout) counts as a refusal: the fence is trusted only when
    /// known to work.
    ///
    /// Cancel safe: dropped, the fence stays untrusted.
    pub(crate) async fn probe(&self, redis: &FredClient) {
        let mut works = self.named;
        let client = || CustomCommand::new_static("CLIENT", ClusterHash::Random, false);
        let servers: Vec<Server> = redis.connection_ids().into_keys().collect();
        for server in servers {
            if !works {
                break;
            }
            let on_server = on_node(redis, &server);
            let list = Box::pin(on_server.custom::<Value, Value>(
                client(),
                vec!["LIST".into(), "TYPE".into(), "master".into()],
            ))
            .await;
            let kill = Box::pin(on_server.custom::<Value, Value>(
                client(),
                vec!["KILL".into(), "ID".into(), Value::Integer(i64::MAX)],
            ))
            .await;
            for (what, answer) in [("CLIENT LIST", list), ("CLIENT KILL", kill)] {
                // An id nobody has: 0 killed, or "No such client".
                if let Err(e) = answer {
                    if refused(&e) || !e.details().contains("No such client") {
                        tracing::warn!(%server, error = %e, "{what} not allowed: the client cannot kill a connection it gave up on, so every request carries its request record and records are kept for their TTL (ClientBuilder::request_record_ttl)");
                        works = false;
                    }
                }
            }
        }
        if !self.named {
            tracing::warn!("connections are not named (CLIENT SETNAME refused): every request carries its request record and records are kept for their TTL");
        }
        self.trusted.store(works, Ordering::Release);
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
            if let Err(e) = self.sweep_server(redis, &server, old, current).await {
                self.dirty.store(true, Ordering::Release);
                return Err(e);
            }
            self.seen.lock().insert(server, current);
        }
        self.dirty.store(false, Ordering::Release);
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
                Err(e) if refused(&e) => {
                    self.distrust(&e);
                    by_id()
                }
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
                    // Nothing more can be done: records are kept instead.
                    self.distrust(&e);
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl Fence {
    /// A sweep met a refusal: the fence is not trusted any more.
    fn distrust(&self, e: &fred::error::Error) {
        self.trusted.store(false, Ordering::Release);
        if !self.refused.swap(true, Ordering::Relaxed) {
            tracing::warn!(error = %e, "CLIENT LIST or CLIENT KILL refused: a copy of a request stuck on a replaced connection may run later than its call; every request now carries its request record and records are kept for their TTL");
        }
    }
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

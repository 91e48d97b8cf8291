//! What a facade sends outside the exactly-once door: reads (is a lock
//! held, a hold count, a TTL, a latch's count, a fence's last token) and the
//! few plain commands whose outcome needs no record (a fair waiter's alive
//! key, a read-only or idempotent script); and what a facade asks of the
//! connection without sending anything (two names' slots, the server's
//! label, whether it is known to be down).
//!
//! They are [`Conn`] methods so that the fred client, its command traits
//! and its error type stay in the call layer: a primitive names a key and
//! gets a Rust value or this crate's [`Error`] back. Each is one command
//! (or one script), sent as it is: a read sent again after a reconnect
//! reads again, which is what it would have done.
//!
//! # Cancel safety
//!
//! Every async method is cancel safe: a dropped read changes nothing, and
//! a dropped `set_for` or `eval` may or may not have run, which their
//! idempotence makes harmless (the next refresh or read runs again).

use std::time::Duration;

use fred::interfaces::{ClientLike, HashesInterface, KeysInterface};
use fred::types::{Expiration, FromValue, Key, Value};

use super::conn::Conn;
use super::script::Script;
use crate::error::{Error, Result};

impl Conn {
    /// Whether `key` exists.
    pub(crate) async fn exists(&self, key: &Key) -> Result<bool> {
        let n: i64 = self.redis.exists(key.clone()).await?;
        Ok(n > 0)
    }

    /// The integer at `key` (`GET`), `None` if there is none.
    pub(crate) async fn get_int(&self, key: &Key) -> Result<Option<i64>> {
        Ok(self.redis.get(key.clone()).await?)
    }

    /// The integer in `field` of the hash `key` (`HGET`), `None` if there
    /// is none.
    pub(crate) async fn hash_int(&self, key: &Key, field: String) -> Result<Option<i64>> {
        Ok(self.redis.hget(key.clone(), field).await?)
    }

    /// The TTL of `key` (`PTTL`), `None` if it has none or is gone.
    pub(crate) async fn ttl(&self, key: &Key) -> Result<Option<Duration>> {
        let ttl: i64 = self.redis.pttl(key.clone()).await?;
        Ok((ttl >= 0).then(|| Duration::from_millis(ttl as u64)))
    }

    /// Sets `key` to 1 for `ttl` (`SET key 1 PX ttl`).
    pub(crate) async fn set_for(&self, key: &Key, ttl: Duration) -> Result<()> {
        let px = Expiration::PX(ttl.as_millis().min(i64::MAX as u128) as i64);
        Ok(self
            .redis
            .set::<(), _, _>(key.clone(), 1, Some(px), None, false)
            .await?)
    }

    /// Runs `script`, which must be read-only or idempotent (it is not
    /// recorded: a copy sent again after a reconnect runs again).
    pub(crate) async fn eval<R: FromValue>(
        &self,
        script: &Script,
        keys: &[Key],
        args: &[Value],
    ) -> Result<R> {
        Ok(script.run(&self.redis, keys, args).await?)
    }

    /// Whether `a` and `b` are keys (or channels) of different hash slots of
    /// a cluster; `false` on a single server, where everything is one
    /// slot's.
    pub(crate) fn apart(&self, a: &str, b: &str) -> bool {
        self.clustered
            && fred::util::redis_keyslot(a.as_bytes()) != fred::util::redis_keyslot(b.as_bytes())
    }

    /// `host:port,…/db` of the server (sorted hosts), the same text for
    /// every client of one deployment: the multi-locks order their
    /// members by it.
    pub(crate) fn server_label(&self) -> String {
        let config = self.redis.client_config();
        let mut hosts: Vec<String> = config
            .server
            .hosts()
            .iter()
            .map(|h| h.to_string())
            .collect();
        hosts.sort();
        format!("{}/{}", hosts.join(","), config.database.unwrap_or(0))
    }

    /// A connection error if this connection (to one server, not a
    /// cluster) is known to be down: a command would only wait out its
    /// timeout.
    pub(crate) fn known_down(&self) -> Option<Error> {
        if self.redis.is_clustered() || self.redis.is_connected() {
            return None;
        }
        Some(Error::disconnected("not connected (reconnecting)"))
    }
}

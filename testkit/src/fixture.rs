//! Shared steps of the lock tests: clients on a test server, counters read
//! from the server, and generous waits that catch hangs without timing
//! claims.

use std::future::Future;
use std::time::Duration;

use leasehold::{Client, ClientBuilder};

use crate::server::RedisServer;

/// A client of `server` with default settings.
pub async fn client(server: &RedisServer) -> Client {
    client_with(server, |b| b).await
}

/// A client of `server`, configured by `f`.
pub async fn client_with(
    server: &RedisServer,
    f: impl FnOnce(ClientBuilder) -> ClientBuilder,
) -> Client {
    f(Client::builder().url(&server.url()))
        .build()
        .await
        .expect("connect to the test redis-server")
}

/// Calls of `command` the server has counted (INFO commandstats), e.g.
/// "evalsha".
pub fn calls(server: &RedisServer, command: &str) -> u64 {
    let info = server.cmd(&["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .map(|n| n.parse().expect("calls is a number"))
        .unwrap_or(0)
}

/// `PUBSUB NUMSUB channel`: how many connections are subscribed.
pub fn numsub(server: &RedisServer, channel: &str) -> u64 {
    let reply = server.cmd(&["PUBSUB", "NUMSUB", channel]);
    reply
        .lines()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Whether `key` exists.
pub fn exists(server: &RedisServer, key: &str) -> bool {
    server.cmd(&["EXISTS", key]) == "1"
}

/// Polls `check` every 10 ms until it holds; panics after `limit` (a bound
/// that only catches hangs).
pub async fn eventually(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Awaits `fut`, panicking if it takes longer than `limit` (a hang).
pub async fn within<F: Future>(limit: Duration, what: &str, fut: F) -> F::Output {
    tokio::time::timeout(limit, fut)
        .await
        .unwrap_or_else(|_| panic!("hung: {what} did not finish within {limit:?}"))
}

/// The keys on `server` other than leasehold's latch keys
/// (`leasehold_latch:…`): what is left of lock state. Latch keys remember a
/// client's last request on a lock for a while (30 s by default) so a
/// re-sent request never runs twice; they expire by themselves. Control
/// characters in names are escaped (`\n`, `\r`), one name per element.
pub fn lock_keys(server: &RedisServer) -> Vec<String> {
    const SCRIPT: &str = "local out = {} \
        for _, k in ipairs(redis.call('keys', '*')) do \
            if string.sub(k, 1, 16) ~= 'leasehold_latch:' then \
                out[#out + 1] = (string.gsub(string.gsub(k, '\\n', '\\\\n'), '\\r', '\\\\r')) \
            end \
        end \
        return out";
    server
        .cmd(&["EVAL", SCRIPT, "0"])
        .lines()
        .filter(|k| !k.is_empty())
        .map(str::to_owned)
        .collect()
}

//! Shared steps of the lock tests: clients on a test server, counters read
//! from the server, and generous waits that catch hangs without timing
//! claims.

use std::future::Future;
use std::process::{Command, Stdio};
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

/// This test binary run again for its ignored test `test` alone (a child
/// process for tests that kill or outlive one): stdout is dropped, stderr
/// shared; the caller adds its environment and spawns or waits.
pub fn child(test: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("the test binary"));
    command
        .args(["--exact", test, "--ignored", "--quiet"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    command
}

/// The keys on `server` other than leasehold's latch keys
/// (`leasehold_latch:…`), client records (`leasehold:client:{…}`, one
/// per live client, gone with it) and fair-lock alive keys
/// (`leasehold_alive:…`, one per client and fair lock it waited on for
/// over a second, with a TTL of 5 s): what is left of lock state. Latch keys remember a
/// client's last request on a lock for a while (30 s by default) so a
/// re-sent request never runs twice; they expire by themselves. Control
/// characters in names are escaped (`\n`, `\r`), one name per element.
pub fn lock_keys(server: &RedisServer) -> Vec<String> {
    const SCRIPT: &str = "local out = {} \
        for _, k in ipairs(redis.call('keys', '*')) do \
            if string.sub(k, 1, 16) ~= 'leasehold_latch:' \
                and string.sub(k, 1, 17) ~= 'leasehold:client:' \
                and string.sub(k, 1, 16) ~= 'leasehold_alive:' then \
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

/// What is left of lock state on `server`, for a failure message: each of
/// [`lock_keys`] with its type, its PTTL and its contents (a hash's fields
/// and values, a list's elements, a sorted set's members and scores).
///
/// ```no_run
/// # let server = leasehold_testkit::RedisServer::start();
/// use leasehold_testkit::fixture::{dump_keys, lock_keys};
/// assert!(lock_keys(&server).is_empty(), "left: {}", dump_keys(&server));
/// ```
pub fn dump_keys(server: &RedisServer) -> String {
    let mut out = String::new();
    for key in lock_keys(server) {
        let kind = server.cmd(&["TYPE", &key]);
        let kind = kind.trim();
        let pttl = server.cmd(&["PTTL", &key]);
        let contents = match kind {
            "hash" => server.cmd(&["HGETALL", &key]),
            "list" => server.cmd(&["LRANGE", &key, "0", "-1"]),
            "zset" => server.cmd(&["ZRANGE", &key, "0", "-1", "WITHSCORES"]),
            "string" => server.cmd(&["GET", &key]),
            _ => String::new(),
        };
        let contents: Vec<&str> = contents.lines().filter(|l| !l.is_empty()).collect();
        out.push_str(&format!(
            "\n  {key} ({kind}, pttl {}): {contents:?}",
            pttl.trim()
        ));
    }
    out
}

/// An ABBA pair: `a` takes `x` then waits for `y`, `b` takes `y` then
/// waits for `x` (each in its own task, the second acquire after both
/// first ones). Each task ends with its second acquire's result (the lock
/// given back at once) and how long that wait took; a task that fails
/// lets go of its first lock as it ends.
pub fn abba(
    a: &Client,
    b: &Client,
    x: &'static str,
    y: &'static str,
) -> [tokio::task::JoinHandle<(leasehold::Result<()>, Duration)>; 2] {
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(2));
    let cross = |c: Client, first: &'static str, second: &'static str| {
        let barrier = barrier.clone();
        tokio::spawn(async move {
            let _first = c.lock(first).lock().await.expect("the first lock is free");
            barrier.wait().await;
            let started = tokio::time::Instant::now();
            let second = c.lock(second).lock().await.map(drop);
            (second, started.elapsed())
        })
    };
    [cross(a.clone(), x, y), cross(b.clone(), y, x)]
}

/// ACL rules that deny the `CLIENT` subcommands in `denied` (e.g.
/// `["kill", "list"]`) and allow every other one the tests' clients use, in
/// the syntax of the server the harness starts: `-client|kill` from Redis
/// 7.0, `-client +client|id …` before (6.2 cannot take a subcommand away).
pub fn deny_client_subcommands(denied: &[&str]) -> Vec<String> {
    if crate::server::server_major() >= 7 {
        return denied.iter().map(|d| format!("-client|{d}")).collect();
    }
    const ALL: [&str; 9] = [
        "id", "setname", "getname", "list", "kill", "info", "reply", "tracking", "unpause",
    ];
    std::iter::once("-client".to_owned())
        .chain(
            ALL.iter()
                .filter(|s| !denied.contains(s))
                .map(|s| format!("+client|{s}")),
        )
        .collect()
}

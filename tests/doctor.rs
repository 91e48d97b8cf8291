//! `Client::doctor` (issue 46) against real servers: the default test
//! server, restricted ACL users, an evicting policy, persistence on and
//! off, Redis 6.2, a cluster, a delaying proxy. Timing is asserted only
//! as lower bounds (a proxy's delay); the rest are generous bounds that
//! catch hangs.

use leasehold_testkit as support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use leasehold::{Client, DoctorOptions, DoctorReport, Status};
use support::cluster::RedisCluster;
use support::fixture::within;
use support::{Proxy, RedisServer};

/// Bounds that only catch hangs.
const HANG: Duration = Duration::from_secs(90);
/// A short watchdog, so the self-test sees a renewal in about a second.
const WATCHDOG: Duration = Duration::from_secs(3);

async fn client_at(url: &str) -> Client {
    Client::builder()
        .url(url)
        .watchdog_timeout(WATCHDOG)
        .client_record(false)
        .report_only(true)
        .build()
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

async fn doctor(client: &Client) -> DoctorReport {
    let report = within(HANG, "doctor", client.doctor()).await.unwrap();
    print!("{report}");
    report
}

fn status(report: &DoctorReport, name: &str) -> Status {
    report
        .get(name)
        .unwrap_or_else(|| panic!("no check `{name}` in\n{report}"))
        .status
}

fn found<'a>(report: &'a DoctorReport, name: &str) -> &'a str {
    &report.get(name).expect("the check").found
}

/// Keys on `server` whose name contains `leasehold:doctor:`.
fn doctor_keys(server: &RedisServer) -> Vec<String> {
    let mut keys = Vec::new();
    let mut cursor = "0".to_owned();
    loop {
        let reply = server.cmd(&[
            "SCAN",
            &cursor,
            "MATCH",
            "*leasehold:doctor:*",
            "COUNT",
            "1000",
        ]);
        let mut lines = reply.lines();
        cursor = lines.next().unwrap_or("0").to_owned();
        keys.extend(lines.filter(|l| !l.is_empty()).map(str::to_owned));
        if cursor == "0" {
            return keys;
        }
    }
}

/// The default test server (no persistence): nothing fails, every
/// permission and the self-test are ok, persistence warns.
#[tokio::test]
async fn the_default_server_has_no_failure() {
    let server = RedisServer::start();
    let client = client_at(&server.url()).await;
    let report = doctor(&client).await;
    assert!(
        report.checks.iter().all(|c| c.status != Status::Fail),
        "{report}"
    );
    for name in [
        "server",
        "capabilities",
        "perm.scripts",
        "perm.keys",
        "perm.channels",
        "perm.fence",
        "perm.info",
        "memory",
        "replication",
        "latency",
        "clock",
        "selftest.lock",
        "selftest.watchdog",
        "selftest.wakeup",
        "selftest.cleanup",
    ] {
        assert_eq!(status(&report, name), Status::Ok, "{name} in\n{report}");
    }
    assert!(found(&report, "perm.scripts").contains("ACL DRYRUN"));
    // Whichever server the harness runs (CI's matrix: Redis 6.2 to 7.4,
    // Valkey 8).
    let server_line = found(&report, "server");
    assert!(
        server_line.starts_with("Redis") || server_line.starts_with("Valkey"),
        "{report}"
    );
    // The harness starts servers with `--save "" --appendonly no`.
    assert_eq!(status(&report, "persistence"), Status::Warn);
    assert!(
        found(&report, "persistence").starts_with("none"),
        "{report}"
    );
    assert!(report.get("cluster").is_none(), "not a cluster");
    assert_eq!(report.exit_code(), 1);
    let json = report.to_json();
    assert!(
        json.starts_with("{\"exit_code\":1,\"checks\":[{\"name\":\"server\""),
        "{json}"
    );
    client.shutdown().await.unwrap();
}

/// The self-test leaves nothing behind: no key with the private name,
/// request records included (checked with `SCAN`).
#[tokio::test]
async fn the_self_test_leaves_no_key() {
    let server = RedisServer::start();
    let client = client_at(&server.url()).await;
    let before = server.cmd(&["DBSIZE"]);
    let report = doctor(&client).await;
    assert_eq!(status(&report, "selftest.cleanup"), Status::Ok, "{report}");
    assert_eq!(doctor_keys(&server), Vec::<String>::new());
    assert_eq!(
        server.cmd(&["DBSIZE"]),
        before,
        "nothing else written either"
    );
    // Without the self-test nothing at all is written.
    let read_only = DoctorOptions::new().self_test(false);
    let report = within(HANG, "doctor", client.doctor_with(&read_only))
        .await
        .unwrap();
    assert!(report
        .checks
        .iter()
        .all(|c| !c.name.starts_with("selftest.")));
    assert_eq!(server.cmd(&["DBSIZE"]), before);
    client.shutdown().await.unwrap();
}

/// A user without channel permissions: `perm.channels` fails (asked by
/// `ACL DRYRUN`, and probed with `PUBLISH` for a user who may not run
/// it), and the self-test is skipped rather than run into it.
#[tokio::test]
async fn a_user_without_channel_permissions_fails() {
    let server = RedisServer::start();
    server.cmd(&[
        "ACL",
        "SETUSER",
        "nochan",
        "on",
        ">pw",
        "~*",
        "+@all",
        "resetchannels",
    ]);
    server.cmd(&[
        "ACL",
        "SETUSER",
        "noacl",
        "on",
        ">pw",
        "~*",
        "+@all",
        "-acl",
        "resetchannels",
    ]);
    for (user, how) in [("nochan", "ACL DRYRUN"), ("noacl", "probed")] {
        let client = client_at(&format!("redis://{user}:pw@{}", server.addr())).await;
        let report = doctor(&client).await;
        let channels = report.get("perm.channels").unwrap();
        assert_eq!(channels.status, Status::Fail, "{user}: {report}");
        assert!(channels.found.contains(how), "{user}: {}", channels.found);
        assert!(channels.advice.as_deref().unwrap().contains("never woken"));
        assert_eq!(status(&report, "perm.scripts"), Status::Ok, "{user}");
        assert_eq!(status(&report, "selftest.wakeup"), Status::NotChecked);
        assert_eq!(report.exit_code(), 2);
        client.shutdown().await.unwrap();
    }
    assert_eq!(doctor_keys(&server), Vec::<String>::new());
}

/// A user who may run only `INFO`: no panic; what INFO tells is checked,
/// the rest is not checked, and the permissions found refused fail.
#[tokio::test]
async fn a_user_who_may_only_read_info() {
    let server = RedisServer::start();
    server.cmd(&["ACL", "SETUSER", "info", "on", ">pw", "+info"]);
    let client = client_at(&format!("redis://info:pw@{}", server.addr())).await;
    let report = doctor(&client).await;
    assert_eq!(status(&report, "server"), Status::Ok);
    assert_eq!(status(&report, "perm.info"), Status::Ok);
    assert_eq!(
        status(&report, "memory"),
        Status::Ok,
        "INFO memory has the policy"
    );
    assert_eq!(
        status(&report, "perm.scripts"),
        Status::Fail,
        "EVAL refused"
    );
    for name in ["latency", "clock", "selftest.lock", "selftest.cleanup"] {
        assert_eq!(status(&report, name), Status::NotChecked, "{name}");
    }
    assert!(report
        .checks
        .iter()
        .all(|c| c.status != Status::Ok || !c.name.starts_with("selftest")));
    assert_eq!(report.exit_code(), 2);
    client.shutdown().await.unwrap();
}

/// An evicting policy with a memory limit warns; without a limit it
/// evicts nothing.
#[tokio::test]
async fn an_evicting_policy_warns() {
    let server = RedisServer::start();
    server.cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    let client = client_at(&server.url()).await;
    let options = DoctorOptions::new().self_test(false);
    let report = within(HANG, "doctor", client.doctor_with(&options))
        .await
        .unwrap();
    assert_eq!(
        status(&report, "memory"),
        Status::Ok,
        "maxmemory 0: {report}"
    );
    assert!(found(&report, "memory").contains("allkeys-lru"));
    server.cmd(&["CONFIG", "SET", "maxmemory", "512mb"]);
    let report = within(HANG, "doctor", client.doctor_with(&options))
        .await
        .unwrap();
    print!("{report}");
    let memory = report.get("memory").unwrap();
    assert_eq!(memory.status, Status::Warn, "{report}");
    assert!(memory.advice.as_deref().unwrap().contains("noeviction"));
    client.shutdown().await.unwrap();
}

/// No persistence warns; AOF with `appendfsync everysec` is ok.
#[tokio::test]
async fn persistence_off_warns_and_aof_is_ok() {
    let server = RedisServer::start();
    let client = client_at(&server.url()).await;
    let options = DoctorOptions::new().self_test(false);
    let report = within(HANG, "doctor", client.doctor_with(&options))
        .await
        .unwrap();
    let persistence = report.get("persistence").unwrap();
    assert_eq!(persistence.status, Status::Warn);
    assert!(persistence.found.contains("drops every held lock"));
    assert!(
        persistence.advice.as_deref().unwrap().contains("3 s"),
        "the watchdog timeout"
    );
    client.shutdown().await.unwrap();

    let aof = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "everysec"]);
    let client = client_at(&aof.url()).await;
    let report = within(HANG, "doctor", client.doctor_with(&options))
        .await
        .unwrap();
    print!("{report}");
    assert_eq!(status(&report, "persistence"), Status::Ok, "{report}");
    assert!(found(&report, "persistence").contains("everysec"));
    client.shutdown().await.unwrap();
}

/// A redis-server 6.2 from `../shared/servers/`, started here.
struct Redis62 {
    child: Child,
    port: u16,
}

impl Redis62 {
    const PATH: &'static str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/servers/redis-6.2.14/redis-server"
    );

    fn start() -> Option<Redis62> {
        if !std::path::Path::new(Self::PATH).exists() {
            println!("skipped: no {}", Self::PATH);
            return None;
        }
        let port = support::server::free_port();
        let child = Command::new(Self::PATH)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server 6.2");
        let server = Redis62 { child, port };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while support::server::command_on(port, None, &["PING"])
            .ok()
            .as_deref()
            != Some("PONG")
        {
            assert!(std::time::Instant::now() < deadline, "redis 6.2 not ready");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(server)
    }
}

impl Drop for Redis62 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Redis 6.2: no `ACL DRYRUN` (permissions probed), no sharded pub/sub;
/// nothing fails and the self-test passes.
#[tokio::test]
async fn redis_6_2_has_no_failure() {
    let Some(server) = Redis62::start() else {
        return;
    };
    let client = client_at(&format!("redis://127.0.0.1:{}", server.port)).await;
    let report = doctor(&client).await;
    assert!(
        report.checks.iter().all(|c| c.status != Status::Fail),
        "{report}"
    );
    assert_eq!(found(&report, "server"), "Redis 6.2.14");
    assert!(found(&report, "capabilities").contains("no ACL DRYRUN"));
    assert!(found(&report, "perm.scripts").contains("probed"));
    // SUBSCRIBE cannot be probed; the self-test's waiter settles it.
    assert_eq!(status(&report, "perm.channels"), Status::Ok, "{report}");
    assert_eq!(status(&report, "selftest.wakeup"), Status::Ok);
    assert_eq!(status(&report, "selftest.cleanup"), Status::Ok);
    client.shutdown().await.unwrap();
}

/// A cluster of 3 primaries with a replica each: every slot covered,
/// every primary replicated, sharded pub/sub, the self-test passes.
#[tokio::test]
async fn a_cluster_covers_every_slot() {
    let cluster = RedisCluster::start(3, 1);
    let client = client_at(&cluster.url()).await;
    let report = doctor(&client).await;
    assert!(
        report.checks.iter().all(|c| c.status != Status::Fail),
        "{report}"
    );
    let c = report.get("cluster").unwrap();
    assert_eq!(c.status, Status::Ok, "{report}");
    assert!(c.found.contains("16384/16384"), "{}", c.found);
    assert!(
        c.found.contains("3 primaries, each with a replica"),
        "{}",
        c.found
    );
    // Sharded pub/sub from Redis 7 (the harness's server may be 6.2).
    if support::server::server_major() >= 7 {
        assert!(found(&report, "capabilities").contains("SPUBLISH"));
        assert!(found(&report, "perm.channels").contains("SSUBSCRIBE"));
    } else {
        assert!(found(&report, "capabilities").contains("PUBLISH"));
    }
    assert_eq!(status(&report, "selftest.wakeup"), Status::Ok);
    assert_eq!(status(&report, "selftest.cleanup"), Status::Ok);
    client.shutdown().await.unwrap();
}

/// Behind a proxy that delays every chunk both ways, the reported round
/// trip is at least twice the delay.
#[tokio::test]
async fn a_delaying_proxy_shows_in_the_round_trip() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr()).await;
    let delay = Duration::from_millis(20);
    proxy.delay(delay);
    let client = client_at(&proxy.url()).await;
    let report = doctor(&client).await;
    let latency = found(&report, "latency");
    let p50: f64 = latency
        .split("p50 ")
        .nth(1)
        .and_then(|r| r.split(" ms").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no p50 in {latency}"));
    assert!(p50 >= 2.0 * delay.as_millis() as f64, "{latency}");
    assert_eq!(status(&report, "selftest.wakeup"), Status::Ok, "{report}");
    client.shutdown().await.unwrap();
}

//! The `leasehold` tool against a real redis-server: the built binary,
//! driven as an operator would.

use leasehold_testkit as support;

use std::collections::HashMap;
use std::process::{Command, Output};
use std::time::Duration;

use fred::interfaces::{HashesInterface, KeysInterface};
use leasehold::{Client, Owner};
use serde_json::Value as Json;
use support::fixture::{eventually, numsub, within};
use support::RedisServer;

const BIN: &str = env!("CARGO_BIN_EXE_leasehold");
/// Bounds that only catch hangs.
const HANG: Duration = Duration::from_secs(30);

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("run leasehold")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs `leasehold SUBCOMMAND --url URL REST…` off the test's runtime
/// (it blocks).
async fn tool(url: &str, args: &[&str]) -> Output {
    let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    all.insert(1, "--url".into());
    all.insert(2, url.into());
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = all.iter().map(String::as_str).collect();
        run(&args)
    })
    .await
    .unwrap()
}

async fn client(server: &RedisServer, app: &str) -> Client {
    Client::builder()
        .url(&server.url())
        .app_name(app)
        .record_waits_after(Duration::from_millis(100))
        .build()
        .await
        .unwrap()
}

fn by_name(out: &str) -> HashMap<String, Json> {
    out.lines()
        .map(|l| serde_json::from_str::<Json>(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .map(|o| (o["name"].as_str().unwrap().to_owned(), o))
        .collect()
}

/// Every kind of the lock family, made with leasehold (and one Redisson
/// holder written by hand), is listed with its kind, holders and waiters.
#[tokio::test]
async fn inspect_json_lists_every_kind() {
    let server = RedisServer::start();
    let url = server.url();
    let c = client(&server, "inspect-test").await;
    let me = format!("{}:{}", c.id(), Owner::current().id());

    let _lock = c.lock("k:lock").lock().await.unwrap();
    let _fair = c.fair_lock("k:fair").lock().await.unwrap();
    let fair = c.fair_lock("k:fair");
    let waiter_owner = Owner::new();
    let fair_waiter = tokio::spawn(waiter_owner.scope(async move { fair.lock().await.map(drop) }));
    let _fenced = c.fenced_lock("k:fenced").lock().await.unwrap();
    let _read = c.read_write_lock("k:rw").read().lock().await.unwrap();
    let sem = c.semaphore("k:sem");
    assert!(sem.try_set_permits(3).await.unwrap());
    let _permit = sem.acquire().await.unwrap();
    let latch = c.count_down_latch("k:latch");
    assert!(latch.try_set_count(2).await.unwrap());
    // A latch is told from a semaphore with no permit out by its waiters
    // (see `inspect_tells_a_semaphore_from_a_latch_by_its_waiters`).
    let latch_waiter = tokio::spawn({
        let latch = latch.clone();
        async move { latch.wait().await }
    });
    eventually(HANG, "the latch waiter subscribed", || {
        numsub(&server, latch.channel()) > 0
    })
    .await;
    // A Redisson service's hold: its client has no record here.
    let java = format!("{}:57", uuid::Uuid::new_v4());
    let _: i64 = c
        .redis()
        .hset("k:redisson", (java.as_str(), 1))
        .await
        .unwrap();
    let _: i64 = c.redis().pexpire("k:redisson", 30_000, None).await.unwrap();

    // The fair waiter's wait is recorded after 100 ms.
    let waiter_field = format!("{}:{}", c.id(), waiter_owner.id());
    let objects = loop {
        let out = tool(&url, &["inspect", "--json", "k:*"]).await;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let objects = by_name(&stdout(&out));
        if objects["k:fair"]["waiters"]
            .as_array()
            .is_some_and(|w| !w.is_empty())
        {
            break objects;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let kinds: HashMap<&str, &str> = objects
        .iter()
        .map(|(n, o)| (n.as_str(), o["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        HashMap::from([
            ("k:lock", "lock"),
            ("k:fair", "fair_lock"),
            ("k:fenced", "fenced_lock"),
            ("k:rw", "rw_lock"),
            ("k:sem", "semaphore"),
            ("k:latch", "latch"),
            ("k:redisson", "lock"),
        ]),
        "{objects:#?}"
    );
    let lock = &objects["k:lock"];
    let h = &lock["holders"][0];
    assert_eq!(h["field"], me.as_str());
    assert_eq!(h["client"], c.id().to_string().as_str());
    assert_eq!(h["owner"], Owner::current().id());
    assert_eq!(h["holds"], 1);
    assert_eq!(h["app"], "inspect-test");
    assert_eq!(h["pid"], std::process::id());
    assert!(h["host"].as_str().is_some_and(|s| !s.is_empty()));
    assert!(lock["ttl_ms"].as_i64().is_some_and(|t| t > 0));

    let foreign = &objects["k:redisson"]["holders"][0];
    assert_eq!(foreign["field"], java.as_str());
    assert_eq!(foreign["owner"], 57);
    assert!(foreign["app"].is_null(), "foreign: {foreign}");

    let fair = &objects["k:fair"];
    assert_eq!(fair["holders"][0]["field"], me.as_str());
    assert_eq!(fair["waiters"][0]["field"], waiter_field.as_str());
    assert_eq!(fair["waiters"][0]["app"], "inspect-test");
    assert_eq!(fair["queue"][0]["field"], waiter_field.as_str());
    // A leasehold waiter counts as gone by its liveness sign (at most
    // FairLock::THREAD_WAIT ahead), not by its score (which follows
    // Redisson's arithmetic, minutes ahead).
    let timeout = fair["queue"][0]["timeout_in_ms"]
        .as_i64()
        .expect("a timeout");
    assert!(
        timeout > 0 && timeout <= leasehold::FairLock::THREAD_WAIT.as_millis() as i64,
        "a leasehold waiter's timeout: {timeout} ms"
    );

    assert_eq!(objects["k:fenced"]["holders"][0]["field"], me.as_str());
    assert!(objects["k:fenced"]["token"]
        .as_i64()
        .is_some_and(|t| t >= 1));
    assert_eq!(objects["k:rw"]["mode"], "read");
    assert_eq!(objects["k:rw"]["holders"][0]["field"], me.as_str());
    assert_eq!(objects["k:sem"]["available"], 2);
    assert_eq!(objects["k:sem"]["permits"].as_array().unwrap().len(), 1);
    assert_eq!(objects["k:latch"]["count"], 2);

    // The default pattern lists the same objects: no companion key (queue,
    // timeouts, token, permit set, read-hold timeouts, latches, records)
    // shows up as an object of its own.
    let all = tool(&url, &["inspect", "--json"]).await;
    let mut names: Vec<String> = by_name(&stdout(&all)).into_keys().collect();
    names.sort();
    let mut expected: Vec<String> = objects.keys().cloned().collect();
    expected.sort();
    assert_eq!(names, expected);

    // The table, as an operator reads it.
    let table = tool(&url, &["inspect", "k:*"]).await;
    let table = stdout(&table);
    println!("{table}");
    assert!(table.starts_with("NAME"), "{table}");
    assert!(table.contains("foreign"), "{table}");

    fair_waiter.abort();
    latch_waiter.abort();
    c.shutdown().await.unwrap();
}

/// A bare count is a semaphore with no permit out or a latch: the same
/// integer string in Redis. `inspect` tells them apart by who waits on
/// which channel, and when nobody waits says it cannot
/// (`semaphore-or-latch`) instead of guessing; `unlock --force` leaves
/// such a count alone (no permit out, nobody waiting: nothing to free).
#[tokio::test]
async fn inspect_tells_a_semaphore_from_a_latch_by_its_waiters() {
    let server = RedisServer::start();
    let url = server.url();
    let c = client(&server, "count-test").await;
    // Semaphores with no permit out: every permit free; none, and a waiter.
    assert!(c.semaphore("n:free").try_set_permits(3).await.unwrap());
    let empty = c.semaphore("n:empty");
    assert!(empty.try_set_permits(0).await.unwrap());
    let sem_waiter = tokio::spawn({
        let empty = empty.clone();
        async move { empty.acquire().await.map(drop) }
    });
    // Latches: nobody waiting; a waiter.
    assert!(c.count_down_latch("n:idle").try_set_count(2).await.unwrap());
    let gate = c.count_down_latch("n:gate");
    assert!(gate.try_set_count(1).await.unwrap());
    let latch_waiter = tokio::spawn({
        let gate = gate.clone();
        async move { gate.wait().await }
    });
    eventually(HANG, "both waiters subscribed", || {
        numsub(&server, empty.channel()) > 0 && numsub(&server, gate.channel()) > 0
    })
    .await;

    let out = tool(&url, &["inspect", "--json", "n:*"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let objects = by_name(&stdout(&out));
    let kinds: HashMap<&str, &str> = objects
        .iter()
        .map(|(n, o)| (n.as_str(), o["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        HashMap::from([
            ("n:free", "semaphore-or-latch"),
            ("n:empty", "semaphore"),
            ("n:idle", "semaphore-or-latch"),
            ("n:gate", "latch"),
        ]),
        "{objects:#?}"
    );
    assert_eq!(objects["n:free"]["count"], 3);
    assert_eq!(objects["n:idle"]["count"], 2);
    assert_eq!(objects["n:empty"]["available"], 0);
    assert_eq!(objects["n:empty"]["permits"].as_array().unwrap().len(), 0);
    assert_eq!(objects["n:gate"]["count"], 1);
    let table = stdout(&tool(&url, &["inspect", "n:*"]).await);
    println!("{table}");
    assert!(table.contains("semaphore-or-latch"), "{table}");

    let out = tool(&url, &["unlock", "--force", "n:free"]).await;
    assert!(out.status.success());
    assert!(stdout(&out).contains("left as it is"), "{}", stdout(&out));
    assert_eq!(
        c.semaphore("n:free").available_permits().await.unwrap(),
        3,
        "the count is untouched"
    );

    sem_waiter.abort();
    latch_waiter.abort();
    c.shutdown().await.unwrap();
}

/// On a cluster, where each waiter's subscription lives on one node:
/// sharded waiters (leasehold's default on Redis 7) and classic ones
/// (`sharded_pubsub(false)`: each client subscribes on a node of its own
/// choosing, so they are counted on every primary) name the kind as on
/// one server. Four classic clients: all four on the one node a single
/// `PUBSUB NUMSUB` would ask is a 1-in-81 chance on 3 primaries.
#[tokio::test]
async fn inspect_tells_a_semaphore_from_a_latch_on_a_cluster() {
    let cluster = support::cluster::RedisCluster::start(3, 0);
    let url = cluster.url();
    let connect = |sharded: bool| Client::builder().url(&url).sharded_pubsub(sharded).build();
    let mut clients = vec![("sharded".to_owned(), connect(true).await.unwrap())];
    for i in 0..4 {
        clients.push((format!("classic{i}"), connect(false).await.unwrap()));
    }
    let mut waiters: Vec<tokio::task::JoinHandle<leasehold::Result<()>>> = Vec::new();
    let mut expected = HashMap::new();
    for (how, c) in &clients {
        let sem = c.semaphore(&format!("c:sem:{how}"));
        assert!(sem.try_set_permits(0).await.unwrap());
        waiters.push(tokio::spawn(async move { sem.acquire().await.map(drop) }));
        expected.insert(format!("c:sem:{how}"), "semaphore".to_owned());
        let latch = c.count_down_latch(&format!("c:latch:{how}"));
        assert!(latch.try_set_count(1).await.unwrap());
        waiters.push(tokio::spawn(async move { latch.wait().await }));
        expected.insert(format!("c:latch:{how}"), "latch".to_owned());
    }
    assert!(clients[0]
        .1
        .semaphore("c:idle")
        .try_set_permits(2)
        .await
        .unwrap());
    expected.insert("c:idle".to_owned(), "semaphore-or-latch".to_owned());
    // The waiters subscribe in the background: read until they have.
    let deadline = tokio::time::Instant::now() + HANG;
    loop {
        let out = tool(&url, &["inspect", "--json", "c:*"]).await;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let kinds: HashMap<String, String> = by_name(&stdout(&out))
            .into_iter()
            .map(|(n, o)| (n, o["kind"].as_str().unwrap().to_owned()))
            .collect();
        if kinds == expected {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "kinds never right: {kinds:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for w in waiters {
        w.abort();
    }
    for (_, c) in clients {
        c.shutdown().await.unwrap();
    }
}

/// `deadlocks`: exit 0 without a cycle; 3 with an ABBA cycle between two
/// clients, one JSON line per cycle.
#[tokio::test]
async fn deadlocks_exit_status_and_json() {
    let server = RedisServer::start();
    let url = server.url();
    let none = tool(&url, &["deadlocks"]).await;
    assert_eq!(none.status.code(), Some(0));
    assert!(stdout(&none).contains("no deadlock"));

    let a = client(&server, "alpha").await;
    let b = client(&server, "beta").await;
    let [ta, tb] = support::fixture::abba(&a, &b, "x", "y");
    let started = tokio::time::Instant::now();
    let out = loop {
        let out = tool(&url, &["deadlocks", "--json"]).await;
        if out.status.code() == Some(3) {
            break out;
        }
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no cycle reported"
        );
    };
    println!(
        "`leasehold deadlocks` saw the cycle after {:?}",
        started.elapsed()
    );
    let lines: Vec<Json> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let cycle = lines[0]["cycle"].as_array().unwrap();
    assert_eq!(cycle.len(), 2);
    let apps: Vec<&str> = cycle.iter().map(|m| m["app"].as_str().unwrap()).collect();
    assert!(
        apps.contains(&"alpha") && apps.contains(&"beta"),
        "{apps:?}"
    );
    for m in cycle {
        assert!(m["holds"] == "x" || m["holds"] == "y");
        assert_ne!(m["holds"], m["waits_for"]);
    }
    ta.abort();
    tb.abort();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// `clients` lists the records; `unlock --force` frees a lock of any
/// client and says what it freed.
#[tokio::test]
async fn clients_and_force_unlock() {
    let server = RedisServer::start();
    let url = server.url();
    let c = client(&server, "holder-app").await;
    let out = tool(&url, &["clients", "--json"]).await;
    let line = stdout(&out);
    let rec: Json = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    assert_eq!(rec["id"], c.id().to_string().as_str());
    assert_eq!(rec["app"], "holder-app");
    assert_eq!(rec["pid"], std::process::id());
    let table = stdout(&tool(&url, &["clients"]).await);
    assert!(table.contains("holder-app"), "{table}");

    let guard = c.lock("stuck").lock().await.unwrap();
    let out = tool(&url, &["unlock", "--force", "stuck"]).await;
    assert!(out.status.success());
    let said = stdout(&out);
    assert!(
        said.contains("freed lock `stuck`") && said.contains("holder-app"),
        "{said}"
    );
    let n: i64 = c.redis().exists("stuck").await.unwrap();
    assert_eq!(n, 0);
    tokio::time::timeout(Duration::from_secs(30), guard.lost())
        .await
        .expect("the holder learns its lease is gone");
    // A latch and a semaphore too. A latch someone waits on (its waiter
    // names the kind: see `inspect_tells_a_semaphore_from_a_latch_by_its_waiters`)
    // is opened: the waiter goes on.
    let latch = c.count_down_latch("gate");
    latch.try_set_count(1).await.unwrap();
    let waiter = tokio::spawn({
        let latch = latch.clone();
        async move { latch.wait().await }
    });
    eventually(HANG, "the latch waiter subscribed", || {
        numsub(&server, latch.channel()) > 0
    })
    .await;
    let out = tool(&url, &["unlock", "--force", "gate"]).await;
    assert!(
        stdout(&out).contains("freed latch `gate`"),
        "{}",
        stdout(&out)
    );
    within(HANG, "the latch waiter goes on", waiter)
        .await
        .unwrap()
        .unwrap();
    let sem = c.semaphore("pool");
    sem.try_set_permits(1).await.unwrap();
    let _permit = sem.acquire().await.unwrap();
    let out = tool(&url, &["unlock", "--force", "pool"]).await;
    assert!(
        stdout(&out).contains("freed semaphore `pool`: 1 permit"),
        "{}",
        stdout(&out)
    );
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    let out = tool(&url, &["unlock", "--force", "nothing"]).await;
    assert!(
        stdout(&out).contains("nothing to unlock"),
        "{}",
        stdout(&out)
    );
    // Without --force: refused.
    let out = tool(&url, &["unlock", "x"]).await;
    assert!(!out.status.success());
    c.shutdown().await.unwrap();
}

/// `watch` in a real terminal (tmux): the table is drawn and redrawn in
/// place. Skipped, with a line saying so, where tmux is not installed
/// (`cargo xtask test` installs it).
#[tokio::test]
async fn watch_draws_the_table_in_a_terminal() {
    if Command::new("tmux").arg("-V").output().is_err() {
        println!("skipped: tmux is not installed");
        return;
    }
    let server = RedisServer::start();
    let c = client(&server, "tmux-test").await;
    let _g = c.lock("shown:lock").lock().await.unwrap();
    let session = format!("leasehold-watch-{}", std::process::id());
    let command = format!("{BIN} watch --url {} 'shown:*'", server.url());
    let started = Command::new("tmux")
        .args([
            "new-session",
            "-d",
            "-s",
            &session,
            "-x",
            "160",
            "-y",
            "20",
            &command,
        ])
        .status()
        .unwrap();
    assert!(started.success());
    let capture = || {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &session])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let mut screen = String::new();
    for _ in 0..300 {
        screen = capture();
        if screen.contains("shown:lock") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A second lock shows up on a later refresh, in place: one header.
    let _h = c.lock("shown:later").lock().await.unwrap();
    for _ in 0..300 {
        screen = capture();
        if screen.contains("shown:later") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = Command::new("tmux")
        .args(["kill-session", "-t", &session])
        .status();
    println!("{screen}");
    assert!(
        screen.contains("shown:lock") && screen.contains("shown:later"),
        "{screen}"
    );
    assert!(screen.contains("tmux-test"), "{screen}");
    assert_eq!(
        screen.matches("NAME").count(),
        1,
        "redrawn in place: {screen}"
    );
    c.shutdown().await.unwrap();
}

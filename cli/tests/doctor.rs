//! `leasehold doctor` (issue 46): the built binary against a real
//! redis-server: one line per check, the exit status, the JSON form.

use leasehold_testkit as support;

use std::process::{Command, Output};

use serde_json::Value as Json;
use support::RedisServer;

const BIN: &str = env!("CARGO_BIN_EXE_leasehold");

/// Runs `leasehold doctor ARGS…` off the test's runtime (it blocks).
async fn doctor(args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        Command::new(BIN)
            .arg("doctor")
            .args(&args)
            .output()
            .expect("run leasehold")
    })
    .await
    .unwrap()
}

/// The test server has no persistence: a warning, exit status 1; every
/// line starts with its status; `--json` is one document with the same
/// exit code, and nothing is left behind.
#[tokio::test]
async fn doctor_prints_one_line_per_check_and_exits_1_on_a_warning() {
    let server = RedisServer::start();
    let url = server.url();
    let out = doctor(&["--url", &url]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    print!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= 15, "{text}");
    for line in &lines {
        let status = line.split_whitespace().next().unwrap();
        assert!(["ok", "warn", "fail", "skip"].contains(&status), "{line}");
    }
    assert!(
        lines.iter().any(|l| l.starts_with("warn  persistence")),
        "{text}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("ok    selftest.wakeup")),
        "{text}"
    );

    let out = doctor(&["--url", &url, "--json"]).await;
    assert_eq!(out.status.code(), Some(1));
    let doc: Json = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["exit_code"], 1);
    let checks = doc["checks"].as_array().unwrap();
    let persistence = checks.iter().find(|c| c["name"] == "persistence").unwrap();
    assert_eq!(persistence["status"], "warn");
    assert!(persistence["advice"].is_string());
    assert!(checks.iter().all(|c| c["status"] != "fail"), "{doc}");
    assert_eq!(server.cmd(&["DBSIZE"]), "0", "nothing left behind");
}

/// A user without channel permissions: exit status 2. No server at all:
/// exit status 2 with a `connect` line.
#[tokio::test]
async fn doctor_exits_2_on_a_failure() {
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
    let url = format!("redis://nochan:pw@{}", server.addr());
    let out = doctor(&["--url", &url, "--no-self-test"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    print!("{text}");
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.lines().any(|l| l.starts_with("fail  perm.channels")));
    assert!(!text.contains("selftest."), "--no-self-test");

    let port = support::server::free_port();
    let out = doctor(&["--url", &format!("redis://127.0.0.1:{port}"), "--json"]).await;
    assert_eq!(out.status.code(), Some(2));
    let doc: Json = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["checks"][0]["name"], "connect");
}

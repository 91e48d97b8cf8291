//! Mutual exclusion across tasks and clients, and across OS processes
//! (the demo, with one lock and with a RedLock that loses a server).

use leasehold_testkit as support;

use std::time::Duration;

use leasehold::fred::interfaces::KeysInterface;
use support::fixture::{client, exists, within};
use support::RedisServer;

/// 16 tasks on each of 2 clients, 200 iterations each, increment one Redis
/// counter with a non-atomic GET + SET under one lock: the total is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_is_exact_under_contention() {
    const TASKS: usize = 16;
    const ITERATIONS: usize = 200;
    let server = RedisServer::start();
    let clients = [client(&server).await, client(&server).await];
    let mut tasks = Vec::new();
    for c in &clients {
        for _ in 0..TASKS {
            let c = c.clone();
            tasks.push(tokio::spawn(async move {
                let lock = c.lock("counter-lock");
                for _ in 0..ITERATIONS {
                    let guard = lock.lock().await.unwrap();
                    let n: Option<i64> = c.redis().get("counter").await.unwrap();
                    tokio::task::yield_now().await; // widen the race window
                    let () = c
                        .redis()
                        .set("counter", n.unwrap_or(0) + 1, None, None, false)
                        .await
                        .unwrap();
                    guard.unlock().await.unwrap();
                }
            }));
        }
    }
    within(Duration::from_secs(300), "all increments", async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await;
    let total = server.cmd(&["GET", "counter"]);
    assert_eq!(total, (2 * TASKS * ITERATIONS).to_string());
    assert!(
        !exists(&server, "counter-lock"),
        "the lock is free at the end"
    );
    for c in clients {
        c.shutdown().await.unwrap();
    }
}

/// The demo as 4 OS processes: stock 200, 1600 purchase attempts, exactly
/// 200 sold and the stock never below zero.
#[test]
fn seckill_demo_across_four_processes() {
    let server = RedisServer::start();
    let exe = example_binary("seckill");
    let out = std::process::Command::new(&exe)
        .args(["--processes", "4", "--stock", "200", "--attempts", "1600"])
        .env("REDIS_URL", server.url())
        .output()
        .expect("run the seckill example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "seckill failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("| sold | 200 |"), "stdout:\n{stdout}");
    assert!(stdout.contains("| attempts | 1600 |"), "stdout:\n{stdout}");
    assert_eq!(server.cmd(&["GET", "seckill:stock"]), "0");
    assert_eq!(server.cmd(&["GET", "seckill:sold"]), "200");
    assert_eq!(
        server.cmd(&["GET", "seckill:oversold"]),
        "(nil)",
        "stock never went below 0"
    );
}

/// The demo over a RedLock on 3 private lock servers (`--redlock 3`), one
/// of them SIGKILLed once half the stock is sold: still exactly 200 sold.
#[test]
fn seckill_demo_over_a_redlock_with_a_server_killed() {
    let server = RedisServer::start();
    let exe = example_binary("seckill");
    let out = std::process::Command::new(&exe)
        .args(["--redlock", "3", "--processes", "4", "--stock", "200"])
        .args(["--attempts", "1600"])
        .env("REDIS_URL", server.url())
        .output()
        .expect("run the seckill example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "seckill --redlock 3 failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("killed lock server 0"), "stdout:\n{stdout}");
    assert!(stdout.contains("| sold | 200 |"), "stdout:\n{stdout}");
    assert!(stdout.contains("| attempts | 1600 |"), "stdout:\n{stdout}");
    assert_eq!(server.cmd(&["GET", "seckill:stock"]), "0");
    assert_eq!(server.cmd(&["GET", "seckill:sold"]), "200");
    assert_eq!(server.cmd(&["GET", "seckill:oversold"]), "(nil)");
}

/// The built example, building it first if `cargo test` did not.
fn example_binary(name: &str) -> std::path::PathBuf {
    let mut dir = std::env::current_exe().unwrap();
    dir.pop(); // deps/
    dir.pop(); // debug/
    let exe = dir.join("examples").join(name);
    if !exe.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = std::process::Command::new(cargo)
            .args(["build", "--example", name])
            .status()
            .expect("cargo build --example");
        assert!(status.success());
    }
    exe
}

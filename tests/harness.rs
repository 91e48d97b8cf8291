//! Self-test of the test-support harness: the redis-server wrapper and the
//! fault-injecting proxy.

use leasehold_testkit as support;

use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use support::{Proxy, RedisServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";
const PONG: &[u8] = b"+PONG\r\n";
const SHORT: Duration = Duration::from_millis(300);
const LONG: Duration = Duration::from_secs(5);

/// Reads exactly `n` bytes; `None` if that takes longer than `wait`.
async fn read_n(stream: &mut TcpStream, n: usize, wait: Duration) -> Option<io::Result<Vec<u8>>> {
    let mut buf = vec![0; n];
    match timeout(wait, stream.read_exact(&mut buf)).await {
        Ok(Ok(_)) => Some(Ok(buf)),
        Ok(Err(e)) => Some(Err(e)),
        Err(_) => None,
    }
}

/// Sends PING and expects PONG within `LONG`.
async fn ping(stream: &mut TcpStream) {
    stream.write_all(PING).await.unwrap();
    let reply = read_n(stream, PONG.len(), LONG)
        .await
        .expect("PONG timed out")
        .unwrap();
    assert_eq!(reply, PONG);
}

/// Asserts the peer closed the connection (EOF or error) within `LONG`.
async fn assert_closed(stream: &mut TcpStream) {
    let mut buf = [0u8; 64];
    match timeout(LONG, stream.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => {}
        Ok(Ok(n)) => panic!(
            "expected close, got {:?}",
            String::from_utf8_lossy(&buf[..n])
        ),
        Err(_) => panic!("connection still open after {LONG:?}"),
    }
}

fn process_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn server_answers_ping() {
    let server = RedisServer::start();
    assert_eq!(server.cmd(&["PING"]), "PONG");
    assert_eq!(server.addr(), format!("127.0.0.1:{}", server.port()));
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
}

#[test]
fn cmd_renders_replies() {
    let server = RedisServer::start();
    assert_eq!(server.cmd(&["SET", "k", "v"]), "OK");
    assert_eq!(server.cmd(&["GET", "k"]), "v");
    assert_eq!(server.cmd(&["GET", "missing"]), "(nil)");
    assert_eq!(server.cmd(&["INCR", "n"]), "1");
    assert_eq!(server.cmd(&["INCRBY", "n", "-5"]), "-4");
    assert!(server.cmd(&["NOSUCHCOMMAND"]).starts_with("-ERR"));
    // Bulk strings may contain CRLF.
    assert_eq!(server.cmd(&["SET", "crlf", "a\r\nb\r\n"]), "OK");
    assert_eq!(server.cmd(&["GET", "crlf"]), "a\r\nb\r\n");
    assert_eq!(server.cmd(&["SET", "empty", ""]), "OK");
    assert_eq!(server.cmd(&["GET", "empty"]), "");
    assert_eq!(server.cmd(&["RPUSH", "list", "a", "b"]), "2");
    assert_eq!(server.cmd(&["LRANGE", "list", "0", "-1"]), "a\nb");
    assert_eq!(server.cmd(&["LRANGE", "nolist", "0", "-1"]), "");
    // Nested arrays and a nil inside an array.
    assert_eq!(
        server.cmd(&["EVAL", "return {1, {2, 'x'}, 'y'}", "0"]),
        "1\n2\nx\ny"
    );
    assert_eq!(server.cmd(&["MGET", "k", "missing"]), "v\n(nil)");
}

#[test]
fn restart_keeps_port_and_loses_data() {
    let mut server = RedisServer::start();
    let port = server.port();
    let pid = server.pid().unwrap();
    assert_eq!(server.cmd(&["SET", "k", "v"]), "OK");
    server.restart();
    assert!(server.is_running());
    assert_eq!(server.port(), port);
    assert_ne!(server.pid().unwrap(), pid);
    assert!(!process_exists(pid), "old process not reaped");
    assert_eq!(server.cmd(&["GET", "k"]), "(nil)");
    assert_eq!(server.cmd(&["PING"]), "PONG");
}

#[test]
fn restart_waits_for_the_port() {
    let mut server = RedisServer::start();
    server.kill();
    // Something else holds the port for a while; restart keeps retrying.
    let squatter = std::net::TcpListener::bind(server.addr()).unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        drop(squatter);
    });
    let started = Instant::now();
    server.restart();
    assert!(started.elapsed() >= Duration::from_millis(400));
    release.join().unwrap();
    assert!(server.is_running());
    assert_eq!(server.cmd(&["PING"]), "PONG");
}

#[test]
fn kill_makes_connections_fail() {
    let mut server = RedisServer::start();
    let pid = server.pid().unwrap();
    assert!(server.is_running());
    server.kill();
    assert!(!server.is_running());
    assert!(!process_exists(pid), "killed process not reaped");
    assert!(std::net::TcpStream::connect(server.addr()).is_err());
    assert!(server.try_cmd(&["PING"]).is_err());
    server.kill(); // idempotent
    server.restart(); // restart from the killed state works too
    assert_eq!(server.cmd(&["PING"]), "PONG");
}

#[test]
fn drop_reaps_process_and_removes_dir() {
    let server = RedisServer::start();
    let pid = server.pid().unwrap();
    let dir = server.dir().to_path_buf();
    assert!(dir.is_dir());
    assert!(server.log().contains("Ready to accept connections"));
    drop(server);
    assert!(!process_exists(pid), "process survived drop");
    assert!(!dir.exists(), "temp dir survived drop");
}

#[test]
fn requirepass_with_password() {
    let server = RedisServer::start_with(&["--requirepass", "secret"]);
    assert!(server.cmd(&["PING"]).starts_with("-NOAUTH"));
    let mut server = server.with_password("secret");
    assert_eq!(server.cmd(&["SET", "k", "v"]), "OK");
    assert_eq!(server.cmd(&["GET", "k"]), "v");
    server.restart();
    assert_eq!(server.cmd(&["PING"]), "PONG");
    let server = server.with_password("wrong");
    assert!(server.cmd(&["PING"]).starts_with("-WRONGPASS"));
}

#[test]
fn servers_run_side_by_side() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    assert_ne!(a.port(), b.port());
    assert_ne!(a.dir(), b.dir());
    assert_eq!(a.cmd(&["SET", "k", "a"]), "OK");
    assert_eq!(b.cmd(&["GET", "k"]), "(nil)");
}

#[tokio::test]
async fn proxy_passes_ping() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr()).await;
    assert_eq!(proxy.url(), format!("redis://{}", proxy.addr()));
    let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
    ping(&mut client).await;
    ping(&mut client).await;
    assert_eq!(proxy.connection_count(), 1);
    drop(client);
    assert!(proxy.wait_connection_count(0, LONG).await);
}

#[tokio::test]
async fn proxy_blackhole_then_pass() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr()).await;
    let mut old = TcpStream::connect(proxy.addr()).await.unwrap();
    ping(&mut old).await;

    proxy.blackhole();
    old.write_all(PING).await.unwrap();
    assert!(
        read_n(&mut old, 1, SHORT).await.is_none(),
        "reply leaked through blackhole"
    );
    // New connections are accepted but held.
    let mut held = TcpStream::connect(proxy.addr()).await.unwrap();
    held.write_all(PING).await.unwrap();
    assert!(
        read_n(&mut held, 1, SHORT).await.is_none(),
        "held connection answered"
    );
    assert!(proxy.wait_connection_count(2, LONG).await);
    // Only PING's own connection is open on the server (CLIENT LIST has one line each).
    assert_eq!(server.cmd(&["CLIENT", "LIST"]).lines().count(), 2);

    proxy.pass();
    // The PINGs sent during the blackhole were dropped: nothing stale arrives.
    assert!(read_n(&mut old, 1, SHORT).await.is_none());
    assert!(read_n(&mut held, 1, SHORT).await.is_none());
    ping(&mut old).await;
    ping(&mut held).await;
}

#[tokio::test]
async fn proxy_blackhole_drops_replies_in_flight() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr()).await;
    let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
    // The request reaches Redis; the reply is queued behind the delay and
    // then dropped by the blackhole.
    proxy.delay(Duration::from_millis(200));
    client
        .write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    proxy.blackhole();
    assert!(read_n(&mut client, 1, Duration::from_millis(500))
        .await
        .is_none());
    assert_eq!(server.cmd(&["GET", "k"]), "v");
    proxy.pass();
    ping(&mut client).await;
}

#[tokio::test]
async fn proxy_delay_applies_both_ways_in_order() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr()).await;
    let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
    ping(&mut client).await;

    let d = Duration::from_millis(150);
    proxy.delay(d);
    let started = Instant::now();
    ping(&mut client).await;
    let elapsed = started.elapsed();
    assert!(
        elapsed >= 2 * d,
        "round trip {elapsed:?} shorter than 2 x {d:?}"
    );
    assert!(
        elapsed < 2 * d + Duration::from_secs(1),
        "round trip {elapsed:?}"
    );

    // One command split over several chunks: reordering would garble it.
    let parts: [&[u8]; 4] = [b"*2\r\n", b"$4\r\nECHO\r\n", b"$5\r\n", b"hello\r\n"];
    for part in parts {
        client.write_all(part).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let reply = read_n(&mut client, 11, LONG).await.unwrap().unwrap();
    assert_eq!(reply, b"$5\r\nhello\r\n");

    proxy.pass();
    let started = Instant::now();
    ping(&mut client).await;
    assert!(started.elapsed() < d, "pass still delayed");
}

#[tokio::test]
async fn proxy_cut_all_closes_connections() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr()).await;
    let mut a = TcpStream::connect(proxy.addr()).await.unwrap();
    let mut b = TcpStream::connect(proxy.addr()).await.unwrap();
    ping(&mut a).await;
    ping(&mut b).await;
    assert_eq!(proxy.connection_count(), 2);

    proxy.cut_all();
    assert_closed(&mut a).await;
    assert_closed(&mut b).await;
    assert!(proxy.wait_connection_count(0, LONG).await);

    // New connections are still accepted and work.
    let mut c = TcpStream::connect(proxy.addr()).await.unwrap();
    ping(&mut c).await;
    assert_eq!(proxy.connection_count(), 1);
}

#[tokio::test]
async fn proxy_cut_all_closes_held_connections() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr()).await;
    proxy.blackhole();
    let mut held = TcpStream::connect(proxy.addr()).await.unwrap();
    assert!(proxy.wait_connection_count(1, LONG).await);
    proxy.cut_all();
    assert_closed(&mut held).await;
    // Still blackholed for new connections.
    let mut next = TcpStream::connect(proxy.addr()).await.unwrap();
    next.write_all(PING).await.unwrap();
    assert!(read_n(&mut next, 1, SHORT).await.is_none());
    proxy.pass();
    ping(&mut next).await;
}

#[tokio::test]
async fn proxy_drop_replies_once() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr()).await;
    let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
    let mut bystander = TcpStream::connect(proxy.addr()).await.unwrap();
    ping(&mut client).await;
    ping(&mut bystander).await;

    proxy.drop_replies_once();
    client
        .write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n")
        .await
        .unwrap();
    // No reply arrives, and every connection is cut.
    assert_closed(&mut client).await;
    assert_closed(&mut bystander).await;
    // But the command reached Redis.
    assert_eq!(server.cmd(&["GET", "k"]), "v");

    // Only once: a new connection works normally.
    let mut again = TcpStream::connect(proxy.addr()).await.unwrap();
    ping(&mut again).await;
    ping(&mut again).await;
}

#[tokio::test]
async fn proxy_upstream_down_closes_client() {
    let mut server = RedisServer::start();
    let proxy = Proxy::start(&server.addr()).await;
    let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
    ping(&mut client).await;
    server.kill();
    assert_closed(&mut client).await;
    let mut refused = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_closed(&mut refused).await;
    // Same port after restart: the proxy reaches it again.
    server.restart();
    let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
    ping(&mut client).await;
}

#[tokio::test]
async fn proxy_drop_stops_everything() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr()).await;
    let addr = proxy.addr();
    let mut client = TcpStream::connect(&addr).await.unwrap();
    ping(&mut client).await;
    drop(proxy);
    assert_closed(&mut client).await;
    // The listener goes away once the accept task sees the shutdown.
    let deadline = Instant::now() + LONG;
    while TcpStream::connect(&addr).await.is_ok() {
        assert!(
            Instant::now() < deadline,
            "proxy still accepting after drop"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_works_on_multi_thread_runtime() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr()).await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let addr = proxy.addr();
        tasks.push(tokio::spawn(async move {
            let mut client = TcpStream::connect(addr).await.unwrap();
            for _ in 0..20 {
                ping(&mut client).await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert!(proxy.wait_connection_count(0, LONG).await);
}

//! Handoff latency: unlock() returned → the other side's lock() returned,
//! the holder keeping the lock 2–102 ms. Each side runs [`side`] and the
//! logs are paired by [`samples`]: both sides in this process (`handoff`
//! in `main.rs`), or the second side in a child process (this binary
//! again, `--handoff-peer`; [`handoff`] and [`peer`] here).
//!
//! Both sides stamp their events with the system clock (one clock for
//! every process on the machine), and tell each other "I hold turn k"
//! over the child's stdin and stdout, so each side queues for its turn
//! while the other holds the lock. In one process leasehold's fair lock
//! hands a grant to a waiter of another client directly; across processes
//! the grant travels as Redis's pub/sub message, which Redis writes after
//! the release's reply.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold_testkit::history::handoffs;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;
use tokio::sync::{mpsc, watch};

use crate::contender::{Handle, Kind};
use crate::hold;

/// Nanoseconds on the system clock (the same clock in every process).
fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos()
}

/// One side's turns (`first`, `first + 2`, …): waits for the other side
/// to hold turn k - 1, takes the lock, says so (`say(k)`), holds, unlocks.
/// Returns (turn, acquired ns, unlocked ns) per turn; stops at `limit`.
pub async fn side(
    h: &Handle,
    name: &str,
    first: u64,
    rounds: u64,
    turns: &mut watch::Receiver<u64>,
    say: &(dyn Fn(u64) + Sync),
    limit: tokio::time::Instant,
) -> Vec<(u64, u128, u128)> {
    let mut log = Vec::new();
    let mut k = first;
    while k <= rounds {
        let previous = turns.wait_for(|t| *t + 1 >= k);
        match tokio::time::timeout_at(limit, previous).await {
            Ok(Ok(_)) => {}
            _ => break,
        }
        let g = h.lock(name).await;
        let acquired = now_ns();
        say(k);
        tokio::time::sleep(hold(k)).await;
        h.unlock(g).await;
        log.push((k, acquired, now_ns()));
        k += 2;
    }
    log
}

/// The parent's side: spawns the peer, takes the odd turns, and returns
/// the handoff samples (see [`samples`]).
pub async fn handoff(kind: Kind, url: &str, rounds: u64, limit: Duration) -> Vec<f64> {
    let name = format!("across:{}", kind.short());
    let exe = std::env::current_exe().expect("own executable");
    let mut child = Command::new(exe)
        .args([
            "--handoff-peer",
            kind.short(),
            url,
            &name,
            &rounds.to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the peer process");
    let mut to_peer = child.stdin.take().expect("peer stdin");
    let mut from_peer = BufReader::new(child.stdout.take().expect("peer stdout")).lines();
    let h = Handle::connect(kind, url).await;
    // "ready" once the peer is connected.
    while let Ok(Some(line)) = from_peer.next_line().await {
        if line == "ready" {
            break;
        }
    }
    let (turn_tx, mut turns) = watch::channel(0u64);
    let turn_tx = Arc::new(turn_tx);
    let (said, mut said_rx) = mpsc::unbounded_channel::<u64>();
    // Our turns go to the peer (and to our own watch).
    let mine = turn_tx.clone();
    let writer = tokio::spawn(async move {
        while let Some(k) = said_rx.recv().await {
            mine.send_modify(|t| *t = (*t).max(k));
            if to_peer
                .write_all(format!("{k}\n").as_bytes())
                .await
                .is_err()
            {
                break;
            }
        }
        drop(to_peer);
    });
    // The peer's turns and, at the end, its log.
    let theirs = turn_tx.clone();
    let reader = tokio::spawn(async move {
        let mut log = Vec::new();
        while let Ok(Some(line)) = from_peer.next_line().await {
            let mut parts = line.split_whitespace();
            match (parts.next(), parts.next(), parts.next(), parts.next()) {
                (Some("turn"), Some(k), None, None) => {
                    if let Ok(k) = k.parse::<u64>() {
                        theirs.send_modify(|t| *t = (*t).max(k));
                    }
                }
                (Some("log"), Some(k), Some(a), Some(u)) => {
                    if let (Ok(k), Ok(a), Ok(u)) = (k.parse(), a.parse(), u.parse()) {
                        log.push((k, a, u));
                    }
                }
                _ => {}
            }
        }
        log
    });
    let deadline = tokio::time::Instant::now() + limit;
    let say = |k| {
        let _ = said.send(k);
    };
    let mut log = side(&h, &name, 1, rounds, &mut turns, &say, deadline).await;
    drop(said);
    let _ = writer.await;
    let _ = tokio::time::timeout(limit, child.wait()).await;
    log.extend(reader.await.unwrap_or_default());
    h.close().await;
    samples(log)
}

/// Pairs both sides' logs: for each turn k, from its unlock to turn
/// k + 1's acquisition, in µs (negative: the next side held the lock
/// before the previous one's unlock() returned).
pub fn samples(log: Vec<(u64, u128, u128)>) -> Vec<f64> {
    handoffs(log)
        .into_iter()
        .map(|(u, a)| (a as f64 - u as f64) / 1_000.0)
        .collect()
}

/// The peer process (`--handoff-peer <kind> <url> <name> <rounds>`): takes
/// the even turns, prints `turn k` as it takes each and `log k acquired
/// unlocked` for each at the end.
pub async fn peer(args: &[String]) {
    let [kind, url, name, rounds] = args else {
        eprintln!("usage: --handoff-peer <kind> <url> <name> <rounds>");
        std::process::exit(2);
    };
    let kind = Kind::from_short(kind).expect("a known contender");
    let rounds: u64 = rounds.parse().expect("rounds");
    let h = Handle::connect(kind, url).await;
    let (said, mut said_rx) = mpsc::unbounded_channel::<u64>();
    let (turn_tx, mut turns) = watch::channel(0u64);
    let turn_tx = Arc::new(turn_tx);
    let mine = turn_tx.clone();
    let out = Arc::new(tokio::sync::Mutex::new(tokio::io::stdout()));
    let out_w = out.clone();
    let writer = tokio::spawn(async move {
        while let Some(k) = said_rx.recv().await {
            mine.send_modify(|t| *t = (*t).max(k));
            let mut out = out_w.lock().await;
            let _ = out.write_all(format!("turn {k}\n").as_bytes()).await;
            let _ = out.flush().await;
        }
    });
    let theirs = turn_tx.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(k) = line.trim().parse::<u64>() {
                theirs.send_modify(|t| *t = (*t).max(k));
            }
        }
    });
    {
        let mut out = out.lock().await;
        let _ = out.write_all(b"ready\n").await;
        let _ = out.flush().await;
    }
    let limit = tokio::time::Instant::now() + Duration::from_secs(120);
    let say = |k| {
        let _ = said.send(k);
    };
    let log = side(&h, name, 2, rounds, &mut turns, &say, limit).await;
    drop(said);
    let _ = writer.await;
    let mut out = out.lock().await;
    for (k, a, u) in log {
        let _ = out.write_all(format!("log {k} {a} {u}\n").as_bytes()).await;
    }
    let _ = out.flush().await;
    h.close().await;
}

//! What redis-server itself did over a stretch of a scenario: the commands
//! it ran and the CPU time it used, from one `INFO cpu commandstats` before
//! and one after.
//!
//! * Commands: the `calls` of every `cmdstat_<name>` line, so the commands
//!   scripts run are counted with the `EVALSHA` that ran them (unlike
//!   `MONITOR`'s requests, see `monitor.rs`). Redis counts a command once
//!   it returns, so the reading before is in the reading after: one `info`
//!   call is taken off (the reading after is not in it).
//! * CPU: `used_cpu_sys` + `used_cpu_user`, the server process's
//!   `getrusage` (every thread: main, I/O and background threads), printed
//!   in seconds with 6 decimals, so µs. It includes what the server does
//!   with no client at all (`serverCron`, `hz` 10): [`idle_cpu_per_s`]
//!   measures that, for a report to set beside its rows.
//!
//! Both are server-wide: a reading counts every client of the server, so a
//! scenario reads them while only its own clients are connected.

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold_testkit::server::RedisServer;

/// One reading of a server's counters.
#[derive(Clone, Debug, Default)]
pub struct Work {
    /// `calls` per command name (`set`, `evalsha`, `client|setinfo`, …).
    calls: BTreeMap<String, u64>,
    /// `used_cpu_sys` + `used_cpu_user`, µs.
    cpu_us: u64,
    /// `used_cpu_sys` alone (time in the kernel: socket reads and writes,
    /// `epoll_wait`), µs.
    sys_us: u64,
}

/// What a server did between two readings (or several servers, summed).
#[derive(Clone, Debug, Default)]
pub struct Delta {
    /// Commands run, by name, scripts' inner commands included, less the
    /// reading's own `INFO`.
    pub by_command: BTreeMap<String, u64>,
    /// Server CPU time, µs.
    pub cpu_us: u64,
    /// The part of it in the kernel (`used_cpu_sys`), µs.
    pub sys_us: u64,
}

/// A server's CPU time per second with no client connected (µs/s), over
/// `window`: what every reading's CPU includes for the time it spans.
pub async fn idle_cpu_per_s(server: &RedisServer, window: Duration) -> f64 {
    let before = Work::read(server);
    tokio::time::sleep(window).await;
    Work::read(server).since(&before).cpu_us as f64 / window.as_secs_f64()
}

// === impl Work ===

impl Work {
    /// One `INFO cpu commandstats` (a new connection of its own).
    pub fn read(server: &RedisServer) -> Work {
        let info = server.cmd(&["INFO", "cpu", "commandstats"]);
        let mut work = Work::default();
        for line in info.lines() {
            if let Some((name, rest)) = line
                .strip_prefix("cmdstat_")
                .and_then(|l| l.split_once(':'))
            {
                let calls = rest
                    .strip_prefix("calls=")
                    .and_then(|r| r.split(',').next())
                    .and_then(|c| c.parse().ok());
                if let Some(calls) = calls {
                    work.calls.insert(name.to_owned(), calls);
                }
            } else if let Some((field, value)) = line.trim().split_once(':') {
                if field == "used_cpu_sys" || field == "used_cpu_user" {
                    let secs: f64 = value.parse().unwrap_or(0.0);
                    let us = (secs * 1e6).round() as u64;
                    work.cpu_us += us;
                    if field == "used_cpu_sys" {
                        work.sys_us = us;
                    }
                }
            }
        }
        work
    }

    /// What the server did since `before` (a reading of the same server).
    pub fn since(&self, before: &Work) -> Delta {
        let mut by_command = BTreeMap::new();
        for (name, &calls) in &self.calls {
            let mut d = calls.saturating_sub(before.calls.get(name).copied().unwrap_or(0));
            if name == "info" {
                d = d.saturating_sub(1); // the reading `before`
            }
            if d > 0 {
                by_command.insert(name.clone(), d);
            }
        }
        Delta {
            by_command,
            cpu_us: self.cpu_us.saturating_sub(before.cpu_us),
            sys_us: self.sys_us.saturating_sub(before.sys_us),
        }
    }
}

// === impl Delta ===

impl Delta {
    /// Every command the server ran.
    pub fn commands(&self) -> u64 {
        self.by_command.values().sum()
    }

    /// Adds another server's delta (a RedLock's servers).
    pub fn add(&mut self, other: &Delta) {
        for (name, calls) in &other.by_command {
            *self.by_command.entry(name.clone()).or_default() += calls;
        }
        self.cpu_us += other.cpu_us;
        self.sys_us += other.sys_us;
    }

    /// The kernel's share of the CPU time, %.
    pub fn sys_percent(&self) -> f64 {
        self.sys_us as f64 * 100.0 / self.cpu_us.max(1) as f64
    }

    /// "evalsha 2.00, get 1.00, …" per `per` operations, most first, for a
    /// markdown table cell (a subcommand's `|`, as in `script|load`, is
    /// escaped).
    pub fn per_op(&self, per: u64) -> String {
        let mut v: Vec<(&String, &u64)> = self.by_command.iter().collect();
        v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        v.iter()
            .map(|(name, &n)| {
                let name = name.replace('|', "\\|");
                format!("{name} {:.2}", n as f64 / per.max(1) as f64)
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

//! `doctor`: is this deployment safe for locks? Read-only checks of the
//! server a [`Client`] is connected to, and a live self-test on one
//! private key, as a typed [`DoctorReport`] (the `leasehold doctor`
//! command prints it).
//!
//! # What it checks
//!
//! | check | from | not ok when |
//! | --- | --- | --- |
//! | `server` | `INFO server` (every primary of a cluster) | below Redis 6.0.6 (fail), below 6.2 or not Redis / Valkey (warn) |
//! | `capabilities` | the version, cluster or not | a command a primitive sends is missing |
//! | `perm.scripts`, `perm.keys`, `perm.channels`, `perm.fence`, `perm.info` | `ACL DRYRUN <user> …` where allowed, else harmless probes | a command, key or channel the crate sends is refused |
//! | `memory` | `INFO memory` (`CONFIG GET` when it has no answer) | an evicting `maxmemory-policy` with a `maxmemory` (warn) |
//! | `persistence` | `INFO persistence`, `CONFIG GET save appendfsync` | no AOF (warn) |
//! | `replication` | `INFO replication`, `CONFIG GET min-replicas-to-write`, `WAIT 0 1` | connected to a replica (fail), asynchronous replicas (warn) |
//! | `cluster` (a cluster only) | `CLUSTER INFO`, `CLUSTER NODES` | slots not covered (fail), a primary without a replica (warn) |
//! | `latency` | a burst of `PING`s | p99 above a twelfth of the watchdog timeout (warn) |
//! | `clock` | `TIME` against the local clock | more than 500 ms apart (warn) |
//! | `selftest.lock`, `selftest.wakeup`, `selftest.watchdog`, `selftest.cleanup` | the public API on a private key | a step fails |
//!
//! # What it writes
//!
//! Nothing outside its private lock `leasehold:doctor:{<uuid>}` (after the
//! client's key prefix) and what leasehold itself keeps beside a lock: its
//! request records (`leasehold_latch:…`, deleted about 100 ms after each
//! call) and the unlock message on the lock's own channel, which nobody
//! else listens on. The permission probes without `ACL DRYRUN` are
//! commands with no effect: `EVAL "return 1" 0`, `PEXPIRE` on the private
//! key's names (which do not exist), `PUBLISH` on the private channel,
//! `CLIENT KILL USER` naming a user that does not exist. The self-test
//! ends by checking with `SCAN` that no key with the private name is left.
//!
//! A check whose commands are refused is [`Status::NotChecked`], never
//! [`Status::Ok`]; a permission found refused is a warning or a failure,
//! with its consequence.

mod checks;
mod json;
mod perms;
mod probe;
mod selftest;

use std::fmt;
use std::time::Duration;

use crate::client::Client;
use crate::error::Result;

/// The verdict of one [`Check`].
///
/// # Example
///
/// ```
/// use leasehold::Status;
/// assert!(Status::Fail > Status::Warn);
/// assert_eq!(Status::NotChecked.label(), "skip");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Status {
    /// Nothing to change.
    Ok,
    /// The check could not be made (a command refused, a step skipped):
    /// not known to be ok.
    NotChecked,
    /// Locks work, but something here can break a promise of the crate
    /// in some event (an eviction, a restart, a failover).
    Warn,
    /// Something the crate needs is missing: locks fail, or a promise is
    /// broken now.
    Fail,
}

/// One check of a [`DoctorReport`]: what was looked at, what was found,
/// and what to change.
///
/// # Example
///
/// ```no_run
/// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
/// let report = client.doctor().await?;
/// for check in &report.checks {
///     println!("{} {}: {}", check.status.label(), check.name, check.found);
///     if let Some(advice) = &check.advice {
///         println!("  -> {advice}");
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Check {
    /// A stable name: `server`, `perm.channels`, `selftest.wakeup`, …
    /// (the module docs list them).
    pub name: String,
    /// The verdict.
    pub status: Status,
    /// What was found, in one line.
    pub found: String,
    /// What to change, when there is something to change (or why the
    /// check could not be made).
    pub advice: Option<String>,
}

/// The checks [`Client::doctor`] made, in a fixed order.
///
/// # Example
///
/// ```no_run
/// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
/// let report = client.doctor().await?;
/// print!("{report}");                     // one line per check
/// if report.exit_code() == 2 {
///     panic!("this Redis cannot keep leasehold's promises: {}", report.to_json());
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DoctorReport {
    /// The checks, in the order of the module docs' table.
    pub checks: Vec<Check>,
}

/// What [`Client::doctor_with`] runs.
///
/// # Example
///
/// ```no_run
/// use std::time::Duration;
/// use leasehold::DoctorOptions;
/// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
/// let options = DoctorOptions::new()
///     .pings(20)
///     .renewal_wait(Duration::from_secs(11)); // a 30 s watchdog renews every 10 s
/// let report = client.doctor_with(&options).await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct DoctorOptions {
    self_test: bool,
    pings: u32,
    renewal_wait: Duration,
    clock_tolerance: Duration,
}

// === impl Status ===

impl Status {
    /// `ok`, `warn`, `fail` or `skip` (not checked): the CLI's first column.
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(leasehold::Status::Warn.label(), "warn");
    /// ```
    pub fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::NotChecked => "skip",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }

    /// `ok`, `warn`, `fail` or `not_checked`: the JSON form.
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(leasehold::Status::NotChecked.as_str(), "not_checked");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Status::NotChecked => "not_checked",
            other => other.label(),
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

// === impl Check ===

impl Check {
    pub(crate) fn new(name: &str, status: Status, found: impl Into<String>) -> Check {
        Check {
            name: name.to_owned(),
            status,
            found: found.into(),
            advice: None,
        }
    }

    pub(crate) fn ok(name: &str, found: impl Into<String>) -> Check {
        Check::new(name, Status::Ok, found)
    }

    pub(crate) fn not_checked(name: &str, found: impl Into<String>) -> Check {
        Check::new(name, Status::NotChecked, found)
    }

    pub(crate) fn advise(mut self, advice: impl Into<String>) -> Check {
        self.advice = Some(advice.into());
        self
    }
}

// === impl DoctorReport ===

impl DoctorReport {
    /// The process exit status the report stands for: 0 when every check
    /// is ok, 2 when one failed, 1 otherwise (a warning, or a check that
    /// could not be made).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let code = client.doctor().await?.exit_code();
    /// std::process::exit(code.into());
    /// # }
    /// ```
    pub fn exit_code(&self) -> u8 {
        match self.worst() {
            Status::Ok => 0,
            Status::Warn | Status::NotChecked => 1,
            Status::Fail => 2,
        }
    }

    /// The worst status of the report ([`Status::Ok`] when it is empty).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// if client.doctor().await?.worst() == leasehold::Status::Fail {
    ///     eprintln!("refusing to start");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn worst(&self) -> Status {
        self.checks
            .iter()
            .map(|c| c.status)
            .max()
            .unwrap_or(Status::Ok)
    }

    /// The check named `name`, if the report has it.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let report = client.doctor().await?;
    /// if let Some(memory) = report.get("memory") {
    ///     println!("{}", memory.found);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn get(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }

    /// The report as one JSON document:
    /// `{"exit_code":1,"checks":[{"name","status","found","advice"}]}`,
    /// `status` one of `ok`, `warn`, `fail`, `not_checked`, `advice` a
    /// string or `null`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// println!("{}", client.doctor().await?.to_json());
    /// # Ok(()) }
    /// ```
    pub fn to_json(&self) -> String {
        json::report(self)
    }
}

impl fmt::Display for DoctorReport {
    /// One line per check: `status  name  found  → advice`, aligned.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self.checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
        for c in &self.checks {
            write!(
                f,
                "{:<4}  {:<width$}  {}",
                c.status.label(),
                c.name,
                c.found
            )?;
            if let Some(advice) = &c.advice {
                write!(f, "  → {advice}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

// === impl DoctorOptions ===

impl DoctorOptions {
    /// The defaults: the self-test on, 50 pings, renewals waited for up
    /// to 5 s, clocks 500 ms apart tolerated.
    ///
    /// # Example
    ///
    /// ```
    /// let options = leasehold::DoctorOptions::new();
    /// ```
    pub fn new() -> DoctorOptions {
        DoctorOptions {
            self_test: true,
            pings: 50,
            renewal_wait: Duration::from_secs(5),
            clock_tolerance: Duration::from_millis(500),
        }
    }

    /// Whether to run the live self-test on the private key (default
    /// `true`). Without it the report has no `selftest.*` checks and
    /// writes nothing at all.
    ///
    /// # Example
    ///
    /// ```
    /// let read_only = leasehold::DoctorOptions::new().self_test(false);
    /// ```
    pub fn self_test(mut self, run: bool) -> DoctorOptions {
        self.self_test = run;
        self
    }

    /// How many `PING`s the latency check sends, one after the other
    /// (default 50; at least 1).
    ///
    /// # Example
    ///
    /// ```
    /// let options = leasehold::DoctorOptions::new().pings(200);
    /// ```
    pub fn pings(mut self, count: u32) -> DoctorOptions {
        self.pings = count.max(1);
        self
    }

    /// The longest the self-test waits to see the watchdog renew its
    /// lease (default 5 s). The watchdog renews every third of its
    /// timeout; when that is longer than `wait` (10 s at the default 30 s
    /// timeout) the renewal is reported not checked rather than waited
    /// for. `leasehold doctor` builds its client with a 3 s watchdog, so
    /// it sees a renewal within about 1 s.
    ///
    /// # Example
    ///
    /// ```
    /// # use std::time::Duration;
    /// let options = leasehold::DoctorOptions::new().renewal_wait(Duration::from_secs(11));
    /// ```
    pub fn renewal_wait(mut self, wait: Duration) -> DoctorOptions {
        self.renewal_wait = wait;
        self
    }

    /// The largest offset between the server's clock and this machine's
    /// that the `clock` check accepts (default 500 ms).
    ///
    /// # Example
    ///
    /// ```
    /// # use std::time::Duration;
    /// let options = leasehold::DoctorOptions::new().clock_tolerance(Duration::from_millis(100));
    /// ```
    pub fn clock_tolerance(mut self, tolerance: Duration) -> DoctorOptions {
        self.clock_tolerance = tolerance;
        self
    }
}

impl Default for DoctorOptions {
    fn default() -> Self {
        DoctorOptions::new()
    }
}

/// Runs every check through `client` (see the module docs).
pub(crate) async fn run(client: &Client, options: &DoctorOptions) -> Result<DoctorReport> {
    client.engine().check()?;
    let redis = client.redis();
    let target = probe::Target::find(client).await;
    let mut checks = Vec::new();
    let server = checks::server(&target);
    checks.extend(server.checks);
    let perms = perms::check(client, &target).await;
    checks.extend(perms.checks.iter().cloned());
    checks.push(checks::memory(redis, &target).await);
    checks.push(checks::persistence(redis, &target, client).await);
    checks.push(checks::replication(redis, &target).await);
    if target.clustered {
        checks.push(checks::cluster(redis).await);
    }
    checks.push(checks::latency(redis, options.pings, client).await);
    checks.push(checks::clock(redis, &target, options.clock_tolerance).await);
    if options.self_test {
        let outcome = selftest::run(client, &target, &perms, options.renewal_wait).await;
        // Without `ACL DRYRUN`, SUBSCRIBE is known only once a waiter was
        // woken through it.
        let wakeup = outcome
            .iter()
            .find(|c| c.name == selftest::WAKEUP)
            .map(|c| c.status);
        if let Some(channels) = checks.iter_mut().find(|c| c.name == perms::CHANNELS) {
            perms::settle_subscribe(channels, &perms, wakeup);
        }
        checks.extend(outcome);
    }
    Ok(DoctorReport { checks })
}

// === impl Client ===

impl crate::Client {
    /// Is this deployment safe for locks? Checks the server this client
    /// is connected to (kind and version, the user's permissions, eviction,
    /// persistence, replication, the cluster's slots, round trip, clock)
    /// and runs a live self-test on a private lock, with the default
    /// [`DoctorOptions`]; the same report `leasehold doctor` prints. See
    /// [`doctor_with`](Self::doctor_with).
    ///
    /// # Cancel safety
    ///
    /// As [`doctor_with`](Self::doctor_with).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let report = client.doctor().await?;
    /// print!("{report}");
    /// if report.worst() == leasehold::Status::Fail {
    ///     eprintln!("this Redis cannot keep our locks:\n{report}");
    ///     std::process::exit(2);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn doctor(&self) -> Result<DoctorReport> {
        self.doctor_with(&DoctorOptions::new()).await
    }

    /// [`doctor`](Self::doctor) with `options`. The checks are read-only;
    /// the self-test writes only its private lock
    /// `leasehold:doctor:{<uuid>}` (after the key prefix) and leaves
    /// nothing behind. Problems found are in the report; an `Err` means
    /// the client is shut down ([`Error::Shutdown`](crate::Error::Shutdown)).
    ///
    /// # Cancel safety
    ///
    /// A dropped call stops where it is: the self-test's guards are
    /// released in the background and its waiter holds nothing; its
    /// private lock is gone within a few milliseconds (or, if the
    /// connection is gone too, when its lease ends).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let options = leasehold::DoctorOptions::new().self_test(false);
    /// println!("{}", client.doctor_with(&options).await?.to_json());
    /// # Ok(()) }
    /// ```
    pub async fn doctor_with(&self, options: &DoctorOptions) -> Result<DoctorReport> {
        crate::doctor::run(self, options).await
    }
}

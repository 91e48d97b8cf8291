//! Harness for a real `redis-server` process, using std only.

use std::fs::{self, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How many fresh ports `start_with` tries before giving up.
const START_ATTEMPTS: usize = 5;
/// How long a spawned server may take to answer PING.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `restart` keeps retrying to bind the old port.
const RESTART_BIND_TIMEOUT: Duration = Duration::from_secs(5);
/// Interval between readiness probes.
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// Connect, read and write timeout of `cmd`.
const CMD_TIMEOUT: Duration = Duration::from_secs(10);
/// Line redis-server logs once it listens (loglevel notice and above).
const READY_LINE: &str = "Ready to accept connections";
/// Environment variable overriding the redis-server binary.
const BINARY_ENV: &str = "LEASEHOLD_REDIS_SERVER";

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A `redis-server` child process on a loopback port, with its own temp dir.
///
/// An argument of [`RedisServer::start_with`] replaced by a free port on
/// each start attempt.
pub const FRESH_PORT: &str = "{fresh-port}";

/// Passed in `extra_args`, this marker (removed before the server starts)
/// picks the server's port below 55536 with the port 10000 above it free
/// too: a cluster bus port at its default (`port + 10000`), for servers
/// without `--cluster-port` (before Redis 7.0).
pub const BUS_AT_DEFAULT: &str = "{bus-at-port-plus-10000}";

/// The major version of the server binary the harness starts (`redis-server
/// --version`, or the binary `LEASEHOLD_REDIS_SERVER` names): 7 for
/// 7.0.15, 8 for Valkey 8.0.1. Read once.
pub fn server_major() -> u32 {
    static MAJOR: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *MAJOR.get_or_init(|| {
        let binary = std::env::var_os(BINARY_ENV).unwrap_or_else(|| "redis-server".into());
        let out = Command::new(&binary)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        out.split_whitespace()
            .find_map(|w| w.strip_prefix("v="))
            .and_then(|v| v.split('.').next())
            .and_then(|m| m.parse().ok())
            .unwrap_or(7)
    })
}

/// A free port below 55536 whose `port + 10000` is free too.
fn free_port_with_bus() -> u16 {
    for _ in 0..1000 {
        let port = 20_000 + (std::process::id() as u16 ^ free_port()) % 35_000;
        let both = TcpListener::bind(("127.0.0.1", port))
            .and_then(|_| TcpListener::bind(("127.0.0.1", port + 10_000)));
        if both.is_ok() {
            return port;
        }
    }
    panic!("no free port pair (port, port + 10000) below 55536");
}

/// The process is killed (SIGKILL), reaped and its temp dir removed on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    extra_args: Vec<String>,
    dir: PathBuf,
    password: Option<String>,
}

impl RedisServer {
    /// Starts a server with the default harness arguments.
    ///
    /// Panics if `redis-server` is missing or does not become ready.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Starts a server with `extra_args` appended to the harness arguments,
    /// e.g. `&["--requirepass", "secret"]`.
    ///
    /// Retries on a different port (up to 5 times) if the process exits
    /// during start-up, which covers losing a race for the port. An
    /// argument equal to [`FRESH_PORT`] is replaced by another free port on
    /// each attempt (e.g. a cluster bus port), and kept for restarts.
    pub fn start_with(extra_args: &[&str]) -> RedisServer {
        // Built up front so that its `Drop` removes the temp dir if start-up
        // panics.
        let mut server = RedisServer {
            child: None,
            port: 0,
            extra_args: extra_args.iter().map(|a| (*a).to_owned()).collect(),
            dir: make_temp_dir(),
            password: None,
        };
        let mut failures = Vec::new();
        let with_bus = server.extra_args.iter().any(|a| a == BUS_AT_DEFAULT);
        server.extra_args.retain(|a| a != BUS_AT_DEFAULT);
        let wanted = server.extra_args.clone();
        for attempt in 1..=START_ATTEMPTS {
            let port = if with_bus {
                free_port_with_bus()
            } else {
                free_port()
            };
            server.extra_args = wanted
                .iter()
                .map(|a| {
                    if a == FRESH_PORT {
                        free_port().to_string()
                    } else {
                        a.clone()
                    }
                })
                .collect();
            match launch(port, &server.dir, &server.extra_args) {
                Launch::Ready(child) => {
                    server.port = port;
                    server.child = Some(child);
                    return server;
                }
                Launch::Exited(reason) => {
                    failures.push(format!("attempt {attempt} on port {port}: {reason}"));
                }
            }
        }
        panic!(
            "redis-server failed to start after {START_ATTEMPTS} attempts:\n{}\n{}",
            failures.join("\n"),
            diagnostics(&server.dir)
        );
    }

    /// Stores a password that `cmd` sends with `AUTH` before each command.
    pub fn with_password(mut self, pw: &str) -> Self {
        self.password = Some(pw.to_owned());
        self
    }

    /// The loopback TCP port the server listens on (kept across `restart`).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `"127.0.0.1:PORT"`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `"redis://127.0.0.1:PORT"`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// OS process id of the running server, if any.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The server's temp dir (working dir and log location).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Contents of the server's log file (all runs, including restarts).
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    /// Kills the server with SIGKILL and reaps it. Does nothing if it is not
    /// running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server if running, then starts it again on the same port
    /// with the same arguments and temp dir, and waits until it is ready.
    ///
    /// Binding the old port is retried for up to 5 s.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + RESTART_BIND_TIMEOUT;
        loop {
            match launch(self.port, &self.dir, &self.extra_args) {
                Launch::Ready(child) => {
                    self.child = Some(child);
                    return;
                }
                Launch::Exited(reason) => {
                    if Instant::now() >= deadline {
                        panic!(
                            "redis-server could not restart on port {} within {:?}: {reason}\n{}",
                            self.port,
                            RESTART_BIND_TIMEOUT,
                            diagnostics(&self.dir)
                        );
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }

    /// Whether the server process is still alive (reaps it if it exited).
    pub fn is_running(&mut self) -> bool {
        let Some(child) = self.child.as_mut() else {
            return false;
        };
        match child.try_wait() {
            Ok(None) => true,
            Ok(Some(_)) => {
                self.child = None;
                false
            }
            Err(e) => panic!("redis-server: try_wait failed: {e}"),
        }
    }

    /// Runs one command on a fresh connection and returns the rendered reply.
    ///
    /// Rendering: simple strings as text, errors as `-` plus their text,
    /// integers in decimal, bulk strings as text (nil as `(nil)`), arrays
    /// as their rendered elements joined with `\n` (nil array as `(nil)`).
    /// With a password set, `AUTH` is sent first and its error reply, if
    /// any, is returned instead. Panics if the server cannot be reached.
    pub fn cmd(&self, args: &[&str]) -> String {
        self.try_cmd(args).unwrap_or_else(|e| {
            panic!(
                "redis-server at {}: command {:?} failed: {e}",
                self.addr(),
                args
            )
        })
    }

    /// Like `cmd`, but returns connection and protocol failures as errors.
    pub fn try_cmd(&self, args: &[&str]) -> io::Result<String> {
        command_on(self.port, self.password.as_deref(), args)
    }
}

/// Runs one command on `127.0.0.1:port` over a fresh connection (after
/// `AUTH` if `password` is set) and renders the reply as `RedisServer::cmd`
/// does. Also used for processes the harness does not start itself
/// (sentinels).
pub fn command_on(port: u16, password: Option<&str>, args: &[&str]) -> io::Result<String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let stream = TcpStream::connect_timeout(&addr, CMD_TIMEOUT)?;
    stream.set_read_timeout(Some(CMD_TIMEOUT))?;
    stream.set_write_timeout(Some(CMD_TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    if let Some(pw) = password {
        writer.write_all(&encode_command(&["AUTH", pw]))?;
        let reply = read_reply(&mut reader)?;
        if reply.starts_with('-') {
            return Ok(reply);
        }
    }
    writer.write_all(&encode_command(args))?;
    read_reply(&mut reader)
}

/// Value of `field` in `INFO`-style `field:value` lines.
pub fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Result of one spawn attempt.
enum Launch {
    /// The process is up and answers PING.
    Ready(Child),
    /// The process exited before becoming ready (reason attached).
    Exited(String),
}

/// Spawns redis-server on `port` and waits until it is ready or exits.
/// Panics if it is still alive but not ready after `READY_TIMEOUT`.
fn launch(port: u16, dir: &Path, extra_args: &[String]) -> Launch {
    let log = dir.join("redis.log");
    let log_offset = fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    let stderr = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("stderr.log"))
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.join("stderr.log").display()));
    let binary = std::env::var_os(BINARY_ENV).unwrap_or_else(|| "redis-server".into());
    let mut command = Command::new(&binary);
    command
        .arg("--port")
        .arg(port.to_string())
        .args(["--bind", "127.0.0.1"])
        .args(["--save", ""])
        .args(["--appendonly", "no"])
        .args(["--daemonize", "no"])
        .arg("--logfile")
        .arg(&log)
        .arg("--dir")
        .arg(dir)
        .args(extra_args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            panic!(
                "{} not found: `cargo xtask test` installs redis-server (with apt-get, as \
                 root), or install it (Debian/Ubuntu: apt-get install redis-server; macOS: \
                 brew install redis), or set {BINARY_ENV} to its path",
                Path::new(&binary).display()
            )
        }
        Err(e) => panic!("failed to spawn {}: {e}", Path::new(&binary).display()),
    };
    // With a custom loglevel the ready line may not be logged.
    let check_log = !extra_args.iter().any(|a| a == "--loglevel");
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                return Launch::Exited(format!("redis-server exited with {status}"))
            }
            Ok(None) => {}
            Err(e) => panic!("redis-server: try_wait failed: {e}"),
        }
        // The log check makes sure the PONG came from our process and not
        // from another one that won the race for the port.
        if ping_ready(port) && (!check_log || log_since(&log, log_offset).contains(READY_LINE)) {
            if let Ok(None) = child.try_wait() {
                return Launch::Ready(child);
            }
            continue;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "redis-server on port {port} not ready after {READY_TIMEOUT:?}\n{}",
                diagnostics(dir)
            );
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// Sends an inline `PING`; `+PONG` or `-NOAUTH` means the server is ready.
fn ping_ready(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    if stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .is_err()
        || stream.write_all(b"PING\r\n").is_err()
    {
        return false;
    }
    let mut line = String::new();
    match BufReader::new(stream).read_line(&mut line) {
        Ok(n) if n > 0 => line.starts_with("+PONG") || line.starts_with("-NOAUTH"),
        _ => false,
    }
}

/// Asks the OS for a free loopback port. The listener is dropped at once,
/// so the port can be raced for; callers retry.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("cannot bind 127.0.0.1:0 to pick a port: {e}"))
}

/// Creates a fresh, uniquely named directory under the system temp dir.
pub fn make_temp_dir() -> PathBuf {
    let pid = std::process::id();
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("leasehold-redis-{pid}-{n}-{nanos}"));
        match fs::create_dir(&dir) {
            Ok(()) => return dir,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => panic!("cannot create temp dir {}: {e}", dir.display()),
        }
    }
}

/// Text appended to `path` after byte `offset`.
pub fn log_since(path: &Path, offset: u64) -> String {
    let bytes = fs::read(path).unwrap_or_default();
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

/// Log file and stderr contents, for panic messages.
fn diagnostics(dir: &Path) -> String {
    let read = |name: &str| fs::read_to_string(dir.join(name)).unwrap_or_default();
    format!(
        "--- redis.log ---\n{}\n--- stderr ---\n{}",
        read("redis.log"),
        read("stderr.log")
    )
}

/// Encodes a command as a RESP array of bulk strings.
fn encode_command(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Reads one `\r\n`-terminated line, without the terminator.
fn read_line(r: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line)?;
    if !line.ends_with(b"\r\n") {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed mid-reply",
        ));
    }
    line.truncate(line.len() - 2);
    Ok(line)
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// Parses a RESP length or integer.
fn parse_int(text: &[u8]) -> io::Result<i64> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            invalid(format!(
                "bad RESP integer {:?}",
                String::from_utf8_lossy(text)
            ))
        })
}

/// Reads one RESP2 reply and renders it as described on `RedisServer::cmd`.
fn read_reply(r: &mut impl BufRead) -> io::Result<String> {
    let line = read_line(r)?;
    let Some((&kind, rest)) = line.split_first() else {
        return Err(invalid("empty RESP line".to_owned()));
    };
    match kind {
        b'+' => Ok(String::from_utf8_lossy(rest).into_owned()),
        b'-' => Ok(format!("-{}", String::from_utf8_lossy(rest))),
        b':' => parse_int(rest).map(|n| n.to_string()),
        b'$' => {
            let Ok(len) = usize::try_from(parse_int(rest)?) else {
                return Ok("(nil)".to_owned());
            };
            let mut data = vec![0; len + 2];
            r.read_exact(&mut data)?;
            if !data.ends_with(b"\r\n") {
                return Err(invalid("bulk string not terminated by CRLF".to_owned()));
            }
            data.truncate(len);
            Ok(String::from_utf8_lossy(&data).into_owned())
        }
        b'*' => {
            let Ok(count) = usize::try_from(parse_int(rest)?) else {
                return Ok("(nil)".to_owned());
            };
            let items = (0..count)
                .map(|_| read_reply(r))
                .collect::<io::Result<Vec<_>>>()?;
            Ok(items.join("\n"))
        }
        other => Err(invalid(format!(
            "unknown RESP type byte {:?}",
            other as char
        ))),
    }
}

//! A real TCP proxy on loopback with fault modes switchable at runtime.
//!
//! Modes apply to existing and new connections alike:
//! - pass: bytes are forwarded as they arrive;
//! - delay: each chunk is forwarded a fixed time after it was read, in order;
//! - blackhole: connections stay open but nothing is forwarded in either
//!   direction; bytes read meanwhile are dropped, and new connections are
//!   accepted but held (not connected upstream) until the mode changes.
//!
//! `cut_all` closes every current connection, and `drop_replies_once` loses
//! the next reply chunk from upstream and then cuts every connection.
//!
//! `stall_next_matching` keeps a command on its way: the next chunk from a
//! client that contains a pattern is held back, with everything after it on
//! that connection, and the client's end of that connection is closed (the
//! client sees it die and reconnects), while the server's end stays open.
//! `release_stalled` delivers the held bytes to the server then: a copy of
//! a command arriving late, as one stuck in a socket during a partition.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// Forwarding behaviour shared by all connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Pass,
    Delay(Duration),
    Blackhole,
}

/// Which way a pump moves bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    /// Client to upstream.
    Up,
    /// Upstream to client.
    Down,
}

/// State shared between the `Proxy` handle and its tasks.
#[derive(Debug)]
struct Shared {
    upstream: String,
    mode: watch::Sender<Mode>,
    /// Bumped by `cut_all`; each connection closes when it changes.
    cuts: watch::Sender<u64>,
    /// Set to `true` when the `Proxy` is dropped; every task then exits.
    shutdown: watch::Sender<bool>,
    live: AtomicUsize,
    /// Client connections accepted so far.
    accepted: AtomicUsize,
    drop_reply: AtomicBool,
    /// The pattern of the next client chunk to hold back (see
    /// `stall_next_matching`).
    stall_on: std::sync::Mutex<Option<Vec<u8>>>,
    /// True while held chunks wait; `release_stalled` sets it false.
    stalled: watch::Sender<bool>,
    /// Chunks held back so far.
    held: AtomicUsize,
    /// Scripts sent with no key are refused by the server (see
    /// `refuse_keyless_scripts`).
    refuse_keyless: AtomicBool,
}

impl Shared {
    fn mode(&self) -> Mode {
        *self.mode.borrow()
    }

    fn cut_all(&self) {
        self.cuts.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Whether `chunk` from a client is the one to hold back (the armed
    /// pattern is then disarmed).
    fn stalls(&self, chunk: &[u8]) -> bool {
        let mut armed = self.stall_on.lock().unwrap_or_else(|e| e.into_inner());
        let hit = armed
            .as_deref()
            .is_some_and(|pattern| chunk.windows(pattern.len()).any(|w| w == pattern));
        if hit {
            *armed = None;
            self.stalled.send_replace(true);
            self.held.fetch_add(1, Ordering::SeqCst);
        }
        hit
    }
}

/// A loopback TCP proxy in front of one upstream address.
///
/// Its tasks stop when it is dropped, closing every proxied connection.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl Proxy {
    /// Binds `127.0.0.1:0` and forwards each accepted connection to
    /// `upstream` (e.g. `"127.0.0.1:6379"`), in pass mode.
    ///
    /// Must be called inside a tokio runtime. If connecting upstream fails,
    /// the client's connection is closed.
    pub async fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("proxy: cannot bind 127.0.0.1:0: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("proxy: local_addr failed: {e}"));
        let shared = Arc::new(Shared {
            upstream: upstream.to_owned(),
            mode: watch::channel(Mode::Pass).0,
            cuts: watch::channel(0).0,
            shutdown: watch::channel(false).0,
            live: AtomicUsize::new(0),
            accepted: AtomicUsize::new(0),
            drop_reply: AtomicBool::new(false),
            stall_on: std::sync::Mutex::new(None),
            stalled: watch::channel(false).0,
            held: AtomicUsize::new(0),
            refuse_keyless: AtomicBool::new(false),
        });
        tokio::spawn(accept_loop(listener, Arc::clone(&shared)));
        Proxy { addr, shared }
    }

    /// Makes the server refuse every script sent with no declared key, as
    /// ElastiCache Serverless does ("Lua scripts without any input keys are
    /// not supported"): an `EVALSHA`/`EVAL` whose key count is `0` is
    /// renamed on its way to a command of the same length that takes fewer
    /// arguments (`EVALSHA` to `PUBLISH`, `EVAL` to `ECHO`), so the server
    /// answers it with a clean arity error in its place among the replies
    /// (an unknown command's error would quote its arguments, binary ones
    /// included). A keyless `EVALSHA` with no argument would publish `0` on
    /// a channel named after the SHA: harmless.
    /// Every other command passes unchanged.
    pub fn refuse_keyless_scripts(&self) {
        self.shared.refuse_keyless.store(true, Ordering::SeqCst);
    }

    /// `"127.0.0.1:PORT"` of the proxy's listener.
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// The proxy's listening port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `"redis://127.0.0.1:PORT"` of the proxy's listener.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Normal forwarding. Held connections (from a blackhole) get connected
    /// upstream; bytes dropped earlier stay lost.
    pub fn pass(&self) {
        self.shared.mode.send_replace(Mode::Pass);
    }

    /// Forwards each chunk `d` after it was read, in both directions,
    /// preserving order.
    pub fn delay(&self, d: Duration) {
        self.shared.mode.send_replace(Mode::Delay(d));
    }

    /// Network partition: connections stay open but nothing is forwarded
    /// either way, bytes read meanwhile (and chunks still queued by
    /// `delay`) are dropped, and new connections are accepted but held.
    ///
    /// A side that closes its end still has the close passed on, so
    /// connections do not pile up.
    pub fn blackhole(&self) {
        self.shared.mode.send_replace(Mode::Blackhole);
    }

    /// Closes every current connection on both sides at once. New
    /// connections are still accepted, in the current mode.
    pub fn cut_all(&self) {
        self.shared.cut_all();
    }

    /// The next chunk coming back from upstream (on any connection) is
    /// discarded, then every connection is cut: the command reached the
    /// server but its reply was lost.
    pub fn drop_replies_once(&self) {
        self.shared.drop_reply.store(true, Ordering::SeqCst);
    }

    /// Arms a stall: the next chunk a client sends that contains `pattern`
    /// (on any connection) is held back, with everything after it on that
    /// connection, and the client's end of that connection is closed at
    /// once; the server's end stays open until [`release_stalled`]
    /// delivers the held bytes (then closes it). An empty pattern is
    /// refused.
    ///
    /// [`release_stalled`]: Proxy::release_stalled
    pub fn stall_next_matching(&self, pattern: &[u8]) {
        assert!(!pattern.is_empty(), "stall_next_matching: empty pattern");
        *self
            .shared
            .stall_on
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(pattern.to_vec());
    }

    /// How many chunks a stall has held back so far.
    pub fn stalled_count(&self) -> usize {
        self.shared.held.load(Ordering::SeqCst)
    }

    /// Delivers the bytes held back by a stall to the server, on the
    /// connection they were sent on, then closes it.
    pub fn release_stalled(&self) {
        self.shared.stalled.send_replace(false);
    }

    /// Number of live client connections, held ones included. Closing is
    /// asynchronous: see `wait_connection_count`.
    pub fn connection_count(&self) -> usize {
        self.shared.live.load(Ordering::SeqCst)
    }

    /// Client connections accepted so far (closed ones included): a
    /// client that reconnects makes it grow.
    pub fn accepted_count(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Polls until `connection_count() == n` or `timeout` elapses; returns
    /// whether the count was reached.
    pub async fn wait_connection_count(&self, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.connection_count() == n {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.shutdown.send_replace(true);
    }
}

/// Counts a live connection until dropped.
struct LiveGuard(Arc<Shared>);

impl LiveGuard {
    fn new(shared: &Arc<Shared>) -> Self {
        shared.live.fetch_add(1, Ordering::SeqCst);
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        LiveGuard(Arc::clone(shared))
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut shutdown = shared.shutdown.subscribe();
    loop {
        tokio::select! {
            () = stopped(&mut shutdown) => break,
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    let _ = client.set_nodelay(true);
                    // Count and subscribe now, so a cut right after accept
                    // still applies to this connection.
                    let guard = LiveGuard::new(&shared);
                    let cuts = shared.cuts.subscribe();
                    tokio::spawn(handle(client, Arc::clone(&shared), cuts, guard));
                }
                // E.g. out of file descriptors: back off instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
        }
    }
}

/// Resolves once the proxy is dropped. (Drops the non-`Send` `watch::Ref`
/// here so that tasks selecting on it stay `Send`.)
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// Runs one proxied connection until it ends, is cut, or the proxy stops.
/// Dropping `serve` closes both sockets.
async fn handle(
    client: TcpStream,
    shared: Arc<Shared>,
    mut cuts: watch::Receiver<u64>,
    _guard: LiveGuard,
) {
    let mut shutdown = shared.shutdown.subscribe();
    tokio::select! {
        () = stopped(&mut shutdown) => {}
        _ = cuts.changed() => {}
        () = serve(client, &shared) => {}
    }
}

async fn serve(mut client: TcpStream, shared: &Shared) {
    if !hold_while_blackholed(&mut client, shared).await {
        return;
    }
    let Ok(upstream) = TcpStream::connect(shared.upstream.as_str()).await else {
        return;
    };
    let _ = upstream.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (upstream_read, upstream_write) = upstream.into_split();
    // Set when a stall closes the client's end of this connection.
    let client_gone = watch::channel(false).0;
    tokio::join!(
        pump(
            client_read,
            upstream_write,
            shared,
            Direction::Up,
            &client_gone
        ),
        pump(
            upstream_read,
            client_write,
            shared,
            Direction::Down,
            &client_gone
        ),
    );
}

/// Waits until the mode is not blackhole, reading and dropping whatever the
/// client sends. Returns `false` if the client closed meanwhile.
async fn hold_while_blackholed(client: &mut TcpStream, shared: &Shared) -> bool {
    let mut mode = shared.mode.subscribe();
    let mut buf = [0u8; 4096];
    loop {
        if *mode.borrow_and_update() != Mode::Blackhole {
            return true;
        }
        tokio::select! {
            _ = mode.changed() => {}
            read = client.read(&mut buf) => match read {
                Ok(0) | Err(_) => return false,
                Ok(_) => {}
            },
        }
    }
}

/// Moves bytes from `from` to `to` according to the mode, until `from`
/// reaches EOF (then `to` is shut down after the queue drains) or `to`
/// fails. A chunk from the client that a stall holds back (see
/// `Proxy::stall_next_matching`) waits, with every chunk after it, until
/// the stall is released; the client's end is closed at once
/// (`client_gone`).
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    shared: &Shared,
    dir: Direction,
    client_gone: &watch::Sender<bool>,
) {
    // Each chunk carries the instant it may be written and whether a stall
    // holds it; a FIFO queue keeps the order even when the delay changes.
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, bool, Vec<u8>)>();
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if dir == Direction::Down && shared.drop_reply.swap(false, Ordering::SeqCst) {
                shared.cut_all();
                continue;
            }
            if dir == Direction::Up && shared.stalls(&buf[..n]) {
                let _ = tx.send((Instant::now(), true, buf[..n].to_vec()));
                // The client's end dies now: stop reading it.
                client_gone.send_replace(true);
                break;
            }
            if dir == Direction::Up && shared.refuse_keyless.load(Ordering::SeqCst) {
                rename_keyless_scripts(&mut buf[..n]);
            }
            let due = match shared.mode() {
                Mode::Pass => Instant::now(),
                Mode::Delay(d) => Instant::now() + d,
                Mode::Blackhole => continue,
            };
            if tx.send((due, false, buf[..n].to_vec())).is_err() {
                break;
            }
        }
        // Dropping `tx` (and `from`) lets the writer drain the queue and
        // finish.
    };
    let writer = async move {
        let mut gone = client_gone.subscribe();
        loop {
            let next = tokio::select! {
                next = rx.recv() => next,
                // The client's end of a stalled connection: close it.
                _ = gone.wait_for(|gone| *gone), if dir == Direction::Down => return,
            };
            let Some((due, held, chunk)) = next else {
                break;
            };
            if held {
                let mut stalled = shared.stalled.subscribe();
                let _ = stalled.wait_for(|stalled| !*stalled).await;
            } else if due > Instant::now() {
                tokio::time::sleep_until(due).await;
            }
            if shared.mode() == Mode::Blackhole {
                continue;
            }
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}

/// Renames, in place, every `EVALSHA` (`$7`) or `EVAL` (`$4`) command in
/// `chunk` whose key count is `0`, so the server refuses it (see
/// `Proxy::refuse_keyless_scripts`). A command split across two chunks is
/// left as it is (loopback writes of a script call come whole).
fn rename_keyless_scripts(chunk: &mut [u8]) {
    let mut at = 0;
    while at < chunk.len() {
        let rest = &chunk[at..];
        let (name_len, replacement): (usize, &[u8]) =
            if rest.len() >= 13 && rest[..13].eq_ignore_ascii_case(b"$7\r\nEVALSHA\r\n") {
                (13, b"$7\r\nPUBLISH\r\n")
            } else if rest.len() >= 10 && rest[..10].eq_ignore_ascii_case(b"$4\r\nEVAL\r\n") {
                (10, b"$4\r\nECHO\r\n")
            } else {
                at += 1;
                continue;
            };
        // The script (or its SHA) as a bulk string, then the key count.
        let after = &rest[name_len..];
        let keys_at = bulk_end(after).map(|end| &after[end..]);
        if keys_at.is_some_and(|k| k.starts_with(b"$1\r\n0\r\n")) {
            chunk[at..at + name_len].copy_from_slice(replacement);
        }
        at += name_len;
    }
}

/// The length of the RESP bulk string (`$<n>\r\n<n bytes>\r\n`) at the
/// start of `bytes`, if it is whole there.
fn bulk_end(bytes: &[u8]) -> Option<usize> {
    let header = bytes.strip_prefix(b"$")?;
    let line = header.iter().position(|b| *b == b'\r')?;
    let n: usize = std::str::from_utf8(&header[..line]).ok()?.parse().ok()?;
    let end = 1 + line + 2 + n + 2;
    (bytes.len() >= end).then_some(end)
}

#[cfg(test)]
mod tests {
    use super::rename_keyless_scripts;

    #[test]
    fn only_keyless_scripts_are_renamed() {
        let mut keyless = b"*4\r\n$7\r\nEVALSHA\r\n$3\r\nabc\r\n$1\r\n0\r\n$1\r\nx\r\n".to_vec();
        rename_keyless_scripts(&mut keyless);
        assert!(keyless.windows(7).any(|w| w == b"PUBLISH"));
        let mut keyed = b"*4\r\n$7\r\nevalsha\r\n$3\r\nabc\r\n$1\r\n1\r\n$1\r\nk\r\n".to_vec();
        let before = keyed.clone();
        rename_keyless_scripts(&mut keyed);
        assert_eq!(keyed, before);
        let mut eval = b"*3\r\n$4\r\nEVAL\r\n$8\r\nreturn 1\r\n$1\r\n0\r\n".to_vec();
        rename_keyless_scripts(&mut eval);
        assert!(eval.windows(4).any(|w| w == b"ECHO"));
    }
}

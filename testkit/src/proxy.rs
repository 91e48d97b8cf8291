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
}

impl Shared {
    fn mode(&self) -> Mode {
        *self.mode.borrow()
    }

    fn cut_all(&self) {
        self.cuts.send_modify(|n| *n = n.wrapping_add(1));
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
        });
        tokio::spawn(accept_loop(listener, Arc::clone(&shared)));
        Proxy { addr, shared }
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
    tokio::join!(
        pump(client_read, upstream_write, shared, Direction::Up),
        pump(upstream_read, client_write, shared, Direction::Down),
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
/// fails.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, shared: &Shared, dir: Direction) {
    // Each chunk carries the instant it may be written; a FIFO queue keeps
    // the order even when the delay changes.
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
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
            let due = match shared.mode() {
                Mode::Pass => Instant::now(),
                Mode::Delay(d) => Instant::now() + d,
                Mode::Blackhole => continue,
            };
            if tx.send((due, buf[..n].to_vec())).is_err() {
                break;
            }
        }
        // Dropping `tx` lets the writer drain the queue and finish.
    };
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            if due > Instant::now() {
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

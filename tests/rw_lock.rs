//! The read-write lock: readers share, a writer excludes everyone, the
//! Redisson wire format (hash, timeout keys, channel, messages), re-entry,
//! cancellation, and the engine's lease invariant on both halves.

use leasehold_testkit as support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold::fred::interfaces::KeysInterface;
use leasehold::{Client, Error, LockGuard, Owner};
use support::fixture::{client, client_with, eventually, lock_keys, numsub, within};
use support::RedisServer;
use tokio::task::JoinSet;
use tokio::time::Instant;

const HANG: Duration = Duration::from_secs(60);

/// Redisson's read unlock, written from its documented steps
/// (REDISSON-WIRE.md §4.3), without the latch: what a Java reader's unlock
/// does to the hash. KEYS: hash, channel, the reader's timeout prefix,
/// every holder's key prefix; ARGV: the reader's field.
const JAVA_READ_UNLOCK: &str = "\
    local mode = redis.call('hget', KEYS[1], 'mode') \
    if not mode then redis.call('publish', KEYS[2], '0') return -1 end \
    if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return -1 end \
    local left = redis.call('hincrby', KEYS[1], ARGV[1], -1) \
    if left == 0 then redis.call('hdel', KEYS[1], ARGV[1]) end \
    redis.call('del', KEYS[3] .. ':' .. (left + 1)) \
    if redis.call('hlen', KEYS[1]) > 1 then \
        local longest = -3 \
        for _, f in ipairs(redis.call('hkeys', KEYS[1])) do \
            local c = tonumber(redis.call('hget', KEYS[1], f)) \
            if c then for i = c, 1, -1 do \
                longest = math.max(longest, redis.call('pttl', KEYS[4] .. ':' .. f .. ':rwlock_timeout:' .. i)) \
            end end \
        end \
        if longest > 0 then redis.call('pexpire', KEYS[1], longest) return 0 end \
        if mode == 'write' then return 0 end \
    end \
    redis.call('del', KEYS[1]) \
    redis.call('publish', KEYS[2], '0') \
    return 1";

/// A Java reader (field `java:<thread>`) taking a read lock on `name` for
/// `lease_ms`, as Redisson's read acquire does with raw commands.
fn java_read_lock(server: &RedisServer, name: &str, thread: u32, lease_ms: u64) {
    let field = format!("java:{thread}");
    let count = server.cmd(&["HINCRBY", name, &field, "1"]);
    server.cmd(&["HSET", name, "mode", "read"]);
    let timeout = format!("{{{name}}}:{field}:rwlock_timeout:{count}");
    server.cmd(&["SET", &timeout, "1", "PX", &lease_ms.to_string()]);
    let ttl = pttl(server, name).max(lease_ms as i64);
    server.cmd(&["PEXPIRE", name, &ttl.to_string()]);
}

/// The Java reader's unlock (see [`JAVA_READ_UNLOCK`]).
fn java_read_unlock(server: &RedisServer, name: &str, thread: u32) -> String {
    let field = format!("java:{thread}");
    let prefix = format!("{{{name}}}:{field}:rwlock_timeout");
    let channel = format!("redisson_rwlock:{{{name}}}");
    let holders = format!("{{{name}}}");
    server.cmd(&[
        "EVAL",
        JAVA_READ_UNLOCK,
        "4",
        name,
        &channel,
        &prefix,
        &holders,
        &field,
    ])
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    server
        .cmd(&["PTTL", key])
        .parse()
        .expect("PTTL is an integer")
}

/// `{name}:<uuid>:<owner>:rwlock_timeout:<n>`: the timeout key of read
/// hold `n` of `owner` (a task of `client`).
fn timeout_key(name: &str, client: &Client, owner: Owner, n: u32) -> String {
    format!(
        "{{{name}}}:{}:{}:rwlock_timeout:{n}",
        client.id(),
        owner.id()
    )
}

fn read_field(client: &Client, owner: Owner) -> String {
    format!("{}:{}", client.id(), owner.id())
}

fn rwlock_timeout_keys(server: &RedisServer) -> Vec<String> {
    lock_keys(server)
        .into_iter()
        .filter(|k| k.contains(":rwlock_timeout:"))
        .collect()
}

/// Runs `body(i)` for `n` tasks at once (each its own owner) and fails with
/// the first panic.
async fn all<F, Fut>(n: usize, body: F)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut set = JoinSet::new();
    for i in 0..n {
        set.spawn(body(i));
    }
    within(HANG, "all tasks", async {
        while let Some(done) = set.join_next().await {
            if let Err(e) = done {
                std::panic::resume_unwind(e.into_panic());
            }
        }
    })
    .await;
}

/// A small, seeded xorshift: random enough for cancellation points.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

// === sharing and exclusion ===

/// 12 readers on 3 clients hold the read lock at the same time (each
/// waits at a barrier while holding it); meanwhile a writer is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twelve_readers_on_three_clients_are_inside_together() {
    let server = Arc::new(RedisServer::start());
    let clients = [
        client(&server).await,
        client(&server).await,
        client(&server).await,
    ];
    let writer = client(&server).await;
    let inside = Arc::new(tokio::sync::Barrier::new(13));
    let leave = Arc::new(tokio::sync::Barrier::new(13));
    let mut readers = JoinSet::new();
    for i in 0..12 {
        let rw = clients[i % 3].read_write_lock("shared");
        let (inside, leave) = (inside.clone(), leave.clone());
        readers.spawn(async move {
            let guard = rw.read().lock().await.unwrap();
            inside.wait().await;
            leave.wait().await;
            assert!(!guard.is_lost());
            guard.unlock().await.unwrap();
        });
    }
    within(HANG, "12 readers inside together", inside.wait()).await;
    assert_eq!(server.cmd(&["HGET", "shared", "mode"]), "read");
    assert_eq!(server.cmd(&["HLEN", "shared"]), "13", "mode + 12 readers");
    assert_eq!(rwlock_timeout_keys(&server).len(), 12);
    let w = writer.read_write_lock("shared").write();
    assert!(
        w.try_lock().await.unwrap().is_none(),
        "readers exclude a writer"
    );
    assert!(w
        .try_lock_for(Duration::from_millis(200))
        .await
        .unwrap()
        .is_none());
    assert!(writer
        .read_write_lock("shared")
        .read()
        .is_locked()
        .await
        .unwrap());
    assert!(!w.is_locked().await.unwrap());
    leave.wait().await;
    within(HANG, "readers leave", async {
        while let Some(done) = readers.join_next().await {
            done.unwrap();
        }
    })
    .await;
    assert!(lock_keys(&server).is_empty(), "{:?}", lock_keys(&server));
    let g = w
        .try_lock()
        .await
        .unwrap()
        .expect("free once the readers left");
    g.unlock().await.unwrap();
    for c in clients.iter().chain([&writer]) {
        c.shutdown().await.unwrap();
    }
}

/// 8 writers and 8 readers on 2 clients. Writers bump a counter with a
/// plain GET/SET and write a pair of keys one after the other; readers
/// read both halves under the read lock. The counter is exact, no reader
/// sees half a pair, and nobody is inside with a writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_excludes_everyone() {
    const ROUNDS: usize = 15;
    let server = Arc::new(RedisServer::start());
    let clients = [client(&server).await, client(&server).await];
    let writers_in = Arc::new(AtomicUsize::new(0));
    let readers_in = Arc::new(AtomicUsize::new(0));
    let reads = Arc::new(AtomicUsize::new(0));
    let (c, w_in, r_in, n_reads) = (
        clients.clone(),
        writers_in.clone(),
        readers_in.clone(),
        reads.clone(),
    );
    all(16, move |i| {
        let client = c[i % 2].clone();
        let (writers_in, readers_in, reads) = (w_in.clone(), r_in.clone(), n_reads.clone());
        async move {
            let rw = client.read_write_lock("pair");
            let redis = client.redis().clone();
            for _ in 0..ROUNDS {
                if i < 8 {
                    let g = rw.write().lock().await.unwrap();
                    assert_eq!(writers_in.fetch_add(1, Ordering::SeqCst), 0, "two writers");
                    assert_eq!(
                        readers_in.load(Ordering::SeqCst),
                        0,
                        "a reader with a writer"
                    );
                    let n: Option<u64> = redis.get("counter").await.unwrap();
                    let n = n.unwrap_or(0) + 1;
                    let _: () = redis.set("pair:a", n, None, None, false).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    let _: () = redis.set("pair:b", n, None, None, false).await.unwrap();
                    let _: () = redis.set("counter", n, None, None, false).await.unwrap();
                    writers_in.fetch_sub(1, Ordering::SeqCst);
                    g.unlock().await.unwrap();
                } else {
                    let g = rw.read().lock().await.unwrap();
                    readers_in.fetch_add(1, Ordering::SeqCst);
                    assert_eq!(
                        writers_in.load(Ordering::SeqCst),
                        0,
                        "a writer with a reader"
                    );
                    let a: Option<u64> = redis.get("pair:a").await.unwrap();
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    let b: Option<u64> = redis.get("pair:b").await.unwrap();
                    assert_eq!(a, b, "a reader saw half a pair");
                    reads.fetch_add(1, Ordering::SeqCst);
                    readers_in.fetch_sub(1, Ordering::SeqCst);
                    g.unlock().await.unwrap();
                }
            }
        }
    })
    .await;
    assert_eq!(server.cmd(&["GET", "counter"]), (8 * ROUNDS).to_string());
    assert_eq!(reads.load(Ordering::SeqCst), 8 * ROUNDS);
    assert_eq!(server.cmd(&["EXISTS", "pair"]), "0");
    assert!(rwlock_timeout_keys(&server).is_empty());
    for c in &clients {
        c.shutdown().await.unwrap();
    }
}

// === re-entry ===

/// A writer re-enters the write lock and takes the read lock (downgrade);
/// giving the write holds back leaves it reading, and lets other readers
/// in, but not writers.
#[tokio::test]
async fn a_writer_may_reenter_and_read() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let rw = a.read_write_lock("doc");
    let other = b.read_write_lock("doc");
    let me = Owner::current();

    let w1 = rw.write().lock().await.unwrap();
    let w2 = rw.write().lock().await.unwrap();
    let r = rw.read().lock().await.unwrap();
    assert_eq!(rw.write().hold_count().await.unwrap(), 2);
    assert_eq!(rw.read().hold_count().await.unwrap(), 1);
    assert_eq!(server.cmd(&["HGET", "doc", "mode"]), "write");
    let write_field = format!("{}:write", read_field(&a, me));
    assert_eq!(server.cmd(&["HGET", "doc", &write_field]), "2");
    assert!(pttl(&server, &timeout_key("doc", &a, me, 1)) > 0);
    assert!(other.read().try_lock().await.unwrap().is_none());
    assert!(other.write().try_lock().await.unwrap().is_none());
    assert!(other.read().is_locked().await.unwrap(), "the writer reads");
    assert!(other.write().is_locked().await.unwrap());

    w2.unlock().await.unwrap();
    w1.unlock().await.unwrap();
    assert_eq!(server.cmd(&["HGET", "doc", "mode"]), "read");
    assert_eq!(server.cmd(&["HEXISTS", "doc", &write_field]), "0");
    assert!(!r.is_lost());
    let shared = other
        .read()
        .try_lock()
        .await
        .unwrap()
        .expect("readers join a downgraded writer");
    assert!(other.write().try_lock().await.unwrap().is_none());
    shared.unlock().await.unwrap();
    r.unlock().await.unwrap();
    assert!(lock_keys(&server).is_empty(), "{:?}", lock_keys(&server));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A reader asking for the write lock: `lock()` is refused at once with
/// `InvalidArgument`; bounded waits return `None` at their deadline; a
/// read guard given back by another task lets the bounded wait succeed.
#[tokio::test]
async fn a_reader_cannot_upgrade() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let rw = a.read_write_lock("up");
    let r = rw.read().lock().await.unwrap();

    let refused = within(Duration::from_secs(5), "lock() refuses", rw.write().lock()).await;
    assert!(
        matches!(refused, Err(Error::InvalidArgument(_))),
        "{refused:?}"
    );
    let refused = rw.write().lock_with_lease(Duration::from_secs(5)).await;
    assert!(matches!(refused, Err(Error::InvalidArgument(_))));
    assert!(rw.write().try_lock().await.unwrap().is_none());
    let started = Instant::now();
    let timed_out = within(
        Duration::from_secs(10),
        "try_lock_for returns at its deadline",
        rw.write().try_lock_for(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    assert!(timed_out.is_none());
    println!(
        "upgrade: try_lock_for(300 ms) returned None after {:?}",
        started.elapsed()
    );

    // The read guard, moved to another task and dropped there.
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(r);
    });
    let w = within(
        HANG,
        "the write lock after the read guard went",
        rw.write().try_lock_for(Duration::from_secs(30)),
    )
    .await
    .unwrap()
    .expect("the read hold was given back");
    w.unlock().await.unwrap();
    a.shutdown().await.unwrap();
}

// === waking ===

/// Three readers hold the lock; a writer on another client waits (woken by
/// messages only: a 60 s recheck interval). It gets the lock soon after
/// the last read unlock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_wakes_after_the_last_read_unlock() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client_with(&server, |b| b.recheck_interval(Duration::from_secs(60))).await;
    let mut guards = Vec::new();
    for _ in 0..3 {
        let rw = a.read_write_lock("wake");
        guards.push(
            tokio::spawn(async move { rw.read().lock().await.unwrap() })
                .await
                .unwrap(),
        );
    }
    let rw = b.read_write_lock("wake");
    let writer = tokio::spawn(async move {
        let g = rw.write().lock().await.unwrap();
        (Instant::now(), g)
    });
    eventually(Duration::from_secs(10), "writer subscribed", || {
        numsub(&server, "redisson_rwlock:{wake}") == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let last = guards.pop().unwrap();
    for g in guards {
        g.unlock().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!writer.is_finished(), "a reader still holds the lock");
    last.unlock().await.unwrap();
    let unlocked = Instant::now();
    let (acquired, g) = within(HANG, "the writer", writer).await.unwrap();
    println!(
        "writer woke {:?} after the last read unlock",
        acquired.duration_since(unlocked)
    );
    g.unlock().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A write unlock wakes every local waiter: five readers of one client
/// waiting on a writer all get in together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_unlock_wakes_every_waiting_reader() {
    let server = Arc::new(RedisServer::start());
    let a = client(&server).await;
    let b = client_with(&server, |b| b.recheck_interval(Duration::from_secs(60))).await;
    let w = a.read_write_lock("all").write().lock().await.unwrap();
    let inside = Arc::new(tokio::sync::Barrier::new(5));
    let mut readers = JoinSet::new();
    for _ in 0..5 {
        let (rw, inside) = (b.read_write_lock("all"), inside.clone());
        readers.spawn(async move {
            let g = rw.read().lock().await.unwrap();
            inside.wait().await; // all five hold it at once
            g.unlock().await.unwrap();
        });
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    w.unlock().await.unwrap();
    // The readers' lease is 30 s: a reader not woken by the message would
    // sleep until then.
    within(
        Duration::from_secs(10),
        "five readers woken by one write unlock",
        async {
            while let Some(done) = readers.join_next().await {
                done.unwrap();
            }
        },
    )
    .await;
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

// === watchdog ===

/// A read hold kept for 5 watchdog timeouts (1 s) stays held: the hash
/// and its timeout key are renewed, and a writer is kept out.
#[tokio::test]
async fn the_watchdog_keeps_a_read_hold_and_its_timeout_key() {
    let server = RedisServer::start();
    let a = client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(1))).await;
    let b = client(&server).await;
    let me = Owner::current();
    let r = a.read_write_lock("kept").read().lock().await.unwrap();
    let key = timeout_key("kept", &a, me, 1);
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!r.is_lost(), "the read guard says lost");
        assert!(pttl(&server, "kept") > 0, "the hash expired");
        assert!(pttl(&server, &key) > 0, "the timeout key expired");
    }
    assert!(b
        .read_write_lock("kept")
        .write()
        .try_lock()
        .await
        .unwrap()
        .is_none());
    r.unlock().await.unwrap();
    assert!(lock_keys(&server).is_empty(), "{:?}", lock_keys(&server));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

// === wire ===

/// A Java reader (raw commands as Redisson sends them) blocks our writer;
/// our reader joins it; the Java reader's unlock keeps the hash for ours
/// (it reads our timeout key); our writer is woken by our read unlock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_reader_and_ours_share_the_lock() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client_with(&server, |b| b.recheck_interval(Duration::from_secs(60))).await;
    java_read_lock(&server, "mixed", 1, 60_000);
    let writer = b.read_write_lock("mixed").write();
    assert!(
        writer.try_lock().await.unwrap().is_none(),
        "a Java reader blocks our writer"
    );

    let me = Owner::current();
    let r = a
        .read_write_lock("mixed")
        .read()
        .lock_with_lease(Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(server.cmd(&["HLEN", "mixed"]), "3");
    let ours = pttl(&server, &timeout_key("mixed", &a, me, 1));
    assert!(
        ours > 15_000 && ours <= 20_000,
        "our timeout key: {ours} ms"
    );

    let waiting = tokio::spawn(async move { writer.lock().await.unwrap() });
    eventually(Duration::from_secs(10), "writer subscribed", || {
        numsub(&server, "redisson_rwlock:{mixed}") == 1
    })
    .await;
    // The Java reader leaves: Redisson's unlock sets the hash's TTL from the
    // remaining timeout keys (ours) instead of deleting the hash.
    assert_eq!(java_read_unlock(&server, "mixed", 1), "0");
    let left = pttl(&server, "mixed");
    assert!(
        left > 15_000 && left <= 20_000,
        "hash TTL after the Java unlock: {left} ms"
    );
    assert_eq!(server.cmd(&["HGET", "mixed", "mode"]), "read");
    assert!(!r.is_lost());
    assert!(!waiting.is_finished());
    r.unlock().await.unwrap();
    let w = within(HANG, "our writer, woken by our read unlock", waiting)
        .await
        .unwrap();
    w.unlock().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// What a Java waiter hears: our write unlock publishes `1`, our read
/// unlock `0`, on `redisson_rwlock:{name}`.
#[tokio::test]
async fn unlocks_publish_redissons_messages() {
    use leasehold::fred::interfaces::{ClientLike, EventInterface, PubsubInterface};
    let server = RedisServer::start();
    let c = client(&server).await;
    let listener = leasehold::fred::types::Builder::from_config(
        leasehold::fred::types::config::Config::from_url(&server.url()).unwrap(),
    )
    .build_subscriber_client()
    .unwrap();
    listener.init().await.unwrap();
    let mut rx = listener.message_rx();
    listener.subscribe("redisson_rwlock:{msg}").await.unwrap();
    eventually(Duration::from_secs(10), "listener subscribed", || {
        numsub(&server, "redisson_rwlock:{msg}") == 1
    })
    .await;
    let rw = c.read_write_lock("msg");
    assert_eq!(rw.channel(), "redisson_rwlock:{msg}");

    rw.write().lock().await.unwrap().unlock().await.unwrap();
    let msg = within(Duration::from_secs(10), "write unlock message", rx.recv())
        .await
        .unwrap();
    assert_eq!(&*msg.channel, "redisson_rwlock:{msg}");
    assert_eq!(msg.value.as_string().as_deref(), Some("1"));

    rw.read().lock().await.unwrap().unlock().await.unwrap();
    let msg = within(Duration::from_secs(10), "read unlock message", rx.recv())
        .await
        .unwrap();
    assert_eq!(msg.value.as_string().as_deref(), Some("0"));
    listener.quit().await.unwrap();
    c.shutdown().await.unwrap();
}

/// Key names follow Redisson's `suffixName` / `prefixName` rules, with and
/// without braces and with a key prefix.
#[tokio::test]
async fn names_follow_redissons_brace_rules() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let app = client_with(&server, |b| b.key_prefix("app:")).await;
    let me = Owner::current();
    for (client, name, key, channel, timeout) in [
        (&c, "plain", "plain", "redisson_rwlock:{plain}", "{plain}"),
        (&c, "{a}b", "{a}b", "redisson_rwlock:{a}b", "{a}b"),
        (&app, "x", "app:x", "redisson_rwlock:{app:x}", "{app:x}"),
    ] {
        let rw = client.read_write_lock(name);
        assert_eq!(rw.key(), key);
        assert_eq!(rw.channel(), channel);
        let g = rw.read().lock().await.unwrap();
        let expected = format!("{timeout}:{}:{}:rwlock_timeout:1", client.id(), me.id());
        assert_eq!(rwlock_timeout_keys(&server), vec![expected]);
        g.unlock().await.unwrap();
        assert!(lock_keys(&server).is_empty());
    }
    c.shutdown().await.unwrap();
    app.shutdown().await.unwrap();
}

/// Bad arguments are refused before anything is sent; odd names (spaces,
/// newlines, unbalanced braces, glob characters, `mode`) lock, re-enter
/// and clean up like any other.
#[tokio::test]
async fn odd_names_work_and_bad_arguments_are_refused() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let invalid = |r: leasehold::Result<_>| matches!(r, Err(Error::InvalidArgument(_)));
    let empty = c.read_write_lock("");
    assert!(invalid(empty.read().lock().await.map(drop)));
    assert!(invalid(empty.write().try_lock().await.map(drop)));
    assert!(invalid(empty.read().force_unlock().await.map(drop)));
    assert!(invalid(empty.write().hold_count().await.map(drop)));
    let rw = c.read_write_lock("args");
    assert!(invalid(
        rw.read().lock_with_lease(Duration::ZERO).await.map(drop)
    ));
    let tiny = Duration::from_nanos(1);
    assert!(invalid(
        rw.write().try_lock_with_lease(tiny, tiny).await.map(drop)
    ));
    assert!(lock_keys(&server).is_empty());
    for name in [
        "a b",
        "line\nbreak",
        "ключ",
        "{",
        "}{",
        "a{b}c{d}",
        "%s:*?",
        "mode",
    ] {
        let rw = c.read_write_lock(name);
        let w = rw.write().lock().await.unwrap();
        let r = rw.read().lock().await.unwrap();
        assert_eq!(rw.read().hold_count().await.unwrap(), 1, "{name:?}");
        w.unlock().await.unwrap();
        let r2 = rw.read().lock().await.unwrap();
        r2.unlock().await.unwrap();
        r.unlock().await.unwrap();
        assert!(
            lock_keys(&server).is_empty(),
            "{name:?}: {:?}",
            lock_keys(&server)
        );
    }
    c.shutdown().await.unwrap();
}

// === cancellation and shutdown ===

/// Many rounds of `timeout(random small, lock())` on both halves, from 8
/// tasks on 2 clients, with holds of random length: afterwards nothing is
/// held, queued or subscribed, and every timeout key is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_acquires_leave_nothing_behind() {
    const ROUNDS: usize = 60;
    let server = Arc::new(RedisServer::start());
    let clients = [client(&server).await, client(&server).await];
    let got = Arc::new(AtomicUsize::new(0));
    let cancelled = Arc::new(AtomicUsize::new(0));
    let (c, g2, x2) = (clients.clone(), got.clone(), cancelled.clone());
    all(8, move |i| {
        let rw = c[i % 2].read_write_lock("cancel");
        let (got, cancelled) = (g2.clone(), x2.clone());
        async move {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (i as u64 + 1));
            for _ in 0..ROUNDS {
                let wait = Duration::from_millis(rng.below(12));
                let attempt = if rng.below(3) == 0 {
                    tokio::time::timeout(wait, rw.write().lock()).await
                } else {
                    tokio::time::timeout(wait, rw.read().lock()).await
                };
                match attempt {
                    Ok(guard) => {
                        got.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(rng.below(4))).await;
                        if rng.below(2) == 0 {
                            drop(guard.unwrap());
                        } else {
                            guard.unwrap().unlock().await.unwrap();
                        }
                    }
                    Err(_) => {
                        cancelled.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    })
    .await;
    println!(
        "cancellation: {} acquired, {} dropped mid-acquire",
        got.load(Ordering::Relaxed),
        cancelled.load(Ordering::Relaxed)
    );
    eventually(Duration::from_secs(20), "nothing left held", || {
        lock_keys(&server).is_empty()
    })
    .await;
    eventually(Duration::from_secs(10), "nothing subscribed", || {
        clients.iter().all(|c| c.subscribed_channels() == 0)
    })
    .await;
    // Nothing queued or held locally either: the lock is free for anyone.
    let g = clients[0]
        .read_write_lock("cancel")
        .write()
        .try_lock()
        .await
        .unwrap()
        .expect("free");
    g.unlock().await.unwrap();
    for c in &clients {
        c.shutdown().await.unwrap();
    }
}

/// Shutdown gives back every read hold at once (one release of 3 holds):
/// the hash and all timeout keys go.
#[tokio::test]
async fn shutdown_gives_back_reentrant_read_holds() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let rw = a.read_write_lock("bye");
    let guards = [
        rw.read().lock().await.unwrap(),
        rw.read().lock().await.unwrap(),
        rw.read().lock().await.unwrap(),
    ];
    assert_eq!(rwlock_timeout_keys(&server).len(), 3);
    a.shutdown().await.unwrap();
    assert!(guards.iter().all(LockGuard::is_lost));
    assert!(lock_keys(&server).is_empty(), "{:?}", lock_keys(&server));
}

// === the lease invariant ===

/// The promise from outside: if another client can take the write lock,
/// `guard` must already say it is lost.
async fn assert_exclusive(other: &Client, name: &str, guard: &LockGuard, what: &str) {
    if let Some(g) = other
        .read_write_lock(name)
        .write()
        .try_lock()
        .await
        .unwrap()
    {
        let lost = guard.is_lost();
        g.unlock().await.unwrap();
        assert!(
            lost,
            "{what}: another client wrote `{name}` while the guard is not lost"
        );
    }
}

/// A guard force-unlocked by another client, dropped, and the same task
/// locking again at once: the old release must not free the new hold.
/// Both halves, 20 rounds each at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_after_force_unlock_keeps_the_new_hold() {
    let server = Arc::new(RedisServer::start());
    let a = client(&server).await;
    let b = client(&server).await;
    let (s, a2, b2) = (server.clone(), a.clone(), b.clone());
    all(40, move |i| {
        let (server, a, b) = (s.clone(), a2.clone(), b2.clone());
        async move {
            let name = format!("force:{i}");
            let rw = a.read_write_lock(&name);
            let write = i % 2 == 0;
            let take = || async {
                if write {
                    rw.write().lock().await.unwrap()
                } else {
                    rw.read().lock().await.unwrap()
                }
            };
            let old = take().await;
            let forced = if write {
                b.read_write_lock(&name).write().force_unlock().await
            } else {
                b.read_write_lock(&name).read().force_unlock().await
            };
            assert!(forced.unwrap());
            drop(old);
            let new = take().await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            let field = format!(
                "{}{}",
                read_field(&a, Owner::current()),
                if write { ":write" } else { "" }
            );
            assert_eq!(
                server.cmd(&["HGET", &name, &field]),
                "1",
                "round {i}: the new hold is gone from Redis"
            );
            assert!(!new.is_lost(), "round {i}: the new guard says lost");
            assert_exclusive(&b, &name, &new, "after force unlock").await;
            new.unlock().await.unwrap();
        }
    })
    .await;
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// Mixed fixed and watchdog read holds of one owner (1 s watchdog), in
/// every order: the hash and the owner's timeout keys outlive the longest
/// live hold, even through a Java reader's unlock (which sets the hash's
/// TTL from the timeout keys alone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_read_holds_keep_the_key_and_timeout_keys() {
    let server = Arc::new(RedisServer::start());
    let a = client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(1))).await;
    let b = client(&server).await;
    let (s, a2, b2) = (server.clone(), a.clone(), b.clone());
    all(30, move |i| {
        let (server, a, b) = (s.clone(), a2.clone(), b2.clone());
        async move {
            let name = format!("mixed:{i}");
            let read = a.read_write_lock(&name).read();
            let long = Duration::from_secs(60);
            let (keep, brief) = match i % 3 {
                // A long fixed hold, then a nested watchdog hold given back.
                0 => (
                    read.lock_with_lease(long).await.unwrap(),
                    read.lock().await.unwrap(),
                ),
                // A watchdog hold, then a nested 300 ms fixed hold.
                1 => (
                    read.lock().await.unwrap(),
                    read.lock_with_lease(Duration::from_millis(300))
                        .await
                        .unwrap(),
                ),
                // A 300 ms fixed hold, then a long one; the short one is
                // given back after its lease ran out.
                _ => {
                    let short = read
                        .lock_with_lease(Duration::from_millis(300))
                        .await
                        .unwrap();
                    (read.lock_with_lease(long).await.unwrap(), short)
                }
            };
            tokio::time::sleep(Duration::from_millis(500)).await;
            drop(brief);
            java_read_lock(&server, &name, 7, 100);
            tokio::time::sleep(Duration::from_millis(200)).await; // the Java hold's key expires
            java_read_unlock(&server, &name, 7);
            tokio::time::sleep(Duration::from_millis(2500)).await;
            assert!(!keep.is_lost(), "round {i}: the kept guard says lost");
            assert_exclusive(&b, &name, &keep, "mixed holds").await;
            let key = timeout_key(&name, &a, Owner::current(), 1);
            let (hash, timeout) = (pttl(&server, &name), pttl(&server, &key));
            let need = if i % 3 == 1 { 0 } else { 50_000 };
            assert!(hash > need, "round {i}: the hash's TTL is {hash} ms");
            assert!(
                timeout > need,
                "round {i}: the timeout key's TTL is {timeout} ms"
            );
            assert_eq!(rw_count(&server, &name, &a), "1", "round {i}");
            keep.unlock().await.unwrap();
        }
    })
    .await;
    assert!(lock_keys(&server).is_empty(), "{:?}", lock_keys(&server));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A writer that also reads (1 s watchdog): giving back a read hold never
/// cuts its 60 s write lease; giving back a write hold never cuts its
/// 60 s read lease, nor does turning the lock to read mode (downgrade).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writers_read_and_write_holds_keep_each_other() {
    let server = RedisServer::start();
    let a = client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(1))).await;
    let b = client(&server).await;
    let long = Duration::from_secs(60);

    let rw = a.read_write_lock("wr:a");
    let w = rw.write().lock_with_lease(long).await.unwrap();
    let short = rw
        .read()
        .lock_with_lease(Duration::from_millis(800))
        .await
        .unwrap();
    let r = rw.read().lock().await.unwrap();
    r.unlock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!w.is_lost(), "the 60 s write guard says lost");
    assert_exclusive(&b, "wr:a", &w, "a writer's read release").await;
    let left = pttl(&server, "wr:a");
    assert!(
        left > 50_000,
        "the hash's TTL is {left} ms, under the write lease"
    );
    drop(short);
    w.unlock().await.unwrap();

    let rw = a.read_write_lock("wr:b");
    let w1 = rw.write().lock().await.unwrap();
    let w2 = rw.write().lock().await.unwrap();
    let r = rw.read().lock_with_lease(long).await.unwrap();
    w2.unlock().await.unwrap();
    let left = pttl(&server, "wr:b");
    assert!(
        left > 50_000,
        "after a write release: {left} ms, under the read lease"
    );
    w1.unlock().await.unwrap();
    assert_eq!(server.cmd(&["HGET", "wr:b", "mode"]), "read");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!r.is_lost(), "the 60 s read guard says lost");
    let left = pttl(&server, "wr:b");
    assert!(
        left > 50_000,
        "after the downgrade: {left} ms, under the read lease"
    );
    let other = b.read_write_lock("wr:b");
    assert!(other.write().try_lock().await.unwrap().is_none());
    let joined = other
        .read()
        .try_lock()
        .await
        .unwrap()
        .expect("readers join");
    joined.unlock().await.unwrap();
    r.unlock().await.unwrap();
    assert!(lock_keys(&server).is_empty(), "{:?}", lock_keys(&server));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A successful acquire tells this client's holders it excludes at once
/// (the hash was deleted behind the client's back, with no message): a
/// writer ends other owners' read and write leases, a reader ends other
/// owners' write leases but not other readers'.
#[tokio::test]
async fn an_acquire_ends_the_local_holds_it_excludes() {
    let server = RedisServer::start();
    let a = client(&server).await; // 30 s watchdog: no renewal during the test
    let rw = a.read_write_lock("ex");
    let in_task = |write: bool| {
        let rw = rw.clone();
        async move {
            tokio::spawn(async move {
                if write {
                    rw.write().lock().await.unwrap()
                } else {
                    rw.read().lock().await.unwrap()
                }
            })
            .await
            .unwrap()
        }
    };
    // A reader does not end another reader.
    let r1 = in_task(false).await;
    let r2 = in_task(false).await;
    assert!(!r1.is_lost());
    // Deleted behind our back; a writer of another owner gets in.
    server.cmd(&["DEL", "ex"]);
    let w = in_task(true).await;
    assert!(
        r1.is_lost() && r2.is_lost(),
        "a writer ends other owners' reads"
    );
    server.cmd(&["DEL", "ex"]);
    let r3 = in_task(false).await;
    assert!(w.is_lost(), "a reader ends another owner's write");
    server.cmd(&["DEL", "ex"]);
    let w2 = in_task(true).await;
    assert!(r3.is_lost());
    drop((r1, r2, w, r3));
    w2.unlock().await.unwrap();
    a.shutdown().await.unwrap();
}

fn rw_count(server: &RedisServer, name: &str, client: &Client) -> String {
    server.cmd(&["HGET", name, &read_field(client, Owner::current())])
}

// === cluster ===

/// On a 3-primary Redis 7 cluster (sharded pub/sub, per-node renewal
/// batches): read holds on 30 locks spread over every node (some names
/// with braces) outlive 3 watchdog timeouts with their timeout keys; a
/// writer waiting on a 60 s read lease is woken by the read unlock's
/// SPUBLISH; afterwards no node keeps anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_and_write_on_a_cluster() {
    let cluster = support::cluster::RedisCluster::start(3, 0);
    let connect = |b: leasehold::ClientBuilder| async move { b.build().await.unwrap() };
    let url = cluster.url();
    let a = connect(
        Client::builder()
            .url(&url)
            .watchdog_timeout(Duration::from_secs(1)),
    )
    .await;
    let b = connect(
        Client::builder()
            .url(&url)
            .recheck_interval(Duration::from_secs(60)),
    )
    .await;
    let names: Vec<String> = (0..30)
        .map(|i| {
            if i % 3 == 0 {
                format!("{{t{i}}}cfg")
            } else {
                format!("cfg:{i}")
            }
        })
        .collect();
    let mut reads = Vec::new();
    for name in &names {
        reads.push(a.read_write_lock(name).read().lock().await.unwrap());
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let me = Owner::current();
    for (name, guard) in names.iter().zip(&reads) {
        assert!(!guard.is_lost(), "{name}: the read guard says lost");
        let stem = if name.contains('{') {
            name.clone()
        } else {
            format!("{{{name}}}")
        };
        let key = format!("{stem}:{}:{}:rwlock_timeout:1", a.id(), me.id());
        let ttl = |k: &str| -> i64 { cluster.cmd_on_key(k, &["PTTL", k]).parse().unwrap() };
        assert!(ttl(name) > 0, "{name}: the hash expired");
        assert!(ttl(&key) > 0, "{name}: its timeout key expired");
    }

    let target = names[1].clone();
    let fixed = a
        .read_write_lock(&target)
        .read()
        .lock_with_lease(Duration::from_secs(60))
        .await
        .unwrap();
    let rw = b.read_write_lock(&target);
    let channel = rw.channel().to_owned();
    let writer = tokio::spawn(async move { rw.write().lock().await.unwrap() });
    eventually(
        Duration::from_secs(20),
        "writer subscribed (sharded)",
        || cluster.subscribers(&target, &channel) == 1,
    )
    .await;
    for guard in reads {
        guard.unlock().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!writer.is_finished());
    fixed.unlock().await.unwrap();
    let w = within(
        Duration::from_secs(10),
        "the writer, woken by SPUBLISH",
        writer,
    )
    .await
    .unwrap();
    w.unlock().await.unwrap();
    for i in cluster.primaries() {
        let left = lock_keys(&cluster.nodes()[i]);
        assert!(left.is_empty(), "node {i} keeps {left:?}");
    }
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

// === writer starvation (measured, not asserted) ===

/// A stream of overlapping readers on one client (a new one every 20 ms,
/// each holding 60 ms) for 3 s; a writer on another client asks 0.5 s in.
/// Prints how long it waited: with reader preference it may wait until
/// the stream ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_wait_under_a_stream_of_readers() {
    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let stream_for = Duration::from_secs(3);
    let start = Instant::now();
    let stream = {
        let rw = a.read_write_lock("starve");
        tokio::spawn(async move {
            let mut readers = JoinSet::new();
            while start.elapsed() < stream_for {
                let rw = rw.clone();
                readers.spawn(async move {
                    let g = rw.read().lock().await.unwrap();
                    tokio::time::sleep(Duration::from_millis(60)).await;
                    g.unlock().await.unwrap();
                });
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let mut holds = 0u32;
            while let Some(done) = readers.join_next().await {
                done.unwrap();
                holds += 1;
            }
            holds
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let asked = Instant::now();
    let w = within(
        HANG,
        "the writer",
        b.read_write_lock("starve").write().lock(),
    )
    .await
    .unwrap();
    let waited = asked.elapsed();
    let stream_left = (start + stream_for).saturating_duration_since(asked);
    w.unlock().await.unwrap();
    let holds = within(HANG, "the reader stream", stream).await.unwrap();
    println!(
        "writer starvation: the writer waited {waited:?} (the reader stream had {stream_left:?} \
         left when it asked; {holds} read holds in all)"
    );
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// Issue 30: a fixed-lease reader shares the lock with a Java reader whose
/// watchdog renewal *sets* the hash's TTL (Redisson's `ReadLockTask` does
/// `PEXPIRE hash <its watchdog timeout>`, cutting what our acquire set),
/// and then the Java process dies. Our reader's hold must keep the hash
/// (and so keep writers out) until its lease ends, or be told lost first.
/// Before the fix, fixed-lease holds were never renewed: the hash expired
/// 1.5 s after the cut and a writer got in with seconds left on the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_lease_reader_survives_a_java_co_readers_ttl_cut() {
    const LEASE: Duration = Duration::from_secs(12);
    let server = RedisServer::start();
    // 3 s watchdog: renewals every second.
    let a = client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(3))).await;
    let b = client(&server).await;
    let name = "cut";
    let reader = a
        .read_write_lock(name)
        .read()
        .lock_with_lease(LEASE)
        .await
        .unwrap();
    let end = Instant::now() + LEASE;
    // A Java reader joins, its watchdog renews (setting the hash's TTL to
    // 1.5 s), and its process dies: nobody of Java's renews again.
    java_read_lock(&server, name, 1, 1_500);
    server.cmd(&["PEXPIRE", name, "1500"]);
    let left = end.saturating_duration_since(Instant::now());
    let writer = b
        .read_write_lock(name)
        .write()
        .try_lock_for(left.saturating_sub(Duration::from_secs(2)))
        .await
        .unwrap();
    if let Some(w) = writer {
        let early = end.saturating_duration_since(Instant::now());
        w.unlock().await.unwrap();
        panic!(
            "a writer got in {early:?} before the reader's lease ended (reader lost: {})",
            reader.is_lost()
        );
    }
    assert!(!reader.is_lost(), "the reader is still held");
    assert!(
        pttl(&server, name) <= LEASE.as_millis() as i64,
        "renewals never keep the hash past the lease's end"
    );
    reader.unlock().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

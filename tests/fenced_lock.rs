//! The fenced lock: tokens that strictly grow (across tasks, clients,
//! re-entry and server restarts), one lock with the plain `Lock` and with
//! Redisson's `RLock`/`RFencedLock` of the same name, cancellation, and the
//! rest of the `Lock` contract.

use leasehold_testkit as support;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold::{Client, Error, Member, MultiLock, Owner};
use support::cluster::RedisCluster;
use support::fixture::{client, client_with, eventually, exists, lock_keys, numsub, within};
use support::{Proxy, RedisServer};
use tokio::task::JoinSet;

const HANG: Duration = Duration::from_secs(60);

/// Redisson's fenced acquire (REDISSON-WIRE.md §8.2), written from its
/// documented steps: KEYS [name, token key]; ARGV [lease ms, field].
/// Replies {-1, token} when acquired, {pttl, -1} otherwise.
const JAVA_FENCED_ACQUIRE: &str = "\
    if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then \
        local token = redis.call('incr', KEYS[2]) \
        redis.call('hincrby', KEYS[1], ARGV[2], 1) \
        redis.call('pexpire', KEYS[1], ARGV[1]) \
        return {-1, token} \
    end \
    return {redis.call('pttl', KEYS[1]), -1}";

/// Every critical section, in the order they ran: a sequence number
/// read and bumped under the lock (non-atomically, so an overlap would
/// show as a repeated number) and the token the section held.
#[derive(Default)]
struct Log {
    /// The next sequence number: read, then written back + 1, with an
    /// await in between (a second holder would read the same value).
    next: std::sync::Mutex<u64>,
    entries: std::sync::Mutex<Vec<(u64, u64)>>,
}

impl Log {
    fn read(&self) -> u64 {
        *self.next.lock().unwrap()
    }

    fn write(&self, seq: u64, token: u64) {
        *self.next.lock().unwrap() = seq + 1;
        self.entries.lock().unwrap().push((seq, token));
    }

    /// Checks exclusion (every sequence number once) and that tokens
    /// strictly grow in acquisition order; returns how many sections.
    fn check(&self) -> usize {
        let mut entries = self.entries.lock().unwrap().clone();
        entries.sort_unstable();
        for (i, (seq, _)) in entries.iter().enumerate() {
            assert_eq!(*seq, i as u64, "two holders at once: {entries:?}");
        }
        for pair in entries.windows(2) {
            assert!(
                pair[0].1 < pair[1].1,
                "token went down or repeated: section {} held {}, section {} held {}",
                pair[0].0,
                pair[0].1,
                pair[1].0,
                pair[1].1
            );
        }
        entries.len()
    }
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

fn is_invalid<T: std::fmt::Debug>(r: leasehold::Result<T>) -> bool {
    matches!(r, Err(Error::InvalidArgument(_)))
}

fn field(client: &Client, owner: Owner) -> String {
    format!("{}:{}", client.id(), owner.id())
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    server
        .cmd(&["PTTL", key])
        .parse()
        .expect("PTTL is an integer")
}

/// A plain fred subscriber on `channel`, listening as a Java client would.
async fn listen(
    server: &RedisServer,
    channel: &str,
) -> (
    leasehold::fred::clients::SubscriberClient,
    tokio::sync::broadcast::Receiver<leasehold::fred::types::Message>,
) {
    use leasehold::fred::interfaces::{ClientLike, EventInterface, PubsubInterface};
    let listener = leasehold::fred::types::Builder::from_config(
        leasehold::fred::types::config::Config::from_url(&server.url()).unwrap(),
    )
    .build_subscriber_client()
    .unwrap();
    listener.init().await.unwrap();
    let rx = listener.message_rx();
    listener.subscribe(channel).await.unwrap();
    eventually(Duration::from_secs(10), "listener subscribed", || {
        numsub(server, channel) >= 1
    })
    .await;
    (listener, rx)
}

// === tokens ===

/// 1,000 critical sections by 8 tasks on 2 clients, half of them with a
/// fixed lease: in acquisition order (a sequence number bumped under the
/// lock) the tokens strictly grow, and while a section holds the lock the
/// counter is its own token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_strictly_grow_over_a_thousand_acquisitions() {
    const TASKS: usize = 8;
    const EACH: usize = 125;
    let server = Arc::new(RedisServer::start());
    let clients = [client(&server).await, client(&server).await];
    let log = Arc::new(Log::default());
    let (c, l) = (clients.clone(), log.clone());
    all(TASKS, move |i| {
        let lock = c[i % 2].fenced_lock("ledger");
        let log = l.clone();
        async move {
            for n in 0..EACH {
                let guard = if n % 2 == 0 {
                    lock.lock().await.unwrap()
                } else {
                    lock.try_lock_with_lease(HANG, Duration::from_secs(30))
                        .await
                        .unwrap()
                        .expect("acquired within the wait")
                };
                let token = guard.token().expect("a fenced guard has a token");
                let seq = log.read();
                assert_eq!(
                    lock.token().await.unwrap(),
                    Some(token),
                    "nobody takes a token while the lock is held"
                );
                log.write(seq, token);
                guard.unlock().await.unwrap();
            }
        }
    })
    .await;
    assert_eq!(log.check(), TASKS * EACH);
    let last = clients[0].fenced_lock("ledger").token().await.unwrap();
    assert_eq!(last, Some((TASKS * EACH) as u64), "one INCR per acquire");
    assert_eq!(lock_keys(&server), vec!["redisson_lock_token:{ledger}"]);
    for c in &clients {
        c.shutdown().await.unwrap();
    }
}

/// A re-entry takes a new, larger token; both holds are one field's count.
#[tokio::test]
async fn reentry_takes_a_new_larger_token() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.fenced_lock("re");
    assert_eq!(lock.token().await.unwrap(), None, "no token taken yet");
    let outer = lock.lock().await.unwrap();
    let inner = lock.try_lock().await.unwrap().expect("same task re-enters");
    let third = lock.lock_with_lease(Duration::from_secs(60)).await.unwrap();
    let tokens = [outer.token(), inner.token(), third.token()];
    assert_eq!(tokens, [Some(1), Some(2), Some(3)]);
    assert_eq!(lock.token().await.unwrap(), Some(3));
    assert_eq!(lock.hold_count().await.unwrap(), 3);
    assert_eq!(
        server.cmd(&["HGET", "re", &field(&c, Owner::current())]),
        "3"
    );
    third.unlock().await.unwrap();
    inner.unlock().await.unwrap();
    // Releases leave the counter alone.
    assert_eq!(lock.token().await.unwrap(), Some(3));
    outer.unlock().await.unwrap();
    assert!(!exists(&server, "re"));
    assert_eq!(server.cmd(&["GET", "redisson_lock_token:{re}"]), "3");
    let next = lock.lock().await.unwrap();
    assert_eq!(next.token(), Some(4));
    next.unlock().await.unwrap();
    c.shutdown().await.unwrap();
}

/// Redis with `appendonly yes` / `appendfsync always`, restarted: the
/// counter comes back and the next token is larger.
#[tokio::test]
async fn tokens_keep_growing_across_a_restart_with_persistence() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let c = client(&server).await;
    let lock = c.fenced_lock("durable");
    let mut before = 0;
    for _ in 0..5 {
        let g = lock.lock().await.unwrap();
        before = g.token().unwrap();
        g.unlock().await.unwrap();
    }
    assert_eq!(before, 5);
    server.restart();
    assert_eq!(server.cmd(&["GET", "redisson_lock_token:{durable}"]), "5");
    // The same client, reconnecting; and a new one.
    let g = within(HANG, "lock after the restart", lock.lock())
        .await
        .unwrap();
    assert!(
        g.token().unwrap() > before,
        "{:?} after {before}",
        g.token()
    );
    let after = g.token().unwrap();
    g.unlock().await.unwrap();
    let fresh = client(&server).await;
    let g = fresh.fenced_lock("durable").lock().await.unwrap();
    assert!(g.token().unwrap() > after);
    g.unlock().await.unwrap();
    c.shutdown().await.unwrap();
    fresh.shutdown().await.unwrap();
}

/// An acquire whose reply is lost is sent again and replayed by its latch:
/// one INCR, one hold, and the guard gets the token that INCR took.
#[tokio::test]
async fn a_lost_acquire_reply_takes_one_token() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr()).await;
    let url = proxy.url();
    let c = client_with(&server, |b| {
        b.url(&url).command_timeout(Duration::from_secs(2))
    })
    .await;
    let lock = c.fenced_lock("cut");
    // Scripts cached, connection warm: the reply dropped below is the
    // reply of a script that ran.
    let warm = lock.lock().await.unwrap();
    assert_eq!(warm.token(), Some(1));
    warm.unlock().await.unwrap();

    proxy.drop_replies_once();
    let g = within(HANG, "acquire across a cut", lock.lock())
        .await
        .unwrap();
    assert_eq!(g.token(), Some(2));
    assert_eq!(server.cmd(&["GET", "redisson_lock_token:{cut}"]), "2");
    assert_eq!(
        server.cmd(&["HGET", "cut", &field(&c, Owner::current())]),
        "1"
    );
    proxy.drop_replies_once();
    let again = within(HANG, "re-entry across a cut", lock.try_lock())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.token(), Some(3));
    assert_eq!(server.cmd(&["GET", "redisson_lock_token:{cut}"]), "3");
    again.unlock().await.unwrap();
    g.unlock().await.unwrap();
    assert!(!exists(&server, "cut"));
    c.shutdown().await.unwrap();
}

// === one lock with Lock and Redisson ===

/// 8 tasks on 2 clients, half through a `FencedLock`, half through a
/// `Lock` of the same name: one lock (an exact counter), and the fenced
/// sections' tokens still grow in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_lock_and_a_lock_of_one_name_exclude_each_other() {
    const TASKS: usize = 8;
    const EACH: usize = 50;
    let server = Arc::new(RedisServer::start());
    let clients = [client(&server).await, client(&server).await];
    let log = Arc::new(Log::default());
    let counter = Arc::new(AtomicU64::new(0));
    let (c, l, n) = (clients.clone(), log.clone(), counter.clone());
    all(TASKS, move |i| {
        let client = c[i % 2].clone();
        let (log, counter) = (l.clone(), n.clone());
        async move {
            for _ in 0..EACH {
                if i % 4 < 2 {
                    let guard = client.fenced_lock("mixed").lock().await.unwrap();
                    let seq = log.read();
                    let v = counter.load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    counter.store(v + 1, Ordering::SeqCst);
                    log.write(seq, guard.token().unwrap());
                    guard.unlock().await.unwrap();
                } else {
                    let guard = client.lock("mixed").lock().await.unwrap();
                    assert_eq!(guard.token(), None, "a plain lock takes no token");
                    let v = counter.load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    counter.store(v + 1, Ordering::SeqCst);
                    guard.unlock().await.unwrap();
                }
            }
        }
    })
    .await;
    assert_eq!(counter.load(Ordering::SeqCst), (TASKS * EACH) as u64);
    assert_eq!(log.check(), TASKS * EACH / 2);
    assert_eq!(lock_keys(&server), vec!["redisson_lock_token:{mixed}"]);
    for c in &clients {
        c.shutdown().await.unwrap();
    }
}

/// A Java holder (HSET of its field + PEXPIRE, as Redisson's acquire
/// does) blocks the fenced lock and takes no token of ours; its unlock
/// (DEL + PUBLISH "0") wakes our waiter. A Java `RFencedLock` shares the
/// counter. Our unlock publishes "0" on the Redisson channel, and our hold
/// is the field a Java client reads.
#[tokio::test]
async fn redisson_holders_and_ours_are_one_lock() {
    let server = RedisServer::start();
    // Waiters must be woken by the message, not by a re-check.
    let c = client_with(&server, |b| b.recheck_interval(Duration::from_secs(60))).await;
    let lock = c.fenced_lock("java");
    assert_eq!(lock.channel(), "redisson_lock__channel:{java}");
    assert_eq!(lock.token_key(), "redisson_lock_token:{java}");

    // A Java RLock holder.
    server.cmd(&["HSET", "java", "x:1", "1"]);
    server.cmd(&["PEXPIRE", "java", "60000"]);
    assert!(lock.try_lock().await.unwrap().is_none(), "Java holds it");
    assert!(lock.is_locked().await.unwrap());
    assert_eq!(
        lock.token().await.unwrap(),
        None,
        "a failed try takes no token"
    );
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock().await.unwrap() })
    };
    eventually(Duration::from_secs(10), "waiter subscribed", || {
        numsub(&server, "redisson_lock__channel:{java}") == 1
    })
    .await;
    server.cmd(&["DEL", "java"]);
    server.cmd(&["PUBLISH", "redisson_lock__channel:{java}", "0"]);
    let guard = within(Duration::from_secs(10), "woken by the Java unlock", waiter)
        .await
        .unwrap();
    assert_eq!(guard.token(), Some(1));
    assert_eq!(
        server.cmd(&["HGET", "java", &field(&c, guard.owner())]),
        "1"
    );
    assert_eq!(server.cmd(&["HLEN", "java"]), "1");
    assert_eq!(
        pttl(&server, "redisson_lock_token:{java}"),
        -1,
        "the counter never expires"
    );

    // Our unlock, as a Java waiter hears it.
    let (listener, mut rx) = listen(&server, "redisson_lock__channel:{java}").await;
    guard.unlock().await.unwrap();
    let msg = within(Duration::from_secs(10), "unlock message", rx.recv())
        .await
        .unwrap();
    assert_eq!(&*msg.channel, "redisson_lock__channel:{java}");
    assert_eq!(msg.value.as_string().as_deref(), Some("0"));
    assert!(!exists(&server, "java"));

    // A Java RFencedLock takes the next token, then ours is larger still.
    let java = server.cmd(&[
        "EVAL",
        JAVA_FENCED_ACQUIRE,
        "2",
        "java",
        "redisson_lock_token:{java}",
        "30000",
        "x:1",
    ]);
    assert_eq!(java, "-1\n2", "Java acquired with token 2");
    assert!(lock.try_lock().await.unwrap().is_none());
    server.cmd(&["DEL", "java"]);
    let g = lock.lock().await.unwrap();
    assert_eq!(g.token(), Some(3));
    g.unlock().await.unwrap();
    use leasehold::fred::interfaces::ClientLike;
    listener.quit().await.unwrap();
    c.shutdown().await.unwrap();
}

/// One owner mixing a plain hold with a short fixed lease and a fenced
/// watchdog hold of the same name: they are one field, so giving the plain
/// hold back keeps the key for the fenced one, and nobody else gets in
/// while its guard is not lost.
#[tokio::test]
async fn one_owner_mixing_plain_and_fenced_holds_keeps_the_longest() {
    let server = RedisServer::start();
    let c = client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(3))).await;
    let other = client(&server).await;
    let plain = c.lock("mix");
    let fenced = c.fenced_lock("mix");
    let short = plain
        .lock_with_lease(Duration::from_millis(300))
        .await
        .unwrap();
    let long = fenced.lock().await.unwrap();
    assert!(
        !short.is_lost(),
        "a re-entry through the other handle ends nothing"
    );
    assert_eq!(long.token(), Some(1));
    assert_eq!(fenced.hold_count().await.unwrap(), 2);
    short.unlock().await.unwrap();
    assert_eq!(plain.hold_count().await.unwrap(), 1);
    // Well past the short lease.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(exists(&server, "mix"), "the fenced hold keeps the key");
    let intruder = other.lock("mix").try_lock().await.unwrap();
    assert!(
        intruder.is_none() || long.is_lost(),
        "another client got in while the fenced guard is not lost"
    );
    assert!(!long.is_lost());
    long.unlock().await.unwrap();
    assert!(!exists(&server, "mix"));

    // Back and forth between the handles, each hold dropped (released in
    // the background) right before the next acquire.
    for _ in 0..100 {
        drop(plain.lock().await.unwrap());
        drop(fenced.lock().await.unwrap());
    }
    eventually(Duration::from_secs(10), "every hold given back", || {
        !exists(&server, "mix")
    })
    .await;
    let g = other
        .fenced_lock("mix")
        .try_lock()
        .await
        .unwrap()
        .expect("free");
    assert_eq!(g.token(), Some(102));
    g.unlock().await.unwrap();
    c.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
}

/// On a 3-primary cluster the counter lives in the lock's slot (no
/// CROSSSLOT), for names on every primary; a waiter on another client is
/// woken by the unlock (sharded pub/sub) and gets the next token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_counter_shares_the_locks_slot() {
    let cluster = RedisCluster::start(3, 0);
    let connect = || async {
        Client::builder()
            .url(&cluster.url())
            .build()
            .await
            .expect("connect to the cluster")
    };
    let (a, b) = (connect().await, connect().await);
    let names: Vec<String> = (0..12)
        .map(|i| format!("ledger:{i}"))
        .chain(["user:{7}:cart".to_owned()])
        .collect();
    let primaries: std::collections::BTreeSet<usize> =
        names.iter().map(|n| cluster.primary_for_key(n)).collect();
    assert_eq!(primaries.len(), 3, "the names cover every primary");
    for name in &names {
        let lock = a.fenced_lock(name);
        let g = lock.lock().await.unwrap();
        let again = lock.try_lock().await.unwrap().expect("re-enters");
        assert_eq!((g.token(), again.token()), (Some(1), Some(2)));
        let waiter = {
            let lock = b.fenced_lock(name);
            tokio::spawn(async move { lock.lock().await.unwrap() })
        };
        again.unlock().await.unwrap();
        g.unlock().await.unwrap();
        let theirs = within(HANG, "the waiter is woken", waiter).await.unwrap();
        assert_eq!(theirs.token(), Some(3));
        assert_eq!(
            cluster.cmd_on_key(name, &["GET", lock.token_key()]),
            "3",
            "{name}"
        );
        theirs.unlock().await.unwrap();
    }
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

// === cancellation ===

/// Many rounds of `timeout(random small, lock())` from 8 tasks on 2
/// clients, fenced and plain, with holds of random length: afterwards
/// nothing is held or subscribed (the counter aside), and the sections
/// that got in still saw growing tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_acquires_leave_nothing_held() {
    const ROUNDS: usize = 80;
    let server = Arc::new(RedisServer::start());
    let clients = [client(&server).await, client(&server).await];
    let log = Arc::new(Log::default());
    let cancelled = Arc::new(AtomicUsize::new(0));
    let (c, l, x) = (clients.clone(), log.clone(), cancelled.clone());
    all(8, move |i| {
        let client = c[i % 2].clone();
        let (log, cancelled) = (l.clone(), x.clone());
        async move {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (i as u64 + 1));
            for _ in 0..ROUNDS {
                let wait = Duration::from_millis(rng.below(12));
                let fenced = rng.below(4) != 0;
                let attempt = if fenced {
                    tokio::time::timeout(wait, client.fenced_lock("cancel").lock()).await
                } else {
                    tokio::time::timeout(wait, client.lock("cancel").lock()).await
                };
                let Ok(guard) = attempt else {
                    cancelled.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let guard = guard.unwrap();
                if let Some(token) = guard.token() {
                    let seq = log.read();
                    tokio::time::sleep(Duration::from_millis(rng.below(4))).await;
                    log.write(seq, token);
                }
                if rng.below(2) == 0 {
                    drop(guard);
                } else {
                    guard.unlock().await.unwrap();
                }
            }
        }
    })
    .await;
    let sections = log.check();
    println!(
        "cancellation: {sections} fenced sections, {} acquires dropped",
        cancelled.load(Ordering::Relaxed)
    );
    eventually(Duration::from_secs(20), "nothing left held", || {
        lock_keys(&server) == vec!["redisson_lock_token:{cancel}".to_owned()]
    })
    .await;
    eventually(Duration::from_secs(10), "nothing subscribed", || {
        clients.iter().all(|c| c.subscribed_channels() == 0)
    })
    .await;
    let lock = clients[0].fenced_lock("cancel");
    let last = lock.token().await.unwrap().unwrap();
    let g = lock.try_lock().await.unwrap().expect("free");
    assert_eq!(g.token(), Some(last + 1));
    g.unlock().await.unwrap();
    for c in &clients {
        c.shutdown().await.unwrap();
    }
}

// === the rest of the Lock contract ===

/// Empty names and bad leases are refused before anything is sent, by
/// every method.
#[tokio::test]
async fn bad_arguments_are_refused_before_sending() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let empty = c.fenced_lock("");
    assert!(is_invalid(empty.lock().await));
    assert!(is_invalid(empty.try_lock().await));
    assert!(is_invalid(empty.try_lock_for(Duration::from_secs(1)).await));
    assert!(is_invalid(empty.is_locked().await));
    assert!(is_invalid(empty.is_held_by_current_task().await));
    assert!(is_invalid(empty.hold_count().await));
    assert!(is_invalid(empty.remaining_lease().await));
    assert!(is_invalid(empty.force_unlock().await));
    assert!(is_invalid(empty.token().await));
    assert!(is_invalid(empty.delete_token().await));

    let lock = c.fenced_lock("ok");
    assert!(is_invalid(lock.lock_with_lease(Duration::ZERO).await));
    assert!(is_invalid(
        lock.lock_with_lease(Duration::from_micros(500)).await
    ));
    assert!(is_invalid(
        lock.try_lock_with_lease(Duration::ZERO, Duration::MAX)
            .await
    ));
    assert!(lock_keys(&server).is_empty(), "nothing was sent");
    c.shutdown().await.unwrap();
}

/// A 1 s watchdog lease held for 3.5 s: renewed, never lost, and another
/// client is kept out all along.
#[tokio::test]
async fn the_watchdog_keeps_a_one_second_lease() {
    let server = RedisServer::start();
    let c = client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(1))).await;
    let other = client(&server).await;
    let lock = c.fenced_lock("wd");
    let guard = lock.lock().await.unwrap();
    for _ in 0..7 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!guard.is_lost());
        let ttl = pttl(&server, "wd");
        assert!(ttl > 0 && ttl <= 1000, "a 1 s lease, renewed: {ttl}");
        assert!(other.fenced_lock("wd").try_lock().await.unwrap().is_none());
    }
    guard.unlock().await.unwrap();
    assert!(!exists(&server, "wd"));
    c.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
}

/// Hold counts, ownership, remaining lease, `force_unlock` (the guard is
/// lost, the counter untouched, the next token larger) and the brace and
/// prefix rules of the counter's name.
#[tokio::test]
async fn holds_force_unlock_and_names() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.fenced_lock("f");
    assert!(!lock.is_locked().await.unwrap());
    assert!(!lock.is_held_by_current_task().await.unwrap());
    assert_eq!(lock.remaining_lease().await.unwrap(), None);
    let g = lock.lock_with_lease(Duration::from_secs(60)).await.unwrap();
    assert!(lock.is_locked().await.unwrap());
    assert!(lock.is_held_by_current_task().await.unwrap());
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    assert!(lock.remaining_lease().await.unwrap().unwrap() > Duration::from_secs(50));
    let elsewhere = {
        let lock = lock.clone();
        tokio::spawn(async move {
            (
                lock.is_held_by_current_task().await.unwrap(),
                lock.hold_count().await.unwrap(),
            )
        })
        .await
        .unwrap()
    };
    assert_eq!(elsewhere, (false, 0), "another task is another owner");

    assert!(lock.force_unlock().await.unwrap());
    assert!(g.is_lost(), "this client's guard is told at once");
    assert!(!lock.force_unlock().await.unwrap());
    assert!(matches!(g.unlock().await, Err(Error::NotHeld { .. })));
    assert_eq!(
        lock.token().await.unwrap(),
        Some(1),
        "force-unlock keeps the counter"
    );
    let g = lock.lock().await.unwrap();
    assert_eq!(g.token(), Some(2));
    g.unlock().await.unwrap();

    assert_eq!(
        c.fenced_lock("user:{7}").token_key(),
        "redisson_lock_token:user:{7}"
    );
    let prefixed = client_with(&server, |b| b.key_prefix("app:")).await;
    let p = prefixed.fenced_lock("f");
    assert_eq!(p.key(), "app:f");
    assert_eq!(p.token_key(), "redisson_lock_token:{app:f}");
    let g = p.lock().await.unwrap();
    assert_eq!(g.token(), Some(1), "a prefix names another counter");
    g.unlock().await.unwrap();
    assert_eq!(server.cmd(&["GET", "redisson_lock_token:{app:f}"]), "1");
    c.shutdown().await.unwrap();
    prefixed.shutdown().await.unwrap();
}

/// Odd names lock, take tokens and clean up like any other; the counter
/// follows Redisson's brace rule.
#[tokio::test]
async fn odd_names_are_ordinary_names() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let names = [
        "with spaces",
        "{a}b{",
        "}{",
        "{}",
        "ünïcødé 🔒",
        "nul\0byte",
        "cr\r\nlf\n",
        "--[[ lua ]]",
        "*?[glob]",
    ];
    for name in names {
        let lock = c.fenced_lock(name);
        let expected = if name.contains('{') {
            format!("redisson_lock_token:{name}")
        } else {
            format!("redisson_lock_token:{{{name}}}")
        };
        assert_eq!(lock.token_key(), expected);
        let g = lock.lock().await.unwrap();
        let again = lock.try_lock().await.unwrap().expect("re-enters");
        assert_eq!((g.token(), again.token()), (Some(1), Some(2)), "{name:?}");
        again.unlock().await.unwrap();
        g.unlock().await.unwrap();
        assert_eq!(lock.token().await.unwrap(), Some(2), "{name:?}");
        assert!(lock.delete_token().await.unwrap(), "{name:?}");
    }
    assert!(lock_keys(&server).is_empty(), "{:?}", lock_keys(&server));
    c.shutdown().await.unwrap();
}

/// `delete_token` refuses while the lock is held (through any handle, or
/// by Java), deletes once it is free, and tokens then start again at 1.
#[tokio::test]
async fn delete_token_refuses_while_held() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let lock = c.fenced_lock("old");
    assert!(!lock.delete_token().await.unwrap(), "no counter yet");
    let g = lock.lock().await.unwrap();
    assert!(
        !lock.delete_token().await.unwrap(),
        "held through the fenced lock"
    );
    g.unlock().await.unwrap();
    let g = c.lock("old").lock().await.unwrap();
    assert!(
        !lock.delete_token().await.unwrap(),
        "held through a plain lock"
    );
    g.unlock().await.unwrap();
    server.cmd(&["HSET", "old", "x:1", "1"]);
    assert!(!lock.delete_token().await.unwrap(), "held by Java");
    server.cmd(&["DEL", "old"]);
    assert_eq!(server.cmd(&["GET", "redisson_lock_token:{old}"]), "1");
    assert!(lock.delete_token().await.unwrap());
    assert!(lock_keys(&server).is_empty());
    assert_eq!(lock.token().await.unwrap(), None);
    let g = lock.lock().await.unwrap();
    assert_eq!(g.token(), Some(1));
    g.unlock().await.unwrap();
    c.shutdown().await.unwrap();
}

/// A fenced lock is a MultiLock member like any other; its member guard
/// carries a token.
#[tokio::test]
async fn a_fenced_lock_is_a_multilock_member() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let multi = MultiLock::new(vec![
        Member::from(c.fenced_lock("m:a")),
        Member::from(c.lock("m:b")),
    ]);
    let g = within(HANG, "multi lock", multi.lock()).await.unwrap();
    let tokens: Vec<Option<u64>> = g.guards().iter().map(|g| g.token()).collect();
    assert_eq!(tokens, vec![Some(1), None]);
    assert!(c.fenced_lock("m:a").is_locked().await.unwrap());
    g.unlock().await.unwrap();
    assert_eq!(
        lock_keys(&server),
        vec!["redisson_lock_token:{m:a}".to_owned()]
    );
    c.shutdown().await.unwrap();
}

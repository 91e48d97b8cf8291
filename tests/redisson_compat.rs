//! The Redisson wire formats (`RLock`, `RPermitExpirableSemaphore`,
//! `RCountDownLatch`), checked with raw commands as Java sends them.

use leasehold_testkit as support;

use std::time::Duration;

use support::fixture::{client, within};
use support::RedisServer;

/// A foreign field blocks us; DEL + PUBLISH of "0" on the Redisson channel
/// wakes our waiter; our hold is `HGET name <uuid>:<task>` = count.
#[tokio::test]
async fn raw_redisson_commands_interoperate() {
    let server = RedisServer::start();
    // Waiters must be woken by the message, not by a re-check.
    let c = support::fixture::client_with(&server, |b| b.recheck_interval(Duration::from_secs(60)))
        .await;
    let lock = c.lock("shared-with-java");
    assert_eq!(lock.channel(), "redisson_lock__channel:{shared-with-java}");

    // A Java holder: field "x:1", lease one minute.
    server.cmd(&["HSET", "shared-with-java", "x:1", "1"]);
    server.cmd(&["PEXPIRE", "shared-with-java", "60000"]);
    assert!(
        lock.try_lock().await.unwrap().is_none(),
        "foreign holder blocks us"
    );
    assert!(lock.is_locked().await.unwrap());

    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock().await.unwrap() })
    };
    support::fixture::eventually(Duration::from_secs(10), "waiter subscribed", || {
        support::fixture::numsub(&server, "redisson_lock__channel:{shared-with-java}") == 1
    })
    .await;
    // What Redisson's unlock does when the count reaches zero.
    server.cmd(&["DEL", "shared-with-java"]);
    server.cmd(&["PUBLISH", "redisson_lock__channel:{shared-with-java}", "0"]);
    let guard = within(
        Duration::from_secs(10),
        "wake-up by the Redisson message",
        waiter,
    )
    .await
    .unwrap();

    // Our hold, as a Java client would read it.
    let task_owner = guard.owner();
    let field = format!("{}:{}", c.id(), task_owner.id());
    assert_eq!(server.cmd(&["HGET", "shared-with-java", &field]), "1");
    assert_eq!(server.cmd(&["HLEN", "shared-with-java"]), "1");
    let ttl: i64 = server.cmd(&["PTTL", "shared-with-java"]).parse().unwrap();
    assert!(
        ttl > 0 && ttl <= 30_000,
        "watchdog lease of 30 s, got {ttl}"
    );
    guard.unlock().await.unwrap();
    assert_eq!(server.cmd(&["EXISTS", "shared-with-java"]), "0");
    c.shutdown().await.unwrap();
}

/// Our unlock publishes "0" on the Redisson channel, as a Java waiter
/// expects.
#[tokio::test]
async fn unlock_publishes_zero_on_the_redisson_channel() {
    let server = RedisServer::start();
    let c = client(&server).await;
    // A plain fred client listening like a Java waiter would.
    let listener = leasehold::fred::types::Builder::from_config(
        leasehold::fred::types::config::Config::from_url(&server.url()).unwrap(),
    )
    .build_subscriber_client()
    .unwrap();
    use leasehold::fred::interfaces::{ClientLike, EventInterface, PubsubInterface};
    listener.init().await.unwrap();
    let mut rx = listener.message_rx();
    listener
        .subscribe("redisson_lock__channel:{j}")
        .await
        .unwrap();
    support::fixture::eventually(Duration::from_secs(10), "listener subscribed", || {
        support::fixture::numsub(&server, "redisson_lock__channel:{j}") == 1
    })
    .await;
    let guard = c.lock("j").lock().await.unwrap();
    guard.unlock().await.unwrap();
    let msg = within(Duration::from_secs(10), "unlock message", rx.recv())
        .await
        .unwrap();
    assert_eq!(&*msg.channel, "redisson_lock__channel:{j}");
    assert_eq!(msg.value.as_string().as_deref(), Some("0"));
    listener.quit().await.unwrap();
    c.shutdown().await.unwrap();
}

/// Redisson adds braces to the channel only when the name has none, so key
/// and channel share a cluster slot; we name channels the same way.
#[tokio::test]
async fn channel_names_follow_redissons_brace_rule() {
    let server = RedisServer::start();
    let c = client(&server).await;
    assert_eq!(c.lock("plain").channel(), "redisson_lock__channel:{plain}");
    assert_eq!(
        c.lock("user:{42}:cart").channel(),
        "redisson_lock__channel:user:{42}:cart"
    );
    let prefixed = support::fixture::client_with(&server, |b| b.key_prefix("app:")).await;
    assert_eq!(
        prefixed.lock("x").channel(),
        "redisson_lock__channel:{app:x}"
    );
    // A guard reports the name it was asked for and the prefixed key.
    for (client, name, key) in [
        (&prefixed, "x", "app:x"),
        (&prefixed, "app:x", "app:app:x"),
        (&c, "user:{42}:cart", "user:{42}:cart"),
    ] {
        let guard = client.lock(name).lock().await.unwrap();
        assert_eq!((guard.name(), guard.key()), (name, key));
        guard.unlock().await.unwrap();
    }
    c.shutdown().await.unwrap();
    prefixed.shutdown().await.unwrap();
}

// --- RPermitExpirableSemaphore and RCountDownLatch ---------------------------
//
// Java's scripts below are written from the facts in REDISSON-WIRE.md (§6,
// §7) and sent with EVAL exactly as Redisson sends its own: same KEYS, same
// ARGV, client clock, permit ids as 16 raw bytes.

use leasehold::fred::bytes::Bytes;
use leasehold::fred::interfaces::LuaInterface;
use leasehold::fred::types::Value;

/// Redisson's permit-expirable `tryAcquire`. KEYS [name, {name}:timeout,
/// channel]; ARGV [count, timeoutDate, now, 922337203685477, publishCmd,
/// id…]. Reply "OK", ":<nearest expiry>" or nil.
const JAVA_ACQUIRE: &str = r#"
local expired = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1])
if #expired > 0 then
    redis.call('zrem', KEYS[2], unpack(expired))
    local value = redis.call('incrby', KEYS[1], #expired)
    if value > 0 then redis.call(ARGV[5], KEYS[3], value) end
end
local value = redis.call('get', KEYS[1])
if value ~= false and tonumber(value) >= tonumber(ARGV[1]) then
    redis.call('decrby', KEYS[1], ARGV[1])
    for i = 6, #ARGV do redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]) end
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then redis.call('pexpire', KEYS[2], ttl) end
    return 'OK'
end
local v = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
if v[1] ~= nil and v[2] ~= ARGV[4] then return ':' .. v[2] end
return nil
"#;

/// Redisson's `tryRelease(id)`. KEYS [name, channel, {name}:timeout]; ARGV
/// [id, 1, now, publishCmd]. 1 released, 0 missing or expired.
const JAVA_RELEASE: &str = r#"
local expire = redis.call('zscore', KEYS[3], ARGV[1])
local removed = redis.call('zrem', KEYS[3], ARGV[1])
if tonumber(removed) ~= 1 then return 0 end
local value = redis.call('incrby', KEYS[1], ARGV[2])
redis.call(ARGV[4], KEYS[2], value)
if tonumber(expire) <= tonumber(ARGV[3]) then return 0 end
return 1
"#;

/// Redisson's permit-expirable `addPermits`. KEYS [name, channel]; ARGV
/// [delta, publishCmd]; publishes only a positive delta.
const JAVA_ADD_PERMITS: &str = r#"
local value = redis.call('get', KEYS[1])
if value == false then value = 0 end
redis.call('set', KEYS[1], tonumber(value) + tonumber(ARGV[1]))
if tonumber(ARGV[1]) > 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]) end
"#;

/// Redisson's `getLeaseTime(id)` (its reclaim step left out: nothing has
/// expired when it is called). KEYS [name, {name}:timeout, channel]; ARGV
/// [id, 922337203685477, now, publishCmd].
const JAVA_LEASE_TIME: &str = r#"
local score = redis.call('zscore', KEYS[2], ARGV[1])
if score == false then return 0 end
if score == ARGV[2] then return -1 end
return tonumber(score) - tonumber(ARGV[3])
"#;

/// Redisson's `countDown`: KEYS [name, channel]; ARGV [0, publishCmd].
const JAVA_COUNT_DOWN: &str = r#"
local v = redis.call('decr', KEYS[1])
if v <= 0 then redis.call('del', KEYS[1]) end
if v == 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]) end
"#;

/// Redisson's `trySetCount`: KEYS [name, channel]; ARGV [1, count,
/// publishCmd].
const JAVA_TRY_SET_COUNT: &str = r#"
if redis.call('exists', KEYS[1]) == 0 then
    redis.call('set', KEYS[1], ARGV[2])
    redis.call(ARGV[3], KEYS[2], ARGV[1])
    return 1
end
return 0
"#;

/// Redisson's latch `delete`: KEYS [name, channel]; ARGV [1, publishCmd].
const JAVA_LATCH_DELETE: &str = r#"
if redis.call('del', KEYS[1]) == 1 then
    redis.call(ARGV[2], KEYS[2], ARGV[1])
    return 1
end
return 0
"#;

async fn java(c: &leasehold::Client, script: &str, keys: &[&str], args: Vec<Value>) -> Value {
    let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
    c.redis()
        .eval(script, keys, args)
        .await
        .expect("the Java script runs")
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A permit id as Redisson stores it: 16 raw bytes.
fn raw_id(hex: &str) -> Value {
    let bytes: Vec<u8> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    Value::Bytes(Bytes::from(bytes))
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
    support::fixture::eventually(Duration::from_secs(10), "listener subscribed", || {
        support::fixture::numsub(server, channel) >= 1
    })
    .await;
    (listener, rx)
}

/// The messages received so far, as text.
fn drain(
    rx: &mut tokio::sync::broadcast::Receiver<leasehold::fred::types::Message>,
) -> Vec<String> {
    let mut out = Vec::new();
    while let Ok(m) = rx.try_recv() {
        out.push(m.value.as_string().unwrap_or_default());
    }
    out
}

/// Our permits and Java's share one semaphore: each side sees the other's
/// permits taken, Java's releases and added permits wake our waiters, Java
/// can read our lease and release our permit by its hex id, Java reclaims
/// our expired permits, and every message is a decimal count.
#[tokio::test]
async fn permit_expirable_semaphore_interoperates_with_redisson() {
    let server = RedisServer::start();
    // Waiters must be woken by messages, not by re-checks.
    let c = support::fixture::client_with(&server, |b| b.recheck_interval(Duration::from_secs(60)))
        .await;
    let (keys, zset) = (
        ["jsem", "{jsem}:timeout", "redisson_sc:{jsem}"],
        "{jsem}:timeout",
    );
    let (listener, mut rx) = listen(&server, "redisson_sc:{jsem}").await;
    let sem = c.semaphore("jsem");
    assert_eq!(sem.channel(), "redisson_sc:{jsem}");
    assert!(sem.try_set_permits(2).await.unwrap());
    assert_eq!(server.cmd(&["GET", "jsem"]), "2");

    // Our permit: a 16-byte member whose hex is the id, a lease Java reads.
    let ours = sem.acquire().await.unwrap();
    let member_hex = server.cmd(&[
        "EVAL",
        "local m = redis.call('zrange', KEYS[1], 0, 0) local out = {} \
         for i = 1, #m[1] do out[i] = string.format('%02x', string.byte(m[1], i)) end \
         return #m[1] .. ':' .. table.concat(out)",
        "1",
        zset,
    ]);
    assert_eq!(member_hex, format!("16:{}", ours.id()));
    let lease = java(
        &c,
        JAVA_LEASE_TIME,
        &keys,
        vec![
            raw_id(ours.id()),
            "922337203685477".into(),
            now_ms().into(),
            "publish".into(),
        ],
    )
    .await;
    let lease = lease.as_i64().unwrap();
    assert!(
        lease > 25_000 && lease <= 30_001,
        "Java sees a {lease} ms lease"
    );

    // A Java permit with a one-minute lease takes the last one.
    let java_id = "0123456789abcdef0123456789abcdef";
    let reply = java(
        &c,
        JAVA_ACQUIRE,
        &keys,
        vec![
            1.into(),
            (now_ms() + 60_000).into(),
            now_ms().into(),
            "922337203685477".into(),
            "publish".into(),
            raw_id(java_id),
        ],
    )
    .await;
    assert_eq!(reply.as_string().as_deref(), Some("OK"));
    assert!(
        sem.try_acquire().await.unwrap().is_none(),
        "Java's permit counts"
    );
    // Java, full, is told the nearest expiry (ours, renewed by our watchdog).
    let reply = java(
        &c,
        JAVA_ACQUIRE,
        &keys,
        vec![
            1.into(),
            (now_ms() + 60_000).into(),
            now_ms().into(),
            "922337203685477".into(),
            "publish".into(),
            raw_id("ffffffffffffffffffffffffffffffff"),
        ],
    )
    .await;
    assert!(reply.as_string().unwrap().starts_with(':'), "{reply:?}");

    // Java's release wakes our waiter.
    let s = sem.clone();
    let waiter = tokio::spawn(async move { s.acquire().await.unwrap() });
    support::fixture::eventually(Duration::from_secs(10), "waiter subscribed", || {
        support::fixture::numsub(&server, "redisson_sc:{jsem}") == 2
    })
    .await;
    let released = java(
        &c,
        JAVA_RELEASE,
        &["jsem", "redisson_sc:{jsem}", zset],
        vec![raw_id(java_id), 1.into(), now_ms().into(), "publish".into()],
    )
    .await;
    assert_eq!(released.as_i64(), Some(1));
    let woken = within(Duration::from_secs(10), "woken by Java's release", waiter)
        .await
        .unwrap();

    // Our release publishes the new count, as Java's does.
    ours.release().await.unwrap();
    assert_eq!(server.cmd(&["GET", "jsem"]), "1");

    // Java adds 2 permits (publishes "2"); then releases our permit by id.
    java(
        &c,
        JAVA_ADD_PERMITS,
        &["jsem", "redisson_sc:{jsem}"],
        vec![2.into(), "publish".into()],
    )
    .await;
    let released = java(
        &c,
        JAVA_RELEASE,
        &["jsem", "redisson_sc:{jsem}", zset],
        vec![
            raw_id(woken.id()),
            1.into(),
            now_ms().into(),
            "publish".into(),
        ],
    )
    .await;
    assert_eq!(
        released.as_i64(),
        Some(1),
        "Java released our permit by its id"
    );
    assert!(matches!(
        woken.release().await,
        Err(leasehold::Error::NotHeld { .. })
    ));
    assert_eq!(server.cmd(&["GET", "jsem"]), "4", "counted back once");

    // Our fixed lease runs out: Java's acquire reclaims it.
    let short = sem
        .acquire_with_lease(Duration::from_millis(300))
        .await
        .unwrap();
    for i in 0..3 {
        let id = format!("{i:032x}");
        let reply = java(
            &c,
            JAVA_ACQUIRE,
            &keys,
            vec![
                1.into(),
                "922337203685477".into(),
                now_ms().into(),
                "922337203685477".into(),
                "publish".into(),
                raw_id(&id),
            ],
        )
        .await;
        assert_eq!(reply.as_string().as_deref(), Some("OK"));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let reply = java(
        &c,
        JAVA_ACQUIRE,
        &keys,
        vec![
            1.into(),
            "922337203685477".into(),
            now_ms().into(),
            "922337203685477".into(),
            "publish".into(),
            raw_id(&format!("{:032x}", 9)),
        ],
    )
    .await;
    assert_eq!(
        reply.as_string().as_deref(),
        Some("OK"),
        "Java reclaimed our expired permit"
    );
    assert!(matches!(
        short.release().await,
        Err(leasehold::Error::NotHeld { .. })
    ));
    // Four Java permits that never expire: we see no expiry to wait for.
    assert!(sem
        .try_acquire_for(Duration::from_millis(200))
        .await
        .unwrap()
        .is_none());
    assert_eq!(server.cmd(&["GET", "jsem"]), "0");
    assert_eq!(server.cmd(&["ZCARD", zset]), "4");

    let messages = drain(&mut rx);
    eprintln!("messages on redisson_sc:{{jsem}}: {messages:?}");
    assert!(
        messages.iter().all(|m| m.parse::<i64>().is_ok()),
        "{messages:?}"
    );
    // Set 2; Java's release (count 1); our release (1); Java adds 2; Java
    // releases our permit (4); Java reclaims our expired one (1).
    assert_eq!(messages, ["2", "1", "1", "2", "4", "1"]);
    use leasehold::fred::interfaces::ClientLike;
    listener.quit().await.unwrap();
    c.shutdown().await.unwrap();
}

/// Our latch and Java's: same key and channel, messages `1` (set) and `0`
/// (zero); Java's count-down, set and delete wake our waiters; ours wake
/// Java's listener.
#[tokio::test]
async fn count_down_latch_interoperates_with_redisson() {
    let server = RedisServer::start();
    let c = support::fixture::client_with(&server, |b| b.recheck_interval(Duration::from_secs(60)))
        .await;
    let channel = "redisson_countdownlatch__channel__{jl}";
    let keys = ["jl", channel];
    let (listener, mut rx) = listen(&server, channel).await;
    let latch = c.count_down_latch("jl");
    assert_eq!(latch.channel(), channel);
    assert_eq!(
        c.count_down_latch("{a}b").channel(),
        "redisson_countdownlatch__channel__{{a}b}",
        "braces always added, as Redisson does"
    );

    assert!(latch.try_set_count(2).await.unwrap());
    assert_eq!(server.cmd(&["GET", "jl"]), "2");
    java(&c, JAVA_COUNT_DOWN, &keys, vec![0.into(), "publish".into()]).await;
    assert_eq!(latch.count().await.unwrap(), 1);
    let l = latch.clone();
    let waiter = tokio::spawn(async move { l.wait().await });
    support::fixture::eventually(Duration::from_secs(10), "waiter subscribed", || {
        support::fixture::numsub(&server, channel) == 2
    })
    .await;
    java(&c, JAVA_COUNT_DOWN, &keys, vec![0.into(), "publish".into()]).await;
    within(
        Duration::from_secs(10),
        "woken by Java's count-down",
        waiter,
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(server.cmd(&["EXISTS", "jl"]), "0");

    // Java sets, we count down to zero; Java's delete wakes a waiter.
    let set = java(
        &c,
        JAVA_TRY_SET_COUNT,
        &keys,
        vec![1.into(), 1.into(), "publish".into()],
    )
    .await;
    assert_eq!(set.as_i64(), Some(1));
    assert!(!latch.try_set_count(5).await.unwrap(), "Java's count runs");
    latch.count_down().await.unwrap();
    assert_eq!(server.cmd(&["EXISTS", "jl"]), "0");
    latch.count_down().await.unwrap(); // a missing latch: nothing happens
    assert_eq!(server.cmd(&["EXISTS", "jl"]), "0");
    assert!(latch.try_set_count(3).await.unwrap());
    let l = latch.clone();
    let waiter = tokio::spawn(async move { l.wait().await });
    support::fixture::eventually(Duration::from_secs(10), "waiter subscribed", || {
        support::fixture::numsub(&server, channel) == 2
    })
    .await;
    let deleted = java(
        &c,
        JAVA_LATCH_DELETE,
        &keys,
        vec![1.into(), "publish".into()],
    )
    .await;
    assert_eq!(deleted.as_i64(), Some(1));
    within(Duration::from_secs(10), "woken by Java's delete", waiter)
        .await
        .unwrap()
        .unwrap();

    let messages = drain(&mut rx);
    assert_eq!(
        messages,
        ["1", "0", "1", "0", "1", "1"],
        "set, zero, set, zero, set, delete"
    );
    use leasehold::fred::interfaces::ClientLike;
    listener.quit().await.unwrap();
    c.shutdown().await.unwrap();
}

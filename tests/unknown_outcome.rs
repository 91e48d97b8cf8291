//! A lock script that reached Redis but whose reply was lost: never
//! counted twice, never left behind.

use leasehold_testkit as support;

use std::time::Duration;

use leasehold::Owner;
use support::fixture::{calls, client_with, eventually, exists, numsub, within};
use support::{Proxy, RedisServer};

const HANG: Duration = Duration::from_secs(60);

async fn through_proxy(server: &RedisServer) -> (Proxy, leasehold::Client) {
    let proxy = Proxy::start(&server.addr()).await;
    let url = proxy.url();
    let c = client_with(server, |b| {
        b.url(&url).command_timeout(Duration::from_secs(2))
    })
    .await;
    // Scripts are cached and the connection is warm: a dropped reply below
    // is the reply of a script that ran.
    let warm = c.lock("warm-up").lock().await.unwrap();
    warm.unlock().await.unwrap();
    (proxy, c)
}

/// The acquire ran but its reply was lost with the connection: the caller
/// gets the lock (found by reconciling), and the count is 1, not 2.
#[tokio::test]
async fn acquire_reply_lost_is_counted_once() {
    let server = RedisServer::start();
    let (proxy, c) = through_proxy(&server).await;
    let lock = c.lock("cut");
    let field = format!("{}:{}", c.id(), Owner::current().id());

    proxy.drop_replies_once();
    let guard = within(HANG, "acquire across a cut", lock.lock())
        .await
        .unwrap();
    assert_eq!(
        server.cmd(&["HGET", "cut", &field]),
        "1",
        "incremented exactly once"
    );

    // Re-entry across another cut: 2, not 3.
    proxy.drop_replies_once();
    let again = within(HANG, "re-entry across a cut", lock.try_lock())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(server.cmd(&["HGET", "cut", &field]), "2");

    // Unlocks whose replies are lost: decremented once each, then gone.
    proxy.drop_replies_once();
    within(HANG, "unlock across a cut", again.unlock())
        .await
        .unwrap();
    assert_eq!(
        server.cmd(&["HGET", "cut", &field]),
        "1",
        "decremented exactly once"
    );
    proxy.drop_replies_once();
    within(HANG, "last unlock across a cut", guard.unlock())
        .await
        .unwrap();
    assert!(
        !exists(&server, "cut"),
        "no stray hold left until lease expiry"
    );
    c.shutdown().await.unwrap();
}

/// A dropped guard whose background release loses its reply: the key is
/// still gone, and a later lock by the same task starts from 1.
#[tokio::test]
async fn background_release_reply_lost() {
    let server = RedisServer::start();
    let (proxy, c) = through_proxy(&server).await;
    let lock = c.lock("cut-drop");
    let guard = lock.lock().await.unwrap();
    proxy.drop_replies_once();
    drop(guard);
    eventually(HANG, "background release across a cut", || {
        !exists(&server, "cut-drop")
    })
    .await;
    let g = within(HANG, "lock again", lock.lock()).await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    g.unlock().await.unwrap();
    c.shutdown().await.unwrap();
}

/// The fair lock's acquire and release across the same cuts: each runs
/// once. The release writes no request record on its first run (issue 31),
/// so a copy is answered from the state: an inner unlock's copy finds the
/// count its first run left, the last unlock's the field gone ("gone",
/// read as freed: the request was sent twice).
#[tokio::test]
async fn fair_reply_lost_is_counted_once() {
    let server = RedisServer::start();
    let (proxy, c) = through_proxy(&server).await;
    let lock = c.fair_lock("fair-cut");
    let field = format!("{}:{}", c.id(), Owner::current().id());
    let sets = calls(&server, "set");

    proxy.drop_replies_once();
    let guard = within(HANG, "acquire across a cut", lock.lock())
        .await
        .unwrap();
    assert_eq!(server.cmd(&["HGET", "fair-cut", &field]), "1");
    proxy.drop_replies_once();
    let again = within(HANG, "re-entry across a cut", lock.try_lock())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(server.cmd(&["HGET", "fair-cut", &field]), "2");

    proxy.drop_replies_once();
    within(HANG, "unlock across a cut", again.unlock())
        .await
        .unwrap();
    assert_eq!(
        server.cmd(&["HGET", "fair-cut", &field]),
        "1",
        "given back exactly once"
    );
    assert!(!guard.is_lost(), "the outer hold is still counted");
    proxy.drop_replies_once();
    within(HANG, "last unlock across a cut", guard.unlock())
        .await
        .expect("a copy that finds the field gone is read as freed");
    assert!(!exists(&server, "fair-cut"), "no stray hold left");
    assert_eq!(
        calls(&server, "set"),
        sets,
        "a request record was written: every copy is answered from the state"
    );
    // The lock is the client's again, from one hold.
    let g = within(HANG, "lock again", lock.lock()).await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    g.unlock().await.unwrap();
    c.shutdown().await.unwrap();
}

/// Issue 31: a fair lock's last unlock whose reply is lost with its
/// connection, while a waiter is queued. Its first run freed the lock and
/// granted it to the waiter; fred (or the call) sends it again, and the
/// copy finds the field gone: it must neither grant again (one message in
/// all) nor free the waiter's hold, and the unlock succeeds. The reply
/// that named the waiter is lost, so the waiter (another client of this
/// process) is told by Redis's message alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_unlock_whose_reply_is_lost_grants_once() {
    let server = RedisServer::start();
    let (proxy, holder) = through_proxy(&server).await;
    let waiter = client_with(&server, |b| b).await;
    let mine = format!("{}:{}", holder.id(), Owner::current().id());
    for round in 0..3 {
        let name = format!("fair-granted-{round}");
        let queue = format!("redisson_lock_queue:{{{name}}}");
        let held = holder.fair_lock(&name).lock().await.unwrap();
        let owner = Owner::new();
        let theirs = format!("{}:{}", waiter.id(), owner.id());
        let (w, n) = (waiter.clone(), name.clone());
        let waiting =
            tokio::spawn(owner.scope(async move { w.fair_lock(&n).lock().await.unwrap() }));
        eventually(HANG, "the waiter queued", || {
            server.cmd(&["LRANGE", &queue, "0", "-1"]) == theirs
        })
        .await;
        // Subscribed and parked; the holder's record batch is done.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (publishes, sets) = (calls(&server, "publish"), calls(&server, "set"));
        proxy.drop_replies_once();
        within(HANG, "an unlock across a cut", held.unlock())
            .await
            .expect("the first run freed the lock");
        assert_eq!(
            calls(&server, "set"),
            sets,
            "round {round}: a request record was written (the copy is answered from the state)"
        );
        let taken = within(HANG, "the waiter is granted the lock", waiting)
            .await
            .unwrap();
        // Long after any copy of the unlock could have run again.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            calls(&server, "publish") - publishes,
            1,
            "round {round}: the lock was handed over more than once"
        );
        assert!(
            !taken.is_lost() && server.cmd(&["HGET", &name, &theirs]) == "1",
            "round {round}: the waiter's hold was freed by a copy of the unlock"
        );
        assert_eq!(server.cmd(&["HEXISTS", &name, &mine]), "0");
        taken.unlock().await.unwrap();
        assert!(!exists(&server, &name), "round {round}: nothing left held");
    }
    holder.shutdown().await.unwrap();
    waiter.shutdown().await.unwrap();
}

/// Issue 31: copies of a fair lock's release, sent by hand as a copy
/// reaches Redis (the twin without the record, the same request id and
/// arguments), after its first run freed the lock and granted it to a
/// waiter: while the waiter holds it, after another client took it, and
/// with the lock free and a waiter queued. Each answers "gone" (`{3}`) and
/// changes nothing: no second grant or message, no hold freed. A copy of
/// a release that left holds answers the count it left, as a replay, and
/// gives back nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_of_a_fair_release_never_grants_again_nor_frees_a_later_hold() {
    let server = RedisServer::start();
    let waiter = client_with(&server, |b| b).await;
    let other = client_with(&server, |b| b).await;
    let script = leasehold::__bench::fair_release_script();
    let name = "fair-copy";
    let queue = "redisson_lock_queue:{fair-copy}";
    let timeouts = "redisson_lock_timeout:{fair-copy}";
    let grants = "leasehold_grant:{fair-copy}";
    // The releasing owner: a field written by hand, as its client would.
    let field = "0b1c3d52-1111-4222-8333-944455556666:9";
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .to_string();
    let release = |field: &str, expected: &str, rid: &str| {
        server.cmd(&[
            "EVAL",
            script,
            "5",
            name,
            queue,
            timeouts,
            "redisson_lock__channel:{fair-copy}",
            grants,
            "30000",
            field,
            "1",
            "publish",
            &now,
            "5000",
            "5000",
            expected,
            rid,
        ])
    };
    server.cmd(&["HSET", name, field, "1"]);
    server.cmd(&["PEXPIRE", name, "30000"]);
    let owner = Owner::new();
    let theirs = format!("{}:{}", waiter.id(), owner.id());
    let w = waiter.clone();
    let waiting =
        tokio::spawn(owner.scope(async move { w.fair_lock("fair-copy").lock().await.unwrap() }));
    let channel = format!("redisson_lock__channel:{{fair-copy}}:{theirs}");
    eventually(HANG, "the waiter queued and listening", || {
        server.cmd(&["HEXISTS", grants, &theirs]) == "1" && numsub(&server, &channel) == 1
    })
    .await;

    // The first run: frees the lock and grants it to the waiter.
    let first = release(field, "1", "7");
    let first: Vec<&str> = first.lines().collect();
    assert_eq!(
        (
            first[0],
            first[3],
            first.get(6).copied(),
            first.last().copied()
        ),
        ("2", "1", Some(theirs.as_str()), Some("7")),
        "granted: {first:?}"
    );
    let taken = within(HANG, "the waiter adopts the grant", waiting)
        .await
        .unwrap();
    let publishes = calls(&server, "publish");
    let grants_then = server.cmd(&["HGETALL", grants]);

    // A copy while the waiter holds the lock.
    assert_eq!(
        release(field, "1", "7"),
        "3\n7",
        "a copy finds the field gone"
    );
    assert_eq!(server.cmd(&["HGET", name, &theirs]), "1");
    assert_eq!(server.cmd(&["HGETALL", grants]), grants_then);
    assert!(!taken.is_lost());

    // A copy after the waiter gave it back and another client took it.
    taken.unlock().await.unwrap();
    let later = other.fair_lock("fair-copy").lock().await.unwrap();
    assert_eq!(release(field, "1", "7"), "3\n7");
    assert_eq!(server.cmd(&["HLEN", name]), "1", "the later hold is kept");
    assert!(!later.is_lost());
    later.unlock().await.unwrap();

    // A copy with the lock free and a (Java) waiter at the head: not
    // handed over, not told.
    let java = "6a2a8c5e-3f7e-4a43-9e9b-7e5b1f0c9d11:1";
    server.cmd(&["RPUSH", queue, java]);
    server.cmd(&["ZADD", timeouts, "99999999999999", java]);
    let publishes_free = calls(&server, "publish");
    assert_eq!(release(field, "1", "7"), "3\n7");
    assert!(!exists(&server, name), "nobody was handed the lock");
    assert_eq!(server.cmd(&["LRANGE", queue, "0", "-1"]), java);
    assert_eq!(calls(&server, "publish"), publishes_free, "nobody was told");
    assert_eq!(
        publishes_free - publishes,
        0,
        "the copies published nothing (the waiter's unlock had no one to tell)"
    );
    server.cmd(&["DEL", queue, timeouts]);

    // A release that leaves a hold: a copy answers the count it left.
    server.cmd(&["HSET", name, field, "2"]);
    server.cmd(&["PEXPIRE", name, "30000"]);
    assert_eq!(release(field, "2", "8"), "1\n1\n8", "the first run");
    assert_eq!(release(field, "2", "8"), "1\n1\n-8", "a copy: a replay");
    assert_eq!(server.cmd(&["HGET", name, field]), "1", "given back once");
    // The field gone where holds would be left: not held, nothing changes.
    server.cmd(&["DEL", name]);
    assert_eq!(release(field, "2", "9"), "0\n9");
    assert!(!exists(&server, name));
    waiter.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
}

/// The connection is cut while many tasks contend: the counter stays exact
/// and nothing is left held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cuts_under_contention_keep_counts_exact() {
    use leasehold::fred::interfaces::KeysInterface;
    let server = RedisServer::start();
    let (proxy, c) = through_proxy(&server).await;
    let direct = client_with(&server, |b| b).await;
    let mut tasks = Vec::new();
    for t in 0..8 {
        let (c, direct) = (
            if t % 2 == 0 {
                c.clone()
            } else {
                direct.clone()
            },
            direct.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut done = 0u32;
            for _ in 0..40 {
                let Ok(g) = c.lock("contended").lock().await else {
                    continue;
                };
                let n: i64 = direct
                    .redis()
                    .get::<Option<i64>, _>("n")
                    .await
                    .unwrap()
                    .unwrap_or(0);
                let () = direct
                    .redis()
                    .set("n", n + 1, None, None, false)
                    .await
                    .unwrap();
                done += 1;
                // An unlock whose outcome stays unknown leaves the lease to
                // expire; count it as done either way.
                let _ = g.unlock().await;
            }
            done
        }));
    }
    let cutter = tokio::spawn(async move {
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(150)).await;
            proxy.cut_all();
        }
        proxy
    });
    let mut done = 0;
    for t in tasks {
        done += within(HANG, "contenders", t).await.unwrap();
    }
    let _proxy = cutter.await.unwrap();
    assert_eq!(
        server.cmd(&["GET", "n"]),
        done.to_string(),
        "exact under cuts"
    );
    eventually(HANG, "nothing held at the end", || {
        !exists(&server, "contended")
    })
    .await;
    c.shutdown().await.unwrap();
    direct.shutdown().await.unwrap();
}

/// An unlock whose outcome stays unknown for a while (the connection
/// black-holed for 7 s, longer than any single command timeout) is resolved
/// once the connection heals: the hold is given back. It is never forgotten
/// while it may still be in Redis, so it cannot be left held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_unknown_for_a_while_is_resolved_not_forgotten() {
    let server = RedisServer::start();
    let (proxy, c) = through_proxy(&server).await;
    let guard = c.lock("unknown-release").lock().await.unwrap();
    proxy.blackhole();
    let unlock = tokio::spawn(guard.unlock());
    tokio::time::sleep(Duration::from_secs(7)).await;
    proxy.pass();
    let outcome = within(HANG, "unlock across a long black hole", unlock)
        .await
        .unwrap();
    eprintln!("unlock after a 7 s black hole: {outcome:?}");
    within(HANG, "shutdown", c.shutdown()).await.ok();
    assert!(
        !exists(&server, "unknown-release"),
        "the hold was forgotten while still in Redis (PTTL {})",
        server.cmd(&["PTTL", "unknown-release"])
    );
}

/// The lock kinds whose `force_unlock` frees a held lock.
#[derive(Clone, Copy, Debug)]
enum Forced {
    Plain,
    Fair,
    Write,
}

impl Forced {
    async fn lock(self, c: &leasehold::Client, name: &str) -> leasehold::LockGuard {
        match self {
            Forced::Plain => c.lock(name).lock().await,
            Forced::Fair => c.fair_lock(name).lock().await,
            Forced::Write => c.read_write_lock(name).write().lock().await,
        }
        .unwrap()
    }

    async fn force_unlock(self, c: &leasehold::Client, name: &str) -> bool {
        match self {
            Forced::Plain => c.lock(name).force_unlock().await,
            Forced::Fair => c.fair_lock(name).force_unlock().await,
            Forced::Write => c.read_write_lock(name).write().force_unlock().await,
        }
        .unwrap()
    }
}

/// Issue 29, item 2: a `force_unlock()` whose reply is lost with its
/// connection is sent again by fred after the reconnect. The first run
/// freed the lock and a waiter took it at once; the copy must not free the
/// waiter's lock while its guard says it is not lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlock_whose_reply_is_lost_runs_once() {
    let server = RedisServer::start();
    let (proxy, forcer) = through_proxy(&server).await;
    let holder = client_with(&server, |b| b).await;
    let waiter = client_with(&server, |b| b).await;
    for kind in [Forced::Plain, Forced::Fair, Forced::Write] {
        for round in 0..3 {
            let name = format!("forced-{kind:?}-{round}");
            let held = kind.lock(&holder, &name).await;
            let (w, n) = (waiter.clone(), name.clone());
            let waiting = tokio::spawn(async move { kind.lock(&w, &n).await });
            // The waiter is queued and subscribed before the force-unlock.
            tokio::time::sleep(Duration::from_millis(300)).await;
            proxy.drop_replies_once();
            let freed = within(HANG, "a force-unlock across a cut", async {
                kind.force_unlock(&forcer, &name).await
            })
            .await;
            assert!(freed, "{kind:?}: the first run freed the lock");
            let taken = within(HANG, "the waiter takes the lock", waiting)
                .await
                .unwrap();
            // Long after any copy of the force-unlock could have run again.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let lost = taken.is_lost();
            let on_server = server.cmd(&["EXISTS", &name]) == "1";
            assert!(
                !lost && on_server,
                "{kind:?} round {round}: the waiter's lock was freed by a copy of the \
                 force-unlock (key exists: {on_server}, guard lost: {lost})"
            );
            taken.unlock().await.unwrap();
            drop(held);
        }
    }
}

/// Issue 29, item 3: a copy of a request that reaches Redis after its
/// request record has expired never runs. The first send of an unlock is
/// held back in the proxy while the client's connection dies (fred sends
/// it again on a new one, where it runs); the owner then takes the lock
/// again, and the held copy reaches Redis only after every record of this
/// owner on this lock has expired. Before, that copy ran as a new request
/// and freed the newer hold while its guard said held; now the old
/// connection is killed on the server before the unlock's reply is
/// trusted, so the copy is never read.
#[tokio::test]
async fn a_release_held_longer_than_its_record_lives_never_runs() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr()).await;
    let url = proxy.url();
    let record_ttl = Duration::from_secs(2);
    let c = client_with(&server, |b| {
        b.url(&url)
            .command_timeout(Duration::from_secs(1))
            .request_record_ttl(record_ttl)
    })
    .await;
    let field = format!("{}:{}", c.id(), Owner::current().id());
    for round in 0..4 {
        let name = format!("late-release-{round}");
        let lock = c.lock(&name);
        let first = lock.lock().await.unwrap();
        if round % 2 == 1 {
            // A connection fred makes and drops between two replies: the
            // unlock's first send goes on a connection no sweep has seen.
            let accepted = proxy.accepted_count();
            proxy.cut_all();
            eventually(HANG, "the client reconnects", || {
                proxy.accepted_count() >= accepted + 2
            })
            .await;
        }
        // The release gives back 1 hold, then names its publish command.
        proxy.stall_next_matching(b"\r\n$1\r\n1\r\n$7\r\npublish\r\n");
        within(
            HANG,
            "an unlock whose first send is held back",
            first.unlock(),
        )
        .await
        .unwrap();
        assert_eq!(
            proxy.stalled_count(),
            round + 1,
            "the first send is held back"
        );
        let again = lock.lock().await.unwrap();
        // Past the life of every record of this owner on this lock.
        tokio::time::sleep(record_ttl + Duration::from_millis(500)).await;
        proxy.release_stalled();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let count = server.cmd(&["HGET", &name, &field]);
        assert!(
            count == "1" && !again.is_lost(),
            "round {round}: the late copy of the first unlock ran (count {count:?}, guard \
             lost: {})",
            again.is_lost()
        );
        again.unlock().await.unwrap();
    }
}

/// A request record TTL under two command timeouts is refused.
#[tokio::test]
async fn a_request_record_ttl_under_two_command_timeouts_is_refused() {
    let server = RedisServer::start();
    let built = leasehold::Client::builder()
        .url(&server.url())
        .command_timeout(Duration::from_secs(2))
        .request_record_ttl(Duration::from_secs(3))
        .build()
        .await;
    assert!(
        matches!(built, Err(leasehold::Error::InvalidArgument(_))),
        "{built:?}"
    );
}

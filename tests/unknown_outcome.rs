//! A lock script that reached Redis but whose reply was lost: never
//! counted twice, never left behind.

use leasehold_testkit as support;

use std::time::Duration;

use leasehold::Owner;
use support::fixture::{client_with, eventually, exists, within};
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

//! Issue 44: where the safety argument leaned on a condition it never
//! checked. Each test drives the public API against a real `redis-server`
//! (through the loopback proxy where a copy of a request must be held back)
//! and has a control that shows the set-up itself is sound.

use leasehold_testkit as support;

use std::time::Duration;

use leasehold::{Client, FairLock, Owner};
use support::fixture::{calls, client_with, deny_client_subcommands, eventually, numsub, within};
use support::{Proxy, RedisServer};

const HANG: Duration = Duration::from_secs(60);

/// A server with a password and a user `app` (password `pw`) with every
/// permission but the `CLIENT` subcommands `denied` (such as `kill`).
fn server_with_user(denied: &[&str]) -> RedisServer {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]).with_password("s3cret");
    let mut rules = vec!["ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all"];
    let denied = deny_client_subcommands(denied);
    rules.extend(denied.iter().map(String::as_str));
    assert_eq!(server.cmd(&rules), "OK", "ACL SETUSER {denied:?}");
    server
}

/// A client of `server` as `app`, through `proxy`, that gives a request up
/// after 1 s (and sends it again on a new connection).
async fn app_through(server: &RedisServer, proxy: &Proxy) -> Client {
    let url = format!("redis://app:pw@{}", proxy.addr());
    client_with(server, |b| {
        b.url(&url).command_timeout(Duration::from_secs(1))
    })
    .await
}

/// A client of `server` as `app`, directly.
async fn app_direct(server: &RedisServer) -> Client {
    let url = format!("redis://app:pw@{}", server.addr());
    client_with(server, |b| b.url(&url)).await
}

fn field_of(c: &Client) -> String {
    format!("{}:{}", c.id(), Owner::current().id())
}

/// A release held back in the network (its first copy stalls in the proxy,
/// fred gives the connection up and the release is answered on a new one)
/// whose copy reaches Redis after the same owner locked again. Returns
/// whether the owner's new hold survived the copy (and nobody else got in).
async fn late_release_copy_survives(denied: &[&str], rounds: usize) -> bool {
    let server = server_with_user(denied);
    let proxy = Proxy::start(&server.addr()).await;
    let c = app_through(&server, &proxy).await;
    let other = app_direct(&server).await;
    // Scripts loaded and connections warm.
    c.lock("warm").lock().await.unwrap().unlock().await.unwrap();
    let mut survived = true;
    for round in 0..rounds {
        let name = format!("late-release-{round}");
        let lock = c.lock(&name);
        let ok = Owner::new()
            .scope(async {
                let field = field_of(&c);
                let held = lock.lock().await.unwrap();
                // The release is the only call here that names the publish
                // command (an uncontended acquire announces nothing).
                proxy.stall_next_matching(b"$7\r\npublish\r\n");
                within(
                    HANG,
                    "the release is answered on a new connection",
                    held.unlock(),
                )
                .await
                .unwrap();
                assert_eq!(proxy.stalled_count(), round + 1, "the release is held back");
                assert_eq!(server.cmd(&["EXISTS", &name]), "0", "released");
                let again = within(HANG, "the owner locks again", lock.lock())
                    .await
                    .unwrap();
                let before = calls(&server, "evalsha") + calls(&server, "eval");
                proxy.release_stalled();
                eventually(HANG, "the held copy reaches Redis", || {
                    calls(&server, "evalsha") + calls(&server, "eval") > before
                })
                .await;
                tokio::time::sleep(Duration::from_millis(300)).await;
                let on_server = server.cmd(&["HGET", &name, &field]) == "1";
                let stolen = other.lock(&name).try_lock().await.unwrap();
                let ok = on_server && !again.is_lost() && stolen.is_none();
                if let Some(g) = stolen {
                    g.unlock().await.unwrap();
                }
                let _ = again.unlock().await;
                ok
            })
            .await;
        survived &= ok;
    }
    c.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
    survived
}

/// Control: with the fence allowed (`CLIENT LIST` / `CLIENT KILL`), the old
/// connection is killed before the release's reply is trusted, so its
/// copy never runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_release_copy_frees_nothing_with_the_fence() {
    assert!(late_release_copy_survives(&[], 3).await);
}

/// Item 1: a user that may not list or kill clients. The fence cannot kill
/// the old connection; the client must then keep the request records that
/// make a late copy stale (and send no twin without one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_release_copy_frees_nothing_without_the_fence() {
    assert!(
        late_release_copy_survives(&["list", "kill"], 3).await,
        "a late copy of a release freed a hold taken after it"
    );
}

/// Item 1, with only `CLIENT KILL` refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_release_copy_frees_nothing_without_client_kill() {
    assert!(
        late_release_copy_survives(&["kill"], 3).await,
        "a late copy of a release freed a hold taken after it"
    );
}

/// The fair lock's queue, head first.
fn queue(server: &RedisServer, lock: &FairLock) -> Vec<String> {
    let reply = server.cmd(&["LRANGE", lock.queue_key(), "0", "-1"]);
    reply
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Item 1, the fair lock: a late copy of a timed-out wait's `leave` gives
/// back no grant a later wait of the same owner adopted, for a user that
/// may not list or kill clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_leave_copy_gives_back_no_later_grant_without_the_fence() {
    let server = server_with_user(&["list", "kill"]);
    let proxy = Proxy::start(&server.addr()).await;
    let holder = app_direct(&server).await;
    let url = format!("redis://app:pw@{}", proxy.addr());
    let waiter = client_with(&server, |b| {
        b.url(&url).command_timeout(Duration::from_secs(2))
    })
    .await;
    for round in 0..3 {
        let name = format!("late-leave-{round}");
        let held = holder.fair_lock(&name).lock().await.unwrap();
        let lock = waiter.fair_lock(&name);
        let (proxy_ref, server_ref) = (&proxy, &server);
        let queued = |n: usize| {
            let lock = lock.clone();
            async move {
                eventually(HANG, "waiters queued and listening", || {
                    let q = queue(server_ref, &lock);
                    q.len() == n
                        && q.iter()
                            .all(|f| numsub(server_ref, &format!("{}:{f}", lock.channel())) >= 1)
                })
                .await
            }
        };
        let (second, field) = Owner::new()
            .scope(async {
                let field = field_of(&waiter);
                let first = tokio::spawn({
                    let lock = lock.clone();
                    let owner = Owner::current();
                    owner.scope(async move { lock.try_lock_for(Duration::from_millis(800)).await })
                });
                queued(1).await;
                // The leave: "publish" then 0 (the owner counts no hold).
                proxy_ref.stall_next_matching(b"\r\n$7\r\npublish\r\n$1\r\n0\r\n");
                let first = within(HANG, "the first wait times out", first)
                    .await
                    .unwrap()
                    .unwrap();
                assert!(first.is_none(), "round {round}: the lock is held");
                assert_eq!(
                    proxy_ref.stalled_count(),
                    round + 1,
                    "the leave is held back"
                );
                let second = tokio::spawn({
                    let lock = lock.clone();
                    let owner = Owner::current();
                    owner.scope(async move { lock.lock().await })
                });
                queued(1).await;
                (second, field)
            })
            .await;
        held.unlock().await.unwrap();
        let guard = within(HANG, "the second wait is handed the lock", second)
            .await
            .unwrap()
            .unwrap();
        let before = calls(&server, "evalsha") + calls(&server, "eval");
        proxy.release_stalled();
        eventually(HANG, "the held copy of the leave reaches Redis", || {
            calls(&server, "evalsha") + calls(&server, "eval") > before
        })
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let on_server = server.cmd(&["HEXISTS", &name, &field]) == "1";
        assert!(
            on_server && !guard.is_lost(),
            "round {round}: a late copy of the first wait's leave gave back the second \
             wait's hold (field on server: {on_server}, guard lost: {})",
            guard.is_lost()
        );
        guard.unlock().await.unwrap();
    }
}

//! The live self-test, through the public API, on the private lock
//! `leasehold:doctor:{<uuid>}` (after the key prefix):
//!
//! 1. `selftest.lock`: lock, lock again (the hold count reads 2);
//! 2. `selftest.watchdog`: while held, the lock's `PTTL` rises (a renewal
//!    by the client's watchdog), if its renew interval is within the wait
//!    the options allow;
//! 3. `selftest.wakeup`: a waiter of another [`Owner`] parks on the lock's
//!    channel; two unlocks free the lock; the waiter must get it sooner
//!    than its own re-check could (a renew interval: its re-check is due
//!    no earlier than the holder's lease left, at least two), which only
//!    the unlock message can do; it unlocks;
//! 4. `selftest.cleanup`: no key with the private name is left (`EXISTS`
//!    on every name it used until its request records are deleted, then
//!    `SCAN`), bounded.
//!
//! Every step is bounded; a step that fails skips the ones that need it,
//! and the lock is force-unlocked at the end if anything failed. Cancel:
//! a dropped self-test drops its guards (released in the background) and
//! its waiter (which holds nothing).

use std::time::Duration;

use fred::types::Value;
use tokio::time::{sleep, timeout, Instant};

use super::checks::ms;
use super::perms::Perms;
use super::probe::{args, cmd, cmd_at, Target};
use super::{Check, Status};
use crate::client::Client;
use crate::error::Result;
use crate::owner::Owner;

pub(super) const LOCK: &str = "selftest.lock";
pub(super) const WATCHDOG: &str = "selftest.watchdog";
pub(super) const WAKEUP: &str = "selftest.wakeup";
pub(super) const CLEANUP: &str = "selftest.cleanup";

/// Bound of one step that should take a few round trips.
const STEP: Duration = Duration::from_secs(15);
/// How long request records may take to go (deleted ~100 ms after calls).
const RECORDS_GONE: Duration = Duration::from_secs(5);
/// Bound of the `SCAN` of every node.
const SCAN_BOUND: Duration = Duration::from_secs(10);

/// Runs the self-test; the `selftest.*` checks.
pub(super) async fn run(
    client: &Client,
    target: &Target,
    perms: &Perms,
    renewal_wait: Duration,
) -> Vec<Check> {
    if let Some(why) = &perms.blocked {
        return [LOCK, WATCHDOG, WAKEUP, CLEANUP]
            .iter()
            .map(|n| Check::not_checked(n, format!("skipped: a permission it needs is {why}")))
            .collect();
    }
    let name = perms.private.name.as_str();
    let lock = client.lock(name);
    let interval = client.watchdog().renew_interval();
    let mut out = Vec::new();
    let waiter_owner = Owner::new();

    // 1. Lock and re-enter.
    let started = Instant::now();
    let held = timeout(STEP, async {
        let first = lock.lock().await?;
        let again = lock.lock().await?;
        let holds = lock.hold_count().await?;
        Ok::<_, crate::Error>((first, again, holds))
    })
    .await;
    let (first, again) = match held {
        Ok(Ok((first, again, 2))) => {
            out.push(Check::ok(
                LOCK,
                format!("lock, re-enter (hold count 2) in {}", ms(started.elapsed())),
            ));
            (first, again)
        }
        other => {
            let found = match other {
                Ok(Ok((_, _, holds))) => {
                    format!("re-entered, but the hold count reads {holds}, not 2")
                }
                Ok(Err(e)) => format!("lock failed: {e}"),
                Err(_) => format!("lock did not finish within {STEP:?}"),
            };
            out.push(Check::new(LOCK, Status::Fail, found).advise("see the perm.* checks"));
            for n in [WATCHDOG, WAKEUP] {
                out.push(Check::not_checked(n, "skipped: the lock step failed"));
            }
            let _ = timeout(STEP, lock.force_unlock()).await;
            out.push(cleanup(client, target, perms, &waiter_owner).await);
            return out;
        }
    };

    // 2. The watchdog renews the lease.
    out.push(if interval > renewal_wait {
        Check::not_checked(
            WATCHDOG,
            format!("the watchdog renews every {}: not waited for", ms(interval)),
        )
        .advise(format!(
            "DoctorOptions::renewal_wait({}) or more to see a renewal, or run `leasehold doctor` (3 s watchdog)",
            ms(interval + interval / 2)
        ))
    } else {
        renewal(client, lock.key(), interval).await
    });

    // 3. A waiter woken by the unlock message.
    let before = client.stats();
    let waiter = waiter_owner.scope(lock.try_lock_for(interval * 3 + STEP));
    tokio::pin!(waiter);
    let parked = async {
        let deadline = Instant::now() + STEP;
        while Instant::now() < deadline {
            let now = client.stats();
            if now.subscriptions > before.subscriptions
                && now.busy_attempts >= before.busy_attempts + 2
            {
                return true;
            }
            sleep(Duration::from_millis(10)).await;
        }
        false
    };
    let early = tokio::select! {
        got = &mut waiter => Some(got),
        _ = parked => None,
    };
    let released = async {
        again.unlock().await?;
        let count = lock.hold_count().await?;
        first.unlock().await?;
        Ok::<_, crate::Error>(count)
    };
    let released = timeout(STEP, released).await;
    let freed_at = Instant::now();
    let mut failed = false;
    let wake = match (early, released) {
        (Some(got), _) => {
            failed = true;
            Check::new(
                WAKEUP,
                Status::Fail,
                format!(
                    "the waiter ended while the lock was held: {:?}",
                    got.map(|g| g.is_some())
                ),
            )
        }
        (None, Ok(Ok(1))) => woken(&mut waiter, freed_at, interval).await,
        (None, Ok(Ok(n))) => {
            failed = true;
            Check::new(
                WAKEUP,
                Status::Fail,
                format!("after one unlock of two the hold count reads {n}, not 1"),
            )
        }
        (None, Ok(Err(e))) => {
            failed = true;
            Check::new(WAKEUP, Status::Fail, format!("unlock failed: {e}"))
                .advise("see perm.channels: a release publishes inside its script")
        }
        (None, Err(_)) => {
            failed = true;
            Check::new(
                WAKEUP,
                Status::Fail,
                format!("unlock did not finish within {STEP:?}"),
            )
        }
    };
    failed |= wake.status == Status::Fail;
    out.push(wake);
    if failed {
        let _ = timeout(STEP, lock.force_unlock()).await;
    }
    out.push(cleanup(client, target, perms, &waiter_owner).await);
    out
}

/// Waits for the parked `waiter` after the lock was freed at `freed_at`;
/// unlocks what it got.
async fn woken<F>(
    waiter: &mut std::pin::Pin<&mut F>,
    freed_at: Instant,
    interval: Duration,
) -> Check
where
    F: std::future::Future<Output = Result<Option<crate::LockGuard>>>,
{
    let got = timeout(interval, waiter.as_mut()).await;
    let check = match got {
        Ok(Ok(Some(guard))) => {
            let after = freed_at.elapsed();
            let found = format!(
                "unlocked twice (1 hold left after the first); a waiter of another owner was woken {} after the unlock (its own re-check was not due for {}+)",
                ms(after),
                ms(interval)
            );
            return match guard.unlock().await {
                Ok(()) => Check::ok(WAKEUP, found),
                Err(e) => Check::new(
                    WAKEUP,
                    Status::Fail,
                    format!("{found}; its unlock failed: {e}"),
                ),
            };
        }
        Ok(Ok(None)) => Check::new(
            WAKEUP,
            Status::Fail,
            "the waiter timed out without the lock",
        ),
        Ok(Err(e)) => Check::new(WAKEUP, Status::Fail, format!("the waiter failed: {e}")),
        Err(_) => {
            // Not woken by the message: does its re-check get it?
            match timeout(interval * 3 + STEP, waiter.as_mut()).await {
                Ok(Ok(Some(guard))) => {
                    let after = freed_at.elapsed();
                    let _ = guard.unlock().await;
                    Check::new(
                        WAKEUP,
                        Status::Fail,
                        format!(
                            "the waiter got the lock only by its re-check, {} after the unlock",
                            ms(after)
                        ),
                    )
                }
                _ => Check::new(WAKEUP, Status::Fail, "the waiter was never woken"),
            }
        }
    };
    check.advise(
        "unlock messages do not reach waiters: check perm.channels, and that nothing between \
         the client and Redis drops pub/sub (a proxy without pub/sub support)",
    )
}

/// Watches the lock's `PTTL` rise: a renewal by the watchdog.
async fn renewal(client: &Client, key: &str, interval: Duration) -> Check {
    let redis = client.redis();
    let deadline = Instant::now() + interval * 2 + Duration::from_secs(1);
    let started = Instant::now();
    let mut low: Option<i64> = None;
    while Instant::now() < deadline {
        let pttl = match cmd_at::<i64>(redis, key, "PTTL", args(&[key])).await {
            Ok(p) => p,
            Err(e) => {
                return Check::not_checked(WATCHDOG, format!("PTTL refused ({})", e.details()))
            }
        };
        if pttl < 0 {
            return Check::new(
                WATCHDOG,
                Status::Fail,
                format!("the held lock's PTTL reads {pttl}"),
            );
        }
        match low {
            Some(l) if pttl > l + (interval.as_millis() as i64) / 2 => {
                return Check::ok(
                    WATCHDOG,
                    format!(
                        "PTTL rose from {l} ms to {pttl} ms {} after the lock: renewed (every {})",
                        ms(started.elapsed()),
                        ms(interval)
                    ),
                );
            }
            Some(l) if l <= pttl => {}
            _ => low = Some(pttl),
        }
        sleep(Duration::from_millis(50)).await;
    }
    Check::new(
        WATCHDOG,
        Status::Fail,
        format!(
            "no renewal seen in {} (renew interval {})",
            ms(started.elapsed()),
            ms(interval)
        ),
    )
    .advise("see the latency check and the client's logs: renewals are not getting through")
}

/// `selftest.cleanup`: nothing with the private name is left.
async fn cleanup(client: &Client, target: &Target, perms: &Perms, waiter: &Owner) -> Check {
    let redis = client.redis();
    let p = &perms.private;
    let records = [Owner::current(), *waiter]
        .map(|o| crate::naming::request_record_key(&p.key, &client.field(o.id(), "")))
        .map(|k| String::from_utf8_lossy(k.as_bytes()).into_owned());
    let names: Vec<&str> = [&p.key, &p.queue, &p.timeouts, &p.token]
        .into_iter()
        .map(String::as_str)
        .chain(records.iter().map(String::as_str))
        .collect();
    let deadline = Instant::now() + RECORDS_GONE;
    let mut left = Vec::new();
    loop {
        left.clear();
        for name in &names {
            match cmd_at::<i64>(redis, name, "EXISTS", args(&[name])).await {
                Ok(1) => left.push(name.to_string()),
                Ok(_) => {}
                Err(e) => {
                    return Check::not_checked(CLEANUP, format!("EXISTS refused ({})", e.details()))
                }
            }
        }
        if left.is_empty() || Instant::now() >= deadline {
            break;
        }
        sleep(Duration::from_millis(50)).await;
    }
    if left.contains(&p.key) {
        return Check::new(
            CLEANUP,
            Status::Fail,
            format!("the private lock `{}` is still there", p.key),
        );
    }
    if !left.is_empty() {
        return Check::new(
            CLEANUP,
            Status::Warn,
            format!(
                "request record(s) left after {}: {}",
                ms(RECORDS_GONE),
                left.join(", ")
            ),
        )
        .advise("they expire with their TTL (at least 30 s); a call's outcome stayed unknown");
    }
    let uuid = p
        .name
        .rsplit('{')
        .next()
        .unwrap_or("")
        .trim_end_matches('}');
    match scan(redis, target, uuid).await {
        Ok(found) if found.is_empty() => Check::ok(
            CLEANUP,
            format!(
                "no key with the private name `{}` left (EXISTS, SCAN)",
                p.name
            ),
        ),
        Ok(found) => Check::new(
            CLEANUP,
            Status::Fail,
            format!("left behind: {}", found.join(", ")),
        ),
        Err(why) => Check::ok(
            CLEANUP,
            format!(
                "none of the {} names it used is left (EXISTS; SCAN: {why})",
                names.len()
            ),
        ),
    }
}

/// Every key containing `needle`, on every node (`SCAN … MATCH`), within
/// [`SCAN_BOUND`]; the reason when it could not look everywhere.
async fn scan(
    redis: &fred::clients::Client,
    target: &Target,
    needle: &str,
) -> std::result::Result<Vec<String>, String> {
    let deadline = Instant::now() + SCAN_BOUND;
    let pattern = format!("*{needle}*");
    let mut found = Vec::new();
    for node in &target.nodes {
        let mut cursor = "0".to_owned();
        loop {
            let reply = cmd::<Value>(
                redis,
                node.server.as_ref(),
                "SCAN",
                args(&[&cursor, "MATCH", &pattern, "COUNT", "1000"]),
            )
            .await
            .map_err(|e| format!("refused ({})", e.details()))?;
            let mut parts = reply.into_array().into_iter();
            cursor = parts
                .next()
                .and_then(|c| c.as_string())
                .unwrap_or_else(|| "0".to_owned());
            let keys = parts.next().map(Value::into_array).unwrap_or_default();
            found.extend(keys.into_iter().filter_map(|k| k.as_string()));
            if cursor == "0" {
                break;
            }
            if Instant::now() >= deadline {
                return Err(format!("not finished within {SCAN_BOUND:?}"));
            }
        }
    }
    Ok(found)
}

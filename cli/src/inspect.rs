//! Showing lock-family objects: the table and the JSON of `inspect`,
//! `watch` and `unlock --force`. What the objects are, and how they are
//! found and freed, is the library's ([`leasehold::inspect`],
//! [`leasehold::LockObject::force_unlock`]): no key naming here.

use leasehold::{LockObject, ObjectKind};
use serde_json::{json, Value as Json};

use crate::Result;

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Frees `o` with the library's own force unlock of its kind
/// ([`LockObject::force_unlock`]), through a leasehold client on the same
/// server (`redis`'s config: one server, a cluster or Sentinel, as given).
/// The client keeps no record. Whether anything was freed.
pub(crate) async fn force_unlock(redis: &fred::prelude::Client, o: &LockObject) -> Result<bool> {
    use fred::interfaces::ClientLike;
    let client = leasehold::Client::builder()
        .config(redis.client_config())
        .client_record(false)
        .build()
        .await?;
    let freed = o.force_unlock(&client).await;
    let closed = client.shutdown().await;
    let freed = freed?;
    closed?;
    Ok(freed)
}

// === output ===

pub(crate) fn ms(ms: i64) -> String {
    match ms {
        m if m < 0 => "-".to_owned(),
        m if m < 1000 => format!("{m}ms"),
        m if m < 60_000 => format!("{:.1}s", m as f64 / 1000.0),
        m => format!("{}m{:02}s", m / 60_000, (m % 60_000) / 1000),
    }
}

fn short(field: &str) -> String {
    // The uuid's first 8 characters and the rest: `3f2a1b0c…:7`.
    match field.split_once(':') {
        Some((id, rest)) if id.len() > 8 => format!("{}…:{rest}", &id[..8]),
        _ => field.to_owned(),
    }
}

fn who(app: &Option<String>, host: &Option<String>, pid: Option<u32>) -> String {
    match (app, host, pid) {
        (Some(app), Some(host), Some(pid)) => format!("{app}@{host}/{pid}"),
        (Some(app), _, _) => app.clone(),
        _ => "foreign".to_owned(),
    }
}

/// The inspect table.
pub(crate) fn table(objects: &[LockObject]) -> String {
    let mut rows = vec![[
        "NAME".to_owned(),
        "KIND".to_owned(),
        "TTL".to_owned(),
        "HOLDERS".to_owned(),
        "WAITERS".to_owned(),
    ]];
    for o in objects {
        let mut holders: Vec<String> = o
            .holders
            .iter()
            .map(|h| {
                format!(
                    "{} x{} {}",
                    short(&h.field),
                    h.holds,
                    who(&h.app, &h.host, h.pid)
                )
            })
            .collect();
        if let Some(mode) = &o.mode {
            holders.insert(0, format!("[{mode}]"));
        }
        match o.kind {
            ObjectKind::Semaphore => holders.push(format!(
                "{} out, {} free{}",
                o.permits.len(),
                o.count.unwrap_or(0),
                o.permits
                    .iter()
                    .map(|p| format!(
                        " {}…({})",
                        &p.id[..p.id.len().min(8)],
                        p.expires_in_ms.map_or("no expiry".into(), ms)
                    ))
                    .collect::<String>()
            )),
            ObjectKind::CountDownLatch => holders.push(format!("count {}", o.count.unwrap_or(0))),
            ObjectKind::SemaphoreOrLatch => holders.push(format!(
                "count {} (no permit out, nobody waiting)",
                o.count.unwrap_or(0)
            )),
            ObjectKind::FencedLock => holders.push(format!("token {}", o.token.unwrap_or(0))),
            _ => {}
        }
        let mut waiters: Vec<String> = o
            .waiters
            .iter()
            .map(|w| {
                format!(
                    "{} {} {}",
                    short(&w.field),
                    w.app.as_deref().unwrap_or("?"),
                    ms(w.waiting_ms as i64)
                )
            })
            .collect();
        if !o.queue.is_empty() {
            waiters.push(format!(
                "queue: {}",
                o.queue
                    .iter()
                    .map(|q| format!(
                        "{} {}",
                        short(&q.field),
                        q.app.as_deref().unwrap_or("foreign")
                    ))
                    .collect::<Vec<_>>()
                    .join(" < ")
            ));
        }
        rows.push([
            o.name.clone(),
            o.kind.to_string(),
            ms(o.ttl_ms),
            if holders.is_empty() {
                "-".to_owned()
            } else {
                holders.join(", ")
            },
            if waiters.is_empty() {
                "-".to_owned()
            } else {
                waiters.join(", ")
            },
        ]);
    }
    render(&rows)
}

/// Rows as left-aligned columns.
pub(crate) fn render<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < N {
                line.extend(std::iter::repeat_n(
                    ' ',
                    widths[i] - cell.chars().count() + 2,
                ));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

// === JSON ===

/// One object as a JSON line.
pub(crate) fn to_json(o: &LockObject) -> Json {
    let holders: Vec<Json> = o
        .holders
        .iter()
        .map(|h| {
            json!({"field": h.field, "client": h.client, "owner": h.owner, "holds": h.holds,
                       "app": h.app, "host": h.host, "pid": h.pid})
        })
        .collect();
    let waiters: Vec<Json> = o
        .waiters
        .iter()
        .map(|w| json!({"field": w.field, "app": w.app, "waiting_ms": w.waiting_ms}))
        .collect();
    let mut out = json!({
        "name": o.name,
        "kind": o.kind.as_str(),
        "ttl_ms": if o.ttl_ms == -2 { Json::Null } else { json!(o.ttl_ms) },
        "holders": holders,
        "waiters": waiters,
    });
    let extra = out.as_object_mut().expect("an object");
    match o.kind {
        ObjectKind::ReadWriteLock => {
            extra.insert("mode".into(), json!(o.mode));
        }
        ObjectKind::FairLock => {
            let queue: Vec<Json> = o
                .queue
                .iter()
                .map(|q| json!({"field": q.field, "app": q.app, "timeout_in_ms": q.timeout_in_ms}))
                .collect();
            extra.insert("queue".into(), json!(queue));
        }
        ObjectKind::FencedLock => {
            extra.insert("token".into(), json!(o.token));
        }
        ObjectKind::Semaphore => {
            extra.insert("available".into(), json!(o.count));
            let permits: Vec<Json> = o
                .permits
                .iter()
                .map(|p| json!({"id": p.id, "expires_in_ms": p.expires_in_ms}))
                .collect();
            extra.insert("permits".into(), json!(permits));
        }
        ObjectKind::CountDownLatch | ObjectKind::SemaphoreOrLatch => {
            extra.insert("count".into(), json!(o.count));
        }
        _ => {}
    }
    out
}

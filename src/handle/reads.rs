//! The reads every kind of the lock family shares (their hash: Redisson's
//! `<uuid>:<id>[suffix]` → count) beyond one command, for `RawSingle`'s
//! provided methods: the current owner's hold count, and who holds it
//! ([`LockHandle::holders`](crate::LockHandle::holders)). Whether the hash
//! exists and its TTL are one `Conn` read each (`core/read.rs`).
//!
//! The holders are read by one read-only script (`scripts/holders.lua`)
//! with the hash's TTL; each field is parsed into the client uuid and
//! owner id when it has leasehold's (and Redisson's `RLock`) shape
//! `<uuid>:<decimal id>` (a write lock's holder: with `:write` after it),
//! and kept raw otherwise.

use std::time::Duration;

use crate::client::Client;
use crate::core::kind::{Key, Value};
use crate::core::script::Script;
use crate::error::{Error, Result};
use crate::handle::Holder;
use crate::owner::Owner;

/// Read the hash and its TTL. Read-only.
static HOLDERS: Script = Script::plain("lock.holders", include_str!("scripts/holders.lua"));

/// The holds `client`'s current owner has in field `<client>:<owner><suffix>`
/// of the hash `key` (every kind's `hold_count`).
pub(crate) async fn hold_count_of(client: &Client, key: &Key, suffix: &str) -> Result<u32> {
    let field = client.field(Owner::current().id(), suffix);
    let count = client.engine().conn().hash_int(key, field).await?;
    Ok(count.unwrap_or(0).clamp(0, u32::MAX as i64) as u32)
}

/// The holders of the lock hash `key`. Every kind of the lock family keeps
/// Redisson's `<uuid>:<id>[suffix]` → count hash (the read-write lock its
/// `mode` field beside them): `owner_part` says, for each field, the part
/// to read as `<uuid>:<id>`, or `None` to leave the field out.
pub(crate) async fn holders_of(
    client: &Client,
    key: &Key,
    owner_part: impl Fn(&str) -> Option<&str>,
) -> Result<Vec<Holder>> {
    let reply: Value = client
        .engine()
        .conn()
        .eval(&HOLDERS, std::slice::from_ref(key), &[])
        .await?;
    parse(reply, owner_part)
        .ok_or_else(|| Error::protocol("unexpected reply to the holders script"))
}

/// For [`holders_of`]: every field is a holder's, read whole (the plain,
/// fenced and fair locks' hash).
pub(crate) fn every_field(field: &str) -> Option<&str> {
    Some(field)
}

/// Reads the script's reply: `{pttl, field, value, …}`.
fn parse(reply: Value, owner_part: impl Fn(&str) -> Option<&str>) -> Option<Vec<Holder>> {
    let Value::Array(items) = reply else {
        return None;
    };
    let mut items = items.into_iter();
    let ttl = items.next()?.as_i64()?;
    let remaining_lease = (ttl >= 0).then(|| Duration::from_millis(ttl as u64));
    let mut holders = Vec::with_capacity(items.len() / 2);
    while let (Some(field), Some(value)) = (items.next(), items.next()) {
        let field = text(&field)?;
        let Some(owner_part) = owner_part(&field) else {
            continue;
        };
        let (client, owner) = match split_field(owner_part) {
            Some((client, owner)) => (Some(client), Some(owner)),
            None => (None, None),
        };
        let holds = text(&value)?.trim().parse::<u64>().unwrap_or(0);
        holders.push(Holder {
            field,
            client,
            owner,
            holds,
            remaining_lease,
        });
    }
    Some(holders)
}

/// A bulk string's text (invalid UTF-8 replaced).
fn text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.to_string()),
        Value::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::Integer(n) => Some(n.to_string()),
        _ => None,
    }
}

/// `<uuid>:<decimal id>` → (uuid, id).
fn split_field(field: &str) -> Option<(uuid::Uuid, u64)> {
    let (client, owner) = field.split_once(':')?;
    if owner.is_empty() || !owner.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((uuid::Uuid::try_parse(client).ok()?, owner.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_parse_when_they_have_the_owner_shape() {
        let id = uuid::Uuid::new_v4();
        assert_eq!(split_field(&format!("{id}:42")), Some((id, 42)));
        assert_eq!(split_field(&format!("{id}:42:write")), None);
        assert_eq!(split_field(&format!("{id}:")), None);
        assert_eq!(split_field(&format!("{id}:-1")), None);
        assert_eq!(split_field(&format!("{id}:+1")), None);
        assert_eq!(split_field("not-a-uuid:1"), None);
        assert_eq!(split_field("plain"), None);
        assert_eq!(split_field(&format!("{id}:99999999999999999999999")), None);
    }
}

/// The script's pieces share only what they declare (`core/lua_lint.rs`).
#[cfg(test)]
mod lua_lint {
    #[test]
    fn pieces_share_only_what_they_declare() {
        crate::core::lua_lint::check(&[&super::HOLDERS]);
    }
}

//! The names the crate writes in Redis: Redisson's naming rules (a
//! prefixed name, a suffixed name, a lock's key and channel in one
//! buffer), the owner fields, and the request records' keys. Shared by the
//! engine, the primitives, the operators' inspection and the doctor; it
//! names no primitive and uses nothing else of the crate.

use fred::bytes_utils::Str;

/// Redisson's `prefixName`: `prefix:{name}`, or `prefix:name` when the
/// name already has braces, so the result shares the name's hash slot.
pub(crate) fn prefix_name(prefix: &str, name: &str) -> String {
    let (open, close) = braces(name.contains('{'));
    concat([prefix, open, name, close])
}

/// What [`prefix_name`] puts around a name: braces unless it has some.
fn braces(has_braces: bool) -> (&'static str, &'static str) {
    if has_braces {
        (":", "")
    } else {
        (":{", "}")
    }
}

/// A lock's key (`key_prefix` + `name`) followed by its channel
/// (`prefix_name(channel_prefix, key)`), written once into one buffer:
/// returns it and the key's length. The key and channel a handle sends,
/// and the strings it and its guards show, are slices of this buffer: one
/// allocation per handle, shared by every record and guard of the lock.
pub(crate) fn key_then_channel(key_prefix: &str, name: &str, channel_prefix: &str) -> (Str, usize) {
    let (open, close) = braces(key_prefix.contains('{') || name.contains('{'));
    let text = concat([
        key_prefix,
        name,
        channel_prefix,
        open,
        key_prefix,
        name,
        close,
    ]);
    (Str::from(text), key_prefix.len() + name.len())
}

/// Redisson's `suffixName`: `{name}:suffix`, or `name:suffix` when the
/// name already has braces, so the result shares the name's hash slot.
pub(crate) fn suffix_name(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        concat([name, ":", suffix])
    } else {
        concat(["{", name, "}:", suffix])
    }
}

/// The request record of `field` on `key` (see `call.rs`): in `key`'s slot.
pub(crate) fn request_record_key(key: &str, field: &str) -> fred::types::Key {
    fred::types::Key::from(concat(request_record_parts(key, field)))
}

/// The parts of [`request_record_key`], in order: the prefix, what [`braces`] opens
/// with, `key`, what it closes with, `:`, `field`. (A lease record writes
/// them after its channel, see `names.rs`.)
pub(crate) fn request_record_parts<'a>(key: &'a str, field: &'a str) -> [&'a str; 6] {
    let (open, close) = braces(key.contains('{'));
    [REQUEST_RECORD_PREFIX, open, key, close, ":", field]
}

/// The prefix of a request record's key (see [`request_record_key`]).
pub(crate) const REQUEST_RECORD_PREFIX: &str = "leasehold_latch";

/// An owner's hash field: `prefix` (the client's `<client-uuid>:`), the
/// owner id, then `suffix` (Redisson's `<uuid>:<thread-id>`).
pub(crate) fn owner_field(prefix: &str, owner: u64, suffix: &str) -> String {
    use std::fmt::Write as _;
    // One allocation: the prefix, at most 20 digits, the suffix.
    let mut field = String::with_capacity(prefix.len() + 20 + suffix.len());
    field.push_str(prefix);
    let _ = write!(field, "{owner}");
    field.push_str(suffix);
    field
}

/// `parts` joined, in one allocation of exactly their length (names are
/// built on every acquire: no `format!` growth, and a `Bytes` made from
/// the result needs no second header allocation).
pub(crate) fn concat<'a, I>(parts: I) -> String
where
    I: IntoIterator<Item = &'a str>,
    I::IntoIter: Clone,
{
    let parts = parts.into_iter();
    let mut out = String::with_capacity(parts.clone().map(str::len).sum());
    parts.for_each(|part| out.push_str(part));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_record_is_in_its_keys_slot() {
        assert_eq!(
            request_record_key("orders:42", "id:7"),
            fred::types::Key::from("leasehold_latch:{orders:42}:id:7")
        );
        assert_eq!(
            request_record_key("{t}:a", "id:7"),
            fred::types::Key::from("leasehold_latch:{t}:a:id:7")
        );
    }

    /// A handle's one buffer holds exactly the key and the channel
    /// `prefix_name` makes from it (Redisson's brace rule, applied to the
    /// whole key: prefix and name).
    #[test]
    fn a_key_then_its_channel_in_one_buffer() {
        for (prefix, name) in [
            ("", "orders:42"),
            ("app:", "orders:42"),
            ("{app}:", "orders:42"),
            ("app:", "{t}:x"),
            ("", ""),
            ("é:", "ünï"),
        ] {
            let (text, key_len) = key_then_channel(prefix, name, "redisson_lock__channel");
            let key = format!("{prefix}{name}");
            assert_eq!(&text[..key_len], key);
            assert_eq!(
                &text[key_len..],
                prefix_name("redisson_lock__channel", &key)
            );
        }
        let (text, key_len) = key_then_channel("", "a", "redisson_lock__channel");
        assert_eq!(&text[key_len..], "redisson_lock__channel:{a}");
    }
}

//! The names a lease record sends: its key, field, request record and channel,
//! written once into one buffer.
//!
//! A lease is sent by name on every acquire, release and renewal, and a
//! process may hold a lease per lock for a long time, so the names are a
//! large share of what a held lock costs. They overlap: the request record is
//! `leasehold_latch:{<key>}:<field>` (see `call.rs`), so it contains the key
//! and ends with the field. One buffer holds the channel, then the request record
//! key; the key and the field are slices of the request record. The lease
//! record keeps that buffer and four offsets instead of four separate
//! strings (and two more allocations).
//!
//! Each name is handed out as a slice of the buffer: a reference count, no
//! copy.

use fred::bytes::Bytes;
use fred::bytes_utils::Str;
use fred::types::Key;

use crate::error::{Error, Result};
use crate::naming::request_record_parts;

/// A lease's key, field, request record and channel in one buffer.
#[derive(Clone)]
pub(crate) struct LeaseNames {
    /// The channel, then the request record.
    buf: Bytes,
    /// Where the request record starts (the channel's length).
    record_at: u32,
    /// The key's place inside the request record.
    key_at: u32,
    key_len: u32,
    /// Where the field starts (the request record's tail).
    field_at: u32,
}

impl LeaseNames {
    /// The names of `field` on `key`, released on `channel`.
    /// [`Error::InvalidArgument`] if they do not fit in 4 GiB (Redis refuses
    /// a name over 512 MB anyway).
    pub(crate) fn new(key: &str, field: &str, channel: &[u8]) -> Result<LeaseNames> {
        let record = request_record_parts(key, field);
        let len = channel.len() + record.iter().map(|part| part.len()).sum::<usize>();
        let at = |n: usize| {
            u32::try_from(n).map_err(|_| {
                Error::invalid(format!("lock name of {} bytes is too long", key.len()))
            })
        };
        let mut buf = Vec::with_capacity(len);
        buf.extend_from_slice(channel);
        for part in record {
            buf.extend_from_slice(part.as_bytes());
        }
        Ok(LeaseNames {
            record_at: at(channel.len())?,
            // After the request record's prefix and opening brace.
            key_at: at(channel.len() + record[0].len() + record[1].len())?,
            key_len: at(key.len())?,
            field_at: at(len - field.len())?,
            buf: Bytes::from(buf),
        })
    }

    /// Where the key is in the buffer.
    fn key_range(&self) -> std::ops::Range<usize> {
        self.key_at as usize..(self.key_at + self.key_len) as usize
    }

    /// The key's bytes.
    pub(crate) fn key_bytes(&self) -> &[u8] {
        &self.buf[self.key_range()]
    }

    /// The key as text (it was given as a `&str`).
    pub(crate) fn key_str(&self) -> &str {
        std::str::from_utf8(self.key_bytes()).unwrap_or_default()
    }

    /// The key, to send.
    pub(crate) fn key(&self) -> Key {
        Key::from(self.buf.slice(self.key_range()))
    }

    /// The field's bytes.
    pub(crate) fn field_bytes(&self) -> &[u8] {
        &self.buf[self.field_at as usize..]
    }

    /// The field, to send.
    pub(crate) fn field(&self) -> Str {
        Str::from_inner(self.buf.slice(self.field_at as usize..))
            .unwrap_or_else(|_| unreachable!("the field was given as a `&str`"))
    }

    /// The request record, to send.
    pub(crate) fn request_record(&self) -> Key {
        Key::from(self.buf.slice(self.record_at as usize..))
    }

    /// The channel, to send.
    pub(crate) fn channel(&self) -> Key {
        Key::from(self.buf.slice(..self.record_at as usize))
    }
}

impl std::fmt::Debug for LeaseNames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseNames")
            .field("key", &String::from_utf8_lossy(self.key_bytes()))
            .field("field", &String::from_utf8_lossy(self.field_bytes()))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name is the one the separate helpers make, and all are slices
    /// of one buffer.
    #[test]
    fn the_names_are_slices_of_one_buffer_and_match_the_helpers() {
        for (key, field, channel) in [
            (
                "orders:42",
                "0b6e-uuid:7",
                "redisson_lock__channel:{orders:42}",
            ),
            ("{tenant}:x", "c:1", "redisson_lock__channel:{tenant}:x"),
            ("", "", ""),
            ("k", "ünï{c}ode:9", "ch"),
        ] {
            let names = LeaseNames::new(key, field, channel.as_bytes()).expect("fits");
            assert_eq!(names.key(), Key::from(key));
            assert_eq!(names.key_str(), key);
            assert_eq!(names.key_bytes(), key.as_bytes());
            assert_eq!(&*names.field(), field);
            assert_eq!(names.field_bytes(), field.as_bytes());
            assert_eq!(
                names.request_record(),
                crate::naming::request_record_key(key, field)
            );
            assert_eq!(names.channel(), Key::from(channel));
            let whole = names.buf.as_ptr_range();
            for part in [names.key_bytes(), names.field_bytes()] {
                assert!(part.is_empty() || whole.contains(&part.as_ptr()));
            }
        }
    }
}

//! One script argument carrying many byte strings: a MessagePack array of
//! strings, which a script reads back with `cmsgpack.unpack` (built into
//! Redis's Lua since 2.6).
//!
//! The watchdog sends a batch of a thousand leases as one such argument
//! instead of two thousand: the client copies each key and field once
//! into one buffer, where the driver would otherwise clone, frame and drop
//! two reference-counted values per lease on two threads (most of a
//! renewal cycle's client CPU, see BENCHMARKS.md). Redis builds the same
//! Lua strings either way.
//!
//! Only the oldest string formats are written (fixstr, str16 = raw16,
//! str32 = raw32), which every `cmsgpack` Redis ever shipped reads; the
//! bytes are taken as they are (a Lua string is any bytes).

use fred::bytes::Bytes;

/// A MessagePack array of byte strings, written as it grows.
#[derive(Debug)]
pub(crate) struct Pack {
    buf: Vec<u8>,
    len: u32,
}

/// Bytes before the first element: the array32 header.
const HEADER: usize = 5;

impl Pack {
    /// An empty array with room for about `bytes` bytes of strings.
    pub(crate) fn with_capacity(bytes: usize) -> Pack {
        let mut buf = Vec::with_capacity(HEADER + bytes);
        buf.extend_from_slice(&[0xdd, 0, 0, 0, 0]);
        Pack { buf, len: 0 }
    }

    /// Appends one string.
    pub(crate) fn push(&mut self, s: &[u8]) {
        let n = s.len();
        if n < 32 {
            self.buf.push(0xa0 | n as u8);
        } else if let Ok(n) = u16::try_from(n) {
            self.buf.push(0xda);
            self.buf.extend_from_slice(&n.to_be_bytes());
        } else {
            // A Redis string is at most 512 MB: it fits 32 bits.
            self.buf.push(0xdb);
            self.buf.extend_from_slice(&(n as u32).to_be_bytes());
        }
        self.buf.extend_from_slice(s);
        self.len += 1;
    }

    /// Bytes written so far.
    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    /// The encoded array.
    pub(crate) fn finish(mut self) -> Bytes {
        self.buf[1..HEADER].copy_from_slice(&self.len.to_be_bytes());
        Bytes::from(self.buf)
    }
}

#[cfg(test)]
mod tests {
    use super::Pack;

    #[test]
    fn encodes_an_array_of_strings_in_the_oldest_formats() {
        let mut p = Pack::with_capacity(0);
        p.push(b"");
        p.push(b"abc");
        p.push(&[b'x'; 31]);
        p.push(&[b'y'; 32]);
        p.push(&[0u8; 65_535]);
        p.push(&[1u8; 65_536]);
        let out = p.finish();
        let mut want = vec![0xdd, 0, 0, 0, 6, 0xa0, 0xa3, b'a', b'b', b'c', 0xbf];
        want.extend_from_slice(&[b'x'; 31]);
        want.extend_from_slice(&[0xda, 0, 32]);
        want.extend_from_slice(&[b'y'; 32]);
        want.extend_from_slice(&[0xda, 0xff, 0xff]);
        want.extend_from_slice(&[0u8; 65_535]);
        want.extend_from_slice(&[0xdb, 0, 1, 0, 0]);
        want.extend_from_slice(&[1u8; 65_536]);
        assert_eq!(&out[..], &want[..]);
    }

    #[test]
    fn an_empty_array_is_only_its_header() {
        assert_eq!(&Pack::with_capacity(8).finish()[..], &[0xdd, 0, 0, 0, 0]);
    }
}

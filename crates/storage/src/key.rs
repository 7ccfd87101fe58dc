//! Order-preserving key encoding: typed keys become byte strings whose
//! lexicographic order is the typed order, so one ordered index over bytes serves
//! integers, strings and tuples of them.
//!
//! - unsigned integers: big-endian;
//! - signed integers: big-endian with the sign bit flipped;
//! - strings and byte strings: `0x00` escaped as `0x00 0xFF`, terminated by
//!   `0x00 0x01`, so a prefix sorts first and a tuple's later fields cannot leak
//!   into the comparison of an earlier one;
//! - tuples: the concatenation of their fields.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;

/// Longest encoded key accepted by a relation.
pub const MAX_KEY_BYTES: usize = 4096;

/// Bytes kept inline before a key moves to the heap. Keeps `EncodedKey` at 16
/// bytes: index entries are a large share of a relation's memory, and keys of up
/// to 14 bytes (a `u64`, a `(u32, u64)`) cost no allocation.
const INLINE_KEY_BYTES: usize = 14;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyDecodeError {
    #[error("key ended after {at} bytes while decoding {what}")]
    Truncated { what: &'static str, at: usize },
    #[error("invalid escape byte {byte:#04x} in a string key at byte {at}")]
    BadEscape { byte: u8, at: usize },
    #[error("string key is not UTF-8")]
    NotUtf8,
    #[error("{extra} trailing bytes after the key")]
    Trailing { extra: usize },
}

/// A type that encodes to an order-preserving byte string.
pub trait KeyCodec: Sized {
    fn encode_into(&self, out: &mut Vec<u8>);
    /// Decodes one value from the front of `input`, advancing it.
    fn decode_from(input: &mut &[u8]) -> Result<Self, KeyDecodeError>;

    fn encode(&self) -> EncodedKey {
        let mut buf = Vec::with_capacity(16);
        self.encode_into(&mut buf);
        EncodedKey::from_slice(&buf)
    }

    fn decode(mut input: &[u8]) -> Result<Self, KeyDecodeError> {
        let value = Self::decode_from(&mut input)?;
        if !input.is_empty() {
            return Err(KeyDecodeError::Trailing { extra: input.len() });
        }
        Ok(value)
    }
}

fn take<const N: usize>(input: &mut &[u8], what: &'static str) -> Result<[u8; N], KeyDecodeError> {
    if input.len() < N {
        return Err(KeyDecodeError::Truncated {
            what,
            at: input.len(),
        });
    }
    let (head, rest) = input.split_at(N);
    *input = rest;
    Ok(head.try_into().expect("split_at gave N bytes"))
}

macro_rules! unsigned_key {
    ($($t:ty),*) => {$(
        impl KeyCodec for $t {
            fn encode_into(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_be_bytes());
            }
            fn decode_from(input: &mut &[u8]) -> Result<Self, KeyDecodeError> {
                Ok(<$t>::from_be_bytes(take(input, stringify!($t))?))
            }
        }
    )*};
}
unsigned_key!(u8, u16, u32, u64, u128);

macro_rules! signed_key {
    ($($t:ty => $u:ty),*) => {$(
        impl KeyCodec for $t {
            fn encode_into(&self, out: &mut Vec<u8>) {
                let flipped = (*self as $u) ^ (1 << (<$u>::BITS - 1));
                out.extend_from_slice(&flipped.to_be_bytes());
            }
            fn decode_from(input: &mut &[u8]) -> Result<Self, KeyDecodeError> {
                let raw = <$u>::from_be_bytes(take(input, stringify!($t))?);
                Ok((raw ^ (1 << (<$u>::BITS - 1))) as $t)
            }
        }
    )*};
}
signed_key!(i8 => u8, i16 => u16, i32 => u32, i64 => u64, i128 => u128);

impl KeyCodec for bool {
    fn encode_into(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }
    fn decode_from(input: &mut &[u8]) -> Result<Self, KeyDecodeError> {
        Ok(take::<1>(input, "bool")?[0] != 0)
    }
}

fn encode_bytes(bytes: &[u8], out: &mut Vec<u8>) {
    out.reserve(bytes.len() + 2);
    if !bytes.contains(&0) {
        out.extend_from_slice(bytes);
    } else {
        for &b in bytes {
            out.push(b);
            if b == 0 {
                out.push(0xFF);
            }
        }
    }
    out.extend_from_slice(&[0x00, 0x01]);
}

fn decode_bytes(input: &mut &[u8]) -> Result<Vec<u8>, KeyDecodeError> {
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        let Some(&b) = input.get(i) else {
            return Err(KeyDecodeError::Truncated {
                what: "string",
                at: i,
            });
        };
        if b != 0 {
            out.push(b);
            i += 1;
            continue;
        }
        match input.get(i + 1) {
            Some(0xFF) => {
                out.push(0);
                i += 2;
            }
            Some(0x01) => {
                *input = &input[i + 2..];
                return Ok(out);
            }
            Some(&byte) => return Err(KeyDecodeError::BadEscape { byte, at: i + 1 }),
            None => {
                return Err(KeyDecodeError::Truncated {
                    what: "string",
                    at: i + 1,
                })
            }
        }
    }
}

impl KeyCodec for Vec<u8> {
    fn encode_into(&self, out: &mut Vec<u8>) {
        encode_bytes(self, out);
    }
    fn decode_from(input: &mut &[u8]) -> Result<Self, KeyDecodeError> {
        decode_bytes(input)
    }
}

impl KeyCodec for String {
    fn encode_into(&self, out: &mut Vec<u8>) {
        encode_bytes(self.as_bytes(), out);
    }
    fn decode_from(input: &mut &[u8]) -> Result<Self, KeyDecodeError> {
        String::from_utf8(decode_bytes(input)?).map_err(|_| KeyDecodeError::NotUtf8)
    }
}

macro_rules! tuple_key {
    ($($name:ident),+) => {
        impl<$($name: KeyCodec),+> KeyCodec for ($($name,)+) {
            #[allow(non_snake_case)]
            fn encode_into(&self, out: &mut Vec<u8>) {
                let ($($name,)+) = self;
                $($name.encode_into(out);)+
            }
            fn decode_from(input: &mut &[u8]) -> Result<Self, KeyDecodeError> {
                Ok(($($name::decode_from(input)?,)+))
            }
        }
    };
}
tuple_key!(A);
tuple_key!(A, B);
tuple_key!(A, B, C);
tuple_key!(A, B, C, D);
tuple_key!(A, B, C, D, E);

/// Bytes of a long key's start kept next to its heap pointer (what fits
/// beside the enum's tag in 16 bytes): comparisons decided by them never
/// touch the heap.
const HEAD_BYTES: usize = 7;

/// An encoded key as stored in a relation's index: short keys inline, long keys
/// on the heap (behind a thin pointer, to keep the type at 16 bytes) with
/// their first bytes also inline. Ordered as its bytes.
#[derive(Clone)]
pub enum EncodedKey {
    Inline {
        len: u8,
        bytes: [u8; INLINE_KEY_BYTES],
    },
    Heap {
        head: [u8; HEAD_BYTES],
        bytes: Box<Box<[u8]>>,
    },
}

impl EncodedKey {
    pub fn from_slice(bytes: &[u8]) -> Self {
        if bytes.len() <= INLINE_KEY_BYTES {
            let mut inline = [0u8; INLINE_KEY_BYTES];
            inline[..bytes.len()].copy_from_slice(bytes);
            EncodedKey::Inline {
                len: bytes.len() as u8,
                bytes: inline,
            }
        } else {
            EncodedKey::Heap {
                head: bytes[..HEAD_BYTES].try_into().expect("long keys"),
                bytes: Box::new(Box::from(bytes)),
            }
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        match self {
            EncodedKey::Inline { len, bytes } => &bytes[..usize::from(*len)],
            EncodedKey::Heap { bytes, .. } => bytes,
        }
    }
}

impl Borrow<[u8]> for EncodedKey {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for EncodedKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}
impl Eq for EncodedKey {}

impl PartialOrd for EncodedKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl EncodedKey {
    /// The first 7 bytes, zero-padded, as a big-endian integer (read without
    /// touching the heap). Comparing these first decides most comparisons with
    /// one integer compare; zero padding is safe because a shorter key that
    /// matches so far sorts first either way.
    fn prefix(&self) -> u64 {
        let head: &[u8; HEAD_BYTES] = match self {
            EncodedKey::Inline { bytes, .. } => bytes[..HEAD_BYTES]
                .try_into()
                .expect("inline keys hold at least 7 bytes"),
            EncodedKey::Heap { head, .. } => head,
        };
        head_prefix(head)
    }
}

fn head_prefix(head: &[u8; HEAD_BYTES]) -> u64 {
    let mut word = [0u8; 8];
    word[..HEAD_BYTES].copy_from_slice(head);
    u64::from_be_bytes(word)
}

impl Ord for EncodedKey {
    fn cmp(&self, other: &Self) -> Ordering {
        match self.prefix().cmp(&other.prefix()) {
            Ordering::Equal => self.as_slice().cmp(other.as_slice()),
            unequal => unequal,
        }
    }
}

/// A borrowed key to look up in the hashed index of [`EncodedKey`]s without
/// building one, which for a key longer than the inline size would cost two
/// allocations per lookup.
pub(crate) struct KeyProbe<'a> {
    bytes: &'a [u8],
}

impl<'a> KeyProbe<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        KeyProbe { bytes }
    }
}

impl scc::Equivalent<EncodedKey> for KeyProbe<'_> {
    fn equivalent(&self, key: &EncodedKey) -> bool {
        self.bytes == key.as_slice()
    }
}

/// Hashes as an [`EncodedKey`] of the same bytes (what a hashed index needs).
impl std::hash::Hash for KeyProbe<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.bytes.hash(state);
    }
}

impl std::hash::Hash for EncodedKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl fmt::Debug for EncodedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EncodedKey({:02x?})", self.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn enc<K: KeyCodec>(k: &K) -> Vec<u8> {
        let mut v = Vec::new();
        k.encode_into(&mut v);
        v
    }

    #[test]
    fn encoded_key_is_16_bytes() {
        assert_eq!(std::mem::size_of::<EncodedKey>(), 16);
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        assert!(matches!(
            u64::decode(&[1, 2]),
            Err(KeyDecodeError::Truncated { .. })
        ));
        assert!(matches!(
            String::decode(&[b'a', 0, 7]),
            Err(KeyDecodeError::BadEscape { .. })
        ));
        assert!(matches!(
            String::decode(&[0xC3, 0, 1]),
            Err(KeyDecodeError::NotUtf8)
        ));
        assert!(matches!(
            u8::decode(&[1, 2]),
            Err(KeyDecodeError::Trailing { extra: 1 })
        ));
    }

    proptest! {
        #[test]
        fn i64_order_preserved(a: i64, b: i64) {
            prop_assert_eq!(a.cmp(&b), enc(&a).cmp(&enc(&b)));
            prop_assert_eq!(i64::decode(&enc(&a)).unwrap(), a);
        }

        #[test]
        fn u32_order_preserved(a: u32, b: u32) {
            prop_assert_eq!(a.cmp(&b), enc(&a).cmp(&enc(&b)));
        }

        #[test]
        fn tuple_order_preserved(a: (String, i32, Vec<u8>), b: (String, i32, Vec<u8>)) {
            prop_assert_eq!(a.cmp(&b), enc(&a).cmp(&enc(&b)));
            prop_assert_eq!(<(String, i32, Vec<u8>)>::decode(&enc(&a)).unwrap(), a);
        }

        #[test]
        fn encoded_key_orders_as_bytes(a: Vec<u8>, b: Vec<u8>) {
            let (ka, kb) = (EncodedKey::from_slice(&a), EncodedKey::from_slice(&b));
            prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
            prop_assert_eq!(ka.as_slice(), &a[..]);
        }

        #[test]
        fn probe_equals_as_encoded_key(a: Vec<u8>, b: Vec<u8>) {
            use scc::Equivalent;
            let probe = KeyProbe::new(&a);
            let kb = EncodedKey::from_slice(&b);
            prop_assert_eq!(probe.equivalent(&kb), a == b);
        }

        #[test]
        fn decode_never_panics(bytes: Vec<u8>) {
            let _ = <(String, u16, Vec<u8>)>::decode(&bytes);
        }
    }
}

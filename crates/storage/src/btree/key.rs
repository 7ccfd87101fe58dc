//! Keys as the tree stores them: two atomic words per slot, so a reader that
//! copies a slot while a writer changes it (optimistic lock coupling reads
//! without locks) gets two words that are each some value the slot held,
//! and every such pair is safe to interpret.
//!
//! - A key of at most 15 bytes is inline: word `a` is bytes 0..8 big-endian
//!   (zero-padded), word `b` is bytes 8..15 big-endian in its high seven
//!   bytes and the length (0..=15) in its low byte. Comparing two inline keys
//!   is at most three integer comparisons.
//! - A longer key is on the heap: word `a` is still bytes 0..8, word `b` is
//!   the allocation's address shifted left by 8 with the low byte `0xFF`.
//!   The allocation (length, then bytes) is immutable and freed only through
//!   epoch-based reclamation, so a torn pair whose `b` says "heap" points at a
//!   live key.
//!
//! A vacated slot of a live node is cleared to the empty inline key, so a
//! stale count cannot lead a reader to an allocation already freed.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::cmp::Ordering;

use crate::sync::Guard;

pub(crate) const INLINE_KEY_MAX_BYTES: usize = 15;
const HEAP_TAG: u64 = 0xFF;
const LEN_MASK: u64 = 0xFF;
/// Addresses must fit in 56 bits to be packed beside the tag: user-space
/// addresses do on x86-64 and AArch64 (48-bit, or 57-bit with the upper half
/// the kernel's).
const ADDRESS_LIMIT: u64 = 1 << 56;

const _: () = assert!(
    std::mem::size_of::<usize>() == 8,
    "the index packs 64-bit addresses"
);

/// A copy of a slot's two words. For a heap key it does not own the
/// allocation: it is valid while the epoch guard it was read under is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotKey {
    pub(crate) a: u64,
    pub(crate) b: u64,
}

fn be_word(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    let n = bytes.len().min(8);
    word[..n].copy_from_slice(&bytes[..n]);
    u64::from_be_bytes(word)
}

/// Bytes 8..15 of `bytes` (zero-padded) in the high seven bytes of a word.
fn tail_word(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    if bytes.len() > 8 {
        let tail = &bytes[8..bytes.len().min(INLINE_KEY_MAX_BYTES)];
        word[..tail.len()].copy_from_slice(tail);
    }
    u64::from_be_bytes(word)
}

impl SlotKey {
    /// The cleared slot: the empty inline key.
    pub(crate) const EMPTY: SlotKey = SlotKey { a: 0, b: 0 };

    /// A key owning its heap allocation when longer than 15 bytes.
    pub(crate) fn new_owned(bytes: &[u8]) -> SlotKey {
        let a = be_word(bytes);
        if bytes.len() <= INLINE_KEY_MAX_BYTES {
            return SlotKey {
                a,
                b: tail_word(bytes) | bytes.len() as u64,
            };
        }
        let address = alloc_heap_key(bytes) as u64;
        assert!(
            address < ADDRESS_LIMIT,
            "heap key address {address:#x} beyond 56 bits"
        );
        SlotKey {
            a,
            b: (address << 8) | HEAP_TAG,
        }
    }

    pub(crate) fn is_heap(self) -> bool {
        self.b & LEN_MASK == HEAP_TAG
    }

    fn heap_ptr(self) -> *const u8 {
        debug_assert!(self.is_heap());
        (self.b >> 8) as usize as *const u8
    }

    /// The key's bytes; inline keys are written into `buf`.
    ///
    /// # Safety
    /// A heap key's allocation must be live: the key was read from a slot
    /// under an epoch guard that is still held (or is owned by the caller).
    pub(crate) unsafe fn bytes<'a>(&self, buf: &'a mut [u8; 16]) -> &'a [u8] {
        if self.is_heap() {
            return heap_bytes(self.heap_ptr());
        }
        buf[..8].copy_from_slice(&self.a.to_be_bytes());
        buf[8..].copy_from_slice(&self.b.to_be_bytes());
        // A torn read of an inline pair still has a length of at most 15.
        let len = ((self.b & LEN_MASK) as usize).min(INLINE_KEY_MAX_BYTES);
        &buf[..len]
    }

    /// An owned copy (a new allocation for a heap key).
    ///
    /// # Safety
    /// As for [`SlotKey::bytes`].
    pub(crate) unsafe fn clone_owned(self) -> SlotKey {
        if !self.is_heap() {
            return self;
        }
        SlotKey::new_owned(heap_bytes(self.heap_ptr()))
    }

    /// Frees a heap key's allocation now.
    ///
    /// # Safety
    /// The caller owns the key and no reader can still reach it.
    pub(crate) unsafe fn free(self) {
        if self.is_heap() {
            free_heap_key(self.heap_ptr() as *mut u8);
        }
    }

    /// Frees a heap key's allocation once every guard alive now is gone.
    pub(crate) fn retire(self, guard: &Guard) {
        if !self.is_heap() {
            return;
        }
        let address = self.heap_ptr() as usize;
        guard.defer_execute(move || {
            // SAFETY: the key left every slot before it was retired, and the
            // epoch has passed every guard that could have copied it.
            unsafe { free_heap_key(address as *mut u8) }
        });
    }
}

/// A key to search with, prepared once per operation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Probe<'a> {
    a: u64,
    tail: u64,
    pub(crate) bytes: &'a [u8],
}

impl<'a> Probe<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Probe {
            a: be_word(bytes),
            tail: tail_word(bytes),
            bytes,
        }
    }

    /// Orders this key against a slot's key.
    ///
    /// # Safety
    /// As for [`SlotKey::bytes`]: the slot was copied under a live guard.
    pub(crate) unsafe fn cmp_slot(&self, slot: SlotKey) -> Ordering {
        if self.a != slot.a {
            return self.a.cmp(&slot.a);
        }
        if !slot.is_heap() {
            let tail = slot.b & !LEN_MASK;
            if self.tail != tail {
                return self.tail.cmp(&tail);
            }
            // The first 15 bytes agree (with zero padding): the shorter key is
            // a prefix of the longer, so it sorts first; a probe over 15 bytes
            // is longer than any inline key.
            return self.bytes.len().cmp(&((slot.b & LEN_MASK) as usize));
        }
        self.bytes.cmp(heap_bytes(slot.heap_ptr()))
    }
}

const HEAP_HEADER_BYTES: usize = 8;

fn heap_layout(len: usize) -> Layout {
    Layout::from_size_align(HEAP_HEADER_BYTES + len, 8).expect("heap key layout")
}

fn alloc_heap_key(bytes: &[u8]) -> *mut u8 {
    let layout = heap_layout(bytes.len());
    // SAFETY: non-zero size; the header and bytes are written before use.
    unsafe {
        let ptr = alloc(layout);
        if ptr.is_null() {
            handle_alloc_error(layout);
        }
        (ptr as *mut u64).write(bytes.len() as u64);
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr.add(HEAP_HEADER_BYTES), bytes.len());
        ptr
    }
}

unsafe fn heap_bytes<'a>(ptr: *const u8) -> &'a [u8] {
    let len = (ptr as *const u64).read() as usize;
    std::slice::from_raw_parts(ptr.add(HEAP_HEADER_BYTES), len)
}

unsafe fn free_heap_key(ptr: *mut u8) {
    let len = (ptr as *const u64).read() as usize;
    dealloc(ptr, heap_layout(len));
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn owned_cmp(a: &[u8], b: &[u8]) -> Ordering {
        let slot = SlotKey::new_owned(b);
        // SAFETY: owned by this test until freed below.
        let order = unsafe { Probe::new(a).cmp_slot(slot) };
        let mut buf = [0u8; 16];
        // SAFETY: as above.
        assert_eq!(unsafe { slot.bytes(&mut buf) }, b);
        // SAFETY: never shared.
        unsafe { slot.free() };
        order
    }

    #[test]
    fn boundary_lengths_order_as_bytes() {
        let keys: Vec<Vec<u8>> = vec![
            vec![],
            vec![0],
            vec![0, 0],
            vec![1; 8],
            vec![1; 9],
            vec![1; 15],
            [vec![1; 15], vec![0]].concat(),
            vec![1; 16],
            vec![1; 40],
            vec![2],
        ];
        for a in &keys {
            for b in &keys {
                assert_eq!(owned_cmp(a, b), a.cmp(b), "{a:?} vs {b:?}");
            }
        }
    }

    proptest! {
        #[test]
        fn slot_order_is_byte_order(a in proptest::collection::vec(0u8..4, 0..24),
                                    b in proptest::collection::vec(0u8..4, 0..24)) {
            prop_assert_eq!(owned_cmp(&a, &b), a.cmp(&b));
        }
    }
}

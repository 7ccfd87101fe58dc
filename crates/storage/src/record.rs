//! Records: one heap block per record holding Silo's TID word, the value length
//! and the value itself as atomic words, so a committer can overwrite a value in
//! place (no allocation per write) while readers copy it optimistically under the
//! TID word's seqlock. Values longer than the record's inline capacity live in an
//! overflow buffer whose pointer sits in the first word; replaced overflow
//! buffers and unlinked records are freed through epoch-based reclamation.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::ptr::NonNull;

use crate::sync::{AtomicU32, AtomicU64, Guard, Ordering};
use crate::tid::{Tid, TidWord};

const WORD_BYTES: usize = 8;

#[repr(C)]
struct Header {
    tid: TidWord,
    /// Value length in bytes; read and written under the TID word's seqlock.
    len: AtomicU32,
    /// Inline capacity in words; fixed at allocation.
    inline_words: u32,
    /// Under loom, the record's place in the global lock order (see
    /// [`RecordRef`]'s `Ord`).
    #[cfg(loom)]
    serial: u64,
}

/// Out-of-line storage for a value longer than the inline capacity; immutable
/// once published.
struct Overflow {
    words: Box<[AtomicU64]>,
}

/// A pointer to a record. Records are owned by their relation's index; a
/// `RecordRef` is valid while the epoch guard under which it was found is held.
/// Records order by address: the global order committers lock in.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[cfg_attr(not(loom), derive(PartialOrd, Ord))]
pub struct RecordRef(NonNull<Header>);

/// Under loom, records order by allocation serial instead: still one global
/// order (serials are unique within a model iteration), and the same in
/// every iteration, which loom's replay of a schedule needs (addresses are
/// not). Comparing reads the records, which the caller's guard keeps live.
#[cfg(loom)]
impl Ord for RecordRef {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.header().serial.cmp(&other.header().serial)
    }
}

#[cfg(loom)]
impl PartialOrd for RecordRef {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

// SAFETY: every mutable field of a record is atomic; the block is freed only
// through epoch-based reclamation after it is unreachable.
unsafe impl Send for RecordRef {}
unsafe impl Sync for RecordRef {}

fn layout(inline_words: u32) -> Layout {
    // Each word holds `WORD_BYTES` of the value; its own size is 8 bytes too
    // except under loom, whose atomics are larger.
    let word_size = std::mem::size_of::<AtomicU64>();
    let bytes = std::mem::size_of::<Header>() + inline_words as usize * word_size;
    Layout::from_size_align(bytes, std::mem::align_of::<Header>()).expect("record layout")
}

fn words_for(len: usize) -> usize {
    len.div_ceil(WORD_BYTES)
}

fn store_words(words: &[AtomicU64], value: &[u8]) {
    debug_assert!(words.len() * WORD_BYTES >= value.len());
    let mut chunks = value.chunks_exact(WORD_BYTES);
    for (word, chunk) in words.iter().zip(&mut chunks) {
        word.store(
            u64::from_ne_bytes(chunk.try_into().expect("8 bytes")),
            Ordering::Relaxed,
        );
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        let mut last = [0u8; WORD_BYTES];
        last[..tail.len()].copy_from_slice(tail);
        words[value.len() / WORD_BYTES].store(u64::from_ne_bytes(last), Ordering::Relaxed);
    }
}

fn load_words(words: &[AtomicU64], len: usize, out: &mut Vec<u8>) {
    let n = words_for(len).min(words.len());
    out.clear();
    out.resize(n * WORD_BYTES, 0);
    for (chunk, word) in out.chunks_exact_mut(WORD_BYTES).zip(&words[..n]) {
        chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_ne_bytes());
    }
    out.truncate(len);
}

impl RecordRef {
    /// The record's address, as the B+-tree stores it in a leaf slot.
    pub(crate) fn as_raw(self) -> u64 {
        self.0.as_ptr() as usize as u64
    }

    /// The record at `raw` (`None` for zero, a cleared slot). The tree never
    /// dereferences it; whoever does must hold the guard it was read under.
    pub(crate) fn from_raw(raw: u64) -> Option<RecordRef> {
        NonNull::new(raw as usize as *mut Header).map(RecordRef)
    }

    /// An absent placeholder with inline room for a value of `capacity_bytes`,
    /// so the insert that creates it writes its value without another allocation.
    pub fn placeholder(capacity_bytes: usize) -> RecordRef {
        let record = RecordRef::allocate(Tid::PLACEHOLDER, &[]);
        if capacity_bytes <= record.inline_bytes() {
            return record;
        }
        // SAFETY: never published.
        unsafe { record.free() };
        RecordRef::allocate_with_capacity(Tid::PLACEHOLDER, &[], capacity_bytes)
    }

    /// Allocates a record holding `value` with TID word `tid`.
    pub fn allocate(tid: Tid, value: &[u8]) -> RecordRef {
        RecordRef::allocate_with_capacity(tid, value, value.len())
    }

    fn allocate_with_capacity(tid: Tid, value: &[u8], capacity_bytes: usize) -> RecordRef {
        debug_assert!(value.len() <= capacity_bytes);
        let inline_words = words_for(capacity_bytes).max(1);
        let inline_words =
            u32::try_from(inline_words).expect("value length bounded by MAX_VALUE_BYTES");
        let layout = layout(inline_words);
        // SAFETY: the layout has a non-zero size (the header).
        let ptr = unsafe { alloc(layout) } as *mut Header;
        let Some(ptr) = NonNull::new(ptr) else {
            handle_alloc_error(layout)
        };
        // SAFETY: freshly allocated block of the right layout; every word is
        // initialised before the record is published.
        unsafe {
            ptr.as_ptr().write(Header {
                tid: TidWord::new(tid),
                len: AtomicU32::new(value.len() as u32),
                inline_words,
                #[cfg(loom)]
                serial: crate::sync::next_serial(),
            });
            let words = ptr.as_ptr().add(1) as *mut AtomicU64;
            for i in 0..inline_words as usize {
                words.add(i).write(AtomicU64::new(0));
            }
        }
        let record = RecordRef(ptr);
        store_words(record.inline(), value);
        record
    }

    fn header(&self) -> &Header {
        // SAFETY: a RecordRef points at a live record (see the type's contract).
        unsafe { self.0.as_ref() }
    }

    fn inline(&self) -> &[AtomicU64] {
        let n = self.header().inline_words as usize;
        // SAFETY: the words follow the header in the same allocation.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().add(1) as *const AtomicU64, n) }
    }

    fn inline_bytes(&self) -> usize {
        self.header().inline_words as usize * WORD_BYTES
    }

    pub fn tid(&self) -> &TidWord {
        &self.header().tid
    }

    /// Copies the value with no synchronisation beyond the atomics themselves;
    /// the caller validates the copy (under the seqlock, or not at all for the
    /// no-concurrency-control baseline).
    fn copy_value(&self, out: &mut Vec<u8>) {
        let len = self.header().len.load(Ordering::Relaxed) as usize;
        if len <= self.inline_bytes() {
            load_words(self.inline(), len, out);
            return;
        }
        let overflow = self.inline()[0].load(Ordering::Acquire) as *const Overflow;
        if overflow.is_null() {
            out.clear(); // torn read; the seqlock retries it
            return;
        }
        // SAFETY: overflow buffers are freed only after an epoch in which no
        // guard that could have seen the pointer is still alive.
        let overflow = unsafe { &*overflow };
        load_words(&overflow.words, len, out);
    }

    /// Silo's stable read of the value into `out`; returns the TID it matches.
    pub fn read_into(&self, out: &mut Vec<u8>) -> Tid {
        self.tid().stable_read(|| self.copy_value(out)).0
    }

    /// Reads the TID word only (for absent checks without copying the value).
    pub fn load_tid(&self) -> Tid {
        self.tid().load()
    }

    /// Writes a new value in place when it fits (inline or in the current
    /// overflow buffer), else in a new overflow buffer. The caller holds the TID
    /// word's lock: concurrent readers are detected by the seqlock, but two
    /// concurrent writers would both retire the same replaced buffer.
    pub fn write_value(&self, value: &[u8], guard: &Guard) {
        let header = self.header();
        let old_len = header.len.load(Ordering::Relaxed) as usize;
        let old_overflow = if old_len > self.inline_bytes() {
            self.inline()[0].load(Ordering::Relaxed) as *mut Overflow
        } else {
            std::ptr::null_mut()
        };
        if value.len() <= self.inline_bytes() {
            store_words(self.inline(), value);
        } else if !old_overflow.is_null() && value.len() <= overflow_bytes(old_overflow) {
            // SAFETY: the overflow buffer is live while it is published in this
            // record, and only the lock holder replaces it.
            store_words(unsafe { &(*old_overflow).words }, value);
            header.len.store(value.len() as u32, Ordering::Relaxed);
            return;
        } else {
            let words: Box<[AtomicU64]> = (0..words_for(value.len()))
                .map(|_| AtomicU64::new(0))
                .collect();
            store_words(&words, value);
            let overflow = Box::into_raw(Box::new(Overflow { words }));
            self.inline()[0].store(overflow as u64, Ordering::Release);
        }
        header.len.store(value.len() as u32, Ordering::Relaxed);
        if !old_overflow.is_null() {
            retire_overflow(old_overflow, guard);
        }
    }

    /// Frees the record now.
    ///
    /// # Safety
    /// The record must be unreachable: unlinked from its index, and no guard that
    /// could have observed it may still be alive (or the whole relation is being
    /// dropped with exclusive access).
    pub unsafe fn free(self) {
        let header = self.header();
        let len = header.len.load(Ordering::Relaxed) as usize;
        if len > self.inline_bytes() {
            let overflow = self.inline()[0].load(Ordering::Relaxed) as *mut Overflow;
            if !overflow.is_null() {
                drop(Box::from_raw(overflow));
            }
        }
        let layout = layout(header.inline_words);
        dealloc(self.0.as_ptr() as *mut u8, layout);
    }

    /// Frees the record once every guard alive now has been dropped.
    pub fn retire(self, guard: &Guard) {
        let addr = self.0.as_ptr() as usize;
        guard.defer_execute(move || {
            let record = RecordRef(NonNull::new(addr as *mut Header).expect("non-null record"));
            // SAFETY: the caller unlinked the record before retiring it, and the
            // epoch has advanced past every guard that could have seen it.
            unsafe { record.free() }
        });
    }

    /// The no-concurrency-control baseline's read: copy the value without
    /// checking the TID word at all.
    pub fn raw_read_into(&self, out: &mut Vec<u8>) {
        self.copy_value(out)
    }

    /// Bytes the record occupies on the heap, excluding allocator overhead.
    pub fn heap_bytes(&self) -> usize {
        layout(self.header().inline_words).size()
    }
}

fn overflow_bytes(overflow: *const Overflow) -> usize {
    // SAFETY: see the caller.
    let words: &[AtomicU64] = unsafe { &(*overflow).words };
    words.len() * WORD_BYTES
}

fn retire_overflow(overflow: *mut Overflow, guard: &Guard) {
    let addr = overflow as usize;
    guard.defer_execute(move || {
        // SAFETY: the pointer was replaced in its record before retirement and no
        // guard that could have loaded it is alive any more.
        drop(unsafe { Box::from_raw(addr as *mut Overflow) })
    });
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::tid::LATEST_BIT;

    #[test]
    fn values_round_trip_inline_and_overflow() {
        let guard = Guard::new();
        let record = RecordRef::allocate(Tid::new(1, 0, LATEST_BIT), b"hello");
        let mut out = Vec::new();
        record.read_into(&mut out);
        assert_eq!(out, b"hello");
        for value in [
            &b"12345678"[..],
            b"",
            &[7u8; 100][..],
            b"tiny",
            &[9u8; 3][..],
        ] {
            record.tid().lock();
            record.write_value(value, &guard);
            record.tid().unlock_to(Tid::new(1, 1, LATEST_BIT));
            record.read_into(&mut out);
            assert_eq!(out, value);
        }
        drop(guard);
        // SAFETY: never published to any index.
        unsafe { record.free() };
    }

    #[test]
    fn placeholders_make_room_for_the_inserted_value() {
        let guard = Guard::new();
        let record = RecordRef::placeholder(100);
        assert_eq!(record.heap_bytes(), 16 + 104);
        record.tid().lock();
        record.write_value(&[3u8; 100], &guard);
        record.tid().unlock_to(Tid::new(1, 1, LATEST_BIT));
        let mut out = Vec::new();
        record.read_into(&mut out);
        assert_eq!(out, [3u8; 100]);
        drop(guard);
        // SAFETY: never published.
        unsafe { record.free() };
    }

    #[test]
    fn hundred_byte_record_is_120_bytes() {
        let record = RecordRef::allocate(Tid::PLACEHOLDER, &[0u8; 100]);
        assert_eq!(record.heap_bytes(), 16 + 104);
        // SAFETY: never published.
        unsafe { record.free() };
    }
}

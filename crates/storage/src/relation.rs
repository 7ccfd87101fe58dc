//! Relations: ordered maps from encoded keys to records on a concurrent B+-tree
//! (`scc::TreeIndex`). The index holds record pointers; records hold the TID
//! word and the value, so the index never changes when a value does.

use std::ops::Bound;

use scc::{Guard, TreeIndex};

use crate::key::{EncodedKey, KeyProbe};
use crate::record::RecordRef;
use crate::tid::{Tid, LATEST_BIT};

/// Direction of a range scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanDirection {
    Forward,
    Reverse,
}

/// A relation: one ordered index of records.
pub struct Relation {
    name: String,
    index: TreeIndex<EncodedKey, RecordRef>,
}

impl std::fmt::Debug for Relation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relation")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Owned bounds of a key range over encoded keys.
pub type KeyBounds<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

impl Relation {
    pub(crate) fn new(name: &str) -> Self {
        Relation {
            name: name.to_owned(),
            index: TreeIndex::new(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Number of index entries, including absent placeholders not yet unlinked.
    pub fn index_len(&self) -> usize {
        self.index.len()
    }

    pub(crate) fn lookup(&self, key: &[u8], guard: &Guard) -> Option<RecordRef> {
        // Search with a probe rather than a slice so the index compares with
        // `EncodedKey`'s integer-prefix order instead of `memcmp`, and rather
        // than an `EncodedKey` so a long key is not copied to the heap.
        self.index.peek(&KeyProbe::new(key), guard).copied()
    }

    /// Finds the record for `key`, creating an absent placeholder if there is
    /// none. Returns the record and whether this call created it.
    pub(crate) fn lookup_or_insert_placeholder(
        &self,
        key: &[u8],
        value_capacity_bytes: usize,
        guard: &Guard,
    ) -> (RecordRef, bool) {
        // Bounded: each failed insert means another thread linked a record for
        // this key, which the next lookup finds unless it is unlinked again.
        for _ in 0..1_000_000 {
            if let Some(record) = self.lookup(key, guard) {
                return (record, false);
            }
            let record = RecordRef::placeholder(value_capacity_bytes);
            match self.index.insert_sync(EncodedKey::from_slice(key), record) {
                Ok(()) => return (record, true),
                // SAFETY: never published.
                Err((_, record)) => unsafe { record.free() },
            }
        }
        panic!("placeholder insert for a key lost a million races in a row");
    }

    /// Links an absent placeholder for `key`, which a lookup just found
    /// missing, or finds the record linked since. Returns the record and
    /// whether this call created it.
    pub(crate) fn insert_placeholder_or_find(
        &self,
        key: &[u8],
        value_capacity_bytes: usize,
        guard: &Guard,
    ) -> (RecordRef, bool) {
        let record = RecordRef::placeholder(value_capacity_bytes);
        match self.index.insert_sync(EncodedKey::from_slice(key), record) {
            Ok(()) => (record, true),
            Err((_, record)) => {
                // SAFETY: never published.
                unsafe { record.free() };
                self.lookup_or_insert_placeholder(key, value_capacity_bytes, guard)
            }
        }
    }

    /// Unlinks `record` from the index if it is still the entry for `key`, and
    /// retires it. The caller has already cleared its latest bit.
    pub(crate) fn unlink(&self, key: &[u8], record: RecordRef, guard: &Guard) {
        debug_assert!(!record.load_tid().is_latest());
        if self
            .index
            .remove_if_sync(&KeyProbe::new(key), |current| *current == record)
        {
            record.retire(guard);
        }
    }

    pub(crate) fn range<'a>(
        &'a self,
        bounds: KeyBounds<'a>,
        direction: ScanDirection,
        guard: &'a Guard,
    ) -> impl DoubleEndedIterator<Item = (&'a EncodedKey, &'a RecordRef)> + use<'a> {
        self.index
            .range::<[u8], KeyBounds<'a>>(self.clamp(bounds, direction, guard), guard)
    }

    /// Moves the bound a scan starts from onto the first (or last) key when it
    /// lies outside the keys: a forward scan's lower bound below the first
    /// key, a reverse scan's upper bound above the last. `scc` 3.8's range
    /// scans starting from such a bound walk the leaf list from every inner
    /// node (0.5 s for a 10-row scan of 200k records, measured; 5 us moved).
    /// The range only shrinks, by keys absent when the first key was read; a
    /// key inserted there later is a phantom that commit's re-scan (which
    /// moves the bound again) sees.
    fn clamp<'a>(
        &'a self,
        (lower, upper): KeyBounds<'a>,
        direction: ScanDirection,
        guard: &'a Guard,
    ) -> KeyBounds<'a> {
        let mut keys = self.index.iter(guard);
        match direction {
            ScanDirection::Forward => match (lower, keys.next()) {
                (Bound::Included(k) | Bound::Excluded(k), Some((first, _)))
                    if k < first.as_slice() =>
                {
                    (Bound::Included(first.as_slice()), upper)
                }
                (lower, _) => (lower, upper),
            },
            ScanDirection::Reverse => match (upper, keys.next_back()) {
                (Bound::Included(k) | Bound::Excluded(k), Some((last, _)))
                    if k > last.as_slice() =>
                {
                    (lower, Bound::Included(last.as_slice()))
                }
                (upper, _) => (lower, upper),
            },
        }
    }

    // ---- The no-concurrency-control baseline: the same index and records, no
    // TID checks, no read set, no validation. Used only to measure OCC's cost.

    /// Baseline point read.
    pub fn raw_get(&self, key: &[u8], out: &mut Vec<u8>) -> bool {
        let guard = Guard::new();
        match self.lookup(key, &guard) {
            Some(record) if !record.load_tid().is_absent() => {
                record.raw_read_into(out);
                true
            }
            _ => false,
        }
    }

    /// Baseline write: overwrite in place, or insert a new record. The record's
    /// lock bit is held around the copy as a latch (memory safety when an
    /// overflow buffer is replaced); the TID version is left alone.
    pub fn raw_put(&self, key: &[u8], value: &[u8]) {
        let guard = Guard::new();
        let (record, _) = self.lookup_or_insert_placeholder(key, value.len(), &guard);
        raw_write(record, value, &guard);
    }

    /// Baseline read-modify-write with one index traversal: copies the value
    /// into `buf`, lets `modify` change it, writes it back. No isolation: two
    /// concurrent updates of one key may lose one. Returns false if absent.
    pub fn raw_update(
        &self,
        key: &[u8],
        buf: &mut Vec<u8>,
        modify: impl FnOnce(&mut Vec<u8>),
    ) -> bool {
        let guard = Guard::new();
        match self.lookup(key, &guard) {
            Some(record) if !record.load_tid().is_absent() => {
                record.raw_read_into(buf);
                modify(buf);
                raw_write(record, buf, &guard);
                true
            }
            _ => false,
        }
    }

    /// Baseline scan: visits up to `limit` present records in order.
    pub fn raw_scan(
        &self,
        bounds: KeyBounds<'_>,
        direction: ScanDirection,
        limit: usize,
        value: &mut Vec<u8>,
        mut visit: impl FnMut(&[u8], &[u8]),
    ) -> usize {
        let guard = Guard::new();
        let mut seen = 0;
        let mut each = |key: &EncodedKey, record: &RecordRef| {
            if record.load_tid().is_absent() {
                return true;
            }
            record.raw_read_into(value);
            visit(key.as_slice(), value);
            seen += 1;
            seen < limit
        };
        let iter = self.range(bounds, direction, &guard);
        match direction {
            ScanDirection::Forward => {
                for (k, r) in iter {
                    if !each(k, r) {
                        break;
                    }
                }
            }
            ScanDirection::Reverse => {
                for (k, r) in iter.rev() {
                    if !each(k, r) {
                        break;
                    }
                }
            }
        }
        seen
    }

    /// Heap bytes of all records (excluding allocator overhead and the index).
    pub fn record_heap_bytes(&self) -> usize {
        let guard = Guard::new();
        self.index.iter(&guard).map(|(_, r)| r.heap_bytes()).sum()
    }
}

fn raw_write(record: RecordRef, value: &[u8], guard: &Guard) {
    let before = record.tid().lock();
    record.write_value(value, guard);
    record
        .tid()
        .unlock_to(Tid::with_status(before.version(), LATEST_BIT));
}

impl Drop for Relation {
    fn drop(&mut self) {
        // Exclusive access: no transaction can hold a guard over this relation's
        // records any more, and unlinked records were already retired.
        let guard = Guard::new();
        let records: Vec<RecordRef> = self.index.iter(&guard).map(|(_, r)| *r).collect();
        drop(guard);
        self.index.clear();
        for record in records {
            // SAFETY: see above.
            unsafe { record.free() };
        }
    }
}

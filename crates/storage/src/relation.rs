//! Relations: maps from encoded keys to records on a concurrent index, either
//! ordered (Roost's B+-tree with optimistic lock coupling, [`crate::btree`]:
//! point access and range scans whose leaf versions are Silo's node set) or
//! hashed (`scc::HashIndex`: point access only), optionally partitioned by a
//! key prefix so one partition's records can be listed without visiting the
//! rest. The index holds record pointers; records hold the TID word and the
//! value, so the index never changes when a value does.

use std::collections::HashMap;
use std::ops::Bound;
use std::ptr::NonNull;
use std::sync::Mutex;

use foldhash::quality::RandomState;
use scc::HashIndex;

use crate::btree::{BTree, LeafChange, ScannedLeaf};
use crate::key::{EncodedKey, KeyProbe};
use crate::record::RecordRef;
use crate::sync::Guard;
use crate::tid::{Tid, LATEST_BIT};

/// Runs `f` with the guard the hashed index reads under: the caller's
/// (which is `scc`'s).
#[cfg(not(loom))]
#[inline(always)]
fn with_hash_guard<R>(guard: &Guard, f: impl FnOnce(&scc::Guard) -> R) -> R {
    f(guard)
}

/// Under loom the caller's guard is the stand-in, so a hashed index reads
/// under a guard of its own for the call. The records it maps to are freed
/// through the stand-in, not `scc`; only the index's own memory is `scc`'s.
/// (The hashed index is not model-checked: its atomics are std's.)
#[cfg(loom)]
fn with_hash_guard<R>(_guard: &Guard, f: impl FnOnce(&scc::Guard) -> R) -> R {
    f(&scc::Guard::new())
}

/// Direction of a range scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanDirection {
    Forward,
    Reverse,
}

/// How a relation indexes its records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IndexKind {
    /// A B+-tree: point access and range scans (with phantom protection).
    #[default]
    Ordered,
    /// A hash table: point access only; a range scan is refused
    /// ([`TxError::ScanOfHashedRelation`](crate::TxError)). Keys are hashed
    /// with foldhash's quality hasher under a per-index random seed: clients
    /// choosing keys cannot precompute colliding ones (std's SipHash cost
    /// about 500 instructions per 30-byte key, a tenth of a GET).
    Hashed,
    /// [`Hashed`](Self::Hashed), with its keys grouped into partitions by
    /// their first [`PARTITION_PREFIX_BYTES`] bytes (zero-padded), so that
    /// one partition's records can be listed
    /// ([`Transaction::scan_partition`](crate::Transaction::scan_partition))
    /// in time proportional to that partition, not to the relation. Point
    /// access to an existing key costs what `Hashed` costs (the same single
    /// hash index); linking a new key or unlinking one also takes its
    /// partition's lock and updates its key set.
    PartitionedHash,
}

impl IndexKind {
    /// Whether range scans are served (only the B+-tree has an order).
    pub fn is_ordered(self) -> bool {
        self == IndexKind::Ordered
    }
}

/// Bytes of a key's start that name its partition in an
/// [`IndexKind::PartitionedHash`] relation (the reactor layer's reactor id).
pub const PARTITION_PREFIX_BYTES: usize = 4;

/// The partition of `key`: its first bytes, zero-padded when it is shorter.
fn partition_of(key: &[u8]) -> [u8; PARTITION_PREFIX_BYTES] {
    let mut prefix = [0u8; PARTITION_PREFIX_BYTES];
    let n = key.len().min(PARTITION_PREFIX_BYTES);
    prefix[..n].copy_from_slice(&key[..n]);
    prefix
}

/// One partition's keys, kept beside the hash index. Its lock is taken to
/// link or unlink a key (both the hash index and the set change under it, so
/// the set is exactly the index's entries of the partition whenever the lock
/// is free) and to copy the set; point lookups never take it. The holder
/// never waits for a record lock (a lister reads records after releasing
/// it), so a committer that holds record locks and unlinks cannot deadlock.
pub(crate) struct Partition {
    /// Moves (under the lock) whenever a key is linked in: a listing
    /// validated unchanged saw every key linked before commit. A key that
    /// leaves is caught by its record's TID, in the listing's read set.
    /// (std's atomics under loom too: hashed indexes are not model-checked.)
    version: std::sync::atomic::AtomicU64,
    keys: Mutex<HashMap<EncodedKey, RecordRef, RandomState>>,
}

/// A partition, never freed before its relation: a transaction keeps its
/// relations alive, so its listings' partitions stay valid with them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PartitionRef(NonNull<Partition>);

// SAFETY: points into a `Partition` (atomics and a mutex) owned by a
// relation that outlives every holder.
unsafe impl Send for PartitionRef {}
unsafe impl Sync for PartitionRef {}

impl PartitionRef {
    fn get(&self) -> &Partition {
        // SAFETY: see the type's documentation.
        unsafe { self.0.as_ref() }
    }

    pub(crate) fn version_word(&self) -> &std::sync::atomic::AtomicU64 {
        &self.get().version
    }
}

struct PartitionedHash {
    hash: HashIndex<EncodedKey, RecordRef, RandomState>,
    /// Partition prefix to partition; partitions are created on first use
    /// and freed only when the relation drops.
    partitions: HashIndex<[u8; PARTITION_PREFIX_BYTES], PartitionRef, RandomState>,
    /// Index entries copied by partition listings (for tests: extraction
    /// visits only the partition's entries).
    listed: std::sync::atomic::AtomicU64,
}

impl PartitionedHash {
    fn partition(&self, prefix: [u8; PARTITION_PREFIX_BYTES], guard: &Guard) -> PartitionRef {
        loop {
            if let Some(p) = with_hash_guard(guard, |g| self.partitions.peek(&prefix, g).copied()) {
                return p;
            }
            let fresh = PartitionRef(NonNull::from(Box::leak(Box::new(Partition {
                version: std::sync::atomic::AtomicU64::new(0),
                keys: Mutex::new(HashMap::with_hasher(RandomState::default())),
            }))));
            match self.partitions.insert_sync(prefix, fresh) {
                Ok(()) => return fresh,
                // SAFETY: never published.
                Err(_) => drop(unsafe { Box::from_raw(fresh.0.as_ptr()) }),
            }
        }
    }
}

/// A change an index made while linking a key, for the linking transaction's
/// own phantom bookkeeping.
pub(crate) enum IndexChange {
    Leaf(LeafChange),
    /// A key was linked into `partition`, whose version was `before`.
    Partition {
        partition: PartitionRef,
        before: u64,
    },
}

enum Index {
    Ordered(BTree),
    Hashed(HashIndex<EncodedKey, RecordRef, RandomState>),
    PartitionedHash(PartitionedHash),
}

/// A relation: one index of records.
pub struct Relation {
    name: String,
    index: Index,
}

fn lock_keys(
    partition: &Partition,
) -> std::sync::MutexGuard<'_, HashMap<EncodedKey, RecordRef, RandomState>> {
    partition
        .keys
        .lock()
        .expect("a partition's holder does not panic")
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
    pub(crate) fn new(name: &str, kind: IndexKind) -> Self {
        Relation {
            name: name.to_owned(),
            index: match kind {
                IndexKind::Ordered => Index::Ordered(BTree::new()),
                IndexKind::Hashed => Index::Hashed(HashIndex::with_hasher(RandomState::default())),
                IndexKind::PartitionedHash => Index::PartitionedHash(PartitionedHash {
                    hash: HashIndex::with_hasher(RandomState::default()),
                    partitions: HashIndex::with_hasher(RandomState::default()),
                    listed: std::sync::atomic::AtomicU64::new(0),
                }),
            },
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn index_kind(&self) -> IndexKind {
        match self.index {
            Index::Ordered(_) => IndexKind::Ordered,
            Index::Hashed(_) => IndexKind::Hashed,
            Index::PartitionedHash(_) => IndexKind::PartitionedHash,
        }
    }

    /// Number of index entries, including absent placeholders not yet unlinked.
    pub fn index_len(&self) -> usize {
        match &self.index {
            Index::Ordered(tree) => tree.len(),
            Index::Hashed(hash) => hash.len(),
            Index::PartitionedHash(p) => p.hash.len(),
        }
    }

    /// Index entries copied by partition listings so far (zero unless the
    /// relation is partitioned): what a test counts to show a listing
    /// visits its partition only.
    pub fn partition_entries_listed(&self) -> u64 {
        match &self.index {
            Index::PartitionedHash(p) => p.listed.load(std::sync::atomic::Ordering::Relaxed),
            _ => 0,
        }
    }

    pub(crate) fn lookup(&self, key: &[u8], guard: &Guard) -> Option<RecordRef> {
        // Search with a probe rather than a slice so the index compares with
        // `EncodedKey`'s integer-prefix order instead of `memcmp`, and rather
        // than an `EncodedKey` so a long key is not copied to the heap.
        match &self.index {
            Index::Ordered(tree) => tree.get(key, guard),
            Index::Hashed(hash) | Index::PartitionedHash(PartitionedHash { hash, .. }) => {
                with_hash_guard(guard, |g| hash.peek(&KeyProbe::new(key), g).copied())
            }
        }
    }

    /// Links `record` under `key` unless the key already has a record; on
    /// failure hands `record` back. `observe` learns of the leaves an
    /// ordered index changed and the partition a partitioned one did (for
    /// the inserter's phantom bookkeeping).
    fn link(
        &self,
        key: &[u8],
        record: RecordRef,
        guard: &Guard,
        observe: &mut dyn FnMut(IndexChange),
    ) -> Result<(), RecordRef> {
        match &self.index {
            Index::Ordered(tree) => {
                tree.insert(key, record, guard, &mut |c| observe(IndexChange::Leaf(c)))
            }
            Index::Hashed(hash) => hash
                .insert_sync(EncodedKey::from_slice(key), record)
                .map_err(|(_, record)| record),
            Index::PartitionedHash(p) => {
                let partition = p.partition(partition_of(key), guard);
                let before = {
                    let mut keys = lock_keys(partition.get());
                    let owned = EncodedKey::from_slice(key);
                    p.hash
                        .insert_sync(owned.clone(), record)
                        .map_err(|(_, record)| record)?;
                    let previous = keys.insert(owned, record);
                    assert!(
                        previous.is_none(),
                        "a partition's set holds exactly the hash index's keys of the partition"
                    );
                    let version = &partition.get().version;
                    let before = version.load(std::sync::atomic::Ordering::Relaxed);
                    version.store(before + 1, std::sync::atomic::Ordering::Release);
                    before
                };
                observe(IndexChange::Partition { partition, before });
                Ok(())
            }
        }
    }

    /// Every record in the index, in no particular order.
    fn for_each_record(&self, guard: &Guard, mut f: impl FnMut(RecordRef)) {
        match &self.index {
            Index::Ordered(tree) => tree.for_each(guard, f),
            Index::Hashed(hash) | Index::PartitionedHash(PartitionedHash { hash, .. }) => {
                with_hash_guard(guard, |g| hash.iter(g).for_each(|(_, r)| f(*r)))
            }
        }
    }

    /// Copies partition `prefix`'s entries into `out` and returns the
    /// partition with the version the copy matches; `None` unless the
    /// relation is partitioned. Creates the (empty) partition if it has
    /// none, so that a key linked later still moves a version.
    pub(crate) fn list_partition(
        &self,
        prefix: [u8; PARTITION_PREFIX_BYTES],
        guard: &Guard,
        out: &mut Vec<(EncodedKey, RecordRef)>,
    ) -> Option<(PartitionRef, u64)> {
        let Index::PartitionedHash(p) = &self.index else {
            return None;
        };
        let partition = p.partition(prefix, guard);
        let keys = lock_keys(partition.get());
        let version = partition
            .get()
            .version
            .load(std::sync::atomic::Ordering::Relaxed);
        out.extend(keys.iter().map(|(k, r)| (k.clone(), *r)));
        drop(keys);
        p.listed
            .fetch_add(out.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Some((partition, version))
    }

    /// Finds the record for `key`, creating an absent placeholder if there is
    /// none. Returns the record and whether this call created it.
    pub(crate) fn lookup_or_insert_placeholder(
        &self,
        key: &[u8],
        value_capacity_bytes: usize,
        guard: &Guard,
        observe: &mut dyn FnMut(IndexChange),
    ) -> (RecordRef, bool) {
        // Bounded: each failed insert means another thread linked a record for
        // this key, which the next lookup finds unless it is unlinked again.
        for _ in 0..1_000_000 {
            if let Some(record) = self.lookup(key, guard) {
                return (record, false);
            }
            let record = RecordRef::placeholder(value_capacity_bytes);
            match self.link(key, record, guard, observe) {
                Ok(()) => return (record, true),
                // SAFETY: never published.
                Err(record) => unsafe { record.free() },
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
        observe: &mut dyn FnMut(IndexChange),
    ) -> (RecordRef, bool) {
        let record = RecordRef::placeholder(value_capacity_bytes);
        match self.link(key, record, guard, observe) {
            Ok(()) => (record, true),
            Err(record) => {
                // SAFETY: never published.
                unsafe { record.free() };
                self.lookup_or_insert_placeholder(key, value_capacity_bytes, guard, observe)
            }
        }
    }

    /// Unlinks `record` from the index if it is still the entry for `key`, and
    /// retires it. The caller has already cleared its latest bit.
    pub(crate) fn unlink(&self, key: &[u8], record: RecordRef, guard: &Guard) {
        if self.remove_entry(key, record, guard) {
            record.retire(guard);
        }
    }

    /// The planted leak (`PlantedBugs::leak_deleted_records`): unlinks and
    /// never frees.
    pub(crate) fn unlink_without_retiring(&self, key: &[u8], record: RecordRef, guard: &Guard) {
        self.remove_entry(key, record, guard);
    }

    fn remove_entry(&self, key: &[u8], record: RecordRef, guard: &Guard) -> bool {
        debug_assert!(!record.load_tid().is_latest());
        match &self.index {
            Index::Ordered(tree) => tree.remove_if(key, record, guard),
            Index::Hashed(hash) => {
                hash.remove_if_sync(&KeyProbe::new(key), |current| *current == record)
            }
            Index::PartitionedHash(p) => {
                let partition = p.partition(partition_of(key), guard);
                let mut keys = lock_keys(partition.get());
                let removed = p
                    .hash
                    .remove_if_sync(&KeyProbe::new(key), |current| *current == record);
                if removed {
                    let listed = keys.remove(key);
                    assert_eq!(
                        listed,
                        Some(record),
                        "the partition's set mirrors the hash index"
                    );
                }
                removed
            }
        }
    }

    /// Scans `bounds` in `direction`: every leaf the scan copied goes to
    /// `on_leaf` with the version its copy matches (Silo's node set), and
    /// the records in range to `visit` until it returns false. Returns
    /// whether the scan covered the whole range, or `None` for a hashed
    /// relation (callers refuse the scan before asking).
    pub(crate) fn scan(
        &self,
        bounds: KeyBounds<'_>,
        direction: ScanDirection,
        guard: &Guard,
        on_leaf: &mut dyn FnMut(ScannedLeaf),
        visit: &mut dyn FnMut(&[u8], RecordRef) -> bool,
    ) -> Option<bool> {
        match &self.index {
            Index::Ordered(tree) => Some(tree.scan(
                bounds,
                direction == ScanDirection::Forward,
                guard,
                on_leaf,
                visit,
            )),
            Index::Hashed(_) | Index::PartitionedHash(_) => None,
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
        let (record, _) = self.lookup_or_insert_placeholder(key, value.len(), &guard, &mut |_| {});
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
        // A hashed relation has no order to scan in: it scans nothing.
        self.scan(
            bounds,
            direction,
            &guard,
            &mut |_| {},
            &mut |key, record| {
                if record.load_tid().is_absent() {
                    return true;
                }
                record.raw_read_into(value);
                visit(key, value);
                seen += 1;
                seen < limit
            },
        );
        seen
    }

    /// Under loom: the leaves of an ordered relation's B+-tree (`None` for a
    /// hashed one), so a model can check it split or merged leaves. Exact
    /// when no operation is in flight.
    #[cfg(loom)]
    pub fn leaf_count(&self) -> Option<usize> {
        match &self.index {
            Index::Ordered(tree) => Some(tree.leaf_count(&Guard::new())),
            Index::Hashed(_) | Index::PartitionedHash(_) => None,
        }
    }

    /// Heap bytes of all records (excluding allocator overhead and the index).
    pub fn record_heap_bytes(&self) -> usize {
        let guard = Guard::new();
        let mut bytes = 0;
        self.for_each_record(&guard, |r| bytes += r.heap_bytes());
        bytes
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
        let mut records: Vec<RecordRef> = Vec::with_capacity(self.index_len());
        self.for_each_record(&guard, |r| records.push(r));
        drop(guard);
        match &self.index {
            Index::Hashed(hash) => hash.clear_sync(),
            Index::PartitionedHash(p) => {
                p.hash.clear_sync();
                let mut partitions = Vec::new();
                with_hash_guard(&Guard::new(), |g| {
                    p.partitions.iter(g).for_each(|(_, q)| partitions.push(*q))
                });
                p.partitions.clear_sync();
                for partition in partitions {
                    // SAFETY: exclusive access (above); each was leaked once
                    // by `PartitionedHash::partition` and is freed once here.
                    drop(unsafe { Box::from_raw(partition.0.as_ptr()) });
                }
            }
            Index::Ordered(_) => {}
        }
        // An ordered index frees its nodes when it drops, after this.
        for record in records {
            // SAFETY: see above.
            unsafe { record.free() };
        }
    }
}

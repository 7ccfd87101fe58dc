//! Silo OCC transactions (Tu et al. 2013, §4): reads record the TID they saw,
//! writes are buffered, and commit runs Silo's three phases:
//!
//! 1. lock the write set in a global order (record address), then read the
//!    global epoch;
//! 2. validate the read set (same version, not locked by another committer) and
//!    the phantom set (below);
//! 3. choose a TID larger than everything read or written and larger than the
//!    worker's last TID, in the current epoch; install the values and publish
//!    the new TID, which also releases each lock.
//!
//! **Phantom protection: Silo's node set.** A scan records every leaf of the
//! B+-tree it copied, with the version the copy was validated against;
//! commit requires each version unchanged (no key entered or left those
//! leaves, none split or merged away), so no record can have appeared in or
//! vanished from the scanned range. An insert by the transaction itself into
//! a leaf it scanned carries the node-set entry forward (Silo §4.6). A key
//! read as missing is looked up again at commit (the hashed index has no
//! leaves). Granularity is the scanned leaves: an insert next to the range
//! in a scanned leaf is a (rare) false conflict. A listing of a partitioned
//! hashed relation's partition ([`Transaction::scan_partition`]) records the
//! partition's version instead, which every key linked into it moves.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::marker::PhantomData;
use std::ops::Bound;
use std::ptr::NonNull;

use crate::btree::{LeafChange, LeafRef, SlotKey};
use crate::error::{CommitError, Conflict, ConflictKind, ConstraintViolation, TxError};
use crate::key::MAX_KEY_BYTES;
use crate::record::RecordRef;
use crate::relation::{IndexChange, KeyBounds, Relation, ScanDirection, PARTITION_PREFIX_BYTES};
use crate::sync::{AtomicU64, Guard, Ordering};
use crate::tid::{commit_fence, Tid, ABSENT_BIT, LATEST_BIT, SEQUENCE_SHIFT};
use crate::{PlantedBugs, Worker};

/// Largest value a record accepts.
pub const MAX_VALUE_BYTES: usize = 16 << 20;
/// Largest total of keys and values one transaction may buffer.
pub const MAX_TX_ARENA_BYTES: usize = 1 << 30;
/// Write sets up to this size are searched linearly; larger ones get a hash index.
const LINEAR_WRITE_SEARCH: usize = 16;

#[derive(Clone, Copy, Debug)]
struct Span {
    off: u32,
    len: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WriteOp {
    Put,
    Delete,
}

#[derive(Clone, Copy, Debug)]
struct WriteEntry {
    relation: NonNull<Relation>,
    record: RecordRef,
    op: WriteOp,
    /// This transaction linked the record as an absent placeholder.
    created: bool,
    key: Span,
    value: Span,
}

#[derive(Clone, Copy, Debug)]
struct ReadEntry {
    record: RecordRef,
    observed: Tid,
    /// Where the record is, for a conflict's message: its relation, and
    /// its key when a point access looked it up (a scan's is not kept).
    relation: NonNull<Relation>,
    key: Option<Span>,
}

#[derive(Clone, Copy, Debug)]
struct MissEntry {
    relation: NonNull<Relation>,
    key: Span,
}

/// One leaf of Silo's node set: the leaf, the version its copy matched,
/// and its interval then (so a leaf whose version moved can be re-checked
/// over just the part of the scan it held).
#[derive(Clone, Copy, Debug)]
struct NodeEntry {
    leaf: LeafRef,
    version: u64,
    lo: Option<SlotKey>,
    hi: Option<SlotKey>,
    /// Where this leaf's visited records start in `scanned`.
    records_from: u32,
}

/// A version word validated at commit: a listed partition's (checked with
/// the phantom set) or one kept outside the engine (the reactor layer's
/// placement slot, checked with the read set).
#[derive(Clone, Copy, Debug)]
pub(crate) struct VersionEntry {
    pub(crate) word: NonNull<std::sync::atomic::AtomicU64>,
    pub(crate) observed: u64,
    pub(crate) phantom: bool,
}

impl VersionEntry {
    fn unchanged(&self) -> bool {
        // SAFETY: a partition lives as long as its relation, which the
        // transaction keeps alive; an external word, by the contract of
        // `TxContext::observe_version`.
        unsafe { self.word.as_ref() }.load(std::sync::atomic::Ordering::Acquire) == self.observed
    }
}

#[derive(Clone, Copy, Debug)]
enum SpanBound {
    Included(Span),
    Excluded(Span),
    Unbounded,
}

/// One scan: its range and direction, where a limit stopped it, and its
/// node-set entries (`nodes_from..nodes_to`) and visited records.
#[derive(Clone, Copy, Debug)]
struct ScanEntry {
    relation: NonNull<Relation>,
    lower: SpanBound,
    upper: SpanBound,
    direction: ScanDirection,
    /// The last key delivered when the scan stopped before its range ended.
    stop: Option<Span>,
    nodes_from: u32,
    nodes_to: u32,
    records_to: u32,
}

#[derive(Default)]
struct PtrHasher(u64);
impl Hasher for PtrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Per-worker buffers reused by every transaction, so the hot path allocates
/// nothing once they have grown to the workload's size.
#[derive(Default)]
pub(crate) struct TxBuffers {
    reads: Vec<ReadEntry>,
    writes: Vec<WriteEntry>,
    write_index: HashMap<RecordRef, u32, BuildHasherDefault<PtrHasher>>,
    misses: Vec<MissEntry>,
    /// Silo's node set: each leaf a scan copied and the version it matched.
    nodes: Vec<NodeEntry>,
    scans: Vec<ScanEntry>,
    /// The records each scan visited, absent placeholders included (for
    /// the re-check of a leaf whose version moved).
    scanned: Vec<RecordRef>,
    /// Partition listings and observed external words. (Every field here
    /// is moved with each pooled context, so they stay few.)
    pub(crate) versions: Vec<VersionEntry>,
    arena: Vec<u8>,
    scratch: Vec<u8>,
    /// The last index lookup: relation, key, and the record found (`None`:
    /// none was), so an operation on the key just read or just found
    /// missing does not search the index again.
    last_lookup: Option<(NonNull<Relation>, Span, Option<RecordRef>)>,
}

impl TxBuffers {
    pub(crate) fn is_empty(&self) -> bool {
        self.reads.is_empty()
            && self.writes.is_empty()
            && self.misses.is_empty()
            && self.nodes.is_empty()
            && self.scans.is_empty()
            && self.versions.is_empty()
    }

    fn clear(&mut self) {
        self.reads.clear();
        self.writes.clear();
        self.write_index.clear();
        self.misses.clear();
        self.nodes.clear();
        self.scans.clear();
        self.scanned.clear();
        self.versions.clear();
        self.arena.clear();
        self.last_lookup = None;
    }

    fn push_bytes(&mut self, bytes: &[u8]) -> Result<Span, TxError> {
        let off = self.arena.len();
        if off + bytes.len() > MAX_TX_ARENA_BYTES {
            return Err(TxError::TransactionTooLarge {
                max: MAX_TX_ARENA_BYTES,
            });
        }
        self.arena.extend_from_slice(bytes);
        Ok(Span {
            off: off as u32,
            len: bytes.len() as u32,
        })
    }

    /// The read-set entry of `record` of `relation`, with its key if the
    /// last lookup found it (a point access).
    fn read_entry(&self, relation: &Relation, record: RecordRef, observed: Tid) -> ReadEntry {
        let relation = NonNull::from(relation);
        let key = match self.last_lookup {
            Some((looked, span, Some(found))) if looked == relation && found == record => {
                Some(span)
            }
            _ => None,
        };
        ReadEntry {
            record,
            observed,
            relation,
            key,
        }
    }

    fn bytes(&self, span: Span) -> &[u8] {
        &self.arena[span.off as usize..(span.off + span.len) as usize]
    }

    /// The write-set entry for `record`, during execution (unsorted write set).
    fn find_write(&mut self, record: RecordRef) -> Option<usize> {
        if self.writes.len() <= LINEAR_WRITE_SEARCH {
            return self.writes.iter().position(|w| w.record == record);
        }
        let indexed = self.write_index.len();
        for (i, w) in self.writes.iter().enumerate().skip(indexed) {
            self.write_index.insert(w.record, i as u32);
        }
        self.write_index.get(&record).map(|&i| i as usize)
    }

    fn bound(&self, bound: SpanBound) -> Bound<&[u8]> {
        match bound {
            SpanBound::Included(s) => Bound::Included(self.bytes(s)),
            SpanBound::Excluded(s) => Bound::Excluded(self.bytes(s)),
            SpanBound::Unbounded => Bound::Unbounded,
        }
    }

    fn save_bound(&mut self, bound: Bound<&[u8]>) -> Result<SpanBound, TxError> {
        Ok(match bound {
            Bound::Included(b) => SpanBound::Included(self.push_bytes(b)?),
            Bound::Excluded(b) => SpanBound::Excluded(self.push_bytes(b)?),
            Bound::Unbounded => SpanBound::Unbounded,
        })
    }

    /// The write-set entry for `record`, during commit (write set sorted).
    fn find_sorted(&self, record: RecordRef) -> Option<&WriteEntry> {
        self.writes
            .binary_search_by(|w| w.record.cmp(&record))
            .ok()
            .map(|i| &self.writes[i])
    }
}

/// Carries node-set entries across the transaction's own insert (Silo
/// §4.6): an entry whose leaf changed only by this insert (its version
/// before the insert is the recorded one) takes the version after it. A
/// split is not carried: the leaf's entry then fails the version check and
/// commit re-checks that part of the scan (which skips own inserts).
/// A partition listing is carried likewise across the transaction's own
/// link into that partition.
fn note_index_change(nodes: &mut [NodeEntry], versions: &mut [VersionEntry], change: IndexChange) {
    match change {
        IndexChange::Leaf(LeafChange::Inserted {
            leaf,
            before,
            after,
        }) => {
            assert_ne!(before, after, "an insert moves its leaf's version");
            for entry in nodes
                .iter_mut()
                .filter(|e| e.leaf == leaf && e.version == before)
            {
                entry.version = after;
            }
        }
        IndexChange::Leaf(LeafChange::Split) => {}
        IndexChange::Partition { partition, before } => {
            let word = NonNull::from(partition.version_word());
            for entry in versions
                .iter_mut()
                .filter(|e| e.phantom && e.word == word && e.observed == before)
            {
                entry.observed = before + 1;
            }
        }
    }
}

/// Receives one write of a sequenced commit
/// ([`commit_contexts_sequenced`](crate::commit_contexts_sequenced)): the
/// relation, the full key, and the value installed (`None`: deleted).
pub type CaptureWrite<'a> = dyn FnMut(&Relation, &[u8], Option<&[u8]>) + 'a;

/// What a successful commit produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommitInfo {
    /// The commit TID (zero for read-only transactions, which install nothing).
    pub tid: Tid,
    pub read_only: bool,
}

/// One Silo OCC transaction. Relations passed to it must outlive it (`'r`).
/// Dropping a transaction without committing aborts it.
pub struct Transaction<'w, 'r> {
    worker: &'w mut Worker,
    guard: Guard,
    finished: bool,
    _relations: PhantomData<&'r Relation>,
}

fn check_key(key: &[u8]) -> Result<(), TxError> {
    if key.len() > MAX_KEY_BYTES {
        return Err(TxError::KeyTooLarge {
            len: key.len(),
            max: MAX_KEY_BYTES,
        });
    }
    Ok(())
}

fn check_value(value: &[u8]) -> Result<(), TxError> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(TxError::ValueTooLarge {
            len: value.len(),
            max: MAX_VALUE_BYTES,
        });
    }
    Ok(())
}

fn relation_ref<'a>(relation: NonNull<Relation>) -> &'a Relation {
    // SAFETY: entries hold relations borrowed for the transaction's `'r`, and
    // buffers are cleared before the transaction ends.
    unsafe { relation.as_ref() }
}

/// The transaction operations, shared by [`Transaction`] and [`TxContext`].
pub(crate) struct TxOps<'a> {
    pub(crate) worker: &'a mut Worker,
    pub(crate) guard: &'a Guard,
}

impl TxOps<'_> {
    fn bufs(&mut self) -> &mut TxBuffers {
        &mut self.worker.buffers
    }

    /// Index lookup with a one-entry cache, so read-modify-write of one key
    /// traverses the index once.
    fn lookup(&mut self, relation: &Relation, key: &[u8]) -> Result<Option<RecordRef>, TxError> {
        check_key(key)?;
        let rel = NonNull::from(relation);
        let bufs = &mut self.worker.buffers;
        if let Some((cached_rel, span, record)) = bufs.last_lookup {
            if cached_rel == rel && bufs.bytes(span) == key {
                // A cached miss is as good as a fresh one: a record linked
                // since is caught where a fresh miss's would be (the insert
                // below finds it; commit re-checks recorded misses).
                return Ok(record);
            }
        }
        let found = relation.lookup(key, self.guard);
        let span = bufs.push_bytes(key)?;
        bufs.last_lookup = Some((rel, span, found));
        Ok(found)
    }

    fn lookup_or_create(
        &mut self,
        relation: &Relation,
        key: &[u8],
        value_capacity_bytes: usize,
    ) -> Result<(RecordRef, bool), TxError> {
        if let Some(record) = self.lookup(relation, key)? {
            return Ok((record, false));
        }
        // The lookup just missed: insert at once (finding the record if one
        // was linked since).
        let bufs = &mut self.worker.buffers;
        let (nodes, versions) = (&mut bufs.nodes[..], &mut bufs.versions[..]);
        let (record, created) =
            relation.insert_placeholder_or_find(key, value_capacity_bytes, self.guard, &mut |c| {
                note_index_change(nodes, versions, c)
            });
        let bufs = self.bufs();
        let span = match bufs.last_lookup {
            Some((_, span, _)) => span,
            None => bufs.push_bytes(key)?,
        };
        bufs.last_lookup = Some((NonNull::from(relation), span, Some(record)));
        Ok((record, created))
    }

    fn record_miss(&mut self, relation: &Relation, key: &[u8]) -> Result<(), TxError> {
        let bufs = self.bufs();
        let key = bufs.push_bytes(key)?;
        bufs.misses.push(MissEntry {
            relation: NonNull::from(relation),
            key,
        });
        Ok(())
    }

    /// Stable read of the record's TID only, recorded in the read set.
    fn observe_tid(&mut self, relation: &Relation, record: RecordRef) -> Result<Tid, TxError> {
        let (tid, ()) = record.tid().stable_read(|| ());
        if !tid.is_latest() {
            return Err(TxError::Conflict(ConflictKind::RecordUnlinked.into()));
        }
        let entry = self.bufs().read_entry(relation, record, tid);
        self.bufs().reads.push(entry);
        Ok(tid)
    }

    fn add_write(
        &mut self,
        relation: &Relation,
        record: RecordRef,
        created: bool,
        op: WriteOp,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), TxError> {
        let bufs = self.bufs();
        let value = bufs.push_bytes(value)?;
        if let Some(i) = bufs.find_write(record) {
            let entry = &mut bufs.writes[i];
            entry.op = op;
            entry.value = value;
            return Ok(());
        }
        let key = bufs.push_bytes(key)?;
        bufs.writes.push(WriteEntry {
            relation: NonNull::from(relation),
            record,
            op,
            created,
            key,
            value,
        });
        Ok(())
    }

    /// Reads `key`, passing its value to `read`. `None` if the key is absent.
    pub fn get_with<T>(
        &mut self,
        relation: &Relation,
        key: &[u8],
        read: impl FnOnce(&[u8]) -> T,
    ) -> Result<Option<T>, TxError> {
        let Some(record) = self.lookup(relation, key)? else {
            self.record_miss(relation, key)?;
            return Ok(None);
        };
        let bufs = &mut self.worker.buffers;
        if let Some(i) = bufs.find_write(record) {
            let entry = bufs.writes[i];
            return Ok(match entry.op {
                WriteOp::Put => Some(read(bufs.bytes(entry.value))),
                WriteOp::Delete => None,
            });
        }
        let tid = record.read_into(&mut bufs.scratch);
        if !tid.is_latest() {
            // Unlinked by a concurrent delete: the key is absent, and stays
            // absent only if no new record appears before commit.
            self.record_miss(relation, key)?;
            return Ok(None);
        }
        let entry = bufs.read_entry(relation, record, tid);
        bufs.reads.push(entry);
        if tid.is_absent() {
            return Ok(None);
        }
        Ok(Some(read(&bufs.scratch)))
    }

    /// Writes `key` whether or not it exists (a blind write).
    pub fn put(&mut self, relation: &Relation, key: &[u8], value: &[u8]) -> Result<(), TxError> {
        check_value(value)?;
        let (record, created) = self.lookup_or_create(relation, key, value.len())?;
        self.add_write(relation, record, created, WriteOp::Put, key, value)
    }

    /// Inserts `key`, which must not exist.
    pub fn insert(&mut self, relation: &Relation, key: &[u8], value: &[u8]) -> Result<(), TxError> {
        check_value(value)?;
        let (record, created) = self.lookup_or_create(relation, key, value.len())?;
        let duplicate = || {
            TxError::Constraint(ConstraintViolation::DuplicateKey {
                relation: relation.name().to_owned(),
            })
        };
        if let Some(i) = self.bufs().find_write(record) {
            if self.bufs().writes[i].op == WriteOp::Put {
                return Err(duplicate());
            }
        } else if created {
            // Another inserter may find the placeholder too; whichever commits
            // second sees the version move and aborts.
            let entry = self.bufs().read_entry(relation, record, Tid::PLACEHOLDER);
            self.bufs().reads.push(entry);
        } else if !self.observe_tid(relation, record)?.is_absent() {
            return Err(duplicate());
        }
        self.add_write(relation, record, created, WriteOp::Put, key, value)
    }

    /// Overwrites `key`, which must exist.
    pub fn update(&mut self, relation: &Relation, key: &[u8], value: &[u8]) -> Result<(), TxError> {
        check_value(value)?;
        if !self.exists_for_write(relation, key)? {
            return Err(TxError::Constraint(ConstraintViolation::MissingKey {
                relation: relation.name().to_owned(),
            }));
        }
        let record = self
            .lookup(relation, key)?
            .expect("exists_for_write found it");
        self.add_write(relation, record, false, WriteOp::Put, key, value)
    }

    /// Deletes `key`; returns whether it existed.
    pub fn delete(&mut self, relation: &Relation, key: &[u8]) -> Result<bool, TxError> {
        if !self.exists_for_write(relation, key)? {
            return Ok(false);
        }
        let record = self
            .lookup(relation, key)?
            .expect("exists_for_write found it");
        self.add_write(relation, record, false, WriteOp::Delete, key, &[])?;
        Ok(true)
    }

    /// Whether `key` exists, as seen by this transaction, recording the
    /// observation for validation.
    fn exists_for_write(&mut self, relation: &Relation, key: &[u8]) -> Result<bool, TxError> {
        let Some(record) = self.lookup(relation, key)? else {
            self.record_miss(relation, key)?;
            return Ok(false);
        };
        if let Some(i) = self.bufs().find_write(record) {
            return Ok(self.bufs().writes[i].op == WriteOp::Put);
        }
        Ok(!self.observe_tid(relation, record)?.is_absent())
    }

    /// Scans `bounds` in `direction`, passing up to `limit` present records to
    /// `visit` (which returns `false` to stop early). Returns how many it passed.
    pub fn scan(
        &mut self,
        relation: &Relation,
        bounds: KeyBounds<'_>,
        direction: ScanDirection,
        limit: usize,
        mut visit: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize, TxError> {
        for b in [bounds.0, bounds.1] {
            if let Bound::Included(k) | Bound::Excluded(k) = b {
                check_key(k)?;
            }
        }
        if !relation.index_kind().is_ordered() {
            return Err(TxError::ScanOfHashedRelation {
                relation: relation.name().to_owned(),
            });
        }
        if limit == 0 {
            return Ok(0);
        }
        let mut skip_first = self.worker.planted.scans_skip_first_record;
        let bufs = &mut self.worker.buffers;
        let lower = bufs.save_bound(bounds.0)?;
        let upper = bufs.save_bound(bounds.1)?;
        let nodes_from = bufs.nodes.len() as u32;
        // The node set grows while the visitor below needs the rest of the
        // buffers: keep it apart for the scan.
        let mut nodes = std::mem::take(&mut bufs.nodes);
        let mut delivered = 0usize;
        let mut stop: Option<Vec<u8>> = None;
        // Both closures need the count of visited records: one counts, the
        // other stamps each leaf with it.
        let visited = std::cell::Cell::new(bufs.scanned.len() as u32);
        let scanned = relation.scan(
            bounds,
            direction,
            self.guard,
            &mut |leaf| {
                nodes.push(NodeEntry {
                    leaf: leaf.leaf,
                    version: leaf.version,
                    lo: leaf.lo,
                    hi: leaf.hi,
                    records_from: visited.get(),
                })
            },
            &mut |key, record| {
                if std::mem::take(&mut skip_first) {
                    return true;
                }
                if let Some(i) = bufs.find_write(record) {
                    let entry = bufs.writes[i];
                    if !entry.created {
                        bufs.scanned.push(record);
                        visited.set(visited.get() + 1);
                    }
                    if entry.op == WriteOp::Delete {
                        return true;
                    }
                    delivered += 1;
                    let more = visit(key, bufs.bytes(entry.value)) && delivered < limit;
                    if !more {
                        stop = Some(key.to_vec());
                    }
                    return more;
                }
                let tid = record.read_into(&mut bufs.scratch);
                // Absent placeholders are read too: an uncommitted insert
                // in the range that commits before this transaction moves
                // the record's version, not the leaf's.
                bufs.scanned.push(record);
                visited.set(visited.get() + 1);
                bufs.reads.push(ReadEntry {
                    record,
                    observed: tid,
                    relation: NonNull::from(relation),
                    key: None,
                });
                if tid.is_absent() || !tid.is_latest() {
                    return true;
                }
                delivered += 1;
                let more = visit(key, &bufs.scratch) && delivered < limit;
                if !more {
                    stop = Some(key.to_vec());
                }
                more
            },
        );
        assert!(scanned.is_some(), "hashed relations were refused above");
        debug_assert!(delivered <= limit);
        assert_eq!(visited.get() as usize, bufs.scanned.len());
        bufs.nodes = nodes;
        let stop = match stop {
            Some(key) => Some(bufs.push_bytes(&key)?),
            None => None,
        };
        bufs.scans.push(ScanEntry {
            relation: NonNull::from(relation),
            lower,
            upper,
            direction,
            stop,
            nodes_from,
            nodes_to: bufs.nodes.len() as u32,
            records_to: bufs.scanned.len() as u32,
        });
        Ok(delivered)
    }

    /// Passes every present record of the partition `prefix` of a
    /// partitioned hashed relation to `visit`, in no order, until it returns
    /// `false`; returns how many it passed. Visits the partition's entries
    /// only. Serializable like a scan: commit fails if a key was linked into
    /// the partition meanwhile (its version moved) or a listed record
    /// changed.
    pub fn scan_partition(
        &mut self,
        relation: &Relation,
        prefix: [u8; PARTITION_PREFIX_BYTES],
        mut visit: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize, TxError> {
        let mut listing = Vec::new();
        let Some((partition, observed)) = relation.list_partition(prefix, self.guard, &mut listing)
        else {
            return Err(TxError::NotPartitioned {
                relation: relation.name().to_owned(),
            });
        };
        let bufs = &mut self.worker.buffers;
        bufs.versions.push(VersionEntry {
            word: NonNull::from(partition.version_word()),
            observed,
            phantom: true,
        });
        let mut delivered = 0usize;
        for (key, record) in &listing {
            let key = key.as_slice();
            if let Some(i) = bufs.find_write(*record) {
                let entry = bufs.writes[i];
                if entry.op == WriteOp::Delete {
                    continue;
                }
                delivered += 1;
                if !visit(key, bufs.bytes(entry.value)) {
                    break;
                }
                continue;
            }
            let tid = record.read_into(&mut bufs.scratch);
            // Absent placeholders are read too (as a scan reads them): an
            // insert listed uncommitted that commits first moves their TID.
            bufs.reads.push(ReadEntry {
                record: *record,
                observed: tid,
                relation: NonNull::from(relation),
                key: None,
            });
            if tid.is_absent() || !tid.is_latest() {
                continue;
            }
            delivered += 1;
            if !visit(key, &bufs.scratch) {
                break;
            }
        }
        Ok(delivered)
    }
}

impl<'w, 'r> Transaction<'w, 'r> {
    pub(crate) fn new(worker: &'w mut Worker) -> Self {
        debug_assert!(worker.buffers.writes.is_empty() && worker.buffers.reads.is_empty());
        Transaction {
            worker,
            guard: Guard::new(),
            finished: false,
            _relations: PhantomData,
        }
    }

    fn ops(&mut self) -> TxOps<'_> {
        TxOps {
            worker: &mut *self.worker,
            guard: &self.guard,
        }
    }

    /// Reads `key`, passing its value to `read`. `None` if the key is absent.
    pub fn get_with<T>(
        &mut self,
        relation: &'r Relation,
        key: &[u8],
        read: impl FnOnce(&[u8]) -> T,
    ) -> Result<Option<T>, TxError> {
        self.ops().get_with(relation, key, read)
    }

    /// Reads `key` into a new vector.
    pub fn get(&mut self, relation: &'r Relation, key: &[u8]) -> Result<Option<Vec<u8>>, TxError> {
        self.ops().get_with(relation, key, <[u8]>::to_vec)
    }

    /// Writes `key` whether or not it exists (a blind write).
    pub fn put(&mut self, relation: &'r Relation, key: &[u8], value: &[u8]) -> Result<(), TxError> {
        self.ops().put(relation, key, value)
    }

    /// Inserts `key`, which must not exist.
    pub fn insert(
        &mut self,
        relation: &'r Relation,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), TxError> {
        self.ops().insert(relation, key, value)
    }

    /// Overwrites `key`, which must exist.
    pub fn update(
        &mut self,
        relation: &'r Relation,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), TxError> {
        self.ops().update(relation, key, value)
    }

    /// Deletes `key`; returns whether it existed.
    pub fn delete(&mut self, relation: &'r Relation, key: &[u8]) -> Result<bool, TxError> {
        self.ops().delete(relation, key)
    }

    /// Scans `bounds` in `direction`, passing up to `limit` present records to
    /// `visit` (which returns `false` to stop early). Returns how many it passed.
    pub fn scan(
        &mut self,
        relation: &'r Relation,
        bounds: KeyBounds<'_>,
        direction: ScanDirection,
        limit: usize,
        visit: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize, TxError> {
        self.ops().scan(relation, bounds, direction, limit, visit)
    }

    /// Every present record of partition
    /// `prefix` of a [`PartitionedHash`](crate::IndexKind::PartitionedHash)
    /// relation, in no order, until `visit` returns `false`; returns how
    /// many. Visits that partition's entries only, and is serializable like
    /// a scan: commit fails if a key was linked into the partition meanwhile.
    pub fn scan_partition(
        &mut self,
        relation: &'r Relation,
        prefix: [u8; PARTITION_PREFIX_BYTES],
        visit: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize, TxError> {
        self.ops().scan_partition(relation, prefix, visit)
    }

    /// Commits: Silo's lock, validate, install. On a conflict the transaction is
    /// aborted and its effects undone.
    pub fn commit(mut self) -> Result<CommitInfo, CommitError> {
        self.finished = true;
        let result = commit_parts(&mut [&mut *self.worker], &self.guard, &mut NoSequence);
        finish_part(self.worker, &self.guard, &result);
        result
    }

    /// Aborts, undoing placeholder inserts.
    pub fn abort(mut self) {
        self.finish_abort();
    }

    fn finish_abort(&mut self) {
        self.finished = true;
        abort_part(self.worker, &self.guard);
    }
}

impl Drop for Transaction<'_, '_> {
    fn drop(&mut self) {
        if !self.finished {
            self.finish_abort();
        }
    }
}

/// Bookkeeping after a commit attempt of one part: stats, undo on failure, and
/// the buffers cleared for the next transaction.
pub(crate) fn finish_part(
    worker: &mut Worker,
    guard: &Guard,
    result: &Result<CommitInfo, CommitError>,
) {
    match result {
        Ok(_) => {
            worker.stats.commits += 1;
            worker.buffers.clear();
        }
        Err(_) => {
            worker.stats.conflicts += 1;
            abort_part(worker, guard);
        }
    }
}

pub(crate) fn abort_part(worker: &mut Worker, guard: &Guard) {
    abort_core(&worker.buffers, guard);
    worker.buffers.clear();
    worker.stats.aborts += 1;
}

/// Where a commit with writes takes its place in the database's serial
/// order: [`commit_parts`] calls [`take`](Self::take) once, at Silo's
/// serialization point (write set locked and fenced, nothing validated
/// yet). Generic, so the plain commit ([`NoSequence`]) compiles to exactly
/// the code it had before.
pub(crate) trait SequencePoint {
    fn take(&mut self);
}

/// No sequencing: the plain commit.
pub(crate) struct NoSequence;

impl SequencePoint for NoSequence {
    #[inline(always)]
    fn take(&mut self) {}
}

/// Takes the next number of a database-wide counter (the first is 1).
pub(crate) struct Sequencer<'a> {
    pub(crate) counter: &'a AtomicU64,
    pub(crate) taken: Option<u64>,
}

impl SequencePoint for Sequencer<'_> {
    #[inline]
    fn take(&mut self) {
        debug_assert!(self.taken.is_none(), "one number per commit");
        // AcqRel: a committer that takes its number after this one's
        // synchronizes with it, so whatever this one locked before its
        // number is seen locked by the other's validation (the
        // anti-dependency case of the serial order).
        let seq = self.counter.fetch_add(1, Ordering::AcqRel) + 1;
        self.taken = Some(seq);
    }
}

/// Silo's commit over one or more parts (one part per container a transaction
/// touched): the write sets of all parts are locked in one global address
/// order before any part is validated, so the parts commit as one
/// serializable transaction. This is the in-process two-phase commit:
/// phase one locks and validates everywhere, phase two installs everywhere
/// with one TID, or unlocks everywhere.
///
/// A transaction with writes whose locks it got calls `sequence.take()`
/// between the fence and validation: Silo's serialization point, so the
/// numbers taken there order every pair of conflicting committed
/// transactions as a serial order does (taken after validation they would
/// not: a writer could lock what this one validated, and take its number
/// first). A transaction that then fails validation keeps its number.
pub(crate) fn commit_parts<S: SequencePoint>(
    parts: &mut [&mut Worker],
    guard: &Guard,
    sequence: &mut S,
) -> Result<CommitInfo, CommitError> {
    assert!(!parts.is_empty(), "a commit needs at least one part");
    let planted = parts[0].planted;
    if parts.iter().all(|w| w.buffers.writes.is_empty()) {
        // Read-only: validation alone serializes it at the validation point.
        for w in parts.iter() {
            validate(&w.buffers, guard, planted)?;
        }
        return Ok(CommitInfo {
            tid: Tid::from_raw(0),
            read_only: true,
        });
    }
    let mut max_version = 0;
    for w in parts.iter_mut() {
        w.buffers.writes.sort_unstable_by_key(|e| e.record);
        max_version = max_version.max(w.last_tid);
    }
    // Phase 1: lock every write set in one global address order.
    max_version = max_version.max(lock_parts(parts)?);
    #[cfg(not(loom))]
    commit_fence();
    #[cfg(loom)]
    if !planted.skip_commit_fence {
        commit_fence();
    }
    let epoch = parts[0].engine.epoch.current();
    // The serialization point: locked, fenced, not yet validated.
    if !planted.sequence_after_validation {
        sequence.take();
    }
    // Phase 2: validate every part.
    for w in parts.iter() {
        if let Err(e) = validate(&w.buffers, guard, planted) {
            for w in parts.iter() {
                unlock_prefix(&w.buffers.writes);
            }
            return Err(e);
        }
        for r in &w.buffers.reads {
            max_version = max_version.max(r.observed.version());
        }
    }
    if planted.sequence_after_validation {
        // The planted bug: the number taken too late (a writer of
        // something this one validated may take its number first).
        sequence.take();
    }
    // Phase 3: one TID above everything observed, in the current epoch.
    let candidate = max_version + (1 << SEQUENCE_SHIFT);
    let epoch_floor = Tid::new(epoch, 0, 0).version();
    let tid = Tid::from_raw(candidate.max(epoch_floor));
    for w in parts.iter_mut() {
        install(&w.buffers, guard, tid, planted);
        w.last_tid = tid.version();
    }
    Ok(CommitInfo {
        tid,
        read_only: false,
    })
}

/// Locks the write sets of all parts in ascending record address. Returns the
/// largest version seen under the locks; on an unlinked record, unlocks
/// everything it locked and reports the conflict.
fn lock_parts(parts: &[&mut Worker]) -> Result<u64, CommitError> {
    let locked = if let [only] = parts {
        lock_in_order(only.buffers.writes.iter().map(|w| w.record))
    } else {
        // Parts hold disjoint relations, so a record appears in at most one part.
        let mut all: Vec<RecordRef> = parts
            .iter()
            .flat_map(|w| w.buffers.writes.iter().map(|e| e.record))
            .collect();
        all.sort_unstable();
        lock_in_order(all.into_iter())
    };
    locked.map_err(|unlinked| {
        // The conflict names the written record that was unlinked.
        let at = parts.iter().find_map(|w| {
            let bufs = &w.buffers;
            let entry = bufs.writes.iter().find(|e| e.record == unlinked)?;
            Some(Conflict::at(
                ConflictKind::RecordUnlinked,
                relation_ref(entry.relation).name(),
                Some(bufs.bytes(entry.key)),
            ))
        });
        CommitError::Conflict(at.unwrap_or_else(|| ConflictKind::RecordUnlinked.into()))
    })
}

/// Locks `records` in order; on an unlinked one, unlocks everything it
/// locked and returns that record.
fn lock_in_order(records: impl Iterator<Item = RecordRef> + Clone) -> Result<u64, RecordRef> {
    let mut max_version = 0;
    for (i, record) in records.clone().enumerate() {
        let before = record.tid().lock();
        if !before.is_latest() {
            for locked in records.take(i + 1) {
                let current = locked.load_tid();
                locked.tid().unlock_to(current.unlocked());
            }
            return Err(record);
        }
        max_version = max_version.max(before.version());
    }
    Ok(max_version)
}

fn unlock_prefix(writes: &[WriteEntry]) {
    for w in writes {
        let current = w.record.load_tid();
        w.record.tid().unlock_to(current.unlocked());
    }
}

fn validate(bufs: &TxBuffers, guard: &Guard, planted: PlantedBugs) -> Result<(), CommitError> {
    if !planted.skip_read_validation {
        for r in &bufs.reads {
            let mine = bufs.find_sorted(r.record).is_some();
            if !r.record.tid().validate(r.observed, mine) {
                return Err(CommitError::Conflict(Conflict::at(
                    ConflictKind::ReadValidation,
                    relation_ref(r.relation).name(),
                    r.key.map(|k| bufs.bytes(k)),
                )));
            }
        }
        if bufs.versions.iter().any(|v| !v.phantom && !v.unchanged()) {
            return Err(CommitError::Conflict(ConflictKind::ReadValidation.into()));
        }
    }
    if planted.skip_phantom_validation {
        return Ok(());
    }
    if bufs.versions.iter().any(|v| v.phantom && !v.unchanged()) {
        return Err(CommitError::Conflict(ConflictKind::Phantom.into()));
    }
    for m in &bufs.misses {
        let relation = relation_ref(m.relation);
        if let Some(record) = relation.lookup(bufs.bytes(m.key), guard) {
            if !is_own_placeholder(bufs, record, planted) {
                return Err(CommitError::Conflict(Conflict::at(
                    ConflictKind::Phantom,
                    relation.name(),
                    Some(bufs.bytes(m.key)),
                )));
            }
        }
    }
    for scan in &bufs.scans {
        for i in scan.nodes_from..scan.nodes_to {
            let node = &bufs.nodes[i as usize];
            if node.leaf.version() == node.version {
                continue;
            }
            let records_to = if i + 1 < scan.nodes_to {
                bufs.nodes[i as usize + 1].records_from
            } else {
                scan.records_to
            };
            let last = i + 1 == scan.nodes_to;
            if !leaf_part_unchanged(bufs, scan, node, records_to, last, guard, planted) {
                return Err(CommitError::Conflict(Conflict::at(
                    ConflictKind::Phantom,
                    relation_ref(scan.relation).name(),
                    None,
                )));
            }
        }
    }
    Ok(())
}

/// Whether `record` is a placeholder this transaction linked and nobody has
/// committed into since (its TID is still the placeholder's; the caller holds
/// its lock, so it cannot change now). Only then does it not count as a record
/// that appeared where the transaction saw none: another transaction may have
/// found the placeholder, written it and committed first, and a miss (or a
/// scan) that ignored it would let this transaction overwrite that write.
fn is_own_placeholder(bufs: &TxBuffers, record: RecordRef, planted: PlantedBugs) -> bool {
    bufs.find_sorted(record).is_some_and(|w| w.created)
        && (planted.trust_own_placeholders || record.load_tid().unlocked() == Tid::PLACEHOLDER)
}

/// The re-check of a scanned leaf whose version moved (something in it
/// changed, maybe outside the scanned range: a neighbour's insert, or this
/// transaction's own insert that split it): scans again the part of the
/// range the leaf held (its interval then, clipped to the scan's range and
/// to where a limit stopped it) and requires the same records, ignoring
/// this transaction's own inserts. The re-scan is itself complete by
/// construction (it copies validated leaves), so a record that entered or
/// left that part is found. Without it, every insert into a leaf shared
/// with a neighbouring range would abort the scan (a reactor's boundary
/// leaves are shared with the reactors next to it).
fn leaf_part_unchanged(
    bufs: &TxBuffers,
    scan: &ScanEntry,
    node: &NodeEntry,
    records_to: u32,
    last: bool,
    guard: &Guard,
    planted: PlantedBugs,
) -> bool {
    let (mut lo_buf, mut hi_buf) = ([0u8; 16], [0u8; 16]);
    // SAFETY: the interval bounds were copied under this transaction's guard.
    let lo = node.lo.map(|k| unsafe { k.bytes(&mut lo_buf) });
    let hi = node.hi.map(|k| unsafe { k.bytes(&mut hi_buf) });
    let mut lower = max_lower(
        bufs.bound(scan.lower),
        lo.map_or(Bound::Unbounded, Bound::Included),
    );
    let mut upper = min_upper(
        bufs.bound(scan.upper),
        hi.map_or(Bound::Unbounded, Bound::Excluded),
    );
    if let (true, Some(stop)) = (last, scan.stop) {
        let stop = Bound::Included(bufs.bytes(stop));
        match scan.direction {
            ScanDirection::Forward => upper = min_upper(upper, stop),
            ScanDirection::Reverse => lower = max_lower(lower, stop),
        }
    }
    let expected = &bufs.scanned[node.records_from as usize..records_to as usize];
    if range_is_empty(lower, upper) {
        return expected.is_empty();
    }
    let relation = relation_ref(scan.relation);
    let mut next = 0usize;
    let mut same = true;
    relation.scan(
        (lower, upper),
        scan.direction,
        guard,
        &mut |_| {},
        &mut |_, record| {
            if is_own_placeholder(bufs, record, planted) {
                return true;
            }
            same = expected.get(next) == Some(&record);
            next += 1;
            same
        },
    );
    same && next == expected.len()
}

fn max_lower<'a>(a: Bound<&'a [u8]>, b: Bound<&'a [u8]>) -> Bound<&'a [u8]> {
    match (a, b) {
        (Bound::Unbounded, x) | (x, Bound::Unbounded) => x,
        (Bound::Included(x) | Bound::Excluded(x), Bound::Included(y) | Bound::Excluded(y)) => {
            match x.cmp(y) {
                std::cmp::Ordering::Greater => a,
                std::cmp::Ordering::Less => b,
                // Equal keys: the exclusive bound is the tighter one.
                std::cmp::Ordering::Equal if matches!(a, Bound::Excluded(_)) => a,
                std::cmp::Ordering::Equal => b,
            }
        }
    }
}

fn min_upper<'a>(a: Bound<&'a [u8]>, b: Bound<&'a [u8]>) -> Bound<&'a [u8]> {
    match (a, b) {
        (Bound::Unbounded, x) | (x, Bound::Unbounded) => x,
        (Bound::Included(x) | Bound::Excluded(x), Bound::Included(y) | Bound::Excluded(y)) => {
            match x.cmp(y) {
                std::cmp::Ordering::Less => a,
                std::cmp::Ordering::Greater => b,
                std::cmp::Ordering::Equal if matches!(a, Bound::Excluded(_)) => a,
                std::cmp::Ordering::Equal => b,
            }
        }
    }
}

fn range_is_empty(lower: Bound<&[u8]>, upper: Bound<&[u8]>) -> bool {
    match (lower, upper) {
        (Bound::Included(l), Bound::Included(u)) => l > u,
        (Bound::Included(l) | Bound::Excluded(l), Bound::Included(u) | Bound::Excluded(u)) => {
            l >= u
        }
        _ => false,
    }
}

fn install(bufs: &TxBuffers, guard: &Guard, tid: Tid, planted: PlantedBugs) {
    for w in &bufs.writes {
        match w.op {
            WriteOp::Put => {
                w.record.write_value(bufs.bytes(w.value), guard);
                w.record
                    .tid()
                    .unlock_to(Tid::with_status(tid.version(), LATEST_BIT));
            }
            WriteOp::Delete => {
                // Deleted records leave the index at once: absent and no longer
                // latest, so anyone still holding the pointer fails validation.
                w.record
                    .tid()
                    .unlock_to(Tid::with_status(tid.version(), ABSENT_BIT));
                let relation = relation_ref(w.relation);
                if planted.leak_deleted_records {
                    relation.unlink_without_retiring(bufs.bytes(w.key), w.record, guard);
                } else {
                    relation.unlink(bufs.bytes(w.key), w.record, guard);
                }
            }
        }
    }
}

/// Passes every write of a committed part to `capture`: the relation, the
/// full key, and the value installed (`None`: deleted). A placeholder this
/// transaction inserted reports the value it installed; a delete, even of a
/// key this transaction had inserted, a deletion. Call after install and
/// before the buffers are cleared.
pub(crate) fn capture_writes(bufs: &TxBuffers, capture: &mut CaptureWrite<'_>) {
    for w in &bufs.writes {
        let value = match w.op {
            WriteOp::Put => Some(bufs.bytes(w.value)),
            WriteOp::Delete => None,
        };
        capture(relation_ref(w.relation), bufs.bytes(w.key), value);
    }
}

/// Undoes an aborted transaction's placeholder inserts that nobody else filled.
fn abort_core(bufs: &TxBuffers, guard: &Guard) {
    for w in bufs.writes.iter().filter(|w| w.created) {
        let before = w.record.tid().lock();
        if before.is_absent() && before.is_latest() {
            w.record
                .tid()
                .unlock_to(Tid::with_status(before.version(), ABSENT_BIT));
            relation_ref(w.relation).unlink(bufs.bytes(w.key), w.record, guard);
        } else {
            w.record.tid().unlock_to(before);
        }
    }
}

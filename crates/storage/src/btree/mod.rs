//! Roost's ordered index: a concurrent B+-tree with optimistic lock coupling
//! (Leis, Scheibner, Kemper, Neumann 2016, "The ART of practical
//! synchronization"), whose leaf versions serve as Silo's node set (Tu et al.
//! 2013, §4.6, on Masstree's node versions).
//!
//! **Versions.** Every node has one version word: a lock bit, an obsolete bit,
//! and a counter bumped by every change of the node under its lock (insert,
//! remove, split, merge). Readers never lock: they read the version, read the
//! node with relaxed atomic loads, and re-check the version (a seqlock);
//! writers lock only the nodes they change, top-down, and never wait while
//! holding a lock (a failed try-lock releases everything and restarts).
//!
//! **Why a scan cannot miss a record.** A leaf covers one key interval
//! `[lo, hi)`, bounded by the separators on the path to it. Every change of a
//! leaf's interval changes that leaf's version: a split shrinks it (the leaf is
//! locked and bumped), a merge grows the surviving leaf (bumped) and retires
//! the other (marked obsolete), and inner nodes only change their own
//! intervals by splitting themselves (they are never merged). A scan copies
//! one leaf at a time, validated against its version, reports `(leaf,
//! version)` to the caller, and continues at the leaf's `hi` bound. The
//! copied leaves' intervals tile the scanned range, and each copy is exactly
//! the keys of its interval at one instant. Commit then re-checks the
//! versions: if none moved, no key entered or left the scanned range in any
//! of those leaves since they were copied, and no other leaf can hold a key
//! of the range. Correctness rests on the versions, not on what an iterator
//! happened to return.
//!
//! **Memory.** Nodes and long keys are freed through the epoch-based
//! reclamation the records use ([`Guard`]); a reader may follow a pointer
//! read from a node it has not yet validated, so everything reachable that
//! way stays allocated until every guard that could have seen it is gone.

pub(crate) mod key;

pub(crate) use key::SlotKey;

use std::ops::Bound;
use std::ptr::NonNull;

use crate::record::RecordRef;
use crate::sync::{fence, spin_hint, yield_now, AtomicU64, Guard, Ordering};
use key::Probe;

/// Entries per leaf. A leaf is 8 + 8 + 32 * 24 = 784 bytes (plus the flag).
#[cfg(not(loom))]
pub(crate) const LEAF_CAPACITY: usize = 32;
/// Separators per inner node (one more child).
#[cfg(not(loom))]
pub(crate) const INNER_CAPACITY: usize = 32;
/// Under loom, small nodes: a model with a handful of keys splits and
/// merges leaves (and a fifth leaf splits the root), and every node is a
/// few loom objects instead of a hundred.
#[cfg(loom)]
pub const LEAF_CAPACITY: usize = 4;
#[cfg(loom)]
pub(crate) const INNER_CAPACITY: usize = 4;
/// A remove that leaves fewer entries than this tries to merge the leaf with
/// a sibling.
const MERGE_BELOW: usize = LEAF_CAPACITY / 4;
/// Two leaves merge only if the result has room left for inserts, so a key
/// inserted and removed at the boundary does not split and merge every time.
const MERGED_AT_MOST: usize = LEAF_CAPACITY * 3 / 4;

// A leaf split leaves both halves non-empty (`split_leaf` splits at 1 for
// prepends, n - 1 for appends, n / 2 otherwise), and an inner split leaves
// at least one separator on each side of the one it promotes.
const _: () = assert!(LEAF_CAPACITY >= 3 && INNER_CAPACITY >= 3);
// A leaf emptied below `MERGE_BELOW` can merge (it is at least 1), and a
// merged leaf has room for an insert before it splits again.
const _: () = assert!(MERGE_BELOW >= 1 && MERGE_BELOW <= MERGED_AT_MOST);
const _: () = assert!(MERGED_AT_MOST < LEAF_CAPACITY);

const LOCKED: u64 = 1;
const OBSOLETE: u64 = 2;
const VERSION_STEP: u64 = 4;

/// Restarts of one operation before it yields its core between attempts.
const SPINS_BEFORE_YIELD: u32 = 64;
/// A bound on restarts: every restart means another thread changed a node,
/// so an operation that restarts this often has lost a lock to a bug.
const MAX_RESTARTS: u32 = 1 << 28;

#[repr(C)]
struct Header {
    version: AtomicU64,
    /// Entries of a leaf, separators of an inner node; written under the lock.
    count: AtomicU64,
    leaf: bool,
}

impl Header {
    fn new(leaf: bool) -> Self {
        Header {
            version: AtomicU64::new(0),
            count: AtomicU64::new(0),
            leaf,
        }
    }

    /// The version if the node is neither locked nor obsolete.
    fn read(&self) -> Option<u64> {
        let v = self.version.load(Ordering::Acquire);
        (v & (LOCKED | OBSOLETE) == 0).then_some(v)
    }

    /// Whether everything read since `read` returned `v` is consistent.
    fn check(&self, v: u64) -> bool {
        fence(Ordering::Acquire);
        self.version.load(Ordering::Relaxed) == v
    }

    /// Locks the node if its version is still `v`.
    fn try_lock(&self, v: u64) -> bool {
        debug_assert_eq!(v & (LOCKED | OBSOLETE), 0);
        if self
            .version
            .compare_exchange(v, v | LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // Seqlock writer side: a reader that sees any store made under the
        // lock also sees the lock bit (or a later version) when it re-checks.
        fence(Ordering::Release);
        true
    }

    /// Unlocks with a new version; returns it.
    fn unlock(&self) -> u64 {
        let v = self.version.load(Ordering::Relaxed);
        assert!(v & LOCKED != 0, "unlock of an unlocked node");
        let next = (v & !LOCKED) + VERSION_STEP;
        self.version.store(next, Ordering::Release);
        next
    }

    /// Unlocks a node that was locked but not changed: the old version stays
    /// valid for readers who read it.
    fn unlock_unchanged(&self) {
        let v = self.version.load(Ordering::Relaxed);
        assert!(v & LOCKED != 0, "unlock of an unlocked node");
        self.version.store(v & !LOCKED, Ordering::Release);
    }

    /// Unlocks a node that left the tree: every reader restarts.
    fn unlock_obsolete(&self) {
        let v = self.version.load(Ordering::Relaxed);
        assert!(v & LOCKED != 0, "unlock of an unlocked node");
        self.version
            .store(((v & !LOCKED) + VERSION_STEP) | OBSOLETE, Ordering::Release);
    }

    /// The count, clamped so a torn optimistic read stays in bounds.
    fn count(&self, capacity: usize) -> usize {
        (self.count.load(Ordering::Relaxed) as usize).min(capacity)
    }

    fn set_count(&self, n: usize) {
        self.count.store(n as u64, Ordering::Relaxed);
    }
}

fn words<const N: usize>() -> [AtomicU64; N] {
    std::array::from_fn(|_| AtomicU64::new(0))
}

/// A leaf: sorted keys and the records they map to.
#[repr(C)]
pub(crate) struct Leaf {
    header: Header,
    keys_a: [AtomicU64; LEAF_CAPACITY],
    keys_b: [AtomicU64; LEAF_CAPACITY],
    records: [AtomicU64; LEAF_CAPACITY],
}

#[repr(C)]
struct Inner {
    header: Header,
    keys_a: [AtomicU64; INNER_CAPACITY],
    keys_b: [AtomicU64; INNER_CAPACITY],
    /// Child `i` holds the keys `k` with `key[i - 1] <= k < key[i]`.
    children: [AtomicU64; INNER_CAPACITY + 1],
}

type NodePtr = *const Header;

/// A leaf a scan read, for its node set: valid while the guard it was read
/// under is held (leaves are freed through epoch-based reclamation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct LeafRef(NonNull<Leaf>);

// SAFETY: a leaf's mutable state is atomic; it is freed only through
// epoch-based reclamation.
unsafe impl Send for LeafRef {}
unsafe impl Sync for LeafRef {}

impl LeafRef {
    /// The leaf's version word now (lock and obsolete bits included, so a
    /// locked or retired leaf never equals a recorded version).
    pub(crate) fn version(self) -> u64 {
        // SAFETY: see the type's contract.
        unsafe { self.0.as_ref() }
            .header
            .version
            .load(Ordering::Acquire)
    }
}

/// A leaf a scan copied: the leaf, the version its copy matches, and its
/// key interval `[lo, hi)` at that instant (`None`: unbounded). The bounds
/// are copies of separators, valid while the scan's guard is held.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScannedLeaf {
    pub(crate) leaf: LeafRef,
    pub(crate) version: u64,
    pub(crate) lo: Option<SlotKey>,
    pub(crate) hi: Option<SlotKey>,
}

/// A change of a leaf by an insert, reported to the inserter so a
/// transaction that scanned the leaf before can keep its node-set entry
/// (Silo: "if the node's version before the insert matches the node set,
/// update it").
#[derive(Clone, Copy, Debug)]
pub(crate) enum LeafChange {
    /// The insert itself: the leaf went from `before` to `after`.
    Inserted {
        leaf: LeafRef,
        before: u64,
        after: u64,
    },
    /// A split the insert made room with: the leaf's upper keys moved to a
    /// new right sibling (the leaf's interval shrank).
    Split,
}

impl Leaf {
    fn key(&self, i: usize) -> SlotKey {
        SlotKey {
            a: self.keys_a[i].load(Ordering::Relaxed),
            b: self.keys_b[i].load(Ordering::Relaxed),
        }
    }

    fn record(&self, i: usize) -> u64 {
        self.records[i].load(Ordering::Relaxed)
    }

    fn set(&self, i: usize, key: SlotKey, record: u64) {
        self.keys_a[i].store(key.a, Ordering::Relaxed);
        self.keys_b[i].store(key.b, Ordering::Relaxed);
        self.records[i].store(record, Ordering::Relaxed);
    }

    fn clear(&self, i: usize) {
        self.set(i, SlotKey::EMPTY, 0);
    }

    /// The first position whose key is not below `probe`, and whether it
    /// equals `probe`.
    ///
    /// # Safety
    /// Read under a live guard (keys may be heap keys of any past state).
    unsafe fn lower_bound(&self, probe: &Probe<'_>, n: usize) -> (usize, bool) {
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match probe.cmp_slot(self.key(mid)) {
                std::cmp::Ordering::Greater => lo = mid + 1,
                std::cmp::Ordering::Less => hi = mid,
                std::cmp::Ordering::Equal => return (mid, true),
            }
        }
        (lo, false)
    }

    /// Under the lock: inserts at `pos` of `n` entries.
    fn insert_at(&self, pos: usize, key: SlotKey, record: u64, n: usize) {
        assert!(n < LEAF_CAPACITY && pos <= n);
        for i in (pos..n).rev() {
            self.set(i + 1, self.key(i), self.record(i));
        }
        self.set(pos, key, record);
        self.header.set_count(n + 1);
    }

    /// Under the lock: removes the entry at `pos` of `n`; returns its key,
    /// which the caller retires.
    fn remove_at(&self, pos: usize, n: usize) -> SlotKey {
        assert!(pos < n && n <= LEAF_CAPACITY);
        let key = self.key(pos);
        for i in pos..n - 1 {
            self.set(i, self.key(i + 1), self.record(i + 1));
        }
        self.clear(n - 1);
        self.header.set_count(n - 1);
        key
    }
}

impl Inner {
    fn key(&self, i: usize) -> SlotKey {
        SlotKey {
            a: self.keys_a[i].load(Ordering::Relaxed),
            b: self.keys_b[i].load(Ordering::Relaxed),
        }
    }

    fn set_key(&self, i: usize, key: SlotKey) {
        self.keys_a[i].store(key.a, Ordering::Relaxed);
        self.keys_b[i].store(key.b, Ordering::Relaxed);
    }

    fn child(&self, i: usize) -> NodePtr {
        self.children[i].load(Ordering::Relaxed) as usize as NodePtr
    }

    fn set_child(&self, i: usize, child: NodePtr) {
        self.children[i].store(child as usize as u64, Ordering::Relaxed);
    }

    /// The child to descend into for `target`.
    ///
    /// # Safety
    /// Read under a live guard.
    unsafe fn child_index(&self, target: Target<'_>, n: usize) -> usize {
        let (probe, strict) = match target {
            Target::Leftmost => return 0,
            Target::Rightmost => return n,
            Target::Key(p) => (p, false),
            Target::Below(p) => (p, true),
        };
        // The number of separators <= probe (or < probe, strict).
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let order = probe.cmp_slot(self.key(mid));
            let separator_before = match order {
                std::cmp::Ordering::Greater => true,
                std::cmp::Ordering::Equal => !strict,
                std::cmp::Ordering::Less => false,
            };
            if separator_before {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Under the lock: adds separator `key` with `right` as the child after
    /// it, right of child `idx`.
    fn insert_separator(&self, idx: usize, key: SlotKey, right: NodePtr) {
        let n = self.header.count(INNER_CAPACITY);
        assert!(n < INNER_CAPACITY && idx <= n);
        for i in (idx..n).rev() {
            self.set_key(i + 1, self.key(i));
            self.set_child(i + 2, self.child(i + 1));
        }
        self.set_key(idx, key);
        self.set_child(idx + 1, right);
        self.header.set_count(n + 1);
    }

    /// Under the lock: removes separator `idx` and the child after it;
    /// returns the separator, which the caller retires.
    fn remove_separator(&self, idx: usize) -> SlotKey {
        let n = self.header.count(INNER_CAPACITY);
        assert!(idx < n);
        let key = self.key(idx);
        for i in idx..n - 1 {
            self.set_key(i, self.key(i + 1));
            self.set_child(i + 1, self.child(i + 2));
        }
        self.set_key(n - 1, SlotKey::EMPTY);
        self.set_child(n, std::ptr::null());
        self.header.set_count(n - 1);
        key
    }
}

fn new_leaf() -> *mut Leaf {
    Box::into_raw(Box::new(Leaf {
        header: Header::new(true),
        keys_a: words(),
        keys_b: words(),
        records: words(),
    }))
}

fn new_inner() -> *mut Inner {
    Box::into_raw(Box::new(Inner {
        header: Header::new(false),
        keys_a: words(),
        keys_b: words(),
        children: words(),
    }))
}

/// Asks for the cache lines a search of `node` reads first (the header and
/// the keys' first words), so their misses overlap instead of following one
/// another down the binary search: at a million keys most of a lookup's
/// time is these misses.
#[inline(always)]
fn prefetch_node(node: NodePtr) {
    // Not under loom: its nodes are small (the offsets below assume 32-slot
    // nodes) and a prefetch is no memory access a model could check.
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let base = node as *const i8;
        // Header plus `keys_a` (24 + 256 bytes): five lines. Prefetching is
        // a hint: an address is never dereferenced by it.
        for line in 0..5 {
            // SAFETY: `_mm_prefetch` never faults; the offsets stay within
            // the node's allocation (at least 776 bytes).
            unsafe { _mm_prefetch(base.wrapping_add(line * 64), _MM_HINT_T0) };
        }
    }
    #[cfg(any(not(target_arch = "x86_64"), loom))]
    let _ = node;
}

/// # Safety
/// `node` was read under a live guard (nodes are freed through it).
unsafe fn header<'a>(node: NodePtr) -> &'a Header {
    &*node
}

unsafe fn as_leaf<'a>(node: NodePtr) -> &'a Leaf {
    debug_assert!(header(node).leaf);
    &*(node as *const Leaf)
}

unsafe fn as_inner<'a>(node: NodePtr) -> &'a Inner {
    debug_assert!(!header(node).leaf);
    &*(node as *const Inner)
}

/// Frees a node's memory now (not the keys it holds, which moved elsewhere
/// or are freed by the caller).
unsafe fn free_node(node: NodePtr) {
    if header(node).leaf {
        drop(Box::from_raw(node as *mut Leaf));
    } else {
        drop(Box::from_raw(node as *mut Inner));
    }
}

fn retire_node(node: NodePtr, guard: &Guard) {
    let address = node as usize;
    guard.defer_execute(move || {
        // SAFETY: the node was unlinked and marked obsolete before it was
        // retired, and every guard that could have reached it is gone.
        unsafe { free_node(address as NodePtr) }
    });
}

/// Where a descent goes.
#[derive(Clone, Copy, Debug)]
enum Target<'a> {
    /// The leaf whose interval holds this key.
    Key(Probe<'a>),
    /// The leaf whose interval holds the keys just below this key.
    Below(Probe<'a>),
    Leftmost,
    Rightmost,
}

/// A validated path to a leaf.
#[derive(Clone, Copy)]
struct Path {
    leaf: *const Leaf,
    leaf_version: u64,
    /// The parent, its version and the leaf's child index in it.
    parent: Option<(*const Inner, u64, usize)>,
    /// The leaf's interval: `None` is unbounded.
    lo: Option<SlotKey>,
    hi: Option<SlotKey>,
}

enum Descent {
    Leaf(Path),
    /// A full inner node on the way, for an insert to split first.
    FullInner {
        node: *const Inner,
        version: u64,
        parent: Option<(*const Inner, u64, usize)>,
    },
    Restart,
}

/// Counts restarts; spins, then yields.
struct Restarts(u32);

impl Restarts {
    fn again(&mut self) {
        self.0 += 1;
        assert!(
            self.0 < MAX_RESTARTS,
            "a B+-tree operation restarted {} times",
            self.0
        );
        if self.0 < SPINS_BEFORE_YIELD {
            spin_hint();
        } else {
            yield_now();
        }
    }
}

/// The concurrent B+-tree from keys (byte strings) to records.
pub(crate) struct BTree {
    root: AtomicU64,
    len: AtomicU64,
}

// SAFETY: all shared state is atomic; nodes are freed through epoch-based
// reclamation or with exclusive access (drop).
unsafe impl Send for BTree {}
unsafe impl Sync for BTree {}

impl BTree {
    pub(crate) fn new() -> Self {
        BTree {
            root: AtomicU64::new(new_leaf() as NodePtr as usize as u64),
            len: AtomicU64::new(0),
        }
    }

    /// Entries in the tree (exact when no operation is in flight).
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed) as usize
    }

    fn root(&self) -> NodePtr {
        self.root.load(Ordering::Acquire) as usize as NodePtr
    }

    /// One optimistic descent. Every node's version is checked after its
    /// child's version was read (lock coupling), so the path, the leaf's
    /// version and its interval are consistent at one instant.
    ///
    /// # Safety
    /// The caller holds a guard.
    unsafe fn descend(&self, target: Target<'_>, split_full: bool) -> Descent {
        let mut node = self.root();
        let Some(mut version) = header(node).read() else {
            return Descent::Restart;
        };
        if self.root() != node {
            return Descent::Restart;
        }
        let mut parent: Option<(*const Inner, u64, usize)> = None;
        let (mut lo, mut hi) = (None, None);
        for _depth in 0..64 {
            if let Some((p, pv, _)) = parent {
                if !(*p).header.check(pv) {
                    return Descent::Restart;
                }
            }
            if header(node).leaf {
                return Descent::Leaf(Path {
                    leaf: node as *const Leaf,
                    leaf_version: version,
                    parent,
                    lo,
                    hi,
                });
            }
            let inner = as_inner(node);
            let n = inner.header.count(INNER_CAPACITY);
            if split_full && n == INNER_CAPACITY {
                return Descent::FullInner {
                    node: inner,
                    version,
                    parent,
                };
            }
            let idx = inner.child_index(target, n);
            let child = inner.child(idx);
            let child_lo = if idx > 0 {
                Some(inner.key(idx - 1))
            } else {
                lo
            };
            let child_hi = if idx < n { Some(inner.key(idx)) } else { hi };
            if !inner.header.check(version) {
                return Descent::Restart;
            }
            assert!(
                !child.is_null(),
                "a validated inner node has a null child {idx} of {n}"
            );
            prefetch_node(child);
            let Some(child_version) = header(child).read() else {
                return Descent::Restart;
            };
            parent = Some((inner, version, idx));
            node = child;
            version = child_version;
            lo = child_lo;
            hi = child_hi;
        }
        panic!("B+-tree deeper than 64 levels");
    }

    /// A validated path to the leaf for `target` (restarting as needed).
    ///
    /// # Safety
    /// The caller holds a guard.
    unsafe fn leaf_path(&self, target: Target<'_>) -> Path {
        let mut restarts = Restarts(0);
        loop {
            if let Descent::Leaf(path) = self.descend(target, false) {
                return path;
            }
            restarts.again();
        }
    }

    /// The record for `key`.
    pub(crate) fn get(&self, key: &[u8], _guard: &Guard) -> Option<RecordRef> {
        let probe = Probe::new(key);
        let mut restarts = Restarts(0);
        loop {
            // SAFETY: the guard is held.
            unsafe {
                let path = self.leaf_path(Target::Key(probe));
                let leaf = &*path.leaf;
                let n = leaf.header.count(LEAF_CAPACITY);
                let (pos, found) = leaf.lower_bound(&probe, n);
                let record = if found { leaf.record(pos) } else { 0 };
                if leaf.header.check(path.leaf_version) {
                    return RecordRef::from_raw(record);
                }
            }
            restarts.again();
        }
    }

    /// Links `record` under `key` unless the key has a record; on failure
    /// hands `record` back. `observe` learns of every leaf change the insert
    /// made, with the versions before and after.
    pub(crate) fn insert(
        &self,
        key: &[u8],
        record: RecordRef,
        _guard: &Guard,
        observe: &mut dyn FnMut(LeafChange),
    ) -> Result<(), RecordRef> {
        let probe = Probe::new(key);
        let mut restarts = Restarts(0);
        loop {
            // SAFETY: the guard is held.
            unsafe {
                match self.descend(Target::Key(probe), true) {
                    Descent::Restart => {}
                    Descent::FullInner {
                        node,
                        version,
                        parent,
                    } => self.split_inner(node, version, parent),
                    Descent::Leaf(path) => {
                        let leaf = &*path.leaf;
                        let n = leaf.header.count(LEAF_CAPACITY);
                        let (pos, found) = leaf.lower_bound(&probe, n);
                        if found {
                            if leaf.header.check(path.leaf_version) {
                                return Err(record);
                            }
                        } else if n == LEAF_CAPACITY {
                            self.split_leaf(&path, pos, observe);
                        } else if leaf.header.try_lock(path.leaf_version) {
                            // The version is the one the search ran under, so
                            // `pos` and `n` are exact and the key is absent.
                            leaf.insert_at(pos, SlotKey::new_owned(key), record.as_raw(), n);
                            let after = leaf.header.unlock();
                            self.len.fetch_add(1, Ordering::Relaxed);
                            observe(LeafChange::Inserted {
                                leaf: LeafRef(NonNull::from(leaf)),
                                before: path.leaf_version,
                                after,
                            });
                            return Ok(());
                        }
                    }
                }
            }
            restarts.again();
        }
    }

    /// Locks `parent` (if any) and `node` at the versions a descent saw;
    /// false (nothing locked) if either changed, or if a root without a
    /// parent is no longer the root.
    unsafe fn lock_pair(
        &self,
        node: NodePtr,
        version: u64,
        parent: Option<(*const Inner, u64, usize)>,
    ) -> bool {
        if let Some((p, pv, _)) = parent {
            if !(*p).header.try_lock(pv) {
                return false;
            }
        }
        if !header(node).try_lock(version) {
            if let Some((p, _, _)) = parent {
                (*p).header.unlock_unchanged();
            }
            return false;
        }
        if parent.is_none() && self.root() != node {
            header(node).unlock_unchanged();
            return false;
        }
        true
    }

    /// Links `right` after `left` with separator `separator`: into the
    /// locked parent, or under a new root.
    unsafe fn link_sibling(
        &self,
        left: NodePtr,
        parent: Option<(*const Inner, u64, usize)>,
        separator: SlotKey,
        right: NodePtr,
    ) {
        match parent {
            Some((p, _, idx)) => (*p).insert_separator(idx, separator, right),
            None => {
                let root = new_inner();
                (*root).set_key(0, separator);
                (*root).set_child(0, left);
                (*root).set_child(1, right);
                (*root).header.set_count(1);
                self.root
                    .store(root as NodePtr as usize as u64, Ordering::Release);
            }
        }
    }

    /// Splits a full leaf (best effort: returns without change if a lock is
    /// lost). `pos` is where the pending insert goes: appends and prepends
    /// split off one entry, so sequential keys fill leaves.
    unsafe fn split_leaf(&self, path: &Path, pos: usize, observe: &mut dyn FnMut(LeafChange)) {
        let node = path.leaf as NodePtr;
        if !self.lock_pair(node, path.leaf_version, path.parent) {
            return;
        }
        let leaf = &*path.leaf;
        let n = leaf.header.count(LEAF_CAPACITY);
        assert_eq!(n, LEAF_CAPACITY, "split of a leaf that is not full");
        let mid = if pos == n {
            n - 1
        } else if pos == 0 {
            1
        } else {
            n / 2
        };
        let right_ptr = new_leaf();
        let right = &*right_ptr;
        for i in mid..n {
            right.set(i - mid, leaf.key(i), leaf.record(i));
            leaf.clear(i);
        }
        right.header.set_count(n - mid);
        leaf.header.set_count(mid);
        let separator = right.key(0).clone_owned();
        self.link_sibling(node, path.parent, separator, right_ptr as NodePtr);
        leaf.header.unlock();
        if let Some((p, _, _)) = path.parent {
            (*p).header.unlock();
        }
        observe(LeafChange::Split);
    }

    /// Splits a full inner node (best effort, as [`BTree::split_leaf`]).
    unsafe fn split_inner(
        &self,
        node: *const Inner,
        version: u64,
        parent: Option<(*const Inner, u64, usize)>,
    ) {
        if !self.lock_pair(node as NodePtr, version, parent) {
            return;
        }
        let inner = &*node;
        let n = inner.header.count(INNER_CAPACITY);
        assert_eq!(n, INNER_CAPACITY, "split of an inner node that is not full");
        let mid = n / 2;
        let separator = inner.key(mid);
        let right_ptr = new_inner();
        let right = &*right_ptr;
        for i in mid + 1..n {
            right.set_key(i - mid - 1, inner.key(i));
            inner.set_key(i, SlotKey::EMPTY);
        }
        for i in mid + 1..=n {
            right.set_child(i - mid - 1, inner.child(i));
            inner.set_child(i, std::ptr::null());
        }
        inner.set_key(mid, SlotKey::EMPTY);
        right.header.set_count(n - mid - 1);
        inner.header.set_count(mid);
        self.link_sibling(node as NodePtr, parent, separator, right_ptr as NodePtr);
        inner.header.unlock();
        if let Some((p, _, _)) = parent {
            (*p).header.unlock();
        }
    }

    /// Unlinks `key` if its record is `record`; returns whether it did. A
    /// leaf left under a quarter full merges with a sibling when both fit
    /// in three quarters of a leaf.
    pub(crate) fn remove_if(&self, key: &[u8], record: RecordRef, guard: &Guard) -> bool {
        let probe = Probe::new(key);
        let mut restarts = Restarts(0);
        let mut may_merge = true;
        loop {
            // SAFETY: the guard is held.
            unsafe {
                let path = self.leaf_path(Target::Key(probe));
                let leaf = &*path.leaf;
                let n = leaf.header.count(LEAF_CAPACITY);
                let (pos, found) = leaf.lower_bound(&probe, n);
                if !found || leaf.record(pos) != record.as_raw() {
                    if leaf.header.check(path.leaf_version) {
                        return false;
                    }
                } else if may_merge && n - 1 < MERGE_BELOW && path.parent.is_some() {
                    if self.remove_and_merge(&path, pos, guard) {
                        self.len.fetch_sub(1, Ordering::Relaxed);
                        return true;
                    }
                    // A lock was lost: remove without merging.
                    may_merge = false;
                } else if leaf.header.try_lock(path.leaf_version) {
                    let removed = leaf.remove_at(pos, n);
                    leaf.header.unlock();
                    removed.retire(guard);
                    self.len.fetch_sub(1, Ordering::Relaxed);
                    return true;
                }
            }
            restarts.again();
        }
    }

    /// Removes entry `pos` of the path's leaf and merges the leaf with a
    /// sibling if both fit; false (nothing changed) if a lock was lost.
    unsafe fn remove_and_merge(&self, path: &Path, pos: usize, guard: &Guard) -> bool {
        let (p, _, idx) = path.parent.expect("merge needs a parent");
        if !self.lock_pair(path.leaf as NodePtr, path.leaf_version, path.parent) {
            return false;
        }
        let parent = &*p;
        let leaf = &*path.leaf;
        let n = leaf.header.count(LEAF_CAPACITY);
        let pn = parent.header.count(INNER_CAPACITY);
        let sibling_ptr = if pn == 0 {
            None
        } else if idx > 0 {
            Some(parent.child(idx - 1))
        } else {
            Some(parent.child(idx + 1))
        };
        let sibling = match sibling_ptr {
            Some(s) => {
                let locked = header(s).read().is_some_and(|sv| header(s).try_lock(sv));
                if !locked {
                    leaf.header.unlock_unchanged();
                    parent.header.unlock_unchanged();
                    return false;
                }
                Some(as_leaf(s))
            }
            None => None,
        };
        let removed = leaf.remove_at(pos, n);
        removed.retire(guard);
        let Some(sibling) = sibling else {
            leaf.header.unlock();
            parent.header.unlock_unchanged();
            return true;
        };
        let (left, right, separator_idx) = if idx > 0 {
            (sibling, leaf, idx - 1)
        } else {
            (leaf, sibling, idx)
        };
        let (ln, rn) = (
            left.header.count(LEAF_CAPACITY),
            right.header.count(LEAF_CAPACITY),
        );
        if ln + rn > MERGED_AT_MOST {
            leaf.header.unlock();
            sibling.header.unlock_unchanged();
            parent.header.unlock_unchanged();
            return true;
        }
        for i in 0..rn {
            left.set(ln + i, right.key(i), right.record(i));
        }
        left.header.set_count(ln + rn);
        let separator = parent.remove_separator(separator_idx);
        separator.retire(guard);
        left.header.unlock();
        right.header.unlock_obsolete();
        parent.header.unlock();
        retire_node(right as *const Leaf as NodePtr, guard);
        true
    }

    /// Scans the keys within `(lower, upper)` in `direction` order, one leaf
    /// at a time: each leaf is copied and validated, reported to `on_leaf`
    /// with the version its copy is consistent with, then its entries in the
    /// range go to `visit` until it returns false. Returns true if the scan
    /// covered its whole range, false if `visit` stopped it.
    pub(crate) fn scan(
        &self,
        (lower, upper): (Bound<&[u8]>, Bound<&[u8]>),
        forward: bool,
        _guard: &Guard,
        on_leaf: &mut dyn FnMut(ScannedLeaf),
        visit: &mut dyn FnMut(&[u8], RecordRef) -> bool,
    ) -> bool {
        let lower_probe = bound_probe(lower);
        let upper_probe = bound_probe(upper);
        // Where the next leaf starts: the previous leaf's interval bound.
        let mut next: Option<SlotKey> = None;
        let mut restarts = Restarts(0);
        let mut snapshot = [(SlotKey::EMPTY, 0u64); LEAF_CAPACITY];
        loop {
            let mut cursor_buf = [0u8; 16];
            // SAFETY: separators were read under the held guard.
            let start = match next {
                None if forward => lower,
                None => upper,
                Some(k) if forward => Bound::Included(unsafe { k.bytes(&mut cursor_buf) }),
                Some(k) => Bound::Excluded(unsafe { k.bytes(&mut cursor_buf) }),
            };
            let start_probe = bound_probe(start);
            let target = match (start, start_probe) {
                (Bound::Unbounded, _) | (_, None) if forward => Target::Leftmost,
                (Bound::Unbounded, _) | (_, None) => Target::Rightmost,
                (Bound::Excluded(_), Some(p)) if !forward => Target::Below(p),
                (_, Some(p)) => Target::Key(p),
            };
            // SAFETY: the guard is held.
            let (path, n) = unsafe {
                let path = self.leaf_path(target);
                let leaf = &*path.leaf;
                let n = leaf.header.count(LEAF_CAPACITY);
                for (i, slot) in snapshot.iter_mut().enumerate().take(n) {
                    *slot = (leaf.key(i), leaf.record(i));
                }
                if !leaf.header.check(path.leaf_version) {
                    restarts.again();
                    continue;
                }
                (path, n)
            };
            on_leaf(ScannedLeaf {
                leaf: LeafRef(NonNull::new(path.leaf as *mut Leaf).expect("non-null leaf")),
                version: path.leaf_version,
                lo: path.lo,
                hi: path.hi,
            });
            let entries = &snapshot[..n];
            let mut key_buf = [0u8; 16];
            let mut deliver = |(key, record): (SlotKey, u64)| -> Option<bool> {
                // SAFETY: validated copies read under the held guard.
                unsafe {
                    if !within(start, start_probe, key, forward) {
                        return None;
                    }
                    let end = if forward { upper_probe } else { lower_probe };
                    let end_bound = if forward { upper } else { lower };
                    if !within(end_bound, end, key, !forward) {
                        return Some(true);
                    }
                    let record = RecordRef::from_raw(record).expect("leaf entries hold records");
                    if !visit(key.bytes(&mut key_buf), record) {
                        return Some(false);
                    }
                }
                None
            };
            let verdict = if forward {
                entries.iter().copied().find_map(&mut deliver)
            } else {
                entries.iter().rev().copied().find_map(&mut deliver)
            };
            if let Some(exhausted) = verdict {
                return exhausted;
            }
            // The whole leaf is consumed: continue past its interval, if the
            // range goes on.
            let boundary = if forward { path.hi } else { path.lo };
            let Some(boundary) = boundary else {
                return true;
            };
            // SAFETY: read under the held guard.
            let goes_on = unsafe {
                if forward {
                    match (upper, upper_probe) {
                        (Bound::Included(_), Some(p)) => p.cmp_slot(boundary).is_ge(),
                        (Bound::Excluded(_), Some(p)) => p.cmp_slot(boundary).is_gt(),
                        _ => true,
                    }
                } else {
                    match lower_probe {
                        Some(p) => p.cmp_slot(boundary).is_lt(),
                        None => true,
                    }
                }
            };
            if !goes_on {
                return true;
            }
            next = Some(boundary);
        }
    }

    /// The leaves a scan of the whole tree copies: under loom, for tests to
    /// check that a model split or merged the leaves it meant to (exact when
    /// no operation is in flight).
    #[cfg(loom)]
    pub(crate) fn leaf_count(&self, guard: &Guard) -> usize {
        let mut leaves = 0;
        self.scan(
            (Bound::Unbounded, Bound::Unbounded),
            true,
            guard,
            &mut |_| leaves += 1,
            &mut |_, _| true,
        );
        leaves
    }

    /// Every record, for exclusive or guarded bookkeeping (drop, heap bytes).
    pub(crate) fn for_each(&self, guard: &Guard, mut f: impl FnMut(RecordRef)) {
        self.scan(
            (Bound::Unbounded, Bound::Unbounded),
            true,
            guard,
            &mut |_| {},
            &mut |_, record| {
                f(record);
                true
            },
        );
    }
}

fn bound_probe<'a>(bound: Bound<&'a [u8]>) -> Option<Probe<'a>> {
    match bound {
        Bound::Included(b) | Bound::Excluded(b) => Some(Probe::new(b)),
        Bound::Unbounded => None,
    }
}

/// Whether `key` lies on the inner side of `bound`: at or above it (below it
/// for an upper bound, `as_lower` false), strictly for an exclusive bound.
/// A scan's keys are past its start and before its end: the start is a
/// lower bound when it runs forward, the end when it runs in reverse.
unsafe fn within(
    bound: Bound<&[u8]>,
    probe: Option<Probe<'_>>,
    key: SlotKey,
    as_lower: bool,
) -> bool {
    let Some(p) = probe else { return true };
    // `order` is the bound's order against the key.
    let order = p.cmp_slot(key);
    match (bound, as_lower) {
        (Bound::Included(_), true) => order.is_le(),
        (Bound::Excluded(_), true) => order.is_lt(),
        (Bound::Included(_), false) => order.is_ge(),
        (Bound::Excluded(_), false) => order.is_gt(),
        (Bound::Unbounded, _) => true,
    }
}

impl Drop for BTree {
    fn drop(&mut self) {
        // Exclusive access: free every node and every key still in one
        // (records belong to the relation, which frees them).
        let mut stack = vec![self.root()];
        while let Some(node) = stack.pop() {
            // SAFETY: exclusive access; every node is reachable once.
            unsafe {
                if header(node).leaf {
                    let leaf = as_leaf(node);
                    for i in 0..leaf.header.count(LEAF_CAPACITY) {
                        leaf.key(i).free();
                    }
                } else {
                    let inner = as_inner(node);
                    let n = inner.header.count(INNER_CAPACITY);
                    for i in 0..n {
                        inner.key(i).free();
                    }
                    for i in 0..=n {
                        stack.push(inner.child(i));
                    }
                }
                free_node(node);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;

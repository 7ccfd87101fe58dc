//! Detached transaction contexts: ReactDB's per-container *database context*.
//!
//! A [`Transaction`](crate::Transaction) borrows its worker and holds its own
//! epoch guard, so it lives on one thread. A reactor transaction instead has
//! one context per container it touches, driven by that container's executor,
//! and committed together by the root's coordinator with
//! [`commit_contexts`] (Silo's commit over all contexts at once: the in-process
//! two-phase commit), or with [`commit_contexts_sequenced`], which also
//! places every commit with writes in one serial order and reports its
//! writes (what a replicating placement ships to followers). A `TxContext`
//! therefore owns its buffers, keeps the relations it touched alive, and
//! takes the epoch guard as an argument.
//!
//! # Safety
//!
//! Record pointers in a context stay valid only while an epoch guard that was
//! alive when they were read is still alive. Every `unsafe` method here has one
//! rule: the guard passed to each operation must have been created before the
//! context's first operation and must stay alive until the context is
//! committed or aborted (holding one guard per context on its executor for the
//! context's whole life satisfies it).

use std::sync::Arc;

use crate::engine::{Engine, Worker};
use crate::error::{CommitError, TxError};
use crate::relation::{KeyBounds, Relation, ScanDirection, PARTITION_PREFIX_BYTES};
use crate::sync::AtomicU64;
use crate::sync::Guard;
use crate::txn::{
    abort_part, capture_writes, commit_parts, finish_part, CaptureWrite, CommitInfo, NoSequence,
    Sequencer, TxOps,
};

/// One transaction's state in one container.
pub struct TxContext {
    worker: Worker,
    /// The relations this context's buffers point into.
    keep_alive: Vec<Arc<Relation>>,
}

// SAFETY: the raw relation pointers in the buffers point into relations kept
// alive by `keep_alive`; relations and records are `Sync`. The epoch-guard rule
// in the module documentation covers the record pointers.
unsafe impl Send for TxContext {}

impl TxContext {
    pub fn new(engine: &Engine) -> Self {
        TxContext {
            worker: engine.worker(),
            keep_alive: Vec::new(),
        }
    }

    /// Whether the context has read or written nothing yet.
    pub fn is_untouched(&self) -> bool {
        self.worker.buffers.is_empty()
    }

    fn ops<'a>(&'a mut self, guard: &'a Guard, relation: &Arc<Relation>) -> TxOps<'a> {
        if !self.keep_alive.iter().any(|r| Arc::ptr_eq(r, relation)) {
            self.keep_alive.push(Arc::clone(relation));
        }
        TxOps {
            worker: &mut self.worker,
            guard,
        }
    }

    /// See [`Transaction::get_with`](crate::Transaction::get_with).
    ///
    /// # Safety
    /// The guard rule of the module documentation.
    pub unsafe fn get_with<T>(
        &mut self,
        guard: &Guard,
        relation: &Arc<Relation>,
        key: &[u8],
        read: impl FnOnce(&[u8]) -> T,
    ) -> Result<Option<T>, TxError> {
        self.ops(guard, relation).get_with(relation, key, read)
    }

    /// # Safety
    /// The guard rule of the module documentation.
    pub unsafe fn put(
        &mut self,
        guard: &Guard,
        relation: &Arc<Relation>,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), TxError> {
        self.ops(guard, relation).put(relation, key, value)
    }

    /// # Safety
    /// The guard rule of the module documentation.
    pub unsafe fn insert(
        &mut self,
        guard: &Guard,
        relation: &Arc<Relation>,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), TxError> {
        self.ops(guard, relation).insert(relation, key, value)
    }

    /// # Safety
    /// The guard rule of the module documentation.
    pub unsafe fn update(
        &mut self,
        guard: &Guard,
        relation: &Arc<Relation>,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), TxError> {
        self.ops(guard, relation).update(relation, key, value)
    }

    /// # Safety
    /// The guard rule of the module documentation.
    pub unsafe fn delete(
        &mut self,
        guard: &Guard,
        relation: &Arc<Relation>,
        key: &[u8],
    ) -> Result<bool, TxError> {
        self.ops(guard, relation).delete(relation, key)
    }

    /// # Safety
    /// The guard rule of the module documentation.
    pub unsafe fn scan(
        &mut self,
        guard: &Guard,
        relation: &Arc<Relation>,
        bounds: KeyBounds<'_>,
        direction: ScanDirection,
        limit: usize,
        visit: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize, TxError> {
        self.ops(guard, relation)
            .scan(relation, bounds, direction, limit, visit)
    }

    /// See [`Transaction::scan_partition`](crate::Transaction::scan_partition).
    ///
    /// # Safety
    /// The guard rule of the module documentation.
    pub unsafe fn scan_partition(
        &mut self,
        guard: &Guard,
        relation: &Arc<Relation>,
        prefix: [u8; PARTITION_PREFIX_BYTES],
        visit: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<usize, TxError> {
        self.ops(guard, relation)
            .scan_partition(relation, prefix, visit)
    }

    /// Adds a version word kept outside the engine to the read set: commit
    /// fails unless `word` still holds `observed` when it validates (after
    /// the write sets are locked and fenced, as a record's TID is checked).
    /// Whoever changes the word must do so, and fence (`SeqCst`), before
    /// reading or writing the records the word guards: then a committer that
    /// validated the old value locked its records before they were touched.
    ///
    /// # Safety
    /// `word` stays alive until this context commits or aborts.
    pub unsafe fn observe_version(&mut self, word: &std::sync::atomic::AtomicU64, observed: u64) {
        self.worker.buffers.versions.push(crate::txn::VersionEntry {
            word: std::ptr::NonNull::from(word),
            observed,
            phantom: false,
        });
    }

    /// Aborts: undoes placeholder inserts and clears the context for reuse.
    ///
    /// # Safety
    /// The guard rule of the module documentation.
    pub unsafe fn abort(&mut self, guard: &Guard) {
        abort_part(&mut self.worker, guard);
        self.keep_alive.clear();
    }
}

/// Commits the contexts of one transaction (one per container) atomically:
/// every write set is locked in one global order, every context validated, and
/// all install with one TID, or none does and all are aborted. The contexts
/// are cleared for reuse either way. `guard` is the caller's own.
///
/// # Safety
/// The guard rule of the module documentation holds for every context (the
/// guards their operations ran under are still alive).
pub unsafe fn commit_contexts(
    contexts: &mut [&mut TxContext],
    guard: &Guard,
) -> Result<CommitInfo, CommitError> {
    check_one_engine(contexts);
    let result = {
        let mut workers: Vec<&mut Worker> = contexts.iter_mut().map(|c| &mut c.worker).collect();
        commit_parts(&mut workers, guard, &mut NoSequence)
    };
    finish_contexts(contexts, guard, &result);
    result
}

/// [`commit_contexts`], placing every commit with writes in one serial
/// order: a transaction with writes takes the number
/// `sequencer.fetch_add(1) + 1` (the first is 1) once its write sets are
/// locked and before it validates, at Silo's serialization point, so for
/// any two conflicting transactions that both commit, the one with the
/// smaller number comes first in a serial order (a follower applying
/// committed transactions in number order reaches the same state). Returns
/// the number, if one was taken (none for a read-only transaction, nor for
/// one that failed to lock), with the outcome: a number taken by a
/// transaction that then failed validation belongs to that abort (numbers
/// are dense: the caller accounts for each, committed or aborted).
///
/// On commit, before the contexts are cleared, `capture` receives every
/// write: its relation, the full key, and the value installed (`None`:
/// deleted). Each key of each relation appears once.
///
/// # Safety
/// As [`commit_contexts`].
pub unsafe fn commit_contexts_sequenced(
    contexts: &mut [&mut TxContext],
    guard: &Guard,
    sequencer: &AtomicU64,
    capture: &mut CaptureWrite<'_>,
) -> (Option<u64>, Result<CommitInfo, CommitError>) {
    check_one_engine(contexts);
    let mut sequence = Sequencer {
        counter: sequencer,
        taken: None,
    };
    let result = {
        let mut workers: Vec<&mut Worker> = contexts.iter_mut().map(|c| &mut c.worker).collect();
        commit_parts(&mut workers, guard, &mut sequence)
    };
    if let Ok(info) = &result {
        debug_assert_eq!(
            sequence.taken.is_some(),
            !info.read_only,
            "a commit with writes took a number, a read-only one none"
        );
        for context in contexts.iter() {
            capture_writes(&context.worker.buffers, capture);
        }
    }
    finish_contexts(contexts, guard, &result);
    (sequence.taken, result)
}

fn check_one_engine(contexts: &[&mut TxContext]) {
    assert!(!contexts.is_empty(), "commit of no context");
    let engine = Arc::as_ptr(&contexts[0].worker.engine);
    assert!(
        contexts
            .iter()
            .all(|c| Arc::as_ptr(&c.worker.engine) == engine),
        "contexts of one transaction share one engine (one global epoch)"
    );
}

fn finish_contexts(
    contexts: &mut [&mut TxContext],
    guard: &Guard,
    result: &Result<CommitInfo, CommitError>,
) {
    for context in contexts.iter_mut() {
        finish_part(&mut context.worker, guard, result);
        context.keep_alive.clear();
    }
}

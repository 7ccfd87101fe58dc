//! Roost's storage layer: the per-container engine under every other layer.
//!
//! - [`key`]: order-preserving encoding of typed keys;
//! - [`Relation`]: an ordered map of records on Roost's concurrent B+-tree
//!   (optimistic lock coupling; leaf versions are Silo's node set), or a
//!   hashed one (optionally partitioned by a key prefix, to list one
//!   partition's records);
//! - [`tid`]: Silo's TID word (lock, latest, absent, sequence, epoch);
//! - [`Transaction`]: Silo OCC with read/write sets and phantom protection;
//! - [`Table`]: a typed layer (keys via [`KeyCodec`], values via serde);
//! - [`Worker::run`]: the retry helper with bounded backoff;
//! - [`TxContext`], [`commit_contexts`]: per-container contexts of one
//!   transaction, committed together (the reactor layer's two-phase commit);
//!   [`commit_contexts_sequenced`] also numbers commits with writes in a
//!   serial order and reports what they wrote (for replication).
//!
//! Under `--cfg loom` the whole engine compiles against loom's atomics (the
//! `sync` shim): the B+-tree with small nodes, records, relations,
//! transactions and commit, with no epoch ticker thread (the global epoch
//! moves only when a test advances it) and a stand-in epoch guard whose
//! deferred frees run when a model iteration ends (`loom_iteration`).
//! `tests/loom_commit.rs` model-checks the real commit with it.

mod sync;
pub mod tid;

mod btree;
mod context;
mod engine;
pub mod epoch;
pub mod error;
pub mod key;
mod record;
mod relation;
mod txn;
mod typed;

/// Under loom, entries per B+-tree leaf (small, so models split and merge).
#[cfg(loom)]
pub use btree::LEAF_CAPACITY;
pub use context::{commit_contexts, commit_contexts_sequenced, TxContext};
pub use engine::{Engine, EngineConfig, PlantedBugs, RetryPolicy, Worker, WorkerStats};
pub use error::{
    CatalogError, CommitError, Conflict, ConflictAt, ConflictKind, ConstraintViolation, TxError,
};
pub use key::{EncodedKey, KeyCodec, KeyDecodeError, MAX_KEY_BYTES};
pub use relation::{IndexKind, KeyBounds, Relation, ScanDirection, PARTITION_PREFIX_BYTES};
#[cfg(loom)]
pub use sync::loom_iteration;
pub use sync::Guard;
pub use txn::{CaptureWrite, CommitInfo, Transaction, MAX_VALUE_BYTES};
pub use typed::Table;

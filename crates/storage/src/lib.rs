//! Roost's storage layer: the per-container engine under every other layer.
//!
//! - [`key`]: order-preserving encoding of typed keys;
//! - [`Relation`]: an ordered map of records on Roost's concurrent B+-tree
//!   (optimistic lock coupling; leaf versions are Silo's node set), or a
//!   hashed one;
//! - [`tid`]: Silo's TID word (lock, latest, absent, sequence, epoch);
//! - [`Transaction`]: Silo OCC with read/write sets and phantom protection;
//! - [`Table`]: a typed layer (keys via [`KeyCodec`], values via serde);
//! - [`Worker::run`]: the retry helper with bounded backoff;
//! - [`TxContext`], [`commit_contexts`]: per-container contexts of one
//!   transaction, committed together (the reactor layer's two-phase commit).
//!
//! Under `--cfg loom` only the TID word and its shim are compiled, for the
//! model-checked tests of the commit core.

mod sync;
pub mod tid;

#[cfg(not(loom))]
mod btree;
#[cfg(not(loom))]
mod context;
#[cfg(not(loom))]
mod engine;
#[cfg(not(loom))]
pub mod epoch;
#[cfg(not(loom))]
pub mod error;
#[cfg(not(loom))]
pub mod key;
#[cfg(not(loom))]
mod record;
#[cfg(not(loom))]
mod relation;
#[cfg(not(loom))]
mod txn;
#[cfg(not(loom))]
mod typed;

#[cfg(not(loom))]
pub use context::{commit_contexts, TxContext};
#[cfg(not(loom))]
pub use engine::{Engine, EngineConfig, PlantedBugs, RetryPolicy, Worker, WorkerStats};
#[cfg(not(loom))]
pub use error::{CatalogError, CommitError, ConflictKind, ConstraintViolation, TxError};
#[cfg(not(loom))]
pub use key::{EncodedKey, KeyCodec, KeyDecodeError, MAX_KEY_BYTES};
#[cfg(not(loom))]
pub use relation::{IndexKind, KeyBounds, Relation, ScanDirection};
#[cfg(not(loom))]
pub use scc::Guard;
#[cfg(not(loom))]
pub use txn::{CommitInfo, Transaction, MAX_VALUE_BYTES};
#[cfg(not(loom))]
pub use typed::Table;

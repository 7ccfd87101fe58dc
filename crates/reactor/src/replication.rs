//! The hook a replicating placement (Zeus's reliable commit) plugs into:
//! every commit with writes is numbered in one serial order, its changed
//! rows are handed to the placement per reactor, and its caller is answered
//! only once the placement says the writes are replicated.
//!
//! **The number.** When [`Placement::replicates`], a root transaction with
//! writes takes the next number of the database's sequencer (dense, from 1)
//! at Silo's serialization point: after its write sets are locked and
//! fenced, before it validates
//! ([`commit_contexts_sequenced`](roost_storage::commit_contexts_sequenced)).
//! For any two conflicting transactions that both commit, the smaller
//! number is then the earlier one in a serial order (write-write: the second
//! cannot lock until the first installed; write-read: the reader read what
//! the writer installed after its number; read-write: the reader validated
//! its read before the writer locked it, so before the writer's number). A
//! follower that applies committed transactions in number order therefore
//! goes through states the leader's serial order went through. A number
//! taken by a transaction that then fails validation is reported as
//! [`Sequenced::Aborted`], so the placement sees every number exactly once
//! and can release them in order with no gap. Relocations (moves, exports,
//! installs) take no number: they are the placement's own business.
//!
//! **The answer.** [`Placement::sequenced`] returns what the transaction's
//! caller waits for before it learns that the transaction committed (the
//! commit already happened here; the wait keeps the caller from acting on
//! writes a failure could still lose). A read-only transaction asks
//! [`Placement::read_barrier`] with the numbers handed out when it
//! validated: every write it may have read has a number up to that.
//!
//! [`Placement::replicates`]: crate::Placement::replicates
//! [`Placement::sequenced`]: crate::Placement::sequenced
//! [`Placement::read_barrier`]: crate::Placement::read_barrier

use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::placement::ReactorKey;

/// One row a committed transaction changed: the relation's schema name, the
/// key without the reactor's prefix (as [`ExportedReactor`](crate::ExportedReactor)
/// rows are keyed), and the new value (`None`: deleted). Values are the
/// stored bytes (a [`RelationDef`](crate::RelationDef)'s postcard encoding).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RowChange {
    pub relation: String,
    pub key: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

/// The rows a committed transaction changed in one reactor, sorted by
/// relation name, then key (each once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReactorChanges {
    pub reactor: ReactorKey,
    pub rows: Vec<RowChange>,
}

/// A write commit's outcome at its sequence number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sequenced {
    /// Committed here, with its changes per reactor (sorted by reactor key;
    /// never empty: a commit with writes changed rows), and the reactors
    /// it read without writing them (sorted, each once). A replicating
    /// placement must keep both kinds from changing owner until the
    /// transaction is replicated: a new owner's write to a reactor this
    /// transaction read, answered first, would follow it in real time and
    /// precede it in the serial order.
    Committed {
        changes: Vec<ReactorChanges>,
        read: Vec<ReactorKey>,
    },
    /// Took the number, then failed validation: nothing changed.
    Aborted,
}

/// Why a committed transaction's replication did not complete. The
/// transaction committed on this node either way: its caller gets
/// [`ReactorError::Replication`](crate::ReactorError::Replication), never a
/// retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ReplicationError {
    #[error(
        "this node lost its place in the cluster before the writes were replicated: the \
         transaction may or may not survive"
    )]
    OutcomeUnknown,
    #[error("the writes were not replicated: the cluster refused them")]
    Refused,
    #[error("the placement shut down before the writes were replicated")]
    Shutdown,
    /// A read-only transaction's barrier at a node without a valid lease
    /// (cut off from the cluster, or dropped from its view): its reads may
    /// be stale, so it is not answered. It wrote nothing.
    #[error(
        "this node holds no valid lease (cut off from the cluster?): the read was not answered"
    )]
    NotServing,
    /// The node could not make the writes durable on its disk (the log
    /// failed: disk full, an I/O error, a read-only data directory): they
    /// are in memory and may or may not survive; the node takes no more
    /// writes until its disk is fixed and it restarts. Reads go on.
    #[error(
        "this node's durability log failed (disk full or an I/O error; see the node's log): \
         the transaction may or may not survive, and the node takes no writes until it restarts"
    )]
    NotDurable,
}

/// What a transaction's caller waits for once it committed here. Polled on
/// an executor thread, which runs no tokio runtime: complete it from
/// elsewhere (a oneshot channel), as an [`Acquire`](crate::Acquire).
pub type Replication = Pin<Box<dyn Future<Output = Result<(), ReplicationError>> + Send>>;

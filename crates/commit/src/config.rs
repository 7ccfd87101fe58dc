//! Configuration, planted bugs, and the errors of each operation.

use roost_cluster::NodeId;
use thiserror::Error;

use crate::msg::Key;

/// Tunables. Every queue and map the protocol keeps is bounded by one of
/// them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CommitConfig {
    /// Transactions this node may have in its pipeline (committed locally,
    /// not yet reliably committed); `commit` refuses beyond it.
    pub max_in_flight: usize,
    /// R-INVs a follower keeps applied until their R-VAL, over every
    /// coordinator (and the replays it runs); more are dropped and counted
    /// (the sender re-sends).
    pub max_stored: usize,
    /// R-INVs a follower holds back until their pipeline predecessor is
    /// applied or validated, over every coordinator.
    pub max_held: usize,
    /// Objects one transaction may write.
    pub max_writes: usize,
    /// Objects one read-only transaction may read.
    pub max_reads: usize,
    /// Largest object payload (bytes).
    pub max_data_bytes: usize,
    /// Period of the retransmission timer: un-acked R-INVs are re-sent and
    /// followers re-ack their oldest stored R-INVs (a lost R-VAL).
    pub retransmit_ms: u64,
    /// Messages one timer tick may re-send.
    pub max_resends_per_tick: usize,
}

impl Default for CommitConfig {
    fn default() -> Self {
        CommitConfig {
            max_in_flight: 1024,
            max_stored: 1 << 16,
            max_held: 1 << 14,
            max_writes: 1024,
            max_reads: 1024,
            max_data_bytes: 1 << 20,
            retransmit_ms: 20,
            max_resends_per_tick: 256,
        }
    }
}

impl CommitConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (field, value) in [
            ("max_in_flight", self.max_in_flight),
            ("max_stored", self.max_stored),
            ("max_held", self.max_held),
            ("max_writes", self.max_writes),
            ("max_reads", self.max_reads),
            ("max_data_bytes", self.max_data_bytes),
            ("retransmit_ms", self.retransmit_ms as usize),
            ("max_resends_per_tick", self.max_resends_per_tick),
        ] {
            if value == 0 {
                return Err(ConfigError::ZeroBound { field });
            }
        }
        Ok(())
    }
}

/// Planted faults for the checkers' tests (never set in production).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CommitBugs {
    /// The coordinator reports `Committed` (and sends R-VAL) after the
    /// first R-ACK instead of after every follower's: a coordinator crash
    /// then loses a transaction the client was told is committed.
    pub committed_before_all_acks: bool,
    /// A follower applies an R-INV as soon as it arrives, ignoring the
    /// pipeline order of its coordinator.
    pub follower_ignores_pipeline_order: bool,
    /// On an R-VAL, a follower marks each object of the validated slot
    /// Valid at whatever version it holds, even when a later slot's R-INV
    /// has moved the version on: it exposes a version whose own reliable
    /// commit is still pending (other replicas may still hold, and serve,
    /// the older one; the seed: Valid "iff their t_version has not been
    /// increased").
    pub follower_validates_stale_rval: bool,
    /// A read-only transaction reads Invalid objects too (the seed: it
    /// "never reads an Invalid object"): it may return a version whose
    /// reliable commit is still pending, and a replica the R-INV has not
    /// reached yet then returns the older version to a later reader (a
    /// real-time, strict-serializability, violation); the version is lost
    /// if every node that holds it crashes.
    pub read_only_reads_invalid: bool,
}

/// Creating a [`ReliableCommit`](crate::ReliableCommit).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    #[error("{field} must be at least 1")]
    ZeroBound { field: &'static str },
}

/// Why [`ReliableCommit::commit`](crate::ReliableCommit::commit) refused a
/// transaction. Nothing was sent or applied.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CommitError {
    #[error("this node is not a member of the current view")]
    NotMember,
    #[error("{limit} transactions already in flight")]
    TooManyInFlight { limit: usize },
    #[error("a transaction without writes needs no reliable commit")]
    NoWrites,
    #[error("{count} writes exceed the limit of {limit}")]
    TooManyWrites { count: usize, limit: usize },
    #[error("a payload of {len} bytes exceeds the limit of {limit}")]
    Oversized { len: usize, limit: usize },
    #[error("an object is written twice")]
    DuplicateKey,
    #[error("version {given} is not newer than the held version {held}")]
    StaleVersion { held: u64, given: u64 },
    #[error("follower {0} is not a configured node")]
    UnknownFollower(NodeId),
}

/// Why [`ReliableCommit::read_only`](crate::ReliableCommit::read_only)
/// refused a read-only transaction (it read nothing: the client retries,
/// here or at another replica).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ReadOnlyError {
    /// This node holds no lease of its view: a view without it may be
    /// installed already, and its copies no longer kept current.
    #[error("this node does not hold a lease in the current view")]
    NotServing,
    #[error("{count} objects exceed the limit of {limit} per read-only transaction")]
    TooManyKeys { count: usize, limit: usize },
    #[error("an object is read twice")]
    DuplicateKey,
    /// This node holds no copy of the object (not its owner nor a
    /// reader; or it restarted, or the view excluded it, since).
    #[error("object {} is not held here", String::from_utf8_lossy(key))]
    NotReplica { key: Key },
    /// The reliable commit of the version held is still pending: it may
    /// not survive, and other replicas may still serve the older one.
    #[error(
        "object {} is Invalid here (version {version} pending)",
        String::from_utf8_lossy(key)
    )]
    Invalid { key: Key, version: u64 },
}

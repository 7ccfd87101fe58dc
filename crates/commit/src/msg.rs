//! The wire format: R-INV, R-ACK and R-VAL, named and shaped as in the seed
//! (Zeus §5, Figure 4), each carrying the epoch id.
//!
//! Every message is a [`CommitMsg`]: a `version` first (this build writes
//! and reads [`WIRE_VERSION`]; anything else is counted and dropped), the
//! sender's epoch and the body. [`decode`] turns bytes into a message or a
//! [`DecodeError`]; it never panics.

use std::fmt;

use roost_cluster::{EpochId, NodeId};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The version this build writes and reads (2: [`RInv::origin`]).
pub const WIRE_VERSION: u16 = 2;

/// A transaction id, `<local_tx_id, node_id>` as in the seed.
///
/// `local` counts from 1 at each coordinator node: every node runs one
/// pipeline, and followers apply a coordinator's transactions in `local`
/// order. The order is only needed within one pipeline because ownership
/// never moves an object with a pending reliable commit, so an object is
/// never in two pipelines at once. Ordered by node first so that one
/// coordinator's transactions sit together in maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TxId {
    pub node: NodeId,
    pub local: u64,
}

impl TxId {
    pub fn new(node: NodeId, local: u64) -> Self {
        TxId { node, local }
    }

    /// The previous slot of the same pipeline (`None` for the first).
    pub fn prev(self) -> Option<TxId> {
        (self.local > 1).then(|| TxId::new(self.node, self.local - 1))
    }
}

impl fmt::Display for TxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{},{}>", self.local, self.node)
    }
}

/// An object key: opaque bytes (the caller's key encoding).
pub type Key = Vec<u8>;

/// One written object in an R-INV: the new `t_version` and the new
/// `t_data` (opaque bytes).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Write {
    pub key: Key,
    pub version: u64,
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CommitMsg {
    pub version: u16,
    pub epoch: EpochId,
    pub body: Body,
}

impl CommitMsg {
    pub fn new(epoch: EpochId, body: Body) -> Self {
        CommitMsg {
            version: WIRE_VERSION,
            epoch,
            body,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        // Serializing plain owned data into a Vec cannot fail.
        postcard::to_allocvec(self).unwrap_or_default()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Body {
    RInv(RInv),
    RAck(RAck),
    RVal(RVal),
}

impl Body {
    pub fn name(&self) -> &'static str {
        match self {
            Body::RInv(_) => "R-INV",
            Body::RAck(_) => "R-ACK",
            Body::RVal(_) => "R-VAL",
        }
    }

    pub fn tx_id(&self) -> TxId {
        match self {
            Body::RInv(m) => m.tx_id,
            Body::RAck(m) => m.tx_id,
            Body::RVal(m) => m.tx_id,
        }
    }
}

/// Coordinator (or a replayer) → followers: apply these writes, invalid
/// until the R-VAL.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RInv {
    pub tx_id: TxId,
    /// The epoch the R-INV was (re)issued in; the same as the envelope's.
    pub epoch_id: EpochId,
    /// The epoch its coordinator first issued it in (kept by re-sends and
    /// replays; at most `epoch_id`). A node whose state began later (it
    /// restarted, or the view excluded it, since) was not a follower of it
    /// then, whatever the follower list says by node id: a replay installs
    /// there no object that node does not hold.
    pub origin: EpochId,
    /// Every follower of this transaction (the readers of the objects it
    /// wrote), the coordinator excluded.
    pub followers: Vec<NodeId>,
    pub writes: Vec<Write>,
    /// The coordinator had validated every earlier transaction of its
    /// pipeline when it sent this: a follower that missed the previous
    /// slot may apply this one anyway (the seed's prev-VAL bit).
    pub prev_val: bool,
    /// Sent by a follower replaying a failed coordinator's transaction.
    pub replay: bool,
}

/// Follower → whoever sent the R-INV.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RAck {
    pub tx_id: TxId,
    pub epoch_id: EpochId,
}

/// Coordinator (or replayer) → followers: the transaction is reliably
/// committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RVal {
    pub tx_id: TxId,
    pub epoch_id: EpochId,
}

/// Why bytes are not a message this build accepts.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    #[error("malformed message: {0}")]
    Malformed(postcard::Error),
    #[error("unsupported wire version {0} (this build speaks {WIRE_VERSION})")]
    UnsupportedVersion(u16),
    #[error("{0} trailing bytes after the message")]
    Trailing(usize),
}

/// Decodes one message; a wrong version or malformed bytes are errors,
/// never panics.
pub fn decode(bytes: &[u8]) -> Result<CommitMsg, DecodeError> {
    // The version is read first on its own, so a future format with a
    // different body is reported as a version mismatch, not garbage.
    let (version, _) = postcard::take_from_bytes::<u16>(bytes).map_err(DecodeError::Malformed)?;
    if version != WIRE_VERSION {
        return Err(DecodeError::UnsupportedVersion(version));
    }
    let (msg, rest) =
        postcard::take_from_bytes::<CommitMsg>(bytes).map_err(DecodeError::Malformed)?;
    if !rest.is_empty() {
        return Err(DecodeError::Trailing(rest.len()));
    }
    debug_assert_eq!(msg.version, WIRE_VERSION);
    Ok(msg)
}

//! The wire format: REQ, INV, ACK, VAL, NACK and RESP, named and shaped as in
//! the seed and the TLA+ spec (`Type_oMessage`), each carrying the epoch id.
//!
//! Every message is an [`OwnershipMsg`]: a `version` first (this build writes
//! and reads [`WIRE_VERSION`]; anything else is counted and dropped), the
//! sender's epoch, the object's key, and the body. The node wrapper drops
//! messages of other epochs before the protocol sees them; the protocol
//! checks the epoch in the message again.

use std::collections::BTreeSet;

use roost_cluster::{EpochId, NodeId};
use serde::{Deserialize, Serialize};

use crate::meta::{ArbKind, OReplicas, OTs, RTs, RequestKind};
use crate::store::ObjectData;

/// The version this build writes and reads.
pub const WIRE_VERSION: u16 = 2;

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OwnershipMsg<K> {
    pub version: u16,
    pub epoch: EpochId,
    pub key: K,
    pub body: Body,
}

impl<K> OwnershipMsg<K> {
    pub fn new(epoch: EpochId, key: K, body: Body) -> Self {
        OwnershipMsg {
            version: WIRE_VERSION,
            epoch,
            key,
            body,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Body {
    Req(Req),
    Inv(Inv),
    Ack(Ack),
    Val(Val),
    Nack(Nack),
    Resp(Resp),
    /// Directory re-replication: a surviving directory replica or the owner
    /// → a directory replica that joined or restarted (and its answer).
    Sync(Sync),
}

impl Body {
    pub fn name(&self) -> &'static str {
        match self {
            Body::Req(_) => "REQ",
            Body::Inv(_) => "INV",
            Body::Ack(_) => "ACK",
            Body::Val(_) => "VAL",
            Body::Nack(_) => "NACK",
            Body::Resp(_) => "RESP",
            Body::Sync(_) => "SYNC",
        }
    }

    /// The arbitration stamp the message is about, if it names one.
    pub fn o_ts(&self) -> Option<OTs> {
        match self {
            Body::Req(_) => None,
            Body::Inv(m) => Some(m.o_ts),
            Body::Ack(m) => Some(m.o_ts),
            Body::Val(m) => Some(m.o_ts),
            Body::Nack(m) => m.o_ts,
            Body::Resp(m) => Some(m.o_ts),
            Body::Sync(m) => Some(m.current.o_ts),
        }
    }
}

/// Requester → driver: arbitrate this request.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Req {
    pub r_ts: RTs,
    pub r_type: RequestKind,
    /// Register a new object with the requester as its owner (the data is
    /// the requester's own).
    pub create: bool,
}

/// Driver (or an arbiter replaying) → arbiters: invalidate for `o_ts`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Inv {
    pub o_ts: OTs,
    pub r_ts: RTs,
    pub r_type: ArbKind,
    /// The sharer vector before the request.
    pub o_replicas: OReplicas,
    /// The directory replica that bumped `o_ts` (`o_ts.node`).
    pub driver: NodeId,
    /// Everyone whose ACK completes the arbitration (the driver or
    /// replayer included, and the data source).
    pub ackers: BTreeSet<NodeId>,
    /// Who ships the rows with its ACK (the owner, or a reader if the owner
    /// is gone), when the requester does not hold them.
    pub data_from: Option<NodeId>,
    /// Where ACKs go: the requester on the fast path, the replayer (acting
    /// driver) on the recovery path.
    pub ack_to: NodeId,
    /// The request registers a new object (the requester has the rows).
    pub create: bool,
    /// The requester left the view or restarted since it issued `r_ts` (a
    /// replayer says so to arbiters that did not see it go): the request is
    /// finished without it.
    pub requester_gone: bool,
}

/// Arbiter → `ack_to`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Ack {
    pub o_ts: OTs,
    pub r_ts: RTs,
    pub r_type: ArbKind,
    pub o_replicas: OReplicas,
    pub ackers: BTreeSet<NodeId>,
    pub data_from: Option<NodeId>,
    /// The rows, from the data source only.
    pub data: Option<ObjectData>,
    /// The acker has applied this arbitration already (it is `Valid` at
    /// `o_ts`): proof that it completed, so a replayer finishes it.
    pub applied: bool,
}

/// Requester (or a replayer, for a dead requester or a NOOP) → arbiters:
/// apply the arbitration of `o_ts`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Val {
    pub o_ts: OTs,
    pub r_ts: RTs,
    /// From the requester: the highest attempt version it has issued. No
    /// directory replica drives an attempt of it at or below this
    /// afterwards (a late REQ of an attempt the requester moved on from).
    /// 0 from a replayer.
    pub r_floor: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum NackReason {
    /// The driver is arbitrating another request for the object.
    Busy,
    /// The driver is recovering from a view change.
    Recovering,
    /// The driver is not serving (no lease).
    NotServing,
    /// The directory knows no such object.
    UnknownObject,
    /// A create for an object that exists.
    AlreadyExists,
    /// No live node holds the object's data.
    DataLost,
    /// The owner (or data source) has a pending reliable commit.
    PendingCommit,
    /// A greater arbitration superseded this one.
    Superseded,
    /// Reply to an INV smaller than the arbiter's `o_ts`; carries the
    /// arbiter's current metadata.
    Stale,
    /// The requester refuses a replayed win it has not applied and cannot
    /// (the replay brought no rows); it never applies that arbitration, so
    /// the replayer may release the arbiters with a NOOP.
    Refused,
}

impl NackReason {
    /// Retrying cannot help.
    pub fn is_permanent(self) -> bool {
        matches!(
            self,
            NackReason::UnknownObject | NackReason::AlreadyExists | NackReason::DataLost
        )
    }
}

/// The replying arbiter's metadata (in a `Stale` NACK), or the metadata a
/// `SYNC` teaches.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Current {
    pub o_ts: OTs,
    /// The attempt `o_ts` arbitrated (a NOOP's: version 0, its driver).
    pub r_ts: RTs,
    /// The replier is `Valid` at `o_ts` (else `o_replicas` is the pre-vector
    /// of its pending arbitration).
    pub valid: bool,
    pub o_replicas: OReplicas,
}

/// Driver or owner → requester (and to the driver, from an owner refusing):
/// this attempt lost or was refused.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Nack {
    pub r_ts: RTs,
    /// The refused arbitration (`None`: refused before one began).
    pub o_ts: Option<OTs>,
    pub reason: NackReason,
    pub current: Option<Current>,
}

/// A teacher → a directory replica that knows nothing yet: the object's
/// valid metadata (`current.valid` is always true). The replica answers with
/// the same `current` and `answer` set once it has it (or something
/// newer); the teacher sends it again until then.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Sync {
    pub current: Current,
    pub answer: bool,
}

/// Replayer → live requester: the replayed arbitration is won (the slow
/// path's confirmation, carrying everything the requester needs to apply).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Resp {
    pub o_ts: OTs,
    pub r_ts: RTs,
    pub r_type: RequestKind,
    pub o_replicas: OReplicas,
    /// The arbiters to send VAL to.
    pub val_to: BTreeSet<NodeId>,
    pub data: Option<ObjectData>,
}

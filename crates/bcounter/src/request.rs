//! Idempotent transfer requests (§IV-D).
//!
//! A replica short of rights asks a donor to run `transfer` towards it. The
//! request may be lost and resent, duplicated by the network, or sent to the
//! same donor twice before the first transfer becomes visible; a donor that
//! served every copy would give away rights it never meant to. So the request
//! carries `R[donor][requester]` as the requester has seen it, and the donor
//! ignores the request if it has already transferred more than that: the
//! requester simply had not heard of the earlier transfer yet.

use serde::{Deserialize, Serialize};

use crate::replica::ReplicaId;

/// Whether the requester waits for the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestMode {
    /// An operation is blocked on these rights: the donor gives what it can
    /// (up to the request) and replies with its state at once.
    Sync,
    /// Background provisioning: the donor never gives more than half of what
    /// it holds, and the transfer travels with normal replication.
    Async,
}

/// One request for rights, from `requester` to `donor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TransferRequest {
    pub requester: ReplicaId,
    pub donor: ReplicaId,
    /// Rights asked for.
    pub amount: u64,
    /// `R[donor][requester]` as the requester knew it when asking: the
    /// request's identity.
    pub seen_transferred: u64,
    pub mode: RequestMode,
}

/// How a donor answers. The caller does the messaging.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestOutcome {
    /// `amount` rights moved to the requester.
    Transferred { amount: u64, reply: Reply },
    /// The donor has already transferred `transferred > seen_transferred`:
    /// this request (or one the requester sent before hearing of that
    /// transfer) was served. Nothing changes.
    AlreadySatisfied { transferred: u64 },
    /// The donor's policy gives nothing (it holds too few rights).
    NothingToGive,
}

/// What the donor should send back after transferring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reply {
    /// A synchronous requester is waiting: send it this replica's state now.
    SendStateNow,
    /// Replication will carry the transfer in due course.
    ByReplication,
}

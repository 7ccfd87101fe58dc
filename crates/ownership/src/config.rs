//! Configuration, planted bugs, and construction errors.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Tunables. Every queue and map the protocol keeps is bounded by one of
/// them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OwnershipConfig {
    /// Directory replicas per object (fewer if fewer nodes are configured).
    pub directory_replicas: usize,
    /// Ownership requests this node may have in flight as a requester.
    pub max_pending_requests: usize,
    /// Objects this node keeps metadata for (as directory replica, owner or
    /// reader); INVs that would exceed it are dropped and counted.
    pub max_objects: usize,
    /// Largest object payload accepted in an ACK, RESP or Create.
    pub max_data_bytes: usize,
    /// REQs one request may send before it fails (retries after NACKs).
    pub max_attempts: u32,
    /// Backoff before retry `n` (n >= 1): `base * 2^(n-1)`, capped at
    /// `backoff_max_ms`, plus a jitter in `[0, that)` from the node's seeded
    /// generator.
    pub backoff_base_ms: u64,
    pub backoff_max_ms: u64,
    /// A requester re-sends its REQ (same attempt) if nothing answered it
    /// for this long (`None`: never; messages are then assumed reliable).
    pub retransmit_ms: Option<u64>,
    /// A blocked arbiter replays its arbitration (arb-replay) in the current
    /// epoch if no VAL came for this long: recovers lost VALs and ACKs.
    pub replay_after_ms: Option<u64>,
    /// A request fails with `TimedOut` after this long (`None`: never).
    pub request_timeout_ms: Option<u64>,
    /// Seed of the jitter generator (mixed with the node id).
    pub seed: u64,
    /// A change of owner keeps the old owner as a reader (the seed's
    /// sharer vector). Readers are only as good as the reliable commit
    /// that keeps their copies current: a node whose writes do not reach
    /// the readers yet sets this `false`, so a copy never outlives the
    /// ownership it was taken under. The same on every node.
    pub old_owner_stays_reader: bool,
}

impl Default for OwnershipConfig {
    fn default() -> Self {
        OwnershipConfig {
            directory_replicas: 3,
            max_pending_requests: 1024,
            max_objects: 1 << 20,
            max_data_bytes: 1 << 20,
            max_attempts: 8,
            backoff_base_ms: 2,
            backoff_max_ms: 200,
            retransmit_ms: Some(50),
            replay_after_ms: Some(200),
            request_timeout_ms: Some(5_000),
            seed: 0x5a45_5553,
            old_owner_stays_reader: true,
        }
    }
}

/// Planted faults for the model checker's tests (never set in production).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct OwnershipBugs {
    /// An arbiter accepts an INV whose `o_ts` is smaller than its own (as if
    /// it were greater): two concurrent requests can both collect every ACK.
    pub arbiter_accepts_smaller_o_ts: bool,
    /// Arbiters (the driver included) apply a request as soon as they accept
    /// its INV, before the requester applied it, instead of on its VAL. A
    /// requester that drives its own request then claims ownership before
    /// the old owner was invalidated.
    pub arbiters_apply_before_requester: bool,
    /// A blocked arbiter never replays its arbitration (not after a view
    /// change, nor on its stuck timer): one lost VAL leaves it blocked for
    /// good. Safety holds; the end-of-run liveness check finds it.
    pub arbiter_never_replays: bool,
}

/// Creating an [`Ownership`](crate::Ownership) state machine.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NewError {
    #[error("directory_replicas must be at least 1")]
    NoDirectoryReplicas,
    #[error("{field} must be at least 1")]
    ZeroBound { field: &'static str },
    #[error("backoff_base_ms {base} exceeds backoff_max_ms {max}")]
    BackoffInverted { base: u64, max: u64 },
    #[error("{field} must be positive when set")]
    ZeroInterval { field: &'static str },
}

impl OwnershipConfig {
    pub fn validate(&self) -> Result<(), NewError> {
        if self.directory_replicas == 0 {
            return Err(NewError::NoDirectoryReplicas);
        }
        for (field, value) in [
            ("max_pending_requests", self.max_pending_requests),
            ("max_objects", self.max_objects),
            ("max_data_bytes", self.max_data_bytes),
            ("max_attempts", self.max_attempts as usize),
        ] {
            if value == 0 {
                return Err(NewError::ZeroBound { field });
            }
        }
        if self.backoff_base_ms > self.backoff_max_ms {
            return Err(NewError::BackoffInverted {
                base: self.backoff_base_ms,
                max: self.backoff_max_ms,
            });
        }
        for (field, value) in [
            ("retransmit_ms", self.retransmit_ms),
            ("replay_after_ms", self.replay_after_ms),
            ("request_timeout_ms", self.request_timeout_ms),
        ] {
            if value == Some(0) {
                return Err(NewError::ZeroInterval { field });
            }
        }
        Ok(())
    }
}

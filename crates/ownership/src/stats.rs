//! Counters: why messages were dropped (per reason), and what the protocol
//! did.

use serde::{Deserialize, Serialize};

/// Why an input was dropped. Every drop is counted here and logged; none
/// panics or changes ownership.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum DropReason {
    /// The message's wire version is not [`WIRE_VERSION`](crate::WIRE_VERSION).
    UnsupportedVersion,
    /// The message's epoch is not this node's.
    WrongEpoch,
    /// This node is not a member of its view: it takes part in nothing.
    NotMember,
    /// The sender is not a member of the view.
    SenderNotMember,
    /// The sender is not who the message says it is from (a REQ from
    /// someone else's `r_ts`, a VAL or RESP from a node that could not have
    /// sent it).
    ForgedSender,
    /// A REQ to a node that is not a directory replica of the object.
    NotDirectory,
    /// An INV to a node that is neither a directory replica, the owner, nor
    /// the named data source.
    NotArbiter,
    /// A message about an object this node keeps no metadata for.
    UnknownObject,
    /// An `o_ts` no correct node produces: version 0 in an arbitration,
    /// bumped by a node that is not a directory replica, a driver field that
    /// disagrees with it, or a VAL for an arbitration this arbiter never
    /// accepted.
    ImpossibleOTs,
    /// One `o_ts` with two different requests, or ACKs of one attempt that
    /// disagree.
    ConflictingOTs,
    /// An ACK from a node that was not asked (not in the INV's `ackers`).
    UnexpectedAck,
    /// Rows from a node that is not the data source.
    UnexpectedData,
    /// A data source that holds no data, or a win without the rows the
    /// requester needs.
    MissingData,
    /// A payload or set larger than the configured limits.
    Oversized,
    /// A message whose fields contradict each other (an empty `ackers`, an
    /// `ack_to` that is not configured, a NOOP from a non-driver, ...).
    Malformed,
    /// Benign: about an attempt or arbitration that is over.
    Stale,
    /// Benign: a duplicate of something already processed.
    Duplicate,
    /// `max_objects` reached.
    Overloaded,
}

impl DropReason {
    pub const ALL: [DropReason; 18] = [
        DropReason::UnsupportedVersion,
        DropReason::WrongEpoch,
        DropReason::NotMember,
        DropReason::SenderNotMember,
        DropReason::ForgedSender,
        DropReason::NotDirectory,
        DropReason::NotArbiter,
        DropReason::UnknownObject,
        DropReason::ImpossibleOTs,
        DropReason::ConflictingOTs,
        DropReason::UnexpectedAck,
        DropReason::UnexpectedData,
        DropReason::MissingData,
        DropReason::Oversized,
        DropReason::Malformed,
        DropReason::Stale,
        DropReason::Duplicate,
        DropReason::Overloaded,
    ];

    fn index(self) -> usize {
        self as usize
    }

    /// Drops that only a faulty or forged message causes (not a late or
    /// duplicated one).
    pub fn is_bad_input(self) -> bool {
        !matches!(self, DropReason::Stale | DropReason::Duplicate)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Stats {
    drops: [u64; DropReason::ALL.len()],
    /// REQs this node drove (bumped `o_ts` for).
    pub driven: u64,
    /// INVs this node accepted as an arbiter.
    pub invalidated: u64,
    /// Requests this node won and applied as requester.
    pub applied: u64,
    /// NACKs sent.
    pub nacks_sent: u64,
    /// Retries after NACKs.
    pub retries: u64,
    /// arb-replays started (view changes and stuck arbitrations).
    pub replays: u64,
    /// NOOP arbitrations driven to release refused ones.
    pub noops: u64,
    /// Create INVs refused because the object exists (a restarted directory
    /// replica re-creating what it forgot).
    pub refused_recreates: u64,
    /// Fresh entries of such refused creates, forgotten.
    pub forgotten_creates: u64,
    /// SYNCs sent: objects' metadata taught to directory replicas that
    /// joined or restarted (directory re-replication).
    pub synced: u64,
    /// Replays whose every ACK was in but that waited, because the
    /// reliable commit's recovery was not over at every live node.
    pub replays_held_for_commit_recovery: u64,
    /// Arbitrations finished without their (dead) requester.
    pub finished_without_requester: u64,
    /// REQ retransmissions.
    pub retransmits: u64,
    /// Replayed wins this node refused as requester (no rows to apply).
    pub refused_wins: u64,
}

impl Stats {
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.drops[reason.index()]
    }

    /// All drops of bad input (not stale or duplicate ones).
    pub fn bad_input(&self) -> u64 {
        DropReason::ALL
            .iter()
            .filter(|r| r.is_bad_input())
            .map(|&r| self.dropped(r))
            .sum()
    }

    pub(crate) fn count_drop(&mut self, reason: DropReason) {
        self.drops[reason.index()] += 1;
    }

    /// Non-zero drop counters, for logs and `roost status`.
    pub fn drops(&self) -> Vec<(DropReason, u64)> {
        DropReason::ALL
            .iter()
            .map(|&r| (r, self.dropped(r)))
            .filter(|&(_, n)| n > 0)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_match_all() {
        for (i, reason) in DropReason::ALL.iter().enumerate() {
            assert_eq!(reason.index(), i);
        }
    }
}

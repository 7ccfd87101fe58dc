//! Counters: why inputs were dropped (per reason), and what the protocol
//! did.

use std::collections::BTreeMap;

/// Why an input was dropped. Every drop is counted; none panics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DropReason {
    /// The wire version is not [`WIRE_VERSION`](crate::WIRE_VERSION).
    UnsupportedVersion,
    /// The message (or its `epoch_id`) is not of this node's epoch.
    WrongEpoch,
    /// This node is not a member of its view.
    NotMember,
    /// The sender is not a member of the view.
    SenderNotMember,
    /// The sender could not have sent it (an R-INV of someone else's
    /// pipeline, a replay of a live coordinator, an R-VAL from a stranger).
    ForgedSender,
    /// An R-INV that does not name this node as a follower, or an R-ACK
    /// from a node that is not one.
    NotFollower,
    /// Fields that contradict each other (no writes, version 0, a key
    /// twice, `local` 0, an inner epoch unlike the envelope's).
    Malformed,
    /// More writes or bytes than configured.
    Oversized,
    /// About a transaction this node does not know (never issued, or a
    /// replay it does not run).
    Unknown,
    /// Benign: about a transaction that is over.
    Stale,
    /// Benign: a duplicate; re-acked if applied, else kept once.
    Duplicate,
    /// `max_stored` or `max_held` reached (the sender re-sends).
    Overloaded,
    /// A held R-INV of a coordinator that left the view (a live node that
    /// applied it replays it).
    CoordinatorGone,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitStats {
    pub drops: BTreeMap<DropReason, u64>,
    /// Transactions this node reliably committed as coordinator.
    pub committed: u64,
    /// R-INVs applied as follower (replays included).
    pub applied: u64,
    /// R-INVs held back for their pipeline predecessor.
    pub held: u64,
    /// Replays of a failed coordinator's transactions this node started
    /// and finished.
    pub replays_started: u64,
    pub replays_finished: u64,
    /// R-INVs re-sent on the timer or after a view change.
    pub resends: u64,
    /// Writes of replays issued before this node's state began (it
    /// restarted, or the view excluded it, since) to objects it does not
    /// hold: not installed (the slot may be older than a version
    /// committed before, which this node never got).
    pub replayed_writes_skipped: u64,
    /// Objects marked Valid (as coordinator, follower or replayer): a
    /// checker need look at a store again only once this moved.
    pub validated: u64,
}

impl CommitStats {
    pub fn drop(&mut self, reason: DropReason) {
        *self.drops.entry(reason).or_default() += 1;
    }

    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.drops.get(&reason).copied().unwrap_or(0)
    }

    pub fn total_dropped(&self) -> u64 {
        self.drops.values().sum()
    }
}

//! Ownership metadata, named as in the seed and the TLA+ spec.

use std::collections::BTreeSet;

use roost_cluster::NodeId;
use serde::{Deserialize, Serialize};

/// `o_ts`: the ownership timestamp, ordered lexicographically by
/// `[version, node]`. `node` is the directory replica (driver) that bumped
/// it, so two drivers never produce the same `o_ts`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
pub struct OTs {
    pub version: u64,
    pub node: NodeId,
}

impl OTs {
    /// The stamp of an object no arbitration has touched yet.
    pub const ZERO: OTs = OTs {
        version: 0,
        node: NodeId(0),
    };

    /// The next stamp a driver `node` assigns.
    pub fn bumped(self, node: NodeId) -> OTs {
        OTs {
            version: self.version + 1,
            node,
        }
    }

    /// The next stamp a driver `node` assigns in `epoch`: at least
    /// `epoch << 32`, so a restarted driver (a new member, in a later epoch
    /// than anything its previous incarnation bumped) never reuses a stamp
    /// it has forgotten.
    pub fn bumped_in(self, node: NodeId, epoch: roost_cluster::EpochId) -> OTs {
        let next = OTs {
            version: (self.version + 1).max(epoch.0 << 32),
            node,
        };
        debug_assert!(next > self);
        next
    }
}

impl OTs {
    /// [`bumped_in`](OTs::bumped_in), and above the version `floor` too.
    pub fn bumped_above(self, floor: u64, node: NodeId, epoch: roost_cluster::EpochId) -> OTs {
        let base = OTs {
            version: self.version.max(floor),
            node: self.node,
        };
        let next = base.bumped_in(node, epoch);
        debug_assert!(next > self && next.version > floor);
        next
    }
}

impl std::fmt::Display for OTs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}, {}]", self.version, self.node)
    }
}

/// `o_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum OState {
    /// No arbitration pending here.
    Valid,
    /// This arbiter accepted an INV and waits for its VAL.
    Invalid,
    /// This directory replica drives an arbitration (it bumped `o_ts`).
    Drive,
    /// This node (not an arbiter of the object) has an ownership request in
    /// flight.
    Request,
}

/// `o_replicas`, the seed's sharer vector: who holds the object's data and
/// at which level.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default)]
pub struct OReplicas {
    pub owner: Option<NodeId>,
    pub readers: BTreeSet<NodeId>,
}

impl OReplicas {
    pub fn owned_by(owner: NodeId) -> OReplicas {
        OReplicas {
            owner: Some(owner),
            readers: BTreeSet::new(),
        }
    }

    /// `node` holds the object's data (as owner or reader).
    pub fn holds(&self, node: NodeId) -> bool {
        self.owner == Some(node) || self.readers.contains(&node)
    }

    pub fn len(&self) -> usize {
        usize::from(self.owner.is_some()) + self.readers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The post-request sharer vector (`post_oVec`): for add-owner and
    /// change-owner the requester becomes the owner and the old owner a
    /// reader; add-reader adds the requester to the readers, remove-reader
    /// removes it; NOOP changes nothing. A dead requester is applied the same
    /// way and then stripped with the other dead nodes ([`retain_live`]), so
    /// an arbiter that applied before a view change and one that finishes
    /// the request without its requester afterwards agree (the spec's
    /// `post_sVec(n, 0, ...)`: the object is then ownerless, its data with
    /// the readers).
    ///
    /// [`retain_live`]: OReplicas::retain_live
    pub fn post(&self, requester: NodeId, kind: ArbKind) -> OReplicas {
        self.post_with(requester, kind, true)
    }

    /// [`post`](Self::post), where a change of owner keeps the old owner as
    /// a reader only if `old_owner_stays_reader` (see
    /// [`OwnershipConfig::old_owner_stays_reader`](crate::OwnershipConfig)).
    pub fn post_with(
        &self,
        requester: NodeId,
        kind: ArbKind,
        old_owner_stays_reader: bool,
    ) -> OReplicas {
        let mut next = self.clone();
        match kind {
            ArbKind::Request(RequestKind::AddOwner | RequestKind::ChangeOwner) => {
                if let Some(old) = next.owner {
                    if old != requester && old_owner_stays_reader {
                        next.readers.insert(old);
                    }
                }
                next.readers.remove(&requester);
                next.owner = Some(requester);
            }
            ArbKind::Request(RequestKind::AddReader) => {
                if next.owner != Some(requester) {
                    next.readers.insert(requester);
                }
            }
            ArbKind::Request(RequestKind::RemoveReader) => {
                next.readers.remove(&requester);
            }
            ArbKind::Noop => {}
        }
        debug_assert!(next.owner.is_none_or(|o| !next.readers.contains(&o)));
        debug_assert!(next.len() <= self.len() + 1);
        next
    }

    /// Drops the nodes that left the view (`nodeFailure` in the fault spec).
    pub fn retain_live(&mut self, live: impl Fn(NodeId) -> bool) {
        if self.owner.is_some_and(|o| !live(o)) {
            self.owner = None;
        }
        self.readers.retain(|&r| live(r));
    }
}

/// What a requester asks for (the TLA+ `rType`). The spec spells the last one
/// both `rm-reader` and `remove-reader`; here it is one variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum RequestKind {
    /// Become the owner, not holding the data yet (it comes with the ACK).
    AddOwner,
    /// Become the owner, already a reader.
    ChangeOwner,
    /// Become a reader (the data comes with the ACK).
    AddReader,
    /// Stop being a reader (drops this node's copy).
    RemoveReader,
}

impl RequestKind {
    /// The requester ends up able to write.
    pub fn wants_ownership(self) -> bool {
        matches!(self, RequestKind::AddOwner | RequestKind::ChangeOwner)
    }

    /// The requester ends up holding the data.
    pub fn wants_data(self) -> bool {
        !matches!(self, RequestKind::RemoveReader)
    }
}

/// What an arbitration does: a requester's request, or `NOOP`, the TLA+
/// spec's no-change type, which a driver arbitrates to release arbiters
/// when an owner refused a request (pending reliable commit) or the data is
/// lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ArbKind {
    Request(RequestKind),
    Noop,
}

/// A caller's request id (chosen by the caller, echoed in outputs).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
pub struct ReqId(pub u64);

/// `rTS`: one attempt of a request, `[version, requester]`. Every attempt
/// (every REQ the requester issues, retries included) has a fresh version,
/// strictly increasing per requester, also across restarts (the epoch is in
/// its high bits), so a driver processes each REQ at most once by
/// remembering the last version it arbitrated per requester.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
pub struct RTs {
    pub version: u64,
    pub node: NodeId,
}

/// What this node may do with an object right now (for the transaction
/// layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Access {
    /// Valid owner: may run write and read-only transactions.
    Owner,
    /// Valid reader: may run read-only transactions.
    Reader,
    /// Holds a copy but an arbitration is pending: transactions wait.
    Invalid,
    /// Holds no copy.
    None,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(i: u32) -> NodeId {
        NodeId(i)
    }

    #[test]
    fn o_ts_is_lexicographic() {
        let a = OTs {
            version: 3,
            node: n(9),
        };
        let b = OTs {
            version: 4,
            node: n(1),
        };
        assert!(a < b);
        assert!(a.bumped(n(1)) < a.bumped(n(2)));
        assert!(OTs::ZERO < a);
    }

    #[test]
    fn post_vectors() {
        let mut pre = OReplicas::owned_by(n(1));
        pre.readers.insert(n(2));
        let change = pre.post(n(2), ArbKind::Request(RequestKind::ChangeOwner));
        assert_eq!(change.owner, Some(n(2)));
        assert_eq!(change.readers, BTreeSet::from([n(1)]));
        let add = pre.post(n(3), ArbKind::Request(RequestKind::AddOwner));
        assert_eq!(add.owner, Some(n(3)));
        assert_eq!(add.readers, BTreeSet::from([n(1), n(2)]));
        let reader = pre.post(n(3), ArbKind::Request(RequestKind::AddReader));
        assert_eq!(reader.readers, BTreeSet::from([n(2), n(3)]));
        let removed = pre.post(n(2), ArbKind::Request(RequestKind::RemoveReader));
        assert!(removed.readers.is_empty());
        // A dead requester: applied, then stripped.
        let mut dead = pre.post(n(3), ArbKind::Request(RequestKind::AddOwner));
        dead.retain_live(|x| x != n(3));
        assert_eq!(dead.owner, None);
        assert_eq!(dead.readers, BTreeSet::from([n(1), n(2)]));
        assert_eq!(pre.post(n(3), ArbKind::Noop), pre);
        // Without readers kept current, the old owner keeps no copy.
        let moved = pre.post_with(n(3), ArbKind::Request(RequestKind::AddOwner), false);
        assert_eq!(moved.owner, Some(n(3)));
        assert!(!moved.holds(n(1)) && moved.holds(n(2)));
        // The owner asking to read changes nothing.
        assert_eq!(
            pre.post(n(1), ArbKind::Request(RequestKind::AddReader)),
            pre
        );
    }

    #[test]
    fn dead_nodes_leave_the_vector() {
        let mut v = OReplicas::owned_by(n(1));
        v.readers.extend([n(2), n(3)]);
        v.retain_live(|x| x != n(1) && x != n(3));
        assert_eq!(v.owner, None);
        assert_eq!(v.readers, BTreeSet::from([n(2)]));
    }
}

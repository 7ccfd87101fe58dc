//! Replica identities: a dense index that can grow when a site joins.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The most replicas one counter can know. It bounds what a malformed or
/// hostile message can make a replica allocate: the full matrix at this size is
/// `MAX_REPLICAS² × 8` bytes = 8 MiB.
pub const MAX_REPLICAS: usize = 1024;

/// A replica's identity: a dense index `0, 1, 2, ...` into the rows and
/// columns of `R` and the entries of `U`.
///
/// Dense indices keep the matrices flat vectors (a decrement reads one row and
/// one column, no map look-ups). The membership layer hands out the next index
/// when a site joins; every replica then grows its matrices (explicitly with
/// `grow`, or implicitly when it merges a state or delta that knows more
/// replicas). An entry a replica has not allocated yet reads as 0, which is
/// also its value in the lattice, so growing never changes a state's meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ReplicaId(pub u32);

impl ReplicaId {
    /// The position of this replica in rows, columns and `U`.
    pub fn index(self) -> usize {
        // A u32 fits in usize on every target we build for; if it did not,
        // usize::MAX is beyond every replica count and reads as unknown.
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }

    /// The replica at `index`, if `index` can be a replica at all.
    pub fn from_index(index: usize) -> Option<ReplicaId> {
        if index < MAX_REPLICAS {
            u32::try_from(index).ok().map(ReplicaId)
        } else {
            None
        }
    }
}

impl fmt::Display for ReplicaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

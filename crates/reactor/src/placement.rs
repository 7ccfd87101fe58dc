//! Reactor identity across a cluster, and the one seam that says where a
//! reactor lives.
//!
//! **Identity.** A [`ReactorKey`] (reactor type, name) is the same reactor on
//! every node, with no coordination and no collisions: it is the name the
//! application gives it. [`ReactorKey::placement_hash`] is a stable 64-bit
//! hash of it (frozen: the same on every node and build) for spreading
//! reactors over nodes or shards; it is not an identity (two keys may share
//! it). A [`ReactorId`](crate::ReactorId) is a per-database handle on a
//! reactor (dense, cheap to pass to `call`), not meaningful on another node.
//! Rows are keyed locally by the handle; rows shipped between databases
//! ([`Database::export_reactor`](crate::Database::export_reactor),
//! [`Database::install_reactor`](crate::Database::install_reactor)) carry
//! the key and, per row, the relation's name and the key without the local
//! prefix, so the receiver keys them under its own handle.
//!
//! **Placement.** A database asks its [`Placement`] where a reactor lives
//! when it first learns of it (`create_reactor`, `reactor_by_key`,
//! `install_reactor`), and asks it to [`acquire`](Placement::acquire) a
//! reactor whenever a transaction enters one that is not local: the
//! transaction's attempt aborts, awaits the acquisition, and runs again. The
//! answer for a local reactor is cached in the database's lock-free placement
//! table (one atomic load per entry, the per-call hot path), which moves,
//! exports and installs keep current. That cache is also the placement record:
//! a transaction entering a reactor observes its slot word and commit
//! validates it unchanged, and every move, export or install rewrites the word
//! (and fences) before it touches a row, so a transaction that raced with one
//! fails validation and runs again.
//!
//! [`LocalPlacement`] is the single-node placement: every reactor is local,
//! in the container the deployment's rules name, and nothing is ever
//! acquired. A cluster's placement (Zeus ownership) lives in a crate above
//! this one, moving reactors with `export_reactor` and `install_reactor`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::deployment::Deployment;
use crate::error::DirectoryError;
use crate::replication::{Replication, Sequenced};

/// Longest reactor name.
pub const MAX_REACTOR_NAME_BYTES: usize = 256;

/// A reactor's cluster-wide identity: its type and its name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ReactorKey {
    reactor_type: Box<str>,
    name: Box<str>,
}

impl ReactorKey {
    /// A key; the name must be 1..=256 bytes.
    pub fn new(reactor_type: &str, name: &str) -> Result<Self, DirectoryError> {
        if name.is_empty() || name.len() > MAX_REACTOR_NAME_BYTES {
            return Err(DirectoryError::BadName);
        }
        Ok(ReactorKey {
            reactor_type: reactor_type.into(),
            name: name.into(),
        })
    }

    pub fn reactor_type(&self) -> &str {
        &self.reactor_type
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// A stable 64-bit hash of the key (FNV-1a over the type, a 0xFF byte,
    /// which no UTF-8 text holds, and the name; then a 64-bit finalizer so
    /// that every bit depends on every byte). Frozen: nodes running
    /// different builds must agree on it. For placement, not identity.
    pub fn placement_hash(&self) -> u64 {
        let fnv = |h: u64, b: u8| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        let mut h = 0xcbf2_9ce4_8422_2325;
        for &b in self.reactor_type.as_bytes() {
            h = fnv(h, b);
        }
        h = fnv(h, 0xFF);
        for &b in self.name.as_bytes() {
            h = fnv(h, b);
        }
        // murmur3's fmix64.
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

impl fmt::Display for ReactorKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.reactor_type, self.name)
    }
}

/// Where a reactor lives, as one database sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    /// Here, in container `container` (an index into the deployment's
    /// containers).
    Local { container: usize },
    /// In another database (another node): a transaction entering it waits
    /// for [`Placement::acquire`].
    Remote,
    /// Nowhere known.
    Unknown,
}

/// What [`Placement::replica_readable`] returns.
pub type ReplicaWait = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Why a reactor could not be brought here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum AcquireError {
    #[error("this placement never brings reactors from elsewhere (single-node)")]
    Unsupported,
    #[error("no node is known to hold the reactor")]
    NoOwner,
    #[error("the reactor's holder did not hand it over in time")]
    TimedOut,
    #[error("this node is not serving (no lease, or not a member of the cluster)")]
    NotServing,
    #[error(
        "other requests for the reactor kept winning until the acquisition's patience ran out"
    )]
    Contended,
    #[error("the placement is shutting down")]
    Shutdown,
    #[error(
        "this node owns the reactor but could not install its rows (they were lost with the \
         node that held them, or the install failed: see the node's log)"
    )]
    Lost,
    #[error("acquired {times} times, and moved away again each time before the transaction ran")]
    KeptMoving { times: u32 },
}

/// The future of an acquisition. It is polled on an executor thread, which
/// runs no tokio runtime: complete it from elsewhere (a oneshot channel).
pub type Acquire = Pin<Box<dyn Future<Output = Result<(), AcquireError>> + Send>>;

/// Where reactors live: the seam between a database and whatever decides
/// ownership (one node: [`LocalPlacement`]; a cluster: Zeus, above).
pub trait Placement: Send + Sync + 'static {
    /// Where `key` lives. A `Local` answer for a reactor the database does
    /// not hold yet is where `create_reactor` or `install_reactor` puts it.
    fn locate(&self, key: &ReactorKey) -> Location;

    /// Brings `key` here (for a cluster: take ownership, fetch its rows with
    /// the holder's `export_reactor`, `install_reactor` them here). Resolves
    /// once that is done or failed; the waiting transaction then runs again.
    fn acquire(&self, key: &ReactorKey) -> Acquire;

    /// Whether this placement wants write commits sequenced and their
    /// changes captured (false: nothing is captured, no cost). Asked at
    /// every commit, so it may change (say, once the node joined a
    /// cluster); keep it cheap. See [`crate::replication`].
    fn replicates(&self) -> bool {
        false
    }

    /// Called exactly once for every sequence number the database hands out
    /// (dense from 1, while [`replicates`](Self::replicates)), with the
    /// commit's changes per reactor or [`Sequenced::Aborted`], right after
    /// the commit's outcome is known, on the executor thread, with no locks
    /// held. Calls for different numbers come from different executors
    /// concurrently and in any order. Must not block. Returns what the
    /// transaction's caller waits for before it learns that the transaction
    /// committed (Zeus: its reliable commit), or `None`; what it returns for
    /// an abort is dropped.
    fn sequenced(&self, seq: u64, outcome: Sequenced) -> Option<Replication> {
        let _ = (seq, outcome);
        None
    }

    /// Resolves when a replica held here may be read again (any replica:
    /// a spurious wake-up only costs a retry). Called by a transaction
    /// that found `key`'s replica Invalid, before it checks again; it waits
    /// for this or a short timeout. The default never resolves: the
    /// transaction looks again after each timeout.
    fn replica_readable(&self, key: &ReactorKey) -> ReplicaWait {
        let _ = key;
        Box::pin(std::future::pending())
    }

    /// A read-only transaction validated after every number up to
    /// `seq_upto` was handed out: returns what its caller waits for (every
    /// write it may have read reliably committed), or `None`. Called on
    /// the executor thread with no locks held; must not block.
    fn read_barrier(&self, seq_upto: u64) -> Option<Replication> {
        let _ = seq_upto;
        None
    }
}

/// One node: every reactor is local, in the container the deployment's
/// placement rules name; nothing is ever acquired.
pub struct LocalPlacement {
    deployment: Deployment,
}

impl LocalPlacement {
    pub fn new(deployment: &Deployment) -> Self {
        LocalPlacement {
            deployment: deployment.clone(),
        }
    }
}

impl Placement for LocalPlacement {
    fn locate(&self, key: &ReactorKey) -> Location {
        Location::Local {
            container: self.deployment.place(key.name(), key.reactor_type()),
        }
    }

    fn acquire(&self, _key: &ReactorKey) -> Acquire {
        Box::pin(std::future::ready(Err(AcquireError::Unsupported)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_hash_is_frozen() {
        // Pinned: a change here moves reactors between nodes of a cluster
        // that runs mixed builds.
        let key = ReactorKey::new("keyspace", "keyspace-0").unwrap();
        assert_eq!(key.placement_hash(), 0xa96a_6526_36d0_84f0);
        let other = ReactorKey::new("keyspac", "ekeyspace-0").unwrap();
        assert_ne!(key.placement_hash(), other.placement_hash());
    }

    #[test]
    fn names_are_bounded() {
        assert_eq!(ReactorKey::new("t", ""), Err(DirectoryError::BadName));
        assert!(ReactorKey::new("t", &"n".repeat(256)).is_ok());
        assert_eq!(
            ReactorKey::new("t", &"n".repeat(257)),
            Err(DirectoryError::BadName)
        );
    }
}

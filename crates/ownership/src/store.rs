//! The object data the protocol moves, and the store it moves it through.
//!
//! The protocol never looks inside an object: it exports the rows from the
//! owner's store, carries them in an ACK (or RESP), and installs them at the
//! new owner or reader. The store also answers the one question the
//! ownership protocol asks of the reliable-commit layer: is a commit
//! involving this object still pending here?

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::meta::Access;
use roost_cluster::NodeId;

/// An object's contents: its transactional version (`t_version`) and its
/// rows, opaque to the protocol.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct ObjectData {
    pub t_version: u64,
    pub rows: Vec<u8>,
}

impl ObjectData {
    pub fn new(t_version: u64, rows: Vec<u8>) -> ObjectData {
        ObjectData { t_version, rows }
    }

    /// Bytes this data occupies on the wire (the limit applies to it).
    pub fn payload_len(&self) -> usize {
        self.rows.len() + std::mem::size_of::<u64>()
    }
}

/// Where a node keeps the objects it holds. The protocol is generic over it:
/// the reactor database implements it in production, [`MemStore`] in tests.
pub trait ObjectStore<K> {
    /// The object's current data, to ship to a new owner or reader (`None`:
    /// not held here).
    fn export(&mut self, key: &K) -> Option<ObjectData>;

    /// Installs data received with an ownership or reader grant, replacing
    /// any copy.
    fn install(&mut self, key: &K, data: ObjectData);

    /// Drops this node's copy: it stopped being a replica.
    fn remove(&mut self, key: &K);

    /// A reliable commit involving the object is pending here (or a local
    /// transaction holds it). The owner NACKs ownership requests for such an
    /// object; the reliable-commit protocol fills this in.
    fn has_pending_commit(&self, key: &K) -> bool;

    /// Reliable-commit recovery after the last view change has finished at
    /// this node. Ownership requests wait (drivers NACK them) until it has.
    fn commit_recovery_done(&self) -> bool {
        true
    }

    /// This node's access level to the object changed (the transaction
    /// layer's hook: abort or stall transactions that relied on the old one),
    /// with the owner its metadata names now (where a node that lost the
    /// object may ship work on it).
    fn access_changed(&mut self, _key: &K, _access: Access, _owner: Option<NodeId>) {}
}

/// An in-memory store for tests and the model checker: data per key, a set
/// of keys with a pending reliable commit (set by the test), and the last
/// access level reported per key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct MemStore<K: Ord> {
    pub data: BTreeMap<K, ObjectData>,
    pub pending: BTreeSet<K>,
    pub access: BTreeMap<K, Access>,
    pub recovering: bool,
}

impl<K: Ord> MemStore<K> {
    pub fn new() -> Self {
        MemStore {
            data: BTreeMap::new(),
            pending: BTreeSet::new(),
            access: BTreeMap::new(),
            recovering: false,
        }
    }

    pub fn get(&self, key: &K) -> Option<&ObjectData> {
        self.data.get(key)
    }

    /// The stub for the reliable-commit hook.
    pub fn set_pending_commit(&mut self, key: K, pending: bool) {
        if pending {
            self.pending.insert(key);
        } else {
            self.pending.remove(&key);
        }
    }
}

impl<K: Ord + Clone> ObjectStore<K> for MemStore<K> {
    fn export(&mut self, key: &K) -> Option<ObjectData> {
        self.data.get(key).cloned()
    }

    fn install(&mut self, key: &K, data: ObjectData) {
        self.data.insert(key.clone(), data);
    }

    fn remove(&mut self, key: &K) {
        self.data.remove(key);
    }

    fn has_pending_commit(&self, key: &K) -> bool {
        self.pending.contains(key)
    }

    fn commit_recovery_done(&self) -> bool {
        !self.recovering
    }

    fn access_changed(&mut self, key: &K, access: Access, _owner: Option<NodeId>) {
        if access == Access::None {
            self.access.remove(key);
        } else {
            self.access.insert(key.clone(), access);
        }
    }
}

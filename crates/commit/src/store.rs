//! The objects the reliable commit writes: an [`ObjectStore`] keeps each
//! object's `t_version`, `t_data` and `t_state` (Valid or Invalid). The
//! protocol decides what to apply; the store only keeps it.

use std::collections::BTreeMap;

use crate::msg::Key;

/// `t_state` of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObjectState {
    /// Readable: no reliable commit of its current version is pending.
    Valid,
    /// Its current version has a pending reliable commit.
    Invalid,
}

/// One object as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Object {
    pub version: u64,
    pub data: Vec<u8>,
    pub state: ObjectState,
}

/// Storage of the objects this node holds (as coordinator or follower).
pub trait ObjectStore {
    /// The object's current `t_version` (`None`: not held).
    fn version(&self, key: &[u8]) -> Option<u64>;
    /// Installs `version` with `data`, `Invalid`. The protocol calls it only
    /// with a version newer than [`version`](Self::version).
    fn apply(&mut self, key: &[u8], version: u64, data: &[u8]);
    /// Marks the object `Valid` iff it is still at `version` (a later write
    /// keeps it invalid). Returns whether it did.
    fn validate(&mut self, key: &[u8], version: u64) -> bool;
    /// The object's state (`None`: not held).
    fn state(&self, key: &[u8]) -> Option<ObjectState>;
    /// Drops every object: this node left the view, and no reliable commit
    /// keeps its copies current any more.
    fn clear(&mut self);
}

/// A store that keeps the objects' payloads (`t_data`) as well, so that
/// [`ReliableCommit::read_only`](crate::ReliableCommit::read_only) can
/// return them. (The node's store keeps a reactor's rows in its database
/// and reads them there, under
/// [`ReliableCommit::readable`](crate::ReliableCommit::readable).)
pub trait PayloadStore: ObjectStore {
    /// The object's current `t_data` (`None`: not held).
    fn data(&self, key: &[u8]) -> Option<&[u8]>;
}

/// An in-memory store for tests and the simulator.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct MemStore {
    pub objects: BTreeMap<Key, Object>,
}

impl MemStore {
    pub fn get(&self, key: &[u8]) -> Option<&Object> {
        self.objects.get(key)
    }
}

impl ObjectStore for MemStore {
    fn version(&self, key: &[u8]) -> Option<u64> {
        self.objects.get(key).map(|o| o.version)
    }

    fn apply(&mut self, key: &[u8], version: u64, data: &[u8]) {
        let old = self.objects.get(key).map(|o| o.version);
        debug_assert!(old.is_none_or(|v| v < version), "apply only newer versions");
        self.objects.insert(
            key.to_vec(),
            Object {
                version,
                data: data.to_vec(),
                state: ObjectState::Invalid,
            },
        );
        debug_assert_eq!(self.version(key), Some(version));
    }

    fn validate(&mut self, key: &[u8], version: u64) -> bool {
        match self.objects.get_mut(key) {
            Some(o) if o.version == version => {
                o.state = ObjectState::Valid;
                true
            }
            _ => false,
        }
    }

    fn state(&self, key: &[u8]) -> Option<ObjectState> {
        self.objects.get(key).map(|o| o.state)
    }

    fn clear(&mut self) {
        self.objects.clear();
    }
}

impl PayloadStore for MemStore {
    fn data(&self, key: &[u8]) -> Option<&[u8]> {
        self.objects.get(key).map(|o| &o.data[..])
    }
}

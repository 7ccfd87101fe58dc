//! Object keys and directory placement.
//!
//! An object's directory replicas are chosen by rendezvous (highest random
//! weight) hashing of the object over the configured nodes: every node
//! computes the same replicas from the key alone, with no table and no
//! message, and adding or removing a configured node moves only the objects
//! whose top choices change. The hash must be stable across processes,
//! builds and platforms (it decides where metadata lives), so it is our own
//! fixed mixing function, never `std`'s randomly keyed hasher.

use std::fmt::Debug;
use std::hash::Hash;

use roost_cluster::NodeId;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The key of an owned object (a reactor, a RESP key or key group).
pub trait ObjectKey:
    Ord + Clone + Debug + Hash + Serialize + DeserializeOwned + Send + 'static
{
    /// A hash that is the same in every process and build: it places the
    /// object's directory replicas.
    fn placement_hash(&self) -> u64;
}

impl ObjectKey for u64 {
    fn placement_hash(&self) -> u64 {
        mix64(*self)
    }
}

impl ObjectKey for u32 {
    fn placement_hash(&self) -> u64 {
        mix64(u64::from(*self))
    }
}

impl ObjectKey for Vec<u8> {
    fn placement_hash(&self) -> u64 {
        mix64(fnv1a(self))
    }
}

impl ObjectKey for String {
    fn placement_hash(&self) -> u64 {
        mix64(fnv1a(self.as_bytes()))
    }
}

/// SplitMix64's finalizer: a fixed, well-mixing bijection on u64.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// FNV-1a over bytes (stable, no key).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The rendezvous score of `node` for an object whose placement hash is `h`.
fn score(h: u64, node: NodeId) -> u64 {
    mix64(h ^ mix64(u64::from(node.0).wrapping_add(0x9e37_79b9_7f4a_7c15)))
}

/// The object's directory replicas: the `count` configured nodes with the
/// highest rendezvous scores (all of them if there are fewer), in descending
/// score order. The first is the preferred driver.
pub fn directory<K: ObjectKey>(key: &K, nodes: &[NodeId], count: usize) -> Vec<NodeId> {
    let h = key.placement_hash();
    let mut scored: Vec<(u64, NodeId)> = nodes.iter().map(|&n| (score(h, n), n)).collect();
    // Highest score first; the node id breaks (astronomically unlikely) ties.
    scored.sort_unstable_by(|a, b| b.cmp(a));
    scored.dedup_by_key(|(_, n)| *n);
    let replicas: Vec<NodeId> = scored.into_iter().take(count).map(|(_, n)| n).collect();
    debug_assert!(replicas.len() <= count);
    debug_assert!(replicas.iter().all(|n| nodes.contains(n)));
    replicas
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(n: u32) -> Vec<NodeId> {
        (1..=n).map(NodeId).collect()
    }

    #[test]
    fn placement_is_deterministic_and_sized() {
        for key in 0u64..200 {
            let a = directory(&key, &nodes(7), 3);
            let b = directory(&key, &nodes(7), 3);
            assert_eq!(a, b);
            assert_eq!(a.len(), 3);
            let mut sorted = a.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted.len(), 3, "distinct replicas");
        }
        assert_eq!(directory(&5u64, &nodes(2), 3).len(), 2);
    }

    #[test]
    fn placement_spreads_over_nodes() {
        let mut first = [0usize; 8];
        for key in 0u64..8_000 {
            first[directory(&key, &nodes(8), 3)[0].0 as usize - 1] += 1;
        }
        for count in first {
            assert!((700..1300).contains(&count), "{first:?}");
        }
    }

    #[test]
    fn removing_a_configured_node_moves_only_its_objects() {
        let all = nodes(6);
        let fewer: Vec<NodeId> = all.iter().copied().filter(|n| n.0 != 4).collect();
        for key in 0u64..500 {
            let before = directory(&key, &all, 2);
            let after = directory(&key, &fewer, 2);
            if !before.contains(&NodeId(4)) {
                assert_eq!(before, after);
            }
        }
    }

    #[test]
    fn stable_values() {
        // Placement decides where metadata lives: it must never change
        // between builds.
        assert_eq!(mix64(0), 0);
        assert_eq!(mix64(1), 0x5692_161d_100b_05e5);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}

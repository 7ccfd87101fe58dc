//! The tree against a `BTreeMap` (single-threaded, proptest), its structural
//! invariants, and concurrent scans that must see every key present
//! throughout them while other threads split and merge the leaves around
//! them. Records are fake addresses: the tree never dereferences them.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering as StdOrdering};
use std::sync::{Arc, Barrier};

use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::*;

fn fake(n: u64) -> RecordRef {
    RecordRef::from_raw((n + 1) << 3).expect("non-zero")
}

fn insert(tree: &BTree, key: &[u8], n: u64) -> bool {
    let guard = Guard::new();
    tree.insert(key, fake(n), &guard, &mut |_| {}).is_ok()
}

fn remove(tree: &BTree, key: &[u8], n: u64) -> bool {
    let guard = Guard::new();
    tree.remove_if(key, fake(n), &guard)
}

fn scan(
    tree: &BTree,
    bounds: (Bound<&[u8]>, Bound<&[u8]>),
    forward: bool,
    limit: usize,
) -> Vec<(Vec<u8>, u64)> {
    let guard = Guard::new();
    let mut out = Vec::new();
    tree.scan(bounds, forward, &guard, &mut |_| {}, &mut |k, r| {
        out.push((k.to_vec(), r.as_raw()));
        out.len() < limit
    });
    out
}

/// Walks the tree (single-threaded): keys sorted within every node, every
/// key inside its node's interval, counts within capacity, all leaves at one
/// depth. Returns the number of entries.
fn check_invariants(tree: &BTree) -> usize {
    fn walk(
        node: NodePtr,
        lo: Option<Vec<u8>>,
        hi: Option<Vec<u8>>,
        depth: usize,
        leaf_depth: &mut Option<usize>,
    ) -> usize {
        let mut buf = [0u8; 16];
        // SAFETY: single-threaded test; nothing is retired meanwhile.
        unsafe {
            let in_interval = |k: &[u8]| {
                lo.as_deref().is_none_or(|lo| k >= lo) && hi.as_deref().is_none_or(|hi| k < hi)
            };
            if header(node).leaf {
                let leaf = as_leaf(node);
                let n = leaf.header.count(LEAF_CAPACITY);
                let keys: Vec<Vec<u8>> = (0..n)
                    .map(|i| leaf.key(i).bytes(&mut buf).to_vec())
                    .collect();
                assert!(keys.windows(2).all(|w| w[0] < w[1]), "leaf keys sorted");
                assert!(
                    keys.iter().all(|k| in_interval(k)),
                    "leaf keys within interval"
                );
                match leaf_depth {
                    Some(d) => assert_eq!(*d, depth, "all leaves at one depth"),
                    None => *leaf_depth = Some(depth),
                }
                return n;
            }
            let inner = as_inner(node);
            let n = inner.header.count(INNER_CAPACITY);
            let seps: Vec<Vec<u8>> = (0..n)
                .map(|i| inner.key(i).bytes(&mut buf).to_vec())
                .collect();
            assert!(seps.windows(2).all(|w| w[0] < w[1]), "separators sorted");
            assert!(
                seps.iter().all(|k| in_interval(k)),
                "separators within interval"
            );
            let mut total = 0;
            for i in 0..=n {
                let clo = if i > 0 {
                    Some(seps[i - 1].clone())
                } else {
                    lo.clone()
                };
                let chi = if i < n {
                    Some(seps[i].clone())
                } else {
                    hi.clone()
                };
                total += walk(inner.child(i), clo, chi, depth + 1, leaf_depth);
            }
            total
        }
    }
    let mut leaf_depth = None;
    let total = walk(tree.root(), None, None, 0, &mut leaf_depth);
    assert_eq!(total, tree.len(), "len matches the entries");
    total
}

fn key_of(n: u64, long: bool) -> Vec<u8> {
    let mut key = n.to_be_bytes().to_vec();
    if long {
        // Past the 15 inline bytes, and sharing a long prefix.
        key.splice(0..0, b"a-long-shared-prefix/".iter().copied());
    }
    key
}

#[derive(Clone, Debug)]
enum Op {
    Insert(u16),
    Remove(u16),
    Get(u16),
    Scan {
        from: u16,
        to: u16,
        forward: bool,
        limit: u8,
        from_excluded: bool,
        to_excluded: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<u16>().prop_map(|k| Op::Insert(k % 2000)),
        3 => any::<u16>().prop_map(|k| Op::Remove(k % 2000)),
        1 => any::<u16>().prop_map(|k| Op::Get(k % 2000)),
        1 => (any::<u16>(), any::<u16>(), any::<bool>(), any::<u8>(), any::<bool>(), any::<bool>())
            .prop_map(|(a, b, forward, limit, fe, te)| Op::Scan {
                from: a % 2100,
                to: b % 2100,
                forward,
                limit: limit.max(1),
                from_excluded: fe,
                to_excluded: te,
            }),
    ]
}

fn run_model(ops: &[Op], long: bool) {
    let tree = BTree::new();
    let mut model: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    for op in ops {
        match *op {
            Op::Insert(k) => {
                let key = key_of(k.into(), long);
                let fresh = !model.contains_key(&key);
                assert_eq!(insert(&tree, &key, k.into()), fresh);
                model.entry(key).or_insert(k.into());
            }
            Op::Remove(k) => {
                let key = key_of(k.into(), long);
                assert_eq!(remove(&tree, &key, k.into()), model.remove(&key).is_some());
            }
            Op::Get(k) => {
                let key = key_of(k.into(), long);
                let guard = Guard::new();
                assert_eq!(
                    tree.get(&key, &guard).map(|r| r.as_raw()),
                    model.get(&key).map(|&n| fake(n).as_raw())
                );
            }
            Op::Scan {
                from,
                to,
                forward,
                limit,
                from_excluded,
                to_excluded,
            } => {
                let (a, b) = (key_of(from.into(), long), key_of(to.into(), long));
                let lower = if from_excluded {
                    Bound::Excluded(&a[..])
                } else {
                    Bound::Included(&a[..])
                };
                let upper = if to_excluded {
                    Bound::Excluded(&b[..])
                } else {
                    Bound::Included(&b[..])
                };
                let bounds = (lower, upper);
                let valid = a < b || (a == b && !from_excluded && !to_excluded);
                let got = scan(&tree, bounds, forward, limit.into());
                let expected: Vec<(Vec<u8>, u64)> = if valid {
                    let range = model
                        .range::<[u8], _>(bounds)
                        .map(|(k, &n)| (k.clone(), fake(n).as_raw()));
                    if forward {
                        range.take(limit.into()).collect()
                    } else {
                        range.rev().take(limit.into()).collect()
                    }
                } else {
                    Vec::new()
                };
                assert_eq!(
                    got, expected,
                    "scan {bounds:?} forward={forward} limit={limit}"
                );
            }
        }
    }
    assert_eq!(check_invariants(&tree), model.len());
    let all = scan(
        &tree,
        (Bound::Unbounded, Bound::Unbounded),
        true,
        usize::MAX,
    );
    assert_eq!(all.len(), model.len());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn matches_a_btreemap(ops in proptest::collection::vec(op(), 1..3000)) {
        run_model(&ops, false);
    }

    #[test]
    fn matches_a_btreemap_with_heap_keys(ops in proptest::collection::vec(op(), 1..1500)) {
        run_model(&ops, true);
    }
}

#[test]
fn sequential_inserts_fill_leaves_and_removes_merge_them() {
    let tree = BTree::new();
    for n in 0..100_000u64 {
        assert!(insert(&tree, &n.to_be_bytes(), n));
    }
    assert_eq!(check_invariants(&tree), 100_000);
    let leaves = count_leaves(&tree);
    assert!(
        leaves <= 100_000 / (LEAF_CAPACITY - 1) + 2,
        "appends fill leaves: {leaves} leaves"
    );
    for n in (0..100_000u64).filter(|n| n % 16 != 0) {
        assert!(remove(&tree, &n.to_be_bytes(), n));
    }
    assert_eq!(check_invariants(&tree), 6250);
    let after = count_leaves(&tree);
    assert!(
        after < leaves / 4,
        "underfull leaves merged: {leaves} -> {after}"
    );
    for n in (0..100_000u64).step_by(16) {
        assert!(remove(&tree, &n.to_be_bytes(), n));
    }
    assert_eq!(check_invariants(&tree), 0);
    assert!(scan(
        &tree,
        (Bound::Unbounded, Bound::Unbounded),
        false,
        usize::MAX
    )
    .is_empty());
}

fn count_leaves(tree: &BTree) -> usize {
    let guard = Guard::new();
    let mut leaves = 0;
    tree.scan(
        (Bound::Unbounded, Bound::Unbounded),
        true,
        &guard,
        &mut |_| leaves += 1,
        &mut |_, _| true,
    );
    leaves
}

#[test]
fn inserts_report_leaf_versions_for_the_node_set() {
    let tree = BTree::new();
    let guard = Guard::new();
    let mut changes = Vec::new();
    for n in 0..LEAF_CAPACITY as u64 + 1 {
        tree.insert(&n.to_be_bytes(), fake(n), &guard, &mut |c| changes.push(c))
            .expect("fresh");
    }
    let splits: Vec<_> = changes
        .iter()
        .filter(|c| matches!(c, LeafChange::Split))
        .collect();
    assert_eq!(splits.len(), 1, "one split at capacity + 1");
    match changes.last() {
        Some(LeafChange::Inserted { leaf, after, .. }) => assert_eq!(leaf.version(), *after),
        other => panic!("the last change is the insert: {other:?}"),
    }
    // A scan's leaves are exactly those whose versions it reported; an insert
    // into the range moves one of them.
    let mut node_set = Vec::new();
    tree.scan(
        (Bound::Unbounded, Bound::Unbounded),
        true,
        &guard,
        &mut |l| node_set.push((l.leaf, l.version)),
        &mut |_, _| true,
    );
    assert_eq!(node_set.len(), 2);
    assert!(node_set.iter().all(|(l, v)| l.version() == *v));
    tree.insert(&[0u8; 7], fake(99), &guard, &mut |_| {})
        .expect("fresh");
    assert!(
        node_set.iter().any(|(l, v)| l.version() != *v),
        "an insert in the range changes a scanned leaf"
    );
}

/// The property the transaction layer rests on: keys present throughout a
/// scan are returned by it, in order, once, while other threads insert and
/// remove keys between them (splitting and merging the leaves). Even keys
/// (`2k`) stay; odd keys churn.
#[test]
fn concurrent_scans_see_every_stable_key() {
    const KEYS: u64 = 20_000;
    let tree = Arc::new(BTree::new());
    for k in 0..KEYS {
        assert!(insert(&tree, &(2 * k).to_be_bytes(), 2 * k));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(4));
    let mut handles = Vec::new();
    for t in 0..2u64 {
        let (tree, stop, start) = (Arc::clone(&tree), Arc::clone(&stop), Arc::clone(&start));
        handles.push(std::thread::spawn(move || {
            let mut rng = SmallRng::seed_from_u64(t);
            start.wait();
            let mut ops = 0u64;
            while !stop.load(StdOrdering::Relaxed) {
                // Insert a run of odd keys, then remove it: splits, then merges.
                let base = rng.random_range(0..KEYS - 200);
                let run = rng.random_range(1..200);
                for k in base..base + run {
                    insert(&tree, &(2 * k + 1).to_be_bytes(), 2 * k + 1);
                }
                for k in base..base + run {
                    remove(&tree, &(2 * k + 1).to_be_bytes(), 2 * k + 1);
                }
                ops += 2 * run;
            }
            ops
        }));
    }
    for t in 0..2u64 {
        let (tree, stop, start) = (Arc::clone(&tree), Arc::clone(&stop), Arc::clone(&start));
        handles.push(std::thread::spawn(move || {
            let mut rng = SmallRng::seed_from_u64(100 + t);
            start.wait();
            let mut scans = 0u64;
            while !stop.load(StdOrdering::Relaxed) {
                let a = rng.random_range(0..2 * KEYS);
                let b = rng.random_range(a..(a + 3000).min(2 * KEYS + 10));
                let forward = rng.random_bool(0.5);
                let (lo, hi) = (a.to_be_bytes(), b.to_be_bytes());
                let got = scan(
                    &tree,
                    (Bound::Included(&lo[..]), Bound::Excluded(&hi[..])),
                    forward,
                    usize::MAX,
                );
                let mut keys: Vec<u64> = got
                    .iter()
                    .map(|(k, _)| u64::from_be_bytes(k[..].try_into().expect("8 bytes")))
                    .collect();
                if !forward {
                    keys.reverse();
                }
                assert!(keys.windows(2).all(|w| w[0] < w[1]), "in order, once");
                assert!(keys.iter().all(|&k| a <= k && k < b), "within the range");
                let stable: Vec<u64> = keys.iter().copied().filter(|k| k % 2 == 0).collect();
                let expected: Vec<u64> = (a..b).filter(|k| k % 2 == 0 && *k < 2 * KEYS).collect();
                assert_eq!(
                    stable, expected,
                    "every stable key of [{a}, {b}) forward={forward}"
                );
                scans += 1;
            }
            scans
        }));
    }
    std::thread::sleep(std::time::Duration::from_millis(1500));
    stop.store(true, StdOrdering::Relaxed);
    let counts: Vec<u64> = handles
        .into_iter()
        .map(|h| h.join().expect("no thread panicked"))
        .collect();
    assert!(
        counts.iter().all(|&c| c > 0),
        "every thread made progress: {counts:?}"
    );
    assert_eq!(check_invariants(&tree), KEYS as usize);
}

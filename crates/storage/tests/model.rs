//! Sequential model test: random transactions against a `BTreeMap` model
//! (redb's approach). Every operation's result and the final contents must match,
//! for an ordered relation and (point operations only) a hashed one.

use std::collections::BTreeMap;
use std::ops::Bound;

use proptest::prelude::*;
use roost_storage::{ConstraintViolation, Engine, IndexKind, ScanDirection, TxError};

#[derive(Clone, Debug)]
enum Op {
    Get(u8),
    Put(u8, Vec<u8>),
    Insert(u8, Vec<u8>),
    Update(u8, Vec<u8>),
    Delete(u8),
    Scan {
        lo: Bound<u8>,
        hi: Bound<u8>,
        reverse: bool,
        limit: usize,
    },
}

fn key(k: u8) -> Vec<u8> {
    // Variable-length keys exercise ordering across lengths.
    let mut v = vec![k / 4];
    v.extend(std::iter::repeat_n(k, usize::from(k % 3)));
    v
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => proptest::collection::vec(any::<u8>(), 0..24),
        1 => proptest::collection::vec(any::<u8>(), 100..300),
    ]
}

fn bound() -> impl Strategy<Value = Bound<u8>> {
    prop_oneof![
        Just(Bound::Unbounded),
        (0..32u8).prop_map(Bound::Included),
        (0..32u8).prop_map(Bound::Excluded)
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0..32u8;
    prop_oneof![
        k.clone().prop_map(Op::Get),
        (k.clone(), value()).prop_map(|(k, v)| Op::Put(k, v)),
        (k.clone(), value()).prop_map(|(k, v)| Op::Insert(k, v)),
        (k.clone(), value()).prop_map(|(k, v)| Op::Update(k, v)),
        k.prop_map(Op::Delete),
        (bound(), bound(), any::<bool>(), 0..8usize).prop_map(|(lo, hi, reverse, limit)| {
            Op::Scan {
                lo,
                hi,
                reverse,
                limit,
            }
        }),
    ]
}

fn map_bound(b: Bound<u8>) -> Bound<Vec<u8>> {
    b.map(key)
}

fn valid_range(lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    match (lo, hi) {
        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => {
            a < b || (a == b && matches!((lo, hi), (Bound::Included(_), Bound::Included(_))))
        }
        _ => true,
    }
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn apply_model(model: &mut Model, op: &Op) -> String {
    match op {
        Op::Get(k) => format!("{:?}", model.get(&key(*k))),
        Op::Put(k, v) => {
            model.insert(key(*k), v.clone());
            "ok".into()
        }
        Op::Insert(k, v) => match model.entry(key(*k)) {
            std::collections::btree_map::Entry::Occupied(_) => "duplicate".into(),
            std::collections::btree_map::Entry::Vacant(slot) => {
                slot.insert(v.clone());
                "ok".into()
            }
        },
        Op::Update(k, v) => match model.get_mut(&key(*k)) {
            Some(old) => {
                *old = v.clone();
                "ok".into()
            }
            None => "missing".into(),
        },
        Op::Delete(k) => format!("{}", model.remove(&key(*k)).is_some()),
        Op::Scan {
            lo,
            hi,
            reverse,
            limit,
        } => {
            let (lo, hi) = (map_bound(*lo), map_bound(*hi));
            if !valid_range(&lo, &hi) {
                return "[]".into();
            }
            let range = model.range::<Vec<u8>, _>((lo, hi));
            let rows: Vec<_> = if *reverse {
                range.rev().take(*limit).collect()
            } else {
                range.take(*limit).collect()
            };
            format!("{rows:?}")
        }
    }
}

fn apply_engine<'r>(
    tx: &mut roost_storage::Transaction<'_, 'r>,
    rel: &'r roost_storage::Relation,
    op: &Op,
) -> String {
    let constraint = |r: Result<(), TxError>| match r {
        Ok(()) => "ok".to_string(),
        Err(TxError::Constraint(ConstraintViolation::DuplicateKey { .. })) => "duplicate".into(),
        Err(TxError::Constraint(ConstraintViolation::MissingKey { .. })) => "missing".into(),
        Err(e) => panic!("unexpected error {e}"),
    };
    match op {
        Op::Get(k) => format!("{:?}", tx.get(rel, &key(*k)).unwrap().as_ref()),
        Op::Put(k, v) => constraint(tx.put(rel, &key(*k), v)),
        Op::Insert(k, v) => constraint(tx.insert(rel, &key(*k), v)),
        Op::Update(k, v) => constraint(tx.update(rel, &key(*k), v)),
        Op::Delete(k) => format!("{}", tx.delete(rel, &key(*k)).unwrap()),
        Op::Scan {
            lo,
            hi,
            reverse,
            limit,
        } => {
            let (lo, hi) = (map_bound(*lo), map_bound(*hi));
            let bounds = (
                lo.as_ref().map(Vec::as_slice),
                hi.as_ref().map(Vec::as_slice),
            );
            let dir = if *reverse {
                ScanDirection::Reverse
            } else {
                ScanDirection::Forward
            };
            let mut rows: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            tx.scan(rel, bounds, dir, *limit, |k, v| {
                rows.push((k.to_vec(), v.to_vec()));
                true
            })
            .unwrap();
            let rows: Vec<(&Vec<u8>, &Vec<u8>)> = rows.iter().map(|(k, v)| (k, v)).collect();
            format!("{rows:?}")
        }
    }
}

/// Runs `txs` (each op through `map`) on the engine and on the model,
/// checking every result; returns the model of what committed.
fn run_against_model(
    worker: &mut roost_storage::Worker,
    rel: &roost_storage::Relation,
    txs: &[(Vec<Op>, bool)],
    map: impl Fn(&Op) -> Op,
) -> Result<Model, TestCaseError> {
    let mut committed = Model::new();
    for (ops, commit) in txs {
        let mut pending = committed.clone();
        let mut tx = worker.begin();
        for op in ops.iter().map(&map) {
            let expected = apply_model(&mut pending, &op);
            let actual = apply_engine(&mut tx, rel, &op);
            prop_assert_eq!(actual, expected, "op {:?}", op);
        }
        if *commit {
            tx.commit().expect("a lone worker never conflicts");
            committed = pending;
        } else {
            tx.abort();
        }
    }
    Ok(committed)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn transactions_match_a_btreemap(txs in proptest::collection::vec((proptest::collection::vec(op(), 1..12), any::<bool>()), 1..12)) {
        let engine = Engine::default();
        let rel = engine.create_relation("model").unwrap();
        let mut worker = engine.worker();
        let mut committed = run_against_model(&mut worker, &rel, &txs, Op::clone)?;
        let mut tx = worker.begin();
        let everything = apply_engine(&mut tx, &rel, &Op::Scan { lo: Bound::Unbounded, hi: Bound::Unbounded, reverse: false, limit: usize::MAX });
        let expected = apply_model(&mut committed, &Op::Scan { lo: Bound::Unbounded, hi: Bound::Unbounded, reverse: false, limit: usize::MAX });
        prop_assert_eq!(everything, expected);
        tx.commit().unwrap();
        prop_assert_eq!(rel.index_len(), committed.len(), "absent records were unlinked");
    }

    #[test]
    fn point_transactions_on_a_hashed_relation_match_a_btreemap(txs in proptest::collection::vec((proptest::collection::vec(op(), 1..12), any::<bool>()), 1..12)) {
        let engine = Engine::default();
        let rel = engine.create_relation_with("model", IndexKind::Hashed).unwrap();
        let mut worker = engine.worker();
        // A hashed relation has no order: scans become reads of their low key.
        let point = |op: &Op| match op {
            Op::Scan { lo: Bound::Included(k) | Bound::Excluded(k), .. } => Op::Get(*k),
            Op::Scan { .. } => Op::Get(0),
            other => other.clone(),
        };
        let mut committed = run_against_model(&mut worker, &rel, &txs, point)?;
        let mut tx = worker.begin();
        for k in 0..32u8 {
            let actual = apply_engine(&mut tx, &rel, &Op::Get(k));
            let expected = apply_model(&mut committed, &Op::Get(k));
            prop_assert_eq!(actual, expected, "key {}", k);
        }
        tx.commit().unwrap();
        prop_assert_eq!(rel.index_len(), committed.len(), "absent records were unlinked");
    }
}

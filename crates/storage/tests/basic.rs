//! Single-threaded semantics of the transaction API.

use std::ops::Bound;

use roost_storage::{
    ConflictKind, ConstraintViolation, Engine, RetryPolicy, ScanDirection, Table, TxError,
};

#[test]
fn put_get_delete_and_read_own_writes() {
    let engine = Engine::default();
    let rel = engine.create_relation("t").unwrap();
    let mut w = engine.worker();
    let mut tx = w.begin();
    assert_eq!(tx.get(&rel, b"a").unwrap(), None);
    tx.put(&rel, b"a", b"1").unwrap();
    assert_eq!(tx.get(&rel, b"a").unwrap().as_deref(), Some(&b"1"[..]));
    tx.commit().unwrap();

    let mut tx = w.begin();
    assert_eq!(tx.get(&rel, b"a").unwrap().as_deref(), Some(&b"1"[..]));
    assert!(tx.delete(&rel, b"a").unwrap());
    assert_eq!(tx.get(&rel, b"a").unwrap(), None);
    assert!(!tx.delete(&rel, b"a").unwrap());
    tx.commit().unwrap();

    let mut tx = w.begin();
    assert_eq!(tx.get(&rel, b"a").unwrap(), None);
    tx.commit().unwrap();
    assert_eq!(rel.index_len(), 0, "deleted record was unlinked");
}

#[test]
fn insert_and_update_enforce_constraints() {
    let engine = Engine::default();
    let rel = engine.create_relation("t").unwrap();
    let mut w = engine.worker();
    let mut tx = w.begin();
    tx.insert(&rel, b"k", b"v").unwrap();
    assert!(matches!(
        tx.insert(&rel, b"k", b"v2"),
        Err(TxError::Constraint(
            ConstraintViolation::DuplicateKey { .. }
        ))
    ));
    assert!(matches!(
        tx.update(&rel, b"missing", b"x"),
        Err(TxError::Constraint(ConstraintViolation::MissingKey { .. }))
    ));
    tx.commit().unwrap();
    let mut tx = w.begin();
    assert!(matches!(
        tx.insert(&rel, b"k", b"v3"),
        Err(TxError::Constraint(_))
    ));
    tx.update(&rel, b"k", b"v4").unwrap();
    tx.commit().unwrap();
    let mut tx = w.begin();
    assert_eq!(tx.get(&rel, b"k").unwrap().as_deref(), Some(&b"v4"[..]));
}

#[test]
fn aborted_inserts_leave_nothing_behind() {
    let engine = Engine::default();
    let rel = engine.create_relation("t").unwrap();
    let mut w = engine.worker();
    let mut tx = w.begin();
    tx.insert(&rel, b"x", b"1").unwrap();
    tx.put(&rel, b"y", b"2").unwrap();
    tx.abort();
    assert_eq!(rel.index_len(), 0);
    let mut tx = w.begin();
    assert_eq!(tx.get(&rel, b"x").unwrap(), None);
    drop(tx); // dropping aborts
    assert_eq!(w.stats().aborts, 2);
}

#[test]
fn scans_forward_reverse_with_limits_and_own_writes() {
    let engine = Engine::default();
    let table: Table<u64, String> = Table::create(&engine, "t").unwrap();
    let mut w = engine.worker();
    let mut tx = w.begin();
    for i in 0..100u64 {
        table.insert(&mut tx, &i, &format!("v{i}")).unwrap();
    }
    tx.commit().unwrap();
    let mut tx = w.begin();
    table.delete(&mut tx, &11).unwrap();
    table.put(&mut tx, &12, &"new".to_string()).unwrap();
    let rows = table
        .scan(&mut tx, 10..20, ScanDirection::Forward, 3)
        .unwrap();
    assert_eq!(
        rows,
        vec![(10, "v10".into()), (12, "new".into()), (13, "v13".into())]
    );
    let rows = table
        .scan(&mut tx, 10..=20, ScanDirection::Reverse, 2)
        .unwrap();
    assert_eq!(rows, vec![(20, "v20".into()), (19, "v19".into())]);
    let all = table
        .scan(&mut tx, .., ScanDirection::Forward, usize::MAX)
        .unwrap();
    assert_eq!(all.len(), 99);
    tx.commit().unwrap();
}

#[test]
fn conflicting_writer_aborts_reader() {
    let engine = Engine::default();
    let rel = engine.create_relation("t").unwrap();
    let (mut w1, mut w2) = (engine.worker(), engine.worker());
    let mut setup = w1.begin();
    setup.put(&rel, b"a", b"0").unwrap();
    setup.commit().unwrap();

    let mut t1 = w1.begin();
    let v = t1.get(&rel, b"a").unwrap().unwrap();
    let mut t2 = w2.begin();
    t2.put(&rel, b"a", b"2").unwrap();
    t2.commit().unwrap();
    t1.put(&rel, b"b", &v).unwrap();
    assert_eq!(
        t1.commit().unwrap_err().to_string(),
        "commit aborted: a record read by the transaction changed or was locked before commit (relation `t`, key \"a\")"
    );
}

#[test]
fn missing_key_read_conflicts_with_insert() {
    let engine = Engine::default();
    let rel = engine.create_relation("t").unwrap();
    let (mut w1, mut w2) = (engine.worker(), engine.worker());
    let mut t1 = w1.begin();
    assert_eq!(t1.get(&rel, b"k").unwrap(), None);
    let mut t2 = w2.begin();
    t2.insert(&rel, b"k", b"v").unwrap();
    t2.commit().unwrap();
    t1.put(&rel, b"other", b"x").unwrap();
    let roost_storage::CommitError::Conflict(conflict) = t1.commit().unwrap_err();
    assert_eq!(conflict.kind, ConflictKind::Phantom);
    // The abort names the relation and the key that appeared.
    let at = conflict.at.as_deref().expect("the conflict says where");
    assert_eq!(
        (at.relation.as_str(), at.key.as_deref()),
        ("t", Some(&b"k"[..]))
    );
    assert!(
        conflict.to_string().contains("relation `t`, key \"k\""),
        "{conflict}"
    );
}

#[test]
fn a_read_validation_conflict_names_the_record_it_read() {
    let engine = Engine::default();
    let rel = engine.create_relation("accounts").unwrap();
    let (mut w1, mut w2) = (engine.worker(), engine.worker());
    let mut t = w1.begin();
    t.put(&rel, b"alice\x01", b"1").unwrap();
    t.put(&rel, b"bob", b"1").unwrap();
    t.commit().unwrap();
    let mut t1 = w1.begin();
    assert_eq!(t1.get(&rel, b"bob").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(
        t1.get(&rel, b"alice\x01").unwrap().as_deref(),
        Some(&b"1"[..])
    );
    let mut t2 = w2.begin();
    t2.put(&rel, b"alice\x01", b"2").unwrap();
    t2.commit().unwrap();
    t1.put(&rel, b"bob", b"0").unwrap();
    let roost_storage::CommitError::Conflict(conflict) = t1.commit().unwrap_err();
    assert_eq!(conflict.kind, ConflictKind::ReadValidation);
    let at = conflict.at.as_deref().expect("the conflict says where");
    assert_eq!(at.relation, "accounts");
    assert_eq!(
        at.key.as_deref(),
        Some(&b"alice\x01"[..]),
        "not bob: alice changed"
    );
    // Bytes that are not printable are escaped in the message.
    assert!(
        conflict.to_string().contains("key \"alice\\x01\""),
        "{conflict}"
    );
}

#[test]
fn retry_helper_returns_user_errors_and_limits_attempts() {
    let engine = Engine::default();
    let rel = engine.create_relation("t").unwrap();
    let mut w = engine.worker();
    let err = w
        .run(RetryPolicy::default(), |tx| {
            tx.put(&rel, b"a", b"1")?;
            Err::<(), _>(TxError::user_abort("no"))
        })
        .unwrap_err();
    assert_eq!(err, TxError::user_abort("no"));
    let mut calls = 0;
    let err = w
        .run(
            RetryPolicy {
                max_attempts: 3,
                initial_backoff_us: 1,
                max_backoff_us: 10,
            },
            |_tx| {
                calls += 1;
                Err::<(), _>(TxError::Conflict(ConflictKind::ReadValidation.into()))
            },
        )
        .unwrap_err();
    assert_eq!(calls, 3);
    assert_eq!(w.stats().conflicts, 3);
    assert_eq!(w.stats().aborts, 4, "the user abort and three conflicts");
    assert!(matches!(err, TxError::RetriesExhausted { attempts: 3, .. }));
    let mut tx = w.begin();
    assert_eq!(tx.get(&rel, b"a").unwrap(), None, "user abort rolled back");
}

#[test]
fn large_values_and_bad_sizes() {
    let engine = Engine::default();
    let rel = engine.create_relation("t").unwrap();
    let mut w = engine.worker();
    let big = vec![7u8; 5000];
    let mut tx = w.begin();
    tx.put(&rel, b"k", b"small").unwrap();
    tx.commit().unwrap();
    let mut tx = w.begin();
    tx.put(&rel, b"k", &big).unwrap();
    tx.commit().unwrap();
    let mut tx = w.begin();
    assert_eq!(tx.get(&rel, b"k").unwrap().unwrap(), big);
    assert!(matches!(
        tx.put(&rel, &vec![0u8; 5000], b"v"),
        Err(TxError::KeyTooLarge { .. })
    ));
    assert!(matches!(
        tx.put(&rel, b"k", &vec![0u8; 17 << 20]),
        Err(TxError::ValueTooLarge { .. })
    ));
}

#[test]
fn scans_with_bounds_outside_the_keys() {
    // A starting bound below the first key or above the last is moved onto
    // that key internally (a stall in the index otherwise); results must not
    // change, and must never include keys outside the bounds.
    let engine = Engine::default();
    let rel = engine.create_relation("t").unwrap();
    let mut w = engine.worker();
    let mut tx = w.begin();
    for i in 10..20u64 {
        tx.insert(&rel, &i.to_be_bytes(), b"v").unwrap();
    }
    tx.commit().unwrap();
    let keys = |lo: Bound<u64>, hi: Bound<u64>, dir: ScanDirection, limit: usize| {
        let (lo, hi) = (lo.map(u64::to_be_bytes), hi.map(u64::to_be_bytes));
        let mut out = Vec::new();
        let mut w = engine.worker();
        let mut tx = w.begin();
        tx.scan(
            &rel,
            (lo.as_ref().map(|b| &b[..]), hi.as_ref().map(|b| &b[..])),
            dir,
            limit,
            |k, _| {
                out.push(u64::from_be_bytes(k.try_into().unwrap()));
                true
            },
        )
        .unwrap();
        tx.commit().unwrap();
        out
    };
    assert_eq!(
        keys(
            Bound::Unbounded,
            Bound::Excluded(1000),
            ScanDirection::Reverse,
            3
        ),
        [19, 18, 17]
    );
    assert_eq!(
        keys(
            Bound::Included(0),
            Bound::Unbounded,
            ScanDirection::Forward,
            2
        ),
        [10, 11]
    );
    assert_eq!(
        keys(
            Bound::Excluded(0),
            Bound::Included(1000),
            ScanDirection::Forward,
            100
        )
        .len(),
        10
    );
    assert_eq!(
        keys(
            Bound::Included(0),
            Bound::Excluded(10),
            ScanDirection::Forward,
            100
        ),
        [] as [u64; 0]
    );
    assert_eq!(
        keys(
            Bound::Excluded(19),
            Bound::Included(1000),
            ScanDirection::Reverse,
            100
        ),
        [] as [u64; 0]
    );
    assert_eq!(
        keys(
            Bound::Included(15),
            Bound::Included(15),
            ScanDirection::Reverse,
            100
        ),
        [15]
    );
}

/// Silo's node set with the re-check of changed leaves: an insert into a
/// scanned leaf outside the scanned range (or past where a limit stopped the
/// scan) is not a conflict; one inside is a phantom; the transaction's own
/// inserts, even ones that split a scanned leaf, are not.
#[test]
fn scans_conflict_with_inserts_in_their_range_only() {
    let key = |n: u64| n.to_be_bytes();
    // Keys 0, 10, 20, ... 190: one leaf holds them all.
    let setup = || {
        let engine = Engine::default();
        let rel = engine.create_relation("t").unwrap();
        let mut w = engine.worker();
        let mut tx = w.begin();
        for n in (0..200).step_by(10) {
            tx.insert(&rel, &key(n), b"v").unwrap();
        }
        tx.commit().unwrap();
        (engine, rel)
    };
    // (scan from, to, direction, limit, key another transaction inserts, conflict?)
    let cases = [
        (50, 100, ScanDirection::Forward, usize::MAX, 75, true),
        (50, 100, ScanDirection::Forward, usize::MAX, 105, false),
        (50, 100, ScanDirection::Forward, usize::MAX, 45, false),
        (50, 100, ScanDirection::Reverse, usize::MAX, 55, true),
        (50, 100, ScanDirection::Reverse, usize::MAX, 155, false),
        // A limit of 2 stops the forward scan at 60, the reverse one at 90.
        (50, 100, ScanDirection::Forward, 2, 55, true),
        (50, 100, ScanDirection::Forward, 2, 65, false),
        (50, 100, ScanDirection::Reverse, 2, 95, true),
        (50, 100, ScanDirection::Reverse, 2, 85, false),
    ];
    for (from, to, direction, limit, inserted, conflict) in cases {
        let (engine, rel) = setup();
        let (mut w1, mut w2) = (engine.worker(), engine.worker());
        let mut t1 = w1.begin();
        let (lo, hi) = (key(from), key(to));
        t1.scan(
            &rel,
            (Bound::Included(&lo[..]), Bound::Included(&hi[..])),
            direction,
            limit,
            |_, _| true,
        )
        .unwrap();
        let mut t2 = w2.begin();
        t2.insert(&rel, &key(inserted), b"new").unwrap();
        t2.commit().unwrap();
        t1.put(&rel, &key(1000), b"w").unwrap();
        let committed = t1.commit();
        let case = format!("scan [{from}, {to}] {direction:?} limit {limit}, insert {inserted}");
        if conflict {
            let roost_storage::CommitError::Conflict(c) = committed.unwrap_err();
            assert_eq!(c.kind, ConflictKind::Phantom, "{case}");
        } else {
            committed.unwrap_or_else(|e| panic!("{case}: {e}"));
        }
    }
    // Own inserts into the scanned range, enough to split its leaf.
    let (engine, rel) = setup();
    let mut w = engine.worker();
    let mut tx = w.begin();
    let n = tx
        .scan(
            &rel,
            (Bound::Unbounded, Bound::Unbounded),
            ScanDirection::Forward,
            usize::MAX,
            |_, _| true,
        )
        .unwrap();
    assert_eq!(n, 20);
    for k in (1..200).step_by(5) {
        tx.insert(&rel, &key(k), b"mine")
            .unwrap_or_else(|e| panic!("insert {k}: {e}"));
    }
    tx.commit().expect("own inserts are not phantoms");
}

/// A split moves part of a scanned leaf's interval to a new leaf, so it must
/// change the scanned leaf's version: otherwise an insert into the moved part
/// lands in a leaf the scan never saw, and the scan's node set still
/// validates. The leaf holds exactly 32 keys (one full leaf); an append
/// splits off its last key, and the phantom goes into the new right leaf.
#[test]
fn a_split_of_a_scanned_leaf_keeps_the_scan_honest() {
    let key = |n: u64| n.to_be_bytes();
    let engine = Engine::default();
    let rel = engine.create_relation("t").unwrap();
    let (mut w1, mut w2) = (engine.worker(), engine.worker());
    let mut tx = w2.begin();
    for n in (0..320).step_by(10) {
        tx.insert(&rel, &key(n), b"v").unwrap();
    }
    tx.commit().unwrap();
    let mut t1 = w1.begin();
    let (lo, hi) = (key(200), key(400));
    let seen = t1
        .scan(
            &rel,
            (Bound::Included(&lo[..]), Bound::Included(&hi[..])),
            ScanDirection::Forward,
            usize::MAX,
            |_, _| true,
        )
        .unwrap();
    assert_eq!(seen, 12);
    for inserted in [315, 312] {
        let mut t = w2.begin();
        t.insert(&rel, &key(inserted), b"new").unwrap();
        t.commit().unwrap();
    }
    t1.put(&rel, &key(1000), b"w").unwrap();
    let roost_storage::CommitError::Conflict(c) = t1.commit().unwrap_err();
    assert_eq!(c.kind, ConflictKind::Phantom);
}

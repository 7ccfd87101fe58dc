//! Partitioned hashed relations (`IndexKind::PartitionedHash`): a listing of
//! one partition visits that partition's entries only, sees the
//! transaction's own writes, and is serializable (a key linked into the
//! partition, or a listed record changed, before commit aborts the lister),
//! which the token test shows fails with phantom validation switched off.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use roost_storage::{
    ConflictKind, Engine, EngineConfig, IndexKind, PlantedBugs, Relation, RetryPolicy,
    ScanDirection, TxError,
};

fn key(partition: u32, id: u64) -> Vec<u8> {
    let mut k = partition.to_be_bytes().to_vec();
    k.extend_from_slice(&id.to_be_bytes());
    k
}

fn partitioned(engine: &Engine) -> std::sync::Arc<Relation> {
    engine
        .create_relation_with("p", IndexKind::PartitionedHash)
        .unwrap()
}

fn list<'r>(
    tx: &mut roost_storage::Transaction<'_, 'r>,
    rel: &'r Relation,
    p: u32,
) -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    tx.scan_partition(rel, p.to_be_bytes(), |k, _| {
        keys.push(k.to_vec());
        true
    })
    .unwrap();
    keys.sort();
    keys
}

#[test]
fn a_listing_visits_only_its_partition() {
    const PARTITIONS: u32 = 10_000;
    const ROWS: u64 = 10;
    let engine = Engine::default();
    let rel = partitioned(&engine);
    let mut worker = engine.worker();
    for batch in (0..PARTITIONS).collect::<Vec<_>>().chunks(500) {
        let mut tx = worker.begin();
        for &p in batch {
            for id in 0..ROWS {
                tx.insert(&rel, &key(p, id), b"v").unwrap();
            }
        }
        tx.commit().unwrap();
    }
    assert_eq!(rel.index_len(), (u64::from(PARTITIONS) * ROWS) as usize);
    let before = rel.partition_entries_listed();
    let mut tx = worker.begin();
    let keys = list(&mut tx, &rel, 4321);
    tx.commit().unwrap();
    assert_eq!(keys, (0..ROWS).map(|id| key(4321, id)).collect::<Vec<_>>());
    assert_eq!(
        rel.partition_entries_listed() - before,
        ROWS,
        "the listing copied its partition's entries and no others"
    );
    // A partition with no keys lists nothing (and visits nothing).
    let mut tx = worker.begin();
    assert!(list(&mut tx, &rel, PARTITIONS + 7).is_empty());
    tx.commit().unwrap();
    assert_eq!(rel.partition_entries_listed() - before, ROWS);
}

#[test]
fn a_listing_sees_own_writes_and_survives_own_inserts() {
    let engine = Engine::default();
    let rel = partitioned(&engine);
    let mut worker = engine.worker();
    let mut tx = worker.begin();
    for id in 0..3 {
        tx.insert(&rel, &key(1, id), b"old").unwrap();
    }
    tx.commit().unwrap();
    let mut tx = worker.begin();
    tx.delete(&rel, &key(1, 0)).unwrap();
    tx.put(&rel, &key(1, 1), b"new").unwrap();
    tx.insert(&rel, &key(1, 9), b"mine").unwrap();
    let mut seen = Vec::new();
    tx.scan_partition(&rel, 1u32.to_be_bytes(), |k, v| {
        seen.push((k.to_vec(), v.to_vec()));
        true
    })
    .unwrap();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            (key(1, 1), b"new".to_vec()),
            (key(1, 2), b"old".to_vec()),
            (key(1, 9), b"mine".to_vec()),
        ]
    );
    // Inserting into the partition after listing it does not invalidate
    // the listing (the transaction's own link is carried forward).
    tx.insert(&rel, &key(1, 10), b"later").unwrap();
    tx.commit().unwrap();
    let mut tx = worker.begin();
    assert_eq!(list(&mut tx, &rel, 1).len(), 4);
    tx.commit().unwrap();
}

#[test]
fn an_insert_into_a_listed_partition_aborts_the_lister() {
    let engine = Engine::default();
    let rel = partitioned(&engine);
    let (mut lister, mut writer) = (engine.worker(), engine.worker());
    let mut tx = lister.begin();
    assert!(list(&mut tx, &rel, 5).is_empty());
    tx.put(&rel, &key(6, 0), b"elsewhere").unwrap();
    let mut other = writer.begin();
    other.insert(&rel, &key(5, 1), b"phantom").unwrap();
    other.commit().unwrap();
    assert_eq!(
        conflict_kind(tx.commit().unwrap_err()),
        ConflictKind::Phantom
    );
    // An insert into another partition does not.
    let mut tx = lister.begin();
    assert_eq!(list(&mut tx, &rel, 5).len(), 1);
    let mut other = writer.begin();
    other.insert(&rel, &key(7, 1), b"unrelated").unwrap();
    other.commit().unwrap();
    tx.commit().unwrap();
}

#[test]
fn a_delete_of_a_listed_record_aborts_the_lister() {
    let engine = Engine::default();
    let rel = partitioned(&engine);
    let (mut lister, mut writer) = (engine.worker(), engine.worker());
    let mut tx = writer.begin();
    tx.insert(&rel, &key(5, 1), b"x").unwrap();
    tx.commit().unwrap();
    let mut tx = lister.begin();
    assert_eq!(list(&mut tx, &rel, 5).len(), 1);
    tx.put(&rel, &key(6, 0), b"elsewhere").unwrap();
    let mut other = writer.begin();
    assert!(other.delete(&rel, &key(5, 1)).unwrap());
    other.commit().unwrap();
    assert_eq!(
        conflict_kind(tx.commit().unwrap_err()),
        ConflictKind::ReadValidation
    );
    let mut tx = lister.begin();
    assert!(
        list(&mut tx, &rel, 5).is_empty(),
        "unlinked from the partition"
    );
    tx.commit().unwrap();
}

#[test]
fn listings_and_scans_are_refused_on_the_wrong_index() {
    let engine = Engine::default();
    let (ordered, hashed, parts) = (
        engine.create_relation("o").unwrap(),
        engine.create_relation_with("h", IndexKind::Hashed).unwrap(),
        partitioned(&engine),
    );
    let mut worker = engine.worker();
    let mut tx = worker.begin();
    for rel in [&ordered, &hashed] {
        assert_eq!(
            tx.scan_partition(rel, [0; 4], |_, _| true),
            Err(TxError::NotPartitioned {
                relation: rel.name().to_owned()
            })
        );
    }
    let unbounded = (std::ops::Bound::Unbounded, std::ops::Bound::Unbounded);
    assert_eq!(
        tx.scan(&parts, unbounded, ScanDirection::Forward, 1, |_, _| true),
        Err(TxError::ScanOfHashedRelation {
            relation: "p".into()
        })
    );
    // Keys shorter than the prefix belong to their zero-padded partition.
    tx.put(&parts, b"ab", b"short").unwrap();
    let mut seen = 0;
    tx.scan_partition(&parts, *b"ab\0\0", |k, _| {
        assert_eq!(k, b"ab");
        seen += 1;
        true
    })
    .unwrap();
    assert_eq!(seen, 1);
    tx.commit().unwrap();
}

/// `TOKENS` tokens live in `PARTITIONS` partitions; movers list a random
/// partition, delete one of its tokens and insert it (under a fresh key)
/// into another; a counter lists every partition in one transaction and
/// must find every token exactly once. Returns the miscounts.
fn moving_tokens(planted: PlantedBugs, deadline: Duration) -> u64 {
    const PARTITIONS: u32 = 6;
    const TOKENS: usize = 12;
    let engine = Engine::new(EngineConfig {
        planted_bugs: planted,
        ..EngineConfig::default()
    });
    let rel = partitioned(&engine);
    let mut worker = engine.worker();
    let mut tx = worker.begin();
    for t in 0..TOKENS as u64 {
        tx.insert(&rel, &key(t as u32 % PARTITIONS, t), b"token")
            .unwrap();
    }
    tx.commit().unwrap();
    let (next_id, stop, miscounts) = (
        AtomicU64::new(TOKENS as u64),
        AtomicBool::new(false),
        AtomicU64::new(0),
    );
    let retry = RetryPolicy {
        max_attempts: u32::MAX,
        initial_backoff_us: 1,
        max_backoff_us: 200,
    };
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let (engine, rel, next_id, stop) = (&engine, &rel, &next_id, &stop);
            s.spawn(move || {
                let mut worker = engine.worker();
                let mut rng = SmallRng::seed_from_u64(t + 1);
                while !stop.load(Ordering::Relaxed) {
                    let (from, to) = (
                        rng.random_range(0..PARTITIONS),
                        rng.random_range(0..PARTITIONS),
                    );
                    let id = next_id.fetch_add(1, Ordering::Relaxed);
                    worker
                        .run(retry, |tx| {
                            let mut first = None;
                            tx.scan_partition(rel, from.to_be_bytes(), |k, _| {
                                first = Some(k.to_vec());
                                false
                            })?;
                            if let Some(k) = first {
                                tx.delete(rel, &k)?;
                                tx.insert(rel, &key(to, id), b"token")?;
                            }
                            Ok(())
                        })
                        .unwrap();
                }
            });
        }
        let (engine, rel, stop, miscounts) = (&engine, &rel, &stop, &miscounts);
        s.spawn(move || {
            let mut worker = engine.worker();
            let start = Instant::now();
            while start.elapsed() < deadline && miscounts.load(Ordering::Relaxed) == 0 {
                let count = worker
                    .run(retry, |tx| {
                        let mut count = 0;
                        for p in 0..PARTITIONS {
                            count += tx.scan_partition(rel, p.to_be_bytes(), |_, _| true)?;
                        }
                        Ok(count)
                    })
                    .unwrap();
                if count != TOKENS {
                    miscounts.fetch_add(1, Ordering::Relaxed);
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
    });
    assert_eq!(rel.index_len(), TOKENS, "moved tokens were unlinked");
    miscounts.load(Ordering::Relaxed)
}

#[test]
fn moving_tokens_are_listed_exactly_once() {
    assert_eq!(
        moving_tokens(PlantedBugs::default(), Duration::from_millis(1500)),
        0
    );
}

#[test]
fn moving_tokens_catch_skipped_phantom_validation() {
    let planted = PlantedBugs {
        skip_phantom_validation: true,
        ..PlantedBugs::default()
    };
    let start = Instant::now();
    let mut caught = 0;
    while caught == 0 && start.elapsed() < Duration::from_secs(20) {
        caught += moving_tokens(planted, Duration::from_millis(500));
    }
    assert!(caught > 0, "the token test missed a planted bug");
}

/// The kind of a commit's conflict (where it was found aside).
fn conflict_kind(e: roost_storage::CommitError) -> roost_storage::ConflictKind {
    let roost_storage::CommitError::Conflict(c) = e;
    c.kind
}

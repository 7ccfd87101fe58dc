//! Microbenchmarks of the single-threaded transaction path (begin, operations,
//! Silo commit) on a 100k-record relation of u64 keys and 100-byte values:
//!
//! - `read_only_1_get`: one get, read-only commit (validation only);
//! - `rmw_1_record`: get, modify, put one record, commit (lock, validate, install);
//! - `txn_10_ops`: 8 gets and 2 puts on distinct records;
//! - `insert_delete`: one transaction inserting a new key and deleting the key
//!   the previous iteration inserted (placeholder insert plus unlink), so the
//!   relation keeps its size.
//!
//! `cargo bench -p roost-storage --bench commit_path` (add `-- --quick` for a
//! short run); `cargo test --all-targets` runs each once as a smoke test.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use roost_storage::{Engine, Relation, Transaction, Worker};

const RECORDS: u64 = 100_000;
const VALUE_BYTES: usize = 100;
const LOAD_BATCH: u64 = 100;
/// Loaded keys are `index << KEY_GAP_BITS`; inserted keys fall between them.
const KEY_GAP_BITS: u32 = 8;

fn key(index: u64) -> [u8; 8] {
    (index << KEY_GAP_BITS).to_be_bytes()
}

fn gap_key(index: u64) -> [u8; 8] {
    ((index << KEY_GAP_BITS) | 1).to_be_bytes()
}

fn first_word(value: &[u8]) -> u64 {
    value
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

fn commit(tx: Transaction<'_, '_>) {
    tx.commit()
        .expect("single-threaded transactions do not conflict");
}

fn loaded_relation() -> (Engine, Arc<Relation>) {
    let engine = Engine::default();
    let relation = engine.create_relation("bench").expect("fresh engine");
    let mut worker = engine.worker();
    let value = [0u8; VALUE_BYTES];
    for batch in 0..RECORDS / LOAD_BATCH {
        let mut tx = worker.begin();
        for index in batch * LOAD_BATCH..(batch + 1) * LOAD_BATCH {
            tx.insert(&relation, &key(index), &value)
                .expect("distinct keys");
        }
        commit(tx);
    }
    (engine, relation)
}

/// Ten distinct random indexes.
fn distinct_indexes(rng: &mut SmallRng) -> [u64; 10] {
    let mut indexes = [0u64; 10];
    let mut filled = 0;
    while filled < indexes.len() {
        let index = rng.random_range(0..RECORDS);
        if !indexes[..filled].contains(&index) {
            indexes[filled] = index;
            filled += 1;
        }
    }
    indexes
}

fn bench_read_only(c: &mut Criterion, worker: &mut Worker, relation: &Relation) {
    let mut rng = SmallRng::seed_from_u64(1);
    c.bench_function("read_only_1_get", |b| {
        b.iter(|| {
            let k = key(rng.random_range(0..RECORDS));
            let mut tx = worker.begin();
            let word = tx.get_with(relation, &k, first_word).expect("get");
            commit(tx);
            black_box(word)
        })
    });
}

fn bench_rmw(c: &mut Criterion, worker: &mut Worker, relation: &Relation) {
    let mut rng = SmallRng::seed_from_u64(2);
    let mut value = Vec::with_capacity(VALUE_BYTES);
    c.bench_function("rmw_1_record", |b| {
        b.iter(|| {
            let k = key(rng.random_range(0..RECORDS));
            let mut tx = worker.begin();
            let found = tx
                .get_with(relation, &k, |v| {
                    value.clear();
                    value.extend_from_slice(v);
                })
                .expect("get");
            if found.is_some() {
                let next = first_word(&value).wrapping_add(1);
                value[..8].copy_from_slice(&next.to_le_bytes());
                tx.put(relation, &k, &value).expect("put");
            }
            commit(tx);
        })
    });
}

fn bench_txn10(c: &mut Criterion, worker: &mut Worker, relation: &Relation) {
    let mut rng = SmallRng::seed_from_u64(3);
    let value = [7u8; VALUE_BYTES];
    c.bench_function("txn_10_ops", |b| {
        b.iter(|| {
            let indexes = distinct_indexes(&mut rng);
            let mut tx = worker.begin();
            let mut sum = 0u64;
            for &index in &indexes[..8] {
                let word = tx.get_with(relation, &key(index), first_word).expect("get");
                sum = sum.wrapping_add(word.unwrap_or(0));
            }
            for &index in &indexes[8..] {
                tx.put(relation, &key(index), &value).expect("put");
            }
            commit(tx);
            black_box(sum)
        })
    });
}

fn bench_insert_delete(c: &mut Criterion, worker: &mut Worker, relation: &Relation) {
    let value = [9u8; VALUE_BYTES];
    let mut previous: Option<u64> = None;
    let mut next = 0u64;
    c.bench_function("insert_delete", |b| {
        b.iter(|| {
            let index = next % RECORDS;
            next += 1;
            let mut tx = worker.begin();
            tx.insert(relation, &gap_key(index), &value)
                .expect("gap keys are free");
            if let Some(old) = previous {
                tx.delete(relation, &gap_key(old)).expect("delete");
            }
            commit(tx);
            previous = Some(index);
        })
    });
}

fn commit_path(c: &mut Criterion) {
    let (engine, relation) = loaded_relation();
    let mut worker = engine.worker();
    bench_read_only(c, &mut worker, &relation);
    bench_rmw(c, &mut worker, &relation);
    bench_txn10(c, &mut worker, &relation);
    bench_insert_delete(c, &mut worker, &relation);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = commit_path
}
criterion_main!(benches);

//! The engine benchmark's transactions, each written twice: through Silo OCC
//! (a `Worker`'s retry loop) and through the no-concurrency-control baseline
//! (`Relation::raw_*`, no transaction at all), touching the same keys.

use std::hint::black_box;
use std::ops::Bound;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use roost_storage::{ConstraintViolation, Relation, RetryPolicy, ScanDirection, TxError, Worker};

use crate::harness::TxnOutcome;
use crate::zipf::KeyChooser;

/// Keys are u64 big-endian.
pub const KEY_BYTES: usize = 8;
/// Loaded keys are `index << KEY_GAP_BITS`, leaving room for inserts between.
pub const KEY_GAP_BITS: u32 = 8;
/// Gap slots between two loaded keys.
const GAP_SLOTS: u64 = (1 << KEY_GAP_BITS) - 1;
/// Records a scan-mix scan reads.
pub const SCAN_LENGTH: usize = 10;
/// One in this many scan-mix transactions inserts instead of scanning.
const SCAN_MIX_INSERT_ONE_IN: u32 = 10;
const TXN10_READS: usize = 8;
const TXN10_WRITES: usize = 2;
const TXN10_OPS: usize = TXN10_READS + TXN10_WRITES;
/// Redraws of a duplicate key in a txn-10 batch before probing linearly.
const DISTINCT_REDRAWS: u32 = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// One get of a random key.
    ReadOnly,
    /// Get a key, increment its first 8 bytes, put it back.
    Rmw,
    /// 8 gets and 2 blind puts on 10 distinct keys.
    Txn10,
    /// 90%: scan 10 records forward from a random key; 10%: insert a new key
    /// between two loaded keys.
    ScanMix,
}

impl Workload {
    pub const ALL: [Workload; 4] = [
        Workload::ReadOnly,
        Workload::Rmw,
        Workload::Txn10,
        Workload::ScanMix,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::ReadOnly => "read-only",
            Workload::Rmw => "rmw",
            Workload::Txn10 => "txn-10",
            Workload::ScanMix => "scan-mix",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            Workload::ReadOnly => "1 get of a random key",
            Workload::Rmw => "get a key, increment its first 8 bytes, put it back",
            Workload::Txn10 => "8 gets + 2 blind puts on 10 distinct random keys",
            Workload::ScanMix => {
                "90% scan 10 records forward from a random key, 10% insert a key between loaded keys"
            }
        }
    }

    /// The variants measured for this workload, baseline second.
    pub fn variants(self) -> &'static [Variant] {
        match self {
            Workload::ScanMix => &[Variant::Occ, Variant::NoCc, Variant::OccNoPhantom],
            _ => &[Variant::Occ, Variant::NoCc],
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// Silo OCC with full validation.
    Occ,
    /// The no-concurrency-control baseline.
    NoCc,
    /// OCC with phantom validation switched off (the `skip_phantom_validation`
    /// planted bug): not serializable; it measures what phantom protection costs.
    OccNoPhantom,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Occ => "occ",
            Variant::NoCc => "no-cc",
            Variant::OccNoPhantom => "occ-no-phantom",
        }
    }

    pub fn is_occ(self) -> bool {
        !matches!(self, Variant::NoCc)
    }
}

/// The key of loaded record `index`.
pub fn loaded_key(index: u64) -> [u8; KEY_BYTES] {
    (index << KEY_GAP_BITS).to_be_bytes()
}

/// A key strictly between loaded keys `index` and `index + 1`.
pub fn gap_key(index: u64, counter: u64) -> [u8; KEY_BYTES] {
    ((index << KEY_GAP_BITS) | (counter % GAP_SLOTS + 1)).to_be_bytes()
}

/// The first 8 bytes of a value as a little-endian counter (0 if shorter).
fn first_word(value: &[u8]) -> u64 {
    value
        .get(..8)
        .and_then(|bytes| bytes.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

fn bump_first_word(value: &mut [u8]) {
    if let Some(head) = value.get_mut(..8) {
        let next = first_word(head).wrapping_add(1);
        head.copy_from_slice(&next.to_le_bytes());
    }
}

fn copy_into(buffer: &mut Vec<u8>, value: &[u8]) {
    buffer.clear();
    buffer.extend_from_slice(value);
}

/// The relation a thread works on.
#[derive(Clone, Copy)]
pub struct Target<'a> {
    pub relation: &'a Relation,
}

impl Target<'_> {
    /// The baseline's write: `raw_put` (it latches the record's TID word for
    /// memory safety, and checks nothing).
    fn raw_put(&self, key: &[u8; KEY_BYTES], value: &[u8]) {
        self.relation.raw_put(key, value);
    }
}

/// Per-thread state: key generator, RNG and reusable buffers, so a
/// transaction allocates nothing of its own.
pub struct TxnState<'a> {
    target: Target<'a>,
    keys: KeyChooser,
    rng: SmallRng,
    read_buf: Vec<u8>,
    write_value: Vec<u8>,
    batch: [u64; TXN10_OPS],
    writes: u64,
}

impl<'a> TxnState<'a> {
    pub fn new(target: Target<'a>, keys: KeyChooser, seed: u64, value_bytes: usize) -> Self {
        TxnState {
            target,
            keys,
            rng: SmallRng::seed_from_u64(seed),
            read_buf: Vec::with_capacity(value_bytes),
            write_value: vec![0x5A; value_bytes],
            batch: [0; TXN10_OPS],
            writes: 0,
        }
    }

    fn next_key(&mut self) -> [u8; KEY_BYTES] {
        loaded_key(self.keys.next_index(&mut self.rng))
    }

    /// A fresh key between loaded keys (distribution of the loaded index).
    fn next_gap_key(&mut self) -> [u8; KEY_BYTES] {
        let index = self.keys.next_index(&mut self.rng);
        self.writes += 1;
        gap_key(index, self.writes)
    }

    fn is_insert_turn(&mut self) -> bool {
        self.rng.random_ratio(1, SCAN_MIX_INSERT_ONE_IN)
    }

    /// A new value for a blind write: the write counter in the first 8 bytes.
    fn stamp_write_value(&mut self) {
        self.writes += 1;
        if let Some(head) = self.write_value.get_mut(..8) {
            head.copy_from_slice(&self.writes.to_le_bytes());
        }
    }

    /// Fills `batch` with distinct indexes (needs at least `TXN10_OPS` items).
    fn choose_distinct_batch(&mut self) {
        for slot in 0..TXN10_OPS {
            let mut index = self.keys.next_index(&mut self.rng);
            let mut redraws = 0;
            while self.batch[..slot].contains(&index) {
                redraws += 1;
                index = if redraws < DISTINCT_REDRAWS {
                    self.keys.next_index(&mut self.rng)
                } else {
                    (index + 1) % self.keys.items()
                };
            }
            self.batch[slot] = index;
        }
    }
}

/// Runs one `workload` transaction through OCC, retrying conflicts.
pub fn occ_txn(workload: Workload, worker: &mut Worker, state: &mut TxnState<'_>) -> TxnOutcome {
    match workload {
        Workload::ReadOnly => occ_read_only(worker, state),
        Workload::Rmw => occ_rmw(worker, state),
        Workload::Txn10 => occ_txn10(worker, state),
        Workload::ScanMix if state.is_insert_turn() => occ_insert(worker, state),
        Workload::ScanMix => occ_scan(worker, state),
    }
}

/// Runs one `workload` transaction on the no-concurrency-control baseline.
pub fn raw_txn(workload: Workload, state: &mut TxnState<'_>) -> TxnOutcome {
    match workload {
        Workload::ReadOnly => raw_read_only(state),
        Workload::Rmw => raw_rmw(state),
        Workload::Txn10 => raw_txn10(state),
        Workload::ScanMix if state.is_insert_turn() => raw_insert(state),
        Workload::ScanMix => raw_scan(state),
    }
}

/// Every attempt before the last aborted. A duplicate insert counts as done.
fn outcome<T>(result: &Result<T, TxError>, attempts: u64) -> TxnOutcome {
    let aborted_before_last = attempts.saturating_sub(1);
    match result {
        Ok(_) => TxnOutcome::committed(aborted_before_last),
        Err(TxError::Constraint(ConstraintViolation::DuplicateKey { .. })) => {
            TxnOutcome::committed(aborted_before_last)
        }
        Err(TxError::RetriesExhausted { attempts, .. }) => TxnOutcome::failed(u64::from(*attempts)),
        Err(_) => TxnOutcome::failed(aborted_before_last),
    }
}

fn occ_read_only(worker: &mut Worker, state: &mut TxnState<'_>) -> TxnOutcome {
    let key = state.next_key();
    let relation = state.target.relation;
    let mut attempts = 0;
    let result = worker.run(RetryPolicy::default(), |tx| {
        attempts += 1;
        tx.get_with(relation, &key, first_word)
    });
    black_box(&result);
    outcome(&result, attempts)
}

fn occ_rmw(worker: &mut Worker, state: &mut TxnState<'_>) -> TxnOutcome {
    let key = state.next_key();
    let relation = state.target.relation;
    let buffer = &mut state.read_buf;
    let mut attempts = 0;
    let result = worker.run(RetryPolicy::default(), |tx| {
        attempts += 1;
        if tx
            .get_with(relation, &key, |v| copy_into(buffer, v))?
            .is_some()
        {
            bump_first_word(buffer);
            tx.put(relation, &key, buffer)?;
        }
        Ok(())
    });
    outcome(&result, attempts)
}

fn occ_txn10(worker: &mut Worker, state: &mut TxnState<'_>) -> TxnOutcome {
    state.choose_distinct_batch();
    state.stamp_write_value();
    let (reads, writes) = state.batch.split_at(TXN10_READS);
    let (relation, value) = (state.target.relation, &state.write_value);
    let mut attempts = 0;
    let result = worker.run(RetryPolicy::default(), |tx| {
        attempts += 1;
        let mut sum = 0u64;
        for &index in reads {
            let word = tx.get_with(relation, &loaded_key(index), first_word)?;
            sum = sum.wrapping_add(word.unwrap_or(0));
        }
        for &index in writes {
            tx.put(relation, &loaded_key(index), value)?;
        }
        Ok(sum)
    });
    black_box(&result);
    outcome(&result, attempts)
}

fn scan_bounds(start: &[u8]) -> (Bound<&[u8]>, Bound<&[u8]>) {
    (Bound::Included(start), Bound::Unbounded)
}

fn occ_scan(worker: &mut Worker, state: &mut TxnState<'_>) -> TxnOutcome {
    let start = state.next_key();
    let relation = state.target.relation;
    let mut attempts = 0;
    let result = worker.run(RetryPolicy::default(), |tx| {
        attempts += 1;
        let mut sum = 0u64;
        let bounds = scan_bounds(&start);
        tx.scan(
            relation,
            bounds,
            ScanDirection::Forward,
            SCAN_LENGTH,
            |_, v| {
                sum = sum.wrapping_add(first_word(v));
                true
            },
        )?;
        Ok(sum)
    });
    black_box(&result);
    outcome(&result, attempts)
}

fn occ_insert(worker: &mut Worker, state: &mut TxnState<'_>) -> TxnOutcome {
    let key = state.next_gap_key();
    let (relation, value) = (state.target.relation, &state.write_value);
    let mut attempts = 0;
    let result = worker.run(RetryPolicy::default(), |tx| {
        attempts += 1;
        tx.insert(relation, &key, value)
    });
    outcome(&result, attempts)
}

fn raw_read_only(state: &mut TxnState<'_>) -> TxnOutcome {
    let key = state.next_key();
    if state.target.relation.raw_get(&key, &mut state.read_buf) {
        black_box(first_word(&state.read_buf));
    }
    TxnOutcome::committed(0)
}

fn raw_rmw(state: &mut TxnState<'_>) -> TxnOutcome {
    let key = state.next_key();
    state
        .target
        .relation
        .raw_update(&key, &mut state.read_buf, |value| bump_first_word(value));
    TxnOutcome::committed(0)
}

fn raw_txn10(state: &mut TxnState<'_>) -> TxnOutcome {
    state.choose_distinct_batch();
    state.stamp_write_value();
    let (reads, writes) = state.batch.split_at(TXN10_READS);
    let mut sum = 0u64;
    for &index in reads {
        if state
            .target
            .relation
            .raw_get(&loaded_key(index), &mut state.read_buf)
        {
            sum = sum.wrapping_add(first_word(&state.read_buf));
        }
    }
    for &index in writes {
        state.target.raw_put(&loaded_key(index), &state.write_value);
    }
    black_box(sum);
    TxnOutcome::committed(0)
}

fn raw_scan(state: &mut TxnState<'_>) -> TxnOutcome {
    let start = state.next_key();
    let mut sum = 0u64;
    let bounds = scan_bounds(&start);
    state.target.relation.raw_scan(
        bounds,
        ScanDirection::Forward,
        SCAN_LENGTH,
        &mut state.read_buf,
        |_, v| {
            sum = sum.wrapping_add(first_word(v));
        },
    );
    black_box(sum);
    TxnOutcome::committed(0)
}

fn raw_insert(state: &mut TxnState<'_>) -> TxnOutcome {
    let key = state.next_gap_key();
    state.target.raw_put(&key, &state.write_value);
    TxnOutcome::committed(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zipf::KeyDistribution;
    use roost_storage::Engine;

    const RECORDS: u64 = 200;

    fn target(relation: &Relation) -> Target<'_> {
        Target { relation }
    }

    fn loaded_engine() -> (Engine, std::sync::Arc<Relation>) {
        let engine = Engine::default();
        let relation = engine.create_relation("t").expect("create");
        for index in 0..RECORDS {
            relation.raw_put(&loaded_key(index), &[0u8; 16]);
        }
        (engine, relation)
    }

    #[test]
    fn gap_keys_fall_strictly_between_loaded_keys() {
        for counter in [0u64, 1, 254, 255, 1000] {
            let key = gap_key(7, counter);
            assert!(
                key > loaded_key(7) && key < loaded_key(8),
                "counter {counter}"
            );
        }
    }

    #[test]
    fn txn10_keys_are_distinct_even_under_heavy_skew() {
        let (_engine, relation) = loaded_engine();
        let keys = KeyChooser::new(KeyDistribution::Zipfian { theta: 0.99 }, 10).expect("keys");
        let mut state = TxnState::new(target(&relation), keys, 1, 16);
        for _ in 0..1000 {
            state.choose_distinct_batch();
            let mut sorted = state.batch;
            sorted.sort_unstable();
            assert!(sorted.windows(2).all(|w| w[0] != w[1]), "{sorted:?}");
            assert!(sorted.iter().all(|&i| i < 10));
        }
    }

    #[test]
    fn every_workload_runs_on_both_paths() {
        let (engine, relation) = loaded_engine();
        let keys = KeyChooser::new(KeyDistribution::Uniform, RECORDS).expect("keys");
        let mut state = TxnState::new(target(&relation), keys, 9, 16);
        let mut worker = engine.worker();
        for workload in Workload::ALL {
            for _ in 0..200 {
                assert!(occ_txn(workload, &mut worker, &mut state).committed);
                assert!(raw_txn(workload, &mut state).committed);
            }
        }
        assert!(
            relation.index_len() > RECORDS as usize,
            "scan-mix inserted keys"
        );
    }

    #[test]
    fn rmw_increments_the_counter_on_both_paths() {
        let (engine, relation) = loaded_engine();
        let keys = KeyChooser::new(KeyDistribution::Uniform, 1).expect("keys");
        let mut state = TxnState::new(target(&relation), keys, 9, 16);
        let mut worker = engine.worker();
        for _ in 0..5 {
            occ_txn(Workload::Rmw, &mut worker, &mut state);
            raw_txn(Workload::Rmw, &mut state);
        }
        let mut value = Vec::new();
        assert!(relation.raw_get(&loaded_key(0), &mut value));
        assert_eq!(first_word(&value), 10);
    }

    #[test]
    fn concurrent_baseline_writers_of_one_key_are_safe() {
        let (_engine, relation) = loaded_engine();
        // Few hot keys and 100-byte values: concurrent baseline writers of one
        // record must stay memory-safe (they once double-freed overflow buffers).
        let keys = KeyChooser::new(KeyDistribution::Uniform, 12).expect("keys");
        for workload in [Workload::Rmw, Workload::Txn10, Workload::ScanMix] {
            std::thread::scope(|scope| {
                for seed in 0..2 {
                    let (relation, keys) = (&relation, keys.clone());
                    scope.spawn(move || {
                        let mut state = TxnState::new(target(relation), keys, seed, 100);
                        for _ in 0..20_000 {
                            raw_txn(workload, &mut state);
                        }
                    });
                }
            });
        }
        let mut value = Vec::new();
        assert!(relation.raw_get(&loaded_key(0), &mut value));
    }

    #[test]
    fn duplicate_insert_counts_as_done() {
        let duplicate: Result<(), TxError> =
            Err(TxError::Constraint(ConstraintViolation::DuplicateKey {
                relation: "t".into(),
            }));
        assert_eq!(outcome(&duplicate, 3), TxnOutcome::committed(2));
        let exhausted: Result<(), TxError> = Err(TxError::RetriesExhausted {
            attempts: 9,
            last: roost_storage::ConflictKind::Phantom.into(),
        });
        assert_eq!(outcome(&exhausted, 9), TxnOutcome::failed(9));
    }
}

//! Runs a workload against the single-node storage engine (`roost-storage`)
//! with concurrent client threads, recording the history.
//!
//! Storage layout, one relation `check`: key = the workload's key (or
//! account) as 8 big-endian bytes; a list is its elements as concatenated
//! little-endian u64s, a register a little-endian u64, a balance or counter a
//! little-endian i64; a scan-workload row's value a little-endian u64.
//! Every transaction runs through `Worker::run`; an error (an overdraft, a
//! bound, retries exhausted) aborts it, so it is recorded `Fail`: in an
//! embedded engine no outcome is ever unknown.
//!
//! The scan workload ([`crate::workload::scan`]) runs its own loop here: its
//! generator hears every outcome, and its setup (the initial rows) is a
//! recorded op, so every row a scan returns has a writer in the history.

use crate::budget::RunBudget;
use std::ops::Bound;
use std::sync::{Barrier, Mutex};
use std::time::Instant;

use roost_storage::{
    Engine, EngineConfig, PlantedBugs, Relation, RetryPolicy, ScanDirection, Transaction, TxError,
};

use crate::history::{History, KeyBound, MicroOp, Outcome, Recorder, WorkloadKind};
use crate::workload::scan::{ScanGenerator, ScanStore, ScanTxn};
use crate::workload::{strip_reads, Generator, WorkloadConfig};

/// A run against the engine.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub workload: WorkloadConfig,
    pub clients: usize,
    pub duration_ms: u64,
    pub seed: u64,
    /// Stop early after this many ops (bounds memory on long runs).
    pub max_ops: u64,
    pub planted_bugs: PlantedBugs,
}

impl RunConfig {
    pub fn new(kind: WorkloadKind) -> Self {
        RunConfig {
            workload: WorkloadConfig::new(kind),
            clients: 4,
            duration_ms: 1000,
            seed: 1,
            max_ops: 5_000_000,
            planted_bugs: PlantedBugs::default(),
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        self.workload.validate()?;
        if self.clients == 0 || self.clients > 256 {
            return Err(format!("clients must be in 1..=256, got {}", self.clients));
        }
        if self.duration_ms == 0 || self.duration_ms > 24 * 3600 * 1000 {
            return Err("duration must be positive and at most a day".into());
        }
        Ok(())
    }
}

/// Why a run could not produce a history.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("invalid run configuration: {0}")]
    Config(String),
    #[error("setting up the engine: {0}")]
    Setup(String),
    #[error("the final read failed: {0}")]
    FinalRead(TxError),
}

const RELATION: &str = "check";

/// Bounded retries: a transaction that keeps conflicting is recorded `Fail`.
fn retry_policy() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 200,
        initial_backoff_us: 1,
        max_backoff_us: 500,
    }
}

/// Runs `config.clients` threads for `config.duration_ms`, then one final
/// read of every key, and returns the history.
pub fn run_engine(config: &RunConfig) -> Result<History, RunError> {
    config.validate().map_err(RunError::Config)?;
    let engine = Engine::new(EngineConfig {
        planted_bugs: config.planted_bugs,
        ..EngineConfig::default()
    });
    let relation = engine
        .create_relation(RELATION)
        .map_err(|e| RunError::Setup(e.to_string()))?;
    if config.workload.kind == WorkloadKind::Scan {
        return run_engine_scan(config, &engine, &relation);
    }
    setup(&engine, &relation, &config.workload).map_err(|e| RunError::Setup(e.to_string()))?;
    let recorder = Recorder::new();
    let generator = Mutex::new(Generator::new(config.workload.clone(), config.seed));
    let barrier = Barrier::new(config.clients);
    let budget = RunBudget::new(config.duration_ms, config.max_ops);
    std::thread::scope(|s| {
        for process in 0..config.clients as u64 {
            let (engine, relation, recorder, generator, barrier, budget) =
                (&engine, &relation, &recorder, &generator, &barrier, &budget);
            s.spawn(move || {
                let mut worker = engine.worker();
                barrier.wait();
                let start = Instant::now();
                while budget.next_op(start) {
                    let txn = lock(generator).next_txn();
                    run_one(
                        &mut worker,
                        relation,
                        &config.workload,
                        recorder,
                        process,
                        txn,
                    );
                }
            });
        }
    });
    // The final read: every key the run may have touched, after all clients
    // stopped, so an acknowledged write missing from it is lost.
    let final_ops = lock(&generator).final_read();
    let mut worker = engine.worker();
    let invocation = recorder.invoke(config.clients as u64);
    let done = worker
        .run(retry_policy(), |tx| {
            execute(tx, &relation, &config.workload, &final_ops)
        })
        .map_err(RunError::FinalRead)?;
    recorder.complete(invocation, Outcome::Ok, done);
    Ok(recorder.into_history(config.workload.meta()))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One recorded transaction.
fn run_one(
    worker: &mut roost_storage::Worker,
    relation: &Relation,
    workload: &WorkloadConfig,
    recorder: &Recorder,
    process: u64,
    txn: Vec<MicroOp>,
) {
    let invocation = recorder.invoke(process);
    match worker.run(retry_policy(), |tx| execute(tx, relation, workload, &txn)) {
        Ok(done) => recorder.complete(invocation, Outcome::Ok, done),
        // Aborted: no effects, so the op definitely did not happen.
        Err(_) => recorder.complete(invocation, Outcome::Fail, strip_reads(txn)),
    }
}

/// Initial state: bank balances (counters, lists and registers start absent).
fn setup(engine: &Engine, relation: &Relation, workload: &WorkloadConfig) -> Result<(), TxError> {
    if workload.kind != WorkloadKind::Bank {
        return Ok(());
    }
    let mut worker = engine.worker();
    worker.run(retry_policy(), |tx| {
        (0..workload.accounts)
            .try_for_each(|a| tx.put(relation, &key(a), &workload.initial_balance.to_le_bytes()))
    })
}

fn key(k: u64) -> [u8; 8] {
    k.to_be_bytes()
}

/// Runs the micro-ops in `tx`, returning them with reads filled in. Called
/// again from scratch on every retry, so results never leak across attempts.
fn execute<'r>(
    tx: &mut Transaction<'_, 'r>,
    relation: &'r Relation,
    workload: &WorkloadConfig,
    ops: &[MicroOp],
) -> Result<Vec<MicroOp>, TxError> {
    ops.iter()
        .map(|op| execute_one(tx, relation, workload, op))
        .collect()
}

fn execute_one<'r>(
    tx: &mut Transaction<'_, 'r>,
    rel: &'r Relation,
    workload: &WorkloadConfig,
    op: &MicroOp,
) -> Result<MicroOp, TxError> {
    Ok(match *op {
        MicroOp::Append { key: k, value } => {
            let mut list = read_list(tx, rel, k)?;
            list.push(value);
            let bytes: Vec<u8> = list.iter().flat_map(|v| v.to_le_bytes()).collect();
            tx.put(rel, &key(k), &bytes)?;
            op.clone()
        }
        MicroOp::Read { key: k, .. } => MicroOp::Read {
            key: k,
            value: Some(read_list(tx, rel, k)?),
        },
        MicroOp::Write { key: k, value } => {
            tx.put(rel, &key(k), &value.to_le_bytes())?;
            op.clone()
        }
        MicroOp::ReadReg { key: k, .. } => MicroOp::ReadReg {
            key: k,
            value: read_word(tx, rel, k)?.map(u64::from_le_bytes),
        },
        MicroOp::Transfer { from, to, amount } => {
            let a = read_i64(tx, rel, from)?;
            let b = read_i64(tx, rel, to)?;
            if a < amount {
                return Err(TxError::user_abort("insufficient funds"));
            }
            tx.put(rel, &key(from), &(a - amount).to_le_bytes())?;
            tx.put(rel, &key(to), &(b + amount).to_le_bytes())?;
            op.clone()
        }
        MicroOp::ReadBank { .. } => MicroOp::ReadBank {
            balances: Some(
                (0..workload.accounts)
                    .map(|a| read_i64(tx, rel, a))
                    .collect::<Result<_, _>>()?,
            ),
        },
        MicroOp::Increment { key: k, amount } => {
            let v = read_i64(tx, rel, k)? + amount;
            if workload.counter_bound.is_some_and(|bound| v > bound) {
                return Err(TxError::user_abort("counter bound"));
            }
            tx.put(rel, &key(k), &v.to_le_bytes())?;
            op.clone()
        }
        MicroOp::ReadCounter { key: k, .. } => MicroOp::ReadCounter {
            key: k,
            value: Some(read_i64(tx, rel, k)?),
        },
        // The scan workload's transactions are `ScanTxn`s (run_engine_scan).
        MicroOp::Scan { .. } | MicroOp::Insert { .. } | MicroOp::Delete { .. } => {
            return Err(TxError::user_abort(
                "scan micro-ops run through the scan workload's own loop",
            ))
        }
    })
}

fn read_list<'r>(
    tx: &mut Transaction<'_, 'r>,
    rel: &'r Relation,
    k: u64,
) -> Result<Vec<u64>, TxError> {
    let decoded = tx.get_with(rel, &key(k), |bytes| {
        if bytes.len() % 8 != 0 {
            return Err(TxError::Codec(format!("list of {} bytes", bytes.len())));
        }
        Ok(bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("chunks of 8")))
            .collect())
    })?;
    decoded.unwrap_or(Ok(Vec::new()))
}

fn read_word<'r>(
    tx: &mut Transaction<'_, 'r>,
    rel: &'r Relation,
    k: u64,
) -> Result<Option<[u8; 8]>, TxError> {
    match tx.get_with(rel, &key(k), |bytes| <[u8; 8]>::try_from(bytes))? {
        None => Ok(None),
        Some(Ok(word)) => Ok(Some(word)),
        Some(Err(_)) => Err(TxError::Codec(format!("key {k}: not an 8-byte value"))),
    }
}

fn read_i64<'r>(tx: &mut Transaction<'_, 'r>, rel: &'r Relation, k: u64) -> Result<i64, TxError> {
    Ok(read_word(tx, rel, k)?.map_or(0, i64::from_le_bytes))
}

/// The scan workload against the engine: the setup op, `clients` threads
/// until the deadline (or `max_ops`), then the final read.
fn run_engine_scan(
    config: &RunConfig,
    engine: &Engine,
    relation: &Relation,
) -> Result<History, RunError> {
    let generator = Mutex::new(ScanGenerator::new(
        config.workload.scan.clone(),
        config.seed,
    ));
    let recorder = Recorder::new();
    let serial_process = config.clients as u64;
    let mut worker = engine.worker();
    for txn in lock(&generator).setup() {
        let invocation = recorder.invoke(serial_process);
        let done = worker
            .run(retry_policy(), |tx| {
                txn.execute(&mut EngineScan { tx, relation })
            })
            .map_err(|e| RunError::Setup(e.to_string()))?;
        recorder.complete(invocation, Outcome::Ok, done);
    }
    let barrier = Barrier::new(config.clients);
    let budget = RunBudget::new(config.duration_ms, config.max_ops);
    std::thread::scope(|s| {
        for process in 0..config.clients as u64 {
            let (recorder, generator, barrier, budget) = (&recorder, &generator, &barrier, &budget);
            s.spawn(move || {
                let mut worker = engine.worker();
                barrier.wait();
                let start = Instant::now();
                while budget.next_op(start) {
                    let txn = lock(generator).next_txn();
                    let outcome = run_scan_txn(&mut worker, relation, recorder, process, &txn);
                    lock(generator).finished(&txn, outcome);
                }
            });
        }
    });
    for txn in lock(&generator).final_reads() {
        let invocation = recorder.invoke(serial_process);
        let done = worker
            .run(retry_policy(), |tx| {
                txn.execute(&mut EngineScan { tx, relation })
            })
            .map_err(RunError::FinalRead)?;
        recorder.complete(invocation, Outcome::Ok, done);
    }
    Ok(recorder.into_history(config.workload.meta()))
}

/// One recorded scan-workload transaction; returns its outcome.
fn run_scan_txn(
    worker: &mut roost_storage::Worker,
    relation: &Relation,
    recorder: &Recorder,
    process: u64,
    txn: &ScanTxn,
) -> Outcome {
    let invocation = recorder.invoke(process);
    match worker.run(retry_policy(), |tx| {
        txn.execute(&mut EngineScan { tx, relation })
    }) {
        Ok(done) => {
            recorder.complete(invocation, Outcome::Ok, done);
            Outcome::Ok
        }
        Err(_) => {
            recorder.complete(invocation, Outcome::Fail, txn.planned());
            Outcome::Fail
        }
    }
}

/// A scan-workload transaction's view of the engine: keys as 8 big-endian
/// bytes (so key order is byte order), values as 8 little-endian bytes.
struct EngineScan<'t, 'w, 'r> {
    tx: &'t mut Transaction<'w, 'r>,
    relation: &'r Relation,
}

fn engine_bound(bound: &KeyBound, bytes: &[u8; 8]) -> Bound<[u8; 8]> {
    match *bound {
        KeyBound::Included(_) => Bound::Included(*bytes),
        KeyBound::Excluded(_) => Bound::Excluded(*bytes),
        KeyBound::Unbounded => Bound::Unbounded,
    }
}

fn bound_key(bound: &KeyBound) -> [u8; 8] {
    match *bound {
        KeyBound::Included(k) | KeyBound::Excluded(k) => k.to_be_bytes(),
        KeyBound::Unbounded => [0; 8],
    }
}

fn decode_row(key: &[u8], value: &[u8]) -> Result<(u64, u64), TxError> {
    match (<[u8; 8]>::try_from(key), <[u8; 8]>::try_from(value)) {
        (Ok(k), Ok(v)) => Ok((u64::from_be_bytes(k), u64::from_le_bytes(v))),
        _ => Err(TxError::Codec(format!(
            "a scan row of {} key bytes and {} value bytes (8 and 8 expected)",
            key.len(),
            value.len()
        ))),
    }
}

impl ScanStore for EngineScan<'_, '_, '_> {
    type Error = TxError;

    fn scan(
        &mut self,
        lower: KeyBound,
        upper: KeyBound,
        reverse: bool,
        limit: Option<u64>,
    ) -> Result<Vec<(u64, u64)>, TxError> {
        let (lo, hi) = (bound_key(&lower), bound_key(&upper));
        let (lo, hi) = (engine_bound(&lower, &lo), engine_bound(&upper, &hi));
        let bounds = (
            lo.as_ref().map(|b| b.as_slice()),
            hi.as_ref().map(|b| b.as_slice()),
        );
        let direction = if reverse {
            ScanDirection::Reverse
        } else {
            ScanDirection::Forward
        };
        let limit = limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
        let mut rows = Vec::new();
        let mut failure = None;
        self.tx
            .scan(self.relation, bounds, direction, limit, |k, v| {
                match decode_row(k, v) {
                    Ok(row) => rows.push(row),
                    Err(e) => failure = Some(e),
                }
                failure.is_none()
            })?;
        match failure {
            Some(e) => Err(e),
            None => Ok(rows),
        }
    }

    fn get(&mut self, k: u64) -> Result<Option<u64>, TxError> {
        Ok(read_word(self.tx, self.relation, k)?.map(u64::from_le_bytes))
    }

    fn insert(&mut self, k: u64, value: u64) -> Result<(), TxError> {
        self.tx.insert(self.relation, &key(k), &value.to_le_bytes())
    }

    fn delete(&mut self, k: u64) -> Result<(), TxError> {
        if self.tx.delete(self.relation, &key(k))? {
            Ok(())
        } else {
            Err(self.missing_row(k))
        }
    }

    fn missing_row(&self, k: u64) -> TxError {
        TxError::user_abort(format!("key {k} holds no row to move"))
    }
}

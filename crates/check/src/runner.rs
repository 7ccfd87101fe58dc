//! Runs a workload against the single-node storage engine (`roost-storage`)
//! with concurrent client threads, recording the history.
//!
//! Storage layout, one relation `check`: key = the workload's key (or
//! account) as 8 big-endian bytes; a list is its elements as concatenated
//! little-endian u64s, a register a little-endian u64, a balance or counter a
//! little-endian i64. Every transaction runs through `Worker::run`; an error
//! (an overdraft, a bound, retries exhausted) aborts it, so it is recorded
//! `Fail`: in an embedded engine no outcome is ever unknown.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use roost_storage::{
    Engine, EngineConfig, PlantedBugs, Relation, RetryPolicy, Transaction, TxError,
};

use crate::history::{History, MicroOp, Outcome, Recorder, WorkloadKind};
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
    setup(&engine, &relation, &config.workload).map_err(|e| RunError::Setup(e.to_string()))?;
    let recorder = Recorder::new();
    let generator = Mutex::new(Generator::new(config.workload.clone(), config.seed));
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(config.clients);
    let ops_started = std::sync::atomic::AtomicU64::new(0);
    let deadline = Duration::from_millis(config.duration_ms);
    std::thread::scope(|s| {
        for process in 0..config.clients as u64 {
            let (engine, relation, recorder, generator, stop, barrier, ops_started) = (
                &engine,
                &relation,
                &recorder,
                &generator,
                &stop,
                &barrier,
                &ops_started,
            );
            s.spawn(move || {
                let mut worker = engine.worker();
                barrier.wait();
                let start = Instant::now();
                while !stop.load(Ordering::Relaxed) && start.elapsed() < deadline {
                    if ops_started.fetch_add(1, Ordering::Relaxed) >= config.max_ops {
                        stop.store(true, Ordering::Relaxed);
                        break;
                    }
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

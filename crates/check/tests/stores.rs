//! In-memory stores run by concurrent threads through the `Recorder`: a
//! correct one (one global mutex around each whole transaction) whose
//! histories must pass, and deliberately broken ones whose histories the
//! checker must flag:
//! - non-atomic: each micro-op (and each half of a transfer) takes the lock
//!   on its own, with a yield in between, so transactions interleave;
//! - stale: transactions are atomic, but reads are served from a snapshot
//!   refreshed only every few transactions.
//!
//! Broken stores run in rounds until the checker flags them, bounded by
//! `BROKEN_BUDGET`; a store that is never flagged fails the test.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use roost_check::workload::{Generator, Model, WorkloadConfig};
use roost_check::{check, AnomalyKind, History, MicroOp, Outcome, Recorder, Report, WorkloadKind};

const THREADS: u64 = 4;
const BROKEN_BUDGET: Duration = Duration::from_secs(15);

fn round_duration() -> Duration {
    let seconds: f64 = std::env::var("ROOST_CHECK_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.3);
    Duration::from_secs_f64(seconds)
}

trait Store: Sync {
    /// Runs one transaction; returns its outcome and micro-ops with reads.
    fn exec(&self, ops: &[MicroOp]) -> (Outcome, Vec<MicroOp>);
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

struct Correct(Mutex<Model>);

impl Store for Correct {
    fn exec(&self, ops: &[MicroOp]) -> (Outcome, Vec<MicroOp>) {
        lock(&self.0).apply(ops)
    }
}

struct NonAtomic(Mutex<Model>);

impl Store for NonAtomic {
    fn exec(&self, ops: &[MicroOp]) -> (Outcome, Vec<MicroOp>) {
        let mut done = Vec::with_capacity(ops.len());
        for op in ops {
            match *op {
                MicroOp::Transfer { from, to, amount } => {
                    {
                        let mut m = lock(&self.0);
                        if m.balances[from as usize] < amount {
                            return (Outcome::Fail, ops.to_vec());
                        }
                        m.balances[from as usize] -= amount;
                    }
                    std::thread::yield_now();
                    lock(&self.0).balances[to as usize] += amount;
                    done.push(op.clone());
                }
                MicroOp::Increment { key, amount } => {
                    // Check the bound, then add: another increment can slip
                    // in between.
                    let (current, bound) = {
                        let m = lock(&self.0);
                        (m.counters.get(&key).copied().unwrap_or(0), m.counter_bound)
                    };
                    if bound.is_some_and(|b| current + amount > b) {
                        return (Outcome::Fail, ops.to_vec());
                    }
                    std::thread::yield_now();
                    *lock(&self.0).counters.entry(key).or_insert(0) += amount;
                    done.push(op.clone());
                }
                _ => done.push(lock(&self.0).apply_one(op)),
            }
            std::thread::yield_now();
        }
        (Outcome::Ok, done)
    }
}

struct Stale {
    current: Mutex<Model>,
    /// (snapshot, transactions since it was taken)
    snapshot: Mutex<(Model, u64)>,
}

const STALE_REFRESH_TXNS: u64 = 8;

impl Store for Stale {
    fn exec(&self, ops: &[MicroOp]) -> (Outcome, Vec<MicroOp>) {
        let mut current = lock(&self.current);
        let mut snapshot = lock(&self.snapshot);
        snapshot.1 += 1;
        if snapshot.1 >= STALE_REFRESH_TXNS {
            *snapshot = (current.clone(), 0);
        }
        let done = ops
            .iter()
            .map(|op| {
                if op.is_read() {
                    snapshot.0.apply_one(op)
                } else {
                    current.apply_one(op)
                }
            })
            .collect();
        (Outcome::Ok, done)
    }
}

/// `THREADS` clients drawing from one generator for `duration`, then a final
/// read through the same store.
fn run_store(store: &dyn Store, config: &WorkloadConfig, seed: u64, duration: Duration) -> History {
    let recorder = Recorder::new();
    let generator = Mutex::new(Generator::new(config.clone(), seed));
    let barrier = Barrier::new(THREADS as usize);
    let ops = AtomicU64::new(0);
    std::thread::scope(|s| {
        for process in 0..THREADS {
            let (recorder, generator, barrier, ops) = (&recorder, &generator, &barrier, &ops);
            s.spawn(move || {
                barrier.wait();
                let start = Instant::now();
                // Bounded by time and by a generous op count.
                while start.elapsed() < duration && ops.fetch_add(1, Ordering::Relaxed) < 2_000_000
                {
                    let txn = lock(generator).next_txn();
                    let invocation = recorder.invoke(process);
                    let (outcome, done) = store.exec(&txn);
                    recorder.complete(invocation, outcome, done);
                }
            });
        }
    });
    let final_read = lock(&generator).final_read();
    let invocation = recorder.invoke(THREADS);
    let (outcome, done) = store.exec(&final_read);
    recorder.complete(invocation, outcome, done);
    recorder.into_history(config.meta())
}

fn checked(history: &History) -> Report {
    let report = check(history).expect("recorded histories are checkable");
    assert!(report.ops_ok > 10, "too few ops: {}", report.summary());
    report
}

fn config(kind: WorkloadKind) -> WorkloadConfig {
    let mut config = WorkloadConfig::new(kind);
    if kind == WorkloadKind::Counter {
        config.counter_bound = Some(400);
    }
    config
}

#[test]
fn a_correct_store_passes_every_workload() {
    for kind in WorkloadKind::ALL {
        let config = config(kind);
        let store = Correct(Mutex::new(Model::new(&config)));
        let report = checked(&run_store(&store, &config, 3, round_duration()));
        assert!(report.valid(), "{kind:?}: {report}");
        println!("correct store, {}", report.summary());
    }
}

/// Runs rounds of `make_store` until the checker reports one of `expected`.
fn flag(
    kind: WorkloadKind,
    make_store: impl Fn(&WorkloadConfig) -> Box<dyn Store>,
    expected: &[AnomalyKind],
) {
    let config = config(kind);
    let started = Instant::now();
    let mut seed = 0;
    while started.elapsed() < BROKEN_BUDGET {
        seed += 1;
        let store = make_store(&config);
        let report = checked(&run_store(store.as_ref(), &config, seed, round_duration()));
        if !report.valid() {
            println!("{kind:?} flagged in round {seed}: {report}");
            assert!(
                expected.iter().any(|k| report.count(*k) > 0),
                "{kind:?}: expected one of {expected:?}, got {report}"
            );
            return;
        }
    }
    panic!("{kind:?}: the broken store was never flagged in {BROKEN_BUDGET:?}");
}

fn non_atomic(config: &WorkloadConfig) -> Box<dyn Store> {
    Box::new(NonAtomic(Mutex::new(Model::new(config))))
}

fn stale(config: &WorkloadConfig) -> Box<dyn Store> {
    let model = Model::new(config);
    Box::new(Stale {
        current: Mutex::new(model.clone()),
        snapshot: Mutex::new((model, 0)),
    })
}

use AnomalyKind::*;

const CYCLES: &[AnomalyKind] = &[
    G0,
    G1c,
    GSingle,
    G2,
    G0Realtime,
    G1cRealtime,
    GSingleRealtime,
    G2Realtime,
    G1b,
    Internal,
];

#[test]
fn non_atomic_list_append_is_flagged() {
    flag(WorkloadKind::ListAppend, non_atomic, CYCLES);
}

#[test]
fn non_atomic_rw_register_is_flagged() {
    flag(WorkloadKind::RwRegister, non_atomic, CYCLES);
}

#[test]
fn non_atomic_bank_is_flagged() {
    flag(WorkloadKind::Bank, non_atomic, &[BankTotal]);
}

#[test]
fn non_atomic_bounded_counter_is_flagged() {
    flag(WorkloadKind::Counter, non_atomic, &[CounterBeyondBound]);
}

#[test]
fn stale_list_append_is_flagged() {
    flag(
        WorkloadKind::ListAppend,
        stale,
        &[
            GSingleRealtime,
            G2Realtime,
            GSingle,
            G2,
            LostWrite,
            Internal,
        ],
    );
}

#[test]
fn stale_rw_register_is_flagged() {
    flag(
        WorkloadKind::RwRegister,
        stale,
        &[GSingleRealtime, G2Realtime, GSingle, G2, Internal],
    );
}

//! The scan workload against the reactor layer (`roost-reactor`):
//! `roost check scan --reactors`.
//!
//! One reactor type `scan_shard` with one ordered relation `rows` (key and
//! value `u64`); the key space is cut into one shard per reactor (every
//! transaction stays in its shard), the reactors spread over two
//! containers `a` and `b` with two executors each (round-robin: one
//! reactor's transactions run on both at once, so its scans race its
//! writers). Scans go through
//! `ReactorCtx::scan`, moves of rows through `get`, `delete` and `insert`,
//! each transaction a root transaction on its shard's reactor. Meanwhile a
//! mover thread moves random reactors between the containers with
//! `Database::move_reactor`, which extracts a reactor's rows with a scan and
//! installs them in the other container, so the checker also sees whether a
//! move ever loses, duplicates or exposes a half-moved reactor's rows.
//!
//! Planted bugs reach the reactors' storage engine through
//! `Database::with_engine_config`.

use crate::budget::RunBudget;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use roost_reactor::{
    Database, Deployment, DeploymentError, DirectoryError, ReactorCtx, ReactorError, ReactorId,
    RelationDef, ScanDirection, Schema, SchemaError, TxError,
};

use crate::history::{History, KeyBound, MicroOp, Outcome, Recorder};
use crate::workload::scan::{ScanConfigError, ScanGenerator, ScanParams, ScanStore, ScanTxn};

const REACTOR_TYPE: &str = "scan_shard";
static ROWS: RelationDef<u64, u64> = RelationDef::new(REACTOR_TYPE, "rows");
const CONTAINERS: [&str; 2] = ["a", "b"];

/// A run against the reactor layer.
#[derive(Clone, Debug)]
pub struct ReactorRunConfig {
    /// The workload; its `shard_keys` makes one reactor per shard.
    pub scan: ScanParams,
    pub clients: usize,
    pub duration_ms: u64,
    pub seed: u64,
    /// Stop early after this many ops (bounds memory on long runs).
    pub max_ops: u64,
    /// Pause between two reactor moves; `None`: no moves.
    pub move_interval_ms: Option<u64>,
    /// Bugs planted in the reactors' storage engine (checker self-tests).
    pub planted_bugs: roost_reactor::PlantedBugs,
}

/// Reactors (shards) of the default reactor run.
pub const DEFAULT_REACTORS: u64 = 4;

impl Default for ReactorRunConfig {
    fn default() -> Self {
        let mut scan = ScanParams::default();
        scan.shard_keys = scan.layout.key_space / DEFAULT_REACTORS;
        ReactorRunConfig {
            scan,
            clients: 4,
            duration_ms: 1000,
            seed: 1,
            max_ops: 2_000_000,
            move_interval_ms: Some(2),
            planted_bugs: roost_reactor::PlantedBugs::default(),
        }
    }
}

/// Why a reactor run could not produce a history.
#[derive(Debug, thiserror::Error)]
pub enum ReactorRunError {
    #[error("invalid scan parameters: {0}")]
    Scan(#[from] ScanConfigError),
    #[error("clients must be in 1..=256, got {0}")]
    Clients(usize),
    #[error("the duration must be positive and at most a day, got {0} ms")]
    Duration(u64),
    #[error("the key space must have 1..=64 shards (reactors), got {0}")]
    Shards(u64),
    #[error("building the schema: {0}")]
    Schema(#[from] SchemaError),
    #[error("building the database: {0}")]
    Deployment(#[from] DeploymentError),
    #[error("creating the shard reactors: {0}")]
    Directory(#[from] DirectoryError),
    #[error("inserting the initial rows: {0}")]
    Setup(ReactorError),
    #[error("the final read failed: {0}")]
    FinalRead(ReactorError),
    #[error("moving reactor {reactor} to container {to}: {source}")]
    Move {
        reactor: u64,
        to: &'static str,
        source: ReactorError,
    },
}

/// A reactor run's history and what the mover did.
#[derive(Debug)]
pub struct ReactorRun {
    pub history: History,
    /// Reactor moves that committed.
    pub moves: u64,
    /// Moves given up after their retries were exhausted (starved by the
    /// clients; not an error: the reactor stays where it was).
    pub moves_starved: u64,
}

impl ReactorRunConfig {
    fn validate(&self) -> Result<(), ReactorRunError> {
        self.scan.validate()?;
        if self.clients == 0 || self.clients > 256 {
            return Err(ReactorRunError::Clients(self.clients));
        }
        if self.duration_ms == 0 || self.duration_ms > 24 * 3600 * 1000 {
            return Err(ReactorRunError::Duration(self.duration_ms));
        }
        let shards = self.scan.shards();
        if !(1..=64).contains(&shards) {
            return Err(ReactorRunError::Shards(shards));
        }
        Ok(())
    }
}

/// Two containers, the shards alternating between them. Short spins: the
/// client threads share the machine's cores with the executors.
fn deployment(shards: u64) -> Result<Deployment, DeploymentError> {
    let mut toml = String::from(
        "spin_before_park_us = 10\nspin_while_active_us = 50\n\
         [[containers]]\nname = \"a\"\nexecutors = 2\n\
         [[containers]]\nname = \"b\"\nexecutors = 2\n\
         [placement]\ndefault = \"a\"\n[placement.by_name]\n",
    );
    for shard in 0..shards {
        let container = CONTAINERS[(shard % 2) as usize];
        toml.push_str(&format!("\"shard-{shard}\" = \"{container}\"\n"));
    }
    Deployment::from_toml(&toml)
}

/// Runs the scan workload's clients against a reactor database while
/// reactors move, then one final read per shard.
pub fn run_reactors(config: &ReactorRunConfig) -> Result<ReactorRun, ReactorRunError> {
    config.validate()?;
    let shards = config.scan.shards();
    let schema = Schema::new().reactor_type(REACTOR_TYPE, &[&ROWS])?;
    let engine = roost_reactor::EngineConfig {
        planted_bugs: config.planted_bugs,
        ..roost_reactor::EngineConfig::default()
    };
    let db = Database::with_engine_config(schema, deployment(shards)?, engine)?;
    let reactors: Vec<ReactorId> = (0..shards)
        .map(|s| db.create_reactor(REACTOR_TYPE, &format!("shard-{s}")))
        .collect::<Result<_, _>>()?;
    let generator = Mutex::new(ScanGenerator::new(config.scan.clone(), config.seed));
    let recorder = Recorder::new();
    let serial_process = config.clients as u64;
    for txn in lock(&generator).setup() {
        let invocation = recorder.invoke(serial_process);
        let done = run_txn(&db, &reactors, txn).map_err(ReactorRunError::Setup)?;
        recorder.complete(invocation, Outcome::Ok, done);
    }
    let barrier = Barrier::new(config.clients + 1);
    let budget = RunBudget::new(config.duration_ms, config.max_ops);
    let (moves, moves_starved) = (AtomicU64::new(0), AtomicU64::new(0));
    let moved = std::thread::scope(|s| {
        for process in 0..config.clients as u64 {
            let (db, reactors, recorder, generator, barrier, budget) =
                (&db, &reactors, &recorder, &generator, &barrier, &budget);
            s.spawn(move || {
                barrier.wait();
                let start = Instant::now();
                while budget.next_op(start) {
                    let txn = lock(generator).next_txn();
                    let invocation = recorder.invoke(process);
                    let planned = txn.planned();
                    let outcome = match run_txn(db, reactors, txn.clone()) {
                        Ok(done) => {
                            recorder.complete(invocation, Outcome::Ok, done);
                            Outcome::Ok
                        }
                        // Aborted (conflicts past the retries, a missing
                        // row): no effects.
                        Err(_) => {
                            recorder.complete(invocation, Outcome::Fail, planned);
                            Outcome::Fail
                        }
                    };
                    lock(generator).finished(&txn, outcome);
                }
            });
        }
        let (db, reactors, budget, barrier, moves, moves_starved) =
            (&db, &reactors, &budget, &barrier, &moves, &moves_starved);
        let mover = s.spawn(move || {
            barrier.wait();
            let start = Instant::now();
            let Some(interval_ms) = config.move_interval_ms else {
                return Ok(());
            };
            let mut rng = SmallRng::seed_from_u64(config.seed ^ 0x3e5e);
            while budget.running(start) {
                let shard = rng.random_range(0..reactors.len());
                let reactor = reactors[shard];
                let here = db
                    .container_of(reactor)
                    .map_err(|source| ReactorRunError::Move {
                        reactor: shard as u64,
                        to: "?",
                        source,
                    })?;
                let to = if here == CONTAINERS[0] {
                    CONTAINERS[1]
                } else {
                    CONTAINERS[0]
                };
                match db.move_reactor(reactor, to) {
                    Ok(()) => {
                        moves.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(ReactorError::Tx(TxError::RetriesExhausted { .. })) => {
                        moves_starved.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(source) => {
                        return Err(ReactorRunError::Move {
                            reactor: shard as u64,
                            to,
                            source,
                        })
                    }
                }
                std::thread::sleep(Duration::from_millis(interval_ms));
            }
            Ok(())
        });
        mover.join().expect("the mover thread does not panic")
    });
    moved?;
    for txn in lock(&generator).final_reads() {
        let invocation = recorder.invoke(serial_process);
        let done = run_txn(&db, &reactors, txn).map_err(ReactorRunError::FinalRead)?;
        recorder.complete(invocation, Outcome::Ok, done);
    }
    Ok(ReactorRun {
        history: recorder.into_history(config.scan.meta()),
        moves: moves.load(Ordering::Relaxed),
        moves_starved: moves_starved.load(Ordering::Relaxed),
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `txn` as a root transaction on its shard's reactor (retried on
/// conflicts by the reactor layer; every attempt starts afresh).
fn run_txn(
    db: &Database,
    reactors: &[ReactorId],
    txn: ScanTxn,
) -> Result<Vec<MicroOp>, ReactorError> {
    let reactor = reactors[txn.shard as usize];
    let txn = Arc::new(txn);
    db.run_blocking(reactor, move |ctx| {
        let txn = Arc::clone(&txn);
        async move { txn.execute(&mut ReactorScan { ctx: &ctx }) }
    })
}

/// A scan-workload transaction's view of one reactor.
struct ReactorScan<'c> {
    ctx: &'c ReactorCtx,
}

fn reactor_bound(bound: KeyBound) -> Bound<u64> {
    match bound {
        KeyBound::Included(k) => Bound::Included(k),
        KeyBound::Excluded(k) => Bound::Excluded(k),
        KeyBound::Unbounded => Bound::Unbounded,
    }
}

impl ScanStore for ReactorScan<'_> {
    type Error = ReactorError;

    fn scan(
        &mut self,
        lower: KeyBound,
        upper: KeyBound,
        reverse: bool,
        limit: Option<u64>,
    ) -> Result<Vec<(u64, u64)>, ReactorError> {
        let direction = if reverse {
            ScanDirection::Reverse
        } else {
            ScanDirection::Forward
        };
        let limit = limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
        self.ctx.scan(
            &ROWS,
            (reactor_bound(lower), reactor_bound(upper)),
            direction,
            limit,
        )
    }

    fn get(&mut self, key: u64) -> Result<Option<u64>, ReactorError> {
        self.ctx.get(&ROWS, &key)
    }

    fn insert(&mut self, key: u64, value: u64) -> Result<(), ReactorError> {
        self.ctx.insert(&ROWS, &key, &value)
    }

    fn delete(&mut self, key: u64) -> Result<(), ReactorError> {
        if self.ctx.delete(&ROWS, &key)? {
            Ok(())
        } else {
            Err(self.missing_row(key))
        }
    }

    fn missing_row(&self, key: u64) -> ReactorError {
        ReactorError::user_abort(format!("key {key} holds no row to move"))
    }
}

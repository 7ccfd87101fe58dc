//! The engine (catalog of relations and the global epoch) and its workers (one
//! per thread, owning reusable transaction buffers and the last TID it issued).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::epoch::SiloEpoch;
#[cfg(not(loom))]
use crate::epoch::SiloEpochTicker;
use crate::error::{CatalogError, Conflict, ConflictKind, TxError};
use crate::relation::{IndexKind, Relation};
use crate::sync;
use crate::txn::{Transaction, TxBuffers};

/// Deliberate bugs, switched on only by the tests that prove the stress tests
/// and checkers can fail. Never set them in production.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlantedBugs {
    /// Skip Silo's read-set validation.
    pub skip_read_validation: bool,
    /// Skip node-set validation and missing-key checks.
    pub skip_phantom_validation: bool,
    /// Treat a placeholder this transaction linked as its own even after
    /// another transaction committed into it (the lost-update bug the
    /// `roost-check` list-append workload found).
    pub trust_own_placeholders: bool,
    /// Make every range scan skip the first record the index returns: a scan
    /// that misses a record, which commit cannot see (the copied leaves did
    /// not change) and the tests and `roost check scan` must catch.
    pub scans_skip_first_record: bool,
    /// Never free a deleted record (unlinked but not retired): the leak the
    /// reclamation test must catch.
    pub leak_deleted_records: bool,
    /// Take a sequenced commit's number
    /// ([`commit_contexts_sequenced`](crate::commit_contexts_sequenced))
    /// after validation instead of at the serialization point before it:
    /// numbers then no longer order
    /// anti-dependencies (a transaction that read `x` may get a larger
    /// number than one that overwrote `x` after it validated), which the
    /// reactor layer's replication test must catch.
    pub sequence_after_validation: bool,
    /// Under loom only: leave out the fence between locking the write set
    /// and validating the read set, so two crossing committers may each
    /// miss the other's lock (the write skew `tests/loom_commit.rs` must
    /// find). Normal builds have no such switch: their commit path is
    /// unchanged.
    #[cfg(loom)]
    pub skip_commit_fence: bool,
}

#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// How often the ticker advances Silo's global epoch (no ticker runs
    /// under loom: see `Engine::advance_silo_epoch`).
    pub silo_epoch_interval_ms: u64,
    pub planted_bugs: PlantedBugs,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            silo_epoch_interval_ms: 40,
            planted_bugs: PlantedBugs::default(),
        }
    }
}

pub(crate) struct EngineShared {
    pub(crate) epoch: Arc<SiloEpoch>,
    config: EngineConfig,
    /// The catalog (a std mutex under loom too: it is taken only around
    /// catalog changes and look-ups, never across a loom operation another
    /// model thread could interleave with).
    relations: Mutex<BTreeMap<String, Arc<Relation>>>,
    #[cfg(not(loom))]
    _ticker: SiloEpochTicker,
}

/// One storage engine instance (in ReactDB terms, one container's engine).
#[derive(Clone)]
pub struct Engine {
    shared: Arc<EngineShared>,
}

impl Default for Engine {
    fn default() -> Self {
        Engine::new(EngineConfig::default())
    }
}

impl Engine {
    pub fn new(config: EngineConfig) -> Self {
        let epoch = Arc::new(SiloEpoch::new());
        #[cfg(not(loom))]
        let ticker = SiloEpochTicker::start(Arc::clone(&epoch), config.silo_epoch_interval_ms);
        Engine {
            shared: Arc::new(EngineShared {
                epoch,
                config,
                relations: Mutex::new(BTreeMap::new()),
                #[cfg(not(loom))]
                _ticker: ticker,
            }),
        }
    }

    /// Under loom, where no ticker thread runs: advances the global epoch
    /// (a model thread standing in for the ticker). Returns the new epoch.
    #[cfg(loom)]
    pub fn advance_silo_epoch(&self) -> u64 {
        self.shared.epoch.advance()
    }

    /// Creates an ordered relation (point access and range scans).
    pub fn create_relation(&self, name: &str) -> Result<Arc<Relation>, CatalogError> {
        self.create_relation_with(name, IndexKind::Ordered)
    }

    /// Creates a relation indexed as `kind`.
    pub fn create_relation_with(
        &self,
        name: &str,
        kind: IndexKind,
    ) -> Result<Arc<Relation>, CatalogError> {
        if name.is_empty() || name.len() > 128 {
            return Err(CatalogError::BadName(name.len()));
        }
        let mut relations = self.shared.relations.lock().expect("catalog lock");
        if relations.contains_key(name) {
            return Err(CatalogError::AlreadyExists(name.to_owned()));
        }
        let relation = Arc::new(Relation::new(name, kind));
        relations.insert(name.to_owned(), Arc::clone(&relation));
        Ok(relation)
    }

    pub fn relation(&self, name: &str) -> Option<Arc<Relation>> {
        self.shared
            .relations
            .lock()
            .expect("catalog lock")
            .get(name)
            .cloned()
    }

    pub fn current_silo_epoch(&self) -> u64 {
        self.shared.epoch.current()
    }

    /// A worker for the calling thread.
    pub fn worker(&self) -> Worker {
        Worker {
            engine: Arc::clone(&self.shared),
            planted: self.shared.config.planted_bugs,
            last_tid: 0,
            buffers: TxBuffers::default(),
            stats: WorkerStats::default(),
            backoff_seed: 0x2545_F491_4F6C_DD1D ^ (Arc::as_ptr(&self.shared) as u64),
        }
    }
}

/// What a worker's transactions did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    pub commits: u64,
    /// Every abort: conflicts, user aborts, constraint errors, dropped transactions.
    pub aborts: u64,
    /// The aborts caused by a conflict (failed validation at commit, or a
    /// conflict an operation reported to `Worker::run`).
    pub conflicts: u64,
}

/// Per-thread transaction context.
pub struct Worker {
    pub(crate) engine: Arc<EngineShared>,
    pub(crate) planted: PlantedBugs,
    /// Version bits of the last TID this worker issued (Silo's rule (b)).
    pub(crate) last_tid: u64,
    pub(crate) buffers: TxBuffers,
    pub(crate) stats: WorkerStats,
    backoff_seed: u64,
}

/// How the retry helper re-runs conflicting transactions.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub initial_backoff_us: u64,
    pub max_backoff_us: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 1000,
            initial_backoff_us: 1,
            max_backoff_us: 1000,
        }
    }
}

impl Worker {
    pub fn begin<'r>(&mut self) -> Transaction<'_, 'r> {
        Transaction::new(self)
    }

    pub fn stats(&self) -> WorkerStats {
        self.stats
    }

    /// Runs `body` in a transaction and commits it, re-running it on conflicts
    /// with bounded, jittered exponential backoff. Other errors abort and return.
    pub fn run<'r, T>(
        &mut self,
        policy: RetryPolicy,
        mut body: impl FnMut(&mut Transaction<'_, 'r>) -> Result<T, TxError>,
    ) -> Result<T, TxError> {
        assert!(policy.max_attempts > 0);
        let mut backoff_us = policy.initial_backoff_us.max(1);
        let mut last = Conflict::from(ConflictKind::ReadValidation);
        for attempt in 1..=policy.max_attempts {
            let mut tx = self.begin();
            let outcome = body(&mut tx);
            let conflict = match outcome {
                Ok(value) => match tx.commit() {
                    Ok(_) => return Ok(value),
                    Err(crate::CommitError::Conflict(kind)) => kind,
                },
                Err(TxError::Conflict(kind)) => {
                    tx.abort();
                    self.stats.conflicts += 1;
                    kind
                }
                Err(other) => {
                    tx.abort();
                    return Err(other);
                }
            };
            last = conflict;
            if attempt > 2 {
                let jitter = self.next_random() % backoff_us.max(1);
                sync::sleep(Duration::from_micros(backoff_us / 2 + jitter / 2));
                backoff_us = (backoff_us * 2).min(policy.max_backoff_us.max(1));
            } else {
                sync::yield_now();
            }
        }
        Err(TxError::RetriesExhausted {
            attempts: policy.max_attempts,
            last,
        })
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64: cheap jitter, no shared state.
        let mut x = self.backoff_seed;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.backoff_seed = x;
        x
    }
}

//! The scan workload: range scans racing inserts and deletes.
//!
//! Keys `0..key_space` fall into groups of `group_keys` consecutive keys;
//! every group holds exactly `group_rows` rows in every committed state.
//! Writers *move* rows within a group: delete a present key (naming the
//! value it held) and insert an absent one with a fresh value, one to
//! `max_moves` moves per transaction, in one or two groups. Readers scan:
//! whole groups (one to three, forward or reverse, with a limit above the
//! rows there or none), pages through groups (limited scans continuing
//! after the last row returned), limited scans from a key inside a group,
//! and sub-ranges of a group. With many keys the index has several levels,
//! and moves split and merge its nodes all the time; a share of the traffic
//! goes to a few hot groups so scans and moves of one group overlap.
//!
//! The generator is told how each transaction ended ([`ScanGenerator::finished`]):
//! it picks moves from the committed state, and claims a transaction's keys
//! until it completes, so no two writers of one key ever run at once (the
//! checker orders a key's writers by real time). A transaction whose
//! outcome is unknown keeps its keys claimed for good.
//!
//! Shards: with `shard_keys < key_space` (the reactor target, one reactor
//! per shard), every transaction stays inside one shard.

use std::collections::{BTreeMap, BinaryHeap};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::{strip_reads, SimConfig};
use crate::history::{History, KeyBound, Meta, MicroOp, Op, Outcome, ScanLayout, WorkloadKind};

/// Parameters of the scan workload; [`ScanParams::default`] is what `roost
/// check scan` runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanParams {
    pub layout: ScanLayout,
    /// Keys per shard; a transaction never leaves its shard. `key_space`
    /// for one shard.
    pub shard_keys: u64,
    /// Groups that get `hot_percent` of the transactions (spread evenly
    /// over the key space).
    pub hot_groups: u64,
    pub hot_percent: u32,
    /// Share of read (scan) transactions; the rest move rows.
    pub scan_percent: u32,
    /// Moves per writing transaction, at most.
    pub max_moves: usize,
    /// Scans (or paginations) per reading transaction, at most.
    pub max_scans: usize,
    /// Largest page of a paginated scan.
    pub max_page_rows: u64,
}

impl Default for ScanParams {
    fn default() -> Self {
        ScanParams {
            // 1,024 groups of 32 keys, 16 rows each: 16,384 rows, so the
            // B+-tree has several levels.
            layout: ScanLayout {
                key_space: 32_768,
                group_keys: 32,
                group_rows: 16,
            },
            shard_keys: 32_768,
            hot_groups: 8,
            hot_percent: 50,
            scan_percent: 50,
            max_moves: 3,
            max_scans: 3,
            max_page_rows: 6,
        }
    }
}

/// Why [`ScanParams`] cannot be run.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ScanConfigError {
    #[error("key_space must be in 1..=2^24 and a multiple of group_keys (got {key_space} keys, groups of {group_keys})")]
    KeySpace { key_space: u64, group_keys: u64 },
    #[error(
        "group_rows must be in 1..group_keys so a row can move (got {group_rows} of {group_keys})"
    )]
    GroupRows { group_rows: u64, group_keys: u64 },
    #[error("shard_keys must be a multiple of group_keys that divides key_space (got {0})")]
    ShardKeys(u64),
    #[error("{name} must be in 1..={max}, got {value}")]
    OutOfRange {
        name: &'static str,
        value: u64,
        max: u64,
    },
}

/// The largest key space the generator accepts: its state is a slot per key.
const MAX_KEY_SPACE: u64 = 1 << 24;

impl ScanParams {
    pub fn validate(&self) -> Result<(), ScanConfigError> {
        let ScanLayout {
            key_space,
            group_keys,
            group_rows,
        } = self.layout;
        if key_space == 0
            || key_space > MAX_KEY_SPACE
            || group_keys == 0
            || key_space % group_keys != 0
        {
            return Err(ScanConfigError::KeySpace {
                key_space,
                group_keys,
            });
        }
        if group_rows == 0 || group_rows >= group_keys {
            return Err(ScanConfigError::GroupRows {
                group_rows,
                group_keys,
            });
        }
        if self.shard_keys == 0
            || self.shard_keys % group_keys != 0
            || key_space % self.shard_keys != 0
        {
            return Err(ScanConfigError::ShardKeys(self.shard_keys));
        }
        let ranges = [
            ("hot_groups", self.hot_groups, self.layout.groups()),
            ("hot_percent", u64::from(self.hot_percent), 100),
            ("scan_percent", u64::from(self.scan_percent), 99),
            ("max_moves", self.max_moves as u64, 16),
            ("max_scans", self.max_scans as u64, 16),
            ("max_page_rows", self.max_page_rows, group_keys),
        ];
        for (name, value, max) in ranges {
            if value == 0 || value > max {
                return Err(ScanConfigError::OutOfRange { name, value, max });
            }
        }
        Ok(())
    }

    pub fn shards(&self) -> u64 {
        self.layout.key_space / self.shard_keys
    }

    /// The history header the checker needs.
    pub fn meta(&self) -> Meta {
        let mut meta = Meta::new(WorkloadKind::Scan);
        meta.scan = Some(self.layout);
        meta
    }
}

/// One step of a planned transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// One scan, recorded as it ran.
    Scan {
        lower: KeyBound,
        upper: KeyBound,
        reverse: bool,
        limit: Option<u64>,
    },
    /// Pages of `page_rows` through `[lower, upper]`: each scan continues
    /// after the last row of the one before, until one returns a short page.
    Paged {
        lower: KeyBound,
        upper: KeyBound,
        reverse: bool,
        page_rows: u64,
    },
    /// Delete `from` (which must hold a row), insert `to` with `value`.
    Move { from: u64, to: u64, value: u64 },
    /// Insert `key` with `value` (the initial rows).
    Insert { key: u64, value: u64 },
}

/// A planned transaction: its steps, its shard and the keys it claims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanTxn {
    pub shard: u64,
    pub steps: Vec<Step>,
    claimed: Vec<u64>,
}

/// A transaction's view of a store, for [`ScanTxn::execute`]: the engine's
/// `Transaction`, a reactor's context, the reference model.
pub trait ScanStore {
    type Error;
    /// Up to `limit` rows (all: `None`) of `[lower, upper]`, in key order
    /// or reversed.
    fn scan(
        &mut self,
        lower: KeyBound,
        upper: KeyBound,
        reverse: bool,
        limit: Option<u64>,
    ) -> Result<Vec<(u64, u64)>, Self::Error>;
    fn get(&mut self, key: u64) -> Result<Option<u64>, Self::Error>;
    /// Inserts a row that must be absent (an error if present).
    fn insert(&mut self, key: u64, value: u64) -> Result<(), Self::Error>;
    fn delete(&mut self, key: u64) -> Result<(), Self::Error>;
    /// The error that aborts the transaction when a row it moves is missing.
    fn missing_row(&self, key: u64) -> Self::Error;
}

impl ScanTxn {
    /// Whether it writes (moves or inserts).
    pub fn writes(&self) -> bool {
        self.steps
            .iter()
            .any(|s| matches!(s, Step::Move { .. } | Step::Insert { .. }))
    }

    /// Runs the steps in `store`, returning the micro-ops as they ran
    /// (scans with their rows, deletes with the value they removed). Called
    /// afresh on every retry.
    pub fn execute<S: ScanStore>(&self, store: &mut S) -> Result<Vec<MicroOp>, S::Error> {
        let mut done = Vec::with_capacity(self.steps.len() * 2);
        for step in &self.steps {
            match *step {
                Step::Scan {
                    lower,
                    upper,
                    reverse,
                    limit,
                } => {
                    let rows = store.scan(lower, upper, reverse, limit)?;
                    done.push(MicroOp::Scan {
                        lower,
                        upper,
                        reverse,
                        limit,
                        rows: Some(rows),
                    });
                }
                Step::Paged {
                    lower,
                    upper,
                    reverse,
                    page_rows,
                } => paginate(store, lower, upper, reverse, page_rows, &mut done)?,
                Step::Move { from, to, value } => {
                    let Some(old) = store.get(from)? else {
                        return Err(store.missing_row(from));
                    };
                    store.delete(from)?;
                    store.insert(to, value)?;
                    done.push(MicroOp::Delete {
                        key: from,
                        value: Some(old),
                    });
                    done.push(MicroOp::Insert { key: to, value });
                }
                Step::Insert { key, value } => {
                    store.insert(key, value)?;
                    done.push(MicroOp::Insert { key, value });
                }
            }
        }
        Ok(done)
    }

    /// The micro-ops of a transaction that did not complete (no reads).
    pub fn planned(&self) -> Vec<MicroOp> {
        let ops = self
            .steps
            .iter()
            .flat_map(|step| match *step {
                Step::Scan {
                    lower,
                    upper,
                    reverse,
                    limit,
                } => vec![MicroOp::Scan {
                    lower,
                    upper,
                    reverse,
                    limit,
                    rows: None,
                }],
                Step::Paged {
                    lower,
                    upper,
                    reverse,
                    page_rows,
                } => vec![MicroOp::Scan {
                    lower,
                    upper,
                    reverse,
                    limit: Some(page_rows),
                    rows: None,
                }],
                Step::Move { from, to, value } => vec![
                    MicroOp::Delete {
                        key: from,
                        value: None,
                    },
                    MicroOp::Insert { key: to, value },
                ],
                Step::Insert { key, value } => vec![MicroOp::Insert { key, value }],
            })
            .collect();
        strip_reads(ops)
    }
}

fn paginate<S: ScanStore>(
    store: &mut S,
    mut lower: KeyBound,
    mut upper: KeyBound,
    reverse: bool,
    page_rows: u64,
    done: &mut Vec<MicroOp>,
) -> Result<(), S::Error> {
    assert!(page_rows > 0, "pages hold at least one row");
    let span = KeyBound::interval(lower, upper).map_or(0, |(a, b)| b - a);
    // A correct store advances at least one key per full page; the bound
    // stops a broken one that does not.
    let max_pages = span / page_rows + 2;
    for _ in 0..max_pages {
        let rows = store.scan(lower, upper, reverse, Some(page_rows))?;
        let next = match rows.last() {
            Some(&(last, _)) if rows.len() as u64 >= page_rows => Some(last),
            _ => None,
        };
        done.push(MicroOp::Scan {
            lower,
            upper,
            reverse,
            limit: Some(page_rows),
            rows: Some(rows),
        });
        match next {
            Some(last) if reverse => upper = KeyBound::Excluded(last),
            Some(last) => lower = KeyBound::Excluded(last),
            None => break,
        }
    }
    Ok(())
}

/// Draws scan-workload transactions from the committed state.
pub struct ScanGenerator {
    params: ScanParams,
    rng: SmallRng,
    /// The committed value of every key (`None`: absent).
    rows: Vec<Option<u64>>,
    /// Keys a transaction in flight (or of unknown outcome) writes.
    claimed: Vec<bool>,
    next_value: u64,
    /// The initial rows, inserted by [`ScanGenerator::setup`].
    initial: Vec<(u64, u64)>,
}

impl ScanGenerator {
    /// A generator whose committed state is the initial rows (which the
    /// runner must insert first, with [`ScanGenerator::setup`]).
    pub fn new(params: ScanParams, seed: u64) -> Self {
        assert!(params.validate().is_ok(), "invalid scan parameters");
        let layout = params.layout;
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut rows = vec![None; layout.key_space as usize];
        let mut next_value = 1;
        let mut initial = Vec::new();
        for g in 0..layout.groups() {
            let (first, _) = layout.group_keys_of(g);
            let mut slots: Vec<u64> = (first..first + layout.group_keys).collect();
            // A partial Fisher-Yates shuffle picks the group's rows.
            for n in 0..layout.group_rows as usize {
                let pick = rng.random_range(n..slots.len());
                slots.swap(n, pick);
                let key = slots[n];
                rows[key as usize] = Some(next_value);
                initial.push((key, next_value));
                next_value += 1;
            }
        }
        initial.sort_unstable();
        ScanGenerator {
            claimed: vec![false; layout.key_space as usize],
            params,
            rng,
            rows,
            next_value,
            initial,
        }
    }

    pub fn params(&self) -> &ScanParams {
        &self.params
    }

    /// The transactions that insert the initial rows, one per shard.
    pub fn setup(&self) -> Vec<ScanTxn> {
        (0..self.params.shards())
            .map(|shard| {
                let (a, b) = self.shard_keys(shard);
                ScanTxn {
                    shard,
                    steps: self
                        .initial
                        .iter()
                        .filter(|(k, _)| (a..=b).contains(k))
                        .map(|&(key, value)| Step::Insert { key, value })
                        .collect(),
                    claimed: Vec::new(),
                }
            })
            .collect()
    }

    /// One unlimited scan of each shard, after the clients stopped.
    pub fn final_reads(&self) -> Vec<ScanTxn> {
        (0..self.params.shards())
            .map(|shard| {
                let (a, b) = self.shard_keys(shard);
                ScanTxn {
                    shard,
                    steps: vec![Step::Scan {
                        lower: KeyBound::Included(a),
                        upper: KeyBound::Included(b),
                        reverse: false,
                        limit: None,
                    }],
                    claimed: Vec::new(),
                }
            })
            .collect()
    }

    fn shard_keys(&self, shard: u64) -> (u64, u64) {
        let s = self.params.shard_keys;
        (shard * s, (shard + 1) * s - 1)
    }

    fn shard_of_group(&self, g: u64) -> u64 {
        g * self.params.layout.group_keys / self.params.shard_keys
    }

    /// A group: one of the hot ones with `hot_percent`, else any.
    fn pick_group(&mut self) -> u64 {
        let groups = self.params.layout.groups();
        if self.rng.random_range(0..100) < self.params.hot_percent {
            let h = self.rng.random_range(0..self.params.hot_groups);
            h * groups / self.params.hot_groups
        } else {
            self.rng.random_range(0..groups)
        }
    }

    /// Another group of `shard`.
    fn group_in_shard(&mut self, shard: u64) -> u64 {
        let per_shard = self.params.shard_keys / self.params.layout.group_keys;
        shard * per_shard + self.rng.random_range(0..per_shard)
    }

    /// The next transaction; its keys stay claimed until
    /// [`ScanGenerator::finished`].
    pub fn next_txn(&mut self) -> ScanTxn {
        let base = self.pick_group();
        if self.rng.random_range(0..100) >= self.params.scan_percent {
            if let Some(txn) = self.mover(base) {
                return txn;
            }
        }
        self.reader(base)
    }

    fn mover(&mut self, base: u64) -> Option<ScanTxn> {
        let shard = self.shard_of_group(base);
        let moves = self.rng.random_range(1..=self.params.max_moves);
        let mut steps = Vec::with_capacity(moves);
        let mut claimed = Vec::new();
        for _ in 0..moves {
            let g = if self.rng.random_ratio(3, 10) {
                self.group_in_shard(shard)
            } else {
                base
            };
            let (first, last) = self.params.layout.group_keys_of(g);
            let free = |k: &u64, present: bool, gen: &Self| {
                !gen.claimed[*k as usize] && gen.rows[*k as usize].is_some() == present
            };
            let from: Vec<u64> = (first..=last).filter(|k| free(k, true, self)).collect();
            let to: Vec<u64> = (first..=last).filter(|k| free(k, false, self)).collect();
            if from.is_empty() || to.is_empty() {
                continue;
            }
            let from = from[self.rng.random_range(0..from.len())];
            let to = to[self.rng.random_range(0..to.len())];
            for k in [from, to] {
                self.claimed[k as usize] = true;
                claimed.push(k);
            }
            let value = self.next_value;
            self.next_value += 1;
            steps.push(Step::Move { from, to, value });
        }
        (!steps.is_empty()).then_some(ScanTxn {
            shard,
            steps,
            claimed,
        })
    }

    fn reader(&mut self, base: u64) -> ScanTxn {
        let shard = self.shard_of_group(base);
        let scans = self.rng.random_range(1..=self.params.max_scans);
        let steps = (0..scans)
            .map(|n| {
                let g = if n == 0 {
                    base
                } else {
                    self.group_in_shard(shard)
                };
                self.scan_step(shard, g)
            })
            .collect();
        ScanTxn {
            shard,
            steps,
            claimed: Vec::new(),
        }
    }

    fn scan_step(&mut self, shard: u64, g: u64) -> Step {
        let layout = self.params.layout;
        let rows = layout.group_rows;
        let (shard_first, shard_last) = self.shard_keys(shard);
        let (first, last) = layout.group_keys_of(g);
        let reverse = self.rng.random_bool(0.5);
        // Whole groups from `g`, at most `span` of them, within the shard.
        let groups_to = |span: u64| ((first + span * layout.group_keys - 1).min(shard_last), span);
        let shape = self.rng.random_range(0..100);
        if shape < 35 {
            let (to, span) = groups_to(self.rng.random_range(1..=3));
            let groups = (to + 1 - first) / layout.group_keys;
            let limit = match self.rng.random_range(0..10) {
                0..=4 => None,
                // Exactly the rows there: the scan stops at its limit and
                // covers only up to its last row.
                5 => Some(groups * rows),
                _ => Some(groups * rows + self.rng.random_range(1..=3)),
            };
            debug_assert!(groups >= 1 && groups <= span);
            let (lower, upper) = self.bounds(first, to);
            Step::Scan {
                lower,
                upper,
                reverse,
                limit,
            }
        } else if shape < 60 {
            let (to, _) = groups_to(self.rng.random_range(1..=2));
            let (lower, upper) = self.bounds(first, to);
            Step::Paged {
                lower,
                upper,
                reverse,
                page_rows: self.rng.random_range(1..=self.params.max_page_rows),
            }
        } else if shape < 80 {
            // From a key inside the group towards the shard's end (or start).
            let from = self.rng.random_range(first..=last);
            let (a, b) = if reverse {
                (shard_first, from)
            } else {
                (from, shard_last)
            };
            let (lower, upper) = self.bounds(a, b);
            Step::Scan {
                lower,
                upper,
                reverse,
                limit: Some(self.rng.random_range(1..=rows)),
            }
        } else {
            let a = self.rng.random_range(first..=last);
            let b = self.rng.random_range(a..=last);
            let (lower, upper) = self.bounds(a, b);
            let limit = self
                .rng
                .random_bool(0.5)
                .then(|| self.rng.random_range(1..=rows));
            Step::Scan {
                lower,
                upper,
                reverse,
                limit,
            }
        }
    }

    /// Bounds for the inclusive interval `[a, b]`, in one of the ways a
    /// client could write them. Unbounded only at the ends of the key
    /// space, where it means the same to every target (a reactor's
    /// unbounded scan stops at its own rows).
    fn bounds(&mut self, a: u64, b: u64) -> (KeyBound, KeyBound) {
        let lower = match self.rng.random_range(0..3) {
            0 if a == 0 => KeyBound::Unbounded,
            1 if a > 0 => KeyBound::Excluded(a - 1),
            _ => KeyBound::Included(a),
        };
        let top = self.params.layout.key_space - 1;
        let upper = match self.rng.random_range(0..3) {
            0 if b == top => KeyBound::Unbounded,
            1 => KeyBound::Excluded(b + 1),
            _ => KeyBound::Included(b),
        };
        (lower, upper)
    }

    /// Reports how `txn` ended: its moves are applied to the committed state
    /// if it committed, and its keys released unless its outcome is unknown
    /// (then whether it happened stays unknown, so no one writes them again).
    pub fn finished(&mut self, txn: &ScanTxn, outcome: Outcome) {
        if outcome == Outcome::Ok {
            for step in &txn.steps {
                if let Step::Move { from, to, value } = *step {
                    assert!(
                        self.rows[from as usize].is_some() && self.rows[to as usize].is_none(),
                        "claimed keys change only through their claimant"
                    );
                    self.rows[from as usize] = None;
                    self.rows[to as usize] = Some(value);
                }
            }
        }
        if outcome != Outcome::Unknown {
            for &k in &txn.claimed {
                debug_assert!(self.claimed[k as usize]);
                self.claimed[k as usize] = false;
            }
        }
    }
}

/// The reference store: rows in a `BTreeMap`, a transaction's writes
/// undone if it fails.
pub struct ModelStore<'m> {
    rows: &'m mut BTreeMap<u64, u64>,
    undo: Vec<(u64, Option<u64>)>,
}

/// Why a transaction failed in the model.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ModelError {
    #[error("key {0} holds no row")]
    MissingRow(u64),
    #[error("key {0} already holds a row")]
    DuplicateKey(u64),
}

impl<'m> ModelStore<'m> {
    pub fn new(rows: &'m mut BTreeMap<u64, u64>) -> Self {
        ModelStore {
            rows,
            undo: Vec::new(),
        }
    }

    /// Undoes this transaction's writes.
    pub fn rollback(mut self) {
        while let Some((key, old)) = self.undo.pop() {
            match old {
                Some(v) => self.rows.insert(key, v),
                None => self.rows.remove(&key),
            };
        }
    }
}

impl ScanStore for ModelStore<'_> {
    type Error = ModelError;

    fn scan(
        &mut self,
        lower: KeyBound,
        upper: KeyBound,
        reverse: bool,
        limit: Option<u64>,
    ) -> Result<Vec<(u64, u64)>, ModelError> {
        let Some((a, b)) = KeyBound::interval(lower, upper) else {
            return Ok(Vec::new());
        };
        let limit = limit.map_or(usize::MAX, |l| l as usize);
        let range = self.rows.range(a..=b).map(|(&k, &v)| (k, v));
        Ok(if reverse {
            range.rev().take(limit).collect()
        } else {
            range.take(limit).collect()
        })
    }

    fn get(&mut self, key: u64) -> Result<Option<u64>, ModelError> {
        Ok(self.rows.get(&key).copied())
    }

    fn insert(&mut self, key: u64, value: u64) -> Result<(), ModelError> {
        if self.rows.contains_key(&key) {
            return Err(ModelError::DuplicateKey(key));
        }
        self.rows.insert(key, value);
        self.undo.push((key, None));
        Ok(())
    }

    fn delete(&mut self, key: u64) -> Result<(), ModelError> {
        let old = self.rows.remove(&key).ok_or(ModelError::MissingRow(key))?;
        self.undo.push((key, Some(old)));
        Ok(())
    }

    fn missing_row(&self, key: u64) -> ModelError {
        ModelError::MissingRow(key)
    }
}

/// Runs `txn` atomically in the model: `Ok` with its micro-ops, or `Fail`
/// (no effects) with its planned ones.
pub fn apply_in_model(rows: &mut BTreeMap<u64, u64>, txn: &ScanTxn) -> (Outcome, Vec<MicroOp>) {
    let mut store = ModelStore::new(rows);
    match txn.execute(&mut store) {
        Ok(ops) => (Outcome::Ok, ops),
        Err(_) => {
            store.rollback();
            (Outcome::Fail, txn.planned())
        }
    }
}

/// A strictly serializable scan history: each transaction takes effect at a
/// random instant between its invocation and completion, in the model;
/// the generator hears of each outcome at completion, as in a real run.
/// The setup comes first and the final reads last (as process `clients`).
pub fn simulate(params: &ScanParams, sim: &SimConfig) -> History {
    assert!(sim.clients > 0);
    let mut generator = ScanGenerator::new(params.clone(), sim.seed);
    let mut rng = SmallRng::seed_from_u64(sim.seed ^ 0x5ca9);
    let mut rows = BTreeMap::new();
    let mut ops: Vec<Op> = Vec::with_capacity(sim.ops + 8);
    let mut now_ns = 0u64;
    run_serially(
        generator.setup(),
        &mut rows,
        &mut ops,
        sim.clients,
        &mut now_ns,
    );
    // Events in time order: (time, sequence, kind, index); kind 0: commit
    // point of op `index`; 1: its completion; 2: client `index` invokes.
    let mut events: BinaryHeap<std::cmp::Reverse<(u64, u64, u8, usize)>> = BinaryHeap::new();
    let mut seq = 0u64;
    now_ns += 10;
    for c in 0..sim.clients as usize {
        events.push(std::cmp::Reverse((now_ns + c as u64, seq, 2, c)));
        seq += 1;
    }
    // Per op in flight: its plan, whether it takes effect, whether its
    // outcome is lost.
    let mut plans: Vec<Option<(ScanTxn, bool, bool)>> = vec![None; ops.len()];
    let mut invoked = 0usize;
    while let Some(std::cmp::Reverse((t, _, kind, index))) = events.pop() {
        now_ns = now_ns.max(t);
        match kind {
            0 => {
                let (txn, applies, _) = plans[index].as_ref().expect("planned");
                let op = &mut ops[index];
                if *applies {
                    let (outcome, done) = apply_in_model(&mut rows, txn);
                    op.outcome = outcome;
                    op.ops = done;
                } else {
                    op.outcome = Outcome::Fail;
                }
            }
            1 => {
                let (txn, _, unknown) = plans[index].take().expect("planned");
                let op = &mut ops[index];
                if op.outcome == Outcome::Fail {
                    op.ops = txn.planned();
                }
                if unknown {
                    op.outcome = Outcome::Unknown;
                    op.ops = txn.planned();
                } else {
                    op.complete_ns = Some(t);
                }
                generator.finished(&txn, op.outcome);
                let gap_ns = rng.random_range(0..5_000u64);
                let client = op.process as usize;
                events.push(std::cmp::Reverse((t + 1 + gap_ns, seq, 2, client)));
                seq += 1;
            }
            _ => {
                if invoked >= sim.ops {
                    continue;
                }
                invoked += 1;
                let txn = generator.next_txn();
                let duration_ns = rng.random_range(1_000..100_000u64);
                let commit_ns = t + rng.random_range(1..duration_ns);
                let unknown = rng.random_bool(sim.unknown_probability);
                let applies = !unknown || rng.random_bool(0.5);
                let id = ops.len();
                ops.push(Op {
                    id: id as u64,
                    process: index as u64,
                    invoke_ns: t,
                    complete_ns: None,
                    outcome: Outcome::Ok,
                    ops: txn.planned(),
                });
                plans.push(Some((txn, applies, unknown)));
                events.push(std::cmp::Reverse((commit_ns, seq, 0, id)));
                events.push(std::cmp::Reverse((t + duration_ns, seq + 1, 1, id)));
                seq += 2;
            }
        }
    }
    now_ns += 10;
    run_serially(
        generator.final_reads(),
        &mut rows,
        &mut ops,
        sim.clients,
        &mut now_ns,
    );
    History::new(params.meta(), ops)
}

/// Setup and final reads: one after another, nothing concurrent.
fn run_serially(
    txns: Vec<ScanTxn>,
    rows: &mut BTreeMap<u64, u64>,
    ops: &mut Vec<Op>,
    process: u64,
    now_ns: &mut u64,
) {
    for txn in txns {
        let (outcome, done) = apply_in_model(rows, &txn);
        assert_eq!(outcome, Outcome::Ok, "setup and final reads cannot fail");
        ops.push(Op {
            id: ops.len() as u64,
            process,
            invoke_ns: *now_ns,
            complete_ns: Some(*now_ns + 1),
            outcome,
            ops: done,
        });
        *now_ns += 2;
    }
}

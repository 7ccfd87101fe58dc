//! Workloads in the style of Elle's: seeded generators of transactions, a
//! reference [`Model`] that executes them atomically, and [`simulate`], which
//! produces a strictly serializable history of any length without threads
//! (for the checker's own tests and its 100k-op timing).
//!
//! - list-append: 1..=`max_txn_len` micro-ops over `keys` active keys; appends
//!   of globally unique values, whole-list reads. A key retires after
//!   `max_writes_per_key` appends (its lists stay short; Elle does the same).
//! - rw-register: reads and writes of unique values, keys retired likewise.
//! - bank: transfers between `accounts` accounts and whole-bank reads.
//! - counter: increments and reads of `keys` counters, optionally bounded.
//! - scan: range scans racing moves of rows within key groups; its own
//!   generator, runner glue and simulation live in [`scan`].

pub mod scan;

use std::collections::{BTreeMap, BinaryHeap, HashMap};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::history::{History, Meta, MicroOp, Op, Outcome, WorkloadKind};

/// Parameters of a workload; [`WorkloadConfig::new`] gives sensible defaults.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadConfig {
    pub kind: WorkloadKind,
    /// Active keys (list-append, rw-register, counter).
    pub keys: u64,
    /// Micro-ops per transaction, at most (list-append, rw-register).
    pub max_txn_len: usize,
    /// Writes before a key is retired for a fresh one.
    pub max_writes_per_key: u64,
    pub accounts: u64,
    pub initial_balance: i64,
    /// Largest single transfer.
    pub max_transfer: i64,
    /// Counter: increments that would pass this must fail.
    pub counter_bound: Option<i64>,
    /// Scan: the key layout and the mix of scans and moves.
    pub scan: scan::ScanParams,
}

impl WorkloadConfig {
    pub fn new(kind: WorkloadKind) -> Self {
        WorkloadConfig {
            kind,
            keys: if kind == WorkloadKind::Counter { 2 } else { 5 },
            max_txn_len: 4,
            max_writes_per_key: 32,
            accounts: 5,
            initial_balance: 100,
            max_transfer: 30,
            counter_bound: None,
            scan: scan::ScanParams::default(),
        }
    }

    /// The history header the checker needs for this workload.
    pub fn meta(&self) -> Meta {
        let mut meta = Meta::new(self.kind);
        if self.kind == WorkloadKind::Bank {
            meta.bank_total = Some(self.initial_balance * self.accounts as i64);
            meta.bank_accounts = Some(self.accounts);
        }
        if self.kind == WorkloadKind::Counter {
            meta.counter_bound = self.counter_bound;
        }
        if self.kind == WorkloadKind::Scan {
            meta = self.scan.meta();
        }
        meta
    }

    /// Rejects parameters the generators cannot honour.
    pub fn validate(&self) -> Result<(), String> {
        if self.keys == 0 || self.keys > 1 << 20 {
            return Err(format!("keys must be in 1..=2^20, got {}", self.keys));
        }
        if self.max_txn_len == 0 || self.max_txn_len > 64 {
            return Err(format!(
                "max_txn_len must be in 1..=64, got {}",
                self.max_txn_len
            ));
        }
        if self.max_writes_per_key == 0 {
            return Err("max_writes_per_key must be positive".into());
        }
        if self.accounts < 2 || self.accounts > 1024 {
            return Err(format!(
                "accounts must be in 2..=1024, got {}",
                self.accounts
            ));
        }
        if self.initial_balance < 0 || self.max_transfer <= 0 {
            return Err("balances must be non-negative and transfers positive".into());
        }
        if self.kind == WorkloadKind::Scan {
            self.scan.validate().map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

/// Draws transactions. One generator may be shared by all clients (behind a
/// mutex) so that key retirement and value uniqueness are global.
pub struct Generator {
    config: WorkloadConfig,
    rng: SmallRng,
    /// The active keys and how many writes each has had.
    active: Vec<(u64, u64)>,
    next_key: u64,
    next_value: u64,
}

impl Generator {
    pub fn new(config: WorkloadConfig, seed: u64) -> Self {
        assert!(config.validate().is_ok(), "invalid workload config");
        assert!(
            config.kind != WorkloadKind::Scan,
            "the scan workload has its own generator (workload::scan::ScanGenerator)"
        );
        let active = (0..config.keys).map(|k| (k, 0)).collect();
        Generator {
            next_key: config.keys,
            config,
            rng: SmallRng::seed_from_u64(seed),
            active,
            next_value: 1,
        }
    }

    pub fn config(&self) -> &WorkloadConfig {
        &self.config
    }

    /// The next transaction's micro-ops (reads without values).
    pub fn next_txn(&mut self) -> Vec<MicroOp> {
        match self.config.kind {
            WorkloadKind::ListAppend => self.keyed_txn(|key, value| MicroOp::Append { key, value }),
            WorkloadKind::RwRegister => self.keyed_txn(|key, value| MicroOp::Write { key, value }),
            WorkloadKind::Bank => vec![self.bank_op()],
            WorkloadKind::Counter => vec![self.counter_op()],
            WorkloadKind::Scan => unreachable!("refused by Generator::new"),
        }
    }

    /// List-append and rw-register: random reads and writes of active keys.
    fn keyed_txn(&mut self, write: impl Fn(u64, u64) -> MicroOp) -> Vec<MicroOp> {
        let len = self.rng.random_range(1..=self.config.max_txn_len);
        let mut ops = Vec::with_capacity(len);
        for _ in 0..len {
            let slot = self.rng.random_range(0..self.active.len());
            let key = self.active[slot].0;
            if self.rng.random_bool(0.5) {
                ops.push(match self.config.kind {
                    WorkloadKind::ListAppend => MicroOp::Read { key, value: None },
                    _ => MicroOp::ReadReg { key, value: None },
                });
                continue;
            }
            let value = self.next_value;
            self.next_value += 1;
            ops.push(write(key, value));
            self.active[slot].1 += 1;
            if self.active[slot].1 >= self.config.max_writes_per_key {
                self.active[slot] = (self.next_key, 0);
                self.next_key += 1;
            }
        }
        ops
    }

    fn bank_op(&mut self) -> MicroOp {
        if self.rng.random_ratio(1, 5) {
            return MicroOp::ReadBank { balances: None };
        }
        let from = self.rng.random_range(0..self.config.accounts);
        let offset = self.rng.random_range(1..self.config.accounts);
        MicroOp::Transfer {
            from,
            to: (from + offset) % self.config.accounts,
            amount: self.rng.random_range(1..=self.config.max_transfer),
        }
    }

    fn counter_op(&mut self) -> MicroOp {
        let key = self.rng.random_range(0..self.config.keys);
        if self.rng.random_ratio(1, 3) {
            MicroOp::ReadCounter { key, value: None }
        } else {
            MicroOp::Increment {
                key,
                amount: self.rng.random_range(1..=3),
            }
        }
    }

    /// The micro-ops of a final read of everything the run may have touched.
    pub fn final_read(&self) -> Vec<MicroOp> {
        match self.config.kind {
            WorkloadKind::ListAppend => (0..self.next_key)
                .map(|key| MicroOp::Read { key, value: None })
                .collect(),
            WorkloadKind::RwRegister => (0..self.next_key)
                .map(|key| MicroOp::ReadReg { key, value: None })
                .collect(),
            WorkloadKind::Bank => vec![MicroOp::ReadBank { balances: None }],
            WorkloadKind::Counter => (0..self.config.keys)
                .map(|key| MicroOp::ReadCounter { key, value: None })
                .collect(),
            WorkloadKind::Scan => unreachable!("refused by Generator::new"),
        }
    }
}

/// A correct, single-threaded store for every workload: the reference the
/// in-memory test stores and [`simulate`] are built on.
#[derive(Clone, Debug, Default)]
pub struct Model {
    pub lists: HashMap<u64, Vec<u64>>,
    pub registers: HashMap<u64, u64>,
    pub balances: Vec<i64>,
    pub counters: HashMap<u64, i64>,
    pub counter_bound: Option<i64>,
    /// Scan: the rows.
    pub rows: BTreeMap<u64, u64>,
}

impl Model {
    pub fn new(config: &WorkloadConfig) -> Self {
        Model {
            balances: vec![config.initial_balance; config.accounts as usize],
            counter_bound: config.counter_bound,
            ..Model::default()
        }
    }

    /// Runs `ops` atomically: either all take effect (`Ok`, reads filled in)
    /// or, if a transfer or bounded increment cannot, none do (`Fail`).
    pub fn apply(&mut self, ops: &[MicroOp]) -> (Outcome, Vec<MicroOp>) {
        if !self.feasible(ops) {
            return (Outcome::Fail, ops.to_vec());
        }
        let done = ops.iter().map(|op| self.apply_one(op)).collect();
        (Outcome::Ok, done)
    }

    /// Whether every transfer and bounded increment can go through, in order.
    fn feasible(&self, ops: &[MicroOp]) -> bool {
        let mut balances: HashMap<u64, i64> = HashMap::new();
        let mut counters: HashMap<u64, i64> = HashMap::new();
        // Scan rows: key -> present, as this transaction leaves it.
        let mut rows: HashMap<u64, bool> = HashMap::new();
        for op in ops {
            match *op {
                MicroOp::Transfer { from, to, amount } => {
                    let (Some(&f), Some(&t)) = (
                        self.balances.get(from as usize),
                        self.balances.get(to as usize),
                    ) else {
                        return false;
                    };
                    let f = balances.entry(from).or_insert(f);
                    if *f < amount {
                        return false;
                    }
                    *f -= amount;
                    *balances.entry(to).or_insert(t) += amount;
                }
                MicroOp::Increment { key, amount } => {
                    let c = counters
                        .entry(key)
                        .or_insert(self.counters.get(&key).copied().unwrap_or(0));
                    *c += amount;
                    if self.counter_bound.is_some_and(|bound| *c > bound) {
                        return false;
                    }
                }
                MicroOp::Insert { key, .. } => {
                    if *rows.entry(key).or_insert(self.rows.contains_key(&key)) {
                        return false;
                    }
                    rows.insert(key, true);
                }
                MicroOp::Delete { key, .. } => {
                    if !*rows.entry(key).or_insert(self.rows.contains_key(&key)) {
                        return false;
                    }
                    rows.insert(key, false);
                }
                _ => {}
            }
        }
        true
    }

    /// One micro-op; must only be called on feasible transactions.
    pub fn apply_one(&mut self, op: &MicroOp) -> MicroOp {
        match *op {
            MicroOp::Append { key, value } => {
                self.lists.entry(key).or_default().push(value);
                op.clone()
            }
            MicroOp::Read { key, .. } => MicroOp::Read {
                key,
                value: Some(self.lists.get(&key).cloned().unwrap_or_default()),
            },
            MicroOp::Write { key, value } => {
                self.registers.insert(key, value);
                op.clone()
            }
            MicroOp::ReadReg { key, .. } => MicroOp::ReadReg {
                key,
                value: self.registers.get(&key).copied(),
            },
            MicroOp::Transfer { from, to, amount } => {
                if let Some(f) = self.balances.get_mut(from as usize) {
                    *f -= amount;
                }
                if let Some(t) = self.balances.get_mut(to as usize) {
                    *t += amount;
                }
                op.clone()
            }
            MicroOp::ReadBank { .. } => MicroOp::ReadBank {
                balances: Some(self.balances.clone()),
            },
            MicroOp::Increment { key, amount } => {
                *self.counters.entry(key).or_insert(0) += amount;
                op.clone()
            }
            MicroOp::ReadCounter { key, .. } => MicroOp::ReadCounter {
                key,
                value: Some(self.counters.get(&key).copied().unwrap_or(0)),
            },
            MicroOp::Scan {
                lower,
                upper,
                reverse,
                limit,
                ..
            } => {
                let mut store = scan::ModelStore::new(&mut self.rows);
                let rows = scan::ScanStore::scan(&mut store, lower, upper, reverse, limit)
                    .expect("model scans cannot fail");
                MicroOp::Scan {
                    lower,
                    upper,
                    reverse,
                    limit,
                    rows: Some(rows),
                }
            }
            MicroOp::Insert { key, value } => {
                self.rows.insert(key, value);
                op.clone()
            }
            MicroOp::Delete { key, .. } => MicroOp::Delete {
                key,
                value: self.rows.remove(&key),
            },
        }
    }
}

/// Parameters of [`simulate`].
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub ops: usize,
    pub clients: u64,
    pub seed: u64,
    /// Chance that an op's outcome is lost (recorded `Unknown`; it takes
    /// effect or not at random).
    pub unknown_probability: f64,
}

/// A strictly serializable history: each transaction takes effect atomically
/// at a random instant between its invocation and completion, in a correct
/// [`Model`]. Virtual clients run one op at a time with overlapping ops.
pub fn simulate(workload: &WorkloadConfig, sim: &SimConfig) -> History {
    assert!(sim.clients > 0);
    if workload.kind == WorkloadKind::Scan {
        return scan::simulate(&workload.scan, sim);
    }
    let mut generator = Generator::new(workload.clone(), sim.seed);
    let mut rng = SmallRng::seed_from_u64(sim.seed ^ 0x5eed);
    // (commit point, op) of every op, with times in ns; clients ordered by
    // their next free instant so invocations interleave.
    let mut clock: BinaryHeap<std::cmp::Reverse<(u64, u64)>> = (0..sim.clients)
        .map(|c| std::cmp::Reverse((c, c)))
        .collect();
    let mut planned = Vec::with_capacity(sim.ops);
    for id in 0..sim.ops as u64 {
        let std::cmp::Reverse((start_ns, process)) = clock.pop().expect("clients > 0");
        let duration_ns = rng.random_range(1_000..100_000u64);
        let commit_ns = start_ns + rng.random_range(1..duration_ns);
        let complete_ns = start_ns + duration_ns;
        let unknown = rng.random_bool(sim.unknown_probability);
        let applies = !unknown || rng.random_bool(0.5);
        planned.push((
            commit_ns,
            applies,
            unknown,
            Op {
                id,
                process,
                invoke_ns: start_ns,
                complete_ns: Some(complete_ns),
                outcome: Outcome::Ok,
                ops: generator.next_txn(),
            },
        ));
        let gap_ns = rng.random_range(0..5_000u64);
        clock.push(std::cmp::Reverse((complete_ns + gap_ns, process)));
    }
    planned.sort_by_key(|(commit_ns, ..)| *commit_ns);
    let mut model = Model::new(workload);
    let mut ops = Vec::with_capacity(planned.len());
    for (_, applies, unknown, mut op) in planned {
        if applies {
            let (outcome, done) = model.apply(&op.ops);
            op.outcome = outcome;
            op.ops = done;
        } else {
            op.outcome = Outcome::Fail;
        }
        if unknown {
            op.outcome = Outcome::Unknown;
            op.complete_ns = None;
            op.ops = strip_reads(op.ops);
        }
        ops.push(op);
    }
    ops.sort_by_key(|op| op.id);
    History::new(workload.meta(), ops)
}

/// An op whose outcome is unknown also has unknown read results.
pub fn strip_reads(ops: Vec<MicroOp>) -> Vec<MicroOp> {
    ops.into_iter()
        .map(|op| match op {
            MicroOp::Read { key, .. } => MicroOp::Read { key, value: None },
            MicroOp::ReadReg { key, .. } => MicroOp::ReadReg { key, value: None },
            MicroOp::ReadBank { .. } => MicroOp::ReadBank { balances: None },
            MicroOp::ReadCounter { key, .. } => MicroOp::ReadCounter { key, value: None },
            MicroOp::Scan {
                lower,
                upper,
                reverse,
                limit,
                ..
            } => MicroOp::Scan {
                lower,
                upper,
                reverse,
                limit,
                rows: None,
            },
            MicroOp::Delete { key, .. } => MicroOp::Delete { key, value: None },
            other => other,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generators_are_deterministic_and_values_unique() {
        let config = WorkloadConfig::new(WorkloadKind::ListAppend);
        let mut a = Generator::new(config.clone(), 7);
        let mut b = Generator::new(config, 7);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1000 {
            let txn = a.next_txn();
            assert_eq!(txn, b.next_txn());
            assert!((1..=4).contains(&txn.len()));
            for op in txn {
                if let MicroOp::Append { value, .. } = op {
                    assert!(seen.insert(value), "value {value} repeated");
                }
            }
        }
        // 1000 txns of ~1.25 appends each retire keys after 32 writes.
        assert!(a.next_key > 5, "keys were never retired");
    }

    #[test]
    fn model_bank_conserves_and_refuses_overdrafts() {
        let config = WorkloadConfig::new(WorkloadKind::Bank);
        let mut model = Model::new(&config);
        let (outcome, _) = model.apply(&[MicroOp::Transfer {
            from: 0,
            to: 1,
            amount: 101,
        }]);
        assert_eq!(outcome, Outcome::Fail);
        let (outcome, _) = model.apply(&[MicroOp::Transfer {
            from: 0,
            to: 1,
            amount: 100,
        }]);
        assert_eq!(outcome, Outcome::Ok);
        assert_eq!(model.balances.iter().sum::<i64>(), 500);
        assert_eq!(model.balances[0], 0);
    }

    #[test]
    fn simulated_history_has_overlapping_ops() {
        let history = simulate(
            &WorkloadConfig::new(WorkloadKind::ListAppend),
            &SimConfig {
                ops: 200,
                clients: 4,
                seed: 1,
                unknown_probability: 0.0,
            },
        );
        assert_eq!(history.ops.len(), 200);
        let overlapping = history
            .ops
            .windows(2)
            .any(|w| w[1].invoke_ns < w[0].complete_ns.unwrap() && w[0].process != w[1].process);
        assert!(overlapping);
    }
}

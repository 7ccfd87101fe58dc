//! Bank and counter histories: invariants over values rather than a graph.
//!
//! Bank: every ok whole-bank read returns every account, sums to the
//! conserved total and has no negative balance.
//!
//! Counter: a read of key `k` by op R must lie between
//! - lower: the increments of `k` by ok ops that completed before R was
//!   invoked (they certainly precede it), and
//! - upper: the increments of `k` by ok or unknown ops invoked before R
//!   completed (the most that could precede it),
//!
//! plus R's own increments of `k` before the read; and never above the bound.

use std::collections::HashMap;

use super::{AnomalyKind, CheckError, Report};
use crate::history::{History, MicroOp, Op, Outcome};

pub(super) fn check_bank(history: &History, report: &mut Report) -> Result<(), CheckError> {
    let missing = |field| CheckError::MissingMeta {
        workload: "bank",
        field,
    };
    let total = history.meta.bank_total.ok_or(missing("bank_total"))?;
    let accounts = history.meta.bank_accounts.ok_or(missing("bank_accounts"))?;
    for op in &history.ops {
        for micro in &op.ops {
            match micro {
                MicroOp::Transfer { .. } => {}
                MicroOp::ReadBank { balances } => {
                    if op.outcome == Outcome::Ok {
                        check_bank_read(op, balances.as_deref(), total, accounts, report)?;
                    }
                }
                _ => {
                    return Err(CheckError::WrongWorkload {
                        id: op.id,
                        found: "non-bank",
                        workload: "bank",
                    })
                }
            }
        }
    }
    Ok(())
}

fn check_bank_read(
    op: &Op,
    balances: Option<&[i64]>,
    total: i64,
    accounts: u64,
    report: &mut Report,
) -> Result<(), CheckError> {
    let balances = balances.ok_or_else(|| CheckError::BadOp {
        id: op.id,
        message: "ok bank read without balances".into(),
    })?;
    // i128: a corrupted history could hold balances whose sum overflows i64.
    let sum: i128 = balances.iter().map(|&b| i128::from(b)).sum();
    if balances.len() as u64 != accounts || sum != i128::from(total) {
        report.push(
            AnomalyKind::BankTotal,
            vec![op.id],
            format!(
                "T{} read {} accounts {balances:?} summing to {sum}; expected {accounts} accounts summing to {total}",
                op.id,
                balances.len()
            ),
        );
    }
    let negative: Vec<(usize, i64)> = balances
        .iter()
        .copied()
        .enumerate()
        .filter(|&(_, b)| b < 0)
        .collect();
    if !negative.is_empty() {
        report.push(
            AnomalyKind::BankNegative,
            vec![op.id],
            format!(
                "T{} read negative balances (account, balance) {negative:?}",
                op.id
            ),
        );
    }
    Ok(())
}

/// Increments of one key, sorted by a time, with running sums, so "how much
/// was added by ops whose time is below t" is one binary search.
struct Cumulative {
    /// (time, running sum including this increment)
    points: Vec<(u64, i128)>,
}

impl Cumulative {
    fn new(mut items: Vec<(u64, i64)>) -> Self {
        items.sort_unstable();
        let mut sum = 0i128;
        let points = items
            .into_iter()
            .map(|(t, amount)| {
                sum += i128::from(amount);
                (t, sum)
            })
            .collect();
        Cumulative { points }
    }

    /// Sum of increments with time strictly below `t`.
    fn before(&self, t: u64) -> i128 {
        let n = self.points.partition_point(|&(time, _)| time < t);
        if n == 0 {
            0
        } else {
            self.points[n - 1].1
        }
    }
}

pub(super) fn check_counter(history: &History, report: &mut Report) -> Result<(), CheckError> {
    let ops = &history.ops;
    // key -> ok increments by completion time; ok|unknown ones by invocation.
    let mut certain: HashMap<u64, Vec<(u64, i64)>> = HashMap::new();
    let mut possible: HashMap<u64, Vec<(u64, i64)>> = HashMap::new();
    for op in ops {
        for micro in &op.ops {
            match *micro {
                MicroOp::Increment { key, amount } => {
                    if let (Outcome::Ok, Some(done)) = (op.outcome, op.complete_ns) {
                        certain.entry(key).or_default().push((done, amount));
                    }
                    if op.outcome != Outcome::Fail {
                        possible
                            .entry(key)
                            .or_default()
                            .push((op.invoke_ns, amount));
                    }
                }
                MicroOp::ReadCounter { .. } => {}
                _ => {
                    return Err(CheckError::WrongWorkload {
                        id: op.id,
                        found: "non-counter",
                        workload: "counter",
                    })
                }
            }
        }
    }
    let certain: HashMap<u64, Cumulative> = certain
        .into_iter()
        .map(|(k, v)| (k, Cumulative::new(v)))
        .collect();
    let possible: HashMap<u64, Cumulative> = possible
        .into_iter()
        .map(|(k, v)| (k, Cumulative::new(v)))
        .collect();
    for op in ops.iter().filter(|op| op.outcome == Outcome::Ok) {
        check_counter_reads(op, &certain, &possible, history.meta.counter_bound, report)?;
    }
    Ok(())
}

fn check_counter_reads(
    op: &Op,
    certain: &HashMap<u64, Cumulative>,
    possible: &HashMap<u64, Cumulative>,
    bound: Option<i64>,
    report: &mut Report,
) -> Result<(), CheckError> {
    let done = op.complete_ns.unwrap_or(op.invoke_ns);
    // This op's own increments so far, per key.
    let mut own: HashMap<u64, i128> = HashMap::new();
    for micro in &op.ops {
        match *micro {
            MicroOp::Increment { key, amount } => {
                *own.entry(key).or_insert(0) += i128::from(amount)
            }
            MicroOp::ReadCounter { key, value } => {
                let value = value.ok_or_else(|| CheckError::BadOp {
                    id: op.id,
                    message: format!("ok counter read of key {key} without a value"),
                })?;
                let own_so_far = own.get(&key).copied().unwrap_or(0);
                let own_total: i128 = op
                    .ops
                    .iter()
                    .map(|m| match *m {
                        MicroOp::Increment { key: k, amount } if k == key => i128::from(amount),
                        _ => 0,
                    })
                    .sum();
                let lower = certain.get(&key).map_or(0, |c| c.before(op.invoke_ns)) + own_so_far;
                // `possible` counts this op's own increments when it was
                // invoked strictly before it completed; only those before the
                // read belong to it.
                let counted_self = if op.invoke_ns < done { own_total } else { 0 };
                let upper =
                    possible.get(&key).map_or(0, |c| c.before(done)) - counted_self + own_so_far;
                let v = i128::from(value);
                if v < lower || v > upper {
                    report.push(
                        AnomalyKind::CounterOutOfRange,
                        vec![op.id],
                        format!("T{} read counter {key} = {value}; the increments around it allow {lower}..={upper}", op.id),
                    );
                }
                if let Some(b) = bound.filter(|&b| value > b) {
                    report.push(
                        AnomalyKind::CounterBeyondBound,
                        vec![op.id],
                        format!(
                            "T{} read counter {key} = {value}, beyond the bound {b}",
                            op.id
                        ),
                    );
                }
            }
            _ => {}
        }
    }
    Ok(())
}

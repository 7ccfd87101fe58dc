//! Rw-register: written values are unique per key, so a read names its
//! writer (wr edges are exact). A register read shows only the latest
//! version, so the version order is only partly known. What is inferred,
//! and why it is sound:
//!
//! - the initial (nil) state precedes every write, so a read of nil precedes
//!   every writer of the key (rw);
//! - a transaction that read version `a` of a key (before writing it) and
//!   then wrote `b` installed `b` directly after `a`: ww from `a`'s writer,
//!   rw from every other reader of `a`;
//! - under strict serializability, a writer that completed before another
//!   writer of the key was invoked installed the earlier version: the same
//!   edges, labelled `ww(rt)`/`rw(rt)` so a cycle that needs them is reported
//!   as a real-time anomaly.
//!
//! Not inferred: the order of two concurrent blind writes nobody read in
//! between; a transaction's intermediate writes (only each transaction's
//! last write to a key is a version; reading an earlier one is G1b).

use std::collections::HashMap;

use super::{is_node, realtime_pairs, AnomalyKind, CheckError, Edge, EdgeKind, Report};
use crate::history::{MicroOp, Op, Outcome};

#[derive(Clone, Copy)]
struct Writer {
    node: u32,
    final_in_txn: bool,
}

/// A read of a key's state from before the reader's own writes to it.
#[derive(Clone, Copy)]
struct ExternalRead {
    node: u32,
    value: Option<u64>,
}

#[derive(Default)]
struct KeyFacts {
    reads: Vec<ExternalRead>,
    /// Each transaction's last write to the key: node -> value.
    versions: Vec<(u32, u64)>,
    /// Versions known to follow directly or by real time: (from, to, via_rt),
    /// `from == None` for nil.
    order: Vec<(Option<u64>, u64, bool)>,
}

pub(super) fn analyze(ops: &[Op], report: &mut Report) -> Result<Vec<Edge>, CheckError> {
    let writers = index_writers(ops)?;
    let mut facts: HashMap<u64, KeyFacts> = HashMap::new();
    for i in 0..ops.len() {
        scan_txn(ops, i, &writers, &mut facts, report)?;
    }
    let mut keys: Vec<u64> = facts.keys().copied().collect();
    keys.sort_unstable();
    let mut edges = Vec::new();
    for key in keys {
        let f = facts.get_mut(&key).expect("key listed");
        add_realtime_order(ops, f);
        key_edges(ops, key, f, &writers, &mut edges);
    }
    Ok(edges)
}

fn index_writers(ops: &[Op]) -> Result<HashMap<(u64, u64), Writer>, CheckError> {
    let mut writers = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        for (j, micro) in op.ops.iter().enumerate() {
            match *micro {
                MicroOp::Write { key, value } => {
                    let final_in_txn = !op.ops[j + 1..]
                        .iter()
                        .any(|m| matches!(m, MicroOp::Write { key: k, .. } if *k == key));
                    let w = Writer {
                        node: i as u32,
                        final_in_txn,
                    };
                    if let Some(first) = writers.insert((key, value), w) {
                        return Err(CheckError::NonUniqueWrite {
                            key,
                            value,
                            first: ops[first.node as usize].id,
                            second: op.id,
                        });
                    }
                }
                MicroOp::ReadReg { .. } => {}
                _ => {
                    return Err(CheckError::WrongWorkload {
                        id: op.id,
                        found: "non-register",
                        workload: "rw-register",
                    })
                }
            }
        }
    }
    Ok(writers)
}

/// Walks one transaction: internal consistency, its external reads (with
/// G1a/G1b/garbage checks), its versions and read-then-write orders.
fn scan_txn(
    ops: &[Op],
    i: usize,
    writers: &HashMap<(u64, u64), Writer>,
    facts: &mut HashMap<u64, KeyFacts>,
    report: &mut Report,
) -> Result<(), CheckError> {
    let op = &ops[i];
    // key -> what this txn last saw or wrote there: (value, was it a write)
    let mut local: HashMap<u64, (Option<u64>, bool)> = HashMap::new();
    for micro in &op.ops {
        match *micro {
            MicroOp::Write { key, value } => {
                let f = facts.entry(key).or_default();
                if let Some(&(seen, false)) = local.get(&key) {
                    if op.outcome == Outcome::Ok {
                        f.order.push((seen, value, false));
                    }
                }
                local.insert(key, (Some(value), true));
            }
            MicroOp::ReadReg { key, value } if op.outcome == Outcome::Ok => match local.get(&key) {
                Some(&(expected, _)) if expected != value => report.push(
                    AnomalyKind::Internal,
                    vec![op.id],
                    format!("T{} read key {key} as {value:?} after it had read or written {expected:?} there", op.id),
                ),
                Some(_) => {}
                None => {
                    local.insert(key, (value, false));
                    check_read_value(ops, i, key, value, writers, report);
                    facts.entry(key).or_default().reads.push(ExternalRead {
                        node: i as u32,
                        value,
                    });
                }
            },
            _ => {}
        }
    }
    if is_node(ops, i) {
        for (key, (value, wrote)) in local {
            if let (true, Some(v)) = (wrote, value) {
                facts.entry(key).or_default().versions.push((i as u32, v));
            }
        }
    }
    Ok(())
}

/// Garbage, aborted and intermediate reads.
fn check_read_value(
    ops: &[Op],
    reader: usize,
    key: u64,
    value: Option<u64>,
    writers: &HashMap<(u64, u64), Writer>,
    report: &mut Report,
) {
    let Some(v) = value else { return };
    let r = ops[reader].id;
    let Some(w) = writers.get(&(key, v)) else {
        report.push(
            AnomalyKind::NeverWritten,
            vec![r],
            format!("T{r} read {v} from key {key}, which no transaction wrote"),
        );
        return;
    };
    let wop = &ops[w.node as usize];
    if w.node as usize == reader {
        report.push(
            AnomalyKind::Internal,
            vec![r],
            format!("T{r} read {v} from key {key} before writing it itself"),
        );
    } else if wop.outcome == Outcome::Fail {
        report.push(
            AnomalyKind::G1a,
            vec![r, wop.id],
            format!(
                "T{r} read {v} from key {key}, written by T{} which failed (aborted)",
                wop.id
            ),
        );
    } else if !w.final_in_txn {
        report.push(
            AnomalyKind::G1b,
            vec![r, wop.id],
            format!("T{r} read {v} from key {key}, an intermediate write of T{} which wrote the key again later", wop.id),
        );
    }
}

/// Writers that completed before another writer of the key was invoked
/// installed the earlier version (assuming strict serializability).
fn add_realtime_order(ops: &[Op], f: &mut KeyFacts) {
    let value_of: HashMap<u32, u64> = f.versions.iter().copied().collect();
    let items = f.versions.iter().map(|&(node, _)| {
        (
            node,
            ops[node as usize].invoke_ns,
            ops[node as usize].complete_ns,
        )
    });
    for (a, b) in realtime_pairs(items) {
        f.order.push((Some(value_of[&a]), value_of[&b], true));
    }
}

fn key_edges(
    ops: &[Op],
    key: u64,
    f: &KeyFacts,
    writers: &HashMap<(u64, u64), Writer>,
    edges: &mut Vec<Edge>,
) {
    let mut readers: HashMap<Option<u64>, Vec<u32>> = HashMap::new();
    for r in &f.reads {
        readers.entry(r.value).or_default().push(r.node);
        // wr: the read's writer precedes it.
        if let Some(w) = r.value.and_then(|v| writers.get(&(key, v))) {
            if w.node != r.node && is_node(ops, w.node as usize) {
                edges.push(edge(
                    w.node,
                    r.node,
                    EdgeKind::Wr,
                    key,
                    r.value.unwrap_or(0),
                ));
            }
        }
    }
    let node_writing = |v: u64| {
        writers
            .get(&(key, v))
            .map(|w| w.node)
            .filter(|&n| is_node(ops, n as usize))
    };
    // nil precedes every version.
    for &r in readers.get(&None).into_iter().flatten() {
        for &(w, v) in &f.versions {
            if w != r {
                edges.push(edge(r, w, EdgeKind::Rw, key, v));
            }
        }
    }
    for &(from, to, via_rt) in &f.order {
        let Some(to_node) = node_writing(to) else {
            continue;
        };
        let (ww, rw) = if via_rt {
            (EdgeKind::WwRt, EdgeKind::RwRt)
        } else {
            (EdgeKind::Ww, EdgeKind::Rw)
        };
        if let Some(from_node) = from.and_then(node_writing) {
            edges.push(edge(from_node, to_node, ww, key, to));
        }
        if from.is_none() {
            continue; // nil readers are handled above
        }
        for &r in readers.get(&from).into_iter().flatten() {
            if r != to_node {
                edges.push(edge(r, to_node, rw, key, to));
            }
        }
    }
}

fn edge(from: u32, to: u32, kind: EdgeKind, key: u64, value: u64) -> Edge {
    Edge {
        from,
        to,
        kind,
        key,
        value,
    }
}

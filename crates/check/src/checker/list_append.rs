//! List-append: every append's value is unique per key, and reads return
//! whole lists, so each read names its writers and the order they were
//! applied in. The longest read of a key is its version order (every other
//! read must be a prefix of it); each position's writer follows the one
//! before (ww), each read follows the writer of its last element (wr) and
//! precedes the writer of the element after (rw).

use std::collections::{HashMap, HashSet};

use super::{is_node, AnomalyKind, CheckError, Edge, EdgeKind, Report};
use crate::history::{MicroOp, Op, Outcome};

/// Who appended a value, and whether it was that op's last append to the key
/// (a read ending at a non-final append saw an intermediate state: G1b).
#[derive(Clone, Copy)]
struct Writer {
    node: u32,
    final_in_txn: bool,
    seen: bool,
}

/// One ok read of a key.
struct ReadOf<'h> {
    node: u32,
    list: &'h [u64],
}

type WriterMap = HashMap<(u64, u64), Writer>;

pub(super) fn analyze(ops: &[Op], report: &mut Report) -> Result<Vec<Edge>, CheckError> {
    let mut writers = index_writers(ops)?;
    let reads = collect_reads(ops)?;
    check_internal(ops, report);
    let mut edges = Vec::new();
    let mut keys: Vec<u64> = reads.keys().copied().collect();
    keys.sort_unstable();
    for key in keys {
        let key_reads = &reads[&key];
        check_elements(ops, key, key_reads, &mut writers, report);
        let order = version_order(ops, key, key_reads, report);
        ww_edges(key, order, &writers, ops, &mut edges);
        for read in key_reads {
            read_edges(ops, key, read, order, &writers, report, &mut edges);
        }
    }
    lost_writes(ops, &reads, &writers, report);
    Ok(edges)
}

fn wrong_workload(op: &Op) -> CheckError {
    CheckError::WrongWorkload {
        id: op.id,
        found: "non-list",
        workload: "list-append",
    }
}

/// Maps every appended (key, value) to its writer; values must be unique.
fn index_writers(ops: &[Op]) -> Result<WriterMap, CheckError> {
    let mut writers: WriterMap = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        for (j, micro) in op.ops.iter().enumerate() {
            let &MicroOp::Append { key, value } = micro else {
                continue;
            };
            let final_in_txn = !op.ops[j + 1..]
                .iter()
                .any(|m| matches!(m, MicroOp::Append { key: k, .. } if *k == key));
            let writer = Writer {
                node: i as u32,
                final_in_txn,
                seen: false,
            };
            if let Some(first) = writers.insert((key, value), writer) {
                return Err(CheckError::NonUniqueWrite {
                    key,
                    value,
                    first: ops[first.node as usize].id,
                    second: op.id,
                });
            }
        }
    }
    Ok(writers)
}

/// The ok reads of each key. Reads of unknown or failed ops tell nothing.
fn collect_reads(ops: &[Op]) -> Result<HashMap<u64, Vec<ReadOf<'_>>>, CheckError> {
    let mut reads: HashMap<u64, Vec<ReadOf<'_>>> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        for micro in &op.ops {
            match micro {
                MicroOp::Append { .. } => {}
                MicroOp::Read { key, value } => {
                    if op.outcome != Outcome::Ok {
                        continue;
                    }
                    let Some(list) = value else {
                        return Err(CheckError::BadOp {
                            id: op.id,
                            message: format!("ok op's read of key {key} has no value"),
                        });
                    };
                    reads.entry(*key).or_default().push(ReadOf {
                        node: i as u32,
                        list,
                    });
                }
                _ => return Err(wrong_workload(op)),
            }
        }
    }
    Ok(reads)
}

/// Within one ok transaction, a read of a key must show its earlier read of
/// that key plus its own appends since, or end with its own appends if it had
/// not read the key before.
fn check_internal(ops: &[Op], report: &mut Report) {
    for op in ops.iter().filter(|op| op.outcome == Outcome::Ok) {
        // key -> (last list read, if any; own appends since then)
        let mut state: HashMap<u64, (Option<Vec<u64>>, Vec<u64>)> = HashMap::new();
        for micro in &op.ops {
            match micro {
                MicroOp::Append { key, value } => state.entry(*key).or_default().1.push(*value),
                MicroOp::Read {
                    key,
                    value: Some(list),
                } => {
                    let (known, own) = state.entry(*key).or_default();
                    let consistent = match known {
                        Some(prev) => {
                            list.len() == prev.len() + own.len()
                                && list.starts_with(prev)
                                && list.ends_with(own)
                        }
                        None => list.ends_with(own),
                    };
                    if !consistent {
                        report.push(
                            AnomalyKind::Internal,
                            vec![op.id],
                            format!(
                                "T{} read key {key} as {list:?}, inconsistent with its own earlier read {:?} and appends {own:?}",
                                op.id, known
                            ),
                        );
                    }
                    *known = Some(list.clone());
                    own.clear();
                }
                _ => {}
            }
        }
    }
}

/// Duplicates, garbage reads and aborted reads, element by element.
fn check_elements(
    ops: &[Op],
    key: u64,
    reads: &[ReadOf<'_>],
    writers: &mut WriterMap,
    report: &mut Report,
) {
    let mut seen_in_read = HashSet::new();
    for read in reads {
        let reader = ops[read.node as usize].id;
        seen_in_read.clear();
        let mut duplicated = Vec::new();
        for &v in read.list {
            if !seen_in_read.insert(v) {
                duplicated.push(v);
            }
            let Some(writer) = writers.get_mut(&(key, v)) else {
                report.push(
                    AnomalyKind::NeverWritten,
                    vec![reader],
                    format!("T{reader} read {v} in key {key}, which no transaction appended"),
                );
                continue;
            };
            writer.seen = true;
            let w = &ops[writer.node as usize];
            if w.outcome == Outcome::Fail {
                report.push(
                    AnomalyKind::G1a,
                    vec![reader, w.id],
                    format!(
                        "T{reader} read {v} in key {key}, appended by T{} which failed (aborted)",
                        w.id
                    ),
                );
            }
        }
        if !duplicated.is_empty() {
            report.push(
                AnomalyKind::DuplicateElements,
                vec![reader],
                format!(
                    "T{reader} read key {key} as {:?}: {duplicated:?} appear more than once",
                    read.list
                ),
            );
        }
    }
}

/// The longest read is the version order; a read that is not a prefix of
/// it (nor it of the read) contradicts it. One anomaly per key.
fn version_order<'h>(ops: &[Op], key: u64, reads: &[ReadOf<'h>], report: &mut Report) -> &'h [u64] {
    let longest = reads
        .iter()
        .map(|r| r.list)
        .max_by_key(|l| l.len())
        .unwrap_or(&[]);
    let conflicting = reads.iter().find(|r| !longest.starts_with(r.list));
    if let Some(bad) = conflicting {
        let holder = reads
            .iter()
            .find(|r| r.list == longest)
            .map_or(0, |r| r.node);
        let (a, b) = (ops[holder as usize].id, ops[bad.node as usize].id);
        report.push(
            AnomalyKind::IncompatibleOrder,
            vec![a, b],
            format!("key {key}: T{a} read {longest:?} but T{b} read {:?}; neither is a prefix of the other", bad.list),
        );
    }
    longest
}

fn ww_edges(key: u64, order: &[u64], writers: &WriterMap, ops: &[Op], edges: &mut Vec<Edge>) {
    for pair in order.windows(2) {
        let (Some(a), Some(b)) = (writers.get(&(key, pair[0])), writers.get(&(key, pair[1])))
        else {
            continue;
        };
        if a.node != b.node && is_node(ops, a.node as usize) && is_node(ops, b.node as usize) {
            edges.push(Edge {
                from: a.node,
                to: b.node,
                kind: EdgeKind::Ww,
                key,
                value: pair[1],
            });
        }
    }
}

/// The wr edge into a read and the rw edge out of it, and G1b.
fn read_edges(
    ops: &[Op],
    key: u64,
    read: &ReadOf<'_>,
    order: &[u64],
    writers: &WriterMap,
    report: &mut Report,
    edges: &mut Vec<Edge>,
) {
    // The reader's own appends at the end of its read are internal; what it
    // observed of others is the list before them.
    let mut seen = read.list;
    while let Some((&last, rest)) = seen.split_last() {
        match writers.get(&(key, last)) {
            Some(w) if w.node == read.node => seen = rest,
            _ => break,
        }
    }
    let next_position = if let Some(&last) = seen.last() {
        let Some(w) = writers.get(&(key, last)) else {
            return; // never written: reported already
        };
        if is_node(ops, w.node as usize) {
            edges.push(Edge {
                from: w.node,
                to: read.node,
                kind: EdgeKind::Wr,
                key,
                value: last,
            });
        }
        if !w.final_in_txn {
            let (r, wid) = (ops[read.node as usize].id, ops[w.node as usize].id);
            report.push(
                AnomalyKind::G1b,
                vec![r, wid],
                format!("T{r} read key {key} ending in {last}, an intermediate append of T{wid}, which appended to key {key} again later"),
            );
        }
        if !order.starts_with(seen) {
            // The read contradicts the version order (reported as an
            // incompatible order); what it did not see is unknown.
            return;
        }
        seen.len()
    } else {
        0
    };
    let Some(&next) = order.get(next_position) else {
        return;
    };
    let Some(w) = writers.get(&(key, next)) else {
        return;
    };
    if w.node != read.node && is_node(ops, w.node as usize) {
        edges.push(Edge {
            from: read.node,
            to: w.node,
            kind: EdgeKind::Rw,
            key,
            value: next,
        });
    }
}

/// An ok append that no read shows, although some ok read of its key was
/// invoked after the append completed: that read should have shown it.
fn lost_writes(
    ops: &[Op],
    reads: &HashMap<u64, Vec<ReadOf<'_>>>,
    writers: &WriterMap,
    report: &mut Report,
) {
    // key -> the ok read invoked last
    let latest: HashMap<u64, u32> = reads
        .iter()
        .filter_map(|(&key, rs)| {
            rs.iter()
                .max_by_key(|r| ops[r.node as usize].invoke_ns)
                .map(|r| (key, r.node))
        })
        .collect();
    let mut lost: Vec<(u64, u64, u32, u32)> = writers
        .iter()
        .filter(|(_, w)| !w.seen && ops[w.node as usize].outcome == Outcome::Ok)
        .filter_map(|(&(key, value), w)| {
            let reader = *latest.get(&key)?;
            let written_ns = ops[w.node as usize].complete_ns?;
            (written_ns < ops[reader as usize].invoke_ns).then_some((key, value, w.node, reader))
        })
        .collect();
    lost.sort_unstable();
    for (key, value, writer, reader) in lost {
        let (w, r) = (ops[writer as usize].id, ops[reader as usize].id);
        report.push(
            AnomalyKind::LostWrite,
            vec![w, r],
            format!("T{w}'s append of {value} to key {key} was acknowledged, but T{r}, invoked after it completed, read the key without it (and no read ever showed it)"),
        );
    }
}

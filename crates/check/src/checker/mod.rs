//! The checker: from a [`History`] to a [`Report`] of anomalies.
//!
//! List-append and rw-register histories become a dependency graph (ww, wr,
//! rw edges inferred from the values read, plus real-time edges for strict
//! serializability); every cycle is an anomaly, classified as Adya and Elle
//! do. Non-cycle anomalies (aborted and intermediate reads, lost writes,
//! garbage reads, duplicates, incompatible orders, internal inconsistency)
//! are found directly. Bank and counter histories are checked against their
//! invariants. See `docs/architecture.md` ("History checker") for what is
//! inferred soundly and what is not.

mod graph;
mod list_append;
mod numeric;
mod register;
mod scan;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::time::Instant;

use serde::Serialize;
use thiserror::Error;

pub use graph::{Edge, EdgeKind, Graph, KindSet};

use crate::history::{History, Op, Outcome, WorkloadKind};

/// Every anomaly class the checker reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum AnomalyKind {
    /// A cycle of write-write edges.
    G0,
    /// Aborted read: a read saw a write of a failed transaction.
    G1a,
    /// Intermediate read: a read saw a state its writer later overwrote
    /// within the same transaction.
    G1b,
    /// A cycle of write-write and write-read edges.
    G1c,
    /// A cycle with exactly one anti-dependency (rw) edge.
    GSingle,
    /// A cycle with two or more anti-dependency edges.
    G2,
    G0Realtime,
    G1cRealtime,
    GSingleRealtime,
    G2Realtime,
    /// An acknowledged write never visible to reads that began after it
    /// completed.
    LostWrite,
    /// A read of a value no transaction wrote.
    NeverWritten,
    /// A list read with the same element twice.
    DuplicateElements,
    /// Two reads of one key that are not prefixes of each other.
    IncompatibleOrder,
    /// A transaction's read disagrees with its own earlier reads and writes.
    Internal,
    /// A whole-bank read whose balances do not sum to the total.
    BankTotal,
    /// A whole-bank read with a negative balance.
    BankNegative,
    /// A counter read outside what the increments around it allow.
    CounterOutOfRange,
    /// A counter read above the workload's bound.
    CounterBeyondBound,
    /// A scan returned rows outside its bounds, out of order, twice, or
    /// more than its limit.
    ScanShape,
    /// A read-only transaction's scans covered a whole group and saw a
    /// number of rows there that no committed state has.
    ScanCount,
    /// A scan (or an insert, which reads the key as absent) did not see a
    /// row that every serial order consistent with real time shows it.
    MissedRow,
}

impl AnomalyKind {
    pub fn name(self) -> &'static str {
        match self {
            AnomalyKind::G0 => "G0",
            AnomalyKind::G1a => "G1a",
            AnomalyKind::G1b => "G1b",
            AnomalyKind::G1c => "G1c",
            AnomalyKind::GSingle => "G-single",
            AnomalyKind::G2 => "G2",
            AnomalyKind::G0Realtime => "G0-realtime",
            AnomalyKind::G1cRealtime => "G1c-realtime",
            AnomalyKind::GSingleRealtime => "G-single-realtime",
            AnomalyKind::G2Realtime => "G2-realtime",
            AnomalyKind::LostWrite => "lost-write",
            AnomalyKind::NeverWritten => "never-written",
            AnomalyKind::DuplicateElements => "duplicate-elements",
            AnomalyKind::IncompatibleOrder => "incompatible-order",
            AnomalyKind::Internal => "internal",
            AnomalyKind::BankTotal => "bank-total",
            AnomalyKind::BankNegative => "bank-negative",
            AnomalyKind::CounterOutOfRange => "counter-out-of-range",
            AnomalyKind::CounterBeyondBound => "counter-beyond-bound",
            AnomalyKind::ScanShape => "scan-shape",
            AnomalyKind::ScanCount => "scan-count",
            AnomalyKind::MissedRow => "missed-row",
        }
    }

    /// Classifies a cycle by the edges it uses.
    pub fn of_cycle(cycle: &[Edge]) -> AnomalyKind {
        let realtime = cycle.iter().any(|e| e.kind.is_realtime());
        let rw = cycle.iter().filter(|e| e.kind.is_rw()).count();
        let wr = cycle
            .iter()
            .any(|e| matches!(e.kind, EdgeKind::Wr | EdgeKind::WrRt));
        match (rw, wr, realtime) {
            (0, false, false) => AnomalyKind::G0,
            (0, true, false) => AnomalyKind::G1c,
            (1, _, false) => AnomalyKind::GSingle,
            (_, _, false) => AnomalyKind::G2,
            (0, false, true) => AnomalyKind::G0Realtime,
            (0, true, true) => AnomalyKind::G1cRealtime,
            (1, _, true) => AnomalyKind::GSingleRealtime,
            (_, _, true) => AnomalyKind::G2Realtime,
        }
    }
}

impl fmt::Display for AnomalyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One anomaly: its class, the op ids involved and a human explanation.
#[derive(Clone, Debug, Serialize)]
pub struct Anomaly {
    pub kind: AnomalyKind,
    pub ops: Vec<u64>,
    pub explanation: String,
}

/// At most this many anomalies of one class keep their explanation; all are
/// counted.
pub const MAX_EXPLAINED_PER_KIND: usize = 20;

/// The verdict.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub workload: WorkloadKind,
    pub ops_ok: usize,
    pub ops_failed: usize,
    pub ops_unknown: usize,
    /// Graph size (list-append, rw-register).
    pub graph_nodes: usize,
    pub graph_edges: usize,
    pub check_duration_ms: u64,
    pub counts: BTreeMap<AnomalyKind, usize>,
    pub anomalies: Vec<Anomaly>,
}

impl Report {
    fn new(history: &History) -> Self {
        Report {
            workload: history.meta.workload,
            ops_ok: history.count(Outcome::Ok),
            ops_failed: history.count(Outcome::Fail),
            ops_unknown: history.count(Outcome::Unknown),
            graph_nodes: 0,
            graph_edges: 0,
            check_duration_ms: 0,
            counts: BTreeMap::new(),
            anomalies: Vec::new(),
        }
    }

    pub fn valid(&self) -> bool {
        self.counts.is_empty()
    }

    pub fn count(&self, kind: AnomalyKind) -> usize {
        self.counts.get(&kind).copied().unwrap_or(0)
    }

    pub fn kinds(&self) -> BTreeSet<AnomalyKind> {
        self.counts.keys().copied().collect()
    }

    pub(crate) fn push(&mut self, kind: AnomalyKind, ops: Vec<u64>, explanation: String) {
        let count = self.counts.entry(kind).or_insert(0);
        *count += 1;
        if *count <= MAX_EXPLAINED_PER_KIND {
            self.anomalies.push(Anomaly {
                kind,
                ops,
                explanation,
            });
        }
    }

    /// One line: the verdict, op counts and anomaly counts by class.
    pub fn summary(&self) -> String {
        let verdict = if self.valid() { "VALID" } else { "INVALID" };
        let mut line = format!(
            "{verdict}: {} history, ops ok {} / failed {} / unknown {}; checked in {} ms",
            self.workload.name(),
            self.ops_ok,
            self.ops_failed,
            self.ops_unknown,
            self.check_duration_ms
        );
        if !self.valid() {
            let counts: Vec<String> = self
                .counts
                .iter()
                .map(|(k, n)| format!("{k} x{n}"))
                .collect();
            line.push_str(&format!("; anomalies: {}", counts.join(", ")));
        }
        line
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.summary())?;
        for a in &self.anomalies {
            writeln!(f, "  {}: {}", a.kind, a.explanation.replace('\n', "\n    "))?;
        }
        Ok(())
    }
}

/// Histories the checker cannot interpret.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CheckError {
    #[error("op {id}: {message}")]
    BadOp { id: u64, message: String },
    #[error("key {key}: value {value} is written by ops {first} and {second}; written values must be unique per key")]
    NonUniqueWrite {
        key: u64,
        value: u64,
        first: u64,
        second: u64,
    },
    #[error("{workload} history needs `{field}` in its meta line")]
    MissingMeta {
        workload: &'static str,
        field: &'static str,
    },
    #[error("{workload} history: bad meta line: {message}")]
    BadMeta {
        workload: &'static str,
        message: String,
    },
    #[error("op {id} holds {found} micro-ops, but this is a {workload} history")]
    WrongWorkload {
        id: u64,
        found: &'static str,
        workload: &'static str,
    },
    #[error("key {key} is written by ops {first} and {second}, which overlap in time; the scan workload never runs two writers of one key at once, so its checker needs them ordered by real time")]
    OverlappingWriters { key: u64, first: u64, second: u64 },
}

/// Checks a history.
pub fn check(history: &History) -> Result<Report, CheckError> {
    let started = Instant::now();
    for op in &history.ops {
        crate::history::validate_op(op)
            .map_err(|message| CheckError::BadOp { id: op.id, message })?;
    }
    let mut report = Report::new(history);
    match history.meta.workload {
        WorkloadKind::ListAppend => {
            let edges = list_append::analyze(&history.ops, &mut report)?;
            find_cycles(&history.ops, edges, &mut report);
        }
        WorkloadKind::RwRegister => {
            let edges = register::analyze(&history.ops, &mut report)?;
            find_cycles(&history.ops, edges, &mut report);
        }
        WorkloadKind::Scan => {
            let edges = scan::analyze(history, &mut report)?;
            find_cycles(&history.ops, edges, &mut report);
        }
        WorkloadKind::Bank => numeric::check_bank(history, &mut report)?,
        WorkloadKind::Counter => numeric::check_counter(history, &mut report)?,
    }
    report.check_duration_ms = started.elapsed().as_millis() as u64;
    Ok(report)
}

/// Whether op `i` is a graph node: failed ops never happened.
fn is_node(ops: &[Op], i: usize) -> bool {
    ops[i].outcome != Outcome::Fail
}

/// Real-time edges, transitively reduced: op B gets an edge from every op in
/// the *frontier* when it is invoked, the completed ops not yet followed by
/// another completed op invoked after them. When C completes, the frontier
/// ops it followed are dropped (C now stands for them) and C joins. Every
/// pair "A completed before B was invoked" stays connected by a path, with
/// about (ops x concurrency) edges instead of ops². Unknown ops never
/// complete, so no real-time edge leaves them; failed ops are not nodes.
pub(crate) fn realtime_edges(ops: &[Op]) -> Vec<Edge> {
    let nodes = (0..ops.len())
        .filter(|&i| is_node(ops, i))
        .map(|i| (i as u32, ops[i].invoke_ns, ops[i].complete_ns));
    realtime_pairs(nodes)
        .into_iter()
        .map(|(from, to)| Edge {
            from,
            to,
            kind: EdgeKind::Rt,
            key: 0,
            value: 0,
        })
        .collect()
}

/// The frontier reduction of "completed before invoked" over
/// `(node, invoke_ns, complete_ns)`; see [`realtime_edges`].
pub(crate) fn realtime_pairs(
    items: impl Iterator<Item = (u32, u64, Option<u64>)>,
) -> Vec<(u32, u32)> {
    // (time, 0 = invoke / 1 = complete, node): invocations first at equal
    // times, because "completed before invoked" must be strict.
    let mut events: Vec<(u64, u8, u32)> = Vec::new();
    for (node, invoke_ns, complete_ns) in items {
        events.push((invoke_ns, 0, node));
        if let Some(done) = complete_ns {
            events.push((done, 1, node));
        }
    }
    events.sort_unstable();
    let mut frontier: BTreeSet<u32> = BTreeSet::new();
    let mut followed: HashMap<u32, Vec<u32>> = HashMap::new();
    let mut pairs = Vec::new();
    for (_, event, node) in events {
        if event == 0 {
            let preds: Vec<u32> = frontier.iter().copied().collect();
            pairs.extend(preds.iter().map(|&from| (from, node)));
            followed.insert(node, preds);
        } else {
            for p in followed.remove(&node).unwrap_or_default() {
                frontier.remove(&p);
            }
            frontier.insert(node);
        }
    }
    pairs
}

/// One search for a class of cycle: the edges it may use, and optionally
/// one edge kind that must appear exactly once (closing the cycle).
struct CycleSearch {
    allowed: KindSet,
    closing: Option<KindSet>,
}

/// From the most to the least severe; each component reports the first that
/// finds a cycle, classified by the edges that cycle actually uses.
fn searches() -> [CycleSearch; 8] {
    use EdgeKind::*;
    let plain = |allowed: &[EdgeKind]| CycleSearch {
        allowed: KindSet::of(allowed),
        closing: None,
    };
    [
        plain(&[Ww]),
        plain(&[Ww, Wr]),
        CycleSearch {
            allowed: KindSet::of(&[Ww, Wr]),
            closing: Some(KindSet::of(&[Rw])),
        },
        plain(&[Ww, Wr, Rw]),
        plain(&[Ww, Rt, WwRt]),
        plain(&[Ww, Wr, Rt, WwRt, WrRt]),
        CycleSearch {
            allowed: KindSet::of(&[Ww, Wr, Rt, WwRt, WrRt]),
            closing: Some(KindSet::of(&[Rw, RwRt])),
        },
        plain(&EdgeKind::ALL),
    ]
}

/// Bounds on the work one component's search may do, so a history with one
/// huge component still finishes: start nodes tried, closing edges tried,
/// nodes visited by BFS.
const MAX_STARTS: usize = 32;
const MAX_CLOSING_EDGES: usize = 512;
const BFS_BUDGET_NODES: usize = 2_000_000;

fn find_cycles(ops: &[Op], mut edges: Vec<Edge>, report: &mut Report) {
    edges.extend(realtime_edges(ops));
    let graph = Graph::new(ops.len(), edges);
    report.graph_nodes = ops.len();
    report.graph_edges = graph.edge_count();
    for component in graph.components() {
        let cycle = searches()
            .iter()
            .find_map(|search| shortest_cycle(&graph, &component, search));
        match cycle {
            Some(cycle) => {
                let kind = AnomalyKind::of_cycle(&cycle);
                let ids = cycle.iter().map(|e| ops[e.from as usize].id).collect();
                report.push(kind, ids, explain_cycle(ops, &cycle));
            }
            None => {
                // Budget exhausted: still a cycle, just not a short one shown.
                let ids = component
                    .iter()
                    .take(10)
                    .map(|&v| ops[v as usize].id)
                    .collect();
                report.push(
                    AnomalyKind::G2Realtime,
                    ids,
                    format!(
                        "a dependency cycle among {} transactions (search budget exhausted before a short cycle was found)",
                        component.len()
                    ),
                );
            }
        }
    }
}

/// A short cycle inside `component` using only the search's edges.
fn shortest_cycle(graph: &Graph, component: &[u32], search: &CycleSearch) -> Option<Vec<Edge>> {
    let mut budget = BFS_BUDGET_NODES;
    let mut best: Option<Vec<Edge>> = None;
    let consider = |cycle: Vec<Edge>, best: &mut Option<Vec<Edge>>| {
        if best.as_ref().is_none_or(|b| cycle.len() < b.len()) {
            *best = Some(cycle);
        }
    };
    match search.closing {
        None => {
            // Cycles of the restricted subgraph live in its own components.
            let subs = graph.sub_components(component, search.allowed);
            let sub = subs.iter().min_by_key(|c| c.len())?;
            let in_sub: BTreeSet<u32> = sub.iter().copied().collect();
            let scope = |v: u32| in_sub.contains(&v);
            for &start in sub.iter().take(MAX_STARTS) {
                if let Some(c) =
                    graph.shortest_path(start, start, search.allowed, &scope, &mut budget)
                {
                    consider(c, &mut best);
                }
            }
        }
        Some(closing) => {
            let members: BTreeSet<u32> = component.iter().copied().collect();
            let scope = |v: u32| members.contains(&v);
            let closers = component
                .iter()
                .flat_map(|&v| graph.out(v))
                .filter(|e| closing.contains(e.kind) && members.contains(&e.to))
                .take(MAX_CLOSING_EDGES);
            for closer in closers {
                if let Some(mut path) =
                    graph.shortest_path(closer.to, closer.from, search.allowed, &scope, &mut budget)
                {
                    path.insert(0, *closer);
                    consider(path, &mut best);
                }
            }
        }
    }
    best
}

/// One line per edge: who, which kind, on which key and value.
fn explain_cycle(ops: &[Op], cycle: &[Edge]) -> String {
    let name = |v: u32| {
        let op = &ops[v as usize];
        format!("T{} (process {}, {:?})", op.id, op.process, op.outcome)
    };
    let mut lines = vec![format!("cycle of {} transactions:", cycle.len())];
    for e in cycle {
        let why = match e.kind {
            EdgeKind::Ww | EdgeKind::WwRt => {
                format!(
                    "on key {}, the target wrote {} after the source's write",
                    e.key, e.value
                )
            }
            EdgeKind::Wr => format!(
                "the target read the source's write of {} to key {}",
                e.value, e.key
            ),
            EdgeKind::WrRt => format!(
                "the target saw key {} absent, as the source's delete (or a later one) left it",
                e.key
            ),
            EdgeKind::Rw | EdgeKind::RwRt => format!(
                "the source read key {} before the target's write of {} took effect",
                e.key, e.value
            ),
            EdgeKind::Rt => "the source completed before the target was invoked".to_string(),
        };
        let inferred = if matches!(e.kind, EdgeKind::WwRt | EdgeKind::WrRt | EdgeKind::RwRt) {
            " (version order from real time)"
        } else {
            ""
        };
        lines.push(format!(
            "{} -{}-> {}: {why}{inferred}",
            name(e.from),
            e.kind.name(),
            name(e.to)
        ));
    }
    lines.join("\n")
}

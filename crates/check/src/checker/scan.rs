//! Scan: range scans against inserts and deletes (`workload::scan`).
//!
//! Every key is a register whose states are *absent* (initially, and after
//! each delete) or *present* with a value; inserted values are unique per
//! key, so a returned row names its writer. A scan is a read of every key
//! in the range it covered: the rows it returned are reads of those values,
//! and every other key of the covered range was read as absent. A scan with
//! a limit that returned `limit` rows covered only the range up to its last
//! returned key (a reverse one: down to it); otherwise its whole bounds.
//!
//! **Version order.** The workload never runs two writers of one key at
//! once (its generator claims a transaction's keys until it completes), so
//! a key's writers are ordered by real time, and under strict
//! serializability that is their version order (checked: overlapping
//! writers are a [`CheckError::OverlappingWriters`]). For a read by `R`,
//! real time bounds the state it may see: at least every writer that
//! completed before `R` was invoked (`lo`), at most every writer invoked
//! before `R` completed (`hi`); a read by a writer of the key precedes its
//! own write.
//!
//! - A present read of version `i` gives `w_i -wr-> R` and `R -rw-> w_{i+1}`
//!   (plain `rw` when `w_{i+1}` is the delete that named the value, else
//!   `rw(rt)`). A read outside `[lo, hi]` closes a cycle with the real-time
//!   edges, so a stale or future read is a `-realtime` cycle.
//! - An absent read may be any absent state in `[lo, hi]`. None there is a
//!   [`AnomalyKind::MissedRow`]: every serial order consistent with real
//!   time shows the row. Otherwise `R` follows the delete that made the
//!   first candidate (`wr(rt)`) and precedes the insert after the last one
//!   (`rw(rt)`; plain `rw` when the key was never deleted, as a read of nil
//!   in rw-register).
//!
//! Edges already implied by real time (their source completed before their
//! target was invoked) are not added: the real-time path stands for them,
//! which keeps the graph near one edge per concurrent pair instead of one
//! per returned row. For a delete, an edge's value is the value it deleted.
//!
//! **Invariant.** Writers move rows only within a group, so each group
//! holds exactly `group_rows` rows in every committed state; a read-only
//! transaction whose scans together covered a whole group must have seen
//! exactly that many there ([`AnomalyKind::ScanCount`]), which is how a
//! missed record shows even where real time cannot place the read.
//! Paginated and reverse scans count through their union.
//!
//! Also checked directly: rows outside the bounds, out of order, repeated or
//! past the limit ([`AnomalyKind::ScanShape`]); rows no one wrote, rows of
//! failed and intermediate writes; a transaction's scans that disagree with
//! each other or with its own writes ([`AnomalyKind::Internal`]).

use std::cell::Cell;
use std::collections::BTreeMap;

use foldhash::{HashMap, HashMapExt};

use super::{AnomalyKind, CheckError, Edge, EdgeKind, Report};
use crate::history::{History, KeyBound, MicroOp, Op, Outcome, ScanLayout};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Absent,
    Present(u64),
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            State::Absent => f.write_str("absent"),
            State::Present(v) => write!(f, "present with {v}"),
        }
    }
}

/// One key's committed (or unknown) writers, in real-time order. State 0
/// is the initial absent state; state `i` is the one writer `i - 1` left.
#[derive(Default)]
struct KeyHistory {
    writers: Vec<u32>,
    states: Vec<State>,
    invoke_ns: Vec<u64>,
    /// `u64::MAX` for an unknown writer (no completion; only the last).
    complete_ns: Vec<u64>,
    /// For a delete, the value it named.
    deleted: Vec<Option<u64>>,
    /// The absent state indices, ascending (0 first).
    absent: Vec<u32>,
    /// Where the last search for `lo` ended: readers come in invocation
    /// order (nearly: ids are taken just before the clock is read), so the
    /// next search starts there and moves a step or two.
    lo_cursor: Cell<u32>,
}

impl KeyHistory {
    fn len(&self) -> u32 {
        self.writers.len() as u32
    }

    fn state(&self, i: u32) -> State {
        if i == 0 {
            State::Absent
        } else {
            self.states[i as usize - 1]
        }
    }

    /// The 0-based position of `node` among the writers, if it is one.
    fn position(&self, node: u32, invoke_ns: u64) -> Option<u32> {
        let p = self.invoke_ns.partition_point(|&i| i < invoke_ns);
        (p..self.writers.len())
            .take_while(|&q| self.invoke_ns[q] == invoke_ns)
            .find(|&q| self.writers[q] == node)
            .map(|q| q as u32)
    }

    /// The states a read by `op` (node `node`; `writes`: whether it writes
    /// at all) may have seen: `[lo, hi]`.
    fn window(&self, node: u32, op: &Op, writes: bool) -> (u32, u32) {
        // lo: the writers that completed before the read was invoked (a
        // prefix: writers are ordered), found by walking from the cursor.
        let n = self.writers.len();
        let mut lo = self.lo_cursor.get() as usize;
        while lo > 0 && self.complete_ns[lo - 1] >= op.invoke_ns {
            lo -= 1;
        }
        while lo < n && self.complete_ns[lo] < op.invoke_ns {
            lo += 1;
        }
        self.lo_cursor.set(lo as u32);
        // hi: those invoked before it completed; past lo only the writers
        // concurrent with the read, usually none.
        let mut hi = match op.complete_ns {
            Some(done) => {
                let mut hi = lo;
                while hi < n && self.invoke_ns[hi] < done {
                    hi += 1;
                }
                hi as u32
            }
            None => self.len(),
        };
        let lo = lo as u32;
        // A writer of the key reads it before its own write.
        if let Some(p) = writes.then(|| self.position(node, op.invoke_ns)).flatten() {
            hi = hi.min(p);
        }
        debug_assert!(lo <= hi, "real time gives an empty window");
        (lo, hi.max(lo))
    }
}

/// Who wrote a value, and the state index of the version it made if it was
/// the op's last write to the key (`None`: an intermediate write).
#[derive(Clone, Copy)]
struct ValueWriter {
    node: u32,
    version: Option<u32>,
}

/// The largest key space the checker accepts (a 4-byte slot per key).
const MAX_KEY_SPACE: u64 = 1 << 26;

/// In `Facts::slot`: the key has no writers.
const NO_WRITERS: u32 = u32::MAX;

struct Facts {
    /// Key -> its index in `keys` (dense over the key space: a scan walks
    /// its covered keys in order).
    slot: Vec<u32>,
    keys: Vec<KeyHistory>,
    values: HashMap<(u64, u64), ValueWriter>,
    /// Inserted values of failed ops: reading one is G1a.
    failed_values: HashMap<(u64, u64), u64>,
}

pub(super) fn analyze(history: &History, report: &mut Report) -> Result<Vec<Edge>, CheckError> {
    let layout = history.meta.scan.ok_or(CheckError::MissingMeta {
        workload: "scan",
        field: "scan",
    })?;
    // The checker keeps a slot per key of the key space.
    if layout.key_space == 0
        || layout.key_space > MAX_KEY_SPACE
        || layout.group_keys == 0
        || layout.key_space % layout.group_keys != 0
    {
        return Err(CheckError::BadMeta {
            workload: "scan",
            message: format!(
                "key_space must be in 1..=2^26 and a multiple of group_keys (got {} and {})",
                layout.key_space, layout.group_keys
            ),
        });
    }
    let ops = &history.ops;
    let facts = index_writes(ops, layout.key_space)?;
    let mut checker = Checker {
        ops,
        layout,
        facts: &facts,
        report,
        edges: Vec::new(),
        local: HashMap::new(),
        writes: false,
    };
    for (i, op) in ops.iter().enumerate() {
        if op.outcome == Outcome::Ok {
            checker.check_op(i)?;
        }
    }
    Ok(checker.edges)
}

impl Facts {
    fn key(&self, key: u64) -> Option<&KeyHistory> {
        let slot = *self.slot.get(usize::try_from(key).ok()?)?;
        (slot != NO_WRITERS).then(|| &self.keys[slot as usize])
    }
}

/// Pass 1: every non-failed op's writes, each key's writers in real-time
/// order, and who wrote each value.
fn index_writes(ops: &[Op], key_space: u64) -> Result<Facts, CheckError> {
    let mut values: HashMap<(u64, u64), ValueWriter> = HashMap::new();
    let mut failed_values = HashMap::new();
    let mut seen_values: HashMap<(u64, u64), u64> = HashMap::new();
    // key -> (node, effect, deleted value), in op order.
    let mut writes: BTreeMap<u64, Vec<(u32, State, Option<u64>)>> = BTreeMap::new();
    for (i, op) in ops.iter().enumerate() {
        // This op's last write per key.
        let mut last: BTreeMap<u64, (State, Option<u64>)> = BTreeMap::new();
        for micro in &op.ops {
            if let MicroOp::Insert { key, .. } | MicroOp::Delete { key, .. } = *micro {
                if key >= key_space {
                    return Err(CheckError::BadOp {
                        id: op.id,
                        message: format!("writes key {key}, outside the key space 0..{key_space}"),
                    });
                }
            }
            match *micro {
                MicroOp::Scan { .. } => {}
                MicroOp::Insert { key, value } => {
                    if let Some(first) = seen_values.insert((key, value), op.id) {
                        return Err(CheckError::NonUniqueWrite {
                            key,
                            value,
                            first,
                            second: op.id,
                        });
                    }
                    if op.outcome == Outcome::Fail {
                        failed_values.insert((key, value), op.id);
                    } else {
                        // The version is set once the key's writers are ordered.
                        let writer = ValueWriter {
                            node: i as u32,
                            version: None,
                        };
                        values.insert((key, value), writer);
                        last.insert(key, (State::Present(value), None));
                    }
                }
                MicroOp::Delete { key, value } => {
                    if op.outcome == Outcome::Ok && value.is_none() {
                        return Err(CheckError::BadOp {
                            id: op.id,
                            message: format!(
                                "an ok delete of key {key} must name the value it deleted"
                            ),
                        });
                    }
                    if op.outcome != Outcome::Fail {
                        last.insert(key, (State::Absent, value));
                    }
                }
                _ => {
                    return Err(CheckError::WrongWorkload {
                        id: op.id,
                        found: "non-scan",
                        workload: "scan",
                    })
                }
            }
        }
        for (key, (state, deleted)) in last {
            writes
                .entry(key)
                .or_default()
                .push((i as u32, state, deleted));
        }
    }
    let mut keys = Vec::with_capacity(writes.len());
    let mut slot = vec![NO_WRITERS; key_space as usize];
    for (key, mut list) in writes {
        list.sort_by_key(|&(node, ..)| (ops[node as usize].invoke_ns, node));
        for pair in list.windows(2) {
            let (a, b) = (&ops[pair[0].0 as usize], &ops[pair[1].0 as usize]);
            if a.complete_ns.is_none_or(|done| done >= b.invoke_ns) {
                return Err(CheckError::OverlappingWriters {
                    key,
                    first: a.id,
                    second: b.id,
                });
            }
        }
        let mut h = KeyHistory {
            absent: vec![0],
            ..KeyHistory::default()
        };
        for (p, &(node, state, deleted)) in list.iter().enumerate() {
            let op = &ops[node as usize];
            h.writers.push(node);
            h.states.push(state);
            h.invoke_ns.push(op.invoke_ns);
            h.complete_ns.push(op.complete_ns.unwrap_or(u64::MAX));
            h.deleted.push(deleted);
            match state {
                State::Absent => h.absent.push(p as u32 + 1),
                State::Present(value) => {
                    let writer = values.get_mut(&(key, value)).expect("indexed above");
                    writer.version = Some(p as u32 + 1);
                }
            }
        }
        slot[key as usize] = keys.len() as u32;
        keys.push(h);
    }
    Ok(Facts {
        slot,
        keys,
        values,
        failed_values,
    })
}

/// What a read was part of, for explanations.
#[derive(Clone, Copy)]
enum ReadBy<'h> {
    Scan { index: usize, micro: &'h MicroOp },
    Insert,
    Delete,
}

impl ReadBy<'_> {
    fn describe(&self) -> String {
        match *self {
            ReadBy::Scan { index, micro } => format!("scan #{index} ({})", describe_scan(micro)),
            ReadBy::Insert => "insert".to_string(),
            ReadBy::Delete => "delete".to_string(),
        }
    }
}

/// `keys 3..=9 forward, limit 4` and the like.
fn describe_scan(micro: &MicroOp) -> String {
    let MicroOp::Scan {
        lower,
        upper,
        reverse,
        limit,
        ..
    } = micro
    else {
        return "not a scan".into();
    };
    let bound = |b: &KeyBound| match b {
        KeyBound::Included(k) => format!("[{k}"),
        KeyBound::Excluded(k) => format!("({k}"),
        KeyBound::Unbounded => "(-inf".into(),
    };
    let upper = match upper {
        KeyBound::Included(k) => format!("{k}]"),
        KeyBound::Excluded(k) => format!("{k})"),
        KeyBound::Unbounded => "+inf)".into(),
    };
    let direction = if *reverse { "reverse" } else { "forward" };
    let limit = limit.map_or(String::new(), |l| format!(", limit {l}"));
    format!("{}, {upper} {direction}{limit}", bound(lower))
}

/// The key interval a scan covered: its bounds, or only up to (a reverse
/// scan: down to) its last row if it stopped at its limit.
fn covered(micro: &MicroOp) -> Option<(u64, u64)> {
    let MicroOp::Scan {
        lower,
        upper,
        reverse,
        limit,
        rows,
    } = micro
    else {
        return None;
    };
    let (first, last) = KeyBound::interval(*lower, *upper)?;
    let rows = rows.as_deref().unwrap_or(&[]);
    match (limit, rows.last()) {
        (Some(limit), Some(&(stop, _))) if rows.len() as u64 >= *limit => {
            if *reverse {
                let from = stop.max(first);
                (from <= last).then_some((from, last))
            } else {
                let to = stop.min(last);
                (first <= to).then_some((first, to))
            }
        }
        _ => Some((first, last)),
    }
}

struct Checker<'a> {
    ops: &'a [Op],
    layout: ScanLayout,
    facts: &'a Facts,
    report: &'a mut Report,
    edges: Vec<Edge>,
    /// The current op's view: key -> (state, whether it wrote it).
    local: HashMap<u64, (State, bool)>,
    /// Whether the current op writes (only then can it be a key's writer).
    writes: bool,
}

impl Checker<'_> {
    /// Pass 2, one ok op: its reads in order, then the group counts.
    fn check_op(&mut self, i: usize) -> Result<(), CheckError> {
        let (ops, facts) = (self.ops, self.facts);
        let op = &ops[i];
        self.local.clear();
        let read_only = !op
            .ops
            .iter()
            .any(|m| matches!(m, MicroOp::Insert { .. } | MicroOp::Delete { .. }));
        self.writes = !read_only;
        let mut intervals = Vec::new();
        let mut scan_index = 0;
        for micro in &op.ops {
            match *micro {
                MicroOp::Scan { ref rows, .. } => {
                    let by = ReadBy::Scan {
                        index: scan_index,
                        micro,
                    };
                    scan_index += 1;
                    let Some(rows) = rows else {
                        return Err(CheckError::BadOp {
                            id: op.id,
                            message: "an ok scan needs its rows".into(),
                        });
                    };
                    self.check_shape(op, micro, by, rows);
                    for &(key, value) in rows {
                        self.read(i, key, State::Present(value), by);
                    }
                    if let Some((first, last)) = covered(micro) {
                        intervals.push((first, last));
                        let mut returned: Vec<u64> = rows.iter().map(|&(k, _)| k).collect();
                        returned.sort_unstable();
                        let mut next_returned = 0;
                        let end = last.min(self.layout.key_space.saturating_sub(1));
                        for key in first..=end {
                            if facts.slot[key as usize] == NO_WRITERS {
                                continue;
                            }
                            while returned.get(next_returned).is_some_and(|&r| r < key) {
                                next_returned += 1;
                            }
                            if returned.get(next_returned) != Some(&key) {
                                self.read(i, key, State::Absent, by);
                            }
                        }
                    }
                }
                MicroOp::Insert { key, value } => {
                    self.read(i, key, State::Absent, ReadBy::Insert);
                    self.local.insert(key, (State::Present(value), true));
                }
                MicroOp::Delete { key, value } => {
                    let value = value.expect("checked in pass 1");
                    self.read(i, key, State::Present(value), ReadBy::Delete);
                    self.local.insert(key, (State::Absent, true));
                }
                _ => unreachable!("pass 1 rejects other micro-ops"),
            }
        }
        if read_only {
            self.check_counts(op, intervals);
        }
        Ok(())
    }

    fn check_shape(&mut self, op: &Op, micro: &MicroOp, by: ReadBy<'_>, rows: &[(u64, u64)]) {
        let MicroOp::Scan {
            lower,
            upper,
            reverse,
            limit,
            ..
        } = *micro
        else {
            return;
        };
        let interval = KeyBound::interval(lower, upper);
        let problem = if limit.is_some_and(|l| rows.len() as u64 > l) {
            Some(format!("returned {} rows", rows.len()))
        } else if let Some(&(k, _)) = rows
            .iter()
            .find(|(k, _)| interval.is_none_or(|(a, b)| *k < a || *k > b))
        {
            Some(format!("returned key {k}, outside its bounds"))
        } else {
            rows.windows(2)
                .find(|w| {
                    if reverse {
                        w[0].0 <= w[1].0
                    } else {
                        w[0].0 >= w[1].0
                    }
                })
                .map(|w| {
                    format!(
                        "returned key {} then key {}: out of order or repeated",
                        w[0].0, w[1].0
                    )
                })
        };
        if let Some(problem) = problem {
            self.report.push(
                AnomalyKind::ScanShape,
                vec![op.id],
                format!("T{} {} {problem}", op.id, by.describe()),
            );
        }
    }

    /// One read of `key` by op `i`: against the op's own view first, else
    /// an external read placed in the key's version order.
    fn read(&mut self, i: usize, key: u64, seen: State, by: ReadBy<'_>) {
        let op = &self.ops[i];
        let id = op.id;
        if let Some(&(expected, wrote)) = self.local.get(&key) {
            if expected != seen {
                let earlier = if wrote { "written" } else { "read" };
                self.report.push(
                    AnomalyKind::Internal,
                    vec![id],
                    format!(
                        "T{id} {} saw key {key} {seen} after it had {earlier} it {expected} in the same transaction",
                        by.describe()
                    ),
                );
            }
            return;
        }
        self.local.insert(key, (seen, false));
        match seen {
            State::Present(value) => self.read_present(i, key, value, by),
            State::Absent => self.read_absent(i, key, by),
        }
    }

    fn read_present(&mut self, i: usize, key: u64, value: u64, by: ReadBy<'_>) {
        let (ops, facts) = (self.ops, self.facts);
        let op = &ops[i];
        let r = op.id;
        let Some(&writer) = facts.values.get(&(key, value)) else {
            let (kind, why) = match facts.failed_values.get(&(key, value)) {
                Some(&w) => (
                    AnomalyKind::G1a,
                    format!("written by T{w}, which failed (aborted)"),
                ),
                None => (
                    AnomalyKind::NeverWritten,
                    "which no transaction wrote".to_string(),
                ),
            };
            let mut ids = vec![r];
            ids.extend(facts.failed_values.get(&(key, value)).copied());
            self.report.push(
                kind,
                ids,
                format!("T{r} {} saw key {key} = {value}, {why}", by.describe()),
            );
            return;
        };
        let w_op = &ops[writer.node as usize];
        if writer.node as usize == i {
            self.report.push(
                AnomalyKind::Internal,
                vec![r],
                format!(
                    "T{r} {} saw key {key} = {value} before writing it itself",
                    by.describe()
                ),
            );
            return;
        }
        let Some(version) = writer.version else {
            self.report.push(
                AnomalyKind::G1b,
                vec![r, w_op.id],
                format!(
                    "T{r} {} saw key {key} = {value}, an intermediate write of T{} which wrote the key again later",
                    by.describe(),
                    w_op.id
                ),
            );
            return;
        };
        let h = facts.key(key).expect("a written key has a history");
        let (lo, hi) = h.window(i as u32, op, self.writes);
        if version > lo {
            self.edge(writer.node, i as u32, EdgeKind::Wr, key, value);
        }
        if version < h.len() && version < hi {
            let next = version as usize;
            let kind = if h.deleted[next] == Some(value) {
                EdgeKind::Rw
            } else {
                EdgeKind::RwRt
            };
            let next_value = match h.states[next] {
                State::Present(v) => v,
                State::Absent => value,
            };
            self.edge(i as u32, h.writers[next], kind, key, next_value);
        }
    }

    fn read_absent(&mut self, i: usize, key: u64, by: ReadBy<'_>) {
        let (ops, facts) = (self.ops, self.facts);
        let Some(h) = facts.key(key) else {
            return; // never written: absent is its only state
        };
        let op = &ops[i];
        let (lo, hi) = h.window(i as u32, op, self.writes);
        let from = h.absent.partition_point(|&s| s < lo);
        let to = h.absent.partition_point(|&s| s <= hi);
        if from >= to {
            self.missed_row(i, key, h, lo, hi, by);
            return;
        }
        let (first, last) = (h.absent[from], h.absent[to - 1]);
        if first > lo {
            // first >= 1: the delete that made state `first`.
            self.edge(
                h.writers[first as usize - 1],
                i as u32,
                EdgeKind::WrRt,
                key,
                0,
            );
        }
        if last < hi {
            let next = last as usize;
            let kind = if h.absent.len() == 1 {
                EdgeKind::Rw
            } else {
                EdgeKind::RwRt
            };
            let value = match h.states[next] {
                State::Present(v) => v,
                State::Absent => 0,
            };
            self.edge(i as u32, h.writers[next], kind, key, value);
        }
    }

    /// An absent read where real time allows only present states.
    fn missed_row(&mut self, i: usize, key: u64, h: &KeyHistory, lo: u32, hi: u32, by: ReadBy<'_>) {
        let ops = self.ops;
        let op = &ops[i];
        debug_assert!(lo >= 1, "state 0 is absent");
        let writer = &ops[h.writers[lo as usize - 1] as usize];
        let until = if hi < h.len() {
            let next = &ops[h.writers[hi as usize] as usize];
            format!(
                "and the next change to it, by T{}, was invoked after T{} completed",
                next.id, op.id
            )
        } else {
            "and it was never deleted".to_string()
        };
        let what = match by {
            ReadBy::Insert => format!("inserted key {key} (finding it absent)"),
            _ => format!("{} did not return key {key}", by.describe()),
        };
        self.report.push(
            AnomalyKind::MissedRow,
            vec![op.id, writer.id],
            format!(
                "T{} (process {}) {what}, but the key was {} by T{}, which completed before T{} was invoked, {until}: every serial order consistent with real time shows the row (a missed row, or phantom)",
                op.id,
                op.process,
                h.state(lo),
                writer.id,
                op.id
            ),
        );
    }

    /// Read-only transactions: every group their scans covered entirely
    /// must show exactly `group_rows` rows.
    fn check_counts(&mut self, op: &Op, mut intervals: Vec<(u64, u64)>) {
        if intervals.is_empty() {
            return;
        }
        intervals.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (a, b) in intervals {
            match merged.last_mut() {
                Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        let w = self.layout.group_keys;
        let groups = self.layout.groups();
        let mut counts: HashMap<u64, u64> = HashMap::new();
        for (&key, &(state, _)) in &self.local {
            if matches!(state, State::Present(_)) && key < self.layout.key_space {
                *counts.entry(key / w).or_insert(0) += 1;
            }
        }
        for (a, b) in merged {
            let first_group = a.div_ceil(w);
            // Groups g with (g + 1) * w - 1 <= b.
            let end_group = b.saturating_add(1) / w;
            for g in first_group..end_group.min(groups) {
                let seen = counts.get(&g).copied().unwrap_or(0);
                if seen != self.layout.group_rows {
                    self.report_count(op, g, seen);
                }
            }
        }
    }

    fn report_count(&mut self, op: &Op, g: u64, seen: u64) {
        let (a, b) = self.layout.group_keys_of(g);
        let expected = self.layout.group_rows;
        let verdict = if seen < expected {
            format!("{} row(s) missed (a phantom)", expected - seen)
        } else {
            format!("{} row(s) too many", seen - expected)
        };
        let scans: Vec<String> = op
            .ops
            .iter()
            .filter(|m| matches!(m, MicroOp::Scan { .. }))
            .enumerate()
            .filter(|(_, m)| covered(m).is_some_and(|(x, y)| x <= b && y >= a))
            .map(|(n, m)| {
                let in_group = match m {
                    MicroOp::Scan {
                        rows: Some(rows), ..
                    } => rows.iter().filter(|(k, _)| (a..=b).contains(k)).count(),
                    _ => 0,
                };
                format!("#{n} {} -> {in_group} rows here", describe_scan(m))
            })
            .collect();
        self.report.push(
            AnomalyKind::ScanCount,
            vec![op.id],
            format!(
                "T{} (process {}): its scans covered all of group {g} (keys {a}..={b}) and saw {seen} rows there, but every committed state holds exactly {expected}: {verdict}; scans: {}",
                op.id,
                op.process,
                scans.join("; ")
            ),
        );
    }

    fn edge(&mut self, from: u32, to: u32, kind: EdgeKind, key: u64, value: u64) {
        if from != to {
            self.edges.push(Edge {
                from,
                to,
                kind,
                key,
                value,
            });
        }
    }
}

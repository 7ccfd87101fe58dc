//! Histories: what each client asked for, when, and what it got back.
//!
//! An [`Op`] is one transaction as a client saw it: invoked at `invoke_ns`,
//! completed at `complete_ns` (monotonic nanoseconds from the [`Recorder`]'s
//! base `Instant`), with an [`Outcome`] and the micro-ops it ran. Reads carry
//! what they returned (`None` until then, and for ops that did not complete
//! with `Ok`). A [`History`] is a [`Meta`] (which workload, and the
//! parameters its checker needs) and the ops, saved as JSON lines.

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// How an operation ended, as far as the client knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Committed: its effects happened, its reads are what it saw.
    Ok,
    /// Definitely did not happen (aborted): no effects.
    Fail,
    /// Indeterminate (timed out, connection lost): its writes may or may not
    /// have taken effect, and it has no known completion time.
    Unknown,
}

/// One step of a transaction. Keys and written values are `u64`; workloads
/// make written values unique per key so a read identifies its writer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "f", rename_all = "snake_case")]
pub enum MicroOp {
    /// List-append: append `value` to the list at `key`.
    Append { key: u64, value: u64 },
    /// List-append: read the whole list at `key` (`Some(vec![])` if empty).
    Read {
        key: u64,
        #[serde(default)]
        value: Option<Vec<u64>>,
    },
    /// Rw-register: set `key` to `value`.
    Write { key: u64, value: u64 },
    /// Rw-register: read `key`; `None` is the initial (never written) state.
    /// For ops that are not `Ok` the value is meaningless.
    ReadReg {
        key: u64,
        #[serde(default)]
        value: Option<u64>,
    },
    /// Bank: move `amount` from account `from` to `to`; fails rather than
    /// make `from` negative.
    Transfer { from: u64, to: u64, amount: i64 },
    /// Bank: read every account's balance (index = account).
    ReadBank {
        #[serde(default)]
        balances: Option<Vec<i64>>,
    },
    /// Counter: add `amount` (> 0) to `key` (failing rather than exceed the
    /// workload's bound, if it has one).
    Increment { key: u64, amount: i64 },
    /// Counter: read `key`'s value.
    ReadCounter {
        key: u64,
        #[serde(default)]
        value: Option<i64>,
    },
    /// Scan: up to `limit` rows (all if `None`) of the keys between `lower`
    /// and `upper`, in key order or, if `reverse`, from the top down; `rows`
    /// are the `(key, value)` pairs returned, in the order returned.
    Scan {
        lower: KeyBound,
        upper: KeyBound,
        #[serde(default)]
        reverse: bool,
        #[serde(default)]
        limit: Option<u64>,
        #[serde(default)]
        rows: Option<Vec<(u64, u64)>>,
    },
    /// Scan: insert the row `key` (which must be absent) with `value`.
    Insert { key: u64, value: u64 },
    /// Scan: delete the row `key`; `value` is the value it held (read just
    /// before the delete), so the delete names the version it removed.
    Delete {
        key: u64,
        #[serde(default)]
        value: Option<u64>,
    },
}

/// One end of a scan's key range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyBound {
    Included(u64),
    Excluded(u64),
    Unbounded,
}

impl KeyBound {
    /// The smallest key at or above this lower bound (`None`: no key is).
    pub fn first_key(self) -> Option<u64> {
        match self {
            KeyBound::Included(k) => Some(k),
            KeyBound::Excluded(k) => k.checked_add(1),
            KeyBound::Unbounded => Some(0),
        }
    }

    /// The largest key at or below this upper bound (`None`: no key is).
    pub fn last_key(self) -> Option<u64> {
        match self {
            KeyBound::Included(k) => Some(k),
            KeyBound::Excluded(k) => k.checked_sub(1),
            KeyBound::Unbounded => Some(u64::MAX),
        }
    }

    /// `[lower, upper]` as an inclusive key interval, `None` when empty.
    pub fn interval(lower: KeyBound, upper: KeyBound) -> Option<(u64, u64)> {
        let (first, last) = (lower.first_key()?, upper.last_key()?);
        (first <= last).then_some((first, last))
    }
}

impl MicroOp {
    pub fn is_read(&self) -> bool {
        matches!(
            self,
            MicroOp::Read { .. }
                | MicroOp::ReadReg { .. }
                | MicroOp::ReadBank { .. }
                | MicroOp::ReadCounter { .. }
                | MicroOp::Scan { .. }
        )
    }
}

/// One transaction as observed by its client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    /// Unique in the history; the checker names transactions by it (`T<id>`).
    pub id: u64,
    /// The client (process) that ran it; a client runs one op at a time.
    pub process: u64,
    pub invoke_ns: u64,
    /// `None` for `Unknown` ops: no known completion.
    #[serde(default)]
    pub complete_ns: Option<u64>,
    pub outcome: Outcome,
    pub ops: Vec<MicroOp>,
}

/// Which workload a history came from: selects the checker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadKind {
    ListAppend,
    RwRegister,
    Bank,
    Counter,
    /// Range scans against inserts and deletes (`workload::scan`).
    Scan,
}

impl WorkloadKind {
    /// The workloads of the shared [`Generator`](crate::workload::Generator),
    /// [`Model`](crate::workload::Model) and
    /// [`simulate`](crate::workload::simulate). [`WorkloadKind::Scan`] has its
    /// own generator, runner and simulation (`workload::scan`), since its
    /// transactions depend on what earlier ones committed.
    pub const ALL: [WorkloadKind; 4] = [
        WorkloadKind::ListAppend,
        WorkloadKind::RwRegister,
        WorkloadKind::Bank,
        WorkloadKind::Counter,
    ];

    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::ListAppend => "list-append",
            WorkloadKind::RwRegister => "rw-register",
            WorkloadKind::Bank => "bank",
            WorkloadKind::Counter => "counter",
            WorkloadKind::Scan => "scan",
        }
    }
}

/// What the checker needs to know besides the ops.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    pub workload: WorkloadKind,
    /// Bank: the conserved total (initial balances are set before the run).
    #[serde(default)]
    pub bank_total: Option<i64>,
    /// Bank: number of accounts every whole-bank read must return.
    #[serde(default)]
    pub bank_accounts: Option<u64>,
    /// Counter: no read may exceed this (increments past it must fail).
    #[serde(default)]
    pub counter_bound: Option<i64>,
    /// Scan: the key space, its groups and the rows each group always holds.
    #[serde(default)]
    pub scan: Option<ScanLayout>,
}

/// The scan workload's key layout: keys `0..key_space` in groups of
/// `group_keys` consecutive keys, each holding exactly `group_rows` rows in
/// every committed state (writers move rows only within a group).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanLayout {
    pub key_space: u64,
    pub group_keys: u64,
    pub group_rows: u64,
}

impl ScanLayout {
    pub fn groups(&self) -> u64 {
        self.key_space / self.group_keys
    }

    /// The inclusive key interval of group `g`.
    pub fn group_keys_of(&self, g: u64) -> (u64, u64) {
        (g * self.group_keys, (g + 1) * self.group_keys - 1)
    }
}

impl Meta {
    pub fn new(workload: WorkloadKind) -> Self {
        Meta {
            workload,
            bank_total: None,
            bank_accounts: None,
            counter_bound: None,
            scan: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct History {
    pub meta: Meta,
    pub ops: Vec<Op>,
}

/// Why a history could not be loaded.
#[derive(Debug, Error)]
pub enum HistoryError {
    #[error("line {line}: {message}")]
    Parse { line: usize, message: String },
    #[error("line {line}: op {id}: {message}")]
    Invalid {
        line: usize,
        id: u64,
        message: String,
    },
    #[error("no meta line (`{{\"meta\": {{\"workload\": ...}}}}`) before the first op")]
    MissingMeta,
    #[error("reading the history: {0}")]
    Io(#[from] std::io::Error),
}

impl History {
    pub fn new(meta: Meta, ops: Vec<Op>) -> Self {
        History { meta, ops }
    }

    /// Writes one meta line, then one line per op.
    pub fn save(&self, mut out: impl Write) -> std::io::Result<()> {
        let meta = serde_json::json!({ "meta": self.meta });
        writeln!(out, "{meta}")?;
        for op in &self.ops {
            serde_json::to_writer(&mut out, op)?;
            out.write_all(b"\n")?;
        }
        out.flush()
    }

    pub fn save_to_path(&self, path: &std::path::Path) -> std::io::Result<()> {
        let file = std::fs::File::create(path)?;
        self.save(std::io::BufWriter::new(file))
    }

    /// Reads what [`History::save`] wrote. Blank lines and lines starting
    /// with `#` (comments in hand-written fixtures) are skipped. Every op is
    /// validated ([`validate_op`]); ids must be unique.
    pub fn load(input: impl BufRead) -> Result<History, HistoryError> {
        let mut meta = None;
        let mut ops = Vec::new();
        let mut ids = std::collections::HashSet::new();
        for (index, line) in input.lines().enumerate() {
            let line_no = index + 1;
            let line = line?;
            let text = line.trim();
            if text.is_empty() || text.starts_with('#') {
                continue;
            }
            let value: serde_json::Value =
                serde_json::from_str(text).map_err(|e| parse_error(line_no, e))?;
            if let Some(m) = value.get("meta") {
                let parsed: Meta =
                    serde_json::from_value(m.clone()).map_err(|e| parse_error(line_no, e))?;
                meta = Some(parsed);
                continue;
            }
            let op: Op = serde_json::from_value(value).map_err(|e| parse_error(line_no, e))?;
            let invalid = |message: String| HistoryError::Invalid {
                line: line_no,
                id: op.id,
                message,
            };
            validate_op(&op).map_err(invalid)?;
            if !ids.insert(op.id) {
                return Err(invalid("duplicate op id".into()));
            }
            ops.push(op);
        }
        let meta = meta.ok_or(HistoryError::MissingMeta)?;
        Ok(History { meta, ops })
    }

    pub fn load_from_path(path: &std::path::Path) -> Result<History, HistoryError> {
        let file = std::fs::File::open(path)?;
        History::load(std::io::BufReader::new(file))
    }

    pub fn count(&self, outcome: Outcome) -> usize {
        self.ops.iter().filter(|op| op.outcome == outcome).count()
    }
}

fn parse_error(line: usize, error: serde_json::Error) -> HistoryError {
    HistoryError::Parse {
        line,
        message: error.to_string(),
    }
}

/// The invariants every op must satisfy before the checker trusts it.
pub fn validate_op(op: &Op) -> Result<(), String> {
    match (op.outcome, op.complete_ns) {
        (Outcome::Unknown, Some(_)) => {
            return Err("an unknown op has no completion time".into());
        }
        (Outcome::Ok | Outcome::Fail, None) => {
            return Err("an ok or failed op needs complete_ns".into());
        }
        (_, Some(done)) if done < op.invoke_ns => {
            return Err(format!(
                "completed at {done} ns before it was invoked at {} ns",
                op.invoke_ns
            ));
        }
        _ => {}
    }
    if op.ops.is_empty() {
        return Err("a transaction needs at least one micro-op".into());
    }
    for micro in &op.ops {
        match micro {
            MicroOp::Transfer { amount, .. } if *amount <= 0 => {
                return Err(format!("transfer of {amount}: amounts are positive"));
            }
            MicroOp::Increment { amount, .. } if *amount <= 0 => {
                return Err(format!("increment of {amount}: amounts are positive"));
            }
            MicroOp::Scan { limit: Some(0), .. } => {
                return Err("a scan's limit is at least 1 (None: no limit)".into());
            }
            _ => {}
        }
    }
    Ok(())
}

/// Records concurrent clients' ops with one shared time base. Cheap enough to
/// call around every transaction (one mutex push per completed op).
pub struct Recorder {
    base: Instant,
    next_id: AtomicU64,
    ops: Mutex<Vec<Op>>,
    /// Completed ops by outcome (ok, fail, unknown), for progress lines.
    completed: [AtomicU64; 3],
}

/// An op that has been invoked and not yet completed.
#[derive(Debug)]
#[must_use = "an invocation must be completed with Recorder::complete"]
pub struct Invocation {
    id: u64,
    process: u64,
    invoke_ns: u64,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

impl Recorder {
    pub fn new() -> Self {
        Recorder {
            base: Instant::now(),
            next_id: AtomicU64::new(0),
            ops: Mutex::new(Vec::new()),
            completed: Default::default(),
        }
    }

    /// The instant times are measured from (to log other events, such as the
    /// nemesis's faults, on the same clock).
    pub fn base(&self) -> Instant {
        self.base
    }

    /// Nanoseconds since the recorder was created (saturating: u64 ns last
    /// 584 years).
    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Call just before sending the transaction.
    pub fn invoke(&self, process: u64) -> Invocation {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        Invocation {
            id,
            process,
            invoke_ns: self.now_ns(),
        }
    }

    /// Call just after the outcome is known, with the micro-ops as completed
    /// (reads filled in for `Ok`).
    pub fn complete(&self, invocation: Invocation, outcome: Outcome, ops: Vec<MicroOp>) {
        let complete_ns = match outcome {
            Outcome::Unknown => None,
            Outcome::Ok | Outcome::Fail => Some(self.now_ns().max(invocation.invoke_ns)),
        };
        let op = Op {
            id: invocation.id,
            process: invocation.process,
            invoke_ns: invocation.invoke_ns,
            complete_ns,
            outcome,
            ops,
        };
        debug_assert!(validate_op(&op).is_ok(), "recorded op is invalid: {op:?}");
        let slot = match outcome {
            Outcome::Ok => 0,
            Outcome::Fail => 1,
            Outcome::Unknown => 2,
        };
        self.completed[slot].fetch_add(1, Ordering::Relaxed);
        self.ops
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(op);
    }

    /// Ops completed so far: (ok, fail, unknown).
    pub fn counts(&self) -> (u64, u64, u64) {
        let [ok, fail, unknown] = &self.completed;
        (
            ok.load(Ordering::Relaxed),
            fail.load(Ordering::Relaxed),
            unknown.load(Ordering::Relaxed),
        )
    }

    /// The recorded ops, ordered by id (invocation order).
    pub fn into_history(self, meta: Meta) -> History {
        let mut ops = self
            .ops
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        ops.sort_by_key(|op| op.id);
        History { meta, ops }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> History {
        let recorder = Recorder::new();
        let a = recorder.invoke(0);
        recorder.complete(
            a,
            Outcome::Ok,
            vec![
                MicroOp::Append { key: 1, value: 7 },
                MicroOp::Read {
                    key: 1,
                    value: Some(vec![7]),
                },
            ],
        );
        let b = recorder.invoke(1);
        recorder.complete(
            b,
            Outcome::Unknown,
            vec![MicroOp::Append { key: 2, value: 8 }],
        );
        recorder.into_history(Meta::new(WorkloadKind::ListAppend))
    }

    #[test]
    fn save_then_load_round_trips() {
        let history = sample();
        let mut bytes = Vec::new();
        history.save(&mut bytes).unwrap();
        let loaded = History::load(bytes.as_slice()).unwrap();
        assert_eq!(loaded, history);
        assert_eq!(loaded.ops[1].complete_ns, None);
        assert_eq!(loaded.count(Outcome::Ok), 1);
    }

    #[test]
    fn malformed_input_is_an_error_with_a_line_number() {
        let meta = r#"{"meta":{"workload":"list-append"}}"#;
        let cases: &[(&str, &str)] = &[
            ("{not json", "line 1"),
            (r#"{"meta":{"workload":"nope"}}"#, "line 1"),
            (r#"{"id":1}"#, "line 1"),
            (
                r#"{"id":1,"process":0,"invoke_ns":5,"complete_ns":3,"outcome":"ok","ops":[{"f":"append","key":1,"value":1}]}"#,
                "before it was invoked",
            ),
            (
                r#"{"id":1,"process":0,"invoke_ns":5,"complete_ns":9,"outcome":"ok","ops":[{"f":"frob"}]}"#,
                "line 1",
            ),
            (
                r#"{"id":1,"process":0,"invoke_ns":5,"complete_ns":9,"outcome":"ok","ops":[]}"#,
                "at least one",
            ),
            (
                r#"{"id":1,"process":0,"invoke_ns":5,"outcome":"ok","ops":[{"f":"append","key":1,"value":1}]}"#,
                "needs complete_ns",
            ),
        ];
        for (line, expected) in cases {
            let err = History::load(line.as_bytes()).unwrap_err().to_string();
            assert!(err.contains(expected), "{line}: {err}");
            let with_meta = format!("{meta}\n{line}\n");
            let err = History::load(with_meta.as_bytes()).unwrap_err().to_string();
            assert!(err.contains("line 2"), "{line}: {err}");
        }
        assert!(matches!(
            History::load("".as_bytes()),
            Err(HistoryError::MissingMeta)
        ));
        let dup = format!(
            "{meta}\n{op}\n{op}\n",
            op = r#"{"id":1,"process":0,"invoke_ns":5,"complete_ns":9,"outcome":"ok","ops":[{"f":"append","key":1,"value":1}]}"#
        );
        let err = History::load(dup.as_bytes()).unwrap_err().to_string();
        assert!(err.contains("duplicate op id"), "{err}");
    }
}

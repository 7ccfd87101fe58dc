//! Model-checks roost-storage's real commit with loom: `Engine`, `Worker` and
//! `Transaction` over a loom build of the engine (loom's atomics in the
//! B+-tree, the records and the TID words; leaves of `LEAF_CAPACITY` = 4
//! entries, so a handful of keys split and merge them; no epoch ticker).
//! Nothing here re-implements the commit: the models drive `get`, `put`,
//! `insert`, `delete`, `scan` and `commit`, and a planted-bug model for each
//! validation proves its check can fail.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p roost-storage --release
//! --test loom_commit`. Every model explores the interleavings of two model
//! threads with at most `PREEMPTIONS` preemptions (`LOOM_MAX_PREEMPTIONS`
//! overrides it for a deeper run).
//!
//! Loom's exploration is not exhaustive even within the bound (its
//! partial-order reduction remembers only the last access to each atomic,
//! tokio-rs/loom#166; see also [`spawn`]), so every model also asserts the
//! outcomes it must have explored: the conflict it exists for happened and
//! was resolved, not just "no interleaving failed". What that incompleteness
//! costs, by mutation: a scan that does not validate its leaf copy, a
//! validation that ignores other committers' locks, an install that
//! publishes the TID before the value, a commit TID below what it read and
//! a stable read without its re-check all fail models here; a split that
//! leaves the split leaf's version unchanged does not (the race needs the
//! scanner's version read ahead of the splitter's own read-then-lock of
//! that word, which loom's reduction does not reorder).
#![cfg(loom)]

use std::collections::BTreeSet;
use std::ops::{Bound, RangeBounds};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::thread;
use roost_storage::tid::{Tid, TidWord, LATEST_BIT};
use roost_storage::{
    loom_iteration, Engine, EngineConfig, PlantedBugs, Relation, ScanDirection, Worker,
    LEAF_CAPACITY,
};

/// Loom's preemption bound for every model. The planted bugs need one
/// preemption (a second transaction between the first one's read and its
/// commit); the others let either transaction be cut short again (between
/// its lock and its validation, inside a split or a merge). On the 2-core
/// development machine the whole file takes about 3 s at bound 2, 9 s at
/// 3 and 50 s at 4 (each bound explores 3 to 10 times as many
/// interleavings as the one below).
const PREEMPTIONS: usize = 3;
/// Loom's bound on scheduling decisions in one execution: every atomic
/// operation is one, and a model runs a few hundred (each transaction
/// descends the tree, copies leaves and validates).
const MAX_BRANCHES: usize = 20_000;

fn builder() -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(PREEMPTIONS);
    }
    builder.max_branches = MAX_BRANCHES;
    builder
}

/// What one iteration of a model saw, in words.
type Outcome = &'static str;

/// Explores the interleavings of `model` (within the bounds); each
/// iteration's deferred frees run when it ends. Returns every distinct
/// outcome the iterations reported.
fn explore(model: impl Fn() -> Outcome + Sync + Send + 'static) -> BTreeSet<Outcome> {
    // Std, not loom: they record the exploration from outside the model.
    let outcomes = Arc::new(Mutex::new(BTreeSet::new()));
    let iterations = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    {
        let (outcomes, iterations) = (Arc::clone(&outcomes), Arc::clone(&iterations));
        builder().check(move || {
            iterations.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let outcome = loom_iteration(&model);
            outcomes.lock().expect("outcomes").insert(outcome);
        });
    }
    let outcomes = outcomes.lock().expect("outcomes").clone();
    eprintln!(
        "loom explored {} interleavings: {outcomes:?}",
        iterations.load(std::sync::atomic::Ordering::Relaxed)
    );
    outcomes
}

/// Explores `model` and asserts that every outcome in `required` happened
/// in some interleaving (the model is not vacuous).
fn check(required: &[Outcome], model: impl Fn() -> Outcome + Sync + Send + 'static) {
    let outcomes = explore(model);
    for outcome in required {
        assert!(
            outcomes.contains(outcome),
            "loom never explored {outcome:?} (only {outcomes:?}): the model lost its race"
        );
    }
}

/// Asserts that loom finds a violation of `model` whose message contains
/// `expected`: the planted bug is caught, and by the check meant to catch
/// it (not by an unrelated panic).
fn assert_model_fails(expected: &str, model: impl Fn() -> Outcome + Sync + Send + 'static) {
    let payload = match catch_unwind(AssertUnwindSafe(|| explore(model))) {
        Ok(outcomes) => panic!(
            "loom found no {expected:?} in any interleaving (outcomes {outcomes:?}): \
             the planted bug went unnoticed"
        ),
        Err(payload) => payload,
    };
    let message = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("<no message>");
    assert!(
        message.contains(expected),
        "the model failed, but not with {expected:?}: {message}"
    );
}

/// Spawns a model thread, then yields to it. Without the yield loom 0.7
/// explores almost nothing here: a spawned thread whose first operation is
/// an atomic load (every transaction starts at the index's root) is marked
/// "skip" at the first branch and never scheduled ahead of its spawner
/// (tokio-rs/loom#392), so the spawner's reads would never race the
/// spawned thread's writes. With it, the spawned thread runs first and
/// loom's backtracking moves the spawner ahead of it.
fn spawn<T: 'static>(f: impl FnOnce() -> T + 'static) -> thread::JoinHandle<T> {
    let handle = thread::spawn(f);
    thread::yield_now();
    handle
}

fn engine(planted: PlantedBugs) -> (Engine, Arc<Relation>) {
    let engine = Engine::new(EngineConfig {
        planted_bugs: planted,
        ..EngineConfig::default()
    });
    let relation = engine.create_relation("t").expect("fresh relation");
    (engine, relation)
}

/// A short (inline) key: `k` then `i`.
fn key(i: u8) -> Vec<u8> {
    vec![b'k', i]
}

fn number(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes.try_into().expect("8-byte value"))
}

/// Commits `keys` with value 0 in one transaction per key (so the tree
/// grows as a sequence of inserts would make it), before any model thread
/// starts.
fn preload(worker: &mut Worker, relation: &Relation, keys: &[Vec<u8>]) {
    for k in keys {
        let mut tx = worker.begin();
        tx.insert(relation, k, &0u64.to_le_bytes()).expect("insert");
        tx.commit().expect("no concurrent transaction");
    }
}

fn delete(worker: &mut Worker, relation: &Relation, k: &[u8]) {
    let mut tx = worker.begin();
    assert!(
        tx.delete(relation, k).expect("delete"),
        "deleted key exists"
    );
    tx.commit().expect("no concurrent transaction");
}

type Rows = Vec<(Vec<u8>, u64)>;

/// A transaction scanning the whole relation: every row it saw, and
/// whether it committed.
fn scan_all(worker: &mut Worker, relation: &Relation) -> (Rows, bool) {
    let mut tx = worker.begin();
    let mut rows = Vec::new();
    tx.scan(
        relation,
        (Bound::Unbounded, Bound::Unbounded),
        ScanDirection::Forward,
        usize::MAX,
        |k, v| {
            rows.push((k.to_vec(), number(v)));
            true
        },
    )
    .expect("scan");
    let committed = tx.commit().is_ok();
    (rows, committed)
}

/// The relation's rows once every model thread is done.
fn contents(worker: &mut Worker, relation: &Relation) -> Rows {
    let (rows, committed) = scan_all(worker, relation);
    assert!(committed, "a read-only transaction alone commits");
    rows
}

fn has(rows: &Rows, k: &[u8]) -> bool {
    rows.iter().any(|(r, _)| r == k)
}

// ---- (a) Read-increment-commit: no lost update --------------------------

/// One attempt at `k += 1`: the value it read and its commit TID, or
/// `None` if commit found a conflict (counted by the caller, not retried:
/// the model stays small, and an abort loses nothing).
fn increment(worker: &mut Worker, relation: &Relation, k: &[u8]) -> Option<(u64, Tid)> {
    let mut tx = worker.begin();
    let value = tx
        .get_with(relation, k, number)
        .expect("get")
        .expect("the counter exists");
    tx.put(relation, k, &(value + 1).to_le_bytes())
        .expect("put");
    tx.commit().ok().map(|info| (value, info.tid))
}

/// Two increments of one counter; the spawner also advances the global
/// epoch first (standing in for the ticker, which loom builds do not run),
/// so the other commit may land in either epoch.
fn increments(planted: PlantedBugs) -> Outcome {
    let (engine, relation) = engine(planted);
    let mut worker = engine.worker();
    preload(&mut worker, &relation, &[key(1)]);
    let start_epoch = engine.current_silo_epoch();
    let other = {
        let (engine, relation) = (engine.clone(), Arc::clone(&relation));
        spawn(move || increment(&mut engine.worker(), &relation, &key(1)))
    };
    let last_epoch = engine.advance_silo_epoch();
    let mine = increment(&mut worker, &relation, &key(1));
    let theirs = other.join().expect("incrementer");
    let commits = [mine, theirs].iter().flatten().count() as u64;
    // Each holds its lock while validating its own read: one can fail only
    // because the other committed first.
    assert!(commits >= 1, "two conflicting increments both aborted");
    let rows = contents(&mut worker, &relation);
    assert_eq!(rows, vec![(key(1), commits)], "lost update");
    for (_, tid) in [mine, theirs].iter().flatten() {
        // Silo's TIDs: in an epoch the engine had, and a bare version (the
        // status bits belong to the record's word, not the commit).
        assert!((start_epoch..=last_epoch).contains(&tid.epoch()));
        assert_eq!(tid.raw(), tid.version(), "a commit TID with status bits");
    }
    match (mine, theirs) {
        (Some((read_mine, tid_mine)), Some((read_theirs, tid_theirs))) => {
            // The one that read the other's increment serializes after it,
            // and Silo's TIDs follow that order.
            let (first, second) = if read_mine < read_theirs {
                (tid_mine, tid_theirs)
            } else {
                (tid_theirs, tid_mine)
            };
            assert!(
                first.version() < second.version(),
                "TIDs out of serial order"
            );
            "both committed"
        }
        (None, _) => "the spawner's increment aborted",
        (_, None) => "the spawned increment aborted",
    }
}

#[test]
fn validated_increments_lose_nothing() {
    check(
        &[
            "both committed",
            "the spawner's increment aborted",
            "the spawned increment aborted",
        ],
        || increments(PlantedBugs::default()),
    );
}

#[test]
fn without_read_validation_loom_finds_the_lost_update() {
    assert_model_fails("lost update", || {
        increments(PlantedBugs {
            skip_read_validation: true,
            ..PlantedBugs::default()
        })
    });
}

// ---- (b) Write skew through a phantom -----------------------------------

/// The range both claimants scan: between the pre-loaded neighbours
/// `key(1)` and `key(9)`, which share its leaf (so the leaf-part re-check,
/// not just the leaf version, decides).
fn claim_range() -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    (Bound::Included(key(3)), Bound::Excluded(key(7)))
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Claim {
    Committed,
    /// The scan saw a row: nothing to claim.
    SawRow,
    /// Inserted, and commit found a conflict.
    Aborted,
}

/// Inserts `mine` (inside the range) only if a scan of the range saw no
/// row.
fn claim(worker: &mut Worker, relation: &Relation, mine: &[u8]) -> Claim {
    let (lower, upper) = claim_range();
    let mut tx = worker.begin();
    let seen = tx
        .scan(
            relation,
            (
                lower.as_ref().map(Vec::as_slice),
                upper.as_ref().map(Vec::as_slice),
            ),
            ScanDirection::Forward,
            usize::MAX,
            |_, _| true,
        )
        .expect("scan");
    if seen > 0 {
        tx.abort();
        return Claim::SawRow;
    }
    tx.insert(relation, mine, &1u64.to_le_bytes())
        .expect("distinct keys never collide");
    match tx.commit() {
        Ok(_) => Claim::Committed,
        Err(_) => Claim::Aborted,
    }
}

fn phantom_claims(planted: PlantedBugs) -> Outcome {
    let (engine, relation) = engine(planted);
    let mut worker = engine.worker();
    preload(&mut worker, &relation, &[key(1), key(9)]);
    let other = {
        let (engine, relation) = (engine.clone(), Arc::clone(&relation));
        spawn(move || claim(&mut engine.worker(), &relation, &key(5)))
    };
    let mine = claim(&mut worker, &relation, &key(4));
    let theirs = other.join().expect("claimant");
    let range = claim_range();
    let claimed = contents(&mut worker, &relation)
        .into_iter()
        .filter(|(k, _)| range.contains(k))
        .count();
    let committed = [mine, theirs]
        .iter()
        .filter(|&&c| c == Claim::Committed)
        .count();
    assert_eq!(
        claimed, committed,
        "a committed claim is missing, or an aborted one is present"
    );
    assert!(claimed <= 1, "write skew: two claims in one range");
    match (mine, theirs) {
        (Claim::Aborted, Claim::Aborted) => "both claims aborted",
        (Claim::Aborted, _) | (_, Claim::Aborted) => "a phantom aborted one claim",
        _ if claimed == 1 => "one claim, the other saw it",
        _ => unreachable!("a claimant that saw a row saw a committed claim"),
    }
}

#[test]
fn phantom_validation_prevents_write_skew() {
    check(
        &["a phantom aborted one claim", "one claim, the other saw it"],
        || phantom_claims(PlantedBugs::default()),
    );
}

#[test]
fn without_phantom_validation_loom_finds_the_write_skew() {
    assert_model_fails("write skew", || {
        phantom_claims(PlantedBugs {
            skip_phantom_validation: true,
            ..PlantedBugs::default()
        })
    });
}

// ---- (c) Scans racing splits and merges ---------------------------------

/// Runs `write` on a spawned model thread while this thread scans the
/// whole relation; checks the scan saw every row of `kept` (pre-loaded and
/// never removed, so any scan, committed or not, must deliver it), and, if
/// the scan committed, that it saw the writer's transaction wholly or not
/// at all (`after` says, from the rows, whether the writer came first;
/// `expected` gives the rows either way).
fn scan_racing(
    engine: &Engine,
    relation: &Arc<Relation>,
    kept: &[Vec<u8>],
    write: impl FnOnce(&mut Worker, &Relation) + 'static,
    after: impl Fn(&Rows) -> bool,
    expected: impl Fn(bool) -> Rows,
) -> Outcome {
    let writer = {
        let (engine, relation) = (engine.clone(), Arc::clone(relation));
        spawn(move || write(&mut engine.worker(), &relation))
    };
    let mut worker = engine.worker();
    let (rows, committed) = scan_all(&mut worker, relation);
    writer.join().expect("writer");
    for k in kept {
        assert!(has(&rows, k), "the scan missed pre-loaded {k:?}: {rows:?}");
    }
    assert_eq!(
        contents(&mut worker, relation),
        expected(true),
        "the writer's transaction is not what the relation holds"
    );
    if !committed {
        return "the scan aborted";
    }
    let after = after(&rows);
    assert_eq!(
        rows,
        expected(after),
        "a committed scan saw half of a transaction"
    );
    if after {
        "the scan committed after the writer"
    } else {
        "the scan committed before the writer"
    }
}

const SCAN_OUTCOMES: [Outcome; 3] = [
    "the scan aborted",
    "the scan committed after the writer",
    "the scan committed before the writer",
];

/// A full leaf; one transaction inserts a key into its middle (the insert
/// splits the leaf, under a new root) and sets the leaf's last key to 1,
/// while another scans everything.
#[test]
fn a_scan_racing_a_split_sees_every_row_and_commits_serializably() {
    check(&SCAN_OUTCOMES, || {
        let (engine, relation) = engine(PlantedBugs::default());
        let mut worker = engine.worker();
        let preloaded: Vec<Vec<u8>> = (1..=LEAF_CAPACITY as u8).map(|i| key(i * 2)).collect();
        preload(&mut worker, &relation, &preloaded);
        assert_eq!(relation.leaf_count(), Some(1), "the preload fills one leaf");
        let (inserted, updated) = (key(3), preloaded[LEAF_CAPACITY - 1].clone());
        let outcome = scan_racing(
            &engine,
            &relation,
            &preloaded,
            {
                let (inserted, updated) = (inserted.clone(), updated.clone());
                move |worker, relation| {
                    let mut tx = worker.begin();
                    tx.insert(relation, &inserted, &1u64.to_le_bytes())
                        .expect("insert");
                    tx.put(relation, &updated, &1u64.to_le_bytes())
                        .expect("put");
                    // Only a read-only scanner runs beside it: nothing can
                    // invalidate this transaction.
                    tx.commit().expect("the writer commits");
                }
            },
            |rows| has(rows, &inserted),
            |after| {
                let mut rows: Rows = preloaded.iter().map(|k| (k.clone(), 0)).collect();
                if after {
                    rows.push((inserted.clone(), 1));
                    rows.sort();
                    rows.iter_mut()
                        .filter(|(k, _)| *k == updated)
                        .for_each(|(_, v)| *v = 1);
                }
                rows
            },
        );
        assert_eq!(relation.leaf_count(), Some(2), "the insert split the leaf");
        outcome
    });
}

/// Two leaves, the right one with a single key; one transaction deletes
/// that key (the unlink empties the leaf, which merges into its left
/// sibling) and sets the first key to 1, while another scans everything.
#[test]
fn a_scan_racing_a_merge_sees_every_row_and_commits_serializably() {
    check(&SCAN_OUTCOMES, || {
        let (engine, relation) = engine(PlantedBugs::default());
        let mut worker = engine.worker();
        // Appending LEAF_CAPACITY + 1 keys splits off the last one...
        let keys: Vec<Vec<u8>> = (1..=LEAF_CAPACITY as u8 + 1).map(key).collect();
        preload(&mut worker, &relation, &keys);
        assert_eq!(relation.leaf_count(), Some(2), "the preload split the leaf");
        // ...whose leaf also got the one before it: delete that one, so the
        // right leaf holds the last key alone.
        delete(&mut worker, &relation, &keys[LEAF_CAPACITY - 1]);
        assert_eq!(relation.leaf_count(), Some(2));
        let kept: Vec<Vec<u8>> = keys[..LEAF_CAPACITY - 1].to_vec();
        let (deleted, updated) = (keys[LEAF_CAPACITY].clone(), keys[0].clone());
        let outcome = scan_racing(
            &engine,
            &relation,
            &kept,
            {
                let (deleted, updated) = (deleted.clone(), updated.clone());
                move |worker, relation| {
                    let mut tx = worker.begin();
                    assert!(tx.delete(relation, &deleted).expect("delete"));
                    tx.put(relation, &updated, &1u64.to_le_bytes())
                        .expect("put");
                    tx.commit().expect("the writer commits");
                }
            },
            |rows| !has(rows, &deleted),
            |after| {
                let mut rows: Rows = kept.iter().map(|k| (k.clone(), 0)).collect();
                if after {
                    rows[0].1 = 1;
                } else {
                    rows.push((deleted.clone(), 0));
                }
                rows
            },
        );
        assert_eq!(
            relation.leaf_count(),
            Some(1),
            "the delete merged the leaves"
        );
        outcome
    });
}

// ---- Crossing committers need the commit fence --------------------------

/// Reads the other record, and sets `mine` to 1 only if the other is 0 (a
/// constraint "at most one is 1" that no single record enforces).
fn set_if_other_clear(
    worker: &mut Worker,
    relation: &Relation,
    mine: &[u8],
    other: &[u8],
) -> Claim {
    let mut tx = worker.begin();
    let theirs = tx
        .get_with(relation, other, number)
        .expect("get")
        .expect("exists");
    if theirs != 0 {
        tx.abort();
        return Claim::SawRow;
    }
    tx.put(relation, mine, &1u64.to_le_bytes()).expect("put");
    match tx.commit() {
        Ok(_) => Claim::Committed,
        Err(_) => Claim::Aborted,
    }
}

/// Each transaction locks its own write, then validates its read of the
/// other's record. Only the fence between the two orders a committer's
/// lock before its validation loads, so that of two crossing committers at
/// least one sees the other's lock (or new version) and aborts.
fn crossing_committers(planted: PlantedBugs) -> Outcome {
    let (engine, relation) = engine(planted);
    let mut worker = engine.worker();
    let (a, b) = (key(1), key(2));
    preload(&mut worker, &relation, &[a.clone(), b.clone()]);
    let other = {
        let (engine, relation) = (engine.clone(), Arc::clone(&relation));
        let (a, b) = (a.clone(), b.clone());
        spawn(move || set_if_other_clear(&mut engine.worker(), &relation, &b, &a))
    };
    let mine = set_if_other_clear(&mut worker, &relation, &a, &b);
    let theirs = other.join().expect("committer");
    let ones = contents(&mut worker, &relation)
        .iter()
        .filter(|&&(_, v)| v == 1)
        .count();
    assert!(ones <= 1, "write skew: both crossing committers committed");
    match (mine, theirs) {
        (Claim::Committed, Claim::Committed) => unreachable!("two commits, at most one 1"),
        (Claim::Aborted, Claim::Aborted) => "both aborted at commit",
        (Claim::Aborted, _) | (_, Claim::Aborted) => "one committed, the other aborted at commit",
        _ => "one committed, the other saw it",
    }
}

#[test]
fn crossing_committers_cannot_write_skew() {
    check(
        &[
            "one committed, the other aborted at commit",
            "one committed, the other saw it",
        ],
        || crossing_committers(PlantedBugs::default()),
    );
}

#[test]
fn without_the_commit_fence_loom_finds_the_write_skew() {
    assert_model_fails("write skew", || {
        crossing_committers(PlantedBugs {
            skip_commit_fence: true,
            ..PlantedBugs::default()
        })
    });
}

// ---- (d) The TID word's stable read -------------------------------------

/// A writer changes two words under the TID word's lock; Silo's stable
/// read of both never returns a mix, nor a value from another version
/// than the TID it reports.
#[test]
fn stable_read_never_sees_a_torn_value() {
    check(&["read the old version", "read the new version"], || {
        let tid = Arc::new(TidWord::new(Tid::new(1, 0, LATEST_BIT)));
        let words = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let writer = {
            let (tid, words) = (tid.clone(), words.clone());
            spawn(move || {
                let before = tid.lock();
                words[0].store(1, Ordering::Relaxed);
                words[1].store(1, Ordering::Relaxed);
                tid.unlock_to(Tid::new(1, before.sequence() + 1, LATEST_BIT));
            })
        };
        let (seen, (a, b)) = tid.stable_read(|| {
            (
                words[0].load(Ordering::Relaxed),
                words[1].load(Ordering::Relaxed),
            )
        });
        assert_eq!(a, b, "torn read");
        assert_eq!(a, seen.sequence(), "value does not match its TID");
        writer.join().expect("writer");
        if a == 0 {
            "read the old version"
        } else {
            "read the new version"
        }
    });
}

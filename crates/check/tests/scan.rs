//! The scan workload (range scans racing moves of rows):
//!
//! - the checker on hand-built histories: serial ones are valid; a scan
//!   missing a row, a phantom between concurrent transactions, a fractured
//!   read, limited and reverse scans (which cover only up to their last
//!   row), pages, and malformed scan results get the right verdicts;
//! - simulated strictly serializable histories are valid, and stay invalid
//!   when one row is dropped from one scan;
//! - the storage engine under concurrent clients is valid over three seeds,
//!   and with a planted bug (phantom validation skipped; scans that skip a
//!   record) it is flagged;
//! - the reactor layer, with reactors moved between containers during the
//!   run, is valid.
//!
//! `ROOST_CHECK_SECONDS` lengthens each engine and reactor run (default 1 s).

use std::time::{Duration, Instant};

use roost_check::reactor_run::{run_reactors, ReactorRunConfig};
use roost_check::runner::{run_engine, RunConfig, RunError};
use roost_check::workload::scan::{simulate, ScanParams};
use roost_check::workload::SimConfig;
use roost_check::{
    check, AnomalyKind, History, KeyBound, Meta, MicroOp, Op, Outcome, Report, ScanLayout,
    WorkloadKind,
};
use roost_storage::PlantedBugs;

// ---------------------------------------------------------------- hand-built

/// Two groups of 4 keys (0..=3, 4..=7), 2 rows each.
fn meta() -> Meta {
    let mut meta = Meta::new(WorkloadKind::Scan);
    meta.scan = Some(ScanLayout {
        key_space: 8,
        group_keys: 4,
        group_rows: 2,
    });
    meta
}

fn op(id: u64, invoke_ns: u64, complete_ns: u64, ops: Vec<MicroOp>) -> Op {
    Op {
        id,
        process: id % 3,
        invoke_ns,
        complete_ns: Some(complete_ns),
        outcome: Outcome::Ok,
        ops,
    }
}

fn scan(
    lower: KeyBound,
    upper: KeyBound,
    reverse: bool,
    limit: Option<u64>,
    rows: &[(u64, u64)],
) -> MicroOp {
    MicroOp::Scan {
        lower,
        upper,
        reverse,
        limit,
        rows: Some(rows.to_vec()),
    }
}

fn all(reverse: bool, rows: &[(u64, u64)]) -> MicroOp {
    scan(
        KeyBound::Unbounded,
        KeyBound::Unbounded,
        reverse,
        None,
        rows,
    )
}

fn group0(reverse: bool, limit: Option<u64>, rows: &[(u64, u64)]) -> MicroOp {
    scan(
        KeyBound::Included(0),
        KeyBound::Excluded(4),
        reverse,
        limit,
        rows,
    )
}

/// T0 inserts 0=1, 1=2, 4=3, 5=4.
fn setup() -> Op {
    op(
        0,
        0,
        10,
        [(0, 1), (1, 2), (4, 3), (5, 4)]
            .iter()
            .map(|&(key, value)| MicroOp::Insert { key, value })
            .collect(),
    )
}

/// Moves row `from` (holding `old`) to `to` with `value`.
fn moved(from: u64, old: u64, to: u64, value: u64) -> Vec<MicroOp> {
    vec![
        MicroOp::Delete {
            key: from,
            value: Some(old),
        },
        MicroOp::Insert { key: to, value },
    ]
}

fn checked(ops: Vec<Op>) -> Report {
    let report = check(&History::new(meta(), ops)).expect("checkable");
    println!("{report}");
    report
}

fn kinds(report: &Report) -> Vec<AnomalyKind> {
    report.kinds().into_iter().collect()
}

#[test]
fn a_serial_history_with_every_kind_of_scan_is_valid() {
    let report = checked(vec![
        setup(),
        op(1, 20, 30, vec![group0(false, None, &[(0, 1), (1, 2)])]),
        // T2 moves row 1 to key 3.
        op(2, 40, 50, moved(1, 2, 3, 10)),
        op(
            3,
            60,
            70,
            vec![all(true, &[(5, 4), (4, 3), (3, 10), (0, 1)])],
        ),
        // Limited: covers only key 0 (forward) or keys 3.. (reverse).
        op(4, 80, 90, vec![group0(false, Some(1), &[(0, 1)])]),
        op(5, 80, 90, vec![group0(true, Some(1), &[(3, 10)])]),
        // Pages of one row, reverse, through group 0.
        op(
            6,
            100,
            110,
            vec![
                group0(true, Some(1), &[(3, 10)]),
                scan(
                    KeyBound::Included(0),
                    KeyBound::Excluded(3),
                    true,
                    Some(1),
                    &[(0, 1)],
                ),
                scan(
                    KeyBound::Included(0),
                    KeyBound::Excluded(0),
                    true,
                    Some(1),
                    &[],
                ),
            ],
        ),
        // A failed move has no effects.
        Op {
            outcome: Outcome::Fail,
            ops: vec![
                MicroOp::Delete {
                    key: 0,
                    value: None,
                },
                MicroOp::Insert { key: 2, value: 11 },
            ],
            ..op(7, 120, 130, vec![])
        },
        op(
            8,
            140,
            150,
            vec![all(false, &[(0, 1), (3, 10), (4, 3), (5, 4)])],
        ),
    ]);
    assert!(report.valid(), "{report}");
    assert_eq!(report.ops_ok, 8);
}

#[test]
fn a_scan_that_misses_a_row_is_a_phantom() {
    // T3 scans everything after T2 moved row 1 to key 3, but misses key 3.
    let report = checked(vec![
        setup(),
        op(2, 40, 50, moved(1, 2, 3, 10)),
        op(3, 60, 70, vec![all(true, &[(5, 4), (4, 3), (0, 1)])]),
    ]);
    assert_eq!(
        kinds(&report),
        [AnomalyKind::ScanCount, AnomalyKind::MissedRow]
    );
    let explained = |kind| {
        report
            .anomalies
            .iter()
            .find(|a| a.kind == kind)
            .map(|a| a.explanation.clone())
            .unwrap_or_default()
    };
    let count = explained(AnomalyKind::ScanCount);
    assert!(
        count.contains("T3") && count.contains("group 0") && count.contains("saw 1 rows"),
        "{count}"
    );
    assert!(count.contains("reverse"), "{count}");
    let missed = explained(AnomalyKind::MissedRow);
    assert!(
        missed.contains("did not return key 3") && missed.contains("T2"),
        "{missed}"
    );
}

#[test]
fn limited_scans_cover_only_up_to_their_last_row() {
    let history = |scan: MicroOp| {
        checked(vec![
            setup(),
            op(2, 40, 50, moved(1, 2, 3, 10)),
            op(3, 60, 70, vec![scan]),
        ])
    };
    // Forward, limit 1: key 0 is the first row; key 3 lies beyond the scan.
    assert!(history(group0(false, Some(1), &[(0, 1)])).valid());
    // ... returning key 3 instead skipped key 0, inside what it covered
    // (all of group 0, so the count is off too).
    let skipped = history(group0(false, Some(1), &[(3, 10)]));
    assert_eq!(
        kinds(&skipped),
        [AnomalyKind::ScanCount, AnomalyKind::MissedRow]
    );
    // Reverse, limit 1: key 3 is the first row from the top.
    assert!(history(group0(true, Some(1), &[(3, 10)])).valid());
    let skipped = history(group0(true, Some(1), &[(0, 1)]));
    assert_eq!(
        kinds(&skipped),
        [AnomalyKind::ScanCount, AnomalyKind::MissedRow]
    );
    // A limited scan from key 1 covering keys 1..=3 that skipped key 3
    // (not the whole group: no count, but the row is missed).
    let partial = history(scan(
        KeyBound::Excluded(0),
        KeyBound::Unbounded,
        false,
        Some(1),
        &[(4, 3)],
    ));
    assert_eq!(kinds(&partial), [AnomalyKind::MissedRow]);
    // A limit above the rows there covers the whole group: both rows.
    assert!(history(group0(true, Some(3), &[(3, 10), (0, 1)])).valid());
    let short = history(group0(true, Some(3), &[(3, 10)]));
    assert_eq!(
        kinds(&short),
        [AnomalyKind::ScanCount, AnomalyKind::MissedRow]
    );
    // Exactly as many as the rows there: it stopped at its limit, so it
    // covered the group only down to its last row (key 0), which is all of
    // it here.
    assert!(history(group0(true, Some(2), &[(3, 10), (0, 1)])).valid());
}

#[test]
fn pages_that_lose_a_row_between_them_are_caught() {
    // Reverse pages of one row through group 0 while T2 moves row 0 (below
    // the pages read so far) to key 3 (above them): the second page misses
    // key 0, the first never saw key 3. Only the count and the graph can
    // tell; real time cannot place the pages around T2.
    let report = checked(vec![
        setup(),
        op(2, 40, 50, moved(0, 1, 3, 10)),
        op(
            3,
            35,
            60,
            vec![
                group0(true, Some(1), &[(1, 2)]),
                scan(
                    KeyBound::Included(0),
                    KeyBound::Excluded(1),
                    true,
                    Some(1),
                    &[],
                ),
            ],
        ),
    ]);
    assert_eq!(
        kinds(&report),
        [AnomalyKind::GSingleRealtime, AnomalyKind::ScanCount]
    );
}

#[test]
fn concurrent_scans_that_miss_or_double_a_move_are_cycles() {
    // R runs concurrently with mover M (row 0 to key 2). Seeing neither
    // key 0 nor key 2 puts R before M (key 2) and after M (key 0).
    let neither = checked(vec![
        setup(),
        op(1, 20, 40, moved(0, 1, 2, 10)),
        op(2, 15, 45, vec![group0(false, None, &[(1, 2)])]),
    ]);
    assert_eq!(
        kinds(&neither),
        [AnomalyKind::GSingleRealtime, AnomalyKind::ScanCount]
    );
    // Seeing both is a fractured read of M: a cycle of wr and rw alone.
    let both = checked(vec![
        setup(),
        op(1, 20, 40, moved(0, 1, 2, 10)),
        op(
            2,
            15,
            45,
            vec![group0(false, None, &[(0, 1), (1, 2), (2, 10)])],
        ),
    ]);
    assert_eq!(kinds(&both), [AnomalyKind::GSingle, AnomalyKind::ScanCount]);
    // Either state alone is fine: R before or after M.
    for rows in [&[(0, 1), (1, 2)][..], &[(1, 2), (2, 10)]] {
        let one = checked(vec![
            setup(),
            op(1, 20, 40, moved(0, 1, 2, 10)),
            op(2, 15, 45, vec![group0(false, None, rows)]),
        ]);
        assert!(one.valid(), "{one}");
    }
}

#[test]
fn stale_scans_and_bad_rows_are_flagged() {
    // A scan invoked after M completed that still shows the moved row.
    let stale = checked(vec![
        setup(),
        op(1, 20, 30, moved(0, 1, 2, 10)),
        op(2, 40, 50, vec![group0(false, None, &[(0, 1), (1, 2)])]),
    ]);
    assert_eq!(
        kinds(&stale),
        [AnomalyKind::GSingleRealtime, AnomalyKind::MissedRow]
    );
    // Rows out of order, past the limit, outside the bounds; a value no one
    // wrote; a failed write's value.
    let failed = Op {
        outcome: Outcome::Fail,
        ..op(1, 20, 30, vec![MicroOp::Insert { key: 2, value: 77 }])
    };
    let bad = checked(vec![
        setup(),
        failed,
        op(2, 40, 50, vec![group0(false, None, &[(1, 2), (0, 1)])]),
        op(3, 40, 50, vec![group0(false, Some(1), &[(0, 1), (1, 2)])]),
        op(
            4,
            40,
            50,
            vec![scan(
                KeyBound::Included(1),
                KeyBound::Included(3),
                false,
                None,
                &[(0, 1), (1, 2)],
            )],
        ),
        op(
            5,
            40,
            50,
            vec![scan(
                KeyBound::Included(6),
                KeyBound::Included(7),
                false,
                None,
                &[(6, 99)],
            )],
        ),
        op(
            6,
            40,
            50,
            vec![scan(
                KeyBound::Included(2),
                KeyBound::Included(2),
                false,
                None,
                &[(2, 77)],
            )],
        ),
    ]);
    for kind in [
        AnomalyKind::ScanShape,
        AnomalyKind::NeverWritten,
        AnomalyKind::G1a,
    ] {
        assert!(bad.count(kind) > 0, "{kind} expected: {bad}");
    }
    assert_eq!(bad.count(AnomalyKind::ScanShape), 3, "{bad}");
}

#[test]
fn two_scans_of_one_transaction_must_agree() {
    let report = checked(vec![
        setup(),
        op(
            1,
            20,
            30,
            vec![
                group0(false, None, &[(0, 1), (1, 2)]),
                group0(true, None, &[(0, 1)]),
            ],
        ),
    ]);
    assert!(report.count(AnomalyKind::Internal) > 0, "{report}");
}

#[test]
fn overlapping_writers_of_a_key_are_refused() {
    let err = check(&History::new(
        meta(),
        vec![
            setup(),
            op(1, 20, 40, moved(0, 1, 2, 10)),
            op(2, 30, 50, vec![MicroOp::Insert { key: 2, value: 11 }]),
        ],
    ))
    .unwrap_err();
    assert!(err.to_string().contains("overlap in time"), "{err}");
}

// ---------------------------------------------------------------- simulated

fn sim(ops: usize, seed: u64) -> SimConfig {
    SimConfig {
        ops,
        clients: 6,
        seed,
        unknown_probability: 0.02,
    }
}

#[test]
fn simulated_scan_histories_are_valid_and_a_dropped_row_is_not() {
    for seed in 0..3 {
        let history = simulate(&ScanParams::default(), &sim(6_000, seed));
        assert!(history.count(Outcome::Unknown) > 0);
        let report = check(&history).expect("checkable");
        assert!(report.valid(), "seed {seed}: {report}");
        assert!(report.graph_edges > 0);
        // Drop the first row of the first unlimited scan of a read-only op.
        let mut broken = history.clone();
        let victim = broken
            .ops
            .iter_mut()
            .filter(|op| op.outcome == Outcome::Ok && op.id > 0)
            .filter(|op| op.ops.iter().all(|m| matches!(m, MicroOp::Scan { .. })))
            .find_map(|op| {
                op.ops.iter_mut().find_map(|m| match m {
                    MicroOp::Scan {
                        limit: None,
                        rows: Some(rows),
                        ..
                    } if !rows.is_empty() => Some(rows),
                    _ => None,
                })
            })
            .expect("the simulation has unlimited scans");
        victim.remove(0);
        let report = check(&broken).expect("checkable");
        assert!(
            report.count(AnomalyKind::ScanCount) > 0,
            "seed {seed}: {report}"
        );
    }
}

// ---------------------------------------------------------------- engine

fn duration_ms() -> u64 {
    std::env::var("ROOST_CHECK_SECONDS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(1000, |s| (s * 1000.0) as u64)
        .max(1)
}

fn engine_run(seed: u64, clients: usize, planted_bugs: PlantedBugs) -> Result<History, RunError> {
    let mut config = RunConfig::new(WorkloadKind::Scan);
    config.clients = clients;
    config.seed = seed;
    config.duration_ms = duration_ms();
    config.planted_bugs = planted_bugs;
    run_engine(&config)
}

/// How many ok scans returned rows and how many ok moves committed.
fn mix(history: &History) -> (usize, usize) {
    let ok = || history.ops.iter().filter(|op| op.outcome == Outcome::Ok);
    let scans = ok()
        .flat_map(|op| &op.ops)
        .filter(|m| matches!(m, MicroOp::Scan { rows: Some(r), .. } if !r.is_empty()))
        .count();
    let moves = ok()
        .filter(|op| op.ops.iter().any(|m| matches!(m, MicroOp::Delete { .. })))
        .count();
    (scans, moves)
}

#[test]
fn the_engine_passes_the_scan_workload() {
    for (seed, clients) in [(1, 2), (2, 3), (3, 4)] {
        let started = Instant::now();
        let history = engine_run(seed, clients, PlantedBugs::default()).expect("engine run");
        let report = check(&history).expect("checkable");
        let (scans, moves) = mix(&history);
        println!(
            "seed {seed}, {clients} clients, {:.1} s: {} ({scans} scans, {moves} moves)",
            started.elapsed().as_secs_f64(),
            report.summary()
        );
        if !report.valid() {
            let path = std::env::temp_dir().join(format!("roost-check-scan-engine-{seed}.jsonl"));
            if history.save_to_path(&path).is_ok() {
                println!("history saved to {}", path.display());
            }
        }
        assert!(report.valid(), "seed {seed}: {report}");
        assert!(
            scans > 1000 && moves > 1000,
            "too little traffic: {scans} scans, {moves} moves"
        );
    }
}

/// Runs rounds (seed 1, 2, ...) until the checker flags one, within 30 s
/// (phantom validation off, so no run aborts its final read).
fn flagged_within_budget(planted_bugs: PlantedBugs) -> Report {
    let budget = Duration::from_secs(30);
    let started = Instant::now();
    for seed in 1.. {
        assert!(
            started.elapsed() < budget,
            "{planted_bugs:?} never flagged in {budget:?}"
        );
        let history = engine_run(seed, 4, planted_bugs).expect("engine run");
        let report = check(&history).expect("checkable");
        println!(
            "seed {seed}, {:.1} s in: {}",
            started.elapsed().as_secs_f64(),
            report.summary()
        );
        if !report.valid() {
            return report;
        }
    }
    unreachable!("the loop returns or panics")
}

#[test]
fn skipped_phantom_validation_is_caught() {
    let report = flagged_within_budget(PlantedBugs {
        skip_phantom_validation: true,
        ..PlantedBugs::default()
    });
    println!("{report}");
    assert!(
        report.count(AnomalyKind::ScanCount) > 0,
        "a phantom must show as a wrong row count: {report}"
    );
    let named = report
        .anomalies
        .iter()
        .find(|a| a.kind == AnomalyKind::ScanCount)
        .expect("explained");
    assert!(
        named.explanation.contains("missed (a phantom)"),
        "{named:?}"
    );
}

/// A scan that skips a record is invisible to commit (the leaves it copied
/// did not change): the skipped row reaches the history, and the checker
/// must name it.
#[test]
fn scans_that_skip_a_record_are_caught() {
    let report = flagged_within_budget(PlantedBugs {
        scans_skip_first_record: true,
        ..PlantedBugs::default()
    });
    assert!(report.count(AnomalyKind::MissedRow) > 0, "{report}");
}

// ---------------------------------------------------------------- reactors

#[test]
fn the_reactor_layer_passes_the_scan_workload_while_reactors_move() {
    let config = ReactorRunConfig {
        duration_ms: duration_ms(),
        ..ReactorRunConfig::default()
    };
    let started = Instant::now();
    let run = run_reactors(&config).expect("reactor run");
    let report = check(&run.history).expect("checkable");
    let (scans, moves) = mix(&run.history);
    println!(
        "reactors, {:.1} s: {} ({scans} scans, {moves} row moves, {} reactor moves, {} starved)",
        started.elapsed().as_secs_f64(),
        report.summary(),
        run.moves,
        run.moves_starved
    );
    assert!(report.valid(), "{report}");
    assert!(scans > 100 && moves > 100, "too little traffic");
    assert!(run.moves > 0, "no reactor moved");
}

/// Planted bugs reach the reactors' engine (`Database::with_engine_config`):
/// scans through `ReactorCtx::scan` that skip a record are named.
#[test]
fn the_reactor_layer_with_scans_that_skip_a_record_is_caught() {
    let config = ReactorRunConfig {
        duration_ms: duration_ms(),
        planted_bugs: PlantedBugs {
            scans_skip_first_record: true,
            ..PlantedBugs::default()
        },
        ..ReactorRunConfig::default()
    };
    let run = run_reactors(&config).expect("reactor run");
    let report = check(&run.history).expect("checkable");
    println!("reactors, planted: {}", report.summary());
    assert!(report.count(AnomalyKind::MissedRow) > 0, "{report}");
}

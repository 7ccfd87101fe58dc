//! Histories from `workload::simulate` (a correct model with overlapping
//! ops, some outcomes unknown) must pass, for every workload; and the 100k-op
//! list-append check must take seconds.

use std::time::Instant;

use roost_check::workload::{simulate, SimConfig, WorkloadConfig};
use roost_check::{check, WorkloadKind};

fn sim(ops: usize, seed: u64, unknown_probability: f64) -> SimConfig {
    SimConfig {
        ops,
        clients: 8,
        seed,
        unknown_probability,
    }
}

#[test]
fn simulated_histories_of_every_workload_are_valid() {
    for kind in WorkloadKind::ALL {
        for seed in 0..3 {
            let mut workload = WorkloadConfig::new(kind);
            if kind == WorkloadKind::Counter && seed == 1 {
                workload.counter_bound = Some(200);
            }
            let history = simulate(&workload, &sim(4000, seed, 0.03));
            assert!(history.count(roost_check::Outcome::Unknown) > 0);
            let report = check(&history).expect("checkable");
            assert!(report.valid(), "{kind:?} seed {seed}: {report}");
        }
    }
}

/// The list-append check of a generated 100,000-op history (release build:
/// a few seconds at most on 2 cores; `ROOST_CHECK_OPS` changes the size).
#[test]
fn check_100k_list_append_ops_in_seconds() {
    let ops: usize = std::env::var("ROOST_CHECK_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let started = Instant::now();
    let history = simulate(
        &WorkloadConfig::new(WorkloadKind::ListAppend),
        &sim(ops, 42, 0.01),
    );
    let generated_ms = started.elapsed().as_millis();
    let started = Instant::now();
    let report = check(&history).expect("checkable");
    let check_ms = started.elapsed().as_millis();
    println!(
        "{ops} list-append ops: generated in {generated_ms} ms, checked in {check_ms} ms ({} nodes, {} edges)",
        report.graph_nodes, report.graph_edges
    );
    assert!(report.valid(), "{report}");
    assert_eq!(report.graph_nodes, ops);
    if cfg!(not(debug_assertions)) {
        assert!(check_ms < 20_000, "checking {ops} ops took {check_ms} ms");
    }
}

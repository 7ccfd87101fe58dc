//! The reliable commit under the cluster's deterministic simulator: loss,
//! duplication, reordering, crashes, restarts and partitions, views from
//! the membership protocol. `ROOST_COMMIT_SIM_SEEDS` runs more seeds.

use roost_cluster::sim::{campaign, CampaignSpec, Scenario, SimConfig, Workload};
use roost_commit::sim::CommitScenario;
use roost_commit::{CommitBugs, ObjectState};

fn seeds() -> u64 {
    std::env::var("ROOST_COMMIT_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100)
}

#[test]
fn seeds_with_faults_keep_every_commit_invariant() {
    let scenario = CommitScenario::default();
    let config = SimConfig::default();
    let report = campaign(&scenario, &config, &CampaignSpec::seeds(0, seeds())).unwrap();
    assert!(report.first_failure.is_none(), "{:?}", report.first_failure);
    assert_eq!(report.seeds_run, seeds());
    assert!(report.crashes > 0 && report.partitions > 0, "{report:?}");
    assert!(report.ops_completed > 10 * report.seeds_run, "{report:?}");
}

#[test]
fn one_seed_gives_one_trace() {
    let scenario = CommitScenario::default();
    let config = SimConfig::default();
    let a = scenario.run(&config, 7, false).unwrap().report;
    let b = scenario.run(&config, 7, false).unwrap().report;
    assert_eq!(a, b);
}

fn finds(bugs: CommitBugs, checker: &str) {
    let scenario = CommitScenario {
        bugs,
        ..CommitScenario::default()
    };
    let config = SimConfig::default();
    let report = campaign(&scenario, &config, &CampaignSpec::seeds(0, 200)).unwrap();
    let failure = report.first_failure.expect("the planted bug was not found");
    let violation = failure.violation.expect("a failure has a violation");
    assert_eq!(violation.checker, checker, "{violation:?}");
}

#[test]
fn planted_bug_committed_before_every_ack_is_found() {
    finds(
        CommitBugs {
            committed_before_all_acks: true,
            ..CommitBugs::default()
        },
        "committed writes are at every follower",
    );
}

#[test]
fn planted_bug_follower_ignores_pipeline_order_is_found() {
    finds(
        CommitBugs {
            follower_ignores_pipeline_order: true,
            ..CommitBugs::default()
        },
        "committed writes are at every follower",
    );
}

#[test]
fn planted_bug_follower_validates_stale_rval_is_found() {
    finds(
        CommitBugs {
            follower_validates_stale_rval: true,
            ..CommitBugs::default()
        },
        "followers validate only committed writes",
    );
}

#[test]
fn planted_bug_read_only_reads_invalid_is_found() {
    finds(
        CommitBugs {
            read_only_reads_invalid: true,
            ..CommitBugs::default()
        },
        "read-only transactions respect real time",
    );
}

/// Reading an Invalid object is caught within a few seeds (it fails 195
/// of seeds 0..200, seed 0 first), and the same seeds are clean without
/// the bug: the real-time check is sound for the correct protocol.
#[test]
fn reading_invalid_objects_breaks_real_time_within_ten_seeds() {
    let config = SimConfig::default();
    let spec = CampaignSpec::seeds(0, 10);
    let planted = CommitScenario {
        bugs: CommitBugs {
            read_only_reads_invalid: true,
            ..CommitBugs::default()
        },
        ..CommitScenario::default()
    };
    let report = campaign(&planted, &config, &spec).unwrap();
    let failure = report.first_failure.expect("the planted bug was not found");
    let violation = failure.violation.expect("a failure has a violation");
    assert_eq!(
        violation.checker, "read-only transactions respect real time",
        "{violation:?}"
    );
    assert!(violation.detail.contains("after v"), "{violation:?}");
    let clean = campaign(&CommitScenario::default(), &config, &spec).unwrap();
    assert!(clean.first_failure.is_none(), "{:?}", clean.first_failure);
    assert_eq!(clean.seeds_run, 10);
}

/// The clients read as well as write: read-only transactions are done at
/// every node, and refused where an object is Invalid (its reliable
/// commit pending) or not held, or the node holds no lease.
#[test]
fn the_workload_reads_and_its_reads_are_checked() {
    let scenario = CommitScenario::default();
    let mut done = 0;
    let mut refused_invalid = 0;
    let mut refused_elsewhere = 0;
    let mut readers = std::collections::BTreeSet::new();
    for seed in 0..5 {
        let mut sim = scenario.simulation(SimConfig::default(), seed).unwrap();
        let report = sim.run_in_place().clone();
        assert!(report.violation.is_none(), "{report:?}");
        let history = sim.workload().history();
        assert!(!history.committed.is_empty());
        done += history.reads.len();
        refused_invalid += history.reads_refused.invalid;
        refused_elsewhere += history.reads_refused.not_replica + history.reads_refused.not_serving;
        assert_eq!(history.reads_refused.malformed, 0);
        readers.extend(history.reads.iter().map(|r| r.node));
        assert!(history
            .reads
            .iter()
            .all(|r| !r.values.is_empty() && r.values.iter().all(|v| v.version > 0)));
        // The settled end: every object Valid, so readable.
        for slot in sim.nodes() {
            let Some(node) = slot.node() else { continue };
            let store = node.app().commit().store();
            assert!(store
                .objects
                .values()
                .all(|o| o.state == ObjectState::Valid));
        }
        assert_eq!(
            report.ops_completed,
            (history.committed.len() + history.reads.len()) as u64
        );
    }
    eprintln!("{done} reads done, {refused_invalid} refused (Invalid), {refused_elsewhere} (no lease or copy)");
    assert!(done > 500, "{done} reads done");
    assert!(refused_invalid > 50, "{refused_invalid} refused (Invalid)");
    assert!(
        refused_elsewhere > 0,
        "no read refused for a lease or a copy"
    );
    assert_eq!(readers.len(), 3, "{readers:?}");
}

/// Seeds the real-time check once failed on: at 5 nodes, seed 50123 (a
/// replay of a slot issued before a follower restarted installed an old
/// version there, under a newer one committed meanwhile); at 3 nodes,
/// seed 79 (a restarted follower that got the object again from its
/// coordinator's re-sends must take later replays of that pipeline).
#[test]
fn seeds_that_broke_real_time_are_clean() {
    let scenario = CommitScenario::default();
    for (nodes, seed) in [(5, 50_123), (3, 79)] {
        let config = SimConfig {
            nodes,
            ..SimConfig::default()
        };
        let report = scenario.run(&config, seed, false).unwrap().report;
        assert!(report.violation.is_none(), "{nodes} nodes: {report:?}");
        assert!(report.crashes > 0, "{report:?}");
    }
}

#[test]
fn five_nodes_keep_every_commit_invariant() {
    let scenario = CommitScenario::default();
    let config = SimConfig {
        nodes: 5,
        ..SimConfig::default()
    };
    let seeds = seeds() / 3;
    let report = campaign(&scenario, &config, &CampaignSpec::seeds(50_000, seeds)).unwrap();
    assert!(report.first_failure.is_none(), "{:?}", report.first_failure);
    assert!(report.ops_completed > 10 * report.seeds_run, "{report:?}");
}

//! The reliable commit under the cluster's deterministic simulator: loss,
//! duplication, reordering, crashes, restarts and partitions, views from
//! the membership protocol. `ROOST_COMMIT_SIM_SEEDS` runs more seeds.

use roost_cluster::sim::{campaign, CampaignSpec, Scenario, SimConfig};
use roost_commit::sim::CommitScenario;
use roost_commit::CommitBugs;

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

//! The deterministic simulation: campaigns over seeds with faults, the same
//! seed giving the same trace, and planted bugs that the checkers catch.

use std::time::Instant;

use roost_cluster::membership::MembershipBugs;
use roost_cluster::register::RegisterBugs;
use roost_cluster::sim::{campaign, SimConfig, Simulation};

fn seeds_from_env(default: u64) -> u64 {
    std::env::var("ROOST_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[test]
fn a_thousand_seeds_with_faults_pass() {
    let seeds = seeds_from_env(1_000);
    let started = Instant::now();
    let result = campaign(&SimConfig::default(), 0, seeds);
    let elapsed = started.elapsed();
    if let Some(failure) = &result.first_failure {
        panic!(
            "seed {} failed: {:?}\nreplay: roost sim --seed {}",
            failure.seed, failure.violation, failure.seed
        );
    }
    assert_eq!(result.seeds_run, seeds);
    // The campaign must exercise what it claims to.
    assert!(result.crashes > seeds / 4, "{result:?}");
    assert!(result.partitions > seeds / 4, "{result:?}");
    assert!(result.max_epoch >= 3, "{result:?}");
    assert!(result.ops_completed > seeds * 10, "{result:?}");
    eprintln!("{seeds} seeds in {elapsed:?}: {result:?}");
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    for seed in [1, 7, 42] {
        let a = Simulation::new(SimConfig::default(), seed).run();
        let b = Simulation::new(SimConfig::default(), seed).run();
        assert_eq!(a, b);
    }
    let a = Simulation::new(SimConfig::default(), 1).run();
    let b = Simulation::new(SimConfig::default(), 2).run();
    assert_ne!(a.trace_hash, b.trace_hash);
}

#[test]
fn planted_small_quorums_are_caught() {
    let config = SimConfig {
        register_bugs: RegisterBugs {
            quorum_minus_one: true,
            ..RegisterBugs::default()
        },
        ..SimConfig::default()
    };
    let result = campaign(&config, 0, 200);
    let failure = result
        .first_failure
        .expect("the checker finds the planted bug");
    let violation = failure.violation.unwrap();
    assert!(
        violation.contains("linearizable") || violation.contains("read"),
        "{violation}"
    );
    // And it replays exactly.
    let again = Simulation::new(config, failure.seed).run();
    assert_eq!(again.trace_hash, failure.trace_hash);
    assert_eq!(again.violation, Some(violation));
}

#[test]
fn planted_early_removal_is_caught() {
    let config = SimConfig {
        membership_bugs: MembershipBugs {
            declare_before_lease_expiry: true,
        },
        ..SimConfig::default()
    };
    let result = campaign(&config, 0, 200);
    let failure = result
        .first_failure
        .expect("the checker finds the planted bug");
    assert!(failure.violation.unwrap().contains("lease safety"));
}

#[test]
fn planted_restart_without_recovery_is_caught() {
    let config = SimConfig {
        register_bugs: RegisterBugs {
            skip_recovery: true,
            ..RegisterBugs::default()
        },
        // Lossy enough that writes often reach only a bare majority.
        drop_probability: 0.3,
        fault_interval_ms: 100,
        ..SimConfig::default()
    };
    let result = campaign(&config, 0, 1_000);
    assert!(result.first_failure.is_some(), "{result:?}");
}

/// Found by a 30,000-seed campaign (seed 19915): a restarted process adopted
/// the first view, in which its node id appears with the old incarnation, took
/// itself for a first-view member and skipped recovery, and a write it later
/// coordinated reused a tag. Membership is by incarnation.
#[test]
fn a_restarted_process_in_the_first_view_still_recovers() {
    use roost_cluster::protocol::{Context, Effects, Input, Protocol, View};
    use roost_cluster::register::{Register, RegisterConfig};
    use roost_cluster::{Epoch, NodeId};

    let nodes = [NodeId(0), NodeId(1), NodeId(2)];
    let view = View {
        epoch: Epoch(1),
        members: nodes.iter().map(|&n| (n, 1)).collect(),
    };
    let mut register = Register::new(RegisterConfig::default(), RegisterBugs::default());
    let mut fx = Effects::default();
    let restarted = Context {
        now_ms: 0,
        me: NodeId(0),
        nodes: &nodes,
        view: &view,
        member: false, // incarnation 2 in a view that lists incarnation 1
        serving: false,
    };
    register.on_input(&restarted, Input::ViewChange, &mut fx);
    assert!(!register.recovered());
    let original = Context {
        member: true,
        ..restarted
    };
    register.on_input(&original, Input::ViewChange, &mut fx);
    assert!(register.recovered());
}

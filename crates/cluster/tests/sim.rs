//! The deterministic simulation: campaigns over seeds with faults, the same
//! seed giving the same trace, planted bugs that the checkers catch (a
//! disk that forgets the membership's acceptor record among them), several
//! clients per node, campaign budgets, and a second (toy) protocol through
//! the same core.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use roost_cluster::membership::MembershipBugs;
use roost_cluster::register::RegisterBugs;
use roost_cluster::sim::RegisterScenario;
use roost_cluster::sim::{
    campaign, membership_checkers, run_campaign, CampaignError, CampaignSpec, CampaignStop,
    Scenario, SimConfig, Simulation,
};
use roost_cluster::sim::{
    Cause, Checker, ClientId, SimRng, Violation, Workload, WorkloadStats, World,
};

fn seeds_from_env(default: u64) -> u64 {
    std::env::var("ROOST_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn register_campaign(
    scenario: &RegisterScenario,
    config: &SimConfig,
    seeds: u64,
) -> roost_cluster::sim::CampaignReport {
    campaign(scenario, config, &CampaignSpec::seeds(0, seeds)).expect("valid settings")
}

#[test]
fn a_thousand_seeds_with_faults_pass() {
    let seeds = seeds_from_env(1_000);
    let started = Instant::now();
    let result = register_campaign(&RegisterScenario::default(), &SimConfig::default(), seeds);
    let elapsed = started.elapsed();
    if let Some(failure) = &result.first_failure {
        panic!(
            "seed {} failed: {:?}\nreplay: roost sim --protocol register --seed {} --trace",
            failure.seed, failure.violation, failure.seed
        );
    }
    assert_eq!(result.seeds_run, seeds);
    assert_eq!(result.stop, CampaignStop::Exhausted);
    assert_eq!(result.next_seed(), seeds);
    // The campaign must exercise what it claims to.
    assert!(result.crashes > seeds / 4, "{result:?}");
    assert!(result.partitions > seeds / 4, "{result:?}");
    assert!(result.max_epoch >= 3, "{result:?}");
    assert!(result.ops_completed > seeds * 10, "{result:?}");
    eprintln!("{seeds} seeds in {elapsed:?}: {result:?}");
}

/// Five nodes: a write can be stored at a minority that a recovering
/// writer's majority misses (with three, any majority of recovered replicas
/// includes it); a campaign at five found writes of two incarnations sharing
/// a tag (`a_restarted_writer_never_reuses_a_tag` in `register.rs`).
#[test]
fn five_nodes_pass() {
    let config = SimConfig {
        nodes: 5,
        ..SimConfig::default()
    };
    let seeds = seeds_from_env(1_000) / 10;
    let result = register_campaign(&RegisterScenario::default(), &config, seeds);
    assert_eq!(result.first_failure, None);
    assert!(result.crashes > seeds / 2, "{result:?}");
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    let scenario = RegisterScenario::default();
    let config = SimConfig::default();
    for seed in [1, 7, 42] {
        let a = scenario.run(&config, seed, false).unwrap().report;
        let b = scenario.run(&config, seed, true).unwrap();
        assert_eq!(a, b.report, "tracing changes nothing");
        assert!(!b.trace.is_empty());
    }
    let a = scenario.run(&config, 1, false).unwrap().report;
    let b = scenario.run(&config, 2, false).unwrap().report;
    assert_ne!(a.trace_hash, b.trace_hash);
}

#[test]
fn several_clients_per_node_overlap_and_stay_linearizable() {
    let config = SimConfig {
        clients_per_node: 6,
        ..SimConfig::default()
    };
    let scenario = RegisterScenario::default();
    let mut most = 0;
    for seed in 0..20 {
        let mut sim = scenario.simulation(config.clone(), seed).unwrap();
        let report = sim.run_in_place().clone();
        assert_eq!(report.violation, None, "seed {seed}");
        most = most.max(sim.workload().max_concurrent_per_node());
    }
    assert!(
        most >= 3,
        "operations of one node overlapped at most {most}-fold"
    );
}

#[test]
fn planted_small_quorums_are_caught() {
    let scenario = RegisterScenario {
        bugs: RegisterBugs {
            quorum_minus_one: true,
            ..RegisterBugs::default()
        },
        ..RegisterScenario::default()
    };
    let config = SimConfig::default();
    let result = register_campaign(&scenario, &config, 200);
    assert_eq!(result.stop, CampaignStop::Violation);
    let failure = result
        .first_failure
        .expect("the checker finds the planted bug");
    let violation = failure.violation.clone().unwrap();
    assert_eq!(violation.checker, "linearizability", "{violation}");
    // And it replays exactly.
    let again = scenario.run(&config, failure.seed, false).unwrap().report;
    assert_eq!(again, failure);
}

#[test]
fn planted_early_removal_is_caught() {
    let config = SimConfig {
        membership_bugs: MembershipBugs {
            declare_before_lease_expiry: true,
            ..MembershipBugs::default()
        },
        ..SimConfig::default()
    };
    let result = register_campaign(&RegisterScenario::default(), &config, 200);
    let failure = result
        .first_failure
        .expect("the checker finds the planted bug");
    assert_eq!(failure.violation.unwrap().checker, "lease safety");
}

/// The membership alone (a protocol that does nothing is always ready, so
/// the simulator may crash a node again while the last one it restarted has
/// not rejoined yet), with faults dense around the first view: a restarted
/// node that forgot its acceptor record votes on epoch 1 again.
mod idle {
    use std::cell::Cell;
    use std::rc::Rc;

    use roost_cluster::protocol::{Context, Effects, Incarnation, Input, Protocol};
    use roost_cluster::sim::{
        membership_checkers, Cause, Checker, ClientId, ServesAtEnd, SimConfig, SimReport, SimRng,
        Simulation, Violation, Workload, WorkloadStats, World,
    };
    use roost_cluster::NodeId;

    pub struct Idle;

    impl Protocol for Idle {
        type Msg = ();
        type Cmd = ();
        type Out = ();

        fn on_input(&mut self, _: &Context<'_>, _: Input<(), ()>, _: &mut Effects<(), ()>) {}
    }

    pub struct NoClients;

    impl Workload<Idle> for NoClients {
        type History = ();

        fn next_command(&mut self, _: &mut SimRng, _: u64, _: ClientId) -> Option<()> {
            None
        }
        fn on_output(&mut self, _: NodeId, _: u64, _: Cause, _: &()) {}
        fn on_crash(&mut self, _: NodeId, _: u64) {}
        fn history(&self) -> &() {
            &()
        }
        fn stats(&self) -> WorkloadStats {
            WorkloadStats::default()
        }
    }

    /// Lossy, with a fault considered every 50 ms and quick restarts.
    pub fn config() -> SimConfig {
        SimConfig {
            duration_ms: 1_500,
            drop_probability: 0.3,
            fault_interval_ms: 50,
            restart_min_ms: 20,
            restart_max_ms: 200,
            clients_per_node: 0,
            ..SimConfig::default()
        }
    }

    pub fn run(config: &SimConfig, seed: u64) -> SimReport {
        let factory = |_: NodeId, _: Incarnation| Idle;
        Simulation::new(
            config.clone(),
            seed,
            factory,
            NoClients,
            membership_checkers(),
        )
        .expect("valid settings")
        .run()
    }

    /// Crashes hit any number of nodes, whole-cluster outages among them,
    /// every 100 ms for 2 s; then 2 s of calm for the last restarts to rejoin.
    pub fn outages(nodes: u32) -> SimConfig {
        SimConfig {
            nodes,
            duration_ms: 4_000,
            calm_tail_ms: 2_000,
            crash_majorities: true,
            fault_interval_ms: 100,
            restart_min_ms: 20,
            restart_max_ms: 300,
            clients_per_node: 0,
            ..SimConfig::default()
        }
    }

    /// Counts the events after which more than a minority of nodes was down.
    pub struct MajorityDown(pub Rc<Cell<u64>>);

    impl Checker<Idle, ()> for MajorityDown {
        fn after_event(&mut self, world: &World<'_, Idle>, _: &()) -> Result<(), Violation> {
            let down = world.nodes.iter().filter(|s| s.node().is_none()).count();
            if down > world.nodes.len() / 2 {
                self.0.set(self.0.get() + 1);
            }
            Ok(())
        }
    }

    /// A run under [`outages`], with the membership checkers and every node
    /// serving at the end; also how many events a majority was down after.
    pub fn run_outages(config: &SimConfig, seed: u64) -> (SimReport, u64) {
        let factory = |_: NodeId, _: Incarnation| Idle;
        let (agreement, lease) = membership_checkers();
        let down = Rc::new(Cell::new(0));
        let report = Simulation::new(
            config.clone(),
            seed,
            factory,
            NoClients,
            (agreement, lease, ServesAtEnd, MajorityDown(down.clone())),
        )
        .expect("valid settings")
        .run();
        (report, down.get())
    }
}

/// Crashes that take down a majority of the nodes, or all of them at once:
/// the restarted processes vote as their predecessors (their acceptor
/// records), so each time the next view is chosen and at the end the whole
/// cluster serves again, at one, three and five nodes.
#[test]
fn majority_crashes_and_outages_recover() {
    let seeds = seeds_from_env(1_000);
    for (nodes, seeds) in [(3, seeds), (1, seeds / 10), (5, seeds / 10)] {
        let config = idle::outages(nodes);
        let mut majority_down = 0;
        let result = run_campaign(&CampaignSpec::seeds(0, seeds), |seed| {
            let (report, down) = idle::run_outages(&config, seed);
            majority_down += u64::from(down > 0);
            report
        })
        .unwrap();
        if let Some(failure) = &result.first_failure {
            panic!(
                "{nodes} nodes, seed {} failed: {:?}",
                failure.seed, failure.violation
            );
        }
        assert_eq!(result.seeds_run, seeds);
        // Most seeds lose a majority at some point, and views keep changing.
        assert!(majority_down > seeds / 2, "{majority_down} of {seeds}");
        assert!(result.crashes > seeds * 3, "{result:?}");
        assert!(result.max_epoch >= 5, "{result:?}");
    }
}

/// The same faults with a disk that loses the record: restarted processes
/// cannot vote for their predecessors, and a cluster that lost a majority
/// of a view's members at once never chooses the next view (the stall the
/// record closes), or chooses a second first view.
#[test]
fn without_records_majority_crashes_stall_the_cluster() {
    let config = SimConfig {
        membership_bugs: MembershipBugs {
            forget_acceptor_state_on_restart: true,
            ..MembershipBugs::default()
        },
        ..idle::outages(3)
    };
    let result = run_campaign(&CampaignSpec::seeds(0, 100), |seed| {
        idle::run_outages(&config, seed).0
    })
    .unwrap();
    let failure = result.first_failure.expect("the checkers notice");
    let violation = failure.violation.unwrap();
    assert!(
        ["serves at end", "view agreement"].contains(&violation.checker.as_str()),
        "{violation}"
    );
}

#[test]
fn planted_forgotten_acceptor_state_is_caught() {
    let forgetful = SimConfig {
        membership_bugs: MembershipBugs {
            forget_acceptor_state_on_restart: true,
            ..MembershipBugs::default()
        },
        ..idle::config()
    };
    let result = run_campaign(&CampaignSpec::seeds(0, 2_000), |seed| {
        idle::run(&forgetful, seed)
    })
    .unwrap();
    let failure = result
        .first_failure
        .expect("the checker finds the planted bug");
    let violation = failure.violation.clone().unwrap();
    assert_eq!(violation.checker, "view agreement", "{violation}");
    assert!(violation.detail.contains("installed e1"), "{violation}");
    assert_eq!(idle::run(&forgetful, failure.seed), failure, "replays");
    // With the record kept, the same faults pass (and the failing seed too).
    let seeds = seeds_from_env(1_000).max(failure.seed + 1);
    let kept = run_campaign(&CampaignSpec::seeds(0, seeds), |seed| {
        idle::run(&idle::config(), seed)
    })
    .unwrap();
    assert_eq!(kept.first_failure, None);
    assert!(kept.crashes > seeds, "{kept:?}");
}

#[test]
fn a_restarted_node_boots_from_what_it_persisted() {
    let scenario = RegisterScenario::default();
    let config = SimConfig::default();
    let mut checked = 0;
    for seed in 0..20 {
        let mut sim = scenario.simulation(config.clone(), seed).unwrap();
        let report = sim.run_in_place().clone();
        assert_eq!(report.violation, None, "seed {seed}");
        for slot in sim.nodes() {
            // Every node persisted at least the view it installed, and its
            // disk outlived its crashes.
            let Some(record) = slot.persisted() else {
                continue;
            };
            assert_eq!(record.node, slot.id());
            if let Some(node) = slot.node() {
                assert!(node.epoch() >= record.installed.epoch);
                if slot.incarnation() > 1 && record.installed.epoch.0 > 0 {
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 0, "no restarted node with a persisted view");
}

#[test]
fn planted_restart_without_recovery_is_caught() {
    let scenario = RegisterScenario {
        bugs: RegisterBugs {
            skip_recovery: true,
            ..RegisterBugs::default()
        },
        ..RegisterScenario::default()
    };
    let config = SimConfig {
        // Lossy enough that writes often reach only a bare majority.
        drop_probability: 0.3,
        fault_interval_ms: 100,
        ..SimConfig::default()
    };
    let result = register_campaign(&scenario, &config, 1_000);
    let failure = result
        .first_failure
        .expect("the checker finds the planted bug");
    assert_eq!(failure.violation.unwrap().checker, "linearizability");
}

#[test]
fn campaigns_keep_to_their_budget() {
    let scenario = RegisterScenario::default();
    let config = SimConfig {
        duration_ms: 300,
        ..SimConfig::default()
    };
    // Wall time: seeds without end, stopped by the clock.
    let spec = CampaignSpec::timed(5, Duration::from_millis(300));
    let result = campaign(&scenario, &config, &spec).unwrap();
    assert_eq!(result.stop, CampaignStop::OutOfTime);
    assert!(result.seeds_run >= 1);
    assert_eq!(result.first_seed, 5);
    // Seeds: exactly the range, resumable where it stopped.
    let first = campaign(&scenario, &config, &CampaignSpec::seeds(0, 3)).unwrap();
    let second = campaign(
        &scenario,
        &config,
        &CampaignSpec::seeds(first.next_seed(), 2),
    )
    .unwrap();
    let whole = campaign(&scenario, &config, &CampaignSpec::seeds(0, 5)).unwrap();
    assert_eq!(first.events + second.events, whole.events);
    // Bad settings are errors before any seed runs.
    assert_eq!(
        campaign(&scenario, &config, &CampaignSpec::seeds(3, 0)),
        Err(CampaignError::EmptyRange(3, 3))
    );
    let bad = SimConfig {
        nodes: 0,
        ..SimConfig::default()
    };
    assert!(matches!(
        campaign(&scenario, &bad, &CampaignSpec::seeds(0, 1)),
        Err(CampaignError::Config(_))
    ));
    // The generic runner stops at the first violation.
    let mut ran = Vec::new();
    let stopped = run_campaign(&CampaignSpec::seeds(10, 100), |seed| {
        ran.push(seed);
        let mut report = scenario.run(&config, seed, false).unwrap().report;
        if seed == 12 {
            report.violation = Some(Violation::new("planted", 0, "by the test"));
        }
        report
    })
    .unwrap();
    assert_eq!(ran, vec![10, 11, 12]);
    assert_eq!(stopped.first_failure.unwrap().seed, 12);
}

/// Found by a 30,000-seed campaign (seed 19915): a restarted process adopted
/// the first view, in which its node id appears with the old incarnation, took
/// itself for a first-view member and skipped recovery, and a write it later
/// coordinated reused a tag. Membership is by incarnation.
#[test]
fn a_restarted_process_in_the_first_view_still_recovers() {
    use roost_cluster::protocol::{Context, Effects, Input, Protocol, View};
    use roost_cluster::register::{Register, RegisterConfig};
    use roost_cluster::{EpochId, NodeId};

    let nodes = [NodeId(0), NodeId(1), NodeId(2)];
    let view = View {
        epoch: EpochId(1),
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

/// A second protocol through the same core: a node asked to `Ping(id)` asks
/// every node and reports `Done(id)` once a majority answered. Many pings are
/// in flight per node, tagged by the client-chosen id; the checker holds that
/// no ping completes twice (duplicated pongs must not count twice).
mod ping {
    use super::*;
    use roost_cluster::protocol::{Context, Effects, Incarnation, Input, Protocol};
    use roost_cluster::NodeId;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub enum Msg {
        Ping(u64),
        Pong(u64),
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Out {
        Done(u64),
    }

    pub const MAX_PENDING: usize = 32;

    pub struct Ping {
        /// Planted: keep a ping pending after it is done.
        pub forget_to_finish: bool,
        pending: BTreeMap<u64, BTreeSet<NodeId>>,
    }

    impl Protocol for Ping {
        type Msg = Msg;
        type Cmd = u64;
        type Out = Out;

        fn on_input(
            &mut self,
            ctx: &Context<'_>,
            input: Input<Msg, u64>,
            fx: &mut Effects<Msg, Out>,
        ) {
            match input {
                Input::Command(id) if self.pending.len() < MAX_PENDING => {
                    self.pending.insert(id, BTreeSet::from([ctx.me]));
                    for &node in ctx.nodes.iter().filter(|&&n| n != ctx.me) {
                        fx.send(node, Msg::Ping(id));
                    }
                    fx.set_timer(1, 20);
                }
                Input::Command(_) => {}
                Input::Message {
                    from,
                    msg: Msg::Ping(id),
                } => fx.send(from, Msg::Pong(id)),
                Input::Message {
                    from,
                    msg: Msg::Pong(id),
                } => {
                    let Some(acks) = self.pending.get_mut(&id) else {
                        return;
                    };
                    let new = acks.insert(from);
                    if acks.len() >= ctx.majority() && (new || !self.forget_to_finish) {
                        if !self.forget_to_finish {
                            self.pending.remove(&id);
                        }
                        fx.output(Out::Done(id));
                    }
                }
                Input::Timer(_) => {
                    for (&id, acks) in &self.pending {
                        for &node in ctx.nodes.iter().filter(|n| !acks.contains(n)) {
                            fx.send(node, Msg::Ping(id));
                        }
                    }
                    if !self.pending.is_empty() {
                        fx.set_timer(1, 20);
                    }
                }
                Input::ViewChange => {}
            }
        }
    }

    /// Up to 4 pings outstanding per client.
    #[derive(Default)]
    pub struct PingWorkload {
        next_id: u64,
        outstanding: BTreeMap<ClientId, BTreeSet<u64>>,
        owner: BTreeMap<u64, ClientId>,
        /// Every completion, in order: (id, node).
        pub done: Vec<(u64, NodeId)>,
        pub max_outstanding: usize,
    }

    impl Workload<Ping> for PingWorkload {
        type History = Vec<(u64, NodeId)>;

        fn next_command(&mut self, _: &mut SimRng, _: u64, client: ClientId) -> Option<u64> {
            let mine = self.outstanding.entry(client).or_default();
            if mine.len() >= 4 {
                return None;
            }
            self.next_id += 1;
            mine.insert(self.next_id);
            self.max_outstanding = self.max_outstanding.max(mine.len());
            self.owner.insert(self.next_id, client);
            Some(self.next_id)
        }

        fn on_output(&mut self, node: NodeId, _: u64, _: Cause, out: &Out) {
            let Out::Done(id) = *out;
            self.done.push((id, node));
            if let Some(client) = self.owner.get(&id) {
                self.outstanding.entry(*client).or_default().remove(&id);
            }
        }

        fn on_crash(&mut self, node: NodeId, _: u64) {
            for (client, ids) in &mut self.outstanding {
                if client.node == node {
                    ids.clear();
                }
            }
        }

        fn history(&self) -> &Vec<(u64, NodeId)> {
            &self.done
        }

        fn stats(&self) -> WorkloadStats {
            WorkloadStats {
                completed: self.done.len() as u64,
                ..WorkloadStats::default()
            }
        }
    }

    /// No ping completes twice; no node holds more than `MAX_PENDING`.
    #[derive(Default)]
    pub struct AtMostOnce {
        seen: BTreeSet<u64>,
        checked: usize,
    }

    impl Checker<Ping, Vec<(u64, NodeId)>> for AtMostOnce {
        fn after_event(
            &mut self,
            world: &World<'_, Ping>,
            done: &Vec<(u64, NodeId)>,
        ) -> Result<(), Violation> {
            for &(id, node) in &done[self.checked..] {
                if !self.seen.insert(id) {
                    return Err(Violation::new(
                        "at most once",
                        world.now_ms,
                        format!("ping {id} completed again on {node}"),
                    ));
                }
            }
            self.checked = done.len();
            for slot in world.nodes {
                if let Some(node) = slot.node() {
                    assert!(node.app().pending.len() <= MAX_PENDING);
                }
            }
            Ok(())
        }
    }

    pub fn run(seed: u64, forget_to_finish: bool) -> (roost_cluster::sim::SimReport, usize) {
        let config = SimConfig {
            duplicate_probability: 0.2,
            ..SimConfig::default()
        };
        let (view_agreement, lease_safety) = membership_checkers();
        let mut sim = Simulation::new(
            config,
            seed,
            move |_: NodeId, _: Incarnation| Ping {
                forget_to_finish,
                pending: BTreeMap::new(),
            },
            PingWorkload::default(),
            (view_agreement, lease_safety, AtMostOnce::default()),
        )
        .unwrap();
        let report = sim.run_in_place().clone();
        (report, sim.workload().max_outstanding)
    }
}

#[test]
fn another_protocol_runs_on_the_same_core() {
    for seed in 0..10 {
        let (report, outstanding) = ping::run(seed, false);
        assert_eq!(report.violation, None, "seed {seed}");
        assert!(report.ops_completed > 100, "{report:?}");
        assert_eq!(outstanding, 4, "clients keep several pings in flight");
        assert_eq!(ping::run(seed, false).0, report, "deterministic");
    }
    let caught = (0..10).find_map(|seed| ping::run(seed, true).0.violation);
    assert_eq!(
        caught.expect("the planted double completion").checker,
        "at most once"
    );
}

/// The quiet tail: everything up to `duration_ms` runs as without it (the
/// trace is a prefix), then no client issues anything and no fault happens,
/// cut links heal and crashed nodes come back, and the run ends with every
/// node up.
#[test]
fn the_quiet_tail_heals_restarts_and_stops_the_clients() {
    let scenario = RegisterScenario::default();
    let quiet = SimConfig::default();
    assert!(quiet.quiet_tail_ms > 0);
    let bare = SimConfig {
        quiet_tail_ms: 0,
        ..SimConfig::default()
    };
    let time_of = |line: &String| -> u64 {
        line.split_whitespace()
            .next()
            .and_then(|t| t.parse().ok())
            .expect("a trace line starts with its time")
    };
    let mut tails_seen = 0;
    for seed in 0..40 {
        let with = scenario.run(&quiet, seed, true).unwrap();
        let without = scenario.run(&bare, seed, true).unwrap();
        assert_eq!(with.report.violation, None, "seed {seed}");
        assert!(without.trace.iter().all(|l| time_of(l) <= bare.duration_ms));
        let before: Vec<&String> = with
            .trace
            .iter()
            .filter(|l| time_of(l) <= quiet.duration_ms)
            .collect();
        assert_eq!(
            before,
            without.trace.iter().collect::<Vec<_>>(),
            "seed {seed}"
        );
        let after: Vec<&String> = with
            .trace
            .iter()
            .filter(|l| time_of(l) > quiet.duration_ms)
            .collect();
        assert!(
            after[0].contains("quiet tail"),
            "seed {seed}: {:?}",
            after[0]
        );
        for line in &after {
            for quiet_word in [" issues ", "crash ", "isolate ", "mute "] {
                assert!(!line.contains(quiet_word), "seed {seed}: {line}");
            }
        }
        tails_seen += usize::from(after.iter().any(|l| l.contains("restart ")));
        assert!(after
            .iter()
            .all(|l| time_of(l) <= quiet.duration_ms + quiet.quiet_tail_ms));
    }
    // Some seeds ended the faulty part with a node down: the tail restarted it.
    assert!(tails_seen > 0);
    let sim = scenario.run(&quiet, 3, false).unwrap();
    assert_ne!(
        sim.report.trace_hash,
        scenario.run(&bare, 3, false).unwrap().report.trace_hash
    );
    let bad = SimConfig {
        quiet_tail_ms: 3_600_001,
        ..SimConfig::default()
    };
    assert!(bad.validate().is_err());
}

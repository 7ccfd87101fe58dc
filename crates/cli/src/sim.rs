//! `roost sim`: deterministic simulation of a protocol, one seed (replayed
//! with a trace) or a campaign over seeds within a budget. Flags and
//! printing only; the simulator is `roost_cluster::sim`. A protocol is one
//! [`SimProtocol`] variant and one arm in [`SimArgs::scenario`].

use std::time::Duration;

use anyhow::bail;
use clap::{Args, ValueEnum};
use roost_cluster::membership::MembershipBugs;
use roost_cluster::sim::{
    campaign, CampaignReport, CampaignSpec, CampaignStop, RegisterScenario, Scenario, SimConfig,
    SimReport,
};
use roost_commit::sim::CommitScenario;
use roost_ownership::sim::OwnershipScenario;
use roost_zeus::sim::ZeusScenario;

/// The protocols `roost sim` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SimProtocol {
    /// The ABD atomic register (the example protocol).
    Register,
    /// The Zeus ownership protocol (`roost-ownership`).
    Ownership,
    /// The Zeus reliable commit (`roost-commit`).
    Commit,
    /// Zeus composed: ownership, reliable commit and the replica manager
    /// over one store (`roost-zeus`); takes the ownership and commit bugs too.
    Zeus,
}

/// Bugs a simulation can plant for its checkers to find.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum SimBug {
    /// Membership (any protocol): declare nodes dead before their lease expired.
    EarlyRemoval,
    /// Membership (any protocol): a restarted node's disk has lost its
    /// acceptor record (it may vote again on a view it voted on).
    ForgetAcceptorState,
    /// Register: quorums one short of a majority.
    QuorumMinusOne,
    /// Register: restarted replicas answer before recovering.
    SkipRecovery,
    /// Ownership: an arbiter accepts an INV with a smaller o_ts.
    SmallerOTs,
    /// Ownership: arbiters apply a request before its requester has.
    ApplyBeforeRequester,
    /// Ownership: a blocked arbiter never replays its arbitration.
    NeverReplays,
    /// Reliable commit: the coordinator reports a commit before every R-ACK.
    CommitBeforeAcks,
    /// Reliable commit: a follower applies R-INVs out of pipeline order.
    OutOfOrder,
    /// Reliable commit: on an R-VAL, a follower marks an object Valid even
    /// when a later R-INV, still pending, moved its version on.
    StaleRval,
    /// Reliable commit: a read-only transaction reads Invalid objects too
    /// (a version whose reliable commit is still pending).
    ReadInvalid,
    /// Zeus: the owner ignores its pending commits when asked to give an
    /// object up (no pending-commit NACK).
    IgnorePendingCommit,
    /// Zeus: ownership serves again after a view change once the reliable
    /// commit recovered at this node, not at every live node.
    LocalCommitRecovery,
    /// Zeus: a read-only transaction reads a copy ownership does not let
    /// this node read.
    ReadWithoutAccess,
    /// Zeus: the client is answered at the local commit, before every
    /// follower acknowledged.
    AnswerEarly,
    /// Zeus: a pending write transaction holds back the objects it wrote,
    /// not those it only read (they can change owner before it is
    /// reliably committed).
    PendingIgnoresReads,
}

/// Seeds when neither --seeds nor --seconds is given.
const DEFAULT_SEEDS: u64 = 1_000;
/// The longest wall-clock budget --seconds takes (a day).
const MAX_SECONDS: f64 = 86_400.0;

#[derive(Debug, Args)]
pub struct SimArgs {
    /// The protocol simulated.
    #[arg(long, value_enum, default_value_t = SimProtocol::Register)]
    pub protocol: SimProtocol,
    /// Seeds to run, starting at --seed (default 1000 unless --seconds).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub seeds: Option<u64>,
    /// Wall-clock budget: run seeds until it is spent (with --seeds, until
    /// either ends).
    #[arg(long, value_name = "S", value_parser = parse_seconds)]
    pub seconds: Option<f64>,
    /// First seed; with --trace (or --seeds 1) replays this one seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print every event of the (single) seed run.
    #[arg(long)]
    pub trace: bool,
    /// Nodes simulated.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=9))]
    pub nodes: u32,
    /// Concurrent clients per node.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=64))]
    pub clients: u32,
    /// Virtual milliseconds per seed.
    #[arg(long, default_value_t = 3000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub duration_ms: u64,
    /// Virtual milliseconds after --duration-ms without faults or new
    /// commands (partitions healed, crashed nodes restarted), after which
    /// the end-of-run checks (liveness) run; 0 for none.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    pub quiet_tail_ms: u64,
    /// Virtual milliseconds between faults considered (a crash, a cut, a
    /// heal: each happens with probability one half).
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub fault_interval_ms: u64,
    /// A crashed node restarts after a delay drawn from
    /// --restart-min-ms..=--restart-max-ms.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    pub restart_min_ms: u64,
    #[arg(long, default_value_t = 800, value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    pub restart_max_ms: u64,
    /// Message loss probability.
    #[arg(long, default_value_t = 0.05, value_parser = parse_probability)]
    pub drop: f64,
    /// Message duplication probability.
    #[arg(long, default_value_t = 0.02, value_parser = parse_probability)]
    pub dup: f64,
    /// Plant a bug the checkers should find (repeatable).
    #[arg(long, value_enum)]
    pub planted: Vec<SimBug>,
    /// Print the report as JSON (one line) instead of text.
    #[arg(long)]
    pub json: bool,
}

fn parse_probability(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!("`{text}` is not a probability in [0, 1]")),
    }
}

fn parse_seconds(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s <= MAX_SECONDS => Ok(s),
        _ => Err(format!(
            "`{text}` is not a number of seconds in (0, {MAX_SECONDS}]"
        )),
    }
}

impl SimArgs {
    /// The protocol-independent settings.
    pub fn config(&self) -> SimConfig {
        let mut config = SimConfig {
            nodes: self.nodes,
            clients_per_node: self.clients,
            duration_ms: self.duration_ms,
            quiet_tail_ms: self.quiet_tail_ms,
            fault_interval_ms: self.fault_interval_ms,
            restart_min_ms: self.restart_min_ms,
            restart_max_ms: self.restart_max_ms,
            drop_probability: self.drop,
            duplicate_probability: self.dup,
            ..SimConfig::default()
        };
        config.membership_bugs = MembershipBugs {
            declare_before_lease_expiry: self.planted.contains(&SimBug::EarlyRemoval),
            forget_acceptor_state_on_restart: self.planted.contains(&SimBug::ForgetAcceptorState),
        };
        config
    }

    /// The protocol's simulation, with its planted bugs. Adding a protocol
    /// is adding an arm here.
    pub fn scenario(&self) -> anyhow::Result<Box<dyn Scenario>> {
        match self.protocol {
            SimProtocol::Register => {
                let mut scenario = RegisterScenario::default();
                for bug in &self.planted {
                    match bug {
                        // The membership's: in config().
                        SimBug::EarlyRemoval | SimBug::ForgetAcceptorState => {}
                        SimBug::QuorumMinusOne => scenario.bugs.quorum_minus_one = true,
                        SimBug::SkipRecovery => scenario.bugs.skip_recovery = true,
                        SimBug::SmallerOTs
                        | SimBug::ApplyBeforeRequester
                        | SimBug::NeverReplays => {
                            bail!("--planted {} is an ownership bug", Self::name(*bug))
                        }
                        SimBug::CommitBeforeAcks
                        | SimBug::OutOfOrder
                        | SimBug::StaleRval
                        | SimBug::ReadInvalid => {
                            bail!("--planted {} is a reliable-commit bug", Self::name(*bug))
                        }
                        SimBug::IgnorePendingCommit
                        | SimBug::LocalCommitRecovery
                        | SimBug::ReadWithoutAccess
                        | SimBug::AnswerEarly
                        | SimBug::PendingIgnoresReads => {
                            bail!("--planted {} is a bug of Zeus composed", Self::name(*bug))
                        }
                    }
                }
                Ok(Box::new(scenario))
            }
            SimProtocol::Ownership => {
                let mut scenario = OwnershipScenario::default();
                for bug in &self.planted {
                    match bug {
                        SimBug::EarlyRemoval | SimBug::ForgetAcceptorState => {}
                        SimBug::SmallerOTs => scenario.bugs.arbiter_accepts_smaller_o_ts = true,
                        SimBug::ApplyBeforeRequester => {
                            scenario.bugs.arbiters_apply_before_requester = true
                        }
                        SimBug::NeverReplays => scenario.bugs.arbiter_never_replays = true,
                        SimBug::QuorumMinusOne | SimBug::SkipRecovery => {
                            bail!("--planted {} is a register bug", Self::name(*bug))
                        }
                        SimBug::CommitBeforeAcks
                        | SimBug::OutOfOrder
                        | SimBug::StaleRval
                        | SimBug::ReadInvalid => {
                            bail!("--planted {} is a reliable-commit bug", Self::name(*bug))
                        }
                        SimBug::IgnorePendingCommit
                        | SimBug::LocalCommitRecovery
                        | SimBug::ReadWithoutAccess
                        | SimBug::AnswerEarly
                        | SimBug::PendingIgnoresReads => {
                            bail!("--planted {} is a bug of Zeus composed", Self::name(*bug))
                        }
                    }
                }
                Ok(Box::new(scenario))
            }
            SimProtocol::Commit => {
                let mut scenario = CommitScenario::default();
                for bug in &self.planted {
                    match bug {
                        SimBug::EarlyRemoval | SimBug::ForgetAcceptorState => {}
                        SimBug::CommitBeforeAcks => scenario.bugs.committed_before_all_acks = true,
                        SimBug::OutOfOrder => scenario.bugs.follower_ignores_pipeline_order = true,
                        SimBug::StaleRval => scenario.bugs.follower_validates_stale_rval = true,
                        SimBug::ReadInvalid => scenario.bugs.read_only_reads_invalid = true,
                        SimBug::QuorumMinusOne | SimBug::SkipRecovery => {
                            bail!("--planted {} is a register bug", Self::name(*bug))
                        }
                        SimBug::SmallerOTs
                        | SimBug::ApplyBeforeRequester
                        | SimBug::NeverReplays => {
                            bail!("--planted {} is an ownership bug", Self::name(*bug))
                        }
                        SimBug::IgnorePendingCommit
                        | SimBug::LocalCommitRecovery
                        | SimBug::ReadWithoutAccess
                        | SimBug::AnswerEarly
                        | SimBug::PendingIgnoresReads => {
                            bail!("--planted {} is a bug of Zeus composed", Self::name(*bug))
                        }
                    }
                }
                Ok(Box::new(scenario))
            }
            SimProtocol::Zeus => {
                let mut scenario = ZeusScenario::default();
                for bug in &self.planted {
                    match bug {
                        SimBug::EarlyRemoval | SimBug::ForgetAcceptorState => {}
                        SimBug::SmallerOTs => {
                            scenario.ownership_bugs.arbiter_accepts_smaller_o_ts = true
                        }
                        SimBug::ApplyBeforeRequester => {
                            scenario.ownership_bugs.arbiters_apply_before_requester = true
                        }
                        SimBug::NeverReplays => {
                            scenario.ownership_bugs.arbiter_never_replays = true
                        }
                        SimBug::CommitBeforeAcks => {
                            scenario.commit_bugs.committed_before_all_acks = true
                        }
                        SimBug::OutOfOrder => {
                            scenario.commit_bugs.follower_ignores_pipeline_order = true
                        }
                        SimBug::StaleRval => {
                            scenario.commit_bugs.follower_validates_stale_rval = true
                        }
                        SimBug::ReadInvalid => scenario.commit_bugs.read_only_reads_invalid = true,
                        SimBug::IgnorePendingCommit => scenario.bugs.ignore_pending_commit = true,
                        SimBug::LocalCommitRecovery => scenario.bugs.local_commit_recovery = true,
                        SimBug::ReadWithoutAccess => scenario.bugs.read_without_access = true,
                        SimBug::AnswerEarly => scenario.bugs.answer_before_replication = true,
                        SimBug::PendingIgnoresReads => scenario.bugs.pending_ignores_reads = true,
                        SimBug::QuorumMinusOne | SimBug::SkipRecovery => {
                            bail!("--planted {} is a register bug", Self::name(*bug))
                        }
                    }
                }
                Ok(Box::new(scenario))
            }
        }
    }

    /// One seed replayed rather than a campaign.
    fn single(&self) -> bool {
        self.trace || (self.seeds == Some(1) && self.seconds.is_none())
    }

    fn spec(&self) -> CampaignSpec {
        let wall = self.seconds.map(Duration::from_secs_f64);
        match (self.seeds, wall) {
            (Some(seeds), wall) => CampaignSpec {
                max_wall: wall,
                ..CampaignSpec::seeds(self.seed, seeds)
            },
            (None, Some(wall)) => CampaignSpec::timed(self.seed, wall),
            (None, None) => CampaignSpec::seeds(self.seed, DEFAULT_SEEDS),
        }
    }

    fn name(value: impl ValueEnum) -> String {
        value
            .to_possible_value()
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default()
    }

    /// The flags that reproduce a run of `seed`, with its trace.
    pub fn replay_command(&self, seed: u64) -> String {
        let mut command = format!(
            "roost sim --protocol {} --seed {seed} --seeds 1 --trace",
            Self::name(self.protocol)
        );
        let defaults = SimConfig::default();
        if self.nodes != defaults.nodes {
            command += &format!(" --nodes {}", self.nodes);
        }
        if self.clients != defaults.clients_per_node {
            command += &format!(" --clients {}", self.clients);
        }
        if self.duration_ms != defaults.duration_ms {
            command += &format!(" --duration-ms {}", self.duration_ms);
        }
        if self.fault_interval_ms != defaults.fault_interval_ms {
            command += &format!(" --fault-interval-ms {}", self.fault_interval_ms);
        }
        if self.restart_min_ms != defaults.restart_min_ms {
            command += &format!(" --restart-min-ms {}", self.restart_min_ms);
        }
        if self.restart_max_ms != defaults.restart_max_ms {
            command += &format!(" --restart-max-ms {}", self.restart_max_ms);
        }
        if self.quiet_tail_ms != defaults.quiet_tail_ms {
            command += &format!(" --quiet-tail-ms {}", self.quiet_tail_ms);
        }
        if self.drop != defaults.drop_probability {
            command += &format!(" --drop {}", self.drop);
        }
        if self.dup != defaults.duplicate_probability {
            command += &format!(" --dup {}", self.dup);
        }
        let mut planted = self.planted.clone();
        planted.sort_unstable();
        planted.dedup();
        for bug in planted {
            command += &format!(" --planted {}", Self::name(bug));
        }
        command
    }
}

fn print_seed(report: &SimReport) {
    println!(
        "seed {}: {} events, {} messages, {} ops completed, {} unknown, {} rejected, {} crashes, {} partitions, epoch {}, trace hash {:016x}",
        report.seed,
        report.events,
        report.messages_delivered,
        report.ops_completed,
        report.ops_unknown,
        report.ops_rejected,
        report.crashes,
        report.partitions,
        report.max_epoch,
        report.trace_hash
    );
}

fn print_campaign(protocol: &str, result: &CampaignReport) {
    println!(
        "{protocol}: {} seeds ({}..{}) in {:.2} s: {} ops completed, {} unknown, {} crashes, {} partitions, highest epoch {}",
        result.seeds_run,
        result.first_seed,
        result.next_seed(),
        result.wall_ms as f64 / 1000.0,
        result.ops_completed,
        result.ops_unknown,
        result.crashes,
        result.partitions,
        result.max_epoch
    );
}

pub fn sim(args: &SimArgs) -> anyhow::Result<()> {
    let config = args.config();
    let scenario = args.scenario()?;
    config.validate()?;
    scenario.validate()?;
    if args.single() {
        let run = scenario.run(&config, args.seed, args.trace)?;
        for line in &run.trace {
            println!("{line}");
        }
        if args.json {
            println!("{}", serde_json::to_string(&run.report)?);
        } else {
            print_seed(&run.report);
        }
        if let Some(violation) = run.report.violation {
            bail!("seed {} violates safety: {violation}", run.report.seed);
        }
        return Ok(());
    }
    let result = campaign(scenario.as_ref(), &config, &args.spec())?;
    if args.json {
        println!("{}", serde_json::to_string(&result)?);
    } else {
        print_campaign(scenario.protocol(), &result);
    }
    match (&result.stop, &result.first_failure) {
        (CampaignStop::Violation, Some(failure)) => bail!(
            "seed {} violates safety: {}\nreplay it: {}",
            failure.seed,
            failure
                .violation
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            args.replay_command(failure.seed)
        ),
        (CampaignStop::OutOfTime, _) if !args.json => println!(
            "no violations (time budget spent; continue with --seed {})",
            result.next_seed()
        ),
        _ if !args.json => println!("no violations"),
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::args::{Cli, Command};

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("roost").chain(args.iter().copied()))
    }

    fn sim_args(args: &[&str]) -> super::SimArgs {
        match parse(args).expect("valid arguments").command {
            Command::Sim(sim) => sim,
            other => panic!("not sim: {other:?}"),
        }
    }

    #[test]
    fn sim_flags_parse_and_bad_ones_are_errors() {
        let sim = sim_args(&["sim", "--seeds", "5", "--planted", "early-removal"]);
        assert!(sim.config().membership_bugs.declare_before_lease_expiry);
        assert!(
            !sim.config()
                .membership_bugs
                .forget_acceptor_state_on_restart
        );
        let forgetful = sim_args(&["sim", "--planted", "forget-acceptor-state"]);
        assert!(
            forgetful
                .config()
                .membership_bugs
                .forget_acceptor_state_on_restart
        );
        let ownership = sim_args(&[
            "sim",
            "--protocol",
            "ownership",
            "--planted",
            "forget-acceptor-state",
        ]);
        assert_eq!(ownership.scenario().unwrap().protocol(), "ownership");
        assert_eq!(sim.scenario().unwrap().protocol(), "register");
        assert!(sim
            .replay_command(9)
            .contains("--protocol register --seed 9 --seeds 1 --trace --planted early-removal"));
        let timed = sim_args(&[
            "sim",
            "--protocol",
            "register",
            "--seconds",
            "2.5",
            "--seed",
            "7",
        ]);
        let spec = timed.spec();
        assert_eq!(spec.seeds.start, 7);
        assert_eq!(spec.max_wall, Some(std::time::Duration::from_millis(2500)));
        let both = sim_args(&["sim", "--seconds", "1", "--seeds", "10"]).spec();
        assert_eq!((both.seeds, both.max_wall.is_some()), (0..10, true));
        assert_eq!(sim_args(&["sim"]).spec().seeds, 0..1000);
        for bad in [
            &["sim", "--seeds", "0"][..],
            &["sim", "--drop", "1.5"],
            &["sim", "--planted", "nonsense"],
            &["sim", "--protocol", "paxos"],
            &["sim", "--seconds", "0"],
            &["sim", "--seconds", "nan"],
            &["sim", "--clients", "65"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn a_small_campaign_runs_from_the_cli() {
        super::sim(&sim_args(&["sim", "--seeds", "20"])).unwrap();
        super::sim(&sim_args(&["sim", "--seed", "3", "--seeds", "1"])).unwrap();
        super::sim(&sim_args(&[
            "sim",
            "--seconds",
            "0.2",
            "--duration-ms",
            "500",
        ]))
        .unwrap();
        let planted = sim_args(&["sim", "--seeds", "200", "--planted", "quorum-minus-one"]);
        let error = super::sim(&planted).unwrap_err().to_string();
        assert!(
            error.contains("replay it: roost sim --protocol register --seed"),
            "{error}"
        );
    }

    #[test]
    fn a_read_of_an_invalid_object_is_found_from_the_cli() {
        let args = ["sim", "--protocol", "commit", "--seeds", "20"];
        super::sim(&sim_args(&args)).unwrap();
        let planted = sim_args(&[&args[..], &["--planted", "read-invalid"]].concat());
        assert!(planted
            .replay_command(0)
            .ends_with("--planted read-invalid"));
        let error = super::sim(&planted).unwrap_err().to_string();
        assert!(
            error.contains("read-only transactions respect real time"),
            "{error}"
        );
        let register = sim_args(&["sim", "--planted", "read-invalid"]);
        let error = register.scenario().err().expect("a commit bug").to_string();
        assert!(error.contains("reliable-commit bug"), "{error}");
    }
}

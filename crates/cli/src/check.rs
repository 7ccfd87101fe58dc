//! `roost check <workload>`: run a workload against the single-node engine
//! with concurrent clients, record the history, check it, print the verdict.
//! Exits non-zero when the history is not strictly serializable.
//!
//! `--seeds N` runs seeds `seed..seed+N` one after another, a verdict per
//! seed and a summary; `roost check scan --reactors` runs the scan workload
//! against the reactor layer (reactors moved between two containers while
//! the clients run) instead of the engine.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use std::collections::BTreeSet;

use roost_check::cluster_run::{run_cluster_register, ClusterRun, ClusterRunConfig};
use roost_check::nemesis::FaultKind;
use roost_check::reactor_run::{run_reactors, ReactorRunConfig, DEFAULT_REACTORS};
use roost_check::resp_run::{run_cluster_resp, RespRunConfig};
use roost_check::runner::{run_engine, RunConfig};
use roost_check::workload::WorkloadConfig;
use roost_check::{History, Report, WorkloadKind};
use roost_cluster::register::RegisterBugs;

use crate::cluster::PlantedZeusBug;

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The workload to run and check.
    #[arg(value_enum)]
    workload: WorkloadArg,
    /// A CI-sized run: 1 second of clients (about 4 s in all).
    #[arg(long, conflicts_with = "seconds")]
    quick: bool,
    /// Seconds the clients run (default 10).
    #[arg(long, value_name = "S", value_parser = parse_seconds)]
    seconds: Option<f64>,
    /// Concurrent client threads.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    clients: u32,
    /// Seed of the transaction generator (the first one, with --seeds).
    #[arg(long, value_name = "N", default_value_t = 1)]
    seed: u64,
    /// Run this many seeds (seed, seed+1, ...), each for the given seconds:
    /// a verdict per seed, then a summary; non-zero exit if any is invalid.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    seeds: u64,
    /// Scan workload only: run against the reactor layer (one reactor per
    /// shard of the key space, on two containers, moved between them while
    /// the clients run) instead of the storage engine.
    #[arg(long, conflicts_with = "cluster")]
    reactors: bool,
    /// Where to write the history as JSON lines (default: the temp directory).
    #[arg(long, value_name = "PATH")]
    out: Option<PathBuf>,
    /// Plant a bug (Silo's read validation skipped) to see the checker fail.
    #[arg(long, hide = true)]
    skip_read_validation: bool,
    /// Plant a bug (commit skips scan re-validation and missing-key checks).
    #[arg(long, hide = true)]
    skip_phantom_validation: bool,
    /// Plant a bug (every range scan skips the first record the index returns).
    #[arg(long, hide = true)]
    scan_skips_record: bool,
    /// Run against one database spread over a local cluster of this many
    /// `roost node --protocol ownership` processes (Zeus, with a local etcd)
    /// instead of the single-node engine: RESP clients on every node, the
    /// nemesis striking; list-append, bank or rw-register.
    #[arg(long, value_name = "NODES", value_parser = clap::value_parser!(u32).range(1..=9))]
    cluster: Option<u32>,
    /// With --cluster and rw-register: check the cluster substrate's
    /// replicated register (`roost node --protocol register`) instead of
    /// the Zeus keyspace.
    #[arg(long, requires = "cluster")]
    register: bool,
    /// With --cluster: RESP client threads per node, each on its own
    /// connection.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=16))]
    clients_per_node: u32,
    /// With --cluster: the nemesis's faults, comma-separated, from kill,
    /// pause, partition, loss, delay, dup, cut-etcd, kill-all (every node
    /// SIGKILLed at once and restarted from its durability log), or `all`
    /// (every one but kill-all) / `none`.
    #[arg(long, value_name = "FAULTS", default_value = "all", value_parser = parse_faults)]
    nemesis: FaultList,
    /// With --cluster: a fault strikes every this many milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    fault_interval_ms: u64,
    /// With --cluster --register: plant a bug in the nodes' register
    /// (checker self-test).
    #[arg(long, hide = true)]
    planted_quorum_minus_one: bool,
    /// With --cluster: plant a Zeus bug in every node (checker self-test).
    #[arg(long, hide = true, value_enum)]
    planted_zeus: Vec<PlantedZeusBug>,
}

/// The faults `--nemesis` names (one flag value, hence not a bare `Vec`).
#[derive(Clone, Debug, PartialEq, Eq)]
struct FaultList(Vec<FaultKind>);

/// `all`, `none`, or a comma-separated list of fault names.
fn parse_faults(text: &str) -> Result<FaultList, String> {
    match text {
        "all" => return Ok(FaultList(FaultKind::ALL.to_vec())),
        "none" => return Ok(FaultList(Vec::new())),
        _ => {}
    }
    text.split(',')
        .map(|name| {
            FaultKind::parse(name.trim()).ok_or_else(|| {
                format!("unknown fault `{name}` (kill, pause, partition, loss, delay, dup, cut-etcd, kill-all, all, none; all is every one but kill-all)")
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(FaultList)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum WorkloadArg {
    ListAppend,
    RwRegister,
    Bank,
    Counter,
    /// Range scans (forward, reverse, limited, paginated) racing moves of
    /// rows between keys.
    Scan,
}

impl WorkloadArg {
    fn kind(self) -> WorkloadKind {
        match self {
            WorkloadArg::ListAppend => WorkloadKind::ListAppend,
            WorkloadArg::RwRegister => WorkloadKind::RwRegister,
            WorkloadArg::Bank => WorkloadKind::Bank,
            WorkloadArg::Counter => WorkloadKind::Counter,
            WorkloadArg::Scan => WorkloadKind::Scan,
        }
    }
}

const QUICK_SECONDS: f64 = 1.0;
const DEFAULT_SECONDS: f64 = 10.0;
const MAX_SECONDS: f64 = 3600.0;
/// The counter workload's bound: increments past it must fail.
const COUNTER_BOUND: i64 = 1000;

fn parse_seconds(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s <= MAX_SECONDS => Ok(s),
        _ => Err(format!(
            "`{text}` is not a number of seconds in (0, {MAX_SECONDS}]"
        )),
    }
}

impl CheckArgs {
    fn config(&self) -> RunConfig {
        let kind = self.workload.kind();
        let mut config = RunConfig::new(kind);
        let seconds = match (self.quick, self.seconds) {
            (_, Some(s)) => s,
            (true, None) => QUICK_SECONDS,
            (false, None) => DEFAULT_SECONDS,
        };
        config.duration_ms = (seconds * 1000.0).round().max(1.0) as u64;
        config.clients = self.clients as usize;
        config.seed = self.seed;
        config.planted_bugs.skip_read_validation = self.skip_read_validation;
        config.planted_bugs.skip_phantom_validation = self.skip_phantom_validation;
        config.planted_bugs.scans_skip_first_record = self.scan_skips_record;
        if kind == WorkloadKind::Counter {
            config.workload.counter_bound = Some(COUNTER_BOUND);
        }
        if kind == WorkloadKind::Scan {
            config.max_ops = SCAN_MAX_OPS;
        }
        config
    }

    /// The reactor target's run for `seed`: the engine run's clients,
    /// duration and workload, the key space cut into one shard per reactor.
    fn reactor_config(&self, seed: u64) -> ReactorRunConfig {
        let engine = self.config();
        let mut config = ReactorRunConfig {
            scan: engine.workload.scan,
            clients: engine.clients,
            duration_ms: engine.duration_ms,
            seed,
            max_ops: engine.max_ops,
            planted_bugs: engine.planted_bugs,
            ..ReactorRunConfig::default()
        };
        config.scan.shard_keys = config.scan.layout.key_space / DEFAULT_REACTORS;
        config
    }

    /// The planted bugs asked for, as words for the headline.
    fn planted(&self) -> Vec<&'static str> {
        [
            (self.skip_read_validation, "read validation skipped"),
            (self.skip_phantom_validation, "phantom validation skipped"),
            (self.scan_skips_record, "scans skip their first record"),
        ]
        .into_iter()
        .filter_map(|(on, what)| on.then_some(what))
        .collect()
    }

    /// Where seed `seed`'s history goes: `--out` (or the temp directory's
    /// `roost-check-<workload>.jsonl`), with `-seed<N>` before the extension
    /// when several seeds run.
    fn out_path_for(&self, seed: u64) -> PathBuf {
        let path = self.out_path();
        if self.seeds == 1 {
            return path;
        }
        let stem = path
            .file_stem()
            .map_or_else(|| "history".into(), |s| s.to_string_lossy().into_owned());
        let name = match path.extension() {
            Some(ext) => format!("{stem}-seed{seed}.{}", ext.to_string_lossy()),
            None => format!("{stem}-seed{seed}"),
        };
        path.with_file_name(name)
    }

    fn out_path(&self) -> PathBuf {
        self.out.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(format!("roost-check-{}.jsonl", self.workload.kind().name()))
        })
    }
}

/// A scan run records 90,000-180,000 ops a second on 2 cores, each holding
/// its rows (784,000 ops took 1.2 GB and 10.7 s to check); this bounds a
/// long run's memory (about 3 GB) and check time.
const SCAN_MAX_OPS: u64 = 2_000_000;

pub fn run(args: &CheckArgs) -> anyhow::Result<()> {
    if let Some(nodes) = args.cluster {
        if args.seeds > 1 {
            anyhow::bail!("--seeds runs engine and reactor targets; run --cluster once per seed");
        }
        return run_cluster(args, nodes);
    }
    let planted = args.planted();
    if args.reactors && args.workload != WorkloadArg::Scan {
        anyhow::bail!("--reactors runs the scan workload only");
    }
    let config = args.config();
    let target = if args.reactors {
        format!("{DEFAULT_REACTORS} reactors on 2 containers, moved while the clients run")
    } else {
        "the single-node engine".to_string()
    };
    let seeds = if args.seeds == 1 {
        format!("seed {}", args.seed)
    } else {
        format!("seeds {}..={}", args.seed, args.seed + (args.seeds - 1))
    };
    println!(
        "roost check {}: {} clients for {:.1} s against {target} ({seeds}){}",
        config.workload.kind.name(),
        config.clients,
        config.duration_ms as f64 / 1000.0,
        if planted.is_empty() {
            String::new()
        } else {
            format!(", PLANTED BUG: {}", planted.join(", "))
        }
    );
    let mut invalid = Vec::new();
    let mut anomalies = 0usize;
    let started = std::time::Instant::now();
    for seed in args.seed..args.seed + args.seeds {
        let report = run_seed(args, &config, seed)?;
        if !report.valid() {
            invalid.push(seed);
            anomalies += report.counts.values().sum::<usize>();
        }
    }
    if args.seeds > 1 {
        println!(
            "summary: {} seeds in {:.1} s: {} VALID, {} INVALID{}",
            args.seeds,
            started.elapsed().as_secs_f64(),
            args.seeds as usize - invalid.len(),
            invalid.len(),
            if invalid.is_empty() {
                String::new()
            } else {
                format!(" (seeds {invalid:?})")
            }
        );
    }
    if !invalid.is_empty() {
        anyhow::bail!(
            "{} of {} histories are not strictly serializable ({anomalies} anomalies)",
            invalid.len(),
            args.seeds
        );
    }
    Ok(())
}

/// One seed: run, save the history, check, print the verdict.
fn run_seed(args: &CheckArgs, config: &RunConfig, seed: u64) -> anyhow::Result<Report> {
    let started = std::time::Instant::now();
    let (history, moves): (History, Option<(u64, u64)>) = if args.reactors {
        let run = run_reactors(&args.reactor_config(seed))?;
        (run.history, Some((run.moves, run.moves_starved)))
    } else {
        let config = RunConfig {
            seed,
            ..config.clone()
        };
        (run_engine(&config)?, None)
    };
    let run_s = started.elapsed().as_secs_f64();
    let out = args.out_path_for(seed);
    history
        .save_to_path(&out)
        .map_err(|e| anyhow::anyhow!("writing the history to {}: {e}", out.display()))?;
    let report = roost_check::check(&history)?;
    if args.seeds > 1 {
        print!("seed {seed}: ");
    }
    print!("{report}");
    if let Some((moves, starved)) = moves {
        println!("reactor moves: {moves} committed, {starved} starved (gave up)");
    }
    println!(
        "history: {} ops in {run_s:.1} s, written to {}",
        history.ops.len(),
        out.display()
    );
    Ok(report)
}

/// `roost check <workload> --cluster N`: clients and nemesis against a
/// local cluster.
fn run_cluster(args: &CheckArgs, nodes: u32) -> anyhow::Result<()> {
    let resp = !args.register;
    match (args.workload, resp) {
        (WorkloadArg::ListAppend | WorkloadArg::Bank | WorkloadArg::RwRegister, true) => {}
        (WorkloadArg::RwRegister, false) => {}
        (_, true) => anyhow::bail!(
            "--cluster runs list-append, bank or rw-register (the keyspace's workloads over RESP)"
        ),
        (_, false) => anyhow::bail!("--register runs the rw-register workload only"),
    }
    if resp && args.planted_quorum_minus_one {
        anyhow::bail!("--planted-quorum-minus-one plants a bug in the register: add --register");
    }
    if !resp && !args.planted_zeus.is_empty() {
        anyhow::bail!("--planted-zeus plants a bug in Zeus: drop --register");
    }
    if !resp && args.nemesis.0.contains(&FaultKind::KillAll) {
        anyhow::bail!(
            "--nemesis kill-all needs the nodes' durability logs: the register keeps none (drop --register)"
        );
    }
    let faults: Vec<FaultKind> = args
        .nemesis
        .0
        .iter()
        .copied()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let seconds = match (args.quick, args.seconds) {
        (_, Some(s)) => s,
        (true, None) => CLUSTER_QUICK_SECONDS,
        (false, None) => DEFAULT_SECONDS,
    };
    let duration_ms = (seconds * 1000.0).round().max(1.0) as u64;
    let dir = std::env::temp_dir().join(format!("roost-check-cluster-{}", std::process::id()));
    let workload = args.workload.kind().name();
    let run = if resp {
        let planted: Vec<String> = args
            .planted_zeus
            .iter()
            .map(|bug| planted_zeus_name(*bug))
            .collect();
        let node_args = planted
            .iter()
            .flat_map(|bug| ["--planted-zeus".to_string(), bug.clone()])
            .collect();
        println!(
            "roost check {workload}: one database over {nodes} roost node processes (Zeus) + etcd, \
             {} RESP clients per node for {seconds:.1} s, nemesis {:?} every {} ms (seed {}){}",
            args.clients_per_node,
            faults,
            args.fault_interval_ms,
            args.seed,
            if planted.is_empty() {
                String::new()
            } else {
                format!(", PLANTED BUG: {}", planted.join(", "))
            }
        );
        let config = RespRunConfig {
            roost_bin: std::env::current_exe()?,
            dir: dir.clone(),
            nodes,
            clients_per_node: args.clients_per_node,
            duration_ms,
            seed: args.seed,
            faults: faults.clone(),
            fault_interval_ms: args.fault_interval_ms,
            workload: WorkloadConfig::new(args.workload.kind()),
            node_args,
            etcd: true,
            fixed_faults: None,
            progress: None,
        };
        run_cluster_resp(&config)
    } else {
        println!(
            "roost check rw-register --register: {nodes} node processes + etcd, one client per node for {seconds:.1} s, \
             nemesis {:?} every {} ms (seed {}){}",
            faults,
            args.fault_interval_ms,
            args.seed,
            if args.planted_quorum_minus_one { ", PLANTED BUG: register quorums one short" } else { "" }
        );
        let config = ClusterRunConfig {
            roost_bin: std::env::current_exe()?,
            dir: dir.clone(),
            nodes,
            duration_ms,
            seed: args.seed,
            faults: faults.clone(),
            fault_interval_ms: args.fault_interval_ms,
            register_bugs: RegisterBugs {
                quorum_minus_one: args.planted_quorum_minus_one,
                ..RegisterBugs::default()
            },
        };
        run_cluster_register(&config)
    }
    .map_err(|e| anyhow::anyhow!("{e} (node logs in {})", dir.display()))?;
    report_cluster_run(args, &run)?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The node's flag value of a planted Zeus bug.
fn planted_zeus_name(bug: PlantedZeusBug) -> String {
    use clap::ValueEnum;
    bug.to_possible_value()
        .map(|v| v.get_name().to_string())
        .expect("every planted bug has a name")
}

/// Saves the history and the faults, checks the history and prints the
/// verdict with the counts; an error if it is not strictly serializable.
fn report_cluster_run(args: &CheckArgs, run: &ClusterRun) -> anyhow::Result<()> {
    let out = args.out_path();
    run.history
        .save_to_path(&out)
        .map_err(|e| anyhow::anyhow!("writing the history to {}: {e}", out.display()))?;
    let faults_out = out.with_extension("faults.jsonl");
    let mut lines = String::new();
    for record in &run.faults {
        lines += &serde_json::to_string(record)?;
        lines.push('\n');
    }
    std::fs::write(&faults_out, lines)?;
    let report = roost_check::check(&run.history)?;
    print!("{report}");
    let failed = run.faults.iter().filter(|f| f.error.is_some()).count();
    println!(
        "faults injected: {} ({} failed to apply), written to {}",
        run.faults.len(),
        failed,
        faults_out.display()
    );
    for error in &run.heal_errors {
        println!("heal: {error}");
    }
    println!(
        "lost acknowledged writes: {}",
        report.count(roost_check::AnomalyKind::LostWrite)
    );
    println!(
        "history: {} ops written to {}",
        run.history.ops.len(),
        out.display()
    );
    if !report.valid() {
        let total: usize = report.counts.values().sum();
        anyhow::bail!("the history is not strictly serializable ({total} anomalies)");
    }
    Ok(())
}

/// A CI-sized cluster run.
const CLUSTER_QUICK_SECONDS: f64 = 5.0;

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::args::{Cli, Command};

    fn check_args(args: &[&str]) -> Result<CheckArgs, clap::Error> {
        let cli = Cli::try_parse_from(["roost", "check"].iter().chain(args))?;
        match cli.command {
            Command::Check(args) => Ok(args),
            other => panic!("not check: {other:?}"),
        }
    }

    #[test]
    fn check_flags() {
        let quick =
            check_args(&["list-append", "--quick", "--clients", "2", "--seed", "9"]).unwrap();
        let config = quick.config();
        assert_eq!(config.workload.kind, WorkloadKind::ListAppend);
        assert_eq!(
            (config.duration_ms, config.clients, config.seed),
            (1000, 2, 9)
        );
        assert!(config.validate().is_ok());
        let counter =
            check_args(&["counter", "--seconds", "0.5", "--out", "/tmp/h.jsonl"]).unwrap();
        assert_eq!(counter.config().duration_ms, 500);
        assert_eq!(counter.config().workload.counter_bound, Some(COUNTER_BOUND));
        assert_eq!(counter.out_path(), PathBuf::from("/tmp/h.jsonl"));
        assert_eq!(check_args(&["bank"]).unwrap().config().duration_ms, 10_000);
        for bad in [
            &[][..],
            &["nope"],
            &["bank", "--seconds", "0"],
            &["bank", "--seconds", "nan"],
            &["bank", "--clients", "0"],
            &["bank", "--seed", "-1"],
            &["bank", "--quick", "--seconds", "3"],
        ] {
            assert!(check_args(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn scan_flags() {
        let scan = check_args(&[
            "scan",
            "--quick",
            "--seeds",
            "3",
            "--seed",
            "5",
            "--skip-phantom-validation",
            "--scan-skips-record",
            "--out",
            "/tmp/s.jsonl",
        ])
        .unwrap();
        let config = scan.config();
        assert_eq!(config.workload.kind, WorkloadKind::Scan);
        assert!(config.planted_bugs.skip_phantom_validation);
        assert!(config.planted_bugs.scans_skip_first_record);
        assert!(!config.planted_bugs.skip_read_validation);
        assert_eq!(config.max_ops, SCAN_MAX_OPS);
        assert!(config.validate().is_ok());
        assert_eq!(
            scan.out_path_for(6),
            PathBuf::from("/tmp/s-seed6.jsonl"),
            "several seeds get one history each"
        );
        let reactors = check_args(&["scan", "--reactors", "--seconds", "0.5"]).unwrap();
        let rc = reactors.reactor_config(4);
        assert_eq!((rc.seed, rc.duration_ms), (4, 500));
        assert_eq!(rc.scan.shards(), DEFAULT_REACTORS);
        assert_eq!(reactors.out_path_for(4), reactors.out_path());
        for bad in [
            &["scan", "--seeds", "0"][..],
            &["scan", "--reactors", "--cluster", "3"],
        ] {
            assert!(check_args(bad).is_err(), "{bad:?} should be rejected");
        }
        // Planted bugs reach the reactor target.
        let planted = check_args(&["scan", "--reactors", "--scan-skips-record"]).unwrap();
        assert!(
            planted
                .reactor_config(1)
                .planted_bugs
                .scans_skip_first_record
        );
        // Refused when run: a reactor run of another workload.
        let bad = check_args(&["bank", "--reactors", "--seconds", "0.1"]).unwrap();
        assert!(run(&bad).is_err(), "--reactors with bank should fail");
    }

    #[test]
    fn a_short_run_is_valid() {
        let args = check_args(&["bank", "--seconds", "0.2", "--out", "/dev/null"]).unwrap();
        assert!(run(&args).is_ok());
    }
}

//! The `roost` command line: clap definitions of every subcommand and its
//! flags. In the library (not the binary) so that the fuzz targets (`fuzz/`,
//! `roost_fuzz::cli_args`) parse arbitrary argument vectors with the very
//! definitions `roost` uses.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use roost_bench::engine::{self, EngineBenchConfig};
use roost_bench::smartmart::{self, SmartMartBenchConfig};

use crate::{
    bench_commit, bench_durability, bench_escrow, bench_ownership, bench_resp, bench_transport,
    check, cluster, resp, sim, sites,
};

/// Roost: an in-memory transactional database.
#[derive(Debug, Parser)]
#[command(name = "roost", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The main job on the embedded default: SmartMart on one node (async
    /// deployment) with live progress, then the sync deployment for comparison.
    Demo(DemoArgs),
    /// Run a benchmark; writes <out>/<benchmark>.json, .md and .png.
    #[command(subcommand)]
    Bench(Benchmark),
    /// Run a workload against the single-node engine (or, `scan --reactors`,
    /// the reactor layer), record the history and check it for strict
    /// serializability; exits non-zero if it is not.
    Check(check::CheckArgs),
    /// Run one cluster node (membership, leases, the example register).
    Node(cluster::NodeArgs),
    /// Start a local cluster of node processes on loopback and supervise them.
    Up(cluster::UpArgs),
    /// Show a running cluster's epoch, membership and node health.
    Status(cluster::StatusArgs),
    /// Deterministic simulation of a protocol (`--protocol`) over seeds, within
    /// a seed count or a wall-clock budget; a failing seed replays exactly.
    Sim(sim::SimArgs),
    /// Serve the Redis protocol (RESP2/RESP3) on one node's client port.
    Resp(resp::RespArgs),
    /// Operate a deployment of sites (`roost up --sites`): recover a failed
    /// site's rights.
    #[command(subcommand)]
    Sites(sites::SitesCommand),
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Seconds the clients run (default 20; with --smartmart, 10 for the
    /// async deployment, the sync comparison half as long).
    #[arg(long, value_parser = parse_demo_seconds)]
    pub seconds: Option<f64>,
    /// Nodes of the local cluster (node 1 is killed midway).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(3..=9), conflicts_with = "smartmart")]
    pub nodes: u32,
    /// RESP clients per node, each on its own connection.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=16), conflicts_with = "smartmart")]
    pub clients_per_node: u32,
    /// Seed of the clients' generators.
    #[arg(long, default_value_t = 1, conflicts_with = "smartmart")]
    pub seed: u64,
    /// Bank transfers (WATCH, GET, MULTI/EXEC) instead of Handover, the
    /// history checked for strict serializability.
    #[arg(long, conflicts_with = "smartmart")]
    pub bank: bool,
    /// A planted bug (the demo's own test): `lose-finish-session`, a
    /// handover's finish does not write the session.
    #[arg(long, hide = true, value_parser = ["lose-finish-session"], conflicts_with_all = ["smartmart", "bank"])]
    pub planted: Option<String>,
    /// Instead: SmartMart (the ReactDB paper's supermarket) on an embedded
    /// one-node Roost, async deployment against sync.
    #[arg(long)]
    pub smartmart: bool,
    /// With --smartmart: client threads, each with its own cart.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64), requires = "smartmart")]
    pub workers: u32,
    /// With --smartmart: items per order.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=64), requires = "smartmart")]
    pub order_size: u32,
    /// With --smartmart: store sections an order spans (each its own
    /// container in the async deployment).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=8), requires = "smartmart")]
    pub sections: u32,
}

fn parse_demo_seconds(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s <= 3600.0 => Ok(s),
        _ => Err(format!("`{text}` is not a number of seconds in (0, 3600]")),
    }
}

#[derive(Debug, Subcommand)]
pub enum Benchmark {
    /// The storage engine alone: Silo OCC against a no-concurrency-control
    /// baseline (read-only, rmw, txn-10, scan-mix; uniform and Zipfian keys).
    Engine(EngineArgs),
    /// SmartMart on reactors (the ReactDB seed's Figures 6, 9 and 12): the
    /// sync deployment (one container) against the async one (store sections
    /// in their own containers).
    Smartmart(SmartmartArgs),
    /// The node-to-node transport: round-trip latency beside raw tokio TCP,
    /// and small-message throughput with batching.
    Transport(bench_transport::TransportBenchArgs),
    /// Zeus ownership across three nodes: reactor transfer latency beside
    /// the transport round trip (idle and under load), and the Voter
    /// migration of every reactor from node to node.
    Ownership(bench_ownership::OwnershipBenchArgs),
    /// Zeus's reliable commit across three nodes: write throughput with
    /// replication degree 1, 2 and 3, and pipelined against waiting for
    /// each reliable commit on one reactor.
    Commit(bench_commit::CommitBenchArgs),
    /// The durability log: write throughput and latency of one node under
    /// each sync policy (always, every 1000, off) and in memory, beside
    /// redis-server's appendfsync always and everysec on the same disk.
    Durability(bench_durability::DurabilityBenchArgs),
    /// Smallbank (FaSST flavour) on a three-node cluster: Roost against
    /// static sharding with two-phase commit and perfect sharding, by the
    /// fraction of transactions that touch two partitions (the Zeus seed's
    /// Figure 9).
    Smallbank(crate::bench_smallbank::SmallbankArgs),
    /// Handover (the Zeus seed's cellular control plane) on a three-node
    /// cluster: Roost against static sharding with two-phase commit and
    /// perfect sharding, by handover fraction.
    Handover(crate::bench_handover::HandoverArgs),
    /// Voter (the Zeus seed's popular contestant) on a three-node cluster:
    /// the popular contestant moves between nodes under load, her voters'
    /// reactors follow; throughput over time and ownership acquisition
    /// latency.
    Voter(crate::bench_voter::VoterArgs),
    /// TATP on a three-node cluster: Roost (reads on the local replica,
    /// writes where they arrive) against static sharding and perfect
    /// sharding, by the share of transactions on another node's
    /// subscribers (the seed's Figure 9, TATP).
    Tatp(crate::bench_tatp::TatpArgs),
    /// `roost resp` against Redis under redis-benchmark (GET, SET, INCR;
    /// pipelined); needs redis-server and redis-benchmark on PATH.
    Resp(bench_resp::RespBenchArgs),
    /// The escrow middleware over Redis (bc-srv, bc-clt, weak, strong) and
    /// inside Roost (roost) with
    /// the emulated wide area; needs redis-server on PATH.
    Escrow(bench_escrow::EscrowArgs),
}

#[derive(Debug, Args)]
pub struct EngineArgs {
    /// CI-sized run: 1 repetition of 1 s per row (default: 3 of 3 s).
    #[arg(long)]
    pub quick: bool,
    /// Directory for engine.json, engine.md and engine.png.
    #[arg(long, value_name = "DIR", default_value = "bench/results")]
    pub out: PathBuf,
    /// Records loaded before measuring.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1_000_000,
        value_parser = clap::value_parser!(u64).range(engine::MIN_RECORDS..=engine::MAX_RECORDS)
    )]
    pub records: u64,
    /// Measured seconds per row and repetition (overrides --quick's 1 s).
    #[arg(long, value_name = "S", value_parser = parse_seconds)]
    pub seconds: Option<f64>,
    /// Repetitions per row; rows report the median (overrides --quick's 1).
    #[arg(long, value_name = "R", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub reps: Option<u32>,
    /// Comma-separated worker thread counts.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "1,2",
        value_parser = clap::value_parser!(u32).range(1..=engine::MAX_THREADS as i64)
    )]
    pub threads: Vec<u32>,
}

#[derive(Debug, Args)]
pub struct SmartmartArgs {
    /// About a minute on 2 cores: fewer points, shorter rows, a smaller store
    /// (default: every point, 3 repetitions, about 10 minutes).
    #[arg(long)]
    pub quick: bool,
    /// Only the rows the goals are judged on (Figure 9 at 1 and 8 sections,
    /// Delay included), 5 repetitions.
    #[arg(long, conflicts_with = "quick")]
    pub goals: bool,
    /// Directory for smartmart.json, smartmart.md and smartmart.png.
    #[arg(long, value_name = "DIR", default_value = "bench/results")]
    pub out: PathBuf,
    /// Measured seconds per row and repetition (Delay rows too).
    #[arg(long, value_name = "S", value_parser = parse_smartmart_seconds)]
    pub seconds: Option<f64>,
    /// Repetitions per row; rows report the median.
    #[arg(long, value_name = "R", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub reps: Option<u32>,
}

impl SmartmartArgs {
    pub fn config(&self) -> SmartMartBenchConfig {
        let mut config = if self.quick {
            SmartMartBenchConfig::quick()
        } else if self.goals {
            SmartMartBenchConfig::goals()
        } else {
            SmartMartBenchConfig::full()
        };
        if let Some(seconds) = self.seconds {
            config.seconds_per_row = seconds;
            config.delay_seconds_per_row = seconds;
        }
        if let Some(reps) = self.reps {
            config.repetitions = reps as usize;
        }
        config
    }
}

fn parse_smartmart_seconds(text: &str) -> Result<f64, String> {
    parse_seconds_up_to(text, smartmart::MAX_SECONDS_PER_ROW)
}

fn parse_seconds(text: &str) -> Result<f64, String> {
    parse_seconds_up_to(text, engine::MAX_SECONDS_PER_ROW)
}

fn parse_seconds_up_to(text: &str, max: f64) -> Result<f64, String> {
    let seconds: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds"))?;
    if seconds.is_finite() && seconds > 0.0 && seconds <= max {
        Ok(seconds)
    } else {
        Err(format!("must be more than 0 and at most {max}"))
    }
}

impl EngineArgs {
    pub fn config(&self) -> EngineBenchConfig {
        let mut config = if self.quick {
            EngineBenchConfig::quick()
        } else {
            EngineBenchConfig::full()
        };
        config.records = self.records;
        if let Some(seconds) = self.seconds {
            config.seconds_per_row = seconds;
        }
        if let Some(reps) = self.reps {
            config.repetitions = reps as usize;
        }
        config.threads = dedup_in_order(self.threads.iter().map(|&t| t as usize));
        config
    }
}

fn dedup_in_order(items: impl Iterator<Item = usize>) -> Vec<usize> {
    let mut out = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("roost").chain(args.iter().copied()))
    }

    fn engine_args(args: &[&str]) -> EngineArgs {
        match parse(args).expect("valid arguments").command {
            Command::Bench(Benchmark::Engine(engine)) => engine,
            other => panic!("not the engine benchmark: {other:?}"),
        }
    }

    fn smartmart_args(args: &[&str]) -> SmartmartArgs {
        match parse(args).expect("valid arguments").command {
            Command::Bench(Benchmark::Smartmart(smartmart)) => smartmart,
            other => panic!("not the smartmart benchmark: {other:?}"),
        }
    }

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn quick_run_with_overrides() {
        let args = engine_args(&[
            "bench",
            "engine",
            "--quick",
            "--records",
            "5000",
            "--threads",
            "2,1,2",
            "--seconds",
            "0.5",
            "--out",
            "/tmp/x",
        ]);
        let config = args.config();
        assert_eq!(config.records, 5000);
        assert_eq!(config.threads, vec![2, 1]);
        assert_eq!(config.seconds_per_row, 0.5);
        assert_eq!(config.repetitions, 1);
        assert_eq!(args.out, PathBuf::from("/tmp/x"));
        assert!(config.validate().is_ok());
    }

    #[test]
    fn defaults_are_the_full_run() {
        let config = engine_args(&["bench", "engine"]).config();
        assert_eq!(config, EngineBenchConfig::full());
        assert_eq!(
            engine_args(&["bench", "engine", "--reps", "5"])
                .config()
                .repetitions,
            5
        );
    }

    #[test]
    fn bad_flags_are_clap_errors_not_panics() {
        let bad: &[&[&str]] = &[
            &[],
            &["bench"],
            &["bench", "nope"],
            &["bench", "engine", "--records", "-1"],
            &["bench", "engine", "--records", "3"],
            &["bench", "engine", "--records", "lots"],
            &["bench", "engine", "--seconds", "0"],
            &["bench", "engine", "--seconds", "NaN"],
            &["bench", "engine", "--seconds", "inf"],
            &["bench", "engine", "--reps", "0"],
            &["bench", "engine", "--threads", "0"],
            &["bench", "engine", "--threads", "1,,2"],
            &["bench", "engine", "--threads", "a"],
            &["bench", "engine", "--frobnicate"],
            &["bench", "smartmart", "--seconds", "0"],
            &["bench", "smartmart", "--seconds", "-2"],
            &["bench", "smartmart", "--seconds", "NaN"],
            &["bench", "smartmart", "--reps", "0"],
            &["bench", "smartmart", "--reps", "x"],
            &["bench", "smartmart", "--quick", "--quick"],
            &["bench", "smartmart", "--out"],
            &["bench", "smartmart", "--records", "5"],
        ];
        for args in bad {
            assert!(parse(args).is_err(), "{args:?} should be rejected");
        }
    }

    #[test]
    fn smartmart_quick_and_full() {
        let quick = smartmart_args(&["bench", "smartmart", "--quick", "--out", "/tmp/smq"]);
        assert_eq!(quick.out, PathBuf::from("/tmp/smq"));
        assert_eq!(quick.config(), SmartMartBenchConfig::quick());
        let full = smartmart_args(&["bench", "smartmart"]);
        assert_eq!(full.out, PathBuf::from("bench/results"));
        assert_eq!(full.config(), SmartMartBenchConfig::full());
        let custom =
            smartmart_args(&["bench", "smartmart", "--seconds", "0.25", "--reps", "2"]).config();
        assert_eq!(
            (custom.seconds_per_row, custom.delay_seconds_per_row),
            (0.25, 0.25)
        );
        assert_eq!(custom.repetitions, 2);
        assert!(custom.validate().is_ok());
    }

    #[test]
    fn demo_flags_are_checked() {
        assert!(parse(&["demo"]).is_ok());
        assert!(parse(&[
            "demo",
            "--seconds",
            "5",
            "--nodes",
            "5",
            "--clients-per-node",
            "1"
        ])
        .is_ok());
        assert!(parse(&[
            "demo",
            "--smartmart",
            "--seconds",
            "2",
            "--workers",
            "2",
            "--sections",
            "4"
        ])
        .is_ok());
        for bad in [
            &["demo", "--seconds", "0"][..],
            &["demo", "--seconds", "nan"],
            &["demo", "--smartmart", "--workers", "0"],
            &["demo", "--smartmart", "--sections", "9"],
            &["demo", "--smartmart", "--order-size", "-3"],
            &["demo", "--workers", "2"],
            &["demo", "--nodes", "2"],
            &["demo", "--smartmart", "--nodes", "3"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }
}

//! `roost check <workload>`: run a workload against the single-node engine
//! with concurrent clients, record the history, check it, print the verdict.
//! Exits non-zero when the history is not strictly serializable.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use roost_check::runner::{run_engine, RunConfig};
use roost_check::WorkloadKind;

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
    /// Seed of the transaction generator.
    #[arg(long, value_name = "N", default_value_t = 1)]
    seed: u64,
    /// Where to write the history as JSON lines (default: the temp directory).
    #[arg(long, value_name = "PATH")]
    out: Option<PathBuf>,
    /// Plant a bug (Silo's read validation skipped) to see the checker fail.
    #[arg(long, hide = true)]
    skip_read_validation: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum WorkloadArg {
    ListAppend,
    RwRegister,
    Bank,
    Counter,
}

impl WorkloadArg {
    fn kind(self) -> WorkloadKind {
        match self {
            WorkloadArg::ListAppend => WorkloadKind::ListAppend,
            WorkloadArg::RwRegister => WorkloadKind::RwRegister,
            WorkloadArg::Bank => WorkloadKind::Bank,
            WorkloadArg::Counter => WorkloadKind::Counter,
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
        if kind == WorkloadKind::Counter {
            config.workload.counter_bound = Some(COUNTER_BOUND);
        }
        config
    }

    fn out_path(&self) -> PathBuf {
        self.out.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(format!("roost-check-{}.jsonl", self.workload.kind().name()))
        })
    }
}

pub fn run(args: &CheckArgs) -> anyhow::Result<()> {
    let config = args.config();
    println!(
        "roost check {}: {} clients for {:.1} s against the single-node engine (seed {}){}",
        config.workload.kind.name(),
        config.clients,
        config.duration_ms as f64 / 1000.0,
        config.seed,
        if args.skip_read_validation {
            ", PLANTED BUG: read validation skipped"
        } else {
            ""
        }
    );
    let history = run_engine(&config)?;
    let out = args.out_path();
    history
        .save_to_path(&out)
        .map_err(|e| anyhow::anyhow!("writing the history to {}: {e}", out.display()))?;
    let report = roost_check::check(&history)?;
    print!("{report}");
    println!(
        "history: {} ops written to {}",
        history.ops.len(),
        out.display()
    );
    if !report.valid() {
        let total: usize = report.counts.values().sum();
        anyhow::bail!("the history is not strictly serializable ({total} anomalies)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::{Cli, Command};

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
    fn a_short_run_is_valid() {
        let args = check_args(&["bank", "--seconds", "0.2", "--out", "/dev/null"]).unwrap();
        assert!(run(&args).is_ok());
    }
}

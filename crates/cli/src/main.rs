//! `roost`: one binary for running, inspecting and benchmarking Roost.

use std::ffi::OsString;
use std::process::ExitCode;

/// mimalloc as the process allocator: per-thread free lists make the
/// short-lived buffers of the request path (RESP frames, transaction
/// contexts) cheap; with glibc malloc they were 600 to 1,300 instructions per
/// request (bench/results/resp-profile.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;
use roost_bench::engine;
use roost_bench::smartmart;
use roost_cli::args::{Benchmark, Cli, Command};
use roost_cli::{
    bench_commit, bench_durability, bench_escrow, bench_handover, bench_ownership, bench_resp,
    bench_smallbank, bench_transport, check, cluster, demo, demo_handover, resp, sim, sites,
};

/// The command line as typed, for the results' `command` field.
fn command_line(args: &[OsString]) -> String {
    args.iter()
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `roost demo`'s default run (the cluster).
const DEMO_SECONDS: f64 = 20.0;
/// `roost demo --smartmart`'s default run.
const SMARTMART_DEMO_SECONDS: f64 = 10.0;

fn run(cli: Cli, command: &str) -> anyhow::Result<()> {
    match cli.command {
        Command::Demo(args) if !args.smartmart => {
            let demo = demo::ClusterDemo {
                seconds: args.seconds.unwrap_or(DEMO_SECONDS),
                nodes: args.nodes,
                clients_per_node: args.clients_per_node,
                seed: args.seed,
            };
            if args.bank {
                demo::run(&demo)?;
            } else {
                let planted = demo_handover::Planted {
                    lose_finish_session: args.planted.as_deref() == Some("lose-finish-session"),
                };
                demo_handover::run(&demo, planted)?;
            }
        }
        Command::Demo(args) => {
            let config = smartmart::demo::DemoConfig {
                seconds: args.seconds.unwrap_or(SMARTMART_DEMO_SECONDS),
                workers: args.workers as usize,
                order_size: args.order_size as usize,
                sections: args.sections as usize,
                window: smartmart::demo::DemoConfig::default().window,
            };
            smartmart::demo::run_demo(&config)?;
        }
        Command::Bench(Benchmark::Engine(args)) => {
            engine::run(&args.config(), &args.out, command)?;
        }
        Command::Bench(Benchmark::Smartmart(args)) => {
            smartmart::run(&args.config(), &args.out, command)?;
        }
        Command::Bench(Benchmark::Transport(args)) => bench_transport::run(&args, command)?,
        Command::Bench(Benchmark::Ownership(args)) => bench_ownership::run(&args, command)?,
        Command::Bench(Benchmark::Commit(args)) => bench_commit::run(&args, command)?,
        Command::Bench(Benchmark::Durability(args)) => bench_durability::run(&args, command)?,
        Command::Bench(Benchmark::Resp(args)) => bench_resp::run(&args, command)?,
        Command::Bench(Benchmark::Smallbank(args)) => bench_smallbank::run(&args, command)?,
        Command::Bench(Benchmark::Handover(args)) => bench_handover::run(&args, command)?,
        Command::Bench(Benchmark::Voter(args)) => roost_cli::bench_voter::run(&args, command)?,
        Command::Bench(Benchmark::Tatp(args)) => roost_cli::bench_tatp::run(&args, command)?,
        Command::Bench(Benchmark::Escrow(args)) => bench_escrow::run(&args, command)?,
        Command::Check(args) => check::run(&args)?,
        Command::Node(args) => cluster::node(&args)?,
        Command::Up(args) => cluster::up(&args)?,
        Command::Status(args) => cluster::status(&args)?,
        Command::Sim(args) => sim::sim(&args)?,
        Command::Resp(args) => resp::run(&args)?,
        Command::Sites(command) => sites::run(&command)?,
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let cli = Cli::parse_from(&args);
    match run(cli, &command_line(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_joins_argv() {
        let argv: Vec<OsString> = ["roost", "bench", "engine", "--quick"]
            .iter()
            .map(OsString::from)
            .collect();
        assert_eq!(command_line(&argv), "roost bench engine --quick");
    }
}

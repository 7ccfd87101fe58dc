//! `roost bench durability`: what the durability log costs writes, beside
//! Redis's append-only file on the same disk. One `roost node` (its log in
//! its data directory) under each sync policy (`always`, `every 1000`,
//! `off`) and without a log (`memory`), and one `redis-server` with
//! `appendonly yes` and `appendfsync always` or `everysec`; each started
//! fresh in a directory under `--dir`, loaded by `redis-benchmark -t set
//! -P 1 -c 50` (every SET a write the server must make durable before it
//! answers, under `always`). The configurations take turns within each
//! repetition (rotating order), and the median of all repetitions is
//! reported, with the ratios the issue sets goals for: Roost `always` over
//! Redis `appendfsync always` (goal at least 1.0x) and Roost `off` over
//! Roost in memory (goal within 10%). Then the restart time: one node
//! loaded with `--restart-keys` keys (1 M), SIGKILLed and started again,
//! timed from its start to its first answered read, with the recovery's own
//! figure from its `/metrics`: once with every key in the log
//! (`--checkpoint-after-mb` above the log's size) and once with most of
//! them folded into a checkpoint (16 MiB).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use roost_bench::results::{median, BenchReport, LatencyUs, Row};
use roost_cluster::local_cluster::{LocalCluster, LocalClusterConfig};

use crate::bench_resp::{
    benchmark, parse_csv, redis_server_command, require, spawn, wait_ready, Workload, CLIENTS,
};

const BENCHMARK: &str = "durability";
const GOAL_ALWAYS_RATIO: f64 = 1.0;
const GOAL_OFF_RATIO: f64 = 0.9;
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// `roost node`'s keyspace reactors (its default).
const KEYSPACE_REACTORS: u64 = 64;

#[derive(Debug, Args)]
pub struct DurabilityBenchArgs {
    /// Repetitions (interleaved; the median of all runs is reported).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub reps: u32,
    /// SETs per configuration and repetition (`redis-benchmark -n`).
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1_000..=100_000_000))]
    pub requests: u64,
    /// Where the servers keep their files (one fresh directory per run;
    /// every system on the same disk).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Seconds one redis-benchmark run may take before it is stopped.
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
    /// Keys loaded into one node (`--sync always`) before it is SIGKILLed
    /// and restarted, to time its recovery: once replaying the log alone,
    /// once from a checkpoint and the log after it (0: skip).
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(0..=100_000_000))]
    pub restart_keys: u64,
    /// Where the JSON and Markdown go.
    #[arg(long, default_value = "bench/results", value_name = "DIR")]
    pub out: PathBuf,
}

/// One system and setting measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setup {
    Roost(&'static str),
    Redis(&'static str),
}

impl Setup {
    const ALL: [Setup; 6] = [
        Setup::Roost("always"),
        Setup::Roost("every 1000"),
        Setup::Roost("off"),
        Setup::Roost("memory"),
        Setup::Redis("always"),
        Setup::Redis("everysec"),
    ];

    fn system(&self) -> &'static str {
        match self {
            Setup::Roost(_) => "roost",
            Setup::Redis(_) => "redis",
        }
    }

    fn variant(&self) -> String {
        match self {
            Setup::Roost(policy) => format!("--sync {policy}"),
            Setup::Redis(policy) => format!("appendfsync {policy}"),
        }
    }
}

/// A server under test, stopped on drop.
enum Running {
    Roost(Box<LocalCluster>),
    Redis(crate::bench_resp::ServerProcess),
}

impl Running {
    fn addr(&self) -> SocketAddr {
        match self {
            Running::Roost(cluster) => cluster.resp_addr(0).expect("node 0 serves RESP"),
            Running::Redis(server) => server.addr,
        }
    }
}

/// Sends one SET until the server answers `+OK` (a fresh node creates its
/// reactors first).
fn wait_writable(addr: SocketAddr) -> anyhow::Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let answered = (|| -> std::io::Result<bool> {
            let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
            stream.set_read_timeout(Some(Duration::from_secs(2)))?;
            stream.write_all(b"*3\r\n$3\r\nSET\r\n$5\r\nready\r\n$1\r\n1\r\n")?;
            let mut reply = [0u8; 5];
            stream.read_exact(&mut reply)?;
            Ok(&reply == b"+OK\r\n")
        })();
        if let Ok(true) = answered {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{addr} did not take a SET within {} s",
            READY_TIMEOUT.as_secs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn start(setup: Setup, dir: PathBuf) -> anyhow::Result<Running> {
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let running = match setup {
        Setup::Roost(policy) => {
            let exe = std::env::current_exe().context("locating the roost executable")?;
            let mut config = LocalClusterConfig::new(exe, dir, 1);
            config.protocol = "ownership";
            config.etcd = false;
            config.extra_args = vec!["--sync".to_owned(), policy.to_owned()];
            let cluster = LocalCluster::start(config).context("starting roost node")?;
            wait_all_owned(&cluster)?;
            Running::Roost(Box::new(cluster))
        }
        Setup::Redis(policy) => {
            let port = crate::bench_resp::free_port()?;
            let mut command: Command = redis_server_command(port);
            // Later arguments win: the append-only file on, in `dir`.
            command
                .args(["--appendonly", "yes", "--appendfsync", policy, "--dir"])
                .arg(&dir);
            let mut server = spawn("redis-server", command, port)?;
            wait_ready(&mut server)?;
            Running::Redis(server)
        }
    };
    wait_writable(running.addr())?;
    Ok(running)
}

/// One repetition's figures for one setup.
#[derive(Debug, Clone, Copy)]
struct Sample {
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    avg_ms: f64,
}

pub fn run(args: &DurabilityBenchArgs, command: &str) -> anyhow::Result<()> {
    require("redis-server")?;
    require("redis-benchmark")?;
    let base = args.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("roost-bench-durability-{}", std::process::id()))
    });
    let workload = Workload {
        command: "SET",
        pipeline: 1,
        requests: args.requests,
    };
    let timeout = Duration::from_secs(args.timeout);
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); Setup::ALL.len()];
    println!(
        "durability: {} repetition(s) of {} SETs per setup (redis-benchmark -P 1 -c {CLIENTS}), files under {}",
        args.reps,
        args.requests,
        base.display()
    );
    for rep in 0..args.reps as usize {
        for turn in 0..Setup::ALL.len() {
            let index = (turn + rep) % Setup::ALL.len();
            let setup = Setup::ALL[index];
            let running = start(setup, base.join(format!("run-{rep}-{index}")))?;
            let text = benchmark(
                (setup.system(), running.addr()),
                &workload,
                CLIENTS,
                timeout,
            )?;
            drop(running);
            let result = parse_csv(&text, &["SET"])?
                .into_iter()
                .find(|r| r.command == "SET")
                .context("redis-benchmark SET result")?;
            println!(
                "  rep {} {:<6} {:<22} {:>9.0} SET/s  p50 {:.3} ms  p99 {:.3} ms",
                rep + 1,
                setup.system(),
                setup.variant(),
                result.rps,
                result.p50_ms,
                result.p99_ms
            );
            samples[index].push(Sample {
                rps: result.rps,
                p50_ms: result.p50_ms,
                p99_ms: result.p99_ms,
                avg_ms: result.avg_ms,
            });
        }
    }
    let restarts = if args.restart_keys > 0 {
        let mut rows = Vec::new();
        for (variant, checkpoint_after_mb) in
            [("log replay", 1_048_576u64), ("checkpoint + log", 16)]
        {
            let restart = time_restart(
                &base.join(format!("restart-{checkpoint_after_mb}")),
                args.restart_keys,
                checkpoint_after_mb,
            )?;
            println!(
                "  restart with {} keys ({variant}): serving after {} ms (recovery {} ms), {} MiB on disk, {} checkpoint(s)",
                args.restart_keys,
                restart.serving_ms,
                restart.recovery_ms,
                restart.disk_bytes >> 20,
                restart.checkpoints
            );
            rows.push((variant, checkpoint_after_mb, restart));
        }
        rows
    } else {
        Vec::new()
    };
    let _ = std::fs::remove_dir_all(&base);
    let med =
        |index: usize, f: fn(&Sample) -> f64| median(samples[index].iter().map(f)).unwrap_or(0.0);
    let mut report = BenchReport::new(BENCHMARK, command);
    for (index, setup) in Setup::ALL.iter().enumerate() {
        let mut row = Row::new(setup.system(), &setup.variant())
            .with_param("requests", args.requests)
            .with_param("clients", u64::from(CLIENTS))
            .with_param("pipeline", 1u64)
            .with_param("reps", u64::from(args.reps))
            .with_extra(
                "runs_rps",
                samples[index].iter().map(|s| s.rps).collect::<Vec<_>>(),
            );
        row.throughput_tps = med(index, |s| s.rps);
        row.latency_us = LatencyUs {
            mean: med(index, |s| s.avg_ms) * 1000.0,
            p50: med(index, |s| s.p50_ms) * 1000.0,
            p99: med(index, |s| s.p99_ms) * 1000.0,
            p999: 0.0,
        };
        report.rows.push(row);
    }
    let setups = report.rows.len();
    for (variant, checkpoint_after_mb, restart) in &restarts {
        report.rows.push(
            Row::new("roost", &format!("restart: {variant}"))
                .with_param("keys", args.restart_keys)
                .with_param("checkpoint_after_mb", *checkpoint_after_mb)
                .with_extra("serving_ms", restart.serving_ms)
                .with_extra("recovery_ms", restart.recovery_ms)
                .with_extra("disk_bytes", restart.disk_bytes)
                .with_extra("checkpoints", restart.checkpoints)
                .with_extra("load_keys_per_s", restart.load_rate.round()),
        );
    }
    let rate = |setup: Setup| {
        let index = Setup::ALL
            .iter()
            .position(|s| *s == setup)
            .expect("a setup");
        report.rows[index].throughput_tps
    };
    let always = rate(Setup::Roost("always")) / rate(Setup::Redis("always")).max(1e-9);
    let off = rate(Setup::Roost("off")) / rate(Setup::Roost("memory")).max(1e-9);
    report.notes = vec![
        format!("- Command: `{command}`."),
        format!(
            "- Each setup started fresh in its own directory under one base directory (the same disk), \
             loaded by `{}`, stopped; setups take turns within a repetition (rotating order); the \
             median of {} repetition(s) per setup.",
            workload_line(&workload),
            args.reps
        ),
        "- Roost: one `roost node` (peer membership, Zeus, degree 1), its durability log in its data \
         directory. Redis: `redis-server --appendonly yes --appendfsync always|everysec --save \"\"`."
            .to_owned(),
        format!(
            "- Roost `always` / Redis `appendfsync always`: **{always:.2}x** (goal at least {GOAL_ALWAYS_RATIO:.1}x: {}).",
            if always >= GOAL_ALWAYS_RATIO { "met" } else { "missed" }
        ),
        format!(
            "- Roost `off` / Roost in memory: **{off:.2}x** (goal at least {GOAL_OFF_RATIO:.1}x: {}).",
            if off >= GOAL_OFF_RATIO { "met" } else { "missed" }
        ),
        "- Latencies are redis-benchmark's (p50, p99 and mean; it reports no p99.9: 0 here).".to_owned(),
    ];
    for (variant, _, restart) in &restarts {
        report.notes.push(format!(
            "- Restart ({variant}): {} keys loaded ({:.0} keys/s, pipelined SETs, `--sync always`), the node \
             SIGKILLed and started again: answering reads after **{} ms**, of which recovery (checkpoint \
             and log read and folded) {} ms; {} MiB of log and checkpoint on disk, {} checkpoint(s) written \
             while loading.",
            args.restart_keys,
            restart.load_rate,
            restart.serving_ms,
            restart.recovery_ms,
            restart.disk_bytes >> 20,
            restart.checkpoints
        ));
    }
    debug_assert_eq!(report.rows.len(), setups + restarts.len());
    println!("{}", report.notes.join("\n"));
    let written = report
        .write(&args.out)
        .with_context(|| format!("writing results under {}", args.out.display()))?;
    println!(
        "results: {} and {}",
        written.json.display(),
        written.markdown.display()
    );
    Ok(())
}

fn workload_line(workload: &Workload) -> String {
    format!(
        "redis-benchmark -t set -P {} -n {} -c {CLIENTS}",
        workload.pipeline, workload.requests
    )
}

/// One restart's figures.
#[derive(Debug, Clone, Copy)]
struct Restart {
    /// From the new process's start to its first answered GET.
    serving_ms: u64,
    /// The node's own recovery time (`roost_durability_recovery_ms`).
    recovery_ms: u64,
    disk_bytes: u64,
    checkpoints: u64,
    load_rate: f64,
}

/// Loads `keys` keys into a fresh node, SIGKILLs it, starts it again and
/// times how long until it answers a read with the last key's value.
fn time_restart(
    dir: &std::path::Path,
    keys: u64,
    checkpoint_after_mb: u64,
) -> anyhow::Result<Restart> {
    let _ = std::fs::remove_dir_all(dir);
    let exe = std::env::current_exe().context("locating the roost executable")?;
    let mut config = LocalClusterConfig::new(exe, dir.to_path_buf(), 1);
    config.protocol = "ownership";
    config.etcd = false;
    config.extra_args = vec![
        "--sync".to_owned(),
        "always".to_owned(),
        "--checkpoint-after-mb".to_owned(),
        checkpoint_after_mb.to_string(),
    ];
    let mut cluster = LocalCluster::start(config).context("starting roost node")?;
    let addr = cluster.resp_addr(0).context("node 0 serves RESP")?;
    wait_all_owned(&cluster)?;
    let started = Instant::now();
    load_keys(addr, keys)?;
    let load_rate = keys as f64 / started.elapsed().as_secs_f64().max(1e-9);
    let checkpoints = metric(&cluster, "roost_durability_checkpoints_total")?;
    cluster.kill(0).context("SIGKILL")?;
    let durability = dir.join("node0.state").join("durability");
    let disk_bytes = std::fs::read_dir(&durability)
        .with_context(|| format!("listing {}", durability.display()))?
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    let last = format!("key:{:012}", keys - 1);
    let restarted = Instant::now();
    cluster.start_node(0).context("restarting the node")?;
    let deadline = restarted + Duration::from_secs(600);
    loop {
        if let Ok(Some(value)) = get(addr, &last) {
            anyhow::ensure!(value == last, "{last} came back as {value}");
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the node did not answer within 600 s of its restart"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let serving_ms = restarted.elapsed().as_millis() as u64;
    let recovery_ms = metric(&cluster, "roost_durability_recovery_ms")?;
    drop(cluster);
    let _ = std::fs::remove_dir_all(dir);
    Ok(Restart {
        serving_ms,
        recovery_ms,
        disk_bytes,
        checkpoints,
        load_rate,
    })
}

/// A counter or gauge from node 0's `/metrics`.
fn metric(cluster: &LocalCluster, name: &str) -> anyhow::Result<u64> {
    let admin = cluster.admin_addr(0).context("node 0's admin address")?;
    let (code, body) =
        roost_cluster::local_cluster::admin_request(admin, "/metrics", Duration::from_secs(10))
            .context("reading /metrics")?;
    anyhow::ensure!(code == 200, "/metrics answered {code}");
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .with_context(|| format!("no {name} in /metrics"))
}

/// Until the node owns every keyspace reactor (a fresh node creates them
/// one by one: a load before would find some missing).
fn wait_all_owned(cluster: &LocalCluster) -> anyhow::Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    while metric(cluster, "roost_ownership_reactors_owned").ok() != Some(KEYSPACE_REACTORS) {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the node did not own its {KEYSPACE_REACTORS} reactors within {} s",
            READY_TIMEOUT.as_secs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// SET key:<i> = key:<i> for every i below `keys`, pipelined 1,000 at a
/// time on 4 connections.
fn load_keys(addr: SocketAddr, keys: u64) -> anyhow::Result<()> {
    const CONNECTIONS: u64 = 4;
    const BATCH: u64 = 1_000;
    std::thread::scope(|scope| {
        let loaders: Vec<_> = (0..CONNECTIONS)
            .map(|c| {
                scope.spawn(move || -> anyhow::Result<()> {
                    let mut stream = TcpStream::connect(addr)?;
                    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
                    let mut reader = std::io::BufReader::new(stream.try_clone()?);
                    let mut first = c * BATCH;
                    while first < keys {
                        let last = (first + BATCH).min(keys);
                        let mut frames = Vec::with_capacity(64 * BATCH as usize);
                        for i in first..last {
                            let key = format!("key:{i:012}");
                            frames.extend_from_slice(
                                format!(
                                    "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n{key}\r\n",
                                    key.len(),
                                    key.len()
                                )
                                .as_bytes(),
                            );
                        }
                        stream.write_all(&frames)?;
                        for _ in first..last {
                            let mut line = String::new();
                            std::io::BufRead::read_line(&mut reader, &mut line)?;
                            anyhow::ensure!(
                                line == "+OK\r\n",
                                "a SET while loading answered {line:?}"
                            );
                        }
                        first += CONNECTIONS * BATCH;
                    }
                    Ok(())
                })
            })
            .collect();
        for loader in loaders {
            loader
                .join()
                .map_err(|_| anyhow::anyhow!("a loader thread panicked"))??;
        }
        Ok(())
    })
}

/// GET `key` on a fresh connection: `Ok(None)` for an error answer or a nil.
fn get(addr: SocketAddr, key: &str) -> anyhow::Result<Option<String>> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(format!("*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len()).as_bytes())?;
    let mut reader = std::io::BufReader::new(stream);
    let mut line = String::new();
    std::io::BufRead::read_line(&mut reader, &mut line)?;
    if !line.starts_with('$') || line.starts_with("$-1") {
        return Ok(None);
    }
    let mut value = String::new();
    std::io::BufRead::read_line(&mut reader, &mut value)?;
    Ok(Some(value.trim_end().to_owned()))
}

//! `roost bench resp`: `roost resp` against Redis, both driven by
//! `redis-benchmark` (SET, GET and INCR, 50 clients, 100,000 random keys) at
//! every pipeline depth of `--pipelines` (default unpipelined, `-P 1`, and
//! `-P 16`). Goal (issue 22): Roost at least 1.0x Redis per command and
//! depth. Beside the rates, the CPU time each server spends per request.
//!
//! Both servers run as child processes on free loopback ports: `roost resp`
//! is this executable, `redis-server` comes from `PATH` (Debian's package)
//! with persistence off. Both are killed when the run ends, failed or not.
//!
//! One repetition runs every (depth, command) once against each server,
//! back to back (one `redis-benchmark -t <command>` per run; which server
//! goes first alternates between repetitions), so a slow stretch of the
//! shared machine hits both sides of a pair. Around each run the server's
//! utime + stime are read from `/proc/<pid>/stat`; their difference over the
//! requests is its CPU per request. Each row reports medians over the
//! repetitions; the ratio rows also the median of the per-repetition ratios.
//! The default, 11 repetitions at `-P 1` and `-P 16`, takes about 3 minutes
//! on the 2-core machine (`--quick` well under one).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use roost_bench::plot::{finish_png, render_figure_png, BarChart, BarSeries};
use roost_bench::results::{median, median_ratio, BenchReport, LatencyUs, Row};
use roost_bench::sys::ProcessCpu;
use roost_cluster::process::die_with_parent;

const BENCHMARK: &str = "resp";
/// With `--commands` other than SET, GET and INCR (results: resp_commands.*).
const COMMANDS_BENCHMARK: &str = "resp_commands";
/// Issue 20's goals: SET, GET and INCR at least 1.0x Redis, every other
/// command at least 0.9x.
const GOAL_RATIO: f64 = 1.0;
const OTHER_GOAL_RATIO: f64 = 0.9;
const COMMANDS: [&str; 3] = ["SET", "GET", "INCR"];
/// redis-benchmark 7.0's default tests, in its order (`-t` takes their
/// names in lower case), with the name its CSV gives each result.
const DEFAULT_TESTS: [(&str, &str); 19] = [
    ("PING_INLINE", "PING_INLINE"),
    ("PING_MBULK", "PING_MBULK"),
    ("SET", "SET"),
    ("GET", "GET"),
    ("INCR", "INCR"),
    ("LPUSH", "LPUSH"),
    ("RPUSH", "RPUSH"),
    ("LPOP", "LPOP"),
    ("RPOP", "RPOP"),
    ("SADD", "SADD"),
    ("HSET", "HSET"),
    ("SPOP", "SPOP"),
    ("ZADD", "ZADD"),
    ("ZPOPMIN", "ZPOPMIN"),
    ("LRANGE_100", "LRANGE_100 (first 100 elements)"),
    ("LRANGE_300", "LRANGE_300 (first 300 elements)"),
    ("LRANGE_500", "LRANGE_500 (first 500 elements)"),
    ("LRANGE_600", "LRANGE_600 (first 600 elements)"),
    ("MSET", "MSET (10 keys)"),
];

/// The name redis-benchmark's CSV gives test `command`'s result.
pub(crate) fn csv_name(command: &str) -> &str {
    DEFAULT_TESTS
        .iter()
        .find(|(test, _)| *test == command)
        .map_or(command, |(_, csv)| csv)
}

/// The goal for `command`'s ratio (issue 20).
fn goal_ratio(command: &str) -> f64 {
    if COMMANDS.contains(&command) {
        GOAL_RATIO
    } else {
        OTHER_GOAL_RATIO
    }
}

/// `--commands`' names, as the tests they are (`default`: all of
/// redis-benchmark's default tests), each once, in redis-benchmark's order.
fn parse_tests(names: &[String]) -> anyhow::Result<Vec<&'static str>> {
    let mut wanted: Vec<&'static str> = Vec::new();
    for name in names {
        let name = name.trim();
        if name.eq_ignore_ascii_case("default") {
            wanted.extend(DEFAULT_TESTS.iter().map(|(test, _)| *test));
            continue;
        }
        let Some((test, _)) = DEFAULT_TESTS
            .iter()
            .find(|(test, _)| test.eq_ignore_ascii_case(name))
        else {
            anyhow::bail!(
                "--commands: `{name}` is not one of redis-benchmark's default tests ({}, or `default`)",
                DEFAULT_TESTS
                    .iter()
                    .map(|(t, _)| t.to_ascii_lowercase())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        };
        wanted.push(test);
    }
    Ok(DEFAULT_TESTS
        .iter()
        .map(|(test, _)| *test)
        .filter(|test| wanted.contains(test))
        .collect())
}
pub(crate) const CLIENTS: u32 = 50;
const KEYSPACE: u32 = 100_000;
/// Requests per command and repetition, pipelined (`-P` above 1): about
/// 0.3 s a run on the 2-core machine.
const FULL_REQUESTS: u64 = 200_000;
const QUICK_REQUESTS: u64 = 50_000;
/// The same unpipelined (`-P 1`, one round trip per request): about 1.5 s.
const FULL_REQUESTS_UNPIPELINED: u64 = 100_000;
const QUICK_REQUESTS_UNPIPELINED: u64 = 20_000;
const DEFAULT_REPS: u32 = 11;
const MAX_PIPELINE: u32 = 1024;
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
const REDIS_SERVER: &str = "redis-server";
const REDIS_BENCHMARK: &str = "redis-benchmark";

#[derive(Debug, Args)]
pub struct RespBenchArgs {
    /// CI-sized run: 50,000 requests per command pipelined, 20,000 at `-P 1`
    /// (default 200,000 and 100,000).
    #[arg(long)]
    pub quick: bool,
    /// Directory for resp.json, resp.md and resp.png.
    #[arg(long, value_name = "DIR", default_value = "bench/results")]
    pub out: PathBuf,
    /// Repetitions, each running every depth and command on both servers
    /// back to back; rows report medians over them. The default 11 takes
    /// about 3 minutes on 2 cores.
    #[arg(long, value_name = "R", default_value_t = DEFAULT_REPS,
          value_parser = clap::value_parser!(u32).range(1..=100))]
    pub reps: u32,
    /// redis-benchmark tests to run (`-t` names, comma-separated; `default`:
    /// all of its default tests, results in resp_commands.*). Goal: SET, GET
    /// and INCR at least 1.0x Redis, the others 0.9x. Every repetition
    /// starts with FLUSHALL on both servers, so each replays the same run.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "set,get,incr"
    )]
    pub commands: Vec<String>,
    /// Pipeline depths to measure (`redis-benchmark -P`), comma-separated.
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "1,16",
          value_parser = clap::value_parser!(u32).range(1..=MAX_PIPELINE as i64))]
    pub pipelines: Vec<u32>,
    /// Requests per command, depth and repetition (`redis-benchmark -n`; overrides
    /// --quick and the per-depth defaults).
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1_000..=100_000_000))]
    pub requests: Option<u64>,
    /// Seconds one redis-benchmark run may take before it is stopped.
    #[arg(long, value_name = "S", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout: u64,
    /// Benchmark one Roost database over N `roost node` processes (Zeus,
    /// degree 3, etcd) beside a Redis primary with N-1 replicas and `WAIT`
    /// after every write (results: resp_cluster.*).
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(2..=5))]
    pub cluster: Option<u32>,
    /// With --cluster: the Rust client's connections per server.
    #[arg(long, value_name = "C", default_value_t = 8, requires = "cluster",
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub cluster_connections: u32,
    /// With --cluster: seconds per Rust-client run (default 3, --quick 1).
    #[arg(long, value_name = "S", requires = "cluster",
          value_parser = clap::value_parser!(u32).range(1..=600))]
    pub cluster_seconds: Option<u32>,
    /// With --cluster: seconds per hot-key run (default: --cluster-seconds').
    #[arg(long, value_name = "S", requires = "cluster",
          value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub hot_key_seconds: Option<u32>,
    /// With --cluster: only the hot-key rows (no Redis), written to
    /// resp_cluster_hot_key.*.
    #[arg(long, requires = "cluster")]
    pub hot_key_only: bool,
}

impl RespBenchArgs {
    /// Requests per run at pipeline depth `pipeline`.
    pub(crate) fn requests(&self, pipeline: u32) -> u64 {
        self.requests.unwrap_or(match (self.quick, pipeline) {
            (false, 1) => FULL_REQUESTS_UNPIPELINED,
            (true, 1) => QUICK_REQUESTS_UNPIPELINED,
            (false, _) => FULL_REQUESTS,
            (true, _) => QUICK_REQUESTS,
        })
    }

    /// Seconds per Rust-client run of `--cluster`.
    pub(crate) fn cluster_seconds(&self) -> f64 {
        f64::from(
            self.cluster_seconds
                .unwrap_or(if self.quick { 1 } else { 3 }),
        )
    }

    /// The depths, in the order given, each once.
    pub(crate) fn pipelines(&self) -> Vec<u32> {
        let mut depths = Vec::new();
        for &depth in &self.pipelines {
            if !depths.contains(&depth) {
                depths.push(depth);
            }
        }
        depths
    }
}

/// A server process, killed (and reaped) when dropped.
pub(crate) struct ServerProcess {
    pub(crate) name: &'static str,
    pub(crate) addr: SocketAddr,
    pub(crate) child: Child,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `redis-server` on `port` of loopback, persistence off.
pub(crate) fn redis_server_command(port: u16) -> Command {
    let mut command = Command::new(REDIS_SERVER);
    command.arg("--port").arg(port.to_string()).args([
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
    ]);
    command
}

pub(crate) fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// Fails clearly when a program is not on `PATH` (or does not run).
pub(crate) fn require(program: &str) -> anyhow::Result<String> {
    match Command::new(program).arg("--version").output() {
        Ok(output) if output.status.success() => {
            Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
        }
        Ok(output) => anyhow::bail!("`{program} --version` failed: {}", output.status),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => anyhow::bail!(
            "`{program}` is not installed (or not on PATH); `roost bench resp` needs \
             redis-server and redis-benchmark (Debian: apt-get install redis-server redis-tools)"
        ),
        Err(e) => Err(e).with_context(|| format!("running `{program} --version`")),
    }
}

pub(crate) fn spawn(
    name: &'static str,
    mut command: Command,
    port: u16,
) -> anyhow::Result<ServerProcess> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    die_with_parent(&mut command);
    let child = command
        .spawn()
        .with_context(|| format!("starting {name}"))?;
    let server = ServerProcess {
        name,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        child,
    };
    Ok(server)
}

/// FLUSHALL on the server at `addr`.
fn flush_all(addr: SocketAddr) -> anyhow::Result<()> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    stream.write_all(b"*1\r\n$8\r\nFLUSHALL\r\n")?;
    let mut reply = [0u8; 5];
    stream.read_exact(&mut reply)?;
    anyhow::ensure!(
        &reply == b"+OK\r\n",
        "FLUSHALL answered {:?}",
        String::from_utf8_lossy(&reply)
    );
    Ok(())
}

fn ping(addr: SocketAddr) -> std::io::Result<bool> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200))?;
    stream.set_read_timeout(Some(Duration::from_millis(500)))?;
    stream.write_all(b"*1\r\n$4\r\nPING\r\n")?;
    let mut reply = [0u8; 7];
    stream.read_exact(&mut reply)?;
    Ok(&reply == b"+PONG\r\n")
}

/// Waits until the server answers PING, or fails if it exits or stays silent.
pub(crate) fn wait_ready(server: &mut ServerProcess) -> anyhow::Result<()> {
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    loop {
        if let Some(status) = server.child.try_wait()? {
            anyhow::bail!("{} exited during startup: {status}", server.name);
        }
        if let Ok(true) = ping(server.addr) {
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "{} did not answer PING on {} within {}s",
                server.name,
                server.addr,
                STARTUP_TIMEOUT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One command's result from one redis-benchmark run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CommandResult {
    pub(crate) command: String,
    pub(crate) rps: f64,
    pub(crate) avg_ms: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p95_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
}

/// Parses redis-benchmark 7's `--csv` output: a header
/// `"test","rps","avg_latency_ms",...` then one line per command; every
/// command of `expected` must be there.
pub(crate) fn parse_csv(text: &str, expected: &[&str]) -> anyhow::Result<Vec<CommandResult>> {
    let mut header: Option<Vec<String>> = None;
    let mut results = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| l.starts_with('"')) {
        let fields: Vec<String> = line
            .split(',')
            .map(|f| f.trim().trim_matches('"').to_owned())
            .collect();
        let Some(columns) = &header else {
            anyhow::ensure!(
                fields.first().map(String::as_str) == Some("test"),
                "unexpected redis-benchmark CSV header: {line}"
            );
            header = Some(fields);
            continue;
        };
        let column = |name: &str| -> anyhow::Result<f64> {
            let index = columns
                .iter()
                .position(|c| c == name)
                .with_context(|| format!("redis-benchmark CSV has no `{name}` column"))?;
            let value = fields
                .get(index)
                .with_context(|| format!("short redis-benchmark CSV line: {line}"))?;
            value
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .with_context(|| format!("bad `{name}` value `{value}` in: {line}"))
        };
        results.push(CommandResult {
            command: fields[0].clone(),
            rps: column("rps")?,
            avg_ms: column("avg_latency_ms")?,
            p50_ms: column("p50_latency_ms")?,
            p95_ms: column("p95_latency_ms")?,
            p99_ms: column("p99_latency_ms")?,
            max_ms: column("max_latency_ms")?,
        });
    }
    for command in expected {
        anyhow::ensure!(
            results.iter().any(|r| r.command == *command),
            "redis-benchmark printed no {command} result; its output was:\n{text}"
        );
    }
    Ok(results)
}

/// One redis-benchmark run: which command, how deep, how many requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Workload {
    pub(crate) command: &'static str,
    pub(crate) pipeline: u32,
    pub(crate) requests: u64,
}

impl Workload {
    /// The command line, for the notes.
    fn describe(&self) -> String {
        format!(
            "redis-benchmark -t {} -P {} -n {} -r {KEYSPACE} -c {CLIENTS}",
            self.command.to_ascii_lowercase(),
            self.pipeline,
            self.requests
        )
    }
}

/// Runs redis-benchmark against one server, stopping it after `timeout`.
pub(crate) fn benchmark(
    server: (&str, SocketAddr),
    workload: &Workload,
    clients: u32,
    timeout: Duration,
) -> anyhow::Result<String> {
    let (name, addr) = server;
    let mut command = Command::new(REDIS_BENCHMARK);
    command
        .args(["-h", "127.0.0.1", "-p"])
        .arg(addr.port().to_string())
        .arg("-t")
        .arg(workload.command.to_ascii_lowercase())
        .arg("-P")
        .arg(workload.pipeline.to_string())
        .arg("-n")
        .arg(workload.requests.to_string())
        .arg("-r")
        .arg(KEYSPACE.to_string())
        .arg("-c")
        .arg(clients.to_string())
        .args(["--csv", "-q"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    die_with_parent(&mut command);
    let mut child = command
        .spawn()
        .with_context(|| format!("starting {REDIS_BENCHMARK}"))?;
    let mut stdout = child.stdout.take().context("redis-benchmark stdout")?;
    let mut stderr = child.stderr.take().context("redis-benchmark stderr")?;
    let out_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = out_reader.join().unwrap_or_default();
    let err = err_reader.join().unwrap_or_default();
    match status {
        None => anyhow::bail!(
            "redis-benchmark against {} ({}) took over {}s and was stopped (--timeout); \
             output so far:\n{out}{err}",
            name,
            addr,
            timeout.as_secs()
        ),
        Some(status) if !status.success() => anyhow::bail!(
            "redis-benchmark against {} ({}) failed ({status}):\n{out}{err}",
            name,
            addr
        ),
        Some(_) => Ok(out),
    }
}

/// One server's numbers from one redis-benchmark run.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    result: CommandResult,
    /// The server's CPU time (user + system, all threads) during the run
    /// over the requests, in µs; `None` where `/proc` cannot be read.
    cpu_us_per_request: Option<f64>,
    /// The server's CPU time over the run's wall time: cores kept busy.
    cores: Option<f64>,
}

/// One redis-benchmark run against `server`, with the server's CPU read from
/// `/proc/<pid>/stat` just before and just after.
fn measure(
    server: &ServerProcess,
    workload: &Workload,
    timeout: Duration,
) -> anyhow::Result<Sample> {
    let pid = server.child.id();
    let before = ProcessCpu::of_pid(pid);
    let started = Instant::now();
    let text = benchmark((server.name, server.addr), workload, CLIENTS, timeout)?;
    let wall = started.elapsed();
    let after = ProcessCpu::of_pid(pid);
    let name = csv_name(workload.command);
    let mut result = parse_csv(&text, &[name])
        .with_context(|| format!("parsing redis-benchmark output for {}", server.name))?
        .into_iter()
        .find(|r| r.command == name)
        .context("redis-benchmark result")?;
    workload.command.clone_into(&mut result.command);
    let cpu_us = before.zip(after).map(|(b, a)| a.us_since(&b));
    Ok(Sample {
        result,
        cpu_us_per_request: cpu_us.map(|us| us / workload.requests as f64),
        cores: cpu_us.map(|us| us / 1e6 / wall.as_secs_f64().max(1e-9)),
    })
}

/// The repetition with the median rate (the upper middle one for an even
/// count), whose latencies the row reports.
fn median_run(samples: &[Sample]) -> Option<&Sample> {
    let mut sorted: Vec<&Sample> = samples.iter().collect();
    sorted.sort_by(|a, b| a.result.rps.total_cmp(&b.result.rps));
    sorted.get(sorted.len() / 2).copied()
}

/// The median over repetitions of `f(roost) / f(redis)` for the two runs
/// of each pair.
fn paired_ratio(
    roost: &[Sample],
    redis: &[Sample],
    f: impl Fn(&Sample) -> Option<f64>,
) -> Option<f64> {
    median_ratio(
        roost
            .iter()
            .zip(redis)
            .filter_map(|(ours, theirs)| Some((f(ours)?, f(theirs)?))),
    )
}

/// Every repetition of one workload on both servers.
#[derive(Debug, Clone, PartialEq)]
struct Cell {
    workload: Workload,
    roost: Vec<Sample>,
    redis: Vec<Sample>,
}

/// What a [`Cell`] comes to.
#[derive(Debug, Clone, PartialEq)]
struct CellSummary {
    roost_rps: f64,
    redis_rps: f64,
    /// Median Roost rate over median Redis rate.
    ratio: f64,
    /// Median over repetitions of Roost's rate over Redis's in the same one.
    paired: f64,
    roost_cpu_us: Option<f64>,
    redis_cpu_us: Option<f64>,
    /// Median over repetitions of Roost's CPU per request over Redis's.
    paired_cpu: Option<f64>,
    roost_cores: Option<f64>,
    redis_cores: Option<f64>,
    /// The command's goal ratio.
    goal: f64,
}

impl CellSummary {
    /// The goal is met when both ratios reach it: the ratio of the medians
    /// and the median of the paired ratios.
    fn met(&self) -> bool {
        self.ratio >= self.goal && self.paired >= self.goal
    }

    fn verdict(&self) -> &'static str {
        if self.met() {
            "met"
        } else {
            "missed"
        }
    }
}

impl Cell {
    fn new(workload: Workload) -> Self {
        Cell {
            workload,
            roost: Vec::new(),
            redis: Vec::new(),
        }
    }

    fn summary(&self) -> CellSummary {
        let rps = |samples: &[Sample]| median(samples.iter().map(|s| s.result.rps)).unwrap_or(0.0);
        let cpu = |samples: &[Sample]| median(samples.iter().filter_map(|s| s.cpu_us_per_request));
        let cores = |samples: &[Sample]| median(samples.iter().filter_map(|s| s.cores));
        let (roost_rps, redis_rps) = (rps(&self.roost), rps(&self.redis));
        CellSummary {
            roost_rps,
            redis_rps,
            ratio: roost_rps / redis_rps.max(f64::MIN_POSITIVE),
            paired: paired_ratio(&self.roost, &self.redis, |s| Some(s.result.rps)).unwrap_or(0.0),
            roost_cpu_us: cpu(&self.roost),
            redis_cpu_us: cpu(&self.redis),
            paired_cpu: paired_ratio(&self.roost, &self.redis, |s| s.cpu_us_per_request),
            roost_cores: cores(&self.roost),
            redis_cores: cores(&self.redis),
            goal: goal_ratio(self.workload.command),
        }
    }

    fn label(&self) -> String {
        format!("{} -P {}", self.workload.command, self.workload.pipeline)
    }

    /// The row of one system: its median repetition's rate and latencies,
    /// medians of its CPU, both ratios.
    fn row(&self, system: &str, reps: u32) -> Row {
        let samples = if system == "roost" {
            &self.roost
        } else {
            &self.redis
        };
        let summary = self.summary();
        let Workload {
            command,
            pipeline,
            requests,
        } = self.workload;
        let mut row = Row::new(system, &command.to_ascii_lowercase())
            .with_param("command", command)
            .with_param("requests", requests)
            .with_param("pipeline", pipeline)
            .with_param("clients", CLIENTS)
            .with_param("keyspace", KEYSPACE)
            .with_param("reps", reps)
            .with_extra("roost_over_redis", round(summary.ratio, 2))
            .with_extra("paired_ratio_median", round(summary.paired, 2))
            .with_extra("goal_met", summary.met())
            .with_extra(
                "repetitions_ops",
                samples.iter().map(|s| s.result.rps).collect::<Vec<_>>(),
            )
            .with_extra(
                "cpu_us_per_request",
                median(samples.iter().filter_map(|s| s.cpu_us_per_request)).map(|v| round(v, 3)),
            )
            .with_extra(
                "repetitions_cpu_us_per_request",
                samples
                    .iter()
                    .map(|s| s.cpu_us_per_request.map(|v| round(v, 3)))
                    .collect::<Vec<_>>(),
            )
            .with_extra(
                "cpu_cores",
                median(samples.iter().filter_map(|s| s.cores)).map(|v| round(v, 2)),
            )
            .with_extra(
                "roost_over_redis_cpu_per_request",
                summary.paired_cpu.map(|v| round(v, 2)),
            );
        if let Some(median) = median_run(samples) {
            let result = &median.result;
            row = row
                .with_extra("p95_latency_us", result.p95_ms * 1e3)
                .with_extra("max_latency_us", result.max_ms * 1e3);
            row.throughput_tps = result.rps;
            row.latency_us = LatencyUs {
                mean: result.avg_ms * 1e3,
                p50: result.p50_ms * 1e3,
                p99: result.p99_ms * 1e3,
                // redis-benchmark's CSV has no p99.9; its max is in the extras.
                p999: 0.0,
            };
        }
        row
    }
}

fn round(x: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (x * scale).round() / scale
}

fn fmt_opt(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.decimals$}"))
}

/// `1.23x`, or `-` without a value.
fn fmt_ratio(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}x"))
}

/// The console table: one line per (command, depth).
fn console_table(cells: &[Cell]) -> String {
    let mut out = format!(
        "{:<12} {:>12} {:>12} {:>7} {:>7} {:>7}  {:>12} {:>12} {:>9}\n",
        "command",
        "roost ops/s",
        "redis ops/s",
        "ratio",
        "paired",
        "goal",
        "roost µs/req",
        "redis µs/req",
        "cpu ratio"
    );
    for cell in cells {
        let s = cell.summary();
        out.push_str(&format!(
            "{:<12} {:>12.0} {:>12.0} {:>6.2}x {:>6.2}x {:>7}  {:>12} {:>12} {:>9}\n",
            cell.label(),
            s.roost_rps,
            s.redis_rps,
            s.ratio,
            s.paired,
            s.verdict(),
            fmt_opt(s.roost_cpu_us, 2),
            fmt_opt(s.redis_cpu_us, 2),
            fmt_ratio(s.paired_cpu),
        ));
    }
    out.push_str(&format!(
        "(goal >= {GOAL_RATIO:.1}x for SET, GET and INCR, {OTHER_GOAL_RATIO:.1}x for the others: met when both the ratio of the medians and the median \
         paired ratio reach it; µs/req: server CPU per request, median; cpu ratio: median paired \
         roost/redis)\n"
    ));
    out
}

/// The Markdown summary under the table: the goal per row, CPU per request.
fn markdown_notes(cells: &[Cell], reps: u32, redis_version: &str) -> Vec<String> {
    let mut notes = vec![
        "## Summary".to_owned(),
        String::new(),
        "| command | -P | roost ops/s | redis ops/s | ratio of medians | median paired ratio | \
         goal | roost CPU µs/req | redis CPU µs/req | CPU/req roost/redis (paired) | \
         roost cores | redis cores |"
            .to_owned(),
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |".to_owned(),
    ];
    for cell in cells {
        let s = cell.summary();
        notes.push(format!(
            "| {} | {} | {:.0} | {:.0} | {:.2}x | {:.2}x | ≥ {:.1}x: {} | {} | {} | {} | {} | {} |",
            cell.workload.command,
            cell.workload.pipeline,
            s.roost_rps,
            s.redis_rps,
            s.ratio,
            s.paired,
            s.goal,
            s.verdict(),
            fmt_opt(s.roost_cpu_us, 2),
            fmt_opt(s.redis_cpu_us, 2),
            fmt_ratio(s.paired_cpu),
            fmt_opt(s.roost_cores, 2),
            fmt_opt(s.redis_cores, 2),
        ));
    }
    notes.push(String::new());
    for cell in cells {
        let s = cell.summary();
        notes.push(format!(
            "- {}: Roost {:.0} ops/s, Redis {:.0} ops/s: {:.2}x; median of the per-repetition ratios \
             {:.2}x (goal ≥ {:.1}x: {}); CPU per request Roost {} µs, Redis {} µs.",
            cell.label(),
            s.roost_rps,
            s.redis_rps,
            s.ratio,
            s.paired,
            s.goal,
            s.verdict(),
            fmt_opt(s.roost_cpu_us, 2),
            fmt_opt(s.redis_cpu_us, 2),
        ));
    }
    notes.push(String::new());
    notes.push("## Method".to_owned());
    notes.push(String::new());
    let first = cells.first().map(|c| c.workload.command);
    let tests: Vec<String> = cells
        .iter()
        .map(|c| c.workload.command.to_ascii_lowercase())
        .fold(Vec::new(), |mut tests, test| {
            if !tests.contains(&test) {
                tests.push(test);
            }
            tests
        });
    let runs: Vec<String> = cells
        .iter()
        .filter(|c| Some(c.workload.command) == first)
        .map(|c| {
            let line = c.workload.describe();
            let head = format!("-t {}", c.workload.command.to_ascii_lowercase());
            format!(
                "`{}`",
                line.replacen(&head, &format!("-t {}", tests.join("|")), 1)
            )
        })
        .collect();
    notes.push(format!(
        "- Runs: {}; one redis-benchmark per command, {reps} repetition(s). Each repetition runs every \
         depth and command (in that order) on both servers back to back, the first server alternating \
         between repetitions, after FLUSHALL on both (so each repetition replays the same run: the \
         list tests push onto and pop from redis-benchmark's one `mylist`). Redis: {redis_version}, \
         --save '' --appendonly no.",
        runs.join(", ")
    ));
    notes.push(
        "- Rates: the median over repetitions (the row's latencies are its median repetition's); \
         `paired_ratio_median` is the median of the per-repetition ratios Roost/Redis, which cancels \
         drift of the shared machine. The goal (≥ 1.0x for SET, GET and INCR, ≥ 0.9x for the \
         others, issue 20) is met when both ratios reach it."
            .to_owned(),
    );
    notes.push(format!(
        "- CPU per request: each server process's utime + stime (all threads) from `/proc/<pid>/stat` \
         just before and after each redis-benchmark run ({} ticks per second), over the run's \
         requests; the median over repetitions. It includes what the server spends idle or on \
         redis-benchmark's connection set-up during the run. Cores: that CPU time over the run's wall \
         time.",
        roost_bench::sys::clock_ticks_per_second()
    ));
    notes.push(
        "- Latencies are redis-benchmark's (per pipelined batch); it reports no p99.9 (0 here), the \
         max and p95 are in the extras."
            .to_owned(),
    );
    notes
}

/// One panel of rates per depth, one of CPU per request.
fn charts(cells: &[Cell], depths: &[u32]) -> Vec<BarChart> {
    let mut charts: Vec<BarChart> = depths
        .iter()
        .map(|&depth| {
            let at: Vec<&Cell> = cells
                .iter()
                .filter(|c| c.workload.pipeline == depth)
                .collect();
            let series = |name: &str, f: fn(&CellSummary) -> f64| BarSeries {
                name: name.to_owned(),
                values: at.iter().map(|c| Some(f(&c.summary()))).collect(),
            };
            BarChart {
                title: format!(
                    "redis-benchmark -P {depth} -c {CLIENTS}: Roost beside redis-server"
                ),
                y_label: "ops/s".to_owned(),
                categories: at.iter().map(|c| c.workload.command.to_owned()).collect(),
                series: vec![
                    series("roost", |s| s.roost_rps),
                    series("redis", |s| s.redis_rps),
                ],
            }
        })
        .collect();
    charts.push(BarChart {
        title: "server CPU per request (median)".to_owned(),
        y_label: "µs of CPU per request".to_owned(),
        categories: cells.iter().map(Cell::label).collect(),
        series: vec![
            BarSeries {
                name: "roost".to_owned(),
                values: cells.iter().map(|c| c.summary().roost_cpu_us).collect(),
            },
            BarSeries {
                name: "redis".to_owned(),
                values: cells.iter().map(|c| c.summary().redis_cpu_us).collect(),
            },
        ],
    });
    charts
}

pub fn run(args: &RespBenchArgs, command: &str) -> anyhow::Result<()> {
    if let Some(nodes) = args.cluster {
        return crate::bench_resp_cluster::run(args, nodes, command);
    }
    let depths = args.pipelines();
    anyhow::ensure!(!depths.is_empty(), "--pipelines names no depth");
    let tests = parse_tests(&args.commands)?;
    anyhow::ensure!(!tests.is_empty(), "--commands names no test");
    let name = if tests == COMMANDS {
        BENCHMARK
    } else {
        COMMANDS_BENCHMARK
    };
    let timeout = Duration::from_secs(args.timeout);
    let redis_version = require(REDIS_SERVER)?;
    require(REDIS_BENCHMARK)?;
    let exe = std::env::current_exe().context("locating the roost executable")?;

    let roost_port = free_port()?;
    let mut roost_cmd = Command::new(&exe);
    roost_cmd
        .args(["resp", "--port"])
        .arg(roost_port.to_string());
    let mut roost = spawn("roost resp", roost_cmd, roost_port)?;

    let redis_port = loop {
        let port = free_port()?;
        if port != roost_port {
            break port;
        }
    };
    let mut redis = spawn("redis-server", redis_server_command(redis_port), redis_port)?;

    wait_ready(&mut roost)?;
    wait_ready(&mut redis)?;
    // Depth-major, commands in redis-benchmark's own order (SET before GET,
    // so GET finds keys).
    let mut cells: Vec<Cell> = depths
        .iter()
        .flat_map(|&pipeline| {
            tests.iter().map(move |&command| Workload {
                command,
                pipeline,
                requests: args.requests(pipeline),
            })
        })
        .map(Cell::new)
        .collect();
    println!(
        "roost resp on {} (pid {}), redis-server on {} (pid {}, {redis_version}); {}; {} repetition(s)",
        roost.addr,
        roost.child.id(),
        redis.addr,
        redis.child.id(),
        depths
            .iter()
            .map(|&d| format!("-P {d}: {} requests per command", args.requests(d)))
            .collect::<Vec<_>>()
            .join(", "),
        args.reps
    );

    let started = Instant::now();
    for rep in 0..args.reps {
        // Alternate the order so neither side always runs on a warmer machine.
        let order: [&ServerProcess; 2] = if rep % 2 == 0 {
            [&redis, &roost]
        } else {
            [&roost, &redis]
        };
        for server in [&roost, &redis] {
            flush_all(server.addr).with_context(|| {
                format!("FLUSHALL on {} before repetition {}", server.name, rep + 1)
            })?;
        }
        let mut ratios = Vec::new();
        for cell in &mut cells {
            for server in order {
                let sample = measure(server, &cell.workload, timeout)?;
                if std::ptr::eq(server, &roost) {
                    cell.roost.push(sample);
                } else {
                    cell.redis.push(sample);
                }
            }
            let (ours, theirs) = (&cell.roost[rep as usize], &cell.redis[rep as usize]);
            ratios.push(format!(
                "{} {:.2}x",
                cell.label(),
                ours.result.rps / theirs.result.rps.max(f64::MIN_POSITIVE)
            ));
        }
        println!(
            "repetition {} of {} done ({:.0} s): {}",
            rep + 1,
            args.reps,
            started.elapsed().as_secs_f64(),
            ratios.join(", ")
        );
    }
    drop(roost);
    drop(redis);

    println!();
    print!("{}", console_table(&cells));
    println!();
    let mut report = BenchReport::new(name, command);
    for cell in &cells {
        for system in ["redis", "roost"] {
            report.rows.push(cell.row(system, args.reps));
        }
    }
    report.notes = markdown_notes(&cells, args.reps, &redis_version);
    let charts = charts(&cells, &depths);
    let png = args.out.join(format!("{name}.png"));
    report.write_with_plot(&args.out, || {
        finish_png(render_figure_png(&charts, 2, &png), png.clone())
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{Benchmark, Cli, Command as CliCommand};
    use clap::Parser;

    const SAMPLE: &str = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
\"SET\",\"689655.19\",\"1.047\",\"0.192\",\"0.999\",\"1.951\",\"2.399\",\"2.543\"\n\
\"GET\",\"1333333.38\",\"0.490\",\"0.152\",\"0.487\",\"0.743\",\"0.863\",\"0.999\"\n\
\"INCR\",\"909090.94\",\"0.768\",\"0.184\",\"0.719\",\"1.207\",\"1.607\",\"1.783\"\n";

    const ONE: &str = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
\"INCR\",\"92250.92\",\"0.380\",\"0.112\",\"0.327\",\"0.615\",\"0.887\",\"9.239\"\n";

    #[test]
    fn commands_name_redis_benchmark_tests() {
        let names = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            parse_tests(&names(&["set", "get", "incr"])).unwrap(),
            COMMANDS
        );
        assert_eq!(
            parse_tests(&names(&["default"])).unwrap().len(),
            DEFAULT_TESTS.len()
        );
        // redis-benchmark's order, each once.
        assert_eq!(
            parse_tests(&names(&["get", "SET", "get"])).unwrap(),
            ["SET", "GET"]
        );
        assert!(parse_tests(&names(&["flushall"])).is_err());
        assert_eq!(csv_name("LRANGE_100"), "LRANGE_100 (first 100 elements)");
        assert_eq!(csv_name("MSET"), "MSET (10 keys)");
        assert_eq!(csv_name("SET"), "SET");
        assert_eq!(goal_ratio("INCR"), GOAL_RATIO);
        assert_eq!(goal_ratio("LPUSH"), OTHER_GOAL_RATIO);
    }

    #[test]
    fn parses_redis_benchmark_7_csv() {
        let results = parse_csv(SAMPLE, &COMMANDS).unwrap();
        assert_eq!(results.len(), 3);
        assert_eq!(results[0].command, "SET");
        assert_eq!(results[0].rps, 689655.19);
        assert_eq!(results[1].p99_ms, 0.863);
        assert_eq!(results[2].max_ms, 1.783);
        // One command per run, as the benchmark runs them.
        let one = parse_csv(ONE, &["INCR"]).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].rps, 92250.92);
        assert!(parse_csv(ONE, &["SET"]).is_err());
    }

    #[test]
    fn missing_commands_and_bad_numbers_are_errors() {
        let header = SAMPLE.lines().next().unwrap();
        assert!(parse_csv(header, &COMMANDS).is_err());
        assert!(parse_csv("", &COMMANDS).is_err());
        let bad = SAMPLE.replace("689655.19", "lots");
        assert!(parse_csv(&bad, &COMMANDS).is_err());
    }

    fn sample(rps: f64, cpu_us_per_request: Option<f64>) -> Sample {
        Sample {
            result: CommandResult {
                command: "SET".into(),
                rps,
                avg_ms: rps / 1e6,
                p50_ms: 0.5,
                p95_ms: 0.9,
                p99_ms: 1.0,
                max_ms: 2.0,
            },
            cpu_us_per_request,
            cores: cpu_us_per_request.map(|c| c / 10.0),
        }
    }

    fn cell(roost: &[(f64, f64)], redis: &[(f64, f64)]) -> Cell {
        let mut cell = Cell::new(Workload {
            command: "SET",
            pipeline: 1,
            requests: 100_000,
        });
        cell.roost = roost.iter().map(|&(r, c)| sample(r, Some(c))).collect();
        cell.redis = redis.iter().map(|&(r, c)| sample(r, Some(c))).collect();
        cell
    }

    #[test]
    fn medians_and_paired_ratios_per_cell() {
        // Repetition 2 hit a slow stretch on both sides: the paired ratios
        // (1.0, 1.0, 1.2) are steadier than the medians' ratio.
        let c = cell(
            &[(100.0, 9.0), (50.0, 12.0), (120.0, 10.0)],
            &[(100.0, 5.0), (50.0, 6.0), (100.0, 4.0)],
        );
        let s = c.summary();
        assert_eq!((s.roost_rps, s.redis_rps), (100.0, 100.0));
        assert_eq!(s.ratio, 1.0);
        assert_eq!(s.paired, 1.0);
        assert!(s.met());
        assert_eq!(s.roost_cpu_us, Some(10.0));
        assert_eq!(s.redis_cpu_us, Some(5.0));
        // Paired CPU ratios 1.8, 2.0, 2.5.
        assert_eq!(s.paired_cpu, Some(2.0));
        let row = c.row("roost", 3);
        assert_eq!(row.throughput_tps, 100.0);
        assert_eq!(row.param_u64("pipeline"), Some(1));
        assert_eq!(row.extra["cpu_us_per_request"].as_f64(), Some(10.0));
        assert_eq!(row.extra["goal_met"].as_bool(), Some(true));
        assert_eq!(
            row.extra["repetitions_cpu_us_per_request"]
                .as_array()
                .map(Vec::len),
            Some(3)
        );
        // Missing when either ratio is short of 1.0.
        let short = cell(&[(99.0, 1.0), (101.0, 1.0)], &[(100.0, 1.0), (100.0, 1.0)]);
        let s = short.summary();
        assert_eq!(s.roost_rps, 100.0, "mean of the middle two");
        assert!((s.paired - 1.0).abs() < 1e-12);
        let slow = cell(&[(90.0, 1.0)], &[(100.0, 1.0)]);
        assert!(!slow.summary().met());
        assert_eq!(slow.summary().verdict(), "missed");
        // No CPU where /proc could not be read.
        let mut blind = cell(&[(1.0, 1.0)], &[(1.0, 1.0)]);
        blind.roost[0].cpu_us_per_request = None;
        assert_eq!(blind.summary().roost_cpu_us, None);
        assert_eq!(blind.summary().paired_cpu, None);
        assert_eq!(median([]), None);
        assert_eq!(median([3.0, f64::NAN, 1.0, 2.0]), Some(2.0));
    }

    #[test]
    fn notes_and_table_name_every_row() {
        let cells = vec![
            cell(&[(50.0, 9.0)], &[(80.0, 5.0)]),
            Cell {
                workload: Workload {
                    command: "GET",
                    pipeline: 16,
                    requests: 200_000,
                },
                ..cell(&[(900.0, 1.0)], &[(800.0, 1.5)])
            },
        ];
        let table = console_table(&cells);
        assert!(table.contains("SET -P 1"), "{table}");
        assert!(table.contains("missed") && table.contains("met"), "{table}");
        assert!(
            table.contains("goal >= 1.0x for SET, GET and INCR"),
            "{table}"
        );
        let notes = markdown_notes(&cells, 1, "Redis 7").join("\n");
        assert!(
            notes.contains(
                "| SET | 1 | 50 | 80 | 0.62x | 0.62x | ≥ 1.0x: missed | 9.00 | 5.00 | 1.80x |"
            ),
            "{notes}"
        );
        assert!(
            notes.contains("| GET | 16 | 900 | 800 | 1.12x | 1.12x | ≥ 1.0x: met |"),
            "{notes}"
        );
        assert!(
            notes.contains("redis-benchmark -t set|get -P 1 -n 100000 -r 100000 -c 50"),
            "{notes}"
        );
        let panels = charts(&cells, &[1, 16]);
        assert_eq!(panels.len(), 3);
        assert_eq!(panels[2].categories, vec!["SET -P 1", "GET -P 16"]);
    }

    fn resp_args(args: &[&str]) -> RespBenchArgs {
        let argv = ["roost", "bench", "resp"].iter().chain(args);
        match Cli::try_parse_from(argv).expect("valid arguments").command {
            CliCommand::Bench(Benchmark::Resp(resp)) => resp,
            other => panic!("not the resp benchmark: {other:?}"),
        }
    }

    #[test]
    fn depths_requests_and_reps() {
        let default = resp_args(&[]);
        assert_eq!(default.pipelines(), vec![1, 16]);
        assert_eq!(default.reps, DEFAULT_REPS);
        assert_eq!(default.requests(1), FULL_REQUESTS_UNPIPELINED);
        assert_eq!(default.requests(16), FULL_REQUESTS);
        let quick = resp_args(&["--quick", "--pipelines", "16,1,16,4"]);
        assert_eq!(quick.pipelines(), vec![16, 1, 4]);
        assert_eq!(quick.requests(1), QUICK_REQUESTS_UNPIPELINED);
        assert_eq!(quick.requests(4), QUICK_REQUESTS);
        let fixed = resp_args(&["--requests", "5000", "--reps", "1"]);
        assert_eq!((fixed.requests(1), fixed.requests(16)), (5000, 5000));
        let argv = |extra: &'static str| ["roost", "bench", "resp", "--pipelines", extra];
        for bad in ["0", "1,x", "2000", ""] {
            assert!(Cli::try_parse_from(argv(bad)).is_err(), "{bad}");
        }
        let cluster = resp_args(&["--cluster", "3", "--cluster-connections", "4"]);
        assert_eq!((cluster.cluster, cluster.cluster_connections), (Some(3), 4));
        assert_eq!(cluster.cluster_seconds(), 3.0);
        for bad in [
            &["--cluster", "1"][..],
            &["--cluster", "6"],
            &["--cluster-connections", "4"],
            &["--cluster-seconds", "2"],
            &["--cluster", "3", "--cluster-connections", "0"],
        ] {
            let argv = ["roost", "bench", "resp"].iter().chain(bad);
            assert!(Cli::try_parse_from(argv).is_err(), "{bad:?}");
        }
    }
}

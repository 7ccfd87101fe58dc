//! `roost bench resp`: `roost resp` against Redis, both driven by
//! `redis-benchmark` (GET, SET and INCR, pipelined 16 deep, 50 clients,
//! 100,000 random keys). Goal: Roost at least 1.0x Redis per command.
//!
//! Both servers run as child processes on free loopback ports: `roost resp`
//! is this executable, `redis-server` comes from `PATH` (Debian's package)
//! with persistence off. Both are killed when the run ends, failed or not.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use roost_bench::plot::{finish_png, BarChart, BarSeries};
use roost_bench::results::{BenchReport, LatencyUs, Row};
use roost_cluster::process::die_with_parent;

const BENCHMARK: &str = "resp";
const GOAL_RATIO: f64 = 1.0;
const COMMANDS: [&str; 3] = ["SET", "GET", "INCR"];
const PIPELINE: u32 = 16;
const CLIENTS: u32 = 50;
const KEYSPACE: u32 = 100_000;
const FULL_REQUESTS: u64 = 200_000;
const QUICK_REQUESTS: u64 = 50_000;
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
const REDIS_SERVER: &str = "redis-server";
const REDIS_BENCHMARK: &str = "redis-benchmark";

#[derive(Debug, Args)]
pub struct RespBenchArgs {
    /// CI-sized run: 50,000 requests per command (default 200,000).
    #[arg(long)]
    pub quick: bool,
    /// Directory for resp.json and resp.md.
    #[arg(long, value_name = "DIR", default_value = "bench/results")]
    pub out: PathBuf,
    /// Repetitions; rows report the median one per system and command.
    #[arg(long, value_name = "R", default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..=100))]
    pub reps: u32,
    /// Requests per command and repetition (`redis-benchmark -n`; overrides --quick).
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1_000..=100_000_000))]
    pub requests: Option<u64>,
    /// Seconds one redis-benchmark run may take before it is stopped.
    #[arg(long, value_name = "S", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout: u64,
}

impl RespBenchArgs {
    fn requests(&self) -> u64 {
        self.requests.unwrap_or(if self.quick {
            QUICK_REQUESTS
        } else {
            FULL_REQUESTS
        })
    }
}

/// A server process, killed (and reaped) when dropped.
struct ServerProcess {
    name: &'static str,
    addr: SocketAddr,
    child: Child,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// Fails clearly when a program is not on `PATH` (or does not run).
fn require(program: &str) -> anyhow::Result<String> {
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

fn spawn(name: &'static str, mut command: Command, port: u16) -> anyhow::Result<ServerProcess> {
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

fn ping(addr: SocketAddr) -> std::io::Result<bool> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200))?;
    stream.set_read_timeout(Some(Duration::from_millis(500)))?;
    stream.write_all(b"*1\r\n$4\r\nPING\r\n")?;
    let mut reply = [0u8; 7];
    stream.read_exact(&mut reply)?;
    Ok(&reply == b"+PONG\r\n")
}

/// Waits until the server answers PING, or fails if it exits or stays silent.
fn wait_ready(server: &mut ServerProcess) -> anyhow::Result<()> {
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
struct CommandResult {
    command: String,
    rps: f64,
    avg_ms: f64,
    p50_ms: f64,
    p95_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

/// Parses redis-benchmark 7's `--csv` output:
/// a header `"test","rps","avg_latency_ms",...` then one line per command.
fn parse_csv(text: &str) -> anyhow::Result<Vec<CommandResult>> {
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
    for command in COMMANDS {
        anyhow::ensure!(
            results.iter().any(|r| r.command == command),
            "redis-benchmark printed no {command} result; its output was:\n{text}"
        );
    }
    Ok(results)
}

/// Runs redis-benchmark against one server, stopping it after `timeout`.
fn benchmark(server: &ServerProcess, requests: u64, timeout: Duration) -> anyhow::Result<String> {
    let mut command = Command::new(REDIS_BENCHMARK);
    command
        .args(["-h", "127.0.0.1", "-p"])
        .arg(server.addr.port().to_string())
        .args(["-t", "get,set,incr", "-P"])
        .arg(PIPELINE.to_string())
        .arg("-n")
        .arg(requests.to_string())
        .arg("-r")
        .arg(KEYSPACE.to_string())
        .arg("-c")
        .arg(CLIENTS.to_string())
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
            server.name,
            server.addr,
            timeout.as_secs()
        ),
        Some(status) if !status.success() => anyhow::bail!(
            "redis-benchmark against {} ({}) failed ({status}):\n{out}{err}",
            server.name,
            server.addr
        ),
        Some(_) => Ok(out),
    }
}

fn median(mut runs: Vec<CommandResult>) -> CommandResult {
    runs.sort_by(|a, b| a.rps.total_cmp(&b.rps));
    let middle = runs.len() / 2;
    runs.swap_remove(middle)
}

/// Median run per command, in [`COMMANDS`] order.
fn medians(runs: &[Vec<CommandResult>]) -> Vec<CommandResult> {
    COMMANDS
        .iter()
        .map(|command| {
            median(
                runs.iter()
                    .flatten()
                    .filter(|r| r.command == *command)
                    .cloned()
                    .collect(),
            )
        })
        .collect()
}

/// Per command, the median over repetitions of Roost's rate over Redis's in
/// the same repetition: the two runs of a pair are back to back, so a slow
/// stretch of the (shared, noisy) machine hits both and cancels out.
fn paired_ratio_medians(roost: &[Vec<CommandResult>], redis: &[Vec<CommandResult>]) -> Vec<f64> {
    COMMANDS
        .iter()
        .map(|command| {
            let rate = |runs: &Vec<CommandResult>| {
                runs.iter().find(|r| r.command == *command).map(|r| r.rps)
            };
            let mut ratios: Vec<f64> = roost
                .iter()
                .zip(redis)
                .filter_map(|(ours, theirs)| {
                    Some(rate(ours)? / rate(theirs)?.max(f64::MIN_POSITIVE))
                })
                .collect();
            ratios.sort_by(f64::total_cmp);
            ratios.get(ratios.len() / 2).copied().unwrap_or(0.0)
        })
        .collect()
}

fn row(system: &str, result: &CommandResult, requests: u64, reps: u32, ratio: f64) -> Row {
    let mut row = Row::new(system, &result.command.to_ascii_lowercase())
        .with_param("command", result.command.as_str())
        .with_param("requests", requests)
        .with_param("pipeline", PIPELINE)
        .with_param("clients", CLIENTS)
        .with_param("keyspace", KEYSPACE)
        .with_param("reps", reps)
        .with_extra("roost_over_redis", round2(ratio))
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
    row
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

pub fn run(args: &RespBenchArgs, command: &str) -> anyhow::Result<()> {
    let requests = args.requests();
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
    let mut redis_cmd = Command::new(REDIS_SERVER);
    redis_cmd.arg("--port").arg(redis_port.to_string()).args([
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
    ]);
    let mut redis = spawn("redis-server", redis_cmd, redis_port)?;

    wait_ready(&mut roost)?;
    wait_ready(&mut redis)?;
    println!(
        "roost resp on {}, redis-server on {} ({redis_version}); {} requests per command, {} repetition(s)",
        roost.addr, redis.addr, requests, args.reps
    );

    let (mut roost_runs, mut redis_runs) = (Vec::new(), Vec::new());
    for rep in 0..args.reps {
        // Alternate the order so neither side always runs on a warmer machine.
        let order: [&ServerProcess; 2] = if rep % 2 == 0 {
            [&redis, &roost]
        } else {
            [&roost, &redis]
        };
        for server in order {
            let results = parse_csv(&benchmark(server, requests, timeout)?)
                .with_context(|| format!("parsing redis-benchmark output for {}", server.name))?;
            if std::ptr::eq(server, &roost) {
                roost_runs.push(results);
            } else {
                redis_runs.push(results);
            }
        }
        println!("repetition {} of {} done", rep + 1, args.reps);
    }
    drop(roost);
    drop(redis);

    let paired = paired_ratio_medians(&roost_runs, &redis_runs);
    let roost = medians(&roost_runs);
    let redis = medians(&redis_runs);
    let mut report = BenchReport::new(BENCHMARK, command);
    let mut lines = Vec::new();
    println!();
    println!(
        "{:<8} {:>14} {:>14} {:>8} {:>8}  goal ≥ {GOAL_RATIO:.1}x",
        "command", "roost ops/s", "redis ops/s", "ratio", "paired"
    );
    for ((ours, theirs), paired) in roost.iter().zip(&redis).zip(&paired) {
        let ratio = ours.rps / theirs.rps.max(f64::MIN_POSITIVE);
        let verdict = if ratio >= GOAL_RATIO { "met" } else { "missed" };
        println!(
            "{:<8} {:>14.0} {:>14.0} {:>7.2}x {:>7.2}x  {verdict}",
            ours.command, ours.rps, theirs.rps, ratio, paired
        );
        lines.push(format!(
            "{}: Roost {:.0} ops/s, Redis {:.0} ops/s: {ratio:.2}x; median of the per-repetition ratios {paired:.2}x (goal ≥ {GOAL_RATIO:.1}x: {verdict}).",
            ours.command, ours.rps, theirs.rps
        ));
        for (system, result) in [("redis", theirs), ("roost", ours)] {
            report.rows.push(
                row(system, result, requests, args.reps, ratio)
                    .with_extra("paired_ratio_median", round2(*paired)),
            );
        }
    }
    println!();
    lines.push(format!(
        "redis-benchmark -t get,set,incr -P {PIPELINE} -n {requests} -r {KEYSPACE} -c {CLIENTS}; \
         {} repetition(s), each row the median repetition by ops/s. Redis: {redis_version}, \
         --save '' --appendonly no. Latencies are redis-benchmark's (per pipelined batch); \
         it reports no p99.9 (0 here), the max and p95 are in the extras.",
        args.reps
    ));
    report.notes = lines;
    let chart = BarChart {
        title: format!("redis-benchmark -P {PIPELINE}: Roost beside redis-server (same run)"),
        y_label: "ops/s".to_owned(),
        categories: roost.iter().map(|r| r.command.clone()).collect(),
        series: vec![
            BarSeries {
                name: "roost".to_owned(),
                values: roost.iter().map(|r| Some(r.rps)).collect(),
            },
            BarSeries {
                name: "redis".to_owned(),
                values: redis.iter().map(|r| Some(r.rps)).collect(),
            },
        ],
    };
    let png = args.out.join("resp.png");
    report.write_with_plot(&args.out, || {
        finish_png(chart.render_png(&png), png.clone())
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
\"SET\",\"689655.19\",\"1.047\",\"0.192\",\"0.999\",\"1.951\",\"2.399\",\"2.543\"\n\
\"GET\",\"1333333.38\",\"0.490\",\"0.152\",\"0.487\",\"0.743\",\"0.863\",\"0.999\"\n\
\"INCR\",\"909090.94\",\"0.768\",\"0.184\",\"0.719\",\"1.207\",\"1.607\",\"1.783\"\n";

    #[test]
    fn parses_redis_benchmark_7_csv() {
        let results = parse_csv(SAMPLE).unwrap();
        assert_eq!(results.len(), 3);
        assert_eq!(results[0].command, "SET");
        assert_eq!(results[0].rps, 689655.19);
        assert_eq!(results[1].p99_ms, 0.863);
        assert_eq!(results[2].max_ms, 1.783);
    }

    #[test]
    fn missing_commands_and_bad_numbers_are_errors() {
        let header = SAMPLE.lines().next().unwrap();
        assert!(parse_csv(header).is_err());
        assert!(parse_csv("").is_err());
        let bad = SAMPLE.replace("689655.19", "lots");
        assert!(parse_csv(&bad).is_err());
    }

    #[test]
    fn median_per_command() {
        let runs: Vec<Vec<CommandResult>> = [1.0, 3.0, 2.0]
            .iter()
            .map(|scale| {
                let mut run = parse_csv(SAMPLE).unwrap();
                for r in &mut run {
                    r.rps *= scale;
                }
                run
            })
            .collect();
        let m = medians(&runs);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].command, "SET");
        assert_eq!(m[0].rps, 689655.19 * 2.0);
    }
}

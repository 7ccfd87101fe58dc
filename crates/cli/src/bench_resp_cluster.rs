//! `roost bench resp --cluster N`: one Roost database over N `roost node`
//! processes (Zeus ownership and reliable commit, replication degree 3,
//! etcd membership) beside the nearest Redis gets to not losing an
//! acknowledged write: a `redis-server` primary with N-1 real replicas
//! (`--replicaof`), every write followed by `WAIT <N-1> 0`.
//!
//! **The Rust client** (the like-for-like rows): `--connections` per
//! server, closed loop, for `--seconds` per run, at every depth of
//! `--pipelines`. Commands: SET, GET, INCR on 100,000 random keys, and a
//! MULTI/EXEC of two SETs whose keys live on different keyspace reactors
//! (so on different nodes until Zeus moves them). Roost: the connections
//! spread evenly over the nodes, every command to its own node (a write is
//! answered after its reliable commit at every replica). Redis: writes go
//! to the primary (replicas refuse them), each followed by `WAIT N-1 0`
//! (answered once every replica has it); reads spread over the primary and
//! the replicas (a replica's read may be stale: no goal), and again at the
//! primary only (never stale, like Roost's reads at any replica: the read
//! goal). A reply that is an error, or a WAIT that counts fewer replicas,
//! is counted and reported, never silently dropped.
//!
//! **redis-benchmark** (the peers' own tool): GET and SET with one
//! `redis-benchmark` process per node at once. For Redis, GET spreads over
//! the primary and replicas; SET can only go to the primary, and
//! redis-benchmark cannot send WAIT: those Redis SET rows replicate
//! asynchronously (a failover can lose them) and are marked so.
//!
//! One repetition runs every (depth, command) on both systems back to back,
//! which goes first alternating; rows report medians over repetitions and
//! the median of the per-repetition ratios. Goals (issue 17): Roost at
//! least 1.0x on writes, at least 2x on reads.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hdrhistogram::Histogram;
use roost_bench::plot::{finish_png, render_figure_png, BarChart, BarSeries};
use roost_bench::results::{median, median_ratio, BenchReport, LatencyUs, Row};
use roost_cluster::local_cluster::{LocalCluster, LocalClusterConfig};

use crate::bench_resp::{
    benchmark, free_port, parse_csv, redis_server_command, require, spawn, wait_ready,
    RespBenchArgs, ServerProcess, Workload,
};

const BENCHMARK: &str = "resp_cluster";
const KEYSPACE: u64 = 100_000;
const WRITE_GOAL: f64 = 1.0;
const READ_GOAL: f64 = 2.0;
/// Each connection's reply wait, at most: a stuck server fails the run.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the cluster may take to form and replicate its reactors.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the replicas may take to sync with the primary.
const SYNC_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_NODES: u32 = 5;

/// What one Rust-client run sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Set,
    Get,
    Incr,
    /// MULTI, SET a, SET b, EXEC: `a` and `b` on different keyspace
    /// reactors.
    Multi2,
}

impl Op {
    const ALL: [Op; 4] = [Op::Set, Op::Get, Op::Incr, Op::Multi2];

    fn name(self) -> &'static str {
        match self {
            Op::Set => "SET",
            Op::Get => "GET",
            Op::Incr => "INCR",
            Op::Multi2 => "MULTI2",
        }
    }

    fn writes(self) -> bool {
        self != Op::Get
    }

    fn goal(self) -> f64 {
        if self.writes() {
            WRITE_GOAL
        } else {
            READ_GOAL
        }
    }
}

/// Which tool drives a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Driver {
    /// The Rust client; Redis reads spread over the primary and replicas
    /// (a replica's read may be stale).
    Rust(Op),
    /// The Rust client's GET with Redis reads at the primary only: the
    /// reads Redis serves without staleness, like Roost's at any replica.
    RustReadsAtPrimary,
    /// redis-benchmark `-t get` or `-t set`, one process per node at once.
    RedisBenchmark(Op),
}

impl Driver {
    fn label(self) -> String {
        match self {
            Driver::Rust(op) => format!("rust {}", op.name()),
            Driver::RustReadsAtPrimary => "rust GET (redis: primary)".to_owned(),
            Driver::RedisBenchmark(op) => format!("redis-benchmark {}", op.name()),
        }
    }

    fn op(self) -> Op {
        match self {
            Driver::Rust(op) | Driver::RedisBenchmark(op) => op,
            Driver::RustReadsAtPrimary => Op::Get,
        }
    }

    /// What the Redis side of this cell guarantees.
    fn redis_durability(self) -> &'static str {
        match self {
            Driver::Rust(op) if op.writes() => "WAIT every write",
            Driver::RedisBenchmark(op) if op.writes() => "async replication (no WAIT)",
            Driver::RustReadsAtPrimary => "reads at the primary",
            _ => "reads at every server (replicas may be stale)",
        }
    }

    /// Whether the cell's goal is a like-for-like comparison: writes that
    /// wait for every replica, reads that are never stale (Roost's at any
    /// replica are strictly serializable; Redis's only at the primary).
    fn has_goal(self) -> bool {
        match self {
            Driver::Rust(op) => op.writes(),
            Driver::RustReadsAtPrimary => true,
            Driver::RedisBenchmark(_) => false,
        }
    }

    /// Whether Redis serves this cell's reads at the primary only.
    fn reads_at_primary(self) -> bool {
        self == Driver::RustReadsAtPrimary
    }
}

/// One system's numbers from one run.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    ops_per_s: f64,
    /// Per request (a pipelined batch at depth > 1), µs.
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
    mean_us: f64,
    /// Commands answered with an error (Roost: aborted or refused;
    /// Redis: any), not counted in `ops_per_s`.
    errors: u64,
    /// Redis: WAITs that counted fewer replicas than asked.
    short_waits: u64,
}

#[derive(Debug, Clone, PartialEq)]
struct Cell {
    driver: Driver,
    pipeline: u32,
    roost: Vec<Sample>,
    redis: Vec<Sample>,
}

struct Summary {
    roost: f64,
    redis: f64,
    ratio: f64,
    paired: f64,
}

impl Cell {
    fn summary(&self) -> Summary {
        let rate = |s: &[Sample]| median(s.iter().map(|x| x.ops_per_s)).unwrap_or(0.0);
        let (roost, redis) = (rate(&self.roost), rate(&self.redis));
        let paired = median_ratio(
            self.roost
                .iter()
                .zip(&self.redis)
                .map(|(ours, theirs)| (ours.ops_per_s, theirs.ops_per_s)),
        )
        .unwrap_or(0.0);
        Summary {
            roost,
            redis,
            ratio: roost / redis.max(f64::MIN_POSITIVE),
            paired,
        }
    }

    fn verdict(&self) -> &'static str {
        if !self.driver.has_goal() {
            return "no goal (guarantees differ)";
        }
        let s = self.summary();
        let goal = self.driver.op().goal();
        if s.ratio >= goal && s.paired >= goal {
            "met"
        } else {
            "missed"
        }
    }

    fn label(&self) -> String {
        format!("{} -P {}", self.driver.label(), self.pipeline)
    }

    fn row(&self, system: &str, nodes: u32, connections: u32, reps: u32) -> Row {
        let samples = if system == "roost" {
            &self.roost
        } else {
            &self.redis
        };
        let s = self.summary();
        let durability = if system == "roost" {
            "reliable commit, degree 3"
        } else {
            self.driver.redis_durability()
        };
        let mut row = Row::new(system, &self.label().to_ascii_lowercase().replace(' ', "_"))
            .with_param("command", self.driver.op().name())
            .with_param(
                "driver",
                match self.driver {
                    Driver::Rust(_) | Driver::RustReadsAtPrimary => "rust",
                    Driver::RedisBenchmark(_) => "redis-benchmark",
                },
            )
            .with_param("pipeline", self.pipeline)
            .with_param("nodes", nodes)
            .with_param("connections_per_server", connections)
            .with_param("keyspace", KEYSPACE)
            .with_param("reps", reps)
            .with_extra("durability", durability)
            .with_extra("roost_over_redis", round2(s.ratio))
            .with_extra("paired_ratio_median", round2(s.paired))
            .with_extra(
                "goal",
                self.driver.has_goal().then(|| self.driver.op().goal()),
            )
            .with_extra("verdict", self.verdict())
            .with_extra(
                "repetitions_ops",
                samples
                    .iter()
                    .map(|x| x.ops_per_s.round())
                    .collect::<Vec<_>>(),
            )
            .with_extra("errors", samples.iter().map(|x| x.errors).sum::<u64>())
            .with_extra(
                "short_waits",
                samples.iter().map(|x| x.short_waits).sum::<u64>(),
            );
        let mut sorted: Vec<&Sample> = samples.iter().collect();
        sorted.sort_by(|a, b| a.ops_per_s.total_cmp(&b.ops_per_s));
        if let Some(mid) = sorted.get(sorted.len() / 2) {
            row.throughput_tps = mid.ops_per_s;
            row.latency_us = LatencyUs {
                mean: mid.mean_us,
                p50: mid.p50_us,
                p99: mid.p99_us,
                p999: mid.p999_us,
            };
        }
        row
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// A tiny xorshift: each connection its own stream of keys.
struct Keys(u64);

impl Keys {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % KEYSPACE
    }

    /// A second key on another keyspace reactor than `first`.
    fn other_than(&mut self, first: u64) -> u64 {
        let reactor = |k: u64| {
            roost_resp::keyspace_index(
                format!("key:{k}").as_bytes(),
                roost_check::resp_run::KEYSPACE_REACTORS,
            )
        };
        let mut second = self.next();
        // Bounded: one reactor in 64 matches.
        for _ in 0..1000 {
            if reactor(second) != reactor(first) {
                break;
            }
            second = self.next();
        }
        second
    }
}

fn push_command(buf: &mut Vec<u8>, args: &[&[u8]]) {
    buf.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        buf.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        buf.extend_from_slice(arg);
        buf.extend_from_slice(b"\r\n");
    }
}

/// What one reply was, as far as the client counts it.
#[derive(Debug, PartialEq, Eq)]
enum Reply {
    Ok,
    Error(String),
    Integer(i64),
}

/// Reads one whole reply (arrays recursively, their elements' errors
/// counted as the array's). Bounded by the server's framing.
fn read_reply(reader: &mut impl BufRead, line: &mut String, depth: u32) -> anyhow::Result<Reply> {
    anyhow::ensure!(depth < 8, "a reply nested deeper than 8 arrays");
    line.clear();
    let n = reader.read_line(line).context("reading a reply")?;
    anyhow::ensure!(n > 0, "the server closed the connection");
    let text = line.trim_end();
    let (kind, rest) = text.split_at(1.min(text.len()));
    match kind {
        "+" => Ok(Reply::Ok),
        "-" => Ok(Reply::Error(rest.to_owned())),
        ":" => Ok(Reply::Integer(rest.parse().context("an integer reply")?)),
        "$" => {
            let len: i64 = rest.parse().context("a bulk length")?;
            if len >= 0 {
                let mut skip = vec![0u8; len as usize + 2];
                reader.read_exact(&mut skip).context("a bulk reply")?;
            }
            Ok(Reply::Ok)
        }
        "*" => {
            let len: i64 = rest.parse().context("an array length")?;
            let mut error = None;
            for _ in 0..len.max(0) {
                if let Reply::Error(e) = read_reply(reader, line, depth + 1)? {
                    error.get_or_insert(e);
                }
            }
            Ok(error.map_or(Reply::Ok, Reply::Error))
        }
        _ => anyhow::bail!("not a RESP reply: {text:?}"),
    }
}

/// What one connection sends and where.
struct Conn {
    addr: SocketAddr,
    op: Op,
    pipeline: u32,
    /// Redis writes: `WAIT <replicas> 0` after each.
    wait_replicas: Option<u32>,
    seed: u64,
}

#[derive(Default)]
struct ConnResult {
    ops: u64,
    errors: u64,
    short_waits: u64,
    first_error: Option<String>,
}

/// Runs one connection until `stop`, recording each batch's latency.
fn run_conn(
    conn: &Conn,
    stop: &AtomicBool,
    counting: &AtomicBool,
    histogram: &mut Histogram<u64>,
) -> anyhow::Result<ConnResult> {
    let stream =
        TcpStream::connect(conn.addr).with_context(|| format!("connecting to {}", conn.addr))?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::with_capacity(64 * 1024, stream);
    let mut keys = Keys(conn.seed | 1);
    let mut result = ConnResult::default();
    let mut buf = Vec::with_capacity(4096);
    let mut line = String::new();
    let wait_arg = conn.wait_replicas.map(|r| r.to_string());
    while !stop.load(Ordering::Relaxed) {
        buf.clear();
        let mut replies = 0u32;
        for _ in 0..conn.pipeline {
            let k = keys.next();
            let key = format!("key:{k}");
            match conn.op {
                Op::Set => push_command(&mut buf, &[b"SET", key.as_bytes(), b"v"]),
                Op::Get => push_command(&mut buf, &[b"GET", key.as_bytes()]),
                Op::Incr => push_command(&mut buf, &[b"INCR", format!("n:{k}").as_bytes()]),
                Op::Multi2 => {
                    let other = format!("key:{}", keys.other_than(k));
                    push_command(&mut buf, &[b"MULTI"]);
                    push_command(&mut buf, &[b"SET", key.as_bytes(), b"v"]);
                    push_command(&mut buf, &[b"SET", other.as_bytes(), b"v"]);
                    push_command(&mut buf, &[b"EXEC"]);
                    replies += 3;
                }
            }
            replies += 1;
            if let Some(n) = &wait_arg {
                push_command(&mut buf, &[b"WAIT", n.as_bytes(), b"0"]);
                replies += 1;
            }
        }
        let started = Instant::now();
        writer.write_all(&buf).context("sending a batch")?;
        let per_command = replies / conn.pipeline;
        let mut failed = 0u64;
        let mut failed_here = false;
        let mut short = 0;
        for i in 0..replies {
            if i % per_command == 0 {
                failed_here = false;
            }
            match read_reply(&mut reader, &mut line, 0)? {
                Reply::Error(e) => {
                    // A command fails once, however many of its replies
                    // say so (a queued error, then EXECABORT).
                    if !failed_here {
                        failed += 1;
                        failed_here = true;
                    }
                    result.first_error.get_or_insert(e);
                }
                // The WAIT after a write: how many replicas have it.
                Reply::Integer(n)
                    if is_wait(conn.op, i)
                        && conn.wait_replicas.is_some_and(|want| n < i64::from(want)) =>
                {
                    short += 1;
                }
                _ => {}
            }
        }
        if counting.load(Ordering::Relaxed) {
            let us = started.elapsed().as_micros().max(1) as u64;
            let _ = histogram.record(us.min(histogram.high()));
            result.ops += u64::from(conn.pipeline) - failed;
            result.errors += failed;
            result.short_waits += short;
        }
    }
    Ok(result)
}

/// Whether reply `i` of a batch is a WAIT's (each command's replies end
/// with its WAIT).
fn is_wait(op: Op, i: u32) -> bool {
    let per_command = if op == Op::Multi2 { 5 } else { 2 };
    i % per_command == per_command - 1
}

/// Where one system's connections go for `op`.
struct Targets {
    /// Roost: every node; Redis: the primary and the replicas.
    all: Vec<SocketAddr>,
    /// Redis: the primary (writes); Roost: `None` (every node writes).
    primary: Option<SocketAddr>,
    wait_replicas: Option<u32>,
}

impl Targets {
    /// The addresses of `op`'s connections (per server), and the WAIT.
    fn for_op(&self, op: Op, reads_at_primary: bool) -> (Vec<SocketAddr>, Option<u32>) {
        match (op.writes(), self.primary) {
            (true, Some(primary)) => (vec![primary; self.all.len()], self.wait_replicas),
            (false, Some(primary)) if reads_at_primary => (vec![primary; self.all.len()], None),
            _ => (self.all.clone(), None),
        }
    }
}

/// One Rust-client run: `connections` per target address for `seconds`
/// (the first 10% a warm-up, not counted).
fn rust_run(
    targets: &Targets,
    driver: Driver,
    pipeline: u32,
    connections: u32,
    seconds: f64,
    seed: u64,
) -> anyhow::Result<Sample> {
    let op = driver.op();
    let (addrs, wait_replicas) = targets.for_op(op, driver.reads_at_primary());
    let stop = Arc::new(AtomicBool::new(false));
    let counting = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for (a, addr) in addrs.iter().enumerate() {
        for c in 0..connections {
            let conn = Conn {
                addr: *addr,
                op,
                pipeline,
                wait_replicas,
                seed: seed
                    .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                    .wrapping_add((a as u64) << 32 | u64::from(c)),
            };
            let (stop, counting) = (Arc::clone(&stop), Arc::clone(&counting));
            threads.push(std::thread::spawn(move || {
                let mut histogram =
                    Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
                run_conn(&conn, &stop, &counting, &mut histogram).map(|r| (r, histogram))
            }));
        }
    }
    let warm_up = Duration::from_secs_f64(seconds * 0.1);
    std::thread::sleep(warm_up);
    counting.store(true, Ordering::Relaxed);
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    counting.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let mut total = ConnResult::default();
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
    let mut failure = None;
    for thread in threads {
        match thread.join() {
            Ok(Ok((r, h))) => {
                total.ops += r.ops;
                total.errors += r.errors;
                total.short_waits += r.short_waits;
                if total.first_error.is_none() {
                    total.first_error = r.first_error;
                }
                let _ = histogram.add(&h);
            }
            Ok(Err(e)) => {
                failure.get_or_insert(e);
            }
            Err(_) => anyhow::bail!("a client thread panicked"),
        }
    }
    if let Some(e) = failure {
        return Err(e.context(format!("{} -P {pipeline}", op.name())));
    }
    if let Some(e) = &total.first_error {
        eprintln!(
            "  {} -P {pipeline}: {} error replies, the first: {e}",
            op.name(),
            total.errors
        );
    }
    Ok(Sample {
        ops_per_s: total.ops as f64 / elapsed.max(1e-9),
        p50_us: histogram.value_at_quantile(0.5) as f64,
        p99_us: histogram.value_at_quantile(0.99) as f64,
        p999_us: histogram.value_at_quantile(0.999) as f64,
        mean_us: histogram.mean(),
        errors: total.errors,
        short_waits: total.short_waits,
    })
}

/// redis-benchmark against every address at once (`-t get|set`,
/// `connections` each); the sum of their rates, the latencies of the first.
fn redis_benchmark_run(
    addrs: &[SocketAddr],
    workload: &Workload,
    connections: u32,
    timeout: Duration,
) -> anyhow::Result<Sample> {
    let runs: Vec<_> = addrs
        .iter()
        .map(|&addr| {
            let workload = *workload;
            std::thread::spawn(move || {
                let text = benchmark(("a server", addr), &workload, connections, timeout)?;
                parse_csv(&text, &[workload.command])?
                    .into_iter()
                    .find(|r| r.command == workload.command)
                    .context("redis-benchmark result")
            })
        })
        .collect();
    let mut total = 0.0;
    let mut first = None;
    for run in runs {
        let result = run
            .join()
            .map_err(|_| anyhow::anyhow!("a redis-benchmark thread panicked"))??;
        total += result.rps;
        first.get_or_insert(result);
    }
    let first = first.context("no redis-benchmark ran")?;
    Ok(Sample {
        ops_per_s: total,
        p50_us: first.p50_ms * 1e3,
        p99_us: first.p99_ms * 1e3,
        p999_us: 0.0,
        mean_us: first.avg_ms * 1e3,
        errors: 0,
        short_waits: 0,
    })
}

/// A Redis primary and its replicas, killed when dropped.
struct RedisSet {
    primary: ServerProcess,
    replicas: Vec<ServerProcess>,
}

/// `INFO replication` of `addr`, as text.
fn info_replication(addr: SocketAddr) -> anyhow::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(b"*2\r\n$4\r\nINFO\r\n$11\r\nreplication\r\n")?;
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    reader.read_line(&mut head)?;
    let len: usize = head
        .trim_end()
        .strip_prefix('$')
        .and_then(|l| l.parse().ok())
        .with_context(|| format!("INFO answered {head:?}"))?;
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body)?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

fn start_redis(replicas: u32) -> anyhow::Result<RedisSet> {
    let port = free_port()?;
    let mut primary = spawn("redis-server (primary)", redis_server_command(port), port)?;
    wait_ready(&mut primary)?;
    let mut set = RedisSet {
        primary,
        replicas: Vec::new(),
    };
    for _ in 0..replicas {
        let port = free_port()?;
        let mut command = redis_server_command(port);
        command
            .arg("--replicaof")
            .arg("127.0.0.1")
            .arg(set.primary.addr.port().to_string())
            // The initial sync straight into memory: no dump.rdb written
            // into the working directory.
            .args(["--repl-diskless-load", "on-empty-db"])
            .current_dir(std::env::temp_dir());
        let mut replica = spawn("redis-server (replica)", command, port)?;
        wait_ready(&mut replica)?;
        set.replicas.push(replica);
    }
    let deadline = Instant::now() + SYNC_TIMEOUT;
    loop {
        let info = info_replication(set.primary.addr)?;
        let online = info.lines().filter(|l| l.contains("state=online")).count();
        if online == replicas as usize {
            return Ok(set);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the Redis replicas did not come online within {} s:\n{info}",
            SYNC_TIMEOUT.as_secs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn start_roost(nodes: u32, dir: PathBuf) -> anyhow::Result<LocalCluster> {
    // Like with like: the Redis beside it replicates in memory (replicaof,
    // WAIT) and keeps no append-only file, so no durability log here
    // either (`roost bench durability` compares the logs).
    start_zeus_cluster(
        nodes,
        dir,
        vec!["--sync".to_owned(), "memory".to_owned()],
        true,
    )
}

/// `nodes` `roost node` processes running Zeus in `dir`, with `extra_args`,
/// once every node serves (the cluster benchmarks' clusters).
pub(crate) fn start_zeus_cluster(
    nodes: u32,
    dir: PathBuf,
    extra_args: Vec<String>,
    etcd: bool,
) -> anyhow::Result<LocalCluster> {
    let exe = std::env::current_exe().context("locating the roost executable")?;
    let mut config = LocalClusterConfig::new(exe, dir, nodes);
    config.protocol = "ownership";
    config.extra_args = extra_args;
    // Membership from etcd (the production path), or the nodes' own
    // peer-to-peer leases (`roost demo`: nothing to install).
    config.etcd = etcd;
    // The nodes, etcd and the clients (and a peer) share the machine: a
    // lease a node starved for a moment survives.
    config.lease_ttl_s = 2;
    let cluster = LocalCluster::start(config).context("starting the Roost cluster")?;
    let deadline = Instant::now() + READY_TIMEOUT;
    while let Some(why) = roost_check::resp_run::zeus_unready(&cluster, nodes) {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the Roost cluster was not ready within {} s: {why}",
            READY_TIMEOUT.as_secs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(cluster)
}

/// `--hot-key-only`: the hot-key rows alone, on a fresh cluster.
fn run_hot_key_only(args: &RespBenchArgs, nodes: u32, command: &str) -> anyhow::Result<()> {
    let seconds = hot_key_seconds(args);
    let dir = std::env::temp_dir().join(format!("roost-bench-hot-key-{}", std::process::id()));
    let roost = start_roost(nodes, dir)?;
    println!(
        "roost: {nodes} nodes (Zeus, degree 3); hot key: {} repetition(s) of {seconds} s per variant",
        args.reps
    );
    let hot = hot_key(&roost, args.reps, seconds)?;
    drop(roost);
    let mut report = BenchReport::new(HOT_KEY_BENCHMARK, command);
    report.rows.extend(hot.rows(args.reps));
    report.notes = hot.notes(seconds);
    println!("{}", report.notes.join("\n"));
    report.write(&args.out)?;
    Ok(())
}

/// Results of `--hot-key-only`.
const HOT_KEY_BENCHMARK: &str = "resp_cluster_hot_key";

fn hot_key_seconds(args: &RespBenchArgs) -> f64 {
    args.hot_key_seconds
        .map_or_else(|| args.cluster_seconds(), f64::from)
}

pub fn run(args: &RespBenchArgs, nodes: u32, command: &str) -> anyhow::Result<()> {
    if args.hot_key_only {
        return run_hot_key_only(args, nodes, command);
    }
    anyhow::ensure!(
        (2..=MAX_NODES).contains(&nodes),
        "--cluster takes 2 to {MAX_NODES} nodes, not {nodes}"
    );
    let depths = args.pipelines();
    anyhow::ensure!(!depths.is_empty(), "--pipelines names no depth");
    let redis_version = require("redis-server")?;
    require("redis-benchmark")?;
    let seconds = args.cluster_seconds();
    let timeout = Duration::from_secs(args.timeout);
    let connections = args.cluster_connections;
    let dir = std::env::temp_dir().join(format!("roost-bench-resp-cluster-{}", std::process::id()));
    let roost = start_roost(nodes, dir)?;
    let redis = start_redis(nodes - 1)?;
    let roost_targets = Targets {
        all: (0..nodes)
            .map(|n| roost.resp_addr(n).context("a node's RESP address"))
            .collect::<anyhow::Result<_>>()?,
        primary: None,
        wait_replicas: None,
    };
    let redis_targets = Targets {
        all: std::iter::once(redis.primary.addr)
            .chain(redis.replicas.iter().map(|r| r.addr))
            .collect(),
        primary: Some(redis.primary.addr),
        wait_replicas: Some(nodes - 1),
    };
    let mut cells: Vec<Cell> = Vec::new();
    for &pipeline in &depths {
        for driver in Op::ALL
            .into_iter()
            .map(Driver::Rust)
            .chain([Driver::RustReadsAtPrimary])
        {
            cells.push(Cell {
                driver,
                pipeline,
                roost: Vec::new(),
                redis: Vec::new(),
            });
        }
        for op in [Op::Set, Op::Get] {
            cells.push(Cell {
                driver: Driver::RedisBenchmark(op),
                pipeline,
                roost: Vec::new(),
                redis: Vec::new(),
            });
        }
    }
    println!(
        "roost: {nodes} nodes (Zeus, degree 3) at {:?}; redis-server {redis_version}: primary {} and \
         {} replica(s); {connections} connection(s) per server, {seconds} s per run, {} repetition(s)",
        roost_targets.all,
        redis.primary.addr,
        redis.replicas.len(),
        args.reps
    );
    let started = Instant::now();
    for rep in 0..args.reps {
        let roost_first = rep % 2 == 1;
        let mut ratios = Vec::new();
        for cell in &mut cells {
            for roost_turn in [roost_first, !roost_first] {
                let targets = if roost_turn {
                    &roost_targets
                } else {
                    &redis_targets
                };
                let seed = u64::from(rep) << 8 | u64::from(cell.pipeline);
                let sample = match cell.driver {
                    Driver::Rust(_) | Driver::RustReadsAtPrimary => rust_run(
                        targets,
                        cell.driver,
                        cell.pipeline,
                        connections,
                        seconds,
                        seed,
                    )?,
                    Driver::RedisBenchmark(op) => {
                        let (addrs, _) = targets.for_op(op, false);
                        let workload = Workload {
                            command: op.name(),
                            pipeline: cell.pipeline,
                            requests: (args.requests(cell.pipeline) / u64::from(nodes)).max(1000),
                        };
                        redis_benchmark_run(&addrs, &workload, connections, timeout)?
                    }
                };
                if roost_turn {
                    cell.roost.push(sample);
                } else {
                    cell.redis.push(sample);
                }
            }
            let (ours, theirs) = (&cell.roost[rep as usize], &cell.redis[rep as usize]);
            ratios.push(format!(
                "{} {:.2}x",
                cell.label(),
                ours.ops_per_s / theirs.ops_per_s.max(f64::MIN_POSITIVE)
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
    drop(redis);
    let hot_seconds = hot_key_seconds(args);
    let hot = hot_key(&roost, args.reps, hot_seconds)?;
    drop(roost);

    println!();
    println!(
        "{:<28} {:>12} {:>12} {:>7} {:>7}  verdict",
        "run", "roost ops/s", "redis ops/s", "ratio", "paired"
    );
    for cell in &cells {
        let s = cell.summary();
        println!(
            "{:<28} {:>12.0} {:>12.0} {:>6.2}x {:>6.2}x  {}",
            cell.label(),
            s.roost,
            s.redis,
            s.ratio,
            s.paired,
            cell.verdict()
        );
    }
    let mut report = BenchReport::new(BENCHMARK, command);
    for cell in &cells {
        for system in ["redis", "roost"] {
            report
                .rows
                .push(cell.row(system, nodes, connections, args.reps));
        }
    }
    report.rows.extend(hot.rows(args.reps));
    report.notes = notes(
        &cells,
        nodes,
        connections,
        seconds,
        args.reps,
        &redis_version,
    );
    report.notes.extend(hot.notes(hot_seconds));
    println!("{}", hot.notes(hot_seconds).join("\n"));
    let png = args.out.join(format!("{BENCHMARK}.png"));
    let charts = charts(&cells, &depths);
    report.write_with_plot(&args.out, || {
        finish_png(render_figure_png(&charts, 2, &png), png.clone())
    })?;
    Ok(())
}

/// The hot key (issue 17): two clients take turns at INCR on one key,
/// each waiting for the other's reply before its next. Two nodes: one
/// client at node 0, one at node 1; the baseline: both at node 0.
const HOT_KEY: &str = "hot:counter";
/// A handful: the key's owner may change at most this often in a run.
const HOT_KEY_MAX_OWNER_CHANGES: u64 = 5;
/// Two nodes at least this share of the same load on one node.
const HOT_KEY_GOAL: f64 = 0.5;

#[derive(Debug, Clone, Copy, PartialEq)]
struct HotKeySample {
    ops_per_s: f64,
    /// Ownership acquisitions at every node during the run (each one an
    /// owner change of the key's reactor).
    owner_changes: u64,
}

#[derive(Debug, Default)]
struct HotKey {
    one_node: Vec<HotKeySample>,
    two_nodes: Vec<HotKeySample>,
}

/// Every node's `roost_ownership_acquires_total`, summed.
pub(crate) fn acquisitions(cluster: &LocalCluster) -> anyhow::Result<u64> {
    let mut total = 0;
    for node in 0..cluster.nodes() {
        let (code, body) = cluster
            .admin(node, "/metrics", Duration::from_secs(5))
            .context("reading /metrics")?;
        anyhow::ensure!(code == 200, "node {node}'s /metrics answered {code}");
        total += crate::cluster::sample(&body, "roost_ownership_acquires_total")
            .and_then(|v| v.trim().parse::<f64>().ok())
            .with_context(|| format!("node {node} reports no roost_ownership_acquires_total"))?
            as u64;
    }
    Ok(total)
}

/// One hot-key run: two clients at `addrs` taking turns for `seconds`.
fn hot_key_run(
    cluster: &LocalCluster,
    addrs: [SocketAddr; 2],
    seconds: f64,
) -> anyhow::Result<HotKeySample> {
    let turn = Arc::new((std::sync::Mutex::new(0u64), std::sync::Condvar::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let before = acquisitions(cluster)?;
    let started = Instant::now();
    let clients: Vec<_> = addrs
        .iter()
        .enumerate()
        .map(|(me, &addr)| {
            let (turn, stop) = (Arc::clone(&turn), Arc::clone(&stop));
            std::thread::spawn(move || -> anyhow::Result<u64> {
                let stream = TcpStream::connect(addr)?;
                stream.set_nodelay(true)?;
                stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
                let mut writer = stream.try_clone()?;
                let mut reader = BufReader::new(stream);
                let mut request = Vec::new();
                push_command(&mut request, &[b"INCR", HOT_KEY.as_bytes()]);
                let mut line = String::new();
                let mut done = 0u64;
                let (lock, changed) = &*turn;
                loop {
                    let mut next = lock.lock().expect("turn lock");
                    while *next % 2 != me as u64 && !stop.load(Ordering::Relaxed) {
                        next = changed
                            .wait_timeout(next, Duration::from_millis(100))
                            .expect("turn lock")
                            .0;
                    }
                    drop(next);
                    if stop.load(Ordering::Relaxed) {
                        return Ok(done);
                    }
                    writer.write_all(&request)?;
                    match read_reply(&mut reader, &mut line, 0)? {
                        Reply::Integer(_) => done += 1,
                        other => anyhow::bail!("INCR {HOT_KEY} answered {other:?}"),
                    }
                    *lock.lock().expect("turn lock") += 1;
                    changed.notify_all();
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    stop.store(true, Ordering::Relaxed);
    turn.1.notify_all();
    let mut ops = 0;
    for client in clients {
        ops += client
            .join()
            .map_err(|_| anyhow::anyhow!("a hot-key client panicked"))??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let after = acquisitions(cluster)?;
    Ok(HotKeySample {
        ops_per_s: ops as f64 / elapsed.max(1e-9),
        owner_changes: after.saturating_sub(before),
    })
}

/// `reps` interleaved pairs of hot-key runs: one node, two nodes.
fn hot_key(cluster: &LocalCluster, reps: u32, seconds: f64) -> anyhow::Result<HotKey> {
    let at = |n: u32| cluster.resp_addr(n).context("a node's RESP address");
    let (first, second) = (at(0)?, at(1)?);
    let mut hot = HotKey::default();
    for rep in 0..reps {
        for two in [rep % 2 == 1, rep % 2 == 0] {
            if two {
                hot.two_nodes
                    .push(hot_key_run(cluster, [first, second], seconds)?);
            } else {
                hot.one_node
                    .push(hot_key_run(cluster, [first, first], seconds)?);
            }
        }
        println!(
            "hot key, repetition {} of {reps}: one node {:.0} INCR/s, two nodes {:.0} INCR/s with {} owner changes",
            rep + 1,
            hot.one_node[rep as usize].ops_per_s,
            hot.two_nodes[rep as usize].ops_per_s,
            hot.two_nodes[rep as usize].owner_changes
        );
    }
    Ok(hot)
}

impl HotKey {
    fn one(&self) -> f64 {
        median(self.one_node.iter().map(|s| s.ops_per_s)).unwrap_or(0.0)
    }

    fn two(&self) -> f64 {
        median(self.two_nodes.iter().map(|s| s.ops_per_s)).unwrap_or(0.0)
    }

    fn paired(&self) -> f64 {
        median_ratio(
            self.two_nodes
                .iter()
                .zip(&self.one_node)
                .map(|(two, one)| (two.ops_per_s, one.ops_per_s)),
        )
        .unwrap_or(0.0)
    }

    /// Owner changes per run, median.
    fn owner_changes(&self) -> f64 {
        median(self.two_nodes.iter().map(|s| s.owner_changes as f64)).unwrap_or(0.0)
    }

    fn verdict(&self) -> &'static str {
        let moves_ok = self
            .two_nodes
            .iter()
            .all(|s| s.owner_changes <= HOT_KEY_MAX_OWNER_CHANGES);
        let ratio = self.two() / self.one().max(f64::MIN_POSITIVE);
        if moves_ok && ratio >= HOT_KEY_GOAL && self.paired() >= HOT_KEY_GOAL {
            "met"
        } else {
            "missed"
        }
    }

    fn rows(&self, reps: u32) -> Vec<Row> {
        [
            ("hot_key_one_node", &self.one_node),
            ("hot_key_two_nodes", &self.two_nodes),
        ]
        .into_iter()
        .map(|(variant, samples)| {
            let mut row = Row::new("roost", variant)
                .with_param("command", "INCR")
                .with_param("clients", 2)
                .with_param("reps", reps)
                .with_extra(
                    "repetitions_ops",
                    samples
                        .iter()
                        .map(|s| s.ops_per_s.round())
                        .collect::<Vec<_>>(),
                )
                .with_extra(
                    "owner_changes",
                    samples.iter().map(|s| s.owner_changes).collect::<Vec<_>>(),
                )
                .with_extra("two_over_one_paired", round2(self.paired()))
                .with_extra("verdict", self.verdict());
            row.throughput_tps = median(samples.iter().map(|s| s.ops_per_s)).unwrap_or(0.0);
            row
        })
        .collect()
    }

    fn notes(&self, seconds: f64) -> Vec<String> {
        vec![
            String::new(),
            "## Hot key".to_owned(),
            String::new(),
            format!(
                "Two clients take turns at `INCR {HOT_KEY}` (each waits for the other's reply), \
                 {seconds} s per run: at node 0 and node 1, and as the baseline both at node 0. \
                 Two nodes: {:.0} INCR/s, one node: {:.0} INCR/s, {:.2}x (median paired {:.2}x; \
                 goal ≥ {HOT_KEY_GOAL}x); the key's owner changed {:?} times per run (goal ≤ \
                 {HOT_KEY_MAX_OWNER_CHANGES}; median {:.0}): {}.",
                self.two(),
                self.one(),
                self.two() / self.one().max(f64::MIN_POSITIVE),
                self.paired(),
                self.two_nodes
                    .iter()
                    .map(|s| s.owner_changes)
                    .collect::<Vec<_>>(),
                self.owner_changes(),
                self.verdict()
            ),
        ]
    }
}

fn notes(
    cells: &[Cell],
    nodes: u32,
    connections: u32,
    seconds: f64,
    reps: u32,
    redis_version: &str,
) -> Vec<String> {
    let mut notes = vec![
        "## Summary".to_owned(),
        String::new(),
        "| run | roost ops/s | redis ops/s | Redis durability | ratio of medians | median paired ratio | goal | verdict |"
            .to_owned(),
        "| --- | --- | --- | --- | --- | --- | --- | --- |".to_owned(),
    ];
    for cell in cells {
        let s = cell.summary();
        notes.push(format!(
            "| {} | {:.0} | {:.0} | {} | {:.2}x | {:.2}x | {} | {} |",
            cell.label(),
            s.roost,
            s.redis,
            cell.driver.redis_durability(),
            s.ratio,
            s.paired,
            if cell.driver.has_goal() {
                format!("≥ {:.1}x", cell.driver.op().goal())
            } else {
                "-".to_owned()
            },
            cell.verdict()
        ));
    }
    notes.push(String::new());
    notes.push("## Method".to_owned());
    notes.push(String::new());
    notes.push(format!(
        "- Roost: {nodes} `roost node --protocol ownership` processes and etcd (`LocalCluster`), 64 \
         keyspace reactors, replication degree 3: a write is answered after every replica \
         acknowledged it (reliable commit). Redis {redis_version}: a primary and {} replica(s) \
         (`--replicaof`), `--save '' --appendonly no`.",
        nodes - 1
    ));
    notes.push(format!(
        "- Rust client rows: {connections} connection(s) per server ({} in all), closed loop, {seconds} \
         s per run after a warm-up of a tenth of that; keys `key:<0..{KEYSPACE}>` at random. Roost: \
         every command to the connection's own node. Redis: writes to the primary, each followed by \
         `WAIT {} 0`; reads spread over the primary and the replicas (may be stale: no goal), and \
         again at the primary only (`rust GET (redis: primary)`, never stale like Roost's at any \
         replica: the read goal). MULTI2 is MULTI, SET a, SET b, EXEC with a and b on different \
         keyspace reactors. Latencies are per pipelined batch.",
        connections * nodes,
        nodes - 1
    ));
    notes.push(format!(
        "- redis-benchmark rows: one `redis-benchmark -t get|set -c {connections} -r {KEYSPACE}` per \
         server at once, their rates summed. Redis SET there goes to the primary only and waits for \
         no replica (redis-benchmark cannot send WAIT): not the same durability, so no goal."
    ));
    notes.push(format!(
        "- {reps} repetition(s); each runs every row on both systems back to back, which goes first \
         alternating. Rates are medians over repetitions; `paired_ratio_median` is the median of the \
         per-repetition ratios. Goals (issue 17): writes ≥ {WRITE_GOAL:.1}x, reads ≥ \
         {READ_GOAL:.1}x, met when both ratios reach them."
    ));
    notes
}

fn charts(cells: &[Cell], depths: &[u32]) -> Vec<BarChart> {
    depths
        .iter()
        .map(|&depth| {
            let at: Vec<&Cell> = cells.iter().filter(|c| c.pipeline == depth).collect();
            let series = |name: &str, roost: bool| BarSeries {
                name: name.to_owned(),
                values: at
                    .iter()
                    .map(|c| {
                        let s = c.summary();
                        Some(if roost { s.roost } else { s.redis })
                    })
                    .collect(),
            };
            BarChart {
                title: format!("-P {depth}: Roost cluster beside Redis primary + replicas"),
                y_label: "ops/s".to_owned(),
                categories: at.iter().map(|c| c.driver.label()).collect(),
                series: vec![series("roost", true), series("redis", false)],
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_whole_and_errors_found_inside_arrays() {
        let text =
            b"+OK\r\n$3\r\nabc\r\n$-1\r\n:7\r\n-ERR nope\r\n*2\r\n+OK\r\n-EXECABORT x\r\n*-1\r\n";
        let mut reader = BufReader::new(&text[..]);
        let mut line = String::new();
        let mut got = Vec::new();
        for _ in 0..7 {
            got.push(read_reply(&mut reader, &mut line, 0).unwrap());
        }
        assert_eq!(
            got,
            vec![
                Reply::Ok,
                Reply::Ok,
                Reply::Ok,
                Reply::Integer(7),
                Reply::Error("ERR nope".into()),
                Reply::Error("EXECABORT x".into()),
                Reply::Ok,
            ]
        );
        assert!(read_reply(&mut reader, &mut line, 0).is_err(), "closed");
        let mut bad = BufReader::new(&b"?what\r\n"[..]);
        assert!(read_reply(&mut bad, &mut line, 0).is_err());
    }

    #[test]
    fn the_second_key_of_a_multi_is_on_another_reactor() {
        let mut keys = Keys(42);
        for _ in 0..100 {
            let first = keys.next();
            let second = keys.other_than(first);
            let reactor = |k: u64| {
                roost_resp::keyspace_index(
                    format!("key:{k}").as_bytes(),
                    roost_check::resp_run::KEYSPACE_REACTORS,
                )
            };
            assert_ne!(reactor(first), reactor(second));
        }
    }

    #[test]
    fn wait_replies_are_the_last_of_each_command() {
        assert!(!is_wait(Op::Set, 0) && is_wait(Op::Set, 1) && is_wait(Op::Set, 3));
        assert!(is_wait(Op::Multi2, 4) && !is_wait(Op::Multi2, 3) && is_wait(Op::Multi2, 9));
    }

    #[test]
    fn the_hot_key_goal_needs_few_owner_changes_and_half_the_one_node_rate() {
        let sample = |ops_per_s, owner_changes| HotKeySample {
            ops_per_s,
            owner_changes,
        };
        let mut hot = HotKey {
            one_node: vec![sample(100.0, 0), sample(120.0, 0), sample(80.0, 0)],
            two_nodes: vec![sample(60.0, 2), sample(50.0, 5), sample(40.0, 1)],
        };
        assert_eq!((hot.one(), hot.two()), (100.0, 50.0));
        assert_eq!(hot.paired(), 0.5);
        assert_eq!(hot.owner_changes(), 2.0);
        assert_eq!(hot.verdict(), "met");
        hot.two_nodes[1].owner_changes = 6;
        assert_eq!(hot.verdict(), "missed", "one run moved the key too often");
        hot.two_nodes[1].owner_changes = 0;
        hot.two_nodes[0].ops_per_s = 30.0;
        assert_eq!(hot.verdict(), "missed", "below half the one-node rate");
        let rows = hot.rows(3);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].extra["verdict"].as_str(), Some("missed"));
    }

    #[test]
    fn writes_go_to_the_primary_and_reads_everywhere() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:2".parse().unwrap();
        let redis = Targets {
            all: vec![a, b],
            primary: Some(a),
            wait_replicas: Some(1),
        };
        assert_eq!(redis.for_op(Op::Set, false), (vec![a, a], Some(1)));
        assert_eq!(redis.for_op(Op::Get, false), (vec![a, b], None));
        assert_eq!(redis.for_op(Op::Get, true), (vec![a, a], None));
        let roost = Targets {
            all: vec![a, b],
            primary: None,
            wait_replicas: None,
        };
        assert_eq!(roost.for_op(Op::Multi2, false), (vec![a, b], None));
        assert_eq!(roost.for_op(Op::Get, true), (vec![a, b], None));
    }
}

//! `roost bench commit`: Zeus's reliable commit on three nodes (in one
//! process, each with its own runtime, database and ports, over loopback
//! TCP through the real transport). RESP clients on node 0 increment
//! counters in reactors node 0 owns, so every transaction is local and
//! only the reliable commit differs between rows:
//!
//! * **replication degree 1, 2, 3**: write throughput and latency with the
//!   reactors on one, two and three nodes (every write answered once each
//!   reader acknowledged it);
//! * **pipelined against waiting**: every client on one reactor, degree 3;
//!   pipelined (the node keeps many reliable commits in flight) against a
//!   pipeline depth of 1 (each transaction's reliable commit waits for the
//!   one before). Goal: pipelined at least 3x.
//!
//! * **read-only at a reader against at the owner**: the same clients GET
//!   the spread rows' counters (degree 3, no writes meanwhile) through
//!   node 0, their owner, or node 1, one of their readers, where they run
//!   on the local replica with no message. Goal: within 10%.
//!
//! Rows of one repetition are interleaved (rotating order) and the median
//! of all repetitions is reported.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::Args;
use hdrhistogram::Histogram;
use roost_bench::plot::{finish_png, render_figure_png, BarChart, BarSeries};
use roost_bench::results::{BenchReport, LatencyUs, Row};
use roost_cluster::config::ClusterConfig;
use roost_cluster::membership::MembershipConfig;
use roost_cluster::runtime::admin_get;
use roost_node::{Node, NodeReactor};
use roost_ownership::{OwnershipCmd, OwnershipOut, ReqId};

const BENCHMARK: &str = "commit";
const NODES: u32 = 3;
/// The keyspace's reactors.
const REACTORS: usize = 64;
/// Reactors the spread rows write (one counter each per client).
const SPREAD_REACTORS: usize = 16;
const GOAL_PIPELINED_RATIO: f64 = 3.0;
/// Read-only throughput at a reader, at least this share of the owner's.
const GOAL_READER_RATIO: f64 = 0.9;

#[derive(Debug, Args)]
pub struct CommitBenchArgs {
    /// CI-sized run: 1 s per row, 1 repetition.
    #[arg(long)]
    pub quick: bool,
    /// Seconds per row and repetition (default 5; --quick 1).
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..=600))]
    pub seconds: Option<u64>,
    /// Repetitions (interleaved; the median of all runs is reported;
    /// default 3, --quick 1).
    #[arg(long, value_name = "R", value_parser = clap::value_parser!(u32).range(1..=50))]
    pub reps: Option<u32>,
    /// RESP clients, all on node 0 (default 16).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=512))]
    pub clients: Option<u32>,
    /// Directory for commit.json, commit.md and commit.png.
    #[arg(long, value_name = "DIR", default_value = "bench/results")]
    pub out: PathBuf,
}

struct Plan {
    seconds: u64,
    reps: usize,
    clients: usize,
}

impl CommitBenchArgs {
    fn plan(&self) -> Plan {
        let (seconds, reps) = if self.quick { (1, 1) } else { (5, 3) };
        Plan {
            seconds: self.seconds.unwrap_or(seconds),
            reps: self.reps.map_or(reps, |r| r as usize),
            clients: self.clients.map_or(16, |c| c as usize),
        }
    }
}

/// One row's variants, in the order of the first repetition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Degree(usize),
    OneReactorWaiting,
    OneReactorPipelined,
    /// GETs through node 0 (the owner) or node 1 (a reader).
    ReadAtOwner,
    ReadAtReader,
}

impl Variant {
    const ALL: [Variant; 7] = [
        Variant::Degree(1),
        Variant::Degree(2),
        Variant::Degree(3),
        Variant::OneReactorWaiting,
        Variant::OneReactorPipelined,
        Variant::ReadAtOwner,
        Variant::ReadAtReader,
    ];

    fn name(self) -> String {
        match self {
            Variant::Degree(d) => format!("spread-degree-{d}"),
            Variant::OneReactorWaiting => "one-reactor-degree-3-waiting".to_owned(),
            Variant::OneReactorPipelined => "one-reactor-degree-3-pipelined".to_owned(),
            Variant::ReadAtOwner => "read-only-at-owner-degree-3".to_owned(),
            Variant::ReadAtReader => "read-only-at-reader-degree-3".to_owned(),
        }
    }

    fn degree(self) -> usize {
        match self {
            Variant::Degree(d) => d,
            _ => 3,
        }
    }

    fn depth(self) -> usize {
        match self {
            Variant::OneReactorWaiting => 1,
            _ => roost_node::commit::MAX_COMMITS_IN_FLIGHT,
        }
    }
}

/// One run of one variant.
struct Run {
    ops: u64,
    seconds: f64,
    latency: Histogram<u64>,
    errors: u64,
}

fn start_nodes() -> anyhow::Result<Vec<Node>> {
    // Leases a node busy with the load survives (three nodes and the
    // clients share this machine's cores).
    let cluster = ClusterConfig {
        membership: MembershipConfig {
            heartbeat_interval_ms: 100,
            suspect_after_ms: 1_000,
            lease_duration_ms: 2_000,
            clock_drift_margin_ms: 50,
            proposal_timeout_ms: 2_000,
        },
        ..ClusterConfig::loopback(NODES)?
    };
    Ok(Node::start_in_process(&cluster, REACTORS)?)
}

fn admin(node: &Node, path: &str) -> anyhow::Result<()> {
    let (status, body) =
        node.block_on(admin_get(node.admin_addr(), path, Duration::from_secs(5)))?;
    if status != 200 {
        bail!("{path} on node {}: {status} {body}", node.id());
    }
    Ok(())
}

fn owned_total(node: &Node) -> anyhow::Result<usize> {
    let handle = node.ownership().context("the node runs Zeus")?;
    let req = ReqId(handle.next_request_id());
    match node.block_on(handle.request(OwnershipCmd::Inspect { req }))? {
        OwnershipOut::Inspected { report, .. } => Ok(report.owned_total),
        other => bail!("inspect answered {other:?}"),
    }
}

/// The reactor's live readers as node 0 (its owner) describes them.
fn readers(node: &Node, key: &NodeReactor) -> anyhow::Result<Option<usize>> {
    let handle = node.ownership().context("the node runs Zeus")?;
    let req = ReqId(handle.next_request_id());
    let cmd = OwnershipCmd::Describe {
        key: key.clone(),
        req,
    };
    match node.block_on(handle.request(cmd))? {
        OwnershipOut::Described {
            meta: Some(meta),
            access: roost_ownership::Access::Owner,
            ..
        } => Ok(Some(meta.o_replicas.readers.len())),
        OwnershipOut::Described { .. } => Ok(None),
        other => bail!("describe answered {other:?}"),
    }
}

/// A node's ownership answer on `key`, as text.
fn describe(node: &Node, key: &NodeReactor) -> String {
    let Some(handle) = node.ownership() else {
        return "no Zeus".to_string();
    };
    let req = ReqId(handle.next_request_id());
    let cmd = OwnershipCmd::Describe {
        key: key.clone(),
        req,
    };
    match node.block_on(handle.request(cmd)) {
        Ok(out) => format!("{out:?}"),
        Err(error) => format!("describe failed: {error}"),
    }
}

fn wait_until(
    what: &str,
    timeout: Duration,
    mut done: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while !done()? {
        if Instant::now() >= deadline {
            bail!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// A key on keyspace reactor `index`.
fn key_on(index: usize, salt: usize) -> String {
    (0..)
        .map(|i| format!("c{index}-{salt}-{i}"))
        .find(|k| roost_resp::keyspace_index(k.as_bytes(), REACTORS) == index)
        .expect("some key hashes to every reactor")
}

fn reactor(index: usize) -> NodeReactor {
    NodeReactor(roost_resp::keyspace_reactor(index).expect("a keyspace reactor"))
}

/// Each client's keys: for the spread rows one per written reactor, for
/// the one-reactor rows one on reactor 0.
fn client_keys(variant: Variant, client: usize) -> Vec<String> {
    match variant {
        Variant::Degree(_) | Variant::ReadAtOwner | Variant::ReadAtReader => {
            (0..SPREAD_REACTORS).map(|r| key_on(r, client)).collect()
        }
        _ => vec![key_on(0, client)],
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

/// Increments (or, `read`, GETs) `keys` round-robin until `stop`:
/// latencies in ns.
fn client(
    addr: SocketAddr,
    keys: Vec<String>,
    read: bool,
    stop: Arc<AtomicBool>,
) -> (Histogram<u64>, u64) {
    let mut latency = histogram();
    let mut errors = 0;
    let Ok(stream) = TcpStream::connect(addr) else {
        return (latency, 1);
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let _ = stream.set_nodelay(true);
    let Ok(read_half) = stream.try_clone() else {
        return (latency, 1);
    };
    let (mut stream, mut reader) = (stream, BufReader::new(read_half));
    let frames: Vec<Vec<u8>> = keys
        .iter()
        .map(|k| {
            let command = if read { "GET" } else { "INCR" };
            format!(
                "*2\r\n${}\r\n{command}\r\n${}\r\n{k}\r\n",
                command.len(),
                k.len()
            )
            .into_bytes()
        })
        .collect();
    let mut line = String::new();
    for frame in frames.iter().cycle() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let sent = Instant::now();
        line.clear();
        if stream.write_all(frame).is_err() || reader.read_line(&mut line).is_err() {
            errors += 1;
            break;
        }
        let answered = if read && line.starts_with('$') && line.trim_end() != "$-1" {
            // The value's line.
            line.clear();
            reader.read_line(&mut line).is_ok()
        } else {
            line.starts_with(':')
        };
        if answered {
            let _ = latency.record(sent.elapsed().as_nanos().max(1) as u64);
        } else {
            errors += 1;
        }
    }
    (latency, errors)
}

fn run_variant(nodes: &[Node], variant: Variant, plan: &Plan) -> anyhow::Result<Run> {
    for node in nodes {
        admin(
            node,
            &format!("/replication/degree?degree={}", variant.degree()),
        )?;
    }
    admin(
        &nodes[0],
        &format!("/commit/pipeline?depth={}", variant.depth()),
    )?;
    let written: Vec<usize> = match variant {
        Variant::Degree(_) | Variant::ReadAtOwner | Variant::ReadAtReader => {
            (0..SPREAD_REACTORS).collect()
        }
        _ => vec![0],
    };
    // The last reactor seen short of the degree, and its readers then (for
    // the error).
    let mut short: Option<(usize, Option<usize>)> = None;
    let waited = wait_until("the replication degree", Duration::from_secs(60), || {
        for &r in &written {
            let seen = readers(&nodes[0], &reactor(r))?;
            if seen != Some(variant.degree() - 1) {
                short = Some((r, seen));
                return Ok(false);
            }
        }
        Ok(true)
    });
    if let (Err(error), Some((r, seen))) = (&waited, short) {
        // What each node's ownership says of it, for whoever debugs this.
        let described: Vec<String> = nodes
            .iter()
            .enumerate()
            .map(|(i, node)| format!("node {i}: {}", describe(node, &reactor(r))))
            .collect();
        bail!(
            "{error} (degree {}): reactor {r}: {}; {}",
            variant.degree(),
            seen.map_or("not node 0's".to_string(), |n| format!(
                "{n} readers at node 0"
            )),
            described.join("; ")
        );
    }
    waited?;
    let at = usize::from(variant == Variant::ReadAtReader);
    let addr = nodes[at].resp_addr().context("the node serves RESP")?;
    let read = matches!(variant, Variant::ReadAtOwner | Variant::ReadAtReader);
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let threads: Vec<_> = (0..plan.clients)
        .map(|c| {
            let (keys, stop) = (client_keys(variant, c), Arc::clone(&stop));
            std::thread::spawn(move || client(addr, keys, read, stop))
        })
        .collect();
    std::thread::sleep(Duration::from_secs(plan.seconds));
    stop.store(true, Ordering::Relaxed);
    let mut latency = histogram();
    let mut errors = 0;
    for t in threads {
        let (h, e) = t.join().map_err(|_| anyhow::anyhow!("a client panicked"))?;
        latency.add(&h).expect("same bounds");
        errors += e;
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(Run {
        ops: latency.len(),
        seconds,
        latency,
        errors,
    })
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

fn row(variant: Variant, runs: &[Run], plan: &Plan) -> Row {
    let tps: Vec<f64> = runs.iter().map(|r| r.ops as f64 / r.seconds).collect();
    let mut all = histogram();
    for r in runs {
        all.add(&r.latency).expect("same bounds");
    }
    let mut row = Row::new("roost", &variant.name())
        .with_param("replication_degree", variant.degree() as u64)
        .with_param("pipeline_depth", variant.depth() as u64)
        .with_param("clients", plan.clients as u64)
        .with_param("seconds_per_rep", plan.seconds)
        .with_param("reps", runs.len() as u64)
        .with_extra(
            "tps_per_rep",
            tps.iter().map(|t| t.round()).collect::<Vec<f64>>(),
        )
        .with_extra("errors", runs.iter().map(|r| r.errors).sum::<u64>());
    row.throughput_tps = median(tps).round();
    row.latency_us = LatencyUs::from_histogram_ns(&all);
    row
}

pub fn run(args: &CommitBenchArgs, command: &str) -> anyhow::Result<()> {
    if std::env::var_os("RUST_LOG").is_some() {
        crate::cluster::init_logging();
    }
    let plan = args.plan();
    println!(
        "commit bench: {NODES} nodes in one process, {} clients on node 0, {} s per row, {} reps",
        plan.clients, plan.seconds, plan.reps
    );
    let nodes = start_nodes()?;
    wait_until(
        "the reactors to be created",
        Duration::from_secs(120),
        || {
            let owned: usize = nodes
                .iter()
                .map(owned_total)
                .sum::<anyhow::Result<usize>>()?;
            Ok(owned == REACTORS)
        },
    )?;
    // Warm-up: the written reactors come to node 0.
    {
        let stop = Arc::new(AtomicBool::new(false));
        let addr = nodes[0].resp_addr().context("node 0 serves RESP")?;
        // Every client's keys, so that the read rows find them.
        let keys: Vec<String> = (0..plan.clients)
            .flat_map(|c| (0..SPREAD_REACTORS).map(move |r| key_on(r, c)))
            .collect();
        let t = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || client(addr, keys, false, stop))
        };
        wait_until(
            "the reactors to come to node 0",
            Duration::from_secs(60),
            || Ok((0..SPREAD_REACTORS).all(|r| is_local(&nodes[0], &reactor(r)))),
        )?;
        // Long enough for one pass over every client's keys.
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::Relaxed);
        let _ = t.join();
    }
    let mut runs: Vec<Vec<Run>> = Variant::ALL.iter().map(|_| Vec::new()).collect();
    for rep in 0..plan.reps {
        for step in 0..Variant::ALL.len() {
            let i = (rep + step) % Variant::ALL.len();
            let variant = Variant::ALL[i];
            let run = run_variant(&nodes, variant, &plan)?;
            println!(
                "rep {rep}: {:<32} {:>9.0} tps  p50 {:>6} µs  p99 {:>6} µs  errors {}",
                variant.name(),
                run.ops as f64 / run.seconds,
                run.latency.value_at_quantile(0.5) / 1000,
                run.latency.value_at_quantile(0.99) / 1000,
                run.errors
            );
            runs[i].push(run);
        }
    }
    let mut report = BenchReport::new(BENCHMARK, command);
    for (i, variant) in Variant::ALL.iter().enumerate() {
        report.rows.push(row(*variant, &runs[i], &plan));
    }
    let tps = |i: usize| report.rows[i].throughput_tps;
    let pipelined_ratio = tps(4) / tps(3).max(1.0);
    let verdict = |ok: bool| if ok { "met" } else { "missed" };
    // Same-run ratios per repetition, for the spread of the claim.
    let per_rep_ratio: Vec<f64> = runs[4]
        .iter()
        .zip(&runs[3])
        .map(|(p, w)| (p.ops as f64 / p.seconds) / (w.ops as f64 / w.seconds).max(1.0))
        .collect();
    let reader_ratio = tps(6) / tps(5).max(1.0);
    let per_rep_reader: Vec<f64> = runs[6]
        .iter()
        .zip(&runs[5])
        .map(|(r, o)| (r.ops as f64 / r.seconds) / (o.ops as f64 / o.seconds).max(1.0))
        .collect();
    let lines = vec![
        format!(
            "Write throughput, {} clients incrementing counters in {SPREAD_REACTORS} reactors node 0 owns (median of {} repetitions): degree 1 {:.0} tps, degree 2 {:.0} tps ({:.2}x), degree 3 {:.0} tps ({:.2}x of degree 1).",
            plan.clients,
            plan.reps,
            tps(0),
            tps(1),
            tps(1) / tps(0).max(1.0),
            tps(2),
            tps(2) / tps(0).max(1.0),
        ),
        format!(
            "One reactor, degree 3: pipelined {:.0} tps against waiting for each reliable commit {:.0} tps = {pipelined_ratio:.2}x (per repetition {:?}; goal ≥ {GOAL_PIPELINED_RATIO}x: {}).",
            tps(4),
            tps(3),
            per_rep_ratio.iter().map(|r| (r * 100.0).round() / 100.0).collect::<Vec<_>>(),
            verdict(pipelined_ratio >= GOAL_PIPELINED_RATIO),
        ),
        format!(
            "Read-only transactions (GET of the spread rows' counters, degree 3, no writes meanwhile): at a reader (node 1) {:.0} tps against at the owner (node 0) {:.0} tps = {reader_ratio:.2}x (per repetition {:?}; goal ≥ {GOAL_READER_RATIO}x: {}).",
            tps(6),
            tps(5),
            per_rep_reader.iter().map(|r| (r * 100.0).round() / 100.0).collect::<Vec<_>>(),
            verdict(reader_ratio >= GOAL_READER_RATIO),
        ),
        format!(
            "{NODES} nodes in one process on this machine ({} cores), each with its own tokio runtime (2 workers) and one database executor, loopback TCP between them; every client is a RESP connection sending INCR (or GET) and waiting for the answer; a write's answer comes after every reader acknowledged it.",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
        ),
    ];
    for line in &lines {
        println!("{line}");
    }
    report.notes = lines;
    let png = args.out.join("commit.png");
    let chart = BarChart {
        title: "Reliable commit: transactions per second (median)".to_owned(),
        y_label: "tps".to_owned(),
        categories: Variant::ALL.iter().map(|v| v.name()).collect(),
        series: vec![BarSeries {
            name: "roost".to_owned(),
            values: (0..Variant::ALL.len()).map(|i| Some(tps(i))).collect(),
        }],
    };
    report.write_with_plot(&args.out, || {
        finish_png(render_figure_png(&[chart], 1, &png), png.clone())
    })?;
    for node in nodes {
        node.stop();
    }
    Ok(())
}

/// Whether `node` owns `key` (holds it writable).
fn is_local(node: &Node, key: &NodeReactor) -> bool {
    node.keyspace()
        .and_then(|k| k.database().holding(&key.0).ok())
        .is_some_and(|h| matches!(h, roost_reactor::Holding::Owned { .. }))
}

//! `roost bench transport`: the transport against raw tokio TCP, in one run.
//!
//! * **round trip**: one small message (a `u64`) from node 0 to node 1 and
//!   back through `roost-net`, one at a time, beside a raw tokio TCP ping-pong
//!   of 8 bytes on loopback. Goal: median at most 1.5x raw.
//! * **throughput**: node 0 sends small messages to node 1 as fast as its
//!   queue takes them; messages per second at the receiver and the mean batch
//!   (messages per socket write). Goal: at least 1,000,000 messages/s.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use hdrhistogram::Histogram;
use roost_bench::results::{BenchReport, LatencyUs, Row};
use roost_net::{EpochId, Inbox, NodeId, Transport, TransportConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const BENCHMARK: &str = "transport";
const GOAL_LATENCY_RATIO: f64 = 1.5;
const GOAL_MSGS_PER_S: f64 = 1_000_000.0;

#[derive(Debug, Args)]
pub struct TransportBenchArgs {
    /// CI-sized run: 1 repetition, fewer round trips and messages.
    #[arg(long)]
    pub quick: bool,
    /// Directory for transport.json and transport.md.
    #[arg(long, value_name = "DIR", default_value = "bench/results")]
    pub out: PathBuf,
    /// Repetitions; rows report the median one.
    #[arg(long, value_name = "R", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub reps: Option<u32>,
}

struct Plan {
    reps: usize,
    round_trips: u64,
    warmup_round_trips: u64,
    messages: u64,
}

impl TransportBenchArgs {
    fn plan(&self) -> Plan {
        let (reps, round_trips, messages) = if self.quick {
            (1, 5_000, 500_000)
        } else {
            (3, 50_000, 5_000_000)
        };
        Plan {
            reps: self.reps.map_or(reps, |r| r as usize),
            round_trips,
            warmup_round_trips: round_trips / 10,
            messages,
        }
    }
}

async fn pair() -> anyhow::Result<((Transport<u64>, Inbox<u64>), (Transport<u64>, Inbox<u64>))> {
    let la = TcpListener::bind("127.0.0.1:0").await?;
    let lb = TcpListener::bind("127.0.0.1:0").await?;
    let (aa, ab) = (la.local_addr()?, lb.local_addr()?);
    let config = TransportConfig::default();
    let a = Transport::start(
        NodeId(0),
        la,
        BTreeMap::from([(NodeId(1), ab)]),
        config.clone(),
    )?;
    let b = Transport::start(NodeId(1), lb, BTreeMap::from([(NodeId(0), aa)]), config)?;
    Ok((a, b))
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

/// A current-thread tokio runtime on its own OS thread: one per node, as two
/// processes would have.
fn node_thread<T: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<T>>>>
        + Send
        + 'static,
) -> anyhow::Result<std::thread::JoinHandle<anyhow::Result<T>>> {
    Ok(std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(work())
        })?)
}

fn joined<T>(handle: std::thread::JoinHandle<anyhow::Result<T>>) -> anyhow::Result<T> {
    handle
        .join()
        .map_err(|_| anyhow::anyhow!("benchmark thread panicked"))?
}

fn roost_round_trips(plan: &Plan) -> anyhow::Result<Histogram<u64>> {
    transport_round_trips(plan.round_trips, plan.warmup_round_trips)
}

/// `round_trips` round trips of one `u64` between two `roost-net` nodes,
/// each on its own thread and current-thread runtime, after `warmup` more:
/// their latencies in ns.
pub(crate) fn transport_round_trips(
    round_trips: u64,
    warmup: u64,
) -> anyhow::Result<Histogram<u64>> {
    let la = std::net::TcpListener::bind("127.0.0.1:0")?;
    let lb = std::net::TcpListener::bind("127.0.0.1:0")?;
    let (aa, ab) = (la.local_addr()?, lb.local_addr()?);
    la.set_nonblocking(true)?;
    lb.set_nonblocking(true)?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let echo = node_thread("node-1", move || {
        Box::pin(async move {
            let peers = BTreeMap::from([(NodeId(0), aa)]);
            let (b, mut b_in) = Transport::<u64>::start(
                NodeId(1),
                TcpListener::from_std(lb)?,
                peers,
                TransportConfig::default(),
            )?;
            let echo = async {
                while let Some(envelope) = b_in.recv().await {
                    let _ = b.send(envelope.from, envelope.epoch, envelope.msg);
                }
            };
            tokio::select! {
                _ = echo => {}
                _ = stop_rx => {}
            }
            b.shutdown();
            Ok(())
        })
    })?;
    let client = node_thread("node-0", move || {
        Box::pin(async move {
            let peers = BTreeMap::from([(NodeId(1), ab)]);
            let (a, mut a_in) = Transport::<u64>::start(
                NodeId(0),
                TcpListener::from_std(la)?,
                peers,
                TransportConfig::default(),
            )?;
            let mut latencies = histogram();
            // One timeout around the whole loop (the raw side has none per trip).
            let trips = async {
                for i in 0..warmup + round_trips {
                    let started = Instant::now();
                    a.send(NodeId(1), EpochId(1), i)?;
                    let reply = a_in.recv().await.context("transport closed")?;
                    anyhow::ensure!(reply.msg == i, "reply out of order");
                    if i >= warmup {
                        latencies.record(started.elapsed().as_nanos() as u64)?;
                    }
                }
                anyhow::Ok(())
            };
            tokio::time::timeout(Duration::from_secs(120), trips)
                .await
                .context("round trips timed out")??;
            a.shutdown();
            Ok(latencies)
        })
    })?;
    let latencies = joined(client);
    let _ = stop_tx.send(());
    joined(echo)?;
    latencies
}

fn raw_round_trips(plan: &Plan) -> anyhow::Result<Histogram<u64>> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr: SocketAddr = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    let echo = node_thread("raw-echo", move || {
        Box::pin(async move {
            let listener = TcpListener::from_std(listener)?;
            let (mut stream, _) = listener.accept().await?;
            stream.set_nodelay(true)?;
            let mut buf = [0u8; 8];
            while stream.read_exact(&mut buf).await.is_ok() {
                if stream.write_all(&buf).await.is_err() {
                    break;
                }
            }
            Ok(())
        })
    })?;
    let (round_trips, warmup) = (plan.round_trips, plan.warmup_round_trips);
    let client = node_thread("raw-client", move || {
        Box::pin(async move {
            let mut stream = TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            let mut latencies = histogram();
            let mut buf = [0u8; 8];
            for i in 0..warmup + round_trips {
                let started = Instant::now();
                stream.write_all(&i.to_le_bytes()).await?;
                stream.read_exact(&mut buf).await?;
                anyhow::ensure!(u64::from_le_bytes(buf) == i, "raw echo out of order");
                if i >= warmup {
                    latencies.record(started.elapsed().as_nanos() as u64)?;
                }
            }
            Ok(latencies)
        })
    })?;
    let latencies = joined(client);
    joined(echo)?;
    latencies
}

struct Throughput {
    msgs_per_s: f64,
    mean_batch_msgs: f64,
    bytes_per_msg: f64,
}

async fn roost_throughput(plan: &Plan) -> anyhow::Result<Throughput> {
    let ((a, _a_in), (b, mut b_in)) = pair().await?;
    // Connect first so the measurement does not include the handshake.
    a.send(NodeId(1), EpochId(1), u64::MAX)?;
    b_in.recv().await.context("warm-up message")?;
    let total = plan.messages;
    let receiver = tokio::spawn(async move {
        let mut received = 0u64;
        while received < total {
            match b_in.recv().await {
                Some(_) => received += 1,
                None => break,
            }
        }
        (received, Instant::now(), b)
    });
    let started = Instant::now();
    for i in 0..total {
        // Waits for room in the queue rather than spinning on a full one.
        a.send_when_ready(NodeId(1), EpochId(1), i).await?;
    }
    let (received, finished, _b) = tokio::time::timeout(Duration::from_secs(120), receiver)
        .await
        .context("throughput run timed out")??;
    anyhow::ensure!(received == total, "received {received} of {total}");
    let seconds = finished.duration_since(started).as_secs_f64();
    let metrics = a.metrics();
    a.shutdown();
    Ok(Throughput {
        msgs_per_s: total as f64 / seconds,
        mean_batch_msgs: metrics.msgs_sent as f64 / metrics.batches_sent.max(1) as f64,
        bytes_per_msg: metrics.bytes_sent as f64 / metrics.msgs_sent.max(1) as f64,
    })
}

fn median_by<T>(mut runs: Vec<T>, key: impl Fn(&T) -> f64) -> T {
    runs.sort_by(|a, b| key(a).total_cmp(&key(b)));
    let middle = runs.len() / 2;
    runs.swap_remove(middle)
}

fn latency_row(variant: &str, system: &str, h: &Histogram<u64>, plan: &Plan) -> Row {
    let latency = LatencyUs::from_histogram_ns(h);
    let mut row = Row::new(system, variant)
        .with_param("experiment", "round-trip")
        .with_param("message_bytes", 8)
        .with_param("round_trips", plan.round_trips);
    row.latency_us = latency;
    row.throughput_tps = if latency.mean > 0.0 {
        1e6 / latency.mean
    } else {
        0.0
    };
    row
}

pub fn run(args: &TransportBenchArgs, command: &str) -> anyhow::Result<()> {
    let plan = args.plan();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut report = BenchReport::new(BENCHMARK, command);
    let (roost, raw, throughput) = runtime.block_on(async {
        let (mut roost, mut raw, mut throughput) = (Vec::new(), Vec::new(), Vec::new());
        for rep in 0..plan.reps {
            // Alternate the order so neither side always runs on a warmer machine.
            if rep % 2 == 0 {
                raw.push(raw_round_trips(&plan)?);
                roost.push(roost_round_trips(&plan)?);
            } else {
                roost.push(roost_round_trips(&plan)?);
                raw.push(raw_round_trips(&plan)?);
            }
            throughput.push(roost_throughput(&plan).await?);
            println!("repetition {} of {} done", rep + 1, plan.reps);
        }
        anyhow::Ok((roost, raw, throughput))
    })?;
    let p50 = |h: &Histogram<u64>| h.value_at_quantile(0.5) as f64;
    let roost = median_by(roost, p50);
    let raw = median_by(raw, p50);
    let throughput = median_by(throughput, |t| t.msgs_per_s);
    report
        .rows
        .push(latency_row("raw-tcp", "tokio", &raw, &plan));
    report
        .rows
        .push(latency_row("roost-net", "roost", &roost, &plan));
    let mut row = Row::new("roost", "roost-net")
        .with_param("experiment", "throughput")
        .with_param("message_bytes", 8)
        .with_param("messages", plan.messages)
        .with_extra(
            "mean_batch_msgs",
            (throughput.mean_batch_msgs * 10.0).round() / 10.0,
        )
        .with_extra(
            "wire_bytes_per_msg",
            (throughput.bytes_per_msg * 10.0).round() / 10.0,
        );
    row.throughput_tps = throughput.msgs_per_s.round();
    report.rows.push(row);

    let ratio = p50(&roost) / p50(&raw).max(1.0);
    let latency_ok = ratio <= GOAL_LATENCY_RATIO;
    let throughput_ok = throughput.msgs_per_s >= GOAL_MSGS_PER_S;
    let verdict = |ok: bool| if ok { "met" } else { "missed" };
    let lines = [
        format!(
            "Round trip median: roost-net {:.1} µs, raw tokio TCP {:.1} µs: {ratio:.2}x (goal ≤ {GOAL_LATENCY_RATIO}x: {}).",
            p50(&roost) / 1e3,
            p50(&raw) / 1e3,
            verdict(latency_ok)
        ),
        format!(
            "Throughput: {:.0} messages/s, {:.1} messages per socket write on average (goal ≥ {GOAL_MSGS_PER_S:.0}/s: {}).",
            throughput.msgs_per_s,
            throughput.mean_batch_msgs,
            verdict(throughput_ok)
        ),
        format!(
            "{} repetition(s); each row is the median repetition. Round trips: each side (node or raw endpoint) runs its own current-thread tokio runtime on its own thread, as separate processes would; throughput: one 2-worker runtime.",
            plan.reps
        ),
    ];
    for line in &lines {
        println!("{line}");
    }
    report.notes = lines.to_vec();
    report.write_with_plot(&args.out, || None)?;
    Ok(())
}

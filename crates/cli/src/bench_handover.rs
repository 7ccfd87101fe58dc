//! `roost bench handover`: the Zeus seed's cellular control plane on a
//! three-node cluster: Roost (a phone's session moves to the node of the
//! base station it hands over to) against static sharding with two-phase
//! commit and perfect sharding, at each handover fraction, interleaved
//! (`roost_bench::handover` has the workload).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;
use hdrhistogram::Histogram;
use roost_bench::cluster_load::{merged_latencies, run_window};
use roost_bench::handover::{self, Layout, Params, Scripts, Session, System};
use roost_bench::plot::{finish_png, BarChart, BarSeries};
use roost_bench::progress::Progress;
use roost_bench::results::{median, BenchReport, LatencyUs, Row};
use roost_client::{redis, RouteTable, Router, Value};
use roost_cluster::local_cluster::LocalCluster;

use crate::bench_smallbank::{owners_of_tags, start_tagged_cluster, TaggedCluster};

const BENCHMARK: &str = "handover";
/// The goal: Roost within this share of perfect sharding at 2.5%.
const PERFECT_GOAL: f64 = 0.90;

#[derive(Debug, Args)]
pub struct HandoverArgs {
    /// About 40 s: 1 repetition of 2 s cells, 1,000 phones per node.
    #[arg(long)]
    pub quick: bool,
    /// Directory for handover.json, handover.md and handover.png.
    #[arg(long, value_name = "DIR", default_value = "bench/results")]
    pub out: PathBuf,
    /// Client threads per node.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub clients_per_node: u32,
    /// Phones per node (each its own reactor).
    #[arg(long, value_parser = clap::value_parser!(u64).range(10..=1_000_000))]
    pub phones: Option<u64>,
    /// Base stations per node.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(2..=10_000))]
    pub stations: u64,
    /// Share of each node's phones that move between nodes.
    #[arg(long, default_value_t = 0.2)]
    pub moving: f64,
    /// Handover fractions (share of transactions), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0.025,0.05")]
    pub handovers: Vec<f64>,
    /// Keyspace reactors (at least phones + stations per node on each).
    #[arg(long)]
    pub reactors: Option<u64>,
    /// Measured seconds per cell (after one second of warm-up).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Repetitions (the systems interleaved in each).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub reps: Option<u32>,
    /// A planted bug (the harness's own test): `lose-finish-session`,
    /// Roost's way drops a handover finish's session write.
    #[arg(long, hide = true, value_parser = ["lose-finish-session"])]
    pub planted: Option<String>,
}

struct Cell {
    system: System,
    handovers: f64,
    committed_tps: f64,
    cross_share: f64,
    conflicts: u64,
    moves: u64,
    latency_ns: Histogram<u64>,
}

/// Every phone's session back to idle at its first station, written at its
/// home node (a phone's reactor that moved comes home).
fn reset(router: &mut Router, layout: &Layout) -> anyhow::Result<Vec<(u64, Session)>> {
    let nodes = layout.nodes.clone();
    let mut expected = Vec::new();
    for (p, node) in nodes.iter().enumerate() {
        let phones = handover::initial_phones(layout, p, 0, 1);
        for chunk in phones.chunks(2_000) {
            let mut cmd = redis::cmd("MSET");
            for (phone, session) in chunk {
                cmd.arg(layout.session_key(*phone))
                    .arg(session.encode(layout));
            }
            let con = router.connection(node.id)?;
            let reply = cmd.query::<Value>(con).context("resetting the sessions")?;
            anyhow::ensure!(reply == Value::Okay, "MSET answered {reply:?}");
        }
        expected.extend(phones);
    }
    Ok(expected)
}

#[allow(clippy::too_many_arguments)]
fn run_cell(
    cluster: &LocalCluster,
    layout: &Arc<Layout>,
    scripts: &Scripts,
    system: System,
    clients_per_node: u32,
    seconds: f64,
    seed: u64,
) -> anyhow::Result<Cell> {
    let nodes = layout.nodes.clone();
    let mut admin = Router::new(nodes.clone(), RouteTable::new());
    reset(&mut admin, layout)?;
    let tags: Vec<&String> = layout.all_tags().collect();
    let owners = Arc::new(owners_of_tags(&mut admin, &tags)?);
    let moves_before = crate::bench_resp_cluster::acquisitions(cluster)?;
    let table = RouteTable::new();
    let (results, elapsed) = {
        let (layout, scripts, owners) = (Arc::clone(layout), scripts.clone(), Arc::clone(&owners));
        run_window(
            &nodes,
            &table,
            clients_per_node,
            seed,
            seconds,
            move |mut c| {
                let phones = handover::initial_phones(
                    &layout,
                    c.node,
                    u64::from(c.index),
                    u64::from(clients_per_node),
                );
                handover::run_client(
                    system,
                    &mut c.router,
                    &scripts,
                    &layout,
                    &owners,
                    phones,
                    c.seed,
                    &c.stop,
                    &c.counting,
                )
            },
        )?
    };
    let latency_ns = merged_latencies(results.iter().map(|r| &r.latency_ns));
    let (mut committed, mut cross, mut conflicts) = (0, 0, 0);
    let mut expected = Vec::new();
    let mut errors = Vec::new();
    for r in results {
        committed += r.committed;
        cross += r.cross;
        conflicts += r.conflicts;
        expected.extend(r.expected);
        if let Some(e) = r.error {
            errors.push(e);
        }
    }
    anyhow::ensure!(
        errors.is_empty(),
        "{} clients failed under {}: {}",
        errors.len(),
        system.name(),
        errors[0]
    );
    let moves = crate::bench_resp_cluster::acquisitions(cluster)? - moves_before;
    // Checked, not assumed: every session says what its client last did.
    let (wrong, first) = handover::check(&mut admin, layout, &expected)?;
    anyhow::ensure!(
        wrong == 0,
        "{}: {wrong} of {} sessions are not what their clients last wrote; first: {}",
        system.name(),
        expected.len(),
        first.unwrap_or_default()
    );
    if system == System::Static2pc {
        anyhow::ensure!(moves == 0, "static sharding moved {moves} reactors");
    }
    Ok(Cell {
        system,
        handovers: layout.params.handover_fraction,
        committed_tps: committed as f64 / elapsed,
        cross_share: if committed == 0 {
            0.0
        } else {
            cross as f64 / committed as f64
        },
        conflicts,
        moves,
        latency_ns,
    })
}

pub fn run(args: &HandoverArgs, command: &str) -> anyhow::Result<()> {
    let phones = args
        .phones
        .unwrap_or(if args.quick { 1_000 } else { 3_000 });
    let per_node = phones + args.stations;
    // Room for every node's objects, whatever the rendezvous hashing gives
    // each node: about twice the need.
    let reactors = args
        .reactors
        .unwrap_or((per_node * 3 * 2).next_power_of_two());
    let (seconds, reps) = if args.quick { (2.0, 1) } else { (5.0, 3) };
    let seconds = args.seconds.unwrap_or(seconds);
    let reps = args.reps.unwrap_or(reps);
    anyhow::ensure!(
        (0.0..=1.0).contains(&args.moving)
            && args.handovers.iter().all(|h| (0.0..=0.5).contains(h)),
        "--moving in [0, 1], --handovers in [0, 0.5]"
    );
    anyhow::ensure!(
        seconds.is_finite() && (0.1..=600.0).contains(&seconds),
        "--seconds {seconds}: in [0.1, 600]"
    );
    let nodes_n = 3u32;
    println!(
        "handover: {nodes_n} nodes, {reactors} reactors, {phones} phones and {} base stations per node, {:.0}% of phones moving, {} clients per node",
        args.stations,
        args.moving * 100.0,
        args.clients_per_node
    );
    let dir = std::env::temp_dir().join(format!("roost-bench-handover-{}", std::process::id()));
    let TaggedCluster {
        cluster,
        nodes,
        mut admin,
        owned,
    } = start_tagged_cluster(nodes_n, reactors, dir, "memory", true)?;
    let mut scripts = Scripts::load(&mut admin)?;
    scripts.bugs.lose_finish_session = args.planted.as_deref() == Some("lose-finish-session");
    let mut cells = Vec::new();
    let mut layouts = Vec::new();
    for &h in &args.handovers {
        let params = Params {
            phones_per_node: phones,
            stations_per_node: args.stations,
            handover_fraction: h,
            moving_fraction: args.moving,
        };
        let layout =
            Layout::new(params, nodes.clone(), owned.clone()).map_err(anyhow::Error::msg)?;
        layouts.push(Arc::new(layout));
    }
    {
        let layout = &layouts[0];
        let tags: Vec<&String> = layout.all_tags().collect();
        let owners = owners_of_tags(&mut admin, &tags)?;
        handover::load(&mut admin, layout, &owners)?;
    }
    let mut progress = Progress::new(reps as usize * layouts.len() * 3);
    for rep in 0..reps {
        for layout in &layouts {
            for system in [System::Perfect, System::Static2pc, System::Roost] {
                let seed = u64::from(rep) << 16 | cells.len() as u64;
                progress.start(&format!(
                    "rep {} {} at {:.1}% handovers",
                    rep + 1,
                    system.name(),
                    layout.params.handover_fraction * 100.0
                ));
                let cell = run_cell(
                    &cluster,
                    layout,
                    &scripts,
                    system,
                    args.clients_per_node,
                    seconds,
                    seed,
                )?;
                progress.finish(&format!(
                    "rep {} {:<10} handovers {:>4.1}%: {:>8.0} txn/s, p50 {:>6.0} us, p99 {:>7.0} us, {:.1}% across nodes, {} moves, sessions checked",
                    rep + 1,
                    system.name(),
                    layout.params.handover_fraction * 100.0,
                    cell.committed_tps,
                    cell.latency_ns.value_at_quantile(0.5) as f64 / 1e3,
                    cell.latency_ns.value_at_quantile(0.99) as f64 / 1e3,
                    cell.cross_share * 100.0,
                    cell.moves
                ));
                cells.push(cell);
            }
        }
    }
    let report = report(args, phones, reactors, seconds, reps, command, &cells);
    let png = args.out.join(format!("{BENCHMARK}.png"));
    let chart = chart(&args.handovers, &cells);
    report.write_with_plot(&args.out, || {
        finish_png(chart.render_png(&png), png.clone())
    })?;
    println!("{}", report.to_markdown());
    Ok(())
}

fn median_of(cells: &[Cell], system: System, h: f64) -> Option<f64> {
    median(
        cells
            .iter()
            .filter(|c| c.system == system && c.handovers == h)
            .map(|c| c.committed_tps),
    )
}

fn chart(handovers: &[f64], cells: &[Cell]) -> BarChart {
    let series = |system: System| BarSeries {
        name: system.name().to_owned(),
        values: handovers
            .iter()
            .map(|&h| median_of(cells, system, h))
            .collect(),
    };
    BarChart {
        title: "Handover, 3 nodes: throughput by handover fraction".to_owned(),
        y_label: "committed txn/s".to_owned(),
        categories: handovers
            .iter()
            .map(|h| format!("{:.1}%", h * 100.0))
            .collect(),
        series: vec![
            series(System::Roost),
            series(System::Static2pc),
            series(System::Perfect),
        ],
    }
}

#[allow(clippy::too_many_arguments)]
fn report(
    args: &HandoverArgs,
    phones: u64,
    reactors: u64,
    seconds: f64,
    reps: u32,
    command: &str,
    cells: &[Cell],
) -> BenchReport {
    let mut report = BenchReport::new(BENCHMARK, command);
    let mut verdicts = Vec::new();
    for &h in &args.handovers {
        let perfect = median_of(cells, System::Perfect, h).unwrap_or(0.0);
        let static_tps = median_of(cells, System::Static2pc, h).unwrap_or(0.0);
        for system in [System::Perfect, System::Static2pc, System::Roost] {
            let mine: Vec<&Cell> = cells
                .iter()
                .filter(|c| c.system == system && c.handovers == h)
                .collect();
            let Some(tps) = median(mine.iter().map(|c| c.committed_tps)) else {
                continue;
            };
            let merged = merged_latencies(mine.iter().map(|c| &c.latency_ns));
            let mut row = Row::new(system.name(), "handover")
                .with_param("handover_percent", (h * 1000.0).round() / 10.0)
                .with_param("clients", 3 * args.clients_per_node)
                .with_extra("runs", mine.len())
                .with_extra("vs_perfect", ((tps / perfect) * 100.0).round() / 100.0)
                .with_extra(
                    "vs_static_2pc",
                    ((tps / static_tps) * 100.0).round() / 100.0,
                )
                .with_extra(
                    "cross_node_percent",
                    (median(mine.iter().map(|c| c.cross_share)).unwrap_or(0.0) * 1000.0).round()
                        / 10.0,
                )
                .with_extra(
                    "moves_median",
                    median(mine.iter().map(|c| c.moves as f64)).unwrap_or(0.0),
                )
                .with_extra(
                    "conflicts_median",
                    median(mine.iter().map(|c| c.conflicts as f64)).unwrap_or(0.0),
                );
            row.throughput_tps = tps.round();
            row.latency_us = LatencyUs::from_histogram_ns(&merged);
            report.rows.push(row);
            if system == System::Roost {
                verdicts.push(format!(
                    "at {:.1}% handovers Roost is {:.2}x perfect sharding and {:.2}x static-2PC",
                    h * 100.0,
                    tps / perfect,
                    tps / static_tps
                ));
                if (h - 0.025).abs() < 1e-9 {
                    verdicts.push(format!(
                        "goal (within 10% of perfect at 2.5%): {}",
                        if tps / perfect >= PERFECT_GOAL {
                            "met"
                        } else {
                            "missed"
                        }
                    ));
                }
            }
        }
    }
    report.notes.push(format!(
        "Handover: 3 nodes on this machine, replication degree 3, in memory (`--sync memory`), {reactors} keyspace reactors; {phones} phones and {} base stations per node, each its own reactor; {:.0}% of each node's phones hand over to the next node and back, the others between their node's stations; service request, release and handover (start and finish, two transactions) as one Lua script each, 300-400 B written; {} client threads per node over RESP, each driving its phones. Each cell starts with every session idle at its home (written at the home node, so moved phones come back), 1 s warm-up, {seconds} s measured; {reps} repetitions with the systems interleaved; medians. After each cell every session is read back and compared with what its client last wrote.",
        args.stations,
        args.moving * 100.0,
        args.clients_per_node
    ));
    report.notes.push("Systems: `roost` sends each transaction to the node its base station (or, for a handover's finish, its phone) is routed to, and the phone's reactor moves there when it hands over to another node; `static-2pc` never moves a reactor: a phone away from its home node is a two-phase commit for every transaction at a station of the other node (locks replicated as every write); `perfect` keeps every phone on its node.".to_owned());
    report.notes.push(format!("{}.", verdicts.join("; ")));
    report
}

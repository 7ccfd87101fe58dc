//! `roost bench tatp`: the Zeus seed's TATP study (Figure 9's TATP panel)
//! on a three-node cluster: Roost (reads on the local replica, writes
//! where they arrive) against static sharding (every transaction at its
//! subscriber's owner) and perfect sharding, by the share of transactions
//! whose subscriber another node owns, interleaved (`roost_bench::tatp`
//! has the workload).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use hdrhistogram::Histogram;
use roost_bench::cluster_load::{merged_latencies, run_window};
use roost_bench::plot::finish_png;
use roost_bench::progress::Progress;
use roost_bench::results::{median, BenchReport, LatencyUs, Row};
use roost_bench::tatp::{self, Layout, Params, Partitions, PlantedBugs, Scripts, System};
use roost_client::{RouteTable, Router};
use roost_cluster::local_cluster::LocalCluster;

use crate::bench_smallbank::{owners_of_tags, start_tagged_cluster, TaggedCluster};
use crate::remote_sweep::{self, break_even_note, median_tps, round2, SweepCell};

const BENCHMARK: &str = "tatp";
/// The goal: Roost at least this many times static-2PC at 1% remote.
const STATIC_GOAL: f64 = 2.0;
const GOAL_REMOTE: f64 = 0.01;

#[derive(Debug, Args)]
pub struct TatpArgs {
    /// About a minute: 1 repetition of 2 s cells, 10,000 subscribers per
    /// node.
    #[arg(long)]
    pub quick: bool,
    /// Directory for tatp.json, tatp.md and tatp.png.
    #[arg(long, value_name = "DIR", default_value = "bench/results")]
    pub out: PathBuf,
    /// Client threads per node.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub clients_per_node: u32,
    /// Subscribers per node (FaSST: 1,000,000; default 100,000).
    #[arg(long, value_parser = clap::value_parser!(u64).range(100..=2_000_000))]
    pub subscribers: Option<u64>,
    /// Keyspace reactors (a reactor holds subscribers/reactors-per-node
    /// subscribers).
    #[arg(long, default_value_t = 3072, value_parser = clap::value_parser!(u64).range(16..=65_536))]
    pub reactors: u64,
    /// Shares of all transactions whose subscriber another node owns,
    /// comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub remote: Option<Vec<f64>>,
    /// Measured seconds per cell (after one second of warm-up).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Repetitions (the systems interleaved in each); rows give medians.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub reps: Option<u32>,
    /// A planted bug (the harness's own test): `insert-skips-row`, Roost's
    /// INSERT_CALL_FORWARDING reports an insert it did not make.
    #[arg(long, hide = true, value_parser = ["insert-skips-row"])]
    pub planted: Option<String>,
}

struct Plan {
    params: Params,
    remote: Vec<f64>,
    seconds: f64,
    reps: u32,
}

impl TatpArgs {
    fn plan(&self) -> anyhow::Result<Plan> {
        let (subscribers, remote, seconds, reps) = if self.quick {
            (10_000, vec![0.0, GOAL_REMOTE, 0.1], 2.0, 1)
        } else {
            (100_000, vec![0.0, GOAL_REMOTE, 0.05, 0.2, 0.4], 5.0, 3)
        };
        let remote = self.remote.clone().unwrap_or(remote);
        for &r in &remote {
            anyhow::ensure!(
                (0.0..=1.0).contains(&r),
                "--remote {r}: a fraction in [0, 1]"
            );
        }
        let seconds = self.seconds.unwrap_or(seconds);
        anyhow::ensure!(
            seconds.is_finite() && (0.1..=600.0).contains(&seconds),
            "--seconds {seconds}: in [0.1, 600]"
        );
        Ok(Plan {
            params: Params {
                subscribers_per_node: self.subscribers.unwrap_or(subscribers),
            },
            remote,
            seconds,
            reps: self.reps.unwrap_or(reps),
        })
    }
}

struct Cell {
    system: System,
    remote: f64,
    committed_tps: f64,
    success_share: f64,
    remote_share: f64,
    moves: u64,
    latency_ns: Histogram<u64>,
}

#[allow(clippy::too_many_arguments)]
fn run_cell(
    cluster: &LocalCluster,
    layout: &Arc<Layout>,
    scripts: &Scripts,
    system: System,
    remote: f64,
    clients_per_node: u32,
    seconds: f64,
    seed: u64,
    expected_cf: &mut u64,
) -> anyhow::Result<Cell> {
    let nodes = layout.nodes.clone();
    let mut admin = Router::new(nodes.clone(), RouteTable::new());
    let tags: Vec<&String> = layout.all_tags().collect();
    let parts = Arc::new(Partitions::new(layout, owners_of_tags(&mut admin, &tags)?));
    anyhow::ensure!(
        parts.sizes().iter().all(|n| *n > 0),
        "a node owns no subscriber: {:?}",
        parts.sizes()
    );
    let moves_before = crate::bench_resp_cluster::acquisitions(cluster)?;
    let table = RouteTable::new();
    let (results, elapsed) = {
        let (layout, scripts, parts) = (Arc::clone(layout), scripts.clone(), Arc::clone(&parts));
        run_window(
            &nodes,
            &table,
            clients_per_node,
            seed,
            seconds,
            move |mut c| {
                tatp::run_client(
                    system,
                    &mut c.router,
                    &scripts,
                    &layout,
                    &parts,
                    c.node,
                    remote,
                    c.seed,
                    &c.stop,
                    &c.counting,
                )
            },
        )?
    };
    let latency_ns = merged_latencies(results.iter().map(|r| &r.latency_ns));
    let (mut committed, mut succeeded, mut away) = (0u64, 0u64, 0u64);
    let mut errors = Vec::new();
    for r in &results {
        committed += r.committed;
        succeeded += r.succeeded;
        away += r.remote;
        *expected_cf = *expected_cf + r.cf_inserted - r.cf_deleted;
        if let Some(e) = &r.error {
            errors.push(e.clone());
        }
    }
    anyhow::ensure!(
        errors.is_empty(),
        "{} clients failed under {} at remote {remote}: {}",
        errors.len(),
        system.name(),
        errors[0]
    );
    let moves = crate::bench_resp_cluster::acquisitions(cluster)? - moves_before;
    // Checked, not assumed: the call-forwarding rows are the load plus
    // every reported insert less every reported delete.
    let rows = tatp::count_call_forwarding(&mut admin, layout)?;
    anyhow::ensure!(
        rows == *expected_cf,
        "{} at remote {remote}: {rows} call-forwarding rows, but the load and the transactions' reported inserts and deletes make {}",
        system.name(),
        *expected_cf
    );
    if system == System::Static2pc {
        anyhow::ensure!(moves == 0, "static sharding moved {moves} reactors");
    }
    let share = |n: u64| {
        if committed == 0 {
            0.0
        } else {
            n as f64 / committed as f64
        }
    };
    Ok(Cell {
        system,
        remote,
        committed_tps: committed as f64 / elapsed,
        success_share: share(succeeded),
        remote_share: share(away),
        moves,
        latency_ns,
    })
}

pub fn run(args: &TatpArgs, command: &str) -> anyhow::Result<()> {
    let plan = args.plan()?;
    let nodes_n = 3u32;
    println!(
        "tatp: {nodes_n} nodes, {} reactors, {} subscribers per node, {} clients per node",
        args.reactors, plan.params.subscribers_per_node, args.clients_per_node
    );
    let dir = std::env::temp_dir().join(format!("roost-bench-tatp-{}", std::process::id()));
    let TaggedCluster {
        cluster,
        nodes,
        mut admin,
        owned,
    } = start_tagged_cluster(nodes_n, args.reactors, dir, "memory", true)?;
    let layout = Arc::new(Layout::new(plan.params, nodes.clone(), owned));
    let loading = Instant::now();
    let tags: Vec<&String> = layout.all_tags().collect();
    let owners = owners_of_tags(&mut admin, &tags)?;
    let mut expected_cf = tatp::load(&mut admin, &layout, &owners, 0x7a7b)?;
    let loaded_cf = tatp::count_call_forwarding(&mut admin, &layout)?;
    anyhow::ensure!(
        loaded_cf == expected_cf,
        "loaded {loaded_cf} call-forwarding rows, not {expected_cf}"
    );
    println!(
        "loaded {} subscribers ({expected_cf} call-forwarding rows) in {:.1} s",
        layout.subscribers(),
        loading.elapsed().as_secs_f64()
    );
    let bugs = PlantedBugs {
        insert_skips_row: args.planted.as_deref() == Some("insert-skips-row"),
    };
    let scripts = Scripts::load(&mut admin, bugs)?;
    let order = remote_sweep::order(&plan.remote);
    let mut progress = Progress::new(order.len() * plan.reps as usize);
    let mut cells = Vec::new();
    for rep in 0..plan.reps {
        for (i, &(system, remote)) in order.iter().enumerate() {
            let seed = u64::from(rep) << 16 | i as u64;
            progress.start(&format!(
                "rep {} {} at {:.1}% remote",
                rep + 1,
                system.name(),
                remote * 100.0
            ));
            let cell = run_cell(
                &cluster,
                &layout,
                &scripts,
                system,
                remote,
                args.clients_per_node,
                plan.seconds,
                seed,
                &mut expected_cf,
            )?;
            progress.finish(&format!(
                "rep {} {:<10} remote {:>5.1}%: {:>8.0} txn/s, p50 {:>6.0} us, p99 {:>7.0} us, {:.1}% on other nodes, {} moves, call forwarding checked",
                rep + 1,
                system.name(),
                remote * 100.0,
                cell.committed_tps,
                cell.latency_ns.value_at_quantile(0.5) as f64 / 1e3,
                cell.latency_ns.value_at_quantile(0.99) as f64 / 1e3,
                cell.remote_share * 100.0,
                cell.moves
            ));
            cells.push(cell);
        }
    }
    let report = report(args, &plan, command, &cells);
    let png = args.out.join(format!("{BENCHMARK}.png"));
    let chart = remote_sweep::figure_9(
        "TATP, 3 nodes: throughput by remote fraction",
        "txn/s",
        &plan.remote,
        &cells,
    );
    report.write_with_plot(&args.out, || {
        finish_png(chart.render_png(&png), png.clone())
    })?;
    println!("{}", report.to_markdown());
    Ok(())
}

impl SweepCell for Cell {
    fn system(&self) -> System {
        self.system
    }
    fn remote(&self) -> f64 {
        self.remote
    }
    fn committed_tps(&self) -> f64 {
        self.committed_tps
    }
}

fn report(args: &TatpArgs, plan: &Plan, command: &str, cells: &[Cell]) -> BenchReport {
    let mut report = BenchReport::new(BENCHMARK, command);
    let perfect = median_tps(cells, System::Perfect, 0.0).unwrap_or(0.0);
    let points = remote_sweep::order(&plan.remote);
    let mut ratios = Vec::new();
    for (system, remote) in points {
        let mine: Vec<&Cell> = cells
            .iter()
            .filter(|c| c.system == system && c.remote == remote)
            .collect();
        let Some(tps) = median(mine.iter().map(|c| c.committed_tps)) else {
            continue;
        };
        let merged = merged_latencies(mine.iter().map(|c| &c.latency_ns));
        let mut row = Row::new(system.name(), "tatp")
            .with_param("remote_percent", (remote * 1000.0).round() / 10.0)
            .with_param("clients", 3 * args.clients_per_node)
            .with_extra("runs", mine.len())
            .with_extra(
                "moves_median",
                median(mine.iter().map(|c| c.moves as f64)).unwrap_or(0.0),
            )
            .with_extra(
                "remote_percent_measured",
                (median(mine.iter().map(|c| c.remote_share)).unwrap_or(0.0) * 1000.0).round()
                    / 10.0,
            )
            .with_extra(
                "found_percent",
                (median(mine.iter().map(|c| c.success_share)).unwrap_or(0.0) * 1000.0).round()
                    / 10.0,
            )
            .with_extra("vs_perfect", round2(tps / perfect));
        if system == System::Roost {
            if let Some(s) = median_tps(cells, System::Static2pc, remote) {
                row = row.with_extra("vs_static_2pc", round2(tps / s));
                ratios.push((remote, tps / s));
            }
        }
        row.throughput_tps = tps.round();
        row.latency_us = LatencyUs::from_histogram_ns(&merged);
        report.rows.push(row);
    }
    report.notes.push(format!(
        "TATP: {} subscribers per node (FaSST: 1,000,000), NURand (A = {}), the spec's populations and mix (35/10/35/2/14/2/2, 80% read). 3 nodes on this machine, replication degree 3, in memory (`--sync memory`); {} client threads per node over RESP; {} keyspace reactors, a subscriber's rows and its sub_nbr index entry in one. Each cell: 1 s warm-up, {} s measured; {} repetitions with the systems interleaved; throughput is the median over repetitions of transactions answered per second (the spec's expected misses included; `found_percent` is the share that found their rows), latency percentiles over every run. After every cell every subscriber's call-forwarding rows are counted and checked against the load plus each reported insert and delete.",
        plan.params.subscribers_per_node,
        tatp::nurand_a(plan.params.subscribers_per_node),
        args.clients_per_node,
        args.reactors,
        plan.seconds,
        plan.reps
    ));
    report.notes.push("Systems: `roost` runs each transaction at the client's node (the application's node, where the request arrives): reads as EVALSHA_RO on the local replica, writes there too, which takes the subscriber's reactor when another node owns it (or forwards the write to the owner while that reactor is contended); `static-2pc` never moves a reactor and runs every transaction, reads too, at the subscriber's owner, which the client reaches directly (a TATP transaction names one subscriber, so no two-phase commit is needed, and a remote access costs this baseline nothing more than a local one); `perfect` is `roost` with every subscriber at the client's node. Remote percent: the share of all transactions whose subscriber another node owns.".to_owned());
    if let Some((_, r)) = ratios.iter().find(|(remote, _)| *remote == GOAL_REMOTE) {
        report.notes.push(format!(
            "At {:.0}% remote, Roost is {r:.2}x static-2PC (goal {STATIC_GOAL}x: {}).",
            GOAL_REMOTE * 100.0,
            if *r >= STATIC_GOAL { "met" } else { "missed" }
        ));
    }
    report.notes.push(break_even_note(&ratios));
    report
}

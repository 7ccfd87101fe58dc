//! `roost bench voter --balance`: the load balancer's experiment. The
//! popular contestants ([`VoterArgs::hot`], three by default, each voted
//! for by her own share of the voters) all start at the first node, which
//! so serves most of the load; the clients' routers count the requests
//! each reactor receives and, every second, [`Router::balance`] moves
//! routes off the busiest node. The next vote at a contestant's new node
//! takes her there (Zeus ownership), and her voters' reactors follow her
//! on their next votes: reactors used together end up together. Nothing
//! tells the harness where anyone should be: it measures where the votes
//! went, second by second, and where every popular contestant and her
//! voters' reactors are at the end. Every total and count is checked.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use roost_bench::cluster_load::merged_latencies;
use roost_bench::plot::{finish_png, render_figure_png, BarChart, BarSeries};
use roost_bench::results::{median, BenchReport, LatencyUs, Row};
use roost_bench::voter::{self, Layout, PromHistogram, Scripts, Timeline};
use roost_client::{RouteTable, Router};
use roost_cluster::local_cluster::LocalCluster;

use crate::bench_voter::{
    acquire_histogram, acquisition_chart, acquisition_row, all_acquires, look, per_second, round1,
    run_voters_with, tally_and_check, VoterArgs, BUCKET,
};

const BENCHMARK: &str = "voter_balance";
/// How often the balancer plans (the route table's load window).
const BALANCE_EVERY: Duration = Duration::from_secs(1);

/// The run's sizes, decided with the cluster's.
pub struct Sizes {
    pub reactors: u64,
    pub seconds: f64,
    pub reps: u32,
}

/// One route the balancer moved.
#[derive(Debug, Clone)]
struct Moved {
    at_s: f64,
    /// The popular contestant it is, or another contestant's number, or
    /// none (a reactor no contestant lives in).
    contestant: Option<u32>,
    from: u32,
    to: u32,
    /// Its requests in the balancer's window.
    requests: u64,
}

/// Where a popular contestant ended: her owner, and how many of her voters'
/// reactors are there too, of all.
#[derive(Debug, Clone, Copy)]
struct Placement {
    owner: Option<u32>,
    with_her: (usize, usize),
}

struct Run {
    elapsed: f64,
    counted: u64,
    /// Votes per node position per bucket.
    node_buckets: Vec<Vec<u64>>,
    acquisitions_buckets: Vec<u64>,
    acquisitions: u64,
    acquire: PromHistogram,
    latency_ns: Histogram<u64>,
    moves: Vec<Moved>,
    placement: Vec<Placement>,
    votes_checked: u64,
    voters_checked: usize,
}

impl Run {
    fn tps(&self) -> f64 {
        self.counted as f64 / self.elapsed
    }

    /// Votes per second sent to each node over buckets `from..to`.
    fn node_rates(&self, from: usize, to: usize) -> Vec<f64> {
        self.node_buckets
            .iter()
            .map(|b| {
                let to = to.min(b.len());
                if from >= to {
                    return 0.0;
                }
                b[from..to].iter().sum::<u64>() as f64 / ((to - from) as f64 * BUCKET.as_secs_f64())
            })
            .collect()
    }

    /// The busiest node's share of the votes over buckets `from..to`.
    fn busiest_share(&self, from: usize, to: usize) -> f64 {
        let rates = self.node_rates(from, to);
        let total: f64 = rates.iter().sum();
        if total == 0.0 {
            return 0.0;
        }
        rates.iter().copied().fold(0.0, f64::max) / total
    }

    /// The nodes the popular contestants ended at, distinct.
    fn spread(&self) -> usize {
        let mut owners: Vec<u32> = self.placement.iter().filter_map(|p| p.owner).collect();
        owners.sort_unstable();
        owners.dedup();
        owners.len()
    }

    fn buckets(&self) -> usize {
        self.node_buckets.first().map_or(0, Vec::len)
    }
}

/// The balancer: at each bucket's end the acquisitions so far are
/// sampled, and every [`BALANCE_EVERY`] the routers' load goes to
/// [`Router::balance`], whose moves are recorded.
fn balancer(
    cluster: &LocalCluster,
    layout: &Layout,
    table: &Arc<RouteTable>,
    timeline: &Timeline,
    done: &AtomicBool,
    rep: u32,
) -> anyhow::Result<(Vec<Moved>, Vec<u64>)> {
    let mut router = Router::new(layout.nodes.clone(), Arc::clone(table));
    let totals: Vec<String> = (0..layout.params.contestants)
        .map(|c| layout.total_key(c))
        .collect();
    let keys: Vec<&[u8]> = totals.iter().map(|k| k.as_bytes()).collect();
    let contestant_of: std::collections::HashMap<usize, u32> = router
        .owners(&keys)?
        .iter()
        .zip(0..)
        .map(|(o, c)| (o.reactor, c))
        .collect();
    let mut moves = Vec::new();
    let mut acquisitions = vec![0u64; timeline.buckets];
    let origin = loop {
        if let Some(origin) = timeline.origin.get() {
            break *origin;
        }
        if done.load(Ordering::Relaxed) {
            return Ok((moves, acquisitions));
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let every = (BALANCE_EVERY.as_secs_f64() / BUCKET.as_secs_f64()).round() as usize;
    let mut last = crate::bench_resp_cluster::acquisitions(cluster)?;
    for k in 1..=timeline.buckets {
        let tick = origin + BUCKET * k as u32;
        while Instant::now() < tick && !done.load(Ordering::Relaxed) {
            std::thread::sleep((tick - Instant::now()).min(Duration::from_millis(20)));
        }
        if done.load(Ordering::Relaxed) {
            break;
        }
        let now = crate::bench_resp_cluster::acquisitions(cluster)?;
        acquisitions[k - 1] = now - last;
        last = now;
        if k % every != 0 {
            continue;
        }
        let at_s = origin.elapsed().as_secs_f64();
        for m in router.balance() {
            let contestant = contestant_of.get(&m.reactor).copied();
            println!(
                "    rep {rep}, {at_s:>5.2} s: the balancer moved {} from node {} to node {} ({} requests in its window)",
                contestant.map_or(format!("reactor {}", m.reactor), |c| format!("contestant {c}")),
                m.from,
                m.to,
                m.requests
            );
            moves.push(Moved {
                at_s,
                contestant,
                from: m.from,
                to: m.to,
                requests: m.requests,
            });
        }
    }
    Ok((moves, acquisitions))
}

fn run_once(
    cluster: &LocalCluster,
    layout: &Arc<Layout>,
    scripts: &Scripts,
    clients_per_node: u32,
    seconds: f64,
    seed: u64,
    rep: u32,
) -> anyhow::Result<Run> {
    let nodes = layout.nodes.clone();
    let mut admin = Router::new(nodes.clone(), RouteTable::new());
    voter::reset(&mut admin, layout)?;
    let timeline = Arc::new(Timeline::new(BUCKET, seconds));
    let acquire_before = acquire_histogram(cluster)?;
    let acquisitions_before = crate::bench_resp_cluster::acquisitions(cluster)?;
    // Routes follow ownership as any application's do (the default
    // settle), and the balancer moves them.
    let table = RouteTable::new();
    let (results, elapsed, (moves, acquisitions_buckets)) = run_voters_with(
        layout,
        scripts,
        &table,
        &timeline,
        clients_per_node,
        seed,
        seconds,
        |done| balancer(cluster, layout, &table, &timeline, done, rep),
    )?;
    let acquisitions = crate::bench_resp_cluster::acquisitions(cluster)? - acquisitions_before;
    let acquire = acquire_histogram(cluster)?.since(&acquire_before);
    let tallied = tally_and_check(&mut admin, layout, &results, timeline.buckets)?;
    let mut placement = Vec::new();
    for c in 0..layout.params.hot {
        let (owner, with_her) = look(
            &mut admin,
            &layout.total_key(c),
            &layout.popular_reactor_keys(c),
        )?;
        println!(
            "    rep {rep}, at the end: popular contestant {c} at node {}, {} of her {} voters' reactors with her",
            owner.map_or("none".to_owned(), |n| n.to_string()),
            with_her.0,
            with_her.1
        );
        placement.push(Placement { owner, with_her });
    }
    Ok(Run {
        elapsed,
        counted: tallied.counted,
        node_buckets: tallied.node_buckets,
        acquisitions_buckets,
        acquisitions,
        acquire,
        latency_ns: tallied.latency_ns,
        moves,
        placement,
        votes_checked: tallied.votes_checked,
        voters_checked: tallied.voters_checked,
    })
}

pub fn run(
    cluster: &LocalCluster,
    layout: &Arc<Layout>,
    scripts: &Scripts,
    args: &VoterArgs,
    sizes: Sizes,
    command: &str,
) -> anyhow::Result<()> {
    let Sizes {
        reactors,
        seconds,
        reps,
    } = sizes;
    let started = Instant::now();
    let mut runs = Vec::new();
    let s = per_second();
    for rep in 1..=reps {
        let run = run_once(
            cluster,
            layout,
            scripts,
            args.clients_per_node,
            seconds,
            u64::from(rep) << 16,
            rep,
        )?;
        let n = run.buckets();
        println!(
            "[{rep}/{reps} {:>5.0} s] {:>8.0} votes/s, {} balancer moves, the busiest node served {:.0}% of the votes in the first second and {:.0}% in the last two; the {} popular contestants ended at {} nodes; {} acquisitions (p99 <= {:.0} us); {} votes and {} voters checked",
            started.elapsed().as_secs_f64(),
            run.tps(),
            run.moves.len(),
            run.busiest_share(0, s) * 100.0,
            run.busiest_share(n.saturating_sub(2 * s), n) * 100.0,
            layout.params.hot,
            run.spread(),
            run.acquisitions,
            run.acquire.quantile_bound_us(0.99),
            run.votes_checked,
            run.voters_checked
        );
        runs.push(run);
    }
    let report = report(args, layout, reactors, seconds, command, &runs);
    let png = args.out.join(format!("{BENCHMARK}.png"));
    let charts = charts(layout, &runs);
    report.write_with_plot(&args.out, || {
        finish_png(render_figure_png(&charts, 1, &png), png.clone())
    })?;
    println!("{}", report.to_markdown());
    Ok(())
}

/// Seconds every run has.
fn seconds_of(runs: &[Run]) -> usize {
    runs.iter()
        .map(|r| r.buckets() / per_second())
        .min()
        .unwrap_or(0)
}

fn charts(layout: &Layout, runs: &[Run]) -> Vec<BarChart> {
    let s = per_second();
    let seconds = seconds_of(runs);
    let moved_in = |t: usize| {
        runs.first()
            .is_some_and(|r| r.moves.iter().any(|m| m.at_s.floor() as usize == t))
    };
    let by_node = BarChart {
        title: "Voter --balance, 3 nodes: votes per second sent to each node (balancer moved at *)"
            .to_owned(),
        y_label: "committed votes/s (median of runs)".to_owned(),
        categories: (0..seconds)
            .map(|t| format!("{t}s{}", if moved_in(t) { "*" } else { "" }))
            .collect(),
        series: layout
            .nodes
            .iter()
            .enumerate()
            .map(|(p, node)| BarSeries {
                name: format!("node {}", node.id),
                values: (0..seconds)
                    .map(|t| median(runs.iter().map(|r| r.node_rates(t * s, (t + 1) * s)[p])))
                    .collect(),
            })
            .collect(),
    };
    let latency = acquisition_chart(&all_acquires(runs.iter().map(|r| &r.acquire)));
    vec![by_node, latency]
}

fn report(
    args: &VoterArgs,
    layout: &Layout,
    reactors: u64,
    seconds: f64,
    command: &str,
    runs: &[Run],
) -> BenchReport {
    let params = &layout.params;
    let mut report = BenchReport::new(BENCHMARK, command);
    let clients = layout.nodes.len() as u32 * args.clients_per_node;
    let s = per_second();
    let med = |f: &dyn Fn(&Run) -> f64| median(runs.iter().map(f)).unwrap_or(0.0);
    let last_two = |r: &Run| r.busiest_share(r.buckets().saturating_sub(2 * s), r.buckets());
    let mut all = Row::new("roost", "all votes")
        .with_param("clients", clients)
        .with_param("popular_contestants", params.hot)
        .with_extra("runs", runs.len())
        .with_extra("balancer_moves_median", med(&|r| r.moves.len() as f64))
        .with_extra(
            "busiest_node_share_first_second_median",
            (med(&|r| r.busiest_share(0, s)) * 1000.0).round() / 1000.0,
        )
        .with_extra(
            "busiest_node_share_last_two_seconds_median",
            (med(&last_two) * 1000.0).round() / 1000.0,
        )
        .with_extra(
            "popular_contestants_nodes_at_end_median",
            med(&|r| r.spread() as f64),
        )
        .with_extra(
            "popular_voter_reactors_with_their_contestant_at_end_median",
            med(&|r| r.placement.iter().map(|p| p.with_her.0).sum::<usize>() as f64),
        )
        .with_extra(
            "popular_voter_reactors",
            runs.first().map_or(0, |r| {
                r.placement.iter().map(|p| p.with_her.1).sum::<usize>()
            }),
        )
        .with_extra(
            "votes_checked",
            runs.iter().map(|r| r.votes_checked).sum::<u64>(),
        )
        .with_extra(
            "voter_counts_checked",
            runs.iter().map(|r| r.voters_checked as u64).sum::<u64>(),
        );
    all.throughput_tps = med(&|r| r.tps()).round();
    all.latency_us =
        LatencyUs::from_histogram_ns(&merged_latencies(runs.iter().map(|r| &r.latency_ns)));
    report.rows.push(all);
    let per_run: Vec<(u64, f64)> = runs.iter().map(|r| (r.acquisitions, r.elapsed)).collect();
    report.rows.push(acquisition_row(
        clients,
        &per_run,
        &all_acquires(runs.iter().map(|r| &r.acquire)),
    ));
    for (i, r) in runs.iter().enumerate() {
        for m in &r.moves {
            let what = m.contestant.map_or("not a contestant".to_owned(), |c| {
                if c < params.hot {
                    format!("popular contestant {c}")
                } else {
                    format!("contestant {c}")
                }
            });
            let row = Row::new("roost", "balancer move")
                .with_param("run", i as u64 + 1)
                .with_param("at_s", round1(m.at_s))
                .with_extra("what", what)
                .with_extra("from_to", format!("node {} -> node {}", m.from, m.to))
                .with_extra("requests_in_window", m.requests);
            report.rows.push(row);
        }
        for (c, p) in r.placement.iter().enumerate() {
            let row = Row::new("roost", "placement at the end")
                .with_param("run", i as u64 + 1)
                .with_param("popular_contestant", c as u64)
                .with_extra(
                    "node",
                    p.owner.map_or("unknown".to_owned(), |n| n.to_string()),
                )
                .with_extra("voter_reactors_with_her", p.with_her.0)
                .with_extra("voter_reactors", p.with_her.1);
            report.rows.push(row);
        }
    }
    for t in 0..seconds_of(runs) {
        let rates = |r: &Run| r.node_rates(t * s, (t + 1) * s);
        let mut row = Row::new("roost", "timeline")
            .with_param("second", t as u64)
            .with_extra(
                "votes_per_s_by_node",
                (0..layout.nodes.len())
                    .map(|p| med(&|r| rates(r)[p]).round())
                    .collect::<Vec<f64>>(),
            )
            .with_extra(
                "busiest_node_share",
                (med(&|r| r.busiest_share(t * s, (t + 1) * s)) * 1000.0).round() / 1000.0,
            )
            .with_extra(
                "balancer_moves",
                med(&|r| {
                    r.moves
                        .iter()
                        .filter(|m| m.at_s.floor() as usize == t)
                        .count() as f64
                }),
            )
            .with_extra(
                "acquisitions",
                med(&|r| {
                    r.acquisitions_buckets[t * s..(t + 1) * s]
                        .iter()
                        .sum::<u64>() as f64
                }),
            );
        row.throughput_tps = med(&|r| rates(r).iter().sum::<f64>()).round();
        report.rows.push(row);
    }
    report.notes.push(format!(
        "The load balancer's experiment (issue 18, item 5) on Voter: 3 `roost node` processes on this machine, replication degree 3, in memory (`--sync memory`), {reactors} keyspace reactors. {} contestants, each her own reactor; the first {} are popular and all start at node {} (the others round robin over the nodes); {} voters per node in reactors of {}; {:.0}% of each node's voters vote only for a popular contestant (each reactor of them for one of her), every other voter for a non-popular contestant of its own node. A vote is one Lua script (EVALSHA) on the contestant's total and tally and the voter's count, sent to the node the client's router (`roost-client`) names for the contestant. {} client threads per node, closed loop; {} runs of {seconds} s after 1 s of warm-up, each from a reset state; medians of runs.",
        params.contestants,
        params.hot,
        layout.nodes[0].id,
        params.voters_per_node,
        params.voters_per_reactor,
        params.popular_fraction * 100.0,
        args.clients_per_node,
        runs.len()
    ));
    report.notes.push(format!(
        "Nothing in the harness says where anyone should be. The routers count the requests they route per reactor; every {} s the balancer (`Router::balance`, `roost_client::balance`) takes the last window's counts and moves routes off the busiest node while it serves over {:.0}% more than the mean, each move the reactor whose requests come nearest half the gap between the busiest and the idlest node and below it (so a hot reactor never just moves its heat), at most {} a plan, a moved reactor sitting out {} plans, and the {} plans after one that moved anything moving nothing (their windows measure the moves, not the load). A moved route sends the contestant's next vote to her new node, which takes her there (Zeus ownership) and, in the same transaction, the voter's reactor: her voters' reactors follow her, so reactors used together end up together. The routes also follow ownership (looks every 250 ms, settled after 1 s). Rows: `timeline`, the votes sent to each node per second and the busiest node's share; `balancer move`, each move of each run; `placement at the end`, `ROOST.OWNER` for each popular contestant and her voters' reactors after each run. After each run every total, tally and voter count is read back and compared with what the clients saw accepted.",
        BALANCE_EVERY.as_secs_f64(),
        roost_client::balance::IMBALANCE * 100.0,
        roost_client::balance::MAX_MOVES_PER_PLAN,
        roost_client::balance::COOL_DOWN_PLANS,
        roost_client::balance::SETTLE_PLANS
    ));
    report.notes.push("On this 2-core machine the three nodes and the clients share the cores, so a node serving most votes is not slower than three serving a third each: the balance shows in where the votes go (and in the spread of the popular contestants), not in the total throughput, which the moves' acquisitions lower while her voters follow her.".to_owned());
    report
}

//! `roost bench voter`: the Zeus seed's popular contestant (its Figure 12,
//! second experiment) on a three-node cluster: votes run where their
//! contestant is, and the popular contestant moves to the next node three
//! times while every client keeps voting; her voters' reactors follow her
//! (`roost_bench::voter` has the workload). Throughput over time, the
//! ownership acquisitions and their latency (the nodes'
//! `roost_ownership_acquire_seconds`), every total and count checked.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use hdrhistogram::Histogram;
use roost_bench::cluster_load::{merged_latencies, run_window};
use roost_bench::plot::{finish_png, render_figure_png, BarChart, BarSeries};
use roost_bench::results::{median, BenchReport, LatencyUs, Row};
use roost_bench::voter::{self, Layout, Params, PromHistogram, Scripts, Timeline, POPULAR};
use roost_client::{RouteTable, Router};
use roost_cluster::local_cluster::LocalCluster;

use crate::bench_smallbank::{start_tagged_cluster, TaggedCluster};

const BENCHMARK: &str = "voter";
const NODES: u32 = 3;
/// Throughput-over-time buckets.
pub(crate) const BUCKET: Duration = Duration::from_millis(250);
/// The moves, as sevenths of the window (2, 6 and 10 s of 14, as the seed).
const MOVES_AT_SEVENTHS: [f64; 3] = [1.0, 3.0, 5.0];
/// Longer than any run: routes move only when the mover says.
const ROUTE_SETTLE: Duration = Duration::from_secs(3_600);
/// The nodes' acquisition latency histogram.
const ACQUIRE_HISTOGRAM: &str = "roost_ownership_acquire_seconds";

#[derive(Debug, Args)]
pub struct VoterArgs {
    /// About 30 s: 1 repetition of 7 s, 2,000 voters per node.
    #[arg(long)]
    pub quick: bool,
    /// Directory for voter.json, voter.md and voter.png.
    #[arg(long, value_name = "DIR", default_value = "bench/results")]
    pub out: PathBuf,
    /// Client threads per node.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub clients_per_node: u32,
    /// Contestants (each her own reactor, round robin over the nodes); the
    /// first is the popular one.
    #[arg(long, default_value_t = 20)]
    pub contestants: u32,
    /// Voters per node (default 20,000; --quick 2,000).
    #[arg(long)]
    pub voters: Option<u64>,
    /// Voters per reactor (a node's voters are grouped).
    #[arg(long, default_value_t = 10)]
    pub voters_per_reactor: u64,
    /// Share of each node's voters that vote only for the popular
    /// contestant (in reactors of their own); default 0.1, with --balance
    /// 0.6 (split among the popular contestants).
    #[arg(long)]
    pub popular: Option<f64>,
    /// Votes a voter may cast (BenchBase's limit); more are refused.
    #[arg(long, default_value_t = 1000)]
    pub max_votes: u64,
    /// Keyspace reactors (at least the contestants and groups of voters of
    /// each node on each).
    #[arg(long)]
    pub reactors: Option<u64>,
    /// Measured seconds per run (after one second of warm-up); the popular
    /// contestant moves at 1/7, 3/7 and 5/7 of it (default 14; --quick 7).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Repetitions (each from a reset state).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub reps: Option<u32>,
    /// The load balancer's experiment instead (voter_balance.json, .md,
    /// .png): the popular contestants (--hot) all start at the first node,
    /// and the clients' `Router::balance` spreads them by load.
    #[arg(long)]
    pub balance: bool,
    /// Popular contestants, with --balance.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub hot: u32,
    /// A planted bug (the harness's own test): `skip-voter-count`, the
    /// vote does not count the voter's vote.
    #[arg(long, hide = true, value_parser = ["skip-voter-count"])]
    pub planted: Option<String>,
}

/// One move of the popular contestant.
#[derive(Debug, Clone)]
struct Move {
    /// Window time of the write at the destination (s).
    at_s: f64,
    from: u32,
    to: u32,
    /// The write's round trip (µs): the acquisition it waited for.
    write_us: f64,
    /// The owner `ROOST.OWNER` named just before the next move (or at the
    /// window's end).
    owner_later: Option<u32>,
    /// Then: the popular voters' reactors at her node, of all.
    followers_later: (usize, usize),
}

/// One run.
struct Run {
    elapsed: f64,
    counted: u64,
    rejected: u64,
    popular_buckets: Vec<u64>,
    other_buckets: Vec<u64>,
    /// Acquisitions (all nodes) per bucket.
    acquisitions_buckets: Vec<u64>,
    acquisitions: u64,
    acquire: PromHistogram,
    latency_ns: Histogram<u64>,
    moves: Vec<Move>,
    votes_checked: u64,
    voters_checked: usize,
}

impl Run {
    fn tps(&self) -> f64 {
        self.counted as f64 / self.elapsed
    }

    /// Votes per second (popular, all) over buckets `range`.
    fn rate(&self, from: usize, to: usize) -> (f64, f64) {
        let to = to.min(self.popular_buckets.len());
        if from >= to {
            return (0.0, 0.0);
        }
        let seconds = (to - from) as f64 * BUCKET.as_secs_f64();
        let popular: u64 = self.popular_buckets[from..to].iter().sum();
        let other: u64 = self.other_buckets[from..to].iter().sum();
        (popular as f64 / seconds, (popular + other) as f64 / seconds)
    }
}

/// The nodes' acquisition latency histograms, summed.
pub(crate) fn acquire_histogram(cluster: &LocalCluster) -> anyhow::Result<PromHistogram> {
    let mut sum = PromHistogram::default();
    for node in 0..cluster.nodes() {
        let (code, body) = cluster
            .admin(node, "/metrics", Duration::from_secs(5))
            .context("reading /metrics")?;
        anyhow::ensure!(code == 200, "node {node}'s /metrics answered {code}");
        let h = PromHistogram::parse(&body, ACQUIRE_HISTOGRAM)
            .with_context(|| format!("node {node} reports no {ACQUIRE_HISTOGRAM}"))?;
        sum.add(&h).map_err(anyhow::Error::msg)?;
    }
    Ok(sum)
}

fn owner_of(router: &mut Router, key: &str) -> anyhow::Result<Option<u32>> {
    Ok(router.owners(&[key.as_bytes()])?[0].node)
}

/// Where she is, and how many of `followers` (keys) are there too.
pub(crate) fn look(
    router: &mut Router,
    key: &str,
    followers: &[String],
) -> anyhow::Result<(Option<u32>, (usize, usize))> {
    let owner = owner_of(router, key)?;
    let mut with_her = 0;
    for chunk in followers.chunks(roost_client::MAX_KEYS_PER_LOOK) {
        let keys: Vec<&[u8]> = chunk.iter().map(|k| k.as_bytes()).collect();
        with_her += router
            .owners(&keys)?
            .iter()
            .filter(|o| o.node.is_some() && o.node == owner)
            .count();
    }
    Ok((owner, (with_her, followers.len())))
}

/// The popular contestant's moves, during the window: at each bucket's end
/// the acquisitions so far are sampled; at the buckets in `move_at` she is
/// written at the next node (with its anchor: `voter::take`), which takes
/// her, and the clients' routes are told.
#[allow(clippy::too_many_arguments)]
fn mover(
    cluster: &LocalCluster,
    layout: &Layout,
    scripts: &Scripts,
    table: &Arc<RouteTable>,
    timeline: &Timeline,
    move_at: &[usize],
    done: &AtomicBool,
    rep: u32,
) -> anyhow::Result<(Vec<Move>, Vec<u64>)> {
    let nodes = &layout.nodes;
    let mut router = Router::new(nodes.clone(), Arc::clone(table));
    let total = layout.total_key(POPULAR);
    let mut at = layout.contestant_home(POPULAR);
    let followers = layout.popular_reactor_keys(POPULAR);
    let mut moves: Vec<Move> = Vec::new();
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
    let mut last = crate::bench_resp_cluster::acquisitions(cluster)?;
    for k in 1..=timeline.buckets {
        let tick = origin + BUCKET * k as u32;
        while Instant::now() < tick && !done.load(Ordering::Relaxed) {
            std::thread::sleep((tick - Instant::now()).min(Duration::from_millis(20)));
        }
        let now = crate::bench_resp_cluster::acquisitions(cluster)?;
        acquisitions[k - 1] = now - last;
        last = now;
        if !move_at.contains(&k) || done.load(Ordering::Relaxed) {
            continue;
        }
        if let Some(previous) = moves.last_mut() {
            (previous.owner_later, previous.followers_later) =
                look(&mut router, &total, &followers)?;
            print_look(rep, previous);
        }
        let (from, to) = (at, (at + 1) % nodes.len());
        let to_id = nodes[to].id;
        let at_s = origin.elapsed().as_secs_f64();
        let started = Instant::now();
        voter::take(&mut router, scripts, layout, POPULAR, to)
            .context("moving the popular contestant")?;
        let write_us = started.elapsed().as_secs_f64() * 1e6;
        router.moved(total.as_bytes(), to_id)?;
        println!(
            "    rep {rep}, {at_s:>5.2} s: the popular contestant written at node {to_id} (from node {}) in {:.0} us",
            nodes[from].id, write_us
        );
        moves.push(Move {
            at_s,
            from: nodes[from].id,
            to: to_id,
            write_us,
            owner_later: None,
            followers_later: (0, 0),
        });
        at = to;
    }
    if let Some(previous) = moves.last_mut() {
        (previous.owner_later, previous.followers_later) = look(&mut router, &total, &followers)?;
        print_look(rep, previous);
    }
    Ok((moves, acquisitions))
}

fn print_look(rep: u32, m: &Move) {
    println!(
        "    rep {rep}, later: ROOST.OWNER names node {} for her (moved to node {}), {} of her {} voters' reactors with her",
        m.owner_later.map_or("none".to_owned(), |n| n.to_string()),
        m.to,
        m.followers_later.0,
        m.followers_later.1
    );
}

#[allow(clippy::too_many_arguments)]
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
    let move_at: Vec<usize> = MOVES_AT_SEVENTHS
        .iter()
        .map(|s| ((seconds * s / 7.0) / BUCKET.as_secs_f64()).round() as usize)
        .filter(|&k| k >= 1 && k < timeline.buckets)
        .collect();
    let acquire_before = acquire_histogram(cluster)?;
    let acquisitions_before = crate::bench_resp_cluster::acquisitions(cluster)?;
    // The routes move when the mover says (`Router::moved`), not when a
    // look finds her elsewhere: a vote sent to her old node before the move
    // can take her back there for a moment (until that node yields her,
    // `roost_node::forward`), and a route that followed would send her votes
    // back with it. Nothing else in this workload moves.
    let table = RouteTable::with_settle(ROUTE_SETTLE);
    let (results, elapsed, moved) = run_voters_with(
        layout,
        scripts,
        &table,
        &timeline,
        clients_per_node,
        seed,
        seconds,
        |done| {
            mover(
                cluster, layout, scripts, &table, &timeline, &move_at, done, rep,
            )
        },
    )?;
    let (moves, acquisitions_buckets) = moved;
    let acquisitions = crate::bench_resp_cluster::acquisitions(cluster)? - acquisitions_before;
    let acquire = acquire_histogram(cluster)?.since(&acquire_before);
    let tallied = tally_and_check(&mut admin, layout, &results, timeline.buckets)?;
    anyhow::ensure!(
        moves.len() == move_at.len(),
        "{} of {} moves of the popular contestant were made",
        moves.len(),
        move_at.len()
    );
    for (i, m) in moves.iter().enumerate() {
        anyhow::ensure!(
            m.owner_later == Some(m.to),
            "move {} of the popular contestant (node {} to node {}) did not hold: ROOST.OWNER later named {:?}",
            i + 1,
            m.from,
            m.to,
            m.owner_later
        );
    }
    Ok(Run {
        elapsed,
        counted: tallied.counted,
        rejected: tallied.rejected,
        popular_buckets: tallied.popular_buckets,
        other_buckets: tallied.other_buckets,
        acquisitions_buckets,
        acquisitions,
        acquire,
        latency_ns: tallied.latency_ns,
        moves,
        votes_checked: tallied.votes_checked,
        voters_checked: tallied.voters_checked,
    })
}

/// Runs the voters' clients over `table` for a window
/// ([`run_window`]), with `beside` on a thread of its own until they stop
/// (it sees `done` set then); the clients' results, the window's seconds
/// and what `beside` returned.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_voters_with<T: Send>(
    layout: &Arc<Layout>,
    scripts: &Scripts,
    table: &Arc<RouteTable>,
    timeline: &Arc<Timeline>,
    clients_per_node: u32,
    seed: u64,
    seconds: f64,
    beside: impl FnOnce(&AtomicBool) -> anyhow::Result<T> + Send,
) -> anyhow::Result<(Vec<voter::ClientResult>, f64, T)> {
    let done = AtomicBool::new(false);
    let (window, besides) = std::thread::scope(|s| {
        let besides = s.spawn(|| beside(&done));
        let window = {
            let (layout, scripts, timeline) =
                (Arc::clone(layout), scripts.clone(), Arc::clone(timeline));
            run_window(
                &layout.nodes.clone(),
                table,
                clients_per_node,
                seed,
                seconds,
                move |mut c| {
                    let voters = voter::client_voters(
                        &layout,
                        c.node,
                        u64::from(c.index),
                        u64::from(clients_per_node),
                    );
                    voter::run_client(
                        &mut c.router,
                        &scripts,
                        &layout,
                        c.node,
                        voters,
                        c.seed,
                        &c.stop,
                        &c.counting,
                        &timeline,
                    )
                },
            )
        };
        done.store(true, Ordering::Relaxed);
        let besides = besides
            .join()
            .map_err(|_| anyhow::anyhow!("the thread beside the clients panicked"));
        (window, besides)
    });
    let (results, elapsed) = window?;
    Ok((results, elapsed, besides??))
}

/// A run's clients' counts, summed, and checked against the database.
pub(crate) struct Tallied {
    pub counted: u64,
    pub rejected: u64,
    pub popular_buckets: Vec<u64>,
    pub other_buckets: Vec<u64>,
    /// Per node position.
    pub node_buckets: Vec<Vec<u64>>,
    pub latency_ns: Histogram<u64>,
    pub votes_checked: u64,
    pub voters_checked: usize,
}

/// Sums the clients' results (failing if one failed) and checks every
/// total, tally and voter count against them: checked, not assumed.
pub(crate) fn tally_and_check(
    admin: &mut Router,
    layout: &Layout,
    results: &[voter::ClientResult],
    buckets: usize,
) -> anyhow::Result<Tallied> {
    let latency_ns = merged_latencies(results.iter().map(|r| &r.latency_ns));
    let errors: Vec<&String> = results.iter().filter_map(|r| r.error.as_ref()).collect();
    anyhow::ensure!(
        errors.is_empty(),
        "{} clients failed: {}",
        errors.len(),
        errors[0]
    );
    let contestants = layout.params.contestants as usize;
    let mut by_contestant = vec![0u64; contestants];
    let mut popular_buckets = vec![0u64; buckets];
    let mut other_buckets = vec![0u64; buckets];
    let mut node_buckets = vec![vec![0u64; buckets]; layout.nodes.len()];
    let (mut counted, mut accepted, mut rejected) = (0, 0, 0);
    let mut voters = Vec::new();
    for r in results {
        for (sum, n) in by_contestant.iter_mut().zip(&r.by_contestant) {
            *sum += n;
        }
        for (sum, n) in popular_buckets.iter_mut().zip(&r.popular_buckets) {
            *sum += n;
        }
        for (sum, n) in other_buckets.iter_mut().zip(&r.other_buckets) {
            *sum += n;
        }
        for (sums, ns) in node_buckets.iter_mut().zip(&r.node_buckets) {
            for (sum, n) in sums.iter_mut().zip(ns) {
                *sum += n;
            }
        }
        counted += r.counted();
        accepted += r.accepted;
        rejected += r.rejected;
        voters.extend_from_slice(&r.voters);
    }
    // Checked, not assumed: every total, tally and voter count is what the
    // clients saw accepted.
    let checked = voter::check(admin, layout, &by_contestant, &voters)?;
    anyhow::ensure!(
        checked.wrong_voters == 0,
        "{} of {} voters' counts are not what their clients counted; first: {}",
        checked.wrong_voters,
        checked.voters,
        checked.first.as_deref().unwrap_or_default()
    );
    anyhow::ensure!(
        checked.wrong_totals == 0 && checked.wrong_tallies == 0 && checked.votes == accepted,
        "{} of {contestants} contestants' totals and {} of their tallies are not the votes the clients saw accepted ({} in the totals, {accepted} accepted); first: {}",
        checked.wrong_totals,
        checked.wrong_tallies,
        checked.votes,
        checked.first.as_deref().unwrap_or_default()
    );
    Ok(Tallied {
        counted,
        rejected,
        popular_buckets,
        other_buckets,
        node_buckets,
        latency_ns,
        votes_checked: checked.votes,
        voters_checked: checked.voters,
    })
}

pub fn run(args: &VoterArgs, command: &str) -> anyhow::Result<()> {
    let (voters, seconds, reps) = if args.quick {
        (2_000, 7.0, 1)
    } else {
        (20_000, 14.0, 3)
    };
    let params = Params {
        contestants: args.contestants,
        voters_per_node: args.voters.unwrap_or(voters),
        voters_per_reactor: args.voters_per_reactor,
        popular_fraction: args.popular.unwrap_or(if args.balance { 0.6 } else { 0.1 }),
        max_votes: args.max_votes,
        hot: if args.balance { args.hot } else { 1 },
        hot_together: args.balance,
    };
    let seconds = args.seconds.unwrap_or(seconds);
    let reps = args.reps.unwrap_or(reps);
    anyhow::ensure!(
        seconds.is_finite() && (1.0..=600.0).contains(&seconds),
        "--seconds {seconds}: in [1, 600]"
    );
    if let Some(why) = params.invalid(NODES as usize) {
        anyhow::bail!(why);
    }
    anyhow::ensure!(
        params.voters_per_node <= 1_000_000,
        "--voters {}: at most 1,000,000 per node",
        params.voters_per_node
    );
    // Every contestant may start at one node (--balance).
    let per_node = u64::from(params.contestants)
        + params
            .popular_per_node()
            .div_ceil(params.voters_per_reactor)
        + (params.voters_per_node - params.popular_per_node()).div_ceil(params.voters_per_reactor);
    // Room for every node's objects, whatever the rendezvous hashing gives
    // each node: about twice the need.
    let reactors = args
        .reactors
        .unwrap_or((per_node * u64::from(NODES) * 2).next_power_of_two());
    println!(
        "voter{}: {NODES} nodes, {reactors} reactors, {} contestants ({} popular), {} voters per node ({} per reactor, {:.0}% vote for the popular contestants), at most {} votes each, {} clients per node; {reps} runs of {seconds} s",
        if args.balance { " --balance" } else { "" },
        params.contestants,
        params.hot,
        params.voters_per_node,
        params.voters_per_reactor,
        params.popular_fraction * 100.0,
        params.max_votes,
        args.clients_per_node
    );
    let dir = std::env::temp_dir().join(format!("roost-bench-voter-{}", std::process::id()));
    // Declared before the cluster, so dropped after its nodes stopped.
    let _remove = RemoveOnDrop(dir.clone());
    let TaggedCluster {
        cluster,
        nodes,
        mut admin,
        owned,
    } = start_tagged_cluster(NODES, reactors, dir, "memory", true)?;
    let layout = Arc::new(Layout::new(params, nodes.clone(), owned).map_err(anyhow::Error::msg)?);
    let mut scripts = Scripts::load(&mut admin)?;
    scripts.bugs.skip_voter_count = args.planted.as_deref() == Some("skip-voter-count");
    if args.balance {
        let sizes = crate::bench_voter_balance::Sizes {
            reactors,
            seconds,
            reps,
        };
        return crate::bench_voter_balance::run(&cluster, &layout, &scripts, args, sizes, command);
    }
    let started = Instant::now();
    let mut runs = Vec::new();
    for rep in 1..=reps {
        let run = run_once(
            &cluster,
            &layout,
            &scripts,
            args.clients_per_node,
            seconds,
            u64::from(rep) << 16,
            rep,
        )?;
        println!(
            "[{rep}/{reps} {:>5.0} s] {:>8.0} votes/s ({:.0} for the popular contestant), {} moves, {} acquisitions (p99 <= {:.0} us), vote p50 {:.0} us p99 {:.0} us, {} refused; {} votes and {} voters checked",
            started.elapsed().as_secs_f64(),
            run.tps(),
            run.popular_buckets.iter().sum::<u64>() as f64 / run.elapsed,
            run.moves.len(),
            run.acquisitions,
            run.acquire.quantile_bound_us(0.99),
            run.latency_ns.value_at_quantile(0.5) as f64 / 1e3,
            run.latency_ns.value_at_quantile(0.99) as f64 / 1e3,
            run.rejected,
            run.votes_checked,
            run.voters_checked
        );
        runs.push(run);
    }
    drop(cluster);
    let report = report(args, &layout.params, reactors, seconds, command, &runs);
    let png = args.out.join(format!("{BENCHMARK}.png"));
    let charts = charts(&runs);
    report.write_with_plot(&args.out, || {
        finish_png(render_figure_png(&charts, 1, &png), png.clone())
    })?;
    println!("{}", report.to_markdown());
    Ok(())
}

/// The cluster's directory (its etcd data, logs) and configuration file,
/// removed when the run ends, however it ends.
pub(crate) struct RemoveOnDrop(pub PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        let _ = std::fs::remove_file(self.0.with_extension("resp.toml"));
    }
}

pub(crate) fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Buckets per second.
pub(crate) fn per_second() -> usize {
    (1.0 / BUCKET.as_secs_f64()).round() as usize
}

/// Acquisition histograms (of every run), summed.
pub(crate) fn all_acquires<'a>(each: impl Iterator<Item = &'a PromHistogram>) -> PromHistogram {
    let mut sum = PromHistogram::default();
    for h in each {
        let _ = sum.add(h);
    }
    sum
}

/// The acquisitions by latency bucket, as a share of all.
pub(crate) fn acquisition_chart(acquires: &PromHistogram) -> BarChart {
    let per_bucket = acquires.per_bucket();
    let first = per_bucket.iter().position(|&n| n > 0).unwrap_or(0);
    let last = per_bucket.iter().rposition(|&n| n > 0).unwrap_or(0);
    let total = acquires.cumulative.last().copied().unwrap_or(0).max(1) as f64;
    BarChart {
        title: "Ownership acquisitions by latency, up to each bucket's bound (all nodes, all runs)"
            .to_owned(),
        y_label: "% of acquisitions".to_owned(),
        categories: acquires.le_s[first..=last]
            .iter()
            .map(|&le| bound_label(le))
            .collect(),
        series: vec![BarSeries {
            name: format!("{} acquisitions", acquires.count),
            values: per_bucket[first..=last]
                .iter()
                .map(|&n| Some(n as f64 / total * 100.0))
                .collect(),
        }],
    }
}

/// The row of the acquisitions: `per_run` (count, seconds) of each run,
/// `acquires` their latency histograms summed.
pub(crate) fn acquisition_row(
    clients: u32,
    per_run: &[(u64, f64)],
    acquires: &PromHistogram,
) -> Row {
    let med = |f: &dyn Fn(&(u64, f64)) -> f64| median(per_run.iter().map(f)).unwrap_or(0.0);
    let mut acq = Row::new("roost", "ownership acquisition")
        .with_param("clients", clients)
        .with_extra("acquisitions_median", med(&|r| r.0 as f64))
        .with_extra("acquisitions_timed", acquires.count)
        .with_extra("percentiles_are", "bucket upper bounds");
    acq.throughput_tps = med(&|r| r.0 as f64 / r.1).round();
    acq.latency_us = LatencyUs {
        mean: round1(acquires.mean_us()),
        p50: acquires.quantile_bound_us(0.5),
        p99: acquires.quantile_bound_us(0.99),
        p999: acquires.quantile_bound_us(0.999),
    };
    acq
}

/// A bucket's upper bound, short: "25us", "1.6ms", "205ms", "more".
fn bound_label(le_s: f64) -> String {
    if le_s.is_infinite() {
        return "more".to_owned();
    }
    let us = (le_s * 1e6).round() as u64;
    if us >= 100_000 {
        format!("{}ms", (us as f64 / 1e3).round())
    } else if us >= 1_000 {
        format!("{}ms", us as f64 / 1e3)
    } else {
        format!("{us}us")
    }
}

fn charts(runs: &[Run]) -> Vec<BarChart> {
    let seconds = runs
        .iter()
        .map(|r| r.popular_buckets.len() / per_second())
        .min()
        .unwrap_or(0);
    let median_rate = |s: usize, popular: bool| {
        median(runs.iter().map(|r| {
            let (p, all) = r.rate(s * per_second(), (s + 1) * per_second());
            if popular {
                p
            } else {
                all - p
            }
        }))
    };
    let moves = runs.first().map(|r| r.moves.clone()).unwrap_or_default();
    let throughput = BarChart {
        title: "Voter, 3 nodes: votes per second over time (popular contestant moved at *)"
            .to_owned(),
        y_label: "committed votes/s (median of runs)".to_owned(),
        categories: (0..seconds)
            .map(|s| {
                let moved = moves.iter().any(|m| m.at_s.floor() as usize == s);
                format!("{s}s{}", if moved { "*" } else { "" })
            })
            .collect(),
        series: vec![
            BarSeries {
                name: "other contestants".to_owned(),
                values: (0..seconds).map(|s| median_rate(s, false)).collect(),
            },
            BarSeries {
                name: "popular contestant".to_owned(),
                values: (0..seconds).map(|s| median_rate(s, true)).collect(),
            },
        ],
    };
    let latency = acquisition_chart(&all_acquires(runs.iter().map(|r| &r.acquire)));
    vec![throughput, latency]
}

fn report(
    args: &VoterArgs,
    params: &Params,
    reactors: u64,
    seconds: f64,
    command: &str,
    runs: &[Run],
) -> BenchReport {
    let mut report = BenchReport::new(BENCHMARK, command);
    let clients = NODES * args.clients_per_node;
    let med = |f: &dyn Fn(&Run) -> f64| median(runs.iter().map(f)).unwrap_or(0.0);
    let tps = med(&|r| r.tps());
    let popular_tps = med(&|r| r.popular_buckets.iter().sum::<u64>() as f64 / r.elapsed);
    let mut all = Row::new("roost", "all votes")
        .with_param("clients", clients)
        .with_extra("runs", runs.len())
        .with_extra("popular_votes_per_s", popular_tps.round())
        .with_extra("moves_per_run", med(&|r| r.moves.len() as f64))
        .with_extra("refused_median", med(&|r| r.rejected as f64))
        .with_extra(
            "votes_checked",
            runs.iter().map(|r| r.votes_checked).sum::<u64>(),
        )
        .with_extra(
            "voter_counts_checked",
            runs.iter().map(|r| r.voters_checked as u64).sum::<u64>(),
        );
    all.throughput_tps = tps.round();
    all.latency_us =
        LatencyUs::from_histogram_ns(&merged_latencies(runs.iter().map(|r| &r.latency_ns)));
    report.rows.push(all);
    let per_run: Vec<(u64, f64)> = runs.iter().map(|r| (r.acquisitions, r.elapsed)).collect();
    report.rows.push(acquisition_row(
        clients,
        &per_run,
        &all_acquires(runs.iter().map(|r| &r.acquire)),
    ));
    // Each move: throughput in the second before, the first second after
    // and the next.
    let s = per_second();
    let moves = runs.iter().map(|r| r.moves.len()).min().unwrap_or(0);
    for i in 0..moves {
        let around = |r: &Run, from: isize, to: isize| {
            let k = (r.moves[i].at_s / BUCKET.as_secs_f64()).round() as isize;
            r.rate(
                (k + from * s as isize).max(0) as usize,
                (k + to * s as isize).max(0) as usize,
            )
        };
        let first = &runs[0].moves[i];
        let mut row = Row::new("roost", &format!("move {}", i + 1))
            .with_param("at_s", round1(first.at_s))
            .with_param("clients", clients)
            .with_extra(
                "from_to",
                format!("node {} -> node {}", first.from, first.to),
            )
            .with_extra("tps_second_before", med(&|r| around(r, -1, 0).1).round())
            .with_extra("tps_second_after", med(&|r| around(r, 1, 2).1).round())
            .with_extra(
                "popular_tps_before_first_after",
                vec![
                    med(&|r| around(r, -1, 0).0).round(),
                    med(&|r| around(r, 0, 1).0).round(),
                    med(&|r| around(r, 1, 2).0).round(),
                ],
            )
            .with_extra(
                "acquisitions_in_2s_after",
                med(&|r| {
                    let k = (r.moves[i].at_s / BUCKET.as_secs_f64()).round() as usize;
                    let end = (k + 2 * s).min(r.acquisitions_buckets.len());
                    r.acquisitions_buckets[k.min(end)..end].iter().sum::<u64>() as f64
                }),
            )
            .with_extra(
                "move_write_us_median",
                med(&|r| r.moves[i].write_us).round(),
            )
            .with_extra(
                "owner_held",
                runs.iter()
                    .all(|r| r.moves[i].owner_later == Some(r.moves[i].to)),
            )
            .with_extra(
                "popular_reactors_with_her_later_median",
                med(&|r| r.moves[i].followers_later.0 as f64),
            )
            .with_extra("popular_reactors", first.followers_later.1)
            .with_extra(
                "popular_votes_per_250ms_from_-0.5s",
                (-2..6)
                    .map(|d| {
                        med(&|r| {
                            let k = (r.moves[i].at_s / BUCKET.as_secs_f64()).round() as isize + d;
                            usize::try_from(k)
                                .ok()
                                .and_then(|k| r.popular_buckets.get(k))
                                .map_or(0.0, |&n| n as f64)
                        })
                    })
                    .collect::<Vec<f64>>(),
            );
        row.throughput_tps = med(&|r| around(r, 0, 1).1).round();
        report.rows.push(row);
    }
    // The timeline, per second.
    let seconds_n = runs
        .iter()
        .map(|r| r.popular_buckets.len() / s)
        .min()
        .unwrap_or(0);
    for t in 0..seconds_n {
        let mut row = Row::new("roost", "timeline")
            .with_param("second", t as u64)
            .with_extra(
                "popular_tps",
                med(&|r| r.rate(t * s, (t + 1) * s).0).round(),
            )
            .with_extra(
                "acquisitions",
                med(&|r| {
                    r.acquisitions_buckets[t * s..(t + 1) * s]
                        .iter()
                        .sum::<u64>() as f64
                }),
            );
        if let Some(m) = runs[0]
            .moves
            .iter()
            .position(|m| m.at_s.floor() as usize == t)
        {
            row = row.with_extra("event", format!("move {}", m + 1));
        }
        row.throughput_tps = med(&|r| r.rate(t * s, (t + 1) * s).1).round();
        report.rows.push(row);
    }
    report.notes.push(format!(
        "Voter, the Zeus seed's popular contestant (Figure 12, second experiment): 3 `roost node` processes on this machine, replication degree 3, in memory (`--sync memory`), {reactors} keyspace reactors. {} contestants, each her own reactor (her total and a per-state tally hash, BenchBase's votes by contestant and state), round robin over the nodes; {} voters per node in reactors of {} voters of their node; {:.0}% of each node's voters (in reactors of their own) vote only for the popular contestant, every other voter for a contestant of its own node. A vote is one Lua script (EVALSHA): refused if the voter has cast {} votes, else the voter's count, the contestant's total and her tally incremented; it runs at the node the client's router (`roost-client`) names for the contestant, so her voters' reactors move to her. {} client threads per node (each with its own voters), closed loop.",
        params.contestants,
        params.voters_per_node,
        params.voters_per_reactor,
        params.popular_fraction * 100.0,
        params.max_votes,
        args.clients_per_node
    ));
    report.notes.push(format!(
        "Each run: every total, tally and count reset (the popular voters' at the popular contestant's node), 1 s warm-up, {seconds} s measured; at {} s of the window the popular contestant is written at the next node (a script at its RESP port: `INCRBY <total> 0` together with a key of a reactor that node owns and nothing else uses, so the node runs it itself and takes her, where a write on her alone would be shipped to her owner by a node that lost her within its hold, `roost_node::forward`), and the clients' shared route table is told at once (`Router::moved`); `ROOST.OWNER` is asked just before the next move (and at the end) and must name that node, and says how many of her voters' reactors are there too. Her voters' reactors follow her on their next vote; the rest of the load continues. {} runs; medians of runs. Rows: `move k`, throughput in the first second after the move, with the second before and the second after that, her votes per 250 ms from 0.5 s before, and the acquisitions in the 2 s after; `timeline`, each second of the window. After each run every total and tally is read back and compared with the votes the clients saw accepted, and every voter's count with what its client counted (and the limit).",
        MOVES_AT_SEVENTHS
            .iter()
            .map(|m| format!("{:.2}", seconds * m / 7.0))
            .collect::<Vec<_>>()
            .join(", "),
        runs.len()
    ));
    report.notes.push("Routes: the clients' routers share a route table whose routes move only when the mover says so (its settle time is longer than a run; nothing else in this workload moves). In a trial run with the routes left to follow ownership (the default: a route moves once looks have found the reactor at another node for 1 s) and a plain `INCRBY` at the new node, the first move did not hold: votes still routed to her old node, which owns her voters' reactors, took her back at once, and the routes never saw her settle at the new node. With the routes told at once, such a vote can still take her back for a moment; the new node then holds off and ships her votes to the old one until it yields her (`roost_node::forward`), and the check above must find her at the new node.".to_owned());
    report.notes.push(format!(
        "Ownership acquisitions are the nodes' `roost_ownership_acquires_total` during each run (warm-up included; the voters' reactors following her and her own moves); their latency is the nodes' `{ACQUIRE_HISTOGRAM}` histogram (time from an acquisition's first request to its successful outcome, retries included; buckets doubling from 25 us), summed over the nodes and runs: the mean is exact, the percentiles are the upper bounds of the buckets that hold them. An acquisition is counted per transaction that waited for one (two votes waiting for one reactor count twice). Her voters follow her at the rate they vote ({:.1} votes/s per popular voters' reactor here), not at the rate ownership could move them. The seed reports a 29 us mean and an 83 us p99.9 on RDMA-class hardware with one worker moving 25k objects/s; these nodes share 2 cores with the clients over loopback TCP."
    ,
        popular_tps / (u64::from(NODES) * params.popular_per_node().div_ceil(params.voters_per_reactor)) as f64
    ));
    report
}

//! `roost bench smallbank`: the Zeus seed's Figure 9 on Smallbank (the
//! FaSST/DrTM flavour): throughput against the fraction of transactions
//! that touch two partitions, Roost (ownership moves the remote account
//! to the transaction) against static sharding with two-phase commit and
//! perfect sharding, on one three-node cluster in one run, the systems
//! interleaved (`roost_bench::smallbank` has the workload and the three
//! ways of running it).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use hdrhistogram::Histogram;
use roost_bench::cluster_load::{merged_latencies, run_window};
use roost_bench::plot::finish_png;
use roost_bench::progress::Progress;

use crate::remote_sweep::{self, break_even_note, median_tps, round2, SweepCell};
use roost_bench::results::{median, BenchReport, LatencyUs, Row};
use roost_bench::smallbank::{self, Layout, Params, Partitions, Scripts, System};
use roost_client::{NodeAddr, RouteTable, Router};
use roost_cluster::local_cluster::LocalCluster;

const BENCHMARK: &str = "smallbank";
/// The Venmo-like remote fraction at three nodes
/// (`../shared/reference/seeds-implementations.md`, 0.81 %).
const VENMO_REMOTE: f64 = 0.008;
/// The goal: Roost at least this times static-2PC at the Venmo fraction.
const STATIC_GOAL: f64 = 1.35;
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// Candidate hash tags asked about per reactor (enough to name every one).
const TAGS_PER_REACTOR: usize = 12;

#[derive(Debug, Args)]
pub struct SmallbankArgs {
    /// About 40 s: 1 repetition of 2 s cells, 10,000 accounts per node,
    /// three remote fractions.
    #[arg(long)]
    pub quick: bool,
    /// Directory for smallbank.json and smallbank.md.
    #[arg(long, value_name = "DIR", default_value = "bench/results")]
    pub out: PathBuf,
    /// Nodes in the cluster (replication degree = nodes).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(2..=5))]
    pub nodes: u32,
    /// Client threads per node's partition.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub clients_per_node: u32,
    /// Accounts per partition (FaSST: 100,000; --quick: 10,000).
    #[arg(long, value_parser = clap::value_parser!(u64).range(100..=10_000_000))]
    pub accounts: Option<u64>,
    /// Keyspace reactors (a reactor holds accounts/reactors-per-node accounts).
    #[arg(long, default_value_t = 3072, value_parser = clap::value_parser!(u64).range(16..=65_536))]
    pub reactors: u64,
    /// Fractions of all transactions that touch two partitions.
    #[arg(long, value_delimiter = ',')]
    pub remote: Option<Vec<f64>>,
    /// Measured seconds per cell (after one second of warm-up).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Repetitions (the systems interleaved in each); rows give medians.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub reps: Option<u32>,
    /// A planted bug (the harness's own test): `local-ignores-locks`, a
    /// one-node static-2PC transaction ignores the 2PC locks.
    #[arg(long, hide = true, value_parser = ["local-ignores-locks"])]
    pub planted: Option<String>,
    /// Instead: Roost against PostgreSQL (pgbench, SERIALIZABLE, over
    /// loopback) on BenchBase's keys (uniform over every account) with the
    /// same transactions, both durable (Roost `--sync always`, PostgreSQL
    /// `synchronous_commit = on`); writes smallbank_postgres.{json,md}.
    #[arg(long)]
    pub postgres: bool,
    /// With --postgres: pgbench client counts to try (the best is
    /// PostgreSQL's figure).
    #[arg(long, value_delimiter = ',', default_value = "8,32", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub pg_clients: Vec<u32>,
}

struct Plan {
    params: Params,
    remote: Vec<f64>,
    seconds: f64,
    reps: u32,
}

impl SmallbankArgs {
    fn plan(&self) -> anyhow::Result<Plan> {
        let mut params = Params::FASST;
        let (remote, seconds, reps) = if self.quick {
            params.accounts_per_partition = 10_000;
            params.hot_per_partition = 400;
            (vec![0.0, VENMO_REMOTE, 0.1], 2.0, 1)
        } else {
            (vec![0.0, VENMO_REMOTE, 0.025, 0.05, 0.1, 0.2, 0.4], 5.0, 3)
        };
        if let Some(accounts) = self.accounts {
            params.accounts_per_partition = accounts;
            params.hot_per_partition = (accounts / 25).max(1);
        }
        let remote = self.remote.clone().unwrap_or(remote);
        for &r in &remote {
            anyhow::ensure!(
                (0.0..=smallbank::TWO_ACCOUNT_SHARE).contains(&r),
                "--remote {r}: a fraction in [0, {}] (only two-account transactions cross)",
                smallbank::TWO_ACCOUNT_SHARE
            );
        }
        let seconds = self.seconds.unwrap_or(seconds);
        anyhow::ensure!(
            seconds.is_finite() && (0.1..=600.0).contains(&seconds),
            "--seconds {seconds}: in [0.1, 600]"
        );
        Ok(Plan {
            params,
            remote,
            seconds,
            reps: self.reps.unwrap_or(reps),
        })
    }
}

pub(crate) fn start_cluster(
    nodes: u32,
    reactors: u64,
    dir: PathBuf,
    sync: &str,
    etcd: bool,
) -> anyhow::Result<LocalCluster> {
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let resp_config = dir.with_extension("resp.toml");
    std::fs::write(&resp_config, format!("keyspace_reactors = {}\n", reactors))
        .with_context(|| format!("writing {}", resp_config.display()))?;
    // Zeus's evaluation replicates in memory; every system here runs on
    // the same nodes, so all three have the same durability. Beside
    // PostgreSQL, the nodes log and fsync every commit (`always`), as it
    // does.
    crate::bench_resp_cluster::start_zeus_cluster(
        nodes,
        dir,
        vec![
            "--sync".to_owned(),
            sync.to_owned(),
            "--resp-config".to_owned(),
            resp_config.display().to_string(),
        ],
        etcd,
    )
}

/// A benchmark's cluster, started and mapped: its nodes as clients reach
/// them, a router for setting up, and per node (by position) the tags of
/// the reactors it owns (every node owns some).
pub(crate) struct TaggedCluster {
    pub cluster: LocalCluster,
    pub nodes: Vec<NodeAddr>,
    pub admin: Router,
    pub owned: Vec<Vec<String>>,
}

/// [`start_cluster`], then each node's RESP address and the tags of the
/// reactors each owns.
pub(crate) fn start_tagged_cluster(
    nodes: u32,
    reactors: u64,
    dir: PathBuf,
    sync: &str,
    etcd: bool,
) -> anyhow::Result<TaggedCluster> {
    let cluster = start_cluster(nodes, reactors, dir, sync, etcd)?;
    let nodes: Vec<NodeAddr> = (0..nodes)
        .map(|n| {
            Ok(NodeAddr {
                id: n,
                addr: cluster.resp_addr(n).context("a node's RESP address")?,
            })
        })
        .collect::<anyhow::Result<_>>()?;
    let mut admin = Router::new(nodes.clone(), RouteTable::new());
    let by_owner = tags_by_owner(&mut admin, reactors as usize)?;
    let owned: Vec<Vec<String>> = nodes
        .iter()
        .map(|n| by_owner.get(&n.id).cloned().unwrap_or_default())
        .collect();
    anyhow::ensure!(
        owned.iter().all(|t| !t.is_empty()),
        "a node owns no reactor: {:?}",
        owned.iter().map(Vec::len).collect::<Vec<_>>()
    );
    Ok(TaggedCluster {
        cluster,
        nodes,
        admin,
        owned,
    })
}

/// One hash tag per reactor and each one's owner, once every reactor has
/// an owner.
pub(crate) fn tags_by_owner(
    router: &mut Router,
    reactors: usize,
) -> anyhow::Result<HashMap<u32, Vec<String>>> {
    let candidates: Vec<String> = (0..reactors * TAGS_PER_REACTOR)
        .map(|i| format!("t{i}"))
        .collect();
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let mut first: HashMap<usize, (String, Option<u32>)> = HashMap::new();
        for chunk in candidates.chunks(roost_client::MAX_KEYS_PER_LOOK) {
            let refs: Vec<&[u8]> = chunk.iter().map(|t| t.as_bytes()).collect();
            for (tag, owner) in chunk.iter().zip(router.owners(&refs)?) {
                first
                    .entry(owner.reactor)
                    .or_insert((tag.clone(), owner.node));
            }
        }
        let covered = first.len();
        let owned = first.values().filter(|(_, n)| n.is_some()).count();
        if covered == reactors && owned == reactors {
            let mut by_owner: HashMap<u32, Vec<String>> = HashMap::new();
            for (tag, node) in first.into_values() {
                by_owner.entry(node.expect("owned")).or_default().push(tag);
            }
            for tags in by_owner.values_mut() {
                tags.sort();
            }
            return Ok(by_owner);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{covered} of {reactors} reactors named by {} tags, {owned} with an owner",
            candidates.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Each tag's owner now.
fn owners_now(router: &mut Router, layout: &Layout) -> anyhow::Result<HashMap<String, u32>> {
    let tags: Vec<&String> = layout.all_tags().collect();
    owners_of_tags(router, &tags)
}

/// Each tag's owner now (asked again, of the next node, while a node that
/// has not yet learned some reactor's owner answers nil).
pub(crate) fn owners_of_tags(
    router: &mut Router,
    tags: &[&String],
) -> anyhow::Result<HashMap<String, u32>> {
    let deadline = Instant::now() + READY_TIMEOUT;
    'look: loop {
        let mut owners = HashMap::new();
        for chunk in tags.chunks(roost_client::MAX_KEYS_PER_LOOK) {
            let refs: Vec<&[u8]> = chunk.iter().map(|t| t.as_bytes()).collect();
            for (tag, owner) in chunk.iter().zip(router.owners(&refs)?) {
                let Some(node) = owner.node else {
                    anyhow::ensure!(
                        Instant::now() < deadline,
                        "no node names the owner of tag {tag} within {} s",
                        READY_TIMEOUT.as_secs()
                    );
                    std::thread::sleep(Duration::from_millis(100));
                    continue 'look;
                };
                owners.insert((*tag).clone(), node);
            }
        }
        return Ok(owners);
    }
}

/// One cell: a system at a remote fraction for `seconds`.
struct Cell {
    system: System,
    remote: f64,
    committed_tps: f64,
    abort_rate: f64,
    conflicts: u64,
    cross_share: f64,
    moves: u64,
    route_moves: u64,
    latency_ns: Histogram<u64>,
}

#[allow(clippy::too_many_arguments)]
fn run_cell(
    cluster: &LocalCluster,
    nodes: &[NodeAddr],
    scripts: &Scripts,
    layout: &Arc<Layout>,
    system: System,
    remote: f64,
    clients_per_node: u32,
    seconds: f64,
    seed: u64,
    expected_total: &mut i128,
) -> anyhow::Result<Cell> {
    let mut admin = Router::new(nodes.to_vec(), RouteTable::new());
    let parts = Arc::new(Partitions::new(
        layout,
        owners_now(&mut admin, layout)?,
        nodes,
    ));
    let moves_before = crate::bench_resp_cluster::acquisitions(cluster)?;
    let table = RouteTable::new();
    let (results, elapsed) = {
        let (layout, parts, scripts) = (Arc::clone(layout), Arc::clone(&parts), scripts.clone());
        run_window(
            nodes,
            &table,
            clients_per_node,
            seed,
            seconds,
            move |mut c| {
                smallbank::run_client(
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
    let (mut committed, mut aborts, mut conflicts, mut cross) = (0, 0, 0, 0);
    let mut errors = Vec::new();
    for r in results {
        committed += r.committed;
        aborts += r.user_aborts;
        conflicts += r.conflicts;
        cross += r.cross;
        *expected_total += i128::from(r.delta_cents);
        if let Some(e) = r.error {
            errors.push(e);
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
    // Checked, not assumed: the balances add up to the start plus every
    // transaction's change.
    let owners = owners_now(&mut admin, layout)?;
    let total = smallbank::total_cents(&mut admin, layout, &owners)?;
    anyhow::ensure!(
        total == *expected_total,
        "{} at remote {remote}: the balances add up to {total} cents, not {expected_total}",
        system.name()
    );
    if system == System::Static2pc {
        anyhow::ensure!(moves == 0, "static sharding moved {moves} reactors");
    }
    let ran = committed + aborts;
    Ok(Cell {
        system,
        remote,
        committed_tps: committed as f64 / elapsed,
        abort_rate: if ran == 0 {
            0.0
        } else {
            aborts as f64 / ran as f64
        },
        conflicts,
        cross_share: if ran == 0 {
            0.0
        } else {
            cross as f64 / ran as f64
        },
        moves,
        route_moves: table.moves(),
        latency_ns,
    })
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

/// A loaded cluster, ready for cells.
struct Setup {
    cluster: LocalCluster,
    nodes: Vec<NodeAddr>,
    layout: Arc<Layout>,
    scripts: Scripts,
    /// The sum of every balance, as the transactions so far left it.
    expected_total: i128,
}

fn set_up(args: &SmallbankArgs, params: Params, sync: &str) -> anyhow::Result<Setup> {
    let dir = std::env::temp_dir().join(format!("roost-bench-smallbank-{}", std::process::id()));
    let TaggedCluster {
        cluster,
        nodes,
        mut admin,
        owned,
    } = start_tagged_cluster(args.nodes, args.reactors, dir, sync, true)?;
    let layout = Arc::new(Layout::new(params, owned));
    let loading = Instant::now();
    let owners = owners_now(&mut admin, &layout)?;
    smallbank::load(&mut admin, &layout, &owners)?;
    let expected_total =
        i128::from(smallbank::INITIAL_BALANCE_CENTS) * 2 * i128::from(layout.accounts());
    let total = smallbank::total_cents(&mut admin, &layout, &owners)?;
    anyhow::ensure!(
        total == expected_total,
        "loaded {total} cents, not {expected_total}"
    );
    println!(
        "loaded {} accounts in {:.1} s",
        layout.accounts(),
        loading.elapsed().as_secs_f64()
    );
    let mut scripts = Scripts::load(&mut admin)?;
    scripts.bugs.local_ignores_locks = args.planted.as_deref() == Some("local-ignores-locks");
    Ok(Setup {
        cluster,
        nodes,
        layout,
        scripts,
        expected_total,
    })
}

pub fn run(args: &SmallbankArgs, command: &str) -> anyhow::Result<()> {
    if args.postgres {
        return run_postgres(args, command);
    }
    let plan = args.plan()?;
    println!(
        "smallbank (FaSST flavour): {} nodes, {} reactors, {} accounts per node ({} hot), {} clients per node",
        args.nodes, args.reactors, plan.params.accounts_per_partition, plan.params.hot_per_partition, args.clients_per_node
    );
    let Setup {
        cluster,
        nodes,
        layout,
        scripts,
        mut expected_total,
    } = set_up(args, plan.params, "memory")?;
    let order = remote_sweep::order(&plan.remote);
    let mut cells = Vec::new();
    let mut progress = Progress::new(order.len() * plan.reps as usize);
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
                &nodes,
                &scripts,
                &layout,
                system,
                remote,
                args.clients_per_node,
                plan.seconds,
                seed,
                &mut expected_total,
            )?;
            progress.finish(&format!(
                "rep {} {:<10} remote {:>5.1}%: {:>8.0} txn/s, p50 {:>6.0} us, p99 {:>7.0} us, {} moves, {} 2PC conflicts, total checked",
                rep + 1,
                system.name(),
                remote * 100.0,
                cell.committed_tps,
                cell.latency_ns.value_at_quantile(0.5) as f64 / 1e3,
                cell.latency_ns.value_at_quantile(0.99) as f64 / 1e3,
                cell.moves,
                cell.conflicts,
            ));
            cells.push(cell);
        }
    }
    let report = report(args, &plan, command, &cells);
    let png = args.out.join(format!("{BENCHMARK}.png"));
    let chart = remote_sweep::figure_9(
        "Smallbank (FaSST flavour), 3 nodes: throughput by remote fraction",
        "committed txn/s",
        &plan.remote,
        &cells,
    );
    report.write_with_plot(&args.out, || {
        finish_png(chart.render_png(&png), png.clone())
    })?;
    println!("{}", report.to_markdown());
    Ok(())
}

fn report(args: &SmallbankArgs, plan: &Plan, command: &str, cells: &[Cell]) -> BenchReport {
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
        let static_tps = median_tps(cells, System::Static2pc, remote);
        let mut row = Row::new(system.name(), "fasst")
            .with_param("remote_percent", (remote * 1000.0).round() / 10.0)
            .with_param("nodes", args.nodes)
            .with_param("clients", args.nodes * args.clients_per_node)
            .with_extra("runs", mine.len())
            .with_extra(
                "moves_median",
                median(mine.iter().map(|c| c.moves as f64)).unwrap_or(0.0),
            )
            .with_extra(
                "route_moves_median",
                median(mine.iter().map(|c| c.route_moves as f64)).unwrap_or(0.0),
            )
            .with_extra(
                "conflicts_median",
                median(mine.iter().map(|c| c.conflicts as f64)).unwrap_or(0.0),
            )
            .with_extra(
                "cross_percent_measured",
                (median(mine.iter().map(|c| c.cross_share)).unwrap_or(0.0) * 1000.0).round() / 10.0,
            )
            .with_extra("vs_perfect", round2(tps / perfect));
        if system == System::Roost {
            if let Some(s) = static_tps {
                row = row.with_extra("vs_static_2pc", round2(tps / s));
                ratios.push((remote, tps / s));
            }
        }
        row.throughput_tps = tps.round();
        row.latency_us = LatencyUs::from_histogram_ns(&merged);
        row.abort_rate = median(mine.iter().map(|c| c.abort_rate)).unwrap_or(0.0);
        report.rows.push(row);
    }
    report.notes.push(format!(
        "Smallbank, FaSST flavour: {} accounts per node, {} hot, {}% of transactions on hot accounts; FaSST's mix and semantics in integer cents. {} nodes on this machine, replication degree {}, in memory (`--sync memory`); {} client threads per node's partition over RESP; {} keyspace reactors. Each cell: 1 s warm-up, {} s measured; {} repetitions with the systems interleaved; throughput is the median over repetitions of committed transactions per second, latency percentiles over every run.",
        plan.params.accounts_per_partition,
        plan.params.hot_per_partition,
        plan.params.hot_percent,
        args.nodes,
        args.nodes,
        args.clients_per_node,
        args.reactors,
        plan.seconds,
        plan.reps
    ));
    report.notes.push("Systems: `roost` routes each transaction (one Lua script) to the node of its first account's reactor (roost-client's router) and ownership moves the other account's reactor there; `static-2pc` never moves a reactor: a one-node transaction runs at its owner, a two-node one is a client-driven two-phase commit (prepare: lock and read at both owners at once; commit: write and unlock at both), and each lock is a replicated write, as every write here is (FaSST keeps locks in the primary's memory: this baseline pays one more replication per participant than FaSST would); `perfect` is `roost` with no transaction crossing partitions. Remote percent: the share of all transactions whose two accounts are on two nodes. After every cell every balance is read and the sum checked against the start plus each transaction's reported change.".to_owned());
    if let Some((_, r)) = ratios.iter().find(|(remote, _)| *remote == VENMO_REMOTE) {
        report.notes.push(format!(
            "At the Venmo-like {:.1}% remote, Roost is {r:.2}x static-2PC (goal {STATIC_GOAL}x: {}).",
            VENMO_REMOTE * 100.0,
            if *r >= STATIC_GOAL { "met" } else { "missed" }
        ));
    }
    report.notes.push(break_even_note(&ratios));
    report
}

/// The goal against PostgreSQL on BenchBase's keys.
const POSTGRES_GOAL: f64 = 20.0;
/// BenchBase's `NUM_ACCOUNTS` (scale factor 1).
const BENCHBASE_ACCOUNTS: u64 = 1_000_000;

/// `--postgres`: Roost and PostgreSQL, interleaved, on BenchBase's keys.
fn run_postgres(args: &SmallbankArgs, command: &str) -> anyhow::Result<()> {
    let plan = args.plan()?;
    let total_accounts = args
        .accounts
        .map(|per_node| per_node * u64::from(args.nodes))
        .unwrap_or(if args.quick {
            BENCHBASE_ACCOUNTS / 10
        } else {
            BENCHBASE_ACCOUNTS
        });
    let per_node = total_accounts.div_ceil(u64::from(args.nodes));
    // Uniform keys: no hot set, and a two-account transaction's second
    // account is on another node as often as chance puts it there.
    let params = Params {
        accounts_per_partition: per_node,
        hot_per_partition: 0,
        hot_percent: 0,
    };
    let nodes = f64::from(args.nodes);
    let remote = smallbank::TWO_ACCOUNT_SHARE * (nodes - 1.0) / nodes;
    let pg_seconds = plan.seconds.ceil().max(1.0) as u32;
    println!(
        "smallbank (BenchBase keys): Roost ({} nodes, --sync always) against PostgreSQL (pgbench, SERIALIZABLE, synchronous_commit on), {} accounts",
        args.nodes,
        per_node * u64::from(args.nodes)
    );
    let pg_dir = std::env::temp_dir().join(format!("roost-bench-postgres-{}", std::process::id()));
    let port = roost_cluster::local_cluster::free_ports(1).context("a port for PostgreSQL")?[0];
    let pg = roost_bench::postgres::PgServer::start(&pg_dir, port)?;
    let loading = Instant::now();
    pg.load_smallbank(
        per_node * u64::from(args.nodes),
        smallbank::INITIAL_BALANCE_CENTS,
    )?;
    pg.set_synchronous_commit(true)?;
    println!(
        "PostgreSQL loaded in {:.1} s",
        loading.elapsed().as_secs_f64()
    );
    let Setup {
        cluster,
        nodes: addrs,
        layout,
        scripts,
        mut expected_total,
    } = set_up(args, params, "always")?;
    let mut roost = Vec::new();
    let mut postgres: Vec<Vec<roost_bench::postgres::PgbenchResult>> =
        vec![Vec::new(); args.pg_clients.len()];
    let started = Instant::now();
    for rep in 0..plan.reps {
        let cell = run_cell(
            &cluster,
            &addrs,
            &scripts,
            &layout,
            System::Roost,
            remote,
            args.clients_per_node,
            plan.seconds,
            u64::from(rep),
            &mut expected_total,
        )?;
        println!(
            "[{:>5.0} s] rep {} roost ({} clients): {:>8.0} txn/s, p50 {:>6.0} us, {} moves, total checked",
            started.elapsed().as_secs_f64(),
            rep + 1,
            args.nodes * args.clients_per_node,
            cell.committed_tps,
            cell.latency_ns.value_at_quantile(0.5) as f64 / 1e3,
            cell.moves
        );
        roost.push(cell);
        for (i, &clients) in args.pg_clients.iter().enumerate() {
            let r = pg.pgbench(per_node * u64::from(args.nodes), clients, pg_seconds)?;
            println!(
                "[{:>5.0} s] rep {} postgres ({clients} clients): {:>8.0} txn/s, latency avg {:.2} ms, {} retried, {} failed",
                started.elapsed().as_secs_f64(),
                rep + 1,
                r.tps,
                r.latency_avg_ms,
                r.retried,
                r.failed
            );
            postgres[i].push(r);
        }
    }
    let mut report = BenchReport::new("smallbank_postgres", command);
    let roost_tps = median(roost.iter().map(|c| c.committed_tps)).unwrap_or(0.0);
    let pg_medians: Vec<f64> = postgres
        .iter()
        .map(|runs| median(runs.iter().map(|r| r.tps)).unwrap_or(0.0))
        .collect();
    let best_pg = pg_medians.iter().copied().fold(0.0, f64::max);
    let merged = merged_latencies(roost.iter().map(|c| &c.latency_ns));
    let mut row = Row::new("roost", "benchbase-keys")
        .with_param("clients", args.nodes * args.clients_per_node)
        .with_param(
            "durability",
            "fsync per commit (--sync always), replication degree 3",
        )
        .with_extra("runs", roost.len())
        .with_extra("vs_best_postgres", round2(roost_tps / best_pg))
        .with_extra("goal", POSTGRES_GOAL)
        .with_extra(
            "moves_median",
            median(roost.iter().map(|c| c.moves as f64)).unwrap_or(0.0),
        );
    row.throughput_tps = roost_tps.round();
    row.latency_us = LatencyUs::from_histogram_ns(&merged);
    row.abort_rate = median(roost.iter().map(|c| c.abort_rate)).unwrap_or(0.0);
    report.rows.push(row);
    for (i, &clients) in args.pg_clients.iter().enumerate() {
        let runs = &postgres[i];
        let mut row = Row::new("postgres", "benchbase-keys")
            .with_param("clients", clients)
            .with_param(
                "durability",
                "fsync per commit (synchronous_commit = on), one server",
            )
            .with_extra("runs", runs.len())
            .with_extra(
                "retried_median",
                median(runs.iter().map(|r| r.retried as f64)).unwrap_or(0.0),
            )
            .with_extra(
                "failed_median",
                median(runs.iter().map(|r| r.failed as f64)).unwrap_or(0.0),
            );
        row.throughput_tps = pg_medians[i].round();
        row.latency_us.mean = median(runs.iter().map(|r| r.latency_avg_ms * 1000.0)).unwrap_or(0.0);
        report.rows.push(row);
    }
    report.notes.push(format!(
        "Smallbank on BenchBase's keys: {} accounts, uniform, FaSST's mix (BenchBase's weights are the same) and FaSST's transaction semantics in integer cents on both systems (the same work: `roost_bench::smallbank` scripts on Roost, `roost_bench::postgres` SQL under pgbench). Roost: {} nodes on this machine, replication degree {}, every commit logged and fsynced (`--sync always`), {} client threads over RESP routed by roost-client, {:.1}% of transactions on two nodes' accounts (uniform keys). PostgreSQL {}: one server on loopback TCP, SERIALIZABLE, synchronous_commit on, pgbench with prepared statements and serialization failures retried (--max-tries), at each client count listed; its figure is the best count's. Each cell {} s; {} repetitions interleaved; medians.",
        per_node * u64::from(args.nodes),
        args.nodes,
        args.nodes,
        args.nodes * args.clients_per_node,
        remote * 100.0,
        pg_version(),
        plan.seconds,
        plan.reps
    ));
    report.notes.push(
        "pgbench reports the mean latency only: PostgreSQL's percentile columns are empty (0)."
            .to_owned(),
    );
    report.notes.push(format!(
        "Roost is {:.2}x PostgreSQL's best ({:.0} txn/s) (goal {POSTGRES_GOAL}x: {}).",
        roost_tps / best_pg,
        best_pg,
        if roost_tps / best_pg >= POSTGRES_GOAL {
            "met"
        } else {
            "missed"
        }
    ));
    report.write(&args.out)?;
    println!("{}", report.to_markdown());
    drop(pg);
    Ok(())
}

fn pg_version() -> String {
    std::process::Command::new("pgbench")
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .replace("pgbench (PostgreSQL) ", "")
        })
        .unwrap_or_else(|_| "(version unknown)".to_owned())
}

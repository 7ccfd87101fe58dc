//! `roost bench escrow`: the escrow middleware over Redis (issue 6, the
//! seed `002`'s §V) with the emulated wide area: three regions (US-East,
//! US-West, EU) with Table I's round trips through `DelayProxy`s, one
//! `redis-server` per site (Strong: one, in US-East; `roost`: none, the
//! server-based node keeps its counters inside an embedded Roost database),
//! for each variant (bc-srv, bc-clt, roost, weak, strong):
//!
//! * `single-counter`: clients in every region decrementing one counter
//!   (100% decrements, `Global` flag), from a start large enough not to run
//!   out: throughput, median and p99 latency per client region (Figures 6-8).
//! * `exhaust`: a counter starting small (6,000; 600 with `--quick`) and
//!   clients in every region decrementing until `Fail`: decrements in excess
//!   of the bound (Figure 10).
//! * `sweep-1-counter`, `sweep-100-counters`: throughput against latency
//!   (Figures 6 and 7): a sweep over clients per region, on one counter or
//!   on 100 (each decrement picks one uniformly); one row per point with the
//!   aggregate throughput and the median/p99 latency of all regions.
//! * `run-out-over-time`: latency over time while rights run out (Figure 9
//!   of issue 6; the seed's Figure 8): a counter starting at 6,000 (600 with
//!   `--quick`), all of it at US-East's site, a few paced clients per region
//!   decrementing until `Fail`; one row per time window with its median
//!   latency.
//!
//! Every variant's clients reach their site over a TCP connection of their
//! own, one operation in flight each, the same number per region: bc-srv's
//! and roost's through the site node's RESP front door (BC.DEC,
//! `roost_escrow::FrontDoor`), bc-clt's and Weak's to their site's Redis,
//! Strong's to the one Redis in US-East (through a `DelayProxy` from the
//! other regions). What one operation costs each (round trips, Redis
//! commands, batching) is in the notes, with the Redis commands and the
//! node's batching measured in `single-counter`.
//!
//! Goals (issues 6 and 19): bc-srv throughput at least 1.0x Weak's; no
//! decrement in excess of the bound for bc-srv, bc-clt, roost and Strong
//! (Weak's are expected); median latency of clients in a remote region (for
//! Strong, every region but US-East) with bc-srv at most 1/10 of Strong's.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng as _, SeedableRng as _};
use roost_bench::plot::{finish_png, render_figure_png, BarChart, BarSeries};
use roost_bench::results::{BenchReport, LatencyUs, Row};
use roost_escrow::redis_server::redis_server_available;
use roost_escrow::store::{command_calls, reset_command_stats};
use roost_escrow::{
    excess_decrements, Bound, Client, Deployment, DeploymentConfig, Design, EscrowCounters,
    EscrowError, Flag, Outcome, Region, StrongClient, StrongDeployment,
};

const BENCHMARK: &str = "escrow";
const VARIANTS: [&str; 5] = ["bc-srv", "bc-clt", "roost", "weak", "strong"];
const THROUGHPUT_GOAL: f64 = 1.0;
const LATENCY_GOAL: f64 = 0.1;
const SINGLE: &str = "single-counter";
const EXHAUST: &str = "exhaust";
const SWEEP_ONE: &str = "sweep-1-counter";
const SWEEP_MANY: &str = "sweep-100-counters";
const OVER_TIME: &str = "run-out-over-time";
/// Counters of `sweep-100-counters`.
const MANY_COUNTERS: usize = 100;

#[derive(Debug, Args)]
pub struct EscrowArgs {
    /// CI-sized run: a tenth of Table I's delays, 2 s measurements, 4
    /// clients per region, the exhausted counter starting at 600.
    #[arg(long)]
    pub quick: bool,
    /// Directory for escrow.json, escrow.md and escrow.png.
    #[arg(long, value_name = "DIR", default_value = "bench/results")]
    pub out: PathBuf,
}

#[derive(Debug, Clone, Copy)]
struct Plan {
    rtt_scale: f64,
    warmup: Duration,
    measure: Duration,
    clients_per_region: usize,
    /// The single counter's start (split between the sites' rights).
    single_start: u64,
    exhaust_start: u64,
    exhaust_clients_per_region: usize,
    exhaust_deadline: Duration,
    /// Clients per region of the sweeps' points.
    sweep_clients: &'static [usize],
    sweep_warmup: Duration,
    sweep_measure: Duration,
    /// Each of the 100 counters' start.
    many_start: u64,
    over_time_start: u64,
    over_time_clients_per_region: usize,
    /// Pause after each decrement of `run-out-over-time`, so that the
    /// counter lasts many windows.
    over_time_think: Duration,
    window: Duration,
    over_time_deadline: Duration,
}

impl Plan {
    fn of(args: &EscrowArgs) -> Plan {
        if args.quick {
            Plan {
                rtt_scale: 0.1,
                warmup: Duration::from_millis(300),
                measure: Duration::from_secs(2),
                clients_per_region: 4,
                single_start: 300_000_000,
                exhaust_start: 600,
                exhaust_clients_per_region: 4,
                exhaust_deadline: Duration::from_secs(20),
                sweep_clients: &[1, 4],
                sweep_warmup: Duration::from_millis(100),
                sweep_measure: Duration::from_millis(300),
                many_start: 30_000_000,
                over_time_start: 600,
                over_time_clients_per_region: 2,
                over_time_think: Duration::from_millis(5),
                window: Duration::from_millis(100),
                over_time_deadline: Duration::from_secs(10),
            }
        } else {
            Plan {
                rtt_scale: 1.0,
                warmup: Duration::from_secs(1),
                measure: Duration::from_secs(8),
                clients_per_region: 8,
                single_start: 3_000_000_000,
                exhaust_start: 6000,
                exhaust_clients_per_region: 8,
                exhaust_deadline: Duration::from_secs(60),
                sweep_clients: &[1, 4, 16],
                sweep_warmup: Duration::from_millis(500),
                sweep_measure: Duration::from_secs(2),
                many_start: 300_000_000,
                over_time_start: 6000,
                over_time_clients_per_region: 2,
                over_time_think: Duration::from_millis(5),
                window: Duration::from_millis(200),
                over_time_deadline: Duration::from_secs(40),
            }
        }
    }
}

/// A client of any variant.
enum AnyClient {
    Middleware(Client),
    Strong(StrongClient),
}

impl AnyClient {
    async fn dec(&mut self, key: &str) -> Result<Outcome, EscrowError> {
        match self {
            AnyClient::Middleware(c) => c.dec(key, 1, Flag::Global).await,
            AnyClient::Strong(c) => c.dec(key, 1, Flag::Global).await,
        }
    }

    async fn inc(&mut self, key: &str, delta: u64) -> Result<Outcome, EscrowError> {
        match self {
            AnyClient::Middleware(c) => c.inc(key, delta, Flag::StrictLocal).await,
            AnyClient::Strong(c) => c.inc(key, delta, Flag::StrictLocal).await,
        }
    }

    async fn create(&mut self, key: &str) -> Result<(), EscrowError> {
        match self {
            AnyClient::Middleware(c) => c.create(key, Bound::Lower, 0).await,
            AnyClient::Strong(c) => c.create(key, Bound::Lower, 0).await,
        }
    }
}

/// One variant's deployment.
enum Target {
    Middleware(Box<Deployment>),
    Strong(StrongDeployment),
}

impl Target {
    async fn start(variant: &str, plan: &Plan) -> anyhow::Result<Target> {
        let design = match variant {
            "bc-srv" => Design::ServerBased,
            "bc-clt" => Design::ClientBased,
            "weak" => Design::Weak,
            "roost" => Design::Roost,
            _ => {
                return Ok(Target::Strong(
                    StrongDeployment::three_regions(plan.rtt_scale).await?,
                ))
            }
        };
        Ok(Target::Middleware(Box::new(
            Deployment::start(DeploymentConfig::three_regions(design, plan.rtt_scale)).await?,
        )))
    }

    fn sites(&self) -> usize {
        match self {
            Target::Middleware(d) => d.sites(),
            Target::Strong(d) => d.sites(),
        }
    }

    fn region(&self, site: usize) -> Region {
        match self {
            Target::Middleware(d) => d.region(site),
            Target::Strong(d) => d.region(site),
        }
    }

    fn remote(&self, site: usize) -> bool {
        match self {
            Target::Middleware(_) => false,
            Target::Strong(d) => d.is_remote(site),
        }
    }

    /// A measured client: over a TCP connection of its own to its site
    /// (bc-srv, roost: the node's front door; the others: their Redis).
    async fn client(&self, site: usize) -> anyhow::Result<AnyClient> {
        Ok(match self {
            Target::Middleware(d) => AnyClient::Middleware(d.network_client(site).await?),
            Target::Strong(d) => AnyClient::Strong(d.client(site).await?),
        })
    }

    /// A client for setting counters up (not measured): bc-srv's and
    /// roost's in-process, since the front door's BC.CREATE refuses a
    /// counter that another site's creation already replicated here.
    async fn setup_client(&self, site: usize) -> anyhow::Result<AnyClient> {
        Ok(match self {
            Target::Middleware(d) => AnyClient::Middleware(d.client(site).await?),
            Target::Strong(d) => AnyClient::Strong(d.client(site).await?),
        })
    }

    /// Every Redis server of the deployment (none for roost).
    fn redis_urls(&self) -> Vec<String> {
        match self {
            Target::Middleware(d) => (0..d.sites())
                .map(|site| d.redis_url(site))
                .filter(|url| !url.is_empty())
                .collect(),
            Target::Strong(d) => vec![d.url_for(d.home())],
        }
    }

    /// The server-based nodes' conditional writes and operations answered
    /// `Ok` so far, all sites (zero for the other designs).
    fn node_writes_and_ops(&self) -> (u64, u64) {
        match self {
            Target::Middleware(d) => d
                .stats()
                .iter()
                .fold((0, 0), |(w, o), s| (w + s.writes, o + s.ops_ok)),
            Target::Strong(_) => (0, 0),
        }
    }

    /// Creates each of `keys` (bound 0) and gives it `start`: split between
    /// the sites (`spread`) or all at the first site; waits until every site
    /// knows it and, for the bounded-counter designs, holds rights. Strong
    /// has one Redis: its keys are created through the first site's client.
    async fn setup(&self, keys: &[String], start: u64, spread: bool) -> anyhow::Result<()> {
        let creators = match self {
            Target::Strong(_) => 1,
            Target::Middleware(_) => self.sites(),
        };
        let mut clients = Vec::new();
        for site in 0..self.sites() {
            clients.push(self.setup_client(site).await?);
        }
        for key in keys {
            for client in clients.iter_mut().take(creators) {
                client.create(key).await?;
            }
        }
        let givers: Vec<usize> = match (self, spread) {
            (Target::Strong(_), _) | (_, false) => vec![0],
            (Target::Middleware(_), true) => (0..self.sites()).collect(),
        };
        let share = start / givers.len() as u64;
        for key in keys {
            for &site in &givers {
                let outcome = clients[site].inc(key, share).await?;
                anyhow::ensure!(outcome == Outcome::Ok, "initial increment: {outcome:?}");
            }
        }
        let total = share * givers.len() as u64;
        let Target::Middleware(d) = self else {
            return Ok(());
        };
        for key in keys {
            anyhow::ensure!(
                d.wait_value_everywhere(key, total as i64, Duration::from_secs(30))
                    .await,
                "`{key}` did not reach {total} at every site: {:?}",
                d.values(key).await
            );
        }
        if d.design() != Design::Weak {
            let started = Instant::now();
            for key in keys {
                while started.elapsed() < Duration::from_secs(15) {
                    if d.rights(key)
                        .await
                        .is_ok_and(|rights| rights.iter().all(|&r| r > 0))
                    {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        Ok(())
    }

    /// The value every site converges to (Strong: the one site's).
    async fn final_values(&self, key: &str) -> Vec<i64> {
        match self {
            Target::Middleware(d) => {
                match d.wait_converged(key, None, Duration::from_secs(10)).await {
                    Ok(value) => vec![value],
                    Err(values) => values,
                }
            }
            Target::Strong(d) => d.value(key).await.into_iter().collect(),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Mode {
    /// Record operations that start after `warmup` and end before
    /// `warmup + measure`.
    Timed { warmup: Duration, measure: Duration },
    /// Until `Fail` (or the deadline); record everything.
    Drain { deadline: Duration },
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000_000, 3).expect("valid histogram bounds")
}

/// What the clients of one region did.
struct RegionResult {
    ok: u64,
    /// Successful decrements of the whole run, warm-up and tail included
    /// (what the Redis commands and node writes are divided by).
    ok_all: u64,
    fails: u64,
    retries: u64,
    errors: u64,
    latency_ns: Histogram<u64>,
    /// With [`Load::timeline`]: (start since the run began, latency in ns)
    /// of every successful decrement.
    timeline: Vec<(Duration, u64)>,
}

impl RegionResult {
    fn new() -> RegionResult {
        RegionResult {
            ok: 0,
            ok_all: 0,
            fails: 0,
            retries: 0,
            errors: 0,
            latency_ns: histogram(),
            timeline: Vec::new(),
        }
    }

    fn add(&mut self, other: &RegionResult) {
        self.ok += other.ok;
        self.ok_all += other.ok_all;
        self.fails += other.fails;
        self.retries += other.retries;
        self.errors += other.errors;
        let _ = self.latency_ns.add(&other.latency_ns);
        self.timeline.extend_from_slice(&other.timeline);
    }
}

/// What the clients of one run do.
struct Load {
    /// Each decrement picks one uniformly.
    keys: Arc<[String]>,
    clients_per_region: usize,
    mode: Mode,
    /// Pause after each operation (zero: closed loop without think time).
    think: Duration,
    /// Record every successful decrement's start and latency.
    timeline: bool,
}

impl Load {
    fn new(keys: &[String], clients_per_region: usize, mode: Mode) -> Load {
        Load {
            keys: keys.into(),
            clients_per_region,
            mode,
            think: Duration::ZERO,
            timeline: false,
        }
    }
}

/// Runs `load.clients_per_region` clients at every site on `load.keys`;
/// per-site results and the seconds throughput is measured over.
async fn drive(target: &Target, load: &Load) -> anyhow::Result<(Vec<RegionResult>, f64)> {
    let mode = load.mode;
    let mut clients = Vec::new();
    for site in 0..target.sites() {
        for _ in 0..load.clients_per_region {
            clients.push((site, target.client(site).await?));
        }
    }
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (index, (site, mut client)) in clients.into_iter().enumerate() {
        let keys = Arc::clone(&load.keys);
        let (think, timeline) = (load.think, load.timeline);
        tasks.spawn(async move {
            let mut rng = SmallRng::seed_from_u64(index as u64);
            let mut result = RegionResult::new();
            let (from, until) = match mode {
                Mode::Timed { warmup, measure } => (warmup, warmup + measure),
                Mode::Drain { deadline } => (Duration::ZERO, deadline),
            };
            while started.elapsed() < until {
                let key = if keys.len() == 1 {
                    &keys[0]
                } else {
                    &keys[rng.random_range(0..keys.len())]
                };
                let op_started = Instant::now();
                let outcome = client.dec(key).await;
                let counted =
                    op_started.duration_since(started) >= from && started.elapsed() <= until;
                match outcome {
                    Ok(Outcome::Ok) => {
                        result.ok_all += 1;
                        if counted {
                            result.ok += 1;
                            let ns =
                                u64::try_from(op_started.elapsed().as_nanos()).unwrap_or(u64::MAX);
                            let _ = result.latency_ns.record(ns.max(1));
                            if timeline {
                                result
                                    .timeline
                                    .push((op_started.duration_since(started), ns));
                            }
                        }
                    }
                    Ok(Outcome::Fail) => {
                        result.fails += 1;
                        if matches!(mode, Mode::Drain { .. }) {
                            break;
                        }
                    }
                    Ok(Outcome::Retry { .. }) => {
                        result.retries += 1;
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    Err(error) => {
                        result.errors += 1;
                        tracing::debug!(%error, "decrement failed");
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
                if !think.is_zero() {
                    tokio::time::sleep(think).await;
                }
            }
            (site, result)
        });
    }
    let mut per_site: Vec<RegionResult> =
        (0..target.sites()).map(|_| RegionResult::new()).collect();
    while let Some(joined) = tasks.join_next().await {
        let (site, result) = joined.context("a client task panicked")?;
        per_site[site].add(&result);
    }
    let seconds = match mode {
        Mode::Timed { measure, .. } => measure.as_secs_f64(),
        Mode::Drain { .. } => started.elapsed().as_secs_f64(),
    };
    Ok((per_site, seconds))
}

/// A time window's start and the latencies (ns) of the decrements begun in
/// it.
type Window = (Duration, Histogram<u64>);

/// What the operations of one run cost the servers, measured over the
/// whole run (warm-up and tail included).
#[derive(Debug, Clone, Default)]
struct OpCost {
    /// Commands each Redis server ran, summed over the servers, by name
    /// (from clients, nodes and agents alike; Lua's inner calls included).
    redis_calls: BTreeMap<String, u64>,
    /// The server-based nodes' conditional writes and `Ok` operations.
    node_writes: u64,
    node_ops: u64,
    /// Successful decrements of the run.
    ok_all: u64,
}

impl OpCost {
    fn per_op(&self, n: u64) -> f64 {
        n as f64 / self.ok_all.max(1) as f64
    }

    fn redis_per_op(&self) -> f64 {
        self.per_op(self.redis_calls.values().sum())
    }

    /// Operations per conditional write of the nodes (the batching
    /// factor); `None` without a node.
    fn ops_per_write(&self) -> Option<f64> {
        (self.node_writes > 0).then(|| self.node_ops as f64 / self.node_writes as f64)
    }

    /// `3.02 (evalsha 0.01, hget 0.01, ...)`: the commands per operation.
    fn redis_summary(&self) -> String {
        if self.redis_calls.is_empty() {
            return "0 (no Redis)".to_owned();
        }
        let mut by_command: Vec<(&String, &u64)> = self.redis_calls.iter().collect();
        by_command.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let parts: Vec<String> = by_command
            .iter()
            .take(6)
            .map(|(name, &n)| format!("{name} {:.3}", self.per_op(n)))
            .collect();
        format!("{:.3} ({})", self.redis_per_op(), parts.join(", "))
    }
}

/// One scenario of one variant, summarized.
struct Measured {
    variant: &'static str,
    scenario: &'static str,
    per_site: Vec<RegionResult>,
    regions: Vec<Region>,
    remote: Vec<bool>,
    seconds: f64,
    start: u64,
    clients_per_region: usize,
    /// How many counters the decrements were spread over.
    counters: usize,
    final_values: Vec<i64>,
    /// Measured in `single-counter`.
    cost: Option<OpCost>,
}

impl Measured {
    fn ok(&self) -> u64 {
        self.per_site.iter().map(|r| r.ok).sum()
    }

    fn throughput(&self) -> f64 {
        self.ok() as f64 / self.seconds.max(1e-9)
    }

    fn excess(&self) -> u64 {
        excess_decrements(self.start, self.ok())
    }

    fn median_ms(&self, site: usize) -> f64 {
        self.per_site[site].latency_ns.value_at_quantile(0.5) as f64 / 1e6
    }

    /// All regions' results together.
    fn total(&self) -> RegionResult {
        let mut total = RegionResult::new();
        for result in &self.per_site {
            total.add(result);
        }
        total
    }

    /// Any region remote from the data (Strong's clients outside US-East).
    fn any_remote(&self) -> bool {
        self.remote.iter().any(|&r| r)
    }

    /// What every row of this run says of its configuration (in this
    /// order), and its excess decrements; `counters` only for sweeps.
    fn base_row(
        &self,
        plan: &Plan,
        client_region: &str,
        remote: bool,
        counters: Option<usize>,
    ) -> Row {
        let mut row = Row::new("escrow", self.variant)
            .with_param("scenario", self.scenario)
            .with_param("client_region", client_region)
            .with_param("remote", remote)
            .with_param("clients_per_region", self.clients_per_region as u64);
        if let Some(counters) = counters {
            row = row.with_param("counters", counters as u64);
        }
        row.with_param("initial", self.start)
            .with_param("bound", 0)
            .with_param("decrement_pct", 100)
            .with_param("flag", "global")
            .with_param("rtt_scale", plan.rtt_scale)
            .with_extra("excess_decrements", self.excess())
    }

    /// The row of a sweep point: all regions together.
    fn sweep_row(&self, plan: &Plan) -> Row {
        let total = self.total();
        let mut row = self
            .base_row(plan, "all", self.any_remote(), Some(self.counters))
            .with_extra("ok_decrements", total.ok)
            .with_extra(
                "p50_ms_per_region",
                (0..self.per_site.len())
                    .map(|s| round3(self.median_ms(s)))
                    .collect::<Vec<_>>(),
            )
            .with_extra("fails", total.fails)
            .with_extra("retries", total.retries)
            .with_extra("errors", total.errors)
            .with_extra("seconds", round3(self.seconds));
        row.throughput_tps = round1(self.throughput());
        row.latency_us = LatencyUs::from_histogram_ns(&total.latency_ns);
        row
    }

    /// Median (and p99) latency of all regions per `window` of the run,
    /// by the decrements' start: (window start, histogram) in order, up to
    /// the last window with a successful decrement.
    fn windows(&self, window: Duration) -> Vec<Window> {
        let mut windows: Vec<Histogram<u64>> = Vec::new();
        for result in &self.per_site {
            for &(at, ns) in &result.timeline {
                let index = (at.as_nanos() / window.as_nanos().max(1)) as usize;
                while windows.len() <= index {
                    windows.push(histogram());
                }
                let _ = windows[index].record(ns.max(1));
            }
        }
        windows
            .into_iter()
            .enumerate()
            .map(|(i, h)| (window * i as u32, h))
            .collect()
    }

    /// One row per window of `run-out-over-time`.
    fn window_rows(&self, plan: &Plan) -> Vec<Row> {
        self.windows(plan.window)
            .into_iter()
            .map(|(at, h)| {
                let mut row = self
                    .base_row(plan, "all", self.any_remote(), None)
                    .with_param("window_ms", plan.window.as_millis() as u64)
                    .with_param("window_start_ms", at.as_millis() as u64)
                    .with_param("think_ms", plan.over_time_think.as_millis() as u64)
                    .with_extra("ok_decrements", h.len())
                    .with_extra("ok_decrements_all_windows", self.ok())
                    .with_extra("seconds", round3(self.seconds))
                    .with_extra("final_values", self.final_values.clone());
                row.throughput_tps = round1(h.len() as f64 / plan.window.as_secs_f64());
                row.latency_us = LatencyUs::from_histogram_ns(&h);
                row
            })
            .collect()
    }

    fn report_rows(&self, plan: &Plan) -> Vec<Row> {
        match self.scenario {
            SWEEP_ONE | SWEEP_MANY => vec![self.sweep_row(plan)],
            OVER_TIME => self.window_rows(plan),
            _ => self.rows(plan),
        }
    }

    fn rows(&self, plan: &Plan) -> Vec<Row> {
        self.per_site
            .iter()
            .enumerate()
            .map(|(site, result)| {
                let mut row = self
                    .base_row(plan, self.regions[site].name(), self.remote[site], None)
                    .with_extra("ok_decrements", result.ok)
                    .with_extra("ok_decrements_all_regions", self.ok())
                    .with_extra("throughput_all_regions_tps", round1(self.throughput()))
                    .with_extra("fails", result.fails)
                    .with_extra("retries", result.retries)
                    .with_extra("errors", result.errors)
                    .with_extra("seconds", round3(self.seconds))
                    .with_extra("final_values", self.final_values.clone());
                if let Some(cost) = &self.cost {
                    row = row
                        .with_extra("redis_commands_per_op", round3(cost.redis_per_op()))
                        .with_extra(
                            "redis_commands_per_op_by_command",
                            serde_json::Value::Object(
                                cost.redis_calls
                                    .iter()
                                    .map(|(name, &n)| (name.clone(), round3(cost.per_op(n)).into()))
                                    .collect(),
                            ),
                        )
                        .with_extra("ops_per_node_write", cost.ops_per_write().map(round3));
                }
                row.throughput_tps = round1(result.ok as f64 / self.seconds.max(1e-9));
                row.latency_us = LatencyUs::from_histogram_ns(&result.latency_ns);
                row
            })
            .collect()
    }
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

async fn run_variant(variant: &'static str, plan: &Plan) -> anyhow::Result<Vec<Measured>> {
    let target = Target::start(variant, plan)
        .await
        .with_context(|| format!("starting the {variant} deployment"))?;
    let regions: Vec<Region> = (0..target.sites()).map(|s| target.region(s)).collect();
    let remote: Vec<bool> = (0..target.sites()).map(|s| target.remote(s)).collect();
    let mut measured = Vec::new();
    let measure = |scenario: &'static str,
                   (per_site, seconds): (Vec<RegionResult>, f64),
                   start: u64,
                   load: &Load,
                   final_values: Vec<i64>| Measured {
        variant,
        scenario,
        per_site,
        regions: regions.clone(),
        remote: remote.clone(),
        seconds,
        start,
        clients_per_region: load.clients_per_region,
        counters: load.keys.len(),
        final_values,
        cost: None,
    };

    let hot = vec!["hot".to_owned()];
    target.setup(&hot, plan.single_start, true).await?;
    let load = Load::new(
        &hot,
        plan.clients_per_region,
        Mode::Timed {
            warmup: plan.warmup,
            measure: plan.measure,
        },
    );
    let urls = target.redis_urls();
    for url in &urls {
        reset_command_stats(url).await?;
    }
    let (writes_before, ops_before) = target.node_writes_and_ops();
    let result = drive(&target, &load).await?;
    let (writes_after, ops_after) = target.node_writes_and_ops();
    let mut cost = OpCost {
        node_writes: writes_after - writes_before,
        node_ops: ops_after - ops_before,
        ok_all: result.0.iter().map(|r| r.ok_all).sum(),
        ..OpCost::default()
    };
    for url in &urls {
        for (name, calls) in command_calls(url).await? {
            *cost.redis_calls.entry(name).or_default() += calls;
        }
    }
    let mut single = measure(SINGLE, result, plan.single_start, &load, Vec::new());
    single.cost = Some(cost);
    measured.push(single);

    // Throughput against latency: the single counter (still far from its
    // bound), then 100 counters.
    let many: Vec<String> = (0..MANY_COUNTERS).map(|i| format!("many-{i}")).collect();
    target.setup(&many, plan.many_start, true).await?;
    for (scenario, keys, start) in [
        (SWEEP_ONE, &hot, plan.single_start),
        (SWEEP_MANY, &many, plan.many_start),
    ] {
        for &clients in plan.sweep_clients {
            let load = Load::new(
                keys,
                clients,
                Mode::Timed {
                    warmup: plan.sweep_warmup,
                    measure: plan.sweep_measure,
                },
            );
            let result = drive(&target, &load).await?;
            measured.push(measure(scenario, result, start, &load, Vec::new()));
        }
    }

    let stock = vec!["stock".to_owned()];
    target.setup(&stock, plan.exhaust_start, false).await?;
    let load = Load::new(
        &stock,
        plan.exhaust_clients_per_region,
        Mode::Drain {
            deadline: plan.exhaust_deadline,
        },
    );
    let result = drive(&target, &load).await?;
    let final_values = target.final_values("stock").await;
    measured.push(measure(
        EXHAUST,
        result,
        plan.exhaust_start,
        &load,
        final_values,
    ));

    // Latency over time while the rights run out: paced clients, every
    // successful decrement's start and latency recorded.
    let paced = vec!["paced".to_owned()];
    target.setup(&paced, plan.over_time_start, false).await?;
    let mut load = Load::new(
        &paced,
        plan.over_time_clients_per_region,
        Mode::Drain {
            deadline: plan.over_time_deadline,
        },
    );
    load.think = plan.over_time_think;
    load.timeline = true;
    let result = drive(&target, &load).await?;
    let final_values = target.final_values("paced").await;
    measured.push(measure(
        OVER_TIME,
        result,
        plan.over_time_start,
        &load,
        final_values,
    ));
    Ok(measured)
}

fn find<'a>(all: &'a [Measured], variant: &str, scenario: &str) -> Option<&'a Measured> {
    all.iter()
        .find(|m| m.variant == variant && m.scenario == scenario)
}

fn find_point<'a>(
    all: &'a [Measured],
    variant: &str,
    scenario: &str,
    clients: usize,
) -> Option<&'a Measured> {
    all.iter()
        .find(|m| m.variant == variant && m.scenario == scenario && m.clients_per_region == clients)
}

/// What one operation costs each variant, by construction (the measured
/// Redis commands and batching follow in the notes).
fn op_cost_by_design(variant: &str) -> &'static str {
    match variant {
        "bc-srv" => {
            "1 client round trip to its site's node (TCP on loopback: the client's own site, \
             LAN cost), BC.DEC through the node's RESP front door, which calls the node \
             in-process once (the decrement; the value it replies with is the node's last \
             published state, read without another call); the node's per-key task applies every decrement that arrives while a write is in \
             flight to its cached replica and lands them all with the next single Lua \
             compare-and-set on the site's Redis (one shared connection), answering each once \
             that write landed: under load far fewer than 1 Redis command per operation"
        }
        "roost" => {
            "as bc-srv (1 client round trip to the node's front door, the same node and \
             batching), but the node's conditional write is one serializable transaction in \
             the site's embedded Roost database: no Redis"
        }
        "bc-clt" => {
            "3 client round trips to the site's Redis per attempt (WATCH; HMGET of the \
             replica; MULTI, HSET, SADD, SADD, EXEC), all again from WATCH whenever another \
             client wrote the counter in between (on one hot counter, most attempts)"
        }
        "weak" => {
            "2 client round trips to the site's Redis (GET, then MULTI, INCRBY, RPUSH to the \
             replication log, EXEC), the check and the decrement not atomic together; the \
             site's agent ships the log to the other sites"
        }
        _ => {
            "1 client round trip to the one Redis in US-East (EVAL of a Lua \
             check-and-decrement: HMGET, HINCRBY inside); clients in US-West and EU go through \
             a DelayProxy and pay the wide-area round trip"
        }
    }
}

/// A sweep's points of every variant, as one note line.
fn sweep_line(all: &[Measured], plan: &Plan, scenario: &str) -> String {
    let per_variant: Vec<String> = VARIANTS
        .iter()
        .map(|v| {
            let points: Vec<String> = plan
                .sweep_clients
                .iter()
                .filter_map(|&c| find_point(all, v, scenario, c))
                .map(|m| {
                    let total = m.total();
                    format!(
                        "{}/region {:.0} ops/s p50 {:.3} ms p99 {:.3} ms",
                        m.clients_per_region,
                        m.throughput(),
                        total.latency_ns.value_at_quantile(0.5) as f64 / 1e6,
                        total.latency_ns.value_at_quantile(0.99) as f64 / 1e6
                    )
                })
                .collect();
            format!("{v}: {}", points.join(", "))
        })
        .collect();
    format!("{scenario} (all regions): {}.", per_variant.join("; "))
}

/// The 1-minute load average (`/proc/loadavg`), where there is one.
fn load_average() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next().map(str::to_owned)
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "missed"
    }
}

pub fn run(args: &EscrowArgs, command: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        redis_server_available(),
        "`roost bench escrow` needs redis-server on PATH (Debian: apt-get install redis-server)"
    );
    let plan = Plan::of(args);
    let load_at_start = load_average();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let mut all = Vec::new();
    for variant in VARIANTS {
        let begun = Instant::now();
        let measured = runtime.block_on(run_variant(variant, &plan))?;
        for m in &measured {
            println!(
                "{variant:<7} {:<15} {:>10.0} ops/s  median ms per region {:?}  excess {}  ({:.1}s)",
                m.scenario,
                m.throughput(),
                (0..m.per_site.len())
                    .map(|s| (m.regions[s].name(), round3(m.median_ms(s))))
                    .collect::<Vec<_>>(),
                m.excess(),
                begun.elapsed().as_secs_f64()
            );
        }
        all.extend(measured);
    }
    drop(runtime);

    let load_at_end = load_average();
    let mut report = BenchReport::new(BENCHMARK, command);
    for m in &all {
        report.rows.extend(m.report_rows(&plan));
    }
    let mut notes = Vec::new();
    notes.push(format!(
        "Everything runs on this one machine (clients, proxies, sites, redis-servers) and \
         shares its cores with whatever else runs: 1-minute load average {} at the start and {} \
         at the end; numbers move by tens of percent between runs when the machine is shared.",
        load_at_start.as_deref().unwrap_or("unknown"),
        load_at_end.as_deref().unwrap_or("unknown")
    ));
    if args.quick {
        notes.push(format!(
            "--quick: Table I's round trips scaled by {} (8-16 ms), {:?} measured after {:?} \
             of warm-up, {} clients per region, the exhausted counter starts at {}. Not the \
             paper's delays: the full run (no --quick) uses them.",
            plan.rtt_scale, plan.measure, plan.warmup, plan.clients_per_region, plan.exhaust_start
        ));
    } else {
        notes.push(format!(
            "Table I's round trips unscaled (US-East/US-West 80-83 ms, US-East/EU 93-96 ms, \
             US-West/EU 161-163 ms), {:?} measured after {:?} of warm-up, {} clients per \
             region, the exhausted counter starts at {} with {} clients per region.",
            plan.measure,
            plan.warmup,
            plan.clients_per_region,
            plan.exhaust_start,
            plan.exhaust_clients_per_region
        ));
    }
    notes.push(format!(
        "{SWEEP_ONE} / {SWEEP_MANY}: throughput against latency (Figures 6-7): {:?} clients \
             per region, each point {:?} measured after {:?} of warm-up, on the single counter \
             or on {MANY_COUNTERS} counters (each decrement picks one uniformly, each starts at \
             {} split between the sites); one row per point, client_region = all, \
             throughput_tps the aggregate, latency of all regions together, \
             extra.p50_ms_per_region the regions' medians. {OVER_TIME} (Figure 9): a counter \
             starting at {}, all at US-East's site, {} clients per region decrementing until \
             Fail, each pausing {:?} after every operation so that the rights last many \
             windows (the seed paced its clients with 100 ms of think time); one row per \
             {:?} window (window_start_ms, by the decrements' start) with the window's \
             successful decrements (throughput_tps per second) and their latency; \
             remote = true when some of the clients are remote (Strong).",
        plan.sweep_clients,
        plan.sweep_measure,
        plan.sweep_warmup,
        plan.many_start,
        plan.over_time_start,
        plan.over_time_clients_per_region,
        plan.over_time_think,
        plan.window
    ));
    notes.push(
        "Every client decrements by 1 with the Global flag, closed loop. single-counter: one \
         counter whose start is split between the sites' rights (Strong: one site, US-East, \
         holds it), large enough not to run out; throughput_tps is per client region, \
         extra.throughput_all_regions_tps the variant's total. exhaust: the counter starts \
         small, all at US-East's site, and the clients decrement until Fail; \
         extra.excess_decrements = successful decrements beyond the start (bound 0). \
         Strong's clients outside US-East reach its Redis through a DelayProxy (remote = true); \
         a Lua check-and-decrement makes each update one conditional round trip."
            .to_owned(),
    );
    notes.push(format!(
        "Clients: every variant's clients reach their site over a TCP connection of their own \
         (one per client, redis-rs, one operation in flight, no pipelining; the front doors' \
         clients AUTH once when they connect), {} per region in single-counter, the same for every variant; bc-srv's and roost's go to the site \
         node's RESP front door (BC.DEC key 1 GLOBAL), the others' to Redis. Only Strong's \
         clients outside US-East cross the emulated wide area on every operation; the \
         bounded-counter designs cross it for propagation and rights transfers (bc-clt's \
         libraries ask their own site's agent, which asks the donor over the site links).",
        plan.clients_per_region
    ));
    for variant in VARIANTS {
        let measured = find(&all, variant, SINGLE)
            .and_then(|m| m.cost.as_ref())
            .map(|cost| {
                let batching = cost.ops_per_write().map_or(String::new(), |b| {
                    format!(
                        "; {b:.1} decrements per node write ({} writes for {} decrements)",
                        cost.node_writes, cost.node_ops
                    )
                });
                format!(
                    " Measured in {SINGLE} (whole run, {} decrements): Redis commands per \
                     decrement, all servers, Lua's inner calls included: {}{batching}.",
                    cost.ok_all,
                    cost.redis_summary()
                )
            })
            .unwrap_or_default();
        let line = format!(
            "Cost of one operation, {variant}: {}.{measured}",
            op_cost_by_design(variant)
        );
        println!("{line}");
        notes.push(line);
    }

    let mut goals_met = true;
    match (find(&all, "bc-srv", SINGLE), find(&all, "weak", SINGLE)) {
        (Some(srv), Some(weak)) => {
            let ratio = srv.throughput() / weak.throughput().max(f64::MIN_POSITIVE);
            let met = ratio >= THROUGHPUT_GOAL;
            goals_met &= met;
            let line = format!(
                "Goal 1: bc-srv throughput / weak throughput = {:.0} / {:.0} ops/s = {ratio:.2}x \
                 (goal >= {THROUGHPUT_GOAL:.1}x: {}).",
                srv.throughput(),
                weak.throughput(),
                verdict(met)
            );
            println!("{line}");
            notes.push(line);
        }
        _ => anyhow::bail!("no bc-srv or weak single-counter measurement"),
    }
    match (find(&all, "bc-srv", SINGLE), find(&all, "strong", SINGLE)) {
        (Some(srv), Some(strong)) => {
            let mut parts = Vec::new();
            let mut worst: f64 = 0.0;
            for site in (0..strong.per_site.len()).filter(|&s| strong.remote[s]) {
                let ratio = srv.median_ms(site) / strong.median_ms(site).max(f64::MIN_POSITIVE);
                worst = worst.max(ratio);
                parts.push(format!(
                    "{}: {:.3} / {:.3} ms = {ratio:.4}",
                    strong.regions[site].name(),
                    srv.median_ms(site),
                    strong.median_ms(site)
                ));
            }
            let met = worst <= LATENCY_GOAL;
            goals_met &= met;
            let line = format!(
                "Goal 2: remote-region median latency bc-srv / strong: {} (worst {worst:.4}; \
                 goal <= {LATENCY_GOAL}: {}).",
                parts.join(", "),
                verdict(met)
            );
            println!("{line}");
            notes.push(line);
        }
        _ => anyhow::bail!("no bc-srv or strong single-counter measurement"),
    }
    let excess: Vec<String> = VARIANTS
        .iter()
        .filter_map(|v| find(&all, v, EXHAUST))
        .map(|m| {
            format!(
                "{} {} (of {} ok, start {}, final {:?})",
                m.variant,
                m.excess(),
                m.ok(),
                m.start,
                m.final_values
            )
        })
        .collect();
    let line = format!("Excess decrements (exhaust): {}.", excess.join("; "));
    println!("{line}");
    notes.push(line);
    let invariant_ok = ["bc-srv", "bc-clt", "roost", "strong"]
        .iter()
        .flat_map(|v| all.iter().filter(move |m| m.variant == *v))
        .all(|m| m.excess() == 0);
    let weak_violates = find(&all, "weak", EXHAUST).is_some_and(|m| m.excess() > 0);
    goals_met &= invariant_ok;
    let line = format!(
        "Goal 3: 0 excess decrements for bc-srv, bc-clt, roost, strong in every scenario: {} \
         ({}); Weak exceeds the bound in the same run (exhaust; expected): {}.",
        if invariant_ok { "yes" } else { "NO" },
        verdict(invariant_ok),
        if weak_violates { "yes" } else { "no" }
    );
    println!("{line}");
    notes.push(line);
    for scenario in [SWEEP_ONE, SWEEP_MANY] {
        let line = sweep_line(&all, &plan, scenario);
        println!("{line}");
        notes.push(line);
    }
    let over_time: Vec<String> = VARIANTS
        .iter()
        .filter_map(|v| find(&all, v, OVER_TIME))
        .map(|m| {
            let windows = m.windows(plan.window);
            let medians: Vec<f64> = windows
                .iter()
                .filter(|(_, h)| !h.is_empty())
                .map(|(_, h)| h.value_at_quantile(0.5) as f64 / 1e6)
                .collect();
            let lowest = medians.iter().copied().fold(f64::INFINITY, f64::min);
            let highest = medians.iter().copied().fold(0.0, f64::max);
            let total = m.total();
            format!(
                "{} {:.1} s, {} windows, median per window {:.3}-{:.3} ms, p99 over the run \
                 {:.3} ms, excess {}",
                m.variant,
                m.seconds,
                windows.len(),
                lowest,
                highest,
                total.latency_ns.value_at_quantile(0.99) as f64 / 1e6,
                m.excess()
            )
        })
        .collect();
    let line = format!(
        "{OVER_TIME} (start {}, {} paced clients per region): {}.",
        plan.over_time_start,
        plan.over_time_clients_per_region,
        over_time.join("; ")
    );
    println!("{line}");
    notes.push(line);
    println!("goals {}", if goals_met { "met" } else { "not all met" });
    report.notes = notes;

    let singles: Vec<&Measured> = VARIANTS
        .iter()
        .filter_map(|v| find(&all, v, SINGLE))
        .collect();
    let regions: Vec<String> = singles
        .first()
        .map(|m| m.regions.iter().map(|r| r.name().to_owned()).collect())
        .unwrap_or_default();
    let latency_chart = |title: &str, quantile: f64| BarChart {
        title: title.to_owned(),
        y_label: "ms".to_owned(),
        categories: regions.clone(),
        series: singles
            .iter()
            .map(|m| BarSeries {
                name: m.variant.to_owned(),
                values: m
                    .per_site
                    .iter()
                    .map(|r| Some(r.latency_ns.value_at_quantile(quantile) as f64 / 1e6))
                    .collect(),
            })
            .collect(),
    };
    let mut charts = vec![
        BarChart {
            title: "single counter, 100% decrements: throughput (all regions)".to_owned(),
            y_label: "ops/s".to_owned(),
            categories: singles.iter().map(|m| m.variant.to_owned()).collect(),
            series: vec![BarSeries {
                name: "ops/s".to_owned(),
                values: singles.iter().map(|m| Some(m.throughput())).collect(),
            }],
        },
        latency_chart("median latency per client region", 0.5),
        latency_chart("p99 latency per client region", 0.99),
        BarChart {
            title: "single counter: Redis commands per decrement (all servers, Lua's inner calls \
                    included)"
                .to_owned(),
            y_label: "commands".to_owned(),
            categories: singles.iter().map(|m| m.variant.to_owned()).collect(),
            series: vec![BarSeries {
                name: "commands/decrement".to_owned(),
                values: singles
                    .iter()
                    .map(|m| m.cost.as_ref().map(OpCost::redis_per_op))
                    .collect(),
            }],
        },
        BarChart {
            title: "exhaust: decrements in excess of the bound".to_owned(),
            y_label: "decrements".to_owned(),
            categories: VARIANTS.iter().map(|v| (*v).to_owned()).collect(),
            series: vec![BarSeries {
                name: "excess".to_owned(),
                values: VARIANTS
                    .iter()
                    .map(|v| find(&all, v, EXHAUST).map(|m| m.excess() as f64))
                    .collect(),
            }],
        },
    ];
    let sweep_chart =
        |scenario: &str, what: &str, y_label: &str, value: &dyn Fn(&Measured) -> f64| BarChart {
            title: format!("{scenario}: {what} per clients per region"),
            y_label: y_label.to_owned(),
            categories: plan
                .sweep_clients
                .iter()
                .map(|c| format!("{c}/region"))
                .collect(),
            series: VARIANTS
                .iter()
                .map(|v| BarSeries {
                    name: (*v).to_owned(),
                    values: plan
                        .sweep_clients
                        .iter()
                        .map(|&c| find_point(&all, v, scenario, c).map(value))
                        .collect(),
                })
                .collect(),
        };
    let throughput = |m: &Measured| m.throughput();
    let median = |m: &Measured| m.total().latency_ns.value_at_quantile(0.5) as f64 / 1e6;
    for scenario in [SWEEP_ONE, SWEEP_MANY] {
        charts.push(sweep_chart(
            scenario,
            "throughput (all regions)",
            "ops/s",
            &throughput,
        ));
        charts.push(sweep_chart(
            scenario,
            "median latency (all regions)",
            "ms",
            &median,
        ));
    }
    let timelines: Vec<(&str, Vec<Window>)> = VARIANTS
        .iter()
        .filter_map(|v| find(&all, v, OVER_TIME))
        .map(|m| (m.variant, m.windows(plan.window)))
        .collect();
    let longest = timelines.iter().map(|(_, w)| w.len()).max().unwrap_or(0);
    if longest > 0 {
        for (what, quantile) in [("median", 0.5), ("p99", 0.99)] {
            charts.push(BarChart {
                title: format!(
                    "{OVER_TIME}: {what} latency per {} ms window (start {})",
                    plan.window.as_millis(),
                    plan.over_time_start
                ),
                y_label: "ms".to_owned(),
                categories: (0..longest)
                    .map(|i| format!("{:.1}s", (plan.window * i as u32).as_secs_f64()))
                    .collect(),
                series: timelines
                    .iter()
                    .map(|(variant, windows)| BarSeries {
                        name: (*variant).to_owned(),
                        values: (0..longest)
                            .map(|i| {
                                windows
                                    .get(i)
                                    .filter(|(_, h)| !h.is_empty())
                                    .map(|(_, h)| h.value_at_quantile(quantile) as f64 / 1e6)
                            })
                            .collect(),
                    })
                    .collect(),
            });
        }
    }
    let png = args.out.join("escrow.png");
    report.write_with_plot(&args.out, || {
        finish_png(render_figure_png(&charts, 2, &png), png.clone())
    })?;
    Ok(())
}

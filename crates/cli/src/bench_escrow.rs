//! `roost bench escrow`: the escrow middleware over Redis (issue 6, the
//! seed `002`'s §V) with the emulated wide area: three regions (US-East,
//! US-West, EU) with Table I's round trips through `DelayProxy`s, one
//! `redis-server` per site (Strong: one, in US-East), for each variant
//! (bc-srv, bc-clt, weak, strong):
//!
//! * `single-counter`: clients in every region decrementing one counter
//!   (100% decrements, `Global` flag), from a start large enough not to run
//!   out: throughput, median and p99 latency per client region (Figures 6-8).
//! * `exhaust`: a counter starting small (6,000; 600 with `--quick`) and
//!   clients in every region decrementing until `Fail`: decrements in excess
//!   of the bound (Figure 10).
//!
//! Goals (issue 6): bc-srv throughput at least 1.0x Weak's; median latency
//! of clients in a remote region (for Strong, every region but US-East) with
//! bc-srv at most 1/10 of Strong's.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use hdrhistogram::Histogram;
use roost_bench::plot::{finish_png, render_figure_png, BarChart, BarSeries};
use roost_bench::results::{BenchReport, LatencyUs, Row};
use roost_escrow::redis_server::redis_server_available;
use roost_escrow::{
    excess_decrements, Bound, Client, Deployment, DeploymentConfig, Design, EscrowCounters,
    EscrowError, Flag, Outcome, Region, StrongClient, StrongDeployment,
};

const BENCHMARK: &str = "escrow";
const VARIANTS: [&str; 4] = ["bc-srv", "bc-clt", "weak", "strong"];
const THROUGHPUT_GOAL: f64 = 1.0;
const LATENCY_GOAL: f64 = 0.1;
const SINGLE: &str = "single-counter";
const EXHAUST: &str = "exhaust";

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
    Middleware(Deployment),
    Strong(StrongDeployment),
}

impl Target {
    async fn start(variant: &str, plan: &Plan) -> anyhow::Result<Target> {
        let design = match variant {
            "bc-srv" => Design::ServerBased,
            "bc-clt" => Design::ClientBased,
            "weak" => Design::Weak,
            _ => {
                return Ok(Target::Strong(
                    StrongDeployment::three_regions(plan.rtt_scale).await?,
                ))
            }
        };
        Ok(Target::Middleware(
            Deployment::start(DeploymentConfig::three_regions(design, plan.rtt_scale)).await?,
        ))
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

    async fn client(&self, site: usize) -> anyhow::Result<AnyClient> {
        Ok(match self {
            Target::Middleware(d) => AnyClient::Middleware(d.client(site).await?),
            Target::Strong(d) => AnyClient::Strong(d.client(site).await?),
        })
    }

    /// Creates `key` (bound 0) at every site and gives it `start`: split
    /// between the sites (`spread`) or all at the first site; waits until
    /// every site knows it and, for the bounded-counter designs, holds
    /// rights.
    async fn setup(&self, key: &str, start: u64, spread: bool) -> anyhow::Result<()> {
        for site in 0..self.sites() {
            self.client(site).await?.create(key).await?;
        }
        let givers: Vec<usize> = match (self, spread) {
            (Target::Strong(_), _) | (_, false) => vec![0],
            (Target::Middleware(_), true) => (0..self.sites()).collect(),
        };
        let share = start / givers.len() as u64;
        for &site in &givers {
            let outcome = self.client(site).await?.inc(key, share).await?;
            anyhow::ensure!(outcome == Outcome::Ok, "initial increment: {outcome:?}");
        }
        let total = share * givers.len() as u64;
        let Target::Middleware(d) = self else {
            return Ok(());
        };
        anyhow::ensure!(
            d.wait_value_everywhere(key, total as i64, Duration::from_secs(30))
                .await,
            "`{key}` did not reach {total} at every site: {:?}",
            d.values(key).await
        );
        if d.design() != Design::Weak {
            let started = Instant::now();
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
    fails: u64,
    retries: u64,
    errors: u64,
    latency_ns: Histogram<u64>,
}

impl RegionResult {
    fn new() -> RegionResult {
        RegionResult {
            ok: 0,
            fails: 0,
            retries: 0,
            errors: 0,
            latency_ns: histogram(),
        }
    }

    fn add(&mut self, other: &RegionResult) {
        self.ok += other.ok;
        self.fails += other.fails;
        self.retries += other.retries;
        self.errors += other.errors;
        let _ = self.latency_ns.add(&other.latency_ns);
    }
}

/// Runs `clients_per_region` clients at every site on `key`; per-site
/// results and the seconds throughput is measured over.
async fn drive(
    target: &Target,
    key: &str,
    clients_per_region: usize,
    mode: Mode,
) -> anyhow::Result<(Vec<RegionResult>, f64)> {
    let mut clients = Vec::new();
    for site in 0..target.sites() {
        for _ in 0..clients_per_region {
            clients.push((site, target.client(site).await?));
        }
    }
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (site, mut client) in clients {
        let key = key.to_owned();
        tasks.spawn(async move {
            let mut result = RegionResult::new();
            let (from, until) = match mode {
                Mode::Timed { warmup, measure } => (warmup, warmup + measure),
                Mode::Drain { deadline } => (Duration::ZERO, deadline),
            };
            while started.elapsed() < until {
                let op_started = Instant::now();
                let outcome = client.dec(&key).await;
                let counted =
                    op_started.duration_since(started) >= from && started.elapsed() <= until;
                match outcome {
                    Ok(Outcome::Ok) => {
                        if counted {
                            result.ok += 1;
                            let ns =
                                u64::try_from(op_started.elapsed().as_nanos()).unwrap_or(u64::MAX);
                            let _ = result.latency_ns.record(ns.max(1));
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
    final_values: Vec<i64>,
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

    fn rows(&self, plan: &Plan) -> Vec<Row> {
        self.per_site
            .iter()
            .enumerate()
            .map(|(site, result)| {
                let mut row = Row::new("escrow", self.variant)
                    .with_param("scenario", self.scenario)
                    .with_param("client_region", self.regions[site].name())
                    .with_param("remote", self.remote[site])
                    .with_param("clients_per_region", self.clients_per_region as u64)
                    .with_param("initial", self.start)
                    .with_param("bound", 0)
                    .with_param("decrement_pct", 100)
                    .with_param("flag", "global")
                    .with_param("rtt_scale", plan.rtt_scale)
                    .with_extra("excess_decrements", self.excess())
                    .with_extra("ok_decrements", result.ok)
                    .with_extra("ok_decrements_all_regions", self.ok())
                    .with_extra("throughput_all_regions_tps", round1(self.throughput()))
                    .with_extra("fails", result.fails)
                    .with_extra("retries", result.retries)
                    .with_extra("errors", result.errors)
                    .with_extra("seconds", round3(self.seconds))
                    .with_extra("final_values", self.final_values.clone());
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

    let key = "hot";
    target.setup(key, plan.single_start, true).await?;
    let (per_site, seconds) = drive(
        &target,
        key,
        plan.clients_per_region,
        Mode::Timed {
            warmup: plan.warmup,
            measure: plan.measure,
        },
    )
    .await?;
    measured.push(Measured {
        variant,
        scenario: SINGLE,
        per_site,
        regions: regions.clone(),
        remote: remote.clone(),
        seconds,
        start: plan.single_start,
        clients_per_region: plan.clients_per_region,
        final_values: Vec::new(),
    });

    let key = "stock";
    target.setup(key, plan.exhaust_start, false).await?;
    let (per_site, seconds) = drive(
        &target,
        key,
        plan.exhaust_clients_per_region,
        Mode::Drain {
            deadline: plan.exhaust_deadline,
        },
    )
    .await?;
    let final_values = target.final_values(key).await;
    measured.push(Measured {
        variant,
        scenario: EXHAUST,
        per_site,
        regions,
        remote,
        seconds,
        start: plan.exhaust_start,
        clients_per_region: plan.exhaust_clients_per_region,
        final_values,
    });
    Ok(measured)
}

fn find<'a>(all: &'a [Measured], variant: &str, scenario: &str) -> Option<&'a Measured> {
    all.iter()
        .find(|m| m.variant == variant && m.scenario == scenario)
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

    let mut report = BenchReport::new(BENCHMARK, command);
    for m in &all {
        report.rows.extend(m.rows(&plan));
    }
    let mut notes = Vec::new();
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
    let invariant_ok = ["bc-srv", "bc-clt", "strong"]
        .iter()
        .filter_map(|v| find(&all, v, EXHAUST))
        .all(|m| m.excess() == 0);
    let weak_violates = find(&all, "weak", EXHAUST).is_some_and(|m| m.excess() > 0);
    let line = format!(
        "No invariant violation for bc-srv, bc-clt, strong: {}; Weak violates in the same run: {}.",
        if invariant_ok { "yes" } else { "NO" },
        if weak_violates { "yes" } else { "no" }
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
    let charts = vec![
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
    let png = args.out.join("escrow.png");
    report.write_with_plot(&args.out, || {
        finish_png(render_figure_png(&charts, 2, &png), png.clone())
    })?;
    Ok(())
}

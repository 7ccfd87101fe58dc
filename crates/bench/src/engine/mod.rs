//! `roost bench engine`: the storage engine alone, Silo OCC against a
//! no-concurrency-control baseline on the same relation in the same process.
//!
//! One relation of `records` keys (u64 big-endian, `index << 8`) with
//! `value_bytes` values is loaded once (measuring resident memory), then each
//! workload x key distribution x thread count is measured for every variant,
//! alternating the variants within each repetition so drift on a noisy
//! machine hits them alike. A row reports the repetition with the median
//! throughput.

mod load;
mod summary;
mod workload;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use roost_storage::{Engine, EngineConfig, PlantedBugs};
use serde_json::json;
use thiserror::Error;

pub use load::{load, MemoryReport, LOAD_BATCH_RECORDS};
pub use summary::{evaluate_goals, GoalCheck};
pub use workload::{gap_key, loaded_key, Variant, Workload, KEY_BYTES, KEY_GAP_BITS, SCAN_LENGTH};

use crate::harness::{measure, MeasureSpec, Measurement};
use crate::results::{BenchReport, LatencyUs, Machine, Row, WrittenFiles};
use crate::zipf::{KeyChooser, KeyDistribution, KeyGenError};
use workload::{occ_txn, raw_txn, Target, TxnState};

pub const BENCHMARK_NAME: &str = "engine";
/// txn-10 needs ten distinct keys; keep some slack.
pub const MIN_RECORDS: u64 = 16;
/// Loaded keys are `index << 8` in a u64.
pub const MAX_RECORDS: u64 = 1 << 40;
/// rmw increments the first 8 bytes of a value.
pub const MIN_VALUE_BYTES: usize = 8;
pub const MAX_VALUE_BYTES: usize = 1 << 20;
pub const MAX_SECONDS_PER_ROW: f64 = 3600.0;
pub const MAX_THREADS: usize = 1024;
/// Resident bytes per byte of key + value assumed when checking that a run
/// fits in memory (measured about 2 at 100-byte values; slack for scan-mix).
const ESTIMATED_BYTES_PER_RAW_BYTE: f64 = 3.0;
/// Share of the machine's memory a run may plan to use.
const USABLE_MEMORY_SHARE: f64 = 0.8;
/// Share of a row's duration run first and discarded.
const WARMUP_FRACTION: f64 = 0.1;

#[derive(Debug, Clone, PartialEq, Error)]
pub enum ConfigError {
    #[error("records must be in {MIN_RECORDS}..={MAX_RECORDS}, got {0}")]
    Records(u64),
    #[error("value bytes must be in {MIN_VALUE_BYTES}..={MAX_VALUE_BYTES}, got {0}")]
    ValueBytes(usize),
    #[error("seconds per row must be a number in (0, {MAX_SECONDS_PER_ROW}], got {0}")]
    Seconds(f64),
    #[error("repetitions must be at least 1")]
    Repetitions,
    #[error("thread counts must be a non-empty list of numbers in 1..={MAX_THREADS}")]
    Threads,
    #[error("at least one key distribution and one workload are needed")]
    Empty,
    #[error("key distribution: {0}")]
    Distribution(#[from] KeyGenError),
}

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineBenchConfig {
    pub records: u64,
    pub value_bytes: usize,
    /// Measured seconds per row and repetition (a 10% warm-up comes on top).
    pub seconds_per_row: f64,
    pub repetitions: usize,
    pub threads: Vec<usize>,
    pub distributions: Vec<KeyDistribution>,
    pub workloads: Vec<Workload>,
    /// Threads used to load the relation.
    pub load_threads: usize,
    /// Seeds every thread's RNG (variants of one row see the same keys).
    pub seed: u64,
}

impl EngineBenchConfig {
    /// The full run: 3 repetitions of 3 s per row.
    pub fn full() -> Self {
        EngineBenchConfig {
            records: 1_000_000,
            value_bytes: 100,
            seconds_per_row: 3.0,
            repetitions: 3,
            threads: vec![1, 2],
            distributions: vec![KeyDistribution::Uniform, KeyDistribution::YCSB_ZIPFIAN],
            workloads: Workload::ALL.to_vec(),
            load_threads: std::thread::available_parallelism().map_or(1, |n| n.get().min(4)),
            seed: 0x005E_ED0F_2005,
        }
    }

    /// The CI-sized run: 1 repetition of 1 s per row.
    pub fn quick() -> Self {
        EngineBenchConfig {
            seconds_per_row: 1.0,
            repetitions: 1,
            ..EngineBenchConfig::full()
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(MIN_RECORDS..=MAX_RECORDS).contains(&self.records) {
            return Err(ConfigError::Records(self.records));
        }
        if !(MIN_VALUE_BYTES..=MAX_VALUE_BYTES).contains(&self.value_bytes) {
            return Err(ConfigError::ValueBytes(self.value_bytes));
        }
        let seconds = self.seconds_per_row;
        if !(seconds.is_finite() && seconds > 0.0 && seconds <= MAX_SECONDS_PER_ROW) {
            return Err(ConfigError::Seconds(seconds));
        }
        if self.repetitions == 0 {
            return Err(ConfigError::Repetitions);
        }
        if self.threads.is_empty() || self.threads.iter().any(|&t| t == 0 || t > MAX_THREADS) {
            return Err(ConfigError::Threads);
        }
        if self.distributions.is_empty() || self.workloads.is_empty() {
            return Err(ConfigError::Empty);
        }
        for &distribution in &self.distributions {
            KeyChooser::new(distribution, 1)?;
        }
        Ok(())
    }

    fn measure_spec(&self, threads: usize) -> MeasureSpec {
        let duration = Duration::from_secs_f64(self.seconds_per_row);
        MeasureSpec {
            threads,
            warmup: duration.mul_f64(WARMUP_FRACTION),
            duration,
        }
    }

    /// Rows measured (the memory row not counted).
    pub fn measured_rows(&self) -> usize {
        let per_dist_threads: usize = self.workloads.iter().map(|w| w.variants().len()).sum();
        per_dist_threads * self.distributions.len() * self.threads.len()
    }
}

/// What a run produced.
#[derive(Debug)]
pub struct EngineBenchRun {
    pub report: BenchReport,
    pub memory: MemoryReport,
    pub goals: Vec<GoalCheck>,
    pub files: WrittenFiles,
    /// `None` when the chart could not be drawn (a warning was printed).
    pub plot: Option<PathBuf>,
}

/// One workload x distribution x thread count, measured for each variant.
struct Group {
    index: usize,
    workload: Workload,
    distribution: KeyDistribution,
    keys: KeyChooser,
    threads: usize,
    /// Row number (0-based) of this group's first variant.
    first_row: usize,
}

/// The engines and relation every measurement shares.
struct Bench<'a> {
    config: &'a EngineBenchConfig,
    target: Target<'a>,
    occ_engine: &'a Engine,
    /// Same relation, workers that skip phantom validation.
    no_phantom_engine: &'a Engine,
    total_rows: usize,
}

/// One repetition's numbers.
#[derive(Debug, Clone)]
struct RepResult {
    throughput_tps: f64,
    latency_us: LatencyUs,
    abort_rate: f64,
    commits: u64,
    aborts: u64,
    failures: u64,
    elapsed_s: f64,
}

impl RepResult {
    fn from_measurement(measurement: &Measurement) -> Self {
        RepResult {
            throughput_tps: measurement.throughput_tps(),
            latency_us: measurement.latency_us(),
            abort_rate: measurement.abort_rate(),
            commits: measurement.commits,
            aborts: measurement.aborts,
            failures: measurement.failures,
            elapsed_s: measurement.elapsed.as_secs_f64(),
        }
    }
}

/// Runs the benchmark, prints progress and a summary, and writes
/// `engine.json`, `engine.md` and `engine.png` under `out_dir`.
pub fn run(
    config: &EngineBenchConfig,
    out_dir: &Path,
    command: &str,
) -> anyhow::Result<EngineBenchRun> {
    config.validate()?;
    check_memory_fits(config, Machine::detect().memory_gib)?;
    std::fs::create_dir_all(out_dir)
        .with_context(|| format!("creating the output directory {}", out_dir.display()))?;
    let mut report = BenchReport::new(BENCHMARK_NAME, command);
    let occ_engine = Engine::default();
    let no_phantom_engine = Engine::new(EngineConfig {
        planted_bugs: PlantedBugs {
            skip_phantom_validation: true,
            ..PlantedBugs::default()
        },
        ..EngineConfig::default()
    });
    let relation = occ_engine
        .create_relation("bench")
        .context("creating the benchmark relation")?;
    println!(
        "loading {} records of {} + {} bytes on {} threads ...",
        config.records, KEY_BYTES, config.value_bytes, config.load_threads
    );
    let memory = load(
        &occ_engine,
        &relation,
        config.records,
        config.value_bytes,
        config.load_threads,
    )
    .context("loading the benchmark relation")?;
    println!(
        "loaded in {:.2} s ({:.2} M inserts/s); {}",
        memory.load_duration.as_secs_f64(),
        memory.load_tps() / 1e6,
        memory.summary_line()
    );
    report.rows.push(memory.to_row());
    let bench = Bench {
        config,
        target: Target {
            relation: &relation,
        },
        occ_engine: &occ_engine,
        no_phantom_engine: &no_phantom_engine,
        total_rows: config.measured_rows(),
    };
    for group in plan(config)? {
        report.rows.extend(bench.run_group(&group));
    }
    let measured = &report.rows[1..];
    println!("\n{}", summary::summary_table(measured));
    let goals = evaluate_goals(measured, &memory);
    println!("{}", summary::goal_lines(&goals, measured));
    report.notes = summary::markdown_notes(config, &goals, measured);
    let (files, plot) =
        report.write_with_plot(out_dir, || summary::render_plot(measured, out_dir))?;
    Ok(EngineBenchRun {
        report,
        memory,
        goals,
        files,
        plot,
    })
}

/// Refuses a relation that would not fit in `memory_gib` (0: unknown, no
/// check), estimating [`ESTIMATED_BYTES_PER_RAW_BYTE`] times the raw data plus
/// the inserts scan-mix adds.
fn check_memory_fits(config: &EngineBenchConfig, memory_gib: f64) -> anyhow::Result<()> {
    let raw_bytes = (KEY_BYTES + config.value_bytes) as f64 * config.records as f64;
    let needed_gib = raw_bytes * ESTIMATED_BYTES_PER_RAW_BYTE / (1u64 << 30) as f64;
    if memory_gib > 0.0 && needed_gib > memory_gib * USABLE_MEMORY_SHARE {
        anyhow::bail!(
            "{} records of {} bytes need about {needed_gib:.1} GiB; this machine has {memory_gib} GiB",
            config.records,
            KEY_BYTES + config.value_bytes
        );
    }
    Ok(())
}

fn plan(config: &EngineBenchConfig) -> Result<Vec<Group>, KeyGenError> {
    let mut groups = Vec::new();
    let mut first_row = 0;
    let choosers = config
        .distributions
        .iter()
        .map(|&d| KeyChooser::new(d, config.records))
        .collect::<Result<Vec<_>, _>>()?;
    for &workload in &config.workloads {
        for (&distribution, keys) in config.distributions.iter().zip(&choosers) {
            for &threads in &config.threads {
                groups.push(Group {
                    index: groups.len(),
                    workload,
                    distribution,
                    keys: keys.clone(),
                    threads,
                    first_row,
                });
                first_row += workload.variants().len();
            }
        }
    }
    Ok(groups)
}

impl Bench<'_> {
    /// Measures every variant of `group` `repetitions` times, alternating
    /// variants within each repetition; returns one row per variant.
    fn run_group(&self, group: &Group) -> Vec<Row> {
        let variants = group.workload.variants();
        let mut reps: Vec<Vec<RepResult>> = vec![Vec::new(); variants.len()];
        for rep in 0..self.config.repetitions {
            for (v, &variant) in variants.iter().enumerate() {
                let measurement = self.measure_variant(group, variant, rep);
                let result = RepResult::from_measurement(&measurement);
                self.print_progress(group, v, variant, rep, &result);
                reps[v].push(result);
            }
        }
        let mut rows: Vec<Row> = variants
            .iter()
            .zip(&reps)
            .map(|(&variant, reps)| self.row(group, variant, reps))
            .collect();
        add_ratios(&mut rows);
        rows
    }

    fn measure_variant(&self, group: &Group, variant: Variant, rep: usize) -> Measurement {
        let engine = match variant {
            Variant::Occ => Some(self.occ_engine),
            Variant::OccNoPhantom => Some(self.no_phantom_engine),
            Variant::NoCc => None,
        };
        let spec = self.config.measure_spec(group.threads);
        let (target, value_bytes, workload) =
            (self.target, self.config.value_bytes, group.workload);
        measure(&spec, |thread| {
            let seed = thread_seed(self.config.seed, group.index, rep, thread);
            let mut state = TxnState::new(target, group.keys.clone(), seed, value_bytes);
            let mut worker = engine.map(Engine::worker);
            move || match worker.as_mut() {
                Some(worker) => occ_txn(workload, worker, &mut state),
                None => raw_txn(workload, &mut state),
            }
        })
    }

    fn print_progress(
        &self,
        group: &Group,
        v: usize,
        variant: Variant,
        rep: usize,
        result: &RepResult,
    ) {
        let width = self.total_rows.to_string().len();
        println!(
            "[{:>width$}/{}] {:<9} {:<8} t={} {:<14} rep {}/{}  {:>6.3} M tps  abort {:>6.2}%  p99 {:>8.2} µs",
            group.first_row + v + 1,
            self.total_rows,
            group.workload.name(),
            group.distribution.name(),
            group.threads,
            variant.name(),
            rep + 1,
            self.config.repetitions,
            result.throughput_tps / 1e6,
            result.abort_rate * 100.0,
            result.latency_us.p99,
        );
    }

    fn row(&self, group: &Group, variant: Variant, reps: &[RepResult]) -> Row {
        let median = median_rep(reps);
        let mut row = Row::new("roost", variant.name())
            .with_param("workload", group.workload.name())
            .with_param("distribution", group.distribution.name())
            .with_param("threads", group.threads as u64)
            .with_param("records", self.config.records)
            .with_param("value_bytes", self.config.value_bytes as u64)
            .with_extra(
                "repetitions_tps",
                reps.iter().map(|r| r.throughput_tps).collect::<Vec<_>>(),
            )
            .with_extra("commits", median.commits)
            .with_extra("aborts", median.aborts)
            .with_extra("failed_txns", reps.iter().map(|r| r.failures).sum::<u64>())
            .with_extra("elapsed_s", median.elapsed_s)
            .with_extra(
                "tps_per_thread",
                median.throughput_tps / group.threads as f64,
            );
        row.throughput_tps = median.throughput_tps;
        row.latency_us = median.latency_us;
        row.abort_rate = median.abort_rate;
        if variant == Variant::OccNoPhantom {
            row = row.with_extra(
                "note",
                "planted bug skip_phantom_validation: not serializable; measures the cost of phantom validation (node set, missing keys)",
            );
        }
        row
    }
}

/// The repetition with the median throughput (the lower middle one for an
/// even count), so a row's latency and abort rate come from the same run as
/// its throughput.
fn median_rep(reps: &[RepResult]) -> RepResult {
    let mut sorted: Vec<&RepResult> = reps.iter().collect();
    sorted.sort_by(|a, b| a.throughput_tps.total_cmp(&b.throughput_tps));
    sorted[(sorted.len() - 1) / 2].clone()
}

/// `ratio_to_baseline` on OCC rows: their throughput over the no-cc row's of
/// the same group; `ratio_to_occ` on occ-no-phantom.
fn add_ratios(rows: &mut [Row]) {
    let tps_of = |rows: &[Row], variant: Variant| {
        rows.iter()
            .find(|r| r.variant == variant.name())
            .map(|r| r.throughput_tps)
    };
    let baseline = tps_of(rows, Variant::NoCc);
    let occ = tps_of(rows, Variant::Occ);
    for row in rows.iter_mut() {
        let tps = row.throughput_tps;
        if row.variant == Variant::NoCc.name() {
            continue;
        }
        if let Some(base) = baseline.filter(|b| *b > 0.0) {
            row.extra
                .insert("ratio_to_baseline".into(), json!(tps / base));
        }
        if row.variant == Variant::OccNoPhantom.name() {
            if let Some(occ) = occ.filter(|o| *o > 0.0) {
                row.extra.insert("ratio_to_occ".into(), json!(tps / occ));
            }
        }
    }
}

/// A distinct, reproducible seed per group, repetition and thread; the same
/// for every variant, so OCC and the baseline draw the same keys.
fn thread_seed(seed: u64, group: usize, rep: usize, thread: usize) -> u64 {
    let mut x = seed;
    for part in [group as u64, rep as u64, thread as u64] {
        x = (x ^ part).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x ^= x >> 29;
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::BenchReport;

    fn tiny_config() -> EngineBenchConfig {
        EngineBenchConfig {
            records: 2_000,
            seconds_per_row: 0.02,
            threads: vec![1, 2],
            load_threads: 2,
            ..EngineBenchConfig::quick()
        }
    }

    #[test]
    fn defaults_match_the_issue() {
        let quick = EngineBenchConfig::quick();
        assert_eq!((quick.repetitions, quick.seconds_per_row), (1, 1.0));
        let full = EngineBenchConfig::full();
        assert_eq!((full.repetitions, full.seconds_per_row), (3, 3.0));
        assert_eq!((full.records, full.value_bytes), (1_000_000, 100));
        assert_eq!(full.threads, vec![1, 2]);
        assert_eq!(full.measured_rows(), 36);
    }

    #[test]
    fn bad_configs_are_errors() {
        let bad = [
            EngineBenchConfig {
                records: 3,
                ..tiny_config()
            },
            EngineBenchConfig {
                value_bytes: 4,
                ..tiny_config()
            },
            EngineBenchConfig {
                seconds_per_row: f64::NAN,
                ..tiny_config()
            },
            EngineBenchConfig {
                seconds_per_row: 0.0,
                ..tiny_config()
            },
            EngineBenchConfig {
                repetitions: 0,
                ..tiny_config()
            },
            EngineBenchConfig {
                threads: vec![],
                ..tiny_config()
            },
            EngineBenchConfig {
                threads: vec![1, 0],
                ..tiny_config()
            },
            EngineBenchConfig {
                workloads: vec![],
                ..tiny_config()
            },
            EngineBenchConfig {
                distributions: vec![KeyDistribution::Zipfian { theta: 2.0 }],
                ..tiny_config()
            },
        ];
        for config in bad {
            assert!(config.validate().is_err(), "{config:?}");
        }
        assert!(tiny_config().validate().is_ok());
    }

    #[test]
    fn oversized_relations_are_refused_before_loading() {
        let huge = EngineBenchConfig {
            records: 100_000_000_000,
            ..tiny_config()
        };
        assert!(check_memory_fits(&huge, 24.0).is_err());
        assert!(
            check_memory_fits(&huge, 0.0).is_ok(),
            "unknown memory: no check"
        );
        assert!(check_memory_fits(&EngineBenchConfig::full(), 24.0).is_ok());
        let out = std::path::Path::new("/proc/roost-cannot-create-this");
        let error = run(&huge, out, "test").expect_err("refused");
        if Machine::detect().memory_gib > 0.0 {
            assert!(error.to_string().contains("GiB"), "{error}");
        }
    }

    #[test]
    fn median_rep_is_the_middle_by_throughput() {
        let rep = |tps: f64| RepResult {
            throughput_tps: tps,
            latency_us: LatencyUs::default(),
            abort_rate: 0.0,
            commits: 0,
            aborts: 0,
            failures: 0,
            elapsed_s: 0.0,
        };
        assert_eq!(
            median_rep(&[rep(3.0), rep(1.0), rep(2.0)]).throughput_tps,
            2.0
        );
        assert_eq!(median_rep(&[rep(3.0), rep(1.0)]).throughput_tps, 1.0);
    }

    #[test]
    fn end_to_end_tiny_run_writes_every_row() {
        let out = std::env::temp_dir().join(format!("roost-engine-bench-{}", std::process::id()));
        let config = tiny_config();
        let run = run(&config, &out, "roost bench engine --test").expect("bench runs");
        let json = std::fs::read_to_string(&run.files.json).expect("json written");
        let parsed: BenchReport = serde_json::from_str(&json).expect("json parses");
        assert_eq!(parsed.rows.len(), 1 + config.measured_rows());
        assert_eq!(parsed.rows[0].variant, "memory");
        for row in &parsed.rows[1..] {
            assert!(row.throughput_tps > 0.0, "{row:?}");
            if row.variant != "no-cc" {
                assert!(row.extra.contains_key("ratio_to_baseline"), "{row:?}");
            }
        }
        assert!(parsed.rows.iter().any(|r| r.variant == "occ-no-phantom"));
        assert_eq!(
            run.goals.len(),
            6,
            "rmw per core at t=1 and t=2, ratios, scan-mix floor and goal, memory"
        );
        assert!(run.files.markdown.exists());
        std::fs::remove_dir_all(&out).expect("clean up");
    }
}

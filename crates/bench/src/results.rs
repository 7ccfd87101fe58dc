//! The benchmark results format (DESIGN.md, "Benchmark results format"): one
//! JSON object per benchmark, written as `<out>/<benchmark>.json`, beside a
//! Markdown table `<out>/<benchmark>.md` headed by the exact command line.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use thiserror::Error;

const BYTES_PER_GIB: f64 = (1u64 << 30) as f64;
const NANOS_PER_MICRO: f64 = 1_000.0;

#[derive(Debug, Error)]
pub enum ResultsError {
    #[error("benchmark name `{0}` must be non-empty ASCII letters, digits, `-` or `_`")]
    BadName(String),
    #[error("cannot write {path}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot encode results as JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// The machine a benchmark ran on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub cores: usize,
    pub memory_gib: f64,
}

impl Machine {
    /// Cores from `available_parallelism`, memory from `/proc/meminfo` (0 where
    /// it cannot be read).
    pub fn detect() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let memory_gib = total_memory_bytes().map_or(0.0, |bytes| {
            (bytes as f64 / BYTES_PER_GIB * 10.0).round() / 10.0
        });
        Machine { cores, memory_gib }
    }
}

fn total_memory_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_meminfo_total_bytes(&meminfo)
}

/// `MemTotal:  24588180 kB` -> bytes.
fn parse_meminfo_total_bytes(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut fields = line.split_whitespace().skip(1);
    let amount: u64 = fields.next()?.parse().ok()?;
    match fields.next() {
        Some("kB") | None => amount.checked_mul(1024),
        Some(_) => None,
    }
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyUs {
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
}

impl LatencyUs {
    /// From a histogram of latencies recorded in nanoseconds.
    pub fn from_histogram_ns(histogram: &Histogram<u64>) -> Self {
        if histogram.is_empty() {
            return LatencyUs::default();
        }
        let us = |ns: u64| ns as f64 / NANOS_PER_MICRO;
        LatencyUs {
            mean: histogram.mean() / NANOS_PER_MICRO,
            p50: us(histogram.value_at_quantile(0.5)),
            p99: us(histogram.value_at_quantile(0.99)),
            p999: us(histogram.value_at_quantile(0.999)),
        }
    }
}

/// One measured configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub system: String,
    pub variant: String,
    pub params: Map<String, Value>,
    pub throughput_tps: f64,
    pub latency_us: LatencyUs,
    pub abort_rate: f64,
    pub extra: Map<String, Value>,
}

impl Row {
    pub fn new(system: &str, variant: &str) -> Self {
        Row {
            system: system.to_owned(),
            variant: variant.to_owned(),
            params: Map::new(),
            throughput_tps: 0.0,
            latency_us: LatencyUs::default(),
            abort_rate: 0.0,
            extra: Map::new(),
        }
    }

    pub fn with_param(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.params.insert(name.to_owned(), value.into());
        self
    }

    pub fn with_extra(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(name.to_owned(), value.into());
        self
    }

    pub fn param_str(&self, name: &str) -> Option<&str> {
        self.params.get(name).and_then(Value::as_str)
    }

    pub fn param_u64(&self, name: &str) -> Option<u64> {
        self.params.get(name).and_then(Value::as_u64)
    }
}

/// The files [`BenchReport::write`] produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenFiles {
    pub json: PathBuf,
    pub markdown: PathBuf,
}

/// One benchmark run: the JSON object of DESIGN.md.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    pub benchmark: String,
    pub command: String,
    pub git_rev: String,
    pub machine: Machine,
    pub started_at: String,
    pub rows: Vec<Row>,
    /// Free text shown under the Markdown table (not part of the JSON format).
    #[serde(skip)]
    pub notes: Vec<String>,
}

impl BenchReport {
    /// A report stamped now, on this machine, at this checkout's revision.
    pub fn new(benchmark: &str, command: &str) -> Self {
        BenchReport {
            benchmark: benchmark.to_owned(),
            command: command.to_owned(),
            git_rev: git_rev(),
            machine: Machine::detect(),
            started_at: rfc3339_utc(SystemTime::now()),
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Writes the JSON and Markdown, draws the plot, and says where they went.
    pub fn write_with_plot(
        &self,
        out_dir: &Path,
        plot: impl FnOnce() -> Option<PathBuf>,
    ) -> Result<(WrittenFiles, Option<PathBuf>), ResultsError> {
        let files = self.write(out_dir)?;
        let plot = plot();
        println!(
            "wrote {} and {}",
            files.json.display(),
            files.markdown.display()
        );
        if let Some(plot) = &plot {
            println!("wrote {}", plot.display());
        }
        Ok((files, plot))
    }

    /// Writes `<out_dir>/<benchmark>.json` and `<out_dir>/<benchmark>.md`,
    /// creating `out_dir` if needed.
    pub fn write(&self, out_dir: &Path) -> Result<WrittenFiles, ResultsError> {
        check_benchmark_name(&self.benchmark)?;
        create_dir(out_dir)?;
        let files = WrittenFiles {
            json: out_dir.join(format!("{}.json", self.benchmark)),
            markdown: out_dir.join(format!("{}.md", self.benchmark)),
        };
        let mut json = serde_json::to_string_pretty(self)?;
        json.push('\n');
        write_file(&files.json, &json)?;
        write_file(&files.markdown, &self.to_markdown())?;
        Ok(files)
    }

    /// The Markdown rendering: command line, run metadata, one table row per
    /// result row (a column per parameter), then the notes.
    pub fn to_markdown(&self) -> String {
        let mut md = String::new();
        let _ = writeln!(md, "# `{}` benchmark\n", self.benchmark);
        let _ = writeln!(md, "```\n{}\n```\n", self.command);
        let _ = writeln!(
            md,
            "git rev `{}` · {} cores, {} GiB · started {}\n",
            self.git_rev, self.machine.cores, self.machine.memory_gib, self.started_at
        );
        md.push_str(&self.markdown_table());
        if !self.notes.is_empty() {
            md.push('\n');
            for note in &self.notes {
                let _ = writeln!(md, "{note}");
            }
        }
        md
    }

    fn markdown_table(&self) -> String {
        let param_names = self.param_names();
        let mut header: Vec<String> = vec!["system".into(), "variant".into()];
        header.extend(param_names.iter().cloned());
        header.extend(
            [
                "throughput (tps)",
                "mean µs",
                "p50 µs",
                "p99 µs",
                "p99.9 µs",
                "abort rate",
                "extra",
            ]
            .map(String::from),
        );
        let mut table = markdown_line(&header);
        table.push_str(&markdown_line(&vec!["---".to_owned(); header.len()]));
        for row in &self.rows {
            table.push_str(&markdown_line(&markdown_cells(row, &param_names)));
        }
        table
    }

    /// Parameter names across all rows, in order of first appearance, rows
    /// with the most parameters first (so a lone summary row does not set the
    /// column order).
    fn param_names(&self) -> Vec<String> {
        let mut rows: Vec<&Row> = self.rows.iter().collect();
        rows.sort_by_key(|row| std::cmp::Reverse(row.params.len()));
        let mut names: Vec<String> = Vec::new();
        for name in rows.iter().flat_map(|row| row.params.keys()) {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
        names
    }
}

fn markdown_cells(row: &Row, param_names: &[String]) -> Vec<String> {
    let mut cells = vec![row.system.clone(), row.variant.clone()];
    cells.extend(
        param_names
            .iter()
            .map(|name| row.params.get(name).map_or(String::new(), value_text)),
    );
    let latency = row.latency_us;
    if row.throughput_tps == 0.0 && latency == LatencyUs::default() {
        // A row that measured something else (memory, say).
        cells.extend(std::iter::repeat_n(String::from("-"), 6));
    } else {
        cells.push(group_thousands(row.throughput_tps.round() as u64));
        cells.extend(
            [latency.mean, latency.p50, latency.p99, latency.p999].map(|us| format!("{us:.2}")),
        );
        cells.push(format!("{:.4}", row.abort_rate));
    }
    let extra: Vec<String> = row
        .extra
        .iter()
        .map(|(name, value)| format!("{name}={}", value_text(value)))
        .collect();
    cells.push(extra.join("; "));
    cells
}

fn markdown_line(cells: &[String]) -> String {
    let escaped: Vec<String> = cells.iter().map(|c| c.replace('|', "\\|")).collect();
    format!("| {} |\n", escaped.join(" | "))
}

/// A JSON value as table text: strings bare, floats to 3 decimals.
fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) if n.is_f64() => n.as_f64().map_or(n.to_string(), |f| format!("{f:.3}")),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(value_text).collect();
            format!("[{}]", parts.join(", "))
        }
        other => other.to_string(),
    }
}

/// 1234567 -> "1,234,567".
pub fn group_thousands(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

fn check_benchmark_name(name: &str) -> Result<(), ResultsError> {
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if valid {
        Ok(())
    } else {
        Err(ResultsError::BadName(name.to_owned()))
    }
}

fn create_dir(dir: &Path) -> Result<(), ResultsError> {
    std::fs::create_dir_all(dir).map_err(|source| ResultsError::Io {
        path: dir.to_owned(),
        source,
    })
}

fn write_file(path: &Path, contents: &str) -> Result<(), ResultsError> {
    std::fs::write(path, contents).map_err(|source| ResultsError::Io {
        path: path.to_owned(),
        source,
    })
}

/// `git rev-parse HEAD` of the current directory's checkout, or `unknown`.
pub fn git_rev() -> String {
    Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|rev| rev.trim().to_owned())
        .filter(|rev| !rev.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// RFC 3339 in UTC with whole seconds, e.g. `2026-11-29T21:03:11Z`. Times
/// before 1970 are clamped to the epoch.
pub fn rfc3339_utc(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = secs / 86_400;
    let secs_of_day = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs_of_day / 3600,
        secs_of_day % 3600 / 60,
        secs_of_day % 60
    )
}

/// Proleptic Gregorian (year, month, day) of a count of days since 1970-01-01
/// (Howard Hinnant's `civil_from_days`, for non-negative day counts).
fn civil_from_days(days_since_epoch: u64) -> (u64, u64, u64) {
    const DAYS_PER_ERA: u64 = 146_097;
    // Shift the epoch to 0000-03-01 so leap days fall at the end of a year.
    let z = days_since_epoch + 719_468;
    let era = z / DAYS_PER_ERA;
    let day_of_era = z % DAYS_PER_ERA;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153; // 0 = March
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// The median of the finite values (the mean of the middle two for an even
/// count); `None` if there are none.
pub fn median(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut sorted: Vec<f64> = values.into_iter().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    Some(if sorted.len() % 2 == 0 {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    } else {
        sorted[mid]
    })
}

/// The median of `ours / theirs` over pairs measured side by side (a pair
/// whose `theirs` is not positive is left out): the paired ratio that
/// cancels the shared machine's drift. `None` if no pair is left.
pub fn median_ratio(pairs: impl IntoIterator<Item = (f64, f64)>) -> Option<f64> {
    median(
        pairs
            .into_iter()
            .filter(|(_, theirs)| *theirs > 0.0)
            .map(|(ours, theirs)| ours / theirs),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn median_ratio_pairs_and_leaves_out_a_zero_baseline() {
        assert_eq!(
            median_ratio([(2.0, 1.0), (3.0, 1.0), (1.0, 2.0)]),
            Some(2.0)
        );
        assert_eq!(median_ratio([(5.0, 0.0), (1.0, 4.0)]), Some(0.25));
        assert_eq!(median_ratio([(5.0, 0.0)]), None);
        assert_eq!(median_ratio([]), None);
    }

    fn at(secs: u64) -> String {
        rfc3339_utc(UNIX_EPOCH + Duration::from_secs(secs))
    }

    #[test]
    fn rfc3339_known_instants() {
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(951_868_799), "2000-02-29T23:59:59Z");
        assert_eq!(at(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(at(4_107_542_400), "2100-03-01T00:00:00Z");
        assert_eq!(
            rfc3339_utc(UNIX_EPOCH - Duration::from_secs(5)),
            "1970-01-01T00:00:00Z"
        );
    }

    #[test]
    fn rfc3339_agrees_with_a_day_by_day_walk() {
        let days_in_month = |y: u64, m: u64| match m {
            2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        let (mut y, mut m, mut d) = (1970, 1, 1);
        for days in 0..200_000u64 {
            assert_eq!(civil_from_days(days), (y, m, d), "day {days}");
            d += 1;
            if d > days_in_month(y, m) {
                d = 1;
                m += 1;
                if m > 12 {
                    m = 1;
                    y += 1;
                }
            }
        }
    }

    #[test]
    fn meminfo_parsing() {
        let text = "MemTotal:       24588180 kB\nMemFree: 1 kB\n";
        assert_eq!(parse_meminfo_total_bytes(text), Some(24_588_180 * 1024));
        assert_eq!(parse_meminfo_total_bytes("MemFree: 1 kB"), None);
        assert_eq!(parse_meminfo_total_bytes("MemTotal: lots kB"), None);
    }

    #[test]
    fn thousands_grouping() {
        assert_eq!(group_thousands(0), "0");
        assert_eq!(group_thousands(999), "999");
        assert_eq!(group_thousands(1000), "1,000");
        assert_eq!(group_thousands(1_234_567), "1,234,567");
    }

    fn sample_report() -> BenchReport {
        let mut report = BenchReport::new("unit-test", "roost bench unit-test --quick");
        report.rows.push(
            Row::new("roost", "occ")
                .with_param("workload", "rmw")
                .with_param("threads", 2)
                .with_extra("ratio_to_baseline", 0.75),
        );
        report
            .rows
            .push(Row::new("roost", "memory").with_param("records", 10));
        report.notes.push("a note".into());
        report
    }

    #[test]
    fn write_round_trips_json_and_renders_markdown() {
        let report = sample_report();
        let dir = std::env::temp_dir().join(format!("roost-results-test-{}", std::process::id()));
        let files = report.write(&dir).expect("write results");
        let json = std::fs::read_to_string(&files.json).expect("read json");
        let parsed: BenchReport = serde_json::from_str(&json).expect("parse json");
        assert_eq!(parsed.rows, report.rows);
        assert_eq!(parsed.command, report.command);
        let md = std::fs::read_to_string(&files.markdown).expect("read md");
        assert!(md.contains("roost bench unit-test --quick"));
        assert!(md.contains("| system | variant | workload | threads | records |"));
        assert!(md.contains("| roost | memory |  |  | 10 | - | - |"));
        assert!(md.contains("ratio_to_baseline=0.750"));
        assert!(md.contains("a note"));
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    #[test]
    fn bad_benchmark_name_is_an_error() {
        let mut report = sample_report();
        report.benchmark = "../escape".into();
        assert!(matches!(
            report.write(&std::env::temp_dir()),
            Err(ResultsError::BadName(_))
        ));
    }

    #[test]
    fn latency_from_histogram() {
        let mut histogram = Histogram::<u64>::new(3).expect("histogram");
        for ns in [1_000u64, 2_000, 3_000] {
            histogram.record(ns).expect("record");
        }
        let latency = LatencyUs::from_histogram_ns(&histogram);
        assert!((latency.mean - 2.0).abs() < 0.01);
        assert!((latency.p50 - 2.0).abs() < 0.01);
        assert_eq!(
            LatencyUs::from_histogram_ns(&Histogram::new(3).expect("h")),
            LatencyUs::default()
        );
    }
}

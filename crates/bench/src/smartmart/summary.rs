//! The SmartMart benchmark's readable outputs: per-figure tables, the
//! issue's goals checked against the measurements, Markdown notes and the
//! multi-panel chart.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::schema::DeploymentKind;
use super::{Figure, SmartMartBenchConfig, BENCHMARK_NAME};
use crate::engine::GoalCheck;
use crate::plot::{finish_png, render_figure_png, BarChart, BarSeries};
use crate::results::{group_thousands, Row};

/// The issue's goal for the Delay variant at 8 sections (2 cores bound it
/// at 2.0).
pub const DELAY_SPEEDUP_GOAL: f64 = 1.8;
/// The goal for one store section (issue 22, executors without the hand-off
/// tax): async may cost at most 5%.
pub const ONE_SECTION_GOAL: f64 = 0.95;
/// The seed's speedups at 8 sections (Size 8, 32, 64, Size 8 Delay), on a
/// machine with at least 16 cores.
pub const SEED_SPEEDUPS_AT_8: [(&str, f64); 4] = [
    ("Size 8", 1.52),
    ("Size 32", 3.66),
    ("Size 64", 4.67),
    ("Size 8 Delay", 6.8),
];
/// Share of the machine's CPU used by other processes above which a
/// measurement is flagged as disturbed.
pub const BUSY_MACHINE_SHARE: f64 = 0.10;
/// The seed's commit cost per interaction, Size 8 (sync, async), in µs.
pub const SEED_COMMIT_US: (f64, f64) = (68.2, 93.8);
/// Issue 22's goal: an idle node (no load) burns under 5% of one core.
pub const IDLE_CPU_GOAL_PCT: f64 = 5.0;

fn of_figure(rows: &[Row], figure: Figure) -> Vec<&Row> {
    rows.iter()
        .filter(|r| r.param_str("figure") == Some(figure.name()))
        .collect()
}

fn is_delay(row: &Row) -> bool {
    row.params
        .get("delay_ms")
        .and_then(|v| v.as_f64())
        .is_some_and(|d| d > 0.0)
}

fn speedup(row: &Row) -> Option<f64> {
    row.extra.get("speedup").and_then(|v| v.as_f64())
}

fn extra_f64(row: &Row, name: &str) -> Option<f64> {
    row.extra.get(name).and_then(|v| v.as_f64())
}

fn is_kind(row: &Row, kind: DeploymentKind) -> bool {
    row.variant == kind.name()
}

/// An order-size label for Figure 9: `Size 8` or `Size 8 Delay`.
fn size_label(row: &Row) -> String {
    format!(
        "Size {}{}",
        row.param_u64("order_size").unwrap_or(0),
        if is_delay(row) { " Delay" } else { "" }
    )
}

fn fmt_opt(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.decimals$}"))
}

fn tps(row: Option<&&Row>) -> String {
    row.map_or_else(
        || "-".to_owned(),
        |r| group_thousands(r.throughput_tps.round() as u64),
    )
}

/// Distinct values in order of first appearance.
fn distinct<T: PartialEq>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

/// The async row of each Figure 9 series (order size or Delay) per section
/// count: `(series label, [(sections, speedup)])`.
fn speedup_series(rows: &[Row]) -> Vec<(String, Vec<(u64, f64)>)> {
    let fig9 = of_figure(rows, Figure::Speedup);
    let labels = distinct(fig9.iter().map(|r| size_label(r)));
    labels
        .into_iter()
        .map(|label| {
            let points = fig9
                .iter()
                .filter(|r| is_kind(r, DeploymentKind::Async) && size_label(r) == label)
                .filter_map(|r| Some((r.param_u64("sections")?, speedup(r)?)))
                .collect();
            (label, points)
        })
        .collect()
}

/// Every table of the summary.
pub fn summary_text(rows: &[Row]) -> String {
    let mut out = String::new();
    window_table(&mut out, rows);
    speedup_table(&mut out, rows);
    workers_table(&mut out, rows);
    skew_table(&mut out, rows);
    commit_lines(&mut out, rows);
    idle_lines(&mut out, rows);
    contention_lines(&mut out, rows);
    out
}

/// The idle-CPU rows with their percentage of a core.
fn idle_measurements(rows: &[Row]) -> Vec<(&Row, f64)> {
    of_figure(rows, Figure::Idle)
        .into_iter()
        .filter_map(|r| Some((r, extra_f64(r, "idle_cpu_pct_of_core")?)))
        .collect()
}

/// The idle node's CPU per deployment, with its busiest threads.
fn idle_lines(out: &mut String, rows: &[Row]) {
    let idle = idle_measurements(rows);
    if idle.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "idle CPU of an idle node (the 8-section Delay database alone, after a warm-up of Delay interactions; \
         whole process, percent of one core; goal < {IDLE_CPU_GOAL_PCT}%):"
    );
    for (row, pct) in idle {
        let threads = row
            .extra
            .get("idle_busiest_threads")
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|t| t.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| "none above one clock tick".to_owned());
        let _ = writeln!(
            out,
            "  {:<5} {pct:>6.2}% over {} s ({} ms CPU; busiest threads: {threads})",
            row.variant,
            fmt_opt(extra_f64(row, "idle_window_s"), 2),
            fmt_opt(extra_f64(row, "idle_cpu_ms"), 1),
        );
    }
}

/// How much other processes disturbed the measurements.
fn contention_lines(out: &mut String, rows: &[Row]) {
    let shares: Vec<(f64, &Row)> = rows
        .iter()
        .filter_map(|r| Some((extra_f64(r, "others_cpu_pct")? / 100.0, r)))
        .collect();
    let Some(max) = shares.iter().map(|(s, _)| *s).reduce(f64::max) else {
        return;
    };
    let busy = shares
        .iter()
        .filter(|(s, _)| *s > BUSY_MACHINE_SHARE)
        .count();
    let _ = writeln!(
        out,
        "other processes used at most {:.0}% of the machine's CPU during a measurement",
        max * 100.0
    );
    if busy > 0 {
        let _ = writeln!(
            out,
            "WARNING: {busy} of {} rows ran while other processes used more than {:.0}% of the CPU; \
             their numbers (speedups above all) understate this machine",
            shares.len(),
            BUSY_MACHINE_SHARE * 100.0
        );
    }
}

fn pair<'a>(
    rows: &[&'a Row],
    matches: impl Fn(&Row) -> bool,
) -> (Option<&'a Row>, Option<&'a Row>) {
    let find = |kind| {
        rows.iter().copied().find(|r| {
            is_kind(r, kind) && r.param_str("section_choice") != Some("random") && matches(r)
        })
    };
    (find(DeploymentKind::Sync), find(DeploymentKind::Async))
}

fn window_table(out: &mut String, rows: &[Row]) {
    let fig6 = of_figure(rows, Figure::Window);
    if fig6.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "Figure 6: history window size (1 worker, 8 sections)\n{:>6} {:>4} {:>10} {:>10} {:>8} {:>12} {:>12} {:>7}",
        "window", "N", "sync tps", "async tps", "speedup", "sync p50 µs", "async p50 µs", "abort"
    );
    for (n, w) in distinct(
        fig6.iter()
            .map(|r| (r.param_u64("order_size"), r.param_u64("window"))),
    ) {
        let (sync, asyn) = pair(&fig6, |r| {
            r.param_u64("order_size") == n && r.param_u64("window") == w
        });
        let aborts = sync
            .iter()
            .chain(&asyn)
            .map(|r| r.abort_rate)
            .fold(0.0, f64::max);
        let _ = writeln!(
            out,
            "{:>6} {:>4} {:>10} {:>10} {:>8} {:>12} {:>12} {:>6.2}%",
            w.unwrap_or(0),
            n.unwrap_or(0),
            tps(sync.as_ref()),
            tps(asyn.as_ref()),
            fmt_opt(asyn.and_then(speedup), 2),
            fmt_opt(sync.map(|r| r.latency_us.p50), 1),
            fmt_opt(asyn.map(|r| r.latency_us.p50), 1),
            aborts * 100.0
        );
    }
    out.push('\n');
}

fn speedup_table(out: &mut String, rows: &[Row]) {
    let series = speedup_series(rows);
    if series.is_empty() {
        return;
    }
    let sections = distinct(series.iter().flat_map(|(_, p)| p.iter().map(|&(k, _)| k)));
    let _ = write!(
        out,
        "Figure 9: speedup async/sync (throughput ratio; 1 worker, W=150)\n{:<13}",
        "order"
    );
    for k in &sections {
        let _ = write!(out, " {:>6}", format!("k={k}"));
    }
    let _ = writeln!(out, " {:>11}", "seed k=8");
    for (label, points) in &series {
        let _ = write!(out, "{label:<13}");
        for k in &sections {
            let value = points.iter().find(|(pk, _)| pk == k).map(|&(_, s)| s);
            let _ = write!(out, " {:>6}", fmt_opt(value, 2));
        }
        let seed = SEED_SPEEDUPS_AT_8
            .iter()
            .find(|(l, _)| l == label)
            .map(|&(_, s)| s);
        let _ = writeln!(out, " {:>11}", fmt_opt(seed, 2));
    }
    let fig9 = of_figure(rows, Figure::Speedup);
    let _ = writeln!(
        out,
        "(sync tps at k=1 / k=8: {})",
        distinct(fig9.iter().map(|r| size_label(r)))
            .iter()
            .map(|label| {
                let at = |k: u64| {
                    fig9.iter().find(|r| {
                        is_kind(r, DeploymentKind::Sync)
                            && size_label(r) == *label
                            && r.param_u64("sections") == Some(k)
                    })
                };
                format!("{label} {} / {}", tps(at(1)), tps(at(8)))
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    out.push('\n');
}

fn workers_table(out: &mut String, rows: &[Row]) {
    let fig12 = of_figure(rows, Figure::Workers);
    if fig12.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "Figure 12 (scale-up): workers, N=32 over k=workers sections\n{:>7} {:>10} {:>14} {:>15} {:>9}",
        "workers", "sync tps", "async tps", "async-all tps", "max abort"
    );
    for w in distinct(fig12.iter().map(|r| r.param_u64("workers"))) {
        let at: Vec<&Row> = fig12
            .iter()
            .copied()
            .filter(|r| r.param_u64("workers") == w)
            .collect();
        let (sync, asyn) = pair(&at, |_| true);
        let random = at
            .iter()
            .find(|r| r.param_str("section_choice") == Some("random"));
        let aborts = at.iter().map(|r| r.abort_rate).fold(0.0, f64::max);
        let _ = writeln!(
            out,
            "{:>7} {:>10} {:>14} {:>15} {:>8.2}%",
            w.unwrap_or(0),
            tps(sync.as_ref()),
            tps(asyn.as_ref()),
            tps(random),
            aborts * 100.0
        );
    }
    out.push('\n');
}

fn skew_table(out: &mut String, rows: &[Row]) {
    let skew = of_figure(rows, Figure::Skew);
    if skew.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "Figure 12 (skew): zipf constant over 8 sections, N=32, 1 worker\n{:>6} {:>10} {:>10} {:>8}",
        "zipf", "sync tps", "async tps", "speedup"
    );
    for theta in distinct(
        skew.iter()
            .filter_map(|r| r.params.get("zipf_theta").and_then(|v| v.as_f64())),
    ) {
        let (sync, asyn) = pair(&skew, |r| {
            r.params.get("zipf_theta").and_then(|v| v.as_f64()) == Some(theta)
        });
        let _ = writeln!(
            out,
            "{:>6} {:>10} {:>10} {:>8}",
            theta,
            tps(sync.as_ref()),
            tps(asyn.as_ref()),
            fmt_opt(asyn.and_then(speedup), 2)
        );
    }
    out.push('\n');
}

/// Commit cost per interaction at 8 sections, Size 8 and Delay.
fn commit_lines(out: &mut String, rows: &[Row]) {
    let fig9 = of_figure(rows, Figure::Speedup);
    let mut lines = Vec::new();
    for label in distinct(fig9.iter().map(|r| size_label(r))) {
        let (sync, asyn) = pair(&fig9, |r| {
            size_label(r) == label && r.param_u64("sections") == Some(8)
        });
        if sync.is_none() && asyn.is_none() {
            continue;
        }
        let cost = |r: Option<&Row>| fmt_opt(r.and_then(|r| extra_f64(r, "commit_cost_us")), 1);
        let after = |r: Option<&Row>| fmt_opt(r.and_then(|r| extra_f64(r, "after_body_p50_us")), 1);
        lines.push(format!(
            "  {label:<13} k=8: sync {} µs (after-body {} µs), async {} µs (after-body {} µs)",
            cost(sync),
            after(sync),
            cost(asyn),
            after(asyn)
        ));
    }
    if lines.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "commit cost per interaction (median time from the end of the body to the caller's return, minus an empty transaction's; seed Size 8: sync {} µs, async {} µs):",
        SEED_COMMIT_US.0, SEED_COMMIT_US.1
    );
    for line in lines {
        let _ = writeln!(out, "{line}");
    }
    let max_abort = rows.iter().map(|r| r.abort_rate).fold(0.0, f64::max);
    let _ = writeln!(
        out,
        "abort rate: at most {:.2}% over all rows (conflict retries / attempts)",
        max_abort * 100.0
    );
}

/// The issue's goals: Delay async/sync at 8 sections, async/sync at 1.
pub fn evaluate_goals(rows: &[Row]) -> Vec<GoalCheck> {
    let series = speedup_series(rows);
    let at = |k: u64| -> Vec<(String, f64)> {
        series
            .iter()
            .filter_map(|(label, points)| {
                points
                    .iter()
                    .find(|(pk, _)| *pk == k)
                    .map(|&(_, s)| (label.clone(), s))
            })
            .collect()
    };
    let delay_goal = format!("Size 8 Delay async/sync at 8 sections >= {DELAY_SPEEDUP_GOAL}");
    let delay = match at(8).into_iter().find(|(l, _)| l.ends_with("Delay")) {
        Some((_, s)) => GoalCheck {
            goal: delay_goal,
            measured: format!("{s:.2}x"),
            pass: Some(s >= DELAY_SPEEDUP_GOAL),
        },
        None => GoalCheck {
            goal: delay_goal,
            measured: "not measured in this run".into(),
            pass: None,
        },
    };
    let one_goal = format!("async/sync at 1 section >= {ONE_SECTION_GOAL} (every order size)");
    let ones = at(1);
    let one = match ones.iter().min_by(|a, b| a.1.total_cmp(&b.1)) {
        Some((worst_label, worst)) => GoalCheck {
            goal: one_goal,
            measured: format!(
                "worst {worst:.2}x ({worst_label}); {}",
                ones.iter()
                    .map(|(l, s)| format!("{l} {s:.2}x"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            pass: Some(*worst >= ONE_SECTION_GOAL),
        },
        None => GoalCheck {
            goal: one_goal,
            measured: "not measured in this run".into(),
            pass: None,
        },
    };
    let idle_goal = format!("idle CPU of an idle node < {IDLE_CPU_GOAL_PCT}% of a core (8 sections, Delay database; every deployment)");
    let idle = idle_measurements(rows);
    let idle = match idle.iter().max_by(|a, b| a.1.total_cmp(&b.1)) {
        Some((worst_row, worst)) => GoalCheck {
            goal: idle_goal,
            measured: format!(
                "worst {worst:.2}% ({}); {}",
                worst_row.variant,
                idle.iter()
                    .map(|(r, pct)| format!("{} {pct:.2}%", r.variant))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            pass: Some(*worst < IDLE_CPU_GOAL_PCT),
        },
        None => GoalCheck {
            goal: idle_goal,
            measured: "not measured in this run".into(),
            pass: None,
        },
    };
    vec![delay, one, idle]
}

pub fn goal_lines(goals: &[GoalCheck]) -> String {
    let mut out = String::from("goals:\n");
    for goal in goals {
        let _ = writeln!(
            out,
            "  {}  {}: {}",
            goal.verdict(),
            goal.goal,
            goal.measured
        );
    }
    out
}

/// Notes under the Markdown table.
pub fn markdown_notes(
    config: &SmartMartBenchConfig,
    delay_iterations: u64,
    goals: &[GoalCheck],
    rows: &[Row],
    deployments: &[(DeploymentKind, String)],
) -> Vec<String> {
    let mut notes = vec!["## Goals".to_owned(), String::new()];
    notes.extend(
        goals
            .iter()
            .map(|g| format!("- **{}** {}: {}", g.verdict().trim(), g.goal, g.measured)),
    );
    notes.push(String::new());
    notes.push("## Summary".to_owned());
    notes.push(String::new());
    notes.push("```".to_owned());
    notes.extend(summary_text(rows).lines().map(str::to_owned));
    notes.push("```".to_owned());
    notes.push(String::new());
    notes.push("## Method".to_owned());
    notes.push(String::new());
    notes.push(format!(
        "- Each row: median (by throughput) of {} repetition(s) of {} s ({} s for Delay rows) after a 10% warm-up; \
         the deployments of a group alternate within each repetition and run the same orders.",
        config.repetitions, config.seconds_per_row, config.delay_seconds_per_row
    ));
    notes.push(format!(
        "- Store: 8 store sections x {} items ({} in the scale-up rows), {} customer groups, one cart and one \
         customer per worker; purchase history of each item a ring of max(window) rows, loaded before the \
         rows that use it. One interaction = one root transaction (`add_items` + `checkout`) on the cart, \
         submitted with `Database::run_blocking`.",
        config.items_per_section, config.workers_items_per_section, config.groups
    ));
    notes.push(format!(
        "- Delay variant: each item's history scan replaced by {delay_iterations} iterations of a xorshift loop \
         (calibrated once to ~{} ms on one idle thread; CPU work, not a sleep).",
        config.delay_ms
    ));
    if config.idle_seconds > 0.0 {
        notes.push(format!(
            "- Idle CPU (rows `idle-cpu`, measured first, alone in the process): each deployment's database built \
             as for the 8-section Delay rows, {} s of Delay interactions on 8 sections (at least {} interactions), \
             then {} s without any load; the process's CPU time (user + system, every thread; `getrusage`) over \
             that window as a percentage of one core, the busiest threads from `/proc/self/task/*/stat`.",
            super::IDLE_WARMUP.as_secs_f64(),
            super::IDLE_WARMUP_INTERACTIONS,
            config.idle_seconds
        ));
    }
    notes.push(
        "- Throughput: committed interactions per second; latency: per interaction, retries included; \
         abort rate: conflict retries / attempts (the reactor layer retries conflicts itself; each attempt is \
         counted when the procedure starts)."
            .to_owned(),
    );
    notes.push(
        "- Commit cost: median time from the end of the interaction's body to `run_blocking`'s return \
         (waiting for the un-awaited visit/sale calls, the commit across containers, the release, the reply \
         and the caller's wake-up), minus the same for an empty transaction on the cart (`empty_commit_p50_us`). \
         An exact number needs a timing hook inside the reactor layer's commit."
            .to_owned(),
    );
    notes.push(format!(
        "- Seed (ReactDB, 16+ cores) speedups at 8 sections: {}; this machine has {} cores, which bounds any \
         async/sync speedup at about that many.",
        SEED_SPEEDUPS_AT_8
            .iter()
            .map(|(l, s)| format!("{l} {s}"))
            .collect::<Vec<_>>()
            .join(", "),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    ));
    for (kind, toml) in deployments {
        notes.push(String::new());
        notes.push(format!(
            "Deployment `{}` (carts get one executor per worker in the scale-up rows):",
            kind.name()
        ));
        notes.push(String::new());
        notes.push("```toml".to_owned());
        notes.extend(toml.lines().map(str::to_owned));
        notes.push("```".to_owned());
    }
    notes
}

/// Draws `smartmart.png`: one panel per figure. Failures are warnings.
pub fn render_plot(rows: &[Row], out_dir: &Path) -> Option<PathBuf> {
    let charts: Vec<BarChart> = [
        window_chart(rows, false),
        window_chart(rows, true),
        speedup_chart(rows),
        workers_chart(rows),
        skew_chart(rows),
    ]
    .into_iter()
    .flatten()
    .collect();
    if charts.is_empty() {
        return None;
    }
    let path = out_dir.join(format!("{BENCHMARK_NAME}.png"));
    finish_png(render_figure_png(&charts, 2, &path), path)
}

fn window_chart(rows: &[Row], latency: bool) -> Option<BarChart> {
    let fig6 = of_figure(rows, Figure::Window);
    if fig6.is_empty() {
        return None;
    }
    let windows = distinct(fig6.iter().filter_map(|r| r.param_u64("window")));
    let sizes = distinct(fig6.iter().filter_map(|r| r.param_u64("order_size")));
    let mut series = Vec::new();
    for n in &sizes {
        for kind in DeploymentKind::BOTH {
            series.push(BarSeries {
                name: format!("{}-{n}", kind.name()),
                values: windows
                    .iter()
                    .map(|w| {
                        fig6.iter()
                            .find(|r| {
                                is_kind(r, kind)
                                    && r.param_u64("order_size") == Some(*n)
                                    && r.param_u64("window") == Some(*w)
                            })
                            .map(|r| {
                                if latency {
                                    r.latency_us.p50 / 1e3
                                } else {
                                    r.throughput_tps
                                }
                            })
                    })
                    .collect(),
            });
        }
    }
    Some(BarChart {
        title: if latency {
            "Fig 6: median latency vs history window (1 worker, 8 sections)".into()
        } else {
            "Fig 6: throughput vs history window (1 worker, 8 sections)".into()
        },
        y_label: if latency {
            "latency p50 (ms)".into()
        } else {
            "interactions per second".into()
        },
        categories: windows.iter().map(|w| format!("window {w}")).collect(),
        series,
    })
}

fn speedup_chart(rows: &[Row]) -> Option<BarChart> {
    let series = speedup_series(rows);
    let sections = distinct(series.iter().flat_map(|(_, p)| p.iter().map(|&(k, _)| k)));
    if sections.is_empty() {
        return None;
    }
    Some(BarChart {
        title: "Fig 9: speedup async/sync vs store sections (1 worker)".into(),
        y_label: "async / sync throughput".into(),
        categories: sections.iter().map(|k| format!("{k} sections")).collect(),
        series: series
            .iter()
            .map(|(label, points)| BarSeries {
                name: label.clone(),
                values: sections
                    .iter()
                    .map(|k| points.iter().find(|(pk, _)| pk == k).map(|&(_, s)| s))
                    .collect(),
            })
            .collect(),
    })
}

fn workers_chart(rows: &[Row]) -> Option<BarChart> {
    let fig12 = of_figure(rows, Figure::Workers);
    if fig12.is_empty() {
        return None;
    }
    let workers = distinct(fig12.iter().filter_map(|r| r.param_u64("workers")));
    let variants = distinct(fig12.iter().map(|r| {
        if r.param_str("section_choice") == Some("random") {
            "async-all".to_owned()
        } else {
            r.variant.clone()
        }
    }));
    let series = variants
        .iter()
        .map(|v| BarSeries {
            name: v.clone(),
            values: workers
                .iter()
                .map(|w| {
                    fig12
                        .iter()
                        .find(|r| {
                            r.param_u64("workers") == Some(*w)
                                && if v == "async-all" {
                                    r.param_str("section_choice") == Some("random")
                                } else {
                                    r.variant == *v
                                        && r.param_str("section_choice") != Some("random")
                                }
                        })
                        .map(|r| r.throughput_tps)
                })
                .collect(),
        })
        .collect();
    Some(BarChart {
        title: "Fig 12: throughput vs workers (N=32 over k=workers sections)".into(),
        y_label: "interactions per second".into(),
        categories: workers.iter().map(|w| format!("{w} workers")).collect(),
        series,
    })
}

fn skew_chart(rows: &[Row]) -> Option<BarChart> {
    let skew = of_figure(rows, Figure::Skew);
    let thetas = distinct(
        skew.iter()
            .filter_map(|r| r.params.get("zipf_theta").and_then(|v| v.as_f64())),
    );
    if thetas.is_empty() {
        return None;
    }
    let series = DeploymentKind::BOTH
        .iter()
        .map(|&kind| BarSeries {
            name: kind.name().to_owned(),
            values: thetas
                .iter()
                .map(|t| {
                    skew.iter()
                        .find(|r| {
                            is_kind(r, kind)
                                && r.params.get("zipf_theta").and_then(|v| v.as_f64()) == Some(*t)
                        })
                        .map(|r| r.throughput_tps)
                })
                .collect(),
        })
        .collect();
    Some(BarChart {
        title: "Fig 12: throughput vs zipf constant over sections (N=32, 1 worker)".into(),
        y_label: "interactions per second".into(),
        categories: thetas.iter().map(|t| format!("zipf {t}")).collect(),
        series,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(
        kind: DeploymentKind,
        figure: Figure,
        n: u64,
        k: u64,
        delay: bool,
        s: Option<f64>,
    ) -> Row {
        let mut row = Row::new("roost", kind.name())
            .with_param("figure", figure.name())
            .with_param("order_size", n)
            .with_param("sections", k)
            .with_param("section_choice", "fixed")
            .with_param("window", 150)
            .with_param("delay_ms", if delay { 3.0 } else { 0.0 })
            .with_param("workers", 1);
        row.throughput_tps = 100.0;
        if let Some(s) = s {
            row = row.with_extra("speedup", s);
        }
        row
    }

    #[test]
    fn goals_pass_and_miss_honestly() {
        let (s, a, f) = (DeploymentKind::Sync, DeploymentKind::Async, Figure::Speedup);
        let rows = vec![
            row(s, f, 8, 1, false, None),
            row(a, f, 8, 1, false, Some(0.95)),
            row(s, f, 64, 1, false, None),
            row(a, f, 64, 1, false, Some(0.85)),
            row(s, f, 8, 8, true, None),
            row(a, f, 8, 8, true, Some(1.85)),
        ];
        let goals = evaluate_goals(&rows);
        assert_eq!(goals[0].pass, Some(true), "{goals:?}");
        assert_eq!(goals[1].pass, Some(false), "{goals:?}");
        assert!(goals[1].measured.contains("worst 0.85x (Size 64)"));
        assert_eq!(goals[2].pass, None, "no idle rows: {goals:?}");
        let idle = |kind: DeploymentKind, pct: f64| {
            row(kind, Figure::Idle, 8, 8, true, None)
                .with_extra("idle_cpu_pct_of_core", pct)
                .with_extra("idle_window_s", 2.0)
                .with_extra("idle_cpu_ms", pct * 20.0)
                .with_extra("idle_busiest_threads", vec!["exec-1 30 ms".to_owned()])
        };
        let mut with_idle = rows.clone();
        with_idle.extend([idle(s, 0.5), idle(a, 1.5)]);
        let goals = evaluate_goals(&with_idle);
        assert_eq!(goals[2].pass, Some(true), "{goals:?}");
        assert!(
            goals[2].measured.contains("worst 1.50% (async)"),
            "{goals:?}"
        );
        with_idle.push(idle(a, 5.0));
        assert_eq!(evaluate_goals(&with_idle)[2].pass, Some(false));
        let text = summary_text(&with_idle);
        assert!(text.contains("exec-1 30 ms"), "{text}");
        // Idle rows are not Figure 9 rows.
        assert_eq!(speedup_series(&with_idle), speedup_series(&rows));
        let none = evaluate_goals(&[]);
        assert!(none.iter().all(|g| g.pass.is_none()));
        let text = summary_text(&rows);
        assert!(text.contains("Size 8 Delay"), "{text}");
        assert!(text.contains("6.80"), "seed column: {text}");
        let chart = speedup_chart(&rows).expect("chart");
        assert_eq!(chart.categories, vec!["1 sections", "8 sections"]);
        assert_eq!(chart.series.len(), 3);
    }
}

//! What the remote-fraction sweeps (`roost bench smallbank`, `roost bench
//! tatp`: the seed's Figure 9) share: the order of their cells, the median
//! throughput of a system at a fraction, the figure, and where Roost and
//! static-2PC break even.

use roost_bench::cluster_load::System;
use roost_bench::plot::{BarChart, BarSeries};
use roost_bench::results::median;

/// A sweep's cell, as the shared parts read it.
pub(crate) trait SweepCell {
    fn system(&self) -> System;
    fn remote(&self) -> f64;
    fn committed_tps(&self) -> f64;
}

/// The cells of one repetition: perfect sharding once (it has no remote
/// fraction), then static-2PC and Roost at each fraction, interleaved.
pub(crate) fn order(remote: &[f64]) -> Vec<(System, f64)> {
    let mut order = vec![(System::Perfect, 0.0)];
    for &r in remote {
        order.push((System::Static2pc, r));
        order.push((System::Roost, r));
    }
    order
}

/// The median throughput of `system` at `remote` (perfect sharding's at
/// any fraction).
pub(crate) fn median_tps<C: SweepCell>(cells: &[C], system: System, remote: f64) -> Option<f64> {
    median(
        cells
            .iter()
            .filter(|c| c.system() == system && (system == System::Perfect || c.remote() == remote))
            .map(SweepCell::committed_tps),
    )
}

/// The seed's Figure 9: median throughput by remote fraction, the three
/// systems side by side (perfect sharding's bar repeats at each).
pub(crate) fn figure_9<C: SweepCell>(
    title: &str,
    y_label: &str,
    remote: &[f64],
    cells: &[C],
) -> BarChart {
    let series = |system: System| BarSeries {
        name: system.name().to_owned(),
        values: remote
            .iter()
            .map(|&r| median_tps(cells, system, r))
            .collect(),
    };
    BarChart {
        title: title.to_owned(),
        y_label: y_label.to_owned(),
        categories: remote
            .iter()
            .map(|r| format!("{:.1}%", r * 100.0))
            .collect(),
        series: vec![
            series(System::Roost),
            series(System::Static2pc),
            series(System::Perfect),
        ],
    }
}

/// Where Roost and static-2PC break even, from Roost's ratios to it by
/// remote fraction, as a report's note.
pub(crate) fn break_even_note(ratios: &[(f64, f64)]) -> String {
    let crossings = crossings(ratios);
    if crossings.is_empty() {
        let above = ratios.iter().all(|(_, r)| *r > 1.0);
        format!(
            "Roost stays {} static-2PC at every measured remote fraction.",
            if above { "above" } else { "at or below" }
        )
    } else {
        let at: Vec<String> = crossings
            .iter()
            .map(|(remote, up)| {
                format!(
                    "{:.1}% ({})",
                    remote * 100.0,
                    if *up {
                        "Roost ahead above it"
                    } else {
                        "static-2PC ahead above it"
                    }
                )
            })
            .collect();
        format!(
            "Roost and static-2PC break even at about {} (interpolated between the measured fractions).",
            at.join(", ")
        )
    }
}

/// Where Roost's ratio to static-2PC crosses 1 (linear between the
/// measured fractions), and whether Roost is ahead after each.
fn crossings(ratios: &[(f64, f64)]) -> Vec<(f64, bool)> {
    let mut sorted = ratios.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    sorted
        .windows(2)
        .filter_map(|w| {
            let ((r0, x0), (r1, x1)) = (w[0], w[1]);
            let crossed = (x0 - 1.0).signum() != (x1 - 1.0).signum() && x0 != x1;
            crossed.then(|| (r0 + (r1 - r0) * (x0 - 1.0) / (x0 - x1), x1 > 1.0))
        })
        .collect()
}

pub(crate) fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crossings_interpolate_where_the_ratio_crosses_one() {
        assert!(crossings(&[(0.0, 2.0), (0.1, 1.5)]).is_empty());
        let down = crossings(&[(0.2, 0.5), (0.0, 2.0), (0.1, 1.5)]);
        assert_eq!(down.len(), 1);
        assert!((down[0].0 - 0.15).abs() < 1e-9 && !down[0].1, "{down:?}");
        let up = crossings(&[(0.0, 0.9), (0.2, 0.8), (0.4, 1.2)]);
        assert_eq!(up.len(), 1);
        assert!((up[0].0 - 0.3).abs() < 1e-9 && up[0].1, "{up:?}");
    }

    #[test]
    fn a_sweep_runs_perfect_once_then_both_systems_at_each_fraction() {
        assert_eq!(
            order(&[0.0, 0.1]),
            vec![
                (System::Perfect, 0.0),
                (System::Static2pc, 0.0),
                (System::Roost, 0.0),
                (System::Static2pc, 0.1),
                (System::Roost, 0.1),
            ]
        );
    }
}

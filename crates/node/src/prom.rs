//! Prometheus text for the node's counters and gauges (the one format
//! every `prometheus()` here writes).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Appends one counter with its HELP and TYPE lines.
pub(crate) fn counter(text: &mut String, name: &str, help: &str, value: u64) {
    metric(text, name, help, "counter", value);
}

/// Appends one gauge with its HELP and TYPE lines.
pub(crate) fn gauge(text: &mut String, name: &str, help: &str, value: u64) {
    metric(text, name, help, "gauge", value);
}

fn metric(text: &mut String, name: &str, help: &str, kind: &str, value: u64) {
    debug_assert!(!name.is_empty() && !help.contains('\n'));
    // Writing into a String cannot fail.
    let _ = write!(
        text,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
    );
}

/// A Prometheus histogram of durations over fixed buckets (upper bounds in
/// µs, doubling), counted in atomics: recording is two adds and a scan of
/// the bounds.
pub(crate) struct LatencyHistogram {
    bounds_us: &'static [u64],
    /// Per bucket (not cumulative), the last one past every bound (+Inf).
    counts: Box<[AtomicU64]>,
    sum_ns: AtomicU64,
}

impl LatencyHistogram {
    pub(crate) fn new(bounds_us: &'static [u64]) -> LatencyHistogram {
        debug_assert!(bounds_us.windows(2).all(|w| w[0] < w[1]));
        LatencyHistogram {
            bounds_us,
            counts: (0..=bounds_us.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_ns: AtomicU64::new(0),
        }
    }

    pub(crate) fn record(&self, elapsed: Duration) {
        let us = elapsed.as_micros();
        let bucket = self.bounds_us.partition_point(|&b| u128::from(b) < us);
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Appends it as `<name>_bucket{le="<seconds>"}` (cumulative),
    /// `<name>_sum` (seconds) and `<name>_count`.
    pub(crate) fn render(&self, text: &mut String, name: &str, help: &str) {
        debug_assert!(!name.is_empty() && !help.contains('\n'));
        let _ = write!(text, "# HELP {name} {help}\n# TYPE {name} histogram\n");
        let mut cumulative = 0u64;
        for (i, count) in self.counts.iter().enumerate() {
            cumulative += count.load(Ordering::Relaxed);
            match self.bounds_us.get(i) {
                Some(&us) => {
                    let le_s = us as f64 / 1e6;
                    let _ = writeln!(text, "{name}_bucket{{le=\"{le_s}\"}} {cumulative}");
                }
                None => {
                    let _ = writeln!(text, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
                }
            }
        }
        let sum_s = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = write!(text, "{name}_sum {sum_s}\n{name}_count {cumulative}\n");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn counters_and_gauges_are_prometheus_text() {
        let mut text = String::new();
        super::counter(&mut text, "roost_x_total", "Xs.", 3);
        super::gauge(&mut text, "roost_y", "Ys now.", 7);
        assert_eq!(
            text,
            "# HELP roost_x_total Xs.\n# TYPE roost_x_total counter\nroost_x_total 3\n\
             # HELP roost_y Ys now.\n# TYPE roost_y gauge\nroost_y 7\n"
        );
    }

    #[test]
    fn a_latency_histogram_is_cumulative_prometheus_buckets() {
        use std::time::Duration;
        static BOUNDS_US: [u64; 3] = [25, 50, 100];
        let h = super::LatencyHistogram::new(&BOUNDS_US);
        for us in [10, 25, 26, 60, 60, 5_000] {
            h.record(Duration::from_micros(us));
        }
        let mut text = String::new();
        h.render(&mut text, "roost_x_seconds", "Xs.");
        assert_eq!(
            text,
            "# HELP roost_x_seconds Xs.\n# TYPE roost_x_seconds histogram\n\
             roost_x_seconds_bucket{le=\"0.000025\"} 2\n\
             roost_x_seconds_bucket{le=\"0.00005\"} 3\n\
             roost_x_seconds_bucket{le=\"0.0001\"} 5\n\
             roost_x_seconds_bucket{le=\"+Inf\"} 6\n\
             roost_x_seconds_sum 0.005181\n\
             roost_x_seconds_count 6\n"
        );
    }
}

//! Prometheus text for the node's counters and gauges (the one format
//! every `prometheus()` here writes).

use std::fmt::Write;

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
}

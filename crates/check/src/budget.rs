//! How long a run's clients go on: until its duration passes or `max_ops`
//! operations have started, whichever comes first (one type for every
//! runner, engine or reactors).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub(crate) struct RunBudget {
    duration: Duration,
    max_ops: u64,
    ops_started: AtomicU64,
    /// Set by the first client that finds `max_ops` spent, so the others
    /// stop without waiting for the deadline.
    stopped: AtomicBool,
}

impl RunBudget {
    pub(crate) fn new(duration_ms: u64, max_ops: u64) -> Self {
        RunBudget {
            duration: Duration::from_millis(duration_ms),
            max_ops,
            ops_started: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
        }
    }

    /// Whether the run is still on, for a thread that started at `start`
    /// and does not count operations (the reactor mover).
    pub(crate) fn running(&self, start: Instant) -> bool {
        !self.stopped.load(Ordering::Relaxed) && start.elapsed() < self.duration
    }

    /// Whether a client that started at `start` may start one more
    /// operation; counts it if so.
    pub(crate) fn next_op(&self, start: Instant) -> bool {
        if !self.running(start) {
            return false;
        }
        if self.ops_started.fetch_add(1, Ordering::Relaxed) >= self.max_ops {
            self.stopped.store(true, Ordering::Relaxed);
            return false;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_ops_stops_every_client_and_the_deadline_stops_the_rest() {
        let budget = RunBudget::new(60_000, 3);
        let start = Instant::now();
        assert!((0..3).all(|_| budget.next_op(start)));
        assert!(
            !budget.next_op(start),
            "the fourth operation is over budget"
        );
        assert!(!budget.running(start), "and the run is over for everyone");
        let expired = RunBudget::new(0, u64::MAX);
        assert!(!expired.next_op(Instant::now()));
    }
}

//! Fixed-duration, multi-threaded measurement: one OS thread per worker, a
//! warm-up whose transactions are discarded, then a measured window in which
//! every transaction's latency goes into a per-thread HDR histogram
//! (nanoseconds). Histograms and counters are merged when the threads end.
//!
//! One clock read per transaction: a transaction's latency is the time from
//! the end of the previous one to its own end, so the loop's own bookkeeping
//! (key choice, counters) is charged to it, equally for every system measured.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::results::LatencyUs;

/// Latencies above this are recorded as this (60 s).
const MAX_TRACKED_LATENCY_NS: u64 = 60_000_000_000;
const HISTOGRAM_SIGNIFICANT_DIGITS: u8 = 3;

/// What one transaction did: committed (or finished, for a baseline), how
/// many attempts aborted on the way, or gave up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TxnOutcome {
    pub committed: bool,
    pub aborts: u64,
}

impl TxnOutcome {
    pub const fn committed(aborts: u64) -> Self {
        TxnOutcome {
            committed: true,
            aborts,
        }
    }

    pub const fn failed(aborts: u64) -> Self {
        TxnOutcome {
            committed: false,
            aborts,
        }
    }
}

/// How long to run, on how many threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MeasureSpec {
    pub threads: usize,
    pub warmup: Duration,
    pub duration: Duration,
}

/// The merged result of one measurement.
#[derive(Debug, Clone)]
pub struct Measurement {
    pub commits: u64,
    pub aborts: u64,
    /// Transactions that neither committed nor finished (retries exhausted or
    /// an unexpected error).
    pub failures: u64,
    /// The longest measured window of any thread.
    pub elapsed: Duration,
    pub latency_ns: Histogram<u64>,
}

impl Measurement {
    fn empty() -> Self {
        Measurement {
            commits: 0,
            aborts: 0,
            failures: 0,
            elapsed: Duration::ZERO,
            latency_ns: new_latency_histogram(),
        }
    }

    pub fn throughput_tps(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.commits as f64 / secs
        } else {
            0.0
        }
    }

    /// aborts / (commits + aborts); 0 when nothing ran.
    pub fn abort_rate(&self) -> f64 {
        let attempts = self.commits + self.aborts;
        if attempts == 0 {
            0.0
        } else {
            self.aborts as f64 / attempts as f64
        }
    }

    pub fn latency_us(&self) -> LatencyUs {
        LatencyUs::from_histogram_ns(&self.latency_ns)
    }

    fn merge(&mut self, other: &Measurement) {
        self.commits += other.commits;
        self.aborts += other.aborts;
        self.failures += other.failures;
        self.elapsed = self.elapsed.max(other.elapsed);
        // Both histograms share bounds, so adding cannot fail.
        let _ = self.latency_ns.add(&other.latency_ns);
    }

    fn record(&mut self, outcome: TxnOutcome, latency: Duration) {
        if outcome.committed {
            self.commits += 1;
        } else {
            self.failures += 1;
        }
        self.aborts += outcome.aborts;
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.latency_ns.saturating_record(ns.max(1));
    }
}

fn new_latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_TRACKED_LATENCY_NS, HISTOGRAM_SIGNIFICANT_DIGITS)
        .expect("constant histogram bounds are valid")
}

/// Runs `spec.threads` threads. Each calls `make_txn(thread_index)` on its own
/// thread (so per-thread state such as a storage `Worker` never crosses
/// threads), then runs the returned transaction function back to back for the
/// warm-up and the measured window.
pub fn measure<F, T>(spec: &MeasureSpec, make_txn: F) -> Measurement
where
    F: Fn(usize) -> T + Sync,
    T: FnMut() -> TxnOutcome,
{
    let threads = spec.threads.max(1);
    let barrier = Barrier::new(threads);
    let per_thread: Vec<Measurement> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|index| {
                let (barrier, make_txn) = (&barrier, &make_txn);
                scope.spawn(move || {
                    let txn = make_txn(index);
                    run_thread(spec, barrier, txn)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let mut total = Measurement::empty();
    for measurement in &per_thread {
        total.merge(measurement);
    }
    total
}

fn run_thread(
    spec: &MeasureSpec,
    barrier: &Barrier,
    mut txn: impl FnMut() -> TxnOutcome,
) -> Measurement {
    let mut measured = Measurement::empty();
    barrier.wait();
    let start = Instant::now();
    let measure_from = start + spec.warmup;
    let stop_at = measure_from + spec.duration;
    let mut first_measured: Option<Instant> = None;
    let mut last = start;
    // Every thread measures at least one transaction: on a loaded machine a
    // single slow transaction can span the whole (short) window, and a row of
    // zero would report the load, not the system. At most one transaction
    // more than the window is started.
    while last < stop_at || first_measured.is_none() {
        let outcome = txn();
        let now = Instant::now();
        if last >= measure_from {
            first_measured.get_or_insert(last);
            measured.record(outcome, now - last);
        }
        last = now;
    }
    measured.elapsed = first_measured.map_or(Duration::ZERO, |first| last - first);
    measured
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn measures_every_thread_and_discards_warmup() {
        let calls = AtomicU64::new(0);
        let spec = MeasureSpec {
            threads: 2,
            warmup: Duration::from_millis(20),
            duration: Duration::from_millis(50),
        };
        let result = measure(&spec, |thread| {
            let calls = &calls;
            let mut n = 0u64;
            move || {
                calls.fetch_add(1, Ordering::Relaxed);
                n += 1;
                std::thread::sleep(Duration::from_micros(200));
                if thread == 1 && n % 2 == 0 {
                    TxnOutcome::failed(3)
                } else {
                    TxnOutcome::committed(1)
                }
            }
        });
        let total_calls = calls.load(Ordering::Relaxed);
        assert!(result.commits > 0 && result.failures > 0);
        assert!(
            result.commits + result.failures < total_calls,
            "warm-up discarded"
        );
        assert_eq!(result.latency_ns.len(), result.commits + result.failures);
        assert!(result.elapsed >= Duration::from_millis(45));
        assert!(result.latency_us().p50 >= 200.0);
        assert!(result.throughput_tps() > 0.0);
        assert!(result.abort_rate() > 0.0 && result.abort_rate() < 1.0);
    }

    #[test]
    fn a_transaction_longer_than_the_window_is_still_measured() {
        let spec = MeasureSpec {
            threads: 2,
            warmup: Duration::from_millis(5),
            duration: Duration::from_millis(10),
        };
        let result = measure(&spec, |_| {
            || {
                std::thread::sleep(Duration::from_millis(30));
                TxnOutcome::committed(0)
            }
        });
        assert_eq!(result.commits, 2, "one measured transaction per thread");
        assert!(result.throughput_tps() > 0.0);
    }

    #[test]
    fn empty_measurement_has_zero_rates() {
        let empty = Measurement::empty();
        assert_eq!(empty.throughput_tps(), 0.0);
        assert_eq!(empty.abort_rate(), 0.0);
    }
}

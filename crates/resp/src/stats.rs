//! Server counters for INFO: connections, commands, transactions, aborts,
//! and a lock-free latency histogram of transactions.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Log-linear buckets: 8 per power of two of microseconds, up to 2^40 us.
const SUB_BUCKETS: usize = 8;
const SUB_BITS: u32 = 3;
const POWERS: usize = 40;
const BUCKETS: usize = SUB_BUCKETS * (POWERS + 1);

/// A histogram of latencies in microseconds with about 12% resolution.
pub struct LatencyHistogram {
    buckets: Box<[AtomicU64]>,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

fn bucket_of(us: u64) -> usize {
    if us < SUB_BUCKETS as u64 {
        return us as usize;
    }
    let power = 63 - us.leading_zeros();
    let sub = ((us >> (power - SUB_BITS)) as usize) & (SUB_BUCKETS - 1);
    let index = (power - SUB_BITS + 1) as usize * SUB_BUCKETS + sub;
    index.min(BUCKETS - 1)
}

/// The smallest latency (us) that falls in bucket `index`.
fn bucket_floor_us(index: usize) -> u64 {
    if index < SUB_BUCKETS {
        return index as u64;
    }
    let power = (index / SUB_BUCKETS) as u32 + SUB_BITS - 1;
    let sub = (index % SUB_BUCKETS) as u64;
    (1u64 << power) + (sub << (power - SUB_BITS))
}

impl LatencyHistogram {
    pub fn record(&self, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.buckets[bucket_of(us)].fetch_add(1, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    /// The latency (us, bucket floor) at quantile `q` in `[0, 1]`; 0 if empty.
    pub fn quantile_us(&self, q: f64) -> u64 {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (index, count) in counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return bucket_floor_us(index);
            }
        }
        bucket_floor_us(BUCKETS - 1)
    }
}

/// Counters shared by every connection.
pub struct Stats {
    pub started: Instant,
    pub connected_clients: AtomicU64,
    pub total_connections: AtomicU64,
    pub rejected_connections: AtomicU64,
    pub commands: AtomicU64,
    /// Root transactions committed (a pipeline batch, an EXEC, a WATCH read).
    pub transactions: AtomicU64,
    /// Attempts of root transactions: attempts − transactions − failures are
    /// re-runs after OCC conflicts.
    pub attempts: AtomicU64,
    /// Transactions that failed for good (retries exhausted, too large).
    pub failed_transactions: AtomicU64,
    /// EXECs aborted because a WATCHed key changed.
    pub watch_aborts: AtomicU64,
    /// EXECs refused because a queued command was rejected (EXECABORT).
    pub exec_aborts: AtomicU64,
    pub protocol_errors: AtomicU64,
    pub latency: LatencyHistogram,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            started: Instant::now(),
            connected_clients: AtomicU64::new(0),
            total_connections: AtomicU64::new(0),
            rejected_connections: AtomicU64::new(0),
            commands: AtomicU64::new(0),
            transactions: AtomicU64::new(0),
            attempts: AtomicU64::new(0),
            failed_transactions: AtomicU64::new(0),
            watch_aborts: AtomicU64::new(0),
            exec_aborts: AtomicU64::new(0),
            protocol_errors: AtomicU64::new(0),
            latency: LatencyHistogram::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotone_and_floors_fit() {
        let mut last = 0;
        for us in [
            0u64,
            1,
            7,
            8,
            9,
            15,
            16,
            17,
            100,
            1000,
            12345,
            1 << 30,
            u64::MAX,
        ] {
            let b = bucket_of(us);
            assert!(b >= last, "{us}");
            assert!(
                bucket_floor_us(b) <= us,
                "{us}: floor {}",
                bucket_floor_us(b)
            );
            last = b;
        }
        for index in 1..BUCKETS {
            assert!(bucket_floor_us(index) > bucket_floor_us(index - 1));
            assert_eq!(bucket_of(bucket_floor_us(index)), index);
        }
    }

    #[test]
    fn quantiles() {
        let h = LatencyHistogram::default();
        assert_eq!(h.quantile_us(0.5), 0);
        for us in 1..=100 {
            h.record(Duration::from_micros(us));
        }
        assert_eq!(h.count(), 100);
        let p50 = h.quantile_us(0.5);
        assert!((44..=50).contains(&p50), "{p50}");
        assert!(h.quantile_us(0.99) >= 88);
    }
}

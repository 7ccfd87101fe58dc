//! Server counters for INFO and the Prometheus endpoint: connections,
//! commands, transactions, aborts, and a lock-free latency histogram of
//! transactions. Both read one [`Snapshot`], so they report the same figures.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Log-linear buckets: 8 per power of two of microseconds, up to 2^40 us.
const SUB_BUCKETS: usize = 8;
const SUB_BITS: u32 = 3;
const POWERS: usize = 40;
const BUCKETS: usize = SUB_BUCKETS * (POWERS + 1);

/// A histogram of latencies in microseconds with about 12% resolution.
pub struct LatencyHistogram {
    buckets: Box<[AtomicU64]>,
    /// Sum of every recorded latency, us.
    sum_us: AtomicU64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            sum_us: AtomicU64::new(0),
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
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    /// The sum of every recorded latency, us.
    pub fn sum_us(&self) -> u64 {
        self.sum_us.load(Ordering::Relaxed)
    }

    /// The latency (us, bucket floor) at quantile `q` in `[0, 1]`; 0 if empty.
    pub fn quantile_us(&self, q: f64) -> u64 {
        self.quantiles_us(&[q]).1[0]
    }

    /// The count and the latencies (us, bucket floors) at quantiles `qs`,
    /// all from one reading of the buckets.
    pub fn quantiles_us(&self, qs: &[f64]) -> (u64, Vec<u64>) {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        let quantiles = qs
            .iter()
            .map(|&q| {
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
            })
            .collect();
        (total, quantiles)
    }
}

/// The transaction latency quantiles reported (INFO and Prometheus).
pub const LATENCY_QUANTILES: [f64; 3] = [0.5, 0.99, 0.999];

/// The server's figures at one moment: what INFO and `GET /metrics` show.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub uptime_seconds: u64,
    pub connected_clients: u64,
    pub total_connections: u64,
    pub rejected_connections: u64,
    pub commands: u64,
    /// Calls per command (those called at least once).
    pub command_calls: Vec<(&'static str, u64)>,
    pub protocol_errors: u64,
    pub transactions: u64,
    pub attempts: u64,
    /// Attempts re-run after an OCC conflict.
    pub conflict_retries: u64,
    pub failed_transactions: u64,
    pub watch_aborts: u64,
    pub exec_aborts: u64,
    /// The most reply bytes any connection held before writing them.
    pub max_reply_buffer_bytes: u64,
    /// Committed transactions timed, and the sum of their latencies (us).
    pub latency_count: u64,
    pub latency_sum_us: u64,
    /// Latencies (us) at [`LATENCY_QUANTILES`].
    pub latency_quantiles_us: Vec<u64>,
    /// Keys in the keyspace (expired ones until reclaimed, as Redis counts).
    pub keys: u64,
    /// Of them, keys with a time to live.
    pub volatile_keys: u64,
    /// Expired keys reclaimed (by the sweep or by a write).
    pub expired_keys: u64,
    /// Requests shipped to their reactors' owner and answered there; those
    /// that could not be sent (run here instead); those sent whose outcome
    /// stayed unknown.
    pub forwarded: u64,
    pub forwards_not_sent: u64,
    pub forwards_unknown: u64,
    /// Sweep transactions run, and the most keys one of them deleted.
    pub expire_sweeps: u64,
    pub expire_sweep_max_keys: u64,
}

impl Snapshot {
    /// The figures in Prometheus's text format (0.0.4), names prefixed
    /// `roost_resp_`.
    pub fn prometheus(&self) -> String {
        let mut out = String::with_capacity(4096);
        let mut metric = |name: &str, kind: &str, help: &str, value: u64| {
            let _ = writeln!(out, "# HELP roost_resp_{name} {help}");
            let _ = writeln!(out, "# TYPE roost_resp_{name} {kind}");
            let _ = writeln!(out, "roost_resp_{name} {value}");
        };
        metric(
            "uptime_seconds",
            "gauge",
            "Seconds since the server started.",
            self.uptime_seconds,
        );
        metric(
            "connected_clients",
            "gauge",
            "Client connections open now.",
            self.connected_clients,
        );
        metric(
            "connections_received_total",
            "counter",
            "Client connections accepted (INFO total_connections_received).",
            self.total_connections,
        );
        metric(
            "rejected_connections_total",
            "counter",
            "Client connections refused at max_clients.",
            self.rejected_connections,
        );
        metric(
            "forwarded_total",
            "counter",
            "Write requests shipped to their reactors' owner and answered there.",
            self.forwarded,
        );
        metric(
            "forwards_not_sent_total",
            "counter",
            "Write requests meant for their owner that could not be sent (run here).",
            self.forwards_not_sent,
        );
        metric(
            "forwards_unknown_total",
            "counter",
            "Write requests sent to their owner with no reply (outcome unknown).",
            self.forwards_unknown,
        );
        metric(
            "commands_processed_total",
            "counter",
            "Commands received (INFO total_commands_processed).",
            self.commands,
        );
        metric(
            "protocol_errors_total",
            "counter",
            "Connections closed on a protocol error.",
            self.protocol_errors,
        );
        metric(
            "transactions_committed_total",
            "counter",
            "Root transactions committed: a pipeline batch, an EXEC, a WATCH read (INFO roost_transactions).",
            self.transactions,
        );
        metric(
            "transaction_attempts_total",
            "counter",
            "Attempts of root transactions, re-runs included.",
            self.attempts,
        );
        metric(
            "transaction_retries_total",
            "counter",
            "Attempts re-run after an OCC conflict (INFO roost_conflict_retries).",
            self.conflict_retries,
        );
        metric(
            "transactions_failed_total",
            "counter",
            "Root transactions that failed for good: retries exhausted, too large.",
            self.failed_transactions,
        );
        metric(
            "watch_aborts_total",
            "counter",
            "EXECs aborted because a WATCHed key changed.",
            self.watch_aborts,
        );
        metric(
            "execabort_total",
            "counter",
            "EXECs refused because a queued command was rejected (EXECABORT).",
            self.exec_aborts,
        );
        metric(
            "keys",
            "gauge",
            "Keys in the keyspace, expired ones until reclaimed (INFO keyspace keys, DBSIZE).",
            self.keys,
        );
        metric(
            "volatile_keys",
            "gauge",
            "Keys with a time to live (INFO keyspace expires).",
            self.volatile_keys,
        );
        metric(
            "expired_keys_total",
            "counter",
            "Expired keys reclaimed, by the background sweep or by a write (INFO expired_keys).",
            self.expired_keys,
        );
        metric(
            "expire_sweeps_total",
            "counter",
            "Transactions of the background expiry sweep.",
            self.expire_sweeps,
        );
        let _ = writeln!(
            out,
            "# HELP roost_resp_command_calls_total Calls per command (INFO commandstats)."
        );
        let _ = writeln!(out, "# TYPE roost_resp_command_calls_total counter");
        for (name, calls) in &self.command_calls {
            let _ = writeln!(
                out,
                "roost_resp_command_calls_total{{command=\"{name}\"}} {calls}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP roost_resp_transaction_latency_seconds Latency of committed root transactions, from submission to commit (quantiles are bucket floors, about 12% resolution)."
        );
        let _ = writeln!(out, "# TYPE roost_resp_transaction_latency_seconds summary");
        for (q, us) in LATENCY_QUANTILES.iter().zip(&self.latency_quantiles_us) {
            let _ = writeln!(
                out,
                "roost_resp_transaction_latency_seconds{{quantile=\"{q}\"}} {}",
                seconds(*us)
            );
        }
        let _ = writeln!(
            out,
            "roost_resp_transaction_latency_seconds_sum {}",
            seconds(self.latency_sum_us)
        );
        let _ = writeln!(
            out,
            "roost_resp_transaction_latency_seconds_count {}",
            self.latency_count
        );
        out
    }
}

/// Microseconds as seconds, exactly (six decimals).
fn seconds(us: u64) -> String {
    format!("{}.{:06}", us / 1_000_000, us % 1_000_000)
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
    /// High-water mark of a connection's unwritten replies (bytes).
    pub max_reply_buffer_bytes: AtomicU64,
    pub latency: LatencyHistogram,
    /// Keys in the keyspace and keys with a deadline (moved by committed
    /// transactions).
    pub keys: AtomicI64,
    pub volatile_keys: AtomicI64,
    /// Expired keys reclaimed.
    pub expired_keys: AtomicU64,
    /// Sweep transactions, and the most keys one deleted.
    pub expire_sweeps: AtomicU64,
    pub expire_sweep_max_keys: AtomicU64,
    /// Forwarded requests (see [`Snapshot::forwarded`]).
    pub forwarded: AtomicU64,
    pub forwards_not_sent: AtomicU64,
    pub forwards_unknown: AtomicU64,
    /// Calls per command, in the order of the command table.
    per_command: Box<[AtomicU64]>,
    /// Error replies (INFO's `total_error_replies`), and by their code (the
    /// first word: INFO errorstats), at most [`MAX_ERROR_CODES`] codes.
    pub total_error_replies: AtomicU64,
    error_codes: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
}

/// The most error codes counted apart (as Redis, which stops adding codes
/// at 128: a client's own codes from scripts are unbounded).
const MAX_ERROR_CODES: usize = 128;
/// The longest error code counted (longer ones are cut).
const MAX_ERROR_CODE_BYTES: usize = 64;

impl Stats {
    /// Notes a connection about to write `bytes` of replies.
    pub(crate) fn note_reply_buffer(&self, bytes: usize) {
        let bytes = bytes as u64;
        // A load first: the read-modify-write only when the mark moves, so
        // connections do not contend on the line at every write.
        if bytes > self.max_reply_buffer_bytes.load(Ordering::Relaxed) {
            self.max_reply_buffer_bytes
                .fetch_max(bytes, Ordering::Relaxed);
        }
    }

    /// The keys in the keyspace now.
    pub(crate) fn key_count(&self) -> i64 {
        self.keys.load(Ordering::Relaxed)
    }

    /// Notes a sweep transaction that deleted `keys` expired keys.
    pub(crate) fn note_sweep(&self, keys: usize) {
        self.expire_sweeps.fetch_add(1, Ordering::Relaxed);
        let keys = keys as u64;
        if keys > self.expire_sweep_max_keys.load(Ordering::Relaxed) {
            self.expire_sweep_max_keys
                .fetch_max(keys, Ordering::Relaxed);
        }
    }

    /// Zeroes what CONFIG RESETSTAT resets (Redis: the command, connection,
    /// error and expiry counters; not the keyspace's contents).
    pub(crate) fn reset(&self) {
        for counter in [
            &self.total_connections,
            &self.rejected_connections,
            &self.commands,
            &self.transactions,
            &self.attempts,
            &self.failed_transactions,
            &self.watch_aborts,
            &self.exec_aborts,
            &self.protocol_errors,
            &self.max_reply_buffer_bytes,
            &self.expired_keys,
            &self.expire_sweeps,
            &self.expire_sweep_max_keys,
        ] {
            counter.store(0, Ordering::Relaxed);
        }
        for counter in self.per_command.iter() {
            counter.store(0, Ordering::Relaxed);
        }
        self.total_error_replies.store(0, Ordering::Relaxed);
        self.error_codes.lock().expect("error codes lock").clear();
    }

    /// Notes an error reply, `message` its text (its code the first word).
    pub(crate) fn note_error(&self, message: &str) {
        self.total_error_replies.fetch_add(1, Ordering::Relaxed);
        let code = message.split(' ').next().unwrap_or("ERR");
        let code = if code.is_empty() { "ERR" } else { code };
        let mut end = code.len().min(MAX_ERROR_CODE_BYTES);
        while !code.is_char_boundary(end) {
            end -= 1;
        }
        let code = &code[..end];
        let mut codes = self.error_codes.lock().expect("error codes lock");
        if let Some(count) = codes.get_mut(code) {
            *count += 1;
        } else if codes.len() < MAX_ERROR_CODES {
            codes.insert(code.to_owned(), 1);
        }
    }

    /// Every error code replied since the start (or RESETSTAT), with its
    /// count.
    pub fn error_codes(&self) -> Vec<(String, u64)> {
        let codes = self.error_codes.lock().expect("error codes lock");
        codes.iter().map(|(code, n)| (code.clone(), *n)).collect()
    }

    /// Adds `n` calls of the command at `index` in the command table.
    pub(crate) fn count_command(&self, index: usize, n: u64) {
        if let Some(counter) = self.per_command.get(index) {
            counter.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Every figure, read now.
    pub fn snapshot(&self) -> Snapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let (latency_count, latency_quantiles_us) = self.latency.quantiles_us(&LATENCY_QUANTILES);
        let transactions = get(&self.transactions);
        let failed_transactions = get(&self.failed_transactions);
        let attempts = get(&self.attempts);
        Snapshot {
            uptime_seconds: self.started.elapsed().as_secs(),
            connected_clients: get(&self.connected_clients),
            total_connections: get(&self.total_connections),
            rejected_connections: get(&self.rejected_connections),
            commands: get(&self.commands),
            command_calls: self.command_calls(),
            protocol_errors: get(&self.protocol_errors),
            transactions,
            attempts,
            conflict_retries: attempts.saturating_sub(transactions + failed_transactions),
            failed_transactions,
            watch_aborts: get(&self.watch_aborts),
            exec_aborts: get(&self.exec_aborts),
            max_reply_buffer_bytes: get(&self.max_reply_buffer_bytes),
            latency_count,
            latency_sum_us: self.latency.sum_us(),
            latency_quantiles_us,
            keys: self.keys.load(Ordering::Relaxed).max(0) as u64,
            volatile_keys: self.volatile_keys.load(Ordering::Relaxed).max(0) as u64,
            expired_keys: get(&self.expired_keys),
            expire_sweeps: get(&self.expire_sweeps),
            expire_sweep_max_keys: get(&self.expire_sweep_max_keys),
            forwarded: get(&self.forwarded),
            forwards_not_sent: get(&self.forwards_not_sent),
            forwards_unknown: get(&self.forwards_unknown),
        }
    }

    /// Every command called at least once, with its calls (a command is
    /// counted when it is recognized, whether it then succeeds or not).
    pub fn command_calls(&self) -> Vec<(&'static str, u64)> {
        crate::commands::COMMANDS
            .iter()
            .zip(self.per_command.iter())
            .map(|(spec, calls)| (spec.name, calls.load(Ordering::Relaxed)))
            .filter(|&(_, calls)| calls > 0)
            .collect()
    }
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
            max_reply_buffer_bytes: AtomicU64::new(0),
            latency: LatencyHistogram::default(),
            keys: AtomicI64::new(0),
            volatile_keys: AtomicI64::new(0),
            expired_keys: AtomicU64::new(0),
            expire_sweeps: AtomicU64::new(0),
            expire_sweep_max_keys: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
            forwards_not_sent: AtomicU64::new(0),
            forwards_unknown: AtomicU64::new(0),
            per_command: crate::commands::COMMANDS
                .iter()
                .map(|_| AtomicU64::new(0))
                .collect(),
            total_error_replies: AtomicU64::new(0),
            error_codes: std::sync::Mutex::default(),
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
        assert_eq!(h.sum_us(), 5050);
        let (count, qs) = h.quantiles_us(&[0.5, 0.99]);
        assert_eq!((count, qs), (100, vec![p50, h.quantile_us(0.99)]));
    }

    #[test]
    fn prometheus_text_is_well_formed() {
        let stats = Stats::default();
        stats.count_command(0, 3);
        stats.latency.record(Duration::from_micros(1500));
        let text = stats.snapshot().prometheus();
        assert!(text.contains("roost_resp_command_calls_total{command=\"get\"} 3\n"));
        assert!(text.contains("roost_resp_transaction_latency_seconds_sum 0.001500\n"));
        for line in text.lines() {
            if let Some(comment) = line.strip_prefix('#') {
                assert!(
                    comment.starts_with(" HELP roost_resp_")
                        || comment.starts_with(" TYPE roost_resp_")
                );
            } else {
                let (name, value) = line.rsplit_once(' ').expect("name value");
                assert!(name.starts_with("roost_resp_"), "{line}");
                assert!(value.parse::<f64>().is_ok(), "{line}");
            }
        }
    }
}

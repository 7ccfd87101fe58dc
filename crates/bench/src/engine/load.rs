//! Loading the benchmark relation, and what it costs in memory.

use std::time::{Duration, Instant};

use roost_storage::{Engine, Relation, RetryPolicy, TxError};
use serde_json::json;

use super::workload::{loaded_key, KEY_BYTES};
use crate::results::Row;
use crate::sys::resident_bytes;

/// Inserts per loading transaction.
pub const LOAD_BATCH_RECORDS: u64 = 100;

/// Resident memory before and after loading.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryReport {
    pub records: u64,
    pub value_bytes: usize,
    pub rss_before_bytes: Option<u64>,
    pub rss_after_bytes: Option<u64>,
    /// `Relation::record_heap_bytes`: the engine's own count of record bytes
    /// (record blocks only: no allocator, index or overflow-buffer bytes).
    pub record_heap_bytes: u64,
    pub load_duration: Duration,
    pub load_threads: usize,
}

impl MemoryReport {
    /// Key plus value: what the data would take packed.
    pub fn raw_bytes_per_record(&self) -> u64 {
        KEY_BYTES as u64 + self.value_bytes as u64
    }

    pub fn resident_bytes_per_record(&self) -> Option<f64> {
        let grown = self.rss_after_bytes?.saturating_sub(self.rss_before_bytes?);
        (self.records > 0).then(|| grown as f64 / self.records as f64)
    }

    pub fn ratio_to_raw(&self) -> Option<f64> {
        Some(self.resident_bytes_per_record()? / self.raw_bytes_per_record() as f64)
    }

    pub fn load_tps(&self) -> f64 {
        let secs = self.load_duration.as_secs_f64();
        if secs > 0.0 {
            self.records as f64 / secs
        } else {
            0.0
        }
    }

    /// The results row: system `roost`, variant `memory`.
    pub fn to_row(&self) -> Row {
        Row::new("roost", "memory")
            .with_param("workload", "load")
            .with_param("threads", self.load_threads as u64)
            .with_param("records", self.records)
            .with_param("value_bytes", self.value_bytes as u64)
            .with_extra("rss_before_bytes", json!(self.rss_before_bytes))
            .with_extra("rss_after_bytes", json!(self.rss_after_bytes))
            .with_extra(
                "resident_bytes_per_record",
                json!(self.resident_bytes_per_record()),
            )
            .with_extra("raw_bytes_per_record", self.raw_bytes_per_record())
            .with_extra("ratio_to_raw", json!(self.ratio_to_raw()))
            .with_extra(
                "record_heap_bytes_per_record",
                self.record_heap_bytes as f64 / self.records.max(1) as f64,
            )
            .with_extra("load_seconds", self.load_duration.as_secs_f64())
            .with_extra("load_tps", self.load_tps())
    }

    pub fn summary_line(&self) -> String {
        match (self.resident_bytes_per_record(), self.ratio_to_raw()) {
            (Some(per_record), Some(ratio)) => format!(
                "memory: {:.1} resident bytes/record vs {} raw (ratio {ratio:.2}x; Relation::record_heap_bytes {:.1} B/record)",
                per_record,
                self.raw_bytes_per_record(),
                self.record_heap_bytes as f64 / self.records.max(1) as f64,
            ),
            _ => "memory: resident set size unavailable (no /proc/self/statm)".to_owned(),
        }
    }
}

/// Inserts records `0..records` (keys [`loaded_key`], `value_bytes` values
/// whose first 8 bytes are 0) in transactions of [`LOAD_BATCH_RECORDS`]
/// inserts on `threads` threads, measuring resident memory around it.
pub fn load(
    engine: &Engine,
    relation: &Relation,
    records: u64,
    value_bytes: usize,
    threads: usize,
) -> Result<MemoryReport, TxError> {
    let threads = threads.max(1);
    let rss_before_bytes = resident_bytes();
    let started = Instant::now();
    let chunk = records.div_ceil(threads as u64);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads as u64)
            .map(|t| {
                let range = (t * chunk).min(records)..((t + 1) * chunk).min(records);
                scope.spawn(move || load_range(engine, relation, range, value_bytes))
            })
            .collect();
        handles.into_iter().try_for_each(|handle| {
            handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    })?;
    let load_duration = started.elapsed();
    Ok(MemoryReport {
        records,
        value_bytes,
        rss_before_bytes,
        rss_after_bytes: resident_bytes(),
        record_heap_bytes: relation.record_heap_bytes() as u64,
        load_duration,
        load_threads: threads,
    })
}

fn load_range(
    engine: &Engine,
    relation: &Relation,
    range: std::ops::Range<u64>,
    value_bytes: usize,
) -> Result<(), TxError> {
    let mut worker = engine.worker();
    let value = vec![0u8; value_bytes];
    let mut batch_start = range.start;
    while batch_start < range.end {
        let batch = batch_start..(batch_start + LOAD_BATCH_RECORDS).min(range.end);
        worker.run(RetryPolicy::default(), |tx| {
            for index in batch.clone() {
                tx.insert(relation, &loaded_key(index), &value)?;
            }
            Ok(())
        })?;
        batch_start = batch.end;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_every_record_and_reports_memory() {
        let engine = Engine::default();
        let relation = engine.create_relation("t").expect("create");
        let report = load(&engine, &relation, 1_234, 100, 3).expect("load");
        assert_eq!(relation.index_len(), 1_234);
        let mut value = Vec::new();
        assert!(relation.raw_get(&loaded_key(1_233), &mut value));
        assert_eq!(value.len(), 100);
        assert_eq!(report.raw_bytes_per_record(), 108);
        assert!(report.record_heap_bytes > 0);
        let row = report.to_row();
        assert_eq!(row.variant, "memory");
        assert!(row.extra.contains_key("ratio_to_raw"));
        assert!(!report.summary_line().is_empty());
    }

    #[test]
    fn ratio_needs_both_readings() {
        let report = MemoryReport {
            records: 10,
            value_bytes: 100,
            rss_before_bytes: Some(1_000),
            rss_after_bytes: Some(3_160),
            record_heap_bytes: 1_200,
            load_duration: Duration::from_millis(1),
            load_threads: 1,
        };
        assert_eq!(report.resident_bytes_per_record(), Some(216.0));
        assert_eq!(report.ratio_to_raw(), Some(2.0));
        let unknown = MemoryReport {
            rss_after_bytes: None,
            ..report
        };
        assert_eq!(unknown.ratio_to_raw(), None);
    }
}

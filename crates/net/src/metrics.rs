//! Transport counters: cheap relaxed atomics, read as a snapshot (for
//! `roost status`, the Prometheus endpoint and benchmarks).

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

#[derive(Debug, Default)]
pub struct Metrics {
    pub(crate) msgs_sent: AtomicU64,
    pub(crate) bytes_sent: AtomicU64,
    pub(crate) batches_sent: AtomicU64,
    pub(crate) msgs_received: AtomicU64,
    pub(crate) bytes_received: AtomicU64,
    pub(crate) dropped_queue_full: AtomicU64,
    pub(crate) dropped_chaos: AtomicU64,
    pub(crate) dropped_unreachable: AtomicU64,
    pub(crate) frames_rejected: AtomicU64,
    pub(crate) connects: AtomicU64,
    pub(crate) auth_failures: AtomicU64,
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricsSnapshot {
    pub msgs_sent: u64,
    pub bytes_sent: u64,
    /// Socket writes; `msgs_sent / batches_sent` is the mean batch size.
    pub batches_sent: u64,
    pub msgs_received: u64,
    pub bytes_received: u64,
    pub dropped_queue_full: u64,
    pub dropped_chaos: u64,
    /// Lost with a connection that broke mid-batch, or encoded too large.
    pub dropped_unreachable: u64,
    /// Malformed or oversized frames (each closed its connection).
    pub frames_rejected: u64,
    /// Outbound connections established (handshake done, when authenticating).
    pub connects: u64,
    /// Failed authentication handshakes, inbound and outbound (each closed its
    /// connection): another secret or none, garbage, a timeout, an unknown node.
    pub auth_failures: u64,
}

pub(crate) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Metrics {
    pub fn snapshot(&self) -> MetricsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        MetricsSnapshot {
            msgs_sent: get(&self.msgs_sent),
            bytes_sent: get(&self.bytes_sent),
            batches_sent: get(&self.batches_sent),
            msgs_received: get(&self.msgs_received),
            bytes_received: get(&self.bytes_received),
            dropped_queue_full: get(&self.dropped_queue_full),
            dropped_chaos: get(&self.dropped_chaos),
            dropped_unreachable: get(&self.dropped_unreachable),
            frames_rejected: get(&self.frames_rejected),
            connects: get(&self.connects),
            auth_failures: get(&self.auth_failures),
        }
    }
}

//! Silo's global epoch: a number advanced by a ticker thread every
//! `epoch_interval_ms`. Committers read it once per commit and put it in the high
//! bits of their TIDs, so TID generation needs no global counter. (Memory
//! reclamation uses a separate epoch scheme, the one `scc` shares with its index.)

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::tid::MAX_EPOCH;

#[derive(Debug, Default)]
pub struct GlobalEpoch {
    epoch: AtomicU64,
}

impl GlobalEpoch {
    pub fn new() -> Self {
        GlobalEpoch {
            epoch: AtomicU64::new(1),
        }
    }

    pub fn current(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    pub fn advance(&self) -> u64 {
        let next = self.epoch.fetch_add(1, Ordering::AcqRel) + 1;
        assert!(next <= MAX_EPOCH, "global epoch overflowed the TID word");
        next
    }
}

/// The thread that advances the global epoch; stops when dropped.
#[derive(Debug)]
pub struct EpochTicker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    pub fn start(epoch: Arc<GlobalEpoch>, interval_ms: u64) -> Self {
        assert!(interval_ms > 0, "epoch interval must be positive");
        let stop = Arc::new(AtomicBool::new(false));
        let stop_flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("roost-epoch".into())
            .spawn(move || {
                while !stop_flag.load(Ordering::Acquire) {
                    std::thread::park_timeout(Duration::from_millis(interval_ms));
                    epoch.advance();
                }
            })
            .expect("spawn epoch ticker");
        EpochTicker {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

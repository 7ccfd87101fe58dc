//! Silo's global epoch (the *Silo epoch*, not the membership's epoch id): a number advanced by a ticker thread every
//! `silo_epoch_interval_ms`. Committers read it once per commit and put it in the high
//! bits of their TIDs, so TID generation needs no global counter. (Memory
//! reclamation uses a separate epoch scheme, the one `scc` shares with its index.)
//!
//! Under loom there is no ticker thread (a model must not race a timer it
//! cannot schedule): the epoch stays where the engine started it unless a
//! test calls [`SiloEpoch::advance`] through `Engine::advance_silo_epoch`.

#[cfg(not(loom))]
use std::sync::atomic::AtomicBool;
#[cfg(not(loom))]
use std::sync::Arc;
#[cfg(not(loom))]
use std::thread::JoinHandle;
#[cfg(not(loom))]
use std::time::Duration;

use crate::sync::{AtomicU64, Ordering};
use crate::tid::MAX_EPOCH;

#[derive(Debug, Default)]
pub struct SiloEpoch {
    epoch: AtomicU64,
}

impl SiloEpoch {
    pub fn new() -> Self {
        SiloEpoch {
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
#[cfg(not(loom))]
#[derive(Debug)]
pub struct SiloEpochTicker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

#[cfg(not(loom))]
impl SiloEpochTicker {
    pub fn start(epoch: Arc<SiloEpoch>, interval_ms: u64) -> Self {
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
        SiloEpochTicker {
            stop,
            thread: Some(thread),
        }
    }
}

#[cfg(not(loom))]
impl Drop for SiloEpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

//! The loom shim (tokio's pattern): the commit core's and the B+-tree's
//! atomics come from here, so `RUSTFLAGS="--cfg loom"` model-checks the very
//! code that runs in production.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU64, Ordering};
#[cfg(loom)]
pub(crate) fn spin_hint() {
    loom::thread::yield_now();
}

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) fn spin_hint() {
    std::hint::spin_loop();
}

/// Epoch-based reclamation: `scc`'s guard (shared with the hashed index).
#[cfg(not(loom))]
pub(crate) use scc::Guard;

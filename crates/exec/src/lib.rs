//! Roost's executors: each one OS thread running a loop of its own instead
//! of a general-purpose runtime, because every cross-container call and every
//! client request pays the executor's hand-off and wake-up costs.
//!
//! - [`queue`]: the mailbox, a bounded lock-free queue (many producers, one
//!   consumer) that never blocks a sender's thread.
//! - [`Executor`]: the loop: local tasks in a slab, wakers that push to a
//!   local list on the executor's thread and to a lock-free stack from any
//!   other, timers in a heap read only when it is not empty, spin-then-park
//!   with the spin halved after every spin that found nothing.
//! - [`net`]: TCP connections polled by the executor's own `epoll`, so a
//!   connection is served on the thread that runs its work.
//!
//! The same code runs under loom (`RUSTFLAGS="--cfg loom"`, `tests/loom_exec.rs`):
//! the mailbox, the remote wake stack and the park/notify protocol.

mod park;
pub mod queue;
mod runtime;
mod sync;

#[cfg(not(loom))]
pub mod net;

pub use park::PlantedBugs;
pub use runtime::{
    on_executor, sleep, spawn, yield_now, Closed, Config, Executor, Job, Remote, SendError, Sleep,
    Spin, YieldNow, MAX_TASKS,
};

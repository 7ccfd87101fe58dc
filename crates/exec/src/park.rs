//! Sleeping and waking an executor without losing a wake-up.
//!
//! The executor raises `sleeping`, fences, and looks for work once more
//! before it blocks; a sender publishes its work, fences, and unparks the
//! executor if it saw `sleeping` raised. With both fences sequentially
//! consistent, at least one side sees the other (Dekker): either the
//! executor finds the work on its last look, or the sender sees the flag and
//! wakes it. The blocking itself is `epoll_wait` on the executor's `mio`
//! poll (so sockets wake it too), woken by an eventfd; under loom a
//! mutex-and-condvar token the model checker can explore.

use std::time::Duration;

use crate::sync::{fence, AtomicBool, Ordering};

/// Bugs a test plants to show the model checker catches them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlantedBugs {
    /// The executor blocks without its last look for work after raising
    /// `sleeping`: a push that landed between its last empty check and the
    /// flag is never seen, and nobody wakes it (a lost wake-up).
    pub park_without_recheck: bool,
}

pub(crate) struct Parker {
    sleeping: AtomicBool,
    planted: PlantedBugs,
    #[cfg(loom)]
    token: loom::sync::Mutex<bool>,
    #[cfg(loom)]
    condvar: loom::sync::Condvar,
    #[cfg(not(loom))]
    waker: mio::Waker,
}

/// The token of the eventfd waker in an executor's poll.
#[cfg(not(loom))]
pub(crate) const WAKE_TOKEN: mio::Token = mio::Token(usize::MAX);

impl Parker {
    #[cfg(not(loom))]
    pub(crate) fn new(registry: &mio::Registry, planted: PlantedBugs) -> std::io::Result<Self> {
        Ok(Parker {
            sleeping: AtomicBool::new(false),
            planted,
            waker: mio::Waker::new(registry, WAKE_TOKEN)?,
        })
    }

    #[cfg(loom)]
    pub(crate) fn new(planted: PlantedBugs) -> Self {
        Parker {
            sleeping: AtomicBool::new(false),
            planted,
            token: loom::sync::Mutex::new(false),
            condvar: loom::sync::Condvar::new(),
        }
    }

    /// Called by a sender after it published work (a message, a wake).
    pub(crate) fn notify(&self) {
        fence(Ordering::SeqCst);
        // The swap makes one of many racing senders pay for the unpark.
        if self.sleeping.load(Ordering::Relaxed) && self.sleeping.swap(false, Ordering::Relaxed) {
            self.unpark();
        }
    }

    /// Blocks the executor until notified, `timeout` passes, or (in
    /// production) a socket is ready; `has_work` is the last look. `block`
    /// does the blocking (the poll, which also collects socket events).
    pub(crate) fn park(
        &self,
        has_work: impl Fn() -> bool,
        block: impl FnOnce(Option<Duration>),
        timeout: Option<Duration>,
    ) {
        // A swap, not a store, in production too, so loom checks this very
        // code: loom can leave a plain store unordered against a sender's
        // earlier `swap(false)` and let that sender's fenced load read its
        // own older swap (tokio-rs/loom#254), a lost wake-up no real
        // execution has; a swap reads the newest value. On the park path
        // its cost does not show.
        self.sleeping.swap(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if !self.planted.park_without_recheck && has_work() {
            self.sleeping.store(false, Ordering::Relaxed);
            return;
        }
        block(timeout);
        self.sleeping.store(false, Ordering::Relaxed);
    }

    #[cfg(not(loom))]
    fn unpark(&self) {
        // An eventfd write; it fails only if the counter would overflow,
        // and then a wake-up is already pending.
        let _ = self.waker.wake();
    }

    #[cfg(loom)]
    fn unpark(&self) {
        *self.token.lock().unwrap() = true;
        self.condvar.notify_one();
    }

    /// Under loom, the blocking: wait for the token (timeouts are not
    /// modelled; the models use none).
    #[cfg(loom)]
    pub(crate) fn block(&self) {
        let mut token = self.token.lock().unwrap();
        while !*token {
            token = self.condvar.wait(token).unwrap();
        }
        *token = false;
    }
}

//! The loom shim (tokio's pattern): the engine's atomics, fences, spin hints,
//! yields and epoch guard come from here, so `RUSTFLAGS="--cfg loom"`
//! model-checks the very code that runs in production (the B+-tree, the
//! records' TID words and values, validation and install), with loom's
//! atomics in place of std's. Normal builds re-export std and `scc` directly:
//! no wrapper, no indirection.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// A spin-wait hint: under loom a yield, so the model checker runs another
/// thread instead of exploring the same spin forever.
#[cfg(loom)]
pub(crate) fn spin_hint() {
    loom::thread::yield_now();
}

/// Gives the core away (a bounded wait that outlasted its spins).
#[cfg(loom)]
pub(crate) fn yield_now() {
    loom::thread::yield_now();
}

/// A backoff sleep: under loom a yield, since a real sleep would only stall
/// the one OS thread all model threads run on.
#[cfg(loom)]
pub(crate) fn sleep(_duration: std::time::Duration) {
    loom::thread::yield_now();
}

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) fn spin_hint() {
    std::hint::spin_loop();
}

#[cfg(not(loom))]
pub(crate) use std::thread::{sleep, yield_now};

/// Epoch-based reclamation: `scc`'s guard (shared with the hashed index).
#[cfg(not(loom))]
pub use scc::Guard;

#[cfg(loom)]
pub(crate) use loom_guard::next_serial;
#[cfg(loom)]
pub use loom_guard::{loom_iteration, Guard};

/// Under loom, a stand-in for `scc`'s guard. `scc`'s epochs are not modelled
/// (its atomics are std's, and loom runs every model thread on one OS thread,
/// which `scc` would take for a single thread), so deferred frees are held
/// back instead: a guard only counts itself, and [`loom_iteration`] runs the
/// deferred frees when the model iteration ends, after the test has joined
/// its threads, when no guard is alive and so no loom thread can still read
/// what they free.
#[cfg(loom)]
mod loom_guard {
    use std::cell::{Cell, RefCell};
    use std::marker::PhantomData;

    type Deferred = Box<dyn FnOnce()>;

    // Loom runs one execution at a time on the test's OS thread (its model
    // threads are coroutines of that thread), so thread-locals are
    // per-execution state; tests running in parallel each have their own.
    thread_local! {
        static DEFERRED: RefCell<Vec<Deferred>> = const { RefCell::new(Vec::new()) };
        static LIVE_GUARDS: Cell<usize> = const { Cell::new(0) };
        static SERIAL: Cell<u64> = const { Cell::new(0) };
    }

    /// A number unique within the model iteration, in allocation order:
    /// what records are ordered by under loom instead of their addresses
    /// (loom replays a schedule only if the model is deterministic, and the
    /// allocator's addresses differ from one iteration to the next).
    pub(crate) fn next_serial() -> u64 {
        SERIAL.with(|serial| {
            let next = serial.get() + 1;
            serial.set(next);
            next
        })
    }

    /// Pins nothing; see the module's stand-in note.
    #[derive(Debug)]
    pub struct Guard {
        /// Like `scc`'s guard: not `Send` (it belongs to the thread that made it).
        _not_send: PhantomData<*const ()>,
    }

    impl Default for Guard {
        fn default() -> Self {
            Guard::new()
        }
    }

    impl Guard {
        pub fn new() -> Self {
            LIVE_GUARDS.with(|live| live.set(live.get() + 1));
            Guard {
                _not_send: PhantomData,
            }
        }

        /// Runs `f` when the model iteration ends (see [`loom_iteration`]).
        pub fn defer_execute<F: 'static + FnOnce()>(&self, f: F) {
            DEFERRED.with(|deferred| deferred.borrow_mut().push(Box::new(f)));
        }
    }

    impl Drop for Guard {
        fn drop(&mut self) {
            // Saturating: an iteration that panicked may drop its guards
            // after the next iteration reset the count.
            LIVE_GUARDS.with(|live| live.set(live.get().saturating_sub(1)));
        }
    }

    /// Runs one loom model iteration `body`, then the frees its guards
    /// deferred. `body` must join every thread it spawned (and drop every
    /// transaction), so no guard is alive when the frees run; asserted.
    ///
    /// Frees left over from an iteration that panicked (a planted-bug model
    /// that loom caught) are leaked, not run: their loom objects belong to
    /// an execution that is gone.
    pub fn loom_iteration<R>(body: impl FnOnce() -> R) -> R {
        let stale = DEFERRED.with(|deferred| std::mem::take(&mut *deferred.borrow_mut()));
        std::mem::forget(stale);
        LIVE_GUARDS.with(|live| live.set(0));
        SERIAL.with(|serial| serial.set(0));
        let result = body();
        assert_eq!(
            LIVE_GUARDS.with(Cell::get),
            0,
            "a guard outlived its model iteration: deferred frees could race a reader"
        );
        // Deferred frees may defer more (none do today); bounded anyway.
        for _round in 0..8 {
            let batch = DEFERRED.with(|deferred| std::mem::take(&mut *deferred.borrow_mut()));
            if batch.is_empty() {
                return result;
            }
            for free in batch {
                free();
            }
        }
        panic!("deferred frees kept deferring more frees");
    }
}

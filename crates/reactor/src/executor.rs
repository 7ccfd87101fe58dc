//! Transaction executors: one OS thread each, running `roost-exec`'s loop
//! (a bounded lock-free mailbox, local tasks, spin-then-park): the seed's
//! thread pool with cooperative scheduling, where a blocked (sub-)transaction
//! is simply a pending future. Each executor drains its mailbox of jobs
//! ((sub-)transactions dispatched to it) and admits at most
//! `max_active_transactions` root transactions at once.
//!
//! The mailbox is bounded (`Deployment::mailbox_capacity`). A full mailbox
//! makes the sender wait, and never an executor's own loop: a root
//! submission from a client awaits room (or blocks, from `run_blocking`); a
//! call or context release sent by another executor, when it finds no room,
//! waits in a task of the sending executor, so that executor keeps draining
//! its own mailbox and two executors sending to each other cannot deadlock.
//!
//! Per executor, the thread-local [`ExecutorLocal`] holds the database context
//! of every root transaction that touched this executor's container here, with
//! the epoch guard that keeps the context's record pointers valid.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use roost_exec::{Remote, SendError};
use roost_storage::{Engine, Guard, TxContext};
use tokio::sync::Semaphore;

/// A job's body: runs on the executor's thread.
pub(crate) type RunJob = Box<dyn FnOnce() + Send>;

/// One root transaction's context in one container, on the executor serving it.
pub(crate) struct Participant {
    /// Held from the context's first operation until it is released after
    /// commit or abort: the storage rule for detached contexts.
    pub(crate) guard: Guard,
    pub(crate) context: Arc<Mutex<TxContext>>,
    /// Reactors whose placement word this transaction already observed in
    /// this container: that observation is in the read set (validated at
    /// commit), so repeating it on every call into the reactor adds nothing.
    pub(crate) present: RefCell<Vec<crate::database::ReactorId>>,
}

/// Reactors remembered per participant as observed (a small linear set).
pub(crate) const PRESENT_MEMO_LIMIT: usize = 16;

pub(crate) struct ExecutorLocal {
    /// The database this executor belongs to (`DbShared::db_id`).
    pub(crate) db_id: u64,
    pub(crate) executor: usize,
    pub(crate) admission: Rc<Semaphore>,
    participants: HashMap<u64, Rc<Participant>>,
    /// Reusable contexts, so a transaction does not allocate fresh buffers.
    pool: Vec<TxContext>,
    /// Reusable `Participant::present` sets, likewise.
    present_pool: Vec<Vec<crate::database::ReactorId>>,
    engine: Engine,
}

/// Contexts kept for reuse per executor.
const CONTEXT_POOL_LIMIT: usize = 256;

thread_local! {
    static LOCAL: RefCell<Option<ExecutorLocal>> = const { RefCell::new(None) };
}

/// The executor of database `db_id` running on this thread, if any.
pub(crate) fn current_executor(db_id: u64) -> Option<usize> {
    LOCAL
        .try_with(|local| {
            local
                .try_borrow()
                .ok()
                .and_then(|l| l.as_ref().filter(|l| l.db_id == db_id).map(|l| l.executor))
        })
        .ok()
        .flatten()
}

pub(crate) fn with_local<R>(f: impl FnOnce(&mut ExecutorLocal) -> R) -> R {
    LOCAL.with(|local| {
        f(local
            .borrow_mut()
            .as_mut()
            .expect("called on an executor thread"))
    })
}

impl ExecutorLocal {
    /// The context of root transaction `txn_id` here, created on first use.
    /// Returns it and whether it was created.
    pub(crate) fn participant(&mut self, txn_id: u64) -> (Rc<Participant>, bool) {
        if let Some(p) = self.participants.get(&txn_id) {
            return (Rc::clone(p), false);
        }
        let context = self
            .pool
            .pop()
            .unwrap_or_else(|| TxContext::new(&self.engine));
        assert!(context.is_untouched(), "pooled contexts are clean");
        let p = Rc::new(Participant {
            guard: Guard::new(),
            context: Arc::new(Mutex::new(context)),
            present: RefCell::new(self.present_pool.pop().unwrap_or_default()),
        });
        self.participants.insert(txn_id, Rc::clone(&p));
        (p, true)
    }

    /// Drops the context of a finished root transaction (after its commit or
    /// abort), ending its epoch guard; the buffers go back to the pool.
    pub(crate) fn release(&mut self, txn_id: u64) {
        let Some(p) = self.participants.remove(&txn_id) else {
            return;
        };
        let Ok(p) = Rc::try_unwrap(p) else { return };
        let Participant {
            guard,
            context,
            present,
        } = p;
        let mut present = present.into_inner();
        if self.present_pool.len() < CONTEXT_POOL_LIMIT {
            present.clear();
            self.present_pool.push(present);
        }
        if let Ok(context) = Arc::try_unwrap(context) {
            let context = context.into_inner().unwrap_or_else(|e| e.into_inner());
            if context.is_untouched() && self.pool.len() < CONTEXT_POOL_LIMIT {
                self.pool.push(context);
            }
        }
        drop(guard);
    }
}

/// How long an executor about to park spins first.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SpinBudget {
    /// With no transaction in flight here.
    pub(crate) idle: Duration,
    /// While a transaction that touched this executor's container is not yet
    /// released: its next call, its commit or its release is due soon.
    pub(crate) active: Duration,
    /// Yield the core between checks (more executors than cores).
    pub(crate) yields: bool,
}

/// Whether a transaction that touched this executor's container is still in
/// flight here (the executor then spins for the active budget).
fn in_flight() -> bool {
    LOCAL.with(|local| {
        local
            .try_borrow()
            .ok()
            .and_then(|l| l.as_ref().map(|l| !l.participants.is_empty()))
            .unwrap_or(false)
    })
}

pub(crate) struct ExecutorHandle {
    remote: Remote,
    thread: Option<JoinHandle<()>>,
}

impl ExecutorHandle {
    pub(crate) fn spawn(
        db_id: u64,
        executor: usize,
        engine: Engine,
        max_active: usize,
        mailbox_capacity: usize,
        spin: SpinBudget,
    ) -> std::io::Result<Self> {
        let config = roost_exec::Config {
            name: format!("roost-exec-{executor}"),
            mailbox_capacity,
            spin: roost_exec::Spin {
                idle: spin.idle,
                active: spin.active,
                yields: spin.yields,
            },
            in_flight: Some(in_flight),
            planted: Default::default(),
        };
        let (remote, thread) = roost_exec::Executor::spawn_thread(
            config,
            move || {
                LOCAL.with(|local| {
                    *local.borrow_mut() = Some(ExecutorLocal {
                        db_id,
                        executor,
                        admission: Rc::new(Semaphore::new(max_active)),
                        participants: HashMap::new(),
                        pool: Vec::new(),
                        present_pool: Vec::new(),
                        engine,
                    })
                })
            },
            || {
                LOCAL.with(|local| local.borrow_mut().take());
            },
        )?;
        Ok(ExecutorHandle {
            remote,
            thread: Some(thread),
        })
    }

    /// Enqueues a root transaction's job, waiting while the mailbox is full;
    /// false if the executor has stopped.
    pub(crate) async fn submit(&self, job: RunJob) -> bool {
        self.remote.send(job).await.is_ok()
    }

    /// [`submit`](Self::submit) for callers outside any async runtime.
    pub(crate) fn submit_blocking(&self, job: RunJob) -> bool {
        self.remote.send_blocking(job).is_ok()
    }

    /// Sends a job from an executor thread (a call, a context release);
    /// false if the executor has stopped. With the mailbox full, a task of
    /// the calling executor waits for room and sends it: the caller never
    /// blocks its own thread, whose mailbox others may be waiting on.
    pub(crate) fn send(&self, job: impl FnOnce() + Send + 'static) -> bool {
        match self.remote.try_send(Box::new(job)) {
            Ok(()) => true,
            Err(SendError::Full(job)) => {
                let remote = self.remote.clone();
                roost_exec::spawn(async move {
                    let _ = remote.send(job).await;
                });
                true
            }
            Err(SendError::Closed(_)) => false,
        }
    }

    /// Jobs waiting in the mailbox now.
    pub(crate) fn queued(&self) -> usize {
        self.remote.queued()
    }

    /// Asks the executor to stop once it has run what is queued before.
    pub(crate) fn request_stop(&self) {
        self.remote.request_stop();
    }

    /// Stops the executor and waits for its thread, unless called on that
    /// thread (the last holder of a database may be one of its tasks).
    pub(crate) fn stop(&mut self) {
        self.request_stop();
        if self.remote.is_current() {
            return;
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }

    /// Whether the calling thread is this executor's.
    pub(crate) fn is_current(&self) -> bool {
        self.remote.is_current()
    }
}

impl Drop for ExecutorHandle {
    /// Only asks: the last handle may be dropped on an executor's own thread
    /// (a task holding the database), which must not wait for itself.
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.request_stop();
        }
    }
}

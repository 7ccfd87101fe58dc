//! Transaction executors: one OS thread each, running a single-threaded async
//! scheduler (tokio's current-thread runtime with a `LocalSet`): the seed's
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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use roost_storage::{Engine, Guard, TxContext};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, Semaphore};

/// Work sent to an executor.
pub(crate) enum Job {
    Run(RunJob),
    Stop,
}

/// A job's body: runs on the executor's thread.
pub(crate) type RunJob = Box<dyn FnOnce() + Send>;

/// One root transaction's context in one container, on the executor serving it.
pub(crate) struct Participant {
    /// Held from the context's first operation until it is released after
    /// commit or abort: the storage rule for detached contexts.
    pub(crate) guard: Guard,
    pub(crate) context: Arc<Mutex<TxContext>>,
    /// Reactors this transaction already found not moved away from this
    /// container: that read is in the read set (validated at commit), so
    /// repeating it on every call into the reactor adds nothing.
    pub(crate) present: RefCell<Vec<crate::database::ReactorId>>,
}

/// Reactors remembered per participant as present (a small linear set).
pub(crate) const PRESENT_MEMO_LIMIT: usize = 16;

pub(crate) struct ExecutorLocal {
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

/// How long a spinning executor keeps its core before it starts yielding it
/// between checks: long enough for a hand-off already under way on another
/// core (about a microsecond), short enough that a thread waiting for this
/// core (a client, another executor, another process) is not held up.
const PURE_SPIN: Duration = Duration::from_micros(20);

/// Spins until `incoming` moves or `budget` is spent (tokio's park hook): an
/// executor about to park keeps looking for new work instead, because waking
/// a parked thread (an idle virtual CPU, here) costs tens of microseconds, far
/// more than a whole cross-container call should. After [`PURE_SPIN`] (at
/// once with `yields`), the thread gives its core to any other runnable thread
/// between checks: a pure spin on an oversubscribed machine makes every wait
/// last the whole budget (the thread with the awaited work has no core).
fn spin_before_park(incoming: &AtomicU64, budget: Duration, yields: bool) {
    let seen = incoming.load(Ordering::Acquire);
    let start = Instant::now();
    loop {
        // Many cheap checks per clock read: reading the clock costs more than
        // a check here, and each check's delay is added to the hand-off.
        for _ in 0..32 {
            if incoming.load(Ordering::Acquire) != seen {
                return;
            }
            std::hint::spin_loop();
        }
        let elapsed = start.elapsed();
        if elapsed >= budget {
            return;
        }
        if yields || elapsed >= PURE_SPIN {
            std::thread::yield_now();
        }
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

impl SpinBudget {
    /// The budget now, on this executor's thread.
    fn now(self) -> Duration {
        let active = LOCAL.with(|local| {
            local
                .try_borrow()
                .ok()
                .and_then(|l| l.as_ref().map(|l| !l.participants.is_empty()))
                .unwrap_or(false)
        });
        if active {
            self.active.max(self.idle)
        } else {
            self.idle
        }
    }
}

pub(crate) struct ExecutorHandle {
    sender: mpsc::Sender<Job>,
    /// Bumped by everything that gives this executor work (a job, a reply to
    /// one of its calls), so its park hook can stop spinning at once.
    incoming: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl ExecutorHandle {
    pub(crate) fn spawn(
        executor: usize,
        engine: Engine,
        max_active: usize,
        mailbox_capacity: usize,
        spin: SpinBudget,
    ) -> Self {
        let (sender, mut receiver) = mpsc::channel::<Job>(mailbox_capacity);
        let incoming = Arc::new(AtomicU64::new(0));
        let hook = Arc::clone(&incoming);
        let thread = std::thread::Builder::new()
            .name(format!("roost-exec-{executor}"))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .on_thread_park(move || {
                        let budget = spin.now();
                        if !budget.is_zero() {
                            spin_before_park(&hook, budget, spin.yields)
                        }
                    })
                    .build()
                    .expect("executor runtime");
                LOCAL.with(|local| {
                    *local.borrow_mut() = Some(ExecutorLocal {
                        executor,
                        admission: Rc::new(Semaphore::new(max_active)),
                        participants: HashMap::new(),
                        pool: Vec::new(),
                        present_pool: Vec::new(),
                        engine,
                    })
                });
                let tasks = tokio::task::LocalSet::new();
                tasks.block_on(&runtime, async move {
                    while let Some(job) = receiver.recv().await {
                        match job {
                            Job::Run(run) => run(),
                            Job::Stop => break,
                        }
                    }
                });
                drop(tasks);
                LOCAL.with(|local| local.borrow_mut().take());
            })
            .expect("spawn executor thread");
        ExecutorHandle {
            sender,
            incoming,
            thread: Some(thread),
        }
    }

    /// Enqueues a root transaction's job, waiting while the mailbox is full;
    /// false if the executor has stopped.
    pub(crate) async fn submit(&self, job: RunJob) -> bool {
        let sent = self.sender.send(Job::Run(job)).await.is_ok();
        self.notify_incoming();
        sent
    }

    /// [`submit`](Self::submit) for callers outside any async runtime.
    pub(crate) fn submit_blocking(&self, job: RunJob) -> bool {
        let sent = self.sender.blocking_send(Job::Run(job)).is_ok();
        self.notify_incoming();
        sent
    }

    /// Sends a job from an executor thread (a call, a context release);
    /// false if the executor has stopped. With the mailbox full, a task of
    /// the calling executor waits for room and sends it: the caller never
    /// blocks its own thread, whose mailbox others may be waiting on.
    pub(crate) fn send(&self, job: impl FnOnce() + Send + 'static) -> bool {
        match self.sender.try_send(Job::Run(Box::new(job))) {
            Ok(()) => {
                self.notify_incoming();
                true
            }
            Err(TrySendError::Full(job)) => {
                let sender = self.sender.clone();
                let incoming = Arc::clone(&self.incoming);
                tokio::task::spawn_local(async move {
                    if sender.send(job).await.is_ok() {
                        incoming.fetch_add(1, Ordering::Release);
                    }
                });
                true
            }
            Err(TrySendError::Closed(_)) => false,
        }
    }

    /// Jobs waiting in the mailbox now.
    pub(crate) fn queued(&self) -> usize {
        self.sender.max_capacity() - self.sender.capacity()
    }

    /// Asks the executor to stop once it has run what is queued before.
    pub(crate) fn request_stop(&self) {
        if let Err(TrySendError::Full(stop)) = self.sender.try_send(Job::Stop) {
            // Rare (dropping a database under full load): wait for room on
            // a thread of its own, since this one may be inside a runtime.
            let sender = self.sender.clone();
            std::thread::spawn(move || {
                let _ = sender.blocking_send(stop);
            });
        }
    }

    /// Tells a spinning executor that work (or a reply) is on its way.
    pub(crate) fn notify_incoming(&self) {
        self.incoming.fetch_add(1, Ordering::Release);
    }

    pub(crate) fn stop(&mut self) {
        self.request_stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

//! The executor loop: one OS thread, a bounded mailbox of jobs from other
//! threads, a slab of local tasks, wakers without locks, timers kept off the
//! hot path, and spin-then-park with the spin adapted to what the spins find.

use std::cell::{Cell, RefCell};
use std::collections::{BinaryHeap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};
use std::time::{Duration, Instant};

use crate::park::{Parker, PlantedBugs};
use crate::queue::{self, Receiver, Sender};
#[cfg(not(loom))]
use crate::sync::AtomicUsize;
use crate::sync::{fence, Arc, AtomicBool, AtomicPtr, Ordering};

/// A job another thread hands an executor: runs once, on its thread.
pub type Job = Box<dyn FnOnce() + Send>;

/// Most tasks alive on one executor at once (an invariant of its users: the
/// reactor layer admits a bounded number of transactions per executor, each
/// with a bounded number of tasks).
pub const MAX_TASKS: usize = 1 << 22;

/// Messages drained per turn of the loop before local tasks run again.
const MESSAGES_PER_TURN: usize = 256;
/// Turns between non-blocking looks at the sockets while busy.
const TURNS_PER_IO_POLL: u32 = 64;
/// Spin checks between clock reads.
const CHECKS_PER_CLOCK_READ: u32 = 32;
/// How long a spin runs before it yields the core between checks.
const PURE_SPIN: Duration = Duration::from_micros(20);
/// While spinning with sockets registered: the most time between looks at them.
#[cfg(not(loom))]
const SPIN_IO_POLL_EVERY: Duration = Duration::from_micros(4);
/// Halvings of the spin budget after as many wasted spins in a row.
const MAX_SPIN_BACKOFF: u32 = 12;

enum Message {
    Run(Job),
    Stop,
}

/// How long an executor with nothing to run spins before it parks.
#[derive(Clone, Copy, Debug)]
pub struct Spin {
    /// With nothing in flight on this executor.
    pub idle: Duration,
    /// While `Config::in_flight` says work is due soon (a reply, a commit).
    pub active: Duration,
    /// Give the core away between checks at once (more executors than
    /// cores): a pure spin there makes every wait last the whole budget.
    pub yields: bool,
}

pub struct Config {
    /// The thread's name.
    pub name: String,
    /// Jobs the mailbox holds before senders wait.
    pub mailbox_capacity: usize,
    pub spin: Spin,
    /// On the executor's thread: whether work is in flight here (the
    /// executor then spins for `Spin::active` instead of `Spin::idle`).
    pub in_flight: Option<fn() -> bool>,
    pub planted: PlantedBugs,
}

/// The error of a send to an executor.
pub enum SendError {
    /// The mailbox is full; the job comes back.
    Full(Job),
    /// The executor has stopped; the job comes back, unrun.
    Closed(Job),
}

/// The executor has stopped; the job comes back, unrun.
pub struct Closed(pub Job);

impl std::fmt::Debug for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Closed")
    }
}

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the executor has stopped")
    }
}

impl std::fmt::Debug for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SendError::Full(_) => "Full",
            SendError::Closed(_) => "Closed",
        })
    }
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Message::Run(_) => "Run",
            Message::Stop => "Stop",
        })
    }
}

/// What other threads see of an executor.
pub(crate) struct Shared {
    id: usize,
    parker: Parker,
    closed: AtomicBool,
    /// Tasks woken from other threads: a lock-free stack the executor
    /// empties in one swap (no ABA: nobody pops single entries). Each task is
    /// on it at most once (its `queued` flag), so it is bounded by the tasks.
    remote_wakes: AtomicPtr<TaskHeader>,
    /// Senders waiting for room in the mailbox.
    #[cfg(not(loom))]
    waiting_senders: AtomicUsize,
    #[cfg(not(loom))]
    room: tokio::sync::Notify,
}

static NEXT_EXECUTOR_ID: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);

/// A handle other threads use to give an executor work.
#[derive(Clone)]
pub struct Remote {
    shared: Arc<Shared>,
    sender: Sender<Message>,
}

impl Remote {
    /// Hands `job` to the executor unless its mailbox is full or it stopped.
    pub fn try_send(&self, job: Job) -> Result<(), SendError> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(SendError::Closed(job));
        }
        match self.sender.push(Message::Run(job)) {
            Ok(()) => {
                self.shared.parker.notify();
                Ok(())
            }
            Err(Message::Run(job)) => Err(SendError::Full(job)),
            Err(Message::Stop) => unreachable!("pushed a job"),
        }
    }

    /// Hands `job` to the executor, waiting (asynchronously) while its
    /// mailbox is full; gives it back if the executor stopped.
    #[cfg(not(loom))]
    pub async fn send(&self, mut job: Job) -> Result<(), Closed> {
        loop {
            match self.try_send(job) {
                Ok(()) => return Ok(()),
                Err(SendError::Closed(j)) => return Err(Closed(j)),
                Err(SendError::Full(j)) => job = j,
            }
            let notified = self.shared.room.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            self.shared.waiting_senders.fetch_add(1, Ordering::SeqCst);
            let retry = self.try_send(job);
            match retry {
                Ok(()) => {
                    self.shared.waiting_senders.fetch_sub(1, Ordering::SeqCst);
                    return Ok(());
                }
                Err(SendError::Closed(j)) => {
                    self.shared.waiting_senders.fetch_sub(1, Ordering::SeqCst);
                    return Err(Closed(j));
                }
                Err(SendError::Full(j)) => job = j,
            }
            notified.await;
            self.shared.waiting_senders.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// [`send`](Self::send) for threads outside any executor or runtime:
    /// blocks (sleeping, with backoff) while the mailbox is full.
    pub fn send_blocking(&self, mut job: Job) -> Result<(), Closed> {
        let mut backoff = Duration::from_micros(10);
        loop {
            match self.try_send(job) {
                Ok(()) => return Ok(()),
                Err(SendError::Closed(j)) => return Err(Closed(j)),
                Err(SendError::Full(j)) => job = j,
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_millis(1));
        }
    }

    /// Asks the executor to stop after what is queued before; never blocks
    /// (with the mailbox full, a helper thread waits for room).
    pub fn request_stop(&self) {
        if let Err(stop) = self.sender.push(Message::Stop) {
            let remote = self.clone();
            std::thread::spawn(move || {
                let mut stop = stop;
                while !remote.shared.closed.load(Ordering::Acquire) {
                    match remote.sender.push(stop) {
                        Ok(()) => {
                            remote.shared.parker.notify();
                            return;
                        }
                        Err(back) => stop = back,
                    }
                    std::thread::sleep(Duration::from_micros(100));
                }
            });
            return;
        }
        self.shared.parker.notify();
    }

    /// Jobs waiting in the mailbox now.
    pub fn queued(&self) -> usize {
        self.sender.len()
    }

    /// Whether the calling thread is this executor's.
    pub fn is_current(&self) -> bool {
        CURRENT_ID.with(|c| c.get()) == self.shared.id
    }

    /// Whether the executor has stopped.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }
}

/// A task's identity, shared with its wakers.
struct TaskHeader {
    shared: Arc<Shared>,
    slot: u32,
    /// On a ready list already (a second wake adds nothing).
    queued: AtomicBool,
    /// The next entry of `Shared::remote_wakes`.
    next: AtomicPtr<TaskHeader>,
}

type LocalFuture = Pin<Box<dyn Future<Output = ()>>>;

struct TaskSlot {
    header: Arc<TaskHeader>,
    /// Out while the task is being polled.
    future: Option<LocalFuture>,
}

#[derive(Default)]
struct Slab {
    slots: Vec<Option<TaskSlot>>,
    free: Vec<u32>,
    live: usize,
}

struct Timer {
    deadline: Instant,
    sequence: u64,
    state: Rc<TimerState>,
}

#[derive(Default)]
struct TimerState {
    fired: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl PartialEq for Timer {
    fn eq(&self, other: &Self) -> bool {
        (self.deadline, self.sequence) == (other.deadline, other.sequence)
    }
}
impl Eq for Timer {}
impl PartialOrd for Timer {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Timer {
    // Reversed: the heap's top is the earliest deadline.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.deadline, other.sequence).cmp(&(self.deadline, self.sequence))
    }
}

/// The executor's thread-local half.
pub(crate) struct Local {
    shared: Arc<Shared>,
    tasks: RefCell<Slab>,
    ready: RefCell<VecDeque<Arc<TaskHeader>>>,
    timers: RefCell<BinaryHeap<Timer>>,
    timer_sequence: Cell<u64>,
    stopping: Cell<bool>,
    #[cfg(not(loom))]
    pub(crate) io: crate::net::IoDriver,
}

// Not `const` initialisers: loom's `thread_local!` takes plain expressions.
// Named by path: under loom a bare `thread_local!` is ambiguous between the
// shim's (loom's) and the prelude's (std's).
#[allow(clippy::missing_const_for_thread_local)]
mod current {
    use super::*;
    crate::sync::thread_local! {
        pub(super) static CURRENT_ID: Cell<usize> = Cell::new(0);
        pub(super) static CURRENT: RefCell<Option<Rc<Local>>> = RefCell::new(None);
    }
}
use current::{CURRENT, CURRENT_ID};

fn with_current<R>(f: impl FnOnce(&Rc<Local>) -> R) -> Option<R> {
    CURRENT.with(|c| c.borrow().as_ref().map(f))
}

#[cfg(not(loom))]
pub(crate) fn current_local() -> Option<Rc<Local>> {
    with_current(Rc::clone)
}

/// An executor, before its loop runs on the thread that will own it.
pub struct Executor {
    shared: Arc<Shared>,
    receiver: Receiver<Message>,
    config: Config,
    #[cfg(not(loom))]
    poll: mio::Poll,
}

impl Executor {
    /// An executor and the handle that gives it work.
    pub fn new(config: Config) -> std::io::Result<(Executor, Remote)> {
        let (sender, receiver) = queue::bounded(config.mailbox_capacity);
        #[cfg(not(loom))]
        let poll = mio::Poll::new()?;
        #[cfg(not(loom))]
        let parker = Parker::new(poll.registry(), config.planted)?;
        #[cfg(loom)]
        let parker = Parker::new(config.planted);
        let shared = Arc::new(Shared {
            id: NEXT_EXECUTOR_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            parker,
            closed: AtomicBool::new(false),
            remote_wakes: AtomicPtr::new(std::ptr::null_mut()),
            #[cfg(not(loom))]
            waiting_senders: AtomicUsize::new(0),
            #[cfg(not(loom))]
            room: tokio::sync::Notify::new(),
        });
        let remote = Remote {
            shared: Arc::clone(&shared),
            sender,
        };
        Ok((
            Executor {
                shared,
                receiver,
                config,
                #[cfg(not(loom))]
                poll,
            },
            remote,
        ))
    }

    /// Spawns the executor's thread; `init` runs first on it (thread-local
    /// state of the layer above), `fini` after the loop stopped.
    pub fn spawn_thread(
        config: Config,
        init: impl FnOnce() + Send + 'static,
        fini: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<(Remote, std::thread::JoinHandle<()>)> {
        let name = config.name.clone();
        let (executor, remote) = Executor::new(config)?;
        let thread = std::thread::Builder::new().name(name).spawn(move || {
            init();
            executor.run();
            fini();
        })?;
        Ok((remote, thread))
    }

    /// Runs the loop on this thread until a stop request is taken from the
    /// mailbox; then drops what is left (tasks, queued jobs) and closes.
    pub fn run(self) {
        let Executor {
            shared,
            mut receiver,
            config,
            #[cfg(not(loom))]
            poll,
        } = self;
        let local = Rc::new(Local {
            shared: Arc::clone(&shared),
            tasks: RefCell::new(Slab::default()),
            ready: RefCell::new(VecDeque::new()),
            timers: RefCell::new(BinaryHeap::new()),
            timer_sequence: Cell::new(0),
            stopping: Cell::new(false),
            #[cfg(not(loom))]
            io: crate::net::IoDriver::new(poll),
        });
        let previous = CURRENT_ID.with(|c| c.replace(shared.id));
        assert_eq!(previous, 0, "one executor per thread");
        CURRENT.with(|c| *c.borrow_mut() = Some(Rc::clone(&local)));
        let mut looper = Looper {
            local: &local,
            receiver: &mut receiver,
            config: &config,
            spin_backoff: 0,
            turns: 0,
        };
        looper.run();
        shared.closed.store(true, Ordering::Release);
        // Between `closed` and the last look at the remote wakes below: a
        // waker that missed `closed` before its push sees it after (see
        // `push_remote_wake`), or its entry is there for that look.
        fence(Ordering::SeqCst);
        // What is left goes while this thread is still the executor's, so
        // drops that spawn or wake find it (and are dropped in turn).
        local.stopping.set(true);
        let tasks = std::mem::take(&mut *local.tasks.borrow_mut());
        drop(tasks);
        local.ready.borrow_mut().clear();
        drain_remote_wakes(&shared);
        while receiver.pop().is_some() {}
        local.timers.borrow_mut().clear();
        CURRENT.with(|c| c.borrow_mut().take());
        CURRENT_ID.with(|c| c.set(0));
        shared.room_notify();
    }
}

impl Shared {
    fn room_notify(&self) {
        #[cfg(not(loom))]
        if self.waiting_senders.load(Ordering::SeqCst) > 0 {
            self.room.notify_waiters();
        }
    }

    fn push_remote_wake(&self, header: Arc<TaskHeader>) {
        let raw = Arc::into_raw(header) as *mut TaskHeader;
        let mut head = self.remote_wakes.load(Ordering::Relaxed);
        loop {
            // SAFETY: `raw` is a live header this push owns a count of.
            unsafe { (*raw).next.store(head, Ordering::Relaxed) };
            match self.remote_wakes.compare_exchange_weak(
                head,
                raw,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => head = now,
            }
        }
        self.parker.notify();
        // The executor may have closed, and taken its last look at this
        // stack, between the waker's check of `closed` and this push: nobody
        // would take the entry, and the header's `Arc<Shared>` would keep
        // both alive for ever. `notify` begins with a SeqCst fence, as does the
        // executor between `closed` and its last drain (Dekker): either the
        // drain took the entry, or this load sees `closed` and drains here.
        if self.closed.load(Ordering::Relaxed) {
            drop(drain_remote_wakes(self));
        }
    }

    fn has_remote_wakes(&self) -> bool {
        !self.remote_wakes.load(Ordering::Acquire).is_null()
    }
}

/// Takes every remotely woken task, oldest first.
fn drain_remote_wakes(shared: &Shared) -> Vec<Arc<TaskHeader>> {
    let mut raw = shared
        .remote_wakes
        .swap(std::ptr::null_mut(), Ordering::Acquire);
    let mut woken = Vec::new();
    let mut bound = MAX_TASKS + 1;
    while !raw.is_null() {
        assert!(bound > 0, "a task is on the remote wake list once");
        bound -= 1;
        // SAFETY: every entry was pushed with `Arc::into_raw`; the swap gave
        // this thread the whole list.
        let header = unsafe { Arc::from_raw(raw as *const TaskHeader) };
        raw = header.next.load(Ordering::Relaxed);
        woken.push(header);
    }
    woken.reverse();
    woken
}

/// Whether a job, a remote wake or a ready task waits (the spin's check and
/// the park's last look).
fn has_work(receiver: &Receiver<Message>, local: &Local) -> bool {
    receiver.has_ready() || local.shared.has_remote_wakes() || !local.ready.borrow().is_empty()
}

struct Looper<'a> {
    local: &'a Rc<Local>,
    receiver: &'a mut Receiver<Message>,
    config: &'a Config,
    /// Halvings of the spin budget: each spin that found nothing adds one,
    /// each that found work resets it (an idle executor stops spinning).
    spin_backoff: u32,
    turns: u32,
}

impl Looper<'_> {
    fn run(&mut self) {
        while !self.local.stopping.get() {
            let did = self.turn();
            if self.local.stopping.get() {
                break;
            }
            if !did {
                self.idle();
            }
        }
    }

    /// One turn: tasks ready now, then a bounded batch of messages, remote
    /// wakes, due timers, and now and then the sockets. Whether it did work.
    fn turn(&mut self) -> bool {
        let mut did = false;
        let ready_now = self.local.ready.borrow().len();
        for _ in 0..ready_now {
            let Some(header) = self.local.ready.borrow_mut().pop_front() else {
                break;
            };
            self.local.poll_task(header);
            did = true;
        }
        for _ in 0..MESSAGES_PER_TURN {
            match self.receiver.pop() {
                Some(Message::Run(job)) => {
                    job();
                    did = true;
                }
                Some(Message::Stop) => {
                    self.local.stopping.set(true);
                    return true;
                }
                None => break,
            }
        }
        if did {
            self.local.shared.room_notify();
        }
        if self.local.shared.has_remote_wakes() {
            let woken = drain_remote_wakes(&self.local.shared);
            self.local.ready.borrow_mut().extend(woken);
            did = true;
        }
        if !self.local.timers.borrow().is_empty() && self.local.fire_timers(Instant::now()) {
            did = true;
        }
        self.turns = self.turns.wrapping_add(1);
        #[cfg(not(loom))]
        if self.turns % TURNS_PER_IO_POLL == 0 && self.local.io.has_sources() {
            did |= self.local.io.poll(Some(Duration::ZERO));
        }
        #[cfg(loom)]
        let _ = TURNS_PER_IO_POLL;
        did || !self.local.ready.borrow().is_empty()
    }

    fn has_work(&self) -> bool {
        has_work(self.receiver, self.local)
    }

    /// Nothing to do: spin for a while (work already on its way costs a
    /// microsecond to catch this way and tens to wake a parked thread for),
    /// then park until a sender, a socket or the next timer wakes us.
    fn idle(&mut self) {
        let configured = match self.config.in_flight {
            Some(in_flight) if in_flight() => self.config.spin.active.max(self.config.spin.idle),
            _ => self.config.spin.idle,
        };
        let budget = configured / (1 << self.spin_backoff);
        let idle_start = Instant::now();
        if !budget.is_zero() {
            if self.spin(budget) {
                self.spin_backoff = 0;
                return;
            }
            self.spin_backoff = (self.spin_backoff + 1).min(MAX_SPIN_BACKOFF);
        }
        let timeout = self
            .local
            .timers
            .borrow()
            .peek()
            .map(|t| t.deadline.saturating_duration_since(Instant::now()));
        let local = self.local;
        let receiver = &*self.receiver;
        let has_work = || has_work(receiver, local);
        #[cfg(not(loom))]
        local.shared.parker.park(
            has_work,
            |timeout| {
                local.io.poll(timeout);
            },
            timeout,
        );
        #[cfg(loom)]
        {
            assert!(timeout.is_none(), "timers are not modelled under loom");
            local
                .shared
                .parker
                .park(has_work, |_| local.shared.parker.block(), None);
        }
        // The spin adapts to what parking shows: work that came within the
        // full budget would have been caught by a full spin, so spin more
        // next time (after a burst of wasted spins, the first quick wake-up
        // restores the budget); a long park says spinning would have burned
        // the core for nothing, so the backoff set above stays.
        if !configured.is_zero() && self.has_work() && idle_start.elapsed() < configured {
            self.spin_backoff = 0;
        }
    }

    /// Spins until work shows up (true) or `budget` passes (false).
    fn spin(&mut self, budget: Duration) -> bool {
        let start = Instant::now();
        // Sockets first: a turn looks at them only now and then, and events
        // already waiting should not wait for the first spin period.
        #[cfg(not(loom))]
        if self.local.io.has_sources() && self.local.io.poll(Some(Duration::ZERO)) {
            return true;
        }
        #[cfg(not(loom))]
        let mut last_io_poll = start;
        loop {
            for _ in 0..CHECKS_PER_CLOCK_READ {
                if self.has_work() {
                    return true;
                }
                crate::sync::spin_hint();
            }
            let now = Instant::now();
            let elapsed = now.duration_since(start);
            #[cfg(not(loom))]
            if self.local.io.has_sources() && now.duration_since(last_io_poll) >= SPIN_IO_POLL_EVERY
            {
                last_io_poll = now;
                if self.local.io.poll(Some(Duration::ZERO)) {
                    return true;
                }
            }
            if elapsed >= budget {
                return false;
            }
            if let Some(timer) = self.local.timers.borrow().peek() {
                if timer.deadline <= now {
                    return true;
                }
            }
            if self.config.spin.yields || elapsed >= PURE_SPIN {
                std::thread::yield_now();
            }
        }
    }
}

impl Local {
    fn spawn(&self, future: LocalFuture) {
        if self.stopping.get() {
            return;
        }
        let mut tasks = self.tasks.borrow_mut();
        assert!(
            tasks.live < MAX_TASKS,
            "more than {MAX_TASKS} tasks on one executor"
        );
        let slot = match tasks.free.pop() {
            Some(slot) => slot,
            None => {
                tasks.slots.push(None);
                (tasks.slots.len() - 1) as u32
            }
        };
        let header = Arc::new(TaskHeader {
            shared: Arc::clone(&self.shared),
            slot,
            queued: AtomicBool::new(true),
            next: AtomicPtr::new(std::ptr::null_mut()),
        });
        let entry = &mut tasks.slots[slot as usize];
        assert!(entry.is_none(), "a free slot is empty");
        *entry = Some(TaskSlot {
            header: Arc::clone(&header),
            future: Some(future),
        });
        tasks.live += 1;
        drop(tasks);
        self.ready.borrow_mut().push_back(header);
    }

    fn poll_task(&self, header: Arc<TaskHeader>) {
        let future = {
            let mut tasks = self.tasks.borrow_mut();
            match tasks.slots.get_mut(header.slot as usize) {
                Some(Some(slot)) if Arc::ptr_eq(&slot.header, &header) => slot.future.take(),
                // A wake of a task that finished (its slot may be reused).
                _ => None,
            }
        };
        let Some(mut future) = future else { return };
        // Cleared before the poll: a wake during it queues the task again.
        header.queued.store(false, Ordering::Release);
        let waker = waker_of(&header);
        let mut cx = Context::from_waker(&waker);
        let done = future.as_mut().poll(&mut cx).is_ready();
        let mut tasks = self.tasks.borrow_mut();
        let slot = header.slot as usize;
        if done {
            let finished = tasks.slots[slot].take();
            assert!(finished.is_some(), "a polled task keeps its slot");
            tasks.free.push(header.slot);
            tasks.live -= 1;
            drop(tasks);
            // The future is dropped outside the slab's borrow: its drop may
            // spawn or wake.
            drop(future);
            drop(finished);
        } else if let Some(entry) = tasks.slots[slot].as_mut() {
            assert!(entry.future.is_none(), "one poll at a time");
            entry.future = Some(future);
        }
    }

    /// Wakes every timer due at `now`; whether any was.
    fn fire_timers(&self, now: Instant) -> bool {
        let mut fired = false;
        loop {
            let timer = {
                let mut timers = self.timers.borrow_mut();
                match timers.peek() {
                    Some(t) if t.deadline <= now => timers.pop(),
                    _ => None,
                }
            };
            let Some(timer) = timer else { break };
            timer.state.fired.set(true);
            if let Some(waker) = timer.state.waker.borrow_mut().take() {
                waker.wake();
            }
            fired = true;
        }
        fired
    }
}

fn waker_of(header: &Arc<TaskHeader>) -> Waker {
    let raw = Arc::into_raw(Arc::clone(header)) as *const ();
    // SAFETY: the vtable below keeps the count balanced.
    unsafe { Waker::from_raw(RawWaker::new(raw, &VTABLE)) }
}

static VTABLE: RawWakerVTable = RawWakerVTable::new(clone_waker, wake, wake_by_ref, drop_waker);

unsafe fn clone_waker(raw: *const ()) -> RawWaker {
    Arc::increment_strong_count(raw as *const TaskHeader);
    RawWaker::new(raw, &VTABLE)
}

unsafe fn wake(raw: *const ()) {
    wake_header(Arc::from_raw(raw as *const TaskHeader));
}

unsafe fn wake_by_ref(raw: *const ()) {
    Arc::increment_strong_count(raw as *const TaskHeader);
    wake_header(Arc::from_raw(raw as *const TaskHeader));
}

unsafe fn drop_waker(raw: *const ()) {
    drop(Arc::from_raw(raw as *const TaskHeader));
}

/// Puts a task on its executor's ready list: the local one when woken on the
/// executor's own thread (no atomics beyond the flag), else the remote stack.
fn wake_header(header: Arc<TaskHeader>) {
    if header.queued.swap(true, Ordering::AcqRel) {
        return;
    }
    if CURRENT_ID.with(|c| c.get()) == header.shared.id {
        let pushed = with_current(|local| {
            if local.stopping.get() {
                return;
            }
            local.ready.borrow_mut().push_back(Arc::clone(&header));
        });
        assert!(
            pushed.is_some(),
            "the executor's thread has its local state"
        );
        return;
    }
    let shared = Arc::clone(&header.shared);
    if shared.closed.load(Ordering::Acquire) {
        return;
    }
    shared.push_remote_wake(header);
}

/// Runs `future` as a task of the executor of this thread.
///
/// # Panics
/// Off an executor's thread.
pub fn spawn(future: impl Future<Output = ()> + 'static) {
    with_current(|local| local.spawn(Box::pin(future))).expect("spawn on an executor thread");
}

/// Whether this thread runs an executor.
pub fn on_executor() -> bool {
    CURRENT_ID.with(|c| c.get()) != 0
}

/// A future that completes `duration` from its first poll, on this
/// executor's timer heap (read only when timers exist).
pub fn sleep(duration: Duration) -> Sleep {
    Sleep {
        duration,
        state: None,
    }
}

pub struct Sleep {
    duration: Duration,
    state: Option<Rc<TimerState>>,
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(state) = &self.state {
            if state.fired.get() {
                return Poll::Ready(());
            }
            *state.waker.borrow_mut() = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let duration = self.duration;
        let state = Rc::new(TimerState::default());
        *state.waker.borrow_mut() = Some(cx.waker().clone());
        with_current(|local| {
            let sequence = local.timer_sequence.get();
            local.timer_sequence.set(sequence + 1);
            local.timers.borrow_mut().push(Timer {
                deadline: Instant::now() + duration,
                sequence,
                state: Rc::clone(&state),
            });
        })
        .expect("sleep on an executor thread");
        self.state = Some(state);
        Poll::Pending
    }
}

/// Lets the other ready tasks and the mailbox run before this task goes on.
pub fn yield_now() -> YieldNow {
    YieldNow { yielded: false }
}

pub struct YieldNow {
    yielded: bool,
}

impl Future for YieldNow {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            return Poll::Ready(());
        }
        self.yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn config(spin_us: u64) -> Config {
        Config {
            name: "test-exec".into(),
            mailbox_capacity: 8,
            spin: Spin {
                idle: Duration::from_micros(spin_us),
                active: Duration::from_micros(spin_us),
                yields: false,
            },
            in_flight: None,
            planted: PlantedBugs::default(),
        }
    }

    #[test]
    fn jobs_run_in_order_on_the_executor_thread() {
        let (remote, thread) = Executor::spawn_thread(config(0), || {}, || {}).unwrap();
        let (tx, rx) = mpsc::channel();
        for i in 0..100 {
            let tx = tx.clone();
            let job: Job = Box::new(move || {
                assert!(on_executor());
                tx.send(i).unwrap();
            });
            remote.send_blocking(job).unwrap();
        }
        let got: Vec<i32> = (0..100).map(|_| rx.recv().unwrap()).collect();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
        assert!(!remote.is_current());
        remote.request_stop();
        thread.join().unwrap();
        assert!(remote.is_closed());
        let job: Job = Box::new(|| {});
        assert!(matches!(remote.try_send(job), Err(SendError::Closed(_))));
    }

    #[test]
    fn a_task_woken_from_another_thread_completes() {
        let (remote, thread) = Executor::spawn_thread(config(0), || {}, || {}).unwrap();
        let (done_tx, done_rx) = mpsc::channel();
        let (value_tx, value_rx) = tokio::sync::oneshot::channel::<u32>();
        let job: Job = Box::new(move || {
            spawn(async move {
                let v = value_rx.await.unwrap();
                sleep(Duration::from_millis(2)).await;
                yield_now().await;
                done_tx.send(v + 1).unwrap();
            })
        });
        remote.send_blocking(job).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        value_tx.send(41).unwrap();
        assert_eq!(done_rx.recv_timeout(Duration::from_secs(10)).unwrap(), 42);
        remote.request_stop();
        thread.join().unwrap();
    }

    #[test]
    fn senders_wait_for_room_in_a_full_mailbox() {
        let (remote, thread) = Executor::spawn_thread(config(0), || {}, || {}).unwrap();
        let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
        let job: Job = Box::new(move || gate_rx.recv().unwrap());
        remote.send_blocking(job).unwrap();
        // The executor is stuck in the first job: fill the mailbox.
        let counter = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut sent = 0;
        loop {
            let c = std::sync::Arc::clone(&counter);
            let job: Job = Box::new(move || {
                c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            });
            match remote.try_send(job) {
                Ok(()) => sent += 1,
                Err(SendError::Full(_)) => break,
                Err(SendError::Closed(_)) => panic!("closed"),
            }
        }
        assert!(sent >= 7, "capacity 8 minus the job taken: {sent}");
        let waiter = {
            let remote = remote.clone();
            let c = std::sync::Arc::clone(&counter);
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    let job: Job = Box::new(move || {
                        c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    });
                    remote.send(job).await.unwrap();
                })
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        gate_tx.send(()).unwrap();
        waiter.join().unwrap();
        remote.request_stop();
        thread.join().unwrap();
        assert_eq!(counter.load(std::sync::atomic::Ordering::SeqCst), sent + 1);
    }

    #[test]
    fn an_idle_executor_parks_and_spins_less_after_wasted_spins() {
        let (remote, thread) = Executor::spawn_thread(config(2_000), || {}, || {}).unwrap();
        // Warm up, then idle: CPU time over an idle window stays small.
        let (tx, rx) = mpsc::channel();
        let job: Job = Box::new(move || tx.send(()).unwrap());
        remote.send_blocking(job).unwrap();
        rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let wall = Instant::now();
        let before = thread_cpu_ns(&thread);
        std::thread::sleep(Duration::from_millis(200));
        let after = thread_cpu_ns(&thread);
        let cpu = after.saturating_sub(before) as f64 / wall.elapsed().as_nanos() as f64;
        assert!(
            cpu < 0.05,
            "idle executor used {:.1}% of a core",
            cpu * 100.0
        );
        remote.request_stop();
        thread.join().unwrap();
    }

    /// CPU time of a thread of this process (Linux), in nanoseconds.
    fn thread_cpu_ns(thread: &std::thread::JoinHandle<()>) -> u64 {
        use std::os::unix::thread::JoinHandleExt;
        let mut clock: libc::clockid_t = 0;
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a live thread's handle; out-pointers to locals.
        unsafe {
            assert_eq!(
                libc::pthread_getcpuclockid(thread.as_pthread_t(), &mut clock),
                0
            );
            assert_eq!(libc::clock_gettime(clock, &mut ts), 0);
        }
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
}

//! Model-checks roost-exec with loom: the mailbox (`queue::bounded`), the
//! park/notify protocol of `Executor::run` and the remote wake stack, all on
//! a loom build of the crate (loom's atomics, cells, `Arc` and thread-locals;
//! the parker blocks on a loom mutex-and-condvar token; no sockets, no
//! timers). Nothing here re-implements the executor: the models drive
//! `Sender::push`, `Receiver::pop`, `Executor::run`, `Remote::try_send`,
//! `Remote::request_stop`, `spawn` and the wakers the executor hands out.
//!
//! - the mailbox: racing producers and the consumer deliver every value
//!   exactly once, invent none, and a full queue refuses a push with its
//!   value (loom also checks every slot access for a data race);
//! - park/notify: a job and a stop request sent to a parking executor always
//!   run (a lost wake-up is a deadlock loom reports), and the planted
//!   `park_without_recheck` bug is caught;
//! - remote wakes: a task woken from another thread gets polled, and a wake
//!   racing the executor's stop leaves nothing behind (loom's leak check).
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p roost-exec --release
//! --test loom_exec`. Every model explores the interleavings of its model
//! threads with at most `PREEMPTIONS` preemptions (`LOOM_MAX_PREEMPTIONS`
//! overrides it for a deeper run).
//!
//! Loom's exploration is not exhaustive even within the bound, so the
//! models also assert the outcomes they must have explored (the race they
//! exist for happened). What they catch, by mutation: a remote wake without
//! its notify, a last look for work that ignores the remote wakes, either
//! SeqCst fence of the park/notify pair, a push that publishes its slot
//! `Relaxed`, a pop that frees its slot before reading it, a push that never
//! finds the queue full, and a remote wake push without its re-check of
//! `closed` all fail models here; the fence between `closed` and the
//! executor's last drain does not (loom never lets the pusher's load of
//! `closed` read stale there).
#![cfg(loom)]

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use roost_exec::queue;
use roost_exec::{spawn as spawn_task, Config, Executor, Job, PlantedBugs, Remote, Spin};

/// Loom's preemption bound for every model. The planted lost wake-up is
/// found even at bound 0 (the switches at the blocking operations suffice);
/// the leak of a wake racing the stop (without the re-check in the remote
/// wake push) needs 2; the rest lets either side be cut short again. On the
/// 2-core development machine the whole file runs in about 0.3 s at bound
/// 3, 1.3 s at 5 and 6 s at 8.
const PREEMPTIONS: usize = 5;
/// Loom's bound on scheduling decisions in one execution (every atomic
/// operation and lock is one; an executor turn is a few dozen).
const MAX_BRANCHES: usize = 10_000;

fn builder() -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(PREEMPTIONS);
    }
    builder.max_branches = MAX_BRANCHES;
    builder
}

/// What one iteration of a model saw, in words.
type Outcome = &'static str;

/// Explores the interleavings of `model` (within the bounds); returns every
/// distinct outcome the iterations reported.
fn explore(model: impl Fn() -> Outcome + Sync + Send + 'static) -> BTreeSet<Outcome> {
    // Std, not loom: they record the exploration from outside the model.
    let outcomes = std::sync::Arc::new(std::sync::Mutex::new(BTreeSet::new()));
    let iterations = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    {
        let (outcomes, iterations) = (outcomes.clone(), iterations.clone());
        builder().check(move || {
            iterations.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let outcome = model();
            outcomes.lock().expect("outcomes").insert(outcome);
        });
    }
    let outcomes = outcomes.lock().expect("outcomes").clone();
    eprintln!(
        "loom explored {} interleavings: {outcomes:?}",
        iterations.load(std::sync::atomic::Ordering::Relaxed)
    );
    outcomes
}

/// Explores `model` and asserts that every outcome in `required` happened
/// in some interleaving (the model is not vacuous).
fn check(required: &[Outcome], model: impl Fn() -> Outcome + Sync + Send + 'static) {
    let outcomes = explore(model);
    for outcome in required {
        assert!(
            outcomes.contains(outcome),
            "loom never explored {outcome:?} (only {outcomes:?}): the model lost its race"
        );
    }
}

/// Spawns a model thread, then yields to it (as roost-storage's loom tests
/// do): loom 0.7 may otherwise never schedule a spawned thread whose first
/// operation is an atomic load ahead of its spawner (tokio-rs/loom#392; the
/// executor's loop and a producer's push both start with one), and the
/// spawner's accesses would not race it.
fn spawn<T: 'static>(f: impl FnOnce() -> T + 'static) -> thread::JoinHandle<T> {
    let handle = thread::spawn(f);
    thread::yield_now();
    handle
}

/// An executor that never spins (it parks as soon as a turn finds nothing),
/// with a mailbox of `capacity` jobs.
fn config(capacity: usize, planted: PlantedBugs) -> Config {
    Config {
        name: "loom-exec".into(),
        mailbox_capacity: capacity,
        spin: Spin {
            idle: Duration::ZERO,
            active: Duration::ZERO,
            yields: false,
        },
        in_flight: None,
        planted,
    }
}

/// Starts `Executor::run` on a model thread of its own.
fn start(planted: PlantedBugs) -> (Remote, thread::JoinHandle<()>) {
    let (executor, remote) = Executor::new(config(4, planted)).expect("executor");
    let thread = spawn(move || executor.run());
    (remote, thread)
}

fn send(remote: &Remote, job: impl FnOnce() + Send + 'static) {
    let job: Job = Box::new(job);
    if remote.try_send(job).is_err() {
        panic!("the executor refused a job (mailbox full or closed)");
    }
}

// ---------------------------------------------------------------------------
// 1. The mailbox
// ---------------------------------------------------------------------------

/// Two producers push one value each into an empty queue of two slots while
/// the consumer pops: both pushes succeed, and every value comes out once.
#[test]
fn queue_two_producers_deliver_each_value_once() {
    check(
        &[
            "popped one during the pushes",
            "popped none during the pushes",
        ],
        || {
            let (tx, mut rx) = queue::bounded::<u32>(2);
            assert_eq!(tx.capacity(), 2);
            let tx2 = tx.clone();
            let first = spawn(move || tx.push(1));
            let second = spawn(move || tx2.push(2));
            let mut delivered = Vec::new();
            delivered.extend(rx.pop());
            let during = delivered.len();
            assert_eq!(first.join().expect("producer"), Ok(()), "room for both");
            assert_eq!(second.join().expect("producer"), Ok(()), "room for both");
            while let Some(v) = rx.pop() {
                delivered.push(v);
            }
            assert!(!rx.has_ready());
            delivered.sort_unstable();
            assert_eq!(delivered, [1, 2], "each value exactly once, none invented");
            if during == 1 {
                "popped one during the pushes"
            } else {
                "popped none during the pushes"
            }
        },
    );
}

/// The same race on a queue that already holds one value: two producers
/// compete for the one free slot while the consumer pops the old value
/// (freeing its slot for the next lap around the ring). Three values never
/// fit in two slots, so a push is refused unless the pop came first; a
/// refused push gives its own value back, and every accepted value comes
/// out exactly once.
#[test]
fn queue_full_refuses_with_the_value() {
    check(
        &[
            "one refused: the pop came too late",
            "both accepted: the pop freed a slot in time",
        ],
        || {
            let (tx, mut rx) = queue::bounded::<u32>(2);
            tx.push(0).expect("an empty queue has room");
            let (tx2, tx3) = (tx.clone(), tx.clone());
            let first = spawn(move || tx.push(1));
            let second = spawn(move || tx2.push(2));
            // Published before the producers started: always there.
            assert_eq!(rx.pop(), Some(0), "the oldest value first");
            let results = [
                (1, first.join().expect("producer")),
                (2, second.join().expect("producer")),
            ];
            let mut accepted = Vec::new();
            let mut refused = 0;
            for (value, result) in results {
                match result {
                    Ok(()) => accepted.push(value),
                    Err(back) => {
                        assert_eq!(back, value, "a refused push gives its value back");
                        refused += 1;
                    }
                }
            }
            assert!(refused <= 1, "a slot was free for the first push");
            let mut delivered = Vec::new();
            while let Some(v) = rx.pop() {
                delivered.push(v);
            }
            delivered.sort_unstable();
            assert_eq!(
                delivered, accepted,
                "each accepted value once, none invented"
            );
            // Both slots free again, positions a lap on: two fit, a third
            // is refused with its value.
            assert_eq!(tx3.push(3), Ok(()));
            assert_eq!(tx3.push(4), Ok(()));
            assert_eq!(tx3.push(5), Err(5), "a full queue gives the value back");
            assert_eq!((rx.pop(), rx.pop(), rx.pop()), (Some(3), Some(4), None));
            if refused == 1 {
                "one refused: the pop came too late"
            } else {
                "both accepted: the pop freed a slot in time"
            }
        },
    );
}

// ---------------------------------------------------------------------------
// 2. Park and notify
// ---------------------------------------------------------------------------

/// The executor runs its loop (no spin: it parks whenever a turn finds
/// nothing) while another thread sends it a job and then a stop request.
/// Whatever the interleaving, the job runs and the loop stops: the
/// executor either sees the work on its last look after raising `sleeping`,
/// or the sender sees the flag and wakes it.
fn job_then_stop(planted: PlantedBugs) -> Outcome {
    let (remote, executor) = start(planted);
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    send(&remote, move || flag.store(true, Ordering::Relaxed));
    remote.request_stop();
    executor.join().expect("executor thread");
    assert!(ran.load(Ordering::Relaxed), "the job ran before the stop");
    assert!(remote.is_closed());
    "job ran, executor stopped"
}

#[test]
fn park_notify_runs_the_job_and_stops() {
    check(&["job ran, executor stopped"], || {
        job_then_stop(PlantedBugs::default())
    });
}

/// Set in the child process that runs the planted-bug model.
const PLANTED_CHILD: &str = "ROOST_LOOM_EXEC_PLANTED_CHILD";
const PLANTED_TEST: &str = "park_without_recheck_is_a_lost_wakeup";

/// Without the last look for work after raising `sleeping`, a send that
/// lands between the executor's last empty turn and the flag is never seen
/// and nobody wakes it: loom must find the executor blocked forever beside
/// the sender waiting to join it, and report the deadlock.
///
/// Loom reports a deadlock by panicking on the model thread that blocked
/// last, and the unwinding then drops loom objects on that thread's stack
/// (the executor's `Arc`s), whose loom bookkeeping panics again in the
/// dead execution: a panic in a destructor during unwinding, so the process
/// aborts (tokio-rs/loom#291) and `catch_unwind` never returns. The model
/// therefore runs in a child process (this test binary, this test alone),
/// and the test asserts that the child failed, and with loom's deadlock.
#[test]
fn park_without_recheck_is_a_lost_wakeup() {
    if std::env::var_os(PLANTED_CHILD).is_some() {
        eprintln!("planted-bug child: exploring the lost wake-up");
        explore(|| {
            job_then_stop(PlantedBugs {
                park_without_recheck: true,
            })
        });
        // Reached only if no interleaving deadlocked: the parent fails.
        eprintln!("planted-bug child: no interleaving failed");
        return;
    }
    let output = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([PLANTED_TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(PLANTED_CHILD, "1")
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run the planted-bug model in a child process");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("planted-bug child: exploring the lost wake-up"),
        "the child did not run the planted model: {stderr}"
    );
    assert!(
        !output.status.success() && !stderr.contains("no interleaving failed"),
        "loom found no lost wake-up in any interleaving: the planted bug went unnoticed \
         ({}): {stderr}",
        output.status
    );
    assert!(
        stderr.contains("deadlock; threads ="),
        "the planted model failed ({}), but not with loom's deadlock: {stderr}",
        output.status
    );
}

// ---------------------------------------------------------------------------
// 3. Remote wakes
// ---------------------------------------------------------------------------

/// A one-shot signal: one side completes it, a task awaits it.
#[derive(Default)]
struct Signal {
    state: Mutex<SignalState>,
}

#[derive(Default)]
struct SignalState {
    done: bool,
    waker: Option<Waker>,
}

impl Signal {
    /// Completes the signal; wakes the waiting task, if one registered
    /// (whether one did).
    fn complete(&self) -> bool {
        let waker = {
            let mut state = self.state.lock().expect("signal");
            state.done = true;
            state.waker.take()
        };
        match waker {
            Some(waker) => {
                waker.wake();
                true
            }
            None => false,
        }
    }
}

struct Wait(Arc<Signal>);

impl Future for Wait {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.0.state.lock().expect("signal");
        if state.done {
            return Poll::Ready(());
        }
        state.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// A job spawns a task on the executor that awaits a signal; this (other)
/// thread completes the signal and wakes the task from off the executor's
/// thread, through the remote wake stack and the parker's notify. The task
/// records that it ran and asks its executor to stop, so the model ends
/// only if the wake got through (else loom reports a deadlock).
#[test]
fn remote_wake_reaches_a_parked_executor() {
    check(
        &[
            "woken from another thread",
            "signal complete before the first poll",
        ],
        || {
            let (remote, executor) = start(PlantedBugs::default());
            let signal = Arc::new(Signal::default());
            let finished = Arc::new(AtomicBool::new(false));
            {
                let (signal, finished, stopper) =
                    (Arc::clone(&signal), Arc::clone(&finished), remote.clone());
                send(&remote, move || {
                    spawn_task(async move {
                        Wait(signal).await;
                        finished.store(true, Ordering::Relaxed);
                        stopper.request_stop();
                    })
                });
            }
            let woke = signal.complete();
            executor.join().expect("executor thread");
            assert!(
                finished.load(Ordering::Relaxed),
                "the task ran to completion"
            );
            if woke {
                "woken from another thread"
            } else {
                "signal complete before the first poll"
            }
        },
    );
}

/// A task that hands its waker to another thread on its first poll, asks
/// its executor to stop, and then never completes.
struct HandOver {
    waker: Option<loom::sync::mpsc::Sender<Waker>>,
    stopper: Remote,
}

impl Future for HandOver {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(tx) = self.waker.take() {
            tx.send(cx.waker().clone()).expect("the model thread waits");
            self.stopper.request_stop();
        }
        Poll::Pending
    }
}

/// A wake from another thread racing the executor's stop: the pending task
/// hands its waker to this thread and asks the executor to stop; this
/// thread wakes it while the executor closes, drops its tasks and takes its
/// remote wakes one last time. However the two interleave, nothing is left
/// behind: loom checks at the end of every execution that every `Arc` was
/// freed (a task header left on the remote wake stack would keep itself and
/// the executor's shared state alive for ever).
#[test]
fn remote_wake_racing_the_stop_leaks_nothing() {
    check(&["woken while running", "woken after the close"], || {
        let (remote, executor) = start(PlantedBugs::default());
        let (waker_tx, waker_rx) = loom::sync::mpsc::channel();
        {
            let stopper = remote.clone();
            send(&remote, move || {
                spawn_task(HandOver {
                    waker: Some(waker_tx),
                    stopper,
                })
            });
        }
        let waker = waker_rx.recv().expect("the task's waker");
        let closed = remote.is_closed();
        waker.wake();
        executor.join().expect("executor thread");
        assert!(remote.is_closed());
        if closed {
            "woken after the close"
        } else {
            "woken while running"
        }
    });
}

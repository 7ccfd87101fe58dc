//! The blocked clients of one server (BLPOP and its kin), served first come,
//! first served as Redis serves them.
//!
//! A blocked client does not hold a transaction open. A sweep runs the
//! non-blocking forms of every waiting command, oldest waiter first, as one
//! transaction: a push is either before the whole sweep or after it, so the
//! elements pushed go to the clients that waited longest, in that order, and
//! what one waiter's BLMOVE pushes is there for the younger ones after it.
//! Sweeps run one at a time, in rounds while they serve someone (an older
//! waiter fed by a younger one's move).
//!
//! A blocking command is queued before it first runs, and its first run is a
//! sweep's. A sweep also runs after each command of this server that may
//! push to a list, before its reply goes out (so its client, as Redis's,
//! sees the waiters served), and every [`BLOCKED_RETRY`] (pushes from other
//! nodes): whichever waiter reaches a tick first runs that one. There is no
//! task of its own; the waiters take their replies from the queue.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::protocol::Frame;
use crate::server::ServerShared;
use crate::store::Op;

/// How often the blocked clients' commands are tried again.
pub(crate) const BLOCKED_RETRY: Duration = Duration::from_millis(10);
/// How often a waiter looks whether a sweep that holds its command ended.
const SWEEP_POLL: Duration = Duration::from_millis(1);
/// The most commands one sweep runs (the oldest waiters'); the others wait
/// for the next tick.
const MAX_SWEEP_OPS: usize = 1024;

/// Sweeps' rounds after one (at most): each round follows one that served
/// someone.
const MAX_SWEEP_ROUNDS: usize = 8;

/// A server's blocked clients.
#[derive(Default)]
pub(crate) struct Blocked {
    queue: Mutex<BlockedQueue>,
    /// Held by the sweep that runs (one at a time).
    sweeping: tokio::sync::Mutex<()>,
}

/// The waiting clients, by ticket (the order they began to wait).
#[derive(Default)]
struct BlockedQueue {
    waiters: BTreeMap<u64, Waiter>,
    next_ticket: u64,
    /// The last retry tick a sweep began on.
    swept_tick: u64,
}

struct Waiter {
    /// The command's non-blocking form as a blocked client retries it (nil
    /// when it pops nothing; a key of another type passed over).
    op: Op,
    /// Its form as first run (a key of another type an error, as Redis
    /// answers a blocking command on one), until a sweep takes it.
    first: Option<Op>,
    state: WaiterState,
}

#[derive(Debug)]
enum WaiterState {
    /// Its command runs in the next sweep.
    Waiting,
    /// A sweep is running its command.
    InSweep,
    /// A sweep popped something for it (or failed it): its reply.
    Served(Frame),
}

/// Where a waiter's command stands after a tick.
pub(crate) enum Turn {
    /// Its reply: it stops waiting.
    Served(Frame),
    /// Nothing yet: it waits for the next tick.
    Waiting,
    /// The server stops.
    Stopped,
}

/// What a sweep runs its commands with: the connection's `run_here`, one
/// transaction, one reply per command.
pub(crate) trait RunOps {
    async fn run_ops(&self, ops: Vec<Op>) -> Vec<Frame>;
}

/// One blocked client while it waits: counted in INFO's `blocked_clients`,
/// its command queued under its ticket. Dropping it (a client that went
/// away, a server that stops) takes the command out of the queue.
pub(crate) struct BlockedWaiter<'a> {
    shared: &'a ServerShared,
    ticket: u64,
}

fn queue(shared: &ServerShared) -> MutexGuard<'_, BlockedQueue> {
    shared.blocked.queue.lock().expect("blocked queue lock")
}

fn is_nil(frame: &Frame) -> bool {
    matches!(frame, Frame::Null | Frame::NullArray)
}

impl<'a> BlockedWaiter<'a> {
    /// Queues a blocking command before it first runs: its first run is a
    /// sweep's, so a push that commits meanwhile serves it, and every client
    /// queued before it, first (a client that began to wait later cannot
    /// take the element in between). `first` is the command as first run,
    /// `retry` its retried form.
    pub(crate) fn new(shared: &'a ServerShared, first: Op, retry: Op) -> Self {
        shared.blocked_clients.fetch_add(1, Ordering::Relaxed);
        let mut queue = queue(shared);
        let ticket = queue.next_ticket;
        queue.next_ticket += 1;
        let waiter = Waiter {
            op: retry,
            first: Some(first),
            state: WaiterState::Waiting,
        };
        let previous = queue.waiters.insert(ticket, waiter);
        assert!(previous.is_none(), "tickets are unique");
        BlockedWaiter { shared, ticket }
    }

    /// At retry tick `tick`: runs the sweep if no waiter ran one on this
    /// tick yet, then takes this waiter's reply if a sweep (this one or
    /// another's) served it.
    pub(crate) async fn at_tick<R: RunOps, T: crate::connection::Timers>(
        &self,
        tick: u64,
        run: &R,
    ) -> Turn {
        if let Ok(_sweeping) = self.shared.blocked.sweeping.try_lock() {
            // (Else a sweep runs: this waiter's outcome waits for it.)
            let due = {
                let mut queue = queue(self.shared);
                let due = queue.swept_tick < tick;
                queue.swept_tick = queue.swept_tick.max(tick);
                due
            };
            if due {
                sweep_rounds(self.shared, run).await;
            }
        }
        self.served::<T>().await
    }

    /// Its reply if a sweep served it, else `Waiting` (after its first
    /// sweep, at a tick, at its timeout). A sweep that holds its command is
    /// waited out: bounded by the sweep's transaction.
    pub(crate) async fn served<T: crate::connection::Timers>(&self) -> Turn {
        loop {
            if self.shared.stopped.load(Ordering::Acquire) {
                return Turn::Stopped;
            }
            {
                let mut queue = queue(self.shared);
                let waiter = queue
                    .waiters
                    .get_mut(&self.ticket)
                    .expect("a waiter stays queued while it lives");
                match std::mem::replace(&mut waiter.state, WaiterState::Waiting) {
                    WaiterState::Waiting => return Turn::Waiting,
                    WaiterState::Served(reply) => return Turn::Served(reply),
                    WaiterState::InSweep => waiter.state = WaiterState::InSweep,
                }
            }
            T::sleep(SWEEP_POLL).await;
        }
    }
}

impl Drop for BlockedWaiter<'_> {
    fn drop(&mut self) {
        self.shared.blocked_clients.fetch_sub(1, Ordering::Relaxed);
        let removed = queue(self.shared).waiters.remove(&self.ticket);
        debug_assert!(removed.is_some(), "only its own drop takes a waiter out");
    }
}

/// Puts a sweep's commands that did not finish back to waiting (a sweep
/// whose future is dropped midway: the server stops).
struct SweepGuard<'a> {
    shared: &'a ServerShared,
    tickets: Vec<u64>,
}

impl Drop for SweepGuard<'_> {
    fn drop(&mut self) {
        let mut queue = queue(self.shared);
        for ticket in &self.tickets {
            if let Some(waiter) = queue.waiters.get_mut(ticket) {
                if matches!(waiter.state, WaiterState::InSweep) {
                    waiter.state = WaiterState::Waiting;
                }
            }
        }
    }
}

/// Whether running `ops` may feed a blocked client of this server: one is
/// waiting and a command may push to a list. Checked before the commands
/// run, so a batch pays nothing while no client waits (one that begins to
/// wait meanwhile runs a sweep of its own).
pub(crate) fn may_feed(shared: &ServerShared, ops: &[Op]) -> bool {
    shared.blocked_clients.load(Ordering::Relaxed) > 0 && ops.iter().any(Op::may_push)
}

/// After a command of this server that may have pushed to a list, before
/// its reply, and for a newly queued waiter: serves the waiters that can be
/// (a no-op without any).
pub(crate) async fn serve_after_push<R: RunOps>(shared: &ServerShared, run: &R) {
    if shared.blocked_clients.load(Ordering::Relaxed) == 0 {
        return;
    }
    let _sweeping = shared.blocked.sweeping.lock().await;
    sweep_rounds(shared, run).await;
}

/// Sweeps while a sweep serves someone and waiters are left (the caller
/// holds `sweeping`).
async fn sweep_rounds<R: RunOps>(shared: &ServerShared, run: &R) {
    for _ in 0..MAX_SWEEP_ROUNDS {
        if !sweep(shared, run).await {
            return;
        }
    }
}

/// Runs the waiting commands as one transaction, oldest waiter first;
/// whether it served anyone. The caller holds `sweeping`.
async fn sweep<R: RunOps>(shared: &ServerShared, run: &R) -> bool {
    let (tickets, ops) = {
        let mut queue = queue(shared);
        let mut tickets = Vec::new();
        let mut ops = Vec::new();
        for (&ticket, waiter) in queue.waiters.iter_mut() {
            if ops.len() == MAX_SWEEP_OPS {
                break;
            }
            if matches!(waiter.state, WaiterState::Waiting) {
                waiter.state = WaiterState::InSweep;
                tickets.push(ticket);
                ops.push(waiter.first.take().unwrap_or_else(|| waiter.op.clone()));
            }
        }
        (tickets, ops)
    };
    if ops.is_empty() {
        return false;
    }
    let guard = SweepGuard { shared, tickets };
    let replies = run.run_ops(ops).await;
    assert_eq!(replies.len(), guard.tickets.len(), "one reply per command");
    let mut queue = queue(shared);
    let mut served = false;
    for (ticket, reply) in guard.tickets.iter().zip(replies) {
        // A waiter that went away while its command ran (its client
        // disconnected) is gone; what the command popped for it is lost
        // with it, as a reply Redis wrote to a client that disconnects
        // before it reads it.
        if let Some(waiter) = queue.waiters.get_mut(ticket) {
            debug_assert!(matches!(waiter.state, WaiterState::InSweep));
            waiter.state = if is_nil(&reply) {
                WaiterState::Waiting
            } else {
                served = true;
                WaiterState::Served(reply)
            };
        }
    }
    served
}

/// The next retry tick after `now` on the grid every blocked client shares
/// (`BLOCKED_RETRY` apart from `epoch`): its number and when it is.
pub(crate) fn next_tick(epoch: Instant, now: Instant) -> (u64, Instant) {
    let period_us = BLOCKED_RETRY.as_micros().max(1);
    let since_us = now.saturating_duration_since(epoch).as_micros();
    let tick_number = since_us / period_us + 1;
    let tick_us = tick_number * period_us;
    let tick = epoch + Duration::from_micros(u64::try_from(tick_us).unwrap_or(u64::MAX / 2));
    debug_assert!(tick > now, "the next tick is ahead");
    (u64::try_from(tick_number).unwrap_or(u64::MAX), tick)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_a_shared_grid() {
        let epoch = Instant::now();
        let (n, at) = next_tick(epoch, epoch);
        assert_eq!(n, 1);
        assert_eq!(at, epoch + BLOCKED_RETRY);
        let (n2, at2) = next_tick(epoch, epoch + BLOCKED_RETRY + Duration::from_millis(3));
        assert_eq!(n2, 2);
        assert_eq!(at2, epoch + BLOCKED_RETRY * 2);
    }
}

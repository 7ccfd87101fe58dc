//! The server-based middleware's per-key logic (§IV-C), sans IO: one
//! [`KeyEngine`] per counter at a site serializes every operation on it,
//! caches the replica, and batches.
//!
//! While a conditional write is in flight, arriving operations execute on the
//! cached replica at once; those that cannot succeed are answered at once,
//! the others wait. When the write lands, its operations are answered and
//! everything that accumulated meanwhile goes out as the next single write
//! ("the local version of the Bounded Counter, which absorbed the
//! modifications of all pending operations, is written"). Nothing is answered
//! `Ok`, and no transfer is acknowledged to a requester, before the write
//! that contains it has landed, and only landed states are published to the
//! other sites.
//!
//! If a conditional write finds another writer's token (or its outcome is
//! unknown because Redis did not answer), the engine reloads the replica: if
//! the stored token is its own, the write landed; otherwise nothing of it
//! landed and every unanswered command is executed again, in order, on the
//! stored replica. Executing again is safe because none was answered.
//!
//! The shell ([`crate::server`]) performs [`Action`]s and feeds back
//! [`KeyEngine::write_done`] and [`KeyEngine::loaded`]. At most one IO
//! (a load or a write) is outstanding per key.

use std::mem;

use roost_bcounter::{
    Bound, FailedReplicaReport, ProactiveConfig, ProactivePolicy, ReplicaId, RequestOutcome,
    TransferRequest,
};

use crate::api::{Flag, Op, Outcome};
use crate::error::EscrowError;
use crate::logic::{self, Counter, Step};
use crate::store::{Record, Tokens};
use crate::wire::{Delta, TransferResult};

/// What a client, a peer or the shell asks of one counter.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Create {
        bound: Bound,
        k: i64,
    },
    Read,
    Op {
        op: Op,
        flag: Flag,
        tried: Vec<ReplicaId>,
    },
    /// A delta from another site (propagation, or a donor's reply).
    Merge {
        message: Delta,
    },
    /// Serve a transfer request as the donor.
    Donate {
        request: TransferRequest,
    },
    /// §IV-E: this site's report on a site declared permanently failed
    /// (from the durable replica; the site fenced it first).
    Report {
        failed: ReplicaId,
    },
    /// §IV-E: take over the failed site's rights, computed from every
    /// survivor's report.
    Adopt {
        failed: ReplicaId,
        reports: Vec<FailedReplicaReport>,
    },
    /// Another writer at this site (a procedure's transaction) changed the
    /// stored replica: read it again and publish it. Answered at once with
    /// [`Reply::Reloading`]; the load follows the IO in progress, if any.
    Reload,
}

/// The answer to a [`Command`].
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Created,
    Value(i64),
    Outcome(Outcome),
    /// A global operation lacks rights: ask this donor, merge its answer, and
    /// send the operation again with the donor in `tried`.
    AskDonor(TransferRequest),
    Merged,
    Donated(TransferResult),
    Report(FailedReplicaReport),
    /// Rights recovered from a failed site.
    Adopted(u64),
    /// A [`Command::Reload`] was taken: the replica will be read again.
    Reloading,
    Error(EscrowError),
}

/// What the shell must do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action<T> {
    /// Read the replica and call [`KeyEngine::loaded`].
    Load,
    /// Write `counter` with `token` if the stored token is `expected`, then
    /// call [`KeyEngine::write_done`].
    Write {
        expected: Option<String>,
        token: String,
        counter: Counter,
    },
    Reply {
        ticket: T,
        reply: Reply,
    },
    /// A new state of the replica is durable: ship it to the other sites.
    Published {
        counter: Counter,
    },
    /// A peer's delta was refused (logged by the shell).
    Rejected {
        reason: String,
    },
}

/// How a conditional write ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    Landed,
    /// Another writer's token was there.
    Conflict,
    /// No answer (Redis unreachable, connection lost): it may have landed.
    Unknown,
}

/// A command executed on the cache whose answer waits for durability.
#[derive(Debug)]
struct Entry<T> {
    ticket: Option<T>,
    command: Command,
    answer: Deferred,
}

#[derive(Debug)]
enum Deferred {
    Created,
    Ok,
    Merged,
    Donated {
        outcome: RequestOutcome,
        request: TransferRequest,
    },
    Report {
        failed: ReplicaId,
    },
    Adopted(u64),
}

#[derive(Debug)]
struct Flight<T> {
    token: String,
    counter: Counter,
    entries: Vec<Entry<T>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Io {
    Idle,
    Loading,
    Writing,
}

/// One counter at one site; `T` is whatever the shell uses to answer a
/// caller (a oneshot sender; an id in tests).
#[derive(Debug)]
pub struct KeyEngine<T> {
    key: String,
    me: ReplicaId,
    sites: usize,
    donor: ProactivePolicy,
    tokens: Tokens,
    loaded: bool,
    io: Io,
    /// What Redis holds, as far as this engine knows.
    durable: Option<Record>,
    /// `durable` plus every change executed since.
    cache: Option<Counter>,
    /// `cache` has changes in no write yet.
    dirty: bool,
    flight: Option<Flight<T>>,
    pending: Vec<Entry<T>>,
    /// Commands that arrived while the replica was being (re)loaded.
    queued: Vec<(Option<T>, Command)>,
    /// A [`Command::Reload`] came during an IO: load once it ends.
    reload_wanted: bool,
    /// Other writers (the other nodes of a site that is a cluster) change
    /// the stored replica as a matter of course: read it again before each
    /// batch that starts idle.
    shared_rows: bool,
    writes: u64,
}

impl<T> KeyEngine<T> {
    pub fn new(key: String, me: ReplicaId, sites: usize, policy: ProactiveConfig) -> Self {
        KeyEngine {
            key,
            me,
            sites,
            donor: ProactivePolicy::new(policy),
            tokens: Tokens::new(),
            loaded: false,
            io: Io::Idle,
            durable: None,
            cache: None,
            dirty: false,
            flight: None,
            pending: Vec::new(),
            queued: Vec::new(),
            reload_wanted: false,
            shared_rows: false,
            writes: 0,
        }
    }

    /// The replica's row is written by other engines too (the other nodes
    /// of a site that is a Roost cluster, all over the same replicated
    /// rows): a command that finds the engine idle, with nothing unwritten,
    /// loads the row first instead of trusting the cache, so a read sees
    /// what another node wrote and a refusal is never made on a stale
    /// replica. Writes were safe without it (conditional on the token).
    pub fn with_shared_rows(mut self, shared: bool) -> Self {
        self.shared_rows = shared;
        self
    }

    /// Conditional writes issued so far (operations per write = batching).
    pub fn writes(&self) -> u64 {
        self.writes
    }

    /// The last state known to be durable.
    pub fn durable(&self) -> Option<&Counter> {
        self.durable.as_ref().map(|record| &record.counter)
    }

    /// Commands executed or queued whose answers are not out yet.
    pub fn waiting(&self) -> usize {
        self.flight.as_ref().map_or(0, |f| f.entries.len()) + self.pending.len() + self.queued.len()
    }

    /// A command arrives. `ticket` is how to answer it (`None`: nobody waits).
    pub fn handle(&mut self, ticket: Option<T>, command: Command) -> Vec<Action<T>> {
        let mut out = Vec::new();
        if command == Command::Reload {
            Self::reply(&mut out, ticket, Reply::Reloading);
            self.reload_wanted = true;
            self.reload_if_idle(&mut out);
            return out;
        }
        if self.shared_rows
            && self.io == Io::Idle
            && self.flight.is_none()
            && self.pending.is_empty()
            && !self.dirty
        {
            self.loaded = false;
        }
        if !self.loaded || self.io == Io::Loading {
            self.queued.push((ticket, command));
            if self.io == Io::Idle {
                self.io = Io::Loading;
                out.push(Action::Load);
            }
            return out;
        }
        self.execute(ticket, command, &mut out);
        self.flush(&mut out);
        out
    }

    /// The write issued by the last [`Action::Write`] ended.
    pub fn write_done(&mut self, outcome: WriteOutcome) -> Vec<Action<T>> {
        let mut out = Vec::new();
        debug_assert_eq!(self.io, Io::Writing);
        match outcome {
            WriteOutcome::Landed => {
                self.io = Io::Idle;
                self.land(&mut out);
                self.flush(&mut out);
            }
            WriteOutcome::Conflict | WriteOutcome::Unknown => {
                self.io = Io::Loading;
                self.reload_wanted = false;
                out.push(Action::Load);
            }
        }
        self.reload_if_idle(&mut out);
        out
    }

    /// Starts the load a [`Command::Reload`] asked for, once no IO is in
    /// progress: a load that began before the other writer committed may
    /// have read the replica before its change.
    fn reload_if_idle(&mut self, out: &mut Vec<Action<T>>) {
        if self.reload_wanted && self.io == Io::Idle {
            self.reload_wanted = false;
            self.io = Io::Loading;
            out.push(Action::Load);
        }
    }

    /// The load issued by the last [`Action::Load`] ended.
    pub fn loaded(&mut self, result: Result<Option<Record>, EscrowError>) -> Vec<Action<T>> {
        let mut out = Vec::new();
        debug_assert_eq!(self.io, Io::Loading);
        self.io = Io::Idle;
        let record = match result {
            Ok(record) => record,
            Err(error) => {
                // Nothing can be decided: answer everyone with the error and
                // start from scratch at the next command. An operation in a
                // write of unknown outcome is reported as an error, never as
                // `Ok` (it may or may not have happened).
                self.loaded = false;
                self.durable = None;
                self.cache = None;
                self.dirty = false;
                // The next command loads anyway.
                self.reload_wanted = false;
                let mut waiting: Vec<Option<T>> = Vec::new();
                if let Some(flight) = self.flight.take() {
                    waiting.extend(flight.entries.into_iter().map(|e| e.ticket));
                }
                waiting.extend(mem::take(&mut self.pending).into_iter().map(|e| e.ticket));
                waiting.extend(mem::take(&mut self.queued).into_iter().map(|(t, _)| t));
                for ticket in waiting.into_iter().flatten() {
                    out.push(Action::Reply {
                        ticket,
                        reply: Reply::Error(error.clone()),
                    });
                }
                return out;
            }
        };
        self.loaded = true;
        let landed = match (&self.flight, &record) {
            (Some(flight), Some(record)) => flight.token == record.token,
            _ => false,
        };
        let mut redo: Vec<(Option<T>, Command)> = Vec::new();
        if landed {
            // Our write landed after all; the cache (flight + pending) stands.
            self.land(&mut out);
        } else {
            // Nothing of the flight landed: start again from what is stored.
            if let Some(flight) = self.flight.take() {
                redo.extend(flight.entries.into_iter().map(|e| (e.ticket, e.command)));
            }
            redo.extend(
                mem::take(&mut self.pending)
                    .into_iter()
                    .map(|e| (e.ticket, e.command)),
            );
            // Another writer's state (or the first one this engine sees)
            // is published like one of its own: the other sites must learn
            // it whoever wrote it.
            let previous_token = self.durable.as_ref().map(|r| r.token.as_str());
            if let Some(record) = &record {
                if previous_token != Some(record.token.as_str()) {
                    out.push(Action::Published {
                        counter: record.counter.clone(),
                    });
                }
            }
            self.cache = record.as_ref().map(|r| r.counter.clone());
            self.durable = record;
            self.dirty = false;
        }
        redo.extend(mem::take(&mut self.queued));
        for (ticket, command) in redo {
            self.execute(ticket, command, &mut out);
        }
        self.flush(&mut out);
        self.reload_if_idle(&mut out);
        out
    }

    fn land(&mut self, out: &mut Vec<Action<T>>) {
        let Some(flight) = self.flight.take() else {
            return;
        };
        self.durable = Some(Record {
            counter: flight.counter.clone(),
            token: flight.token,
        });
        out.push(Action::Published {
            counter: flight.counter,
        });
        for entry in flight.entries {
            self.release(entry, out);
        }
    }

    fn reply(out: &mut Vec<Action<T>>, ticket: Option<T>, reply: Reply) {
        if let Some(ticket) = ticket {
            out.push(Action::Reply { ticket, reply });
        }
    }

    /// Answers now if nothing is unwritten, else after the next write.
    fn after_durable(
        &mut self,
        ticket: Option<T>,
        command: Command,
        answer: Deferred,
        out: &mut Vec<Action<T>>,
    ) {
        let entry = Entry {
            ticket,
            command,
            answer,
        };
        if self.io == Io::Idle && !self.dirty {
            self.release(entry, out);
        } else {
            self.pending.push(entry);
        }
    }

    fn changed(&mut self, ticket: Option<T>, command: Command, answer: Deferred) {
        self.dirty = true;
        self.pending.push(Entry {
            ticket,
            command,
            answer,
        });
    }

    fn execute(&mut self, ticket: Option<T>, command: Command, out: &mut Vec<Action<T>>) {
        let unknown = || {
            Reply::Error(EscrowError::UnknownCounter {
                key: self.key.clone(),
            })
        };
        match &command {
            Command::Read => {
                let reply = match &self.durable {
                    Some(record) => match record.counter.value() {
                        Ok(value) => Reply::Value(value),
                        Err(e) => Reply::Error(EscrowError::counter(&self.key, e)),
                    },
                    None => unknown(),
                };
                Self::reply(out, ticket, reply);
            }
            &Command::Create { bound, k } => match &self.cache {
                None => match Counter::new(bound, k, self.me, self.sites) {
                    Ok(counter) => {
                        self.cache = Some(counter);
                        self.changed(ticket, command, Deferred::Created);
                    }
                    Err(e) => Self::reply(
                        out,
                        ticket,
                        Reply::Error(EscrowError::counter(&self.key, e)),
                    ),
                },
                Some(c) if c.bound() == bound && c.k() == k => {
                    self.after_durable(ticket, command, Deferred::Created, out)
                }
                Some(c) => {
                    let error = EscrowError::Conflict {
                        key: self.key.clone(),
                        existing: format!("{:?} {}", c.bound(), c.k()),
                        requested: format!("{bound:?} {k}"),
                    };
                    Self::reply(out, ticket, Reply::Error(error));
                }
            },
            Command::Op { op, flag, tried } => {
                let Some(counter) = self.cache.as_mut() else {
                    let reply = unknown();
                    Self::reply(out, ticket, reply);
                    return;
                };
                match logic::execute(&self.key, counter, *op, *flag, tried) {
                    Ok(Step::Applied) => self.changed(ticket, command, Deferred::Ok),
                    Ok(Step::Done(outcome)) => Self::reply(out, ticket, Reply::Outcome(outcome)),
                    Ok(Step::AskDonor(request)) => {
                        Self::reply(out, ticket, Reply::AskDonor(request))
                    }
                    Err(error) => Self::reply(out, ticket, Reply::Error(error)),
                }
            }
            Command::Merge { message } => match self.merge(message) {
                Ok(true) => self.changed(ticket, command, Deferred::Merged),
                Ok(false) => self.after_durable(ticket, command, Deferred::Merged, out),
                Err(reason) => {
                    out.push(Action::Rejected {
                        reason: reason.clone(),
                    });
                    let error = EscrowError::counter(&self.key, reason);
                    Self::reply(out, ticket, Reply::Error(error));
                }
            },
            &Command::Report { failed } => {
                if self.cache.is_none() {
                    let reply = unknown();
                    Self::reply(out, ticket, reply);
                    return;
                }
                self.after_durable(ticket, command, Deferred::Report { failed }, out);
            }
            Command::Adopt { failed, reports } => {
                let Some(counter) = self.cache.as_mut() else {
                    let reply = unknown();
                    Self::reply(out, ticket, reply);
                    return;
                };
                match counter.adopt_rights_of(*failed, reports) {
                    Ok(0) => self.after_durable(ticket, command, Deferred::Adopted(0), out),
                    Ok(n) => self.changed(ticket, command, Deferred::Adopted(n)),
                    Err(e) => Self::reply(
                        out,
                        ticket,
                        Reply::Error(EscrowError::counter(&self.key, e)),
                    ),
                }
            }
            // Taken by `handle` before anything is queued.
            Command::Reload => Self::reply(out, ticket, Reply::Reloading),
            Command::Donate { request } => {
                let request = *request;
                let Some(counter) = self.cache.as_mut() else {
                    let reason = unknown();
                    let reason = match reason {
                        Reply::Error(e) => e.to_string(),
                        _ => String::new(),
                    };
                    Self::reply(
                        out,
                        ticket,
                        Reply::Donated(TransferResult::Error { reason }),
                    );
                    return;
                };
                match counter.handle_transfer_request(&request, &self.donor) {
                    Ok(outcome @ RequestOutcome::Transferred { .. }) => {
                        self.changed(ticket, command, Deferred::Donated { outcome, request })
                    }
                    Ok(outcome) => self.after_durable(
                        ticket,
                        command,
                        Deferred::Donated { outcome, request },
                        out,
                    ),
                    Err(e) => Self::reply(
                        out,
                        ticket,
                        Reply::Donated(TransferResult::Error {
                            reason: e.to_string(),
                        }),
                    ),
                }
            }
        }
    }

    /// Merges a peer's delta into the cache; `Ok(true)` if it changed it.
    fn merge(&mut self, message: &Delta) -> Result<bool, String> {
        let count = message.rights().replica_count();
        if count != self.sites {
            return Err(format!(
                "delta knows {count} sites, this deployment has {}",
                self.sites
            ));
        }
        let counter = match &mut self.cache {
            Some(counter) => counter,
            None => {
                let fresh = Counter::new(message.bound(), message.k(), self.me, self.sites)
                    .map_err(|e| e.to_string())?;
                self.cache.insert(fresh)
            }
        };
        let before = counter.clone();
        match counter.merge(message) {
            Ok(()) => Ok(*counter != before),
            Err(e) => {
                if self.durable.is_none() && !self.dirty && self.flight.is_none() {
                    // The counter was created just for this delta.
                    self.cache = None;
                }
                Err(e.to_string())
            }
        }
    }

    fn release(&mut self, entry: Entry<T>, out: &mut Vec<Action<T>>) {
        let reply = match entry.answer {
            Deferred::Created => Reply::Created,
            Deferred::Ok => Reply::Outcome(Outcome::Ok),
            Deferred::Merged => Reply::Merged,
            Deferred::Donated { outcome, request } => Reply::Donated(logic::donor_answer(
                outcome,
                request,
                self.durable.as_ref().map(|r| &r.counter),
            )),
            Deferred::Report { failed } => match &self.durable {
                Some(record) => match record.counter.report_on_failed(failed) {
                    Ok(report) => Reply::Report(report),
                    Err(e) => Reply::Error(EscrowError::counter(&self.key, e)),
                },
                None => Reply::Error(EscrowError::UnknownCounter {
                    key: self.key.clone(),
                }),
            },
            Deferred::Adopted(n) => Reply::Adopted(n),
        };
        Self::reply(out, entry.ticket, reply);
    }

    fn flush(&mut self, out: &mut Vec<Action<T>>) {
        if self.io != Io::Idle || !self.loaded {
            return;
        }
        if self.dirty {
            let Some(counter) = self.cache.clone() else {
                self.dirty = false;
                return;
            };
            let token = self.tokens.next();
            self.flight = Some(Flight {
                token: token.clone(),
                counter: counter.clone(),
                entries: mem::take(&mut self.pending),
            });
            self.dirty = false;
            self.io = Io::Writing;
            self.writes += 1;
            out.push(Action::Write {
                expected: self.durable.as_ref().map(|r| r.token.clone()),
                token,
                counter,
            });
        } else {
            for entry in mem::take(&mut self.pending) {
                self.release(entry, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use roost_bcounter::{RateLimit, RequestMode};

    use super::*;

    fn policy() -> ProactiveConfig {
        ProactiveConfig {
            threshold_rights: 10,
            shortfall_mode: RequestMode::Sync,
            rate_limit: RateLimit::new(4, 10).unwrap(),
        }
    }

    fn engine(me: u32) -> KeyEngine<u32> {
        KeyEngine::new("k".to_owned(), ReplicaId(me), 3, policy())
    }

    fn writes(actions: &[Action<u32>]) -> Vec<Counter> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Write { counter, .. } => Some(counter.clone()),
                _ => None,
            })
            .collect()
    }

    fn replies(actions: &[Action<u32>]) -> Vec<(u32, Reply)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Reply { ticket, reply } => Some((*ticket, reply.clone())),
                _ => None,
            })
            .collect()
    }

    fn dec(n: u64, flag: Flag) -> Command {
        Command::Op {
            op: Op::dec(n),
            flag,
            tried: Vec::new(),
        }
    }

    /// An engine at site 0 holding `rights`, everything landed.
    fn ready(rights: u64) -> KeyEngine<u32> {
        let mut e = engine(0);
        assert_eq!(
            e.handle(
                Some(1),
                Command::Create {
                    bound: Bound::Lower,
                    k: 0
                }
            ),
            vec![Action::Load]
        );
        let a = e.loaded(Ok(None));
        assert_eq!(writes(&a).len(), 1);
        assert!(replies(&a).is_empty(), "created only once durable");
        let a = e.write_done(WriteOutcome::Landed);
        assert_eq!(replies(&a), vec![(1, Reply::Created)]);
        if rights > 0 {
            let a = e.handle(
                Some(2),
                Command::Op {
                    op: Op::inc(rights),
                    flag: Flag::StrictLocal,
                    tried: vec![],
                },
            );
            assert_eq!(writes(&a).len(), 1);
            let a = e.write_done(WriteOutcome::Landed);
            assert_eq!(replies(&a), vec![(2, Reply::Outcome(Outcome::Ok))]);
        }
        e
    }

    fn published(actions: &[Action<u32>]) -> Vec<Counter> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Published { counter } => Some(counter.clone()),
                _ => None,
            })
            .collect()
    }

    /// What another writer at the site leaves: `counter` decremented by
    /// `n`, under a token of its own.
    fn written_elsewhere(e: &KeyEngine<u32>, n: u64) -> Record {
        let mut counter = e.durable().unwrap().clone();
        counter.decrement(n).unwrap();
        Record {
            counter,
            token: "procedure-1".to_owned(),
        }
    }

    #[test]
    fn reload_reads_and_publishes_another_writers_state() {
        let mut e = ready(10);
        assert_eq!(
            e.handle(Some(7), Command::Reload)[0],
            Action::Reply {
                ticket: 7,
                reply: Reply::Reloading
            }
        );
        // Idle: the load starts at once.
        let mut e2 = ready(10);
        assert_eq!(e2.handle(None, Command::Reload), vec![Action::Load]);
        let record = written_elsewhere(&e2, 3);
        let a = e2.loaded(Ok(Some(record.clone())));
        assert_eq!(published(&a), vec![record.counter.clone()]);
        assert_eq!(
            replies(&e2.handle(Some(8), Command::Read)),
            vec![(8, Reply::Value(7))]
        );
        // The same token again: nothing new to ship.
        assert_eq!(e2.handle(None, Command::Reload), vec![Action::Load]);
        assert!(published(&e2.loaded(Ok(Some(record)))).is_empty());
        // The first engine's load is in progress too.
        assert_eq!(e.io, Io::Loading);
    }

    #[test]
    fn reload_during_a_write_loads_after_it() {
        let mut e = ready(10);
        let a = e.handle(Some(3), dec(1, Flag::StrictLocal));
        assert_eq!(writes(&a).len(), 1);
        // The procedure committed while the write was in flight.
        assert!(e.handle(None, Command::Reload).is_empty());
        let a = e.write_done(WriteOutcome::Landed);
        assert_eq!(replies(&a), vec![(3, Reply::Outcome(Outcome::Ok))]);
        assert_eq!(a.last(), Some(&Action::Load), "{a:?}");
        let record = written_elsewhere(&e, 2);
        let a = e.loaded(Ok(Some(record.clone())));
        assert_eq!(published(&a), vec![record.counter]);
        assert_eq!(
            replies(&e.handle(Some(4), Command::Read)),
            vec![(4, Reply::Value(7))]
        );
        // A write that conflicts loads anyway: the reload is not repeated.
        let a = e.handle(Some(5), dec(1, Flag::StrictLocal));
        assert_eq!(writes(&a).len(), 1);
        assert!(e.handle(None, Command::Reload).is_empty());
        assert_eq!(e.write_done(WriteOutcome::Conflict), vec![Action::Load]);
        let record = written_elsewhere(&e, 1);
        let a = e.loaded(Ok(Some(record)));
        assert_eq!(
            writes(&a).len(),
            1,
            "the decrement runs again on the reloaded state"
        );
        assert!(!a.contains(&Action::Load));
    }

    #[test]
    fn operations_arriving_during_a_write_go_out_as_one_write() {
        let mut e = ready(10);
        let a = e.handle(Some(10), dec(1, Flag::StrictLocal));
        assert_eq!(writes(&a).len(), 1);
        for t in 11..15 {
            let a = e.handle(Some(t), dec(1, Flag::StrictLocal));
            assert!(a.is_empty(), "waits for the write in flight: {a:?}");
        }
        // Read sees only what is durable.
        let a = e.handle(Some(20), Command::Read);
        assert_eq!(replies(&a), vec![(20, Reply::Value(10))]);
        let a = e.write_done(WriteOutcome::Landed);
        assert_eq!(replies(&a), vec![(10, Reply::Outcome(Outcome::Ok))]);
        let batch = writes(&a);
        assert_eq!(batch.len(), 1, "the four pending go out together");
        assert_eq!(batch[0].value().unwrap(), 5);
        let a = e.write_done(WriteOutcome::Landed);
        let answered: Vec<u32> = replies(&a).into_iter().map(|(t, _)| t).collect();
        assert_eq!(answered, vec![11, 12, 13, 14]);
        assert!(writes(&a).is_empty());
        assert_eq!(e.writes(), 4, "create, inc, first dec, one batch of four");
        assert_eq!(e.durable().unwrap().value().unwrap(), 5);
    }

    #[test]
    fn operations_without_rights_are_answered_at_once() {
        let mut e = ready(2);
        let a = e.handle(Some(10), dec(2, Flag::StrictLocal));
        assert_eq!(writes(&a).len(), 1);
        // The cache has no rights left, although nothing has landed yet.
        let a = e.handle(Some(11), dec(1, Flag::StrictLocal));
        assert_eq!(replies(&a), vec![(11, Reply::Outcome(Outcome::Fail))]);
        let a = e.write_done(WriteOutcome::Landed);
        assert_eq!(replies(&a), vec![(10, Reply::Outcome(Outcome::Ok))]);
    }

    #[test]
    fn a_conflict_reexecutes_on_the_stored_state() {
        let mut e = ready(3);
        let a = e.handle(Some(10), dec(2, Flag::StrictLocal));
        let expected_token = match &a[0] {
            Action::Write { expected, .. } => expected.clone().unwrap(),
            other => panic!("{other:?}"),
        };
        let a2 = e.handle(Some(11), dec(1, Flag::StrictLocal));
        assert!(a2.is_empty());
        // Someone else wrote: the stored replica has spent 2 of the 3 rights.
        assert_eq!(e.write_done(WriteOutcome::Conflict), vec![Action::Load]);
        let mut stored = Counter::new(Bound::Lower, 0, ReplicaId(0), 3).unwrap();
        stored.increment(3).unwrap();
        stored.decrement(2).unwrap();
        let a = e.loaded(Ok(Some(Record {
            counter: stored,
            token: format!("{expected_token}-other"),
        })));
        // Re-executed in order: 10 needs 2 of the 1 left (fails), 11 takes it.
        assert_eq!(replies(&a), vec![(10, Reply::Outcome(Outcome::Fail))]);
        let batch = writes(&a);
        assert_eq!(batch.len(), 1);
        assert_eq!(batch[0].value().unwrap(), 0);
        let a = e.write_done(WriteOutcome::Landed);
        assert_eq!(replies(&a), vec![(11, Reply::Outcome(Outcome::Ok))]);
    }

    #[test]
    fn an_unknown_outcome_is_resolved_by_the_token() {
        let mut e = ready(3);
        let a = e.handle(Some(10), dec(1, Flag::StrictLocal));
        let (token, counter) = match &a[0] {
            Action::Write { token, counter, .. } => (token.clone(), counter.clone()),
            other => panic!("{other:?}"),
        };
        assert_eq!(e.write_done(WriteOutcome::Unknown), vec![Action::Load]);
        // It landed: answered without writing again.
        let a = e.loaded(Ok(Some(Record { counter, token })));
        assert_eq!(replies(&a), vec![(10, Reply::Outcome(Outcome::Ok))]);
        assert!(writes(&a).is_empty());

        // Redis is gone: every waiting operation gets the error, none `Ok`.
        let a = e.handle(Some(11), dec(1, Flag::StrictLocal));
        assert_eq!(writes(&a).len(), 1);
        assert!(e.handle(Some(12), dec(1, Flag::StrictLocal)).is_empty());
        e.write_done(WriteOutcome::Unknown);
        let down = EscrowError::Redis {
            reason: "down".to_owned(),
        };
        let a = e.loaded(Err(down.clone()));
        assert_eq!(
            replies(&a),
            vec![
                (11, Reply::Error(down.clone())),
                (12, Reply::Error(down.clone()))
            ]
        );
        // The next command loads again.
        assert_eq!(e.handle(Some(13), Command::Read), vec![Action::Load]);
    }

    #[test]
    fn donations_are_acknowledged_once_durable_with_the_donor_delta() {
        let mut e = ready(10);
        let request = TransferRequest {
            requester: ReplicaId(2),
            donor: ReplicaId(0),
            amount: 7,
            seen_transferred: 0,
            mode: RequestMode::Sync,
        };
        let a = e.handle(Some(10), Command::Donate { request });
        assert!(replies(&a).is_empty());
        assert_eq!(writes(&a).len(), 1);
        let a = e.write_done(WriteOutcome::Landed);
        let got = replies(&a);
        let [(10, Reply::Donated(TransferResult::Transferred { amount, message }))] = &got[..]
        else {
            panic!("{a:?}");
        };
        assert_eq!(*amount, 7);
        let message = message
            .clone()
            .expect("a synchronous request gets the state");
        assert_eq!(message.rights().transferred_from_to(), 7);
        // The same request again (lost reply, resent): served once.
        let a = e.handle(Some(11), Command::Donate { request });
        assert!(writes(&a).is_empty());
        assert!(matches!(
            replies(&a)[..],
            [(
                11,
                Reply::Donated(TransferResult::AlreadySatisfied { transferred: 7, .. })
            )]
        ));
        // An asynchronous request gets at most half, and no state.
        let request = TransferRequest {
            requester: ReplicaId(1),
            mode: RequestMode::Async,
            ..request
        };
        e.handle(Some(12), Command::Donate { request });
        let a = e.write_done(WriteOutcome::Landed);
        assert_eq!(
            replies(&a),
            vec![(
                12,
                Reply::Donated(TransferResult::Transferred {
                    amount: 1,
                    message: None
                })
            )]
        );
    }

    #[test]
    fn merges_apply_and_bad_deltas_are_rejected() {
        let mut e = ready(0);
        let mut remote = Counter::new(Bound::Lower, 0, ReplicaId(1), 3).unwrap();
        remote.increment(5).unwrap();
        remote.transfer(2, ReplicaId(0)).unwrap();
        let a = e.handle(
            None,
            Command::Merge {
                message: remote.message_for(ReplicaId(0)).unwrap(),
            },
        );
        assert_eq!(writes(&a).len(), 1);
        e.write_done(WriteOutcome::Landed);
        assert_eq!(e.durable().unwrap().local_rights().unwrap(), 2);
        assert_eq!(e.durable().unwrap().value().unwrap(), 5);
        // Addressed to site 2, not to us.
        let a = e.handle(
            Some(3),
            Command::Merge {
                message: remote.message_for(ReplicaId(2)).unwrap(),
            },
        );
        assert!(matches!(a[0], Action::Rejected { .. }), "{a:?}");
        assert!(matches!(replies(&a)[..], [(3, Reply::Error(_))]));
        assert!(writes(&a).is_empty());
        // A delta of another deployment size.
        let other = Counter::new(Bound::Lower, 0, ReplicaId(1), 4).unwrap();
        let a = e.handle(
            None,
            Command::Merge {
                message: other.message_for(ReplicaId(0)).unwrap(),
            },
        );
        assert!(matches!(a[..], [Action::Rejected { .. }]), "{a:?}");
        // Merging what is known already writes nothing.
        let a = e.handle(
            Some(4),
            Command::Merge {
                message: remote.message_for(ReplicaId(0)).unwrap(),
            },
        );
        assert_eq!(replies(&a), vec![(4, Reply::Merged)]);
    }

    #[test]
    fn global_shortfall_asks_a_donor_and_a_merge_for_an_unknown_key_creates_it() {
        let mut e = engine(1);
        let mut donor = Counter::new(Bound::Lower, 0, ReplicaId(0), 3).unwrap();
        donor.increment(9).unwrap();
        assert_eq!(
            e.handle(
                None,
                Command::Merge {
                    message: donor.message_for(ReplicaId(1)).unwrap()
                }
            ),
            vec![Action::Load]
        );
        let a = e.loaded(Ok(None));
        assert_eq!(writes(&a).len(), 1);
        e.write_done(WriteOutcome::Landed);
        let a = e.handle(Some(1), dec(3, Flag::Global));
        let [(1, Reply::AskDonor(request))] = replies(&a)[..] else {
            panic!("{a:?}");
        };
        assert_eq!(request.donor, ReplicaId(0));
        assert_eq!(request.amount, 3);
        let a = e.handle(Some(2), dec(3, Flag::StrictLocal));
        assert_eq!(
            replies(&a),
            vec![(
                2,
                Reply::Outcome(Outcome::Retry {
                    global_may_succeed: true
                })
            )]
        );
        let a = e.handle(Some(3), dec(30, Flag::Global));
        assert_eq!(replies(&a), vec![(3, Reply::Outcome(Outcome::Fail))]);
    }

    #[test]
    fn create_conflicts_and_unknown_counters() {
        let mut e = ready(0);
        let a = e.handle(
            Some(1),
            Command::Create {
                bound: Bound::Upper,
                k: 0,
            },
        );
        assert!(matches!(
            replies(&a)[..],
            [(1, Reply::Error(EscrowError::Conflict { .. }))]
        ));
        let a = e.handle(
            Some(2),
            Command::Create {
                bound: Bound::Lower,
                k: 0,
            },
        );
        assert_eq!(replies(&a), vec![(2, Reply::Created)]);
        let mut fresh = engine(0);
        fresh.handle(Some(1), dec(1, Flag::Global));
        let a = fresh.loaded(Ok(None));
        assert!(matches!(
            replies(&a)[..],
            [(1, Reply::Error(EscrowError::UnknownCounter { .. }))]
        ));
    }
}

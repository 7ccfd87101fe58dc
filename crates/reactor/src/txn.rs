//! Root transactions: the call tree of one request, its per-container
//! contexts, the wait for every descendant, and the commit across containers.
//!
//! Commit is Silo's commit over all the contexts the tree touched
//! (`roost_storage::commit_contexts`): every container's write set is locked in
//! one global order, every container validated, then all install with one TID.
//! This replaces the seed's linear two-phase commit, whose per-container round
//! trips its authors name as an overhead: inside one process the coordinator
//! runs both phases over all contexts itself, with no message per container. A
//! transaction that touched one container commits with no message at all.

use std::future::Future;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use roost_storage::{
    commit_contexts, commit_contexts_sequenced, CommitError, CommitInfo, Conflict, ConflictKind,
    Guard, TxContext, TxError,
};
use thiserror::Error;
use tokio::sync::Notify;

use crate::ctx::{ReactorCtx, REACTOR_PREFIX_BYTES};
use crate::database::{DbShared, ReactorId};
use crate::error::{DirectoryError, SchemaError};
use crate::executor::with_local;
use crate::placement::{AcquireError, ReactorKey};
use crate::replication::{ReactorChanges, Replication, ReplicationError, RowChange, Sequenced};

/// What a sequenced commit tells the placement once the contexts are
/// unlocked.
enum Report {
    /// Committed with this number: its captured rows, by reactor handle,
    /// and every reactor it entered.
    Committed(u64, Vec<(ReactorId, RowChange)>, Vec<ReactorId>),
    /// Took this number, then failed validation.
    Aborted(u64),
    /// Read-only: the numbers handed out when it had validated.
    ReadBarrier(u64),
    Nothing,
}

/// A commit's conflict as the reactor layer reports it: a row's key
/// starts with its reactor's id (`ReactorCtx`'s key encoding), so the
/// conflict names the reactor, and the key after it.
fn conflict(e: CommitError) -> ReactorError {
    let CommitError::Conflict(mut conflict) = e;
    if let Some(at) = conflict.at.as_deref_mut() {
        if let Some(key) = at.key.take() {
            match key.split_first_chunk::<4>() {
                Some((reactor, rest)) if at.reactor.is_none() => {
                    at.reactor = Some(u64::from(u32::from_be_bytes(*reactor)));
                    at.key = Some(rest.to_vec());
                }
                _ => at.key = Some(key),
            }
        }
    }
    ReactorError::Tx(TxError::Conflict(conflict))
}

/// Which half of a relocation a root transaction is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Relocation {
    /// A move or export: it enters the reactor where it lives (checking
    /// it is there) while other transactions back off.
    Out,
    /// An install: it enters the reactor where it is being installed,
    /// which is not yet marked present there.
    In,
}

/// Attempts of a root transaction before giving up on conflicts.
const MAX_ATTEMPTS: u32 = 1000;
const MAX_BACKOFF_US: u64 = 2000;
/// The longest one wait for an Invalid replica lasts before the attempt
/// runs again (the placement's wake-up normally ends it sooner).
const REPLICA_WAIT: Duration = Duration::from_millis(10);

/// The error a caller of a procedure gets.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ReactorError {
    #[error(transparent)]
    Tx(#[from] TxError),
    #[error(transparent)]
    Schema(#[from] SchemaError),
    #[error(transparent)]
    Directory(#[from] DirectoryError),
    #[error("relation `{relation}` belongs to reactor type `{expected}`, not `{actual}`")]
    WrongReactorType {
        relation: &'static str,
        expected: &'static str,
        actual: &'static str,
    },
    #[error("the database is shutting down")]
    Shutdown,
    /// The transaction committed on this node, but the placement could not
    /// replicate its writes (see [`ReplicationError`]). Not retried: the
    /// commit already happened.
    #[error("the transaction committed on this node, but its replication failed: {0}")]
    Replication(ReplicationError),
    /// The transaction entered a reactor that lives elsewhere, and the
    /// placement could not bring it here.
    #[error("reactor `{reactor}` is not here and could not be acquired: {cause}")]
    Unavailable {
        reactor: ReactorKey,
        cause: AcquireError,
    },
}

impl ReactorError {
    pub fn user_abort(reason: impl Into<String>) -> Self {
        ReactorError::Tx(TxError::user_abort(reason))
    }

    fn is_conflict(&self) -> bool {
        matches!(self, ReactorError::Tx(TxError::Conflict(_)))
    }

    /// Whether the error surely means nothing was applied: the transaction
    /// ended before its commit (a conflict, a user abort, a reactor that
    /// could not be brought here). Not so for a failed replication (it
    /// committed here; whether it survives is unknown) or a shutdown (it may
    /// have come after the commit), which a client must treat as unknown.
    pub fn applied_nothing(&self) -> bool {
        match self {
            ReactorError::Tx(_)
            | ReactorError::Schema(_)
            | ReactorError::Directory(_)
            | ReactorError::WrongReactorType { .. }
            | ReactorError::Unavailable { .. } => true,
            // Only a read-only transaction's barrier says this.
            ReactorError::Replication(ReplicationError::NotServing) => true,
            ReactorError::Shutdown | ReactorError::Replication(_) => false,
        }
    }
}

struct Member {
    container: usize,
    executor: usize,
    context: Option<Arc<Mutex<TxContext>>>,
}

#[derive(Default)]
struct RootState {
    /// Containers this transaction runs in, the executor serving each (a
    /// container's sub-calls of one root all go to one executor, which
    /// serializes them on one context), and the context once created.
    members: Vec<Member>,
    /// The first error anywhere in the call tree aborts the whole transaction.
    error: Option<ReactorError>,
    /// A reactor the tree entered that lives elsewhere: the attempt aborts
    /// and waits for the placement to acquire it.
    unavailable: Option<ReactorId>,
    /// The first replica the tree read: a transaction that also writes
    /// must own it (the seed: readers run read-only transactions only), so
    /// the attempt aborts and the placement acquires it.
    read_replica: Option<ReactorId>,
    /// A replica the tree found Invalid: the attempt aborts and waits for
    /// the placement to say it may be read again.
    invalid_replica: Option<ReactorId>,
    /// Reactors the tree entered (a replicating placement only; repeats
    /// possible): a sequenced commit reports those it read without writing,
    /// whose ownership must not move before its replication either.
    entered: Vec<ReactorId>,
}

/// One attempt of a root transaction.
pub(crate) struct RootTxn {
    pub(crate) id: u64,
    pub(crate) db: Arc<DbShared>,
    state: Mutex<RootState>,
    /// Calls started and not yet finished, anywhere in the tree.
    outstanding: AtomicUsize,
    all_done: Notify,
    /// The reactor this transaction relocates, if it is a move, export or
    /// install: it may enter that reactor while other transactions back off.
    pub(crate) relocating: Option<(ReactorId, Relocation)>,
    /// The tree wrote a row (set once, read at commit).
    wrote: AtomicBool,
}

impl RootTxn {
    fn state(&self) -> MutexGuard<'_, RootState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The executor serving `container` for this transaction, chosen by the
    /// router on first use.
    pub(crate) fn executor_for(&self, container: usize, reactor: ReactorId) -> usize {
        let mut state = self.state();
        if let Some(m) = state.members.iter().find(|m| m.container == container) {
            return m.executor;
        }
        let executor = self.db.route(container, reactor);
        state.members.push(Member {
            container,
            executor,
            context: None,
        });
        executor
    }

    /// Records the context created for `container` on its executor.
    pub(crate) fn register_context(&self, container: usize, context: &Arc<Mutex<TxContext>>) {
        let mut state = self.state();
        let member = state
            .members
            .iter_mut()
            .find(|m| m.container == container)
            .expect("executor chosen first");
        assert!(
            member.context.is_none(),
            "one context per container per transaction"
        );
        member.context = Some(Arc::clone(context));
    }

    pub(crate) fn call_started(&self) {
        self.outstanding.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn call_finished<T>(&self, result: &Result<T, ReactorError>) {
        if let Err(e) = result {
            self.record_error(e);
        }
        if self.outstanding.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.all_done.notify_waiters();
        }
    }

    /// Notes that the tree entered `reactor`, which lives elsewhere, and
    /// returns the error that aborts this attempt (retried once the
    /// placement acquired it).
    pub(crate) fn unavailable(&self, reactor: ReactorId) -> ReactorError {
        self.state().unavailable.get_or_insert(reactor);
        ReactorError::Tx(TxError::Conflict(ConflictKind::RecordUnlinked.into()))
    }

    /// Notes that the tree read the replica `reactor` (see
    /// [`RootState::read_replica`]).
    pub(crate) fn read_replica(&self, reactor: ReactorId) {
        self.state().read_replica.get_or_insert(reactor);
    }

    /// Notes that the tree entered `reactor` (see [`RootState::entered`]).
    pub(crate) fn note_entered(&self, reactor: ReactorId) {
        self.state().entered.push(reactor);
    }

    /// Notes that the tree found the replica `reactor` Invalid, and returns
    /// the error that aborts this attempt.
    pub(crate) fn invalid_replica(&self, reactor: ReactorId) -> ReactorError {
        self.state().invalid_replica.get_or_insert(reactor);
        ReactorError::Tx(TxError::Conflict(ConflictKind::RecordUnlinked.into()))
    }

    /// Notes that the tree wrote (cheap: one relaxed store per write).
    #[inline]
    pub(crate) fn note_write(&self) {
        self.wrote.store(true, Ordering::Relaxed);
    }

    fn record_error(&self, error: &ReactorError) {
        let mut state = self.state();
        if state.error.is_none() {
            state.error = Some(error.clone());
        }
    }

    async fn wait_for_descendants(&self) {
        loop {
            let notified = self.all_done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.outstanding.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Commits (or, after an error, aborts) every context, then releases them
    /// on their executors. On commit, returns what the caller waits for
    /// before it learns of it (a replicating placement's answer).
    fn finish(&self, body: Result<(), ReactorError>) -> Result<Option<Replication>, ReactorError> {
        let (mut members, error, unavailable, entered) = {
            let mut state = self.state();
            // A write with a replica read: the replica must be acquired
            // first (else two readers could each write on what the other
            // owns: write skew).
            if self.wrote.load(Ordering::Relaxed) && state.unavailable.is_none() {
                state.unavailable = state.read_replica;
            }
            (
                std::mem::take(&mut state.members),
                state.error.take(),
                state.unavailable.is_some(),
                std::mem::take(&mut state.entered),
            )
        };
        let mut verdict = body.and(error.map_or(Ok(()), Err));
        if unavailable && verdict.is_ok() {
            // The tree swallowed the error of a reactor it could not use
            // here: the attempt still fails, and the placement acquires it.
            verdict = Err(ReactorError::Tx(TxError::Conflict(
                ConflictKind::RecordUnlinked.into(),
            )));
        }
        // Moved out of the members, so that once they are dropped below the
        // executors hold the only references and can pool the contexts.
        let mut contexts: Vec<Arc<Mutex<TxContext>>> = Vec::with_capacity(members.len());
        let mut participated: Vec<usize> = Vec::with_capacity(members.len());
        for member in &mut members {
            if let Some(context) = member.context.take() {
                contexts.push(context);
                participated.push(member.executor);
            }
        }
        drop(members);
        let guard = Guard::new();
        // What to tell a replicating placement once the contexts are
        // unlocked: a write commit's number and outcome, or a read-only
        // commit's barrier.
        let mut report = None;
        let outcome = {
            let mut locked: Vec<MutexGuard<'_, TxContext>> = contexts
                .iter()
                .map(|c| c.lock().unwrap_or_else(|e| e.into_inner()))
                .collect();
            let mut refs: Vec<&mut TxContext> = locked.iter_mut().map(|g| &mut **g).collect();
            match verdict {
                Err(e) => {
                    for context in refs.iter_mut() {
                        // SAFETY: each context's guard lives on its executor
                        // until the release below.
                        unsafe { context.abort(&guard) };
                    }
                    Err(e)
                }
                Ok(()) if refs.is_empty() => Ok(()),
                // Relocations take no number: moving rows between nodes is
                // the placement's own business, not a change to replicate.
                Ok(()) if self.relocating.is_none() && self.db.placement.replicates() => {
                    // SAFETY: as above; all descendants have finished.
                    let (result, sequenced) =
                        unsafe { self.commit_sequenced(&mut refs, &guard, entered) };
                    report = Some(sequenced);
                    result.map(|_| ()).map_err(conflict)
                }
                // SAFETY: as above; all descendants have finished.
                Ok(()) => unsafe { commit_contexts(&mut refs, &guard) }
                    .map(|_| ())
                    .map_err(conflict),
            }
        };
        drop(contexts);
        // Right after the outcome is known, with no context locked.
        let replication = report.and_then(|report| self.report(report));
        self.release(&participated);
        outcome.map(|()| replication)
    }

    /// Commits `contexts` with a sequence number (if it writes), capturing
    /// its changed rows. Returns the outcome, and what to report.
    ///
    /// # Safety
    /// As `commit_contexts`.
    unsafe fn commit_sequenced(
        &self,
        contexts: &mut [&mut TxContext],
        guard: &Guard,
        entered: Vec<ReactorId>,
    ) -> (Result<CommitInfo, CommitError>, Report) {
        let db = &*self.db;
        let mut rows: Vec<(ReactorId, RowChange)> = Vec::new();
        // SAFETY: the caller's.
        let (seq, result) = unsafe {
            commit_contexts_sequenced(
                contexts,
                guard,
                &db.sequencer,
                &mut |relation, key, value| {
                    let reactor = ReactorId(u32::from_be_bytes(
                        key[..REACTOR_PREFIX_BYTES]
                            .try_into()
                            .expect("every key starts with its reactor"),
                    ));
                    let index = db.schema_relation(relation);
                    rows.push((
                        reactor,
                        RowChange {
                            relation: db.schema.relations[index].name().to_owned(),
                            key: key[REACTOR_PREFIX_BYTES..].to_vec(),
                            value: value.map(<[u8]>::to_vec),
                        },
                    ))
                },
            )
        };
        let report = match (seq, &result) {
            (Some(seq), Ok(_)) => Report::Committed(seq, rows, entered),
            (Some(seq), Err(_)) => Report::Aborted(seq),
            // Read-only: every writer it may have read took its number
            // before this validation ended.
            (None, Ok(info)) if info.read_only => {
                Report::ReadBarrier(db.sequencer.load(Ordering::SeqCst))
            }
            // A writer that could not lock: it took no number.
            (None, _) => Report::Nothing,
        };
        (result, report)
    }

    /// Captured rows, per reactor (by key), each reactor's sorted by
    /// relation name, then key.
    fn group(&self, mut rows: Vec<(ReactorId, RowChange)>) -> Vec<ReactorChanges> {
        debug_assert!(!rows.is_empty(), "a commit with writes changed rows");
        rows.sort_unstable_by(|(ra, a), (rb, b)| {
            (ra, &a.relation, &a.key).cmp(&(rb, &b.relation, &b.key))
        });
        let mut changes: Vec<ReactorChanges> = Vec::new();
        let mut current = None;
        for (reactor, row) in rows {
            if current != Some(reactor) {
                current = Some(reactor);
                changes.push(ReactorChanges {
                    reactor: self
                        .db
                        .key_of(reactor)
                        .expect("a reactor written here has a key"),
                    rows: Vec::new(),
                });
            }
            changes.last_mut().expect("pushed above").rows.push(row);
        }
        changes.sort_unstable_by(|a, b| a.reactor.cmp(&b.reactor));
        changes
    }

    /// The reactors of `entered` that `changes` does not write, by key,
    /// sorted, each once.
    fn read_without_writing(
        &self,
        mut entered: Vec<ReactorId>,
        changes: &[ReactorChanges],
    ) -> Vec<ReactorKey> {
        entered.sort_unstable();
        entered.dedup();
        let mut read: Vec<ReactorKey> = entered
            .into_iter()
            .filter_map(|reactor| self.db.key_of(reactor).ok())
            .filter(|key| changes.binary_search_by(|c| c.reactor.cmp(key)).is_err())
            .collect();
        read.sort_unstable();
        read
    }

    /// Tells the placement a sequenced commit's outcome (its rows grouped
    /// per reactor), or a read-only commit's barrier; returns what the
    /// caller waits for. Runs with no context locked.
    fn report(&self, report: Report) -> Option<Replication> {
        let placement = &self.db.placement;
        let (seq, outcome) = match report {
            Report::Committed(seq, rows, entered) => {
                let changes = self.group(rows);
                let read = self.read_without_writing(entered, &changes);
                (seq, Sequenced::Committed { changes, read })
            }
            Report::Aborted(seq) => (seq, Sequenced::Aborted),
            Report::ReadBarrier(upto) => return placement.read_barrier(upto),
            Report::Nothing => return None,
        };
        debug_assert!(
            seq >= 1 && seq <= self.db.sequencer.load(Ordering::SeqCst),
            "numbers are dense from 1"
        );
        #[cfg(debug_assertions)]
        self.db.sequenced_reported.fetch_add(1, Ordering::Relaxed);
        let committed = matches!(outcome, Sequenced::Committed { .. });
        let replication = placement.sequenced(seq, outcome);
        // An abort's caller waits for nothing.
        replication.filter(|_| committed)
    }

    /// Releases the contexts on `executors` (those that hold one).
    fn release(&self, executors: &[usize]) {
        let id = self.id;
        let here = with_local(|l| l.executor);
        for &executor in executors {
            if executor == here {
                with_local(|l| l.release(id));
            } else {
                self.db.executors[executor].send(move || with_local(|l| l.release(id)));
            }
        }
    }
}

/// Runs a root transaction on this executor until it commits, fails with a
/// non-conflict error, or runs out of attempts.
pub(crate) async fn run_root<T, F, Fut>(
    db: Arc<DbShared>,
    reactor: ReactorId,
    executor: usize,
    relocating: Option<(ReactorId, Relocation)>,
    procedure: Arc<F>,
) -> Result<T, ReactorError>
where
    F: Fn(ReactorCtx) -> Fut,
    Fut: Future<Output = Result<T, ReactorError>>,
{
    // A relocation (the placement exporting or installing a reactor) skips
    // admission: the transactions holding the permits may be waiting for
    // exactly that placement to acquire a reactor, and would wait forever.
    let admission = with_local(|l| Rc::clone(&l.admission));
    let _permit = match relocating {
        Some(_) => None,
        None => Some(
            admission
                .acquire()
                .await
                .map_err(|_| ReactorError::Shutdown)?,
        ),
    };
    let mut backoff_us = 1u64;
    let mut last = Conflict::from(ConflictKind::ReadValidation);
    // Attempts that ended for want of a reactor the placement then
    // acquired, and the last such reactor (if the last attempt was one).
    let mut acquisitions = 0u32;
    let mut last_away = None;
    for attempt in 1..=MAX_ATTEMPTS {
        let root = Arc::new(RootTxn {
            id: db.next_txn_id.fetch_add(1, Ordering::Relaxed),
            db: Arc::clone(&db),
            state: Mutex::new(RootState::default()),
            outstanding: AtomicUsize::new(0),
            all_done: Notify::new(),
            relocating,
            wrote: AtomicBool::new(false),
        });
        let container = db.reactor_entry(reactor)?.container as usize;
        {
            let mut state = root.state();
            state.members.push(Member {
                container,
                executor,
                context: None,
            });
        }
        // Entering can conflict (the reactor moved away): that attempt aborts
        // and retries like any other conflict, with the directory re-read.
        let body = match ReactorCtx::enter(Arc::clone(&root), reactor, container) {
            Ok(ctx) => procedure(ctx).await,
            Err(e) => Err(e),
        };
        root.wait_for_descendants().await;
        let (value, body) = match body {
            Ok(v) => (Some(v), Ok(())),
            Err(e) => (None, Err(e)),
        };
        let outcome = root.finish(body);
        if outcome.is_err() {
            let invalid = root.state().invalid_replica.take();
            if let Some(invalid) = invalid {
                // A replica that may not be read now (Zeus: Invalid until
                // its R-VAL): wait until the placement says it may (or a
                // short while), then run again at once; not a backoff, which
                // could keep waking in step with the invalidations.
                Box::pin(wait_readable(&db, invalid)).await;
                last = ConflictKind::RecordUnlinked.into();
                continue;
            }
            let away = root.state().unavailable.take();
            if let Some(away) = away {
                // Whatever the tree made of it, the attempt failed for want
                // of a reactor: acquire it, then run again at once. Boxed:
                // the acquisition's state stays out of every transaction's
                // future.
                Box::pin(acquire(&db, away)).await?;
                acquisitions += 1;
                last_away = Some(away);
                continue;
            }
        }
        last_away = None;
        match outcome {
            Ok(replication) => {
                // Committed here: the caller learns of it once the placement
                // says the writes are replicated (still holding the permit).
                if let Some(replication) = replication {
                    replication.await.map_err(ReactorError::Replication)?;
                }
                return Ok(value.expect("a committed body produced a value"));
            }
            Err(ReactorError::Tx(TxError::Conflict(kind))) => last = kind,
            Err(e) => {
                debug_assert!(!e.is_conflict());
                return Err(e);
            }
        }
        if attempt > 2 {
            roost_exec::sleep(Duration::from_micros(backoff_us)).await;
            backoff_us = (backoff_us * 2).min(MAX_BACKOFF_US);
        } else {
            roost_exec::yield_now().await;
        }
    }
    debug_assert!(acquisitions <= MAX_ATTEMPTS);
    if let Some(away) = last_away {
        // Out of attempts while the reactor kept leaving: say that, not
        // the last conflict (there may have been none).
        return Err(ReactorError::Unavailable {
            reactor: db.key_of(away)?,
            cause: AcquireError::KeptMoving {
                times: acquisitions,
            },
        });
    }
    // The reactor the last conflict was at, by its name.
    if let Some(at) = last.at.as_deref_mut() {
        let id = at.reactor.and_then(|id| u32::try_from(id).ok());
        if let Some(key) = id.and_then(|id| db.key_of(ReactorId(id)).ok()) {
            at.reactor_name = Some(key.to_string());
        }
    }
    Err(ReactorError::Tx(TxError::RetriesExhausted {
        attempts: MAX_ATTEMPTS,
        last,
    }))
}

/// Waits until the replica `reactor` may be read again, for at most
/// [`REPLICA_WAIT`] (a wake-up the placement sends between the check and
/// the wait is not lost for longer).
async fn wait_readable(db: &DbShared, reactor: ReactorId) {
    let Ok(key) = db.key_of(reactor) else {
        return;
    };
    let readable = db.placement.replica_readable(&key);
    if db
        .reactor_entry(reactor)
        .is_ok_and(|entry| !(entry.replica && (entry.invalid || entry.moving)))
    {
        // Readable again already: let the executor run what else waits
        // (the change may be applied on this very executor) before the
        // next attempt.
        roost_exec::yield_now().await;
        return;
    }
    tokio::select! {
        biased;
        () = readable => {}
        () = roost_exec::sleep(REPLICA_WAIT) => {}
    }
    roost_exec::yield_now().await;
}

/// Asks the placement to bring `reactor` here.
async fn acquire(db: &DbShared, reactor: ReactorId) -> Result<(), ReactorError> {
    let key = db.key_of(reactor)?;
    db.placement
        .acquire(&key)
        .await
        .map_err(|cause| ReactorError::Unavailable {
            reactor: key,
            cause,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_conflict_names_its_reactor_and_the_key_after_its_id() {
        let mut stored = 17u32.to_be_bytes().to_vec();
        stored.extend_from_slice(b"stock:42");
        let e = conflict(CommitError::Conflict(roost_storage::Conflict::at(
            ConflictKind::ReadValidation,
            "shop/store/stock",
            Some(&stored),
        )));
        let ReactorError::Tx(TxError::Conflict(c)) = &e else {
            panic!("{e:?}");
        };
        let at = c.at.as_deref().expect("where");
        assert_eq!(at.reactor, Some(17));
        assert_eq!(at.key.as_deref(), Some(&b"stock:42"[..]));
        let text = e.to_string();
        assert!(
            text.contains("relation `shop/store/stock`, reactor #17, key \"stock:42\""),
            "{text}"
        );
        // A conflict with no key (a scan's) names its relation alone.
        let e = conflict(CommitError::Conflict(roost_storage::Conflict::at(
            ConflictKind::Phantom,
            "shop/store/stock",
            None,
        )));
        assert!(
            e.to_string().ends_with("(relation `shop/store/stock`)"),
            "{e}"
        );
    }

    #[test]
    fn conflicts_are_retryable() {
        assert!(ReactorError::Tx(TxError::Conflict(ConflictKind::Phantom.into())).is_conflict());
        assert!(!ReactorError::user_abort("x").is_conflict());
        assert!(!ReactorError::Replication(ReplicationError::OutcomeUnknown).is_conflict());
    }

    #[test]
    fn only_errors_before_the_commit_applied_nothing() {
        assert!(
            ReactorError::Tx(TxError::Conflict(ConflictKind::Phantom.into())).applied_nothing()
        );
        assert!(ReactorError::user_abort("x").applied_nothing());
        assert!(!ReactorError::Replication(ReplicationError::OutcomeUnknown).applied_nothing());
        assert!(!ReactorError::Shutdown.applied_nothing());
    }
}

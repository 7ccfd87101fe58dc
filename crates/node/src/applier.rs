//! A follower's R-INV rows on their way into its replicas, off the
//! protocol driver's path.
//!
//! The seed's follower applies an R-INV's newer versions, marks them
//! Invalid and answers R-ACK. Here "applied" is the protocol's state: the
//! new `t_version` is recorded, the replica is unreadable, and its rows are
//! held in this queue, in this node's memory as the replica itself is. The
//! rows reach the database's replica asynchronously: the applier task
//! takes whatever has queued, merges each reactor's rows (the last change
//! of each row wins: they are final values, in version order) and applies
//! the batch in one hand-off per executor
//! ([`Database::apply_to_replicas`]). So the driver never waits for an
//! executor on an R-INV, and a pipeline of R-INVs to one reactor costs one
//! database transaction per batch instead of one per R-INV.
//!
//! **Ordering.** A replica turns readable only when the reliable commit
//! says Valid *and* none of its rows are queued or being applied; that
//! decision and its mark are taken under this queue's lock, so the applier
//! finishing a batch and the driver queueing new rows cannot interleave
//! into a readable stale copy. Whatever the driver does to a replica
//! besides (a snapshot for another node, a promotion, a drop) it does
//! after [`Applier::drain`]: the replica then holds every acknowledged row.
//!
//! **Bounds.** At most [`MAX_QUEUED_ROWS`] rows wait; past that the driver
//! applies the queue itself before it acks more (back-pressure on the
//! coordinator, whose R-INVs wait in the transport meanwhile). A batch
//! covers at most [`MAX_BATCH_REACTORS`] reactors.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use roost_reactor::{Database, Holding, ReactorKey, RowChange};
use roost_resp::Keyspace;

use crate::zeus::Shared;

/// Rows queued for the replicas at most, before the driver applies them
/// itself.
pub const MAX_QUEUED_ROWS: usize = 65_536;
/// Reactors one batch applies at most.
pub const MAX_BATCH_REACTORS: usize = 256;

#[derive(Default)]
pub(crate) struct Applier {
    queue: Mutex<Queue>,
    /// A batch finished (a drain waits for the reactor it needs).
    finished: Condvar,
    /// Rows were queued (the applier task waits for it).
    work: tokio::sync::Notify,
    batches: AtomicU64,
    rows_applied: AtomicU64,
    driver_drains: AtomicU64,
}

#[derive(Default)]
struct Queue {
    /// Per reactor, the rows of its acknowledged R-INVs not yet in its
    /// replica, in version order.
    pending: HashMap<ReactorKey, Vec<RowChange>>,
    /// The reactors of `pending`, oldest first (each once).
    order: VecDeque<ReactorKey>,
    /// Rows in `pending`.
    rows: usize,
    /// Reactors of the batch the applier is writing now.
    in_progress: HashSet<ReactorKey>,
}

impl Queue {
    fn busy(&self, key: &ReactorKey) -> bool {
        self.pending.contains_key(key) || self.in_progress.contains(key)
    }

    fn take(&mut self, key: &ReactorKey) -> Option<Vec<RowChange>> {
        let rows = self.pending.remove(key)?;
        self.order.retain(|k| k != key);
        self.rows -= rows.len();
        debug_assert_eq!(self.order.len(), self.pending.len());
        Some(rows)
    }
}

/// The last change of each row, in the order of those last changes: what
/// a sequence of final-value row changes amounts to.
pub(crate) fn last_change_per_row(rows: Vec<RowChange>) -> Vec<RowChange> {
    let mut seen = HashSet::with_capacity(rows.len());
    let mut last: Vec<RowChange> = rows
        .into_iter()
        .rev()
        .filter(|r| seen.insert((r.relation.clone(), r.key.clone())))
        .collect();
    last.reverse();
    last
}

impl Applier {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().expect("applier queue lock")
    }

    /// Queues an acknowledged R-INV's rows for the replica `key` (the
    /// driver, as a follower): the replica is unreadable from now until
    /// they are in it and its R-VAL came.
    pub(crate) fn enqueue(
        &self,
        db: &Database,
        shared: &Shared,
        key: &ReactorKey,
        rows: Vec<RowChange>,
    ) {
        if self.lock().rows + rows.len() > MAX_QUEUED_ROWS {
            self.drain_all(db, shared);
        }
        let mut queue = self.lock();
        if !queue.in_progress.contains(key) {
            // (Being applied: the apply's end marks it unreadable.)
            if let Err(error) = db.set_replica_readable(key, false) {
                tracing::error!(reactor = %key, %error, "hiding a replica for its R-INV");
            }
        }
        queue.rows += rows.len();
        match queue.pending.get_mut(key) {
            Some(queued) => queued.extend(rows),
            None => {
                queue.pending.insert(key.clone(), rows);
                queue.order.push_back(key.clone());
            }
        }
        debug_assert_eq!(queue.order.len(), queue.pending.len());
        debug_assert!(queue.rows <= MAX_QUEUED_ROWS + queue.pending[key].len());
        drop(queue);
        self.work.notify_one();
    }

    /// Waits until the replica `key` holds every row queued for it (the
    /// driver, before it snapshots or promotes it).
    pub(crate) fn drain(&self, db: &Database, shared: &Shared, key: &ReactorKey) {
        let rows = {
            let mut queue = self.lock();
            while queue.in_progress.contains(key) {
                queue = self.finished.wait(queue).expect("applier queue lock");
            }
            let rows = queue.take(key);
            if rows.is_some() {
                queue.in_progress.insert(key.clone());
            }
            rows
        };
        if let Some(rows) = rows {
            self.driver_drains.fetch_add(1, Ordering::Relaxed);
            self.write_batch(db, shared, vec![(key.clone(), rows)]);
        }
        debug_assert!(!self.lock().busy(key), "only the driver queues rows");
    }

    /// Forgets the rows queued for `key` (its copy is being dropped),
    /// after any batch writing it finished.
    pub(crate) fn discard(&self, key: &ReactorKey) {
        let mut queue = self.lock();
        while queue.in_progress.contains(key) {
            queue = self.finished.wait(queue).expect("applier queue lock");
        }
        queue.take(key);
        debug_assert!(!queue.busy(key));
    }

    /// Applies every queued row on the caller's thread (the queue is full).
    fn drain_all(&self, db: &Database, shared: &Shared) {
        for _ in 0..MAX_QUEUED_ROWS {
            let batch = self.take_batch();
            if batch.is_empty() {
                break;
            }
            self.driver_drains.fetch_add(1, Ordering::Relaxed);
            self.write_batch(db, shared, batch);
        }
    }

    /// Up to [`MAX_BATCH_REACTORS`] reactors' rows, oldest first, marked
    /// in progress.
    fn take_batch(&self) -> Vec<(ReactorKey, Vec<RowChange>)> {
        let mut queue = self.lock();
        let mut batch = Vec::new();
        while batch.len() < MAX_BATCH_REACTORS {
            let Some(key) = queue.order.front().cloned() else {
                break;
            };
            let rows = queue.take(&key).expect("queued reactors have rows");
            queue.in_progress.insert(key.clone());
            batch.push((key, rows));
        }
        batch
    }

    /// Writes a batch taken by [`take_batch`](Self::take_batch), then ends
    /// it: its reactors are no longer in progress, and each turns readable
    /// if nothing else holds it back.
    fn write_batch(
        &self,
        db: &Database,
        shared: &Shared,
        batch: Vec<(ReactorKey, Vec<RowChange>)>,
    ) {
        let keys: Vec<ReactorKey> = batch.iter().map(|(k, _)| k.clone()).collect();
        self.write(db, shared, batch);
        let mut queue = self.lock();
        for key in &keys {
            let removed = queue.in_progress.remove(key);
            debug_assert!(removed, "a batch's reactors are in progress");
        }
        for key in &keys {
            Self::refresh_locked(&queue, db, shared, key);
        }
        drop(queue);
        self.finished.notify_all();
    }

    fn write(&self, db: &Database, shared: &Shared, batch: Vec<(ReactorKey, Vec<RowChange>)>) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        let keys: Vec<ReactorKey> = batch.iter().map(|(k, _)| k.clone()).collect();
        let merged: Vec<(ReactorKey, Vec<RowChange>)> = batch
            .into_iter()
            .map(|(key, rows)| (key, last_change_per_row(rows)))
            .collect();
        let rows: usize = merged.iter().map(|(_, r)| r.len()).sum();
        self.rows_applied.fetch_add(rows as u64, Ordering::Relaxed);
        let outcomes = db.apply_to_replicas(merged);
        debug_assert_eq!(outcomes.len(), keys.len());
        for (key, outcome) in keys.iter().zip(outcomes) {
            if let Err(error) = outcome {
                shared.commit.count_bad_apply();
                tracing::error!(reactor = %key, %error, "applying R-INV rows to a follower's copy");
            }
        }
    }

    /// Sets the replica's readable mark from the two protocols' states and
    /// this queue (see [`crate::zeus::refresh_replica`]).
    pub(crate) fn refresh(&self, db: &Database, shared: &Shared, key: &ReactorKey) {
        let queue = self.lock();
        Self::refresh_locked(&queue, db, shared, key);
    }

    /// Marks the replica `key` unreadable (this node left the view).
    pub(crate) fn hide(&self, db: &Database, key: &ReactorKey) {
        let queue = self.lock();
        if queue.in_progress.contains(key)
            || !matches!(db.holding(key), Ok(Holding::Replica { .. }))
        {
            return;
        }
        if let Err(error) = db.set_replica_readable(key, false) {
            tracing::error!(reactor = %key, %error, "hiding a replica");
        }
        drop(queue);
    }

    fn refresh_locked(queue: &Queue, db: &Database, shared: &Shared, key: &ReactorKey) {
        if queue.in_progress.contains(key) {
            // Its apply ends unreadable, and refreshes it then.
            return;
        }
        if !matches!(db.holding(key), Ok(Holding::Replica { .. })) {
            return;
        }
        let valid = shared.commit.state(key) != Some(roost_commit::ObjectState::Invalid);
        let readable = shared.reads_invalid()
            || (shared.is_reading(key) && valid && !queue.pending.contains_key(key));
        if let Err(error) = db.set_replica_readable(key, readable) {
            tracing::error!(reactor = %key, %error, "marking a replica");
        } else if readable {
            shared.replica_turned_readable();
        }
    }

    /// The follower-apply counters, as Prometheus text.
    pub(crate) fn prometheus(&self) -> String {
        let queued = self.lock().rows;
        let mut text = String::new();
        for (name, help, value) in [
            (
                "roost_commit_apply_batches_total",
                "Batches of R-INV rows written into this node's replicas (each one hand-off per executor).",
                self.batches.load(Ordering::Relaxed),
            ),
            (
                "roost_commit_apply_rows_total",
                "Rows written into this node's replicas, after merging each batch's changes of one row.",
                self.rows_applied.load(Ordering::Relaxed),
            ),
            (
                "roost_commit_apply_driver_drains_total",
                "Times the protocol driver wrote queued rows itself (before a snapshot, promotion or drop, or with the queue full).",
                self.driver_drains.load(Ordering::Relaxed),
            ),
        ] {
            crate::prom::counter(&mut text, name, help, value);
        }
        crate::prom::gauge(
            &mut text,
            "roost_commit_apply_queued_rows",
            "R-INV rows acknowledged and not yet in the replicas.",
            queued as u64,
        );
        text
    }
}

/// The applier task: writes queued rows into the replicas, batch after
/// batch, until the node's runtime stops. It blocks its worker while a
/// batch is written, as the driver did for each R-INV before.
pub(crate) async fn run(shared: Arc<Shared>, keyspace: Keyspace) {
    loop {
        let batch = shared.applier.take_batch();
        if batch.is_empty() {
            shared.applier.work.notified().await;
            continue;
        }
        shared
            .applier
            .write_batch(keyspace.database(), &shared, batch);
        // Let the transport and the driver in between batches.
        tokio::task::yield_now().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(relation: &str, key: u8, value: Option<u8>) -> RowChange {
        RowChange {
            relation: relation.into(),
            key: vec![key],
            value: value.map(|v| vec![v]),
        }
    }

    #[test]
    fn the_last_change_of_each_row_wins_in_the_order_of_those_changes() {
        let merged = last_change_per_row(vec![
            change("a", 1, Some(1)),
            change("a", 2, Some(2)),
            change("b", 1, Some(3)),
            change("a", 1, None),
            change("a", 2, Some(4)),
        ]);
        assert_eq!(
            merged,
            vec![
                change("b", 1, Some(3)),
                change("a", 1, None),
                change("a", 2, Some(4))
            ]
        );
        assert!(last_change_per_row(Vec::new()).is_empty());
    }
}

//! The node's durability (issue 21): what the node applied of reliably
//! committed updates goes to its log (`roost-durability`) in the order the
//! protocol driver applied it, owner or follower, and nothing the driver
//! decided in a step leaves the node (an R-ACK, an ownership ACK, a
//! client's `Committed`) before the step's records are as durable as the
//! sync policy says ([`Durable::commit_step`]): under `always` a follower
//! acknowledges only what is on its disk, and an owner answers only what
//! is on its disk. One sync per driver step is the group commit: a step
//! carries a whole group of transactions (`commit::MAX_GROUP`).
//!
//! Records, by where the node's copy of a reactor changes:
//! * `Delta`: the rows one reliable commit changed ([`Durable::delta`],
//!   from `CommitStore::apply`, at the coordinator and every follower);
//! * `Image`: a whole copy installed ([`Durable::image`]: created, moved
//!   here, a reader's copy), with the early rows applied over it;
//! * `Drop`: the copy left.
//!
//! At start the node folds its checkpoint and log into one copy per
//! reactor ([`Durable::open`]). After a whole-cluster restart the copies
//! are how reactors come back: the node that creates a reactor creates it
//! from its copy ([`Durable::take_recovered`]), and the node with the
//! newest copy is the one that creates it (`zeus::create_reactors`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use roost_cluster::protocol::Effects;
use roost_durability::{DurabilityConfig, Log, OpenError, Record, RowDelta, RowImage};
use roost_reactor::{ExportedReactor, ReactorKey, Replication, ReplicationError, RowChange};

use crate::commit::{reactor_key_bytes, ZeusMsg, ZeusOut};

/// A copy of a reactor this node recovered from its disk.
#[derive(Debug, Clone)]
pub struct RecoveredCopy {
    /// Its reliable commits' version (`t_version`) when the copy was last
    /// changed here.
    pub t_version: u64,
    /// Whether the log held every commit since the copy was installed (a
    /// gap means it may lack one: only used when nothing better exists).
    pub contiguous: bool,
    pub exported: ExportedReactor,
}

/// What recovery found, for the node's start-up line and `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    pub reactors: usize,
    pub rows: usize,
    pub records_replayed: u64,
    pub checkpoint_lsn: Option<u64>,
    pub last_lsn: u64,
    /// A torn tail cut off the last segment: (file, offset, bytes).
    pub truncated_tail: Option<(String, u64, u64)>,
    pub duration_ms: u64,
    /// The sync policy the log runs under.
    pub sync: String,
}

/// What the syncer thread and those waiting for it share.
struct Syncer {
    log: Arc<Log>,
    /// The highest lsn someone waits for (the thread commits up to it).
    wanted: Mutex<u64>,
    wake: Condvar,
    /// The lsn every record up to which is as durable as the policy says.
    done: tokio::sync::watch::Sender<u64>,
    /// Why the log failed, once it did: writes are no longer answered.
    failed: OnceLock<String>,
    stop: AtomicBool,
}

impl Syncer {
    /// Every record up to `lsn` is as durable as the policy says: wakes
    /// those waiting for it (`done` only moves up).
    fn done_up_to(&self, lsn: u64) {
        self.done.send_if_modified(|done| {
            let moved = lsn > *done;
            *done = (*done).max(lsn);
            moved
        });
    }

    fn fail(&self, cause: String) {
        if self.failed.set(cause.clone()).is_ok() {
            tracing::error!(%cause, "the durability log failed: this node answers no more writes");
        }
        // Wakes every waiter, who then finds the failure.
        self.done.send_replace(u64::MAX);
    }

    /// The thread: commits the log (one group commit for every waiter so
    /// far) whenever someone waits for more than is done. Bounded by
    /// `stop`, which the node's `Durable` sets when dropped.
    fn run(&self) {
        loop {
            let target = {
                let mut wanted = self.wanted.lock().expect("wanted lock");
                loop {
                    if self.stop.load(Ordering::Acquire) {
                        return;
                    }
                    if *wanted > *self.done.borrow() && self.failed.get().is_none() {
                        break;
                    }
                    wanted = self
                        .wake
                        .wait_timeout(wanted, std::time::Duration::from_millis(200))
                        .expect("wanted lock")
                        .0;
                }
                *wanted
            };
            // Everything appended by now: at least `target`.
            let appended = self.log.appended_lsn();
            debug_assert!(appended >= target, "waiters wait for appended records");
            match self.log.commit() {
                Ok(()) => self.done_up_to(appended),
                Err(error) => self.fail(error.to_string()),
            }
        }
    }
}

/// The node's log and what it recovered.
pub struct Durable {
    log: Arc<Log>,
    /// Records appended since the driver last committed the log (the
    /// coordinator's own deltas excepted: `own_writes_durable`).
    dirty: AtomicBool,
    /// The last of the coordinator's own deltas appended.
    own_lsn: AtomicU64,
    /// `always`: own deltas wait for the syncer's fdatasync; otherwise
    /// they are written to the OS by whoever waits, with no thread hop.
    syncs: bool,
    syncer: Arc<Syncer>,
    recovered: Mutex<HashMap<ReactorKey, RecoveredCopy>>,
    /// Every recovered copy's (reactor, `t_version`, whole), sorted: what
    /// this node reports, also once the copies themselves are gone.
    versions: Vec<(ReactorKey, u64, bool)>,
    report: RecoveryReport,
    /// Answers and messages held back because the log failed.
    withheld: AtomicU64,
}

impl Durable {
    /// Opens (and recovers) the log in `config.dir`.
    pub fn open(config: DurabilityConfig) -> Result<Arc<Durable>, OpenError> {
        let started = std::time::Instant::now();
        let sync = config.sync.to_string();
        let syncs =
            config.sync == roost_durability::SyncPolicy::Always && !config.bugs.answer_before_fsync;
        let (log, recovered) = Log::open(config)?;
        let mut copies = HashMap::new();
        let mut rows = 0;
        for (bytes, reactor) in recovered.reactors {
            let Some(key) = crate::commit::reactor_of(&bytes) else {
                // Not a reactor key this version writes: kept in the log,
                // not used (a newer Roost's reactor type, say).
                tracing::warn!(len = bytes.len(), "a recovered copy of an unknown reactor");
                continue;
            };
            rows += reactor.rows.len();
            let exported = ExportedReactor::from_rows(
                key.clone(),
                1,
                reactor
                    .rows
                    .into_iter()
                    .map(|((relation, key), value)| (relation, key, value)),
            );
            copies.insert(
                key,
                RecoveredCopy {
                    t_version: reactor.t_version,
                    contiguous: reactor.contiguous,
                    exported,
                },
            );
        }
        let report = RecoveryReport {
            reactors: copies.len(),
            rows,
            records_replayed: recovered.records_replayed,
            checkpoint_lsn: recovered.checkpoint_lsn,
            last_lsn: recovered.last_lsn,
            truncated_tail: recovered
                .truncated_tail
                .map(|t| (t.file.display().to_string(), t.offset, t.bytes_dropped)),
            duration_ms: started.elapsed().as_millis() as u64,
            sync,
        };
        let mut versions: Vec<_> = copies
            .iter()
            .map(|(key, copy)| (key.clone(), copy.t_version, copy.contiguous))
            .collect();
        versions.sort();
        let syncer = Arc::new(Syncer {
            log: Arc::clone(&log),
            wanted: Mutex::new(0),
            wake: Condvar::new(),
            done: tokio::sync::watch::Sender::new(recovered.last_lsn),
            failed: OnceLock::new(),
            stop: AtomicBool::new(false),
        });
        let thread_syncer = Arc::clone(&syncer);
        std::thread::Builder::new()
            .name("roost-log-sync".to_owned())
            .spawn(move || thread_syncer.run())
            .map_err(|source| OpenError::Spawn {
                dir: syncer.log.dir().to_path_buf(),
                source,
            })?;
        Ok(Arc::new(Durable {
            log,
            versions,
            dirty: AtomicBool::new(false),
            own_lsn: AtomicU64::new(0),
            syncs,
            syncer,
            recovered: Mutex::new(copies),
            report,
            withheld: AtomicU64::new(0),
        }))
    }

    pub fn report(&self) -> &RecoveryReport {
        &self.report
    }

    pub fn log(&self) -> &Arc<Log> {
        &self.log
    }

    /// Why the log failed, if it did.
    pub fn failure(&self) -> Option<&str> {
        self.syncer.failed.get().map(String::as_str)
    }

    /// Appends `record`; `own`: one of the coordinator's own deltas, synced
    /// before its client is answered rather than before the step's
    /// messages leave.
    fn append(&self, record: &Record, own: bool) {
        if self.failure().is_some() {
            return;
        }
        match self.log.append(record) {
            Ok(lsn) if own => {
                self.own_lsn.fetch_max(lsn, Ordering::AcqRel);
            }
            Ok(_) => self.dirty.store(true, Ordering::Release),
            Err(error) => self.syncer.fail(error.to_string()),
        }
    }

    /// The rows one reliable commit changed in `reactor` at `t_version`
    /// (`own`: this node coordinates it).
    pub(crate) fn delta(
        &self,
        reactor: &ReactorKey,
        t_version: u64,
        rows: &[RowChange],
        own: bool,
    ) {
        let rows = rows
            .iter()
            .map(|row| RowDelta {
                relation: row.relation.clone(),
                key: row.key.clone(),
                value: row.value.clone(),
            })
            .collect();
        self.append(
            &Record::Delta {
                reactor: reactor_key_bytes(reactor),
                t_version,
                rows,
            },
            own,
        );
    }

    /// A whole copy of `exported`'s reactor installed here at `t_version`.
    pub(crate) fn image(&self, t_version: u64, exported: &ExportedReactor) {
        let rows = match exported.row_list() {
            Ok(rows) => rows,
            Err(error) => {
                // The database refused the same bytes, so nothing was
                // installed either.
                tracing::error!(reactor = %exported.key(), %error, "a copy whose rows do not decode");
                return;
            }
        };
        let rows = rows
            .into_iter()
            .map(|(relation, key, value)| RowImage {
                relation,
                key,
                value,
            })
            .collect();
        self.append(
            &Record::Image {
                reactor: reactor_key_bytes(exported.key()),
                t_version,
                rows,
            },
            false,
        );
    }

    /// This node's copy of `reactor` left it.
    pub(crate) fn dropped(&self, reactor: &ReactorKey) {
        self.append(
            &Record::Drop {
                reactor: reactor_key_bytes(reactor),
            },
            false,
        );
    }

    /// At the end of every driver step: makes the step's records as durable
    /// as the policy says before its effects leave. If the log failed,
    /// nothing that would acknowledge a write leaves: the reliable
    /// commit's messages are dropped (the protocols re-send) and the
    /// step's `Committed` answers become [`ReplicationError::NotDurable`].
    pub(crate) fn commit_step(&self, fx: &mut Effects<ZeusMsg, ZeusOut>) {
        if self.dirty.swap(false, Ordering::AcqRel) && self.failure().is_none() {
            if let Err(error) = self.log.commit() {
                self.syncer.fail(error.to_string());
            }
        }
        // The step's own deltas: their sync starts now, beside their
        // reliable commit's round to the followers, so that it is usually
        // over when the client's answer waits for it.
        let own = self.own_lsn.load(Ordering::Acquire);
        if self.syncs && own > *self.syncer.done.borrow() {
            self.want(own);
        }
        if self.failure().is_none() {
            return;
        }
        let before = fx.sends.len();
        fx.sends
            .retain(|(_, msg)| !matches!(msg, ZeusMsg::Commit(_)));
        let mut withheld = (before - fx.sends.len()) as u64;
        for out in &mut fx.outputs {
            if let ZeusOut::Committed { req, .. } = out {
                *out = ZeusOut::CommitFailed {
                    req: *req,
                    error: ReplicationError::NotDurable,
                };
                withheld += 1;
            }
        }
        self.withheld.fetch_add(withheld, Ordering::Relaxed);
    }

    /// A wait until every own delta appended so far is as durable as the
    /// policy says (`None`: they are): what a client's answer, and a read
    /// that may have seen them, wait for. The syncer thread commits the log
    /// once for everyone waiting (group commit), off the protocol driver,
    /// so the pipeline of reliable commits goes on meanwhile.
    pub(crate) fn own_writes_durable(&self) -> Option<Replication> {
        self.own_writes_durable_or(Err(ReplicationError::NotDurable))
    }

    /// What a read-only transaction waits for: as above, but once the log
    /// failed reads go on (what they may see of writes after the failure
    /// was answered "outcome unknown").
    pub(crate) fn own_writes_durable_for_read(&self) -> Option<Replication> {
        self.own_writes_durable_or(Ok(()))
    }

    fn own_writes_durable_or(
        &self,
        when_failed: Result<(), ReplicationError>,
    ) -> Option<Replication> {
        let target = self.own_lsn.load(Ordering::Acquire);
        if self.failure().is_some() {
            if when_failed.is_ok() {
                return None;
            }
            return Some(Box::pin(std::future::ready(Err(
                ReplicationError::NotDurable,
            ))));
        }
        if *self.syncer.done.borrow() >= target {
            return None;
        }
        if !self.syncs {
            // Written to the OS here (or, planted, not at all): no fsync
            // to wait for.
            return match self.log.commit() {
                Ok(()) => {
                    self.syncer.done_up_to(target);
                    None
                }
                Err(error) => {
                    self.syncer.fail(error.to_string());
                    when_failed
                        .is_err()
                        .then(|| Box::pin(std::future::ready(when_failed)) as Replication)
                }
            };
        }
        self.want(target);
        let syncer = Arc::clone(&self.syncer);
        let mut done = self.syncer.done.subscribe();
        Some(Box::pin(async move {
            // The sender lives as long as `syncer`, held here.
            let _ = done.wait_for(|done| *done >= target).await;
            if syncer.failed.get().is_some() {
                return when_failed;
            }
            Ok(())
        }))
    }

    /// Asks the syncer thread to commit the log up to `lsn` at least.
    fn want(&self, lsn: u64) {
        let mut wanted = self.syncer.wanted.lock().expect("wanted lock");
        if lsn > *wanted {
            *wanted = lsn;
            self.syncer.wake.notify_one();
        }
    }

    /// The copy of `key` recovered here, taken (creation uses it once).
    pub(crate) fn take_recovered(&self, key: &ReactorKey) -> Option<RecoveredCopy> {
        self.recovered.lock().expect("recovered lock").remove(key)
    }

    /// Every recovered copy's version, and whether it is whole: what this
    /// node tells the others before reactors are created.
    pub(crate) fn recovered_versions(&self) -> &[(ReactorKey, u64, bool)] {
        &self.versions
    }

    /// Frees the copies creation did not use (their versions stay
    /// reported): the reactors live elsewhere, and come here by add-reader.
    pub(crate) fn release_copies(&self) {
        self.recovered.lock().expect("recovered lock").clear();
    }

    /// `/metrics` text: the log's counters and this layer's.
    pub(crate) fn prometheus(&self) -> String {
        let mut text = self.log.prometheus();
        for (name, help, value) in [
            (
                "roost_durability_failed",
                "1 once this node's durability log failed (it answers no writes since).",
                u64::from(self.failure().is_some()),
            ),
            (
                "roost_durability_withheld_total",
                "Acknowledgements and answers held back because the log failed.",
                self.withheld.load(Ordering::Relaxed),
            ),
            (
                "roost_durability_recovered_reactors",
                "Reactor copies this node recovered from its disk at start.",
                self.report.reactors as u64,
            ),
            (
                "roost_durability_recovery_ms",
                "How long recovery (checkpoint and log replay) took at start.",
                self.report.duration_ms,
            ),
        ] {
            if name.ends_with("_total") {
                crate::prom::counter(&mut text, name, help, value);
            } else {
                crate::prom::gauge(&mut text, name, help, value);
            }
        }
        text
    }
}

impl Drop for Durable {
    fn drop(&mut self) {
        self.syncer.stop.store(true, Ordering::Release);
        self.syncer.wake.notify_all();
    }
}

/// Reports of lists larger than this are refused (a keyspace has far fewer
/// reactors; a bad peer's message must not grow this node's memory).
pub(crate) const MAX_REPORTED_COPIES: usize = 1 << 16;
/// How long a node waits for every configured node's report before it
/// creates reactors from what it knows (a node that stays down may hold a
/// newer copy: the start-up log says so).
pub(crate) const REPORT_PATIENCE: std::time::Duration = std::time::Duration::from_secs(20);

/// One node's recovered copies: reactor to (`t_version`, whole).
type Copies = HashMap<ReactorKey, (u64, bool)>;

/// The copies each node recovered from its disk, exchanged before reactors
/// are created (`ZeusMsg::Copies`): after a whole-cluster restart every
/// reactor is created by the node holding its newest copy (the highest
/// reliably committed version wins), not by a fixed home that may have
/// been away when the last writes were acknowledged.
#[derive(Default)]
pub(crate) struct CopyReports {
    /// While this node waits for reports (it asks on every replica tick).
    wanted: AtomicBool,
    reports: Mutex<HashMap<roost_cluster::NodeId, Copies>>,
    refused: AtomicU64,
}

impl CopyReports {
    pub(crate) fn wanted(&self) -> bool {
        self.wanted.load(Ordering::Acquire)
    }

    pub(crate) fn has(&self, node: roost_cluster::NodeId) -> bool {
        self.reports
            .lock()
            .expect("reports lock")
            .contains_key(&node)
    }

    /// Node `from`'s report; `false` if refused (too long).
    pub(crate) fn note(
        &self,
        from: roost_cluster::NodeId,
        copies: Vec<(crate::NodeReactor, u64, bool)>,
    ) -> bool {
        if copies.len() > MAX_REPORTED_COPIES {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let copies = copies
            .into_iter()
            .map(|(key, version, whole)| (key.0, (version, whole)))
            .collect();
        self.reports
            .lock()
            .expect("reports lock")
            .insert(from, copies);
        true
    }

    /// Waits (at most [`REPORT_PATIENCE`]) for the reports of every node of
    /// `nodes` but `me`, then says which of `keys` this node creates and
    /// from what: those whose newest copy is here (its copy), and those of
    /// which no node has a copy and this node is the home (empty).
    pub(crate) async fn plan(
        &self,
        durable: &Durable,
        keys: &[ReactorKey],
        me: roost_cluster::NodeId,
        nodes: &[roost_cluster::NodeId],
    ) -> Vec<(ReactorKey, Option<RecoveredCopy>)> {
        self.wanted.store(true, Ordering::Release);
        let deadline = tokio::time::Instant::now() + REPORT_PATIENCE;
        let others: Vec<_> = nodes.iter().copied().filter(|n| *n != me).collect();
        loop {
            let missing: Vec<_> = others.iter().filter(|n| !self.has(**n)).collect();
            if missing.is_empty() {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(
                    ?missing,
                    "creating reactors without every node's report of its recovered copies: \
                     a node that stayed away may hold newer ones"
                );
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        self.wanted.store(false, Ordering::Release);
        let reports = self.reports.lock().expect("reports lock").clone();
        let mine: Copies = durable
            .recovered_versions()
            .iter()
            .map(|(key, version, whole)| (key.clone(), (*version, *whole)))
            .collect();
        let mut plan = Vec::new();
        for key in keys {
            let home = roost_ownership::directory(&crate::NodeReactor(key.clone()), nodes, 1)
                .first()
                .copied();
            let creator = newest_copy(key, me, &mine, &reports, home).or(home);
            if creator == Some(me) {
                plan.push((key.clone(), durable.take_recovered(key)));
            }
        }
        durable.release_copies();
        plan
    }
}

/// The node holding the newest copy of `key` (whole copies first, then the
/// highest version, then the home node, then the lowest id), if any does.
fn newest_copy(
    key: &ReactorKey,
    me: roost_cluster::NodeId,
    mine: &Copies,
    reports: &HashMap<roost_cluster::NodeId, Copies>,
    home: Option<roost_cluster::NodeId>,
) -> Option<roost_cluster::NodeId> {
    let candidates = mine.get(key).map(|copy| (me, *copy)).into_iter().chain(
        reports
            .iter()
            .filter_map(|(node, copies)| copies.get(key).map(|copy| (*node, *copy))),
    );
    candidates
        .max_by_key(|(node, (version, whole))| {
            (
                *whole,
                *version,
                Some(*node) == home,
                std::cmp::Reverse(node.0),
            )
        })
        .map(|(node, _)| node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use roost_cluster::NodeId;

    fn key(name: &str) -> ReactorKey {
        ReactorKey::new("keyspace", name).unwrap()
    }

    #[test]
    fn the_newest_whole_copy_creates_the_reactor() {
        let k = key("k0");
        let mine = HashMap::from([(k.clone(), (5, true))]);
        let mut reports = HashMap::new();
        reports.insert(NodeId(2), HashMap::from([(k.clone(), (9, true))]));
        reports.insert(NodeId(3), HashMap::from([(k.clone(), (12, false))]));
        // A gap loses to a whole copy, whatever its version.
        assert_eq!(
            newest_copy(&k, NodeId(1), &mine, &reports, Some(NodeId(1))),
            Some(NodeId(2))
        );
        // Equal versions: the home node, then the lowest id.
        reports.insert(NodeId(2), HashMap::from([(k.clone(), (5, true))]));
        assert_eq!(
            newest_copy(&k, NodeId(1), &mine, &reports, Some(NodeId(2))),
            Some(NodeId(2))
        );
        assert_eq!(
            newest_copy(&k, NodeId(1), &mine, &reports, Some(NodeId(3))),
            Some(NodeId(1))
        );
        // Nobody has one: no creator from copies (the home creates it).
        assert_eq!(
            newest_copy(&key("other"), NodeId(1), &mine, &reports, None),
            None
        );
    }
}

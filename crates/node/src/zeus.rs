//! Zeus ownership over the node's reactor database: the protocol's
//! [`ObjectStore`] is the database ([`DbStore`]), and the database's
//! [`Placement`] asks the protocol for the reactors it does not hold
//! ([`ZeusPlacement`]).
//!
//! **Where the rows are.** A reactor's rows live in the database only while
//! this node is its valid owner (`Access::Owner`). The moment the protocol
//! says otherwise (an INV made it `Invalid`, or the node stopped being a
//! replica) the store exports the reactor ([`Database::export_reactor`]:
//! one transaction extracts its rows and marks it remote, so every
//! transaction that raced with it fails validation) and keeps the export as
//! its copy: the rows the owner's ACK carries, and the copy a reader holds.
//! When the node becomes the owner, the copy is installed into a local
//! container ([`Database::install_reactor`]; its own export back after a
//! hand-over that did not happen, [`Database::reclaim_reactor`]) before the
//! protocol announces `Acquired`, so the waiting transaction finds it here.
//!
//! **Creation.** Every node of the cluster knows the keyspace reactors'
//! keys; each is created by its *home* node (the first of its directory
//! replicas) through `OwnershipCmd::Create` with an empty reactor
//! ([`ExportedReactor::empty`]), which installs it there once the directory
//! registered it. A node that restarts finds its reactors registered
//! already (`AlreadyExists`) and acquires them like any other node; it never
//! recreates rows that live elsewhere.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use roost_cluster::runtime::{ProtocolHandle, RequestError};
use roost_cluster::NodeId;
use roost_ownership::{
    directory, Access, FailReason, NackReason, ObjectData, ObjectKey, ObjectStore, Ownership,
    OwnershipCmd, OwnershipOut, ReqId, RequestKind,
};
use roost_reactor::{
    Acquire, AcquireError, Database, Deployment, ExportError, ExportedReactor, Holding, Location,
    Placement, ReactorKey, ReplicaWait, Replication, RowChange, Sequenced,
};

use crate::commit::{OwnershipHandle, Zeus};
use roost_resp::Keyspace;
use serde::{Deserialize, Serialize};

/// The protocol a node runs: ownership of the keyspace's reactors.
pub type NodeOwnership = Ownership<NodeReactor, DbStore>;

/// Early R-INV rows kept per reactor, and reactors with some, at most.
const MAX_EARLY_ROWS: usize = 1024;
const MAX_EARLY_REACTORS: usize = 4096;

/// How long a node keeps trying to create its home reactors (membership
/// must first install a view with a majority).
const CREATE_PATIENCE: Duration = Duration::from_secs(600);
const CREATE_RETRY: Duration = Duration::from_millis(50);
/// Creations a node keeps in flight (each is one ownership request).
const CREATES_IN_FLIGHT: usize = 64;

/// A reactor as an owned object: the reactor layer's cluster-wide key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NodeReactor(pub ReactorKey);

impl ObjectKey for NodeReactor {
    fn placement_hash(&self) -> u64 {
        self.0.placement_hash()
    }
}

impl fmt::Display for NodeReactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// `type/name`, as [`fmt::Display`] writes it.
impl FromStr for NodeReactor {
    type Err = roost_reactor::DirectoryError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (reactor_type, name) = text
            .split_once('/')
            .ok_or(roost_reactor::DirectoryError::BadName)?;
        ReactorKey::new(reactor_type, name).map(NodeReactor)
    }
}

/// Planted faults of the node's wiring of Zeus (the no-loss tests'
/// self-checks; never set in production).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ZeusBugs {
    /// A write transaction's caller is answered at its local commit, not
    /// after its reliable commit: an owner that dies right after loses
    /// writes its clients saw acknowledged.
    pub reply_before_reliable_commit: bool,
    /// A reader's replica stays readable while Invalid (an R-INV applied,
    /// its R-VAL not received): read-only transactions there return writes
    /// whose reliable commit is not finished, and then another replica
    /// may still return the older value.
    pub read_invalid_replicas: bool,
    /// A write transaction's pending reliable commit holds back the
    /// ownership of the reactors it wrote only, not of those it read: a
    /// new owner's write to one of those can be answered first, and a
    /// reader that then misses this transaction's writes closes a cycle
    /// (G2-realtime).
    pub pending_ignores_reads: bool,
}

/// What the placement and the store share: the reactors this node owns
/// (the placement's answer to `locate`) and the way into the protocol.
pub(crate) struct Shared {
    owned: Mutex<HashSet<ReactorKey>>,
    /// Reactors the protocol made this node the owner of whose rows the
    /// store could not install: an acquisition of one fails at once (`Lost`)
    /// instead of the transaction running again and again.
    lost: Mutex<HashSet<ReactorKey>>,
    handle: OnceLock<ProtocolHandle<Zeus>>,
    runtime: OnceLock<tokio::runtime::Handle>,
    deployment: Deployment,
    counters: Counters,
    /// How long successful acquisitions took, from the request to the
    /// outcome, retries included (`roost_ownership_acquire_seconds`).
    acquire_latency: crate::prom::LatencyHistogram,
    /// Reactors this node is a valid reader of (ownership's
    /// `Access::Reader`): their replicas are readable while Valid.
    reading: Mutex<HashSet<ReactorKey>>,
    /// Moves whenever a replica turns readable; transactions waiting for
    /// an Invalid replica watch it (`Placement::replica_readable`).
    readable_generation: AtomicU64,
    readable_notify: Arc<tokio::sync::Notify>,
    /// R-INV rows for reactors this node follows but holds no copy of yet
    /// (see `CommitStore::apply`), by version, applied over the copy when
    /// it is installed. At most `MAX_EARLY_ROWS` per reactor.
    early_rows: Mutex<HashMap<ReactorKey, BTreeMap<u64, Vec<RowChange>>>>,
    /// Reactors a pending-commit check froze (no transaction commits on
    /// them) for the export that follows.
    frozen: Mutex<HashSet<ReactorKey>>,
    /// The reliable commit's side: versions, pending commits, the intake.
    pub(crate) commit: crate::commit::CommitShared,
    /// Acknowledged R-INV rows on their way into this node's replicas.
    pub(crate) applier: crate::applier::Applier,
    bugs: OnceLock<ZeusBugs>,
    /// Reactors this node lost lately, and to whom: where the front door
    /// ships writes instead of taking them back ([`crate::forward`]).
    pub(crate) contention: crate::forward::Contention,
    /// The owner of each reactor this node keeps metadata for, as the
    /// ownership protocol last said (what `ROOST.OWNER` answers).
    owners: Mutex<HashMap<ReactorKey, NodeId>>,
    /// The node's durability log, when it keeps one (`crate::durable`).
    durable: OnceLock<Arc<crate::durable::Durable>>,
    /// What the other nodes recovered, before reactors are created.
    pub(crate) copies: crate::durable::CopyReports,
}

/// What the node's `/metrics` shows of ownership.
#[derive(Default)]
struct Counters {
    /// Reactors installed into the database (became owned here).
    installed: AtomicU64,
    /// Reactors exported out of it (ownership went elsewhere or pending).
    exported: AtomicU64,
    /// Acquisitions transactions waited for, and those that failed.
    acquires: AtomicU64,
    acquire_failures: AtomicU64,
    /// Requests tried again after losing to a competing one.
    acquire_retries: AtomicU64,
    /// Read-only transactions refused at their barrier: no valid lease.
    reads_refused_without_lease: AtomicU64,
    /// Exports or installs that failed (logged; the protocol saw no data).
    store_failures: AtomicU64,
    /// Time the protocol driver spent in exports and installs (ns).
    export_ns: AtomicU64,
    install_ns: AtomicU64,
}

impl Shared {
    pub(crate) fn new(deployment: Deployment) -> Arc<Shared> {
        Arc::new(Shared {
            owned: Mutex::new(HashSet::new()),
            lost: Mutex::new(HashSet::new()),
            handle: OnceLock::new(),
            runtime: OnceLock::new(),
            deployment,
            counters: Counters::default(),
            acquire_latency: crate::prom::LatencyHistogram::new(&ACQUIRE_BUCKETS_US),
            reading: Mutex::new(HashSet::new()),
            readable_generation: AtomicU64::new(0),
            readable_notify: Arc::new(tokio::sync::Notify::new()),
            early_rows: Mutex::new(HashMap::new()),
            frozen: Mutex::new(HashSet::new()),
            commit: crate::commit::CommitShared::default(),
            applier: crate::applier::Applier::default(),
            bugs: OnceLock::new(),
            contention: crate::forward::Contention::default(),
            owners: Mutex::new(HashMap::new()),
            durable: OnceLock::new(),
            copies: crate::durable::CopyReports::default(),
        })
    }

    /// The ownership counters, as Prometheus text.
    pub(crate) fn prometheus(&self) -> String {
        let c = &self.counters;
        let owned = self.owned.lock().expect("owned lock").len();
        let mut text = String::new();
        for (name, help, value) in [
            (
                "roost_ownership_reactors_installed_total",
                "Reactors installed into this node's database as their owner.",
                c.installed.load(Ordering::Relaxed),
            ),
            (
                "roost_ownership_reactors_exported_total",
                "Reactors taken out of this node's database for another owner.",
                c.exported.load(Ordering::Relaxed),
            ),
            (
                "roost_ownership_acquires_total",
                "Ownership acquisitions transactions waited for.",
                c.acquires.load(Ordering::Relaxed),
            ),
            (
                "roost_ownership_acquire_failures_total",
                "Acquisitions that failed (the transaction answered an error).",
                c.acquire_failures.load(Ordering::Relaxed),
            ),
            (
                "roost_ownership_acquire_retries_total",
                "Ownership requests tried again after losing to a competing request.",
                c.acquire_retries.load(Ordering::Relaxed),
            ),
            (
                "roost_zeus_reads_refused_without_lease_total",
                "Read-only transactions not answered: this node held no valid lease.",
                c.reads_refused_without_lease.load(Ordering::Relaxed),
            ),
            (
                "roost_ownership_store_failures_total",
                "Exports or installs of reactors that failed.",
                c.store_failures.load(Ordering::Relaxed),
            ),
            (
                "roost_ownership_export_nanoseconds_total",
                "Time the ownership driver spent exporting reactors.",
                c.export_ns.load(Ordering::Relaxed),
            ),
            (
                "roost_ownership_install_nanoseconds_total",
                "Time the ownership driver spent installing reactors.",
                c.install_ns.load(Ordering::Relaxed),
            ),
        ] {
            crate::prom::counter(&mut text, name, help, value);
        }
        self.acquire_latency.render(
            &mut text,
            "roost_ownership_acquire_seconds",
            "Successful ownership acquisitions by time from request to outcome, retries included.",
        );
        crate::prom::gauge(
            &mut text,
            "roost_ownership_reactors_owned",
            "Reactors this node owns.",
            owned as u64,
        );
        text.push_str(&self.contention.prometheus());
        text.push_str(&self.commit.prometheus());
        text.push_str(&self.applier.prometheus());
        if let Some(durable) = self.durable() {
            text.push_str(&durable.prometheus());
        }
        text
    }

    /// Gives the node its durability log (once, before the driver starts).
    pub(crate) fn set_durable(&self, durable: Arc<crate::durable::Durable>) {
        assert!(self.durable.set(durable).is_ok(), "one log per node");
    }

    pub(crate) fn durable(&self) -> Option<&Arc<crate::durable::Durable>> {
        self.durable.get()
    }

    /// The copies this node recovered and has not used (what it reports).
    pub(crate) fn recovered_copies(&self) -> Vec<(NodeReactor, u64, bool)> {
        self.durable()
            .map(|d| d.recovered_versions())
            .unwrap_or_default()
            .iter()
            .map(|(key, version, whole)| (NodeReactor(key.clone()), *version, *whole))
            .collect()
    }

    pub(crate) fn plant(&self, bugs: ZeusBugs) {
        let _ = self.bugs.set(bugs);
    }

    fn bugs(&self) -> ZeusBugs {
        self.bugs.get().copied().unwrap_or_default()
    }

    /// Connects the placement to the running protocol (once).
    pub(crate) fn connect(&self, handle: ProtocolHandle<Zeus>, runtime: tokio::runtime::Handle) {
        let fresh = self.handle.set(handle).is_ok() && self.runtime.set(runtime).is_ok();
        assert!(fresh, "a node's placement is connected once");
    }

    fn set_owned(&self, key: &ReactorKey, owned: bool) {
        let mut set = self.owned.lock().expect("owned lock");
        if owned {
            set.insert(key.clone());
        } else {
            set.remove(key);
        }
    }

    pub(crate) fn owns(&self, key: &ReactorKey) -> bool {
        self.owned.lock().expect("owned lock").contains(key)
    }

    /// Who owns `key`, as this node last learned.
    pub(crate) fn owner_of(&self, key: &ReactorKey) -> Option<NodeId> {
        self.owners.lock().expect("owners lock").get(key).copied()
    }

    fn note_owner(&self, key: &ReactorKey, owner: Option<NodeId>) {
        let mut owners = self.owners.lock().expect("owners lock");
        match owner {
            Some(node) => {
                owners.insert(key.clone(), node);
            }
            None => {
                owners.remove(key);
            }
        }
    }

    fn set_lost(&self, key: &ReactorKey, lost: bool) {
        let mut set = self.lost.lock().expect("lost lock");
        if lost {
            set.insert(key.clone());
        } else {
            set.remove(key);
        }
    }

    fn is_lost(&self, key: &ReactorKey) -> bool {
        self.lost.lock().expect("lost lock").contains(key)
    }

    pub(crate) fn keep_early_rows(&self, key: &ReactorKey, version: u64, rows: Vec<RowChange>) {
        let mut early = self.early_rows.lock().expect("early rows lock");
        if !early.contains_key(key) && early.len() >= MAX_EARLY_REACTORS {
            tracing::warn!(reactor = %key, "too many reactors with early R-INV rows: dropped");
            return;
        }
        let kept = early.entry(key.clone()).or_default();
        if kept.len() >= MAX_EARLY_ROWS {
            // Bounded: the oldest go (the copy that comes will be newer
            // than them, or this reader is far behind and stays unreadable
            // until a newer copy or write).
            kept.pop_first();
        }
        kept.insert(version, rows);
        debug_assert!(kept.len() <= MAX_EARLY_ROWS);
    }

    fn take_early_rows(&self, key: &ReactorKey) -> BTreeMap<u64, Vec<RowChange>> {
        self.early_rows
            .lock()
            .expect("early rows lock")
            .remove(key)
            .unwrap_or_default()
    }

    fn set_reading(&self, key: &ReactorKey, reading: bool) {
        let mut set = self.reading.lock().expect("reading lock");
        if reading {
            set.insert(key.clone());
        } else {
            set.remove(key);
        }
    }

    /// A replica turned readable: transactions waiting for one look again.
    pub(crate) fn replica_turned_readable(&self) {
        self.readable_generation.fetch_add(1, Ordering::SeqCst);
        self.readable_notify.notify_waiters();
    }

    pub(crate) fn is_reading(&self, key: &ReactorKey) -> bool {
        self.reading.lock().expect("reading lock").contains(key)
    }

    /// Whether the node holds a valid lease now (before the cluster
    /// runtime started: no).
    fn lease_valid(&self) -> bool {
        self.handle.get().is_some_and(|h| h.lease().serving_now())
    }

    /// Planted: replicas are readable whatever their state.
    pub(crate) fn reads_invalid(&self) -> bool {
        self.bugs().read_invalid_replicas
    }
}

/// A read-only transaction refused for want of a lease (counted).
fn refuse_read(shared: &Shared) -> Replication {
    shared
        .counters
        .reads_refused_without_lease
        .fetch_add(1, Ordering::Relaxed);
    Box::pin(std::future::ready(Err(
        roost_reactor::ReplicationError::NotServing,
    )))
}

/// The database's placement on a cluster node: a reactor is here while the
/// ownership protocol says this node owns it; any other is acquired.
pub struct ZeusPlacement {
    shared: Arc<Shared>,
}

impl ZeusPlacement {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        ZeusPlacement { shared }
    }
}

impl Placement for ZeusPlacement {
    fn locate(&self, key: &ReactorKey) -> Location {
        if self.shared.owns(key) {
            Location::Local {
                container: self.shared.deployment.place(key.name(), key.reactor_type()),
            }
        } else {
            Location::Remote
        }
    }

    fn replicates(&self) -> bool {
        true
    }

    fn sequenced(&self, seq: u64, outcome: Sequenced) -> Option<Replication> {
        match outcome {
            Sequenced::Aborted => {
                self.shared.commit.arrive(seq, None);
                None
            }
            Sequenced::Committed { changes, mut read } => {
                if self.shared.bugs().pending_ignores_reads {
                    read.clear();
                }
                let replication = crate::commit::replication_of(&self.shared, seq, changes, read);
                if self.shared.bugs().reply_before_reliable_commit {
                    // Planted: the reliable commit goes on, unwaited for.
                    if let Some(runtime) = self.shared.runtime.get() {
                        runtime.spawn(replication);
                    }
                    return None;
                }
                Some(replication)
            }
        }
    }

    fn replica_readable(&self, _key: &ReactorKey) -> ReplicaWait {
        let generation = self.shared.readable_generation.load(Ordering::SeqCst);
        let shared = Arc::clone(&self.shared);
        Box::pin(async move {
            let notify = Arc::clone(&shared.readable_notify);
            // Bounded: the caller also times the wait out.
            for _ in 0..64 {
                let notified = notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if shared.readable_generation.load(Ordering::SeqCst) != generation {
                    return;
                }
                notified.await;
            }
        })
    }

    fn read_barrier(&self, seq_upto: u64) -> Option<Replication> {
        // A read-only transaction sends no message: it may be answered only
        // while this node holds its lease. Checked after the reads were
        // validated: a node whose lease is valid now was not yet dropped
        // from the view (the others wait until etcd, or the peers, expire
        // the lease, which is later than this node's own deadline), so no
        // write it did not acknowledge as a follower has been answered.
        if !self.shared.lease_valid() {
            return Some(refuse_read(&self.shared));
        }
        let barrier = crate::commit::read_barrier_of(&self.shared, seq_upto);
        // It may have read writes of this node that are reliably committed
        // but not yet in its own log: answered once they are (a whole
        // cluster's crash must not take back what a read returned).
        let durable = self
            .shared
            .durable()
            .and_then(|durable| durable.own_writes_durable_for_read());
        if barrier.is_none() && durable.is_none() {
            return None;
        }
        // It read writes of this node still being replicated: again once
        // they are, for a write left unknown when the node lost its place
        // in the view counts as done, and must not be read back as if it
        // were reliably committed.
        let shared = Arc::clone(&self.shared);
        Some(Box::pin(async move {
            if let Some(barrier) = barrier {
                barrier.await?;
                if !shared.lease_valid() {
                    return refuse_read(&shared).await;
                }
            }
            if let Some(durable) = durable {
                durable.await?;
            }
            Ok(())
        }))
    }

    fn acquire(&self, key: &ReactorKey) -> Acquire {
        let (Some(handle), Some(runtime)) = (self.shared.handle.get(), self.shared.runtime.get())
        else {
            return Box::pin(std::future::ready(Err(AcquireError::Shutdown)));
        };
        let (handle, key) = (OwnershipHandle(handle.clone()), NodeReactor(key.clone()));
        let shared = Arc::clone(&self.shared);
        shared.counters.acquires.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = tokio::sync::oneshot::channel();
        // The executor that polls the future runs no tokio runtime: the
        // request runs on the node's, the answer comes back by channel.
        runtime.spawn(async move {
            let started = std::time::Instant::now();
            let probe = key.0.clone();
            // A request lost to another of this node's transactions (one
            // already in flight here) or to a competing node is tried
            // again, with a growing pause, until the patience runs out: two
            // clients on one node wanting one reactor is the common case.
            let deadline = tokio::time::Instant::now() + Duration::from_millis(ACQUIRE_PATIENCE_MS);
            let mut pause_ms = 1u64;
            let mut outcome = Err(AcquireError::Contended);
            for _ in 0..ACQUIRE_MAX_TRIES {
                let req = ReqId(handle.next_request_id());
                let cmd = OwnershipCmd::Acquire {
                    key: key.clone(),
                    req,
                    kind: RequestKind::AddOwner,
                };
                let answer = handle.request(cmd).await;
                let transient = is_transient(&answer);
                outcome = acquired(answer);
                if !transient || tokio::time::Instant::now() >= deadline {
                    break;
                }
                shared
                    .counters
                    .acquire_retries
                    .fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(pause_ms)).await;
                pause_ms = (pause_ms * 2).min(ACQUIRE_MAX_PAUSE_MS);
            }
            let outcome = outcome.and_then(|()| {
                if shared.is_lost(&probe) {
                    Err(AcquireError::Lost)
                } else {
                    Ok(())
                }
            });
            if outcome.is_err() {
                shared
                    .counters
                    .acquire_failures
                    .fetch_add(1, Ordering::Relaxed);
            } else {
                shared.acquire_latency.record(started.elapsed());
            }
            let _ = tx.send(outcome);
        });
        Box::pin(async move { rx.await.unwrap_or(Err(AcquireError::Shutdown)) })
    }
}

/// The acquisition latency histogram's bucket bounds: 25 µs doubling to
/// about 3.3 s (past [`ACQUIRE_PATIENCE_MS`]), then +Inf.
static ACQUIRE_BUCKETS_US: [u64; 18] = [
    25, 50, 100, 200, 400, 800, 1_600, 3_200, 6_400, 12_800, 25_600, 51_200, 102_400, 204_800,
    409_600, 819_200, 1_638_400, 3_276_800,
];

/// How long an acquisition keeps trying when it loses to competing requests
/// (under the client's own time-out, so the client hears why).
const ACQUIRE_PATIENCE_MS: u64 = 3_000;
/// The longest pause between two tries, and a bound on the tries.
const ACQUIRE_MAX_PAUSE_MS: u64 = 20;
const ACQUIRE_MAX_TRIES: u32 = 1_000;

/// Whether a failed acquisition may succeed if asked again: it lost to a
/// request already in flight (here or at the arbiter), or the arbiter was
/// busy, recovering or waiting on a reliable commit.
fn is_transient(outcome: &Result<OwnershipOut<NodeReactor>, RequestError>) -> bool {
    match outcome {
        Ok(OwnershipOut::Failed { reason, .. }) => match reason {
            FailReason::Busy | FailReason::TooManyPending => true,
            FailReason::Nacked(nack) => !nack.is_permanent(),
            _ => false,
        },
        Err(RequestError::Busy) => true,
        _ => false,
    }
}

fn acquired(outcome: Result<OwnershipOut<NodeReactor>, RequestError>) -> Result<(), AcquireError> {
    match outcome {
        Ok(OwnershipOut::Acquired { .. }) => Ok(()),
        Ok(OwnershipOut::Failed { reason, .. }) => Err(match reason {
            FailReason::TimedOut => AcquireError::TimedOut,
            FailReason::NotServing => AcquireError::NotServing,
            FailReason::Busy | FailReason::TooManyPending => AcquireError::Contended,
            FailReason::Nacked(nack) if !nack.is_permanent() => AcquireError::Contended,
            _ => AcquireError::NoOwner,
        }),
        Ok(other) => {
            tracing::error!(?other, "an acquire answered by another output");
            Err(AcquireError::NoOwner)
        }
        Err(RequestError::Busy) => Err(AcquireError::Contended),
        Err(RequestError::Stopped) => Err(AcquireError::Shutdown),
    }
}

/// The ownership protocol's object store: the node's reactor database, and
/// the exported copies of the reactors this node holds without owning them.
///
/// Its exports and installs block the protocol driver's own worker for the
/// transaction (handed to the node's executor and waited for). Not
/// `block_in_place`: handing the worker's core to another thread for every
/// export and install cost about 100 µs each (the ownership bench,
/// `bench/results/ownership.md`), ten times the transaction. The wait is
/// short and cannot depend on this runtime: the database parks the thread
/// outside tokio's budget, and relocations skip the executor's admission
/// control, whose permits transactions waiting for this very driver may hold.
pub struct DbStore {
    keyspace: Keyspace,
    shared: Arc<Shared>,
    /// Exports and installs that failed (the protocol saw no data).
    failures: u64,
}

impl DbStore {
    pub(crate) fn new(keyspace: Keyspace, shared: Arc<Shared>) -> Self {
        DbStore {
            keyspace,
            shared,
            failures: 0,
        }
    }

    fn failed(&mut self) {
        self.failures += 1;
        self.shared
            .counters
            .store_failures
            .fetch_add(1, Ordering::Relaxed);
    }

    fn db(&self) -> &Database {
        self.keyspace.database()
    }

    /// Ends a freeze of `key` (if this store froze it): it stays here.
    fn thaw(&self, key: &ReactorKey) {
        if self.shared.frozen.lock().expect("frozen lock").remove(key) {
            self.thaw_now(key);
        }
    }

    fn thaw_now(&self, key: &ReactorKey) {
        if let Err(error) = self.db().thaw_reactor(key) {
            tracing::error!(reactor = %key, %error, "thawing a reactor");
        }
    }

    /// Thaws the reactors a pending-commit check froze whose ownership
    /// stayed here (no export followed): called after every protocol step.
    pub(crate) fn thaw_if_owned(&self, owned: impl Fn(&NodeReactor) -> bool) {
        let frozen: Vec<ReactorKey> = {
            let set = self.shared.frozen.lock().expect("frozen lock");
            if set.is_empty() {
                return;
            }
            set.iter().cloned().collect()
        };
        for key in frozen {
            if owned(&NodeReactor(key.clone())) {
                self.thaw(&key);
            }
        }
    }

    fn holding(&self, key: &ReactorKey) -> Holding {
        self.db().holding(key).unwrap_or_else(|error| {
            tracing::error!(reactor = %key, %error, "a reactor key this database refuses");
            Holding::Away
        })
    }

    /// The owner's rows become an unreadable replica in place (an INV made
    /// this node `Invalid`, or it is the data source of an arbitration):
    /// no transaction writes them from here on, so the copy shipped is the
    /// last state. Ends a freeze of it.
    fn demote(&mut self, key: &ReactorKey) {
        self.shared.set_owned(key, false);
        self.shared.frozen.lock().expect("frozen lock").remove(key);
        if let Err(error) = self.db().demote_to_replica(key) {
            self.failed();
            tracing::error!(reactor = %key, %error, "demoting a reactor to a replica");
        }
    }

    /// This node's copy, as the ownership protocol ships it.
    fn snapshot(&mut self, key: &ReactorKey) -> Option<ObjectData> {
        let started = std::time::Instant::now();
        let snapshot = self.db().snapshot_reactor(key);
        self.shared
            .counters
            .export_ns
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        match snapshot {
            Ok(exported) => {
                self.shared
                    .counters
                    .exported
                    .fetch_add(1, Ordering::Relaxed);
                // The reactor's `t_version` (its reliable commits) travels
                // with its rows, so the next owner's versions go on from it.
                Some(ObjectData::new(
                    self.shared.commit.t_version(key).unwrap_or(0),
                    exported.encode(),
                ))
            }
            Err(error) => {
                self.failed();
                tracing::error!(reactor = %key, %error, "copying a reactor");
                None
            }
        }
    }

    /// Takes whatever this database holds of `key` out of it.
    fn drop_copy(&mut self, key: &ReactorKey) {
        // (Whether this node reads it is ownership's to say, in
        // `access_changed`: an install at a reader replaces its copy.)
        self.shared.set_owned(key, false);
        let dropped = match self.holding(key) {
            Holding::Away => return,
            Holding::Owned { .. } => {
                self.demote(key);
                self.db().drop_replica(key)
            }
            Holding::Replica { .. } => {
                self.shared.applier.discard(key);
                self.db().drop_replica(key)
            }
        };
        if let Err(error) = dropped {
            self.failed();
            tracing::error!(reactor = %key, %error, "dropping a reactor's copy");
        }
        if let Some(durable) = self.shared.durable() {
            durable.dropped(key);
        }
    }

    /// Whether read-only transactions may read the replica `key` now: this
    /// node is a valid reader (ownership) and the reactor is Valid
    /// (reliable commit). Applied to the database's mark.
    fn refresh_readable(&self, key: &ReactorKey) {
        refresh_replica(self.db(), &self.shared, key);
    }
}

/// Sets the database's readable mark of the replica `key` from the two
/// protocols' states: ownership says this node is a valid reader, and the
/// reliable commit says the reactor is Valid here (the seed: a read-only
/// transaction never reads an Invalid object).
/// (And no R-INV rows it acknowledged are still on their way into it: the
/// [`Applier`](crate::applier::Applier) decides under its queue's lock.)
pub(crate) fn refresh_replica(db: &Database, shared: &Shared, key: &ReactorKey) {
    shared.applier.refresh(db, shared, key);
}

impl ObjectStore<NodeReactor> for DbStore {
    fn export(&mut self, key: &NodeReactor) -> Option<ObjectData> {
        match self.holding(&key.0) {
            Holding::Away => None,
            Holding::Owned { .. } => {
                self.demote(&key.0);
                self.snapshot(&key.0)
            }
            Holding::Replica { .. } => {
                self.shared.applier.drain(self.db(), &self.shared, &key.0);
                self.snapshot(&key.0)
            }
        }
    }

    fn install(&mut self, key: &NodeReactor, data: ObjectData) {
        let held = self.holding(&key.0);
        if matches!(held, Holding::Replica { .. })
            && self.shared.commit.t_version(&key.0) == Some(data.t_version)
        {
            // The copy here is that version already (a reader becoming the
            // owner, or asked to read again): nothing to ship into the
            // database.
            self.shared.commit.installed(&key.0, data.t_version);
            self.refresh_readable(&key.0);
            return;
        }
        let exported = match ExportedReactor::decode(&data.rows) {
            Ok(exported) if exported.key() == &key.0 => exported,
            Ok(other) => {
                self.failed();
                tracing::error!(reactor = %key, got = %other.key(), "a copy of another reactor");
                return;
            }
            Err(error) => {
                self.failed();
                tracing::error!(reactor = %key, %error, "a copy that does not decode");
                return;
            }
        };
        self.drop_copy(&key.0);
        let started = std::time::Instant::now();
        let installed = self.db().install_replica(&exported);
        self.shared
            .counters
            .install_ns
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        match installed {
            Ok(_) => {
                self.shared
                    .counters
                    .installed
                    .fetch_add(1, Ordering::Relaxed);
                self.shared.commit.installed(&key.0, data.t_version);
                let durable = self.shared.durable().cloned();
                if let Some(durable) = &durable {
                    durable.image(data.t_version, &exported);
                }
                // Writes that reached this node before the copy, newer
                // than it, in version order.
                for (version, rows) in self.shared.take_early_rows(&key.0) {
                    if version <= data.t_version {
                        continue;
                    }
                    if let Some(durable) = &durable {
                        durable.delta(&key.0, version, &rows, false);
                    }
                    if let Err(error) = self.db().apply_to_replica(&key.0, rows) {
                        self.failed();
                        tracing::error!(reactor = %key, version, %error, "applying early R-INV rows");
                    }
                }
                self.refresh_readable(&key.0);
            }
            Err(error) => {
                self.failed();
                tracing::error!(reactor = %key, %error, "installing a reactor's copy");
            }
        }
    }

    fn remove(&mut self, key: &NodeReactor) {
        self.drop_copy(&key.0);
        self.shared.take_early_rows(&key.0);
        self.shared.commit.forget(&key.0);
    }

    fn has_pending_commit(&self, key: &NodeReactor) -> bool {
        // A transaction that wrote the reactor here, or read it, and is not
        // reliably committed yet: the owner NACKs (the seed names writes;
        // a read counts too, else a new owner's write to what it read is
        // answered first and a replica that misses its writes closes a
        // real-time cycle). The answer must stay
        // true until the reactor leaves: so first freeze it (no transaction
        // commits on it any more), then wait for the numbers of those that
        // committed before (microseconds on the way from their executors),
        // then look. A "no" leaves it frozen until the export that follows
        // in the same protocol step (or a thaw if it stays).
        let frozen = match self.db().freeze_reactor(&key.0) {
            Ok(frozen) => frozen,
            // A move of it is running: ask again later.
            Err(ExportError::Busy) => return true,
            Err(error) => {
                tracing::error!(reactor = %key, %error, "freezing a reactor");
                return true;
            }
        };
        let upto = self.db().last_sequence_number();
        let pending =
            !self.shared.commit.wait_arrived(upto) || self.shared.commit.pending_any(&key.0);
        if frozen {
            if pending {
                self.thaw_now(&key.0);
            } else {
                self.shared
                    .frozen
                    .lock()
                    .expect("frozen lock")
                    .insert(key.0.clone());
            }
        }
        pending
    }

    fn commit_recovery_done(&self) -> bool {
        !self.shared.commit.recovering()
    }

    fn access_changed(&mut self, key: &NodeReactor, access: Access, owner: Option<NodeId>) {
        let held = self.holding(&key.0);
        let lost = access != Access::Owner && matches!(held, Holding::Owned { .. });
        self.shared.contention.note(&key.0, lost, owner);
        self.shared.note_owner(&key.0, owner);
        self.shared.set_reading(&key.0, access == Access::Reader);
        match (access, held) {
            (Access::Owner, Holding::Replica { .. }) => {
                // Every row it acknowledged as a follower, in before it
                // takes writes.
                self.shared.applier.drain(self.db(), &self.shared, &key.0);
                if let Err(error) = self.db().promote_replica(&key.0) {
                    self.failed();
                    tracing::error!(reactor = %key, %error, "promoting a replica");
                } else {
                    self.shared.set_owned(&key.0, true);
                }
            }
            (Access::Owner, Holding::Owned { .. }) => {
                self.shared.set_owned(&key.0, true);
                self.thaw(&key.0);
            }
            (Access::Owner, Holding::Away) => {}
            (Access::Reader | Access::Invalid, Holding::Owned { .. }) => {
                self.demote(&key.0);
                self.refresh_readable(&key.0);
            }
            (Access::Reader | Access::Invalid, Holding::Replica { .. }) => {
                self.refresh_readable(&key.0);
            }
            (Access::Reader | Access::Invalid, Holding::Away) => {}
            (Access::None, _) => self.drop_copy(&key.0),
        }
        // Owner without rows: acquisitions fail (`Lost`) until a later
        // grant brings a copy.
        let owned_here = matches!(self.holding(&key.0), Holding::Owned { .. });
        self.shared
            .set_lost(&key.0, access == Access::Owner && !owned_here);
        // The rows are writable here exactly while this node owns the
        // reactor (unless a failure was counted and logged).
        debug_assert!(self.failures > 0 || owned_here == (access == Access::Owner) || !owned_here);
        debug_assert!(self.failures > 0 || self.shared.owns(&key.0) == owned_here);
    }
}

/// The reactors `me` creates: those whose first directory replica it is.
pub(crate) fn home_reactors(keys: &[ReactorKey], me: NodeId, nodes: &[NodeId]) -> Vec<ReactorKey> {
    keys.iter()
        .filter(|key| directory(&NodeReactor((*key).clone()), nodes, 1).first() == Some(&me))
        .cloned()
        .collect()
}

/// Creates the keyspace's reactors this node is to create, through the
/// protocol, retrying while the node is not serving yet; a reactor that
/// exists already is left to its owner. Without a durability log: its home
/// reactors, empty. With one: each reactor is created by the node with its
/// newest recovered copy, from that copy (`CopyReports::plan`), and those
/// no node recovered by their home, empty.
pub(crate) async fn create_reactors(
    handle: OwnershipHandle,
    shared: Arc<Shared>,
    keys: Vec<ReactorKey>,
    me: NodeId,
    nodes: Vec<NodeId>,
) {
    let plan: Vec<(ReactorKey, ObjectData)> = match shared.durable() {
        None => home_reactors(&keys, me, &nodes)
            .into_iter()
            .map(|key| {
                let data = empty_copy(&key);
                (key, data)
            })
            .collect(),
        Some(durable) => shared
            .copies
            .plan(durable, &keys, me, &nodes)
            .await
            .into_iter()
            .map(|(key, copy)| {
                let data = match copy {
                    Some(copy) => {
                        if !copy.contiguous {
                            tracing::warn!(reactor = %key, t_version = copy.t_version, "created from a recovered copy whose log has a gap: it may lack a commit");
                        }
                        ObjectData::new(copy.t_version, copy.exported.encode())
                    }
                    None => empty_copy(&key),
                };
                (key, data)
            })
            .collect(),
    };
    let deadline = tokio::time::Instant::now() + CREATE_PATIENCE;
    let plan = Arc::new(plan);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut creators = tokio::task::JoinSet::new();
    for _ in 0..CREATES_IN_FLIGHT.min(plan.len()) {
        let (handle, plan, next) = (handle.clone(), Arc::clone(&plan), Arc::clone(&next));
        creators.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((key, data)) = plan.get(i) else {
                    return;
                };
                if !create_one(&handle, key, data, deadline).await {
                    return;
                }
            }
        });
    }
    while creators.join_next().await.is_some() {}
}

/// A new reactor's data: no rows, at version 1.
fn empty_copy(key: &ReactorKey) -> ObjectData {
    let data = ExportedReactor::empty(key.clone());
    ObjectData::new(data.version(), data.encode())
}

/// Creates `key`, retrying while the node is not serving yet; `false` once
/// the node stopped.
async fn create_one(
    handle: &OwnershipHandle,
    key: &ReactorKey,
    data: &ObjectData,
    deadline: tokio::time::Instant,
) -> bool {
    loop {
        let req = ReqId(handle.next_request_id());
        let cmd = OwnershipCmd::Create {
            key: NodeReactor(key.clone()),
            req,
            data: data.clone(),
        };
        match handle.request(cmd).await {
            Ok(OwnershipOut::Acquired { .. }) => return true,
            // Known locally, or refused by a directory replica or a
            // witness that knows it (this node restarted and forgot it).
            Ok(OwnershipOut::Failed {
                reason: FailReason::AlreadyExists | FailReason::Nacked(NackReason::AlreadyExists),
                ..
            }) => {
                tracing::info!(reactor = %key, "exists already: acquired when used");
                return true;
            }
            Err(RequestError::Stopped) => return false,
            Ok(_) | Err(RequestError::Busy) => {}
        }
        if tokio::time::Instant::now() >= deadline {
            tracing::error!(reactor = %key, "gave up creating a home reactor");
            return true;
        }
        tokio::time::sleep(CREATE_RETRY).await;
    }
}

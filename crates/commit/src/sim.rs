//! The reliable commit under the cluster's deterministic simulator
//! (`roost_cluster::sim`): the same state machine, with message loss,
//! duplication, reordering, crashes, restarts and partitions, and views
//! from the real membership protocol.
//!
//! * [`CommitWorkload`]: every node writes its own objects (ownership is
//!   not simulated: node `i` owns the keys `i/*`), every other node
//!   follows them; commits are pipelined (a client does not wait for
//!   `Committed`).
//! * [`CommitSafety`]: when a transaction is reported committed, every
//!   follower of it (the coordinator's view at the start and still at the
//!   end, same incarnation) holds its writes (or later versions). After
//!   every event: no node holds a write Valid whose transaction is not
//!   committed while its coordinator (that incarnation) has been in every
//!   view since the start (no one may replay it, so only the
//!   coordinator's R-VAL, sent once every follower acked, validates it).
//!   At the end of a settled run: every committed transaction's writes are
//!   at every live follower that stayed in every view since, nothing is
//!   pending, and every object is valid.
//! * Read-only transactions: half the clients' attempts read, locally at
//!   their node ([`ReliableCommit::read_only`], through
//!   [`SimCmd::ReadOnly`]), all the objects of one node or two random
//!   ones; the workload's stats count the reads done (completed) and
//!   refused (rejected), [`CommitHistory`] each refusal's reason.
//!   [`ReadOnlyRealTime`]:
//!   once a reader got version v of an object, or a client was told that
//!   a transaction writing v committed, no read-only transaction that
//!   starts later, at any node, returns an older version of it (reads
//!   are instantaneous, so "later" is a later event); and a read returns
//!   the data written with the version it names.

use std::collections::{BTreeMap, BTreeSet};

use rand::Rng;
use roost_cluster::sim::{
    membership_checkers, run_simulation, Cause, Checker, ClientId, Factory, Scenario, SimConfig,
    SimConfigError, SimRng, SimRun, Simulation, Violation, Workload, WorkloadStats, World,
};
use roost_cluster::{Context, Effects, EpochId, Incarnation, Input, NodeId, Protocol};

use crate::commit::{CommitCmd, CommitOut, Fx, ReadValue, ReliableCommit, Transaction};
use crate::config::{CommitBugs, CommitConfig, ReadOnlyError};
use crate::msg::{CommitMsg, Key, TxId, Write};
use crate::store::{MemStore, ObjectState, ObjectStore};

/// The simulated clients' commands: a transaction for the reliable commit,
/// or a read-only transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SimCmd {
    Commit(Transaction),
    /// Read these objects here ([`ReliableCommit::read_only`]).
    ReadOnly {
        keys: Vec<Key>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SimOut {
    Commit(CommitOut),
    /// The answer to [`SimCmd::ReadOnly`], in the same event.
    ReadOnly {
        result: Result<Vec<ReadValue>, ReadOnlyError>,
    },
}

/// A simulated replica: the reliable commit, and read-only transactions
/// run against it. A read-only transaction is a local call, not an input
/// of the protocol ([`CommitCmd`] and [`CommitOut`] are the node's, which
/// reads through its own database); the simulator's clients reach a node
/// only by a command, so this wrapper turns [`SimCmd::ReadOnly`] into
/// that call.
#[derive(Debug)]
pub struct SimReplica {
    commit: ReliableCommit<MemStore>,
    /// Scratch effects of the inner protocol (reused, not reallocated).
    fx: Fx,
}

impl SimReplica {
    pub fn new(commit: ReliableCommit<MemStore>) -> Self {
        SimReplica {
            commit,
            fx: Fx::default(),
        }
    }

    pub fn commit(&self) -> &ReliableCommit<MemStore> {
        &self.commit
    }
}

impl Protocol for SimReplica {
    type Msg = CommitMsg;
    type Cmd = SimCmd;
    type Out = SimOut;

    fn on_input(
        &mut self,
        ctx: &Context<'_>,
        input: Input<CommitMsg, SimCmd>,
        fx: &mut Effects<CommitMsg, SimOut>,
    ) {
        let input = match input {
            Input::Command(SimCmd::ReadOnly { keys }) => {
                let result = self.commit.read_only(ctx, &keys);
                fx.output(SimOut::ReadOnly { result });
                return;
            }
            Input::Command(SimCmd::Commit(tx)) => Input::Command(CommitCmd::Commit(tx)),
            Input::Message { from, msg } => Input::Message { from, msg },
            Input::Timer(timer) => Input::Timer(timer),
            Input::ViewChange => Input::ViewChange,
        };
        self.fx.clear();
        self.commit.on_input(ctx, input, &mut self.fx);
        fx.sends.append(&mut self.fx.sends);
        fx.timers.append(&mut self.fx.timers);
        fx.logs.append(&mut self.fx.logs);
        fx.outputs
            .extend(self.fx.outputs.drain(..).map(SimOut::Commit));
        debug_assert!(self.fx.sends.is_empty() && self.fx.outputs.is_empty());
    }
}

/// The reliable commit's settings in a simulation.
#[derive(Debug, Clone, PartialEq)]
pub struct CommitScenario {
    pub config: CommitConfig,
    pub bugs: CommitBugs,
    /// Objects per node.
    pub objects: u32,
    /// Largest number of objects one transaction writes.
    pub max_writes: u32,
}

impl Default for CommitScenario {
    fn default() -> Self {
        CommitScenario {
            config: CommitConfig {
                max_in_flight: 16,
                ..CommitConfig::default()
            },
            bugs: CommitBugs::default(),
            objects: 4,
            max_writes: 2,
        }
    }
}

type Checkers = (
    roost_cluster::sim::ViewAgreement,
    roost_cluster::sim::LeaseSafety,
    CommitSafety,
    ReadOnlyRealTime,
);

pub type CommitSimulation = Simulation<SimReplica, CommitFactory, CommitWorkload, Checkers>;

/// Every incarnation is a fresh state machine with an empty store. A node
/// the view excludes drops its copies, so being cut off is a fault like a
/// crash.
pub struct CommitFactory {
    config: CommitConfig,
    bugs: CommitBugs,
}

impl Factory<SimReplica> for CommitFactory {
    fn make(&mut self, node: NodeId, _incarnation: Incarnation) -> SimReplica {
        let commit = ReliableCommit::new(node, self.config.clone(), MemStore::default())
            .expect("validated by the scenario")
            .with_bugs(self.bugs);
        SimReplica::new(commit)
    }

    fn cut_off_loses_data(&self, protocol: &SimReplica) -> bool {
        protocol.commit().in_a_view()
    }
}

impl CommitScenario {
    pub fn simulation(
        &self,
        config: SimConfig,
        seed: u64,
    ) -> Result<CommitSimulation, SimConfigError> {
        Scenario::validate(self)?;
        let (view_agreement, lease_safety) = membership_checkers();
        let factory = CommitFactory {
            config: self.config.clone(),
            bugs: self.bugs,
        };
        let workload = CommitWorkload::new(config.nodes, self.objects, self.max_writes);
        Simulation::new(
            config,
            seed,
            factory,
            workload,
            (
                view_agreement,
                lease_safety,
                CommitSafety::default(),
                ReadOnlyRealTime::default(),
            ),
        )
    }
}

impl Scenario for CommitScenario {
    fn protocol(&self) -> &'static str {
        "commit"
    }

    fn validate(&self) -> Result<(), SimConfigError> {
        let invalid = |reason| SimConfigError::Protocol {
            protocol: "commit",
            reason,
        };
        if self.config.validate().is_err() {
            return Err(invalid("the commit configuration is invalid"));
        }
        if self.objects == 0 || self.objects > 64 {
            return Err(invalid("objects must be 1..=64"));
        }
        if self.max_writes == 0 || self.max_writes > self.objects {
            return Err(invalid("max_writes must be 1..=objects"));
        }
        Ok(())
    }

    fn run(&self, config: &SimConfig, seed: u64, trace: bool) -> Result<SimRun, SimConfigError> {
        Ok(run_simulation(
            self.simulation(config.clone(), seed)?,
            trace,
        ))
    }
}

/// What the clients did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitHistory {
    /// Started transactions, in order, with their writes.
    pub started: Vec<(TxId, Vec<Write>)>,
    /// Committed transactions, in the order reported.
    pub committed: Vec<TxId>,
    pub refused: u64,
    /// Transactions whose coordinator crashed or left the view first.
    pub unknown: u64,
    /// Read-only transactions done, in the order they ran.
    pub reads: Vec<ReadOnlyDone>,
    /// Read-only transactions refused, by why.
    pub reads_refused: ReadsRefused,
}

/// A read-only transaction that returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOnlyDone {
    pub node: NodeId,
    pub at_ms: u64,
    pub values: Vec<ReadValue>,
}

/// Read-only transactions refused, by [`ReadOnlyError`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadsRefused {
    /// No lease (not in the view, or cut off).
    pub not_serving: u64,
    /// An object not held there (a restarted or excluded node).
    pub not_replica: u64,
    /// An object Invalid there (its reliable commit pending).
    pub invalid: u64,
    /// Too many or repeated objects (the workload asks for neither).
    pub malformed: u64,
}

impl ReadsRefused {
    pub fn total(&self) -> u64 {
        self.not_serving + self.not_replica + self.invalid + self.malformed
    }
}

pub struct CommitWorkload {
    nodes: u32,
    objects: u32,
    max_writes: u32,
    /// The highest version issued per object (across incarnations).
    versions: BTreeMap<Key, u64>,
    /// Started, not yet committed, per coordinator.
    in_flight: BTreeMap<NodeId, BTreeSet<TxId>>,
    /// The writes of the command just issued at each node (its `Started`
    /// or `Refused` comes in the same event).
    issued: BTreeMap<NodeId, Vec<Write>>,
    history: CommitHistory,
}

impl CommitWorkload {
    pub fn new(nodes: u32, objects: u32, max_writes: u32) -> Self {
        CommitWorkload {
            nodes,
            objects,
            max_writes,
            versions: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            issued: BTreeMap::new(),
            history: CommitHistory::default(),
        }
    }

    /// A transaction writing 1..=`max_writes` of the client's node's
    /// objects, followed by every other node.
    fn transaction(&mut self, rng: &mut SimRng, client: ClientId) -> SimCmd {
        let count = rng.random_range(1..=self.max_writes);
        let mut picked = BTreeSet::new();
        while picked.len() < count as usize {
            picked.insert(rng.random_range(0..self.objects));
        }
        let writes: Vec<Write> = picked
            .into_iter()
            .map(|i| {
                let key = object_key(client.node, i);
                let version = self.versions.entry(key.clone()).or_insert(0);
                *version += 1;
                let data = format!("{}:{}:{}", client.node.0, i, *version).into_bytes();
                Write {
                    key,
                    version: *version,
                    data,
                }
            })
            .collect();
        let followers = (0..self.nodes)
            .map(NodeId)
            .filter(|f| *f != client.node)
            .collect();
        self.issued.insert(client.node, writes.clone());
        SimCmd::Commit(Transaction { writes, followers })
    }

    /// A read-only transaction over objects the client's node follows
    /// (every node follows every other's, and owns its own): all of one
    /// node's, or two random ones.
    fn read_only(&mut self, rng: &mut SimRng) -> SimCmd {
        let keys = if rng.random_bool(0.5) {
            let node = NodeId(rng.random_range(0..self.nodes));
            (0..self.objects).map(|i| object_key(node, i)).collect()
        } else {
            let all = self.nodes * self.objects;
            let mut picked = BTreeSet::new();
            while picked.len() < 2.min(all as usize) {
                picked.insert(rng.random_range(0..all));
            }
            picked
                .into_iter()
                .map(|o| object_key(NodeId(o / self.objects), o % self.objects))
                .collect()
        };
        SimCmd::ReadOnly { keys }
    }
}

/// The key of object `i` of `node`.
pub fn object_key(node: NodeId, i: u32) -> Key {
    format!("{}/{i}", node.0).into_bytes()
}

impl Workload<SimReplica> for CommitWorkload {
    type History = CommitHistory;

    fn next_command(&mut self, rng: &mut SimRng, _now_ms: u64, client: ClientId) -> Option<SimCmd> {
        // Half the attempts read: reads are local and cheap, and each one
        // is a probe of real-time order at a random node.
        if rng.random_bool(0.5) {
            Some(self.read_only(rng))
        } else {
            Some(self.transaction(rng, client))
        }
    }

    fn on_output(&mut self, node: NodeId, now_ms: u64, _cause: Cause, out: &SimOut) {
        let out = match out {
            SimOut::Commit(out) => out,
            SimOut::ReadOnly { result: Ok(values) } => {
                self.history.reads.push(ReadOnlyDone {
                    node,
                    at_ms: now_ms,
                    values: values.clone(),
                });
                return;
            }
            SimOut::ReadOnly { result: Err(error) } => {
                let refused = &mut self.history.reads_refused;
                match error {
                    ReadOnlyError::NotServing => refused.not_serving += 1,
                    ReadOnlyError::NotReplica { .. } => refused.not_replica += 1,
                    ReadOnlyError::Invalid { .. } => refused.invalid += 1,
                    ReadOnlyError::TooManyKeys { .. } | ReadOnlyError::DuplicateKey => {
                        refused.malformed += 1
                    }
                }
                return;
            }
        };
        match out {
            CommitOut::Started { tx_id } => {
                self.in_flight.entry(node).or_default().insert(*tx_id);
                let writes = self.issued.remove(&node).unwrap_or_default();
                self.history.started.push((*tx_id, writes));
            }
            CommitOut::Committed { tx_id } => {
                if let Some(s) = self.in_flight.get_mut(&node) {
                    s.remove(tx_id);
                }
                self.history.committed.push(*tx_id);
            }
            CommitOut::Refused { .. } => {
                self.issued.remove(&node);
                self.history.refused += 1;
            }
            CommitOut::Unknown { tx_id } => {
                if let Some(s) = self.in_flight.get_mut(&node) {
                    s.remove(tx_id);
                }
                self.history.unknown += 1;
            }
            CommitOut::Applied { .. } | CommitOut::Recovered { .. } => {}
        }
    }

    fn on_crash(&mut self, node: NodeId, _now_ms: u64) {
        if let Some(s) = self.in_flight.remove(&node) {
            self.history.unknown += s.len() as u64;
        }
    }

    fn history(&self) -> &CommitHistory {
        &self.history
    }

    /// Transactions and read-only transactions together: completed is
    /// those committed and the reads done, rejected those refused.
    fn stats(&self) -> WorkloadStats {
        WorkloadStats {
            completed: self.history.committed.len() as u64 + self.history.reads.len() as u64,
            unknown: self.history.unknown,
            rejected: self.history.refused + self.history.reads_refused.total(),
        }
    }
}

/// What a started transaction promised: its writes and followers.
#[derive(Debug, Clone)]
struct Promise {
    writes: Vec<(Key, u64)>,
    epoch: EpochId,
    /// The coordinator's view members (with incarnations) at the start.
    followers: BTreeMap<NodeId, Incarnation>,
}

/// The checker "every committed transaction's writes are at every live
/// follower", when it is reported and at the end.
#[derive(Debug, Default)]
pub struct CommitSafety {
    started_seen: usize,
    committed_seen: usize,
    promises: BTreeMap<TxId, Promise>,
    /// Follower, incarnation, from which epoch, key, version.
    obligations: Vec<(NodeId, Incarnation, EpochId, Key, u64)>,
    /// Started, not committed, and their coordinator (this incarnation) in
    /// every view since the start: nobody replays them, so none of their
    /// writes may be Valid anywhere yet.
    unfinished: BTreeMap<TxId, (Incarnation, Vec<(Key, u64)>)>,
    /// Their writes, by key and version.
    unfinished_writes: BTreeMap<Key, BTreeMap<u64, TxId>>,
    /// The views up to this epoch were checked for `unfinished`.
    views_checked: EpochId,
    /// Per node incarnation, its `validated` count when its store was
    /// last checked against `unfinished` (an object turns Valid only
    /// through a counted validation).
    validations_seen: BTreeMap<(NodeId, Incarnation), u64>,
}

impl CommitSafety {
    fn slot_store<'a>(
        world: &'a World<'_, SimReplica>,
        id: NodeId,
        incarnation: Incarnation,
    ) -> Option<&'a ReliableCommit<MemStore>> {
        let slot = world.nodes.iter().find(|s| s.id() == id)?;
        if slot.incarnation() != incarnation {
            return None;
        }
        slot.node().map(|n| n.app().commit())
    }
}

impl CommitSafety {
    /// No node holds a write of an unfinished transaction Valid: a
    /// follower marks a version Valid only on the R-VAL of its own
    /// transaction (or a later one of the pipeline), never while its
    /// R-INV is still pending.
    fn check_unfinished(&mut self, world: &World<'_, SimReplica>) -> Result<(), Violation> {
        use std::ops::Bound::{Excluded, Unbounded};
        // A view without the coordinator's incarnation: the others may
        // replay (and validate) its transactions from then on.
        for (epoch, view) in world.views.range((Excluded(self.views_checked), Unbounded)) {
            let gone: Vec<TxId> = self
                .unfinished
                .iter()
                .filter(|(tx_id, (inc, _))| view.members.get(&tx_id.node) != Some(inc))
                .map(|(tx_id, _)| *tx_id)
                .collect();
            for tx_id in gone {
                self.finished(&tx_id);
            }
            self.views_checked = *epoch;
        }
        for slot in world.nodes {
            let Some(node) = slot.node() else { continue };
            let validated = node.app().commit().stats().validated;
            let seen = self
                .validations_seen
                .insert((slot.id(), slot.incarnation()), validated);
            if seen == Some(validated) {
                continue; // nothing turned Valid there since
            }
            for (key, versions) in &self.unfinished_writes {
                let Some(o) = node.app().commit().store().get(key) else {
                    continue;
                };
                if o.state != ObjectState::Valid {
                    continue;
                }
                if let Some(tx_id) = versions.get(&o.version) {
                    return Err(Violation::new(
                        "followers validate only committed writes",
                        world.now_ms,
                        format!(
                            "{} holds {key:?} v{} Valid, but {tx_id} is not committed",
                            slot.id(),
                            o.version
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    fn track(&mut self, tx_id: TxId, coordinator: Incarnation, writes: Vec<(Key, u64)>) {
        for (key, version) in &writes {
            self.unfinished_writes
                .entry(key.clone())
                .or_default()
                .insert(*version, tx_id);
        }
        self.unfinished.insert(tx_id, (coordinator, writes));
    }

    /// Committed, or its coordinator left a view: no longer checked.
    fn finished(&mut self, tx_id: &TxId) {
        let Some((_, writes)) = self.unfinished.remove(tx_id) else {
            return;
        };
        for (key, version) in writes {
            if let Some(versions) = self.unfinished_writes.get_mut(&key) {
                versions.remove(&version);
                if versions.is_empty() {
                    self.unfinished_writes.remove(&key);
                }
            }
        }
    }
}

impl Checker<SimReplica, CommitHistory> for CommitSafety {
    fn after_event(
        &mut self,
        world: &World<'_, SimReplica>,
        history: &CommitHistory,
    ) -> Result<(), Violation> {
        for (tx_id, writes) in &history.started[self.started_seen..] {
            let Some(slot) = world.nodes.iter().find(|s| s.id() == tx_id.node) else {
                continue;
            };
            let Some(node) = slot.node() else { continue };
            let view = node.membership().view();
            let writes: Vec<(Key, u64)> =
                writes.iter().map(|w| (w.key.clone(), w.version)).collect();
            let coordinator = slot.incarnation();
            if world
                .views
                .range(view.epoch..)
                .all(|(_, v)| v.members.get(&tx_id.node) == Some(&coordinator))
            {
                self.track(*tx_id, coordinator, writes.clone());
            }
            let followers = view
                .members
                .iter()
                .filter(|(id, _)| **id != tx_id.node)
                .map(|(id, inc)| (*id, *inc))
                .collect();
            self.promises.insert(
                *tx_id,
                Promise {
                    writes,
                    epoch: view.epoch,
                    followers,
                },
            );
        }
        self.started_seen = history.started.len();
        for tx_id in &history.committed[self.committed_seen..] {
            self.finished(tx_id);
            let Some(promise) = self.promises.remove(tx_id) else {
                continue;
            };
            let Some(slot) = world.nodes.iter().find(|s| s.id() == tx_id.node) else {
                continue;
            };
            let Some(node) = slot.node() else { continue };
            let view = node.membership().view();
            let latest = world.views.values().next_back();
            for (f, inc) in &promise.followers {
                if view.members.get(f) != Some(inc) {
                    continue; // dropped from the transaction by a view change
                }
                if latest.is_some_and(|v| v.members.get(f) != Some(inc)) {
                    // Out of a newer view the coordinator has not installed
                    // yet: it acked in the old one, and dropped its copies
                    // since (it is no follower any more).
                    continue;
                }
                let stayed = world
                    .views
                    .range(promise.epoch..)
                    .all(|(_, v)| v.members.get(f) == Some(inc));
                if !stayed {
                    // Cut off in a view between and back in with the same
                    // incarnation: it dropped its copies when the view
                    // excluded it and the coordinator dropped it as a
                    // follower (5-node seed 8); a node back in the view is
                    // brought up to date by ownership, not by this commit.
                    continue;
                }
                for (key, version) in &promise.writes {
                    let Some(app) = Self::slot_store(world, *f, *inc) else {
                        continue;
                    };
                    let held = app.store().version(key);
                    if held.is_none_or(|v| v < *version) {
                        return Err(Violation::new(
                            "committed writes are at every follower",
                            world.now_ms,
                            format!("{tx_id}: follower {f} holds {held:?} of {key:?} < {version}"),
                        ));
                    }
                    self.obligations
                        .push((*f, *inc, promise.epoch, key.clone(), *version));
                }
            }
        }
        self.committed_seen = history.committed.len();
        self.check_unfinished(world)
    }

    fn at_end(
        &mut self,
        world: &World<'_, SimReplica>,
        _history: &CommitHistory,
    ) -> Result<(), Violation> {
        // Only once the membership settled too (`World::settled_view`).
        if world.settled_view().is_none() {
            return Ok(());
        }
        let stuck = |detail: String| {
            Err(Violation::new(
                "settles after the quiet tail",
                world.now_ms,
                detail,
            ))
        };
        for (f, inc, since, key, version) in &self.obligations {
            // A follower cut off (or restarted) since holds nothing.
            let stayed = world
                .views
                .range(*since..)
                .all(|(_, v)| v.members.get(f) == Some(inc));
            if !stayed {
                continue;
            }
            let Some(app) = Self::slot_store(world, *f, *inc) else {
                continue;
            };
            let held = app.store().version(key);
            if held.is_none_or(|v| v < *version) {
                return stuck(format!(
                    "follower {f} holds {held:?} of {key:?} < {version}"
                ));
            }
        }
        for slot in world.nodes {
            let Some(node) = slot.node() else { continue };
            let app = node.app().commit();
            if app.in_flight() + app.stored() + app.replaying() > 0 {
                return stuck(format!(
                    "{}: in flight {}, stored {}, replaying {}",
                    slot.id(),
                    app.in_flight(),
                    app.stored(),
                    app.replaying()
                ));
            }
            for (key, o) in &app.store().objects {
                if o.state != ObjectState::Valid {
                    return stuck(format!("{}: {key:?} invalid at {}", slot.id(), o.version));
                }
            }
        }
        Ok(())
    }
}

/// How the newest version of an object was first observed by a client.
#[derive(Debug, Clone, Copy)]
enum Seen {
    Read { node: NodeId, at_ms: u64 },
    Committed { tx_id: TxId, at_ms: u64 },
}

impl std::fmt::Display for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Seen::Read { node, at_ms } => write!(f, "read at {node} at {at_ms} ms"),
            Seen::Committed { tx_id, at_ms } => {
                write!(f, "reported committed by {tx_id} at {at_ms} ms")
            }
        }
    }
}

/// The checker "read-only transactions respect real time" (strict
/// serializability of reads, Zeus §6): once a read-only transaction
/// returned version v of an object, or a client was told that a
/// transaction writing v committed, every read-only transaction that
/// starts later, at any node, returns v or a newer version. Reads run
/// whole within one event, so the history's order is real-time order.
/// And every read returns the data written with the version it names.
///
/// Sound for the correct protocol: a reader reads only Valid objects,
/// while holding the lease of its view. Committed (or Valid anywhere)
/// means every follower of the coordinator's view holds the version (or a
/// newer one); a node that was not in that view holds nothing of the
/// object (a restarted node starts empty; a node the view excluded
/// dropped its copies; a node cut off but not told holds no lease once
/// the others moved on), and a replay of a slot issued before a node's
/// state began installs nothing new there ([`crate::RInv::origin`]: that
/// rule came from this checker, 5-node seed 50123).
#[derive(Debug, Default)]
pub struct ReadOnlyRealTime {
    started_seen: usize,
    committed_seen: usize,
    reads_seen: usize,
    /// The writes of started transactions not yet reported committed.
    uncommitted: BTreeMap<TxId, Vec<(Key, u64)>>,
    /// The data written with each version of each object.
    written: BTreeMap<Key, BTreeMap<u64, Vec<u8>>>,
    /// The newest version of each object a client observed, and how.
    observed: BTreeMap<Key, (u64, Seen)>,
}

impl ReadOnlyRealTime {
    fn observe(&mut self, key: &Key, version: u64, seen: Seen) {
        match self.observed.get_mut(key) {
            Some((v, s)) if *v < version => (*v, *s) = (version, seen),
            Some(_) => {}
            None => {
                self.observed.insert(key.clone(), (version, seen));
            }
        }
        debug_assert!(self.observed.get(key).is_some_and(|(v, _)| *v >= version));
    }

    fn check_read(&mut self, now_ms: u64, read: &ReadOnlyDone) -> Result<(), Violation> {
        for value in &read.values {
            let data = self
                .written
                .get(&value.key)
                .and_then(|versions| versions.get(&value.version));
            if data != Some(&value.data) {
                return Err(Violation::new(
                    "read-only transactions read written data",
                    now_ms,
                    format!(
                        "{} read {} v{} = {:?}, written: {:?}",
                        read.node,
                        String::from_utf8_lossy(&value.key),
                        value.version,
                        String::from_utf8_lossy(&value.data),
                        data.map(|d| String::from_utf8_lossy(d).into_owned())
                    ),
                ));
            }
            if let Some((newest, seen)) = self.observed.get(&value.key) {
                if value.version < *newest {
                    return Err(Violation::new(
                        "read-only transactions respect real time",
                        now_ms,
                        format!(
                            "{} read {} v{} at {} ms, after v{newest} was {seen}",
                            read.node,
                            String::from_utf8_lossy(&value.key),
                            value.version,
                            read.at_ms
                        ),
                    ));
                }
            }
        }
        for value in &read.values {
            let seen = Seen::Read {
                node: read.node,
                at_ms: read.at_ms,
            };
            self.observe(&value.key, value.version, seen);
        }
        Ok(())
    }
}

impl Checker<SimReplica, CommitHistory> for ReadOnlyRealTime {
    fn after_event(
        &mut self,
        world: &World<'_, SimReplica>,
        history: &CommitHistory,
    ) -> Result<(), Violation> {
        for (tx_id, writes) in &history.started[self.started_seen..] {
            for w in writes {
                self.written
                    .entry(w.key.clone())
                    .or_default()
                    .insert(w.version, w.data.clone());
            }
            let writes = writes.iter().map(|w| (w.key.clone(), w.version)).collect();
            self.uncommitted.insert(*tx_id, writes);
        }
        self.started_seen = history.started.len();
        // An event is a message, a timer or a command: its commits and its
        // reads do not come together (and a commit told in the same event
        // as a read would come first).
        for tx_id in &history.committed[self.committed_seen..] {
            let Some(writes) = self.uncommitted.remove(tx_id) else {
                continue;
            };
            let seen = Seen::Committed {
                tx_id: *tx_id,
                at_ms: world.now_ms,
            };
            for (key, version) in &writes {
                self.observe(key, *version, seen);
            }
        }
        self.committed_seen = history.committed.len();
        for read in &history.reads[self.reads_seen..] {
            self.check_read(world.now_ms, read)?;
        }
        self.reads_seen = history.reads.len();
        Ok(())
    }
}

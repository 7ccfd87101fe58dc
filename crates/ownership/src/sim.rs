//! The ownership protocol under the cluster's deterministic simulator
//! (`roost_cluster::sim`): the same state machine, driven with message loss,
//! duplication, reordering, crashes, restarts and partitions, and membership
//! changes from the real membership protocol.
//!
//! * [`OwnershipWorkload`]: every client of every node creates its objects
//!   once, then keeps asking to own a random one (change-owner, sometimes
//!   add-reader), one request at a time, each tagged by a request id;
//! * [`OwnershipSafety`], after every event: at most one owner per object
//!   among serving nodes; the owner holds the object's data as created (the
//!   simulation writes nothing else, so any other copy is a corruption);
//!   the valid arbiters of the latest view agree on `o_ts` and `o_replicas`.
//!   At the end, after the quiet tail (no faults, no new commands): no node
//!   of the latest view holds an arbitration or a request, its directory
//!   replicas know every created object, and an object whose owner is live
//!   has exactly that owner.
//!
//! `roost sim --protocol ownership` runs it by seed.

use std::collections::{BTreeMap, BTreeSet};

use rand::Rng;
use roost_cluster::sim::{
    membership_checkers, run_simulation, Cause, Checker, ClientId, Factory, Scenario, SimConfig,
    SimConfigError, SimRng, SimRun, Simulation, Violation, Workload, WorkloadStats, World,
};
use roost_cluster::{Incarnation, NodeId};

use crate::config::{OwnershipBugs, OwnershipConfig};
use crate::key::directory;
use crate::meta::{OState, ReqId, RequestKind};
use crate::msg::NackReason;
use crate::ownership::{FailReason, Ownership, OwnershipCmd, OwnershipOut};
use crate::store::{MemStore, ObjectData};

/// The protocol as simulated: objects keyed by `u64`, held in memory.
pub type SimOwnership = Ownership<u64, MemStore<u64>>;

/// Objects one simulation moves around at most.
pub const MAX_SIM_OBJECTS: u64 = 64;

/// The contents object `key` is created with (and, since the simulation
/// writes nothing, keeps): a checker recomputes it from the key.
pub fn created_data(key: u64) -> ObjectData {
    ObjectData::new(1, key.to_le_bytes().repeat(3))
}

/// The ownership protocol's settings in a simulation.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnershipScenario {
    pub config: OwnershipConfig,
    pub bugs: OwnershipBugs,
    /// Objects, each created by node `key % nodes`.
    pub objects: u64,
    /// Probability that a request is add-reader rather than change-owner.
    pub reader_probability: f64,
    /// Raise `config.directory_replicas` to a majority of the nodes. The
    /// simulator takes up to a minority out of the view at once, and a
    /// directory replica that rejoins knows nothing (there is no directory
    /// re-replication yet), so an object whose replicas were all out at
    /// once has lost its directory: a stale arbitration replayed into the
    /// empty replicas then wins (5 nodes, 2 replicas: seed 1522). A majority
    /// of replicas always meets every view. 3 nodes keep their 2 replicas.
    pub majority_directory: bool,
}

impl Default for OwnershipScenario {
    fn default() -> Self {
        OwnershipScenario {
            config: OwnershipConfig {
                directory_replicas: 2,
                ..OwnershipConfig::default()
            },
            bugs: OwnershipBugs::default(),
            objects: 4,
            reader_probability: 0.2,
            majority_directory: true,
        }
    }
}

type Checkers = (
    roost_cluster::sim::ViewAgreement,
    roost_cluster::sim::LeaseSafety,
    OwnershipSafety,
);

/// A built simulation of the ownership protocol.
pub type OwnershipSimulation =
    Simulation<SimOwnership, OwnershipFactory, OwnershipWorkload, Checkers>;

/// Makes every incarnation a fresh state machine. A node the view excluded
/// has dropped what it held (its directory replicas' metadata too), so for
/// the simulator's fault model it is down, and being cut off is a fault
/// like a crash: a majority of directory replicas can then always meet
/// every view with what they know. (Partitions beyond it take the metadata
/// of every replica of an object at once, with nothing left to rebuild it
/// from: 5-node seed 116, two replicas crashed and the third cut off.)
pub struct OwnershipFactory {
    config: OwnershipConfig,
    bugs: OwnershipBugs,
}

impl Factory<SimOwnership> for OwnershipFactory {
    fn make(&mut self, node: NodeId, _incarnation: Incarnation) -> SimOwnership {
        Ownership::new(node, self.config.clone(), self.bugs, MemStore::new())
            .expect("validated by the scenario")
    }

    fn ready(&self, protocol: &SimOwnership) -> bool {
        !protocol.left_the_view()
    }

    fn cut_off_loses_data(&self, protocol: &SimOwnership) -> bool {
        // Before its first view a node holds nothing to lose.
        protocol.in_a_view()
    }
}

impl OwnershipScenario {
    pub fn simulation(
        &self,
        config: SimConfig,
        seed: u64,
    ) -> Result<OwnershipSimulation, SimConfigError> {
        Scenario::validate(self)?;
        let nodes = config.nodes;
        let (view_agreement, lease_safety) = membership_checkers();
        let mut own = self.config.clone();
        if self.majority_directory {
            let majority = nodes as usize / 2 + 1;
            own.directory_replicas = own.directory_replicas.max(majority);
        }
        let replicas = own.directory_replicas;
        let factory = OwnershipFactory {
            config: own,
            bugs: self.bugs,
        };
        let all: Vec<NodeId> = (0..nodes).map(NodeId).collect();
        let checker = OwnershipSafety {
            directories: (0..self.objects)
                .map(|key| {
                    let dir = directory(&key, &all, replicas);
                    (key, dir.into_iter().collect())
                })
                .collect(),
            holders: BTreeMap::new(),
            creations_checked: 0,
        };
        Simulation::new(
            config,
            seed,
            factory,
            OwnershipWorkload::new(self.objects, nodes, self.reader_probability),
            (view_agreement, lease_safety, checker),
        )
    }
}

impl Scenario for OwnershipScenario {
    fn protocol(&self) -> &'static str {
        "ownership"
    }

    fn validate(&self) -> Result<(), SimConfigError> {
        let invalid = |reason| SimConfigError::Protocol {
            protocol: "ownership",
            reason,
        };
        if self.config.validate().is_err() {
            return Err(invalid("the ownership configuration is invalid"));
        }
        if self.objects == 0 || self.objects > MAX_SIM_OBJECTS {
            return Err(invalid("objects must be 1..=64"));
        }
        if !(0.0..=1.0).contains(&self.reader_probability) {
            return Err(invalid("reader_probability is not a probability"));
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

/// What the clients did: answers by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnershipHistory {
    pub acquired: u64,
    pub failed: u64,
    pub late_wins: u64,
    /// Requests whose node crashed before answering.
    pub lost: u64,
    /// Objects whose create took effect (only their requests are issued).
    pub created: BTreeSet<u64>,
    /// Creates that succeeded for objects created before, in order (a
    /// restarted node creating its home objects again, as `roost node`
    /// does). Allowed only for an object lost with every node that held it;
    /// else a second creation, which would replace live rows with empty ones.
    pub created_again: Vec<u64>,
}

pub struct OwnershipWorkload {
    objects: u64,
    nodes: u32,
    reader_probability: f64,
    next_req: u64,
    /// Request id to the client waiting for it (one request per client).
    waiting: BTreeMap<u64, ClientId>,
    /// Creates in flight, by request id (a failed one is issued again).
    creating: BTreeMap<u64, u64>,
    /// Nodes that restarted, and the next of their home objects they
    /// create again: a restarted `roost node` cannot tell a restart from a
    /// first start, so it creates its home reactors again and expects
    /// `AlreadyExists` for those that exist.
    recreating: BTreeMap<NodeId, u64>,
    history: OwnershipHistory,
}

impl OwnershipWorkload {
    pub fn new(objects: u64, nodes: u32, reader_probability: f64) -> Self {
        assert!(objects > 0 && nodes > 0, "validated by the scenario");
        OwnershipWorkload {
            objects,
            nodes,
            reader_probability,
            next_req: 1,
            waiting: BTreeMap::new(),
            creating: BTreeMap::new(),
            recreating: BTreeMap::new(),
            history: OwnershipHistory::default(),
        }
    }

    /// `client` waits for an answer (clients are few: a scan is enough).
    fn is_waiting(&self, client: ClientId) -> bool {
        self.waiting.values().any(|&c| c == client)
    }

    /// A create of `key` was answered: its home node's re-creation (if
    /// it restarted) goes on with the next object.
    fn recreated(&mut self, key: u64) {
        let home = NodeId((key % u64::from(self.nodes)) as u32);
        if let Some(next) = self.recreating.get_mut(&home) {
            if *next <= key {
                *next = key + 1;
            }
        }
    }

    /// `client`'s create of `key`, remembered until it is answered.
    fn create(&mut self, client: ClientId, key: u64) -> OwnershipCmd<u64> {
        let req = self.tag(client);
        self.creating.insert(req.0, key);
        OwnershipCmd::Create {
            key,
            req,
            data: created_data(key),
        }
    }

    fn tag(&mut self, client: ClientId) -> ReqId {
        debug_assert!(!self.is_waiting(client), "one request per client");
        let req = ReqId(self.next_req);
        self.next_req += 1;
        self.waiting.insert(req.0, client);
        req
    }
}

impl Workload<SimOwnership> for OwnershipWorkload {
    type History = OwnershipHistory;

    fn next_command(
        &mut self,
        rng: &mut SimRng,
        _now_ms: u64,
        client: ClientId,
    ) -> Option<OwnershipCmd<u64>> {
        if self.is_waiting(client) {
            return None;
        }
        // The creating node's first client creates each of its objects once.
        if client.index == 0 {
            let mine = |k: &u64| k % u64::from(self.nodes) == u64::from(client.node.0);
            if let Some(&from) = self.recreating.get(&client.node) {
                let again = (from..self.objects).find(|k| mine(k));
                match again {
                    Some(key) => {
                        // The cursor moves on once the create is answered
                        // (`on_output`): a node not serving yet retries.
                        return Some(self.create(client, key));
                    }
                    None => {
                        self.recreating.remove(&client.node);
                    }
                }
            }
            let uncreated = (0..self.objects).find(|k| {
                mine(k)
                    && !self.history.created.contains(k)
                    && !self.creating.values().any(|c| c == k)
            });
            if let Some(key) = uncreated {
                return Some(self.create(client, key));
            }
        }
        let key = rng.random_range(0..self.objects);
        if !self.history.created.contains(&key) {
            return None;
        }
        let kind = if rng.random_bool(self.reader_probability) {
            RequestKind::AddReader
        } else {
            RequestKind::ChangeOwner
        };
        let req = self.tag(client);
        Some(OwnershipCmd::Acquire { key, req, kind })
    }

    fn on_output(&mut self, _node: NodeId, _now_ms: u64, _cause: Cause, out: &OwnershipOut<u64>) {
        let req = match out {
            OwnershipOut::Acquired { req, .. } => {
                self.history.acquired += 1;
                if let Some(key) = self.creating.remove(&req.0) {
                    if !self.history.created.insert(key) {
                        self.history.created_again.push(key);
                    }
                    self.recreated(key);
                }
                *req
            }
            OwnershipOut::Failed { req, reason, .. } => {
                self.history.failed += 1;
                if let Some(key) = self.creating.remove(&req.0) {
                    let exists = matches!(
                        reason,
                        FailReason::AlreadyExists | FailReason::Nacked(NackReason::AlreadyExists)
                    );
                    if exists {
                        self.history.created.insert(key);
                        self.recreated(key);
                    }
                }
                *req
            }
            OwnershipOut::LateWin { .. } => {
                self.history.late_wins += 1;
                return;
            }
            OwnershipOut::Inspected { req, .. } | OwnershipOut::Described { req, .. } => *req,
        };
        self.waiting.remove(&req.0);
    }

    fn on_crash(&mut self, node: NodeId, _now_ms: u64) {
        let lost: Vec<u64> = self
            .waiting
            .iter()
            .filter(|(_, c)| c.node == node)
            .map(|(&r, _)| r)
            .collect();
        for req in lost {
            self.waiting.remove(&req).expect("listed above");
            // A create lost with its node may or may not have taken effect:
            // issuing it again is answered AlreadyExists if it did.
            self.creating.remove(&req);
            self.history.lost += 1;
        }
        self.recreating.insert(node, 0);
    }

    fn history(&self) -> &OwnershipHistory {
        &self.history
    }

    fn stats(&self) -> WorkloadStats {
        WorkloadStats {
            completed: self.history.acquired,
            unknown: self.history.lost,
            rejected: self.history.failed,
        }
    }
}

/// The ownership invariants of the seed's TLA+ spec that hold at every
/// instant (AT_MOST_ONE_OWNER, OWNER_LATEST_DATA, CONSISTENT_SHARERS), and
/// at the end of a settled run what a quiet cluster must have reached.
pub struct OwnershipSafety {
    /// Each object's directory replicas.
    directories: BTreeMap<u64, BTreeSet<NodeId>>,
    /// The members of the latest view holding each object's data after the
    /// last event.
    holders: BTreeMap<u64, BTreeSet<NodeId>>,
    /// `created_again` entries checked so far.
    creations_checked: usize,
}

impl Checker<SimOwnership, OwnershipHistory> for OwnershipSafety {
    fn after_event(
        &mut self,
        world: &World<'_, SimOwnership>,
        history: &OwnershipHistory,
    ) -> Result<(), Violation> {
        let Some((&latest_epoch, latest)) = world.views.iter().next_back() else {
            return Ok(());
        };
        // A create that succeeded for an object that some member of the
        // latest view held just before this event.
        for &key in &history.created_again[self.creations_checked..] {
            if let Some(holders) = self.holders.get(&key).filter(|h| !h.is_empty()) {
                return Err(Violation::new(
                    "an object is created once",
                    world.now_ms,
                    format!("object {key}: created again while {holders:?} held it"),
                ));
            }
        }
        self.creations_checked = history.created_again.len();
        self.holders.clear();
        for slot in world.nodes {
            let Some(node) = slot.node() else { continue };
            if node.epoch() != latest_epoch || !latest.contains(slot.id(), slot.incarnation()) {
                continue;
            }
            for &key in self.directories.keys() {
                // Rows kept by a node that no longer counts itself a
                // replica (it left the view and came back) are no copy.
                let store = node.app().store();
                if store.get(&key).is_some() && store.access.contains_key(&key) {
                    self.holders.entry(key).or_default().insert(slot.id());
                }
            }
        }
        for (&key, replicas) in &self.directories {
            let mut owners = Vec::new();
            let mut valid_views = BTreeSet::new();
            for slot in world.nodes {
                let Some(node) = slot.node() else { continue };
                let app = node.app();
                if app.is_owner(&key) {
                    // A node cut off from the view may still think it owns
                    // the object; it cannot serve (lease safety), so only
                    // serving owners count.
                    if node.serving(world.now_ms) {
                        owners.push(slot.id());
                    }
                    let held = app.store().get(&key);
                    if held != Some(&created_data(key)) {
                        return Err(Violation::new(
                            "owner holds the latest data",
                            world.now_ms,
                            format!("object {key}: owner {} holds {held:?}", slot.id()),
                        ));
                    }
                }
                let current =
                    node.epoch() == latest_epoch && latest.contains(slot.id(), slot.incarnation());
                let Some(meta) = app.meta(&key) else { continue };
                let arbiter =
                    replicas.contains(&slot.id()) || meta.o_replicas.owner == Some(slot.id());
                if current && arbiter && meta.o_state == OState::Valid {
                    let mut vector = meta.o_replicas.clone();
                    vector.retain_live(|n| latest.members.contains_key(&n));
                    valid_views.insert((meta.o_ts, vector));
                }
            }
            if owners.len() > 1 {
                return Err(Violation::new(
                    "at most one owner",
                    world.now_ms,
                    format!("object {key}: owners {owners:?}"),
                ));
            }
            if valid_views.len() > 1 {
                return Err(Violation::new(
                    "valid arbiters agree",
                    world.now_ms,
                    format!("object {key}: {valid_views:?}"),
                ));
            }
        }
        Ok(())
    }

    /// After the quiet tail: every arbitration finished and every request
    /// answered at the nodes of the latest view, every created object known
    /// to its directory replicas there, and one that names a live owner
    /// owned by exactly that node.
    fn at_end(
        &mut self,
        world: &World<'_, SimOwnership>,
        history: &OwnershipHistory,
    ) -> Result<(), Violation> {
        // Only once the membership settled too (`World::settled_view`).
        let Some((latest_epoch, latest)) = world.settled_view() else {
            return Ok(());
        };
        let stuck = |detail: String| {
            Err(Violation::new(
                "settles after the quiet tail",
                world.now_ms,
                detail,
            ))
        };
        // The nodes of the latest view that installed it (a node that has
        // not is the membership's business).
        let current: BTreeMap<NodeId, &roost_cluster::Node<SimOwnership>> = world
            .nodes
            .iter()
            .filter_map(|slot| {
                let node = slot.node()?;
                let member = latest.contains(slot.id(), slot.incarnation());
                (member && node.epoch() == latest_epoch).then_some((slot.id(), node))
            })
            .collect();
        for (&id, node) in &current {
            let report = node.app().inspect();
            if report.blocked_total > 0 {
                return stuck(format!(
                    "{id} still holds arbitrations of {:?}",
                    report.blocked
                ));
            }
            if report.pending_requests > 0 {
                return stuck(format!(
                    "{id} still has {} requests pending",
                    report.pending_requests
                ));
            }
            for (key, meta) in node.app().metas() {
                if meta.o_state != OState::Valid {
                    return stuck(format!("{id} is {:?} for object {key}", meta.o_state));
                }
            }
        }
        for &key in &history.created {
            let Some(replicas) = self.directories.get(&key) else {
                continue;
            };
            let owners: Vec<NodeId> = current
                .iter()
                .filter(|(_, node)| node.app().is_owner(&key) && node.serving(world.now_ms))
                .map(|(&id, _)| id)
                .collect();
            // What the directory replicas there say (they agree: checked
            // after every event), and which of them forgot the object (all
            // of them may have, with no owner left to teach them: its rows
            // are then only with readers, which the directory cannot use).
            let mut named = BTreeSet::new();
            let mut forgot = Vec::new();
            for id in replicas.iter().filter(|id| current.contains_key(id)) {
                match current[id].app().meta(&key) {
                    Some(meta) => {
                        named.insert(meta.o_replicas.owner);
                    }
                    None => forgot.push(*id),
                }
            }
            match owners[..] {
                [] => {
                    if let Some(&Some(owner)) = named
                        .iter()
                        .find(|o| o.is_some_and(|o| current.contains_key(&o)))
                    {
                        return stuck(format!(
                            "object {key}: the directory names {owner} its owner, which does not own it"
                        ));
                    }
                }
                [owner] => {
                    if !forgot.is_empty() {
                        return stuck(format!(
                            "object {key}: its owner {owner} is live, directory replicas {forgot:?} do not know it"
                        ));
                    }
                    if named != BTreeSet::from([Some(owner)]) {
                        return stuck(format!(
                            "object {key}: owned by {owner}, the directory names {named:?}"
                        ));
                    }
                }
                _ => return stuck(format!("object {key}: owners {owners:?}")),
            }
        }
        Ok(())
    }
}

//! Zeus composed, under the cluster's deterministic simulator: ownership
//! and the reliable commit moving and replicating the same objects, with
//! message loss, duplication, reordering, crashes, restarts, partitions,
//! and views from the real membership protocol.
//!
//! * [`ZeusWorkload`]: clients on every node write one or two random
//!   objects (which moves them to the client's node) or read one or two,
//!   locally; each write's data names the transaction and its whole write
//!   set ([`WriteRecord`]).
//! * [`ZeusSafety`], after every event, over the nodes of the latest view:
//!   at most one serving owner per object; the owner holds the highest
//!   version of its object; Valid copies of an object hold one version;
//!   no acknowledged write is lost (some such node holds its version or a
//!   later one); a version is written by one transaction only.
//!   Read-only transactions are checked as they return: never older than
//!   a version acknowledged or read before (real time), and never part of
//!   a transaction (a transaction whose write to one object was read is
//!   read whole on the other objects read). At the end of a settled run:
//!   one owner per object, every node holds every object at one version,
//!   Valid, at least the acknowledged one, and nothing is in flight.
//!
//! `roost sim --protocol zeus` runs it by seed.

use std::collections::{BTreeMap, BTreeSet};

use rand::Rng;
use roost_cluster::sim::{
    membership_checkers, run_simulation, Cause, Checker, ClientId, Factory, Scenario, SimConfig,
    SimConfigError, SimRng, SimRun, Simulation, Violation, Workload, WorkloadStats, World,
};
use roost_cluster::{Incarnation, NodeId};
use roost_commit::{CommitBugs, CommitConfig, ObjectState};
use roost_ownership::{Access, OwnershipBugs, OwnershipConfig};

use crate::replica::{
    Object, Refusal, WriteRecord, ZeusBugs, ZeusCmd, ZeusConfig, ZeusOut, ZeusReplica,
};

/// Objects one simulation uses at most.
pub const MAX_SIM_OBJECTS: u64 = 32;

/// The composed protocol's settings in a simulation.
#[derive(Debug, Clone)]
pub struct ZeusScenario {
    pub ownership: OwnershipConfig,
    pub commit: CommitConfig,
    pub ownership_bugs: OwnershipBugs,
    pub commit_bugs: CommitBugs,
    pub bugs: ZeusBugs,
    pub objects: u64,
    /// Probability that a client's transaction is a read.
    pub read_probability: f64,
    /// No faults before this virtual time (at most the run's duration):
    /// the objects are created and replicated to every node first. Until
    /// then a node may hold the only copy of an object, and cutting it off
    /// would lose the object by design (replicas are in memory).
    pub warmup_ms: u64,
}

impl Default for ZeusScenario {
    fn default() -> Self {
        ZeusScenario {
            ownership: OwnershipConfig {
                directory_replicas: 2,
                ..OwnershipConfig::default()
            },
            commit: CommitConfig {
                max_in_flight: 16,
                ..CommitConfig::default()
            },
            ownership_bugs: OwnershipBugs::default(),
            commit_bugs: CommitBugs::default(),
            bugs: ZeusBugs::default(),
            objects: 4,
            read_probability: 0.4,
            warmup_ms: 1_000,
        }
    }
}

type Checkers = (
    roost_cluster::sim::ViewAgreement,
    roost_cluster::sim::LeaseSafety,
    ZeusSafety,
);

pub type ZeusSimulation = Simulation<ZeusReplica, ZeusFactory, ZeusWorkload, Checkers>;

/// Every incarnation is a fresh node with an empty store.
pub struct ZeusFactory {
    config: ZeusConfig,
}

impl Factory<ZeusReplica> for ZeusFactory {
    fn make(&mut self, node: NodeId, _incarnation: Incarnation) -> ZeusReplica {
        ZeusReplica::new(node, &self.config)
    }

    /// Ready once it holds a copy of every object again: replicas are in
    /// memory, so a node that restarted counts as down until its copies
    /// are back (the simulator then keeps a majority of full replicas up).
    fn ready(&self, protocol: &ZeusReplica) -> bool {
        protocol.commit().in_a_view() && protocol.holds_every_object()
    }

    fn cut_off_loses_data(&self, protocol: &ZeusReplica) -> bool {
        protocol.commit().in_a_view()
    }
}

impl ZeusScenario {
    pub fn simulation(
        &self,
        mut config: SimConfig,
        seed: u64,
    ) -> Result<ZeusSimulation, SimConfigError> {
        Scenario::validate(self)?;
        config.faults_after_ms = config
            .faults_after_ms
            .max(self.warmup_ms.min(config.duration_ms));
        let nodes = config.nodes;
        let (view_agreement, lease_safety) = membership_checkers();
        let mut ownership = self.ownership.clone();
        // A majority of directory replicas always meets every view (see
        // the ownership simulation's `majority_directory`).
        ownership.directory_replicas = ownership.directory_replicas.max(nodes as usize / 2 + 1);
        let factory = ZeusFactory {
            config: ZeusConfig {
                ownership,
                ownership_bugs: self.ownership_bugs,
                commit: self.commit.clone(),
                commit_bugs: self.commit_bugs,
                bugs: self.bugs,
                objects: self.objects,
            },
        };
        Simulation::new(
            config,
            seed,
            factory,
            ZeusWorkload::new(self.objects, self.read_probability),
            (
                view_agreement,
                lease_safety,
                ZeusSafety {
                    objects: self.objects,
                },
            ),
        )
    }
}

impl Scenario for ZeusScenario {
    fn protocol(&self) -> &'static str {
        "zeus"
    }

    fn validate(&self) -> Result<(), SimConfigError> {
        let invalid = |reason| SimConfigError::Protocol {
            protocol: "zeus",
            reason,
        };
        if self.ownership.validate().is_err() {
            return Err(invalid("the ownership configuration is invalid"));
        }
        if self.commit.validate().is_err() {
            return Err(invalid("the reliable commit configuration is invalid"));
        }
        if self.objects == 0 || self.objects > MAX_SIM_OBJECTS {
            return Err(invalid("objects must be 1..=32"));
        }
        if !(0.0..=1.0).contains(&self.read_probability) {
            return Err(invalid("read_probability is not a probability"));
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

/// What the clients saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ZeusHistory {
    pub committed: u64,
    pub unknown: u64,
    pub refused: u64,
    pub reads: u64,
    pub reads_refused: u64,
    /// The highest version acknowledged to a client, per object.
    pub acked: BTreeMap<Object, u64>,
    /// Which transaction wrote each (object, version) a client was told
    /// committed.
    pub written_by: BTreeMap<(Object, u64), u64>,
    /// Violations found as outputs arrived (a read's, or a version
    /// acknowledged twice), with when.
    pub violations: Vec<Violation>,
    /// Acknowledged write transactions that also read objects (at most
    /// [`MAX_RECORDED`]): for the real-time check at the end.
    pub read_writes: Vec<ReadWrite>,
    /// Per object, every acknowledged version and when (at most
    /// [`MAX_RECORDED`] in all).
    pub acked_at: BTreeMap<Object, Vec<(u64, u64)>>,
    /// Per object, every read-only transaction's read of it: when, the
    /// version, where (at most [`MAX_RECORDED`] in all).
    pub read_at: BTreeMap<Object, Vec<(u64, u64, NodeId)>>,
    /// Entries of the three above (bounded by [`MAX_RECORDED`]).
    pub recorded: usize,
}

/// Entries the history keeps for the real-time check (a run past it
/// checks its first ones).
pub const MAX_RECORDED: usize = 1 << 20;

/// An acknowledged write transaction that read objects it did not write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadWrite {
    pub tag: u64,
    pub reads: Vec<(Object, u64)>,
    pub writes: Vec<(Object, u64)>,
}

impl ZeusHistory {
    fn record(&mut self) -> bool {
        if self.recorded >= MAX_RECORDED {
            return false;
        }
        self.recorded += 1;
        true
    }

    /// A transaction T1 that read x before T2 overwrote it precedes T2; a
    /// read-only T3 begun after T2 was acknowledged follows T2, so it must
    /// see every write of T1 (strict serializability across objects: the
    /// cycle a pending transaction's read object changing owner makes).
    pub fn check_reads_after_overwrites(&self) -> Result<(), Violation> {
        for t1 in &self.read_writes {
            // The earliest acknowledgement of a later version of something
            // T1 read.
            let overwritten_at = t1
                .reads
                .iter()
                .filter_map(|&(x, read_version)| {
                    self.acked_at
                        .get(&x)?
                        .iter()
                        .filter(|(version, _)| *version > read_version)
                        .map(|&(_, at)| at)
                        .min()
                })
                .min();
            let Some(t2_at) = overwritten_at else {
                continue;
            };
            for &(y, written) in &t1.writes {
                let Some(reads) = self.read_at.get(&y) else {
                    continue;
                };
                if let Some(&(at, version, node)) = reads
                    .iter()
                    .find(|&&(at, version, _)| at > t2_at && version < written)
                {
                    return Err(Violation::new(
                        "reads see what precedes an acknowledged write",
                        at,
                        format!(
                            "transaction {} read {:?} and wrote object {y} at version {written}; \
                             an overwrite of what it read was acknowledged at {t2_at} ms, and a \
                             read at {node} at {at} ms returned object {y} at version {version}",
                            t1.tag, t1.reads
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// A client's transaction in flight.
#[derive(Debug, Clone)]
struct Issued {
    client: ClientId,
}

pub struct ZeusWorkload {
    objects: u64,
    read_probability: f64,
    next_tag: u64,
    issued: BTreeMap<u64, Issued>,
    /// The highest version of each object a client knows of (acknowledged
    /// or read): no later read may return an older one.
    seen: BTreeMap<Object, u64>,
    history: ZeusHistory,
}

impl ZeusWorkload {
    pub fn new(objects: u64, read_probability: f64) -> Self {
        ZeusWorkload {
            objects,
            read_probability,
            next_tag: 0,
            issued: BTreeMap::new(),
            seen: BTreeMap::new(),
            history: ZeusHistory::default(),
        }
    }

    fn busy(&self, client: ClientId) -> bool {
        self.issued.values().any(|i| i.client == client)
    }

    fn check_read(&mut self, now_ms: u64, node: NodeId, reads: &[crate::replica::ReadValue]) {
        let mut fail = |detail: String| {
            self.history
                .violations
                .push(Violation::new("read-only transactions", now_ms, detail));
        };
        for read in reads {
            let seen = self.seen.get(&read.object).copied().unwrap_or(0);
            if read.version < seen {
                fail(format!(
                    "a read at {node} returned object {} at version {} after version {seen} was acknowledged or read",
                    read.object, read.version
                ));
            }
            // The transaction that wrote what was read: every other object
            // of it read here is at its version or later.
            let Some(record) = WriteRecord::decode(&read.data) else {
                continue;
            };
            if !record.writes.contains(&(read.object, read.version)) {
                fail(format!(
                    "a read at {node} returned object {} at version {} with the data of {:?}",
                    read.object, read.version, record
                ));
            }
            for (object, version) in &record.writes {
                if let Some(other) = reads.iter().find(|r| r.object == *object) {
                    if other.version < *version {
                        fail(format!(
                            "a read at {node} saw part of transaction {}: object {} at {} but object {object} at {} (it wrote {version})",
                            record.tag, read.object, read.version, other.version
                        ));
                    }
                }
            }
        }
        for read in reads {
            let seen = self.seen.entry(read.object).or_default();
            *seen = (*seen).max(read.version);
        }
    }
}

impl Workload<ZeusReplica> for ZeusWorkload {
    type History = ZeusHistory;

    fn next_command(
        &mut self,
        rng: &mut SimRng,
        _now_ms: u64,
        client: ClientId,
    ) -> Option<ZeusCmd> {
        if self.busy(client) {
            return None;
        }
        self.next_tag += 1;
        let tag = self.next_tag;
        let first = rng.random_range(0..self.objects);
        let mut objects = vec![first];
        if self.objects > 1 && rng.random_bool(0.5) {
            let second = (first + rng.random_range(1..self.objects)) % self.objects;
            objects.push(second);
        }
        if rng.random_bool(self.read_probability) {
            // Answered in the same event: nothing stays in flight.
            return Some(ZeusCmd::Read { tag, objects });
        }
        self.issued.insert(tag, Issued { client });
        // Half the two-object writes read the second object instead.
        let reads = if objects.len() == 2 && rng.random_bool(0.5) {
            objects.split_off(1)
        } else {
            Vec::new()
        };
        Some(ZeusCmd::Write {
            tag,
            objects,
            reads,
        })
    }

    fn on_output(&mut self, node: NodeId, now_ms: u64, _cause: Cause, out: &ZeusOut) {
        match out {
            ZeusOut::Committed {
                tag, writes, reads, ..
            } => {
                self.issued.remove(tag);
                self.history.committed += 1;
                if !reads.is_empty() && self.history.record() {
                    self.history.read_writes.push(ReadWrite {
                        tag: *tag,
                        reads: reads.clone(),
                        writes: writes.clone(),
                    });
                }
                for &(object, version) in writes {
                    if self.history.record() {
                        let at = self.history.acked_at.entry(object).or_default();
                        at.push((version, now_ms));
                    }
                }
                for &(object, version) in writes {
                    if let Some(other) = self.history.written_by.insert((object, version), *tag) {
                        if other != *tag {
                            self.history.violations.push(Violation::new(
                                "a version is written once",
                                now_ms,
                                format!(
                                    "object {object} version {version}: acknowledged to transactions {other} and {tag}"
                                ),
                            ));
                        }
                    }
                    let acked = self.history.acked.entry(object).or_default();
                    *acked = (*acked).max(version);
                    let seen = self.seen.entry(object).or_default();
                    *seen = (*seen).max(version);
                }
            }
            ZeusOut::Unknown { tag } => {
                self.issued.remove(tag);
                self.history.unknown += 1;
            }
            ZeusOut::Refused { tag, refusal } => {
                if self.issued.remove(tag).is_some() {
                    self.history.refused += 1;
                } else {
                    debug_assert!(matches!(
                        refusal,
                        Refusal::NotServing | Refusal::NotReadable { .. } | Refusal::TooManyObjects
                    ));
                    self.history.reads_refused += 1;
                }
            }
            ZeusOut::Read { reads, .. } => {
                self.history.reads += 1;
                self.check_read(now_ms, node, reads);
                for read in reads {
                    if self.history.record() {
                        let at = self.history.read_at.entry(read.object).or_default();
                        at.push((now_ms, read.version, node));
                    }
                }
            }
        }
    }

    fn on_crash(&mut self, node: NodeId, _now_ms: u64) {
        let before = self.issued.len();
        self.issued.retain(|_, i| i.client.node != node);
        self.history.unknown += (before - self.issued.len()) as u64;
    }

    fn history(&self) -> &ZeusHistory {
        &self.history
    }

    fn stats(&self) -> WorkloadStats {
        WorkloadStats {
            completed: self.history.committed + self.history.reads,
            unknown: self.history.unknown,
            rejected: self.history.refused + self.history.reads_refused,
        }
    }
}

/// The composed invariants (see the module's documentation).
#[derive(Debug)]
pub struct ZeusSafety {
    objects: u64,
}

impl Checker<ZeusReplica, ZeusHistory> for ZeusSafety {
    fn after_event(
        &mut self,
        world: &World<'_, ZeusReplica>,
        history: &ZeusHistory,
    ) -> Result<(), Violation> {
        if let Some(violation) = history.violations.first() {
            return Err(violation.clone());
        }
        let Some((&latest_epoch, latest)) = world.views.iter().next_back() else {
            return Ok(());
        };
        let fail =
            |checker: &str, detail: String| Err(Violation::new(checker, world.now_ms, detail));
        for object in 0..self.objects {
            let mut owners = Vec::new();
            let mut highest: Option<(NodeId, u64)> = None;
            let mut valid_versions = BTreeSet::new();
            let mut owner_version = None;
            for slot in world.nodes {
                let Some(node) = slot.node() else { continue };
                // Members of the latest view (installed there or not yet):
                // the nodes whose copies count.
                if !latest.contains(slot.id(), slot.incarnation()) {
                    continue;
                }
                let app = node.app();
                let Some(copy) = app.copy(object) else {
                    continue;
                };
                if highest.is_none_or(|(_, v)| copy.version > v) {
                    highest = Some((slot.id(), copy.version));
                }
                let access = app.ownership().access(&object);
                let current = node.epoch() == latest_epoch;
                if access == Access::Owner && node.serving(world.now_ms) {
                    owners.push(slot.id());
                    owner_version = Some((slot.id(), copy.version));
                }
                if current
                    && matches!(access, Access::Owner | Access::Reader)
                    && copy.state == ObjectState::Valid
                {
                    valid_versions.insert(copy.version);
                }
            }
            if owners.len() > 1 {
                return fail(
                    "at most one owner",
                    format!("object {object}: owners {owners:?}"),
                );
            }
            if let (Some((owner, mine)), Some((other, top))) = (owner_version, highest) {
                if mine < top {
                    return fail(
                        "the owner holds the highest version",
                        format!("object {object}: owner {owner} holds version {mine}, {other} holds {top}"),
                    );
                }
            }
            if valid_versions.len() > 1 {
                return fail(
                    "valid replicas agree",
                    format!("object {object}: Valid copies at versions {valid_versions:?}"),
                );
            }
            let acked = history.acked.get(&object).copied().unwrap_or(0);
            if acked > 0 && highest.is_none_or(|(_, v)| v < acked) {
                return fail(
                    "no acknowledged write is lost",
                    format!(
                        "object {object}: version {acked} was acknowledged, the members of epoch {} hold at most {highest:?}",
                        latest_epoch.0
                    ),
                );
            }
        }
        Ok(())
    }

    fn at_end(
        &mut self,
        world: &World<'_, ZeusReplica>,
        history: &ZeusHistory,
    ) -> Result<(), Violation> {
        history.check_reads_after_overwrites()?;
        let Some((_, latest)) = world.settled_view() else {
            return Ok(());
        };
        let stuck = |detail: String| {
            Err(Violation::new(
                "settles after the quiet tail",
                world.now_ms,
                detail,
            ))
        };
        for slot in world.nodes {
            let Some(node) = slot.node() else { continue };
            if !latest.contains(slot.id(), slot.incarnation()) {
                continue;
            }
            let app = node.app();
            if app.busy() > 0 || app.commit().in_flight() > 0 {
                return stuck(format!(
                    "{} still has {} transactions waiting or in reliable commit",
                    slot.id(),
                    app.busy()
                ));
            }
        }
        for object in 0..self.objects {
            let acked = history.acked.get(&object).copied().unwrap_or(0);
            let mut owners = Vec::new();
            let mut versions = BTreeSet::new();
            for slot in world.nodes {
                let Some(node) = slot.node() else { continue };
                if !latest.contains(slot.id(), slot.incarnation()) {
                    continue;
                }
                let app = node.app();
                let access = app.ownership().access(&object);
                if access == Access::Owner {
                    owners.push(slot.id());
                }
                match app.copy(object) {
                    Some(copy) if copy.state == ObjectState::Valid => {
                        versions.insert(copy.version);
                    }
                    other => {
                        return stuck(format!(
                            "{} holds object {object} as {other:?} (access {access:?})",
                            slot.id()
                        ))
                    }
                }
            }
            // No owner is fine: the last one left the view, and the next
            // writer takes it over from the readers.
            if owners.len() > 1 {
                return stuck(format!("object {object}: owners {owners:?}"));
            }
            if versions.len() != 1 {
                return stuck(format!(
                    "object {object}: versions {versions:?} at the nodes"
                ));
            }
            let version = versions.first().copied().unwrap_or(0);
            if version < acked {
                return Err(Violation::new(
                    "no acknowledged write is lost",
                    world.now_ms,
                    format!("object {object}: version {acked} acknowledged, the cluster holds {version}"),
                ));
            }
        }
        Ok(())
    }
}

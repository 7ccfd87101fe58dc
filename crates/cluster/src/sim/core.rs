//! The simulator core, generic over the protocol: an event queue ordered by
//! `(virtual time, sequence number)`, one seeded RNG, a network that loses,
//! duplicates and delays (so reorders) messages, cuts links (isolating or
//! muting a node), and crashes and restarts nodes as new incarnations. Each
//! node is a [`Node`] (peer membership plus the protocol), made fresh by the
//! [`Factory`] at every boot; what a node persisted (the membership's
//! [`AcceptorRecord`], written before the messages that depend on it) is its
//! disk and survives the crash, its memory does not. A [`Workload`] issues
//! the clients' commands and is told the outputs; a [`Checker`] looks at
//! every node after every event and at the end. After `duration_ms` a quiet
//! tail ([`SimConfig::quiet_tail_ms`]) heals the network, restarts crashed
//! nodes and stops the faults and the clients, so that the end is a cluster
//! that had the time to settle (liveness can be checked there).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use roost_net::{EpochId, NodeId};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::membership::{AcceptorRecord, MembershipBugs, MembershipConfig, MembershipConfigError};
use crate::node::{Node, NodeEffects, NodeMsg, TimerKey};
use crate::protocol::{Incarnation, Protocol, View};

/// The most events one run may process (a bound against a livelocked schedule).
pub const MAX_EVENTS: u64 = 5_000_000;
/// The most events waiting at once (a bound against a message storm).
pub const MAX_QUEUED: usize = 1_000_000;
/// The most nodes a simulation may have.
pub const MAX_SIM_NODES: u32 = 9;
/// The most concurrent clients per node.
pub const MAX_CLIENTS_PER_NODE: u32 = 64;

/// The simulation's only source of randomness, seeded once per run.
pub type SimRng = SmallRng;

/// The protocol-independent settings: cluster size, duration, the network's
/// faults, the fault schedule, the clients' pace, and membership timing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimConfig {
    pub nodes: u32,
    /// Virtual time simulated with faults and clients.
    pub duration_ms: u64,
    /// Virtual time simulated after `duration_ms`, quietly: no new faults,
    /// partitions healed and crashed nodes restarted as it begins, clients
    /// issuing nothing new (message loss and duplication go on: protocols
    /// retransmit). Then [`Checker::at_end`] runs on a cluster that had the
    /// time to settle, and may check liveness ([`World::settled`]). 0: none.
    pub quiet_tail_ms: u64,
    pub drop_probability: f64,
    pub duplicate_probability: f64,
    pub min_delay_ms: u64,
    pub max_delay_ms: u64,
    /// A fault (crash, partition, heal) is considered this often.
    pub fault_interval_ms: u64,
    /// Probability that a considered fault happens.
    pub fault_probability: f64,
    /// A crashed node restarts after a delay drawn from this range.
    pub restart_min_ms: u64,
    pub restart_max_ms: u64,
    /// Concurrent clients on every node; each has at most what its workload
    /// allows in flight, so a node sees up to this many commands at once.
    pub clients_per_node: u32,
    /// Mean time between a client's attempts.
    pub client_interval_ms: u64,
    pub membership: MembershipConfig,
    pub membership_bugs: MembershipBugs,
    /// Crashes may take down any number of nodes, every node at once
    /// included (a fault may then be an outage: every node crashes). Off,
    /// a majority stays up and ready, the fault model of quorum protocols
    /// with in-memory replicas; on, only for protocols that hold no data a
    /// majority must keep (the membership alone).
    #[serde(default)]
    pub crash_majorities: bool,
    /// No faults in the last this many ms, and the links heal when they
    /// begin, so that a liveness checker ([`crate::sim::ServesAtEnd`]) can
    /// ask for a serving cluster at the end. 0: faults until the end.
    #[serde(default)]
    pub calm_tail_ms: u64,
    /// No faults before this virtual time: a warm-up in which a protocol
    /// that keeps its data in memory places its first replicas (before it,
    /// a node holding the only copy of a new object may be cut off, which
    /// loses the object by design). 0: faults from the start.
    #[serde(default)]
    pub faults_after_ms: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            nodes: 3,
            duration_ms: 3_000,
            quiet_tail_ms: 2_000,
            drop_probability: 0.05,
            duplicate_probability: 0.02,
            min_delay_ms: 1,
            max_delay_ms: 8,
            fault_interval_ms: 250,
            fault_probability: 0.5,
            restart_min_ms: 100,
            restart_max_ms: 800,
            clients_per_node: 2,
            client_interval_ms: 15,
            membership: MembershipConfig {
                heartbeat_interval_ms: 20,
                lease_duration_ms: 150,
                suspect_after_ms: 60,
                clock_drift_margin_ms: 5,
                proposal_timeout_ms: 300,
            },
            membership_bugs: MembershipBugs::default(),
            crash_majorities: false,
            calm_tail_ms: 0,
            faults_after_ms: 0,
        }
    }
}

/// Why a configuration (the core's or a protocol's) cannot be simulated.
#[derive(Debug, PartialEq, Error)]
pub enum SimConfigError {
    #[error("nodes = {0} must be in 1..={MAX_SIM_NODES}")]
    Nodes(u32),
    #[error("{name} = {value} is not a probability")]
    Probability { name: &'static str, value: f64 },
    #[error("min_delay_ms ({0}) > max_delay_ms ({1})")]
    Delay(u64, u64),
    #[error("max_delay_ms = {0} exceeds an hour")]
    DelayTooLong(u64),
    #[error("duration_ms = {0} must be in 1..=3600000")]
    Duration(u64),
    #[error("quiet_tail_ms = {0} must be at most 3600000")]
    QuietTail(u64),
    #[error("fault_interval_ms and client_interval_ms must be positive")]
    ZeroInterval,
    #[error("restart delay {0}..={1} ms must be non-empty and at most an hour")]
    Restart(u64, u64),
    #[error("clients_per_node = {0} must be in 0..={MAX_CLIENTS_PER_NODE}")]
    Clients(u32),
    #[error("calm_tail_ms = {0} exceeds duration_ms = {1}")]
    CalmTail(u64, u64),
    #[error("faults_after_ms = {0} exceeds duration_ms = {1}")]
    FaultsAfter(u64, u64),
    #[error("membership: {0}")]
    Membership(#[from] MembershipConfigError),
    /// A protocol's own settings (its scenario checks them).
    #[error("{protocol}: {reason}")]
    Protocol {
        protocol: &'static str,
        reason: &'static str,
    },
}

impl SimConfig {
    pub fn validate(&self) -> Result<(), SimConfigError> {
        if !(1..=MAX_SIM_NODES).contains(&self.nodes) {
            return Err(SimConfigError::Nodes(self.nodes));
        }
        for (name, value) in [
            ("drop_probability", self.drop_probability),
            ("duplicate_probability", self.duplicate_probability),
            ("fault_probability", self.fault_probability),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(SimConfigError::Probability { name, value });
            }
        }
        if self.min_delay_ms > self.max_delay_ms {
            return Err(SimConfigError::Delay(self.min_delay_ms, self.max_delay_ms));
        }
        if self.max_delay_ms > 3_600_000 {
            return Err(SimConfigError::DelayTooLong(self.max_delay_ms));
        }
        if self.duration_ms == 0 || self.duration_ms > 3_600_000 {
            return Err(SimConfigError::Duration(self.duration_ms));
        }
        if self.quiet_tail_ms > 3_600_000 {
            return Err(SimConfigError::QuietTail(self.quiet_tail_ms));
        }
        if self.fault_interval_ms == 0 || self.client_interval_ms == 0 {
            return Err(SimConfigError::ZeroInterval);
        }
        if self.restart_min_ms > self.restart_max_ms || self.restart_max_ms > 3_600_000 {
            return Err(SimConfigError::Restart(
                self.restart_min_ms,
                self.restart_max_ms,
            ));
        }
        if self.clients_per_node > MAX_CLIENTS_PER_NODE {
            return Err(SimConfigError::Clients(self.clients_per_node));
        }
        if self.calm_tail_ms > self.duration_ms {
            return Err(SimConfigError::CalmTail(
                self.calm_tail_ms,
                self.duration_ms,
            ));
        }
        if self.faults_after_ms > self.duration_ms {
            return Err(SimConfigError::FaultsAfter(
                self.faults_after_ms,
                self.duration_ms,
            ));
        }
        self.membership.validate()?;
        Ok(())
    }
}

/// A safety property broken (or the simulator's own bounds hit), with when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Error)]
#[error("{checker} at {at_ms} ms: {detail}")]
pub struct Violation {
    /// Which property: "view agreement", "lease safety", "linearizability"...
    pub checker: String,
    pub at_ms: u64,
    pub detail: String,
}

impl Violation {
    pub fn new(checker: &str, at_ms: u64, detail: impl Into<String>) -> Self {
        Violation {
            checker: checker.to_owned(),
            at_ms,
            detail: detail.into(),
        }
    }
}

/// One seed's run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimReport {
    pub seed: u64,
    pub trace_hash: u64,
    pub events: u64,
    pub messages_delivered: u64,
    pub ops_completed: u64,
    /// Operations of unknown outcome (timed out, their node crashed, or
    /// still running at the end).
    pub ops_unknown: u64,
    pub ops_rejected: u64,
    pub crashes: u64,
    pub partitions: u64,
    pub max_epoch: u64,
    pub violation: Option<Violation>,
}

/// A client: the `index`-th of those attached to `node`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ClientId {
    pub node: NodeId,
    pub index: u32,
}

impl std::fmt::Display for ClientId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/c{}", self.node, self.index)
    }
}

/// What an output answers: a command just issued (outputs produced while the
/// node handled it), or anything else (a message, a timer, a view change).
/// Protocols that answer a command at once (accepting it and naming the
/// operation's id) let the workload tie that id to its client this way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    Command(ClientId),
    Event,
}

/// A workload's own count of what happened to its commands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadStats {
    pub completed: u64,
    pub unknown: u64,
    pub rejected: u64,
}

/// Makes a node's protocol state: a restart loses memory, so every
/// incarnation gets a fresh one.
pub trait Factory<P: Protocol> {
    fn make(&mut self, node: NodeId, incarnation: Incarnation) -> P;

    /// Does this replica hold its data? The simulator crashes a node only
    /// while more than a majority is up and ready, which is the fault model
    /// of quorum protocols with in-memory replicas (beyond it they lose data
    /// by design, which is not a bug worth finding).
    fn ready(&self, _protocol: &P) -> bool {
        true
    }

    /// Would this replica lose its data if it were cut off from the others?
    /// (Its protocol drops what it held when the view excludes it.) Such a
    /// replica counts as down while cut off, and the simulator then cuts a
    /// node off only while more than a majority is up, ready and connected.
    fn cut_off_loses_data(&self, _protocol: &P) -> bool {
        false
    }
}

/// A closure is a factory whose replicas are always ready.
impl<P: Protocol, T: FnMut(NodeId, Incarnation) -> P> Factory<P> for T {
    fn make(&mut self, node: NodeId, incarnation: Incarnation) -> P {
        self(node, incarnation)
    }
}

/// The clients: what they ask and what they are told. A client may have
/// several commands outstanding when its protocol tags them (the workload
/// decides; it returns `None` to skip an attempt).
pub trait Workload<P: Protocol> {
    /// What the workload records for checkers (a history, usually).
    type History;

    /// The command `client` issues now, if any.
    fn next_command(&mut self, rng: &mut SimRng, now_ms: u64, client: ClientId) -> Option<P::Cmd>;
    /// An output of `node`.
    fn on_output(&mut self, node: NodeId, now_ms: u64, cause: Cause, out: &P::Out);
    /// `node` crashed: what it had in flight has an unknown outcome.
    fn on_crash(&mut self, node: NodeId, now_ms: u64);
    fn history(&self) -> &Self::History;
    fn stats(&self) -> WorkloadStats;
}

/// One configured node as the simulator holds it.
pub struct SimNode<P: Protocol> {
    id: NodeId,
    incarnation: Incarnation,
    /// `None` while crashed.
    node: Option<Node<P>>,
    /// The current generation of each timer: a timer event of an older one
    /// was replaced and is ignored.
    timers: BTreeMap<TimerKey, u64>,
    /// The node's disk: the last membership record it persisted (kept
    /// across crashes; an event's effects are applied whole, so it is
    /// written before that event's messages leave).
    disk: Option<AcceptorRecord>,
}

impl<P: Protocol> SimNode<P> {
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The incarnation running now, or the last one if crashed.
    pub fn incarnation(&self) -> Incarnation {
        self.incarnation
    }

    pub fn node(&self) -> Option<&Node<P>> {
        self.node.as_ref()
    }

    /// What the node persisted last (its disk survives crashes).
    pub fn persisted(&self) -> Option<&AcceptorRecord> {
        self.disk.as_ref()
    }
}

/// What a checker sees after an event.
pub struct World<'a, P: Protocol> {
    pub now_ms: u64,
    /// Every configured node, by id.
    pub nodes: &'a [SimNode<P>],
    /// The views installed during this event: by whom (and its incarnation).
    pub installs: &'a [(NodeId, Incarnation, View)],
    /// The first install of every epoch so far, this event's included.
    pub views: &'a BTreeMap<EpochId, View>,
    /// At the end of a run whose quiet tail ran whole: every node up, no
    /// link cut, no client command for `quiet_tail_ms`. Liveness holds here
    /// (what should finish has); `false` after every event.
    pub settled: bool,
}

impl<P: Protocol> World<'_, P> {
    /// At the end of a settled run whose membership settled too (every node
    /// running, as the incarnation the latest view names, and installed
    /// there): that view's epoch and the view. A protocol can settle only
    /// then; `None` otherwise (one 3-node run ended its tail in a two-member
    /// view with a dead member: a membership liveness matter).
    pub fn settled_view(&self) -> Option<(EpochId, &View)> {
        if !self.settled {
            return None;
        }
        let (&latest_epoch, latest) = self.views.iter().next_back()?;
        let converged = self.nodes.iter().all(|slot| {
            slot.node().is_some_and(|node| node.epoch() == latest_epoch)
                && latest.members.get(&slot.id()) == Some(&slot.incarnation())
        });
        converged.then_some((latest_epoch, latest))
    }
}

/// A safety property, checked over the live protocol states after every
/// event and over the workload's history at the end (where, after a quiet
/// tail, a liveness property may be checked too). Tuples of checkers are
/// checkers (each in turn, the first violation wins).
pub trait Checker<P: Protocol, H> {
    fn after_event(&mut self, world: &World<'_, P>, history: &H) -> Result<(), Violation>;

    fn at_end(&mut self, _world: &World<'_, P>, _history: &H) -> Result<(), Violation> {
        Ok(())
    }
}

impl<P: Protocol, H> Checker<P, H> for () {
    fn after_event(&mut self, _: &World<'_, P>, _: &H) -> Result<(), Violation> {
        Ok(())
    }
}

macro_rules! tuple_checker {
    ($($name:ident),+) => {
        impl<P: Protocol, H, $($name: Checker<P, H>),+> Checker<P, H> for ($($name,)+) {
            #[allow(non_snake_case)]
            fn after_event(&mut self, world: &World<'_, P>, history: &H) -> Result<(), Violation> {
                let ($($name,)+) = self;
                $($name.after_event(world, history)?;)+
                Ok(())
            }

            #[allow(non_snake_case)]
            fn at_end(&mut self, world: &World<'_, P>, history: &H) -> Result<(), Violation> {
                let ($($name,)+) = self;
                $($name.at_end(world, history)?;)+
                Ok(())
            }
        }
    };
}

tuple_checker!(A);
tuple_checker!(A, B);
tuple_checker!(A, B, C);
tuple_checker!(A, B, C, D);
tuple_checker!(A, B, C, D, E);

#[derive(Debug)]
enum Event<M> {
    Deliver {
        from: NodeId,
        to: NodeId,
        epoch: EpochId,
        msg: NodeMsg<M>,
    },
    Timer {
        node: NodeId,
        incarnation: Incarnation,
        key: TimerKey,
        generation: u64,
    },
    Client(ClientId),
    Fault,
    Restart(NodeId),
    /// `duration_ms` is over: heal, restart, and let the cluster settle.
    QuietTail,
}

struct Scheduled<M> {
    at_ms: u64,
    seq: u64,
    event: Event<M>,
}

impl<M> PartialEq for Scheduled<M> {
    fn eq(&self, other: &Self) -> bool {
        (self.at_ms, self.seq) == (other.at_ms, other.seq)
    }
}
impl<M> Eq for Scheduled<M> {}
impl<M> PartialOrd for Scheduled<M> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<M> Ord for Scheduled<M> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at_ms, self.seq).cmp(&(other.at_ms, other.seq))
    }
}

/// FNV-1a, 64 bits: a stable hash for traces (std's hashers are seeded).
#[derive(Debug, Clone, Copy)]
pub struct TraceHash(u64);

impl Default for TraceHash {
    fn default() -> Self {
        TraceHash(0xcbf2_9ce4_8422_2325)
    }
}

impl TraceHash {
    pub fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    pub fn write_u64(&mut self, value: u64) {
        self.write(&value.to_le_bytes());
    }

    pub fn finish(&self) -> u64 {
        self.0
    }
}

/// One seed's simulation of protocol `P`.
pub struct Simulation<P, F, W, C>
where
    P: Protocol,
    F: Factory<P>,
    W: Workload<P>,
    C: Checker<P, W::History>,
{
    config: SimConfig,
    rng: SimRng,
    now_ms: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<Scheduled<P::Msg>>>,
    nodes: Vec<SimNode<P>>,
    ids: Vec<NodeId>,
    /// Directed links that are cut.
    cut: BTreeSet<(NodeId, NodeId)>,
    installs: Vec<(NodeId, Incarnation, View)>,
    views: BTreeMap<EpochId, View>,
    factory: F,
    workload: W,
    checker: C,
    hash: TraceHash,
    scratch: Vec<u8>,
    fx: NodeEffects<P::Msg, P::Out>,
    report: SimReport,
    finished: bool,
    /// In the quiet tail (after `duration_ms`).
    quiet: bool,
    /// Human-readable trace lines (only when tracing is on).
    trace: Option<Vec<String>>,
}

impl<P, F, W, C> Simulation<P, F, W, C>
where
    P: Protocol,
    F: Factory<P>,
    W: Workload<P>,
    C: Checker<P, W::History>,
{
    /// Boots every node (incarnation 1) and schedules the clients and the
    /// first fault; nothing runs until [`Simulation::run`].
    pub fn new(
        config: SimConfig,
        seed: u64,
        factory: F,
        workload: W,
        checker: C,
    ) -> Result<Self, SimConfigError> {
        config.validate()?;
        let ids: Vec<NodeId> = (0..config.nodes).map(NodeId).collect();
        let mut sim = Simulation {
            rng: SimRng::seed_from_u64(seed),
            now_ms: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            nodes: ids
                .iter()
                .map(|&id| SimNode {
                    id,
                    incarnation: 0,
                    node: None,
                    timers: BTreeMap::new(),
                    disk: None,
                })
                .collect(),
            ids: ids.clone(),
            cut: BTreeSet::new(),
            installs: Vec::new(),
            views: BTreeMap::new(),
            factory,
            workload,
            checker,
            hash: TraceHash::default(),
            scratch: Vec::with_capacity(256),
            fx: NodeEffects::default(),
            report: SimReport {
                seed,
                trace_hash: 0,
                events: 0,
                messages_delivered: 0,
                ops_completed: 0,
                ops_unknown: 0,
                ops_rejected: 0,
                crashes: 0,
                partitions: 0,
                max_epoch: 0,
                violation: None,
            },
            finished: false,
            quiet: false,
            trace: None,
            config,
        };
        for &id in &ids {
            sim.boot(id);
            for index in 0..sim.config.clients_per_node {
                let first = sim.rng.random_range(0..sim.config.client_interval_ms * 2);
                sim.schedule(first, Event::Client(ClientId { node: id, index }));
            }
        }
        // Views installed while booting are checked with the first event.
        let fault = sim.config.fault_interval_ms;
        sim.schedule(fault, Event::Fault);
        if sim.config.quiet_tail_ms > 0 {
            // Scheduled now, so it comes first among the events of its
            // millisecond: everything up to `duration_ms` runs as without
            // a tail.
            let at = sim.config.duration_ms + 1;
            sim.schedule(at, Event::QuietTail);
        }
        Ok(sim)
    }

    /// Keep a readable trace (for `roost sim --seed S --trace`).
    pub fn with_trace(mut self) -> Self {
        self.trace = Some(Vec::new());
        self
    }

    pub fn trace_lines(&self) -> &[String] {
        self.trace.as_deref().unwrap_or(&[])
    }

    pub fn workload(&self) -> &W {
        &self.workload
    }

    pub fn nodes(&self) -> &[SimNode<P>] {
        &self.nodes
    }

    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Runs to `duration_ms` and through the quiet tail (or to the first
    /// violation) and reports.
    pub fn run(mut self) -> SimReport {
        self.run_in_place();
        self.report
    }

    /// As [`Simulation::run`], keeping the simulation for inspection (its
    /// trace, workload, nodes). Runs once; later calls return the report.
    pub fn run_in_place(&mut self) -> &SimReport {
        if self.finished {
            return &self.report;
        }
        self.finished = true;
        let end_ms = self.config.duration_ms + self.config.quiet_tail_ms;
        let mut ran_to_end = true;
        while let Some(Reverse(next)) = self.queue.pop() {
            if next.at_ms > end_ms || self.report.violation.is_some() {
                break;
            }
            if self.report.events >= MAX_EVENTS {
                ran_to_end = false;
                self.fail(Violation::new(
                    "simulator",
                    self.now_ms,
                    format!("more than {MAX_EVENTS} events"),
                ));
                break;
            }
            if self.queue.len() >= MAX_QUEUED {
                ran_to_end = false;
                self.fail(Violation::new(
                    "simulator",
                    self.now_ms,
                    format!("more than {MAX_QUEUED} events queued"),
                ));
                break;
            }
            assert!(next.at_ms >= self.now_ms, "virtual time runs forward");
            self.now_ms = next.at_ms;
            self.report.events += 1;
            self.hash.write_u64(next.at_ms);
            self.step(next.event);
            self.check_event();
        }
        if self.report.violation.is_none() {
            let settled = ran_to_end && self.config.quiet_tail_ms > 0 && self.quiet;
            debug_assert!(!settled || self.cut.is_empty());
            let world = World {
                now_ms: self.now_ms,
                nodes: &self.nodes,
                installs: &[],
                views: &self.views,
                settled,
            };
            if let Err(violation) = self.checker.at_end(&world, self.workload.history()) {
                self.fail(violation);
            }
        }
        let stats = self.workload.stats();
        self.report.ops_completed = stats.completed;
        self.report.ops_unknown = stats.unknown;
        self.report.ops_rejected = stats.rejected;
        self.report.max_epoch = self.views.keys().last().map_or(0, |e| e.0);
        self.report.trace_hash = self.hash.finish();
        &self.report
    }

    fn fail(&mut self, violation: Violation) {
        if self.report.violation.is_none() {
            self.note(|| format!("VIOLATION {violation}"));
            self.report.violation = Some(violation);
        }
    }

    /// Records this event's installs and runs the checkers.
    fn check_event(&mut self) {
        for (_, _, view) in &self.installs {
            self.views.entry(view.epoch).or_insert_with(|| view.clone());
        }
        let world = World {
            now_ms: self.now_ms,
            nodes: &self.nodes,
            installs: &self.installs,
            views: &self.views,
            settled: false,
        };
        let result = self.checker.after_event(&world, self.workload.history());
        self.installs.clear();
        if let Err(violation) = result {
            self.fail(violation);
        }
    }

    fn note(&mut self, line: impl FnOnce() -> String) {
        if let Some(trace) = &mut self.trace {
            trace.push(format!("{:>6} ms  {}", self.now_ms, line()));
        }
    }

    fn schedule(&mut self, after_ms: u64, event: Event<P::Msg>) {
        self.seq += 1;
        let at_ms = self.now_ms.saturating_add(after_ms);
        self.queue.push(Reverse(Scheduled {
            at_ms,
            seq: self.seq,
            event,
        }));
    }

    fn slot(&mut self, id: NodeId) -> &mut SimNode<P> {
        &mut self.nodes[id.0 as usize]
    }

    fn boot(&mut self, id: NodeId) {
        let forget = self.config.membership_bugs.forget_acceptor_state_on_restart;
        let slot = self.slot(id);
        assert!(slot.node.is_none(), "{id} boots only when down");
        slot.incarnation += 1;
        slot.timers.clear();
        if forget {
            slot.disk = None; // planted: a disk that loses what it acknowledged
        }
        let incarnation = slot.incarnation;
        let recovered = slot.disk.clone();
        let app = self.factory.make(id, incarnation);
        let mut node = Node::new(
            id,
            incarnation,
            &self.ids,
            self.config.membership.clone(),
            self.config.membership_bugs,
            recovered,
            app,
            self.now_ms,
        );
        let mut fx = std::mem::take(&mut self.fx);
        fx.clear();
        node.start(self.now_ms, &mut fx);
        self.slot(id).node = Some(node);
        self.apply(id, Cause::Event, &mut fx);
        self.fx = fx;
    }

    fn step(&mut self, event: Event<P::Msg>) {
        match event {
            Event::Deliver {
                from,
                to,
                epoch,
                msg,
            } => self.deliver(from, to, epoch, msg),
            Event::Timer {
                node,
                incarnation,
                key,
                generation,
            } => {
                let slot = &self.nodes[node.0 as usize];
                let current = slot.incarnation == incarnation
                    && slot.node.is_some()
                    && slot.timers.get(&key) == Some(&generation);
                if current {
                    self.hash.write(&[1, node.0 as u8]);
                    self.with_node(node, Cause::Event, |n, now, fx| n.on_timer(now, key, fx));
                }
            }
            // The quiet tail: no new commands, no new faults.
            Event::Client(_) | Event::Fault if self.quiet => {}
            Event::Client(client) => {
                self.client(client);
                let gap = self
                    .rng
                    .random_range(1..=self.config.client_interval_ms * 2);
                self.schedule(gap, Event::Client(client));
            }
            Event::Fault => {
                self.fault();
                self.schedule(self.config.fault_interval_ms, Event::Fault);
            }
            // Restarted already, when the quiet tail began.
            Event::Restart(node) if self.nodes[node.0 as usize].node.is_some() => {
                debug_assert!(self.quiet);
            }
            Event::Restart(node) => {
                self.hash.write(&[4, node.0 as u8]);
                self.note(|| format!("restart {node}"));
                self.boot(node);
            }
            Event::QuietTail => self.begin_quiet_tail(),
        }
    }

    /// Heals every cut link and restarts every crashed node (their pending
    /// restarts are then skipped); from here on no fault or command.
    fn begin_quiet_tail(&mut self) {
        debug_assert!(!self.quiet);
        self.quiet = true;
        self.hash.write(&[9]);
        self.note(|| "quiet tail: heal, restart, no new faults or commands".to_owned());
        self.cut.clear();
        let down: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|s| s.node.is_none())
            .map(|s| s.id)
            .collect();
        for node in down {
            self.hash.write(&[4, node.0 as u8]);
            self.note(|| format!("restart {node}"));
            self.boot(node);
        }
        debug_assert!(self.nodes.iter().all(|s| s.node.is_some()));
    }

    fn deliver(&mut self, from: NodeId, to: NodeId, epoch: EpochId, msg: NodeMsg<P::Msg>) {
        if self.cut.contains(&(from, to)) || self.nodes[to.0 as usize].node.is_none() {
            return;
        }
        self.report.messages_delivered += 1;
        self.scratch.clear();
        let bytes = postcard::to_extend(&msg, std::mem::take(&mut self.scratch))
            .expect("simulated messages encode");
        self.hash.write(&[2, from.0 as u8, to.0 as u8]);
        self.hash.write_u64(epoch.0);
        self.hash.write(&bytes);
        self.scratch = bytes;
        if self.trace.is_some() {
            self.note(|| format!("{from} -> {to} {epoch} {msg:?}"));
        }
        self.with_node(to, Cause::Event, |n, now, fx| {
            n.on_message(now, from, epoch, msg, fx)
        });
    }

    fn client(&mut self, client: ClientId) {
        if self.nodes[client.node.0 as usize].node.is_none() {
            return;
        }
        let Some(cmd) = self
            .workload
            .next_command(&mut self.rng, self.now_ms, client)
        else {
            return;
        };
        self.hash.write(&[3, client.node.0 as u8]);
        self.hash.write_u64(u64::from(client.index));
        if self.trace.is_some() {
            self.note(|| format!("{client} issues {cmd:?}"));
        }
        self.with_node(client.node, Cause::Command(client), |n, now, fx| {
            n.on_command(now, cmd, fx)
        });
    }

    fn fault(&mut self) {
        // (Without a calm tail nothing below draws differently, so the
        // seeds of such runs keep their traces.)
        let calm = self.config.calm_tail_ms > 0
            && self.now_ms + self.config.calm_tail_ms >= self.config.duration_ms;
        if calm {
            if !self.cut.is_empty() {
                self.note(|| "heal (calm tail)".to_owned());
            }
            self.cut.clear();
            return;
        }
        // (Before any draw: runs without a warm-up keep their traces.)
        if self.now_ms < self.config.faults_after_ms {
            return;
        }
        if !self.rng.random_bool(self.config.fault_probability) {
            return;
        }
        let n = self.ids.len();
        let max_down = if self.config.crash_majorities {
            n
        } else {
            n - (n / 2 + 1)
        };
        // Cut off: heard by nobody (isolated or muted).
        let cut_off = |id: NodeId| {
            self.ids
                .iter()
                .all(|&other| other == id || self.cut.contains(&(id, other)))
        };
        let loses = |s: &SimNode<P>| {
            s.node
                .as_ref()
                .is_some_and(|node| self.factory.cut_off_loses_data(node.app()))
        };
        let is_down = |s: &SimNode<P>| {
            s.node
                .as_ref()
                .is_none_or(|node| !self.factory.ready(node.app()))
                || (cut_off(s.id) && loses(s))
        };
        let down = self.nodes.iter().filter(|s| is_down(s)).count();
        let victim = self.ids[self.rng.random_range(0..n)];
        // Cutting a node off is a fault like a crash where that loses data.
        let target = &self.nodes[victim.0 as usize];
        let may_cut = down < max_down || !loses(target) || is_down(target);
        let kinds: u8 = if self.config.crash_majorities { 5 } else { 4 };
        match self.rng.random_range(0..kinds) {
            // Crash only while the fault model allows it: a majority must
            // hold the data at all times (unless crash_majorities).
            0 if down < max_down && self.nodes[victim.0 as usize].node.is_some() => {
                self.crash(victim);
                let after = self
                    .rng
                    .random_range(self.config.restart_min_ms..=self.config.restart_max_ms);
                self.schedule(after, Event::Restart(victim));
            }
            4 => {
                // An outage (crash_majorities only): every node that is up.
                self.hash.write(&[9]);
                self.note(|| "outage".to_owned());
                for id in self.ids.clone() {
                    if self.nodes[id.0 as usize].node.is_some() {
                        self.crash(id);
                        let after = self
                            .rng
                            .random_range(self.config.restart_min_ms..=self.config.restart_max_ms);
                        self.schedule(after, Event::Restart(id));
                    }
                }
            }
            1 if may_cut => {
                // Isolate one node in both directions.
                self.report.partitions += 1;
                self.hash.write(&[5, victim.0 as u8]);
                self.note(|| format!("isolate {victim}"));
                for &other in &self.ids {
                    if other != victim {
                        self.cut.insert((victim, other));
                        self.cut.insert((other, victim));
                    }
                }
            }
            2 if may_cut => {
                // One direction only: the victim hears but is not heard.
                self.report.partitions += 1;
                self.hash.write(&[6, victim.0 as u8]);
                self.note(|| format!("mute {victim}"));
                for &other in &self.ids {
                    if other != victim {
                        self.cut.insert((victim, other));
                    }
                }
            }
            _ => {
                self.hash.write(&[7]);
                if !self.cut.is_empty() {
                    self.note(|| "heal".to_owned());
                }
                self.cut.clear();
            }
        }
    }

    fn crash(&mut self, id: NodeId) {
        self.report.crashes += 1;
        self.hash.write(&[8, id.0 as u8]);
        self.note(|| format!("crash {id}"));
        let slot = self.slot(id);
        slot.node = None;
        slot.timers.clear();
        self.workload.on_crash(id, self.now_ms);
    }

    fn with_node(
        &mut self,
        id: NodeId,
        cause: Cause,
        call: impl FnOnce(&mut Node<P>, u64, &mut NodeEffects<P::Msg, P::Out>),
    ) {
        let mut fx = std::mem::take(&mut self.fx);
        fx.clear();
        let now = self.now_ms;
        let Some(node) = self.nodes[id.0 as usize].node.as_mut() else {
            self.fx = fx;
            return;
        };
        call(node, now, &mut fx);
        self.apply(id, cause, &mut fx);
        self.fx = fx;
    }

    fn apply(&mut self, id: NodeId, cause: Cause, fx: &mut NodeEffects<P::Msg, P::Out>) {
        let incarnation = self.nodes[id.0 as usize].incarnation;
        // The disk first: the messages below may depend on it.
        if let Some(record) = fx.persist.take() {
            self.slot(id).disk = Some(record);
        }
        for view in fx.installed.drain(..) {
            self.note(|| format!("{id} installs {} {:?}", view.epoch, view.members));
            self.installs.push((id, incarnation, view));
        }
        for (key, after_ms) in fx.timers.drain(..) {
            let slot = self.slot(id);
            let generation = slot.timers.get(&key).map_or(1, |g| g + 1);
            slot.timers.insert(key, generation);
            self.schedule(
                after_ms,
                Event::Timer {
                    node: id,
                    incarnation,
                    key,
                    generation,
                },
            );
        }
        for (to, epoch, msg) in fx.sends.drain(..) {
            self.send(id, to, epoch, msg);
        }
        for out in fx.outputs.drain(..) {
            if self.trace.is_some() {
                self.note(|| format!("{id} outputs {out:?}"));
            }
            self.workload.on_output(id, self.now_ms, cause, &out);
        }
        fx.logs.clear();
    }

    fn send(&mut self, from: NodeId, to: NodeId, epoch: EpochId, msg: NodeMsg<P::Msg>) {
        if self.cut.contains(&(from, to)) || self.rng.random_bool(self.config.drop_probability) {
            return;
        }
        let copies = if self.rng.random_bool(self.config.duplicate_probability) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let delay = self
                .rng
                .random_range(self.config.min_delay_ms..=self.config.max_delay_ms);
            let msg = msg.clone();
            self.schedule(
                delay,
                Event::Deliver {
                    from,
                    to,
                    epoch,
                    msg,
                },
            );
        }
    }
}

//! Deterministic simulation: our own driver for the sans-IO nodes with a
//! seeded RNG, a virtual clock, and a network that loses, duplicates, delays
//! (and so reorders) messages, partitions nodes, and crashes and restarts
//! them. Everything random comes from one seeded RNG and everything ordered
//! from `BTreeMap`s and a sequence-numbered event queue, so one seed gives one
//! trace (its hash is reported and tested).
//!
//! Checkers run as the simulation goes and at its end:
//! * **view agreement**: two installs of one epoch have the same members;
//! * **lease safety**: after every event, no node serves in an epoch older
//!   than an installed view that excludes it (a removed node stopped serving
//!   before it was removed);
//! * **linearizability** of the register history (see [`check_register`]).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use roost_net::{Epoch, NodeId};
use serde::{Deserialize, Serialize};

use crate::membership::{MembershipBugs, MembershipConfig};
use crate::node::{Node, NodeEffects, NodeMsg, TimerKey};
use crate::protocol::{Incarnation, View};
use crate::register::{
    Register, RegisterBugs, RegisterCmd, RegisterConfig, RegisterMsg, RegisterOut, Tag,
};

/// The most events one run may process (a bound against a livelocked schedule).
pub const MAX_EVENTS: u64 = 5_000_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimConfig {
    pub nodes: u32,
    /// Virtual time simulated.
    pub duration_ms: u64,
    pub drop_probability: f64,
    pub duplicate_probability: f64,
    pub min_delay_ms: u64,
    pub max_delay_ms: u64,
    /// A fault (crash, restart, partition, heal) is considered this often.
    pub fault_interval_ms: u64,
    /// Probability that a considered fault happens.
    pub fault_probability: f64,
    /// Mean time between a client's operations.
    pub client_interval_ms: u64,
    pub membership: MembershipConfig,
    pub register: RegisterConfig,
    pub membership_bugs: MembershipBugs,
    pub register_bugs: RegisterBugs,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            nodes: 3,
            duration_ms: 3_000,
            drop_probability: 0.05,
            duplicate_probability: 0.02,
            min_delay_ms: 1,
            max_delay_ms: 8,
            fault_interval_ms: 250,
            fault_probability: 0.5,
            client_interval_ms: 15,
            membership: MembershipConfig {
                heartbeat_interval_ms: 20,
                lease_duration_ms: 150,
                suspect_after_ms: 60,
                clock_drift_margin_ms: 5,
                proposal_timeout_ms: 300,
            },
            register: RegisterConfig {
                retry_ms: 20,
                op_timeout_ms: 400,
            },
            membership_bugs: MembershipBugs::default(),
            register_bugs: RegisterBugs::default(),
        }
    }
}

impl SimConfig {
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=9).contains(&self.nodes) {
            return Err(format!("nodes = {} must be in 1..=9", self.nodes));
        }
        for (name, p) in [
            ("drop_probability", self.drop_probability),
            ("duplicate_probability", self.duplicate_probability),
            ("fault_probability", self.fault_probability),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("{name} = {p} is not a probability"));
            }
        }
        if self.min_delay_ms > self.max_delay_ms {
            return Err("min_delay_ms > max_delay_ms".into());
        }
        if self.duration_ms == 0 || self.duration_ms > 3_600_000 {
            return Err("duration_ms must be in 1..=3600000".into());
        }
        if self.fault_interval_ms == 0 || self.client_interval_ms == 0 {
            return Err("fault_interval_ms and client_interval_ms must be positive".into());
        }
        self.membership.validate().map_err(|e| e.to_string())
    }
}

/// One client operation as the simulator saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpRecord {
    pub node: u32,
    pub cmd: RegisterCmd,
    pub invoke_ms: u64,
    /// `None`: the outcome is unknown (timed out, or its node crashed).
    pub complete_ms: Option<u64>,
    /// The tag a write used or a read returned (a timed-out write's if known).
    pub tag: Option<Tag>,
    /// What a read returned.
    pub value: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimReport {
    pub seed: u64,
    pub trace_hash: u64,
    pub events: u64,
    pub messages_delivered: u64,
    pub ops_completed: u64,
    pub ops_unknown: u64,
    pub crashes: u64,
    pub partitions: u64,
    pub max_epoch: u64,
    pub violation: Option<String>,
}

type Msg = NodeMsg<RegisterMsg>;
type SimNode = Node<Register>;

#[derive(Debug)]
enum Event {
    Deliver {
        from: NodeId,
        to: NodeId,
        epoch: Epoch,
        msg: Msg,
    },
    Timer {
        node: NodeId,
        incarnation: Incarnation,
        key: TimerKey,
        generation: u64,
    },
    Client {
        node: NodeId,
    },
    Fault,
    Restart {
        node: NodeId,
    },
}

struct Scheduled {
    at_ms: u64,
    seq: u64,
    event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at_ms, self.seq) == (other.at_ms, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at_ms, self.seq).cmp(&(other.at_ms, other.seq))
    }
}

struct Slot {
    node: Option<SimNode>,
    incarnation: Incarnation,
    timers: BTreeMap<TimerKey, u64>,
    /// Index into the history of this node's client's operation in flight.
    in_flight: Option<usize>,
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

pub struct Simulation {
    config: SimConfig,
    seed: u64,
    rng: SmallRng,
    now_ms: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<Scheduled>>,
    slots: BTreeMap<NodeId, Slot>,
    ids: Vec<NodeId>,
    /// Directed links that are cut.
    cut: BTreeSet<(NodeId, NodeId)>,
    installed: BTreeMap<Epoch, View>,
    history: Vec<OpRecord>,
    next_value: u64,
    hash: TraceHash,
    scratch: Vec<u8>,
    fx: NodeEffects<RegisterMsg, RegisterOut>,
    report: SimReport,
    /// Human-readable trace lines (only when tracing is on).
    trace: Option<Vec<String>>,
}

impl Simulation {
    pub fn new(config: SimConfig, seed: u64) -> Self {
        assert!(config.validate().is_ok(), "invalid simulation config");
        let ids: Vec<NodeId> = (0..config.nodes).map(NodeId).collect();
        let mut sim = Simulation {
            rng: SmallRng::seed_from_u64(seed),
            seed,
            now_ms: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            slots: BTreeMap::new(),
            ids: ids.clone(),
            cut: BTreeSet::new(),
            installed: BTreeMap::new(),
            history: Vec::new(),
            next_value: 1,
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
                crashes: 0,
                partitions: 0,
                max_epoch: 0,
                violation: None,
            },
            trace: None,
            config,
        };
        for &id in &ids {
            sim.slots.insert(
                id,
                Slot {
                    node: None,
                    incarnation: 0,
                    timers: BTreeMap::new(),
                    in_flight: None,
                },
            );
            sim.boot(id);
            let first = sim.rng.random_range(0..sim.config.client_interval_ms * 2);
            sim.schedule(first, Event::Client { node: id });
        }
        let fault = sim.config.fault_interval_ms;
        sim.schedule(fault, Event::Fault);
        sim
    }

    /// Keep a readable trace (for `roost sim --seed S --trace`).
    pub fn with_trace(mut self) -> Self {
        self.trace = Some(Vec::new());
        self
    }

    pub fn trace_lines(&self) -> &[String] {
        self.trace.as_deref().unwrap_or(&[])
    }

    pub fn history(&self) -> &[OpRecord] {
        &self.history
    }

    fn note(&mut self, line: impl FnOnce() -> String) {
        if let Some(trace) = &mut self.trace {
            trace.push(format!("{:>6} ms  {}", self.now_ms, line()));
        }
    }

    fn schedule(&mut self, after_ms: u64, event: Event) {
        self.seq += 1;
        let at_ms = self.now_ms + after_ms;
        self.queue.push(Reverse(Scheduled {
            at_ms,
            seq: self.seq,
            event,
        }));
    }

    fn boot(&mut self, id: NodeId) {
        let slot = self.slots.get_mut(&id).expect("configured node");
        slot.incarnation += 1;
        slot.timers.clear();
        let app = Register::new(self.config.register.clone(), self.config.register_bugs);
        let mut node = Node::new(
            id,
            slot.incarnation,
            &self.ids,
            self.config.membership.clone(),
            self.config.membership_bugs,
            app,
            self.now_ms,
        );
        let mut fx = std::mem::take(&mut self.fx);
        fx.clear();
        node.start(self.now_ms, &mut fx);
        self.slots.get_mut(&id).expect("configured").node = Some(node);
        self.apply(id, &mut fx);
        self.fx = fx;
    }

    /// Runs to `duration_ms` (or the first violation) and reports.
    pub fn run(mut self) -> SimReport {
        self.run_in_place();
        self.report
    }

    pub fn run_in_place(&mut self) -> &SimReport {
        while let Some(Reverse(next)) = self.queue.pop() {
            if next.at_ms > self.config.duration_ms || self.report.violation.is_some() {
                break;
            }
            if self.report.events >= MAX_EVENTS {
                self.report.violation = Some(format!("more than {MAX_EVENTS} events"));
                break;
            }
            self.now_ms = next.at_ms;
            self.report.events += 1;
            self.hash.write_u64(next.at_ms);
            self.step(next.event);
            self.check_leases();
        }
        if self.report.violation.is_none() {
            self.finish_history();
            if let Err(violation) = check_register(&self.history) {
                self.report.violation = Some(violation);
            }
        }
        self.report.max_epoch = self.installed.keys().last().map_or(0, |e| e.0);
        self.report.trace_hash = self.hash.finish();
        let _ = self.seed;
        &self.report
    }

    fn step(&mut self, event: Event) {
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
                let slot = &self.slots[&node];
                let current = slot.incarnation == incarnation
                    && slot.node.is_some()
                    && slot.timers.get(&key) == Some(&generation);
                if current {
                    self.hash.write(&[1, node.0 as u8]);
                    self.with_node(node, |n, now, fx| n.on_timer(now, key, fx));
                }
            }
            Event::Client { node } => {
                self.client(node);
                let gap = self
                    .rng
                    .random_range(1..=self.config.client_interval_ms * 2);
                self.schedule(gap, Event::Client { node });
            }
            Event::Fault => {
                self.fault();
                self.schedule(self.config.fault_interval_ms, Event::Fault);
            }
            Event::Restart { node } => {
                self.hash.write(&[4, node.0 as u8]);
                self.note(|| format!("restart {node}"));
                self.boot(node);
            }
        }
    }

    fn deliver(&mut self, from: NodeId, to: NodeId, epoch: Epoch, msg: Msg) {
        if self.cut.contains(&(from, to)) || self.slots[&to].node.is_none() {
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
        self.with_node(to, |n, now, fx| n.on_message(now, from, epoch, msg, fx));
    }

    fn client(&mut self, node: NodeId) {
        let slot = &self.slots[&node];
        if slot.node.is_none() || slot.in_flight.is_some() {
            return;
        }
        let cmd = if self.rng.random_bool(0.5) {
            let value = self.next_value;
            self.next_value += 1;
            RegisterCmd::Write(value)
        } else {
            RegisterCmd::Read
        };
        self.hash.write(&[3, node.0 as u8]);
        self.with_node(node, |n, now, fx| n.on_command(now, cmd, fx));
    }

    fn fault(&mut self) {
        if !self.rng.random_bool(self.config.fault_probability) {
            return;
        }
        let n = self.ids.len();
        let max_down = n - (n / 2 + 1);
        let down = self
            .slots
            .values()
            .filter(|s| s.node.as_ref().is_none_or(|node| !node.app().recovered()))
            .count();
        let victim = self.ids[self.rng.random_range(0..n)];
        match self.rng.random_range(0..4u8) {
            // Crash only while the register's fault model allows it: a
            // majority must hold the data at all times.
            0 if down < max_down && self.slots[&victim].node.is_some() => {
                self.crash(victim);
                let after = self.rng.random_range(100..=800);
                self.schedule(after, Event::Restart { node: victim });
            }
            1 => {
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
            2 => {
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
        let slot = self.slots.get_mut(&id).expect("configured");
        slot.node = None;
        slot.timers.clear();
        if let Some(index) = slot.in_flight.take() {
            self.history[index].complete_ms = None; // outcome unknown
        }
    }

    fn with_node(
        &mut self,
        id: NodeId,
        call: impl FnOnce(&mut SimNode, u64, &mut NodeEffects<RegisterMsg, RegisterOut>),
    ) {
        let mut fx = std::mem::take(&mut self.fx);
        fx.clear();
        let now = self.now_ms;
        let Some(node) = self.slots.get_mut(&id).and_then(|s| s.node.as_mut()) else {
            self.fx = fx;
            return;
        };
        call(node, now, &mut fx);
        self.apply(id, &mut fx);
        self.fx = fx;
    }

    fn apply(&mut self, id: NodeId, fx: &mut NodeEffects<RegisterMsg, RegisterOut>) {
        for view in fx.installed.drain(..) {
            self.record_install(id, view);
        }
        for (key, after_ms) in fx.timers.drain(..) {
            let slot = self.slots.get_mut(&id).expect("configured");
            let generation = slot.timers.get(&key).map_or(1, |g| g + 1);
            slot.timers.insert(key, generation);
            let incarnation = slot.incarnation;
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
        let sends: Vec<_> = fx.sends.drain(..).collect();
        for (to, epoch, msg) in sends {
            self.send(id, to, epoch, msg);
        }
        let outputs: Vec<_> = fx.outputs.drain(..).collect();
        for out in outputs {
            self.record_output(id, out);
        }
        fx.logs.clear();
    }

    fn send(&mut self, from: NodeId, to: NodeId, epoch: Epoch, msg: Msg) {
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

    fn record_install(&mut self, id: NodeId, view: View) {
        self.note(|| format!("{id} installs {} {:?}", view.epoch, view.members));
        match self.installed.get(&view.epoch) {
            Some(existing) if *existing != view => {
                self.report.violation = Some(format!(
                    "view agreement: {id} installed {} as {:?}, another node as {:?}",
                    view.epoch, view.members, existing.members
                ));
            }
            Some(_) => {}
            None => {
                self.installed.insert(view.epoch, view);
            }
        }
    }

    fn record_output(&mut self, id: NodeId, out: RegisterOut) {
        let now = self.now_ms;
        let slot = self.slots.get_mut(&id).expect("configured");
        match out {
            RegisterOut::Accepted { cmd, .. } => {
                slot.in_flight = Some(self.history.len());
                self.history.push(OpRecord {
                    node: id.0,
                    cmd,
                    invoke_ms: now,
                    complete_ms: None,
                    tag: None,
                    value: None,
                });
            }
            RegisterOut::Written { tag, .. } => {
                if let Some(index) = slot.in_flight.take() {
                    self.history[index].complete_ms = Some(now);
                    self.history[index].tag = Some(tag);
                }
            }
            RegisterOut::ReadDone { tag, value, .. } => {
                if let Some(index) = slot.in_flight.take() {
                    let record = &mut self.history[index];
                    record.complete_ms = Some(now);
                    record.tag = Some(tag);
                    record.value = Some(value);
                }
            }
            RegisterOut::Storing { tag, .. } => {
                if let Some(index) = slot.in_flight {
                    self.history[index].tag = Some(tag);
                }
            }
            RegisterOut::TimedOut { tag, .. } => {
                if let Some(index) = slot.in_flight.take() {
                    self.history[index].tag = tag;
                }
            }
            RegisterOut::Rejected { .. } | RegisterOut::Recovered { .. } => {}
        }
    }

    /// Lease safety after every event.
    fn check_leases(&mut self) {
        if self.report.violation.is_some() {
            return;
        }
        for (&id, slot) in &self.slots {
            let Some(node) = &slot.node else { continue };
            if !node.serving(self.now_ms) {
                continue;
            }
            let epoch = node.epoch();
            let excluded = self
                .installed
                .range(Epoch(epoch.0 + 1)..)
                .find(|(_, view)| !view.contains(id, slot.incarnation));
            if let Some((later, _)) = excluded {
                self.report.violation = Some(format!(
                    "lease safety: {id} serves in {epoch} at {} ms, but {later} excludes it",
                    self.now_ms
                ));
                return;
            }
        }
    }

    fn finish_history(&mut self) {
        for record in &self.history {
            if record.complete_ms.is_some() {
                self.report.ops_completed += 1;
            } else {
                self.report.ops_unknown += 1;
            }
        }
    }
}

/// Checks a register history for linearizability the ABD way: (a) writes
/// have unique tags and every read returns the value of the write with its
/// tag (or the initial 0 at the zero tag), a write not invoked after the read
/// completed; (b) if operation A completed before B was invoked, then
/// tag(A) <= tag(B), strictly if B is a write. Operations of unknown outcome
/// are in (a) (their writes may have happened) but never precede anything.
pub fn check_register(history: &[OpRecord]) -> Result<(), String> {
    let mut writes: BTreeMap<Tag, &OpRecord> = BTreeMap::new();
    for op in history {
        if let (RegisterCmd::Write(_), Some(tag)) = (op.cmd, op.tag) {
            if let Some(other) = writes.insert(tag, op) {
                return Err(format!(
                    "two writes share tag {tag:?}: {other:?} and {op:?}"
                ));
            }
        }
    }
    for op in history {
        let (RegisterCmd::Read, Some(tag), Some(value), Some(done)) =
            (op.cmd, op.tag, op.value, op.complete_ms)
        else {
            continue;
        };
        if tag == Tag::default() {
            if value != 0 {
                return Err(format!("read {op:?} returned {value} with the initial tag"));
            }
            continue;
        }
        match writes.get(&tag) {
            Some(write) if write.cmd == RegisterCmd::Write(value) && write.invoke_ms <= done => {}
            Some(write) => return Err(format!("read {op:?} does not match the write {write:?}")),
            None => return Err(format!("read {op:?} returned a tag no write used")),
        }
    }
    // Sweep: operations by invocation; before each, fold in every operation
    // completed strictly earlier.
    let mut completed: Vec<(u64, Tag)> = history
        .iter()
        .filter_map(|op| Some((op.complete_ms?, op.tag?)))
        .collect();
    completed.sort_unstable();
    let mut by_invoke: Vec<&OpRecord> = history
        .iter()
        .filter(|op| op.complete_ms.is_some())
        .collect();
    by_invoke.sort_by_key(|op| op.invoke_ms);
    let mut max_before: Option<Tag> = None;
    let mut next = 0;
    for op in by_invoke {
        while next < completed.len() && completed[next].0 < op.invoke_ms {
            max_before = max_before.max(Some(completed[next].1));
            next += 1;
        }
        let (Some(before), Some(tag)) = (max_before, op.tag) else {
            continue;
        };
        let stale = match op.cmd {
            RegisterCmd::Write(_) => tag <= before,
            RegisterCmd::Read => tag < before,
        };
        if stale {
            return Err(format!(
                "not linearizable: {op:?} has tag {tag:?}, but an operation with tag {before:?} completed before it was invoked"
            ));
        }
    }
    Ok(())
}

/// The outcome of a campaign over many seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Campaign {
    pub seeds_run: u64,
    pub first_failure: Option<SimReport>,
    pub ops_completed: u64,
    pub crashes: u64,
    pub partitions: u64,
    pub max_epoch: u64,
}

/// Runs `seeds` consecutive seeds from `first_seed`, stopping at the first failure.
pub fn campaign(config: &SimConfig, first_seed: u64, seeds: u64) -> Campaign {
    let mut result = Campaign {
        seeds_run: 0,
        first_failure: None,
        ops_completed: 0,
        crashes: 0,
        partitions: 0,
        max_epoch: 0,
    };
    for seed in first_seed..first_seed.saturating_add(seeds) {
        let report = Simulation::new(config.clone(), seed).run();
        result.seeds_run += 1;
        result.ops_completed += report.ops_completed;
        result.crashes += report.crashes;
        result.partitions += report.partitions;
        result.max_epoch = result.max_epoch.max(report.max_epoch);
        if report.violation.is_some() {
            result.first_failure = Some(report);
            break;
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(
        cmd: RegisterCmd,
        invoke: u64,
        complete: Option<u64>,
        tag: u64,
        value: Option<u64>,
    ) -> OpRecord {
        OpRecord {
            node: 0,
            cmd,
            invoke_ms: invoke,
            complete_ms: complete,
            tag: Some(Tag {
                counter: tag,
                writer: 0,
            }),
            value,
        }
    }

    #[test]
    fn checker_accepts_a_linearizable_history() {
        let history = vec![
            op(RegisterCmd::Write(5), 0, Some(10), 1, None),
            op(RegisterCmd::Read, 11, Some(20), 1, Some(5)),
            op(RegisterCmd::Write(6), 15, None, 2, None),
            op(RegisterCmd::Read, 16, Some(30), 2, Some(6)),
        ];
        assert_eq!(check_register(&history), Ok(()));
    }

    #[test]
    fn checker_flags_stale_reads_and_bad_values() {
        let stale = vec![
            op(RegisterCmd::Write(5), 0, Some(10), 1, None),
            op(RegisterCmd::Read, 11, Some(20), 0, Some(0)),
        ];
        assert!(check_register(&stale)
            .unwrap_err()
            .contains("not linearizable"));
        let wrong_value = vec![
            op(RegisterCmd::Write(5), 0, Some(10), 1, None),
            op(RegisterCmd::Read, 11, Some(20), 1, Some(7)),
        ];
        assert!(check_register(&wrong_value).is_err());
        let from_the_future = vec![
            op(RegisterCmd::Read, 0, Some(5), 1, Some(5)),
            op(RegisterCmd::Write(5), 6, Some(10), 1, None),
        ];
        assert!(check_register(&from_the_future).is_err());
    }
}

//! The ABD register's simulation: [`RegisterWorkload`] (every client of
//! every node reads, or writes a unique value, one operation at a time, so a
//! node has up to `clients_per_node` in flight) and [`Linearizability`] of the
//! recorded history (see [`check_register`]), beside the membership checkers.

use std::collections::BTreeMap;

use rand::Rng;
use roost_net::NodeId;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::campaign::{run_simulation, Scenario, SimRun};
use super::check::{membership_checkers, LeaseSafety, ViewAgreement};
use super::core::{
    Cause, Checker, ClientId, Factory, SimConfig, SimConfigError, SimRng, Simulation, Violation,
    Workload, WorkloadStats, World,
};
use crate::protocol::Incarnation;
use crate::register::{
    OpId, Register, RegisterBugs, RegisterCmd, RegisterConfig, RegisterOut, Tag,
};

/// One client operation as the simulator saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpRecord {
    pub node: u32,
    pub client: u32,
    pub cmd: RegisterCmd,
    pub invoke_ms: u64,
    /// `None`: the outcome is unknown (timed out, or its node crashed).
    pub complete_ms: Option<u64>,
    /// The tag a write used or a read returned (a timed-out write's if known).
    pub tag: Option<Tag>,
    /// What a read returned.
    pub value: Option<u64>,
}

/// The register's settings in a simulation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegisterScenario {
    pub register: RegisterConfig,
    pub bugs: RegisterBugs,
    /// Probability that a client's operation is a write.
    pub write_probability: f64,
}

impl Default for RegisterScenario {
    fn default() -> Self {
        RegisterScenario {
            register: RegisterConfig {
                retry_ms: 20,
                op_timeout_ms: 400,
            },
            bugs: RegisterBugs::default(),
            write_probability: 0.5,
        }
    }
}

/// The checkers of a register simulation.
pub type RegisterCheckers = (ViewAgreement, LeaseSafety, Linearizability);
pub type RegisterSimulation =
    Simulation<Register, RegisterFactory, RegisterWorkload, RegisterCheckers>;

impl RegisterScenario {
    pub fn simulation(
        &self,
        config: SimConfig,
        seed: u64,
    ) -> Result<RegisterSimulation, SimConfigError> {
        Scenario::validate(self)?;
        let (view_agreement, lease_safety) = membership_checkers();
        Simulation::new(
            config,
            seed,
            RegisterFactory {
                config: self.register.clone(),
                bugs: self.bugs,
            },
            RegisterWorkload::new(self.write_probability),
            (view_agreement, lease_safety, Linearizability),
        )
    }
}

impl Scenario for RegisterScenario {
    fn protocol(&self) -> &'static str {
        "register"
    }

    fn validate(&self) -> Result<(), SimConfigError> {
        let invalid = |reason| SimConfigError::Protocol {
            protocol: "register",
            reason,
        };
        if self.register.retry_ms == 0 || self.register.op_timeout_ms == 0 {
            return Err(invalid("retry_ms and op_timeout_ms must be positive"));
        }
        if !(0.0..=1.0).contains(&self.write_probability) {
            return Err(invalid("write_probability is not a probability"));
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

pub struct RegisterFactory {
    config: RegisterConfig,
    bugs: RegisterBugs,
}

impl Factory<Register> for RegisterFactory {
    fn make(&mut self, _node: NodeId, _incarnation: Incarnation) -> Register {
        Register::new(self.config.clone(), self.bugs)
    }

    /// A restarted replica holds nothing until it has recovered.
    fn ready(&self, register: &Register) -> bool {
        register.recovered()
    }
}

/// Clients issue one operation at a time each; the register answers every
/// command at once (`Accepted` with its op id, or `Rejected`), which is when
/// the workload learns which client the op id belongs to.
pub struct RegisterWorkload {
    write_probability: f64,
    next_value: u64,
    history: Vec<OpRecord>,
    /// Each client's operation in flight (an index into `history`).
    clients: BTreeMap<ClientId, usize>,
    /// Operations in flight by the node coordinating them and its op id.
    by_op: BTreeMap<(NodeId, OpId), ClientId>,
    rejected: u64,
}

impl RegisterWorkload {
    pub fn new(write_probability: f64) -> Self {
        RegisterWorkload {
            write_probability,
            next_value: 1,
            history: Vec::new(),
            clients: BTreeMap::new(),
            by_op: BTreeMap::new(),
            rejected: 0,
        }
    }

    /// Ends `op`'s time in flight; its record, if it was in flight.
    fn finish(&mut self, node: NodeId, op: OpId) -> Option<&mut OpRecord> {
        let client = self.by_op.remove(&(node, op))?;
        let index = self
            .clients
            .remove(&client)
            .expect("an op in flight belongs to a busy client");
        Some(&mut self.history[index])
    }

    /// The most completed operations that were in flight on one node at once
    /// (ending before another starts at the same millisecond).
    pub fn max_concurrent_per_node(&self) -> usize {
        let mut best = 0;
        let mut by_node: BTreeMap<u32, Vec<&OpRecord>> = BTreeMap::new();
        for op in &self.history {
            by_node.entry(op.node).or_default().push(op);
        }
        for ops in by_node.values() {
            // Sweep over invocations (+1) and completions (-1).
            let mut points: Vec<(u64, i64)> = Vec::with_capacity(ops.len() * 2);
            for op in ops {
                // Only completed operations: the others' end is unknown.
                if let Some(done) = op.complete_ms {
                    points.push((op.invoke_ms, 1));
                    points.push((done, -1));
                }
            }
            points.sort_by_key(|&(at, delta)| (at, delta));
            let mut open = 0i64;
            for (_, delta) in points {
                open += delta;
                best = best.max(open as usize);
            }
        }
        best
    }
}

impl Workload<Register> for RegisterWorkload {
    type History = Vec<OpRecord>;

    fn next_command(
        &mut self,
        rng: &mut SimRng,
        _now_ms: u64,
        client: ClientId,
    ) -> Option<RegisterCmd> {
        if self.clients.contains_key(&client) {
            return None; // this client waits for its operation
        }
        Some(if rng.random_bool(self.write_probability) {
            let value = self.next_value;
            self.next_value += 1;
            RegisterCmd::Write(value)
        } else {
            RegisterCmd::Read
        })
    }

    fn on_output(&mut self, node: NodeId, now_ms: u64, cause: Cause, out: &RegisterOut) {
        match *out {
            RegisterOut::Accepted { op, cmd } => {
                let Cause::Command(client) = cause else {
                    panic!("the register accepts only while handling a command: {out:?}");
                };
                assert_eq!(client.node, node);
                let previous = self.clients.insert(client, self.history.len());
                assert!(previous.is_none(), "{client} has one operation at a time");
                self.by_op.insert((node, op), client);
                self.history.push(OpRecord {
                    node: node.0,
                    client: client.index,
                    cmd,
                    invoke_ms: now_ms,
                    complete_ms: None,
                    tag: None,
                    value: None,
                });
            }
            RegisterOut::Rejected { .. } => {
                assert!(matches!(cause, Cause::Command(_)), "{out:?}");
                self.rejected += 1;
            }
            RegisterOut::Written { op, tag } => {
                if let Some(record) = self.finish(node, op) {
                    record.complete_ms = Some(now_ms);
                    record.tag = Some(tag);
                }
            }
            RegisterOut::ReadDone { op, tag, value } => {
                if let Some(record) = self.finish(node, op) {
                    record.complete_ms = Some(now_ms);
                    record.tag = Some(tag);
                    record.value = Some(value);
                }
            }
            RegisterOut::Storing { op, tag } => {
                if let Some(&client) = self.by_op.get(&(node, op)) {
                    let index = self.clients[&client];
                    self.history[index].tag = Some(tag);
                }
            }
            RegisterOut::TimedOut { op, tag } => {
                if let Some(record) = self.finish(node, op) {
                    record.tag = tag; // outcome unknown
                }
            }
            RegisterOut::Recovered { .. } => {}
        }
    }

    fn on_crash(&mut self, node: NodeId, _now_ms: u64) {
        let lost: Vec<(NodeId, OpId)> = self
            .by_op
            .range((node, OpId::MIN)..=(node, OpId::MAX))
            .map(|(&key, _)| key)
            .collect();
        for (node, op) in lost {
            self.finish(node, op); // outcome unknown: complete_ms stays None
        }
    }

    fn history(&self) -> &Vec<OpRecord> {
        &self.history
    }

    fn stats(&self) -> WorkloadStats {
        let completed = self
            .history
            .iter()
            .filter(|op| op.complete_ms.is_some())
            .count() as u64;
        WorkloadStats {
            completed,
            unknown: self.history.len() as u64 - completed,
            rejected: self.rejected,
        }
    }
}

/// Linearizability of the register history, checked at the end.
#[derive(Debug, Clone, Copy, Default)]
pub struct Linearizability;

impl Checker<Register, Vec<OpRecord>> for Linearizability {
    fn after_event(&mut self, _: &World<'_, Register>, _: &Vec<OpRecord>) -> Result<(), Violation> {
        Ok(())
    }

    fn at_end(
        &mut self,
        world: &World<'_, Register>,
        history: &Vec<OpRecord>,
    ) -> Result<(), Violation> {
        check_register(history)
            .map_err(|error| Violation::new("linearizability", world.now_ms, error.to_string()))
    }
}

/// How a register history fails to be linearizable.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RegisterViolation {
    #[error("two writes share tag {tag:?}: {first:?} and {second:?}")]
    SharedTag {
        tag: Tag,
        first: Box<OpRecord>,
        second: Box<OpRecord>,
    },
    #[error("read {0:?} returned a value other than 0 with the initial tag")]
    InitialValue(Box<OpRecord>),
    #[error("read {read:?} does not match the write {write:?}")]
    Mismatch {
        read: Box<OpRecord>,
        write: Box<OpRecord>,
    },
    #[error("read {0:?} returned a tag no write used")]
    UnknownTag(Box<OpRecord>),
    #[error("not linearizable: {op:?} has tag {tag:?}, but an operation with tag {before:?} completed before it was invoked")]
    Stale {
        op: Box<OpRecord>,
        tag: Tag,
        before: Tag,
    },
}

/// Checks a register history for linearizability the ABD way: (a) writes
/// have unique tags and every read returns the value of the write with its
/// tag (or the initial 0 at the zero tag), a write not invoked after the read
/// completed; (b) if operation A completed before B was invoked, then
/// tag(A) <= tag(B), strictly if B is a write. Operations of unknown outcome
/// are in (a) (their writes may have happened) but never precede anything.
pub fn check_register(history: &[OpRecord]) -> Result<(), RegisterViolation> {
    let mut writes: BTreeMap<Tag, &OpRecord> = BTreeMap::new();
    for op in history {
        if let (RegisterCmd::Write(_), Some(tag)) = (op.cmd, op.tag) {
            if let Some(other) = writes.insert(tag, op) {
                return Err(RegisterViolation::SharedTag {
                    tag,
                    first: Box::new(other.clone()),
                    second: Box::new(op.clone()),
                });
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
                return Err(RegisterViolation::InitialValue(Box::new(op.clone())));
            }
            continue;
        }
        match writes.get(&tag) {
            Some(write) if write.cmd == RegisterCmd::Write(value) && write.invoke_ms <= done => {}
            Some(write) => {
                return Err(RegisterViolation::Mismatch {
                    read: Box::new(op.clone()),
                    write: Box::new((*write).clone()),
                })
            }
            None => return Err(RegisterViolation::UnknownTag(Box::new(op.clone()))),
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
            return Err(RegisterViolation::Stale {
                op: Box::new(op.clone()),
                tag,
                before,
            });
        }
    }
    Ok(())
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
            client: 0,
            cmd,
            invoke_ms: invoke,
            complete_ms: complete,
            // Counter 0 is the initial tag.
            tag: Some(if tag == 0 {
                Tag::default()
            } else {
                Tag {
                    counter: tag,
                    writer: 0,
                    incarnation: 1,
                }
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
        assert!(matches!(
            check_register(&stale),
            Err(RegisterViolation::Stale { .. })
        ));
        let wrong_value = vec![
            op(RegisterCmd::Write(5), 0, Some(10), 1, None),
            op(RegisterCmd::Read, 11, Some(20), 1, Some(7)),
        ];
        assert!(matches!(
            check_register(&wrong_value),
            Err(RegisterViolation::Mismatch { .. })
        ));
        let from_the_future = vec![
            op(RegisterCmd::Read, 0, Some(5), 1, Some(5)),
            op(RegisterCmd::Write(5), 6, Some(10), 1, None),
        ];
        assert!(check_register(&from_the_future).is_err());
        let shared = vec![
            op(RegisterCmd::Write(5), 0, Some(10), 1, None),
            op(RegisterCmd::Write(6), 1, Some(10), 1, None),
        ];
        assert!(matches!(
            check_register(&shared),
            Err(RegisterViolation::SharedTag { .. })
        ));
    }
}

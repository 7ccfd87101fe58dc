//! The example protocol: a multi-writer atomic register replicated on every
//! node with leader-less majority quorums (Attiya, Bar-Noy and Dolev's ABD).
//!
//! A write queries a majority for their tags, picks a tag above the largest,
//! and stores it at a majority. A read queries a majority, takes the largest
//! tag and writes it back to a majority before returning (without the write
//! back two reads could see a new value and then an old one). Tags are
//! `(counter, writer)` and unique per write. Safety property, checked by the
//! simulator: the history is linearizable, which for ABD follows from (a)
//! real-time order never goes against tag order (a write after a completed
//! operation gets a larger tag, a read a tag at least as large) and (b) every
//! read returns the value written with its tag.
//!
//! A replica coordinates up to [`MAX_IN_FLIGHT`] operations at once (several
//! clients per node); its writes never share a tag, even when they queried
//! the same largest one.
//!
//! Replicas live in memory: a process that restarts has lost its copy, so it
//! answers no quorum until it has recovered the largest tag from a majority of
//! recovered replicas (the first view, epoch 1, starts with nothing written, so
//! its members are recovered from the start).

use std::collections::{BTreeMap, BTreeSet};

use roost_net::{EpochId, NodeId};
use serde::{Deserialize, Serialize};

use crate::protocol::{Context, Effects, Incarnation, Input, Protocol, TimerId};

/// A write's identity: larger counter wins, the writer's id and then its
/// incarnation break ties.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Tag {
    pub counter: u64,
    pub writer: u32,
    /// A restarted writer has forgotten the counters it chose: a write it
    /// left stored at a minority may hold a counter that a majority never
    /// saw, which the next incarnation may choose again (the simulator found
    /// it with five nodes: two values under one tag, and a lost write).
    #[serde(default)]
    pub incarnation: Incarnation,
}

pub type OpId = u64;

/// The most operations (client ones and recovery) one replica coordinates at
/// once; a command beyond it is rejected as [`RejectReason::Busy`].
pub const MAX_IN_FLIGHT: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RegisterMsg {
    Query { op: OpId },
    QueryReply { op: OpId, tag: Tag, value: u64 },
    Store { op: OpId, tag: Tag, value: u64 },
    StoreAck { op: OpId },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RegisterCmd {
    Write(u64),
    Read,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RejectReason {
    /// No valid lease (or not a member of the view).
    NotServing,
    /// [`MAX_IN_FLIGHT`] operations are in flight on this node already.
    Busy,
    /// This replica lost its state in a restart and has not recovered yet.
    Recovering,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RegisterOut {
    Accepted {
        op: OpId,
        cmd: RegisterCmd,
    },
    Rejected {
        cmd: RegisterCmd,
        reason: RejectReason,
    },
    Written {
        op: OpId,
        tag: Tag,
    },
    ReadDone {
        op: OpId,
        tag: Tag,
        value: u64,
    },
    /// Timed out: a write's effect is unknown (`tag` if it reached the store
    /// phase).
    TimedOut {
        op: OpId,
        tag: Option<Tag>,
    },
    Recovered {
        tag: Tag,
    },
    /// A write chose its tag and starts storing it (a history needs the tag
    /// even if the write never completes).
    Storing {
        op: OpId,
        tag: Tag,
    },
}

/// Planted faults for the simulator's tests (never set in production).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterBugs {
    /// Quorums one short of a majority: two quorums need not intersect.
    pub quorum_minus_one: bool,
    /// A restarted replica answers at once with its empty state.
    pub skip_recovery: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Query,
    Store,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Client(RegisterCmd),
    Recover,
}

#[derive(Debug, Clone)]
struct Pending {
    purpose: Purpose,
    phase: Phase,
    epoch: EpochId,
    replied: BTreeSet<NodeId>,
    best: (Tag, u64),
    started_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterConfig {
    pub retry_ms: u64,
    pub op_timeout_ms: u64,
}

impl Default for RegisterConfig {
    fn default() -> Self {
        RegisterConfig {
            retry_ms: 30,
            op_timeout_ms: 1_000,
        }
    }
}

const RETRY_TIMER: TimerId = 1;

#[derive(Debug, Clone)]
pub struct Register {
    config: RegisterConfig,
    bugs: RegisterBugs,
    tag: Tag,
    value: u64,
    recovered: bool,
    next_op: OpId,
    /// The largest counter this incarnation chose for a write: two concurrent
    /// writes of one node may query the same largest tag and still need tags
    /// of their own.
    chosen: u64,
    /// This process's incarnation, as the view lists it once it is a member
    /// (a write's tag carries it).
    incarnation: Option<Incarnation>,
    pending: BTreeMap<OpId, Pending>,
    /// The retry timer is set and has not fired: a new operation must not
    /// push it back (a steady stream of them would starve the retries).
    timer_armed: bool,
}

impl Register {
    pub fn new(config: RegisterConfig, bugs: RegisterBugs) -> Self {
        Register {
            config,
            bugs,
            tag: Tag::default(),
            value: 0,
            recovered: bugs.skip_recovery,
            next_op: 1,
            chosen: 0,
            incarnation: None,
            pending: BTreeMap::new(),
            timer_armed: false,
        }
    }

    pub fn recovered(&self) -> bool {
        self.recovered
    }

    pub fn stored(&self) -> (Tag, u64) {
        (self.tag, self.value)
    }

    /// Operations this replica coordinates now (recovery included).
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    fn quorum(&self, ctx: &Context<'_>) -> usize {
        let majority = ctx.majority();
        if self.bugs.quorum_minus_one {
            (majority - 1).max(1)
        } else {
            majority
        }
    }

    fn arm_timer(&mut self, fx: &mut Effects<RegisterMsg, RegisterOut>) {
        if !self.timer_armed {
            self.timer_armed = true;
            fx.set_timer(RETRY_TIMER, self.config.retry_ms);
        }
    }

    fn begin(
        &mut self,
        ctx: &Context<'_>,
        purpose: Purpose,
        fx: &mut Effects<RegisterMsg, RegisterOut>,
    ) {
        assert!(
            self.pending.len() < MAX_IN_FLIGHT,
            "callers check the bound"
        );
        let op = self.next_op;
        self.next_op += 1;
        self.pending.insert(
            op,
            Pending {
                purpose,
                phase: Phase::Query,
                epoch: ctx.view.epoch,
                replied: BTreeSet::new(),
                best: (Tag::default(), 0),
                started_ms: ctx.now_ms,
            },
        );
        if let Purpose::Client(cmd) = purpose {
            fx.output(RegisterOut::Accepted { op, cmd });
        }
        self.broadcast(ctx, op, fx);
        self.arm_timer(fx);
    }

    /// Sends `op`'s current phase's request to every replica that has not
    /// answered; this node answers itself directly.
    fn broadcast(
        &mut self,
        ctx: &Context<'_>,
        op: OpId,
        fx: &mut Effects<RegisterMsg, RegisterOut>,
    ) {
        let Some(pending) = self.pending.get(&op) else {
            return;
        };
        let (phase, best) = (pending.phase, pending.best);
        for &node in ctx.nodes {
            if node == ctx.me || pending.replied.contains(&node) {
                continue;
            }
            let msg = match phase {
                Phase::Query => RegisterMsg::Query { op },
                Phase::Store => RegisterMsg::Store {
                    op,
                    tag: best.0,
                    value: best.1,
                },
            };
            fx.send(node, msg);
        }
        if self.recovered && !pending.replied.contains(&ctx.me) {
            match phase {
                Phase::Query => {
                    let (tag, value) = (self.tag, self.value);
                    self.on_reply(ctx, ctx.me, op, Some((tag, value)), fx);
                }
                Phase::Store => {
                    self.store(best.0, best.1);
                    self.on_reply(ctx, ctx.me, op, None, fx);
                }
            }
        }
    }

    fn store(&mut self, tag: Tag, value: u64) {
        if tag > self.tag {
            self.tag = tag;
            self.value = value;
        }
    }

    fn on_reply(
        &mut self,
        ctx: &Context<'_>,
        from: NodeId,
        op: OpId,
        query: Option<(Tag, u64)>,
        fx: &mut Effects<RegisterMsg, RegisterOut>,
    ) {
        let quorum = self.quorum(ctx);
        let Some(pending) = self.pending.get_mut(&op) else {
            return; // finished, timed out, or of an earlier incarnation
        };
        let expected = match pending.phase {
            Phase::Query => query.is_some(),
            Phase::Store => query.is_none(),
        };
        if !expected || !pending.replied.insert(from) {
            return; // duplicated or of the other phase
        }
        if let Some(reply) = query {
            pending.best = pending.best.max(reply);
        }
        if pending.replied.len() < quorum {
            return;
        }
        match (pending.phase, pending.purpose) {
            (Phase::Query, Purpose::Recover) => {
                let (tag, value) = pending.best;
                self.pending.remove(&op);
                self.store(tag, value);
                self.recovered = true;
                fx.output(RegisterOut::Recovered { tag });
            }
            (Phase::Query, Purpose::Client(cmd)) => {
                if let RegisterCmd::Write(value) = cmd {
                    let counter = pending.best.0.counter.max(self.chosen) + 1;
                    self.chosen = counter;
                    let tag = Tag {
                        counter,
                        writer: ctx.me.0,
                        incarnation: self
                            .incarnation
                            .expect("learned when the write was accepted"),
                    };
                    pending.best = (tag, value);
                    fx.output(RegisterOut::Storing { op, tag });
                }
                pending.phase = Phase::Store;
                pending.replied.clear();
                self.broadcast(ctx, op, fx);
            }
            (Phase::Store, Purpose::Client(cmd)) => {
                let (tag, value) = pending.best;
                self.pending.remove(&op);
                fx.output(match cmd {
                    RegisterCmd::Write(_) => RegisterOut::Written { op, tag },
                    RegisterCmd::Read => RegisterOut::ReadDone { op, tag, value },
                });
            }
            (Phase::Store, Purpose::Recover) => unreachable!("recovery has no store phase"),
        }
    }

    fn on_command(
        &mut self,
        ctx: &Context<'_>,
        cmd: RegisterCmd,
        fx: &mut Effects<RegisterMsg, RegisterOut>,
    ) {
        let reason = if !ctx.serving {
            Some(RejectReason::NotServing)
        } else if !self.recovered {
            Some(RejectReason::Recovering)
        } else if self.pending.len() >= MAX_IN_FLIGHT {
            Some(RejectReason::Busy)
        } else {
            None
        };
        match reason {
            Some(reason) => fx.output(RegisterOut::Rejected { cmd, reason }),
            None => {
                // Serving implies member: the view lists this very incarnation.
                assert!(ctx.member, "serving without being a member");
                self.incarnation = ctx.view.members.get(&ctx.me).copied();
                self.begin(ctx, Purpose::Client(cmd), fx)
            }
        }
    }

    fn on_timer(&mut self, ctx: &Context<'_>, fx: &mut Effects<RegisterMsg, RegisterOut>) {
        self.timer_armed = false;
        let ops: Vec<OpId> = self.pending.keys().copied().collect();
        let mut recover_again = false;
        for op in ops {
            let Some(pending) = self.pending.get_mut(&op) else {
                continue;
            };
            if ctx.now_ms >= pending.started_ms + self.config.op_timeout_ms {
                let tag = match (pending.phase, pending.purpose) {
                    (Phase::Store, Purpose::Client(RegisterCmd::Write(_))) => Some(pending.best.0),
                    _ => None,
                };
                let client = matches!(pending.purpose, Purpose::Client(_));
                self.pending.remove(&op);
                if client {
                    fx.output(RegisterOut::TimedOut { op, tag });
                } else {
                    recover_again = true;
                }
                continue;
            }
            if pending.epoch != ctx.view.epoch {
                // Replies of the old epoch are dropped: ask again in the new one.
                pending.epoch = ctx.view.epoch;
                pending.replied.clear();
            }
            self.broadcast(ctx, op, fx);
        }
        if recover_again {
            self.maybe_recover(ctx, fx); // try again
        }
        if !self.pending.is_empty() {
            self.arm_timer(fx);
        }
    }

    fn maybe_recover(&mut self, ctx: &Context<'_>, fx: &mut Effects<RegisterMsg, RegisterOut>) {
        // Membership is by incarnation: a restarted process finds its node id
        // in the view its previous incarnation belonged to, and is not a member.
        let recovering = self.pending.values().any(|p| p.purpose == Purpose::Recover);
        if self.recovered || recovering || !ctx.member {
            return;
        }
        if ctx.view.epoch == EpochId(1) {
            // This incarnation is in the first view: nothing can have been
            // written before it.
            self.recovered = true;
            fx.output(RegisterOut::Recovered { tag: self.tag });
            return;
        }
        self.begin(ctx, Purpose::Recover, fx);
    }
}

impl Protocol for Register {
    type Msg = RegisterMsg;
    type Cmd = RegisterCmd;
    type Out = RegisterOut;

    fn on_input(
        &mut self,
        ctx: &Context<'_>,
        input: Input<RegisterMsg, RegisterCmd>,
        fx: &mut Effects<RegisterMsg, RegisterOut>,
    ) {
        match input {
            Input::Command(cmd) => self.on_command(ctx, cmd, fx),
            Input::Timer(RETRY_TIMER) => self.on_timer(ctx, fx),
            Input::Timer(_) => {}
            Input::ViewChange => self.maybe_recover(ctx, fx),
            Input::Message { from, msg } => match msg {
                // A replica that lost its state answers nothing until recovered.
                RegisterMsg::Query { op } if self.recovered => {
                    let (tag, value) = (self.tag, self.value);
                    fx.send(from, RegisterMsg::QueryReply { op, tag, value });
                }
                RegisterMsg::Store { op, tag, value } if self.recovered => {
                    self.store(tag, value);
                    fx.send(from, RegisterMsg::StoreAck { op });
                }
                RegisterMsg::Query { .. } | RegisterMsg::Store { .. } => {}
                RegisterMsg::QueryReply { op, tag, value } => {
                    self.on_reply(ctx, from, op, Some((tag, value)), fx)
                }
                RegisterMsg::StoreAck { op } => self.on_reply(ctx, from, op, None, fx),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::protocol::View;

    const NODES: [NodeId; 5] = [NodeId(0), NodeId(1), NodeId(2), NodeId(3), NodeId(4)];

    /// A 5-node view in epoch 1 in which node 0 is `incarnation`.
    fn view_with(incarnation: Incarnation) -> View {
        let mut members: BTreeMap<NodeId, Incarnation> = NODES.iter().map(|&n| (n, 1)).collect();
        members.insert(NodeId(0), incarnation);
        View {
            epoch: EpochId(1),
            members,
        }
    }

    fn ctx(view: &View) -> Context<'_> {
        Context {
            now_ms: 0,
            me: NodeId(0),
            nodes: &NODES,
            view,
            member: true,
            serving: true,
        }
    }

    /// A recovered replica at node 0 (the first view starts recovered).
    fn replica(view: &View) -> Register {
        let mut register = Register::new(RegisterConfig::default(), RegisterBugs::default());
        let mut fx = Effects::default();
        register.on_input(&ctx(view), Input::ViewChange, &mut fx);
        assert!(register.recovered(), "members of epoch 1 start recovered");
        register
    }

    /// Starts a write of `value` and answers its query from nodes 1 and 2
    /// with nothing written (with node 0 itself, a majority of 5); returns
    /// the tag the write chose.
    fn write_tag(register: &mut Register, view: &View, value: u64) -> Tag {
        let mut fx = Effects::default();
        register.on_input(
            &ctx(view),
            Input::Command(RegisterCmd::Write(value)),
            &mut fx,
        );
        let op = fx
            .outputs
            .iter()
            .find_map(|o| match o {
                RegisterOut::Accepted { op, .. } => Some(*op),
                _ => None,
            })
            .expect("accepted");
        fx.clear();
        for from in [NodeId(1), NodeId(2)] {
            let msg = RegisterMsg::QueryReply {
                op,
                tag: Tag::default(),
                value: 0,
            };
            register.on_input(&ctx(view), Input::Message { from, msg }, &mut fx);
        }
        fx.outputs
            .iter()
            .find_map(|o| match o {
                RegisterOut::Storing { op: o, tag } if *o == op => Some(*tag),
                _ => None,
            })
            .expect("the write reached its store phase")
    }

    #[test]
    fn concurrent_writes_of_one_node_get_tags_of_their_own() {
        let view = view_with(1);
        let mut register = replica(&view);
        // Both queries see the same largest tag (nothing written), and the
        // first write has not stored yet when the second chooses.
        let first = write_tag(&mut register, &view, 10);
        let second = write_tag(&mut register, &view, 11);
        assert_ne!(first, second);
        assert!(second > first, "{first:?} then {second:?}");
        assert_eq!(register.in_flight(), 2);
    }

    #[test]
    fn a_restarted_writer_never_reuses_a_tag_of_its_earlier_incarnation() {
        // Incarnation 1 chose a tag and stored it at a minority only (its
        // query saw nothing); incarnation 2 queries a majority that never saw
        // it and picks the same counter: the incarnation keeps them apart.
        let before = {
            let view = view_with(1);
            write_tag(&mut replica(&view), &view, 10)
        };
        let after = {
            let view = view_with(2);
            write_tag(&mut replica(&view), &view, 20)
        };
        assert_eq!(
            before.counter, after.counter,
            "same counter, as the bug had it"
        );
        assert_eq!((before.writer, after.writer), (0, 0));
        assert_ne!(before, after, "two values under one tag");
        assert_eq!((before.incarnation, after.incarnation), (1, 2));
    }

    #[test]
    fn beyond_max_in_flight_a_command_is_rejected_as_busy() {
        let view = view_with(1);
        let mut register = replica(&view);
        let mut fx = Effects::default();
        for i in 0..MAX_IN_FLIGHT as u64 {
            register.on_input(&ctx(&view), Input::Command(RegisterCmd::Write(i)), &mut fx);
        }
        assert_eq!(register.in_flight(), MAX_IN_FLIGHT);
        assert!(!fx
            .outputs
            .iter()
            .any(|o| matches!(o, RegisterOut::Rejected { .. })));
        fx.clear();
        register.on_input(&ctx(&view), Input::Command(RegisterCmd::Read), &mut fx);
        assert_eq!(
            fx.outputs,
            vec![RegisterOut::Rejected {
                cmd: RegisterCmd::Read,
                reason: RejectReason::Busy
            }]
        );
        assert_eq!(register.in_flight(), MAX_IN_FLIGHT, "nothing began");
    }
}

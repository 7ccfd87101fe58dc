//! A small cluster driver for the tests and the model checker: nodes running
//! [`Ownership`] over a network that holds every message in flight (any
//! order, any delay), crashes, and view changes delivered to each node on
//! its own, as the node wrapper of `roost-cluster` does it (a message of an
//! older epoch is dropped on arrival; one of a newer epoch waits until the
//! receiver installed that view, which stands for its sender retransmitting
//! it).

#![allow(dead_code)]

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};

use roost_cluster::{Context, Effects, EpochId, Input, NodeId, Protocol, View};
use roost_ownership::{
    directory, MemStore, ObjectData, Ownership, OwnershipBugs, OwnershipCmd, OwnershipConfig,
    OwnershipMsg, OwnershipOut, ReqId, RequestKind, TICK_TIMER,
};

pub type Key = u64;
pub type Node = Ownership<Key, MemStore<Key>>;
pub type Msg = OwnershipMsg<Key>;
pub type Out = OwnershipOut<Key>;
pub type Fx = Effects<Msg, Out>;

pub fn n(i: u32) -> NodeId {
    NodeId(i)
}

/// The first key (from 1) whose directory over `nodes` is exactly `want`
/// (as a set), with `want[0]` its preferred driver.
pub fn key_with_directory(nodes: &[NodeId], count: usize, want: &[NodeId]) -> Key {
    let want_set: BTreeSet<NodeId> = want.iter().copied().collect();
    (1u64..)
        .find(|k| {
            let dir = directory(k, nodes, count);
            dir[0] == want[0] && dir.iter().copied().collect::<BTreeSet<_>>() == want_set
        })
        .expect("some key places so")
}

/// Production-like defaults, with the retransmission and stuck timers on.
pub fn test_config(directory_replicas: usize) -> OwnershipConfig {
    OwnershipConfig {
        directory_replicas,
        ..OwnershipConfig::default()
    }
}

/// For exhaustive exploration: no retransmission, stuck replay or timeout
/// (the network abstraction stands for retransmission), few attempts.
pub fn model_config(directory_replicas: usize, max_attempts: u32) -> OwnershipConfig {
    OwnershipConfig {
        directory_replicas,
        max_attempts,
        retransmit_ms: None,
        replay_after_ms: None,
        request_timeout_ms: None,
        // 1 ms: no jitter to multiply the states (jitter is tested apart).
        backoff_base_ms: 1,
        backoff_max_ms: 1,
        ..OwnershipConfig::default()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InFlight {
    pub from: NodeId,
    pub to: NodeId,
    pub epoch: EpochId,
    pub msg: Msg,
    /// Causal hops from the command that started the chain (tests only; 0
    /// in the model).
    pub hops: u32,
    /// A hash of the message: with the endpoints, the canonical order of
    /// the network multiset (computed once, when sent).
    pub order: u64,
}

#[derive(Debug, Clone)]
pub struct Proc {
    pub node: Node,
    pub alive: bool,
    pub incarnation: u64,
    pub view: View,
    pub clock: u64,
    /// Absolute time the protocol's tick timer is set for.
    pub timer: Option<u64>,
}

impl Hash for Proc {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.node.hash(state);
        self.alive.hash(state);
        self.incarnation.hash(state);
        self.view.epoch.hash(state);
        self.clock.hash(state);
        self.timer.hash(state);
    }
}

/// What a step produced that checkers look at.
#[derive(Debug, Default)]
pub struct StepOut {
    pub outputs: Vec<(NodeId, Out)>,
    pub logs: Vec<String>,
    /// The largest hop count among the inputs to this step.
    pub hops: u32,
}

#[derive(Debug, Clone)]
pub struct World {
    pub nodes: Vec<NodeId>,
    pub procs: BTreeMap<NodeId, Proc>,
    /// Every message in flight, kept sorted (a canonical multiset).
    pub net: Vec<InFlight>,
    /// The latest view any node may install.
    pub latest: View,
    pub track_hops: bool,
}

fn msg_order(m: &InFlight) -> (NodeId, NodeId, EpochId, u64) {
    (m.from, m.to, m.epoch, m.order)
}

fn msg_hash(msg: &Msg, hops: u32) -> u64 {
    let mut h = DefaultHasher::new();
    msg.hash(&mut h);
    hops.hash(&mut h);
    h.finish()
}

impl Hash for World {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.procs.hash(state);
        self.net.hash(state);
        self.latest.epoch.hash(state);
        self.latest.members.hash(state);
    }
}

impl World {
    pub fn new(count: u32, config: &OwnershipConfig, bugs: OwnershipBugs) -> World {
        let nodes: Vec<NodeId> = (1..=count).map(NodeId).collect();
        let view = View {
            epoch: EpochId(1),
            members: nodes.iter().map(|&n| (n, 1)).collect(),
        };
        let procs = nodes
            .iter()
            .map(|&me| {
                let node = Ownership::new(me, config.clone(), bugs, MemStore::new())
                    .expect("valid config");
                (
                    me,
                    Proc {
                        node,
                        alive: true,
                        incarnation: 1,
                        view: view.clone(),
                        clock: 0,
                        timer: None,
                    },
                )
            })
            .collect();
        World {
            nodes,
            procs,
            net: Vec::new(),
            latest: view,
            track_hops: true,
        }
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.procs[&id].node
    }

    pub fn node_mut(&mut self, id: NodeId) -> &mut Node {
        &mut self.procs.get_mut(&id).expect("configured").node
    }

    pub fn live(&self) -> Vec<NodeId> {
        self.procs
            .iter()
            .filter(|(_, p)| p.alive)
            .map(|(&id, _)| id)
            .collect()
    }

    fn call(&mut self, id: NodeId, input: Input<Msg, OwnershipCmd<Key>>, hops: u32) -> StepOut {
        let nodes = self.nodes.clone();
        let proc = self.procs.get_mut(&id).expect("configured");
        assert!(proc.alive, "a dead node gets no input");
        let member = proc.view.contains(id, proc.incarnation);
        let ctx = Context {
            now_ms: proc.clock,
            me: id,
            nodes: &nodes,
            view: &proc.view,
            member,
            serving: member,
        };
        let mut fx = Fx::default();
        proc.node.on_input(&ctx, input, &mut fx);
        let epoch = proc.view.epoch;
        for (_, after) in fx.timers.drain(..) {
            proc.timer = Some(proc.clock + after);
        }
        let next_hops = if self.track_hops { hops + 1 } else { 0 };
        for (to, msg) in fx.sends.drain(..) {
            assert_ne!(to, id, "messages to self stay inside the protocol");
            assert_eq!(msg.epoch, epoch, "the protocol stamps its epoch");
            if !self.procs[&to].alive {
                continue;
            }
            let order = msg_hash(&msg, next_hops);
            self.net.push(InFlight {
                from: id,
                to,
                epoch,
                msg,
                hops: next_hops,
                order,
            });
        }
        self.net.sort_by_key(msg_order);
        StepOut {
            outputs: fx.outputs.drain(..).map(|o| (id, o)).collect(),
            logs: std::mem::take(&mut fx.logs),
            hops,
        }
    }

    pub fn command(&mut self, id: NodeId, cmd: OwnershipCmd<Key>) -> StepOut {
        self.call(id, Input::Command(cmd), 0)
    }

    pub fn acquire(&mut self, id: NodeId, key: Key, req: u64, kind: RequestKind) -> StepOut {
        self.command(
            id,
            OwnershipCmd::Acquire {
                key,
                req: ReqId(req),
                kind,
            },
        )
    }

    pub fn create(&mut self, id: NodeId, key: Key, req: u64, data: ObjectData) -> StepOut {
        self.command(
            id,
            OwnershipCmd::Create {
                key,
                req: ReqId(req),
                data,
            },
        )
    }

    /// Message `i` can be handed to its receiver now.
    pub fn deliverable(&self, i: usize) -> bool {
        let m = &self.net[i];
        let to = &self.procs[&m.to];
        to.alive && m.epoch <= to.view.epoch
    }

    /// Hands message `i` to its receiver (an older epoch's is dropped, as
    /// the node wrapper does).
    pub fn deliver(&mut self, i: usize) -> StepOut {
        assert!(self.deliverable(i));
        let m = self.net.remove(i);
        if m.epoch < self.procs[&m.to].view.epoch {
            return StepOut::default();
        }
        self.call(
            m.to,
            Input::Message {
                from: m.from,
                msg: m.msg,
            },
            m.hops,
        )
    }

    /// Injects a message as if `from` had sent it (bad-input tests).
    pub fn inject(&mut self, from: NodeId, to: NodeId, msg: Msg) -> StepOut {
        self.call(to, Input::Message { from, msg }, 0)
    }

    pub fn tick(&mut self, id: NodeId) -> StepOut {
        let proc = self.procs.get_mut(&id).expect("configured");
        let at = proc.timer.take().expect("a timer is set");
        proc.clock = proc.clock.max(at);
        self.call(id, Input::Timer(TICK_TIMER), 0)
    }

    /// Advances a node's clock (tests).
    pub fn advance(&mut self, id: NodeId, ms: u64) {
        self.procs.get_mut(&id).expect("configured").clock += ms;
    }

    /// Crash-stops `id`: it takes no more input, messages to it are lost,
    /// and the next view (one epoch later) excludes it.
    pub fn crash(&mut self, id: NodeId) {
        let proc = self.procs.get_mut(&id).expect("configured");
        assert!(proc.alive);
        proc.alive = false;
        self.net.retain(|m| m.to != id);
        self.latest.epoch = EpochId(self.latest.epoch.0 + 1);
        self.latest.members.remove(&id);
    }

    /// Restarts `id`: a new incarnation with an empty state (and store),
    /// admitted in the very next view (the same view change that drops the
    /// old incarnation), which it installs at once.
    pub fn restart(&mut self, id: NodeId, config: &OwnershipConfig) {
        self.net.retain(|m| m.to != id && m.from != id);
        self.latest.epoch = EpochId(self.latest.epoch.0 + 1);
        let proc = self.procs.get_mut(&id).expect("configured");
        proc.incarnation += 1;
        proc.node = Ownership::new(
            id,
            config.clone(),
            OwnershipBugs::default(),
            MemStore::new(),
        )
        .expect("valid config");
        proc.timer = None;
        proc.alive = true;
        self.latest.members.insert(id, proc.incarnation);
        proc.view = self.latest.clone();
        self.call(id, Input::ViewChange, 0);
    }

    /// `id` has not installed the latest view yet.
    pub fn needs_view(&self, id: NodeId) -> bool {
        let p = &self.procs[&id];
        p.alive && p.view.epoch < self.latest.epoch
    }

    pub fn install(&mut self, id: NodeId) -> StepOut {
        assert!(self.needs_view(id));
        let latest = self.latest.clone();
        let proc = self.procs.get_mut(&id).expect("configured");
        proc.view = latest;
        // Messages of older epochs to it will be dropped on arrival; drop
        // them now (the same thing, fewer states).
        let epoch = proc.view.epoch;
        self.net.retain(|m| m.to != id || m.epoch >= epoch);
        self.call(id, Input::ViewChange, 0)
    }

    /// Delivers everything (oldest-first per canonical order), installs
    /// views, fires timers whose time has come when nothing else is left,
    /// until nothing happens. Returns every step's output.
    pub fn run_until_quiet(&mut self, max_steps: usize) -> Vec<StepOut> {
        let mut outs = Vec::new();
        for step in 0..max_steps {
            if step + 3 > max_steps {
                eprintln!("not quiet: {}", self.dump());
            }
            if let Some(id) = self.live().into_iter().find(|&id| self.needs_view(id)) {
                outs.push(self.install(id));
                continue;
            }
            if let Some(i) = (0..self.net.len()).find(|&i| self.deliverable(i)) {
                outs.push(self.deliver(i));
                continue;
            }
            let timed = self
                .live()
                .into_iter()
                .filter_map(|id| self.procs[&id].timer.map(|t| (t, id)))
                .min();
            if let Some((_, id)) = timed {
                outs.push(self.tick(id));
                continue;
            }
            return outs;
        }
        panic!("no quiescence within {max_steps} steps");
    }

    /// The live nodes' metadata, timers and the network (for failures).
    pub fn dump(&self) -> String {
        let mut out = String::new();
        for id in self.live() {
            let p = &self.procs[&id];
            out += &format!(
                "\n{id} inc {} clock {} timer {:?} epoch {} pending {} blocked {} recovering {} drops {:?}",
                p.incarnation,
                p.clock,
                p.timer,
                p.view.epoch,
                p.node.pending_requests(),
                p.node.blocked(),
                p.node.recovering(),
                p.node.stats().drops()
            );
            for (k, m) in p.node.metas() {
                out += &format!(
                    "\n   key {k}: {} {:?} {:?} r_ts {:?}",
                    m.o_ts, m.o_state, m.o_replicas, m.r_ts
                );
            }
        }
        for m in &self.net {
            out += &format!(
                "\n  {} {}->{} {}: {:?}",
                m.msg.body.name(),
                m.from,
                m.to,
                m.epoch,
                m.msg.body
            );
        }
        out
    }

    /// Like [`World::run_until_quiet`] but only messages and views, no
    /// timers.
    pub fn deliver_all(&mut self, max_steps: usize) -> Vec<StepOut> {
        let mut outs = Vec::new();
        for _ in 0..max_steps {
            if let Some(id) = self.live().into_iter().find(|&id| self.needs_view(id)) {
                outs.push(self.install(id));
                continue;
            }
            if let Some(i) = (0..self.net.len()).find(|&i| self.deliverable(i)) {
                outs.push(self.deliver(i));
                continue;
            }
            return outs;
        }
        panic!("no quiescence within {max_steps} steps");
    }

    /// Messages in flight with this body name (`"INV"`, ...).
    pub fn in_flight(&self, name: &str) -> usize {
        self.net
            .iter()
            .filter(|m| m.msg.body.name() == name)
            .count()
    }

    /// Index of the first message in flight matching.
    pub fn find(&self, pred: impl Fn(&InFlight) -> bool) -> Option<usize> {
        self.net.iter().position(pred)
    }

    /// Delivers the first message matching; panics if none.
    pub fn deliver_where(&mut self, pred: impl Fn(&InFlight) -> bool) -> StepOut {
        let i = self.find(pred).expect("a matching message in flight");
        self.deliver(i)
    }

    /// Loses the first message matching (tests of lost messages).
    pub fn lose_where(&mut self, pred: impl Fn(&InFlight) -> bool) -> InFlight {
        let i = self.find(pred).expect("a matching message in flight");
        self.net.remove(i)
    }

    /// Crashes `id` and lets every live node install the new view.
    pub fn crash_and_install(&mut self, id: NodeId) -> Vec<StepOut> {
        self.crash(id);
        let mut outs = Vec::new();
        for other in self.live() {
            outs.push(self.install(other));
        }
        outs
    }

    pub fn owners(&self, key: Key) -> Vec<NodeId> {
        self.live()
            .into_iter()
            .filter(|&id| self.node(id).is_owner(&key))
            .collect()
    }
}

pub fn all_outputs(outs: &[StepOut]) -> Vec<(NodeId, Out)> {
    outs.iter()
        .flat_map(|o| o.outputs.iter().cloned())
        .collect()
}

pub fn data(v: u64) -> ObjectData {
    ObjectData::new(v, vec![v as u8; 4])
}

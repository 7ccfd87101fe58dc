//! A tiny hand-driven network for the reliable commit: messages wait in a
//! queue that tests deliver, drop, duplicate or reorder; checkers record
//! violations instead of panicking so that planted-bug tests can assert
//! them.

#![allow(dead_code)]

use std::collections::BTreeMap;

use roost_cluster::{Context, Effects, EpochId, Input, NodeId, Protocol, View};
use roost_commit::{
    CommitBugs, CommitCmd, CommitConfig, CommitMsg, CommitOut, MemStore, ObjectState,
    ReliableCommit, Transaction, TxId, Write,
};

pub type Node = ReliableCommit<MemStore>;

pub fn n(id: u32) -> NodeId {
    NodeId(id)
}

pub fn w(key: &str, version: u64, data: &str) -> Write {
    Write {
        key: key.as_bytes().to_vec(),
        version,
        data: data.as_bytes().to_vec(),
    }
}

#[derive(Debug, Clone)]
pub struct InFlight {
    pub from: NodeId,
    pub to: NodeId,
    pub msg: CommitMsg,
}

pub struct Net {
    pub all: Vec<NodeId>,
    pub nodes: BTreeMap<NodeId, Node>,
    pub view: View,
    pub queue: Vec<InFlight>,
    pub outputs: Vec<(NodeId, CommitOut)>,
    /// What each started transaction wrote and to whom.
    pub txs: BTreeMap<TxId, Transaction>,
    pub committed: Vec<TxId>,
    pub violations: Vec<String>,
    /// Last non-replay applied slot per (follower, coordinator).
    applied_order: BTreeMap<(NodeId, NodeId), u64>,
    /// The transaction of the command being input.
    commanded: Option<Transaction>,
    restarts: BTreeMap<NodeId, u64>,
    pub now: u64,
}

impl Net {
    pub fn new(count: u32) -> Net {
        Net::with(count, CommitConfig::default(), CommitBugs::default())
    }

    pub fn with(count: u32, config: CommitConfig, bugs: CommitBugs) -> Net {
        let all: Vec<NodeId> = (1..=count).map(NodeId).collect();
        let view = View {
            epoch: EpochId(1),
            members: all.iter().map(|n| (*n, 1)).collect(),
        };
        let nodes = all
            .iter()
            .map(|id| {
                let node = ReliableCommit::new(*id, config.clone(), MemStore::default())
                    .expect("valid config")
                    .with_bugs(bugs);
                (*id, node)
            })
            .collect();
        let mut net = Net {
            all: all.clone(),
            nodes,
            view,
            queue: Vec::new(),
            outputs: Vec::new(),
            txs: BTreeMap::new(),
            committed: Vec::new(),
            violations: Vec::new(),
            applied_order: BTreeMap::new(),
            commanded: None,
            restarts: BTreeMap::new(),
            now: 0,
        };
        // The first view is installed at every node, as the runtime does
        // (each node's state begins in epoch 1).
        for id in all {
            net.input(id, Input::ViewChange);
        }
        net
    }

    pub fn node(&self, id: u32) -> &Node {
        &self.nodes[&n(id)]
    }

    pub fn input(&mut self, at: NodeId, input: Input<CommitMsg, CommitCmd>) {
        if !self.view.members.contains_key(&at) {
            return;
        }
        let mut fx = Effects::default();
        let ctx = Context {
            now_ms: self.now,
            me: at,
            nodes: &self.all,
            view: &self.view,
            member: true,
            serving: true,
        };
        let node = self.nodes.get_mut(&at).expect("node");
        node.on_input(&ctx, input, &mut fx);
        node.check_invariants();
        for (to, msg) in fx.sends {
            self.queue.push(InFlight { from: at, to, msg });
        }
        for out in fx.outputs {
            self.check_output(at, &out);
            self.outputs.push((at, out));
        }
    }

    /// The writes of `tx_id` a live follower lacks (holds no version of, or
    /// an older one): the follower, the key and what it holds.
    fn missing_at_followers(&self, tx_id: &TxId) -> Vec<(NodeId, Vec<u8>, Option<u64>)> {
        let tx = &self.txs[tx_id];
        let mut missing = Vec::new();
        for f in tx
            .followers
            .iter()
            .filter(|f| self.view.members.contains_key(f))
        {
            for wr in &tx.writes {
                let v = self.nodes[f].store().get(&wr.key).map(|o| o.version);
                if v.is_none_or(|v| v < wr.version) {
                    missing.push((*f, wr.key.clone(), v));
                }
            }
        }
        missing
    }

    /// The checkers, run on every output.
    fn check_output(&mut self, at: NodeId, out: &CommitOut) {
        match out {
            CommitOut::Started { tx_id } => {
                if let Some(mut tx) = self.commanded.take() {
                    tx.followers.retain(|f| *f != at);
                    self.txs.insert(*tx_id, tx);
                }
            }
            CommitOut::Committed { tx_id } => {
                // Every live follower holds the writes (at this version or a
                // later one) when the client is answered.
                for (f, key, v) in self.missing_at_followers(tx_id) {
                    self.violations.push(format!(
                        "{tx_id} committed but follower {f} holds {v:?} of {key:?}"
                    ));
                }
                if let Some(last) = self.committed.iter().rev().find(|t| t.node == at) {
                    if last.local >= tx_id.local {
                        self.violations
                            .push(format!("{tx_id} committed after {last}"));
                    }
                }
                self.committed.push(*tx_id);
            }
            CommitOut::Applied {
                tx_id,
                replay: false,
            } => {
                // Pipeline order: a follower applies a coordinator's slots in
                // increasing order.
                let last = self.applied_order.entry((at, tx_id.node)).or_default();
                if *last >= tx_id.local {
                    self.violations.push(format!(
                        "{at} applied {tx_id} after slot {} of the same pipeline",
                        last
                    ));
                }
                *last = (*last).max(tx_id.local);
            }
            _ => {}
        }
    }

    pub fn commit(&mut self, at: u32, writes: Vec<Write>, followers: &[u32]) -> Option<TxId> {
        let tx = Transaction {
            writes,
            followers: followers.iter().map(|f| n(*f)).collect(),
        };
        let before = self.outputs.len();
        self.commanded = Some(tx.clone());
        self.input(n(at), Input::Command(CommitCmd::Commit(tx)));
        self.commanded = None;
        self.outputs[before..].iter().find_map(|(_, o)| match o {
            CommitOut::Started { tx_id } => Some(*tx_id),
            _ => None,
        })
    }

    /// Delivers (and removes) the message at `idx` of the queue.
    pub fn deliver(&mut self, idx: usize) {
        let m = self.queue.remove(idx);
        self.input(
            m.to,
            Input::Message {
                from: m.from,
                msg: m.msg,
            },
        );
    }

    /// Delivers the first message matching `pred`; false if none.
    pub fn deliver_first(&mut self, pred: impl Fn(&InFlight) -> bool) -> bool {
        match self.queue.iter().position(pred) {
            Some(i) => {
                self.deliver(i);
                true
            }
            None => false,
        }
    }

    /// Drops every message matching `pred`; how many.
    pub fn drop_where(&mut self, pred: impl Fn(&InFlight) -> bool) -> usize {
        let before = self.queue.len();
        self.queue.retain(|m| !pred(m));
        before - self.queue.len()
    }

    /// FIFO delivery until the queue is empty (bounded).
    pub fn run(&mut self) {
        for _ in 0..100_000 {
            if self.queue.is_empty() {
                return;
            }
            self.deliver(0);
        }
        panic!("the network does not quiesce");
    }

    /// Fires the retransmission timer at every live node.
    pub fn tick(&mut self) {
        self.now += 20;
        for id in self.view.members.keys().copied().collect::<Vec<_>>() {
            self.input(id, Input::Timer(roost_commit::RETRANSMIT_TIMER));
        }
    }

    /// `ids` crash: a new view without them, installed at every live node.
    /// Their queued messages are lost.
    pub fn crash(&mut self, ids: &[u32]) {
        for id in ids {
            self.view.members.remove(&n(*id));
        }
        self.view.epoch = EpochId(self.view.epoch.0 + 1);
        self.queue
            .retain(|m| !ids.contains(&m.from.0) && !ids.contains(&m.to.0));
        for id in self.view.members.keys().copied().collect::<Vec<_>>() {
            self.input(id, Input::ViewChange);
        }
    }

    /// `id` comes back as a new incarnation with nothing, admitted by a new
    /// view installed at every live node.
    pub fn restart(&mut self, id: u32, config: CommitConfig) {
        let node = ReliableCommit::new(n(id), config, MemStore::default()).expect("valid config");
        self.nodes.insert(n(id), node);
        let incarnation = self.restarts.entry(n(id)).or_insert(1);
        *incarnation += 1;
        let incarnation = *incarnation;
        self.view.members.insert(n(id), incarnation);
        self.view.epoch = EpochId(self.view.epoch.0 + 1);
        for id in self.view.members.keys().copied().collect::<Vec<_>>() {
            self.input(id, Input::ViewChange);
        }
    }

    pub fn outputs_at(&self, id: u32) -> Vec<CommitOut> {
        self.outputs
            .iter()
            .filter(|(at, _)| *at == n(id))
            .map(|(_, o)| o.clone())
            .collect()
    }

    pub fn is_committed(&self, tx_id: TxId) -> bool {
        self.committed.contains(&tx_id)
    }

    pub fn state(&self, id: u32, key: &str) -> Option<(u64, ObjectState)> {
        self.node(id)
            .store()
            .get(key.as_bytes())
            .map(|o| (o.version, o.state))
    }

    /// The end-state checker: every committed transaction's writes are at
    /// every live follower (or a later version), and nothing is pending.
    pub fn check_end(&self) -> Vec<String> {
        let mut bad = self.violations.clone();
        for tx_id in &self.committed {
            for (f, _, v) in self.missing_at_followers(tx_id) {
                bad.push(format!("{tx_id}: follower {f} holds {v:?}"));
            }
        }
        for id in self.view.members.keys() {
            let node = &self.nodes[id];
            if node.in_flight() + node.stored() + node.replaying() != 0 {
                bad.push(format!(
                    "{id}: in flight {}, stored {}, replaying {}",
                    node.in_flight(),
                    node.stored(),
                    node.replaying()
                ));
            }
            for (key, o) in &node.store().objects {
                if o.state != ObjectState::Valid {
                    bad.push(format!("{id}: {key:?} still invalid at {}", o.version));
                }
            }
        }
        bad
    }
}

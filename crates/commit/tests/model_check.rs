//! An exhaustive model check of the reliable commit over a small
//! configuration, with our own explorer: depth-first over every
//! interleaving, with a visited set of state hashes (the protocol's
//! [`Hash`] covers its state and store, not its counters) and a bound on
//! the number of states.
//!
//! The configuration: 3 nodes, 2 objects `x` and `y` (version 1 at every
//! node before the run), node 1 their owner and the coordinator of a
//! pipeline of 2 transactions, each writing one or both objects (each
//! scenario says which; some let the explorer choose), the followers the
//! readers of what it writes. Actions, in every order:
//!
//! - `Commit(i)`: the coordinator commits the next transaction (the `i`-th
//!   write set allowed for it), without waiting for the previous one;
//! - `Deliver(m)`: message `m` in flight arrives (in flight is a set: any
//!   one may come next, so any delay and reordering; an identical re-send
//!   merges with a copy still in flight);
//! - `Duplicate(m)` / `Drop(m)`: `m` arrives and stays in flight / is lost
//!   (each a bounded number of times per run);
//! - `Tick(n)`: `n`'s retransmission timer fires (only while armed);
//! - `Crash(n)`: `n` crash-stops (once per run) and the harness decides the
//!   next view without it, installed at once at every survivor (as the
//!   recovery tests do); every message in flight is of the old epoch, so
//!   lost (to or from `n`) or dropped on arrival (a no-op but for the
//!   counters): the explorer lets them all go at once.
//!
//! Checked after every step (TLA+ names from `ZeusReliableCommit.tla` and
//! its inductive-proof lemmas where they exist; a replica of an object is
//! its owner or one of its readers, live):
//!
//! - `RConsistentInvariant`: all Valid replicas of an object hold the same
//!   version and data;
//! - `ROwnerOnlyWriterInvariant`: every (version, data) any replica holds
//!   is the initial one or one the coordinator wrote;
//! - `ROwnerHighestVersionInvariant`: while the coordinator is alive, no
//!   follower's version exceeds the coordinator's;
//! - `ValidNotAhead` (lemma `Inv602`): a Valid replica's version is at most
//!   every replica's;
//! - `NoValBeyondLive` (lemma `Inv29`): no R-VAL in flight is for a version
//!   some replica does not hold yet;
//! - `ValidOnlyCommitted`: while the coordinator is alive, a follower holds
//!   a version Valid only once its transaction is reported `Committed`
//!   (every follower acked it);
//! - `PipelineOrder`: a follower applies (non-replay) slot n only when it
//!   applied slot n-1, heard an R-VAL covering it, or got n with the
//!   prev-VAL bit (from the `Applied` outputs and the messages delivered);
//! - `CommitOrder`: `Committed` comes in pipeline order;
//! - `CommittedDurable`: once a transaction is reported `Committed`, every
//!   live follower (and the coordinator while alive) holds its writes or
//!   later versions, so it survives any single crash afterwards;
//! - `ReadOnlyRealTime` (paper §6, strict serializability): every live
//!   node where an object is readable ([`ReliableCommit::readable`], the
//!   rule of [`ReliableCommit::read_only`]: held and Valid) holds one
//!   version of it; were two to differ, a reader at one then a reader at
//!   the other (no step between) would see the newer version, then the
//!   older (`read_only_reads_invalid` is caught here);
//! - `ReadOnlySnapshot` (paper §6): a reader reading both objects (both
//!   readable) sees the state after a prefix of the pipeline (never one
//!   object written by transaction 2 and the other from before
//!   transaction 1, nor any other part of a transaction);
//! - the protocol's own `check_invariants` (a panic is a violation).
//!
//! The max-version-distance invariant of the spec (versions differ by at
//! most 1) is left out: pipelining breaks it, as the spec's comment says.
//!
//! Liveness: wherever nothing is in flight and the pipeline is issued
//! (or the coordinator is dead), a fault-free continuation (timers fire,
//! every message is delivered) must reach `Quiescent`: nothing pending,
//! stored, held or replayed, nobody recovering, every replica Valid at
//! the same version (a read-only transaction of every object a node
//! holds succeeds there, with what it holds), and every transaction of a
//! live coordinator committed.
//!
//! Bounds: each scenario gives a budget of losses, duplicates, timer
//! firings and crashes per run. With them (and in flight a set, counters
//! out of the hash) the state space is finite and the search, unbounded in
//! depth, visits all of it; `max_states` only guards the time budget.
//! Release builds: 4.5 million states over the 5 scenarios (0.65 million
//! more to catch the planted bugs), 25 s on 2 cores; debug builds scale
//! the budgets down (one loss, no duplicate, one timer firing).
//!
//! Each planted bug ([`CommitBugs`]) must be caught.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::hash::{Hash, Hasher};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::time::Instant;

use roost_cluster::{Context, Effects, EpochId, Input, NodeId, Protocol, View};
use roost_commit::{
    Body, CommitBugs, CommitCmd, CommitConfig, CommitMsg, CommitOut, MemStore, ObjectState,
    ObjectStore, ReliableCommit, Transaction, TxId, Write, RETRANSMIT_TIMER,
};

type Node = ReliableCommit<MemStore>;

const NODES: [NodeId; 3] = [NodeId(1), NodeId(2), NodeId(3)];
const COORDINATOR: NodeId = NodeId(1);
const OBJECTS: [&str; 2] = ["x", "y"];

fn key(object: usize) -> Vec<u8> {
    OBJECTS[object].as_bytes().to_vec()
}

/// The data of `version` of `object`: versions are unique per object, so
/// the data says who wrote it.
fn data(object: usize, version: u64) -> Vec<u8> {
    format!("{}{version}", OBJECTS[object]).into_bytes()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Action {
    Commit(usize),
    Deliver(usize),
    Duplicate(usize),
    Drop(usize),
    Tick(NodeId),
    Crash(NodeId),
}

// The spec's names, `Invariant` suffix included.
#[allow(clippy::enum_variant_names)]
#[derive(Debug, Clone, PartialEq, Eq)]
enum Invariant {
    RConsistentInvariant,
    ROwnerOnlyWriterInvariant,
    ROwnerHighestVersionInvariant,
    ValidNotAhead,
    NoValBeyondLive,
    ValidOnlyCommitted,
    PipelineOrder,
    CommitOrder,
    CommittedDurable,
    ReadOnlyRealTime,
    ReadOnlySnapshot,
    Refused,
    Quiescent,
    Panicked(String),
}

#[derive(Debug)]
struct Violation {
    invariant: Invariant,
    trace: Vec<String>,
    detail: String,
}

#[derive(Debug, Default)]
struct Report {
    states: usize,
    transitions: usize,
    /// States where nothing was in flight and the pipeline was issued: a
    /// fault-free continuation was run from each and had to settle.
    settle_points: usize,
    max_depth: usize,
    max_in_flight: usize,
    commits: usize,
    crashes: usize,
    /// Read-only snapshots that saw a transaction's writes (both objects
    /// Valid, not the initial state).
    reads: usize,
    /// Settled continuations in which a replay ran.
    replays: usize,
    violation: Option<Violation>,
}

/// A configuration to explore.
#[derive(Debug, Clone)]
struct Scenario {
    name: &'static str,
    /// Per transaction of the pipeline, the write sets (object indices) the
    /// explorer may choose from.
    txs: Vec<Vec<Vec<usize>>>,
    /// The readers of each object (the owner, node 1, aside).
    readers: [Vec<NodeId>; 2],
    drops: u8,
    duplicates: u8,
    /// Timer firings per run (the fault-free continuation has no bound).
    ticks: u8,
    crashes: u8,
    bugs: CommitBugs,
    max_states: usize,
    /// Check `Quiescent` (off for the planted safety bugs, so that they are
    /// caught by what they break, not by a stuck run).
    liveness: bool,
}

impl Scenario {
    fn replicas(&self, object: usize) -> impl Iterator<Item = NodeId> + '_ {
        std::iter::once(COORDINATOR).chain(self.readers[object].iter().copied())
    }
}

/// A transaction the coordinator started: its writes (object, version) and
/// followers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Started {
    tx_id: TxId,
    writes: Vec<(usize, u64)>,
    followers: Vec<NodeId>,
}

/// In flight, by sender, receiver and the message's hash (a set: an
/// identical re-send merges with a copy in flight).
type InFlight = BTreeMap<(NodeId, NodeId, u64), Rc<CommitMsg>>;

/// A fast hasher for fingerprints (the states are not adversarial): a
/// multiply-rotate per word, mixed at the end.
#[derive(Default)]
struct Fast(u64);

impl Hasher for Fast {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, x: u8) {
        self.write_u64(u64::from(x));
    }

    fn write_u32(&mut self, x: u32) {
        self.write_u64(u64::from(x));
    }

    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(26) ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 ^= self.0 >> 32;
    }

    fn finish(&self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

fn hash_of(value: &impl Hash) -> u64 {
    let mut h = Fast::default();
    value.hash(&mut h);
    h.finish()
}

#[derive(Clone)]
struct State {
    /// The live nodes (shared between states until one changes).
    nodes: BTreeMap<NodeId, Rc<Node>>,
    /// The hash of each live node's state, kept up to date by `input`.
    node_hashes: BTreeMap<NodeId, u64>,
    view: View,
    net: InFlight,
    /// Nodes whose retransmission timer is armed.
    timers: BTreeSet<NodeId>,
    started: Vec<Started>,
    committed: Vec<TxId>,
    /// (follower, slot) applied as a non-replay.
    applied: BTreeSet<(NodeId, TxId)>,
    /// Per follower, the highest slot an R-VAL of the coordinator covered.
    validated_to: BTreeMap<NodeId, u64>,
    /// (follower, slot): an R-INV of the slot with the prev-VAL bit reached
    /// the follower in its epoch.
    prev_val_seen: BTreeSet<(NodeId, TxId)>,
    drops_left: u8,
    duplicates_left: u8,
    ticks_left: u8,
    crashes_left: u8,
}

impl Hash for State {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.node_hashes.hash(h);
        self.view.hash(h);
        for k in self.net.keys() {
            k.hash(h);
        }
        self.timers.hash(h);
        self.started.hash(h);
        self.committed.hash(h);
        self.applied.hash(h);
        self.validated_to.hash(h);
        self.prev_val_seen.hash(h);
        self.drops_left.hash(h);
        self.duplicates_left.hash(h);
        self.ticks_left.hash(h);
        self.crashes_left.hash(h);
    }
}

fn fingerprint(state: &State) -> u64 {
    hash_of(state)
}

type Step = Vec<(NodeId, CommitOut)>;

impl State {
    fn initial(sc: &Scenario) -> State {
        let config = CommitConfig {
            max_in_flight: 4,
            ..CommitConfig::default()
        };
        let mut nodes = BTreeMap::new();
        for id in NODES {
            let mut node = ReliableCommit::new(id, config.clone(), MemStore::default())
                .expect("valid config")
                .with_bugs(sc.bugs);
            for object in 0..OBJECTS.len() {
                if sc.replicas(object).any(|r| r == id) {
                    node.store_mut().apply(&key(object), 1, &data(object, 1));
                    node.store_mut().validate(&key(object), 1);
                }
            }
            nodes.insert(id, Rc::new(node));
        }
        State {
            node_hashes: nodes.iter().map(|(id, n)| (*id, hash_of(&**n))).collect(),
            nodes,
            view: View {
                epoch: EpochId(1),
                members: NODES.iter().map(|n| (*n, 1)).collect(),
            },
            net: InFlight::new(),
            timers: BTreeSet::new(),
            started: Vec::new(),
            committed: Vec::new(),
            applied: BTreeSet::new(),
            validated_to: BTreeMap::new(),
            prev_val_seen: BTreeSet::new(),
            drops_left: sc.drops,
            duplicates_left: sc.duplicates,
            ticks_left: sc.ticks,
            crashes_left: sc.crashes,
        }
    }

    fn coordinator_alive(&self) -> bool {
        self.nodes.contains_key(&COORDINATOR)
    }

    /// Every transaction is issued, or never will be.
    fn issued(&self, sc: &Scenario) -> bool {
        self.started.len() == sc.txs.len() || !self.coordinator_alive()
    }

    fn actions(&self, sc: &Scenario) -> Vec<Action> {
        let mut actions = Vec::new();
        if self.coordinator_alive() && self.started.len() < sc.txs.len() {
            for i in 0..sc.txs[self.started.len()].len() {
                actions.push(Action::Commit(i));
            }
        }
        for i in 0..self.net.len() {
            actions.push(Action::Deliver(i));
            if self.duplicates_left > 0 {
                actions.push(Action::Duplicate(i));
            }
            if self.drops_left > 0 {
                actions.push(Action::Drop(i));
            }
        }
        if self.ticks_left > 0 {
            for id in self.nodes.keys() {
                if self.timers.contains(id) {
                    actions.push(Action::Tick(*id));
                }
            }
        }
        if self.crashes_left > 0 {
            for id in self.nodes.keys() {
                actions.push(Action::Crash(*id));
            }
        }
        actions
    }

    fn describe(&self, sc: &Scenario, action: Action) -> String {
        let message = |i: usize| {
            let ((from, to, _), m) = self.net.iter().nth(i).expect("in flight");
            format!(
                "{} {from}->{to} e{}: {:?}",
                m.body.name(),
                m.epoch.0,
                m.body
            )
        };
        match action {
            Action::Commit(i) => format!(
                "commit tx {} writing {:?}",
                self.started.len() + 1,
                sc.txs[self.started.len()][i]
                    .iter()
                    .map(|o| OBJECTS[*o])
                    .collect::<Vec<_>>()
            ),
            Action::Deliver(i) => format!("deliver {}", message(i)),
            Action::Duplicate(i) => format!("deliver, keep a copy: {}", message(i)),
            Action::Drop(i) => format!("drop {}", message(i)),
            other => format!("{other:?}"),
        }
    }

    /// The context of a live node: every live node is a member of the
    /// view, holding its lease.
    fn context(&self, at: NodeId) -> Context<'_> {
        Context {
            now_ms: 0,
            me: at,
            nodes: &NODES,
            view: &self.view,
            member: true,
            serving: true,
        }
    }

    /// One input at a live node: its sends go in flight (to live nodes),
    /// its timer is tracked, its outputs returned.
    fn input(&mut self, at: NodeId, input: Input<CommitMsg, CommitCmd>, outs: &mut Step) {
        let view = self.view.clone();
        let Some(node) = self.nodes.get_mut(&at) else {
            return;
        };
        let node = Rc::make_mut(node);
        let ctx = Context {
            now_ms: 0,
            me: at,
            nodes: &NODES,
            view: &view,
            member: true,
            serving: true,
        };
        let mut fx = Effects::default();
        node.on_input(&ctx, input, &mut fx);
        node.check_invariants();
        let hash = hash_of(&*node);
        self.node_hashes.insert(at, hash);
        for (to, msg) in fx.sends {
            if self.nodes.contains_key(&to) {
                self.net.insert((at, to, hash_of(&msg)), Rc::new(msg));
            }
        }
        if fx.timers.iter().any(|(t, _)| *t == RETRANSMIT_TIMER) {
            self.timers.insert(at);
        }
        outs.extend(fx.outputs.into_iter().map(|o| (at, o)));
    }

    fn take(&mut self, i: usize, keep: bool) -> (NodeId, NodeId, CommitMsg) {
        let k = *self.net.keys().nth(i).expect("in flight");
        let msg = if keep {
            (*self.net[&k]).clone()
        } else {
            Rc::unwrap_or_clone(self.net.remove(&k).expect("in flight"))
        };
        (k.0, k.1, msg)
    }

    /// Delivers a message, noting first what the pipeline-order check needs
    /// (a prev-VAL bit, an R-VAL of the coordinator) if the receiver will
    /// take it (its epoch).
    fn deliver(&mut self, from: NodeId, to: NodeId, msg: CommitMsg, outs: &mut Step) {
        if msg.epoch == self.view.epoch && self.nodes.contains_key(&to) {
            match &msg.body {
                Body::RInv(inv) if inv.prev_val && !inv.replay => {
                    self.prev_val_seen.insert((to, inv.tx_id));
                }
                Body::RVal(val) if from == val.tx_id.node => {
                    let v = self.validated_to.entry(to).or_default();
                    *v = (*v).max(val.tx_id.local);
                }
                _ => {}
            }
        }
        self.input(to, Input::Message { from, msg }, outs);
    }

    fn step(&mut self, sc: &Scenario, action: Action) -> Step {
        let mut outs = Vec::new();
        match action {
            Action::Commit(i) => {
                let objects = &sc.txs[self.started.len()][i];
                let coordinator = &self.nodes[&COORDINATOR];
                let writes: Vec<Write> = objects
                    .iter()
                    .map(|&object| {
                        let version = coordinator.store().version(&key(object)).unwrap_or(0) + 1;
                        Write {
                            key: key(object),
                            version,
                            data: data(object, version),
                        }
                    })
                    .collect();
                let followers: BTreeSet<NodeId> = objects
                    .iter()
                    .flat_map(|o| sc.readers[*o].iter().copied())
                    .collect();
                let tx = Transaction {
                    writes: writes.clone(),
                    followers: followers.iter().copied().collect(),
                };
                self.input(
                    COORDINATOR,
                    Input::Command(CommitCmd::Commit(tx)),
                    &mut outs,
                );
                for (_, out) in &outs {
                    if let CommitOut::Started { tx_id } = out {
                        self.started.push(Started {
                            tx_id: *tx_id,
                            writes: objects
                                .iter()
                                .zip(&writes)
                                .map(|(o, w)| (*o, w.version))
                                .collect(),
                            followers: followers
                                .iter()
                                .copied()
                                .filter(|f| self.nodes.contains_key(f))
                                .collect(),
                        });
                    }
                }
            }
            Action::Deliver(i) => {
                let (from, to, msg) = self.take(i, false);
                self.deliver(from, to, msg, &mut outs);
            }
            Action::Duplicate(i) => {
                self.duplicates_left -= 1;
                let (from, to, msg) = self.take(i, true);
                self.deliver(from, to, msg, &mut outs);
            }
            Action::Drop(i) => {
                self.drops_left -= 1;
                self.take(i, false);
            }
            Action::Tick(id) => {
                self.ticks_left -= 1;
                self.timers.remove(&id);
                self.input(id, Input::Timer(RETRANSMIT_TIMER), &mut outs);
            }
            Action::Crash(id) => {
                self.crashes_left -= 1;
                self.nodes.remove(&id);
                self.node_hashes.remove(&id);
                self.timers.remove(&id);
                self.view.members.remove(&id);
                self.view.epoch = EpochId(self.view.epoch.0 + 1);
                // Everything in flight is of the old epoch: lost with the
                // crashed node, or dropped on arrival by a survivor (a
                // no-op but for the counters), so it is let go at once.
                self.net.clear();
                let live: Vec<NodeId> = self.nodes.keys().copied().collect();
                for id in live {
                    self.input(id, Input::ViewChange, &mut outs);
                }
            }
        }
        outs
    }

    fn writer(&self, object: usize, version: u64) -> Option<&Started> {
        self.started
            .iter()
            .find(|s| s.writes.contains(&(object, version)))
    }

    /// The (version, state, data) of `object` at each live replica.
    fn replicas<'a>(
        &'a self,
        sc: &'a Scenario,
        object: usize,
    ) -> impl Iterator<Item = (NodeId, u64, ObjectState, &'a [u8])> + 'a {
        sc.replicas(object).filter_map(move |id| {
            let o = self.nodes.get(&id)?.store().get(&key(object))?;
            Some((id, o.version, o.state, &o.data[..]))
        })
    }

    /// The versions of both objects after each prefix of the pipeline.
    fn snapshots(&self) -> Vec<[u64; 2]> {
        let mut snap = [1, 1];
        let mut all = vec![snap];
        for s in &self.started {
            for &(object, version) in &s.writes {
                snap[object] = version;
            }
            all.push(snap);
        }
        all
    }

    /// The invariants on a step's outputs (the pipeline order at each
    /// apply, the commit order), noting what later checks need.
    fn check_outputs(&mut self, outs: &Step) -> Result<(), (Invariant, String)> {
        for (at, out) in outs {
            match out {
                CommitOut::Applied {
                    tx_id,
                    replay: false,
                } => {
                    let first = self.started.first().map(|s| s.tx_id);
                    let ok = first == Some(*tx_id)
                        || tx_id.prev().is_some_and(|p| {
                            self.applied.contains(&(*at, p))
                                || self.validated_to.get(at).is_some_and(|v| *v >= p.local)
                        })
                        || self.prev_val_seen.contains(&(*at, *tx_id));
                    if !ok {
                        return Err((
                            Invariant::PipelineOrder,
                            format!("{at} applied {tx_id} before its predecessor, no prev-VAL"),
                        ));
                    }
                    self.applied.insert((*at, *tx_id));
                }
                CommitOut::Committed { tx_id } => {
                    if let Some(last) = self.committed.last() {
                        if last.local >= tx_id.local {
                            return Err((
                                Invariant::CommitOrder,
                                format!("{tx_id} committed after {last}"),
                            ));
                        }
                    }
                    self.committed.push(*tx_id);
                }
                CommitOut::Refused { error } => {
                    return Err((Invariant::Refused, format!("{error}")));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The invariants on a state (checked once per state). Returns how many
    /// read-only snapshots saw a transaction.
    fn check_state(&self, sc: &Scenario) -> Result<usize, (Invariant, String)> {
        let coordinator_alive = self.coordinator_alive();
        for (object, name) in OBJECTS.iter().enumerate() {
            let replicas: Vec<_> = self.replicas(sc, object).collect();
            // RConsistentInvariant.
            let valid: BTreeSet<(u64, &[u8])> = replicas
                .iter()
                .filter(|r| r.2 == ObjectState::Valid)
                .map(|r| (r.1, r.3))
                .collect();
            if valid.len() > 1 {
                return Err((
                    Invariant::RConsistentInvariant,
                    format!("{} valid at {replicas:?}", name),
                ));
            }
            // ROwnerOnlyWriterInvariant.
            for (id, version, _, d) in &replicas {
                let written = *version == 1 || self.writer(object, *version).is_some();
                if !written || *d != &data(object, *version)[..] {
                    return Err((
                        Invariant::ROwnerOnlyWriterInvariant,
                        format!("{id} holds {} v{version} {d:?}", name),
                    ));
                }
            }
            // ROwnerHighestVersionInvariant.
            if let Some(owner) = replicas.iter().find(|r| r.0 == COORDINATOR) {
                if let Some(r) = replicas.iter().find(|r| r.1 > owner.1) {
                    return Err((
                        Invariant::ROwnerHighestVersionInvariant,
                        format!("{} at {} v{} > owner's v{}", name, r.0, r.1, owner.1),
                    ));
                }
            }
            // ValidNotAhead (Inv602).
            let lowest = replicas.iter().map(|r| r.1).min().unwrap_or(0);
            if let Some(r) = replicas
                .iter()
                .find(|r| r.2 == ObjectState::Valid && r.1 > lowest)
            {
                return Err((
                    Invariant::ValidNotAhead,
                    format!(
                        "{} Valid at {} v{} while a replica holds v{lowest}: {replicas:?}",
                        name, r.0, r.1
                    ),
                ));
            }
            // ValidOnlyCommitted.
            if coordinator_alive {
                for r in replicas.iter().filter(|r| r.2 == ObjectState::Valid) {
                    if let Some(s) = self.writer(object, r.1) {
                        if !self.committed.contains(&s.tx_id) {
                            return Err((
                                Invariant::ValidOnlyCommitted,
                                format!(
                                    "{} Valid at {} v{} of {}, not committed",
                                    name, r.0, r.1, s.tx_id
                                ),
                            ));
                        }
                    }
                }
            }
        }
        // NoValBeyondLive (Inv29).
        for ((from, to, _), m) in &self.net {
            let Body::RVal(val) = &m.body else { continue };
            let Some(s) = self.started.iter().find(|s| s.tx_id == val.tx_id) else {
                continue;
            };
            for &(object, version) in &s.writes {
                if let Some(r) = self.replicas(sc, object).find(|r| r.1 < version) {
                    return Err((
                        Invariant::NoValBeyondLive,
                        format!(
                            "R-VAL {} {from}->{to} for {} v{version}, {} holds v{}",
                            val.tx_id, OBJECTS[object], r.0, r.1
                        ),
                    ));
                }
            }
        }
        // CommittedDurable.
        for tx_id in &self.committed {
            let s = self
                .started
                .iter()
                .find(|s| s.tx_id == *tx_id)
                .expect("committed after started");
            for id in s.followers.iter().chain([&COORDINATOR]) {
                let Some(node) = self.nodes.get(id) else {
                    continue;
                };
                for &(object, version) in &s.writes {
                    let held = node.store().version(&key(object));
                    if held.is_none_or(|v| v < version) {
                        return Err((
                            Invariant::CommittedDurable,
                            format!(
                                "{tx_id} committed, {id} holds {held:?} of {} < v{version}",
                                OBJECTS[object]
                            ),
                        ));
                    }
                }
            }
        }
        // ReadOnlyRealTime: every live node's read-only transaction of an
        // object that succeeds now returns the same version (else one
        // reading the newer version, then another the older, break real
        // time: reads take no step).
        for (object, name) in OBJECTS.iter().enumerate() {
            let keys = [key(object)];
            let mut first: Option<(NodeId, u64)> = None;
            for (id, node) in &self.nodes {
                if !node.readable(&keys[0]) {
                    continue;
                }
                let Some(version) = node.store().version(&keys[0]) else {
                    continue;
                };
                match first {
                    None => first = Some((*id, version)),
                    Some((other, v)) if v != version => {
                        return Err((
                            Invariant::ReadOnlyRealTime,
                            format!("{name} read at {other} v{v}, at {id} v{version}"),
                        ));
                    }
                    Some(_) => {}
                }
            }
        }
        // ReadOnlySnapshot: a reader of both objects (a replica of both),
        // both readable.
        let snapshots = self.snapshots();
        let mut reads = 0;
        for (id, node) in &self.nodes {
            if !(0..OBJECTS.len()).all(|o| sc.replicas(o).any(|r| r == *id)) {
                continue;
            }
            let read: Option<Vec<u64>> = (0..OBJECTS.len())
                .map(|o| {
                    let key = key(o);
                    node.readable(&key).then(|| node.store().version(&key))?
                })
                .collect();
            let Some(read) = read else { continue };
            let read = [read[0], read[1]];
            if !snapshots.contains(&read) {
                return Err((
                    Invariant::ReadOnlySnapshot,
                    format!(
                        "{id} reads x v{} y v{}: no prefix of the pipeline {snapshots:?}",
                        read[0], read[1]
                    ),
                ));
            }
            if read != [1, 1] {
                reads += 1;
            }
        }
        Ok(reads)
    }

    /// From a state with nothing in flight: timers fire and every message
    /// is delivered, no faults, until nothing is left to do; the safety
    /// invariants hold all along and the end is `Quiescent`. Whether a
    /// replay ran.
    fn settle(mut self, sc: &Scenario) -> Result<bool, (Invariant, String)> {
        let mut replayed = false;
        for _ in 0..32 {
            if self.net.is_empty() && self.timers.is_empty() {
                break;
            }
            let timers: Vec<NodeId> = std::mem::take(&mut self.timers).into_iter().collect();
            for id in timers {
                let mut outs = Vec::new();
                self.input(id, Input::Timer(RETRANSMIT_TIMER), &mut outs);
                self.check_outputs(&outs)?;
                self.check_state(sc)?;
            }
            for _ in 0..256 {
                let Some(((from, to, _), msg)) = self.net.pop_first() else {
                    break;
                };
                let mut outs = Vec::new();
                self.deliver(from, to, Rc::unwrap_or_clone(msg), &mut outs);
                replayed |= outs
                    .iter()
                    .any(|o| matches!(o.1, CommitOut::Applied { replay: true, .. }));
                self.check_outputs(&outs)?;
                self.check_state(sc)?;
            }
        }
        let quiescent = |detail: String| Err((Invariant::Quiescent, detail));
        if !self.net.is_empty() || !self.timers.is_empty() {
            return quiescent(format!(
                "still busy: {} in flight, timers {:?}",
                self.net.len(),
                self.timers
            ));
        }
        for (id, node) in &self.nodes {
            if node.in_flight() + node.stored() + node.held() + node.replaying() > 0
                || node.recovering()
            {
                return quiescent(format!(
                    "{id}: in flight {}, stored {}, held {}, replaying {}, recovering {}",
                    node.in_flight(),
                    node.stored(),
                    node.held(),
                    node.replaying(),
                    node.recovering()
                ));
            }
        }
        for (object, name) in OBJECTS.iter().enumerate() {
            let replicas: Vec<_> = self.replicas(sc, object).collect();
            let versions: BTreeSet<u64> = replicas.iter().map(|r| r.1).collect();
            if versions.len() > 1 || replicas.iter().any(|r| r.2 != ObjectState::Valid) {
                return quiescent(format!("{}: {replicas:?}", name));
            }
        }
        // Everything Valid: a read-only transaction of every object a node
        // holds succeeds there, with what it holds.
        for (id, node) in &self.nodes {
            let keys: Vec<Vec<u8>> = (0..OBJECTS.len())
                .map(key)
                .filter(|k| node.store().version(k).is_some())
                .collect();
            match node.read_only(&self.context(*id), &keys) {
                Ok(read)
                    if read.iter().all(|r| {
                        node.store().get(&r.key).map(|o| (o.version, &o.data))
                            == Some((r.version, &r.data))
                    }) => {}
                other => return quiescent(format!("{id}: reading {keys:?}: {other:?}")),
            }
        }
        if self.coordinator_alive() && self.committed.len() != self.started.len() {
            return quiescent(format!(
                "started {:?}, committed {:?}",
                self.started, self.committed
            ));
        }
        Ok(replayed)
    }
}

struct Frame {
    state: State,
    actions: Vec<Action>,
    next: usize,
}

fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

fn explore(sc: &Scenario) -> Report {
    let mut report = Report::default();
    let initial = State::initial(sc);
    let mut visited: HashSet<u64> = HashSet::new();
    visited.insert(fingerprint(&initial));
    let actions = initial.actions(sc);
    let mut stack = vec![Frame {
        state: initial,
        actions,
        next: 0,
    }];
    // Each frame's last taken action led to the next frame (or, for the top,
    // to the violating state): describe them only when reporting.
    let trace = |stack: &[Frame]| -> Vec<String> {
        stack
            .iter()
            .map(|f| f.state.describe(sc, f.actions[f.next - 1]))
            .collect()
    };
    let started = Instant::now();
    while let Some(top) = stack.last_mut() {
        if top.next == top.actions.len() {
            stack.pop();
            continue;
        }
        let action = top.actions[top.next];
        top.next += 1;
        let mut state = top.state.clone();
        report.transitions += 1;
        let stepped = catch_unwind(AssertUnwindSafe(|| {
            let outs = state.step(sc, action);
            let checked = state.check_outputs(&outs);
            (state, outs, checked)
        }));
        let (state, outs, checked) = match stepped {
            Ok(ok) => ok,
            Err(panic) => {
                report.violation = Some(Violation {
                    invariant: Invariant::Panicked(panic_message(panic)),
                    trace: trace(&stack),
                    detail: String::new(),
                });
                return report;
            }
        };
        if let Err((invariant, detail)) = checked {
            report.violation = Some(Violation {
                invariant,
                trace: trace(&stack),
                detail,
            });
            return report;
        }
        if !visited.insert(fingerprint(&state)) {
            continue;
        }
        match state.check_state(sc) {
            Ok(reads) => report.reads += reads,
            Err((invariant, detail)) => {
                report.violation = Some(Violation {
                    invariant,
                    trace: trace(&stack),
                    detail,
                });
                return report;
            }
        }
        report.states = visited.len();
        report.commits += outs
            .iter()
            .filter(|o| matches!(o.1, CommitOut::Committed { .. }))
            .count();
        if matches!(action, Action::Crash(_)) {
            report.crashes += 1;
        }
        report.max_in_flight = report.max_in_flight.max(state.net.len());
        if report.states % 500_000 == 0 {
            eprintln!(
                "{}: {} states, depth {}, {:?}",
                sc.name,
                report.states,
                stack.len(),
                started.elapsed()
            );
        }
        assert!(
            report.states <= sc.max_states,
            "{}: more than {} states: raise the bound or shrink the scenario",
            sc.name,
            sc.max_states
        );
        if sc.liveness && state.net.is_empty() && state.issued(sc) {
            report.settle_points += 1;
            let settled = catch_unwind(AssertUnwindSafe(|| state.clone().settle(sc)))
                .unwrap_or_else(|panic| {
                    Err((Invariant::Panicked(panic_message(panic)), String::new()))
                });
            match settled {
                Ok(replayed) => report.replays += usize::from(replayed),
                Err((invariant, detail)) => {
                    let mut trace = trace(&stack);
                    trace.push("(then fault-free: every timer and message)".into());
                    report.violation = Some(Violation {
                        invariant,
                        trace,
                        detail,
                    });
                    return report;
                }
            }
        }
        let actions = state.actions(sc);
        if actions.is_empty() {
            continue;
        }
        report.max_depth = report.max_depth.max(stack.len());
        stack.push(Frame {
            state,
            actions,
            next: 0,
        });
    }
    report.states = visited.len();
    report
}

/// Debug builds (the protocol's debug assertions on, ten times slower)
/// explore with one loss, no duplicate and one timer firing per run.
fn scaled(sc: &Scenario) -> Scenario {
    let mut sc = sc.clone();
    if cfg!(debug_assertions) {
        sc.drops = sc.drops.min(1);
        sc.duplicates = 0;
        sc.ticks = sc.ticks.min(1);
    }
    sc
}

fn run(sc: &Scenario) -> Report {
    let sc = &scaled(sc);
    let started = Instant::now();
    let report = explore(sc);
    eprintln!(
        "{}: {} states, {} transitions, {} settle points ({} with a replay), max depth {}, \
         max {} in flight, {} commits, {} crashes, {} transactional reads, in {:?}",
        sc.name,
        report.states,
        report.transitions,
        report.settle_points,
        report.replays,
        report.max_depth,
        report.max_in_flight,
        report.commits,
        report.crashes,
        report.reads,
        started.elapsed()
    );
    report
}

fn assert_clean(sc: &Scenario) {
    let report = run(sc);
    if let Some(v) = &report.violation {
        panic!(
            "{}: {:?} violated ({})\ntrace:\n  {}",
            sc.name,
            v.invariant,
            v.detail,
            v.trace.join("\n  ")
        );
    }
    assert!(
        report.states > 1_000,
        "explored only {} states",
        report.states
    );
    assert!(report.commits > 0 && report.reads > 0, "{report:?}");
    assert!(report.settle_points > 0, "{report:?}");
    if sc.crashes > 0 {
        assert!(report.crashes > 0 && report.replays > 0, "{report:?}");
    }
}

const X: usize = 0;
const Y: usize = 1;

/// Transaction 1 writes `x`, transaction 2 `y`: a reader of both must never
/// see `y` of transaction 2 with `x` from before transaction 1. One loss,
/// one duplicate, one timer firing and one crash.
fn disjoint() -> Scenario {
    Scenario {
        name: "x then y",
        txs: vec![vec![vec![X]], vec![vec![Y]]],
        readers: [vec![NodeId(2), NodeId(3)], vec![NodeId(2), NodeId(3)]],
        drops: 1,
        duplicates: 1,
        ticks: 1,
        crashes: 1,
        bugs: CommitBugs::default(),
        max_states: 3_000_000,
        liveness: true,
    }
}

/// Transaction 1 writes `x`, transaction 2 both: `x` moves on while the
/// first R-VAL is on its way.
fn overlapping() -> Scenario {
    Scenario {
        name: "x then x and y",
        txs: vec![vec![vec![X]], vec![vec![X, Y]]],
        ..disjoint()
    }
}

/// As `overlapping`, with no crash but two losses and two timer firings:
/// lost R-INVs, R-ACKs and R-VALs recovered by re-sends and re-acks.
fn lossy() -> Scenario {
    Scenario {
        name: "x then x and y, two losses",
        drops: 2,
        duplicates: 0,
        ticks: 2,
        crashes: 0,
        ..overlapping()
    }
}

/// Transaction 2 writes what the explorer chooses (`x`, `y` or both) after
/// transaction 1 wrote `x`: one loss, one timer firing, one crash.
fn chosen() -> Scenario {
    Scenario {
        name: "x then x, y or both",
        txs: vec![vec![vec![X]], vec![vec![X], vec![Y], vec![X, Y]]],
        duplicates: 0,
        ..disjoint()
    }
}

/// `y` is read by node 3 only: a transaction writing `y` alone has one
/// follower, so node 2 sees part of the pipeline (the prev-VAL bit and
/// the R-VAL to followers of later slots). Two timer firings.
fn partial_stream() -> Scenario {
    Scenario {
        name: "y read by node 3 only",
        txs: vec![vec![vec![Y]], vec![vec![X]]],
        readers: [vec![NodeId(2), NodeId(3)], vec![NodeId(3)]],
        ticks: 2,
        ..disjoint()
    }
}

#[test]
fn disjoint_pipeline_keeps_every_invariant() {
    assert_clean(&disjoint());
}

#[test]
fn overlapping_pipeline_keeps_every_invariant() {
    assert_clean(&overlapping());
}

#[test]
fn lossy_pipeline_keeps_every_invariant() {
    assert_clean(&lossy());
}

#[test]
fn a_chosen_second_transaction_keeps_every_invariant() {
    assert_clean(&chosen());
}

#[test]
fn partial_stream_keeps_every_invariant() {
    assert_clean(&partial_stream());
}

fn caught(mut sc: Scenario, want: &[Invariant]) {
    sc.liveness = false;
    let report = run(&sc);
    let v = report
        .violation
        .unwrap_or_else(|| panic!("{}: the planted bug was not caught", sc.name));
    eprintln!(
        "{}: caught {:?} ({}) after {} states\n  {}",
        sc.name,
        v.invariant,
        v.detail,
        report.states,
        v.trace.join("\n  ")
    );
    assert!(want.contains(&v.invariant), "{:?}", v.invariant);
}

#[test]
fn catches_committed_before_every_ack() {
    let mut sc = disjoint();
    sc.name = "bug: committed before every ack";
    sc.bugs.committed_before_all_acks = true;
    caught(
        sc,
        &[
            Invariant::CommittedDurable,
            Invariant::ValidOnlyCommitted,
            Invariant::RConsistentInvariant,
            Invariant::ValidNotAhead,
        ],
    );
}

#[test]
fn catches_a_follower_ignoring_pipeline_order() {
    // Reordering alone shows it (in flight is a set): no faults, so that
    // the search does not depend on which R-INV the explorer sends first.
    let mut sc = Scenario {
        drops: 0,
        duplicates: 0,
        ticks: 0,
        crashes: 0,
        ..disjoint()
    };
    sc.name = "bug: follower ignores pipeline order";
    sc.bugs.follower_ignores_pipeline_order = true;
    caught(sc, &[Invariant::PipelineOrder, Invariant::CommittedDurable]);
}

#[test]
fn catches_a_follower_validating_on_a_stale_r_val() {
    // Reordering alone shows it (an R-VAL overtaken by the next R-INV).
    let mut sc = Scenario {
        drops: 0,
        duplicates: 0,
        ticks: 0,
        crashes: 0,
        ..overlapping()
    };
    sc.name = "bug: follower validates on a stale R-VAL";
    sc.bugs.follower_validates_stale_rval = true;
    caught(
        sc,
        &[
            Invariant::ValidNotAhead,
            Invariant::ValidOnlyCommitted,
            Invariant::RConsistentInvariant,
        ],
    );
}

#[test]
fn catches_a_read_only_transaction_reading_an_invalid_object() {
    let mut sc = disjoint();
    sc.name = "bug: read-only transactions read Invalid objects";
    sc.bugs.read_only_reads_invalid = true;
    caught(sc, &[Invariant::ReadOnlyRealTime]);
}

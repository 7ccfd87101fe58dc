//! Transitions of the membership state machine, driven by hand: the first
//! view, leases from heartbeat acks, declaring a silent node dead only after
//! its lease, removal in a new epoch, rejoining as a new incarnation; and the
//! node's epoch filter.

use std::collections::VecDeque;

use roost_cluster::membership::{
    Health, Membership, MembershipBugs, MembershipConfig, MembershipMsg, MembershipOut,
};
use roost_cluster::node::{Node, NodeEffects, NodeMsg};
use roost_cluster::protocol::{Context, Effects, Input, Protocol};
use roost_cluster::{EpochId, NodeId};

fn config() -> MembershipConfig {
    MembershipConfig {
        heartbeat_interval_ms: 10,
        suspect_after_ms: 30,
        lease_duration_ms: 100,
        clock_drift_margin_ms: 5,
        proposal_timeout_ms: 200,
    }
}

/// Three memberships on a network that delivers everything at once, except to
/// or from nodes listed in `silent`.
struct Net {
    nodes: Vec<Membership>,
    silent: Vec<NodeId>,
    now_ms: u64,
}

impl Net {
    fn new(n: u32) -> Net {
        let ids: Vec<NodeId> = (0..n).map(NodeId).collect();
        let nodes = ids
            .iter()
            .map(|&id| Membership::new(id, 1, &ids, config(), MembershipBugs::default(), 0))
            .collect();
        Net {
            nodes,
            silent: Vec::new(),
            now_ms: 0,
        }
    }

    fn deliver(&mut self, mut queue: VecDeque<(NodeId, NodeId, MembershipMsg)>) {
        let mut budget = 100_000; // a bound: each round of a protocol is finite
        while let Some((from, to, msg)) = queue.pop_front() {
            budget -= 1;
            assert!(budget > 0, "message storm");
            if self.silent.contains(&from) || self.silent.contains(&to) {
                continue;
            }
            let mut out = MembershipOut::default();
            self.nodes[to.0 as usize].on_message(self.now_ms, from, msg, &mut out);
            queue.extend(out.sends.into_iter().map(|(t, m)| (to, t, m)));
        }
    }

    /// Advances time by one heartbeat interval, ticking every node.
    fn tick(&mut self) {
        self.now_ms += config().heartbeat_interval_ms;
        let mut queue = VecDeque::new();
        for i in 0..self.nodes.len() {
            let id = NodeId(i as u32);
            if self.silent.contains(&id) {
                continue; // a crashed or cut-off node does nothing we can see
            }
            let mut out = MembershipOut::default();
            self.nodes[i].on_tick(self.now_ms, &mut out);
            queue.extend(out.sends.into_iter().map(|(t, m)| (id, t, m)));
        }
        self.deliver(queue);
    }

    fn run_until(&mut self, what: &str, done: impl Fn(&Net) -> bool) {
        for _ in 0..1_000 {
            if done(self) {
                return;
            }
            self.tick();
        }
        panic!("never reached: {what}");
    }
}

#[test]
fn the_first_view_has_everyone_and_leases_follow() {
    let mut net = Net::new(3);
    net.tick();
    assert!(net
        .nodes
        .iter()
        .all(|m| m.view().epoch == EpochId(0) && !m.serving(net.now_ms)));
    net.run_until("epoch 1 everywhere", |n| {
        n.nodes.iter().all(|m| m.view().epoch == EpochId(1))
    });
    // Nobody votes before the fresh-start wait (a restarted process's promises lapse).
    assert!(net.now_ms >= config().proposal_timeout_ms);
    assert_eq!(net.nodes[0].view().members.len(), 3);
    net.tick();
    net.tick();
    assert!(net.nodes.iter().all(|m| m.serving(net.now_ms)));
    assert_eq!(net.nodes[1].health(NodeId(2), net.now_ms), Health::Live);
}

#[test]
fn a_silent_node_is_removed_only_after_its_lease_expired() {
    let mut net = Net::new(3);
    net.run_until("serving", |n| n.nodes.iter().all(|m| m.serving(n.now_ms)));
    let silenced_at = net.now_ms;
    net.silent.push(NodeId(2));
    // Suspect first, not dead.
    for _ in 0..4 {
        net.tick();
    }
    assert_eq!(net.nodes[0].health(NodeId(2), net.now_ms), Health::Suspect);
    assert_eq!(net.nodes[0].view().epoch, EpochId(1));
    net.run_until("epoch 2", |n| n.nodes[0].view().epoch == EpochId(2));
    // Node 2 got no acks since it went silent: its lease lapsed before removal.
    let removed_at = net.now_ms;
    let lapsed = net.nodes[2].lease_expiry_ms();
    assert!(!net.nodes[2].serving(removed_at));
    assert!(
        lapsed <= removed_at,
        "removed at {removed_at} ms while leased until {lapsed} ms"
    );
    assert!(removed_at >= silenced_at + config().lease_duration_ms);
    assert!(!net.nodes[0].view().members.contains_key(&NodeId(2)));
    assert_eq!(net.nodes[0].health(NodeId(2), net.now_ms), Health::Dead);
    net.tick();
    net.tick();
    assert!(net.nodes[0].serving(net.now_ms) && net.nodes[1].serving(net.now_ms));
}

#[test]
fn a_restarted_node_rejoins_as_a_new_incarnation_in_a_newer_epoch() {
    let mut net = Net::new(3);
    net.run_until("serving", |n| n.nodes.iter().all(|m| m.serving(n.now_ms)));
    net.silent.push(NodeId(1));
    net.run_until("removed", |n| n.nodes[0].view().epoch == EpochId(2));
    let ids: Vec<NodeId> = (0..3).map(NodeId).collect();
    net.nodes[1] = Membership::new(
        NodeId(1),
        2,
        &ids,
        config(),
        MembershipBugs::default(),
        net.now_ms,
    );
    net.silent.clear();
    net.run_until("rejoined", |n| {
        n.nodes.iter().all(|m| m.view().epoch == EpochId(3)) && n.nodes[1].serving(n.now_ms)
    });
    assert_eq!(net.nodes[0].view().members.get(&NodeId(1)), Some(&2));
}

#[test]
fn a_lone_node_never_serves() {
    let mut net = Net::new(3);
    net.silent = vec![NodeId(1), NodeId(2)];
    for _ in 0..100 {
        net.tick();
    }
    assert!(!net.nodes[0].serving(net.now_ms));
    assert_eq!(net.nodes[0].view().epoch, EpochId(0));
}

#[test]
fn bad_timing_is_rejected() {
    let mut bad = config();
    bad.suspect_after_ms = bad.lease_duration_ms;
    assert!(bad.validate().is_err());
    let mut bad = config();
    bad.heartbeat_interval_ms = 0;
    assert!(bad.validate().is_err());
    let mut bad = config();
    bad.proposal_timeout_ms = 1;
    assert!(bad.validate().is_err());
}

/// Counts the messages it is given.
#[derive(Default)]
struct Counter {
    seen: u64,
}

impl Protocol for Counter {
    type Msg = u64;
    type Cmd = ();
    type Out = u64;

    fn on_input(&mut self, _ctx: &Context<'_>, input: Input<u64, ()>, fx: &mut Effects<u64, u64>) {
        if let Input::Message { .. } = input {
            self.seen += 1;
            fx.output(self.seen);
        }
    }
}

#[test]
fn a_node_drops_application_messages_of_other_epochs() {
    let ids: Vec<NodeId> = (0..3).map(NodeId).collect();
    let mut node = Node::new(
        NodeId(0),
        1,
        &ids,
        config(),
        MembershipBugs::default(),
        Counter::default(),
        0,
    );
    let mut fx = NodeEffects::default();
    node.start(0, &mut fx);
    assert_eq!(node.epoch(), EpochId(0));
    node.on_message(1, NodeId(1), EpochId(1), NodeMsg::App(5), &mut fx);
    assert_eq!(node.app().seen, 0, "newer epoch dropped");
    node.on_message(1, NodeId(1), EpochId(0), NodeMsg::App(5), &mut fx);
    assert_eq!(node.app().seen, 1, "current epoch delivered");
    assert_eq!(fx.outputs, vec![1]);
    // Every message the node sends carries its epoch.
    assert!(fx.sends.iter().all(|(_, epoch, _)| *epoch == EpochId(0)));
}

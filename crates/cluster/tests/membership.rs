//! Transitions of the membership state machine, driven by hand: the first
//! view, leases from heartbeat acks, declaring a silent node dead only after
//! its lease, removal in a new epoch, rejoining as a new incarnation; the
//! acceptor record (persisted with the messages that depend on it, recovered
//! after a restart, closing the first view's amnesia hole); and the node's
//! epoch filter.

use std::collections::VecDeque;

use roost_cluster::membership::{
    AcceptorRecord, Ballot, Health, Membership, MembershipBugs, MembershipConfig, MembershipMsg,
    MembershipOut,
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
    /// Each node's last persisted record (its disk).
    disks: Vec<Option<AcceptorRecord>>,
    /// Every heartbeat's declarations: (time, sender, dead).
    declarations: Vec<(u64, NodeId, Vec<NodeId>)>,
}

impl Net {
    fn new(n: u32) -> Net {
        let ids: Vec<NodeId> = (0..n).map(NodeId).collect();
        let nodes = ids
            .iter()
            .map(|&id| Membership::new(id, 1, &ids, config(), MembershipBugs::default(), None, 0))
            .collect();
        Net {
            nodes,
            silent: Vec::new(),
            now_ms: 0,
            disks: vec![None; n as usize],
            declarations: Vec::new(),
        }
    }

    /// Node `i`'s process restarts as `incarnation`, with its disk or without.
    fn restart(&mut self, i: usize, incarnation: u64, with_disk: bool) {
        let ids: Vec<NodeId> = (0..self.nodes.len() as u32).map(NodeId).collect();
        let recovered = if with_disk {
            self.disks[i].clone()
        } else {
            None
        };
        self.nodes[i] = Membership::new(
            NodeId(i as u32),
            incarnation,
            &ids,
            config(),
            MembershipBugs::default(),
            recovered,
            self.now_ms,
        );
    }

    /// Keeps what `node` persisted (before its messages go anywhere).
    fn absorb(&mut self, node: NodeId, out: &mut MembershipOut) {
        if let Some(record) = out.persist.take() {
            self.disks[node.0 as usize] = Some(record);
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
            self.absorb(to, &mut out);
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
            self.absorb(id, &mut out);
            if let Some((_, MembershipMsg::Heartbeat { dead, .. })) = out.sends.first() {
                self.declarations.push((self.now_ms, id, dead.clone()));
            }
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
        None,
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

/// The hole the acceptor record closes (seed 2002 of the ownership
/// campaign): nodes 0 and 2 choose the first view while node 1 hears
/// nothing; node 2 goes silent and node 0 restarts. Without its record node
/// 0 votes on epoch 1 again and, with node 1, installs a second epoch 1; with
/// it, node 0 adopts the view, and node 1 learns it from node 0.
fn first_view_then_restart(with_disk: bool) -> Net {
    let mut net = Net::new(3);
    net.silent = vec![NodeId(1)];
    net.run_until("epoch 1 at nodes 0 and 2", |n| {
        n.nodes[0].view().epoch == EpochId(1) && n.nodes[2].view().epoch == EpochId(1)
    });
    let first = net.nodes[0].view().clone();
    assert_eq!(
        first.members.keys().copied().collect::<Vec<_>>(),
        [NodeId(0), NodeId(2)]
    );
    assert_eq!(net.disks[0].as_ref().map(|r| &r.installed), Some(&first));
    net.restart(0, 2, with_disk);
    net.silent = vec![NodeId(2)];
    net.run_until("epoch 1 at node 1", |n| {
        n.nodes[1].view().epoch == EpochId(1)
    });
    net
}

#[test]
fn a_restarted_node_with_its_record_never_chooses_a_second_first_view() {
    let net = first_view_then_restart(true);
    let first = net.disks[2].as_ref().unwrap().installed.clone();
    assert_eq!(
        net.nodes[1].view(),
        &first,
        "node 1 learned the chosen view"
    );
    assert_eq!(
        net.nodes[0].view(),
        &first,
        "node 0 adopted its recovered view"
    );
    // Node 0 is a new incarnation: not a member of the view it recovered.
    assert!(!net.nodes[0].is_member() && !net.nodes[0].serving(net.now_ms));
}

#[test]
fn without_its_record_a_restarted_node_may_choose_a_second_first_view() {
    let net = first_view_then_restart(false);
    let first = net.disks[2].as_ref().unwrap().installed.clone();
    let second = net.nodes[1].view();
    assert_eq!(second.epoch, first.epoch);
    assert_ne!(second.members, first.members, "the hole the record closes");
}

#[test]
fn promises_and_votes_are_persisted_with_the_messages_that_carry_them() {
    let ids: Vec<NodeId> = (0..3).map(NodeId).collect();
    let mut m = Membership::new(
        NodeId(1),
        1,
        &ids,
        config(),
        MembershipBugs::default(),
        None,
        0,
    );
    let ballot = Ballot {
        round: 4,
        node: NodeId(0),
    };
    // A fresh process without a record waits before voting on the first view.
    let mut out = MembershipOut::default();
    let prepare = MembershipMsg::Prepare {
        epoch: EpochId(1),
        ballot,
    };
    m.on_message(1, NodeId(0), prepare.clone(), &mut out);
    assert!(out.sends.is_empty() && out.persist.is_none());
    let after_wait = config().proposal_timeout_ms;
    m.on_message(after_wait, NodeId(0), prepare.clone(), &mut out);
    let record = out.persist.take().expect("the promise is persisted");
    assert_eq!(record.promised, ballot);
    assert!(matches!(
        out.sends[..],
        [(NodeId(0), MembershipMsg::Promise { .. })]
    ));
    // The same prepare again changes nothing durable: no write.
    out.sends.clear();
    m.on_message(after_wait, NodeId(0), prepare, &mut out);
    assert!(out.persist.is_none() && out.sends.len() == 1);
    let view = roost_cluster::View {
        epoch: EpochId(1),
        members: ids.iter().map(|&n| (n, 1)).collect(),
    };
    out.sends.clear();
    m.on_message(
        after_wait,
        NodeId(0),
        MembershipMsg::Propose {
            epoch: EpochId(1),
            ballot,
            view: view.clone(),
        },
        &mut out,
    );
    let record = out.persist.take().expect("the vote is persisted");
    assert_eq!(record.accepted, Some((ballot, view)));
    assert!(matches!(
        out.sends[..],
        [(NodeId(0), MembershipMsg::Accept { .. })]
    ));
    // The record encodes and decodes to itself.
    let bytes = roost_cluster::record::encode(&record);
    assert_eq!(
        roost_cluster::record::decode(&bytes, NodeId(1), &ids).unwrap(),
        record
    );

    // A restarted process with that record keeps the promise at once (no
    // wait: it knows what it voted), refusing a lower ballot and reporting
    // its vote to a higher one.
    let mut again = Membership::new(
        NodeId(1),
        2,
        &ids,
        config(),
        MembershipBugs::default(),
        Some(record.clone()),
        0,
    );
    let mut out = MembershipOut::default();
    let lower = Ballot {
        round: 3,
        node: NodeId(2),
    };
    again.on_message(
        0,
        NodeId(2),
        MembershipMsg::Prepare {
            epoch: EpochId(1),
            ballot: lower,
        },
        &mut out,
    );
    assert!(matches!(
        out.sends[..],
        [(NodeId(2), MembershipMsg::Nack { promised, .. })] if promised == ballot
    ));
    out.sends.clear();
    let higher = Ballot {
        round: 9,
        node: NodeId(2),
    };
    again.on_message(
        0,
        NodeId(2),
        MembershipMsg::Prepare {
            epoch: EpochId(1),
            ballot: higher,
        },
        &mut out,
    );
    match &out.sends[..] {
        [(NodeId(2), MembershipMsg::Promise { accepted, .. })] => {
            assert_eq!(accepted, &record.accepted)
        }
        other => panic!("expected a promise, got {other:?}"),
    }
}

#[test]
fn a_restarted_proposer_never_reuses_a_ballot() {
    let mut net = Net::new(3);
    net.run_until("epoch 1", |n| {
        n.nodes.iter().all(|m| m.view().epoch == EpochId(1))
    });
    let used = net.disks[0].as_ref().unwrap().proposed_round;
    assert!(used >= 1, "node 0 (the lowest id) proposed the first view");
    // Node 0 restarts: the next view (with node 0's new incarnation) is its
    // to propose, as the lowest id.
    net.restart(0, 2, true);
    net.run_until("epoch 2", |n| n.nodes[2].view().epoch == EpochId(2));
    let record = net.disks[0].as_ref().unwrap();
    assert!(
        record.proposed_round > used,
        "{record:?} after round {used}"
    );
    assert_eq!(net.nodes[2].view().members.get(&NodeId(0)), Some(&2));
}

#[test]
fn a_restarted_process_declares_no_one_dead_within_a_lease_of_its_start() {
    // Its predecessor may have granted a lease just before it stopped: a
    // process that recovered a view waits out such grants before it counts
    // towards removing anyone.
    let mut net = Net::new(3);
    net.run_until("serving", |n| n.nodes.iter().all(|m| m.serving(n.now_ms)));
    net.restart(1, 2, true);
    let restarted_at = net.now_ms;
    net.silent = vec![NodeId(2)];
    let declares_2 = |net: &Net| {
        net.declarations
            .iter()
            .find(|(at, from, dead)| {
                *at > restarted_at && *from == NodeId(1) && dead.contains(&NodeId(2))
            })
            .map(|(at, _, _)| *at)
    };
    net.run_until("node 1 declares node 2 dead", |n| declares_2(n).is_some());
    let declared_at = declares_2(&net).unwrap();
    let wait = config().lease_duration_ms + config().clock_drift_margin_ms;
    assert!(
        declared_at >= restarted_at + wait,
        "declared {} ms after its start",
        declared_at - restarted_at
    );
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
        None,
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

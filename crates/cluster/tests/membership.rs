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
    /// Nodes that hear but are not heard (their messages are lost).
    muted: Vec<NodeId>,
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
            muted: Vec::new(),
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
            if self.silent.contains(&from)
                || self.silent.contains(&to)
                || self.muted.contains(&from)
            {
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
    assert!(out.sends.is_empty());
    // Its first call writes only its lineage (its own incarnation), so a
    // later process knows whose votes the record holds.
    let record = out.persist.take().expect("the lineage, at once");
    assert_eq!(
        record,
        AcceptorRecord {
            lineage: vec![1],
            ..AcceptorRecord::empty(NodeId(1))
        }
    );
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

/// Ticks until `done`, checking after every tick that only members serve
/// (a process voting as its predecessor's slot never does) and that no two
/// nodes installed different views of one epoch.
fn run_checked(net: &mut Net, what: &str, done: impl Fn(&Net) -> bool) {
    let mut chosen: std::collections::BTreeMap<EpochId, roost_cluster::View> = Default::default();
    for _ in 0..1_000 {
        for m in &net.nodes {
            let view = m.view().clone();
            if view.epoch > EpochId(0) {
                let first = chosen.entry(view.epoch).or_insert_with(|| view.clone());
                assert_eq!(first, &view, "two views of {}", view.epoch);
            }
            if m.serving(net.now_ms) {
                assert!(m.is_member(), "{} serves outside its view", m.me());
            }
            if m.votes_as().is_some_and(|slot| slot != m.incarnation()) {
                assert!(!m.is_member() && !m.serving(net.now_ms));
                assert_eq!(m.lease_expiry_ms(), 0, "no lease as its predecessor");
            }
        }
        if done(net) {
            return;
        }
        net.tick();
    }
    panic!("never reached: {what}");
}

/// Every node serves as `incarnation`, in one view listing all of them so.
fn all_serve_as(net: &Net, incarnation: u64) -> bool {
    let view = net.nodes[0].view();
    net.nodes.iter().all(|m| {
        m.view() == view && m.incarnation() == incarnation && m.is_member() && m.serving(net.now_ms)
    }) && view.members.values().all(|&i| i == incarnation)
}

/// The corner the record closes: with every member restarted, no member of
/// the view is left, but each new process votes as its predecessor (whose
/// promises and votes it recovered), so the next view is chosen: the old
/// incarnations out (their leases lapsed), the new ones in.
#[test]
fn every_node_restarting_with_its_record_chooses_a_new_view() {
    let mut net = Net::new(3);
    net.run_until("serving", |n| all_serve_as(n, 1));
    let before = net.nodes[0].view().clone();
    for i in 0..3 {
        net.restart(i, 2, true);
    }
    // Each adopts the view, is no member of it, and votes as its old slot.
    for m in &net.nodes {
        assert_eq!(m.view(), &before);
        assert!(!m.is_member() && !m.serving(net.now_ms));
        assert_eq!(m.votes_as(), Some(1));
    }
    let restarted_at = net.now_ms;
    run_checked(&mut net, "a view of the new incarnations", |n| {
        all_serve_as(n, 2)
    });
    let after = net.nodes[0].view();
    assert_eq!(after.epoch, EpochId(before.epoch.0 + 1), "one view change");
    // Not before the old incarnations' leases (as seen at the restart) lapsed.
    assert!(net.now_ms >= restarted_at + config().lease_duration_ms);
    // Their records now say so, with the lineage of the votes they hold.
    for (i, disk) in net.disks.iter().enumerate() {
        let record = disk.as_ref().unwrap();
        assert_eq!(&record.installed, after, "node {i}");
        assert_eq!(record.lineage, [1, 2], "node {i}");
    }
}

#[test]
fn a_lone_node_restarts_and_serves_again() {
    let mut net = Net::new(1);
    net.run_until("serving", |n| all_serve_as(n, 1));
    for incarnation in 2..=4 {
        let epoch = net.nodes[0].view().epoch;
        net.restart(0, incarnation, true);
        assert!(!net.nodes[0].serving(net.now_ms));
        run_checked(&mut net, "serving again", |n| all_serve_as(n, incarnation));
        assert_eq!(net.nodes[0].view().epoch, EpochId(epoch.0 + 1));
    }
}

#[test]
fn a_majority_restarting_while_one_node_runs_chooses_a_new_view() {
    let mut net = Net::new(3);
    net.run_until("serving", |n| all_serve_as(n, 1));
    net.restart(1, 2, true);
    net.restart(2, 2, true);
    run_checked(&mut net, "nodes 1 and 2 back", |n| {
        let view = n.nodes[0].view();
        n.nodes
            .iter()
            .all(|m| m.serving(n.now_ms) && m.view() == view)
            && view.members.get(&NodeId(1)) == Some(&2)
            && view.members.get(&NodeId(2)) == Some(&2)
    });
    assert_eq!(net.nodes[0].view().members.get(&NodeId(0)), Some(&1));
    assert!(net.nodes[0].is_member(), "node 0 never restarted");
}

/// A record only vouches for the incarnations whose votes it holds. Here
/// node 2's directory is wiped while it is down: its next process starts
/// without a record, learns the view (with node 2's first incarnation in
/// it) and persists; the process after that recovers this record, which
/// lacks whatever the first incarnation promised, so it must not vote as it.
#[test]
fn a_record_begun_after_a_lost_one_does_not_vote_for_the_lost_votes() {
    let mut net = Net::new(3);
    net.run_until("serving", |n| all_serve_as(n, 1));
    net.restart(2, 2, false); // a wiped directory
    assert_eq!(net.nodes[2].view().epoch, EpochId(0));
    net.silent = vec![NodeId(0)]; // keep the view from changing meanwhile
    net.run_until("node 2 learns epoch 1", |n| {
        n.nodes[2].view().epoch == EpochId(1)
    });
    assert_eq!(net.nodes[2].view().members.get(&NodeId(2)), Some(&1));
    assert_eq!(net.nodes[2].votes_as(), None, "it holds none of 1's votes");
    let record = net.disks[2].clone().unwrap();
    assert_eq!(record.lineage, [2]);
    net.restart(2, 3, true);
    assert_eq!(net.nodes[2].votes_as(), None, "nor does its heir");
    // It answers no Prepare for the next epoch (as incarnation 1 or any).
    let ids: Vec<NodeId> = (0..3).map(NodeId).collect();
    let mut out = MembershipOut::default();
    let ballot = Ballot {
        round: 99,
        node: NodeId(1),
    };
    net.nodes[2].on_message(
        net.now_ms + 1_000,
        NodeId(1),
        MembershipMsg::Prepare {
            epoch: EpochId(2),
            ballot,
        },
        &mut out,
    );
    assert!(out.sends.is_empty(), "{:?}", out.sends);
    // With its own record, the heir of incarnation 1 votes as it.
    let mut heir = Membership::new(
        NodeId(1),
        2,
        &ids,
        config(),
        MembershipBugs::default(),
        net.disks[1].clone(),
        net.now_ms,
    );
    assert_eq!(heir.votes_as(), Some(1));
    let mut out = MembershipOut::default();
    heir.on_message(
        net.now_ms,
        NodeId(0),
        MembershipMsg::Prepare {
            epoch: EpochId(2),
            ballot,
        },
        &mut out,
    );
    let record = out.persist.expect("the promise, persisted first");
    assert_eq!(
        (record.promised, &record.lineage[..]),
        (ballot, &[1, 2][..])
    );
    assert!(matches!(
        out.sends[..],
        [(NodeId(0), MembershipMsg::Promise { incarnation: 1, .. })]
    ));
}

#[test]
fn a_lineage_stays_bounded_across_many_restarts() {
    let mut net = Net::new(3);
    net.run_until("serving", |n| all_serve_as(n, 1));
    net.silent = vec![NodeId(0), NodeId(1)]; // no view change meanwhile
    for incarnation in 2..40 {
        net.restart(2, incarnation, true);
        net.tick();
        let record = net.disks[2].as_ref().unwrap();
        assert!(record.lineage.len() <= roost_cluster::membership::MAX_LINEAGE + 2);
        assert_eq!(record.lineage.first(), Some(&1), "its slot's is kept");
        assert_eq!(record.lineage.last(), Some(&incarnation));
        assert_eq!(net.nodes[2].votes_as(), Some(1));
    }
}

/// Declarations are final for an epoch: a member a majority declared dead
/// gets no lease in it again. Here nodes 1 and 2 are muted (they hear, but
/// are not heard) until node 0 has declared both dead and each the other;
/// once heard again they are no reason for a smaller view (they are live,
/// same incarnations), but without a new epoch they would never serve again:
/// the coordinator proposes the same members in the next epoch.
#[test]
fn members_declared_dead_but_heard_again_serve_in_a_new_epoch() {
    let mut net = Net::new(3);
    net.run_until("serving", |n| all_serve_as(n, 1));
    net.muted = vec![NodeId(1), NodeId(2)];
    let declared =
        |n: &Net, by: usize, of: u32| n.nodes[by].health(NodeId(of), n.now_ms) == Health::Dead;
    net.run_until("declared", |n| {
        declared(n, 0, 1) && declared(n, 0, 2) && declared(n, 1, 2) && declared(n, 2, 1)
    });
    assert_eq!(
        net.nodes[0].view().epoch,
        EpochId(1),
        "no quorum to remove them"
    );
    net.muted.clear();
    run_checked(&mut net, "all serving again", |n| all_serve_as(n, 1));
    let view = net.nodes[0].view();
    assert_eq!(view.epoch, EpochId(2));
    assert_eq!(view.members.len(), 3, "the same members, in a new epoch");
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

//! View changes: a coordinator crash (the followers finish its
//! transactions), a follower crash (the coordinator drops it and commits),
//! messages of an old epoch.

mod common;

use common::{n, w, Net};
use roost_cluster::{EpochId, Input};
use roost_commit::{Body, CommitMsg, CommitOut, DropReason, ObjectState, RInv};

fn is_ack(m: &common::InFlight) -> bool {
    matches!(m.msg.body, Body::RAck(_))
}

#[test]
fn coordinator_crash_after_every_follower_applied() {
    let mut net = Net::new(3);
    let tx = net.commit(1, vec![w("x", 1, "a")], &[2, 3]).unwrap();
    net.deliver_first(|m| m.to == n(2));
    net.deliver_first(|m| m.to == n(3));
    net.crash(&[1]);
    assert!(!net.is_committed(tx));
    assert_eq!(net.node(2).replaying(), 1);
    assert_eq!(net.node(3).replaying(), 1);
    net.run();
    for id in [2, 3] {
        assert_eq!(net.state(id, "x"), Some((1, ObjectState::Valid)));
        assert!(net
            .outputs_at(id)
            .iter()
            .any(|o| matches!(o, CommitOut::Recovered { .. })));
        assert!(
            net.node(id).stats().replays_finished + net.node(id).stats().dropped(DropReason::Stale)
                >= 1
        );
    }
    assert_eq!(net.check_end(), Vec::<String>::new());
}

#[test]
fn coordinator_crash_after_one_follower_applied() {
    // Only node 2 got the R-INV: it replays it to node 3, which applies it.
    let mut net = Net::new(3);
    net.commit(1, vec![w("x", 1, "a"), w("y", 1, "b")], &[2, 3])
        .unwrap();
    net.deliver_first(|m| m.to == n(2));
    net.crash(&[1]);
    assert_eq!(net.node(3).replaying(), 0);
    net.run();
    for id in [2, 3] {
        assert_eq!(net.state(id, "x"), Some((1, ObjectState::Valid)));
        assert_eq!(net.state(id, "y"), Some((1, ObjectState::Valid)));
    }
    assert!(net
        .outputs_at(3)
        .iter()
        .any(|o| matches!(o, CommitOut::Applied { replay: true, .. })));
    assert_eq!(net.check_end(), Vec::<String>::new());
}

#[test]
fn coordinator_crash_with_a_pipeline_in_flight() {
    let mut net = Net::new(3);
    net.commit(1, vec![w("x", 1, "a")], &[2, 3]).unwrap();
    net.commit(1, vec![w("x", 2, "b")], &[2, 3]).unwrap();
    net.commit(1, vec![w("y", 1, "c")], &[3]).unwrap();
    // Node 2 gets slots 1 and 2, node 3 slot 1 and (held) slot 3.
    net.deliver_first(|m| m.to == n(2));
    net.deliver_first(|m| m.to == n(2));
    net.deliver_first(|m| m.to == n(3));
    net.drop_where(|m| {
        m.to == n(3) && matches!(&m.msg.body, Body::RInv(i) if i.writes[0].version == 2)
    });
    net.deliver_first(|m| m.to == n(3));
    assert_eq!(net.node(3).held(), 1);
    net.crash(&[1]);
    // The held slot 3 was never applied by a live node: dropped.
    assert_eq!(net.node(3).held(), 0);
    assert_eq!(net.node(3).stats().dropped(DropReason::CoordinatorGone), 1);
    net.run();
    for id in [2, 3] {
        let o = net.node(id).store().get(b"x").unwrap();
        assert_eq!((o.version, o.state), (2, ObjectState::Valid), "node {id}");
    }
    assert_eq!(net.state(3, "y"), None);
    assert_eq!(net.check_end(), Vec::<String>::new());
}

#[test]
fn coordinator_crash_before_any_follower_applied_loses_only_uncommitted() {
    let mut net = Net::new(3);
    let tx = net.commit(1, vec![w("x", 1, "a")], &[2, 3]).unwrap();
    net.crash(&[1]);
    net.run();
    assert!(!net.is_committed(tx));
    assert_eq!(net.state(2, "x"), None);
    assert_eq!(net.check_end(), Vec::<String>::new());
}

#[test]
fn follower_crash_coordinator_drops_it_and_commits() {
    let mut net = Net::new(3);
    let tx = net.commit(1, vec![w("x", 1, "a")], &[2, 3]).unwrap();
    net.deliver_first(|m| m.to == n(2));
    net.deliver_first(is_ack);
    assert!(!net.is_committed(tx));
    net.crash(&[3]);
    net.run();
    assert!(net.is_committed(tx));
    assert_eq!(net.state(2, "x"), Some((1, ObjectState::Valid)));
    assert_eq!(net.state(1, "x"), Some((1, ObjectState::Valid)));
    assert_eq!(net.check_end(), Vec::<String>::new());
}

#[test]
fn follower_crash_leaving_no_followers_commits_at_the_view_change() {
    let mut net = Net::new(2);
    let tx = net.commit(1, vec![w("x", 1, "a")], &[2]).unwrap();
    net.crash(&[2]);
    assert!(net.is_committed(tx));
    assert_eq!(net.check_end(), Vec::<String>::new());
}

#[test]
fn messages_of_an_old_epoch_are_dropped_and_counted() {
    let mut net = Net::new(3);
    net.commit(1, vec![w("x", 1, "a")], &[2, 3]).unwrap();
    let old: Vec<_> = net.queue.clone();
    net.crash(&[3]);
    let before = net.node(2).stats().dropped(DropReason::WrongEpoch);
    for m in old.into_iter().filter(|m| m.to == n(2)) {
        net.queue.insert(0, m);
    }
    net.run();
    // The R-INV still queued from before the view change, and its copy.
    assert_eq!(
        net.node(2).stats().dropped(DropReason::WrongEpoch),
        before + 2
    );
    assert_eq!(net.check_end(), Vec::<String>::new());
}

#[test]
fn replayed_r_inv_already_held_is_re_acked() {
    let mut net = Net::new(4);
    net.commit(1, vec![w("x", 1, "a")], &[2, 3, 4]).unwrap();
    net.deliver_first(|m| m.to == n(2));
    net.deliver_first(|m| m.to == n(3));
    net.crash(&[1]);
    // 2 and 3 both replay; each re-acks the other's replay; 4 applies
    // once.
    net.run();
    let applied4 = net
        .outputs_at(4)
        .iter()
        .filter(|o| matches!(o, CommitOut::Applied { .. }))
        .count();
    assert_eq!(applied4, 1);
    assert!(net.node(2).stats().dropped(DropReason::Duplicate) >= 1);
    assert_eq!(net.check_end(), Vec::<String>::new());
}

#[test]
fn two_view_changes_in_a_row() {
    let mut net = Net::new(4);
    net.commit(1, vec![w("x", 1, "a")], &[2, 3, 4]).unwrap();
    net.deliver_first(|m| m.to == n(2));
    net.crash(&[1]);
    // Node 2's replay reaches nobody before it crashes too... but node 3
    // got it.
    net.deliver_first(|m| m.to == n(3));
    net.crash(&[2]);
    net.run();
    for id in [3, 4] {
        assert_eq!(
            net.state(id, "x"),
            Some((1, ObjectState::Valid)),
            "node {id}"
        );
    }
    assert_eq!(net.check_end(), Vec::<String>::new());
}

#[test]
fn restarted_coordinator_starts_a_new_pipeline() {
    let mut net = Net::new(3);
    let old = net.commit(1, vec![w("x", 1, "a")], &[2, 3]).unwrap();
    net.commit(1, vec![w("y", 1, "b")], &[3]).unwrap();
    net.deliver_first(|m| m.to == n(2));
    // Node 3 holds slot 2 only (slot 1 to it is lost).
    net.drop_where(|m| m.to == n(3) && matches!(&m.msg.body, Body::RInv(i) if i.tx_id == old));
    net.deliver_first(|m| m.to == n(3));
    assert_eq!(net.node(3).held(), 1);
    net.crash(&[1]);
    net.restart(1, Default::default());
    let new = net.commit(1, vec![w("x", 2, "c")], &[2, 3]).unwrap();
    assert!(
        new.local > old.local,
        "tx ids are not reused across incarnations"
    );
    net.run();
    assert!(net.is_committed(new));
    for id in [2, 3] {
        assert_eq!(
            net.state(id, "x"),
            Some((2, ObjectState::Valid)),
            "node {id}"
        );
    }
    assert_eq!(net.check_end(), Vec::<String>::new());
}

#[test]
fn replay_of_an_old_incarnation_below_the_new_one_is_applied() {
    let mut net = Net::new(3);
    net.commit(1, vec![w("old", 1, "a")], &[2, 3]).unwrap();
    net.deliver_first(|m| m.to == n(2));
    net.crash(&[1]);
    net.restart(1, Default::default());
    // Node 2's replays (both epochs) wait; node 1's new slot goes first.
    let replays: Vec<_> = net.queue.drain(..).collect();
    let new = net.commit(1, vec![w("new", 1, "b")], &[3]).unwrap();
    net.run();
    assert!(net.is_committed(new));
    net.queue.extend(replays);
    net.run();
    assert_eq!(net.state(3, "old"), Some((1, ObjectState::Valid)));
    assert_eq!(net.state(2, "old"), Some((1, ObjectState::Valid)));
    assert_eq!(net.check_end(), Vec::<String>::new());
}

#[test]
fn replays_of_a_failed_pipeline_go_one_at_a_time_in_slot_order() {
    // Node 2 applied slots 1 (x) and 2 (y); node 3 got neither. Were both
    // replays sent at once, node 3 could apply and validate y before x: a
    // reader there would see slot 2 without slot 1 (the model check's
    // `ReadOnlySnapshot`).
    let mut net = Net::new(3);
    let first = net.commit(1, vec![w("x", 1, "a")], &[2, 3]).unwrap();
    let second = net.commit(1, vec![w("y", 1, "b")], &[2, 3]).unwrap();
    net.deliver_first(|m| m.to == n(2));
    net.deliver_first(|m| m.to == n(2));
    net.drop_where(|m| m.to == n(3));
    net.crash(&[1]);
    assert_eq!(net.node(2).replaying(), 2);
    let replayed = |net: &Net| -> Vec<_> {
        net.queue
            .iter()
            .filter_map(|m| match &m.msg.body {
                Body::RInv(i) if i.replay => Some(i.tx_id),
                _ => None,
            })
            .collect()
    };
    // Only the oldest slot's replay goes out.
    assert_eq!(replayed(&net), vec![first]);
    net.deliver_first(|m| m.to == n(3));
    net.deliver_first(is_ack);
    // Slot 1 finished (node 3 applied it): its R-VAL, then slot 2's replay.
    assert_eq!(net.state(2, "x"), Some((1, ObjectState::Valid)));
    assert_eq!(net.state(2, "y"), Some((1, ObjectState::Invalid)));
    assert_eq!(replayed(&net), vec![second]);
    net.run();
    for id in [2, 3] {
        assert_eq!(net.state(id, "x"), Some((1, ObjectState::Valid)));
        assert_eq!(net.state(id, "y"), Some((1, ObjectState::Valid)));
    }
    let applied: Vec<_> = net
        .outputs_at(3)
        .into_iter()
        .filter_map(|o| match o {
            CommitOut::Applied { tx_id, .. } => Some(tx_id),
            _ => None,
        })
        .collect();
    assert_eq!(applied, vec![first, second]);
    assert_eq!(net.check_end(), Vec::<String>::new());
}

#[test]
fn a_replay_issued_before_a_follower_restarted_installs_nothing_there() {
    // x v1 (slot 1) and v2 (slot 2) are committed at nodes 1-3; node 3
    // restarts with nothing. A replay of slot 1 still running (a replayer
    // took it over when its R-VAL was lost) names node 3 by id: installing
    // x v1 there would let a reader at node 3 see v1 after v2 (the
    // simulator's real-time check, 5-node seed 50123). A slot issued after
    // node 3 came back does install what node 3 does not hold yet.
    let mut net = Net::new(3);
    let first = net.commit(1, vec![w("x", 1, "a")], &[2, 3]).unwrap();
    net.run();
    net.commit(1, vec![w("x", 2, "b")], &[2, 3]).unwrap();
    net.run();
    net.restart(3, Default::default());
    let epoch = net.view.epoch;
    assert_eq!(epoch, EpochId(2));
    let replay = |tx_id, origin, key: &str| RInv {
        tx_id,
        epoch_id: epoch,
        origin,
        followers: vec![n(2), n(3)],
        writes: vec![w(key, 1, "a")],
        prev_val: false,
        replay: true,
    };
    let stale = CommitMsg::new(epoch, Body::RInv(replay(first, EpochId(1), "x")));
    net.input(
        n(3),
        Input::Message {
            from: n(2),
            msg: stale,
        },
    );
    assert_eq!(net.state(3, "x"), None);
    assert_eq!(net.node(3).stats().replayed_writes_skipped, 1);
    assert!(
        net.queue
            .iter()
            .any(|m| m.to == n(2) && matches!(m.msg.body, Body::RAck(_))),
        "acked, so that the replay finishes"
    );
    // Issued in node 3's epoch: it was a follower, it missed the R-INV.
    let later = roost_commit::TxId::new(n(1), first.local + 5);
    let fresh = CommitMsg::new(epoch, Body::RInv(replay(later, epoch, "y")));
    net.input(
        n(3),
        Input::Message {
            from: n(2),
            msg: fresh,
        },
    );
    assert_eq!(net.state(3, "y"), Some((1, ObjectState::Invalid)));
    assert_eq!(net.node(3).stats().replayed_writes_skipped, 1);
}

//! One test per transition of the coordinator and the follower.

mod common;

use common::{n, w, Net};
use roost_cluster::EpochId;
use roost_commit::{Body, CommitConfig, CommitError, CommitOut, DropReason, ObjectState, TxId};

fn is_inv(m: &common::InFlight) -> bool {
    matches!(m.msg.body, Body::RInv(_))
}

fn is_ack(m: &common::InFlight) -> bool {
    matches!(m.msg.body, Body::RAck(_))
}

fn is_val(m: &common::InFlight) -> bool {
    matches!(m.msg.body, Body::RVal(_))
}

#[test]
fn commit_sends_r_inv_to_every_follower_and_installs_invalid() {
    let mut net = Net::new(3);
    let tx = net.commit(1, vec![w("x", 1, "a")], &[2, 3, 1]).unwrap();
    assert_eq!(tx, TxId::new(n(1), (1 << 32) + 1));
    assert_eq!(
        net.queue.len(),
        2,
        "the coordinator is no follower of itself"
    );
    assert!(net.queue.iter().all(is_inv));
    let Body::RInv(inv) = &net.queue[0].msg.body else {
        unreachable!()
    };
    assert!(inv.prev_val, "nothing earlier is pending");
    assert_eq!(inv.epoch_id, EpochId(1));
    assert_eq!(inv.followers, vec![n(2), n(3)]);
    assert_eq!(net.state(1, "x"), Some((1, ObjectState::Invalid)));
    assert!(!net.is_committed(tx));
}

#[test]
fn follower_applies_invalid_stores_and_acks() {
    let mut net = Net::new(3);
    let tx = net.commit(1, vec![w("x", 1, "a")], &[2, 3]).unwrap();
    assert!(net.deliver_first(|m| m.to == n(2)));
    assert_eq!(net.state(2, "x"), Some((1, ObjectState::Invalid)));
    assert_eq!(net.node(2).stored(), 1);
    assert!(net.outputs_at(2).contains(&CommitOut::Applied {
        tx_id: tx,
        replay: false
    }));
    assert!(net
        .queue
        .iter()
        .any(|m| is_ack(m) && m.from == n(2) && m.to == n(1)));
}

#[test]
fn committed_only_after_every_ack_then_r_val_validates() {
    let mut net = Net::new(3);
    let tx = net.commit(1, vec![w("x", 1, "a")], &[2, 3]).unwrap();
    net.deliver_first(|m| m.to == n(2));
    net.deliver_first(|m| is_ack(m) && m.from == n(2));
    assert!(!net.is_committed(tx), "node 3 has not acked");
    net.deliver_first(|m| m.to == n(3));
    net.deliver_first(|m| is_ack(m) && m.from == n(3));
    assert!(net.is_committed(tx));
    assert_eq!(net.state(1, "x"), Some((1, ObjectState::Valid)));
    assert_eq!(net.queue.iter().filter(|m| is_val(m)).count(), 2);
    net.run();
    for id in 1..=3 {
        assert_eq!(net.state(id, "x"), Some((1, ObjectState::Valid)));
    }
    assert_eq!(net.check_end(), Vec::<String>::new());
}

#[test]
fn no_followers_commits_at_once() {
    let mut net = Net::new(3);
    let tx = net.commit(1, vec![w("x", 1, "a")], &[]).unwrap();
    assert!(net.is_committed(tx));
    assert!(net.queue.is_empty());
    assert_eq!(net.state(1, "x"), Some((1, ObjectState::Valid)));
}

#[test]
fn commit_refusals() {
    let config = CommitConfig {
        max_in_flight: 2,
        max_writes: 2,
        max_data_bytes: 4,
        ..CommitConfig::default()
    };
    let mut net = Net::with(3, config, Default::default());
    let refused = |net: &Net| {
        net.outputs.iter().rev().find_map(|(_, o)| match o {
            CommitOut::Refused { error } => Some(error.clone()),
            _ => None,
        })
    };
    assert!(net.commit(1, vec![], &[2]).is_none());
    assert_eq!(refused(&net), Some(CommitError::NoWrites));
    assert!(net
        .commit(1, vec![w("a", 1, ""), w("b", 1, ""), w("c", 1, "")], &[2])
        .is_none());
    assert_eq!(
        refused(&net),
        Some(CommitError::TooManyWrites { count: 3, limit: 2 })
    );
    assert!(net.commit(1, vec![w("a", 1, "12345")], &[2]).is_none());
    assert_eq!(
        refused(&net),
        Some(CommitError::Oversized { len: 5, limit: 4 })
    );
    assert!(net
        .commit(1, vec![w("a", 1, ""), w("a", 2, "")], &[2])
        .is_none());
    assert_eq!(refused(&net), Some(CommitError::DuplicateKey));
    assert!(net.commit(1, vec![w("a", 1, "")], &[9]).is_none());
    assert_eq!(refused(&net), Some(CommitError::UnknownFollower(n(9))));
    net.commit(1, vec![w("a", 1, "")], &[2]).unwrap();
    assert!(net.commit(1, vec![w("a", 1, "")], &[2]).is_none());
    assert_eq!(
        refused(&net),
        Some(CommitError::StaleVersion { held: 1, given: 1 })
    );
    net.commit(1, vec![w("a", 2, "")], &[2]).unwrap();
    assert!(net.commit(1, vec![w("a", 3, "")], &[2]).is_none());
    assert_eq!(
        refused(&net),
        Some(CommitError::TooManyInFlight { limit: 2 })
    );
    net.run();
    assert_eq!(net.node(1).in_flight(), 0);
    net.commit(1, vec![w("a", 3, "")], &[2]).unwrap();
    net.run();
    assert_eq!(net.check_end(), Vec::<String>::new());
}

#[test]
fn pipelining_does_not_wait_and_sets_prev_val() {
    let mut net = Net::new(2);
    let t1 = net.commit(1, vec![w("x", 1, "a")], &[2]).unwrap();
    let t2 = net.commit(1, vec![w("x", 2, "b")], &[2]).unwrap();
    assert_eq!(t2.local, t1.local + 1);
    let bits: Vec<bool> = net
        .queue
        .iter()
        .map(|m| match &m.msg.body {
            Body::RInv(i) => i.prev_val,
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(bits, vec![true, false]);
    assert_eq!(net.node(1).in_flight(), 2);
    net.run();
    assert!(net.is_committed(t1) && net.is_committed(t2));
    assert_eq!(net.state(2, "x"), Some((2, ObjectState::Valid)));
    assert_eq!(net.check_end(), Vec::<String>::new());
}

#[test]
fn follower_holds_slot_3_until_slot_2_is_applied() {
    let mut net = Net::new(2);
    let t1 = net.commit(1, vec![w("x", 1, "a")], &[2]).unwrap();
    let t2 = net.commit(1, vec![w("y", 1, "b")], &[2]).unwrap();
    let t3 = net.commit(1, vec![w("z", 1, "c")], &[2]).unwrap();
    net.deliver(0); // slot 1
    net.deliver(1); // slot 3 (slot 2 is now at 0)
    assert_eq!(net.node(2).held(), 1);
    assert_eq!(net.state(2, "z"), None, "slot 3 is held back");
    net.deliver(0); // slot 2: applies 2, then the held 3
    assert_eq!(net.node(2).held(), 0);
    let applied: Vec<TxId> = net
        .outputs_at(2)
        .into_iter()
        .filter_map(|o| match o {
            CommitOut::Applied { tx_id, .. } => Some(tx_id),
            _ => None,
        })
        .collect();
    assert_eq!(applied, vec![t1, t2, t3]);
    net.run();
    assert_eq!(net.check_end(), Vec::<String>::new());
}

#[test]
fn follower_holds_slot_until_r_val_of_a_slot_it_does_not_follow() {
    // Slot 1 is followed by 2 only, slot 2 by 3 only: 3 sees a partial
    // stream and waits for slot 1's R-VAL, which the coordinator sends it.
    let mut net = Net::new(3);
    let t1 = net.commit(1, vec![w("x", 1, "a")], &[2]).unwrap();
    let t2 = net.commit(1, vec![w("y", 1, "b")], &[3]).unwrap();
    assert!(net.deliver_first(|m| m.to == n(3)));
    assert_eq!(net.node(3).held(), 1);
    net.deliver_first(|m| m.to == n(2));
    net.deliver_first(is_ack);
    assert!(net.is_committed(t1));
    assert!(net.queue.iter().any(|m| is_val(m) && m.to == n(3)));
    net.deliver_first(|m| is_val(m) && m.to == n(3));
    assert_eq!(net.node(3).held(), 0);
    assert_eq!(net.state(3, "y"), Some((1, ObjectState::Invalid)));
    net.run();
    assert!(net.is_committed(t2));
    assert_eq!(net.check_end(), Vec::<String>::new());
}

#[test]
fn prev_val_bit_lets_a_partial_follower_apply() {
    let mut net = Net::new(3);
    net.commit(1, vec![w("x", 1, "a")], &[2]).unwrap();
    net.run();
    // Slot 1 is validated: slot 2 carries prev_val and node 3 applies it.
    net.commit(1, vec![w("y", 1, "b")], &[3]).unwrap();
    net.deliver(0);
    assert_eq!(net.node(3).held(), 0);
    assert_eq!(net.state(3, "y"), Some((1, ObjectState::Invalid)));
    net.run();
    assert_eq!(net.check_end(), Vec::<String>::new());
}

#[test]
fn duplicate_r_inv_is_re_acked_not_re_applied() {
    let mut net = Net::new(2);
    let tx = net.commit(1, vec![w("x", 1, "a")], &[2]).unwrap();
    let copy = net.queue[0].clone();
    net.queue.push(copy.clone());
    net.deliver(0);
    net.deliver(0);
    let applied = net
        .outputs_at(2)
        .iter()
        .filter(|o| matches!(o, CommitOut::Applied { .. }))
        .count();
    assert_eq!(applied, 1);
    assert_eq!(net.queue.iter().filter(|m| is_ack(m)).count(), 2);
    assert_eq!(net.node(2).stats().dropped(DropReason::Duplicate), 1);
    net.run();
    assert!(net.is_committed(tx));
    // A duplicate after the R-VAL: re-acked, the object stays valid.
    net.queue.push(copy);
    net.run();
    assert_eq!(net.state(2, "x"), Some((1, ObjectState::Valid)));
    assert_eq!(net.check_end(), Vec::<String>::new());
}

#[test]
fn older_version_is_not_applied() {
    let mut net = Net::new(2);
    net.commit(1, vec![w("x", 1, "a")], &[2]).unwrap();
    net.commit(1, vec![w("x", 2, "b")], &[2]).unwrap();
    net.run();
    assert_eq!(net.node(2).store().get(b"x").unwrap().data, b"b");
    assert_eq!(net.check_end(), Vec::<String>::new());
}

#[test]
fn r_val_validates_only_an_unmoved_version() {
    let mut net = Net::new(2);
    net.commit(1, vec![w("x", 1, "a")], &[2]).unwrap();
    net.commit(1, vec![w("x", 2, "b")], &[2]).unwrap();
    net.deliver(0);
    net.deliver(0); // both applied at 2
    net.deliver_first(is_ack); // ack of slot 1 only
    assert_eq!(net.committed.len(), 1);
    net.deliver_first(is_val);
    // Slot 1's R-VAL: x moved on to version 2, so it stays invalid.
    assert_eq!(net.state(2, "x"), Some((2, ObjectState::Invalid)));
    net.run();
    assert_eq!(net.state(2, "x"), Some((2, ObjectState::Valid)));
    assert_eq!(net.check_end(), Vec::<String>::new());
}

#[test]
fn cumulative_ack_and_cumulative_r_val() {
    let mut net = Net::new(2);
    let t1 = net.commit(1, vec![w("x", 1, "a")], &[2]).unwrap();
    let t2 = net.commit(1, vec![w("y", 1, "b")], &[2]).unwrap();
    net.deliver(0);
    net.deliver(0);
    // The ack of slot 1 is lost; slot 2's acks both.
    net.drop_where(|m| matches!(&m.msg.body, Body::RAck(a) if a.tx_id == t1));
    net.deliver_first(is_ack);
    assert!(net.is_committed(t1) && net.is_committed(t2));
    // Slot 1's R-VAL is lost; slot 2's validates both.
    net.drop_where(|m| matches!(&m.msg.body, Body::RVal(v) if v.tx_id == t1));
    net.run();
    assert_eq!(net.state(2, "x"), Some((1, ObjectState::Valid)));
    assert_eq!(net.check_end(), Vec::<String>::new());
}

#[test]
fn lost_r_inv_is_re_sent_on_the_timer() {
    let mut net = Net::new(3);
    let tx = net.commit(1, vec![w("x", 1, "a")], &[2, 3]).unwrap();
    net.drop_where(|m| m.to == n(3));
    net.run();
    assert!(!net.is_committed(tx));
    net.tick();
    net.run();
    assert!(net.is_committed(tx));
    assert!(net.node(1).stats().resends >= 1);
    assert_eq!(net.check_end(), Vec::<String>::new());
}

#[test]
fn lost_r_val_is_recovered_by_a_re_ack() {
    let mut net = Net::new(2);
    let tx = net.commit(1, vec![w("x", 1, "a")], &[2]).unwrap();
    net.deliver(0);
    net.deliver(0);
    assert!(net.is_committed(tx));
    assert_eq!(net.drop_where(is_val), 1);
    assert_eq!(net.state(2, "x"), Some((1, ObjectState::Invalid)));
    net.tick();
    net.run();
    assert_eq!(net.state(2, "x"), Some((1, ObjectState::Valid)));
    assert_eq!(net.check_end(), Vec::<String>::new());
}

#[test]
fn held_slot_is_released_by_a_re_sent_prev_val() {
    // Node 3 follows slot 2 only and misses slot 1's R-VAL; the re-sent
    // slot 2 carries the prev-VAL bit.
    let mut net = Net::new(3);
    net.commit(1, vec![w("x", 1, "a")], &[2]).unwrap();
    let t2 = net.commit(1, vec![w("y", 1, "b")], &[3]).unwrap();
    net.deliver_first(|m| m.to == n(3));
    net.deliver_first(|m| m.to == n(2));
    net.deliver_first(is_ack);
    net.drop_where(|m| is_val(m) && m.to == n(3));
    net.run();
    assert_eq!(net.node(3).held(), 1);
    net.tick();
    net.run();
    assert!(net.is_committed(t2));
    assert_eq!(net.check_end(), Vec::<String>::new());
}

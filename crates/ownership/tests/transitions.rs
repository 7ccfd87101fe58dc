//! One test per transition of the protocol, on small clusters driven step by
//! step: REQ at the driver, INV at an arbiter (greater, equal, smaller
//! `o_ts`), ACK collection, VAL, NACK and retry, the owner's ACK with data,
//! the pending-commit NACK, and the hop counts of the fast path.

mod common;

use std::collections::BTreeSet;

use common::*;
use roost_cluster::{EpochId, NodeId};
use roost_ownership::{
    Access, ArbKind, Body, DropReason, FailReason, Inv, NackReason, OReplicas, OState, OTs,
    ObjectStore, OwnershipBugs, OwnershipOut, RTs, RequestKind,
};

/// A cluster of `count` nodes whose key `k` has directory `dir` (2
/// replicas), created by `owner`, and `readers` added.
fn setup(count: u32, dir: &[NodeId], owner: NodeId, readers: &[NodeId]) -> (World, Key) {
    let mut world = World::new(count, &test_config(dir.len()), OwnershipBugs::default());
    let key = key_with_directory(&world.nodes, dir.len(), dir);
    let out = world.create(owner, key, 1, data(1));
    assert!(out.outputs.is_empty(), "{out:?}");
    let outs = world.deliver_all(1_000);
    assert!(
        all_outputs(&outs)
            .iter()
            .any(|(id, o)| *id == owner && matches!(o, OwnershipOut::Acquired { .. })),
        "{:?}",
        all_outputs(&outs)
    );
    for (i, &reader) in readers.iter().enumerate() {
        world.acquire(reader, key, 100 + i as u64, RequestKind::AddReader);
        let outs = world.deliver_all(1_000);
        assert!(all_outputs(&outs)
            .iter()
            .any(|(id, o)| *id == reader && matches!(o, OwnershipOut::Acquired { .. })));
    }
    assert_eq!(world.owners(key), vec![owner]);
    (world, key)
}

fn acquired(outs: &[StepOut], who: NodeId) -> Option<OTs> {
    all_outputs(outs).into_iter().find_map(|(id, o)| match o {
        OwnershipOut::Acquired { o_ts, .. } if id == who => Some(o_ts),
        _ => None,
    })
}

#[test]
fn create_registers_the_object_at_its_directory_only() {
    let (world, key) = setup(4, &[n(1), n(2)], n(3), &[]);
    for id in [n(1), n(2)] {
        let meta = world.node(id).meta(&key).expect("directory keeps metadata");
        assert_eq!(meta.o_state, OState::Valid);
        assert_eq!(meta.o_replicas, OReplicas::owned_by(n(3)));
        assert_eq!(meta.o_ts.version, 1 << 32, "the first bump of epoch 1");
        assert_eq!(meta.o_ts.node, n(1), "the first directory replica drove it");
    }
    assert_eq!(world.node(n(3)).access(&key), Access::Owner);
    assert_eq!(world.node(n(3)).store().get(&key), Some(&data(1)));
    // Node 4 is neither directory nor replica: it keeps nothing.
    assert!(world.node(n(4)).meta(&key).is_none());
    // A second create fails.
    let mut world = world;
    world.create(n(4), key, 2, data(9));
    let outs = world.deliver_all(1_000);
    assert!(all_outputs(&outs).iter().any(|(_, o)| matches!(
        o,
        OwnershipOut::Failed {
            reason: FailReason::Nacked(NackReason::AlreadyExists),
            ..
        }
    )));
}

#[test]
fn fast_path_takes_three_hops_from_a_non_replica_and_two_from_a_directory_replica() {
    // Owner n3 is no directory replica; n4 is neither: the worst case.
    let (mut world, key) = setup(4, &[n(1), n(2)], n(3), &[]);
    world.acquire(n(4), key, 7, RequestKind::AddOwner);
    let outs = world.deliver_all(1_000);
    let step = outs
        .iter()
        .find(|o| {
            o.outputs
                .iter()
                .any(|(_, out)| matches!(out, OwnershipOut::Acquired { .. }))
        })
        .expect("acquired");
    assert_eq!(step.hops, 3, "REQ, INV, ACK");
    assert_eq!(world.owners(key), vec![n(4)]);
    assert_eq!(
        world.node(n(4)).store().get(&key),
        Some(&data(1)),
        "rows moved"
    );
    // The old owner stays as a reader.
    assert_eq!(world.node(n(3)).access(&key), Access::Reader);

    // A directory replica drives its own request: INV, ACK.
    world.acquire(n(2), key, 8, RequestKind::AddOwner);
    let outs = world.deliver_all(1_000);
    let step = outs
        .iter()
        .find(|o| {
            o.outputs
                .iter()
                .any(|(_, out)| matches!(out, OwnershipOut::Acquired { .. }))
        })
        .expect("acquired");
    assert_eq!(step.hops, 2, "INV, ACK");
    assert_eq!(world.owners(key), vec![n(2)]);
    for id in [n(1), n(2)] {
        let meta = world.node(id).meta(&key).unwrap();
        assert_eq!(meta.o_replicas.owner, Some(n(2)));
        assert_eq!(meta.o_replicas.readers, BTreeSet::from([n(3), n(4)]));
    }
}

#[test]
fn req_at_the_driver_bumps_o_ts_and_invalidates_the_arbiters() {
    let (mut world, key) = setup(4, &[n(1), n(2)], n(3), &[]);
    let before = world.node(n(1)).meta(&key).unwrap().o_ts;
    world.acquire(n(4), key, 1, RequestKind::AddOwner);
    assert_eq!(world.in_flight("REQ"), 1);
    world.deliver_where(|m| m.msg.body.name() == "REQ");
    let meta = world.node(n(1)).meta(&key).unwrap();
    assert_eq!(meta.o_state, OState::Drive);
    assert_eq!(meta.o_ts, before.bumped(n(1)));
    assert_eq!(
        world.node(n(1)).stats().driven,
        2,
        "the create and this one"
    );
    // INV to the other directory replica and to the owner; the driver's own
    // ACK straight to the requester.
    let invs: BTreeSet<NodeId> = world
        .net
        .iter()
        .filter(|m| m.msg.body.name() == "INV")
        .map(|m| m.to)
        .collect();
    assert_eq!(invs, BTreeSet::from([n(2), n(3)]));
    let inv = world
        .net
        .iter()
        .find_map(|m| match &m.msg.body {
            Body::Inv(inv) => Some(inv.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(inv.ackers, BTreeSet::from([n(1), n(2), n(3)]));
    assert_eq!(inv.data_from, Some(n(3)));
    assert_eq!(inv.ack_to, n(4));
    assert!(world
        .find(|m| m.msg.body.name() == "ACK" && m.from == n(1) && m.to == n(4))
        .is_some());
    // A busy driver NACKs another requester.
    world.acquire(n(2), key, 2, RequestKind::AddReader);
    // n2 is a directory replica: it drives itself, and is not busy yet.
    assert_eq!(world.node(n(2)).meta(&key).unwrap().o_state, OState::Drive);
}

#[test]
fn duplicated_req_is_processed_once() {
    let (mut world, key) = setup(4, &[n(1), n(2)], n(3), &[]);
    world.acquire(n(4), key, 1, RequestKind::AddOwner);
    let i = world.find(|m| m.msg.body.name() == "REQ").unwrap();
    let dup = world.net[i].clone();
    world.deliver(i);
    let driven = world.node(n(1)).stats().driven;
    let o_ts = world.node(n(1)).meta(&key).unwrap().o_ts;
    // The same REQ again: the driver re-sends its round, it does not bump.
    world.inject(dup.from, dup.to, dup.msg.clone());
    assert_eq!(world.node(n(1)).stats().driven, driven);
    assert_eq!(world.node(n(1)).meta(&key).unwrap().o_ts, o_ts);
    assert_eq!(world.node(n(1)).stats().dropped(DropReason::Duplicate), 1);
    let outs = world.deliver_all(1_000);
    assert!(acquired(&outs, n(4)).is_some());
    // And once more after it finished: a NACK for the old attempt, ignored.
    world.inject(dup.from, dup.to, dup.msg);
    assert_eq!(world.node(n(1)).stats().driven, driven);
    world.deliver_all(1_000);
    assert_eq!(world.owners(key), vec![n(4)]);
}

/// An INV at arbiter n2 for `key`, from driver n1, asking for n4.
fn inv(key_meta_o_ts: OTs, o_replicas: OReplicas, r_ts: RTs) -> Inv {
    Inv {
        o_ts: key_meta_o_ts,
        r_ts,
        r_type: ArbKind::Request(RequestKind::AddOwner),
        o_replicas,
        driver: key_meta_o_ts.node,
        ackers: BTreeSet::from([n(1), n(2), n(3)]),
        data_from: Some(n(3)),
        ack_to: n(4),
        create: false,
        requester_gone: false,
    }
}

fn msg(key: Key, epoch: u64, body: Body) -> Msg {
    Msg::new(EpochId(epoch), key, body)
}

#[test]
fn inv_at_an_arbiter_with_greater_equal_and_smaller_o_ts() {
    let (mut world, key) = setup(4, &[n(1), n(2)], n(3), &[]);
    let meta = world.node(n(2)).meta(&key).unwrap();
    let r_ts = RTs {
        version: 5,
        node: n(4),
    };
    // Greater: accepted, Invalid, ACK to the requester.
    let greater = inv(meta.o_ts.bumped(n(1)), meta.o_replicas.clone(), r_ts);
    world.inject(n(1), n(2), msg(key, 1, Body::Inv(greater.clone())));
    let after = world.node(n(2)).meta(&key).unwrap();
    assert_eq!(after.o_state, OState::Invalid);
    assert_eq!(after.o_ts, greater.o_ts);
    assert_eq!(world.node(n(2)).stats().invalidated, 2);
    assert_eq!(
        world
            .net
            .iter()
            .filter(|m| m.from == n(2) && m.to == n(4) && m.msg.body.name() == "ACK")
            .count(),
        1
    );
    // Equal (a replay or retransmission): ACKed again, nothing changes.
    world.inject(n(1), n(2), msg(key, 1, Body::Inv(greater.clone())));
    assert_eq!(world.node(n(2)).meta(&key).unwrap(), after);
    assert_eq!(
        world
            .net
            .iter()
            .filter(|m| m.from == n(2) && m.to == n(4) && m.msg.body.name() == "ACK")
            .count(),
        2
    );
    // Equal o_ts with another request: forged.
    let mut other = greater.clone();
    other.r_ts.version = 6;
    world.inject(n(1), n(2), msg(key, 1, Body::Inv(other)));
    assert_eq!(
        world.node(n(2)).stats().dropped(DropReason::ConflictingOTs),
        1
    );
    // Smaller: ignored (a replayer gets a Stale NACK with our metadata).
    let mut smaller = inv(meta.o_ts, meta.o_replicas.clone(), r_ts);
    smaller.r_ts.version = 4;
    smaller.ack_to = n(1);
    world.inject(n(1), n(2), msg(key, 1, Body::Inv(smaller)));
    assert_eq!(world.node(n(2)).meta(&key).unwrap(), after);
    assert_eq!(world.node(n(2)).stats().dropped(DropReason::Stale), 1);
    let stale = world
        .net
        .iter()
        .find_map(|m| match &m.msg.body {
            Body::Nack(nack) if m.from == n(2) && m.to == n(1) => Some(nack.clone()),
            _ => None,
        })
        .expect("a Stale NACK to the replayer");
    assert_eq!(stale.reason, NackReason::Stale);
    assert_eq!(stale.current.unwrap().o_ts, greater.o_ts);
}

#[test]
fn a_driver_that_sees_a_greater_inv_nacks_its_requester() {
    let (mut world, key) = setup(4, &[n(1), n(2)], n(3), &[]);
    // n4 asks n1; n2 drives its own request concurrently.
    world.acquire(n(4), key, 1, RequestKind::AddOwner);
    world.deliver_where(|m| m.msg.body.name() == "REQ");
    world.acquire(n(2), key, 2, RequestKind::AddOwner);
    // Both bumped from the same o_ts: n2's [v, n2] beats n1's [v, n1].
    let o1 = world.node(n(1)).meta(&key).unwrap().o_ts;
    let o2 = world.node(n(2)).meta(&key).unwrap().o_ts;
    assert_eq!(o1.version, o2.version);
    assert!(o2 > o1);
    // n2's INV reaches n1: accepted, and n1 NACKs n4.
    world.deliver_where(|m| m.msg.body.name() == "INV" && m.from == n(2) && m.to == n(1));
    assert_eq!(world.node(n(1)).meta(&key).unwrap().o_ts, o2);
    assert!(world
        .find(|m| m.to == n(4)
            && matches!(&m.msg.body, Body::Nack(x) if x.reason == NackReason::Superseded))
        .is_some());
    // n1's INV reaches n2: smaller, ignored.
    world.deliver_where(|m| m.msg.body.name() == "INV" && m.from == n(1) && m.to == n(2));
    assert_eq!(world.node(n(2)).meta(&key).unwrap().o_ts, o2);
    let outs = world.run_until_quiet(10_000);
    // Exactly one winner of the contention; the loser retried and won later.
    let wins: Vec<_> = all_outputs(&outs)
        .into_iter()
        .filter(|(_, o)| matches!(o, OwnershipOut::Acquired { .. }))
        .collect();
    assert_eq!(wins.len(), 2, "{wins:?}");
    assert!(world.node(n(4)).stats().retries >= 1);
    assert_eq!(world.owners(key).len(), 1);
}

#[test]
fn ack_collection_needs_every_acker_and_checks_them() {
    // n5 is a member but no acker of this request.
    let (mut world, key) = setup(5, &[n(1), n(2)], n(3), &[]);
    world.acquire(n(4), key, 1, RequestKind::AddOwner);
    world.deliver_where(|m| m.msg.body.name() == "REQ");
    // The driver's ACK: not done yet.
    let out = world.deliver_where(|m| m.msg.body.name() == "ACK" && m.from == n(1));
    assert!(out.outputs.is_empty());
    assert!(world.node(n(4)).is_requesting(&key));
    let inv = world
        .net
        .iter()
        .find_map(|m| match &m.msg.body {
            Body::Inv(inv) => Some(inv.clone()),
            _ => None,
        })
        .unwrap();
    let fake = roost_ownership::Ack {
        o_ts: inv.o_ts,
        r_ts: inv.r_ts,
        r_type: inv.r_type,
        o_replicas: inv.o_replicas.clone(),
        ackers: inv.ackers.clone(),
        data_from: inv.data_from,
        data: None,
        applied: false,
    };
    // From a node that was not asked.
    world.inject(n(5), n(4), msg(key, 1, Body::Ack(fake.clone())));
    assert_eq!(
        world.node(n(4)).stats().dropped(DropReason::UnexpectedAck),
        1
    );
    // Disagreeing on o_ts.
    let mut conflicting = fake.clone();
    conflicting.o_ts = OTs {
        version: inv.o_ts.version + 7,
        node: n(2),
    };
    world.inject(n(2), n(4), msg(key, 1, Body::Ack(conflicting)));
    assert_eq!(
        world.node(n(4)).stats().dropped(DropReason::ConflictingOTs),
        1
    );
    // Rows from a node that is not the data source.
    let mut wrong_source = fake.clone();
    wrong_source.data = Some(data(1));
    world.inject(n(2), n(4), msg(key, 1, Body::Ack(wrong_source)));
    assert_eq!(
        world.node(n(4)).stats().dropped(DropReason::UnexpectedData),
        1
    );
    // The data source's ACK without rows.
    world.inject(n(3), n(4), msg(key, 1, Body::Ack(fake.clone())));
    assert_eq!(world.node(n(4)).stats().dropped(DropReason::MissingData), 1);
    // The driver's ACK again: a duplicate.
    world.inject(n(1), n(4), msg(key, 1, Body::Ack(fake)));
    assert_eq!(world.node(n(4)).stats().dropped(DropReason::Duplicate), 1);
    assert!(world.node(n(4)).is_requesting(&key));
    assert!(world.owners(key) == vec![n(3)] || world.owners(key).is_empty());
    // The genuine ones complete it.
    let outs = world.deliver_all(1_000);
    assert!(acquired(&outs, n(4)).is_some());
    assert_eq!(world.owners(key), vec![n(4)]);
}

#[test]
fn owner_ack_carries_the_rows_and_the_owner_freezes() {
    let (mut world, key) = setup(4, &[n(1), n(2)], n(3), &[]);
    world.node_mut(n(3)).store_mut().install(&key, data(41));
    world.acquire(n(4), key, 1, RequestKind::AddOwner);
    world.deliver_where(|m| m.msg.body.name() == "REQ");
    world.deliver_where(|m| m.msg.body.name() == "INV" && m.to == n(3));
    // The owner is invalid now: it must not write.
    assert_eq!(world.node(n(3)).access(&key), Access::Invalid);
    let ack = world
        .net
        .iter()
        .find_map(|m| match &m.msg.body {
            Body::Ack(a) if m.from == n(3) => Some(a.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(ack.data, Some(data(41)));
    let outs = world.deliver_all(1_000);
    assert!(acquired(&outs, n(4)).is_some());
    assert_eq!(world.node(n(4)).store().get(&key), Some(&data(41)));
    assert_eq!(
        world.node(n(4)).store().access.get(&key),
        Some(&Access::Owner)
    );
    assert_eq!(
        world.node(n(3)).store().access.get(&key),
        Some(&Access::Reader)
    );
}

#[test]
fn change_owner_by_a_reader_ships_no_rows() {
    let (mut world, key) = setup(4, &[n(1), n(2)], n(3), &[n(4)]);
    world.acquire(n(4), key, 1, RequestKind::ChangeOwner);
    world.deliver_where(|m| m.msg.body.name() == "REQ");
    let inv = world
        .net
        .iter()
        .find_map(|m| match &m.msg.body {
            Body::Inv(i) => Some(i.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(inv.data_from, None);
    let outs = world.deliver_all(1_000);
    assert!(acquired(&outs, n(4)).is_some());
    assert_eq!(world.owners(key), vec![n(4)]);
    // Remove-reader: n3 (demoted owner) gives up its copy.
    world.acquire(n(3), key, 2, RequestKind::RemoveReader);
    let outs = world.deliver_all(1_000);
    assert!(acquired(&outs, n(3)).is_some());
    assert_eq!(world.node(n(3)).store().get(&key), None);
    assert!(world.node(n(3)).meta(&key).is_none(), "no metadata kept");
    assert!(world
        .node(n(1))
        .meta(&key)
        .unwrap()
        .o_replicas
        .readers
        .is_empty());
    // The owner cannot remove itself as a reader.
    let out = world.acquire(n(4), key, 3, RequestKind::RemoveReader);
    assert!(matches!(
        out.outputs[0].1,
        OwnershipOut::Failed {
            reason: FailReason::IsOwner,
            ..
        }
    ));
    // Already satisfied: no message.
    let out = world.acquire(n(4), key, 4, RequestKind::AddOwner);
    assert!(matches!(out.outputs[0].1, OwnershipOut::Acquired { .. }));
    assert!(world.net.is_empty());
}

#[test]
fn val_applies_at_the_arbiters_and_duplicates_are_harmless() {
    let (mut world, key) = setup(4, &[n(1), n(2)], n(3), &[]);
    world.acquire(n(4), key, 1, RequestKind::AddOwner);
    // Deliver everything but the VALs.
    while let Some(i) = world.find(|m| m.msg.body.name() != "VAL") {
        world.deliver(i);
    }
    assert_eq!(world.owners(key), vec![n(4)], "the requester applied first");
    assert_eq!(
        world.node(n(2)).meta(&key).unwrap().o_state,
        OState::Invalid
    );
    assert_eq!(world.in_flight("VAL"), 3);
    let val = world.net.iter().find(|m| m.to == n(2)).unwrap().clone();
    world.deliver_all(1_000);
    let meta = world.node(n(2)).meta(&key).unwrap();
    assert_eq!(meta.o_state, OState::Valid);
    assert_eq!(meta.o_replicas.owner, Some(n(4)));
    assert_eq!(meta.o_replicas.readers, BTreeSet::from([n(3)]));
    // Again: a duplicate.
    world.inject(val.from, val.to, val.msg.clone());
    assert_eq!(world.node(n(2)).stats().dropped(DropReason::Duplicate), 1);
    // A VAL for an arbitration n2 never accepted: impossible.
    let Body::Val(mut v) = val.msg.body.clone() else {
        unreachable!()
    };
    v.o_ts = v.o_ts.bumped(n(1));
    world.inject(n(4), n(2), msg(key, 1, Body::Val(v)));
    assert_eq!(
        world.node(n(2)).stats().dropped(DropReason::ImpossibleOTs),
        1
    );
    assert_eq!(world.node(n(2)).meta(&key).unwrap(), meta);
}

#[test]
fn nack_then_jittered_backoff_then_retry() {
    let mut w = World::new(5, &test_config(2), OwnershipBugs::default());
    let k = key_with_directory(&w.nodes, 2, &[n(1), n(2)]);
    w.create(n(3), k, 1, data(1));
    w.deliver_all(1_000);
    // n1 drives n4's request; n5's REQ finds it busy.
    w.acquire(n(4), k, 1, RequestKind::AddOwner);
    w.deliver_where(|m| m.msg.body.name() == "REQ" && m.from == n(4));
    w.acquire(n(5), k, 2, RequestKind::AddOwner);
    let out = w.deliver_where(|m| m.msg.body.name() == "REQ" && m.from == n(5));
    assert!(out.outputs.is_empty());
    w.deliver_where(|m| {
        m.to == n(5) && matches!(&m.msg.body, Body::Nack(x) if x.reason == NackReason::Busy)
    });
    // In backoff: a timer, no message.
    let wait = w.procs[&n(5)].timer.expect("backoff timer") - w.procs[&n(5)].clock;
    let base = test_config(2).backoff_base_ms;
    assert!((base..2 * base).contains(&wait), "{wait}");
    assert_eq!(w.find(|m| m.from == n(5)), None);
    // n4's request finishes, then n5's timer fires: it retries and wins.
    w.deliver_all(1_000);
    let outs = w.run_until_quiet(10_000);
    assert!(acquired(&outs, n(5)).is_some());
    assert_eq!(w.node(n(5)).stats().retries, 1);
    assert_eq!(w.owners(k), vec![n(5)]);
}

#[test]
fn backoff_jitter_is_seeded_per_node() {
    // Two runs with the same seed wait the same; another node waits
    // differently (the jitter comes from a generator seeded by the node id).
    let waits = |requester: u32| {
        let mut w = World::new(5, &test_config(2), OwnershipBugs::default());
        let k = key_with_directory(&w.nodes, 2, &[n(1), n(2)]);
        w.create(n(3), k, 1, data(1));
        w.deliver_all(1_000);
        w.node_mut(n(3)).store_mut().set_pending_commit(k, true);
        w.acquire(n(requester), k, 1, RequestKind::AddOwner);
        let mut waits = Vec::new();
        for _ in 0..5 {
            w.deliver_all(1_000);
            let Some(t) = w.procs[&n(requester)].timer else {
                break;
            };
            waits.push(t - w.procs[&n(requester)].clock);
            w.tick(n(requester));
        }
        waits
    };
    assert_eq!(waits(4), waits(4));
    assert_ne!(waits(4), waits(5));
    let w4 = waits(4);
    assert!(w4.windows(2).all(|p| p[1] + 2 >= p[0]), "grows: {w4:?}");
}

#[test]
fn attempts_are_bounded() {
    let mut config = test_config(2);
    config.max_attempts = 2;
    let mut w = World::new(5, &config, OwnershipBugs::default());
    let k = key_with_directory(&w.nodes, 2, &[n(1), n(2)]);
    w.create(n(3), k, 1, data(1));
    w.deliver_all(1_000);
    // The owner has a pending commit that never clears.
    w.node_mut(n(3)).store_mut().set_pending_commit(k, true);
    w.acquire(n(4), k, 1, RequestKind::AddOwner);
    let outs = w.run_until_quiet(10_000);
    let failed = all_outputs(&outs).into_iter().find_map(|(id, o)| match o {
        OwnershipOut::Failed { reason, .. } if id == n(4) => Some(reason),
        _ => None,
    });
    assert_eq!(failed, Some(FailReason::Nacked(NackReason::PendingCommit)));
    assert_eq!(w.owners(k), vec![n(3)]);
    for id in [n(1), n(2), n(3)] {
        assert_ne!(w.node(id).meta(&k).unwrap().o_state, OState::Invalid);
        assert_eq!(w.node(id).blocked(), 0);
    }
}

#[test]
fn owner_with_a_pending_commit_nacks_and_the_driver_releases_the_arbiters() {
    let (mut world, key) = setup(4, &[n(1), n(2)], n(3), &[]);
    world
        .node_mut(n(3))
        .store_mut()
        .set_pending_commit(key, true);
    let o_ts = world.node(n(1)).meta(&key).unwrap().o_ts;
    world.acquire(n(4), key, 1, RequestKind::AddOwner);
    world.deliver_where(|m| m.msg.body.name() == "REQ");
    world.deliver_where(|m| m.msg.body.name() == "INV" && m.to == n(3));
    // NACKed to the requester and to the driver, no ACK.
    let nacked: BTreeSet<NodeId> = world
        .net
        .iter()
        .filter(|m| {
            m.from == n(3)
                && matches!(&m.msg.body, Body::Nack(x) if x.reason == NackReason::PendingCommit)
        })
        .map(|m| m.to)
        .collect();
    assert_eq!(nacked, BTreeSet::from([n(1), n(4)]));
    assert!(world
        .find(|m| m.from == n(3) && m.msg.body.name() == "ACK")
        .is_none());
    // Deliver everything (no timers): the driver arbitrates a NOOP.
    world.deliver_all(1_000);
    assert!(world.node(n(1)).stats().noops >= 1);
    for id in [n(1), n(2), n(3)] {
        let meta = world.node(id).meta(&key).unwrap();
        assert_eq!(meta.o_state, OState::Valid, "{id} released");
        assert!(meta.o_ts > o_ts);
        assert_eq!(
            meta.o_replicas,
            OReplicas::owned_by(n(3)),
            "NOOP changes nothing"
        );
    }
    assert_eq!(world.owners(key), vec![n(3)]);
    assert!(world.node(n(4)).is_requesting(&key), "backing off");
    // The commit finishes; the retry wins.
    world
        .node_mut(n(3))
        .store_mut()
        .set_pending_commit(key, false);
    let outs = world.run_until_quiet(10_000);
    assert!(acquired(&outs, n(4)).is_some());
    assert_eq!(world.owners(key), vec![n(4)]);
}

#[test]
fn a_driver_that_owns_the_object_refuses_at_once_when_a_commit_is_pending() {
    let (mut world, key) = setup(3, &[n(1), n(2)], n(1), &[]);
    world
        .node_mut(n(1))
        .store_mut()
        .set_pending_commit(key, true);
    world.acquire(n(3), key, 1, RequestKind::AddOwner);
    world.deliver_where(|m| m.msg.body.name() == "REQ");
    assert_eq!(world.node(n(1)).meta(&key).unwrap().o_state, OState::Valid);
    assert!(world
        .find(|m| matches!(&m.msg.body, Body::Nack(x) if x.reason == NackReason::PendingCommit && x.o_ts.is_none()))
        .is_some());
}

#[test]
fn add_reader_gets_the_rows_and_keeps_the_owner() {
    let (mut world, key) = setup(4, &[n(1), n(2)], n(3), &[]);
    world.acquire(n(4), key, 1, RequestKind::AddReader);
    let outs = world.deliver_all(1_000);
    assert!(acquired(&outs, n(4)).is_some());
    assert_eq!(world.node(n(4)).access(&key), Access::Reader);
    assert_eq!(world.node(n(4)).store().get(&key), Some(&data(1)));
    assert_eq!(world.owners(key), vec![n(3)]);
    let meta = world.node(n(3)).meta(&key).unwrap();
    assert_eq!(meta.o_replicas.readers, BTreeSet::from([n(4)]));
}

#[test]
fn many_requests_in_flight_for_different_objects() {
    let mut w = World::new(4, &test_config(2), OwnershipBugs::default());
    let keys: Vec<Key> = (1..=20).collect();
    for &k in &keys {
        w.create(n(1 + (k % 4) as u32), k, k, data(k));
    }
    w.deliver_all(10_000);
    for &k in &keys {
        w.acquire(n(4), k, 100 + k, RequestKind::AddOwner);
    }
    let outs = w.run_until_quiet(100_000);
    let got: BTreeSet<u64> = all_outputs(&outs)
        .into_iter()
        .filter_map(|(id, o)| match o {
            OwnershipOut::Acquired { req, .. } if id == n(4) => Some(req.0),
            _ => None,
        })
        .collect();
    let want: BTreeSet<u64> = keys
        .iter()
        .filter(|&&k| 1 + (k % 4) as u32 != 4)
        .map(|k| 100 + k)
        .collect();
    assert!(want.is_subset(&got), "{want:?} vs {got:?}");
    for &k in &keys {
        assert_eq!(w.owners(k), vec![n(4)]);
        assert_eq!(w.node(n(4)).store().get(&k), Some(&data(k)));
    }
}

/// Restarts `ids` (fresh state, empty store) in one view change that every
/// other node installs, and loses every SYNC that would teach them: they
/// act before anyone taught them.
fn restart_untaught(world: &mut World, ids: &[NodeId]) {
    let config = test_config(2);
    for &id in ids {
        world.crash(id);
        world.restart(id, &config);
    }
    for id in world.live() {
        if world.needs_view(id) {
            world.install(id);
        }
    }
    let untaught = |m: &InFlight| ids.contains(&m.to) && m.msg.body.name() == "SYNC";
    while world.find(untaught).is_some() {
        world.lose_where(untaught);
    }
}

fn failed_with(outs: &[StepOut], who: NodeId, reason: NackReason) -> bool {
    all_outputs(outs).iter().any(|(id, o)| {
        *id == who
            && matches!(o, OwnershipOut::Failed { reason: FailReason::Nacked(r), .. } if *r == reason)
    })
}

#[test]
fn a_directory_replica_that_knows_the_object_refuses_a_restarted_ones_create() {
    let (mut world, key) = setup(4, &[n(1), n(2)], n(3), &[]);
    let known = world.node(n(1)).meta(&key).unwrap();
    restart_untaught(&mut world, &[n(2)]);
    // n2 re-creates what it forgot; its fresh o_ts is greater than n1's.
    world.create(n(2), key, 7, data(9));
    let outs = world.deliver_all(1_000);
    assert!(
        failed_with(&outs, n(2), NackReason::AlreadyExists),
        "{outs:?}"
    );
    assert!(world.node(n(1)).stats().refused_recreates >= 1);
    // Nothing changed at the replica that knew it, nor at the owner.
    assert_eq!(
        world.node(n(1)).meta(&key).unwrap().o_replicas,
        known.o_replicas
    );
    assert_eq!(world.owners(key), vec![n(3)]);
    assert_eq!(world.node(n(3)).store().get(&key), Some(&data(1)));
    // The refused create's fresh entry is forgotten, not left blocked.
    assert!(world
        .node(n(2))
        .meta(&key)
        .is_none_or(|m| m.o_state == OState::Valid));
    // The object stays usable, with its rows.
    world.acquire(n(4), key, 8, RequestKind::ChangeOwner);
    let outs = world.run_until_quiet(10_000);
    assert!(acquired(&outs, n(4)).is_some(), "{outs:?}");
    assert_eq!(world.node(n(4)).store().get(&key), Some(&data(1)));
    assert_eq!(world.owners(key), vec![n(4)]);
}

#[test]
fn a_witness_that_holds_the_object_refuses_a_create_by_an_empty_directory() {
    // The owner n3 is no directory replica; both replicas restart and
    // nobody teaches them: only the owner knows the object exists.
    let (mut world, key) = setup(4, &[n(1), n(2)], n(3), &[]);
    restart_untaught(&mut world, &[n(1), n(2)]);
    world.create(n(1), key, 7, data(9));
    let outs = world.deliver_all(1_000);
    assert!(
        failed_with(&outs, n(1), NackReason::AlreadyExists),
        "{outs:?}"
    );
    assert!(
        world.node(n(3)).stats().refused_recreates >= 1,
        "the owner witnessed it"
    );
    assert_eq!(world.owners(key), vec![n(3)]);
    assert_eq!(world.node(n(3)).store().get(&key), Some(&data(1)));
    let forgotten: u64 = [n(1), n(2)]
        .iter()
        .map(|&id| world.node(id).stats().forgotten_creates)
        .sum();
    assert!(forgotten >= 1, "the create's fresh entries are forgotten");
    // Witnesses that know nothing ACK and keep nothing: a create nobody
    // refuses still succeeds.
    let fresh = key_with_directory(&world.nodes, 2, &[n(2), n(1)]);
    assert_ne!(fresh, key);
    world.create(n(4), fresh, 9, data(4));
    let outs = world.deliver_all(1_000);
    assert!(acquired(&outs, n(4)).is_some(), "{outs:?}");
    assert!(world.node(n(3)).meta(&fresh).is_none());
}

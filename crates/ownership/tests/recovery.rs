//! Recovery: arb-replay after view changes (requester, owner or driver
//! dead), RESP to a live requester, requests finished without a dead one,
//! dead nodes leaving `o_replicas`, requests waiting while recovery runs,
//! and replays of stuck arbitrations (lost VALs) in the same epoch.

mod common;

use std::collections::BTreeSet;

use common::*;
use roost_cluster::EpochId;
use roost_cluster::NodeId;
use roost_ownership::{
    Access, Body, FailReason, NackReason, OState, OwnershipBugs, OwnershipOut, RequestKind, Resp,
};

fn setup(count: u32, owner: NodeId, readers: &[NodeId]) -> (World, Key) {
    let mut world = World::new(count, &test_config(2), OwnershipBugs::default());
    let key = key_with_directory(&world.nodes, 2, &[n(1), n(2)]);
    world.create(owner, key, 1, data(1));
    world.deliver_all(1_000);
    for &reader in readers {
        world.acquire(
            reader,
            key,
            50 + u64::from(reader.0),
            RequestKind::AddReader,
        );
        world.deliver_all(1_000);
    }
    assert_eq!(world.owners(key), vec![owner]);
    (world, key)
}

fn outputs_of(outs: &[StepOut], who: NodeId) -> Vec<OwnershipOut<Key>> {
    all_outputs(outs)
        .into_iter()
        .filter(|(id, _)| *id == who)
        .map(|(_, o)| o)
        .collect()
}

/// No live node is left holding an arbitration or a request.
fn settled(world: &World, key: Key) {
    for id in world.live() {
        let node = world.node(id);
        assert_eq!(
            node.blocked(),
            0,
            "{id} still blocked: {:?}",
            node.meta(&key)
        );
        assert_eq!(node.pending_requests(), 0, "{id} still requesting");
        if let Some(meta) = node.meta(&key) {
            assert_eq!(meta.o_state, OState::Valid, "{id}");
        }
        assert!(!node.recovering(), "{id} still recovering");
    }
    // Valid directory replicas agree.
    let metas: BTreeSet<_> = [n(1), n(2)]
        .iter()
        .filter(|id| world.procs[id].alive)
        .map(|id| {
            let m = world.node(*id).meta(&key).unwrap();
            (m.o_ts, m.o_replicas)
        })
        .collect();
    assert_eq!(metas.len(), 1, "{metas:?}");
}

#[test]
fn a_dead_requesters_request_is_finished_without_it() {
    let (mut world, key) = setup(4, n(3), &[]);
    world.acquire(n(4), key, 1, RequestKind::AddOwner);
    world.deliver_where(|m| m.msg.body.name() == "REQ");
    world.deliver_where(|m| m.msg.body.name() == "INV" && m.to == n(2));
    world.deliver_where(|m| m.msg.body.name() == "INV" && m.to == n(3));
    assert_eq!(world.node(n(3)).access(&key), Access::Invalid);
    world.crash_and_install(n(4));
    let outs = world.deliver_all(1_000);
    settled(&world, key);
    // As in the spec: the request is applied, then the dead requester
    // stripped. The object is ownerless; the demoted owner holds the data.
    assert!(world.owners(key).is_empty());
    assert_eq!(world.node(n(3)).access(&key), Access::Reader);
    assert!(
        world.node(n(1)).stats().finished_without_requester
            + world.node(n(2)).stats().finished_without_requester
            >= 1
    );
    assert!(outputs_of(&outs, n(3)).is_empty());
    let meta = world.node(n(1)).meta(&key).unwrap();
    assert_eq!(meta.o_replicas.owner, None);
    assert_eq!(meta.o_replicas.readers, BTreeSet::from([n(3)]));
    // A later request gets the rows from that reader.
    world.acquire(n(2), key, 2, RequestKind::AddOwner);
    let outs = world.run_until_quiet(10_000);
    assert!(outputs_of(&outs, n(2))
        .iter()
        .any(|o| matches!(o, OwnershipOut::Acquired { .. })));
    assert_eq!(world.owners(key), vec![n(2)]);
    assert_eq!(world.node(n(2)).store().get(&key), Some(&data(1)));
}

#[test]
fn a_live_requester_gets_resp_when_its_driver_dies() {
    let (mut world, key) = setup(4, n(3), &[]);
    world.acquire(n(4), key, 1, RequestKind::AddOwner);
    world.deliver_where(|m| m.msg.body.name() == "REQ");
    // The driver n1 invalidated n2 and the owner n3, then died; the ACKs to
    // the requester of the old epoch are lost with the view change.
    world.deliver_where(|m| m.msg.body.name() == "INV" && m.to == n(2));
    world.deliver_where(|m| m.msg.body.name() == "INV" && m.to == n(3));
    world.crash(n(1));
    world.net.retain(|m| m.msg.body.name() != "ACK");
    for id in world.live() {
        world.install(id);
    }
    let outs = world.run_until_quiet(10_000);
    let mine = outputs_of(&outs, n(4));
    assert!(
        mine.iter()
            .any(|o| matches!(o, OwnershipOut::Acquired { .. })),
        "{mine:?}"
    );
    assert_eq!(world.owners(key), vec![n(4)]);
    assert_eq!(world.node(n(4)).store().get(&key), Some(&data(1)));
    assert!(world.node(n(2)).stats().replays + world.node(n(3)).stats().replays >= 1);
    settled(&world, key);
    let meta = world.node(n(2)).meta(&key).unwrap();
    assert_eq!(meta.o_replicas.owner, Some(n(4)));
    assert_eq!(meta.o_replicas.readers, BTreeSet::from([n(3)]));
}

#[test]
fn a_requester_whose_driver_died_before_invalidating_tries_another_driver() {
    let (mut world, key) = setup(4, n(3), &[]);
    world.acquire(n(4), key, 1, RequestKind::AddOwner);
    // The REQ never reached n1.
    world.crash_and_install(n(1));
    let outs = world.run_until_quiet(10_000);
    assert!(outputs_of(&outs, n(4))
        .iter()
        .any(|o| matches!(o, OwnershipOut::Acquired { .. })));
    assert_eq!(world.owners(key), vec![n(4)]);
    assert!(world.node(n(2)).stats().driven >= 1);
    settled(&world, key);
}

#[test]
fn a_dead_owner_leaves_o_replicas_and_a_reader_ships_the_rows() {
    let (mut world, key) = setup(5, n(3), &[n(5)]);
    world.crash_and_install(n(3));
    world.deliver_all(1_000);
    for id in [n(1), n(2)] {
        let meta = world.node(id).meta(&key).unwrap();
        assert_eq!(meta.o_replicas.owner, None);
        assert_eq!(meta.o_replicas.readers, BTreeSet::from([n(5)]));
    }
    world.acquire(n(4), key, 1, RequestKind::AddOwner);
    let inv_source = {
        world.deliver_where(|m| m.msg.body.name() == "REQ");
        world
            .net
            .iter()
            .find_map(|m| match &m.msg.body {
                Body::Inv(i) => Some(i.data_from),
                _ => None,
            })
            .unwrap()
    };
    assert_eq!(inv_source, Some(n(5)), "a reader is the data source");
    let outs = world.run_until_quiet(10_000);
    assert!(outputs_of(&outs, n(4))
        .iter()
        .any(|o| matches!(o, OwnershipOut::Acquired { .. })));
    assert_eq!(world.owners(key), vec![n(4)]);
    assert_eq!(world.node(n(4)).store().get(&key), Some(&data(1)));
    // The reader, no arbiter, kept its copy and its role.
    assert_eq!(world.node(n(5)).access(&key), Access::Reader);
    settled(&world, key);
}

#[test]
fn data_lost_with_its_only_holder_fails_the_request() {
    let (mut world, key) = setup(4, n(3), &[]);
    world.acquire(n(4), key, 1, RequestKind::AddOwner);
    world.deliver_where(|m| m.msg.body.name() == "REQ");
    world.deliver_where(|m| m.msg.body.name() == "INV" && m.to == n(2));
    world.crash_and_install(n(3));
    let outs = world.run_until_quiet(10_000);
    let mine = outputs_of(&outs, n(4));
    assert!(
        mine.iter().any(|o| matches!(
            o,
            OwnershipOut::Failed {
                reason: FailReason::Nacked(NackReason::DataLost),
                ..
            }
        )),
        "{mine:?}"
    );
    assert!(world.owners(key).is_empty());
    settled(&world, key);
}

#[test]
fn a_dead_reader_leaves_o_replicas() {
    let (mut world, key) = setup(5, n(3), &[n(4), n(5)]);
    world.crash_and_install(n(4));
    world.deliver_all(1_000);
    for id in [n(1), n(2), n(3)] {
        let meta = world.node(id).meta(&key).unwrap();
        assert_eq!(meta.o_replicas.readers, BTreeSet::from([n(5)]), "at {id}");
    }
}

#[test]
fn requests_wait_while_recovery_runs() {
    let (mut world, key) = setup(5, n(3), &[]);
    world.acquire(n(4), key, 1, RequestKind::AddOwner);
    world.deliver_where(|m| m.msg.body.name() == "REQ");
    world.deliver_where(|m| m.msg.body.name() == "INV" && m.to == n(2));
    world.crash(n(4));
    for id in world.live() {
        world.install(id);
    }
    // n1 and n2 replay; n1 is recovering until the replay finishes.
    assert!(world.node(n(1)).recovering());
    let other = key + 1_000_000;
    let other = (other..)
        .find(|k| {
            let dir = roost_ownership::directory(k, &world.nodes, 2);
            dir[0] == n(1) && !dir.contains(&n(5))
        })
        .unwrap();
    world.acquire(n(5), other, 9, RequestKind::AddOwner);
    world.deliver_where(|m| m.msg.body.name() == "REQ" && m.from == n(5));
    assert!(world
        .find(|m| m.to == n(5)
            && matches!(&m.msg.body, Body::Nack(x) if x.reason == NackReason::Recovering
                || x.reason == NackReason::UnknownObject))
        .is_some());
    world.deliver_all(1_000);
    assert!(!world.node(n(1)).recovering());
    // The store's reliable-commit recovery holds requests too.
    world.node_mut(n(1)).store_mut().recovering = true;
    assert!(world.node(n(1)).recovering());
    world.acquire(n(5), key, 10, RequestKind::AddOwner);
    world.deliver_where(|m| m.msg.body.name() == "REQ" && m.from == n(5));
    assert!(world
        .find(|m| m.to == n(5)
            && matches!(&m.msg.body, Body::Nack(x) if x.reason == NackReason::Recovering))
        .is_some());
    world.node_mut(n(1)).store_mut().recovering = false;
    let outs = world.run_until_quiet(10_000);
    assert!(outputs_of(&outs, n(5))
        .iter()
        .any(|o| matches!(o, OwnershipOut::Acquired { .. })));
    assert_eq!(world.owners(key), vec![n(5)]);
}

#[test]
fn a_lost_val_is_recovered_by_the_stuck_timer() {
    let (mut world, key) = setup(4, n(3), &[]);
    world.acquire(n(4), key, 1, RequestKind::AddOwner);
    while let Some(i) = world.find(|m| m.msg.body.name() != "VAL") {
        world.deliver(i);
    }
    assert_eq!(world.owners(key), vec![n(4)]);
    world.lose_where(|m| m.msg.body.name() == "VAL" && m.to == n(2));
    world.deliver_all(1_000);
    assert_eq!(
        world.node(n(2)).meta(&key).unwrap().o_state,
        OState::Invalid
    );
    // n2's stuck timer: it replays, the requester answers the RESP with VAL.
    let outs = world.run_until_quiet(10_000);
    assert!(world.node(n(2)).stats().replays >= 1);
    assert!(all_outputs(&outs).is_empty(), "no second Acquired");
    settled(&world, key);
    assert_eq!(world.owners(key), vec![n(4)]);
}

#[test]
fn a_demoted_owner_that_lost_its_val_learns_from_the_directory() {
    let (mut world, key) = setup(5, n(3), &[]);
    world.acquire(n(4), key, 1, RequestKind::AddOwner);
    while let Some(i) = world.find(|m| m.msg.body.name() != "VAL") {
        world.deliver(i);
    }
    world.lose_where(|m| m.msg.body.name() == "VAL" && m.to == n(3));
    world.deliver_all(1_000);
    assert_eq!(
        world.node(n(3)).access(&key),
        Access::Invalid,
        "frozen, not owner"
    );
    // Ownership moves on without n3 (it is no arbiter of the next request).
    world.acquire(n(5), key, 2, RequestKind::AddOwner);
    world.deliver_all(1_000);
    assert_eq!(world.owners(key), vec![n(5)]);
    // n3's stuck timer: it replays, the directory answers Stale with its
    // metadata, and n3 adopts it (a reader now).
    let outs = world.run_until_quiet(10_000);
    assert!(all_outputs(&outs).is_empty());
    assert_eq!(world.node(n(3)).access(&key), Access::Reader);
    assert_eq!(world.node(n(3)).blocked(), 0);
    assert_eq!(
        world.node(n(3)).meta(&key).unwrap().o_ts,
        world.node(n(1)).meta(&key).unwrap().o_ts
    );
    settled(&world, key);
}

#[test]
fn a_lost_req_is_retransmitted() {
    let (mut world, key) = setup(4, n(3), &[]);
    world.acquire(n(4), key, 1, RequestKind::AddOwner);
    world.lose_where(|m| m.msg.body.name() == "REQ");
    let outs = world.run_until_quiet(10_000);
    assert!(outputs_of(&outs, n(4))
        .iter()
        .any(|o| matches!(o, OwnershipOut::Acquired { .. })));
    assert_eq!(world.node(n(4)).stats().retransmits, 1);
    assert_eq!(
        world.node(n(1)).stats().driven,
        2,
        "the create and this one"
    );
}

#[test]
fn a_node_removed_from_the_view_abandons_its_requests() {
    let (mut world, key) = setup(4, n(3), &[]);
    world.acquire(n(4), key, 1, RequestKind::AddOwner);
    // n4 is removed (say its lease lapsed) but still runs and installs the
    // view that excludes it.
    world.latest.epoch = roost_cluster::EpochId(world.latest.epoch.0 + 1);
    world.latest.members.remove(&n(4));
    let out = world.install(n(4));
    assert!(matches!(
        out.outputs.as_slice(),
        [(
            _,
            OwnershipOut::Failed {
                reason: FailReason::NotServing,
                ..
            }
        )]
    ));
    assert_eq!(world.node(n(4)).pending_requests(), 0);
    // It takes part in nothing any more.
    let out = world.acquire(n(4), key, 2, RequestKind::AddOwner);
    assert!(matches!(
        out.outputs.as_slice(),
        [(
            _,
            OwnershipOut::Failed {
                reason: FailReason::NotServing,
                ..
            }
        )]
    ));
}

#[test]
fn requests_time_out() {
    let mut config = test_config(2);
    config.request_timeout_ms = Some(100);
    config.retransmit_ms = None;
    let mut world = World::new(4, &config, OwnershipBugs::default());
    let key = key_with_directory(&world.nodes, 2, &[n(1), n(2)]);
    world.create(n(3), key, 1, data(1));
    world.deliver_all(1_000);
    world.acquire(n(4), key, 1, RequestKind::AddOwner);
    world.lose_where(|m| m.msg.body.name() == "REQ");
    let outs = world.run_until_quiet(1_000);
    assert!(outputs_of(&outs, n(4)).iter().any(|o| matches!(
        o,
        OwnershipOut::Failed {
            reason: FailReason::TimedOut,
            ..
        }
    )));
    assert_eq!(world.owners(key), vec![n(3)]);
}

#[test]
fn a_remove_reader_that_races_with_a_late_win_keeps_the_owners_rows() {
    let mut config = test_config(2);
    config.request_timeout_ms = None;
    config.retransmit_ms = None;
    config.replay_after_ms = Some(100);
    let mut world = World::new(4, &config, OwnershipBugs::default());
    let key = key_with_directory(&world.nodes, 2, &[n(1), n(2)]);
    world.create(n(3), key, 1, data(1));
    world.deliver_all(1_000);
    world.acquire(n(4), key, 1, RequestKind::AddReader);
    world.deliver_all(1_000);
    // n4 (a reader) asks to own it; the win's ACKs are lost.
    world.acquire(n(4), key, 2, RequestKind::ChangeOwner);
    let Some(Body::Req(req)) = world
        .net
        .iter()
        .find(|m| m.msg.body.name() == "REQ")
        .map(|m| m.msg.body.clone())
    else {
        unreachable!()
    };
    while let Some(i) = world.find(|m| m.msg.body.name() != "ACK" || m.to != n(4)) {
        world.deliver(i);
    }
    world.net.retain(|m| m.msg.body.name() != "ACK");
    // The request is answered (a permanent NACK, as if the driver said so)
    // while its attempt can still win; n4 then asks to stop being a reader.
    let nack = roost_ownership::Nack {
        r_ts: req.r_ts,
        o_ts: None,
        reason: NackReason::DataLost,
        current: None,
    };
    let out = world.inject(
        n(1),
        n(4),
        Msg::new(roost_cluster::EpochId(1), key, Body::Nack(nack)),
    );
    assert!(matches!(
        out.outputs.as_slice(),
        [(_, OwnershipOut::Failed { .. })]
    ));
    world.acquire(n(4), key, 3, RequestKind::RemoveReader);
    // The stuck driver replays, the old attempt wins late (n4 owns the
    // object), and the remove-reader, retried, is then driven for the owner.
    let outs = world.run_until_quiet(10_000);
    let mine = outputs_of(&outs, n(4));
    assert!(
        matches!(
            mine.as_slice(),
            [
                OwnershipOut::LateWin { .. },
                OwnershipOut::Failed {
                    reason: FailReason::IsOwner,
                    ..
                }
            ]
        ),
        "{mine:?}"
    );
    assert_eq!(world.owners(key), vec![n(4)]);
    assert_eq!(
        world.node(n(4)).store().get(&key),
        Some(&data(1)),
        "rows kept"
    );
    settled(&world, key);
}

#[test]
fn a_restarted_node_is_a_new_member_that_holds_nothing() {
    let config = test_config(2);
    let mut world = World::new(5, &config, OwnershipBugs::default());
    let key = key_with_directory(&world.nodes, 2, &[n(1), n(2)]);
    world.create(n(3), key, 1, data(1));
    world.deliver_all(1_000);
    world.acquire(n(4), key, 1, RequestKind::AddReader);
    world.deliver_all(1_000);
    // The reader restarts and is re-admitted in the same view change: the
    // others see its incarnation change and drop it from o_replicas.
    world.restart(n(4), &config);
    for id in [n(1), n(2), n(3), n(5)] {
        world.install(id);
    }
    world.deliver_all(1_000);
    for id in [n(1), n(2), n(3)] {
        let meta = world.node(id).meta(&key).unwrap();
        assert!(meta.o_replicas.readers.is_empty(), "{id}: {meta:?}");
        assert_eq!(meta.o_replicas.owner, Some(n(3)));
    }
    // The owner restarts: the object's rows are gone with it.
    world.restart(n(3), &config);
    for id in [n(1), n(2), n(4), n(5)] {
        world.install(id);
    }
    world.deliver_all(1_000);
    assert_eq!(world.node(n(1)).meta(&key).unwrap().o_replicas.owner, None);
    world.acquire(n(5), key, 2, RequestKind::AddOwner);
    let outs = world.run_until_quiet(10_000);
    assert!(outputs_of(&outs, n(5)).iter().any(|o| matches!(
        o,
        OwnershipOut::Failed {
            reason: FailReason::Nacked(NackReason::DataLost),
            ..
        }
    )));
    settled(&world, key);
}

#[test]
fn a_restarted_directory_replica_learns_from_the_next_inv_and_is_skipped_meanwhile() {
    let config = test_config(2);
    let mut world = World::new(4, &config, OwnershipBugs::default());
    let key = key_with_directory(&world.nodes, 2, &[n(1), n(2)]);
    world.create(n(3), key, 1, data(1));
    world.deliver_all(1_000);
    // The preferred driver restarts and forgets the object; the SYNCs that
    // would teach it are lost (they are sent again later).
    world.restart(n(1), &config);
    for id in [n(2), n(3), n(4)] {
        world.install(id);
    }
    world.net.retain(|m| m.msg.body.name() != "SYNC");
    world.deliver_all(1_000);
    assert!(world.node(n(1)).meta(&key).is_none());
    // n4 asks n1 first (UnknownObject), then n2, which drives it; n1 learns
    // the metadata from n2's INV on the way.
    world.acquire(n(4), key, 1, RequestKind::AddOwner);
    let outs = world.run_until_quiet(10_000);
    assert!(
        outputs_of(&outs, n(4))
            .iter()
            .any(|o| matches!(o, OwnershipOut::Acquired { .. })),
        "{:?}",
        outputs_of(&outs, n(4))
    );
    assert_eq!(world.owners(key), vec![n(4)]);
    let m1 = world.node(n(1)).meta(&key).unwrap();
    let m2 = world.node(n(2)).meta(&key).unwrap();
    assert_eq!((m1.o_ts, m1.o_replicas), (m2.o_ts, m2.o_replicas));
    settled(&world, key);
}

/// Seed 65 of the 5-node campaign, distilled. A directory replica (n2) is cut
/// off and misses the views in which a requester (n4) restarted and, as its
/// new incarnation, won the object. When n2 is back, a replay of that win
/// reaches it: n2 must date n4's restart to a view after the last one it
/// knew, not to the view it learns it in, or it takes n4's new attempt for
/// its old incarnation's, strips n4 as a dead requester, and the directory
/// splits (n1: owner n4; n2: ownerless).
#[test]
fn a_replica_back_from_missed_views_keeps_a_restarted_requesters_win() {
    let config = test_config(2);
    let mut world = World::new(4, &config, OwnershipBugs::default());
    let key = key_with_directory(&world.nodes, 2, &[n(1), n(2)]);
    world.create(n(3), key, 1, data(1));
    world.deliver_all(1_000);
    // n2 is cut off (alive = false here keeps its state): epoch 2 without it.
    world.crash(n(2));
    world.deliver_all(1_000);
    // n4 restarts: epoch 3 admits its second incarnation.
    world.restart(n(4), &config);
    world.deliver_all(1_000);
    assert_eq!(world.latest.epoch.0, 3);
    // n4 wins through n1 (n2 is not live); n1 loses n4's VAL.
    world.acquire(n(4), key, 2, RequestKind::ChangeOwner);
    world.deliver_where(|m| m.msg.body.name() == "REQ");
    world.deliver_where(|m| m.msg.body.name() == "INV");
    world.deliver_where(|m| m.msg.body.name() == "ACK" && m.from == n(3));
    let outs = world.deliver_where(|m| m.msg.body.name() == "ACK" && m.from == n(1));
    assert!(outputs_of(&[outs], n(4))
        .iter()
        .any(|o| matches!(o, OwnershipOut::Acquired { .. })));
    world.lose_where(|m| m.msg.body.name() == "VAL" && m.to == n(1));
    world.deliver_all(1_000);
    assert_eq!(world.node(n(1)).blocked(), 1);
    // n2 is back in epoch 4 with the incarnation it had, having installed
    // nothing since epoch 1; n1 replays the win to it and to the owner.
    world.latest.epoch.0 += 1;
    world.latest.members.insert(n(2), 1);
    world.procs.get_mut(&n(2)).expect("configured").alive = true;
    world.run_until_quiet(10_000);
    assert_eq!(world.owners(key), vec![n(4)]);
    let m2 = world.node(n(2)).meta(&key).unwrap();
    assert_eq!(m2.o_replicas.owner, Some(n(4)), "{}", world.dump());
    settled(&world, key);
}

/// Seed 1358 of the 7-node campaign, distilled. A replayer that hears from
/// an arbiter that applied the arbitration finishes it without a RESP, but
/// only once every acker has answered: a directory replica that rejoined
/// knowing nothing (n3) must have the arbitration before its VAL comes, or
/// the VAL is dropped and n3 stays behind the others (in the campaign, valid
/// at an older state, from which it could drive).
#[test]
fn a_replayer_finishes_an_applied_arbitration_only_when_every_acker_answered() {
    let config = test_config(3);
    let mut world = World::new(4, &config, OwnershipBugs::default());
    let key = key_with_directory(&world.nodes, 3, &[n(1), n(2), n(3)]);
    world.create(n(4), key, 1, data(1));
    world.deliver_all(1_000);
    world.crash_and_install(n(3));
    world.deliver_all(1_000);
    // n2 drives its own change-owner; n1 loses n2's VAL and holds it.
    world.acquire(n(2), key, 2, RequestKind::ChangeOwner);
    world.deliver_where(|m| m.msg.body.name() == "INV" && m.to == n(1));
    world.deliver_where(|m| m.msg.body.name() == "INV" && m.to == n(4));
    world.deliver_where(|m| m.msg.body.name() == "ACK" && m.from == n(1));
    world.deliver_where(|m| m.msg.body.name() == "ACK" && m.from == n(4));
    world.lose_where(|m| m.msg.body.name() == "VAL" && m.to == n(1));
    world.deliver_all(1_000);
    assert_eq!(world.owners(key), vec![n(2)]);
    assert_eq!(world.node(n(1)).blocked(), 1);
    // n3 restarts knowing nothing; n1 replays to n2, n3 and the old owner n4.
    world.restart(n(3), &config);
    for id in [n(1), n(2), n(4)] {
        world.install(id);
    }
    // n1's INV to n3 is lost; n2 and n4 answer that they applied it.
    world.lose_where(|m| m.msg.body.name() == "INV" && m.from == n(1) && m.to == n(3));
    world.deliver_where(|m| m.msg.body.name() == "INV" && m.to == n(2));
    world.deliver_where(|m| m.msg.body.name() == "INV" && m.to == n(4));
    world.deliver_where(|m| m.msg.body.name() == "ACK" && m.from == n(2) && m.to == n(1));
    world.deliver_where(|m| m.msg.body.name() == "ACK" && m.from == n(4) && m.to == n(1));
    // Not finished: n3 has not answered.
    assert_eq!(world.node(n(1)).blocked(), 1, "{}", world.dump());
    world.run_until_quiet(10_000);
    let metas: BTreeSet<_> = [n(1), n(2), n(3)]
        .iter()
        .map(|&id| {
            let m = world.node(id).meta(&key).expect("every replica knows it");
            (m.o_ts, m.o_state, m.o_replicas)
        })
        .collect();
    assert_eq!(metas.len(), 1, "{metas:?}");
    assert_eq!(world.owners(key), vec![n(2)]);
    settled(&world, key);
}

/// Directory re-replication: a restarted directory replica is taught every
/// object by the first replica that survived and by the owner (SYNC), and
/// answers, before any request comes.
#[test]
fn a_restarted_directory_replica_is_taught_by_a_survivor_and_the_owner() {
    let config = test_config(2);
    let mut world = World::new(4, &config, OwnershipBugs::default());
    let key = key_with_directory(&world.nodes, 2, &[n(1), n(2)]);
    world.create(n(3), key, 1, data(1));
    world.deliver_all(1_000);
    world.restart(n(1), &config);
    for id in [n(2), n(3), n(4)] {
        world.install(id);
    }
    let syncs: BTreeSet<NodeId> = world
        .net
        .iter()
        .filter(|m| m.msg.body.name() == "SYNC" && m.to == n(1))
        .map(|m| m.from)
        .collect();
    assert_eq!(syncs, BTreeSet::from([n(2), n(3)]));
    world.deliver_all(1_000);
    let m1 = world.node(n(1)).meta(&key).expect("taught");
    let m2 = world.node(n(2)).meta(&key).unwrap();
    assert_eq!(
        (m1.o_ts, m1.o_state, &m1.o_replicas),
        (m2.o_ts, OState::Valid, &m2.o_replicas)
    );
    // Answered: nothing is sent again.
    world.run_until_quiet(10_000);
    assert_eq!(world.in_flight("SYNC"), 0);
    assert!(world.node(n(2)).stats().synced + world.node(n(3)).stats().synced == 2);
    settled(&world, key);
}

/// 5-node seed 4094, distilled: the replica that knew the object is cut off
/// (still in the view) when the other one restarts, and then leaves. The
/// owner's SYNC, lost once and sent again, is what the directory has left;
/// without it the restarted replica would take a replayed stale
/// arbitration for the truth.
#[test]
fn the_owner_teaches_a_restarted_replica_when_no_replica_that_knew_is_reachable() {
    let config = test_config(2);
    let mut world = World::new(4, &config, OwnershipBugs::default());
    let key = key_with_directory(&world.nodes, 2, &[n(1), n(2)]);
    world.create(n(3), key, 1, data(1));
    world.deliver_all(1_000);
    let before = world.node(n(2)).meta(&key).unwrap();
    // n2 is cut off but still a member; n1 restarts.
    world.procs.get_mut(&n(2)).expect("configured").alive = false;
    world.restart(n(1), &config);
    for id in [n(3), n(4)] {
        world.install(id);
    }
    world.lose_where(|m| m.msg.body.name() == "SYNC" && m.from == n(3));
    world.run_until_quiet(10_000);
    // n2 leaves the view for good.
    world.latest.epoch.0 += 1;
    world.latest.members.remove(&n(2));
    world.run_until_quiet(10_000);
    let m1 = world.node(n(1)).meta(&key).expect("taught by the owner");
    assert_eq!((m1.o_ts, m1.o_replicas.owner), (before.o_ts, Some(n(3))));
    assert_eq!(world.owners(key), vec![n(3)]);
    // The directory works: a request goes through n1.
    world.acquire(n(4), key, 2, RequestKind::ChangeOwner);
    world.run_until_quiet(10_000);
    assert_eq!(world.owners(key), vec![n(4)]);
    assert_eq!(world.node(n(4)).store().get(&key), Some(&data(1)));
}

/// 3-node seed 5675 of the campaign with the end-of-run check, distilled: a
/// duplicate RESP of an earlier win reaches a requester whose next request
/// for the object is in flight. Its VAL says which of its attempts no
/// directory replica may drive any more (`r_floor`); that must not cover
/// the attempt in flight, though the requester has issued later attempts
/// for other objects, or the driver drops that attempt's REQ (and every
/// retransmission of it) as already arbitrated and the request hangs.
#[test]
fn a_duplicate_resp_does_not_void_the_attempt_in_flight() {
    let config = test_config(2);
    let mut world = World::new(4, &config, OwnershipBugs::default());
    let key = key_with_directory(&world.nodes, 2, &[n(1), n(2)]);
    let other = (key + 1..)
        .find(|k| roost_ownership::directory(k, &world.nodes, 2).contains(&n(1)))
        .expect("some key");
    world.create(n(3), key, 1, data(1));
    world.create(n(3), other, 2, data(2));
    world.deliver_all(1_000);
    world.acquire(n(4), key, 3, RequestKind::AddReader);
    world.deliver_all(1_000);
    let won = world.node(n(1)).meta(&key).unwrap();
    assert!(won.o_replicas.readers.contains(&n(4)));
    // The next request for the object, then one for another object: its
    // attempt is the highest n4 has issued.
    world.acquire(n(4), key, 4, RequestKind::ChangeOwner);
    world.acquire(n(4), other, 5, RequestKind::AddReader);
    // A late duplicate of the first win's RESP.
    let resp = Resp {
        o_ts: won.o_ts,
        r_ts: won.r_ts,
        r_type: RequestKind::AddReader,
        o_replicas: roost_ownership::OReplicas::owned_by(n(3)),
        val_to: BTreeSet::from([n(1), n(2), n(3)]),
        data: None,
    };
    world.inject(n(1), n(4), Msg::new(EpochId(1), key, Body::Resp(resp)));
    // Its VAL reaches the driver before the REQ in flight.
    world.deliver_where(|m| m.msg.body.name() == "VAL" && m.to == n(1) && m.msg.key == key);
    let outs = world.run_until_quiet(10_000);
    let mine = outputs_of(&outs, n(4));
    assert!(
        mine.iter()
            .any(|o| matches!(o, OwnershipOut::Acquired { req, .. } if req.0 == 4)),
        "{mine:?}"
    );
    assert_eq!(world.owners(key), vec![n(4)]);
    settled(&world, key);
}

/// A replay whose ACKs are all in still waits while the reliable commit's
/// recovery runs (at every live node, as the store reports it): a reader
/// must not become owner before a failed coordinator's newer version,
/// still being replayed, reached it (the composed simulation,
/// `roost sim --protocol zeus`, found that). Once recovery is over, the
/// replay timer finishes it.
#[test]
fn a_replay_waits_for_the_reliable_commits_recovery() {
    let (mut world, key) = setup(4, n(3), &[]);
    world.acquire(n(4), key, 1, RequestKind::AddOwner);
    world.deliver_where(|m| m.msg.body.name() == "REQ");
    world.deliver_where(|m| m.msg.body.name() == "INV" && m.to == n(2));
    world.deliver_where(|m| m.msg.body.name() == "INV" && m.to == n(3));
    world.crash(n(1));
    world.net.retain(|m| m.msg.body.name() != "ACK");
    for id in world.live() {
        world.node_mut(id).store_mut().recovering = true;
    }
    for id in world.live() {
        world.install(id);
    }
    let outs = world.deliver_all(10_000);
    assert!(
        !outputs_of(&outs, n(4))
            .iter()
            .any(|o| matches!(o, OwnershipOut::Acquired { .. })),
        "acquired during the reliable commit's recovery"
    );
    assert!(world.owners(key).is_empty(), "{:?}", world.owners(key));
    let held: u64 = world
        .live()
        .iter()
        .map(|&id| world.node(id).stats().replays_held_for_commit_recovery)
        .sum();
    assert!(held >= 1, "no replay waited");
    for id in world.live() {
        world.node_mut(id).store_mut().recovering = false;
    }
    let outs = world.run_until_quiet(10_000);
    assert!(
        outputs_of(&outs, n(4))
            .iter()
            .any(|o| matches!(o, OwnershipOut::Acquired { .. })),
        "{}",
        world.dump()
    );
    assert_eq!(world.owners(key), vec![n(4)]);
    settled(&world, key);
}

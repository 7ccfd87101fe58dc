//! Malformed or forged input is counted per reason, logged, and dropped: it
//! never panics and never changes ownership. Also the wire format and the
//! configuration checks.

mod common;

use std::collections::BTreeSet;

use common::*;
use roost_cluster::{EpochId, NodeId};
use roost_ownership::{
    Ack, ArbKind, Body, Current, DropReason, FailReason, Inv, Meta, Nack, NackReason, NewError,
    OReplicas, OTs, OwnershipBugs, OwnershipConfig, OwnershipOut, RTs, Req, RequestKind, Resp,
    Sync, Val, WIRE_VERSION,
};

fn setup() -> (World, Key) {
    let mut world = World::new(4, &test_config(2), OwnershipBugs::default());
    let key = key_with_directory(&world.nodes, 2, &[n(1), n(2)]);
    world.create(n(3), key, 1, data(1));
    world.deliver_all(1_000);
    (world, key)
}

fn snapshot(
    world: &World,
    key: Key,
) -> Vec<(NodeId, Option<Meta>, Option<roost_ownership::ObjectData>)> {
    world
        .live()
        .into_iter()
        .map(|id| {
            (
                id,
                world.node(id).meta(&key),
                world.node(id).store().get(&key).cloned(),
            )
        })
        .collect()
}

/// Injects `msg` from `from` to `to` and checks it was dropped for `reason`
/// (counted once, logged if bad input), with nothing sent and no metadata
/// or data changed anywhere.
fn rejected(world: &mut World, key: Key, from: NodeId, to: NodeId, msg: Msg, reason: DropReason) {
    let before = snapshot(world, key);
    let count = world.node(to).stats().dropped(reason);
    let in_flight = world.net.len();
    let out = world.inject(from, to, msg.clone());
    assert_eq!(
        world.node(to).stats().dropped(reason),
        count + 1,
        "{msg:?} not dropped as {reason:?}: {:?}",
        world.node(to).stats().drops()
    );
    if reason.is_bad_input() {
        assert_eq!(out.logs.len(), 1, "{:?}", out.logs);
        assert!(out.logs[0].contains(&format!("{reason:?}")));
    }
    assert!(out.outputs.is_empty());
    assert_eq!(world.net.len(), in_flight, "nothing sent");
    assert_eq!(snapshot(world, key), before, "nothing changed");
}

fn inv_for(world: &World, key: Key) -> Inv {
    let meta = world.node(n(1)).meta(&key).unwrap();
    Inv {
        o_ts: meta.o_ts.bumped(n(1)),
        r_ts: RTs {
            version: 99,
            node: n(4),
        },
        r_type: ArbKind::Request(RequestKind::AddOwner),
        o_replicas: meta.o_replicas,
        driver: n(1),
        ackers: BTreeSet::from([n(1), n(2), n(3)]),
        data_from: Some(n(3)),
        ack_to: n(4),
        create: false,
        requester_gone: false,
    }
}

fn m(key: Key, body: Body) -> Msg {
    Msg::new(EpochId(1), key, body)
}

#[test]
fn every_kind_of_bad_input_is_counted_and_dropped() {
    let (mut world, key) = setup();
    let good_inv = inv_for(&world, key);

    // Wrong wire version.
    let mut msg = m(key, Body::Inv(good_inv.clone()));
    msg.version = WIRE_VERSION + 1;
    rejected(
        &mut world,
        key,
        n(1),
        n(2),
        msg,
        DropReason::UnsupportedVersion,
    );

    // Wrong epoch (the node wrapper filters these too; the protocol checks).
    let mut msg = m(key, Body::Inv(good_inv.clone()));
    msg.epoch = EpochId(7);
    rejected(&mut world, key, n(1), n(2), msg, DropReason::WrongEpoch);

    // A sender that is not a member.
    rejected(
        &mut world,
        key,
        n(9),
        n(2),
        m(key, Body::Inv(good_inv.clone())),
        DropReason::SenderNotMember,
    );

    // Unknown object: a VAL for a key nobody created.
    let unknown = key + 12_345;
    let unknown = (unknown..)
        .find(|k| roost_ownership::directory(k, &world.nodes, 2).contains(&n(1)))
        .unwrap();
    let val = Val {
        o_ts: OTs {
            version: 3,
            node: roost_ownership::directory(&unknown, &world.nodes, 2)[0],
        },
        r_ts: RTs {
            version: 1,
            node: n(4),
        },
        r_floor: 0,
    };
    rejected(
        &mut world,
        key,
        n(4),
        n(1),
        m(unknown, Body::Val(val)),
        DropReason::UnknownObject,
    );

    // An INV for an unknown object at a node that is no directory replica.
    let mut inv = good_inv.clone();
    inv.o_replicas = OReplicas::owned_by(n(4));
    inv.data_from = None;
    inv.ackers = BTreeSet::from([n(1), n(4)]);
    let other = (key + 1..)
        .find(|k| {
            let d = roost_ownership::directory(k, &world.nodes, 2);
            d[0] == n(1) && !d.contains(&n(4))
        })
        .unwrap();
    rejected(
        &mut world,
        key,
        n(1),
        n(4),
        m(other, Body::Inv(inv)),
        DropReason::UnknownObject,
    );

    // Impossible o_ts: bumped by a node that is no directory replica.
    let mut inv = good_inv.clone();
    inv.o_ts.node = n(3);
    inv.driver = n(3);
    rejected(
        &mut world,
        key,
        n(3),
        n(2),
        m(key, Body::Inv(inv)),
        DropReason::ImpossibleOTs,
    );
    // ... or version 0.
    let mut inv = good_inv.clone();
    inv.o_ts.version = 0;
    rejected(
        &mut world,
        key,
        n(1),
        n(2),
        m(key, Body::Inv(inv)),
        DropReason::ImpossibleOTs,
    );
    // ... or a driver field that is not the bumper.
    let mut inv = good_inv.clone();
    inv.driver = n(2);
    rejected(
        &mut world,
        key,
        n(1),
        n(2),
        m(key, Body::Inv(inv)),
        DropReason::ImpossibleOTs,
    );

    // An INV from neither its driver nor its collector.
    rejected(
        &mut world,
        key,
        n(3),
        n(2),
        m(key, Body::Inv(good_inv.clone())),
        DropReason::ForgedSender,
    );

    // An INV whose ackers leave out the receiver, or name strangers.
    let mut inv = good_inv.clone();
    inv.ackers = BTreeSet::from([n(1), n(3)]);
    rejected(
        &mut world,
        key,
        n(1),
        n(2),
        m(key, Body::Inv(inv)),
        DropReason::Malformed,
    );
    let mut inv = good_inv.clone();
    inv.ackers.insert(n(77));
    rejected(
        &mut world,
        key,
        n(1),
        n(2),
        m(key, Body::Inv(inv)),
        DropReason::Malformed,
    );
    let mut inv = good_inv.clone();
    inv.ackers.clear();
    rejected(
        &mut world,
        key,
        n(1),
        n(2),
        m(key, Body::Inv(inv)),
        DropReason::Malformed,
    );
    // ... more of them than there are nodes.
    let mut inv = good_inv.clone();
    inv.ackers = (1..=9).map(NodeId).collect();
    rejected(
        &mut world,
        key,
        n(1),
        n(2),
        m(key, Body::Inv(inv)),
        DropReason::Oversized,
    );

    // An INV to a node with no role in it.
    rejected(
        &mut world,
        key,
        n(1),
        n(4),
        m(
            key,
            Body::Inv({
                let mut inv = good_inv.clone();
                inv.ackers.insert(n(4));
                inv
            }),
        ),
        DropReason::NotArbiter,
    );

    // A REQ to a node that is no directory replica; a REQ naming another
    // requester.
    let req = Req {
        r_ts: RTs {
            version: 5,
            node: n(4),
        },
        r_type: RequestKind::AddOwner,
        create: false,
    };
    rejected(
        &mut world,
        key,
        n(4),
        n(3),
        m(key, Body::Req(req.clone())),
        DropReason::NotDirectory,
    );
    rejected(
        &mut world,
        key,
        n(3),
        n(1),
        m(key, Body::Req(req)),
        DropReason::ForgedSender,
    );

    // ACKs nobody waits for.
    let ack = Ack {
        o_ts: good_inv.o_ts,
        r_ts: good_inv.r_ts,
        r_type: good_inv.r_type,
        o_replicas: good_inv.o_replicas.clone(),
        ackers: good_inv.ackers.clone(),
        data_from: good_inv.data_from,
        data: None,
        applied: false,
    };
    rejected(
        &mut world,
        key,
        n(2),
        n(4),
        m(key, Body::Ack(ack.clone())),
        DropReason::Stale,
    );

    // An oversized payload.
    let mut big = ack.clone();
    big.data = Some(roost_ownership::ObjectData::new(1, vec![0; (1 << 20) + 1]));
    rejected(
        &mut world,
        key,
        n(3),
        n(4),
        m(key, Body::Ack(big)),
        DropReason::Oversized,
    );

    // A VAL from a node that could not have sent it (not the requester, not
    // a directory replica, not the owner).
    let meta = world.node(n(1)).meta(&key).unwrap();
    let val = Val {
        o_ts: meta.o_ts,
        r_ts: RTs {
            version: 1,
            node: n(2),
        },
        r_floor: 0,
    };
    rejected(
        &mut world,
        key,
        n(4),
        n(1),
        m(key, Body::Val(val)),
        DropReason::ForgedSender,
    );

    // A RESP for someone else, and one from a node that replays nothing.
    let resp = Resp {
        o_ts: good_inv.o_ts,
        r_ts: RTs {
            version: 99,
            node: n(4),
        },
        r_type: RequestKind::AddOwner,
        o_replicas: good_inv.o_replicas.clone(),
        val_to: BTreeSet::from([n(1), n(2), n(3)]),
        data: Some(data(666)),
    };
    rejected(
        &mut world,
        key,
        n(1),
        n(2),
        m(key, Body::Resp(resp.clone())),
        DropReason::ForgedSender,
    );
    let mut resp_from_stranger = resp.clone();
    resp_from_stranger.o_replicas = OReplicas::owned_by(n(2));
    let mut w5 = World::new(5, &test_config(2), OwnershipBugs::default());
    let k5 = key_with_directory(&w5.nodes, 2, &[n(1), n(2)]);
    w5.create(n(3), k5, 1, data(1));
    w5.deliver_all(1_000);
    rejected(
        &mut w5,
        k5,
        n(5),
        n(4),
        m(k5, Body::Resp(resp)),
        DropReason::ForgedSender,
    );

    // A NACK with an impossible current o_ts.
    let nack = Nack {
        r_ts: good_inv.r_ts,
        o_ts: Some(good_inv.o_ts),
        reason: NackReason::Stale,
        current: Some(Current {
            r_ts: RTs::default(),
            o_ts: OTs {
                version: 8,
                node: n(4),
            },
            valid: true,
            o_replicas: OReplicas::owned_by(n(4)),
        }),
    };
    rejected(
        &mut world,
        key,
        n(1),
        n(3),
        m(key, Body::Nack(nack)),
        DropReason::ImpossibleOTs,
    );

    // SYNCs: from a node that is neither a directory replica nor the owner
    // it names, to a node that is no directory replica, and one that does
    // not say it is valid metadata.
    let meta = world.node(n(1)).meta(&key).unwrap();
    let sync = Sync {
        current: Current {
            o_ts: good_inv.o_ts,
            r_ts: RTs {
                version: 5,
                node: n(4),
            },
            valid: true,
            o_replicas: OReplicas::owned_by(n(4)),
        },
        answer: false,
    };
    rejected(
        &mut world,
        key,
        n(3),
        n(2),
        m(key, Body::Sync(sync.clone())),
        DropReason::ForgedSender,
    );
    rejected(
        &mut world,
        key,
        n(1),
        n(4),
        m(key, Body::Sync(sync.clone())),
        DropReason::NotDirectory,
    );
    let mut invalid = sync;
    invalid.current.valid = false;
    rejected(
        &mut world,
        key,
        n(1),
        n(2),
        m(key, Body::Sync(invalid)),
        DropReason::Malformed,
    );
    assert_eq!(world.node(n(2)).meta(&key), Some(meta));

    // A vector naming the owner among its readers.
    let mut inv = good_inv.clone();
    inv.o_replicas.readers.insert(n(3));
    rejected(
        &mut world,
        key,
        n(1),
        n(2),
        m(key, Body::Inv(inv)),
        DropReason::Malformed,
    );

    // After all that, the object is where it was and works.
    assert_eq!(world.owners(key), vec![n(3)]);
    assert!(world.live().iter().all(|&id| world.node(id).blocked() == 0));
    world.acquire(n(4), key, 1, RequestKind::AddOwner);
    let outs = world.deliver_all(1_000);
    assert!(all_outputs(&outs)
        .iter()
        .any(|(id, o)| *id == n(4) && matches!(o, OwnershipOut::Acquired { .. })));
    let total: u64 = world
        .live()
        .iter()
        .map(|&id| world.node(id).stats().bad_input())
        .sum();
    assert!(total >= 20, "{total}");
}

#[test]
fn a_non_member_takes_part_in_nothing() {
    let (mut world, key) = setup();
    world.latest.epoch = EpochId(2);
    world.latest.members.remove(&n(2));
    world.install(n(2));
    let inv = inv_for(&world, key);
    let mut msg = m(key, Body::Inv(inv));
    msg.epoch = EpochId(2);
    rejected(&mut world, key, n(1), n(2), msg, DropReason::NotMember);
}

#[test]
fn forged_acks_cannot_make_an_owner() {
    let (mut world, key) = setup();
    world.acquire(n(4), key, 1, RequestKind::AddOwner);
    world.deliver_where(|m| m.msg.body.name() == "REQ");
    // Before the genuine INVs arrive, "ACKs" claiming a smaller o_ts (say
    // from an earlier attempt) and from non-ackers do not complete it.
    let Some(Body::Inv(inv)) = world
        .net
        .iter()
        .find(|m| m.msg.body.name() == "INV")
        .map(|m| m.msg.body.clone())
    else {
        unreachable!()
    };
    let mut forged = Ack {
        o_ts: inv.o_ts,
        r_ts: inv.r_ts,
        r_type: inv.r_type,
        o_replicas: inv.o_replicas.clone(),
        ackers: BTreeSet::from([n(1), n(4)]),
        data_from: None,
        data: None,
        applied: false,
    };
    // A made-up acker set that the driver's genuine ACK contradicts.
    world.inject(n(1), n(4), m(key, Body::Ack(forged.clone())));
    forged.ackers = inv.ackers.clone();
    world.inject(n(2), n(4), m(key, Body::Ack(forged)));
    assert!(world.owners(key) == vec![n(3)]);
    assert!(world.node(n(4)).stats().bad_input() >= 1);
}

#[test]
fn injected_garbage_never_panics() {
    // Mutations of real messages, delivered anywhere: whatever they do, the
    // protocol must not panic.
    let (mut world, key) = setup();
    world.acquire(n(4), key, 1, RequestKind::AddOwner);
    world.acquire(n(2), key, 2, RequestKind::AddReader);
    let mut seen: Vec<InFlight> = Vec::new();
    let mut rng = 0x1234_5678_9abc_def0u64;
    let mut next = move || {
        rng = rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        roost_ownership::mix64(rng)
    };
    for _ in 0..3_000 {
        if !world.net.is_empty() && next() % 3 != 0 {
            let i = (next() % world.net.len() as u64) as usize;
            seen.push(world.net[i].clone());
            world.deliver(i);
            continue;
        }
        let Some(base) = seen
            .get((next() % (seen.len() as u64 + 1)) as usize)
            .cloned()
        else {
            continue;
        };
        let mut msg = base.msg.clone();
        let r = next();
        match &mut msg.body {
            Body::Inv(inv) => match r % 5 {
                0 => inv.o_ts.version ^= r >> 8 & 3,
                1 => inv.ack_to = n((r >> 8) as u32 % 5),
                2 => inv.o_replicas = OReplicas::owned_by(n((r >> 8) as u32 % 5)),
                3 => inv.r_type = ArbKind::Noop,
                _ => inv.data_from = Some(n((r >> 8) as u32 % 5)),
            },
            Body::Ack(ack) => match r % 3 {
                0 => ack.data = Some(data(r >> 40)),
                1 => ack.o_ts.version += 1,
                _ => {
                    ack.ackers.insert(n((r >> 8) as u32 % 5));
                }
            },
            Body::Val(val) => val.o_ts.version = val.o_ts.version.wrapping_add(r % 3),
            Body::Nack(nack) => nack.reason = NackReason::PendingCommit,
            Body::Req(req) => req.create = !req.create,
            Body::Resp(resp) => resp.data = None,
            Body::Sync(sync) => match r % 3 {
                0 => sync.answer = !sync.answer,
                1 => sync.current.o_ts.version += 1,
                _ => sync.current.o_replicas = OReplicas::owned_by(n((r >> 8) as u32 % 5)),
            },
        }
        let from = n(1 + (next() % 4) as u32);
        let to = n(1 + (next() % 4) as u32);
        if from != to {
            world.inject(from, to, msg);
        }
    }
    world.run_until_quiet(100_000);
}

#[test]
fn wire_format_round_trips_and_is_versioned() {
    let inv = Inv {
        o_ts: OTs {
            version: 3,
            node: n(1),
        },
        r_ts: RTs {
            version: 4 << 32,
            node: n(4),
        },
        r_type: ArbKind::Request(RequestKind::ChangeOwner),
        o_replicas: OReplicas {
            owner: Some(n(3)),
            readers: BTreeSet::from([n(2), n(4)]),
        },
        driver: n(1),
        ackers: BTreeSet::from([n(1), n(2), n(3)]),
        data_from: None,
        ack_to: n(4),
        create: false,
        requester_gone: false,
    };
    let bodies = vec![
        Body::Req(Req {
            r_ts: inv.r_ts,
            r_type: RequestKind::RemoveReader,
            create: true,
        }),
        Body::Inv(inv.clone()),
        Body::Ack(Ack {
            o_ts: inv.o_ts,
            r_ts: inv.r_ts,
            r_type: ArbKind::Noop,
            o_replicas: inv.o_replicas.clone(),
            ackers: inv.ackers.clone(),
            data_from: Some(n(3)),
            data: Some(data(7)),
            applied: false,
        }),
        Body::Val(Val {
            o_ts: inv.o_ts,
            r_ts: inv.r_ts,
            r_floor: 0,
        }),
        Body::Nack(Nack {
            r_ts: inv.r_ts,
            o_ts: None,
            reason: NackReason::Busy,
            current: Some(Current {
                r_ts: RTs::default(),
                o_ts: OTs::ZERO,
                valid: false,
                o_replicas: OReplicas::default(),
            }),
        }),
        Body::Resp(Resp {
            o_ts: inv.o_ts,
            r_ts: inv.r_ts,
            r_type: RequestKind::AddReader,
            o_replicas: inv.o_replicas.clone(),
            val_to: inv.ackers.clone(),
            data: None,
        }),
        Body::Sync(Sync {
            current: Current {
                o_ts: inv.o_ts,
                r_ts: inv.r_ts,
                valid: true,
                o_replicas: inv.o_replicas.clone(),
            },
            answer: true,
        }),
    ];
    for body in bodies {
        let msg = Msg::new(EpochId(5), 42u64, body);
        assert_eq!(msg.version, WIRE_VERSION);
        let bytes = postcard::to_allocvec(&msg).unwrap();
        let back: Msg = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, msg);
        let json = serde_json::to_string(&msg).unwrap();
        let back: Msg = serde_json::from_str(&json).unwrap();
        assert_eq!(back, msg);
        // Truncated input is an error, not a panic.
        for cut in 0..bytes.len() {
            let _ = postcard::from_bytes::<Msg>(&bytes[..cut]);
        }
    }
    // The first field is the version.
    let bytes = postcard::to_allocvec(&Msg::new(
        EpochId(1),
        1u64,
        Body::Val(Val {
            o_ts: OTs::ZERO,
            r_ts: RTs::default(),
            r_floor: 0,
        }),
    ))
    .unwrap();
    assert_eq!(bytes[0], WIRE_VERSION as u8);
}

#[test]
fn configuration_is_checked() {
    let bad = |f: fn(&mut OwnershipConfig)| {
        let mut config = OwnershipConfig::default();
        f(&mut config);
        roost_ownership::Ownership::<u64, roost_ownership::MemStore<u64>>::new(
            n(1),
            config,
            OwnershipBugs::default(),
            roost_ownership::MemStore::new(),
        )
        .err()
    };
    assert_eq!(
        bad(|c| c.directory_replicas = 0),
        Some(NewError::NoDirectoryReplicas)
    );
    assert_eq!(
        bad(|c| c.max_pending_requests = 0),
        Some(NewError::ZeroBound {
            field: "max_pending_requests"
        })
    );
    assert_eq!(
        bad(|c| c.backoff_base_ms = 1_000),
        Some(NewError::BackoffInverted {
            base: 1_000,
            max: 200
        })
    );
    assert_eq!(
        bad(|c| c.retransmit_ms = Some(0)),
        Some(NewError::ZeroInterval {
            field: "retransmit_ms"
        })
    );
    assert_eq!(bad(|_| {}), None);
}

#[test]
fn bounds_on_requests_and_objects() {
    let mut config = test_config(2);
    config.max_pending_requests = 2;
    let mut world = World::new(4, &config, OwnershipBugs::default());
    for k in 1..=3u64 {
        world.create(n(3), k, k, data(k));
    }
    world.deliver_all(1_000);
    let keys: Vec<u64> = (1..=3).collect();
    let mut outs = Vec::new();
    for &k in &keys {
        outs.push(world.acquire(n(4), k, k, RequestKind::AddOwner));
    }
    assert!(outs[2].outputs.iter().any(|(_, o)| matches!(
        o,
        OwnershipOut::Failed {
            reason: FailReason::TooManyPending,
            ..
        }
    )));
    // The same key twice.
    let out = world.acquire(n(4), 1, 9, RequestKind::AddOwner);
    assert!(matches!(
        out.outputs[0].1,
        OwnershipOut::Failed {
            reason: FailReason::Busy,
            ..
        }
    ));
    // Oversized create data.
    let out = world.create(
        n(4),
        77,
        1,
        roost_ownership::ObjectData::new(1, vec![0; (1 << 20) + 1]),
    );
    assert!(matches!(
        out.outputs[0].1,
        OwnershipOut::Failed {
            reason: FailReason::Oversized,
            ..
        }
    ));

    // max_objects: a directory replica refuses to learn more objects.
    let mut config = test_config(2);
    config.max_objects = 1;
    let mut world = World::new(4, &config, OwnershipBugs::default());
    let k1 = key_with_directory(&world.nodes, 2, &[n(1), n(2)]);
    world.create(n(3), k1, 1, data(1));
    world.deliver_all(1_000);
    let k2 = (k1 + 1..)
        .find(|k| {
            let d = roost_ownership::directory(k, &world.nodes, 2);
            d[0] == n(1) && d.contains(&n(2))
        })
        .unwrap();
    // n3 (owner of k1, no directory replica) cannot even request: its
    // request would be metadata too.
    let out = world.create(n(3), k2, 2, data(2));
    assert!(matches!(
        out.outputs[0].1,
        OwnershipOut::Failed {
            reason: FailReason::TooManyObjects,
            ..
        }
    ));
    world.create(n(4), k2, 2, data(2));
    world.deliver_all(1_000);
    assert!(world.node(n(1)).stats().dropped(DropReason::Overloaded) >= 1);
    assert!(world.node(n(1)).meta(&k2).is_none());
}

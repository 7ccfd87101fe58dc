//! Bad input: wrong-epoch, unknown, forged and malformed messages are
//! counted and dropped; decoding never panics.

mod common;

use common::{n, w, Net};
use roost_cluster::EpochId;
use roost_commit::{
    decode, Body, CommitMsg, DecodeError, DropReason, RAck, RInv, RVal, TxId, WIRE_VERSION,
};

fn inv(tx_id: TxId, followers: &[u32]) -> RInv {
    RInv {
        tx_id,
        epoch_id: EpochId(1),
        origin: EpochId(1),
        followers: followers.iter().map(|f| n(*f)).collect(),
        writes: vec![w("x", 1, "a")],
        prev_val: true,
        replay: false,
    }
}

fn send(net: &mut Net, from: u32, to: u32, msg: CommitMsg) {
    net.queue.push(common::InFlight {
        from: n(from),
        to: n(to),
        msg,
    });
    net.run();
}

fn dropped(net: &Net, at: u32, reason: DropReason) -> u64 {
    net.node(at).stats().dropped(reason)
}

const T: TxId = TxId {
    node: roost_cluster::NodeId(1),
    local: 7,
};

#[test]
fn wrong_epoch_is_dropped() {
    let mut net = Net::new(3);
    send(
        &mut net,
        1,
        2,
        CommitMsg::new(EpochId(9), Body::RInv(inv(T, &[2]))),
    );
    assert_eq!(dropped(&net, 2, DropReason::WrongEpoch), 1);
    // An inner epoch that disagrees with the envelope's.
    let mut m = inv(T, &[2]);
    m.epoch_id = EpochId(0);
    send(&mut net, 1, 2, CommitMsg::new(EpochId(1), Body::RInv(m)));
    assert_eq!(dropped(&net, 2, DropReason::WrongEpoch), 2);
    assert_eq!(net.node(2).stored() + net.node(2).held(), 0);
}

#[test]
fn wrong_version_is_dropped() {
    let mut net = Net::new(3);
    let mut m = CommitMsg::new(EpochId(1), Body::RInv(inv(T, &[2])));
    m.version = WIRE_VERSION + 1;
    send(&mut net, 1, 2, m);
    assert_eq!(dropped(&net, 2, DropReason::UnsupportedVersion), 1);
}

#[test]
fn forged_and_misaddressed_r_inv_are_dropped() {
    let mut net = Net::new(3);
    // Node 3 sends an R-INV of node 1's pipeline.
    send(
        &mut net,
        3,
        2,
        CommitMsg::new(EpochId(1), Body::RInv(inv(T, &[2]))),
    );
    assert_eq!(dropped(&net, 2, DropReason::ForgedSender), 1);
    // A replay from a node that is no follower of the slot.
    let mut m = inv(T, &[2]);
    m.replay = true;
    send(&mut net, 3, 2, CommitMsg::new(EpochId(1), Body::RInv(m)));
    assert_eq!(dropped(&net, 2, DropReason::ForgedSender), 2);
    // Not a follower.
    send(
        &mut net,
        1,
        2,
        CommitMsg::new(EpochId(1), Body::RInv(inv(T, &[3]))),
    );
    assert_eq!(dropped(&net, 2, DropReason::NotFollower), 1);
    // From a node outside the view.
    send(
        &mut net,
        9,
        2,
        CommitMsg::new(EpochId(1), Body::RInv(inv(T, &[2]))),
    );
    assert_eq!(dropped(&net, 2, DropReason::SenderNotMember), 1);
    assert_eq!(net.node(2).stored() + net.node(2).held(), 0);
}

#[test]
fn malformed_r_inv_is_dropped() {
    let mut net = Net::new(3);
    let cases: Vec<RInv> = vec![
        RInv {
            writes: vec![],
            ..inv(T, &[2])
        },
        RInv {
            origin: EpochId(2),
            ..inv(T, &[2])
        },
        RInv {
            tx_id: TxId::new(n(1), 0),
            ..inv(T, &[2])
        },
        RInv {
            writes: vec![w("x", 0, "a")],
            ..inv(T, &[2])
        },
        RInv {
            writes: vec![w("x", 1, "a"), w("x", 2, "b")],
            ..inv(T, &[2])
        },
        inv(T, &[2, 2]),
        inv(T, &[1, 2]),
    ];
    let count = cases.len() as u64;
    for m in cases {
        send(&mut net, 1, 2, CommitMsg::new(EpochId(1), Body::RInv(m)));
    }
    assert_eq!(dropped(&net, 2, DropReason::Malformed), count);
    let big = RInv {
        writes: vec![w("x", 1, &"z".repeat((1 << 20) + 1))],
        ..inv(T, &[2])
    };
    send(&mut net, 1, 2, CommitMsg::new(EpochId(1), Body::RInv(big)));
    assert_eq!(dropped(&net, 2, DropReason::Oversized), 1);
    assert_eq!(net.node(2).stored() + net.node(2).held(), 0);
}

#[test]
fn unknown_acks_and_vals_are_dropped() {
    let mut net = Net::new(3);
    let ack = |tx_id| {
        CommitMsg::new(
            EpochId(1),
            Body::RAck(RAck {
                tx_id,
                epoch_id: EpochId(1),
            }),
        )
    };
    // An ack of a slot node 1 never issued.
    send(&mut net, 2, 1, ack(TxId::new(n(1), 1 << 40)));
    assert_eq!(dropped(&net, 1, DropReason::Unknown), 1);
    // An ack of a replay node 1 does not run.
    send(&mut net, 2, 1, ack(TxId::new(n(3), 5)));
    assert_eq!(dropped(&net, 1, DropReason::Unknown), 2);
    // An ack from a node that is not a follower.
    let tx = net.commit(1, vec![w("x", 1, "a")], &[2]).unwrap();
    net.queue.clear();
    send(&mut net, 3, 1, ack(tx));
    assert_eq!(dropped(&net, 1, DropReason::NotFollower), 1);
    assert!(!net.is_committed(tx));
    // An R-VAL of one's own pipeline from someone else.
    let val = CommitMsg::new(
        EpochId(1),
        Body::RVal(RVal {
            tx_id: tx,
            epoch_id: EpochId(1),
        }),
    );
    send(&mut net, 2, 1, val);
    assert_eq!(dropped(&net, 1, DropReason::ForgedSender), 1);
    // An R-VAL from a node that is no follower of the slot node 2 stores.
    let mut net = Net::new(3);
    let tx2 = net.commit(1, vec![w("y", 1, "b")], &[2]).unwrap();
    net.deliver_first(|m| m.to == n(2));
    let val = |tx_id| {
        CommitMsg::new(
            EpochId(1),
            Body::RVal(RVal {
                tx_id,
                epoch_id: EpochId(1),
            }),
        )
    };
    send(&mut net, 3, 2, val(tx2));
    assert_eq!(dropped(&net, 2, DropReason::ForgedSender), 1);
    // An R-VAL of a slot nobody stores, from a third node.
    send(&mut net, 3, 2, val(T));
    assert_eq!(dropped(&net, 2, DropReason::Stale), 1);
}

#[test]
fn decode_round_trips_and_refuses_garbage() {
    let msg = CommitMsg::new(EpochId(3), Body::RInv(inv(T, &[2, 3])));
    let bytes = msg.encode();
    assert_eq!(decode(&bytes), Ok(msg.clone()));
    for cut in 0..bytes.len() {
        assert!(
            decode(&bytes[..cut]).is_err(),
            "a prefix of {cut} bytes decoded"
        );
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(decode(&longer), Err(DecodeError::Trailing(1)));
    let mut other = msg;
    other.version = WIRE_VERSION + 1;
    assert_eq!(
        decode(&other.encode()),
        Err(DecodeError::UnsupportedVersion(WIRE_VERSION + 1))
    );
    // Arbitrary bytes: errors or messages, never a panic.
    let mut x: u64 = 1;
    for len in 0..2000 {
        let junk: Vec<u8> = (0..len % 64)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 56) as u8
            })
            .collect();
        let _ = decode(&junk);
    }
    for body in [
        Body::RAck(RAck {
            tx_id: T,
            epoch_id: EpochId(1),
        }),
        Body::RVal(RVal {
            tx_id: T,
            epoch_id: EpochId(1),
        }),
    ] {
        let m = CommitMsg::new(EpochId(1), body);
        assert_eq!(decode(&m.encode()), Ok(m));
    }
}

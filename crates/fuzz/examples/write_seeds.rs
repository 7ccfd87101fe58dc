//! Writes the binary seeds of the fuzz corpora (`fuzz/corpus/<target>/`)
//! with the crates' own encoders: transport frames, handshake messages,
//! site frames, and the configurations' default TOML. Run once when a wire
//! format changes: `cargo run -p roost-fuzz --example write_seeds`.

use std::path::{Path, PathBuf};

use roost_bcounter::{Bound, ReplicaId, RequestMode, TransferRequest};
use roost_cluster::config::ClusterConfig;
use roost_cluster::node::NodeMsg;
use roost_cluster::register::{RegisterMsg, Tag};
use roost_escrow::logic::Counter;
use roost_escrow::wire::{self, Frame, StateEntry, TransferResult, WeakDelta};
use roost_net::auth::{encode_handshake, HandshakeMsg};
use roost_net::frame::{encode_frame, Envelope, EpochId};
use roost_net::NodeId;

fn corpus(target: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    std::fs::create_dir_all(&dir).expect("corpus folder");
    dir
}

fn write(target: &str, name: &str, bytes: &[u8]) {
    std::fs::write(corpus(target).join(name), bytes).expect("seed written");
}

fn main() {
    let envelope = |msg: RegisterMsg| {
        encode_frame(&Envelope::new(
            NodeId(0),
            NodeId(1),
            EpochId(3),
            NodeMsg::<RegisterMsg>::App(msg),
        ))
        .expect("encodes")
    };
    let tag = Tag {
        counter: 7,
        writer: 1,
        incarnation: 1,
    };
    let mut two = envelope(RegisterMsg::Query { op: 1 });
    two.extend(envelope(RegisterMsg::QueryReply {
        op: 1,
        tag,
        value: 42,
    }));
    write("net_frame", "query-then-reply", &two);
    write(
        "net_frame",
        "store",
        &envelope(RegisterMsg::Store {
            op: 2,
            tag,
            value: u64::MAX,
        }),
    );

    let hello = encode_handshake(&HandshakeMsg::Hello {
        from: NodeId(0),
        to: NodeId(1),
        nonce: [1; 32],
    });
    let challenge = encode_handshake(&HandshakeMsg::Challenge {
        from: NodeId(1),
        nonce: [2; 32],
        mac: [3; 32],
    });
    let response = encode_handshake(&HandshakeMsg::Response { mac: [4; 32] });
    write(
        "net_handshake",
        "hello-response",
        &[hello, response.clone()].concat(),
    );
    write(
        "net_handshake",
        "challenge",
        &[challenge, response].concat(),
    );

    let mut counter = Counter::new(Bound::Lower, 0, ReplicaId(0), 3).expect("a counter");
    counter.increment(7).expect("increments");
    counter.transfer(2, ReplicaId(1)).expect("transfers");
    let message = counter.message_for(ReplicaId(1)).expect("a message");
    let frames = [
        ("ping", Frame::Ping { id: 1 }),
        (
            "states",
            Frame::States {
                entries: vec![StateEntry {
                    key: "stock".into(),
                    message: message.clone(),
                }],
            },
        ),
        (
            "transfer",
            Frame::Transfer {
                id: 9,
                key: "stock".into(),
                request: TransferRequest {
                    requester: ReplicaId(1),
                    donor: ReplicaId(0),
                    amount: 3,
                    seen_transferred: 2,
                    mode: RequestMode::Sync,
                },
            },
        ),
        (
            "transfer-reply",
            Frame::TransferReply {
                id: 9,
                key: "stock".into(),
                result: TransferResult::Transferred {
                    amount: 3,
                    message: Some(message),
                },
            },
        ),
        (
            "weak-deltas",
            Frame::WeakDeltas {
                entries: vec![WeakDelta {
                    key: "stock".into(),
                    delta: -4,
                }],
            },
        ),
    ];
    for (name, frame) in frames {
        // The target takes a site message's body, as `wire::encode` makes it.
        write("escrow_wire", name, &wire::encode(&frame).expect("encodes"));
    }

    write(
        "cluster_config",
        "local-3",
        ClusterConfig::local(3).to_toml().as_bytes(),
    );
}

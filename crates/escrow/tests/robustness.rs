//! Bad input never panics a site and always gives a clear error: a corrupt
//! counter state in Redis, malformed frames and forged messages from another
//! site. The site keeps serving afterwards.

mod common;

use std::time::Duration;

use roost_bcounter::{ReplicaId, RequestMode, TransferRequest};
use roost_escrow::wire::{encode, read_frame, write_frame, Frame, StateEntry, TransferResult};
use roost_escrow::{
    Bound, Counter, Deployment, Design, EscrowCounters, EscrowError, Flag, Outcome,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn redis(deployment: &Deployment, site: usize) -> redis::aio::MultiplexedConnection {
    roost_escrow::store::connect(&deployment.redis_url(site))
        .await
        .expect("redis")
}

async fn corrupt_state_is_a_clear_error(design: Design) {
    let deployment = Deployment::start(common::fast_config(design))
        .await
        .expect("deployment starts");
    let mut con = redis(&deployment, 0).await;
    let mut client = deployment.client(0).await.expect("client");
    for (key, state) in [
        ("garbage", "not json"),
        ("future", r#"{"version": 9, "counter": {}}"#),
        (
            "overspent",
            r#"{"version": 1, "counter": {"version": 1, "bound": "lower", "k": 0, "rights": {"version": 1, "me": 0, "row": [0, 0, 0], "column": [0, 0, 0], "diagonal": [1, 0, 0], "u": [5, 0, 0]}}}"#,
        ),
        (
            "someone-else",
            r#"{"version": 1, "counter": {"version": 1, "bound": "lower", "k": 0, "rights": {"version": 1, "me": 1, "row": [0, 0, 0], "column": [0, 0, 0], "diagonal": [0, 0, 0], "u": [0, 0, 0]}}}"#,
        ),
    ] {
        let _: () = redis::cmd("HSET")
            .arg(roost_escrow::store::counter_key(key))
            .arg("state")
            .arg(state)
            .arg("token")
            .arg("t")
            .query_async(&mut con)
            .await
            .expect("hset");
        let _: () = redis::cmd("SADD")
            .arg(roost_escrow::store::KEYS_SET)
            .arg(key)
            .query_async(&mut con)
            .await
            .expect("sadd");
        for result in [
            client.dec(key, 1, Flag::Global).await.map(|_| 0),
            client.read(key).await,
        ] {
            match result {
                Err(error @ EscrowError::CorruptState { .. }) => {
                    let message = error.to_string();
                    assert!(message.contains(key), "{message}");
                }
                other => panic!(
                    "{}: {key}: expected a corrupt-state error, got {other:?}",
                    design.variant()
                ),
            }
        }
    }
    // A state missing its token is corrupt too.
    let _: () = redis::cmd("HSET")
        .arg(roost_escrow::store::counter_key("tokenless"))
        .arg("state")
        .arg("{}")
        .query_async(&mut con)
        .await
        .expect("hset");
    assert!(matches!(
        client.read("tokenless").await,
        Err(EscrowError::CorruptState { .. })
    ));
    // Invalid keys are refused before touching Redis.
    assert!(matches!(
        client.read("").await,
        Err(EscrowError::InvalidKey { .. })
    ));
    assert!(matches!(
        client.dec("tab\there", 1, Flag::StrictLocal).await,
        Err(EscrowError::InvalidKey { .. })
    ));
    // The site still works, and still propagates (past the corrupt keys).
    client
        .create("fine", Bound::Lower, 0)
        .await
        .expect("create");
    assert_eq!(
        client.inc("fine", 5, Flag::StrictLocal).await.expect("inc"),
        Outcome::Ok
    );
    assert_eq!(
        client.dec("fine", 2, Flag::StrictLocal).await.expect("dec"),
        Outcome::Ok
    );
    assert!(
        deployment
            .wait_value_everywhere("fine", 3, Duration::from_secs(5))
            .await,
        "{:?}",
        deployment.values("fine").await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_state_in_redis_is_a_clear_error() {
    common::require_redis();
    let _one = common::exclusive().await;
    corrupt_state_is_a_clear_error(Design::ServerBased).await;
    corrupt_state_is_a_clear_error(Design::ClientBased).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weak_corrupt_value_is_a_clear_error() {
    common::require_redis();
    let _one = common::exclusive().await;
    let deployment = Deployment::start(common::fast_config(Design::Weak))
        .await
        .expect("deployment starts");
    let mut client = deployment.client(0).await.expect("client");
    client.create("w", Bound::Lower, 0).await.expect("create");
    let mut con = redis(&deployment, 0).await;
    let _: () = redis::cmd("SET")
        .arg(roost_escrow::weak::weak_value_key("w"))
        .arg("twelve")
        .query_async(&mut con)
        .await
        .expect("set");
    assert!(matches!(
        client.dec("w", 1, Flag::StrictLocal).await,
        Err(EscrowError::CorruptState { .. })
    ));
    assert!(matches!(
        client.create("w", Bound::Upper, 0).await,
        Err(EscrowError::Conflict { .. })
    ));
}

/// Connects to site 0's peer port as site `from` of `sites`; returns the
/// stream once the site answered (or `None` if it closed the connection).
async fn hello(addr: std::net::SocketAddr, from: u32, sites: u32) -> Option<TcpStream> {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    write_frame(&mut stream, &Frame::Hello { site: from, sites })
        .await
        .expect("write");
    match tokio::time::timeout(Duration::from_secs(2), read_frame(&mut stream)).await {
        Ok(Ok(Some(Frame::HelloAck { site: 0 }))) => Some(stream),
        _ => None,
    }
}

/// Whether the site closed the connection (EOF within 2 s).
async fn closed(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_forged_peer_messages_are_refused() {
    common::require_redis();
    let _one = common::exclusive().await;
    // No proactive transfers: site 0 keeps exactly the rights it creates.
    let mut config = common::fast_config(Design::ServerBased);
    config.policy.threshold_rights = 0;
    let deployment = Deployment::start(config).await.expect("deployment starts");
    let addr = deployment.site(0).addr();
    let mut client = deployment.client(0).await.expect("client");
    client.create("k", Bound::Lower, 0).await.expect("create");
    assert_eq!(
        client.inc("k", 10, Flag::StrictLocal).await.expect("inc"),
        Outcome::Ok
    );

    // Garbage instead of a hello.
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(b"\x00\x00\x00\x05hello")
        .await
        .expect("write");
    assert!(closed(&mut stream).await, "garbage closes the connection");
    // An oversized frame.
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(&u32::MAX.to_be_bytes())
        .await
        .expect("write");
    assert!(closed(&mut stream).await, "an oversized frame closes it");
    // Hellos from another deployment, from itself, from nowhere.
    assert!(hello(addr, 1, 4).await.is_none(), "wrong number of sites");
    assert!(
        hello(addr, 0, 3).await.is_none(),
        "site 0 talking to itself"
    );
    assert!(hello(addr, 7, 3).await.is_none(), "no such site");
    // A frame of an unknown version after a good hello.
    let mut stream = hello(addr, 1, 3).await.expect("a good hello is answered");
    let mut bytes = encode(&Frame::States { entries: vec![] }).expect("encode");
    let body = String::from_utf8(bytes.split_off(4)).expect("json");
    let body = body.replace("\"version\":1", "\"version\":2");
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(body.as_bytes());
    stream.write_all(&frame).await.expect("write");
    assert!(closed(&mut stream).await, "an unknown version closes it");

    // Forged: a delta built by site 1 arriving on site 2's connection, a
    // delta addressed to site 1, a request whose requester is not the sender.
    let mut forged = Counter::new(Bound::Lower, 0, ReplicaId(1), 3).expect("counter");
    forged.increment(1000).expect("inc");
    forged.transfer(1000, ReplicaId(0)).expect("transfer");
    let mut stream = hello(addr, 2, 3).await.expect("hello");
    write_frame(
        &mut stream,
        &Frame::States {
            entries: vec![StateEntry {
                key: "k".to_owned(),
                message: forged.message_for(ReplicaId(0)).expect("delta"),
            }],
        },
    )
    .await
    .expect("write");
    write_frame(
        &mut stream,
        &Frame::States {
            entries: vec![StateEntry {
                key: "k".to_owned(),
                message: forged.message_for(ReplicaId(2)).expect("delta"),
            }],
        },
    )
    .await
    .expect("write");
    let request = TransferRequest {
        requester: ReplicaId(1),
        donor: ReplicaId(0),
        amount: 5,
        seen_transferred: 0,
        mode: RequestMode::Sync,
    };
    write_frame(
        &mut stream,
        &Frame::Transfer {
            id: 1,
            key: "k".to_owned(),
            request,
        },
    )
    .await
    .expect("write");
    // The same request as site 1 would send it, but claiming a transfer
    // site 0 never made.
    let mut stream1 = hello(addr, 1, 3).await.expect("hello");
    write_frame(
        &mut stream1,
        &Frame::Transfer {
            id: 2,
            key: "k".to_owned(),
            request: TransferRequest {
                seen_transferred: 99,
                ..request
            },
        },
    )
    .await
    .expect("write");
    for (stream, id) in [(&mut stream, 1), (&mut stream1, 2)] {
        match tokio::time::timeout(Duration::from_secs(2), read_frame(stream)).await {
            Ok(Ok(Some(Frame::TransferReply {
                id: got,
                result: TransferResult::Error { reason },
                ..
            }))) => {
                assert_eq!(got, id);
                assert!(!reason.is_empty());
            }
            other => panic!("expected an error reply to request {id}, got {other:?}"),
        }
    }

    let stats = deployment.site(0).stats();
    assert!(stats.frames_rejected >= 6, "{stats:?}");
    assert!(stats.merges_rejected >= 2, "{stats:?}");
    // None of it changed anything: site 0 still holds its 10 rights, the
    // value is 10 everywhere, and the site still serves.
    assert_eq!(deployment.rights("k").await.expect("rights")[0], 10);
    assert_eq!(
        client.dec("k", 10, Flag::StrictLocal).await.expect("dec"),
        Outcome::Ok
    );
    assert_eq!(
        client.dec("k", 1, Flag::Global).await.expect("dec"),
        Outcome::Fail
    );
    assert!(
        deployment
            .wait_value_everywhere("k", 0, Duration::from_secs(5))
            .await
    );
}

/// A site whose Redis dies answers with errors (never `Ok`, never a panic);
/// the other sites keep operating with their rights.
async fn store_failure_is_an_error(design: Design) {
    let mut deployment = Deployment::start(common::fast_config(design))
        .await
        .expect("deployment starts");
    for site in 0..3 {
        let mut client = deployment.client(site).await.expect("client");
        client.create("k", Bound::Lower, 0).await.expect("create");
    }
    let mut client = deployment.client(0).await.expect("client");
    assert_eq!(
        client.inc("k", 300, Flag::StrictLocal).await.expect("inc"),
        Outcome::Ok
    );
    common::wait_rights_everywhere(&deployment, "k").await;
    let mut at_2 = deployment.client(2).await.expect("client");
    deployment.kill_redis(0);
    for _ in 0..3 {
        match client.dec("k", 1, Flag::StrictLocal).await {
            Err(EscrowError::Redis { reason }) => assert!(!reason.is_empty()),
            other => panic!(
                "{}: expected a redis error, got {other:?}",
                design.variant()
            ),
        }
    }
    assert_eq!(
        at_2.dec("k", 1, Flag::StrictLocal)
            .await
            .expect("site 2 works"),
        Outcome::Ok
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_store_gives_errors_and_other_sites_go_on() {
    common::require_redis();
    let _one = common::exclusive().await;
    store_failure_is_an_error(Design::ServerBased).await;
    store_failure_is_an_error(Design::ClientBased).await;
}

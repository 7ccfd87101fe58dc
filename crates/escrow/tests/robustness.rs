//! Bad input never panics a site and always gives a clear error: a corrupt
//! counter state in Redis, malformed frames and forged messages from another
//! site. The site keeps serving afterwards.

mod common;

use std::time::Duration;

use roost_bcounter::{ReplicaId, RequestMode, TransferRequest};
use roost_escrow::peer::site_node;
use roost_escrow::wire::{encode, Frame, SiteMessage, StateEntry};
use roost_escrow::{Bound, Deployment, Design, EscrowCounters, EscrowError, Flag, Outcome};
use roost_net::frame::encode_frame_into;
use roost_net::EpochId;
use tokio::io::AsyncWriteExt;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_forged_peer_messages_are_refused() {
    common::require_redis();
    let _one = common::exclusive().await;
    // No proactive transfers: site 0 keeps exactly the rights it creates.
    let mut config = common::fast_config(Design::ServerBased);
    config.policy.threshold_rights = 0;
    let deployment = Deployment::start(config).await.expect("deployment starts");
    let addr = deployment.site(0).addr();
    let secret = deployment.secret().clone();
    let mut client = deployment.client(0).await.expect("client");
    client.create("k", Bound::Lower, 0).await.expect("create");
    assert_eq!(
        client.inc("k", 10, Flag::StrictLocal).await.expect("inc"),
        Outcome::Ok
    );
    let (n0, n1, n2) = (site_node(0), site_node(1), site_node(2));

    // Garbage instead of a handshake, and an oversized length: the
    // transport's handshake refuses both.
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(b"\x00\x00\x00\x05hello")
        .await
        .expect("write");
    assert!(
        common::closed(&mut stream).await,
        "garbage closes the connection"
    );
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(&u32::MAX.to_le_bytes())
        .await
        .expect("write");
    assert!(
        common::closed(&mut stream).await,
        "an oversized frame closes it"
    );
    // Another deployment's secret, a node that is not a site.
    let other = roost_net::ClusterSecret::random();
    assert!(common::impostor(addr, n1, n0, Some(&other)).await.is_err());
    assert!(
        common::impostor(addr, roost_net::NodeId(7), n0, Some(&secret))
            .await
            .is_err()
    );

    // Authenticated as site 1: a body of an unknown version, and one that
    // is not JSON, are dropped.
    let mut stream1 = common::impostor(addr, n1, n0, Some(&secret))
        .await
        .expect("site 1 authenticates");
    let body = String::from_utf8(encode(&Frame::States { entries: vec![] }).expect("encode"))
        .expect("json")
        .replace("\"version\":1", "\"version\":2");
    for body in [body.into_bytes(), b"\xff\xfe".to_vec()] {
        let mut buf = Vec::new();
        encode_frame_into(
            &mut buf,
            n1,
            n0,
            EpochId(0),
            &SiteMessage { body },
            u32::MAX,
        )
        .expect("frame");
        stream1.write_all(&buf).await.expect("write");
    }

    // Forged: a delta built by site 1 arriving on site 2's link, a delta
    // addressed to site 2 on site 1's, a request whose requester is not the
    // sender, and one claiming a transfer site 0 never made.
    let mut stream2 = common::impostor(addr, n2, n0, Some(&secret))
        .await
        .expect("site 2 authenticates");
    let states = |message| Frame::States {
        entries: vec![StateEntry {
            key: "k".to_owned(),
            message,
        }],
    };
    common::send_frame(
        &mut stream2,
        n2,
        n0,
        &states(common::forged_delta(1, 0, 1000)),
    )
    .await;
    common::send_frame(
        &mut stream1,
        n1,
        n0,
        &states(common::forged_delta(1, 2, 1000)),
    )
    .await;
    let request = TransferRequest {
        requester: ReplicaId(1),
        donor: ReplicaId(0),
        amount: 5,
        seen_transferred: 0,
        mode: RequestMode::Sync,
    };
    let transfer = |id, request| Frame::Transfer {
        id,
        key: "k".to_owned(),
        request,
    };
    common::send_frame(&mut stream2, n2, n0, &transfer(1, request)).await;
    let claimed = TransferRequest {
        seen_transferred: 99,
        ..request
    };
    common::send_frame(&mut stream1, n1, n0, &transfer(2, claimed)).await;

    let started = std::time::Instant::now();
    let stats = loop {
        let stats = deployment.site(0).stats();
        if stats.frames_rejected >= 2 && stats.merges_rejected >= 2 {
            break stats;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "{stats:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(
        deployment.site(0).link_metrics().auth_failures >= 4,
        "{:?}",
        deployment.site(0).link_metrics()
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(deployment.site(0).stats().donations, 0, "{stats:?}");
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

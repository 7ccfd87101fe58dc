//! Authenticated transports over real sockets on loopback: peers with the
//! cluster secret talk; a node with another secret, without one, or missing
//! from the peer table, a raw impostor and garbage handshakes deliver nothing
//! and are disconnected, while the real peers keep working; reconnects redo
//! the handshake.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use roost_net::auth::{
    self, decode_handshake, encode_handshake, verify_mac, HandshakeMsg, Role, Transcript,
    HANDSHAKE_MAGIC, MAC_BYTES, NONCE_BYTES,
};
use roost_net::frame::encode_frame;
use roost_net::{
    ClusterSecret, ConfigError, Envelope, EpochId, Inbox, NodeId, StartError, Transport,
    TransportConfig,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type Msg = (u64, String);
type Node = (Transport<Msg>, Inbox<Msg>);

fn secret(byte: u8) -> ClusterSecret {
    ClusterSecret::new(vec![byte; 32]).unwrap()
}

fn config(auth: Option<ClusterSecret>) -> TransportConfig {
    TransportConfig {
        auth,
        reconnect_backoff_min_ms: 5,
        reconnect_backoff_max_ms: 100,
        handshake_timeout_ms: 1_000,
        ..TransportConfig::default()
    }
}

async fn listener() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").await.unwrap()
}

/// Starts one node per secret (`ids[i]` with `secrets[i]`); every node's peer
/// table lists all the others.
async fn cluster(ids: &[u32], secrets: Vec<Option<ClusterSecret>>) -> Vec<Node> {
    let mut listeners = Vec::new();
    for _ in ids {
        listeners.push(listener().await);
    }
    let addrs: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    let mut nodes = Vec::new();
    for ((listener, &id), auth) in listeners.into_iter().zip(ids).zip(secrets) {
        let peers = ids
            .iter()
            .zip(&addrs)
            .filter(|(&peer, _)| peer != id)
            .map(|(&peer, &addr)| (NodeId(peer), addr))
            .collect();
        nodes.push(Transport::start(NodeId(id), listener, peers, config(auth)).unwrap());
    }
    nodes
}

async fn recv_within(inbox: &mut Inbox<Msg>, ms: u64) -> Option<Envelope<Msg>> {
    tokio::time::timeout(Duration::from_millis(ms), inbox.recv())
        .await
        .ok()
        .flatten()
}

/// Everything already in `inbox`.
fn drain(inbox: &mut Inbox<Msg>) -> Vec<Envelope<Msg>> {
    std::iter::from_fn(|| inbox.try_recv()).collect()
}

/// Waits until the other end closes `stream` (EOF or reset), reading and
/// discarding whatever it sends first; panics if it stays open for 3 s.
async fn assert_closed(stream: &mut TcpStream, what: &str) {
    let closed = tokio::time::timeout(Duration::from_secs(3), async {
        let mut buf = [0u8; 256];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "{what}: connection left open");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_with_the_same_secret_exchange_messages() {
    let mut nodes = cluster(&[0, 1], vec![Some(secret(1)), Some(secret(1))]).await;
    let (b, mut b_in) = nodes.pop().unwrap();
    let (a, mut a_in) = nodes.pop().unwrap();
    for i in 0..200 {
        a.send_when_ready(NodeId(1), EpochId(2), (i, "to b".into()))
            .await
            .unwrap();
        b.send_when_ready(NodeId(0), EpochId(2), (i, "to a".into()))
            .await
            .unwrap();
    }
    for i in 0..200 {
        let at_b = recv_within(&mut b_in, 5_000).await.expect("delivered to b");
        assert_eq!((at_b.from, at_b.msg.0), (NodeId(0), i));
        let at_a = recv_within(&mut a_in, 5_000).await.expect("delivered to a");
        assert_eq!((at_a.from, at_a.msg.0), (NodeId(1), i));
    }
    for node in [&a, &b] {
        let metrics = node.metrics();
        assert_eq!(metrics.auth_failures, 0, "{metrics:?}");
        assert_eq!(metrics.frames_rejected, 0, "{metrics:?}");
        assert_eq!(metrics.connects, 1, "{metrics:?}");
        assert_eq!(metrics.msgs_received, 200, "{metrics:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_another_secret_delivers_nothing_while_real_peers_keep_working() {
    let secrets = vec![Some(secret(1)), Some(secret(1)), Some(secret(2))];
    let mut nodes = cluster(&[0, 1, 2], secrets).await;
    let (c, mut c_in) = nodes.pop().unwrap();
    let (b, mut b_in) = nodes.pop().unwrap();
    let (a, mut a_in) = nodes.pop().unwrap();
    let mut at_b = Vec::new();
    let deadline = Instant::now() + Duration::from_millis(800);
    let mut i = 0;
    while Instant::now() < deadline {
        let _ = c.send(NodeId(1), EpochId(0), (i, "intruder".into()));
        let _ = c.send(NodeId(0), EpochId(0), (i, "intruder".into()));
        let _ = b.send(NodeId(2), EpochId(0), (i, "leak".into()));
        a.send(NodeId(1), EpochId(0), (i, "legit".into())).unwrap();
        i += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
        at_b.extend(drain(&mut b_in));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    at_b.extend(drain(&mut b_in));
    assert!(
        at_b.iter()
            .all(|e| e.from == NodeId(0) && e.msg.1 == "legit"),
        "only the real peer's messages reach b"
    );
    assert!(
        at_b.len() as u64 >= i / 2,
        "the real peer kept working: {} of {i}",
        at_b.len()
    );
    assert!(drain(&mut a_in).is_empty(), "nothing reached a from c");
    assert!(drain(&mut c_in).is_empty(), "nothing reached c from b");
    let (mb, mc) = (b.metrics(), c.metrics());
    assert!(mb.auth_failures > 0, "{mb:?}");
    assert!(mc.auth_failures > 0, "{mc:?}");
    assert_eq!((mc.msgs_sent, mc.connects, mc.msgs_received), (0, 0, 0));
    // a refused c too, in both directions (the transport dials every peer at
    // start), yet its link to b never broke.
    let ma = a.metrics();
    assert!(ma.auth_failures > 0, "{ma:?}");
    assert_eq!((ma.connects, ma.msgs_received), (1, 0), "{ma:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_missing_from_the_peer_table_is_refused_even_with_the_secret() {
    let (lb, ls) = (listener().await, listener().await);
    let b_addr = lb.local_addr().unwrap();
    let b_peers = BTreeMap::from([(NodeId(0), "127.0.0.1:9".parse().unwrap())]);
    let (b, mut b_in) =
        Transport::<Msg>::start(NodeId(1), lb, b_peers, config(Some(secret(1)))).unwrap();
    let s_peers = BTreeMap::from([(NodeId(1), b_addr)]);
    let (stranger, _s_in) =
        Transport::<Msg>::start(NodeId(7), ls, s_peers, config(Some(secret(1)))).unwrap();
    for i in 0..20 {
        let _ = stranger.send(NodeId(1), EpochId(0), (i, "let me in".into()));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(recv_within(&mut b_in, 200).await.is_none());
    assert!(b.metrics().auth_failures > 0, "{:?}", b.metrics());
    assert_eq!(stranger.metrics().msgs_sent, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_impostor_without_the_handshake_is_disconnected_and_delivers_nothing() {
    let mut nodes = cluster(&[0, 1], vec![Some(secret(1)), Some(secret(1))]).await;
    let (b, mut b_in) = nodes.pop().unwrap();
    let (a, _a_in) = nodes.pop().unwrap();

    // A well-formed envelope, claiming to come from the real peer.
    let forged = encode_frame(&Envelope::new(
        NodeId(0),
        NodeId(1),
        EpochId(0),
        (66u64, "forged".to_owned()),
    ))
    .unwrap();
    let mut raw = TcpStream::connect(b.local_addr()).await.unwrap();
    raw.write_all(&forged).await.unwrap();
    assert_closed(&mut raw, "envelope without handshake").await;

    // One that says hello, then cannot answer the challenge and guesses.
    let mut raw = TcpStream::connect(b.local_addr()).await.unwrap();
    let hello = HandshakeMsg::Hello {
        from: NodeId(0),
        to: NodeId(1),
        nonce: [9; NONCE_BYTES],
    };
    raw.write_all(&encode_handshake(&hello)).await.unwrap();
    let mut challenge = [0u8; 4 + 74];
    raw.read_exact(&mut challenge).await.unwrap();
    assert_eq!(&challenge[4..8], &HANDSHAKE_MAGIC);
    let guess = HandshakeMsg::Response {
        mac: [0x5a; MAC_BYTES],
    };
    raw.write_all(&encode_handshake(&guess)).await.unwrap();
    let _ = raw.write_all(&forged).await;
    assert_closed(&mut raw, "wrong MAC").await;

    // One that connects and says nothing is cut off at the handshake timeout.
    let mut raw = TcpStream::connect(b.local_addr()).await.unwrap();
    assert_closed(&mut raw, "silent").await;

    assert!(
        recv_within(&mut b_in, 300).await.is_none(),
        "nothing delivered"
    );
    let metrics = b.metrics();
    assert_eq!(metrics.auth_failures, 3, "{metrics:?}");
    assert_eq!(metrics.msgs_received, 0, "{metrics:?}");
    // The real peer is unaffected.
    a.send(NodeId(1), EpochId(0), (1, "real".into())).unwrap();
    let envelope = recv_within(&mut b_in, 3_000).await.expect("delivered");
    assert_eq!(
        (envelope.from, envelope.msg.1.as_str()),
        (NodeId(0), "real")
    );
}

/// Runs the dialer's side of the handshake by hand, as node `me`.
async fn handshake_by_hand(stream: &mut TcpStream, key: &ClusterSecret, me: u32, peer: u32) {
    let dialer_nonce = [7; NONCE_BYTES];
    let hello = HandshakeMsg::Hello {
        from: NodeId(me),
        to: NodeId(peer),
        nonce: dialer_nonce,
    };
    stream.write_all(&encode_handshake(&hello)).await.unwrap();
    let mut buf = [0u8; 4 + 74];
    stream.read_exact(&mut buf).await.unwrap();
    let Ok(Some((HandshakeMsg::Challenge { from, nonce, mac }, _))) = decode_handshake(&buf) else {
        panic!("no challenge");
    };
    let transcript = Transcript {
        dialer: NodeId(me),
        acceptor: from,
        dialer_nonce,
        acceptor_nonce: nonce,
    };
    verify_mac(key, &transcript, Role::Acceptor, &mac).unwrap();
    let response = HandshakeMsg::Response {
        mac: auth::mac(key, &transcript, Role::Dialer),
    };
    stream
        .write_all(&encode_handshake(&response))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authenticated_connection_carries_only_its_own_nodes_envelopes() {
    let peers = BTreeMap::from([
        (NodeId(0), "127.0.0.1:9".parse().unwrap()),
        (NodeId(2), "127.0.0.1:9".parse().unwrap()),
    ]);
    let (b, mut b_in) =
        Transport::<Msg>::start(NodeId(1), listener().await, peers, config(Some(secret(1))))
            .unwrap();
    let envelope_from = |from: u32, n: u64| {
        encode_frame(&Envelope::new(
            NodeId(from),
            NodeId(1),
            EpochId(0),
            (n, String::new()),
        ))
        .unwrap()
    };
    let mut raw = TcpStream::connect(b.local_addr()).await.unwrap();
    handshake_by_hand(&mut raw, &secret(1), 2, 1).await;
    raw.write_all(&envelope_from(2, 1)).await.unwrap();
    let first = recv_within(&mut b_in, 3_000)
        .await
        .expect("own id delivered");
    assert_eq!((first.from, first.msg.0), (NodeId(2), 1));
    // Authenticated as node 2, it may not speak for node 0.
    raw.write_all(&envelope_from(0, 2)).await.unwrap();
    assert_closed(&mut raw, "speaking for another node").await;
    assert!(recv_within(&mut b_in, 200).await.is_none());
    let metrics = b.metrics();
    assert_eq!(
        (metrics.frames_rejected, metrics.auth_failures),
        (1, 0),
        "{metrics:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transport_without_a_secret_and_one_with_refuse_each_other() {
    let mut nodes = cluster(&[0, 1], vec![None, Some(secret(1))]).await;
    let (b, mut b_in) = nodes.pop().unwrap();
    let (a, mut a_in) = nodes.pop().unwrap();
    for i in 0..30 {
        let _ = a.send(NodeId(1), EpochId(0), (i, "plain".into()));
        let _ = b.send(NodeId(0), EpochId(0), (i, "secret".into()));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(drain(&mut b_in).is_empty(), "b took a message from a");
    assert!(drain(&mut a_in).is_empty(), "a took a message from b");
    let (ma, mb) = (a.metrics(), b.metrics());
    // b refuses a's envelopes; a refuses b's hellos as bad frames, so b's
    // handshakes fail too.
    assert!(mb.auth_failures > 0, "{mb:?}");
    assert!(ma.frames_rejected > 0, "{ma:?}");
    assert_eq!((ma.msgs_received, mb.msgs_received), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_oversized_handshakes_are_refused_without_harm() {
    let mut nodes = cluster(&[0, 1], vec![Some(secret(1)), Some(secret(1))]).await;
    let (b, mut b_in) = nodes.pop().unwrap();
    let (a, _a_in) = nodes.pop().unwrap();
    let hello = |from: u32, to: u32| {
        encode_handshake(&HandshakeMsg::Hello {
            from: NodeId(from),
            to: NodeId(to),
            nonce: [1; NONCE_BYTES],
        })
    };
    let with_byte = |mut bytes: Vec<u8>, i: usize, byte: u8| {
        bytes[i] = byte;
        bytes
    };
    let mut short_hello = hello(0, 1);
    short_hello.truncate(20);
    short_hello[..4].copy_from_slice(&16u32.to_le_bytes());
    let bad_inputs: Vec<(&str, Vec<u8>)> = vec![
        ("4 GiB length", u32::MAX.to_le_bytes().to_vec()),
        (
            "one byte over the limit",
            [129u32.to_le_bytes().to_vec(), vec![b'R'; 129]].concat(),
        ),
        ("empty", 0u32.to_le_bytes().to_vec()),
        (
            "garbage",
            (0..64u32).map(|i| (i * 37 + 11) as u8).collect::<Vec<u8>>(),
        ),
        (
            "garbage behind a small length",
            [16u32.to_le_bytes().to_vec(), vec![0xff; 16]].concat(),
        ),
        ("wrong version", with_byte(hello(0, 1), 8, 9)),
        ("unknown kind", with_byte(hello(0, 1), 9, 42)),
        ("truncated hello", short_hello),
        ("node not in the peer table", hello(7, 1)),
        ("addressed to another node", hello(0, 5)),
        (
            "challenge instead of hello",
            encode_handshake(&HandshakeMsg::Challenge {
                from: NodeId(0),
                nonce: [2; NONCE_BYTES],
                mac: [3; MAC_BYTES],
            }),
        ),
    ];
    for (what, bytes) in &bad_inputs {
        let mut raw = TcpStream::connect(b.local_addr()).await.unwrap();
        let _ = raw.write_all(bytes).await;
        assert_closed(&mut raw, what).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let metrics = b.metrics();
    assert_eq!(
        metrics.auth_failures,
        bad_inputs.len() as u64,
        "{metrics:?}"
    );
    assert_eq!(metrics.msgs_received, 0);
    assert!(b_in.try_recv().is_none());
    a.send(NodeId(1), EpochId(0), (1, "still fine".into()))
        .unwrap();
    assert_eq!(
        recv_within(&mut b_in, 3_000)
            .await
            .expect("delivered")
            .msg
            .0,
        1
    );
}

/// Binds `addr` again once the previous owner has let go of it.
async fn rebind(addr: SocketAddr) -> TcpListener {
    for _ in 0..100 {
        if let Ok(listener) = TcpListener::bind(addr).await {
            return listener;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("cannot bind {addr} again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnects_redo_the_handshake() {
    let mut nodes = cluster(&[0, 1], vec![Some(secret(1)), Some(secret(1))]).await;
    let (b, mut b_in) = nodes.pop().unwrap();
    let (a, _a_in) = nodes.pop().unwrap();
    let b_addr = b.local_addr();
    a.send(NodeId(1), EpochId(0), (0, "first".into())).unwrap();
    assert_eq!(recv_within(&mut b_in, 3_000).await.unwrap().msg.0, 0);
    b.shutdown();
    drop((b, b_in));
    let peers: BTreeMap<NodeId, SocketAddr> =
        BTreeMap::from([(NodeId(0), "127.0.0.1:9".parse().unwrap())]);

    // Restarted with another secret: a's reconnect fails its handshake.
    let failures_before = a.metrics().auth_failures;
    let (imposter_b, mut imposter_in) = Transport::<Msg>::start(
        NodeId(1),
        rebind(b_addr).await,
        peers.clone(),
        config(Some(secret(2))),
    )
    .unwrap();
    for i in 1..40 {
        let _ = a.send(NodeId(1), EpochId(0), (i, "to the wrong b".into()));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(recv_within(&mut imposter_in, 200).await.is_none());
    assert!(a.metrics().auth_failures > failures_before);
    assert!(imposter_b.metrics().auth_failures > 0);
    imposter_b.shutdown();
    drop((imposter_b, imposter_in));

    // Restarted with the right secret: a reconnects, handshakes, delivers.
    let (_b2, mut b2_in) = Transport::<Msg>::start(
        NodeId(1),
        rebind(b_addr).await,
        peers,
        config(Some(secret(1))),
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut i = 100;
    let arrived = loop {
        assert!(Instant::now() < deadline, "never reconnected");
        let _ = a.send(NodeId(1), EpochId(0), (i, "again".into()));
        i += 1;
        if let Some(envelope) = recv_within(&mut b2_in, 20).await {
            break envelope;
        }
    };
    // (Messages queued while the handshake kept failing may come first: they
    // were never sent to the wrong node, and now reach the right one.)
    assert_eq!(arrived.from, NodeId(0));
    assert!(a.metrics().connects >= 2);
}

#[tokio::test]
async fn bad_auth_settings_are_refused_and_the_secret_is_not_printed() {
    let secret = ClusterSecret::from_hex("0123456789abcdef0123456789ABCDEF").unwrap();
    let zero = TransportConfig {
        handshake_timeout_ms: 0,
        ..config(Some(secret.clone()))
    };
    assert_eq!(
        zero.validate(),
        Err(ConfigError::Zero("handshake_timeout_ms"))
    );
    let started = Transport::<Msg>::start(NodeId(0), listener().await, BTreeMap::new(), zero);
    assert!(matches!(started, Err(StartError::Config(_))));
    let shown = format!("{:?}", config(Some(secret)));
    assert!(!shown.contains("0123456789"), "{shown}");
    assert!(!shown.contains("[1, 35, 69"), "{shown}");
    assert!("0123".parse::<ClusterSecret>().is_err());
    assert!("zz23456789abcdef0123456789abcdef"
        .parse::<ClusterSecret>()
        .is_err());
}

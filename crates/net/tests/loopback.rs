//! The transport over real sockets on loopback (ephemeral ports): delivery,
//! order and batching, bad frames closing only their connection, reconnects,
//! and the chaos layer.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use roost_net::{ChaosSettings, Envelope, EpochId, Inbox, NodeId, Transport, TransportConfig};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

type Msg = (u64, String);

async fn listener() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").await.unwrap()
}

/// Two transports that know each other.
async fn pair(
    config: TransportConfig,
) -> ((Transport<Msg>, Inbox<Msg>), (Transport<Msg>, Inbox<Msg>)) {
    let (la, lb) = (listener().await, listener().await);
    let (aa, ab) = (la.local_addr().unwrap(), lb.local_addr().unwrap());
    let a = Transport::start(
        NodeId(0),
        la,
        BTreeMap::from([(NodeId(1), ab)]),
        config.clone(),
    )
    .unwrap();
    let b = Transport::start(NodeId(1), lb, BTreeMap::from([(NodeId(0), aa)]), config).unwrap();
    (a, b)
}

async fn recv_within(inbox: &mut Inbox<Msg>, ms: u64) -> Option<Envelope<Msg>> {
    tokio::time::timeout(Duration::from_millis(ms), inbox.recv())
        .await
        .ok()
        .flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_arrive_in_order_and_in_batches() {
    let ((a, mut a_in), (b, mut b_in)) = pair(TransportConfig::default()).await;
    const N: u64 = 20_000;
    for i in 0..N {
        // Waits for room rather than dropping when the queue is full.
        a.send_when_ready(NodeId(1), EpochId(3), (i, "x".repeat((i % 7) as usize)))
            .await
            .unwrap();
    }
    for i in 0..N {
        let envelope = recv_within(&mut b_in, 5_000).await.expect("delivered");
        assert_eq!(
            (envelope.from, envelope.to, envelope.epoch),
            (NodeId(0), NodeId(1), EpochId(3))
        );
        assert_eq!(envelope.msg.0, i, "per-connection order");
    }
    let sent = a.metrics();
    assert_eq!(sent.msgs_sent, N);
    assert!(
        sent.batches_sent < N / 4,
        "small messages are batched: {sent:?}"
    );
    assert_eq!(b.metrics().msgs_received, N);
    // And back, plus a message to oneself.
    b.send(NodeId(0), EpochId(3), (7, "back".into())).unwrap();
    b.send(NodeId(1), EpochId(3), (8, "self".into())).unwrap();
    let back = recv_within(&mut a_in, 1_000).await.unwrap();
    assert_eq!((back.from, back.msg.0), (NodeId(1), 7));
    assert_eq!(recv_within(&mut b_in, 1_000).await.unwrap().msg.0, 8);
    assert!(matches!(
        a.send(NodeId(9), EpochId(0), (0, String::new())),
        Err(roost_net::SendError::UnknownPeer(NodeId(9)))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_close_only_their_connection() {
    let config = TransportConfig {
        max_frame_bytes: 1024,
        ..TransportConfig::default()
    };
    let ((a, _a_in), (b, mut b_in)) = pair(config).await;
    let bad_inputs: Vec<Vec<u8>> = vec![
        2_000u32.to_le_bytes().to_vec(), // over the limit
        [5u32.to_le_bytes().to_vec(), vec![1, 0xff, 0xff, 0xff, 0xff]].concat(), // garbage
        [3u32.to_le_bytes().to_vec(), vec![7, 0, 0]].concat(), // unknown version
        vec![0, 0, 0, 0],                // empty frame
    ];
    for (i, bad) in bad_inputs.iter().enumerate() {
        let mut raw = TcpStream::connect(b.local_addr()).await.unwrap();
        raw.write_all(bad).await.unwrap();
        // The node closes the connection: reading sees EOF (or a reset).
        let mut buf = [0u8; 1];
        let closed = tokio::time::timeout(Duration::from_secs(2), async {
            use tokio::io::AsyncReadExt;
            raw.read(&mut buf).await
        })
        .await
        .expect("connection closed in time");
        assert!(matches!(closed, Ok(0) | Err(_)), "input {i}");
    }
    // A frame from a node not in the peer table is rejected too.
    let stranger = roost_net::frame::encode_frame(&Envelope::new(
        NodeId(5),
        NodeId(1),
        EpochId(0),
        (1u64, String::new()),
    ))
    .unwrap();
    let mut raw = TcpStream::connect(b.local_addr()).await.unwrap();
    raw.write_all(&stranger).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(b.metrics().frames_rejected, bad_inputs.len() as u64 + 1);
    // The real peer is unaffected.
    a.send(NodeId(1), EpochId(0), (1, "ok".into())).unwrap();
    assert_eq!(recv_within(&mut b_in, 2_000).await.unwrap().msg.1, "ok");
    // A message too large to send is dropped at the sender, not sent.
    a.send(NodeId(1), EpochId(0), (2, "y".repeat(4096)))
        .unwrap();
    a.send(NodeId(1), EpochId(0), (3, "after".into())).unwrap();
    assert_eq!(recv_within(&mut b_in, 2_000).await.unwrap().msg.0, 3);
    assert_eq!(a.metrics().dropped_unreachable, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sender_reconnects_after_the_peer_restarts() {
    let config = TransportConfig {
        reconnect_backoff_min_ms: 5,
        reconnect_backoff_max_ms: 50,
        ..TransportConfig::default()
    };
    let ((a, _a_in), (b, mut b_in)) = pair(config.clone()).await;
    let b_addr = b.local_addr();
    a.send(NodeId(1), EpochId(0), (1, "first".into())).unwrap();
    assert_eq!(recv_within(&mut b_in, 2_000).await.unwrap().msg.0, 1);
    b.shutdown();
    drop((b, b_in));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let relisten = TcpListener::bind(b_addr).await.unwrap();
    let peers = BTreeMap::from([(NodeId(0), "127.0.0.1:9".parse().unwrap())]);
    let (_b2, mut b2_in) = Transport::<Msg>::start(NodeId(1), relisten, peers, config).unwrap();
    // At most once per connection: messages written into the dead connection
    // are lost, so keep sending until one arrives on the new one.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut i = 2;
    loop {
        assert!(Instant::now() < deadline, "never reconnected");
        let _ = a.send(NodeId(1), EpochId(0), (i, "again".into()));
        i += 1;
        if recv_within(&mut b2_in, 20).await.is_some() {
            break;
        }
    }
    assert!(a.metrics().connects >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_drops_duplicates_delays_and_partitions() {
    let ((a, _a_in), (b, mut b_in)) = pair(TransportConfig::default()).await;
    a.send(NodeId(1), EpochId(0), (0, "warm".into())).unwrap();
    recv_within(&mut b_in, 2_000).await.unwrap();

    a.chaos()
        .set(ChaosSettings {
            drop_probability: 1.0,
            ..ChaosSettings::default()
        })
        .unwrap();
    a.send(NodeId(1), EpochId(0), (1, "dropped".into()))
        .unwrap();
    assert!(recv_within(&mut b_in, 100).await.is_none());

    a.chaos()
        .set(ChaosSettings {
            duplicate_probability: 1.0,
            ..ChaosSettings::default()
        })
        .unwrap();
    a.send(NodeId(1), EpochId(0), (2, "twice".into())).unwrap();
    assert_eq!(recv_within(&mut b_in, 1_000).await.unwrap().msg.0, 2);
    assert_eq!(recv_within(&mut b_in, 1_000).await.unwrap().msg.0, 2);

    a.chaos()
        .set(ChaosSettings {
            delay_ms: 150,
            ..ChaosSettings::default()
        })
        .unwrap();
    let sent = Instant::now();
    a.send(NodeId(1), EpochId(0), (3, "late".into())).unwrap();
    assert_eq!(recv_within(&mut b_in, 2_000).await.unwrap().msg.0, 3);
    assert!(sent.elapsed() >= Duration::from_millis(150));

    // Partitioned on B's side: B drops what A sends, A still gets B's.
    a.chaos().set(ChaosSettings::default()).unwrap();
    b.chaos()
        .set(ChaosSettings {
            partitioned: [NodeId(0)].into(),
            ..ChaosSettings::default()
        })
        .unwrap();
    a.send(NodeId(1), EpochId(0), (4, "cut".into())).unwrap();
    assert!(recv_within(&mut b_in, 150).await.is_none());
    b.chaos().set(ChaosSettings::default()).unwrap();
    a.send(NodeId(1), EpochId(0), (5, "healed".into())).unwrap();
    assert_eq!(recv_within(&mut b_in, 1_000).await.unwrap().msg.0, 5);
    assert!(a
        .chaos()
        .set(ChaosSettings {
            drop_probability: -1.0,
            ..ChaosSettings::default()
        })
        .is_err());
}

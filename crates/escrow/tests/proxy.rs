//! The delay-injecting proxy: adds its delay per direction, keeps order,
//! cuts (closing connections and black-holing new ones) and heals.

use std::time::{Duration, Instant};

use roost_escrow::proxy::{one_way, Region};
use roost_escrow::DelayProxy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An echo server on loopback.
async fn echo() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let (mut read, mut write) = stream.split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
            });
        }
    });
    addr
}

async fn round_trip(stream: &mut TcpStream, payload: &[u8]) -> Duration {
    let started = Instant::now();
    stream.write_all(payload).await.expect("write");
    let mut back = vec![0u8; payload.len()];
    stream.read_exact(&mut back).await.expect("read");
    assert_eq!(back, payload);
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delays_each_direction_and_keeps_order() {
    let upstream = echo().await;
    let proxy = DelayProxy::start(
        upstream,
        Duration::from_millis(15),
        Duration::from_millis(25),
    )
    .await
    .expect("proxy");
    let mut stream = TcpStream::connect(proxy.addr()).await.expect("connect");
    for _ in 0..3 {
        let rtt = round_trip(&mut stream, b"ping").await;
        assert!(rtt >= Duration::from_millis(40), "{rtt:?}");
        assert!(rtt < Duration::from_millis(400), "{rtt:?}");
    }
    // Many small writes arrive in order.
    let mut expected = Vec::new();
    for i in 0..500u32 {
        let chunk = i.to_be_bytes();
        expected.extend_from_slice(&chunk);
        stream.write_all(&chunk).await.expect("write");
    }
    let mut back = vec![0u8; expected.len()];
    stream.read_exact(&mut back).await.expect("read");
    assert_eq!(back, expected);
    // Delays can change at runtime.
    proxy.set_delays(Duration::ZERO, Duration::ZERO);
    let rtt = round_trip(&mut stream, b"fast").await;
    assert!(rtt < Duration::from_millis(40), "{rtt:?}");
    assert!(proxy.bytes() >= 2 * expected.len() as u64);
    assert_eq!(proxy.connections(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_i_delays() {
    let upstream = echo().await;
    // US-West to EU: 163 ms round trip in Table I; a fifth of it here.
    let proxy = DelayProxy::between(upstream, Region::UsWest, Region::Eu, 0.2)
        .await
        .expect("proxy");
    assert_eq!(
        one_way(Region::UsWest, Region::Eu, 0.2),
        Duration::from_micros(16_300)
    );
    let mut stream = TcpStream::connect(proxy.addr()).await.expect("connect");
    let rtt = round_trip(&mut stream, b"x").await;
    assert!(rtt >= Duration::from_micros(32_600), "{rtt:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_and_heal() {
    let upstream = echo().await;
    let proxy = DelayProxy::start(upstream, Duration::from_millis(1), Duration::from_millis(1))
        .await
        .expect("proxy");
    let mut before = TcpStream::connect(proxy.addr()).await.expect("connect");
    round_trip(&mut before, b"up").await;
    proxy.cut();
    assert!(proxy.is_cut());
    // The open connection is closed.
    let mut buf = [0u8; 8];
    let read = tokio::time::timeout(Duration::from_secs(2), before.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0) | Err(_))), "{read:?}");
    // A new one is accepted but nothing comes back.
    let mut during = TcpStream::connect(proxy.addr()).await.expect("connect");
    during.write_all(b"hello?").await.expect("write");
    let read = tokio::time::timeout(Duration::from_millis(200), during.read(&mut buf)).await;
    assert!(read.is_err(), "black-holed: {read:?}");
    proxy.heal();
    // The black-holed connection is closed; new ones work again.
    let read = tokio::time::timeout(Duration::from_secs(2), during.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0) | Err(_))), "{read:?}");
    let mut after = TcpStream::connect(proxy.addr()).await.expect("connect");
    round_trip(&mut after, b"back").await;
}

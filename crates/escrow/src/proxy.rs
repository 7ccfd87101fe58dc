//! Wide-area emulation: a TCP proxy that delays every byte by a fixed one-way
//! delay per direction (order preserved), and can cut the link (a
//! partition) and heal it; plus the round-trip times of the seed's Table I.
//!
//! Delays are applied to data, not to connection set-up: the proxy accepts
//! at once and connects upstream at once, and then every chunk read from one
//! side is written to the other side `delay` after it was read. A cut closes
//! every open connection and black-holes new ones (accepted, read, never
//! forwarded, never answered) until [`DelayProxy::heal`], which closes the
//! black-holed ones so that their owners reconnect.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The three regions of the seed's experiments (Amazon EC2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Region {
    UsEast,
    UsWest,
    Eu,
}

impl Region {
    pub const ALL: [Region; 3] = [Region::UsEast, Region::UsWest, Region::Eu];

    pub fn name(self) -> &'static str {
        match self {
            Region::UsEast => "us-east",
            Region::UsWest => "us-west",
            Region::Eu => "eu",
        }
    }

    fn index(self) -> usize {
        match self {
            Region::UsEast => 0,
            Region::UsWest => 1,
            Region::Eu => 2,
        }
    }
}

/// Table I (ms): the round trip measured from the row's data center to the
/// column's. US-East/US-West 80–83, US-East/EU 93–96, US-West/EU 161–163.
pub const TABLE_I_RTT_MS: [[u64; 3]; 3] = [
    // to:  US-E  US-W   EU
    [0, 80, 96],  // from US-East
    [83, 0, 163], // from US-West
    [93, 161, 0], // from EU
];

pub const RTT_US_EAST_TO_US_WEST_MS: u64 = TABLE_I_RTT_MS[0][1];
pub const RTT_US_EAST_TO_EU_MS: u64 = TABLE_I_RTT_MS[0][2];
pub const RTT_US_WEST_TO_US_EAST_MS: u64 = TABLE_I_RTT_MS[1][0];
pub const RTT_US_WEST_TO_EU_MS: u64 = TABLE_I_RTT_MS[1][2];
pub const RTT_EU_TO_US_EAST_MS: u64 = TABLE_I_RTT_MS[2][0];
pub const RTT_EU_TO_US_WEST_MS: u64 = TABLE_I_RTT_MS[2][1];

/// Table I's round trip from `from` to `to` (zero within a region).
pub fn rtt(from: Region, to: Region) -> Duration {
    Duration::from_millis(TABLE_I_RTT_MS[from.index()][to.index()])
}

/// The one-way delay each direction of a `from` → `to` link gets: half of
/// Table I's round trip, scaled by `scale` (1.0: the paper's; tests use a
/// tenth).
pub fn one_way(from: Region, to: Region, scale: f64) -> Duration {
    rtt(from, to).mul_f64(scale.max(0.0)) / 2
}

struct Shared {
    /// Forward (client → upstream) and backward delays, in microseconds.
    forward_us: AtomicU64,
    backward_us: AtomicU64,
    cut: AtomicBool,
    /// Bumped by `cut` and `heal`: connections of an older generation close.
    generation: watch::Sender<u64>,
    connections: AtomicU64,
    bytes: AtomicU64,
    accept_task: Mutex<Option<JoinHandle<()>>>,
}

/// A delay-injecting TCP proxy on loopback in front of `upstream`.
pub struct DelayProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    shared: Arc<Shared>,
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl DelayProxy {
    /// Listens on `127.0.0.1:0`; `forward` delays what clients send,
    /// `backward` what `upstream` answers.
    pub async fn start(
        upstream: SocketAddr,
        forward: Duration,
        backward: Duration,
    ) -> std::io::Result<DelayProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (generation, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            forward_us: AtomicU64::new(micros(forward)),
            backward_us: AtomicU64::new(micros(backward)),
            cut: AtomicBool::new(false),
            generation,
            connections: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            accept_task: Mutex::new(None),
        });
        let task = tokio::spawn(accept_loop(listener, upstream, Arc::clone(&shared)));
        if let Ok(mut slot) = shared.accept_task.lock() {
            *slot = Some(task);
        }
        Ok(DelayProxy {
            addr,
            upstream,
            shared,
        })
    }

    /// A proxy for a link from a site (or client) in `from` to one in `to`:
    /// half of Table I's round trip each way, times `scale`.
    pub async fn between(
        upstream: SocketAddr,
        from: Region,
        to: Region,
        scale: f64,
    ) -> std::io::Result<DelayProxy> {
        let delay = one_way(from, to, scale);
        DelayProxy::start(upstream, delay, delay).await
    }

    /// Where to connect instead of `upstream`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    pub fn set_delays(&self, forward: Duration, backward: Duration) {
        self.shared
            .forward_us
            .store(micros(forward), Ordering::Relaxed);
        self.shared
            .backward_us
            .store(micros(backward), Ordering::Relaxed);
    }

    /// Partition: close every connection, black-hole new ones.
    pub fn cut(&self) {
        self.shared.cut.store(true, Ordering::SeqCst);
        self.shared.generation.send_modify(|g| *g += 1);
    }

    /// End the partition: close the black-holed connections; new ones are
    /// forwarded again.
    pub fn heal(&self) {
        self.shared.cut.store(false, Ordering::SeqCst);
        self.shared.generation.send_modify(|g| *g += 1);
    }

    pub fn is_cut(&self) -> bool {
        self.shared.cut.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::Relaxed)
    }

    /// Bytes forwarded so far (both directions).
    pub fn bytes(&self) -> u64 {
        self.shared.bytes.load(Ordering::Relaxed)
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        // Close every connection, stop accepting.
        self.shared.generation.send_modify(|g| *g += 1);
        if let Ok(mut slot) = self.shared.accept_task.lock() {
            if let Some(task) = slot.take() {
                task.abort();
            }
        }
    }
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, shared: Arc<Shared>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        shared.connections.fetch_add(1, Ordering::Relaxed);
        let _ = client.set_nodelay(true);
        tokio::spawn(serve(client, upstream, Arc::clone(&shared)));
    }
}

async fn serve(client: TcpStream, upstream: SocketAddr, shared: Arc<Shared>) {
    let mut generation = shared.generation.subscribe();
    let born = *generation.borrow_and_update();
    if shared.cut.load(Ordering::SeqCst) {
        // Black hole: swallow what arrives until the next cut or heal.
        let (mut read, _write) = client.into_split();
        let mut sink = vec![0u8; 16 << 10];
        loop {
            tokio::select! {
                n = read.read(&mut sink) => if matches!(n, Ok(0) | Err(_)) { return },
                _ = generation.wait_for(|g| *g != born) => return,
            }
        }
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let forward = pipe(
        client_read,
        server_write,
        Arc::clone(&shared),
        Direction::Forward,
    );
    let backward = pipe(
        server_read,
        client_write,
        Arc::clone(&shared),
        Direction::Backward,
    );
    // Both directions ending (half-closes are forwarded), or a cut, closes
    // the connection.
    tokio::select! {
        _ = async { tokio::join!(forward, backward) } => {}
        _ = generation.wait_for(|g| *g != born) => {}
    }
}

#[derive(Clone, Copy)]
enum Direction {
    Forward,
    Backward,
}

/// Copies `from` to `to`, each chunk released `delay` after it was read, in
/// order. End of stream is delayed too.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    shared: Arc<Shared>,
    direction: Direction,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Option<Vec<u8>>)>();
    let delay = {
        let shared = Arc::clone(&shared);
        move || {
            let us = match direction {
                Direction::Forward => shared.forward_us.load(Ordering::Relaxed),
                Direction::Backward => shared.backward_us.load(Ordering::Relaxed),
            };
            Duration::from_micros(us)
        }
    };
    let reader = async move {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => {
                    let _ = tx.send((Instant::now() + delay(), None));
                    return;
                }
                Ok(n) => {
                    if tx
                        .send((Instant::now() + delay(), Some(buf[..n].to_vec())))
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
    };
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            match chunk {
                Some(bytes) => {
                    if to.write_all(&bytes).await.is_err() {
                        return;
                    }
                    shared
                        .bytes
                        .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                }
                None => {
                    let _ = to.shutdown().await;
                    return;
                }
            }
        }
    };
    tokio::join!(reader, writer);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_i() {
        assert_eq!(
            rtt(Region::UsEast, Region::UsWest),
            Duration::from_millis(80)
        );
        assert_eq!(
            rtt(Region::UsWest, Region::UsEast),
            Duration::from_millis(83)
        );
        assert_eq!(rtt(Region::UsEast, Region::Eu), Duration::from_millis(96));
        assert_eq!(rtt(Region::Eu, Region::UsEast), Duration::from_millis(93));
        assert_eq!(rtt(Region::UsWest, Region::Eu), Duration::from_millis(163));
        assert_eq!(rtt(Region::Eu, Region::UsWest), Duration::from_millis(161));
        for r in Region::ALL {
            assert_eq!(rtt(r, r), Duration::ZERO);
        }
        assert_eq!(
            one_way(Region::UsWest, Region::Eu, 0.1),
            Duration::from_micros(8150)
        );
    }
}

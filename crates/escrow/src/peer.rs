//! A site's links to the other sites, carried by `roost-net`: one
//! [`Transport`] per site (framed postcard envelopes, batching, reconnect
//! with backoff, bounded per-peer queues, the chaos layer), every connection
//! authenticated with the deployment's [`ClusterSecret`] (HMAC handshake), so
//! only a site of the table, proving the secret, can deliver anything, and
//! every envelope it delivers is `from` the site that authenticated.
//!
//! `roost-net` links are one-way (this site writes to a peer on its own
//! connection and reads the peer on the peer's), so requests carry ids and
//! their replies come back on the peer's link: transfer requests
//! ([`SiteLinks::transfer`]) and heartbeats (`Ping`/`Pong`). A peer counts as
//! up while its `Pong`s come back (a round trip, so a partition that
//! black-holes either direction takes it down after `down_after`); while it
//! is down, batches are not sent (the propagator resends everything when it
//! comes back) and transfer requests fail at once: an unreachable site keeps
//! its rights and the requester moves on to the next donor.
//!
//! A client library of the client-based design reaches its own site's agent
//! over one authenticated connection ([`client_node`] is its identity): it
//! sends `AskDonor` and reads the `TransferReply` on the same connection
//! ([`write_message`] / [`read_message`]).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use roost_bcounter::TransferRequest;
use roost_net::frame::{decode_payload, encode_frame_into, frame_len, LENGTH_PREFIX_BYTES};
use roost_net::{
    Chaos, ClusterSecret, Envelope, EpochId, Inbox, MetricsSnapshot, NodeId, SendError, StartError,
    Transport, TransportConfig,
};
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

use crate::wire::{Frame, SiteMessage, TransferResult, MAX_FRAME_BYTES};

/// Site `i`'s node id on the links.
pub fn site_node(site: usize) -> NodeId {
    NodeId(u32::try_from(site).unwrap_or(u32::MAX))
}

/// Node ids of client libraries start here (sites are `0..sites`).
pub const CLIENT_NODE_BASE: u32 = 1 << 20;

/// The identity of site `i`'s client libraries towards its agent: the agent
/// accepts only this id, so a library can only ask rights for its own site.
pub fn client_node(site: usize) -> NodeId {
    NodeId(CLIENT_NODE_BASE.saturating_add(u32::try_from(site).unwrap_or(u32::MAX)))
}

/// Messages queued per peer before sends are refused (then dropped: a
/// batch is requeued, a reply lost and its request retried by timeout).
pub const OUTBOUND_QUEUE_CAPACITY: usize = 1024;

/// Envelopes received and not yet taken by the site before the transport
/// stops reading (TCP backpressure): with [`MAX_FRAME_BYTES`] each, the most
/// a site buffers from its links.
pub const INBOUND_QUEUE_CAPACITY: usize = 64;

/// The transport's frame limit: a body of [`MAX_FRAME_BYTES`] and its envelope.
pub const MAX_ENVELOPE_BYTES: u32 = MAX_FRAME_BYTES as u32 + 1024;

/// What a link reports when it goes down.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LinkError {
    #[error("site {0} is unreachable")]
    Down(usize),
    #[error("site {peer} did not answer within {waited_ms} ms")]
    Timeout { peer: usize, waited_ms: u64 },
    #[error("the link to site {0} is closed")]
    Closed(usize),
    #[error("the queue to site {0} is full")]
    QueueFull(usize),
    #[error("no link to site {0}")]
    NoSuchPeer(usize),
    #[error("cannot encode or decode a message: {0}")]
    Wire(String),
    #[error("connection: {0}")]
    Io(String),
    #[error("authentication: {0}")]
    Auth(String),
}

/// Timing of the links.
#[derive(Debug, Clone, Copy)]
pub struct LinkConfig {
    /// How often each peer is pinged.
    pub heartbeat_every: Duration,
    /// A peer that answered no ping for this long is down.
    pub down_after: Duration,
    /// Connect and authenticate within this.
    pub handshake_timeout: Duration,
    pub min_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            heartbeat_every: Duration::from_millis(100),
            down_after: Duration::from_secs(1),
            handshake_timeout: Duration::from_secs(1),
            min_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(500),
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

impl LinkConfig {
    /// The transport's configuration for these links; `secret: None` only
    /// for a planted-bug test.
    pub fn transport(&self, secret: Option<ClusterSecret>) -> TransportConfig {
        TransportConfig {
            max_frame_bytes: MAX_ENVELOPE_BYTES,
            outbound_queue_capacity: OUTBOUND_QUEUE_CAPACITY,
            inbound_queue_capacity: INBOUND_QUEUE_CAPACITY,
            reconnect_backoff_min_ms: millis(self.min_backoff),
            reconnect_backoff_max_ms: millis(self.max_backoff).max(millis(self.min_backoff)),
            connect_timeout_ms: millis(self.handshake_timeout),
            handshake_timeout_ms: millis(self.handshake_timeout),
            auth: secret,
            ..TransportConfig::default()
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No pong yet.
    Connecting,
    Up,
    Down,
}

struct Peer {
    state: watch::Sender<State>,
    /// When the last pong came (or the links started).
    last_pong: Mutex<Instant>,
}

type Pending = Mutex<HashMap<(usize, u64), oneshot::Sender<TransferResult>>>;

/// Site `me`'s links to every other site.
pub struct SiteLinks {
    me: usize,
    transport: Transport<SiteMessage>,
    peers: Vec<Option<Peer>>,
    /// Transfer requests waiting for their reply, by (donor, id): a reply
    /// counts only from the site the request went to.
    pending: Pending,
    next_id: AtomicU64,
    config: LinkConfig,
}

impl SiteLinks {
    /// Starts the transport on `listener`, dialing every site of `peers`
    /// (`None` at `me`); what the sites send arrives in the returned inbox.
    pub fn start(
        me: usize,
        listener: TcpListener,
        peers: &[Option<SocketAddr>],
        config: LinkConfig,
        transport: TransportConfig,
    ) -> Result<(SiteLinks, Inbox<SiteMessage>), StartError> {
        let table: BTreeMap<NodeId, SocketAddr> = peers
            .iter()
            .enumerate()
            .filter(|&(peer, _)| peer != me)
            .filter_map(|(peer, addr)| Some((site_node(peer), (*addr)?)))
            .collect();
        let (transport, inbox) = Transport::start(site_node(me), listener, table, transport)?;
        let now = Instant::now();
        let peers = peers
            .iter()
            .enumerate()
            .map(|(peer, addr)| {
                (peer != me && addr.is_some()).then(|| Peer {
                    state: watch::channel(State::Connecting).0,
                    last_pong: Mutex::new(now),
                })
            })
            .collect();
        Ok((
            SiteLinks {
                me,
                transport,
                peers,
                pending: Mutex::new(HashMap::new()),
                next_id: AtomicU64::new(1),
                config,
            },
            inbox,
        ))
    }

    pub fn chaos(&self) -> &Chaos {
        self.transport.chaos()
    }

    pub fn metrics(&self) -> MetricsSnapshot {
        self.transport.metrics()
    }

    pub fn shutdown(&self) {
        self.transport.shutdown();
    }

    fn peer(&self, peer: usize) -> Option<&Peer> {
        self.peers.get(peer).and_then(Option::as_ref)
    }

    pub fn is_up(&self, peer: usize) -> bool {
        self.peer(peer)
            .is_some_and(|p| *p.state.borrow() == State::Up)
    }

    /// Queues `frame` for `peer` without waiting (the reply path: no check
    /// that the peer is up).
    pub fn send_now(&self, peer: usize, frame: &Frame) -> Result<(), LinkError> {
        if self.peer(peer).is_none() {
            return Err(LinkError::NoSuchPeer(peer));
        }
        let message = SiteMessage::new(frame).map_err(|e| LinkError::Wire(e.to_string()))?;
        self.transport
            .send(site_node(peer), EpochId(0), message)
            .map_err(|error| match error {
                SendError::QueueFull(_) => LinkError::QueueFull(peer),
                SendError::UnknownPeer(_) => LinkError::NoSuchPeer(peer),
                SendError::Closed => LinkError::Closed(peer),
            })
    }

    /// Queues a one-way frame if the link is up; `false` if it was dropped.
    pub fn send(&self, peer: usize, frame: &Frame) -> bool {
        self.is_up(peer) && self.send_now(peer, frame).is_ok()
    }

    /// A pong from `peer`: `true` if the peer just came up.
    pub fn pong(&self, peer: usize) -> bool {
        let Some(p) = self.peer(peer) else {
            return false;
        };
        *p.last_pong.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        p.state.send_replace(State::Up) != State::Up
    }

    /// Pings every peer and takes down those silent for `down_after`;
    /// returns the peers that just went down.
    pub fn heartbeat(&self) -> Vec<usize> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut went_down = Vec::new();
        for (index, peer) in self.peers.iter().enumerate() {
            let Some(peer) = peer else {
                continue;
            };
            // A full queue (the peer has been unreachable a while) just
            // drops the ping.
            let _ = self.send_now(index, &Frame::Ping { id });
            let silent = peer
                .last_pong
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .elapsed();
            if silent >= self.config.down_after && *peer.state.borrow() != State::Down {
                let was = peer.state.send_replace(State::Down);
                self.fail_pending(index);
                if was == State::Up {
                    tracing::debug!(site = self.me, peer = index, "escrow link: peer down");
                    went_down.push(index);
                }
            }
        }
        went_down
    }

    /// The requests waiting on `peer` get no answer (their senders drop).
    fn fail_pending(&self, peer: usize) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.retain(|&(donor, _), _| donor != peer);
    }

    /// A reply from `peer` to request `id`; one nobody waits for is ignored.
    pub fn reply(&self, peer: usize, id: u64, result: TransferResult) {
        let waiter = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(peer, id));
        if let Some(waiter) = waiter {
            let _ = waiter.send(result);
        }
    }

    /// Sends a transfer request to `peer` and waits for its answer. A link
    /// that has never been up gets `timeout` to come up; one that is down
    /// fails at once.
    pub async fn transfer(
        &self,
        peer: usize,
        key: &str,
        request: TransferRequest,
        timeout: Duration,
    ) -> Result<TransferResult, LinkError> {
        let link = self.peer(peer).ok_or(LinkError::NoSuchPeer(peer))?;
        let waited_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let deadline = tokio::time::Instant::now() + timeout;
        let mut state = link.state.subscribe();
        let up = tokio::time::timeout_at(deadline, state.wait_for(|s| *s != State::Connecting));
        match up.await {
            Ok(Ok(s)) if *s == State::Up => {}
            Ok(Ok(_)) => return Err(LinkError::Down(peer)),
            Ok(Err(_)) => return Err(LinkError::Closed(peer)),
            Err(_) => return Err(LinkError::Timeout { peer, waited_ms }),
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (reply_tx, reply_rx) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((peer, id), reply_tx);
        let forget = || {
            self.pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&(peer, id));
        };
        let frame = Frame::Transfer {
            id,
            key: key.to_owned(),
            request,
        };
        if let Err(error) = self.send_now(peer, &frame) {
            forget();
            return Err(error);
        }
        match tokio::time::timeout_at(deadline, reply_rx).await {
            Ok(Ok(result)) => Ok(result),
            // The peer went down: its pending requests were dropped.
            Ok(Err(_)) => Err(LinkError::Down(peer)),
            Err(_) => {
                forget();
                Err(LinkError::Timeout { peer, waited_ms })
            }
        }
    }
}

impl Drop for SiteLinks {
    fn drop(&mut self) {
        self.transport.shutdown();
    }
}

/// Writes one frame as a `roost-net` envelope `from` → `to` (the client
/// link's framing, the same as the transport's).
pub async fn write_message<W: AsyncWrite + Unpin>(
    writer: &mut W,
    from: NodeId,
    to: NodeId,
    frame: &Frame,
) -> Result<(), LinkError> {
    let message = SiteMessage::new(frame).map_err(|e| LinkError::Wire(e.to_string()))?;
    let mut buf = Vec::new();
    encode_frame_into(&mut buf, from, to, EpochId(0), &message, MAX_ENVELOPE_BYTES)
        .map_err(|e| LinkError::Wire(e.to_string()))?;
    writer
        .write_all(&buf)
        .await
        .map_err(|e| LinkError::Io(e.to_string()))?;
    writer
        .flush()
        .await
        .map_err(|e| LinkError::Io(e.to_string()))
}

/// Reads one envelope (its length checked before anything is buffered);
/// `Ok(None)` at a clean end of stream.
pub async fn read_message<R: AsyncRead + Unpin>(
    reader: &mut R,
) -> Result<Option<Envelope<SiteMessage>>, LinkError> {
    let mut prefix = [0u8; LENGTH_PREFIX_BYTES];
    match reader.read_exact(&mut prefix).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(LinkError::Io(e.to_string())),
    }
    let len = frame_len(&prefix, MAX_ENVELOPE_BYTES)
        .map_err(|e| LinkError::Wire(e.to_string()))?
        .unwrap_or(0);
    let mut payload = vec![0u8; len];
    reader
        .read_exact(&mut payload)
        .await
        .map_err(|e| LinkError::Io(e.to_string()))?;
    decode_payload(&payload)
        .map(Some)
        .map_err(|e| LinkError::Wire(e.to_string()))
}

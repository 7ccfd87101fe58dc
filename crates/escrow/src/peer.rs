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
use tokio::sync::oneshot;

use crate::wire::{Frame, SiteMessage, TransferResult, MAX_FRAME_BYTES};

/// Node ids on the links are `member * MEMBER_STRIDE + site`: sites stay
/// below the stride (the counter's replica limit is the same), so a site of
/// one node keeps id `site`.
pub const MEMBER_STRIDE: u32 = 1024;

/// The most nodes one site may have (ids stay below [`CLIENT_NODE_BASE`]).
pub const MAX_SITE_MEMBERS: usize = (CLIENT_NODE_BASE / MEMBER_STRIDE) as usize;

/// Site `i`'s node id on the links (its first member's).
pub fn site_node(site: usize) -> NodeId {
    member_node(site, 0)
}

/// The link id of node `member` of site `site` (a site that is a cluster
/// of several nodes: each runs the site's links over the site's shared
/// rows, reachable on its own address).
pub fn member_node(site: usize, member: usize) -> NodeId {
    let site = u32::try_from(site)
        .unwrap_or(u32::MAX)
        .min(MEMBER_STRIDE - 1);
    let member = u32::try_from(member)
        .unwrap_or(u32::MAX)
        .min(MAX_SITE_MEMBERS as u32 - 1);
    NodeId(member * MEMBER_STRIDE + site)
}

/// `(site, member)` of a link id; `None` for a client library's identity.
pub fn link_of(node: NodeId) -> Option<(usize, usize)> {
    if node.0 >= CLIENT_NODE_BASE {
        return None;
    }
    Some((
        (node.0 % MEMBER_STRIDE) as usize,
        (node.0 / MEMBER_STRIDE) as usize,
    ))
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

/// One node of another site.
struct Peer {
    state: Mutex<State>,
    /// When the last pong came (or the links started).
    last_pong: Mutex<Instant>,
}

impl Peer {
    fn state(&self) -> State {
        *self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set(&self, state: State) -> State {
        std::mem::replace(
            &mut *self.state.lock().unwrap_or_else(|e| e.into_inner()),
            state,
        )
    }
}

/// Transfer requests waiting for their reply, by (donor site, the donor's
/// member asked, id).
type Pending = Mutex<HashMap<(usize, usize, u64), oneshot::Sender<TransferResult>>>;

/// How often [`SiteLinks::transfer`] looks whether a site that has not
/// answered a ping yet came up.
const CONNECTING_POLL: Duration = Duration::from_millis(10);

/// Node `member` of site `me`'s links to every node of every other site.
/// A site is up while one of its nodes is; what goes to a site goes to its
/// first node that is up (they share the site's rows, so any serves it),
/// and replies go back to the node that asked.
pub struct SiteLinks {
    me: usize,
    member: usize,
    transport: Transport<SiteMessage>,
    /// Per site, per member; empty at this site (its other nodes share
    /// this one's rows and need no link).
    peers: Vec<Vec<Peer>>,
    /// Transfer requests waiting for their reply: a reply counts only from
    /// the node the request went to.
    pending: Pending,
    next_id: AtomicU64,
    config: LinkConfig,
}

impl SiteLinks {
    /// Starts the transport on `listener` as node `member` of site `me`,
    /// dialing every node of every other site (`peers[site]`: its nodes'
    /// addresses; this site's entry is ignored); what they send arrives in
    /// the returned inbox.
    pub fn start(
        me: usize,
        member: usize,
        listener: TcpListener,
        peers: &[Vec<SocketAddr>],
        config: LinkConfig,
        transport: TransportConfig,
    ) -> Result<(SiteLinks, Inbox<SiteMessage>), StartError> {
        assert!(member < MAX_SITE_MEMBERS, "member {member} of a site");
        assert!(
            peers.len() <= MEMBER_STRIDE as usize,
            "{} sites",
            peers.len()
        );
        let table: BTreeMap<NodeId, SocketAddr> = peers
            .iter()
            .enumerate()
            .filter(|&(site, _)| site != me)
            .flat_map(|(site, addrs)| {
                addrs
                    .iter()
                    .take(MAX_SITE_MEMBERS)
                    .enumerate()
                    .map(move |(m, addr)| (member_node(site, m), *addr))
            })
            .collect();
        let (transport, inbox) =
            Transport::start(member_node(me, member), listener, table, transport)?;
        let now = Instant::now();
        let peers = peers
            .iter()
            .enumerate()
            .map(|(site, addrs)| {
                if site == me {
                    return Vec::new();
                }
                addrs
                    .iter()
                    .take(MAX_SITE_MEMBERS)
                    .map(|_| Peer {
                        state: Mutex::new(State::Connecting),
                        last_pong: Mutex::new(now),
                    })
                    .collect()
            })
            .collect();
        Ok((
            SiteLinks {
                me,
                member,
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

    /// This node's link id.
    pub fn node(&self) -> NodeId {
        member_node(self.me, self.member)
    }

    fn peer(&self, site: usize, member: usize) -> Option<&Peer> {
        self.peers.get(site).and_then(|members| members.get(member))
    }

    /// Whether `from` is a node of another site in the table.
    pub fn knows(&self, site: usize, member: usize) -> bool {
        self.peer(site, member).is_some()
    }

    /// The first node of `site` that is up.
    fn route(&self, site: usize) -> Option<usize> {
        self.peers
            .get(site)?
            .iter()
            .position(|p| p.state() == State::Up)
    }

    pub fn is_up(&self, site: usize) -> bool {
        self.route(site).is_some()
    }

    /// Queues `frame` for node `member` of `site` without waiting (the
    /// reply path: no check that it is up).
    pub fn send_to(&self, site: usize, member: usize, frame: &Frame) -> Result<(), LinkError> {
        if self.peer(site, member).is_none() {
            return Err(LinkError::NoSuchPeer(site));
        }
        let message = SiteMessage::new(frame).map_err(|e| LinkError::Wire(e.to_string()))?;
        self.transport
            .send(member_node(site, member), EpochId(0), message)
            .map_err(|error| match error {
                SendError::QueueFull(_) => LinkError::QueueFull(site),
                SendError::UnknownPeer(_) => LinkError::NoSuchPeer(site),
                SendError::Closed => LinkError::Closed(site),
            })
    }

    /// Queues a one-way frame for `site` if one of its nodes is up; `false`
    /// if it was dropped.
    pub fn send(&self, site: usize, frame: &Frame) -> bool {
        self.route(site)
            .is_some_and(|member| self.send_to(site, member, frame).is_ok())
    }

    /// A pong from node `member` of `site`: `true` if that node just came
    /// up (the propagator then ships the site everything: the node may be
    /// one that missed what went to another).
    pub fn pong(&self, site: usize, member: usize) -> bool {
        let Some(p) = self.peer(site, member) else {
            return false;
        };
        *p.last_pong.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        p.set(State::Up) != State::Up
    }

    /// Pings every node of every other site and takes down those silent
    /// for `down_after`; returns the sites that just went down (none of
    /// their nodes up any more).
    pub fn heartbeat(&self) -> Vec<usize> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut went_down = Vec::new();
        for (site, members) in self.peers.iter().enumerate() {
            let was_up = self.is_up(site);
            for (member, peer) in members.iter().enumerate() {
                // A full queue (the node has been unreachable a while) just
                // drops the ping.
                let _ = self.send_to(site, member, &Frame::Ping { id });
                let silent = peer
                    .last_pong
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .elapsed();
                if silent >= self.config.down_after && peer.state() != State::Down {
                    peer.set(State::Down);
                    self.fail_pending(site, member);
                }
            }
            if was_up && !self.is_up(site) {
                tracing::debug!(site = self.me, peer = site, "escrow link: peer down");
                went_down.push(site);
            }
        }
        went_down
    }

    /// The requests waiting on that node get no answer (their senders drop).
    fn fail_pending(&self, site: usize, member: usize) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.retain(|&(donor, asked, _), _| (donor, asked) != (site, member));
    }

    /// A reply from node `member` of `site` to request `id`; one nobody
    /// waits for (or from another node) is ignored.
    pub fn reply(&self, site: usize, member: usize, id: u64, result: TransferResult) {
        let waiter = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(site, member, id));
        if let Some(waiter) = waiter {
            let _ = waiter.send(result);
        }
    }

    /// Sends a transfer request to `site` (its first node that is up) and
    /// waits for its answer. A site none of whose nodes has answered a ping
    /// yet gets `timeout` to come up; one whose nodes are all down fails at
    /// once.
    pub async fn transfer(
        &self,
        site: usize,
        key: &str,
        request: TransferRequest,
        timeout: Duration,
    ) -> Result<TransferResult, LinkError> {
        let members = self
            .peers
            .get(site)
            .filter(|m| !m.is_empty())
            .ok_or(LinkError::NoSuchPeer(site))?;
        let waited_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let deadline = tokio::time::Instant::now() + timeout;
        let member = loop {
            if let Some(member) = self.route(site) {
                break member;
            }
            if members.iter().all(|p| p.state() == State::Down) {
                return Err(LinkError::Down(site));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(LinkError::Timeout {
                    peer: site,
                    waited_ms,
                });
            }
            tokio::time::sleep(CONNECTING_POLL).await;
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (reply_tx, reply_rx) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((site, member, id), reply_tx);
        let forget = || {
            self.pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&(site, member, id));
        };
        let frame = Frame::Transfer {
            id,
            key: key.to_owned(),
            request,
        };
        if let Err(error) = self.send_to(site, member, &frame) {
            forget();
            return Err(error);
        }
        match tokio::time::timeout_at(deadline, reply_rx).await {
            Ok(Ok(result)) => Ok(result),
            // The node went down: its pending requests were dropped.
            Ok(Err(_)) => Err(LinkError::Down(site)),
            Err(_) => {
                forget();
                Err(LinkError::Timeout {
                    peer: site,
                    waited_ms,
                })
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

//! The TCP transport: one outbound connection per peer (this node writes, the
//! peer reads), so each direction has exactly one writer and one reader.
//!
//! * **Framing and limits.** Frames as in [`crate::frame`]; a frame over
//!   `max_frame_bytes`, a malformed one, or one addressed to another node or
//!   from an unknown node closes that connection with a logged error.
//! * **Batching.** Each peer has a bounded queue of messages; its writer task
//!   takes one message, then whatever else is queued (up to `max_batch_bytes`
//!   and `max_batch_msgs`), encodes them all into one buffer and writes it with
//!   one system call.
//! * **Reconnect.** The writer reconnects with exponential backoff
//!   (`reconnect_backoff_min_ms` doubling to `reconnect_backoff_max_ms`).
//! * **At most once per connection.** TCP neither duplicates nor reorders; a
//!   batch being written when a connection breaks is lost, never resent.
//!   Protocols above retransmit what they need.
//! * **Chaos.** [`Chaos`] decides each outgoing message's fate, and incoming
//!   messages from partitioned peers are dropped.
//! * **Authentication.** With `auth: Some(secret)`, every new connection (and
//!   every reconnect) first runs the mutual challenge-response handshake of
//!   [`crate::auth`], bounded by `handshake_timeout_ms`: the dialer sends a
//!   hello with its id and a nonce, the acceptor answers with its nonce and an
//!   HMAC-SHA256 keyed with the secret over both nonces, both ids and its role,
//!   and the dialer answers with its own. Until that succeeds the dialer sends
//!   no envelope and the acceptor reads none; afterwards the acceptor takes only
//!   envelopes `from` the node that authenticated. A failed handshake (another
//!   secret, no secret, garbage, a timeout, a node not in the peer table) closes
//!   that connection with a logged error and counts in `auth_failures`; the
//!   dialer retries with its reconnect backoff. It authenticates connections; it
//!   does not encrypt or MAC the envelopes that follow (for that, use mTLS).
//!   With `auth: None` connections carry envelopes straight away, as before;
//!   a node with a secret and one without refuse each other.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::auth::{self, ClusterSecret};
use crate::chaos::{Chaos, Verdict};
use crate::frame::{decode_frame, encode_frame_into, Envelope, EpochId, NodeId};
use crate::frame::{DEFAULT_MAX_FRAME_BYTES, LENGTH_PREFIX_BYTES};
use crate::metrics::{add, Metrics, MetricsSnapshot};

/// A message type the transport can carry.
pub trait Message: Serialize + DeserializeOwned + Clone + Send + 'static {}
impl<T: Serialize + DeserializeOwned + Clone + Send + 'static> Message for T {}

#[derive(Debug, Clone, PartialEq)]
pub struct TransportConfig {
    pub max_frame_bytes: u32,
    /// Messages queued per peer before `send` reports `QueueFull`.
    pub outbound_queue_capacity: usize,
    /// Received envelopes buffered before readers stop reading (TCP backpressure).
    pub inbound_queue_capacity: usize,
    /// A batch stops growing at this many bytes (one message may exceed it).
    pub max_batch_bytes: usize,
    pub max_batch_msgs: usize,
    pub reconnect_backoff_min_ms: u64,
    pub reconnect_backoff_max_ms: u64,
    pub connect_timeout_ms: u64,
    /// Seed of the chaos layer's random choices.
    pub chaos_seed: u64,
    /// The cluster's shared secret: `Some` makes every connection run the
    /// authentication handshake of [`crate::auth`] before it carries envelopes;
    /// `None` (the default) accepts any connection, as an unauthenticated
    /// cluster on a trusted network does. All nodes must agree.
    pub auth: Option<ClusterSecret>,
    /// Time a connection has to finish the handshake (each side), when `auth`
    /// is set; a peer that stalls is cut off then.
    pub handshake_timeout_ms: u64,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            outbound_queue_capacity: 65_536,
            inbound_queue_capacity: 65_536,
            max_batch_bytes: 64 * 1024,
            max_batch_msgs: 4096,
            reconnect_backoff_min_ms: 10,
            reconnect_backoff_max_ms: 1_000,
            connect_timeout_ms: 1_000,
            chaos_seed: 0x5eed,
            auth: None,
            handshake_timeout_ms: 2_000,
        }
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    #[error("reconnect_backoff_min_ms must not exceed reconnect_backoff_max_ms")]
    Backoff,
    #[error("max_frame_bytes must be at least 64")]
    FrameLimit,
}

impl TransportConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, value) in [
            ("outbound_queue_capacity", self.outbound_queue_capacity),
            ("inbound_queue_capacity", self.inbound_queue_capacity),
            ("max_batch_bytes", self.max_batch_bytes),
            ("max_batch_msgs", self.max_batch_msgs),
            (
                "reconnect_backoff_min_ms",
                self.reconnect_backoff_min_ms as usize,
            ),
            ("connect_timeout_ms", self.connect_timeout_ms as usize),
            ("handshake_timeout_ms", self.handshake_timeout_ms as usize),
        ] {
            if value == 0 {
                return Err(ConfigError::Zero(name));
            }
        }
        if self.reconnect_backoff_min_ms > self.reconnect_backoff_max_ms {
            return Err(ConfigError::Backoff);
        }
        if self.max_frame_bytes < 64 {
            return Err(ConfigError::FrameLimit);
        }
        Ok(())
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum SendError {
    #[error("no such peer {0}")]
    UnknownPeer(NodeId),
    #[error("outbound queue to {0} is full; message dropped")]
    QueueFull(NodeId),
    #[error("transport is shut down")]
    Closed,
}

#[derive(Debug, Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("peer table names this node ({0}); list only the other nodes")]
    SelfInPeers(NodeId),
    #[error("cannot read the listener's address: {0}")]
    Io(#[from] std::io::Error),
}

/// What reader and writer tasks share (never the senders: when the last
/// [`Transport`] handle goes, the queues close and the tasks end).
struct Shared {
    me: NodeId,
    config: TransportConfig,
    chaos: Chaos,
    metrics: Metrics,
}

struct Inner<M> {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    peers: BTreeMap<NodeId, mpsc::Sender<(EpochId, M)>>,
    inbox: mpsc::Sender<Envelope<M>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl<M> Drop for Inner<M> {
    fn drop(&mut self) {
        for task in self
            .tasks
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            task.abort();
        }
    }
}

/// A node's end of the transport; cheap to clone.
pub struct Transport<M> {
    inner: Arc<Inner<M>>,
}

impl<M> Clone for Transport<M> {
    fn clone(&self) -> Self {
        Transport {
            inner: Arc::clone(&self.inner),
        }
    }
}

/// Messages received by this node, in arrival order per connection.
pub struct Inbox<M> {
    rx: mpsc::Receiver<Envelope<M>>,
}

impl<M> Inbox<M> {
    pub async fn recv(&mut self) -> Option<Envelope<M>> {
        self.rx.recv().await
    }

    pub fn try_recv(&mut self) -> Option<Envelope<M>> {
        self.rx.try_recv().ok()
    }
}

impl<M: Message> Transport<M> {
    /// Starts accepting on `listener` and connecting to every peer. Must be
    /// called inside a tokio runtime.
    pub fn start(
        me: NodeId,
        listener: TcpListener,
        peers: BTreeMap<NodeId, SocketAddr>,
        config: TransportConfig,
    ) -> Result<(Transport<M>, Inbox<M>), StartError> {
        config.validate()?;
        if peers.contains_key(&me) {
            return Err(StartError::SelfInPeers(me));
        }
        let local_addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            me,
            chaos: Chaos::new(config.chaos_seed ^ u64::from(me.0)),
            config,
            metrics: Metrics::default(),
        });
        let (inbox_tx, inbox_rx) = mpsc::channel(shared.config.inbound_queue_capacity);
        let mut tasks = Vec::with_capacity(peers.len() + 1);
        let known: Arc<Vec<NodeId>> = Arc::new(peers.keys().copied().collect());
        tasks.push(tokio::spawn(accept_loop(
            listener,
            Arc::clone(&shared),
            known,
            inbox_tx.clone(),
        )));
        let mut senders = BTreeMap::new();
        for (&peer, &addr) in &peers {
            let (tx, rx) = mpsc::channel(shared.config.outbound_queue_capacity);
            senders.insert(peer, tx);
            tasks.push(tokio::spawn(drive_peer(
                peer,
                addr,
                rx,
                Arc::clone(&shared),
            )));
        }
        let inner = Inner {
            shared,
            local_addr,
            peers: senders,
            inbox: inbox_tx,
            tasks: Mutex::new(tasks),
        };
        Ok((
            Transport {
                inner: Arc::new(inner),
            },
            Inbox { rx: inbox_rx },
        ))
    }

    pub fn me(&self) -> NodeId {
        self.inner.shared.me
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr
    }

    pub fn chaos(&self) -> &Chaos {
        &self.inner.shared.chaos
    }

    pub fn metrics(&self) -> MetricsSnapshot {
        self.inner.shared.metrics.snapshot()
    }

    /// Queues `msg` for `to` without waiting. A message chaos drops reports
    /// `Ok`, as a real network would; a full queue drops it and says so.
    /// Messages to this node itself go straight to its inbox, past chaos.
    pub fn send(&self, to: NodeId, epoch: EpochId, msg: M) -> Result<(), SendError> {
        let shared = &self.inner.shared;
        if to == shared.me {
            let envelope = Envelope::new(to, to, epoch, msg);
            return self
                .inner
                .inbox
                .try_send(envelope)
                .map_err(|error| match error {
                    mpsc::error::TrySendError::Full(_) => SendError::QueueFull(to),
                    mpsc::error::TrySendError::Closed(_) => SendError::Closed,
                });
        }
        let queue = self
            .inner
            .peers
            .get(&to)
            .ok_or(SendError::UnknownPeer(to))?;
        match shared.chaos.outgoing(to) {
            Verdict::Drop => {
                add(&shared.metrics.dropped_chaos, 1);
                Ok(())
            }
            Verdict::Send {
                copies,
                delay_ms: 0,
            } => {
                if copies > 1 {
                    enqueue(queue, to, epoch, msg.clone(), &shared.metrics)?;
                }
                enqueue(queue, to, epoch, msg, &shared.metrics)
            }
            Verdict::Send { copies, delay_ms } => {
                let queue = queue.clone();
                let shared = Arc::clone(shared);
                // Parked at most MAX_CHAOS_DELAY_MS (validated), then queued.
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                    for _ in 0..copies {
                        let _ = enqueue(&queue, to, epoch, msg.clone(), &shared.metrics);
                    }
                });
                Ok(())
            }
        }
    }

    /// Like [`Transport::send`], but waits for room in the peer's queue
    /// instead of dropping (backpressure for bulk senders).
    pub async fn send_when_ready(
        &self,
        to: NodeId,
        epoch: EpochId,
        msg: M,
    ) -> Result<(), SendError> {
        if to == self.inner.shared.me {
            let envelope = Envelope::new(to, to, epoch, msg);
            return self
                .inner
                .inbox
                .send(envelope)
                .await
                .map_err(|_| SendError::Closed);
        }
        let queue = self
            .inner
            .peers
            .get(&to)
            .ok_or(SendError::UnknownPeer(to))?;
        match self.inner.shared.chaos.outgoing(to) {
            Verdict::Send {
                copies: 1,
                delay_ms: 0,
            } => {
                let permit = queue.reserve().await.map_err(|_| SendError::Closed)?;
                permit.send((epoch, msg));
                Ok(())
            }
            // Chaos at work: take the ordinary path (which applies it).
            _ => self.send(to, epoch, msg),
        }
    }

    /// Stops every task now; queued messages are dropped.
    pub fn shutdown(&self) {
        for task in self
            .inner
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            task.abort();
        }
    }
}

fn enqueue<M>(
    queue: &mpsc::Sender<(EpochId, M)>,
    to: NodeId,
    epoch: EpochId,
    msg: M,
    metrics: &Metrics,
) -> Result<(), SendError> {
    queue.try_send((epoch, msg)).map_err(|error| match error {
        mpsc::error::TrySendError::Full(_) => {
            add(&metrics.dropped_queue_full, 1);
            SendError::QueueFull(to)
        }
        mpsc::error::TrySendError::Closed(_) => SendError::Closed,
    })
}

async fn accept_loop<M: Message>(
    listener: TcpListener,
    shared: Arc<Shared>,
    known: Arc<Vec<NodeId>>,
    inbox: mpsc::Sender<Envelope<M>>,
) {
    loop {
        match listener.accept().await {
            Ok((stream, remote)) => {
                let _ = stream.set_nodelay(true);
                let reader = serve_connection(
                    stream,
                    remote,
                    Arc::clone(&shared),
                    Arc::clone(&known),
                    inbox.clone(),
                );
                // Readers end on a failed handshake, on EOF, on a bad frame, or
                // when the inbox closes.
                tokio::spawn(reader);
            }
            Err(error) => {
                // Usually out of file descriptors: back off instead of spinning.
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// An accepted connection: authenticates the dialer when the cluster has a
/// secret (nothing is read as an envelope before that), then reads frames.
async fn serve_connection<M: Message>(
    mut stream: TcpStream,
    remote: SocketAddr,
    shared: Arc<Shared>,
    known: Arc<Vec<NodeId>>,
    inbox: mpsc::Sender<Envelope<M>>,
) {
    let sender = match &shared.config.auth {
        None => None,
        Some(secret) => {
            let timeout_ms = shared.config.handshake_timeout_ms;
            match auth::accept(&mut stream, secret, shared.me, &known, timeout_ms).await {
                Ok(peer) => {
                    tracing::debug!(%remote, %peer, "peer authenticated");
                    Some(peer)
                }
                Err(error) => {
                    add(&shared.metrics.auth_failures, 1);
                    tracing::error!(%remote, %error, "handshake failed; closing connection");
                    return;
                }
            }
        }
    };
    read_connection(stream, remote, shared, known, sender, inbox).await;
}

/// Read buffer growth step; a frame larger than this grows the buffer to fit.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// Delivers the frames of one connection. `sender` is the node that
/// authenticated it, if any: then only envelopes from it are taken.
async fn read_connection<M: Message>(
    mut stream: TcpStream,
    remote: SocketAddr,
    shared: Arc<Shared>,
    known: Arc<Vec<NodeId>>,
    sender: Option<NodeId>,
    inbox: mpsc::Sender<Envelope<M>>,
) {
    let max_frame_bytes = shared.config.max_frame_bytes;
    let mut buf: Vec<u8> = Vec::with_capacity(READ_CHUNK_BYTES);
    let mut start = 0usize;
    loop {
        // Deliver every complete frame buffered.
        loop {
            let (envelope, used) = match decode_frame::<M>(&buf[start..], max_frame_bytes) {
                Ok(Some(decoded)) => decoded,
                Ok(None) => break,
                Err(error) => {
                    add(&shared.metrics.frames_rejected, 1);
                    tracing::error!(%remote, %error, "bad frame; closing connection");
                    return;
                }
            };
            start += used;
            if envelope.to != shared.me || !known.contains(&envelope.from) {
                add(&shared.metrics.frames_rejected, 1);
                tracing::error!(%remote, from = %envelope.from, to = %envelope.to,
                    "frame from an unknown node or for another node; closing connection");
                return;
            }
            if sender.is_some_and(|sender| sender != envelope.from) {
                add(&shared.metrics.frames_rejected, 1);
                tracing::error!(%remote, from = %envelope.from, ?sender,
                    "frame from another node than the one that authenticated; closing connection");
                return;
            }
            add(&shared.metrics.msgs_received, 1);
            add(&shared.metrics.bytes_received, used as u64);
            if shared.chaos.is_partitioned(envelope.from) {
                add(&shared.metrics.dropped_chaos, 1);
                continue;
            }
            if inbox.send(envelope).await.is_err() {
                return;
            }
        }
        compact(&mut buf, &mut start);
        if buf.capacity() - buf.len() < READ_CHUNK_BYTES / 4 {
            buf.reserve(READ_CHUNK_BYTES);
        }
        debug_assert!(buf.len() <= max_frame_bytes as usize + LENGTH_PREFIX_BYTES);
        match stream.read_buf(&mut buf).await {
            Ok(0) => return,
            Ok(_) => {}
            Err(error) => {
                tracing::debug!(%remote, %error, "connection read failed");
                return;
            }
        }
    }
}

/// Drops consumed bytes: all of them when the buffer is used up, else once
/// they are more than half of it (amortised O(1) per byte).
fn compact(buf: &mut Vec<u8>, start: &mut usize) {
    if *start == buf.len() {
        buf.clear();
        *start = 0;
    } else if *start > buf.len() / 2 {
        buf.drain(..*start);
        *start = 0;
    }
}

async fn connect(addr: SocketAddr, timeout_ms: u64) -> std::io::Result<TcpStream> {
    match tokio::time::timeout(Duration::from_millis(timeout_ms), TcpStream::connect(addr)).await {
        Ok(result) => result,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "connect timed out",
        )),
    }
}

async fn drive_peer<M: Message>(
    peer: NodeId,
    addr: SocketAddr,
    mut queue: mpsc::Receiver<(EpochId, M)>,
    shared: Arc<Shared>,
) {
    let config = &shared.config;
    let mut backoff_ms = config.reconnect_backoff_min_ms;
    let mut batch: Vec<u8> = Vec::with_capacity(config.max_batch_bytes + 1024);
    loop {
        let mut stream = match connect(addr, config.connect_timeout_ms).await {
            Ok(stream) => stream,
            Err(error) => {
                tracing::debug!(%peer, %addr, %error, backoff_ms, "connect failed");
                tokio::time::sleep(Duration::from_millis(backoff_ms)).await;
                backoff_ms = (backoff_ms * 2).min(config.reconnect_backoff_max_ms);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        if let Some(secret) = &config.auth {
            let timeout_ms = config.handshake_timeout_ms;
            if let Err(error) = auth::dial(&mut stream, secret, shared.me, peer, timeout_ms).await {
                // Like a failed connect: back off, so a peer with another
                // secret is not hammered.
                add(&shared.metrics.auth_failures, 1);
                tracing::error!(%peer, %addr, %error, backoff_ms, "handshake failed; closing connection");
                drop(stream);
                tokio::time::sleep(Duration::from_millis(backoff_ms)).await;
                backoff_ms = (backoff_ms * 2).min(config.reconnect_backoff_max_ms);
                continue;
            }
        }
        backoff_ms = config.reconnect_backoff_min_ms;
        add(&shared.metrics.connects, 1);
        tracing::debug!(%peer, %addr, authenticated = config.auth.is_some(), "connected");
        loop {
            let Some(first) = queue.recv().await else {
                return;
            };
            batch.clear();
            let mut msgs = u64::from(encode_one(&mut batch, &shared, peer, first));
            while batch.len() < config.max_batch_bytes && (msgs as usize) < config.max_batch_msgs {
                match queue.try_recv() {
                    Ok(next) => msgs += u64::from(encode_one(&mut batch, &shared, peer, next)),
                    Err(_) => break,
                }
            }
            if batch.is_empty() {
                continue;
            }
            if let Err(error) = stream.write_all(&batch).await {
                add(&shared.metrics.dropped_unreachable, msgs);
                tracing::debug!(%peer, %error, msgs, "write failed; reconnecting");
                break;
            }
            add(&shared.metrics.msgs_sent, msgs);
            add(&shared.metrics.bytes_sent, batch.len() as u64);
            add(&shared.metrics.batches_sent, 1);
        }
    }
}

/// Encodes one queued message into the batch; false if it could not be.
fn encode_one<M: Message>(
    batch: &mut Vec<u8>,
    shared: &Shared,
    peer: NodeId,
    (epoch, msg): (EpochId, M),
) -> bool {
    let limit = shared.config.max_frame_bytes;
    match encode_frame_into(batch, shared.me, peer, epoch, &msg, limit) {
        Ok(()) => true,
        Err(error) => {
            add(&shared.metrics.dropped_unreachable, 1);
            tracing::error!(%peer, %error, "message not sent");
            false
        }
    }
}

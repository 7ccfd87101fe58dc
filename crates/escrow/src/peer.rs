//! A site's outgoing link to another site: one TCP connection (through the
//! wide-area proxy when emulating), reconnected with backoff, that carries
//! propagation batches one way and transfer requests with their replies.
//!
//! The link counts as up only after the peer's `HelloAck`, so a connection
//! that a partition black-holes never counts as up. While the link is down,
//! batches are dropped (the propagator resends everything on reconnect) and
//! transfer requests fail at once: an unreachable site keeps its rights and
//! the requester moves on to the next donor.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use roost_bcounter::TransferRequest;
use thiserror::Error;
use tokio::io::BufWriter;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::wire::{read_frame, write_frame, Frame, TransferResult, WireError};

/// What a link reports to its site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkEvent {
    Up(usize),
    Down(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Never connected yet.
    Connecting,
    Up,
    Down,
}

/// Why a transfer request got no answer.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LinkError {
    #[error("site {0} is unreachable")]
    Down(usize),
    #[error("site {peer} did not answer within {waited_ms} ms")]
    Timeout { peer: usize, waited_ms: u64 },
    #[error("the link to site {0} is closed")]
    Closed(usize),
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<TransferResult>>>>;

/// Timing of a link.
#[derive(Debug, Clone, Copy)]
pub struct LinkConfig {
    /// How long the peer has to answer `Hello`.
    pub handshake_timeout: Duration,
    pub min_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            handshake_timeout: Duration::from_secs(1),
            min_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(500),
        }
    }
}

/// The link from site `me` to site `peer`.
pub struct PeerLink {
    peer: usize,
    tx: mpsc::Sender<Frame>,
    pending: Pending,
    next_id: AtomicU64,
    state: watch::Receiver<State>,
    task: JoinHandle<()>,
}

impl PeerLink {
    /// Starts connecting at once; `events` hears of every up and down.
    pub fn spawn(
        me: usize,
        sites: usize,
        peer: usize,
        addr: SocketAddr,
        config: LinkConfig,
        events: Option<mpsc::UnboundedSender<LinkEvent>>,
    ) -> PeerLink {
        let (tx, rx) = mpsc::channel(4096);
        let pending: Pending = Arc::default();
        let (state_tx, state) = watch::channel(State::Connecting);
        let task = tokio::spawn(run(
            Dialer {
                me,
                sites,
                peer,
                addr,
                config,
                events,
                pending: Arc::clone(&pending),
                state: state_tx,
            },
            rx,
        ));
        PeerLink {
            peer,
            tx,
            pending,
            next_id: AtomicU64::new(1),
            state,
            task,
        }
    }

    pub fn peer(&self) -> usize {
        self.peer
    }

    pub fn is_up(&self) -> bool {
        *self.state.borrow() == State::Up
    }

    /// Queues a one-way frame if the link is up; `false` if it was dropped.
    pub fn send(&self, frame: Frame) -> bool {
        self.is_up() && self.tx.try_send(frame).is_ok()
    }

    /// Sends a transfer request and waits for the donor's answer. A link that
    /// has never been up gets `timeout` to come up; one that went down fails
    /// at once.
    pub async fn transfer(
        &self,
        key: &str,
        request: TransferRequest,
        timeout: Duration,
    ) -> Result<TransferResult, LinkError> {
        let waited_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let deadline = tokio::time::Instant::now() + timeout;
        let mut state = self.state.clone();
        let up = tokio::time::timeout_at(deadline, state.wait_for(|s| *s != State::Connecting));
        match up.await {
            Ok(Ok(s)) if *s == State::Up => {}
            Ok(Ok(_)) => return Err(LinkError::Down(self.peer)),
            Ok(Err(_)) => return Err(LinkError::Closed(self.peer)),
            Err(_) => {
                return Err(LinkError::Timeout {
                    peer: self.peer,
                    waited_ms,
                })
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (reply_tx, reply_rx) = oneshot::channel();
        if let Ok(mut pending) = self.pending.lock() {
            pending.insert(id, reply_tx);
        }
        let frame = Frame::Transfer {
            id,
            key: key.to_owned(),
            request,
        };
        let forget = |pending: &Pending| {
            if let Ok(mut pending) = pending.lock() {
                pending.remove(&id);
            }
        };
        if tokio::time::timeout_at(deadline, self.tx.send(frame))
            .await
            .map_or(true, |sent| sent.is_err())
        {
            forget(&self.pending);
            return Err(LinkError::Down(self.peer));
        }
        match tokio::time::timeout_at(deadline, reply_rx).await {
            Ok(Ok(result)) => Ok(result),
            // The connection broke: its pending requests were dropped.
            Ok(Err(_)) => Err(LinkError::Down(self.peer)),
            Err(_) => {
                forget(&self.pending);
                Err(LinkError::Timeout {
                    peer: self.peer,
                    waited_ms,
                })
            }
        }
    }
}

impl Drop for PeerLink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Dialer {
    me: usize,
    sites: usize,
    peer: usize,
    addr: SocketAddr,
    config: LinkConfig,
    events: Option<mpsc::UnboundedSender<LinkEvent>>,
    pending: Pending,
    state: watch::Sender<State>,
}

impl Dialer {
    fn event(&self, event: LinkEvent) {
        if let Some(events) = &self.events {
            let _ = events.send(event);
        }
    }

    fn fail_pending(&self) {
        if let Ok(mut pending) = self.pending.lock() {
            pending.clear();
        }
    }

    async fn handshake(&self) -> Result<TcpStream, WireError> {
        let mut stream = TcpStream::connect(self.addr).await?;
        let _ = stream.set_nodelay(true);
        let hello = Frame::Hello {
            site: u32::try_from(self.me).unwrap_or(u32::MAX),
            sites: u32::try_from(self.sites).unwrap_or(u32::MAX),
        };
        write_frame(&mut stream, &hello).await?;
        match read_frame(&mut stream).await? {
            Some(Frame::HelloAck { site }) if usize::try_from(site).ok() == Some(self.peer) => {
                Ok(stream)
            }
            Some(Frame::HelloAck { site }) => Err(WireError::Malformed(format!(
                "dialed site {} but site {site} answered",
                self.peer
            ))),
            Some(other) => Err(WireError::Malformed(format!(
                "expected hello_ack, got {other:?}"
            ))),
            None => Err(WireError::Malformed(
                "connection closed during the handshake".to_owned(),
            )),
        }
    }
}

async fn run(dialer: Dialer, mut rx: mpsc::Receiver<Frame>) {
    let mut backoff = dialer.config.min_backoff;
    loop {
        let connected =
            tokio::time::timeout(dialer.config.handshake_timeout, dialer.handshake()).await;
        let stream = match connected {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => {
                tracing::debug!(peer = dialer.peer, %error, "escrow link: connect failed");
                if !wait_down(&dialer, &mut rx, backoff).await {
                    return;
                }
                backoff = (backoff * 2).min(dialer.config.max_backoff);
                continue;
            }
            Err(_) => {
                tracing::debug!(peer = dialer.peer, "escrow link: handshake timed out");
                if !wait_down(&dialer, &mut rx, backoff).await {
                    return;
                }
                backoff = (backoff * 2).min(dialer.config.max_backoff);
                continue;
            }
        };
        backoff = dialer.config.min_backoff;
        dialer.state.send_replace(State::Up);
        dialer.event(LinkEvent::Up(dialer.peer));
        let (mut read, write) = stream.into_split();
        let mut write = BufWriter::new(write);
        let reader = async {
            loop {
                match read_frame(&mut read).await {
                    Ok(Some(Frame::TransferReply { id, result, .. })) => {
                        let waiter = dialer.pending.lock().ok().and_then(|mut p| p.remove(&id));
                        if let Some(waiter) = waiter {
                            let _ = waiter.send(result);
                        }
                    }
                    Ok(Some(other)) => {
                        tracing::warn!(peer = dialer.peer, frame = ?other, "escrow link: unexpected frame; closing");
                        return;
                    }
                    Ok(None) => return,
                    Err(error) => {
                        tracing::warn!(peer = dialer.peer, %error, "escrow link: bad frame; closing");
                        return;
                    }
                }
            }
        };
        let mut closed = false;
        let writer = async {
            use tokio::io::AsyncWriteExt;
            loop {
                let Some(frame) = rx.recv().await else {
                    closed = true;
                    return;
                };
                if write_frame_buffered(&mut write, &frame).await.is_err() {
                    return;
                }
                // Take whatever else is queued, then flush once.
                while let Ok(frame) = rx.try_recv() {
                    if write_frame_buffered(&mut write, &frame).await.is_err() {
                        return;
                    }
                }
                if write.flush().await.is_err() {
                    return;
                }
            }
        };
        tokio::select! {
            _ = reader => {}
            _ = writer => {}
        }
        dialer.state.send_replace(State::Down);
        dialer.fail_pending();
        dialer.event(LinkEvent::Down(dialer.peer));
        if closed {
            return;
        }
    }
}

async fn write_frame_buffered<W: tokio::io::AsyncWrite + Unpin>(
    writer: &mut W,
    frame: &Frame,
) -> Result<(), WireError> {
    use tokio::io::AsyncWriteExt;
    let bytes = crate::wire::encode(frame)?;
    writer.write_all(&bytes).await?;
    Ok(())
}

/// The link is down: drop what is queued, wait `backoff`. `false` when the
/// link's owner is gone.
async fn wait_down(dialer: &Dialer, rx: &mut mpsc::Receiver<Frame>, backoff: Duration) -> bool {
    if *dialer.state.borrow() != State::Down {
        dialer.state.send_replace(State::Down);
    }
    dialer.fail_pending();
    let sleep = tokio::time::sleep(backoff);
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            _ = &mut sleep => return true,
            frame = rx.recv() => if frame.is_none() { return false },
        }
    }
}

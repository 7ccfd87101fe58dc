//! Forwarding: a command on keys whose reactors another node owns may be
//! shipped, as the RESP bytes the client sent, to that node's RESP port
//! instead of moving the reactors here. Two clients on two nodes taking
//! turns at one key would otherwise move its reactor on every request
//! (ping-pong); the node's policy ([`Router`]) says when to ship.
//!
//! The shipped commands run at the owner as any client's would (one
//! transaction per command, or the whole MULTI/EXEC), on a pooled
//! connection authenticated as [`FORWARD_USER`] with a password both nodes
//! derive from the cluster secret; a forwarded connection never forwards
//! again. Its replies come back byte for byte in the client's protocol.
//!
//! What a failure means: nothing sent (no connection, the handshake
//! refused) is safe to run here instead; sent without a whole reply back
//! leaves the outcome unknown, and the client is told so.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::protocol::Protocol;
use crate::stats::Stats;

/// The user forwarded commands arrive as (reserved: no configured user may
/// take the name).
pub const FORWARD_USER: &str = "roost-forward";

/// Idle pooled connections kept per owner and protocol.
const MAX_IDLE_PER_PEER: usize = 64;
/// The largest reply a forwarded request may bring back; a larger one
/// leaves the outcome unknown.
const MAX_FORWARD_REPLY_BYTES: usize = 256 << 20;
/// Bytes read at a time.
const READ_CHUNK_BYTES: usize = 16 << 10;
/// Nesting a reply may have (Redis's own replies stay far below).
const MAX_REPLY_ELEMENTS: u64 = 1 << 32;

/// The node's forwarding policy.
pub trait Router: Send + Sync + 'static {
    /// Where a write on these keyspace reactors (their indexes, as
    /// [`keyspace_index`](crate::keyspace_index) gives them) runs: `None`
    /// here (acquiring the reactors it lacks), `Some(addr)` at the RESP
    /// port of their owner.
    fn route(&self, reactors: &[usize]) -> Option<SocketAddr>;

    /// A write on these reactors runs here (`forwarded`: shipped here by
    /// another node): what the policy measures locality by.
    fn served(&self, _reactors: &[usize], _forwarded: bool) {}
}

/// Where the keyspace's reactors are, as far as this node knows: what
/// `ROOST.OWNER` answers, so that a client's router sends a request to the
/// node that owns its reactors.
pub trait Directory: Send + Sync + 'static {
    /// The owner of keyspace reactor `reactor` (its index), if this node
    /// knows it.
    fn owner(&self, reactor: usize) -> Option<Owner>;
}

/// A keyspace reactor's owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// Its node id.
    pub node: u32,
    /// Its RESP port, if it serves clients.
    pub resp_addr: Option<SocketAddr>,
}

/// Why a forwarded request got no reply.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ForwardError {
    /// Nothing reached the owner: the request may run here instead.
    #[error("not sent to {to}: {why}")]
    NotSent { to: SocketAddr, why: String },
    /// Sent, but no whole reply came back: it may or may not have run.
    #[error("sent to {to}, no reply: {why}")]
    Unknown { to: SocketAddr, why: String },
}

/// The replies to a shipment, whole, with where each one ends (found once,
/// while reading them).
pub(crate) struct Replies {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Replies {
    /// The `i`th reply's bytes.
    pub(crate) fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// The first reply's bytes.
    fn first(&self) -> &[u8] {
        self.get(0)
    }
}

/// A shipment on its way ([`Forwarding::start`]).
pub(crate) struct Pending(tokio::sync::oneshot::Receiver<Result<Replies, ForwardError>>);

/// The forwarding side of a server: the policy and the connections to the
/// owners (run on the tokio runtime the server was bound in; a connection
/// served on an executor hands its request over).
pub(crate) struct Forwarding {
    pub(crate) router: Arc<dyn Router>,
    runtime: tokio::runtime::Handle,
    password: String,
    timeout: Duration,
    idle: Mutex<HashMap<(SocketAddr, bool), Vec<TcpStream>>>,
    stats: Arc<Stats>,
}

impl Forwarding {
    pub(crate) fn new(
        router: Arc<dyn Router>,
        password: String,
        timeout: Duration,
        stats: Arc<Stats>,
    ) -> Forwarding {
        Forwarding {
            router,
            runtime: tokio::runtime::Handle::current(),
            password,
            timeout,
            idle: Mutex::new(HashMap::new()),
            stats,
        }
    }

    /// Ships `request` (`replies` whole RESP requests) to `to` and returns
    /// their `replies` replies.
    pub(crate) async fn forward(
        self: &Arc<Self>,
        to: SocketAddr,
        protocol: Protocol,
        request: Vec<u8>,
        replies: usize,
    ) -> Result<Replies, ForwardError> {
        let pending = self.start(to, protocol, request, replies);
        self.finish(to, pending).await
    }

    /// Starts shipping at once (so that shipments to several owners, and
    /// the commands run here, overlap); [`finish`](Self::finish) awaits it.
    pub(crate) fn start(
        self: &Arc<Self>,
        to: SocketAddr,
        protocol: Protocol,
        request: Vec<u8>,
        replies: usize,
    ) -> Pending {
        debug_assert!(replies > 0, "a forwarded request has a command");
        let (tx, rx) = tokio::sync::oneshot::channel();
        let this = Arc::clone(self);
        self.runtime.spawn(async move {
            let outcome = this.exchange(to, protocol, &request, replies).await;
            let _ = tx.send(outcome);
        });
        Pending(rx)
    }

    pub(crate) async fn finish(
        &self,
        to: SocketAddr,
        pending: Pending,
    ) -> Result<Replies, ForwardError> {
        let outcome = pending.0.await.unwrap_or_else(|_| {
            Err(ForwardError::Unknown {
                to,
                why: "the server stopped".into(),
            })
        });
        let counter = match &outcome {
            Ok(_) => &self.stats.forwarded,
            Err(ForwardError::NotSent { .. }) => &self.stats.forwards_not_sent,
            Err(ForwardError::Unknown { .. }) => &self.stats.forwards_unknown,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        outcome
    }

    async fn exchange(
        &self,
        to: SocketAddr,
        protocol: Protocol,
        request: &[u8],
        replies: usize,
    ) -> Result<Replies, ForwardError> {
        let resp3 = protocol == Protocol::Resp3;
        let mut stream = match self.take_idle(to, resp3) {
            Some(stream) => stream,
            None => tokio::time::timeout(self.timeout, self.connect(to, resp3))
                .await
                .map_err(|_| ForwardError::NotSent {
                    to,
                    why: "timed out connecting".into(),
                })??,
        };
        let unknown = |why: String| ForwardError::Unknown { to, why };
        let exchanged = tokio::time::timeout(self.timeout, async {
            stream
                .write_all(request)
                .await
                .map_err(|e| unknown(e.to_string()))?;
            read_replies(&mut stream, replies)
                .await
                .map_err(|e| unknown(e.to_string()))
        })
        .await
        .map_err(|_| unknown(format!("no reply within {:?}", self.timeout)))??;
        self.put_idle(to, resp3, stream);
        Ok(exchanged)
    }

    /// An idle pooled connection the owner has not closed.
    fn take_idle(&self, to: SocketAddr, resp3: bool) -> Option<TcpStream> {
        let mut idle = self.idle.lock().expect("forward pool lock");
        let list = idle.get_mut(&(to, resp3))?;
        while let Some(stream) = list.pop() {
            let mut probe = [0u8; 1];
            // Nothing to read and not closed: still good (an owner that
            // restarted closed it, and a request written there would be
            // left unknown for nothing).
            if let Err(e) = stream.try_read(&mut probe) {
                if e.kind() == std::io::ErrorKind::WouldBlock {
                    return Some(stream);
                }
            }
        }
        None
    }

    fn put_idle(&self, to: SocketAddr, resp3: bool, stream: TcpStream) {
        let mut idle = self.idle.lock().expect("forward pool lock");
        let list = idle.entry((to, resp3)).or_default();
        if list.len() < MAX_IDLE_PER_PEER {
            list.push(stream);
        }
    }

    /// A new connection to `to`, authenticated as the forward user (and
    /// speaking RESP3 if `resp3`).
    async fn connect(&self, to: SocketAddr, resp3: bool) -> Result<TcpStream, ForwardError> {
        let not_sent = |why: String| ForwardError::NotSent { to, why };
        let mut stream = TcpStream::connect(to)
            .await
            .map_err(|e| not_sent(format!("connecting: {e}")))?;
        let _ = stream.set_nodelay(true);
        let mut hello = Vec::new();
        let args: Vec<&[u8]> = if resp3 {
            vec![
                b"HELLO",
                b"3",
                b"AUTH",
                FORWARD_USER.as_bytes(),
                self.password.as_bytes(),
            ]
        } else {
            vec![b"AUTH", FORWARD_USER.as_bytes(), self.password.as_bytes()]
        };
        encode_command(&args, &mut hello);
        stream
            .write_all(&hello)
            .await
            .map_err(|e| not_sent(format!("authenticating: {e}")))?;
        let reply = read_replies(&mut stream, 1)
            .await
            .map_err(|e| not_sent(format!("authenticating: {e}")))?;
        if reply.first().first() == Some(&b'-') {
            let text = String::from_utf8_lossy(reply.first());
            return Err(not_sent(format!(
                "the owner refused the forward user: {}",
                text.trim_end()
            )));
        }
        Ok(stream)
    }
}

/// Appends one command as a RESP array of bulk strings.
pub(crate) fn encode_command<A: AsRef<[u8]>>(args: &[A], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        let arg = arg.as_ref();
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// Reads until `replies` whole replies have arrived.
async fn read_replies(stream: &mut TcpStream, replies: usize) -> std::io::Result<Replies> {
    let mut buf = Vec::with_capacity(READ_CHUNK_BYTES);
    let mut ends = Vec::with_capacity(replies);
    let mut at = 0;
    // Bounded: each round reads at least one byte or returns, and the
    // buffer is capped.
    loop {
        while ends.len() < replies {
            match reply_len(&buf[at..]) {
                Ok(Some(len)) => {
                    at += len;
                    ends.push(at);
                }
                Ok(None) => break,
                Err(why) => {
                    return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, why));
                }
            }
        }
        if ends.len() == replies {
            if at != buf.len() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "more bytes than the replies asked for",
                ));
            }
            return Ok(Replies { bytes: buf, ends });
        }
        if buf.len() > MAX_FORWARD_REPLY_BYTES {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a reply beyond {MAX_FORWARD_REPLY_BYTES} bytes"),
            ));
        }
        buf.reserve(READ_CHUNK_BYTES);
        if stream.read_buf(&mut buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
}

/// The length of the first whole RESP2 or RESP3 reply in `buf` (`None`:
/// not all of it has arrived).
pub(crate) fn reply_len(buf: &[u8]) -> Result<Option<usize>, &'static str> {
    let mut at = 0usize;
    // Replies still to read: the first, then each aggregate's elements.
    let mut pending: u64 = 1;
    while pending > 0 {
        let Some(kind) = buf.get(at).copied() else {
            return Ok(None);
        };
        let Some(end) = find_crlf(&buf[at + 1..]) else {
            return Ok(None);
        };
        let line = &buf[at + 1..at + 1 + end];
        at += end + 3;
        pending -= 1;
        let count = || -> Result<i64, &'static str> {
            std::str::from_utf8(line)
                .ok()
                .and_then(|t| t.parse::<i64>().ok())
                .filter(|n| *n >= -1 && *n < MAX_REPLY_ELEMENTS as i64)
                .ok_or("a bad length in a reply")
        };
        match kind {
            b'+' | b'-' | b':' | b',' | b'_' | b'#' | b'(' => {}
            b'$' | b'!' | b'=' => {
                let n = count()?;
                if n >= 0 {
                    let body = n as usize + 2;
                    if buf.len() < at + body {
                        return Ok(None);
                    }
                    if &buf[at + body - 2..at + body] != b"\r\n" {
                        return Err("a bulk reply without its CRLF");
                    }
                    at += body;
                }
            }
            b'*' | b'~' | b'>' => pending += count()?.max(0) as u64,
            b'%' => pending += 2 * count()?.max(0) as u64,
            // Attributes come before the reply they describe.
            b'|' => pending += 2 * count()?.max(0) as u64 + 1,
            _ => return Err("an unknown reply type"),
        }
        if pending > MAX_REPLY_ELEMENTS {
            return Err("a reply with too many elements");
        }
    }
    Ok(Some(at))
}

fn find_crlf(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_lengths_cover_every_resp_type_and_wait_for_the_rest() {
        for (reply, len) in [
            (&b"+OK\r\n"[..], 5),
            (b"-ERR x\r\n", 8),
            (b":12\r\n", 5),
            (b"$3\r\nabc\r\n", 9),
            (b"$-1\r\n", 5),
            (b"*-1\r\n", 5),
            (b"*2\r\n$1\r\na\r\n:1\r\n", 15),
            (b"%1\r\n+k\r\n*1\r\n_\r\n", 15),
            (b"|1\r\n+a\r\n+b\r\n:1\r\n", 16),
            (b"*0\r\n", 4),
        ] {
            assert_eq!(reply_len(reply), Ok(Some(len)), "{reply:?}");
            // Any prefix is incomplete, never an error.
            for cut in 0..len {
                assert_eq!(reply_len(&reply[..cut]), Ok(None), "{reply:?} cut at {cut}");
            }
            let mut two = reply.to_vec();
            two.extend_from_slice(b"+next\r\n");
            assert_eq!(reply_len(&two), Ok(Some(len)));
        }
        assert!(reply_len(b"?x\r\n").is_err());
        assert!(reply_len(b"$x\r\n").is_err());
        assert!(reply_len(b"$1\r\nabc\r\n").is_err());
        assert!(reply_len(b"*99999999999999\r\n").is_err());
    }

    #[test]
    fn commands_are_encoded_as_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        encode_command(&[&b"SET"[..], b"k", b""], &mut out);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
    }
}

//! The protocol between sites (and between a client library and a remote
//! site): length-prefixed JSON frames, versioned.
//!
//! A frame is a `u32` big-endian length and a JSON object
//! `{"version": 1, "body": {...}}`. The length is checked against
//! [`MAX_FRAME_BYTES`] before anything is buffered and the version before the
//! body is decoded. The counter states inside use `roost-bcounter`'s own
//! versioned serde encodings, which check their shape and soundness on the
//! way in. JSON (not postcard) because those encodings are self-describing:
//! fields are optional on the wire so that a future layout is reported as an
//! unsupported version.
//!
//! The connection starts with `Hello` (dialer) and `HelloAck` (acceptor);
//! then the dialer sends `States`, `Transfer` and `WeakDeltas`, and the
//! acceptor answers each `Transfer` with a `TransferReply` of the same id.

use roost_bcounter::{CounterMessage, RightsDelta, TransferRequest};
use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The version this build writes and reads.
pub const PROTOCOL_VERSION: u32 = 1;

/// Frames larger than this are refused before being read.
pub const MAX_FRAME_BYTES: usize = 16 << 20;

/// A counter replica's delta for one other site.
pub type Delta = CounterMessage<RightsDelta>;

/// One counter's state in a propagation batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateEntry {
    pub key: String,
    pub message: Delta,
}

/// One Weak-baseline update to replay at another site.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeakDelta {
    pub key: String,
    pub delta: i64,
}

/// How a donor answered a transfer request. Every answer after which the
/// donor's state is durable carries the donor's delta for the requester when
/// the request was synchronous (§IV-D: "replies to r_i immediately with the
/// new state of the counter"); asynchronous transfers travel by replication.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum TransferResult {
    Transferred {
        amount: u64,
        message: Option<Delta>,
    },
    AlreadySatisfied {
        transferred: u64,
        message: Option<Delta>,
    },
    NothingToGive {
        message: Option<Delta>,
    },
    Error {
        reason: String,
    },
}

impl TransferResult {
    pub fn message(&self) -> Option<&Delta> {
        match self {
            TransferResult::Transferred { message, .. }
            | TransferResult::AlreadySatisfied { message, .. }
            | TransferResult::NothingToGive { message } => message.as_ref(),
            TransferResult::Error { .. } => None,
        }
    }
}

/// Everything that travels between sites.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Frame {
    /// The dialer's first frame: who it speaks for, and how many sites it
    /// believes there are.
    Hello { site: u32, sites: u32 },
    /// The acceptor's answer: the connection is up.
    HelloAck { site: u32 },
    /// A propagation batch: deltas of counters changed since the last batch.
    States { entries: Vec<StateEntry> },
    /// A request for rights (§IV-D), answered by a `TransferReply`.
    Transfer {
        id: u64,
        key: String,
        request: TransferRequest,
    },
    TransferReply {
        id: u64,
        key: String,
        result: TransferResult,
    },
    /// The Weak baseline's replication: increments and decrements to replay.
    WeakDeltas { entries: Vec<WeakDelta> },
}

#[derive(Serialize)]
struct EnvelopeOut<'a> {
    version: u32,
    body: &'a Frame,
}

#[derive(Deserialize)]
struct EnvelopeIn {
    #[serde(default)]
    version: Option<u32>,
    #[serde(default)]
    body: Option<serde_json::Value>,
}

/// What can go wrong reading or writing frames.
#[derive(Debug, Error)]
pub enum WireError {
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("frame of {len} bytes exceeds the limit of {max}")]
    TooLarge { len: usize, max: usize },
    #[error("unsupported protocol version {found}: this build speaks version {PROTOCOL_VERSION}")]
    Version { found: u32 },
    #[error("malformed frame: {0}")]
    Malformed(String),
}

/// Encodes one frame (length prefix included).
pub fn encode(frame: &Frame) -> Result<Vec<u8>, WireError> {
    let body = serde_json::to_vec(&EnvelopeOut {
        version: PROTOCOL_VERSION,
        body: frame,
    })
    .map_err(|e| WireError::Malformed(format!("cannot encode: {e}")))?;
    if body.len() > MAX_FRAME_BYTES {
        return Err(WireError::TooLarge {
            len: body.len(),
            max: MAX_FRAME_BYTES,
        });
    }
    let len = u32::try_from(body.len()).map_err(|_| WireError::TooLarge {
        len: body.len(),
        max: MAX_FRAME_BYTES,
    })?;
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Decodes one frame's payload (without its length prefix).
pub fn decode(payload: &[u8]) -> Result<Frame, WireError> {
    let envelope: EnvelopeIn = serde_json::from_slice(payload)
        .map_err(|e| WireError::Malformed(format!("not an envelope: {e}")))?;
    let version = envelope
        .version
        .ok_or_else(|| WireError::Malformed("missing `version`".to_owned()))?;
    if version != PROTOCOL_VERSION {
        return Err(WireError::Version { found: version });
    }
    let body = envelope
        .body
        .ok_or_else(|| WireError::Malformed("missing `body`".to_owned()))?;
    serde_json::from_value(body).map_err(|e| WireError::Malformed(e.to_string()))
}

/// Writes one frame.
pub async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut W,
    frame: &Frame,
) -> Result<(), WireError> {
    let bytes = encode(frame)?;
    writer.write_all(&bytes).await?;
    writer.flush().await?;
    Ok(())
}

/// Reads one frame; `Ok(None)` at a clean end of stream.
pub async fn read_frame<R: AsyncRead + Unpin>(reader: &mut R) -> Result<Option<Frame>, WireError> {
    let mut len = [0u8; 4];
    match reader.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let len = usize::try_from(u32::from_be_bytes(len)).unwrap_or(usize::MAX);
    if len > MAX_FRAME_BYTES {
        return Err(WireError::TooLarge {
            len,
            max: MAX_FRAME_BYTES,
        });
    }
    let mut payload = vec![0u8; len];
    reader.read_exact(&mut payload).await?;
    decode(&payload).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use roost_bcounter::{Bound, ReplicaId, RequestMode};

    use crate::logic::Counter;

    fn sample_frames() -> Vec<Frame> {
        let mut a = Counter::new(Bound::Lower, 0, ReplicaId(0), 3).unwrap();
        a.increment(7).unwrap();
        a.transfer(2, ReplicaId(1)).unwrap();
        let message = a.message_for(ReplicaId(1)).unwrap();
        let request = TransferRequest {
            requester: ReplicaId(1),
            donor: ReplicaId(0),
            amount: 3,
            seen_transferred: 2,
            mode: RequestMode::Sync,
        };
        vec![
            Frame::Hello { site: 1, sites: 3 },
            Frame::HelloAck { site: 0 },
            Frame::States {
                entries: vec![StateEntry {
                    key: "stock".to_owned(),
                    message: message.clone(),
                }],
            },
            Frame::Transfer {
                id: 9,
                key: "stock".to_owned(),
                request,
            },
            Frame::TransferReply {
                id: 9,
                key: "stock".to_owned(),
                result: TransferResult::Transferred {
                    amount: 3,
                    message: Some(message),
                },
            },
            Frame::TransferReply {
                id: 10,
                key: "stock".to_owned(),
                result: TransferResult::Error {
                    reason: "nope".to_owned(),
                },
            },
            Frame::WeakDeltas {
                entries: vec![WeakDelta {
                    key: "stock".to_owned(),
                    delta: -4,
                }],
            },
        ]
    }

    #[test]
    fn round_trips() {
        for frame in sample_frames() {
            let bytes = encode(&frame).unwrap();
            assert_eq!(decode(&bytes[4..]).unwrap(), frame);
        }
    }

    #[test]
    fn version_is_checked_first() {
        let err = decode(br#"{"version": 2, "body": {"type": "no_such_frame"}}"#).unwrap_err();
        assert!(matches!(err, WireError::Version { found: 2 }), "{err}");
        let err = decode(br#"{"body": {"type": "hello_ack", "site": 0}}"#).unwrap_err();
        assert!(matches!(err, WireError::Malformed(_)), "{err}");
    }

    #[test]
    fn malformed_bodies_are_errors() {
        for bad in [
            &br#"{"version": 1, "body": {"type": "hello", "site": -1, "sites": 3}}"#[..],
            br#"{"version": 1, "body": {"type": "states", "entries": [{"key": "x", "message": {"version": 1, "bound": "lower", "k": 0, "rights": {"version": 1, "from": 0, "to": 0, "diagonal": [1], "u": [0], "transferred_from_to": 0}}}]}}"#,
            br#"{"version": 1, "body": {"type": "states", "entries": [{"key": "x", "message": {"version": 1, "bound": "lower", "k": 0, "rights": {"version": 1, "from": 0, "to": 1, "diagonal": [1], "u": [0, 0], "transferred_from_to": 0}}}]}}"#,
            br#"{"version": 1, "body": {"type": "transfer", "id": 1, "key": "x", "request": {"version": 7}}}"#,
            b"\xff\xfe",
            b"[]",
        ] {
            assert!(decode(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[tokio::test]
    async fn oversized_frames_are_refused_before_reading() {
        let mut input: &[u8] = &u32::MAX.to_be_bytes();
        let err = read_frame(&mut input).await.unwrap_err();
        assert!(matches!(err, WireError::TooLarge { .. }), "{err}");
        let mut empty: &[u8] = &[];
        assert!(read_frame(&mut empty).await.unwrap().is_none());
    }

    proptest::proptest! {
        #[test]
        fn damaged_frames_never_panic(
            index in 0usize..7,
            flips in proptest::collection::vec((0usize..4096, 0u8..=255), 1..8),
        ) {
            let frame = sample_frames().swap_remove(index);
            let mut bytes = encode(&frame).unwrap().split_off(4);
            for (at, value) in flips {
                if !bytes.is_empty() {
                    let at = at % bytes.len();
                    bytes[at] = value;
                }
            }
            let _ = decode(&bytes);
        }
    }
}

//! The messages between sites (and between a client library and its site's
//! agent): JSON bodies, versioned, carried as bytes inside `roost-net`'s
//! postcard envelopes ([`SiteMessage`]).
//!
//! `roost-net` frames, authenticates and batches; inside each envelope a
//! [`SiteMessage`] holds one JSON object `{"version": 1, "body": {...}}`,
//! whose version is checked before the body is decoded ([`decode`]). The
//! counter states inside use `roost-bcounter`'s own versioned serde
//! encodings, which check their shape and soundness on the way in. JSON (not
//! postcard) because those encodings are self-describing: fields are
//! optional on the wire so that a future layout is reported as an
//! unsupported version.
//!
//! Links are one-way (a site writes to a peer over its own connection and
//! reads the peer's over the peer's), so requests carry ids and their replies
//! come back on the other link: `Transfer` is answered by a `TransferReply`,
//! `Ping` by a `Pong`, each with the request's id. A client library sends
//! `AskDonor` to its own site's agent (one authenticated connection, replies
//! on the same connection), which relays it to the donor as a `Transfer`.

use roost_bcounter::{CounterMessage, RightsDelta, TransferRequest};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The version this build writes and reads.
pub const PROTOCOL_VERSION: u32 = 1;

/// A message body larger than this is refused (the transport's frame limit
/// is this plus room for the envelope), so one frame buffers at most this.
pub const MAX_FRAME_BYTES: usize = 4 << 20;

/// What travels in a `roost-net` envelope between sites: one encoded
/// [`Frame`] ([`encode`] / [`decode`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteMessage {
    pub body: Vec<u8>,
}

impl SiteMessage {
    pub fn new(frame: &Frame) -> Result<SiteMessage, WireError> {
        encode(frame).map(|body| SiteMessage { body })
    }
}

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
    /// Liveness: a site pings each peer every few ms; the peer's link
    /// counts as up while `Pong`s with the ids come back.
    Ping {
        id: u64,
    },
    Pong {
        id: u64,
    },
    /// A propagation batch: deltas of counters changed since the last batch.
    States {
        entries: Vec<StateEntry>,
    },
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
    WeakDeltas {
        entries: Vec<WeakDelta>,
    },
    /// A client library (client-based design) asks its own site's agent to
    /// request rights from `request.donor`; answered by a `TransferReply`.
    AskDonor {
        id: u64,
        key: String,
        request: TransferRequest,
    },
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
    #[error("frame of {len} bytes exceeds the limit of {max}")]
    TooLarge { len: usize, max: usize },
    #[error("unsupported protocol version {found}: this build speaks version {PROTOCOL_VERSION}")]
    Version { found: u32 },
    #[error("malformed frame: {0}")]
    Malformed(String),
}

/// Encodes one frame's body (what a [`SiteMessage`] carries).
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
    Ok(body)
}

/// Decodes one frame's body (a [`SiteMessage`]'s bytes): the size, then the
/// version, then the body. The fuzz target's entry point.
pub fn decode(payload: &[u8]) -> Result<Frame, WireError> {
    if payload.len() > MAX_FRAME_BYTES {
        return Err(WireError::TooLarge {
            len: payload.len(),
            max: MAX_FRAME_BYTES,
        });
    }
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
            Frame::Ping { id: 1 },
            Frame::Pong { id: 1 },
            Frame::AskDonor {
                id: 3,
                key: "stock".to_owned(),
                request,
            },
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
            assert_eq!(decode(&bytes).unwrap(), frame);
            let message = SiteMessage::new(&frame).unwrap();
            assert_eq!(decode(&message.body).unwrap(), frame);
        }
    }

    #[test]
    fn version_is_checked_first() {
        let err = decode(br#"{"version": 2, "body": {"type": "no_such_frame"}}"#).unwrap_err();
        assert!(matches!(err, WireError::Version { found: 2 }), "{err}");
        let err = decode(br#"{"body": {"type": "ping", "id": 0}}"#).unwrap_err();
        assert!(matches!(err, WireError::Malformed(_)), "{err}");
    }

    #[test]
    fn malformed_bodies_are_errors() {
        for bad in [
            &br#"{"version": 1, "body": {"type": "ping", "id": -1}}"#[..],
            br#"{"version": 1, "body": {"type": "states", "entries": [{"key": "x", "message": {"version": 1, "bound": "lower", "k": 0, "rights": {"version": 1, "from": 0, "to": 0, "diagonal": [1], "u": [0], "transferred_from_to": 0}}}]}}"#,
            br#"{"version": 1, "body": {"type": "states", "entries": [{"key": "x", "message": {"version": 1, "bound": "lower", "k": 0, "rights": {"version": 1, "from": 0, "to": 1, "diagonal": [1], "u": [0, 0], "transferred_from_to": 0}}}]}}"#,
            br#"{"version": 1, "body": {"type": "transfer", "id": 1, "key": "x", "request": {"version": 7}}}"#,
            b"\xff\xfe",
            b"[]",
        ] {
            assert!(decode(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn oversized_bodies_are_refused_before_parsing() {
        let big = vec![b' '; MAX_FRAME_BYTES + 1];
        let err = decode(&big).unwrap_err();
        assert!(matches!(err, WireError::TooLarge { .. }), "{err}");
    }

    proptest::proptest! {
        #[test]
        fn damaged_frames_never_panic(
            index in 0usize..8,
            flips in proptest::collection::vec((0usize..4096, 0u8..=255), 1..8),
        ) {
            let frame = sample_frames().swap_remove(index);
            let mut bytes = encode(&frame).unwrap();
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

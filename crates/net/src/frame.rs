//! The wire format: a frame is a little-endian `u32` payload length followed by
//! the payload, a postcard-encoded [`Envelope`] whose first field is the wire
//! version. Decoding never trusts the peer: the length is checked against the
//! frame limit before anything is buffered, the version before the body.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The envelope layout this build speaks. A peer with another version is
/// rejected with [`FrameError::UnsupportedVersion`], never misread.
pub const WIRE_VERSION: u16 = 1;

/// Bytes of the length prefix.
pub const LENGTH_PREFIX_BYTES: usize = 4;

/// Default limit on one frame's payload (16 MiB).
pub const DEFAULT_MAX_FRAME_BYTES: u32 = 16 * 1024 * 1024;

/// A node's identity in the cluster configuration.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
pub struct NodeId(pub u32);

impl std::fmt::Display for NodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "n{}", self.0)
    }
}

/// A membership epoch id (Zeus's `e_id`; not the storage layer's `SiloEpoch`): every membership update increases it,
/// and every protocol message carries the sender's.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
pub struct EpochId(pub u64);

impl std::fmt::Display for EpochId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "e{}", self.0)
    }
}

/// What travels between nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope<M> {
    pub version: u16,
    pub from: NodeId,
    pub to: NodeId,
    pub epoch: EpochId,
    pub msg: M,
}

impl<M> Envelope<M> {
    pub fn new(from: NodeId, to: NodeId, epoch: EpochId, msg: M) -> Self {
        Envelope {
            version: WIRE_VERSION,
            from,
            to,
            epoch,
            msg,
        }
    }
}

/// The same layout as [`Envelope`], borrowing the message, so a sender can
/// encode straight into its batch buffer without cloning.
#[derive(Serialize)]
struct EnvelopeRef<'a, M> {
    version: u16,
    from: NodeId,
    to: NodeId,
    epoch: EpochId,
    msg: &'a M,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("frame of {len_bytes} bytes exceeds the limit of {max_bytes} bytes")]
    TooLarge { len_bytes: u64, max_bytes: u32 },
    #[error("empty frame")]
    Empty,
    #[error("unsupported wire version {found} (this node speaks {WIRE_VERSION})")]
    UnsupportedVersion { found: u16 },
    #[error("malformed envelope: {0}")]
    Malformed(String),
    #[error("{trailing_bytes} trailing bytes after the envelope")]
    TrailingBytes { trailing_bytes: usize },
    #[error("cannot encode envelope: {0}")]
    Encode(String),
}

/// Appends one frame (prefix and payload) to `buf`. On error `buf` is left as
/// it was, so a batch never carries half a frame.
pub fn encode_frame_into<M: Serialize>(
    buf: &mut Vec<u8>,
    from: NodeId,
    to: NodeId,
    epoch: EpochId,
    msg: &M,
    max_frame_bytes: u32,
) -> Result<(), FrameError> {
    let start = buf.len();
    buf.extend_from_slice(&[0; LENGTH_PREFIX_BYTES]);
    let envelope = EnvelopeRef {
        version: WIRE_VERSION,
        from,
        to,
        epoch,
        msg,
    };
    // `to_io` appends to the vector in place, so earlier frames in a batch
    // survive an encoding error (the partial frame is cut off below).
    if let Err(error) = postcard::to_io(&envelope, &mut *buf) {
        buf.truncate(start);
        return Err(FrameError::Encode(error.to_string()));
    }
    let payload_bytes = buf.len() - start - LENGTH_PREFIX_BYTES;
    if payload_bytes > max_frame_bytes as usize {
        buf.truncate(start);
        return Err(FrameError::TooLarge {
            len_bytes: payload_bytes as u64,
            max_bytes: max_frame_bytes,
        });
    }
    let prefix = (payload_bytes as u32).to_le_bytes();
    buf[start..start + LENGTH_PREFIX_BYTES].copy_from_slice(&prefix);
    Ok(())
}

/// One frame as a fresh vector.
pub fn encode_frame<M: Serialize>(envelope: &Envelope<M>) -> Result<Vec<u8>, FrameError> {
    let mut buf = Vec::new();
    encode_frame_into(
        &mut buf,
        envelope.from,
        envelope.to,
        envelope.epoch,
        &envelope.msg,
        u32::MAX,
    )?;
    Ok(buf)
}

/// The payload length announced by a frame's prefix, checked against the
/// limit; `None` while fewer than 4 bytes are buffered.
pub fn frame_len(buf: &[u8], max_frame_bytes: u32) -> Result<Option<usize>, FrameError> {
    let Some(prefix) = buf.get(..LENGTH_PREFIX_BYTES) else {
        return Ok(None);
    };
    let len = u32::from_le_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
    if len > max_frame_bytes {
        return Err(FrameError::TooLarge {
            len_bytes: u64::from(len),
            max_bytes: max_frame_bytes,
        });
    }
    if len == 0 {
        return Err(FrameError::Empty);
    }
    Ok(Some(len as usize))
}

/// Decodes one envelope from a payload (without the prefix): the version
/// first, then the body, and the payload must be used up exactly.
pub fn decode_payload<M: for<'de> Deserialize<'de>>(
    payload: &[u8],
) -> Result<Envelope<M>, FrameError> {
    let (version, _) = postcard::take_from_bytes::<u16>(payload)
        .map_err(|error| FrameError::Malformed(format!("version: {error}")))?;
    if version != WIRE_VERSION {
        return Err(FrameError::UnsupportedVersion { found: version });
    }
    let (envelope, rest) = postcard::take_from_bytes::<Envelope<M>>(payload)
        .map_err(|error| FrameError::Malformed(error.to_string()))?;
    if !rest.is_empty() {
        return Err(FrameError::TrailingBytes {
            trailing_bytes: rest.len(),
        });
    }
    Ok(envelope)
}

/// Decodes the first frame of `buf`: `Ok(None)` if it is not all there yet,
/// else the envelope and the bytes it used (prefix included).
pub fn decode_frame<M: for<'de> Deserialize<'de>>(
    buf: &[u8],
    max_frame_bytes: u32,
) -> Result<Option<(Envelope<M>, usize)>, FrameError> {
    let Some(len) = frame_len(buf, max_frame_bytes)? else {
        return Ok(None);
    };
    let end = LENGTH_PREFIX_BYTES + len;
    let Some(payload) = buf.get(LENGTH_PREFIX_BYTES..end) else {
        return Ok(None);
    };
    Ok(Some((decode_payload(payload)?, end)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_partial_frames() {
        let envelope = Envelope::new(NodeId(1), NodeId(2), EpochId(7), (42u64, "hi".to_owned()));
        let bytes = encode_frame(&envelope).unwrap();
        for cut in 0..bytes.len() {
            assert_eq!(decode_frame::<(u64, String)>(&bytes[..cut], 1024), Ok(None));
        }
        let (decoded, used) = decode_frame::<(u64, String)>(&bytes, 1024)
            .unwrap()
            .unwrap();
        assert_eq!((decoded, used), (envelope, bytes.len()));
    }

    #[test]
    fn oversized_empty_and_foreign_frames_are_errors() {
        let too_big = 2000u32.to_le_bytes();
        assert!(matches!(
            decode_frame::<u8>(&too_big, 1000),
            Err(FrameError::TooLarge { .. })
        ));
        assert_eq!(
            decode_frame::<u8>(&0u32.to_le_bytes(), 1000),
            Err(FrameError::Empty)
        );
        let mut bytes =
            encode_frame(&Envelope::new(NodeId(1), NodeId(2), EpochId(0), 5u8)).unwrap();
        bytes[4] = 9; // version 9
        assert_eq!(
            decode_frame::<u8>(&bytes, 1000),
            Err(FrameError::UnsupportedVersion { found: 9 })
        );
    }

    #[test]
    fn encoding_over_the_limit_leaves_the_buffer_unchanged() {
        let mut buf = vec![1, 2, 3];
        let err = encode_frame_into(
            &mut buf,
            NodeId(0),
            NodeId(1),
            EpochId(0),
            &vec![0u8; 100],
            50,
        );
        assert!(matches!(err, Err(FrameError::TooLarge { .. })));
        assert_eq!(buf, vec![1, 2, 3]);
    }
}

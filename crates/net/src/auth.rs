//! Shared-secret authentication of node-to-node connections.
//!
//! Every node of a cluster is configured with the same [`ClusterSecret`]. Before
//! a connection carries a single envelope, its two ends run a mutual
//! challenge-response handshake that proves to each side that the other knows
//! the secret, without sending the secret itself:
//!
//! ```text
//! dialer                                              acceptor
//!   Hello     {dialer id, acceptor id, dialer nonce}  ->
//!          <- Challenge {acceptor id, acceptor nonce, MAC(acceptor role)}
//!   Response  {MAC(dialer role)}                      ->
//! ```
//!
//! Each MAC is HMAC-SHA256 keyed with the secret over a domain tag, the role of
//! the side that produced it, both node ids and both nonces (see [`mac`]).
//!
//! * **Freshness.** Each side contributes a fresh random nonce and checks a MAC
//!   over its own nonce, so a recorded handshake replayed later fails.
//! * **No reflection.** The role is MACed, so the acceptor's MAC cannot be sent
//!   back to it as the dialer's.
//! * **Bound identities.** Both ids are MACed: the dialer checks it reached the
//!   node it meant to, the acceptor that the dialer is in its peer table, and
//!   afterwards the acceptor only accepts envelopes `from` that node.
//! * **Hostile input.** Handshake messages are small fixed layouts behind a
//!   length prefix checked against [`MAX_HANDSHAKE_BYTES`] before anything is
//!   read, versioned by a magic and a version byte like the envelope, and the
//!   whole handshake is bounded by a timeout. MACs are compared in constant time.
//!
//! What it does not do: payloads are neither encrypted nor MACed after the
//! handshake, so an attacker on the network path can read them, and could
//! hijack an authenticated TCP connection. The handshake keeps out processes
//! that merely reach the port without the secret (a stray or misconfigured node,
//! a port scanner, a process of another cluster). For confidentiality and
//! integrity against an on-path attacker, run the transport over mTLS (or a
//! tunnel such as WireGuard).

use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use rand::RngCore;
use sha2::Sha256;
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::frame::{NodeId, LENGTH_PREFIX_BYTES};

/// The shortest secret accepted: 128 bits, so guessing it is hopeless.
pub const MIN_SECRET_BYTES: usize = 16;

/// Bytes of each side's nonce (256 bits: never repeats in practice).
pub const NONCE_BYTES: usize = 32;

/// Bytes of an HMAC-SHA256 tag.
pub const MAC_BYTES: usize = 32;

/// First bytes of every handshake payload. Its first byte, read as the
/// envelope's version varint, is not [`crate::WIRE_VERSION`], so a node without
/// authentication rejects a hello instead of misreading it.
pub const HANDSHAKE_MAGIC: [u8; 4] = *b"RSTH";

/// The handshake layout this build speaks; a peer with another is refused.
pub const HANDSHAKE_VERSION: u8 = 1;

/// Limit on one handshake message's payload. The largest real one is 74 bytes;
/// anything announcing more is refused before it is read.
pub const MAX_HANDSHAKE_BYTES: usize = 128;

/// Separates these MACs from any other use of the same key.
const DOMAIN_TAG: &[u8] = b"roost-net/handshake/v1";

/// Magic, version and kind.
const HEADER_BYTES: usize = HANDSHAKE_MAGIC.len() + 2;

type HmacSha256 = Hmac<Sha256>;

/// A random value contributed by one side of a handshake.
pub type Nonce = [u8; NONCE_BYTES];

/// An HMAC-SHA256 tag.
pub type Tag = [u8; MAC_BYTES];

/// The cluster's shared secret: at least [`MIN_SECRET_BYTES`] bytes. Its
/// `Debug` output never shows the bytes, so it can sit in logged configs.
#[derive(Clone)]
pub struct ClusterSecret(Box<[u8]>);

#[derive(Debug, Error, PartialEq, Eq)]
pub enum SecretError {
    #[error("cluster secret is {len} bytes; it must be at least {MIN_SECRET_BYTES}")]
    TooShort { len: usize },
    #[error("cluster secret in hex has an odd number of digits ({digits})")]
    OddHexLength { digits: usize },
    #[error("cluster secret in hex has a non-hex character at position {position}")]
    InvalidHex { position: usize },
}

impl ClusterSecret {
    /// Takes `bytes` as the secret; refuses fewer than [`MIN_SECRET_BYTES`].
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, SecretError> {
        let bytes = bytes.into();
        if bytes.len() < MIN_SECRET_BYTES {
            return Err(SecretError::TooShort { len: bytes.len() });
        }
        Ok(ClusterSecret(bytes.into_boxed_slice()))
    }

    /// Parses a secret written in hex (either case; surrounding whitespace,
    /// such as a secret file's final newline, is ignored).
    pub fn from_hex(text: &str) -> Result<Self, SecretError> {
        let digits = text.trim().as_bytes();
        if digits.len() % 2 != 0 {
            return Err(SecretError::OddHexLength {
                digits: digits.len(),
            });
        }
        let leading = text.len() - text.trim_start().len();
        let mut bytes = Vec::with_capacity(digits.len() / 2);
        for (pair, chunk) in digits.chunks_exact(2).enumerate() {
            let digit = |i: usize| {
                hex_value(chunk[i]).ok_or(SecretError::InvalidHex {
                    position: leading + 2 * pair + i,
                })
            };
            bytes.push(digit(0)? << 4 | digit(1)?);
        }
        ClusterSecret::new(bytes)
    }

    /// A fresh random 32-byte secret (for tests and for generating one).
    pub fn random() -> Self {
        let mut bytes = vec![0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        ClusterSecret(bytes.into_boxed_slice())
    }

    /// A password for another of the cluster's links, derived from the
    /// secret (HMAC-SHA256 over `label`, in hex): every node derives the
    /// same one, and it tells nothing of the secret or of other labels'.
    pub fn derive_password(&self, label: &str) -> String {
        let mut mac = <HmacSha256 as KeyInit>::new_from_slice(&self.0)
            .expect("HMAC takes a key of any length");
        mac.update(b"roost-net/derived/v1/");
        mac.update(label.as_bytes());
        mac.finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// How many bytes the secret has (safe to log, unlike the bytes).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Always false: a secret has at least [`MIN_SECRET_BYTES`] bytes.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

impl std::str::FromStr for ClusterSecret {
    type Err = SecretError;

    /// Same as [`ClusterSecret::from_hex`].
    fn from_str(text: &str) -> Result<Self, SecretError> {
        ClusterSecret::from_hex(text)
    }
}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClusterSecret(<{} bytes redacted>)", self.0.len())
    }
}

/// Compares without an early exit, so comparing configs leaks no timing about
/// where two secrets differ (the length is not secret).
impl PartialEq for ClusterSecret {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .zip(other.0.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

impl Eq for ClusterSecret {}

/// Which side of the handshake produced a MAC. MACed, so neither side's MAC
/// is valid as the other's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Dialer,
    Acceptor,
}

impl Role {
    fn byte(self) -> u8 {
        match self {
            Role::Dialer => 1,
            Role::Acceptor => 2,
        }
    }
}

/// Everything both MACs of one handshake cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transcript {
    pub dialer: NodeId,
    pub acceptor: NodeId,
    pub dialer_nonce: Nonce,
    pub acceptor_nonce: Nonce,
}

/// A keyed HMAC-SHA256 over the transcript as `role` sees it. Every field has
/// a fixed width, so no two transcripts produce the same MACed bytes.
fn keyed(secret: &ClusterSecret, transcript: &Transcript, role: Role) -> HmacSha256 {
    // HMAC takes keys of any length; the error case cannot happen.
    let mut mac = HmacSha256::new_from_slice(&secret.0).expect("HMAC accepts any key length");
    mac.update(DOMAIN_TAG);
    mac.update(&[role.byte()]);
    mac.update(&transcript.dialer.0.to_le_bytes());
    mac.update(&transcript.acceptor.0.to_le_bytes());
    mac.update(&transcript.dialer_nonce);
    mac.update(&transcript.acceptor_nonce);
    mac
}

/// The MAC the side playing `role` sends for this transcript.
pub fn mac(secret: &ClusterSecret, transcript: &Transcript, role: Role) -> Tag {
    keyed(secret, transcript, role)
        .finalize()
        .into_bytes()
        .into()
}

/// Checks a MAC received from the side playing `role`, in constant time.
pub fn verify_mac(
    secret: &ClusterSecret,
    transcript: &Transcript,
    role: Role,
    tag: &[u8],
) -> Result<(), HandshakeError> {
    keyed(secret, transcript, role)
        .verify_slice(tag)
        .map_err(|_| HandshakeError::BadMac)
}

/// A fresh nonce from the thread-local CSPRNG (ChaCha, seeded by the OS).
pub fn fresh_nonce() -> Nonce {
    let mut nonce = [0u8; NONCE_BYTES];
    rand::rng().fill_bytes(&mut nonce);
    nonce
}

/// One handshake message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeMsg {
    /// Dialer to acceptor: who I am, whom I meant to reach, my nonce.
    Hello {
        from: NodeId,
        to: NodeId,
        nonce: Nonce,
    },
    /// Acceptor to dialer: who I am, my nonce, and proof that I know the secret.
    Challenge {
        from: NodeId,
        nonce: Nonce,
        mac: Tag,
    },
    /// Dialer to acceptor: proof that I know the secret.
    Response { mac: Tag },
}

impl HandshakeMsg {
    fn kind(&self) -> u8 {
        match self {
            HandshakeMsg::Hello { .. } => 1,
            HandshakeMsg::Challenge { .. } => 2,
            HandshakeMsg::Response { .. } => 3,
        }
    }

    /// Its name, for errors and logs.
    fn name(&self) -> &'static str {
        match self {
            HandshakeMsg::Hello { .. } => "hello",
            HandshakeMsg::Challenge { .. } => "challenge",
            HandshakeMsg::Response { .. } => "response",
        }
    }
}

#[derive(Debug, Error)]
pub enum HandshakeError {
    #[error("handshake message of {len_bytes} bytes exceeds the limit of {MAX_HANDSHAKE_BYTES}")]
    TooLarge { len_bytes: u64 },
    #[error("empty handshake message")]
    Empty,
    #[error("not a handshake message (bad magic); is the peer configured without a secret?")]
    BadMagic,
    #[error("unsupported handshake version {found} (this node speaks {HANDSHAKE_VERSION})")]
    UnsupportedVersion { found: u8 },
    #[error("unknown handshake message kind {0}")]
    UnknownKind(u8),
    #[error("handshake message of kind {kind} has {len_bytes} bytes, expected {expected}")]
    WrongLength {
        kind: u8,
        len_bytes: usize,
        expected: usize,
    },
    #[error("expected a handshake {expected}, got a {got}")]
    Unexpected {
        expected: &'static str,
        got: &'static str,
    },
    #[error("peer says it is {0}, which is not in the peer table")]
    UnknownPeer(NodeId),
    #[error("reached {found} while dialing {expected}")]
    WrongNode { expected: NodeId, found: NodeId },
    #[error("MAC does not verify: the peer does not know the cluster secret")]
    BadMac,
    #[error("handshake not finished within {0} ms")]
    Timeout(u64),
    #[error("connection failed during the handshake: {0}")]
    Io(#[from] std::io::Error),
}

/// Payload bytes of each kind (header included).
fn payload_len(kind: u8) -> Option<usize> {
    let body = match kind {
        1 => 4 + 4 + NONCE_BYTES,
        2 => 4 + NONCE_BYTES + MAC_BYTES,
        3 => MAC_BYTES,
        _ => return None,
    };
    Some(HEADER_BYTES + body)
}

/// One handshake message as a frame: a `u32` little-endian payload length,
/// then magic, version, kind and the fixed-width fields.
pub fn encode_handshake(msg: &HandshakeMsg) -> Vec<u8> {
    let mut payload = Vec::with_capacity(MAX_HANDSHAKE_BYTES);
    payload.extend_from_slice(&HANDSHAKE_MAGIC);
    payload.push(HANDSHAKE_VERSION);
    payload.push(msg.kind());
    match msg {
        HandshakeMsg::Hello { from, to, nonce } => {
            payload.extend_from_slice(&from.0.to_le_bytes());
            payload.extend_from_slice(&to.0.to_le_bytes());
            payload.extend_from_slice(nonce);
        }
        HandshakeMsg::Challenge { from, nonce, mac } => {
            payload.extend_from_slice(&from.0.to_le_bytes());
            payload.extend_from_slice(nonce);
            payload.extend_from_slice(mac);
        }
        HandshakeMsg::Response { mac } => payload.extend_from_slice(mac),
    }
    debug_assert_eq!(Some(payload.len()), payload_len(msg.kind()));
    let mut frame = (payload.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&payload);
    frame
}

/// The payload length a handshake frame's prefix announces, checked against
/// [`MAX_HANDSHAKE_BYTES`] before a byte of payload is read.
pub fn handshake_len(prefix: [u8; LENGTH_PREFIX_BYTES]) -> Result<usize, HandshakeError> {
    let len = u32::from_le_bytes(prefix);
    if len as usize > MAX_HANDSHAKE_BYTES {
        return Err(HandshakeError::TooLarge {
            len_bytes: u64::from(len),
        });
    }
    if len == 0 {
        return Err(HandshakeError::Empty);
    }
    Ok(len as usize)
}

/// Decodes a handshake payload (without the prefix): magic, then version,
/// then kind, then exactly that kind's fields.
pub fn decode_handshake_payload(payload: &[u8]) -> Result<HandshakeMsg, HandshakeError> {
    if payload.len() > MAX_HANDSHAKE_BYTES {
        return Err(HandshakeError::TooLarge {
            len_bytes: payload.len() as u64,
        });
    }
    if payload.get(..HANDSHAKE_MAGIC.len()) != Some(&HANDSHAKE_MAGIC[..]) {
        return Err(HandshakeError::BadMagic);
    }
    let (Some(&version), Some(&kind)) = (payload.get(4), payload.get(5)) else {
        return Err(HandshakeError::BadMagic);
    };
    if version != HANDSHAKE_VERSION {
        return Err(HandshakeError::UnsupportedVersion { found: version });
    }
    let expected = payload_len(kind).ok_or(HandshakeError::UnknownKind(kind))?;
    if payload.len() != expected {
        return Err(HandshakeError::WrongLength {
            kind,
            len_bytes: payload.len(),
            expected,
        });
    }
    let mut fields = Fields(&payload[HEADER_BYTES..]);
    Ok(match kind {
        1 => HandshakeMsg::Hello {
            from: fields.node(),
            to: fields.node(),
            nonce: fields.array(),
        },
        2 => HandshakeMsg::Challenge {
            from: fields.node(),
            nonce: fields.array(),
            mac: fields.array(),
        },
        _ => HandshakeMsg::Response {
            mac: fields.array(),
        },
    })
}

/// Decodes the first handshake frame of `buf`: `Ok(None)` if it is not all
/// there yet, else the message and the bytes it used (prefix included).
pub fn decode_handshake(buf: &[u8]) -> Result<Option<(HandshakeMsg, usize)>, HandshakeError> {
    let Some(prefix) = buf.get(..LENGTH_PREFIX_BYTES) else {
        return Ok(None);
    };
    let len = handshake_len([prefix[0], prefix[1], prefix[2], prefix[3]])?;
    let end = LENGTH_PREFIX_BYTES + len;
    let Some(payload) = buf.get(LENGTH_PREFIX_BYTES..end) else {
        return Ok(None);
    };
    Ok(Some((decode_handshake_payload(payload)?, end)))
}

/// Reads fixed-width fields off a payload whose length was already checked.
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn array<const N: usize>(&mut self) -> [u8; N] {
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        head.try_into().expect("split at N")
    }

    fn node(&mut self) -> NodeId {
        NodeId(u32::from_le_bytes(self.array()))
    }
}

/// Reads one handshake message. Reads exactly its bytes and no more, so
/// envelopes the peer sends right after the handshake stay in the socket for
/// the frame reader.
async fn read_msg<S: AsyncRead + Unpin>(stream: &mut S) -> Result<HandshakeMsg, HandshakeError> {
    let mut prefix = [0u8; LENGTH_PREFIX_BYTES];
    stream.read_exact(&mut prefix).await?;
    let len = handshake_len(prefix)?;
    let mut payload = [0u8; MAX_HANDSHAKE_BYTES];
    stream.read_exact(&mut payload[..len]).await?;
    decode_handshake_payload(&payload[..len])
}

async fn write_msg<S: AsyncWrite + Unpin>(
    stream: &mut S,
    msg: &HandshakeMsg,
) -> Result<(), HandshakeError> {
    stream.write_all(&encode_handshake(msg)).await?;
    stream.flush().await?;
    Ok(())
}

fn unexpected(expected: &'static str, got: &HandshakeMsg) -> HandshakeError {
    HandshakeError::Unexpected {
        expected,
        got: got.name(),
    }
}

/// Runs `handshake`, giving up after `timeout_ms`, so a silent or slow peer
/// cannot hold a connection (and its task) open.
async fn bounded<T>(
    timeout_ms: u64,
    handshake: impl std::future::Future<Output = Result<T, HandshakeError>>,
) -> Result<T, HandshakeError> {
    tokio::time::timeout(Duration::from_millis(timeout_ms), handshake)
        .await
        .unwrap_or(Err(HandshakeError::Timeout(timeout_ms)))
}

/// The dialer's side: proves to `peer` that this node (`me`) knows the
/// secret and checks that `peer` does. On `Ok` the stream may carry envelopes.
pub async fn dial<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    secret: &ClusterSecret,
    me: NodeId,
    peer: NodeId,
    timeout_ms: u64,
) -> Result<(), HandshakeError> {
    bounded(timeout_ms, async {
        let dialer_nonce = fresh_nonce();
        let hello = HandshakeMsg::Hello {
            from: me,
            to: peer,
            nonce: dialer_nonce,
        };
        write_msg(stream, &hello).await?;
        let (from, acceptor_nonce, tag) = match read_msg(stream).await? {
            HandshakeMsg::Challenge { from, nonce, mac } => (from, nonce, mac),
            other => return Err(unexpected("challenge", &other)),
        };
        if from != peer {
            return Err(HandshakeError::WrongNode {
                expected: peer,
                found: from,
            });
        }
        let transcript = Transcript {
            dialer: me,
            acceptor: peer,
            dialer_nonce,
            acceptor_nonce,
        };
        verify_mac(secret, &transcript, Role::Acceptor, &tag)?;
        let response = HandshakeMsg::Response {
            mac: mac(secret, &transcript, Role::Dialer),
        };
        write_msg(stream, &response).await
    })
    .await
}

/// The acceptor's side: checks that the dialer is one of `known` and knows
/// the secret, and proves that this node (`me`) does. Returns the dialer's id,
/// the only `from` its envelopes may then carry.
pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    secret: &ClusterSecret,
    me: NodeId,
    known: &[NodeId],
    timeout_ms: u64,
) -> Result<NodeId, HandshakeError> {
    bounded(timeout_ms, async {
        let (dialer, to, dialer_nonce) = match read_msg(stream).await? {
            HandshakeMsg::Hello { from, to, nonce } => (from, to, nonce),
            other => return Err(unexpected("hello", &other)),
        };
        if to != me {
            return Err(HandshakeError::WrongNode {
                expected: me,
                found: to,
            });
        }
        if !known.contains(&dialer) {
            return Err(HandshakeError::UnknownPeer(dialer));
        }
        let transcript = Transcript {
            dialer,
            acceptor: me,
            dialer_nonce,
            acceptor_nonce: fresh_nonce(),
        };
        let challenge = HandshakeMsg::Challenge {
            from: me,
            nonce: transcript.acceptor_nonce,
            mac: mac(secret, &transcript, Role::Acceptor),
        };
        write_msg(stream, &challenge).await?;
        match read_msg(stream).await? {
            HandshakeMsg::Response { mac } => {
                verify_mac(secret, &transcript, Role::Dialer, &mac)?;
                Ok(dialer)
            }
            other => Err(unexpected("response", &other)),
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(byte: u8) -> ClusterSecret {
        ClusterSecret::new(vec![byte; 32]).unwrap()
    }

    fn transcript() -> Transcript {
        Transcript {
            dialer: NodeId(1),
            acceptor: NodeId(2),
            dialer_nonce: [3; NONCE_BYTES],
            acceptor_nonce: [4; NONCE_BYTES],
        }
    }

    #[test]
    fn secrets_are_validated_parsed_and_never_printed() {
        assert_eq!(
            ClusterSecret::new(vec![7; 15]),
            Err(SecretError::TooShort { len: 15 })
        );
        assert_eq!(ClusterSecret::new(vec![7; 16]).unwrap().len(), 16);
        let hex = "00112233445566778899aabbccddeeFF";
        let parsed: ClusterSecret = format!("  {hex}\n").parse().unwrap();
        let expected: Vec<u8> = vec![
            0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd,
            0xee, 0xff,
        ];
        assert_eq!(parsed, ClusterSecret::new(expected).unwrap());
        assert_eq!(
            ClusterSecret::from_hex("abc"),
            Err(SecretError::OddHexLength { digits: 3 })
        );
        assert_eq!(
            ClusterSecret::from_hex(" 00112233445566778899aabbccddeegg"),
            Err(SecretError::InvalidHex { position: 31 })
        );
        assert_eq!(
            ClusterSecret::from_hex("0011"),
            Err(SecretError::TooShort { len: 2 })
        );
        assert!(ClusterSecret::from_hex("").is_err());
        let shown = format!("{parsed:?} {:?}", Some(parsed.clone()));
        assert!(!shown.to_lowercase().contains("aabb"), "{shown}");
        assert!(!shown.contains("170"), "{shown}"); // 0xaa as decimal
        assert!(shown.contains("redacted"), "{shown}");
        assert_ne!(secret(1), secret(2));
        assert_ne!(ClusterSecret::random(), ClusterSecret::random());
    }

    #[test]
    fn a_mac_verifies_only_unchanged() {
        let t = transcript();
        let tag = mac(&secret(1), &t, Role::Acceptor);
        verify_mac(&secret(1), &t, Role::Acceptor, &tag).unwrap();
        // Every single flipped bit is caught.
        for bit in 0..MAC_BYTES * 8 {
            let mut flipped = tag;
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(matches!(
                verify_mac(&secret(1), &t, Role::Acceptor, &flipped),
                Err(HandshakeError::BadMac)
            ));
        }
        // Truncated or empty tags are refused.
        assert!(verify_mac(&secret(1), &t, Role::Acceptor, &tag[..16]).is_err());
        assert!(verify_mac(&secret(1), &t, Role::Acceptor, &[]).is_err());
        // Another secret, the other role (reflection), or any other transcript.
        assert!(verify_mac(&secret(2), &t, Role::Acceptor, &tag).is_err());
        assert!(verify_mac(&secret(1), &t, Role::Dialer, &tag).is_err());
        let others = [
            Transcript {
                dialer: NodeId(9),
                ..t
            },
            Transcript {
                acceptor: NodeId(9),
                ..t
            },
            Transcript {
                dialer: t.acceptor,
                acceptor: t.dialer,
                ..t
            },
            Transcript {
                dialer_nonce: [5; NONCE_BYTES],
                ..t
            },
            Transcript {
                acceptor_nonce: [5; NONCE_BYTES],
                ..t
            },
        ];
        for other in &others {
            assert!(verify_mac(&secret(1), other, Role::Acceptor, &tag).is_err());
        }
        assert_ne!(fresh_nonce(), fresh_nonce());
    }

    fn samples() -> [HandshakeMsg; 3] {
        [
            HandshakeMsg::Hello {
                from: NodeId(1),
                to: NodeId(u32::MAX),
                nonce: [0xab; NONCE_BYTES],
            },
            HandshakeMsg::Challenge {
                from: NodeId(2),
                nonce: [0xcd; NONCE_BYTES],
                mac: [0xef; MAC_BYTES],
            },
            HandshakeMsg::Response {
                mac: [0x12; MAC_BYTES],
            },
        ]
    }

    #[test]
    fn handshake_messages_round_trip_and_wait_for_all_their_bytes() {
        for msg in samples() {
            let bytes = encode_handshake(&msg);
            assert!(bytes.len() <= LENGTH_PREFIX_BYTES + MAX_HANDSHAKE_BYTES);
            for cut in 0..bytes.len() {
                assert!(matches!(decode_handshake(&bytes[..cut]), Ok(None)));
            }
            let (decoded, used) = decode_handshake(&bytes).unwrap().unwrap();
            assert_eq!((decoded, used), (msg, bytes.len()));
        }
    }

    #[test]
    fn malformed_handshake_messages_are_errors() {
        let hello = encode_handshake(&samples()[0]);
        let with = |i: usize, byte: u8| {
            let mut bytes = hello.clone();
            bytes[i] = byte;
            decode_handshake(&bytes)
        };
        assert!(matches!(with(4, b'X'), Err(HandshakeError::BadMagic)));
        assert!(matches!(
            with(8, 9),
            Err(HandshakeError::UnsupportedVersion { found: 9 })
        ));
        assert!(matches!(with(9, 7), Err(HandshakeError::UnknownKind(7))));
        // A hello labelled as a response has the wrong length for its kind.
        assert!(matches!(
            with(9, 3),
            Err(HandshakeError::WrongLength { kind: 3, .. })
        ));
        assert!(matches!(
            decode_handshake(&u32::MAX.to_le_bytes()),
            Err(HandshakeError::TooLarge { .. })
        ));
        assert!(matches!(
            decode_handshake(&0u32.to_le_bytes()),
            Err(HandshakeError::Empty)
        ));
        // An envelope frame is not a handshake message.
        let envelope = crate::frame::encode_frame(&crate::Envelope::new(
            NodeId(1),
            NodeId(2),
            crate::EpochId(0),
            7u64,
        ))
        .unwrap();
        assert!(matches!(
            decode_handshake(&envelope),
            Err(HandshakeError::BadMagic)
        ));
        assert!(matches!(
            decode_handshake_payload(&[0; MAX_HANDSHAKE_BYTES + 1]),
            Err(HandshakeError::TooLarge { .. })
        ));
        assert!(matches!(
            decode_handshake_payload(b"RSTH"),
            Err(HandshakeError::BadMagic)
        ));
    }

    #[test]
    fn a_hello_is_not_an_envelope_either() {
        let hello = encode_handshake(&samples()[0]);
        assert!(crate::frame::decode_frame::<u64>(&hello, 1024).is_err());
    }

    proptest::proptest! {
        /// What the fuzz target checks, in every `cargo test`: arbitrary bytes,
        /// and valid messages with one byte changed, decode or fail without a
        /// panic, and whatever decodes encodes back to the same bytes.
        #[test]
        fn arbitrary_bytes_decode_or_fail_cleanly(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            which in 0usize..3,
            at in proptest::prelude::any::<proptest::sample::Index>(),
            byte in proptest::prelude::any::<u8>(),
        ) {
            let mut damaged = encode_handshake(&samples()[which]);
            let i = at.index(damaged.len());
            damaged[i] = byte;
            for input in [&bytes, &damaged] {
                if let Ok(Some((msg, used))) = decode_handshake(input) {
                    proptest::prop_assert!(used <= LENGTH_PREFIX_BYTES + MAX_HANDSHAKE_BYTES);
                    proptest::prop_assert_eq!(&encode_handshake(&msg)[..], &input[..used]);
                }
            }
        }
    }

    /// Runs both sides over an in-memory pipe.
    async fn run_both(
        dialer_secret: &ClusterSecret,
        acceptor_secret: &ClusterSecret,
        dial_to: NodeId,
        known: &[NodeId],
    ) -> (Result<(), HandshakeError>, Result<NodeId, HandshakeError>) {
        let (mut d, mut a) = tokio::io::duplex(1024);
        let dialer = async {
            let result = dial(&mut d, dialer_secret, NodeId(1), dial_to, 1_000).await;
            drop(d); // as the transport does: a failed side closes the connection
            result
        };
        let acceptor = async {
            let result = accept(&mut a, acceptor_secret, NodeId(2), known, 1_000).await;
            drop(a);
            result
        };
        tokio::join!(dialer, acceptor)
    }

    #[tokio::test]
    async fn the_handshake_succeeds_only_with_the_same_secret_and_known_ids() {
        let (d, a) = run_both(&secret(1), &secret(1), NodeId(2), &[NodeId(1)]).await;
        assert!(d.is_ok(), "{d:?}");
        assert_eq!(a.unwrap(), NodeId(1));

        let (d, a) = run_both(&secret(1), &secret(2), NodeId(2), &[NodeId(1)]).await;
        assert!(matches!(d, Err(HandshakeError::BadMac)), "{d:?}");
        assert!(a.is_err(), "acceptor must not accept: {a:?}");

        let (d, a) = run_both(&secret(1), &secret(1), NodeId(2), &[NodeId(3)]).await;
        assert!(matches!(a, Err(HandshakeError::UnknownPeer(NodeId(1)))));
        assert!(d.is_err());

        // The dialer meant to reach node 5 but reached node 2.
        let (d, a) = run_both(&secret(1), &secret(1), NodeId(5), &[NodeId(1)]).await;
        assert!(matches!(a, Err(HandshakeError::WrongNode { .. })));
        assert!(d.is_err());
    }

    #[tokio::test]
    async fn a_forged_response_or_a_silent_peer_fails() {
        // A dialer that cannot compute the MAC sends a guess.
        let (mut d, mut a) = tokio::io::duplex(1024);
        let forger = async {
            let hello = HandshakeMsg::Hello {
                from: NodeId(1),
                to: NodeId(2),
                nonce: fresh_nonce(),
            };
            write_msg(&mut d, &hello).await.unwrap();
            let challenge = read_msg(&mut d).await.unwrap();
            assert!(matches!(challenge, HandshakeMsg::Challenge { .. }));
            // Reflect the acceptor's own MAC back at it.
            let HandshakeMsg::Challenge { mac, .. } = challenge else {
                unreachable!()
            };
            write_msg(&mut d, &HandshakeMsg::Response { mac })
                .await
                .unwrap();
            d
        };
        let key = secret(1);
        let (_d, accepted) =
            tokio::join!(forger, accept(&mut a, &key, NodeId(2), &[NodeId(1)], 1_000));
        assert!(matches!(accepted, Err(HandshakeError::BadMac)));

        // A peer that says nothing is cut off at the timeout.
        let (_d, mut a) = tokio::io::duplex(1024);
        let accepted = accept(&mut a, &secret(1), NodeId(2), &[NodeId(1)], 50).await;
        assert!(matches!(accepted, Err(HandshakeError::Timeout(50))));
        let (mut d, _a) = tokio::io::duplex(1024);
        let dialed = dial(&mut d, &secret(1), NodeId(1), NodeId(2), 50).await;
        assert!(matches!(dialed, Err(HandshakeError::Timeout(50))));
    }
}

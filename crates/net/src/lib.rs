//! `roost-net`: the transport between Roost nodes.
//!
//! * [`frame`]: the wire format, a `u32` little-endian length prefix and a
//!   postcard-encoded, versioned [`Envelope`] `{version, from, to, epoch, msg}`;
//!   a decoder that checks the frame limit before buffering and the version
//!   before the body.
//! * [`transport`]: tokio TCP between nodes, per-peer bounded queues drained
//!   into one write per batch, reconnect with exponential backoff, at-most-once
//!   delivery per connection.
//! * [`auth`]: the shared-secret handshake that authenticates each connection
//!   when the cluster has a [`ClusterSecret`] (HMAC-SHA256 challenge-response).
//! * [`chaos`]: drop, delay, duplicate and partition, switchable at runtime.
//! * [`metrics`]: message, byte, batch, drop and failed-handshake counters.
//!
//! # Fuzzing the decoder
//!
//! The fuzz targets `net_frame` and `net_handshake` (`fuzz/`, checks in the
//! `roost-fuzz` crate) feed arbitrary bytes to the frame and handshake
//! decoders and to both sides of the handshake, on stable Rust:
//!
//! ```sh
//! scripts/fuzz.sh net_frame net_handshake
//! ```

pub mod auth;
pub mod chaos;
pub mod frame;
pub mod metrics;
pub mod transport;

pub use auth::{ClusterSecret, HandshakeError, SecretError};
pub use chaos::{Chaos, ChaosError, ChaosSettings};
pub use frame::{Envelope, EpochId, FrameError, NodeId, WIRE_VERSION};
pub use metrics::MetricsSnapshot;
pub use transport::{
    ConfigError, Inbox, Message, SendError, StartError, Transport, TransportConfig,
};

/// A message type for the fuzz target and property tests: enough serde shapes
/// (integers, strings, bytes, options, enums, sequences) to exercise postcard.
pub mod fuzzing {
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub enum FuzzMsg {
        Ping(u64),
        Text(String),
        Bytes(Vec<u8>),
        Pair { a: Option<u32>, b: Vec<(u16, i64)> },
        Unit,
    }
}

//! Roost's RESP front door: a Redis-protocol server (RESP2 and RESP3) over
//! the reactor layer.
//!
//! - [`protocol`]: frames, the encoder, the incremental request parser and
//!   its [`Limits`](protocol::Limits);
//! - [`Config`]: address, limits, keyspace, users (TOML);
//! - [`Server`]: binds, serves connections, or runs in the background
//!   ([`Server::spawn`]);
//! - [`functions`]: procedures the application registers, called with
//!   FCALL and FCALL_RO, each one transaction over the keys it names;
//! - [`stats`]: the counters INFO reports, also served in Prometheus's text
//!   format at `GET /metrics` when the config's `metrics_bind` is set.
//!
//! Every key lives in one of `keyspace_reactors` reactors (see the `store`
//! module and `docs/architecture.md`, "RESP front door"); a pipeline batch or
//! a MULTI/EXEC block is one serializable root transaction.

mod commands;
pub mod config;
mod connection;
pub mod functions;
mod metrics;
pub mod protocol;
mod server;
pub mod sites;
pub mod stats;
mod store;

pub use config::{Access, Config, ConfigError, User};
pub use functions::{Function, FunctionCtx, FunctionError, FunctionFuture, Functions};
pub use server::{Keyspace, RunningServer, Server, ServerError, Services};
pub use sites::{LocalApplied, SiteCounters, SiteOutcome};
pub use store::{keyspace_index, SiteRow, MAX_KEY_BYTES, MAX_VALUE_BYTES};

/// The Redis version Roost reports (HELLO, INFO): clients use it to pick
/// features; Roost speaks the RESP2/RESP3 of Redis 7.
pub const REDIS_VERSION: &str = "7.0.0";

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

mod admin;
mod blocked;
mod commands;
pub mod config;
mod connection;
mod expiry;
pub mod forward;
pub mod functions;
mod hashes;
mod keyspace;
mod lists;
mod members;
mod metrics;
pub mod protocol;
mod scripting;
mod server;
mod sets;
pub mod sites;
mod sort;
pub mod stats;
mod store;
mod strings;
mod zsets;

pub use config::{Access, Config, ConfigError, User};
pub use forward::{Directory, Owner, Router, FORWARD_USER};
pub use functions::{Function, FunctionCtx, FunctionError, FunctionFuture, Functions};
pub use members::{MemberAudit, MAX_MEMBER_BYTES};
pub use server::{Keyspace, RunningServer, Server, ServerError, Services};
pub use sites::{LocalApplied, SiteCounters, SiteOutcome};
pub use store::{
    hash_tag, keyspace_index, keyspace_reactor, SiteRow, MAX_KEY_BYTES, MAX_STAMP_ORIGIN,
    MAX_VALUE_BYTES,
};

/// The Redis version Roost reports (HELLO, INFO): clients use it to pick
/// features; Roost speaks the RESP2/RESP3 of Redis 7.
pub const REDIS_VERSION: &str = "7.0.0";

/// Entry points for the fuzz targets (`fuzz/`, the `roost-fuzz` crate): the
/// command layer and the store behind it without a socket. Not an API.
#[doc(hidden)]
pub mod fuzzing {
    use std::sync::Arc;

    use crate::commands::{self, Kind};
    use crate::functions::Functions;
    use crate::protocol::Frame;
    use crate::stats::Stats;
    use roost_reactor::ReactorError;

    use crate::store::{Op, Store};
    use crate::Config;

    /// The `Op` a data command's arguments become (`None`: not a known data
    /// command of the right arity, answered before parsing).
    fn op(args: Vec<Vec<u8>>, functions: &Functions) -> Option<Op> {
        let spec = commands::lookup(args.first()?)?;
        if spec.kind != Kind::Data || !commands::arity_ok(spec, args.len()) {
            return None;
        }
        Some(commands::parse_op(spec, args, functions))
    }

    /// A keyspace of its own (2 reactors, 1 executor) that runs requests as
    /// the connection does: the data commands of `requests` as one batch,
    /// one reply per command.
    pub struct StoreHarness {
        store: Store,
        functions: Functions,
        runtime: tokio::runtime::Runtime,
    }

    impl StoreHarness {
        pub fn new() -> StoreHarness {
            let config = Config {
                keyspace_reactors: 2,
                executors: 1,
                spin_before_park_us: Some(0),
                spin_while_active_us: Some(0),
                ..Config::default()
            };
            StoreHarness {
                store: Store::new(&config, Arc::new(Stats::default()), None)
                    .expect("a small keyspace"),
                functions: Functions::examples(),
                runtime: tokio::runtime::Builder::new_current_thread()
                    .build()
                    .expect("a current-thread runtime"),
            }
        }

        /// Parses each request into an `Op` (skipping what is not a data
        /// command) and runs them in order as one transaction; the replies
        /// as RESP3 bytes, or the transaction's error.
        pub fn run(&self, requests: Vec<Vec<Vec<u8>>>) -> Result<Vec<u8>, String> {
            let ops: Vec<Op> = requests
                .into_iter()
                .filter_map(|args| op(args, &self.functions))
                .collect();
            let count = ops.len();
            if count == 0 {
                return Ok(Vec::new());
            }
            let outcome = self
                .runtime
                .block_on(self.store.run(Arc::new(ops), None))
                .map_err(|e| e.to_string())?;
            let replies = outcome.expect("nothing watched");
            assert_eq!(replies.len(), count, "one reply per command");
            let mut out = Vec::new();
            Frame::Array(replies).encode(crate::protocol::Protocol::Resp3, &mut out);
            Ok(out)
        }
    }

    impl StoreHarness {
        /// The keyspace's member rows checked against the entries: all
        /// zero unless a hash's, set's or sorted set's rows were left behind,
        /// miscounted or unindexed.
        pub fn member_audit(&self) -> Result<crate::members::MemberAudit, ReactorError> {
            self.runtime.block_on(self.store.member_audit())
        }

        /// Runs expiry sweeps (64 keys each) until one deletes nothing:
        /// what the background sweep does, at once. How many it deleted.
        pub fn sweep_expired(&self) -> Result<usize, ReactorError> {
            let mut total = 0;
            let mut start = 0;
            loop {
                let op = Op::Expire(crate::expiry::ExpireOp::Sweep { start, limit: 64 });
                let (deleted, next, full) = self.store.sweep_once(op)?;
                total += deleted;
                start = next;
                if deleted == 0 && !full {
                    return Ok(total);
                }
            }
        }
    }

    impl Default for StoreHarness {
        fn default() -> Self {
            StoreHarness::new()
        }
    }
}

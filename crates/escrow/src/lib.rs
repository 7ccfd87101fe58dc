//! `roost-escrow`: the middleware of the seed `002` (Balegas et al., SRDS'15,
//! §IV) over an existing store, Redis (one `redis-server` per site), so that
//! its users get bounded counters: `value >= K` (or `<= K`) across sites,
//! with local latency for most operations.
//!
//! * [`api`]: Figure 1's API ([`EscrowCounters`]: `create`, `read`, `inc`,
//!   `dec` with [`Flag::StrictLocal`] or [`Flag::Global`], answering
//!   [`Outcome::Ok`], [`Outcome::Fail`] or [`Outcome::Retry`] with the hint).
//! * [`client`]: the client-based design (§IV-B): [`ClientMiddleware`]
//!   reads, applies and writes back with WATCH/MULTI/EXEC.
//! * [`server`] + [`engine`]: the server-based design (§IV-C): a middleware
//!   node per site serializes operations per key, caches counters and batches
//!   many operations into one conditional write ([`ServerMiddleware`] is its
//!   client handle; [`engine::KeyEngine`] the sans-IO per-key logic).
//! * [`site`] + [`propagation`] + [`peer`] + [`wire`]: each site's process,
//!   with the custom cross-site propagation (batches of deltas every few ms,
//!   merged entry-wise) and rights transfer (proactive asynchronous requests,
//!   synchronous requests for global operations, idempotent), over
//!   `roost-net` links authenticated with the deployment's shared secret.
//! * [`roost_store`]: the site's store as an embedded Roost database
//!   ([`Design::Roost`]): the server-based node over bounded counters kept
//!   in Roost reactors, each write a serializable Roost transaction.
//! * [`front_door`]: a site's node over the network: the RESP front door
//!   serving BC.* from its [`ServerMiddleware`] ([`FrontDoor`],
//!   [`EscrowSiteCounters`]) and [`FrontDoorClient`], one TCP connection to
//!   it.
//! * [`weak`]: the Weak baseline (read-check-then-decrement, replicated
//!   asynchronously), which can break the bound.
//! * [`strong`]: the Strong baseline (one Redis site, remote clients through
//!   the proxy, a Lua check-and-decrement per update).
//! * [`proxy`]: [`DelayProxy`], wide-area emulation with Table I's round
//!   trips; [`redis_server`]: a `redis-server` child process;
//!   [`harness`]: a local multi-site [`Deployment`] for tests and benchmarks.
//! * [`logic`], [`store`]: one operation on one replica; the keys in Redis
//!   and the two conditional writes.

pub mod api;
pub mod client;
pub mod engine;
pub mod error;
pub mod front_door;
pub mod harness;
pub mod keyspace_site;
pub mod logic;
pub mod peer;
pub mod propagation;
pub mod proxy;
pub mod redis_server;
pub mod roost_store;
pub mod server;
pub mod site;
pub mod store;
pub mod strong;
pub mod weak;
pub mod wire;

pub use api::{Bound, Direction, EscrowCounters, Flag, Op, Outcome};
pub use client::{ClientConfig, ClientMiddleware};
pub use error::EscrowError;
pub use front_door::{EscrowSiteCounters, FrontDoor, FrontDoorClient};
pub use harness::{excess_decrements, Client, Deployment, DeploymentConfig, DrainReport};
pub use keyspace_site::KeyspaceSite;
pub use logic::Counter;
pub use proxy::{DelayProxy, Region, TABLE_I_RTT_MS};
pub use redis_server::LocalRedis;
/// §IV-E reports, as `ServerMiddleware::fence_and_report` gives them.
pub use roost_bcounter::FailedReplicaReport;
pub use roost_store::{apply_strictly_local, state_value, LocalStep, ReplicaRow, ReplicaRows};
pub use server::ServerMiddleware;
pub use site::{default_policy, Design, Site, SiteConfig, SiteStats, Timing};
pub use strong::{StrongClient, StrongDeployment};
pub use weak::WeakClient;

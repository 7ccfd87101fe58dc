//! `roost-cluster`: the cluster substrate.
//!
//! * [`protocol`]: the sans-IO [`Protocol`] trait (inputs in, effects out).
//! * [`membership`]: static membership, lease-based failure detection, epochs
//!   (peer-to-peer; the simulator's and the fallback without etcd); its
//!   acceptor record's encoding ([`record`]) and file ([`state_dir`]).
//! * [`coordinated`]: membership decided by etcd (sans-IO rules), and
//!   [`coordinator`] + [`etcd`], the shell and client that talk to it.
//! * [`node`]: a node = membership + one protocol; epoch stamping and filtering.
//! * [`register`]: the example protocol, an ABD atomic register.
//! * [`sim`]: the deterministic simulator, generic over the protocol, its
//!   workload and checkers; campaigns over seeds; the register's instance.
//! * [`config`]: the cluster configuration file.
//! * [`runtime`]: the tokio shell driving a node over `roost-net`, with the
//!   admin HTTP endpoint.

pub mod config;
pub mod coordinated;
pub mod coordinator;
pub mod etcd;
pub mod local_cluster;
pub mod local_etcd;
pub mod membership;
pub mod node;
pub mod process;
pub mod protocol;
pub mod record;
pub mod register;
pub mod runtime;
pub mod sim;
pub mod state_dir;

pub use membership::{AcceptorRecord, Health, Membership, MembershipBugs, MembershipConfig};
pub use node::{Members, Node, NodeEffects, NodeMsg, TimerKey};
pub use protocol::{Context, Effects, Incarnation, Input, Protocol, TimerId, View};
pub use roost_net::{EpochId, NodeId};

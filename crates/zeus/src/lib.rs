//! Zeus composed: the ownership protocol (`roost-ownership`) and the
//! reliable commit (`roost-commit`) over one object store, with the rules
//! that tie them (the pending-commit NACK hook, recovery order, versions
//! that travel with the data, followers read off the ownership metadata,
//! read-only transactions gated by both), as one sans-IO
//! [`roost_cluster::Protocol`] ([`ZeusReplica`]) and its simulation
//! ([`sim`]) with faults.
//!
//! Each protocol is checked alone by its own crate; this crate checks that
//! they are safe together: objects that move while they are written and
//! replicated, owners that crash with writes in flight, readers that take
//! over. The node crate's `Zeus` composes the same two state machines by
//! the same rules over the reactor database.

mod recoveries;
mod replica;
pub mod sim;

pub use recoveries::{Recovered, RecoveredRefusal, Recoveries};

pub use replica::{
    commit_key, Copy, Object, Objects, OwnershipStore, ReadValue, Refusal, WriteRecord, ZeusBugs,
    ZeusCmd, ZeusConfig, ZeusMsg, ZeusOut, ZeusReplica, MAX_ACQUIRE_ROUNDS, MAX_REPLICA_REQUESTS,
    MAX_TX_OBJECTS, MAX_WAITING, REPLICA_TICK_MS, REPLICA_TIMER,
};

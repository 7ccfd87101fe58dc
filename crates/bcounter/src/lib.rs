//! The Bounded Counter CRDT (Balegas et al., "Extending Eventually Consistent
//! Cloud Databases for Enforcing Numeric Invariants", SRDS 2015): a
//! replicated counter that keeps `value >= K` (or `<= K`, or both) without
//! coordinating on most operations.
//!
//! The distance between the value and the bound is split into *rights* held
//! by replicas. A replica decrements only with rights it holds, so the
//! replicas together never decrement past the bound; rights move between
//! replicas by transfers, asynchronously.
//!
//! # State (Figure 2)
//!
//! - `R`, an n × n matrix: `R[i][i]` counts rights created at `i` (its
//!   increments), `R[i][j]` rights `i` transferred to `j`;
//! - `U`, a vector: `U[i]` counts rights spent at `i` (its decrements);
//! - `K`, the bound.
//!
//! `value = K + ΣR[i][i] − ΣU[i]`;
//! `local_rights(i) = Σ_j R[j][i] − Σ_{j≠i} R[i][j] − U[i]`. Only replica `i`
//! writes row `i` and `U[i]`, and every entry only grows, so merge is the
//! entry-wise max and a replica's view of its own rights is never more than
//! it really holds.
//!
//! # What is here
//!
//! - [`BoundedCounter`]: [`Bound::Lower`] is Figure 2, [`Bound::Upper`] its
//!   mirror (rights to increment); [`TwoSidedCounter`] combines the two.
//! - Two representations of `R` and `U` behind [`RightsState`]:
//!   [`FullRights`] (the whole matrix; messages are whole states) and
//!   [`CompactRights`] (row and column of `R` for this replica, the diagonal,
//!   `U`: about 4n numbers; messages are [`RightsDelta`]s of about 2n).
//! - Idempotent transfer requests ([`TransferRequest`], §IV-D).
//! - The transfer policy as pure logic ([`TransferPolicy`],
//!   [`ProactivePolicy`], [`RateLimiter`]).
//! - Versioned serde encodings of states, deltas and requests
//!   ([`WIRE_VERSION`]).
//!
//! # Replica identities
//!
//! A [`ReplicaId`] is a dense index, and the matrices are flat vectors that
//! grow when a site joins ([`BoundedCounter::grow`], or implicitly when a
//! merged message knows more replicas). We chose this over a map keyed by
//! replica id because every local operation reads a whole row and column: on
//! vectors that is a linear scan with no look-ups or allocation. An entry not
//! yet allocated reads as 0, its lattice bottom, so growing changes nothing.
//! The membership layer must hand out indices densely and never reuse one;
//! [`MAX_REPLICAS`] caps what a message can make a replica allocate.
//!
//! # Arithmetic
//!
//! Counts are `u64`, values `i64`; every update is checked and an overflow is
//! an error ([`Overflow`]), never a wrap. Sums over replicas are taken in
//! `u128`/`i128`. Concurrent increments at several replicas can overflow a
//! value no single replica could: `value()` then returns an error.
//!
//! # No IO, no clock, no randomness
//!
//! This crate is a pure data type. Messaging, timers and persistence belong to
//! the caller; the policy takes the current time as an argument. Operations on
//! one replica must be serialized by the caller.

mod compact;
mod counter;
mod error;
mod full;
mod policy;
pub mod recovery;
mod replica;
mod request;
mod rights;
mod two_sided;
mod wire;

pub use compact::CompactRights;
pub use counter::{Bound, BoundedCounter, CounterMessage};
pub use error::{
    ConsumeError, DecodeError, DecrementError, GrantError, GrowError, HandleRequestError,
    IncrementError, MergeError, MessageError, NewError, Overflow, RequestError, RightsError,
    TransferError, ValueError,
};
pub use full::FullRights;
pub use policy::{
    PeerRights, ProactiveConfig, ProactivePolicy, RateLimit, RateLimitError, RateLimited,
    RateLimiter, RightsView, TransferPolicy,
};
pub use recovery::{FailedReplicaReport, RecoveryError};
pub use replica::{ReplicaId, MAX_REPLICAS};
pub use request::{Reply, RequestMode, RequestOutcome, TransferRequest};
#[doc(hidden)]
pub use rights::PlantedBug;
pub use rights::{RightsDelta, RightsState};
pub use two_sided::{TwoSidedCounter, TwoSidedMessage};
pub use wire::WIRE_VERSION;

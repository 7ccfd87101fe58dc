//! Errors: one enum per operation, so a caller matches only what that
//! operation can do. Nothing in this crate panics on bad input (a malformed
//! message, an unknown replica, an overflow); panics are reserved for broken
//! internal invariants.

use thiserror::Error;

use crate::counter::Bound;
use crate::replica::ReplicaId;

/// A checked computation did not fit its type. Counts are `u64`, values
/// `i64`; nothing ever wraps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("arithmetic overflow in {quantity}")]
pub struct Overflow {
    /// What was being computed, for the message.
    pub quantity: &'static str,
}

impl Overflow {
    pub(crate) const fn of(quantity: &'static str) -> Overflow {
        Overflow { quantity }
    }
}

/// Creating a counter or a rights state.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NewError {
    #[error("a counter needs at least one replica")]
    NoReplicas,
    #[error("{replica_count} replicas exceed the limit of {max}")]
    TooManyReplicas { replica_count: usize, max: usize },
    #[error("replica {replica} is not one of the {replica_count} replicas")]
    UnknownReplica {
        replica: ReplicaId,
        replica_count: usize,
    },
    #[error("lower bound {lower} is above upper bound {upper}")]
    BoundsInverted { lower: i64, upper: i64 },
    #[error("initial value {initial_value} is outside the bounds [{lower}, {upper}]")]
    InitialValueOutOfBounds {
        initial_value: i64,
        lower: i64,
        upper: i64,
    },
    #[error(transparent)]
    Overflow(#[from] Overflow),
}

/// Growing the set of known replicas.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GrowError {
    #[error("{replica_count} replicas exceed the limit of {max}")]
    TooManyReplicas { replica_count: usize, max: usize },
}

/// Computing `value()`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ValueError {
    /// Concurrent increments at several replicas can together exceed `i64`
    /// even though each replica checked its own.
    #[error(transparent)]
    Overflow(#[from] Overflow),
    /// A two-sided counter's halves are updated and merged together, so they
    /// always agree unless a peer sent inconsistent halves.
    #[error("two-sided counter's halves disagree: lower half says {lower_half}, upper half {upper_half}")]
    HalvesDisagree { lower_half: i64, upper_half: i64 },
}

/// Computing `local_rights()`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RightsError {
    #[error(transparent)]
    Overflow(#[from] Overflow),
}

/// Recording rights created at this replica (`R[i][i] += n`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GrantError {
    #[error(transparent)]
    Overflow(#[from] Overflow),
}

/// Recording rights spent at this replica (`U[i] += n`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConsumeError {
    #[error("needs {requested} rights, holds {available}")]
    InsufficientRights { requested: u64, available: u64 },
    #[error(transparent)]
    Overflow(#[from] Overflow),
}

/// `increment(n)`. A lower-bound counter's increment never lacks rights; an
/// upper-bound or two-sided counter's increment spends increment rights.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum IncrementError {
    #[error("increment by {requested} needs {requested} rights, holds {available}")]
    InsufficientRights { requested: u64, available: u64 },
    #[error(transparent)]
    Overflow(#[from] Overflow),
}

/// `decrement(n)`. An upper-bound counter's decrement never lacks rights; a
/// lower-bound or two-sided counter's decrement spends decrement rights.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecrementError {
    #[error("decrement by {requested} needs {requested} rights, holds {available}")]
    InsufficientRights { requested: u64, available: u64 },
    #[error(transparent)]
    Overflow(#[from] Overflow),
}

/// `transfer(n, to)`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TransferError {
    #[error("replica {replica} is not one of the {replica_count} replicas")]
    UnknownReplica {
        replica: ReplicaId,
        replica_count: usize,
    },
    /// `R[i][i]` counts increments, so a transfer to oneself would mint rights.
    #[error("replica {replica} cannot transfer rights to itself")]
    ToSelf { replica: ReplicaId },
    #[error("transfer of {requested} needs {requested} rights, holds {available}")]
    InsufficientRights { requested: u64, available: u64 },
    #[error(transparent)]
    Overflow(#[from] Overflow),
}

/// Building a message (a state or a delta) for another replica.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MessageError {
    #[error("replica {replica} is not one of the {replica_count} replicas")]
    UnknownReplica {
        replica: ReplicaId,
        replica_count: usize,
    },
    #[error("replica {replica} does not send messages to itself")]
    ToSelf { replica: ReplicaId },
}

/// `merge(message)`. A rejected message leaves the state untouched.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MergeError {
    #[error("message is for a {remote:?}-bound counter, this one is {local:?}-bound")]
    DirectionMismatch { local: Bound, remote: Bound },
    #[error("message is for a counter with bound {remote}, this one has bound {local}")]
    BoundMismatch { local: i64, remote: i64 },
    #[error("message knows {replica_count} replicas, over the limit of {max}")]
    TooManyReplicas { replica_count: usize, max: usize },
    #[error("malformed message: {reason}")]
    Malformed { reason: &'static str },
    /// Only replica `i` writes row `i` of `R` and `U[i]`, so nobody can know
    /// more of them than `i` itself: such a message means two replicas share an
    /// identity, or the state was restored from an older copy.
    #[error("message claims more of replica {replica}'s own entries than replica {replica} has")]
    OwnEntriesAhead { replica: ReplicaId },
    #[error("delta is addressed to replica {addressed_to}, not to replica {me}")]
    WrongRecipient {
        me: ReplicaId,
        addressed_to: ReplicaId,
    },
    #[error("replica {replica} does not merge its own delta")]
    FromSelf { replica: ReplicaId },
    #[error("two-sided message's bounds or genesis differ from this counter's")]
    TwoSidedMismatch,
}

/// Building a transfer request (the requester's side of §IV-D).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RequestError {
    #[error("replica {replica} is not one of the {replica_count} replicas")]
    UnknownReplica {
        replica: ReplicaId,
        replica_count: usize,
    },
    #[error("replica {replica} cannot ask itself for rights")]
    ToSelf { replica: ReplicaId },
}

/// Serving a transfer request (the donor's side of §IV-D).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HandleRequestError {
    #[error("request is addressed to donor {donor}, this is replica {me}")]
    WrongDonor { me: ReplicaId, donor: ReplicaId },
    #[error("replica {replica} is not one of the {replica_count} replicas")]
    UnknownReplica {
        replica: ReplicaId,
        replica_count: usize,
    },
    #[error("replica {replica} cannot ask itself for rights")]
    FromSelf { replica: ReplicaId },
    /// The requester can only have learned `R[j][i]` from `j`, so it cannot
    /// have seen more than `j` has transferred.
    #[error("request says {seen} rights were already transferred, but only {transferred} were")]
    SeenAheadOfDonor { seen: u64, transferred: u64 },
    #[error(transparent)]
    Rights(#[from] RightsError),
    #[error(transparent)]
    Transfer(#[from] TransferError),
}

/// Reading a serialized state, delta or request.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    #[error("unsupported {what} version {found}: this build reads version {supported}")]
    UnsupportedVersion {
        what: &'static str,
        found: u32,
        supported: u32,
    },
    #[error("malformed {what}: {reason}")]
    Malformed { what: &'static str, reason: String },
}

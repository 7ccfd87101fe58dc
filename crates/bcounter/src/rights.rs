//! The rights state of Figure 2 (`R` and `U`) behind one trait, with two
//! representations: [`FullRights`](crate::FullRights) (the whole matrix, as
//! in the figure) and [`CompactRights`](crate::CompactRights) (the
//! Optimizations paragraph: row and column of `R` for this replica, the
//! diagonal and `U`).
//!
//! The rights layer does not know which way the bound points: it records
//! rights created (`grant`: `R[i][i] += n`), rights spent (`consume`:
//! `U[i] += n`) and rights moved (`transfer`: `R[i][j] += n`). The counters
//! map increments and decrements onto these (a lower-bound counter's increment
//! grants, an upper-bound counter's increment consumes).

use std::fmt;
use std::hash::Hash;

use crate::error::{
    ConsumeError, GrantError, GrowError, MergeError, MessageError, NewError, Overflow, RightsError,
    TransferError,
};
use crate::replica::{ReplicaId, MAX_REPLICAS};

/// Deliberate bugs, switched on only by tests to show that the model checker
/// and the randomized test catch them. `None` in every real use; never
/// serialized.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PlantedBug {
    #[default]
    None,
    /// The bug of a public Rust fork: rights computed from the global value
    /// (`ΣR[k][k] − ΣU[k]`) instead of from this replica's row and column.
    RightsFromGlobalValue,
    /// Local rights forget the transfers this replica made (`R[i][j]`, `j≠i`).
    IgnoreTransfersOut,
    /// §IV-E recovery counts only the first report's transfers received
    /// from the failed replica (the heir trusting its own view).
    RecoverFromOneReport,
}

/// What every representation of the rights state offers. The counters
/// ([`BoundedCounter`](crate::BoundedCounter) and
/// [`TwoSidedCounter`](crate::TwoSidedCounter)) are generic over it, and so
/// are the tests that prove the two representations agree.
pub trait RightsState: Clone + fmt::Debug + PartialEq + Eq + Hash + Sized {
    /// What one replica sends another: the whole state for the full matrix
    /// (Figure 2's merge), a [`RightsDelta`] for the compact form.
    type Message: Clone + fmt::Debug + PartialEq + Eq + Hash;

    /// A fresh state at replica `me` among `replica_count` replicas: all zero.
    fn new(me: ReplicaId, replica_count: usize) -> Result<Self, NewError> {
        Self::with_genesis(me, replica_count, me, 0)
    }

    /// The state every replica starts from when `holder` created `rights`
    /// before anything else happened (`R[holder][holder] = rights`): how a
    /// counter starts at a value other than its bound. Every replica builds
    /// the same genesis, so it needs no message.
    fn with_genesis(
        me: ReplicaId,
        replica_count: usize,
        holder: ReplicaId,
        rights: u64,
    ) -> Result<Self, NewError>;

    fn me(&self) -> ReplicaId;

    /// How many replicas this state knows (rows of `R`, entries of `U`).
    fn replica_count(&self) -> usize;

    /// Knows at least `replica_count` replicas afterwards. New entries are 0.
    fn grow(&mut self, replica_count: usize) -> Result<(), GrowError>;

    /// `R[from][to]` if this representation stores it (unknown replicas read
    /// as 0); `None` for entries the compact form does not keep.
    fn r(&self, from: ReplicaId, to: ReplicaId) -> Option<u64>;

    /// `U[replica]` (0 for a replica not known yet).
    fn u(&self, replica: ReplicaId) -> u64;

    /// The rights this replica holds: `Σ_j R[j][i] − Σ_{j≠i} R[i][j] − U[i]`.
    /// Conservative: transfers to `i` it has not heard of are not counted.
    fn local_rights(&self) -> Result<u64, RightsError>;

    /// What this replica believes `replica` holds, for the transfer policy. For
    /// another replica this view can be stale, even negative (we may know its
    /// spending before the transfer that paid for it); the compact form, which
    /// lacks third-party transfers, gives an estimate. Never used for safety.
    fn believed_rights(&self, replica: ReplicaId) -> Result<i128, Overflow>;

    /// `Σ_k R[k][k]`: all rights ever created, as far as this replica knows.
    fn granted_total(&self) -> Result<u128, Overflow>;

    /// `Σ_k U[k]`: all rights ever spent, as far as this replica knows.
    fn consumed_total(&self) -> Result<u128, Overflow>;

    /// Whether `grant(n)` would succeed; changes nothing.
    fn check_grant(&self, n: u64) -> Result<(), GrantError>;

    /// Whether `consume(n)` would succeed; changes nothing.
    fn check_consume(&self, n: u64) -> Result<(), ConsumeError>;

    /// Rights created here: `R[i][i] += n`.
    fn grant(&mut self, n: u64) -> Result<(), GrantError>;

    /// Rights spent here: `U[i] += n`, only with `n` rights held.
    fn consume(&mut self, n: u64) -> Result<(), ConsumeError>;

    /// Rights moved to `to`: `R[i][to] += n`, only with `n` rights held.
    fn transfer(&mut self, n: u64, to: ReplicaId) -> Result<(), TransferError>;

    /// §IV-E: `R[failed][i] = max(R[failed][i], known) + n`: rights of a
    /// replica declared permanently failed taken over by this one, as if it
    /// had transferred them (`known`: the most any survivor knew it had
    /// already transferred here). It writes an entry of the failed replica's
    /// row, which only that replica wrote before: callers (see
    /// [`crate::recovery`]) check `failed` is another known replica and that
    /// no message of it can arrive any more.
    fn adopt(&mut self, failed: ReplicaId, known: u64, n: u64) -> Result<(), Overflow>;

    /// The message this replica would send `to` now.
    fn message_for(&self, to: ReplicaId) -> Result<Self::Message, MessageError>;

    /// Whether `merge_message(message)` would succeed; changes nothing.
    fn check_message(&self, message: &Self::Message) -> Result<(), MergeError>;

    /// Entry-wise max with a received message. A rejected message changes
    /// nothing.
    fn merge_message(&mut self, message: &Self::Message) -> Result<(), MergeError>;

    /// The replica that built `message`.
    fn message_sender(message: &Self::Message) -> ReplicaId;

    /// The lattice order: every stored entry of `self` is `<=` the same entry
    /// of `other` (missing entries are 0). States of different replicas are
    /// only comparable in the full representation.
    fn le(&self, other: &Self) -> bool;

    #[doc(hidden)]
    fn set_planted_bug(&mut self, bug: PlantedBug);

    #[doc(hidden)]
    fn planted_bug(&self) -> PlantedBug;
}

/// What the compact form sends: `R[k][k]` for every `k`, all of `U`, and the
/// one entry of the sender's row the receiver needs, `R[from][to]`. About
/// `2n` numbers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RightsDelta {
    pub(crate) from: ReplicaId,
    pub(crate) to: ReplicaId,
    /// `R[k][k]` as the sender knows them; its length is the sender's replica
    /// count.
    pub(crate) diagonal: Vec<u64>,
    /// `U[k]` as the sender knows them; same length as `diagonal`.
    pub(crate) u: Vec<u64>,
    /// `R[from][to]`: the rights the sender has moved to the receiver.
    pub(crate) transferred_from_to: u64,
}

impl RightsDelta {
    pub fn from(&self) -> ReplicaId {
        self.from
    }

    pub fn to(&self) -> ReplicaId {
        self.to
    }

    pub fn replica_count(&self) -> usize {
        self.diagonal.len()
    }

    /// `R[k][k]` for every `k` the sender knows.
    pub fn diagonal(&self) -> &[u64] {
        &self.diagonal
    }

    /// `U[k]` for every `k` the sender knows.
    pub fn u(&self) -> &[u64] {
        &self.u
    }

    /// `R[from][to]`.
    pub fn transferred_from_to(&self) -> u64 {
        self.transferred_from_to
    }

    /// How many numbers travel: the size claim of the Optimizations paragraph.
    pub fn numbers(&self) -> usize {
        self.diagonal.len() + self.u.len() + 1
    }

    /// A delta can be built by hand or decoded from the wire, so every merge
    /// checks its shape first.
    pub(crate) fn validate(&self) -> Result<(), MergeError> {
        let count = self.diagonal.len();
        if count > MAX_REPLICAS {
            return Err(MergeError::TooManyReplicas {
                replica_count: count,
                max: MAX_REPLICAS,
            });
        }
        if count == 0 || self.u.len() != count {
            return Err(MergeError::Malformed {
                reason: "delta's diagonal and U must have the same, non-zero length",
            });
        }
        if self.from.index() >= count || self.to.index() >= count {
            return Err(MergeError::Malformed {
                reason: "delta's sender or receiver is not among its replicas",
            });
        }
        if self.from == self.to {
            return Err(MergeError::FromSelf { replica: self.from });
        }
        Ok(())
    }
}

/// Σ of `u64`s in `u128`. With at most [`MAX_REPLICAS`] terms it cannot
/// overflow, but it is checked anyway: the rule is that nothing wraps.
pub(crate) fn checked_sum(
    mut values: impl Iterator<Item = u64>,
    quantity: &'static str,
) -> Result<u128, Overflow> {
    values.try_fold(0u128, |sum, value| {
        sum.checked_add(u128::from(value))
            .ok_or(Overflow::of(quantity))
    })
}

/// The three sums local rights are made of, gathered by a representation.
pub(crate) struct Ledger {
    /// `Σ_j R[j][i]`, own increments included.
    pub(crate) received: u128,
    /// `Σ_{j≠i} R[i][j]`.
    pub(crate) transferred_out: u128,
    /// `U[i]`.
    pub(crate) consumed: u64,
}

/// Local rights from a replica's ledger. `global` (`ΣR[k][k]`, `ΣU[k]`) is
/// asked for only by a planted bug, so the correct path does not pay for it.
pub(crate) fn held_rights(
    ledger: &Ledger,
    bug: PlantedBug,
    global: impl FnOnce() -> Result<(u128, u128), Overflow>,
) -> Result<u64, RightsError> {
    let held = match bug {
        PlantedBug::None | PlantedBug::RecoverFromOneReport => {
            let spent = ledger
                .transferred_out
                .checked_add(u128::from(ledger.consumed))
                .ok_or(Overflow::of("rights spent"))?;
            // Row `i` and `U[i]` are written only here and a merge never
            // lowers the column, so a replica can never have spent more than
            // it received. A decoded state is checked for this on the way in.
            assert!(
                ledger.received >= spent,
                "replica spent {spent} rights but received only {}",
                ledger.received
            );
            ledger.received - spent
        }
        PlantedBug::RightsFromGlobalValue => {
            let (granted_total, consumed_total) = global()?;
            granted_total.saturating_sub(consumed_total)
        }
        PlantedBug::IgnoreTransfersOut => {
            ledger.received.saturating_sub(u128::from(ledger.consumed))
        }
    };
    u64::try_from(held).map_err(|_| RightsError::Overflow(Overflow::of("local rights")))
}

/// Whether a state could be a real replica's: it has not spent more than it
/// received. Used when decoding, where a violation is bad input, not a bug.
pub(crate) fn ledger_is_sound(ledger: &Ledger) -> bool {
    ledger
        .transferred_out
        .checked_add(u128::from(ledger.consumed))
        .is_some_and(|spent| spent <= ledger.received)
}

/// `checked_add` for one `u64` counter, naming it in the error.
pub(crate) fn add_count(count: u64, n: u64, quantity: &'static str) -> Result<u64, Overflow> {
    count.checked_add(n).ok_or(Overflow::of(quantity))
}

/// The replica count check shared by constructors.
pub(crate) fn check_membership(me: ReplicaId, replica_count: usize) -> Result<(), NewError> {
    check_count(replica_count)?;
    if me.index() >= replica_count {
        return Err(NewError::UnknownReplica {
            replica: me,
            replica_count,
        });
    }
    Ok(())
}

fn check_count(replica_count: usize) -> Result<(), NewError> {
    if replica_count == 0 {
        return Err(NewError::NoReplicas);
    }
    if replica_count > MAX_REPLICAS {
        return Err(NewError::TooManyReplicas {
            replica_count,
            max: MAX_REPLICAS,
        });
    }
    Ok(())
}

/// The destination check shared by `transfer` and `message_for`.
pub(crate) fn check_peer(
    me: ReplicaId,
    to: ReplicaId,
    replica_count: usize,
) -> Result<(), MessageError> {
    if to.index() >= replica_count {
        return Err(MessageError::UnknownReplica {
            replica: to,
            replica_count,
        });
    }
    if to == me {
        return Err(MessageError::ToSelf { replica: me });
    }
    Ok(())
}

impl From<MessageError> for TransferError {
    fn from(error: MessageError) -> TransferError {
        match error {
            MessageError::UnknownReplica {
                replica,
                replica_count,
            } => TransferError::UnknownReplica {
                replica,
                replica_count,
            },
            MessageError::ToSelf { replica } => TransferError::ToSelf { replica },
        }
    }
}

impl From<ConsumeError> for TransferError {
    fn from(error: ConsumeError) -> TransferError {
        match error {
            ConsumeError::InsufficientRights {
                requested,
                available,
            } => TransferError::InsufficientRights {
                requested,
                available,
            },
            ConsumeError::Overflow(overflow) => TransferError::Overflow(overflow),
        }
    }
}

impl From<RightsError> for ConsumeError {
    fn from(error: RightsError) -> ConsumeError {
        match error {
            RightsError::Overflow(overflow) => ConsumeError::Overflow(overflow),
        }
    }
}

/// The grow check shared by representations.
pub(crate) fn check_grow(replica_count: usize) -> Result<(), GrowError> {
    if replica_count > MAX_REPLICAS {
        return Err(GrowError::TooManyReplicas {
            replica_count,
            max: MAX_REPLICAS,
        });
    }
    Ok(())
}

/// `believed = received − transferred_out − consumed`, signed: a stale view of
/// another replica can show spending before the income that paid for it.
pub(crate) fn signed_rights(
    received: u128,
    transferred_out: u128,
    consumed: u64,
) -> Result<i128, Overflow> {
    let received = i128::try_from(received).map_err(|_| Overflow::of("believed rights"))?;
    let transferred_out =
        i128::try_from(transferred_out).map_err(|_| Overflow::of("believed rights"))?;
    received
        .checked_sub(transferred_out)
        .and_then(|rest| rest.checked_sub(i128::from(consumed)))
        .ok_or(Overflow::of("believed rights"))
}

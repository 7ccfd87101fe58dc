//! The two-sided Bounded Counter of the Extensions paragraph
//! (`lower <= value <= upper`): two bounded counters, one per bound, updated
//! together by every operation and merged together by every message.

use crate::counter::{BoundedCounter, CounterMessage};
use crate::error::{
    DecrementError, GrowError, HandleRequestError, IncrementError, MergeError, MessageError,
    NewError, Overflow, RequestError, RightsError, TransferError, ValueError,
};
use crate::full::FullRights;
use crate::policy::{RightsView, TransferPolicy};
use crate::replica::ReplicaId;
use crate::request::{RequestMode, RequestOutcome, TransferRequest};
use crate::rights::RightsState;
use crate::Bound;

/// A two-sided counter replica.
///
/// - the *lower half* is a [`Bound::Lower`] counter with `K = lower`: its
///   rights are rights to decrement;
/// - the *upper half* is a [`Bound::Upper`] counter with `K = upper`: its
///   rights are rights to increment.
///
/// An increment spends increment rights (upper half) and creates as many
/// decrement rights (lower half); a decrement does the opposite. Both halves
/// are checked before either changes, so an operation is all or nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TwoSidedCounter<S: RightsState = FullRights> {
    lower_half: BoundedCounter<S>,
    upper_half: BoundedCounter<S>,
}

/// A two-sided counter's message: both halves, always together.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TwoSidedMessage<M> {
    pub(crate) lower_half: CounterMessage<M>,
    pub(crate) upper_half: CounterMessage<M>,
}

impl<M> TwoSidedMessage<M> {
    pub fn lower_half(&self) -> &CounterMessage<M> {
        &self.lower_half
    }

    pub fn upper_half(&self) -> &CounterMessage<M> {
        &self.upper_half
    }
}

impl<S: RightsState> TwoSidedCounter<S> {
    /// A counter starting at `initial_value` whose rights in both directions
    /// (`initial_value − lower` to decrement, `upper − initial_value` to
    /// increment) are held by `holder`. Every replica is created with the
    /// same arguments but its own `me`.
    pub fn new(
        lower: i64,
        upper: i64,
        initial_value: i64,
        holder: ReplicaId,
        me: ReplicaId,
        replica_count: usize,
    ) -> Result<Self, NewError> {
        if lower > upper {
            return Err(NewError::BoundsInverted { lower, upper });
        }
        if initial_value < lower || initial_value > upper {
            return Err(NewError::InitialValueOutOfBounds {
                initial_value,
                lower,
                upper,
            });
        }
        Ok(TwoSidedCounter {
            lower_half: BoundedCounter::with_initial_value(
                Bound::Lower,
                lower,
                initial_value,
                holder,
                me,
                replica_count,
            )?,
            upper_half: BoundedCounter::with_initial_value(
                Bound::Upper,
                upper,
                initial_value,
                holder,
                me,
                replica_count,
            )?,
        })
    }

    /// Rejoins two halves decoded from the wire.
    pub(crate) fn from_halves(
        lower_half: BoundedCounter<S>,
        upper_half: BoundedCounter<S>,
    ) -> Result<Self, &'static str> {
        if lower_half.bound() != Bound::Lower || upper_half.bound() != Bound::Upper {
            return Err("the halves must be a lower-bound and an upper-bound counter");
        }
        if lower_half.k() > upper_half.k() {
            return Err("lower bound above upper bound");
        }
        if lower_half.me() != upper_half.me()
            || lower_half.replica_count() != upper_half.replica_count()
        {
            return Err("the halves belong to different replicas");
        }
        Ok(TwoSidedCounter {
            lower_half,
            upper_half,
        })
    }

    pub fn lower(&self) -> i64 {
        self.lower_half.k()
    }

    pub fn upper(&self) -> i64 {
        self.upper_half.k()
    }

    pub fn me(&self) -> ReplicaId {
        self.lower_half.me()
    }

    pub fn replica_count(&self) -> usize {
        self.lower_half.replica_count()
    }

    /// The half that keeps `value >= lower` (decrement rights).
    pub fn lower_half(&self) -> &BoundedCounter<S> {
        &self.lower_half
    }

    /// The half that keeps `value <= upper` (increment rights).
    pub fn upper_half(&self) -> &BoundedCounter<S> {
        &self.upper_half
    }

    fn half(&self, bound: Bound) -> &BoundedCounter<S> {
        match bound {
            Bound::Lower => &self.lower_half,
            Bound::Upper => &self.upper_half,
        }
    }

    fn half_mut(&mut self, bound: Bound) -> &mut BoundedCounter<S> {
        match bound {
            Bound::Lower => &mut self.lower_half,
            Bound::Upper => &mut self.upper_half,
        }
    }

    pub fn grow(&mut self, replica_count: usize) -> Result<(), GrowError> {
        self.lower_half.grow(replica_count)?;
        self.upper_half.grow(replica_count)
    }

    /// The value; both halves compute it and must agree.
    pub fn value(&self) -> Result<i64, ValueError> {
        let lower_half = self.lower_half.value()?;
        let upper_half = self.upper_half.value()?;
        if lower_half != upper_half {
            return Err(ValueError::HalvesDisagree {
                lower_half,
                upper_half,
            });
        }
        Ok(lower_half)
    }

    /// Rights to decrement held here.
    pub fn decrement_rights(&self) -> Result<u64, RightsError> {
        self.lower_half.local_rights()
    }

    /// Rights to increment held here.
    pub fn increment_rights(&self) -> Result<u64, RightsError> {
        self.upper_half.local_rights()
    }

    /// Adds `n`: spends `n` increment rights, creates `n` decrement rights.
    pub fn increment(&mut self, n: u64) -> Result<(), IncrementError> {
        self.upper_half.check_increment(n)?;
        self.lower_half.check_increment(n)?;
        self.upper_half
            .increment(n)
            .expect("checked by check_increment");
        self.lower_half
            .increment(n)
            .expect("checked by check_increment");
        Ok(())
    }

    /// Subtracts `n`: spends `n` decrement rights, creates `n` increment
    /// rights.
    pub fn decrement(&mut self, n: u64) -> Result<(), DecrementError> {
        self.lower_half.check_decrement(n)?;
        self.upper_half.check_decrement(n)?;
        self.lower_half
            .decrement(n)
            .expect("checked by check_decrement");
        self.upper_half
            .decrement(n)
            .expect("checked by check_decrement");
        Ok(())
    }

    /// Moves `n` rights of one kind (`Bound::Lower`: decrement rights,
    /// `Bound::Upper`: increment rights) to `to`.
    pub fn transfer(&mut self, bound: Bound, n: u64, to: ReplicaId) -> Result<(), TransferError> {
        self.half_mut(bound).transfer(n, to)
    }

    pub fn message_for(&self, to: ReplicaId) -> Result<TwoSidedMessage<S::Message>, MessageError> {
        Ok(TwoSidedMessage {
            lower_half: self.lower_half.message_for(to)?,
            upper_half: self.upper_half.message_for(to)?,
        })
    }

    /// Whether `merge(message)` would succeed; changes nothing.
    pub fn check_merge(&self, message: &TwoSidedMessage<S::Message>) -> Result<(), MergeError> {
        self.lower_half.check_merge(&message.lower_half)?;
        self.upper_half.check_merge(&message.upper_half)
    }

    /// Merges both halves, or neither.
    pub fn merge(&mut self, message: &TwoSidedMessage<S::Message>) -> Result<(), MergeError> {
        self.check_merge(message)?;
        self.lower_half
            .merge(&message.lower_half)
            .expect("checked by check_merge");
        self.upper_half
            .merge(&message.upper_half)
            .expect("checked by check_merge");
        Ok(())
    }

    pub fn le(&self, other: &Self) -> bool {
        self.lower_half.le(&other.lower_half) && self.upper_half.le(&other.upper_half)
    }

    /// The policy's input for one kind of rights.
    pub fn rights_view(&self, bound: Bound) -> Result<RightsView, Overflow> {
        self.half(bound).rights_view()
    }

    pub fn transfer_request(
        &self,
        bound: Bound,
        donor: ReplicaId,
        amount: u64,
        mode: RequestMode,
    ) -> Result<TransferRequest, RequestError> {
        self.half(bound).transfer_request(donor, amount, mode)
    }

    pub fn handle_transfer_request<P: TransferPolicy + ?Sized>(
        &mut self,
        bound: Bound,
        request: &TransferRequest,
        policy: &P,
    ) -> Result<RequestOutcome, HandleRequestError> {
        self.half_mut(bound)
            .handle_transfer_request(request, policy)
    }
}

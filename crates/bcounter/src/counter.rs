//! The Bounded Counter of Figure 2 (`value >= K`) and its mirror from the
//! Extensions paragraph (`value <= K`), over either rights representation.

use serde::{Deserialize, Serialize};

use crate::error::{
    ConsumeError, DecrementError, GrantError, GrowError, HandleRequestError, IncrementError,
    MergeError, MessageError, NewError, Overflow, RequestError, RightsError, TransferError,
    ValueError,
};
use crate::full::FullRights;
use crate::policy::{PeerRights, RightsView, TransferPolicy};
use crate::replica::ReplicaId;
use crate::request::{Reply, RequestMode, RequestOutcome, TransferRequest};
use crate::rights::RightsState;

/// Which invariant a counter keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// `value >= K` (Figure 2). Rights are rights to decrement: an increment
    /// creates them (`R[i][i]`), a decrement spends them (`U[i]`).
    Lower,
    /// `value <= K` (Extensions). Rights are rights to increment: a decrement
    /// creates them (`R[i][i]`), an increment spends them (`U[i]`).
    Upper,
}

/// A Bounded Counter replica: bound `K`, direction, and the rights state
/// (`R`, `U`) in representation `S` ([`FullRights`] or
/// [`CompactRights`](crate::CompactRights)).
///
/// Operations on one replica must be serialized by the caller (`&mut self`
/// does it within a process): a check-then-spend that two threads interleave
/// would spend the same rights twice.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BoundedCounter<S: RightsState = FullRights> {
    bound: Bound,
    /// The paper's `K`.
    k: i64,
    rights: S,
}

/// What replicas of a [`BoundedCounter`] send each other: a state (full
/// representation) or a delta (compact), tagged with the bound so that a
/// message never lands in a different counter.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CounterMessage<M> {
    pub(crate) bound: Bound,
    pub(crate) k: i64,
    pub(crate) rights: M,
}

impl<M> CounterMessage<M> {
    pub fn bound(&self) -> Bound {
        self.bound
    }

    pub fn k(&self) -> i64 {
        self.k
    }

    /// The rights part: a [`FullRights`] or a
    /// [`RightsDelta`](crate::RightsDelta).
    pub fn rights(&self) -> &M {
        &self.rights
    }
}

/// `K ± (created − spent)` in `i128`, then back to `i64`.
fn value_of(bound: Bound, k: i64, granted: u128, consumed: u128) -> Result<i64, Overflow> {
    let overflow = Overflow::of("counter value");
    let granted = i128::try_from(granted).map_err(|_| overflow)?;
    let consumed = i128::try_from(consumed).map_err(|_| overflow)?;
    let net = granted.checked_sub(consumed).ok_or(overflow)?;
    let value = match bound {
        Bound::Lower => i128::from(k).checked_add(net),
        Bound::Upper => i128::from(k).checked_sub(net),
    };
    value
        .and_then(|value| i64::try_from(value).ok())
        .ok_or(overflow)
}

impl<S: RightsState> BoundedCounter<S> {
    /// A counter at replica `me` whose value starts at `K`, with no rights
    /// anywhere, as in the paper.
    pub fn new(
        bound: Bound,
        k: i64,
        me: ReplicaId,
        replica_count: usize,
    ) -> Result<Self, NewError> {
        Ok(BoundedCounter {
            bound,
            k,
            rights: S::new(me, replica_count)?,
        })
    }

    /// A counter that starts at `initial_value`, all of whose rights
    /// (`|initial_value − K|`) are held by `holder`. Every replica must be
    /// created with the same arguments but its own `me`.
    pub fn with_initial_value(
        bound: Bound,
        k: i64,
        initial_value: i64,
        holder: ReplicaId,
        me: ReplicaId,
        replica_count: usize,
    ) -> Result<Self, NewError> {
        let distance = match bound {
            Bound::Lower => i128::from(initial_value).checked_sub(i128::from(k)),
            Bound::Upper => i128::from(k).checked_sub(i128::from(initial_value)),
        }
        .ok_or(Overflow::of("initial rights"))?;
        let rights = u64::try_from(distance).map_err(|_| {
            let (lower, upper) = match bound {
                Bound::Lower => (k, i64::MAX),
                Bound::Upper => (i64::MIN, k),
            };
            NewError::InitialValueOutOfBounds {
                initial_value,
                lower,
                upper,
            }
        })?;
        Ok(BoundedCounter {
            bound,
            k,
            rights: S::with_genesis(me, replica_count, holder, rights)?,
        })
    }

    pub(crate) fn from_parts(bound: Bound, k: i64, rights: S) -> Self {
        BoundedCounter { bound, k, rights }
    }

    pub fn bound(&self) -> Bound {
        self.bound
    }

    /// The paper's `K`.
    pub fn k(&self) -> i64 {
        self.k
    }

    pub fn me(&self) -> ReplicaId {
        self.rights.me()
    }

    pub fn replica_count(&self) -> usize {
        self.rights.replica_count()
    }

    /// The rights state (`R`, `U`).
    pub fn rights(&self) -> &S {
        &self.rights
    }

    /// A site joined: know `replica_count` replicas from now on.
    pub fn grow(&mut self, replica_count: usize) -> Result<(), GrowError> {
        self.rights.grow(replica_count)
    }

    /// `K + ΣR[k][k] − ΣU[k]` (lower) or `K − ΣR[k][k] + ΣU[k]` (upper), from
    /// this replica's possibly stale knowledge.
    pub fn value(&self) -> Result<i64, ValueError> {
        Ok(value_of(
            self.bound,
            self.k,
            self.rights.granted_total()?,
            self.rights.consumed_total()?,
        )?)
    }

    /// The rights this replica holds (to decrement for a lower bound, to
    /// increment for an upper bound).
    pub fn local_rights(&self) -> Result<u64, RightsError> {
        self.rights.local_rights()
    }

    /// A grant moves this replica's view of the value away from the bound; it
    /// must stay an `i64`.
    fn check_grant(&self, n: u64) -> Result<(), Overflow> {
        self.rights.check_grant(n).map_err(|error| match error {
            GrantError::Overflow(overflow) => overflow,
        })?;
        let granted = self
            .rights
            .granted_total()?
            .checked_add(u128::from(n))
            .ok_or(Overflow::of("rights granted"))?;
        value_of(self.bound, self.k, granted, self.rights.consumed_total()?)?;
        Ok(())
    }

    pub(crate) fn check_increment(&self, n: u64) -> Result<(), IncrementError> {
        match self.bound {
            Bound::Lower => Ok(self.check_grant(n)?),
            Bound::Upper => self.rights.check_consume(n).map_err(IncrementError::from),
        }
    }

    pub(crate) fn check_decrement(&self, n: u64) -> Result<(), DecrementError> {
        match self.bound {
            Bound::Lower => self.rights.check_consume(n).map_err(DecrementError::from),
            Bound::Upper => Ok(self.check_grant(n)?),
        }
    }

    /// Adds `n`. Lower bound: always allowed (it creates rights), unless the
    /// value would leave `i64`. Upper bound: needs `n` rights.
    pub fn increment(&mut self, n: u64) -> Result<(), IncrementError> {
        match self.bound {
            Bound::Lower => self.grant(n)?,
            // `consume` checks the rights itself: one pass over row and column.
            Bound::Upper => self.rights.consume(n)?,
        }
        Ok(())
    }

    /// Subtracts `n`. Lower bound: needs `n` rights. Upper bound: always
    /// allowed (it creates rights), unless the value would leave `i64`.
    pub fn decrement(&mut self, n: u64) -> Result<(), DecrementError> {
        match self.bound {
            Bound::Lower => self.rights.consume(n)?,
            Bound::Upper => self.grant(n)?,
        }
        Ok(())
    }

    fn grant(&mut self, n: u64) -> Result<(), Overflow> {
        self.check_grant(n)?;
        self.rights.grant(n).expect("checked by check_grant");
        Ok(())
    }

    /// Moves `n` of this replica's rights to `to`.
    pub fn transfer(&mut self, n: u64, to: ReplicaId) -> Result<(), TransferError> {
        self.rights.transfer(n, to)
    }

    /// What to send replica `to`.
    pub fn message_for(&self, to: ReplicaId) -> Result<CounterMessage<S::Message>, MessageError> {
        Ok(CounterMessage {
            bound: self.bound,
            k: self.k,
            rights: self.rights.message_for(to)?,
        })
    }

    /// Whether `merge(message)` would succeed; changes nothing.
    pub fn check_merge(&self, message: &CounterMessage<S::Message>) -> Result<(), MergeError> {
        if message.bound != self.bound {
            return Err(MergeError::DirectionMismatch {
                local: self.bound,
                remote: message.bound,
            });
        }
        if message.k != self.k {
            return Err(MergeError::BoundMismatch {
                local: self.k,
                remote: message.k,
            });
        }
        self.rights.check_message(&message.rights)
    }

    /// Entry-wise max with a received state or delta.
    pub fn merge(&mut self, message: &CounterMessage<S::Message>) -> Result<(), MergeError> {
        self.check_merge(message)?;
        self.rights
            .merge_message(&message.rights)
            .expect("checked by check_merge");
        Ok(())
    }

    /// The lattice order on the rights state (same counter only).
    pub fn le(&self, other: &Self) -> bool {
        self.bound == other.bound && self.k == other.k && self.rights.le(&other.rights)
    }

    /// The transfer policy's input.
    pub fn rights_view(&self) -> Result<RightsView, Overflow> {
        let me = self.me();
        let local_rights = self.local_rights().map_err(|error| match error {
            RightsError::Overflow(overflow) => overflow,
        })?;
        let mut peers = Vec::with_capacity(self.replica_count().saturating_sub(1));
        for index in (0..self.replica_count()).filter(|&index| index != me.index()) {
            let replica = ReplicaId::from_index(index).expect("index below MAX_REPLICAS");
            peers.push(PeerRights {
                replica,
                believed_rights: self.rights.believed_rights(replica)?,
                transferred_to_me: self
                    .rights
                    .r(replica, me)
                    .expect("every representation stores its own column"),
            });
        }
        Ok(RightsView {
            me,
            local_rights,
            peers,
        })
    }

    /// A request to `donor` for `amount` rights, carrying `R[donor][me]` as
    /// this replica knows it.
    pub fn transfer_request(
        &self,
        donor: ReplicaId,
        amount: u64,
        mode: RequestMode,
    ) -> Result<TransferRequest, RequestError> {
        let me = self.me();
        if donor.index() >= self.replica_count() {
            return Err(RequestError::UnknownReplica {
                replica: donor,
                replica_count: self.replica_count(),
            });
        }
        if donor == me {
            return Err(RequestError::ToSelf { replica: me });
        }
        Ok(TransferRequest {
            requester: me,
            donor,
            amount,
            seen_transferred: self
                .rights
                .r(donor, me)
                .expect("every representation stores its own column"),
            mode,
        })
    }

    /// Serves a transfer request as a donor (§IV-D): ignores it if this
    /// replica has already transferred more than the requester had seen,
    /// otherwise transfers what `policy` grants.
    pub fn handle_transfer_request<P: TransferPolicy + ?Sized>(
        &mut self,
        request: &TransferRequest,
        policy: &P,
    ) -> Result<RequestOutcome, HandleRequestError> {
        let me = self.me();
        if request.donor != me {
            return Err(HandleRequestError::WrongDonor {
                me,
                donor: request.donor,
            });
        }
        if request.requester.index() >= self.replica_count() {
            return Err(HandleRequestError::UnknownReplica {
                replica: request.requester,
                replica_count: self.replica_count(),
            });
        }
        if request.requester == me {
            return Err(HandleRequestError::FromSelf { replica: me });
        }
        let transferred = self
            .rights
            .r(me, request.requester)
            .expect("every representation stores its own row");
        if request.seen_transferred > transferred {
            return Err(HandleRequestError::SeenAheadOfDonor {
                seen: request.seen_transferred,
                transferred,
            });
        }
        if transferred > request.seen_transferred {
            return Ok(RequestOutcome::AlreadySatisfied { transferred });
        }
        let held = self.local_rights()?;
        // Whatever the policy says, a donor gives only what it holds.
        let amount = policy.donation(request, held).min(held);
        if amount == 0 {
            return Ok(RequestOutcome::NothingToGive);
        }
        self.transfer(amount, request.requester)?;
        let reply = match request.mode {
            RequestMode::Sync => Reply::SendStateNow,
            RequestMode::Async => Reply::ByReplication,
        };
        Ok(RequestOutcome::Transferred { amount, reply })
    }

    pub(crate) fn planted(&self) -> crate::rights::PlantedBug {
        self.rights.planted_bug()
    }

    pub(crate) fn rights_mut(&mut self) -> &mut S {
        &mut self.rights
    }

    #[doc(hidden)]
    pub fn set_planted_bug(&mut self, bug: crate::rights::PlantedBug) {
        self.rights.set_planted_bug(bug);
    }
}

impl From<ConsumeError> for IncrementError {
    fn from(error: ConsumeError) -> IncrementError {
        match error {
            ConsumeError::InsufficientRights {
                requested,
                available,
            } => IncrementError::InsufficientRights {
                requested,
                available,
            },
            ConsumeError::Overflow(overflow) => IncrementError::Overflow(overflow),
        }
    }
}

impl From<ConsumeError> for DecrementError {
    fn from(error: ConsumeError) -> DecrementError {
        match error {
            ConsumeError::InsufficientRights {
                requested,
                available,
            } => DecrementError::InsufficientRights {
                requested,
                available,
            },
            ConsumeError::Overflow(overflow) => DecrementError::Overflow(overflow),
        }
    }
}

impl From<GrantError> for IncrementError {
    fn from(error: GrantError) -> IncrementError {
        match error {
            GrantError::Overflow(overflow) => IncrementError::Overflow(overflow),
        }
    }
}

impl From<GrantError> for DecrementError {
    fn from(error: GrantError) -> DecrementError {
        match error {
            GrantError::Overflow(overflow) => DecrementError::Overflow(overflow),
        }
    }
}

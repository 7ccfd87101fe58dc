//! Shared by the integration tests: the counter flavours behind one trait, so
//! that one driver exercises lower-bound, upper-bound and two-sided counters
//! in both representations.

#![allow(dead_code)]

use roost_bcounter::{
    Bound, BoundedCounter, CounterMessage, DecrementError, HandleRequestError, IncrementError,
    MergeError, MessageError, PlantedBug, ProactivePolicy, ReplicaId, RequestOutcome, RightsState,
    RightsView, TransferError, TransferRequest, TwoSidedCounter, TwoSidedMessage,
};

pub const LOWER: i64 = 0;
pub const UPPER: i64 = 60;

/// One counter flavour, as the simulation drives it.
pub trait SimCounter: Clone {
    type Msg: Clone;
    /// The kinds of rights this flavour has.
    const KINDS: &'static [Bound];
    /// The true value at the start (all rights at r0).
    const INITIAL_VALUE: i64;

    fn create(me: ReplicaId, replica_count: usize) -> Self;
    fn replica_count(&self) -> usize;
    fn grow(&mut self, replica_count: usize);
    fn value(&self) -> i64;
    fn rights(&self, kind: Bound) -> u64;
    fn increment(&mut self, n: u64) -> Result<(), IncrementError>;
    fn decrement(&mut self, n: u64) -> Result<(), DecrementError>;
    fn transfer(&mut self, kind: Bound, n: u64, to: ReplicaId) -> Result<(), TransferError>;
    fn message_for(&self, to: ReplicaId) -> Result<Self::Msg, MessageError>;
    fn merge(&mut self, message: &Self::Msg) -> Result<(), MergeError>;
    fn view(&self, kind: Bound) -> RightsView;
    fn handle(
        &mut self,
        kind: Bound,
        request: &TransferRequest,
        policy: &ProactivePolicy,
    ) -> Result<RequestOutcome, HandleRequestError>;
    /// The lattice order on this replica's state.
    fn le(&self, other: &Self) -> bool;
}

#[derive(Clone)]
pub struct Lower<S: RightsState>(pub BoundedCounter<S>);
#[derive(Clone)]
pub struct Upper<S: RightsState>(pub BoundedCounter<S>);
#[derive(Clone)]
pub struct TwoSided<S: RightsState>(pub TwoSidedCounter<S>);

macro_rules! one_sided {
    ($flavour:ident, $bound:expr, $k:expr, $initial:expr, $bug:expr) => {
        impl<S: RightsState> SimCounter for $flavour<S> {
            type Msg = CounterMessage<S::Message>;
            const KINDS: &'static [Bound] = &[$bound];
            const INITIAL_VALUE: i64 = $initial;

            fn create(me: ReplicaId, replica_count: usize) -> Self {
                let mut counter = BoundedCounter::with_initial_value(
                    $bound,
                    $k,
                    $initial,
                    ReplicaId(0),
                    me,
                    replica_count,
                )
                .unwrap();
                counter.set_planted_bug($bug);
                $flavour(counter)
            }
            fn replica_count(&self) -> usize {
                self.0.replica_count()
            }
            fn grow(&mut self, replica_count: usize) {
                self.0.grow(replica_count).unwrap()
            }
            fn value(&self) -> i64 {
                self.0.value().unwrap()
            }
            fn rights(&self, _kind: Bound) -> u64 {
                self.0.local_rights().unwrap()
            }
            fn increment(&mut self, n: u64) -> Result<(), IncrementError> {
                self.0.increment(n)
            }
            fn decrement(&mut self, n: u64) -> Result<(), DecrementError> {
                self.0.decrement(n)
            }
            fn transfer(
                &mut self,
                _kind: Bound,
                n: u64,
                to: ReplicaId,
            ) -> Result<(), TransferError> {
                self.0.transfer(n, to)
            }
            fn message_for(&self, to: ReplicaId) -> Result<Self::Msg, MessageError> {
                self.0.message_for(to)
            }
            fn merge(&mut self, message: &Self::Msg) -> Result<(), MergeError> {
                self.0.merge(message)
            }
            fn view(&self, _kind: Bound) -> RightsView {
                self.0.rights_view().unwrap()
            }
            fn handle(
                &mut self,
                _kind: Bound,
                request: &TransferRequest,
                policy: &ProactivePolicy,
            ) -> Result<RequestOutcome, HandleRequestError> {
                self.0.handle_transfer_request(request, policy)
            }
            fn le(&self, other: &Self) -> bool {
                self.0.le(&other.0)
            }
        }
    };
}

/// A lower-bound counter whose rights come from the global value: the bug
/// the tests must catch.
#[derive(Clone)]
pub struct BuggyLower<S: RightsState>(pub BoundedCounter<S>);

one_sided!(Lower, Bound::Lower, LOWER, UPPER, PlantedBug::None);
one_sided!(Upper, Bound::Upper, UPPER, LOWER, PlantedBug::None);
one_sided!(
    BuggyLower,
    Bound::Lower,
    LOWER,
    UPPER,
    PlantedBug::RightsFromGlobalValue
);

impl<S: RightsState> SimCounter for TwoSided<S> {
    type Msg = TwoSidedMessage<S::Message>;
    const KINDS: &'static [Bound] = &[Bound::Lower, Bound::Upper];
    const INITIAL_VALUE: i64 = (LOWER + UPPER) / 2;

    fn create(me: ReplicaId, replica_count: usize) -> Self {
        TwoSided(
            TwoSidedCounter::new(
                LOWER,
                UPPER,
                Self::INITIAL_VALUE,
                ReplicaId(0),
                me,
                replica_count,
            )
            .unwrap(),
        )
    }
    fn replica_count(&self) -> usize {
        self.0.replica_count()
    }
    fn grow(&mut self, replica_count: usize) {
        self.0.grow(replica_count).unwrap()
    }
    fn value(&self) -> i64 {
        self.0.value().unwrap()
    }
    fn rights(&self, kind: Bound) -> u64 {
        match kind {
            Bound::Lower => self.0.decrement_rights().unwrap(),
            Bound::Upper => self.0.increment_rights().unwrap(),
        }
    }
    fn increment(&mut self, n: u64) -> Result<(), IncrementError> {
        self.0.increment(n)
    }
    fn decrement(&mut self, n: u64) -> Result<(), DecrementError> {
        self.0.decrement(n)
    }
    fn transfer(&mut self, kind: Bound, n: u64, to: ReplicaId) -> Result<(), TransferError> {
        self.0.transfer(kind, n, to)
    }
    fn message_for(&self, to: ReplicaId) -> Result<Self::Msg, MessageError> {
        self.0.message_for(to)
    }
    fn merge(&mut self, message: &Self::Msg) -> Result<(), MergeError> {
        self.0.merge(message)
    }
    fn view(&self, kind: Bound) -> RightsView {
        self.0.rights_view(kind).unwrap()
    }
    fn handle(
        &mut self,
        kind: Bound,
        request: &TransferRequest,
        policy: &ProactivePolicy,
    ) -> Result<RequestOutcome, HandleRequestError> {
        self.0.handle_transfer_request(kind, request, policy)
    }
    fn le(&self, other: &Self) -> bool {
        self.0.le(&other.0)
    }
}

//! Semantics of single operations: Figure 3's example, the upper-bound and
//! two-sided variants, growth, errors and overflow, idempotent requests.

use roost_bcounter::{
    Bound, BoundedCounter, CompactRights, DecrementError, FullRights, HandleRequestError,
    IncrementError, MergeError, MessageError, NewError, ProactiveConfig, ProactivePolicy,
    RateLimit, ReplicaId, RequestMode, RequestOutcome, RightsState, TransferError, TwoSidedCounter,
    ValueError, MAX_REPLICAS,
};

const R0: ReplicaId = ReplicaId(0);
const R1: ReplicaId = ReplicaId(1);
const R2: ReplicaId = ReplicaId(2);

fn lower<S: RightsState>(me: ReplicaId, initial_value: i64) -> BoundedCounter<S> {
    BoundedCounter::with_initial_value(Bound::Lower, 10, initial_value, R0, me, 3).unwrap()
}

fn sync<S: RightsState>(to: &mut BoundedCounter<S>, from: &BoundedCounter<S>) {
    to.merge(&from.message_for(to.me()).unwrap()).unwrap();
}

fn policy() -> ProactivePolicy {
    ProactivePolicy::new(ProactiveConfig {
        threshold_rights: 5,
        shortfall_mode: RequestMode::Sync,
        rate_limit: RateLimit::new(1, 100).unwrap(),
    })
}

/// Figure 3: bound 10, initial value 40 (30 rights at r0), r0 gives 10 to r1
/// and to r2, r1 increments by 1, decrements 5, 4 and 2 at r0, r1, r2.
fn figure_3<S: RightsState>() {
    let mut r0 = lower::<S>(R0, 40);
    let mut r1 = lower::<S>(R1, 40);
    let mut r2 = lower::<S>(R2, 40);
    assert_eq!(r0.local_rights().unwrap(), 30);
    r0.transfer(10, R1).unwrap();
    r0.transfer(10, R2).unwrap();
    sync(&mut r1, &r0);
    sync(&mut r2, &r0);
    r1.increment(1).unwrap();
    r0.decrement(5).unwrap();
    r1.decrement(4).unwrap();
    r2.decrement(2).unwrap();
    for _round in 0..2 {
        sync(&mut r0, &r1);
        sync(&mut r0, &r2);
        sync(&mut r1, &r0);
        sync(&mut r2, &r0);
    }
    // "replica r0 holds 5 rights (30 + 0 − 20 − 5)", "the current value is 30".
    assert_eq!(r0.local_rights().unwrap(), 5);
    assert_eq!(r1.local_rights().unwrap(), 7);
    assert_eq!(r2.local_rights().unwrap(), 8);
    for replica in [&r0, &r1, &r2] {
        assert_eq!(replica.value().unwrap(), 30);
    }
}

#[test]
fn figure_3_full() {
    figure_3::<FullRights>();
}

#[test]
fn figure_3_compact() {
    figure_3::<CompactRights>();
}

#[test]
fn decrement_needs_local_rights_not_global_value() {
    let mut r0 = lower::<FullRights>(R0, 12);
    let mut r1 = lower::<FullRights>(R1, 12);
    sync(&mut r1, &r0);
    // r1 sees value 12 (2 above the bound) but holds no rights.
    assert_eq!(r1.value().unwrap(), 12);
    assert_eq!(
        r1.decrement(1),
        Err(DecrementError::InsufficientRights {
            requested: 1,
            available: 0
        })
    );
    r0.decrement(2).unwrap();
    assert_eq!(
        r0.decrement(1),
        Err(DecrementError::InsufficientRights {
            requested: 1,
            available: 0
        })
    );
    assert_eq!(r0.value().unwrap(), 10);
}

#[test]
fn transfer_errors() {
    let mut r0 = lower::<FullRights>(R0, 15);
    assert_eq!(
        r0.transfer(1, ReplicaId(3)),
        Err(TransferError::UnknownReplica {
            replica: ReplicaId(3),
            replica_count: 3
        })
    );
    assert_eq!(
        r0.transfer(1, R0),
        Err(TransferError::ToSelf { replica: R0 })
    );
    assert_eq!(
        r0.transfer(6, R1),
        Err(TransferError::InsufficientRights {
            requested: 6,
            available: 5
        })
    );
    assert_eq!(
        r0.message_for(ReplicaId(9)),
        Err(MessageError::UnknownReplica {
            replica: ReplicaId(9),
            replica_count: 3
        })
    );
    assert_eq!(r0.local_rights().unwrap(), 5, "failed ops change nothing");
}

#[test]
fn construction_errors() {
    assert_eq!(
        BoundedCounter::<FullRights>::new(Bound::Lower, 0, R0, 0),
        Err(NewError::NoReplicas)
    );
    assert!(matches!(
        BoundedCounter::<CompactRights>::new(Bound::Lower, 0, R0, MAX_REPLICAS + 1),
        Err(NewError::TooManyReplicas { .. })
    ));
    assert!(matches!(
        BoundedCounter::<FullRights>::new(Bound::Lower, 0, ReplicaId(3), 3),
        Err(NewError::UnknownReplica { .. })
    ));
    assert!(matches!(
        BoundedCounter::<FullRights>::with_initial_value(Bound::Lower, 10, 9, R0, R0, 3),
        Err(NewError::InitialValueOutOfBounds { .. })
    ));
    assert!(matches!(
        BoundedCounter::<FullRights>::with_initial_value(Bound::Upper, 10, 11, R0, R0, 3),
        Err(NewError::InitialValueOutOfBounds { .. })
    ));
    assert!(matches!(
        TwoSidedCounter::<FullRights>::new(5, 4, 4, R0, R0, 3),
        Err(NewError::BoundsInverted { .. })
    ));
    // The whole i64 range is a legal pair of bounds: u64 rights cover it.
    let wide = TwoSidedCounter::<FullRights>::new(i64::MIN, i64::MAX, i64::MIN, R0, R0, 1).unwrap();
    assert_eq!(wide.increment_rights().unwrap(), u64::MAX);
}

#[test]
fn increment_overflow_is_an_error() {
    let mut r0 = BoundedCounter::<FullRights>::new(Bound::Lower, 0, R0, 2).unwrap();
    r0.increment(i64::MAX as u64).unwrap();
    assert!(matches!(r0.increment(1), Err(IncrementError::Overflow(_))));
    assert_eq!(r0.value().unwrap(), i64::MAX);

    // R[i][i] itself: an upper-bound counter decrements (creates rights)
    // until the value would leave i64.
    let mut up = BoundedCounter::<CompactRights>::new(Bound::Upper, i64::MAX, R0, 2).unwrap();
    up.decrement(u64::MAX).unwrap();
    assert_eq!(up.value().unwrap(), i64::MIN);
    assert!(matches!(up.decrement(1), Err(DecrementError::Overflow(_))));
}

#[test]
fn concurrent_increments_overflow_value_not_wrap() {
    let mut r0 = BoundedCounter::<FullRights>::new(Bound::Lower, 0, R0, 2).unwrap();
    let mut r1 = BoundedCounter::<FullRights>::new(Bound::Lower, 0, R1, 2).unwrap();
    r0.increment(i64::MAX as u64).unwrap();
    r1.increment(i64::MAX as u64).unwrap();
    sync(&mut r0, &r1);
    assert!(matches!(r0.value(), Err(ValueError::Overflow(_))));
    // Rights stay exact: r0 holds its own increments only.
    assert_eq!(r0.local_rights().unwrap(), i64::MAX as u64);
    // Further increments are refused rather than wrapping.
    assert!(matches!(r0.increment(1), Err(IncrementError::Overflow(_))));
}

#[test]
fn transfer_count_overflow_is_an_error() {
    // Rights ping-pong until R[0][1] would pass u64::MAX.
    let mut r0 = BoundedCounter::<CompactRights>::new(Bound::Lower, i64::MIN, R0, 2).unwrap();
    let mut r1 = BoundedCounter::<CompactRights>::new(Bound::Lower, i64::MIN, R1, 2).unwrap();
    r0.increment(u64::MAX / 2 + 1).unwrap();
    r0.transfer(u64::MAX / 2 + 1, R1).unwrap();
    sync(&mut r1, &r0);
    r1.transfer(u64::MAX / 2 + 1, R0).unwrap();
    sync(&mut r0, &r1);
    assert_eq!(r0.local_rights().unwrap(), u64::MAX / 2 + 1);
    assert!(matches!(
        r0.transfer(u64::MAX / 2 + 1, R1),
        Err(TransferError::Overflow(_))
    ));
}

#[test]
fn upper_bound_mirrors_lower_bound() {
    // value <= 100, starts at 90: 10 rights to increment, at r0.
    let mut r0 =
        BoundedCounter::<FullRights>::with_initial_value(Bound::Upper, 100, 90, R0, R0, 2).unwrap();
    let mut r1 =
        BoundedCounter::<FullRights>::with_initial_value(Bound::Upper, 100, 90, R0, R1, 2).unwrap();
    assert_eq!(r0.local_rights().unwrap(), 10);
    r0.increment(4).unwrap();
    r0.transfer(3, R1).unwrap();
    sync(&mut r1, &r0);
    assert_eq!(
        r1.increment(4),
        Err(IncrementError::InsufficientRights {
            requested: 4,
            available: 3
        })
    );
    r1.increment(3).unwrap();
    r1.decrement(50).unwrap(); // creates 50 increment rights at r1
    assert_eq!(r1.local_rights().unwrap(), 50);
    sync(&mut r0, &r1);
    assert_eq!(r0.value().unwrap(), 90 + 4 + 3 - 50);
    assert_eq!(r1.value().unwrap(), 90 + 4 + 3 - 50);
    assert_eq!(r0.local_rights().unwrap(), 3);
}

#[test]
fn two_sided_keeps_both_bounds_atomically() {
    // 0 <= value <= 10, starts at 4: 4 decrement rights, 6 increment rights.
    let mut r0 = TwoSidedCounter::<CompactRights>::new(0, 10, 4, R0, R0, 2).unwrap();
    let mut r1 = TwoSidedCounter::<CompactRights>::new(0, 10, 4, R0, R1, 2).unwrap();
    assert_eq!(r0.decrement_rights().unwrap(), 4);
    assert_eq!(r0.increment_rights().unwrap(), 6);
    r0.increment(6).unwrap();
    assert_eq!(r0.value().unwrap(), 10);
    assert!(matches!(
        r0.increment(1),
        Err(IncrementError::InsufficientRights { .. })
    ));
    assert_eq!(
        r0.decrement_rights().unwrap(),
        10,
        "failed increment changed nothing"
    );
    r0.transfer(Bound::Lower, 3, R1).unwrap();
    r1.merge(&r0.message_for(R1).unwrap()).unwrap();
    r1.decrement(3).unwrap();
    assert!(matches!(
        r1.decrement(1),
        Err(DecrementError::InsufficientRights { .. })
    ));
    // The decrement at r1 created 3 increment rights there.
    assert_eq!(r1.increment_rights().unwrap(), 3);
    r0.merge(&r1.message_for(R0).unwrap()).unwrap();
    assert_eq!(r0.value().unwrap(), 7);
    assert_eq!(r1.value().unwrap(), 7);
}

#[test]
fn a_site_joins() {
    let mut r0 = lower::<CompactRights>(R0, 20);
    // r3 joins: it knows 4 replicas, the others only 3 until told.
    let r3 = BoundedCounter::<CompactRights>::with_initial_value(
        Bound::Lower,
        10,
        20,
        R0,
        ReplicaId(3),
        4,
    )
    .unwrap();
    assert!(matches!(
        r0.transfer(1, ReplicaId(3)),
        Err(TransferError::UnknownReplica { .. })
    ));
    // Hearing from r3 grows r0's state.
    r0.merge(&r3.message_for(R0).unwrap()).unwrap();
    assert_eq!(r0.replica_count(), 4);
    r0.transfer(4, ReplicaId(3)).unwrap();
    let mut r3 = r3;
    r3.merge(&r0.message_for(ReplicaId(3)).unwrap()).unwrap();
    assert_eq!(r3.local_rights().unwrap(), 4);
    // Explicit growth is idempotent and bounded.
    r0.grow(4).unwrap();
    assert!(r0.grow(MAX_REPLICAS + 1).is_err());
    assert_eq!(r0.local_rights().unwrap(), 6);
}

#[test]
fn merge_rejects_foreign_copies_of_own_entries() {
    let mut a = lower::<FullRights>(R0, 20);
    // A second replica that wrongly believes it is r0 and decrements.
    let mut impostor = lower::<FullRights>(R0, 20);
    impostor.decrement(1).unwrap();
    let mut r1 = lower::<FullRights>(R1, 20);
    sync(&mut r1, &impostor);
    let before = a.clone();
    assert_eq!(
        a.merge(&r1.message_for(R0).unwrap()),
        Err(MergeError::OwnEntriesAhead { replica: R0 })
    );
    assert_eq!(a, before, "a rejected merge changes nothing");

    // A message for a different counter.
    let other = BoundedCounter::<FullRights>::new(Bound::Lower, 11, R1, 3).unwrap();
    assert!(matches!(
        a.merge(&other.message_for(R0).unwrap()),
        Err(MergeError::BoundMismatch { .. })
    ));
    let upper = BoundedCounter::<FullRights>::new(Bound::Upper, 10, R1, 3).unwrap();
    assert!(matches!(
        a.merge(&upper.message_for(R0).unwrap()),
        Err(MergeError::DirectionMismatch { .. })
    ));
}

#[test]
fn compact_delta_for_someone_else_is_rejected() {
    let r0 = lower::<CompactRights>(R0, 20);
    let mut r1 = lower::<CompactRights>(R1, 20);
    let for_r2 = r0.message_for(R2).unwrap();
    assert_eq!(
        r1.merge(&for_r2),
        Err(MergeError::WrongRecipient {
            me: R1,
            addressed_to: R2
        })
    );
}

#[test]
fn compact_state_and_delta_sizes() {
    let n = 16;
    let state = CompactRights::new(R0, n).unwrap();
    assert_eq!(state.numbers(), 4 * n);
    assert_eq!(state.delta_for(R1).unwrap().numbers(), 2 * n + 1);
    let full = FullRights::new(R0, n).unwrap();
    assert_eq!(full.r_matrix().len() + full.u_vector().len(), n * n + n);
}

#[test]
fn transfer_requests_are_idempotent() {
    let policy = policy();
    let mut donor = lower::<FullRights>(R0, 30); // 20 rights
    let mut requester = lower::<FullRights>(R1, 30);
    let request = requester
        .transfer_request(R0, 6, RequestMode::Sync)
        .unwrap();
    assert_eq!(request.seen_transferred, 0);
    let outcome = donor.handle_transfer_request(&request, &policy).unwrap();
    assert!(matches!(
        outcome,
        RequestOutcome::Transferred { amount: 6, .. }
    ));
    // The same request again (duplicated, or resent because the reply was
    // lost): ignored.
    assert_eq!(
        donor.handle_transfer_request(&request, &policy).unwrap(),
        RequestOutcome::AlreadySatisfied { transferred: 6 }
    );
    // A new request sent before the requester heard of the transfer carries
    // the same seen value: ignored too.
    let resent = requester
        .transfer_request(R0, 9, RequestMode::Sync)
        .unwrap();
    assert_eq!(
        donor.handle_transfer_request(&resent, &policy).unwrap(),
        RequestOutcome::AlreadySatisfied { transferred: 6 }
    );
    assert_eq!(donor.local_rights().unwrap(), 14);
    // Once the requester knows of it, a fresh request is served.
    sync(&mut requester, &donor);
    assert_eq!(requester.local_rights().unwrap(), 6);
    let fresh = requester
        .transfer_request(R0, 2, RequestMode::Sync)
        .unwrap();
    assert_eq!(fresh.seen_transferred, 6);
    assert!(matches!(
        donor.handle_transfer_request(&fresh, &policy).unwrap(),
        RequestOutcome::Transferred { amount: 2, .. }
    ));
}

#[test]
fn transfer_request_errors() {
    let policy = policy();
    let mut donor = lower::<CompactRights>(R0, 30);
    let requester = lower::<CompactRights>(R1, 30);
    let mut request = requester
        .transfer_request(R0, 1, RequestMode::Async)
        .unwrap();
    request.seen_transferred = 5;
    assert_eq!(
        donor.handle_transfer_request(&request, &policy),
        Err(HandleRequestError::SeenAheadOfDonor {
            seen: 5,
            transferred: 0
        })
    );
    let to_other = requester
        .transfer_request(R2, 1, RequestMode::Async)
        .unwrap();
    assert!(matches!(
        donor.handle_transfer_request(&to_other, &policy),
        Err(HandleRequestError::WrongDonor { .. })
    ));
    let mut unknown = requester
        .transfer_request(R0, 1, RequestMode::Async)
        .unwrap();
    unknown.requester = ReplicaId(7);
    assert!(matches!(
        donor.handle_transfer_request(&unknown, &policy),
        Err(HandleRequestError::UnknownReplica { .. })
    ));
    assert!(requester
        .transfer_request(R1, 1, RequestMode::Async)
        .is_err());
    assert!(requester
        .transfer_request(ReplicaId(3), 1, RequestMode::Async)
        .is_err());
}

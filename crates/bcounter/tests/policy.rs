//! The transfer policy: the proactive rule, donor order, the donor's half
//! rule, synchronous vs asynchronous shortfalls, and a rate limiter that
//! really limits.

use proptest::prelude::*;
use roost_bcounter::{
    Bound, BoundedCounter, CompactRights, FullRights, PeerRights, ProactiveConfig, ProactivePolicy,
    RateLimit, RateLimitError, RateLimiter, ReplicaId, RequestMode, RequestOutcome, RightsState,
    RightsView, TransferPolicy, TransferRequest,
};

fn peer(replica: u32, believed_rights: i128, transferred_to_me: u64) -> PeerRights {
    PeerRights {
        replica: ReplicaId(replica),
        believed_rights,
        transferred_to_me,
    }
}

fn view(local_rights: u64, peers: Vec<PeerRights>) -> RightsView {
    RightsView {
        me: ReplicaId(0),
        local_rights,
        peers,
    }
}

fn policy(threshold_rights: u64, shortfall_mode: RequestMode, burst: u32) -> ProactivePolicy {
    ProactivePolicy::new(ProactiveConfig {
        threshold_rights,
        shortfall_mode,
        rate_limit: RateLimit::new(burst, 100).unwrap(),
    })
}

#[test]
fn proactive_asks_the_richest_for_half_the_difference() {
    let mut policy = policy(10, RequestMode::Async, 10);
    let view = view(4, vec![peer(1, 30, 7), peer(2, 50, 3), peer(3, -5, 0)]);
    let request = policy.proactive(&view, 0).expect("below the threshold");
    assert_eq!(
        request,
        TransferRequest {
            requester: ReplicaId(0),
            donor: ReplicaId(2),
            amount: (50 - 4) / 2,
            seen_transferred: 3,
            mode: RequestMode::Async,
        }
    );
}

#[test]
fn proactive_stays_quiet_when_it_should() {
    let mut policy = policy(10, RequestMode::Async, 10);
    // At the threshold.
    assert_eq!(policy.proactive(&view(10, vec![peer(1, 100, 0)]), 0), None);
    // Nobody richer.
    assert_eq!(policy.proactive(&view(4, vec![peer(1, 4, 0)]), 0), None);
    // Half the difference rounds to nothing.
    assert_eq!(policy.proactive(&view(4, vec![peer(1, 5, 0)]), 0), None);
    // Nobody at all.
    assert_eq!(policy.proactive(&view(0, vec![]), 0), None);
    // None of those spent a token: the burst of 1 is still there.
    let mut limited = self::policy(10, RequestMode::Async, 1);
    assert_eq!(limited.proactive(&view(4, vec![peer(1, 4, 0)]), 0), None);
    assert!(limited
        .proactive(&view(4, vec![peer(1, 40, 0)]), 0)
        .is_some());
}

#[test]
fn donors_are_tried_richest_first() {
    let view = view(
        0,
        vec![
            peer(4, 9, 0),
            peer(1, 20, 0),
            peer(3, 20, 0),
            peer(2, 0, 0),
            peer(5, 1, 0),
        ],
    );
    let order: Vec<u32> = view
        .donors_by_rights()
        .iter()
        .map(|donor| donor.replica.0)
        .collect();
    // Descending (AntidoteDB sorted ascending), ties by replica id, and
    // replicas believed to hold nothing are not asked.
    assert_eq!(order, vec![1, 3, 4, 5]);
}

#[test]
fn asynchronous_donor_never_gives_more_than_half() {
    let policy = policy(10, RequestMode::Async, 1);
    let request = |amount, mode| TransferRequest {
        requester: ReplicaId(1),
        donor: ReplicaId(0),
        amount,
        seen_transferred: 0,
        mode,
    };
    assert_eq!(policy.donation(&request(100, RequestMode::Async), 30), 15);
    assert_eq!(policy.donation(&request(5, RequestMode::Async), 30), 5);
    assert_eq!(policy.donation(&request(5, RequestMode::Async), 1), 0);
    // A waiting operation may take the donor's last rights.
    assert_eq!(policy.donation(&request(100, RequestMode::Sync), 30), 30);
    assert_eq!(policy.donation(&request(1, RequestMode::Sync), 1), 1);
    assert_eq!(policy.donation(&request(5, RequestMode::Sync), 30), 5);
}

#[test]
fn synchronous_shortfall_lists_every_donor_and_is_not_throttled() {
    let mut policy = policy(0, RequestMode::Sync, 1);
    let view = view(2, vec![peer(1, 3, 1), peer(2, 8, 2), peer(3, 0, 0)]);
    for _ in 0..5 {
        let requests = policy.on_shortfall(&view, 7, 0);
        let asked: Vec<(u32, u64, u64)> = requests
            .iter()
            .map(|request| (request.donor.0, request.amount, request.seen_transferred))
            .collect();
        assert_eq!(asked, vec![(2, 5, 2), (1, 5, 1)]);
        assert!(requests
            .iter()
            .all(|request| request.mode == RequestMode::Sync));
    }
    assert!(policy.on_shortfall(&view, 2, 0).is_empty(), "no shortfall");
}

#[test]
fn asynchronous_shortfall_is_one_throttled_request() {
    let mut policy = policy(0, RequestMode::Async, 1);
    let view = view(2, vec![peer(1, 3, 0), peer(2, 8, 0)]);
    let first = policy.on_shortfall(&view, 7, 0);
    assert_eq!(first.len(), 1);
    assert_eq!((first[0].donor, first[0].amount), (ReplicaId(2), 5));
    assert_eq!(first[0].mode, RequestMode::Async);
    assert!(policy.on_shortfall(&view, 7, 50).is_empty(), "throttled");
    assert_eq!(policy.on_shortfall(&view, 7, 100).len(), 1);
}

#[test]
fn rate_limit_rejects_nonsense() {
    assert_eq!(RateLimit::new(0, 10), Err(RateLimitError::ZeroBurst));
    assert_eq!(RateLimit::new(1, 0), Err(RateLimitError::ZeroInterval));
}

#[test]
fn rate_limiter_limits() {
    let mut limiter = RateLimiter::new(RateLimit::new(1, 100).unwrap());
    let granted: Vec<u64> = (0..1000)
        .filter(|&now_ms| limiter.try_acquire(now_ms).is_ok())
        .collect();
    assert_eq!(granted, (0..10).map(|k| k * 100).collect::<Vec<u64>>());

    // A burst, then one per interval; idle time saves up at most the burst.
    let mut limiter = RateLimiter::new(RateLimit::new(3, 100).unwrap());
    let burst = (0..10).filter(|_| limiter.try_acquire(0).is_ok()).count();
    assert_eq!(burst, 3);
    let refused = limiter.try_acquire(50).unwrap_err();
    assert_eq!(refused.retry_at_ms, 100);
    let after_idle = (0..10)
        .filter(|_| limiter.try_acquire(1_000_000).is_ok())
        .count();
    assert_eq!(after_idle, 3);

    // A clock that goes backwards earns nothing.
    let mut limiter = RateLimiter::new(RateLimit::new(1, 100).unwrap());
    assert!(limiter.try_acquire(5_000).is_ok());
    assert!(limiter.try_acquire(10).is_err());
    assert!(limiter.try_acquire(5_099).is_err());
    assert!(limiter.try_acquire(5_100).is_ok());
    // And the end of time does not overflow.
    assert!(limiter.try_acquire(u64::MAX).is_ok());
    assert!(limiter.try_acquire(u64::MAX).is_err());
}

#[test]
fn proactive_requests_are_throttled() {
    let mut policy = policy(10, RequestMode::Async, 2);
    let poor = view(0, vec![peer(1, 100, 0)]);
    let sent = (0..1000)
        .filter(|&now_ms| policy.proactive(&poor, now_ms).is_some())
        .count();
    // A burst of 2, then one per 100 ms over 1 s.
    assert_eq!(sent, 2 + 9);
}

proptest! {
    /// Between any two calls, at most `burst + elapsed / interval` grants,
    /// where `elapsed` is measured on the latest time seen so far (a clock
    /// that jumps backwards must not earn anything), whatever the pattern.
    #[test]
    fn rate_limiter_bound_holds_in_every_window(
        burst in 1u32..4,
        interval_ms in 1u64..50,
        calls in prop::collection::vec((0u64..2_000, any::<bool>()), 1..300),
    ) {
        let mut limiter = RateLimiter::new(RateLimit::new(burst, interval_ms).unwrap());
        let mut now_ms = 0u64;
        let mut latest_ms = 0u64;
        // (latest time seen at the call, granted?)
        let mut log = Vec::new();
        for (step, backwards) in calls {
            now_ms = if backwards { now_ms.saturating_sub(step) } else { now_ms + step % 60 };
            latest_ms = latest_ms.max(now_ms);
            log.push((latest_ms, limiter.try_acquire(now_ms).is_ok()));
        }
        for first in 0..log.len() {
            let mut granted = 0u64;
            for last in first..log.len() {
                granted += u64::from(log[last].1);
                let elapsed_ms = log[last].0 - log[first].0;
                prop_assert!(
                    granted <= u64::from(burst) + elapsed_ms / interval_ms,
                    "{} grants in {} ms (calls {}..={})", granted, elapsed_ms, first, last
                );
            }
        }
    }
}

/// The whole loop on real counters: the poor replica asks the rich one,
/// the rich one gives at most half, the request is idempotent.
fn end_to_end<S: RightsState>() {
    let create = |me| {
        BoundedCounter::<S>::with_initial_value(Bound::Lower, 0, 100, ReplicaId(0), me, 3).unwrap()
    };
    let mut rich = create(ReplicaId(0));
    let mut poor = create(ReplicaId(1));
    let mut policy = policy(10, RequestMode::Async, 1);
    let request = policy
        .proactive(&poor.rights_view().unwrap(), 0)
        .expect("poor is below the threshold");
    assert_eq!((request.donor, request.amount), (ReplicaId(0), 50));
    let outcome = rich.handle_transfer_request(&request, &policy).unwrap();
    assert!(matches!(
        outcome,
        RequestOutcome::Transferred { amount: 50, .. }
    ));
    assert_eq!(
        rich.handle_transfer_request(&request, &policy).unwrap(),
        RequestOutcome::AlreadySatisfied { transferred: 50 }
    );
    poor.merge(&rich.message_for(ReplicaId(1)).unwrap())
        .unwrap();
    assert_eq!(poor.local_rights().unwrap(), 50);
    assert_eq!(rich.local_rights().unwrap(), 50);
    // Balanced now: the poor replica is above the threshold.
    assert_eq!(policy.proactive(&poor.rights_view().unwrap(), 1_000), None);
}

#[test]
fn end_to_end_full() {
    end_to_end::<FullRights>();
}

#[test]
fn end_to_end_compact() {
    end_to_end::<CompactRights>();
}

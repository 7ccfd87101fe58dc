//! The compact representation behaves exactly like the full matrix.
//!
//! 1. Same information, same behaviour (exact): full-matrix replicas and
//!    compact replicas run the same random operations, and every message is
//!    the same delta (the full replica's `delta_for` must produce exactly the
//!    compact replica's delta, number for number). After every step: the same
//!    success or error for every operation, the same `local_rights`, the same
//!    value, and every entry the compact replica stores equals the full
//!    replica's entry. Messages are buffered, so deliveries are stale,
//!    duplicated, reordered or never made. The counters are generic over the
//!    representation, so this is where the two can differ.
//!
//! 2. Against Figure 2's full-state merge (conservative): full replicas that
//!    gossip whole states also learn transfers relayed through third
//!    replicas, which the compact form cannot store (nobody but `k` and `j`
//!    keeps `R[k][j]`). There: values are always equal, the compact replica
//!    never believes it holds more rights than the full one (so every
//!    operation the compact replica accepts, the full one accepts too), and
//!    after one direct exchange between every pair they agree exactly.

use proptest::prelude::*;
use proptest::sample::Index;
use roost_bcounter::{
    Bound, BoundedCounter, CompactRights, CounterMessage, DecrementError, FullRights, ReplicaId,
    RightsDelta, RightsState,
};

const INITIAL_REPLICAS: usize = 3;
const MAX_REPLICAS: usize = 5;
const K: i64 = 0;
const GENESIS_RIGHTS: u64 = 40;

#[derive(Debug, Clone)]
enum Op {
    Increment { at: Index, n: u64 },
    Decrement { at: Index, n: u64 },
    Transfer { at: Index, to: Index, n: u64 },
    Send { from: Index, to: Index },
    Deliver { message: Index },
    Join,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (any::<Index>(), 1..6u64).prop_map(|(at, n)| Op::Increment { at, n }),
        4 => (any::<Index>(), 1..6u64).prop_map(|(at, n)| Op::Decrement { at, n }),
        3 => (any::<Index>(), any::<Index>(), 1..12u64)
            .prop_map(|(at, to, n)| Op::Transfer { at, to, n }),
        4 => (any::<Index>(), any::<Index>()).prop_map(|(from, to)| Op::Send { from, to }),
        4 => any::<Index>().prop_map(|message| Op::Deliver { message }),
        1 => Just(Op::Join),
    ]
}

fn id(index: usize) -> ReplicaId {
    ReplicaId(index as u32)
}

fn genesis<S: RightsState>(me: usize, replica_count: usize) -> S {
    S::with_genesis(id(me), replica_count, id(0), GENESIS_RIGHTS).unwrap()
}

fn value<S: RightsState>(state: &S) -> i128 {
    i128::from(K) + state.granted_total().unwrap() as i128 - state.consumed_total().unwrap() as i128
}

/// Every entry the compact state stores equals the full state's.
fn projection_matches(full: &FullRights, compact: &CompactRights) -> bool {
    let n = full.replica_count().max(compact.replica_count());
    (0..n).all(|from| {
        (0..n).all(|to| match compact.r(id(from), id(to)) {
            Some(stored) => Some(stored) == full.r(id(from), id(to)),
            None => true,
        }) && full.u(id(from)) == compact.u(id(from))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn compact_behaves_exactly_like_the_full_matrix(
        ops in prop::collection::vec(op(), 0..80)
    ) {
        let mut full: Vec<FullRights> =
            (0..INITIAL_REPLICAS).map(|me| genesis(me, INITIAL_REPLICAS)).collect();
        let mut compact: Vec<CompactRights> =
            (0..INITIAL_REPLICAS).map(|me| genesis(me, INITIAL_REPLICAS)).collect();
        // Sent, not yet forgotten: (receiver, delta); a delivery keeps it.
        let mut network: Vec<(usize, RightsDelta)> = Vec::new();
        for op in &ops {
            let count = full.len();
            match op {
                Op::Increment { at, n } => {
                    let at = at.index(count);
                    prop_assert_eq!(full[at].grant(*n), compact[at].grant(*n));
                }
                Op::Decrement { at, n } => {
                    let at = at.index(count);
                    prop_assert_eq!(full[at].consume(*n), compact[at].consume(*n));
                }
                Op::Transfer { at, to, n } => {
                    let (at, to) = (at.index(count), id(to.index(count)));
                    prop_assert_eq!(full[at].transfer(*n, to), compact[at].transfer(*n, to));
                }
                Op::Send { from, to } => {
                    let (from, to) = (from.index(count), to.index(count));
                    let sent = full[from].delta_for(id(to));
                    prop_assert_eq!(&sent, &compact[from].delta_for(id(to)));
                    if let Ok(delta) = sent {
                        network.push((to, delta));
                    }
                }
                Op::Deliver { message } => {
                    if !network.is_empty() {
                        let (to, delta) = message.get(&network).clone();
                        prop_assert_eq!(full[to].merge_delta(&delta), Ok(()));
                        prop_assert_eq!(compact[to].merge_delta(&delta), Ok(()));
                    }
                }
                Op::Join => {
                    if count < MAX_REPLICAS {
                        full.push(genesis(count, count + 1));
                        compact.push(genesis(count, count + 1));
                    }
                }
            }
            for (full, compact) in full.iter().zip(&compact) {
                prop_assert_eq!(full.local_rights(), compact.local_rights());
                prop_assert_eq!(value(full), value(compact));
                prop_assert_eq!(full.replica_count(), compact.replica_count());
                prop_assert!(projection_matches(full, compact));
            }
        }
    }

    #[test]
    fn compact_is_conservative_against_full_state_gossip(
        ops in prop::collection::vec(op(), 0..80)
    ) {
        let create = |me: usize, count: usize| {
            (
                BoundedCounter::<FullRights>::with_initial_value(
                    Bound::Lower, K, K + GENESIS_RIGHTS as i64, id(0), id(me), count,
                ).unwrap(),
                BoundedCounter::<CompactRights>::with_initial_value(
                    Bound::Lower, K, K + GENESIS_RIGHTS as i64, id(0), id(me), count,
                ).unwrap(),
            )
        };
        let (mut full, mut compact): (Vec<_>, Vec<_>) =
            (0..INITIAL_REPLICAS).map(|me| create(me, INITIAL_REPLICAS)).unzip();
        type Sent = (usize, CounterMessage<FullRights>, CounterMessage<RightsDelta>);
        let mut network: Vec<Sent> = Vec::new();
        for op in &ops {
            let count = full.len();
            match op {
                Op::Increment { at, n } => {
                    let at = at.index(count);
                    prop_assert_eq!(full[at].increment(*n), compact[at].increment(*n));
                }
                Op::Decrement { at, n } => {
                    let at = at.index(count);
                    // The compact replica decides; the full one must agree
                    // whenever it says yes.
                    match compact[at].decrement(*n) {
                        Ok(()) => prop_assert_eq!(full[at].decrement(*n), Ok(())),
                        Err(DecrementError::InsufficientRights { .. }) => {}
                        Err(error) => prop_assert!(false, "unexpected {error}"),
                    }
                }
                Op::Transfer { at, to, n } => {
                    let (at, to) = (at.index(count), id(to.index(count)));
                    if compact[at].transfer(*n, to).is_ok() {
                        prop_assert_eq!(full[at].transfer(*n, to), Ok(()));
                    }
                }
                Op::Send { from, to } => {
                    let (from, to) = (from.index(count), to.index(count));
                    if let (Ok(state), Ok(delta)) = (
                        full[from].message_for(id(to)),
                        compact[from].message_for(id(to)),
                    ) {
                        network.push((to, state, delta));
                    }
                }
                Op::Deliver { message } => {
                    if !network.is_empty() {
                        let (to, state, delta) = message.get(&network).clone();
                        prop_assert_eq!(full[to].merge(&state), Ok(()));
                        prop_assert_eq!(compact[to].merge(&delta), Ok(()));
                    }
                }
                Op::Join => {
                    if count < MAX_REPLICAS {
                        let (f, c) = create(count, count + 1);
                        full.push(f);
                        compact.push(c);
                    }
                }
            }
            for (full, compact) in full.iter().zip(&compact) {
                prop_assert_eq!(full.value(), compact.value());
                prop_assert!(compact.local_rights().unwrap() <= full.local_rights().unwrap());
            }
        }
        // One direct exchange between every pair: then they agree exactly.
        let count = full.len();
        for replica in 0..count {
            full[replica].grow(count).unwrap();
            compact[replica].grow(count).unwrap();
        }
        for from in 0..count {
            for to in (0..count).filter(|&to| to != from) {
                let state = full[from].message_for(id(to)).unwrap();
                full[to].merge(&state).unwrap();
                let delta = compact[from].message_for(id(to)).unwrap();
                compact[to].merge(&delta).unwrap();
            }
        }
        for (full, compact) in full.iter().zip(&compact) {
            prop_assert_eq!(full.value(), compact.value());
            prop_assert_eq!(full.local_rights(), compact.local_rights());
        }
    }
}

/// The relay case spelled out: r0 gives r2 rights, only r1 hears of it and
/// tells r2. The full replica r2 can spend them; the compact one cannot yet
/// (conservative, never unsafe), until r0 tells it directly.
#[test]
fn compact_learns_transfers_only_from_the_donor() {
    let create_full = |me| {
        BoundedCounter::<FullRights>::with_initial_value(Bound::Lower, 0, 10, id(0), id(me), 3)
            .unwrap()
    };
    let create_compact = |me| {
        BoundedCounter::<CompactRights>::with_initial_value(Bound::Lower, 0, 10, id(0), id(me), 3)
            .unwrap()
    };
    let (mut f0, mut f1, mut f2) = (create_full(0), create_full(1), create_full(2));
    let (mut c0, mut c1, mut c2) = (create_compact(0), create_compact(1), create_compact(2));
    f0.transfer(4, id(2)).unwrap();
    c0.transfer(4, id(2)).unwrap();
    f1.merge(&f0.message_for(id(1)).unwrap()).unwrap();
    c1.merge(&c0.message_for(id(1)).unwrap()).unwrap();
    f2.merge(&f1.message_for(id(2)).unwrap()).unwrap();
    c2.merge(&c1.message_for(id(2)).unwrap()).unwrap();
    assert_eq!(f2.local_rights().unwrap(), 4);
    assert_eq!(c2.local_rights().unwrap(), 0);
    c2.merge(&c0.message_for(id(2)).unwrap()).unwrap();
    assert_eq!(c2.local_rights().unwrap(), 4);
}

//! Property tests of the lattice (the paper's correctness argument):
//!
//! - merge (the join of `R` and `U`) is commutative, associative and
//!   idempotent, and is the least upper bound of the order `le`;
//! - every update (increment, decrement, transfer, merge, growth) is
//!   monotone: the replica's state before is `le` its state after, for every
//!   flavour and both representations;
//! - applying the compact deltas a replica receives in any order, any number
//!   of times, gives the same state;
//! - after all states are exchanged every replica reports the same value.
//!
//! States are the ones real executions reach: random operations and
//! deliveries among 3 replicas, with up to 2 more joining.

mod common;

use common::{Lower, SimCounter, TwoSided, Upper};
use proptest::prelude::*;
use proptest::sample::Index;
use roost_bcounter::{Bound, CompactRights, FullRights, ReplicaId, RightsDelta, RightsState};

const INITIAL_REPLICAS: usize = 3;
const MAX_REPLICAS: usize = 5;

#[derive(Debug, Clone)]
enum Op {
    Increment {
        at: Index,
        n: u64,
    },
    Decrement {
        at: Index,
        n: u64,
    },
    Transfer {
        at: Index,
        to: Index,
        kind: bool,
        n: u64,
    },
    Deliver {
        from: Index,
        to: Index,
    },
    Join,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (any::<Index>(), 1..5u64).prop_map(|(at, n)| Op::Increment { at, n }),
        4 => (any::<Index>(), 1..5u64).prop_map(|(at, n)| Op::Decrement { at, n }),
        3 => (any::<Index>(), any::<Index>(), any::<bool>(), 1..8u64)
            .prop_map(|(at, to, kind, n)| Op::Transfer { at, to, kind, n }),
        5 => (any::<Index>(), any::<Index>()).prop_map(|(from, to)| Op::Deliver { from, to }),
        1 => Just(Op::Join),
    ]
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 0..60)
}

fn id(index: usize) -> ReplicaId {
    ReplicaId(index as u32)
}

/// Runs `ops`, asserting after each that the replica it touched only moved
/// up in the lattice. Returns the final replicas and every state reached.
fn run<C: SimCounter>(ops: &[Op]) -> (Vec<C>, Vec<C>) {
    let mut replicas: Vec<C> = (0..INITIAL_REPLICAS)
        .map(|me| C::create(id(me), INITIAL_REPLICAS))
        .collect();
    let mut history: Vec<C> = replicas.clone();
    for op in ops {
        let count = replicas.len();
        let touched = match op {
            Op::Increment { at, n } => {
                let at = at.index(count);
                let before = replicas[at].clone();
                let _ = replicas[at].increment(*n);
                Some((at, before))
            }
            Op::Decrement { at, n } => {
                let at = at.index(count);
                let before = replicas[at].clone();
                let _ = replicas[at].decrement(*n);
                Some((at, before))
            }
            Op::Transfer { at, to, kind, n } => {
                let at = at.index(count);
                let kind = C::KINDS[usize::from(*kind) % C::KINDS.len()];
                let before = replicas[at].clone();
                let _ = replicas[at].transfer(kind, *n, id(to.index(count)));
                Some((at, before))
            }
            Op::Deliver { from, to } => {
                let (from, to) = (from.index(count), to.index(count));
                let before = replicas[to].clone();
                match replicas[from].message_for(id(to)) {
                    Ok(message) => {
                        replicas[to].merge(&message).unwrap();
                        Some((to, before))
                    }
                    // `from` does not know `to` yet, or `from == to`.
                    Err(_) => None,
                }
            }
            Op::Join => {
                if count < MAX_REPLICAS {
                    replicas.push(C::create(id(count), count + 1));
                    history.push(replicas[count].clone());
                    let before = replicas[0].clone();
                    replicas[0].grow(count + 1);
                    Some((0, before))
                } else {
                    None
                }
            }
        };
        if let Some((at, before)) = touched {
            assert!(before.le(&replicas[at]), "{op:?} is not monotone");
            history.push(replicas[at].clone());
        }
    }
    (replicas, history)
}

/// `FullRights` content regardless of which replica holds it.
fn content(state: &FullRights) -> (Vec<u64>, Vec<u64>) {
    (state.r_matrix().to_vec(), state.u_vector().to_vec())
}

fn join(a: &FullRights, b: &FullRights) -> FullRights {
    let mut joined = a.clone();
    joined.join(b);
    joined
}

fn full_states(ops: &[Op]) -> Vec<FullRights> {
    let (_, history) = run::<Lower<FullRights>>(ops);
    history
        .into_iter()
        .map(|state| state.0.rights().clone())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn join_is_commutative(ops in ops(), a in any::<Index>(), b in any::<Index>()) {
        let states = full_states(&ops);
        let (a, b) = (a.get(&states), b.get(&states));
        prop_assert_eq!(content(&join(a, b)), content(&join(b, a)));
    }

    #[test]
    fn join_is_associative(
        ops in ops(),
        a in any::<Index>(),
        b in any::<Index>(),
        c in any::<Index>(),
    ) {
        let states = full_states(&ops);
        let (a, b, c) = (a.get(&states), b.get(&states), c.get(&states));
        prop_assert_eq!(
            content(&join(&join(a, b), c)),
            content(&join(a, &join(b, c)))
        );
    }

    #[test]
    fn join_is_idempotent(ops in ops(), a in any::<Index>()) {
        let states = full_states(&ops);
        let a = a.get(&states);
        prop_assert_eq!(content(&join(a, a)), content(a));
    }

    #[test]
    fn join_is_the_least_upper_bound(
        ops in ops(),
        a in any::<Index>(),
        b in any::<Index>(),
        c in any::<Index>(),
    ) {
        let states = full_states(&ops);
        let (a, b, c) = (a.get(&states), b.get(&states), c.get(&states));
        let ab = join(a, b);
        prop_assert!(a.le(&ab) && b.le(&ab));
        if a.le(c) && b.le(c) {
            prop_assert!(ab.le(c));
        }
        // `le` agrees with the join: a <= b iff b ⊔ a = b.
        let mut b_sized = b.clone();
        b_sized.grow(ab.replica_count()).unwrap();
        prop_assert_eq!(a.le(b), content(&join(b, a)) == content(&b_sized));
    }

    #[test]
    fn every_update_is_monotone(ops in ops()) {
        // `run` asserts monotonicity after every operation and merge.
        run::<Lower<FullRights>>(&ops);
        run::<Lower<CompactRights>>(&ops);
        run::<Upper<FullRights>>(&ops);
        run::<Upper<CompactRights>>(&ops);
        run::<TwoSided<FullRights>>(&ops);
        run::<TwoSided<CompactRights>>(&ops);
    }

    #[test]
    fn deltas_commute_and_are_idempotent(
        ops in ops(),
        order in any::<u64>(),
    ) {
        // Every delta any replica would have sent r0 along the execution.
        let (replicas, history) = run::<Lower<CompactRights>>(&ops);
        let deltas: Vec<RightsDelta> = history
            .iter()
            .filter(|state| state.0.me() != id(0))
            .filter_map(|state| state.0.rights().delta_for(id(0)).ok())
            .collect();
        prop_assume!(!deltas.is_empty());
        let base = replicas[0].0.rights().clone();
        let mut forward = base.clone();
        for delta in &deltas {
            forward.merge_delta(delta).unwrap();
        }
        // Another order, each delta applied twice.
        let mut shuffled: Vec<&RightsDelta> = deltas.iter().chain(deltas.iter()).collect();
        let mut state = order;
        for i in (1..shuffled.len()).rev() {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            shuffled.swap(i, (state >> 33) as usize % (i + 1));
        }
        let mut backward = base.clone();
        for delta in shuffled {
            backward.merge_delta(delta).unwrap();
        }
        prop_assert_eq!(&forward, &backward);
        prop_assert!(base.le(&forward));
    }

    #[test]
    fn exchanging_all_states_converges(ops in ops()) {
        fn settle<C: SimCounter>(ops: &[Op]) -> Vec<C> {
            let (mut replicas, _) = run::<C>(ops);
            let count = replicas.len();
            for replica in &mut replicas {
                replica.grow(count);
            }
            for from in 0..count {
                for to in (0..count).filter(|&to| to != from) {
                    let message = replicas[from].message_for(id(to)).unwrap();
                    replicas[to].merge(&message).unwrap();
                }
            }
            replicas
        }
        fn same_value<C: SimCounter>(replicas: &[C]) -> bool {
            replicas.iter().all(|replica| replica.value() == replicas[0].value())
        }
        let full = settle::<Lower<FullRights>>(&ops);
        prop_assert!(same_value(&full));
        // Full states converge to the same R and U, not just the same value.
        for replica in &full {
            prop_assert_eq!(content(replica.0.rights()), content(full[0].0.rights()));
        }
        // (Full and compact values can differ from each other here: a
        // transfer relayed through a third replica lets a full replica
        // decrement where the compact one cannot; tests/equivalence.rs
        // compares the two representations properly.)
        prop_assert!(same_value(&settle::<Lower<CompactRights>>(&ops)));
        prop_assert!(same_value(&settle::<Upper<FullRights>>(&ops)));
        prop_assert!(same_value(&settle::<Upper<CompactRights>>(&ops)));
        prop_assert!(same_value(&settle::<TwoSided<FullRights>>(&ops)));
        prop_assert!(same_value(&settle::<TwoSided<CompactRights>>(&ops)));
    }
}

#[test]
fn le_is_a_partial_order_on_a_known_chain() {
    let mut a = Lower::<FullRights>::create(id(0), 2);
    let start = a.clone();
    a.decrement(3).unwrap();
    let mid = a.clone();
    a.transfer(Bound::Lower, 4, id(1)).unwrap();
    assert!(start.le(&mid) && mid.le(&a) && start.le(&a));
    assert!(!a.le(&start), "antisymmetry: a strictly above start");
    // Two replicas that both changed are incomparable.
    let mut b = Lower::<FullRights>::create(id(1), 2);
    b.increment(1).unwrap();
    assert!(!a.0.rights().le(b.0.rights()) && !b.0.rights().le(a.0.rights()));
}

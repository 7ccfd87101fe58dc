//! An exhaustive model check of a small configuration, with our own explorer
//! (breadth-first over states, with a visited set).
//!
//! Configuration: 3 replicas, a lower-bound counter with `K = 0` starting at
//! `GENESIS_RIGHTS` (all rights at r0). Actions, in every interleaving up to a
//! depth:
//!
//! - `Decrement(i)`: decrement by 1 at replica `i` (kept only if it succeeds);
//! - `Transfer(i, j)`: transfer 1 right from `i` to `j` (if it succeeds);
//! - `Send(i, j)`: `i` puts its current message for `j` into channel `(i, j)`;
//! - `Deliver(i, j, m)`: `j` merges message `m` from channel `(i, j)`.
//!
//! A channel is a *set* of sent messages that are never removed: any message
//! can be delivered never (lost), several times (duplicated), late (delayed)
//! and in any order (reordered).
//!
//! Invariants checked in every reached state:
//!
//! - global: the decrements that succeeded (each replica's own `U[i]`) do not
//!   exceed the rights that exist: `K + genesis − ΣU ≥ K`;
//! - local: every replica's view of the value is `≥ K`;
//! - belief: every replica's `local_rights()` is at most what it really holds,
//!   computed from the ground truth (each replica's own row and `U` entry,
//!   which only it writes).
//!
//! Planted bugs ([`PlantedBug`]) must be reported with a counterexample.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

use roost_bcounter::{
    Bound, BoundedCounter, CompactRights, CounterMessage, FullRights, PlantedBug, ReplicaId,
    RightsDelta, RightsState,
};

const REPLICAS: usize = 3;
const K: i64 = 0;
const GENESIS_RIGHTS: u64 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Decrement(usize),
    Transfer(usize, usize),
    Send(usize, usize),
    Deliver(usize, usize, usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Invariant {
    Global,
    Local,
    Belief,
}

#[derive(Debug)]
struct Violation {
    invariant: Invariant,
    trace: Vec<Action>,
}

#[derive(Debug)]
struct Exploration {
    states: usize,
    violation: Option<Violation>,
}

/// A total order on the messages one sender sends one receiver. A sender's
/// states form a chain (every change raises some entry), and so do its
/// messages, so the sum of a message's numbers strictly increases along it:
/// sorting by it gives each channel one canonical form.
trait ChainKey {
    fn chain_key(&self) -> u128;
}

impl ChainKey for CounterMessage<FullRights> {
    fn chain_key(&self) -> u128 {
        let rights = self.rights();
        rights
            .r_matrix()
            .iter()
            .chain(rights.u_vector())
            .map(|&n| u128::from(n))
            .sum()
    }
}

impl ChainKey for CounterMessage<RightsDelta> {
    fn chain_key(&self) -> u128 {
        let delta = self.rights();
        delta
            .diagonal()
            .iter()
            .chain(delta.u())
            .chain([delta.transferred_from_to()].iter())
            .map(|&n| u128::from(n))
            .sum()
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct World<S: RightsState> {
    replicas: Vec<BoundedCounter<S>>,
    /// `channels[from * REPLICAS + to]`, sorted by chain key, no duplicates.
    channels: Vec<Vec<CounterMessage<S::Message>>>,
}

impl<S: RightsState> World<S>
where
    CounterMessage<S::Message>: ChainKey,
{
    fn initial(bug: PlantedBug) -> Self {
        let replicas = (0..REPLICAS)
            .map(|me| {
                let mut counter = BoundedCounter::<S>::with_initial_value(
                    Bound::Lower,
                    K,
                    K + GENESIS_RIGHTS as i64,
                    ReplicaId(0),
                    ReplicaId(me as u32),
                    REPLICAS,
                )
                .expect("valid configuration");
                counter.set_planted_bug(bug);
                counter
            })
            .collect();
        World {
            replicas,
            channels: vec![Vec::new(); REPLICAS * REPLICAS],
        }
    }

    fn actions(&self) -> Vec<Action> {
        let mut actions = Vec::new();
        for i in 0..REPLICAS {
            actions.push(Action::Decrement(i));
            for j in (0..REPLICAS).filter(|&j| j != i) {
                actions.push(Action::Transfer(i, j));
                actions.push(Action::Send(i, j));
                for m in 0..self.channels[i * REPLICAS + j].len() {
                    actions.push(Action::Deliver(i, j, m));
                }
            }
        }
        actions
    }

    /// The successor, or `None` if the action fails or changes nothing.
    fn apply(&self, action: Action) -> Option<Self> {
        let mut next = self.clone();
        match action {
            Action::Decrement(i) => next.replicas[i].decrement(1).ok()?,
            Action::Transfer(i, j) => next.replicas[i].transfer(1, id(j)).ok()?,
            Action::Send(i, j) => {
                let message = next.replicas[i].message_for(id(j)).expect("known peer");
                let channel = &mut next.channels[i * REPLICAS + j];
                if channel.contains(&message) {
                    return None;
                }
                channel.push(message);
                channel.sort_by_key(ChainKey::chain_key);
            }
            Action::Deliver(i, j, m) => {
                let message = &self.channels[i * REPLICAS + j][m];
                next.replicas[j]
                    .merge(message)
                    .expect("messages between correct replicas always merge");
            }
        }
        (next != *self).then_some(next)
    }

    /// What replica `i` really holds: genesis, plus what others really sent
    /// it (their own rows), minus what it sent and spent (its own row and U).
    fn real_rights(&self, i: usize) -> i128 {
        let own = self.replicas[i].rights();
        let genesis = if i == 0 { GENESIS_RIGHTS } else { 0 };
        let received: i128 = (0..REPLICAS)
            .filter(|&j| j != i)
            .map(|j| i128::from(self.replicas[j].rights().r(id(j), id(i)).unwrap()))
            .sum();
        let sent: i128 = (0..REPLICAS)
            .filter(|&j| j != i)
            .map(|j| i128::from(own.r(id(i), id(j)).unwrap()))
            .sum();
        i128::from(genesis) + received - sent - i128::from(own.u(id(i)))
    }

    fn check(&self, invariants: &[Invariant]) -> Option<Invariant> {
        let decremented: u64 = (0..REPLICAS)
            .map(|i| self.replicas[i].rights().u(id(i)))
            .sum();
        for &invariant in invariants {
            let holds = match invariant {
                Invariant::Global => decremented <= GENESIS_RIGHTS,
                Invariant::Local => self
                    .replicas
                    .iter()
                    .all(|replica| replica.value().expect("small numbers") >= K),
                Invariant::Belief => (0..REPLICAS).all(|i| {
                    let believed = self.replicas[i].local_rights().expect("small numbers");
                    i128::from(believed) <= self.real_rights(i)
                }),
            };
            if !holds {
                return Some(invariant);
            }
        }
        None
    }
}

fn id(index: usize) -> ReplicaId {
    ReplicaId(index as u32)
}

/// Breadth-first search to `max_depth`; the first violation found has a
/// shortest trace.
fn explore<S: RightsState>(
    bug: PlantedBug,
    max_depth: usize,
    invariants: &[Invariant],
) -> Exploration
where
    CounterMessage<S::Message>: ChainKey,
{
    let initial = World::<S>::initial(bug);
    // Each visited state: its parent's index and the action that led here.
    let mut parents: Vec<Option<(usize, Action)>> = vec![None];
    let mut visited: HashMap<World<S>, usize> = HashMap::from([(initial.clone(), 0)]);
    let mut frontier = VecDeque::from([(initial, 0usize, 0usize)]);
    let trace_to = |parents: &Vec<Option<(usize, Action)>>, mut index: usize| {
        let mut trace = Vec::new();
        while let Some((parent, action)) = parents[index] {
            trace.push(action);
            index = parent;
        }
        trace.reverse();
        trace
    };
    while let Some((world, index, depth)) = frontier.pop_front() {
        if let Some(invariant) = world.check(invariants) {
            return Exploration {
                states: visited.len(),
                violation: Some(Violation {
                    invariant,
                    trace: trace_to(&parents, index),
                }),
            };
        }
        if depth == max_depth {
            continue;
        }
        for action in world.actions() {
            let Some(next) = world.apply(action) else {
                continue;
            };
            if visited.contains_key(&next) {
                continue;
            }
            let next_index = parents.len();
            parents.push(Some((index, action)));
            visited.insert(next.clone(), next_index);
            frontier.push_back((next, next_index, depth + 1));
        }
    }
    Exploration {
        states: visited.len(),
        violation: None,
    }
}

const ALL: &[Invariant] = &[Invariant::Global, Invariant::Local, Invariant::Belief];

/// Deep enough for the planted bugs' counterexamples (up to 6 steps) and for
/// a right to be transferred, announced and spent at each replica; small
/// enough to run in about a second in a debug build. `ROOST_BCOUNTER_MC_DEPTH`
/// explores deeper.
fn depth() -> usize {
    std::env::var("ROOST_BCOUNTER_MC_DEPTH")
        .ok()
        .and_then(|depth| depth.parse().ok())
        .unwrap_or(7)
}

#[test]
fn full_representation_keeps_both_invariants() {
    let result = explore::<FullRights>(PlantedBug::None, depth(), ALL);
    assert!(
        result.violation.is_none(),
        "violation: {:?}",
        result.violation
    );
    assert!(
        result.states > 10_000,
        "explored only {} states",
        result.states
    );
    eprintln!(
        "full: {} states to depth {}, no violation",
        result.states,
        depth()
    );
}

#[test]
fn compact_representation_keeps_both_invariants() {
    let result = explore::<CompactRights>(PlantedBug::None, depth(), ALL);
    assert!(
        result.violation.is_none(),
        "violation: {:?}",
        result.violation
    );
    assert!(
        result.states > 5_000,
        "explored only {} states",
        result.states
    );
    eprintln!(
        "compact: {} states to depth {}, no violation",
        result.states,
        depth()
    );
}

#[test]
fn catches_rights_computed_from_the_global_value() {
    // Any invariant: the wrong belief shows up in the initial state already
    // (every replica knows the genesis, so every replica believes it holds
    // r0's rights).
    let result = explore::<FullRights>(PlantedBug::RightsFromGlobalValue, depth(), ALL);
    let violation = result.violation.expect("the planted bug must be caught");
    eprintln!("rights from global value: {violation:?}");
    assert_eq!(violation.invariant, Invariant::Belief);
    assert_eq!(violation.trace, vec![]);

    // The global invariant alone: the explorer finds the overspend itself.
    let result = explore::<FullRights>(
        PlantedBug::RightsFromGlobalValue,
        depth(),
        &[Invariant::Global],
    );
    let violation = result.violation.expect("the planted bug breaks the bound");
    eprintln!("rights from global value, global invariant: {violation:?}");
    assert_eq!(violation.invariant, Invariant::Global);
    // r0 spends its two rights, and r1, which never received any, spends a
    // third.
    assert_eq!(
        violation.trace,
        vec![
            Action::Decrement(0),
            Action::Decrement(0),
            Action::Decrement(1)
        ]
    );
    let result = explore::<CompactRights>(
        PlantedBug::RightsFromGlobalValue,
        depth(),
        &[Invariant::Global],
    );
    assert!(
        result.violation.is_some(),
        "compact: the bug must be caught too"
    );
}

#[test]
fn catches_rights_that_forget_transfers_out() {
    let result = explore::<CompactRights>(PlantedBug::IgnoreTransfersOut, depth(), ALL);
    let violation = result.violation.expect("the planted bug must be caught");
    eprintln!("ignore transfers out: {violation:?}");
    assert_eq!(violation.invariant, Invariant::Belief);
    assert_eq!(violation.trace, vec![Action::Transfer(0, 1)]);

    let result = explore::<FullRights>(
        PlantedBug::IgnoreTransfersOut,
        depth(),
        &[Invariant::Global],
    );
    let violation = result.violation.expect("the planted bug breaks the bound");
    eprintln!("ignore transfers out, global invariant: {violation:?}");
    assert_eq!(violation.invariant, Invariant::Global);
}

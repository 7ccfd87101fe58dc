//! Randomized concurrency test: 3 to 5 replicas (some join mid-run), random
//! increments, decrements, transfers, proactive and shortfall transfer
//! requests, and a network that loses, duplicates, delays and reorders every
//! kind of message (states, deltas, transfer requests).
//!
//! After every step, against a ground truth kept outside the replicas:
//!
//! - global invariant: the true value (all successful operations) is within
//!   the bounds;
//! - local invariant: every replica's view of the value is within the bounds;
//! - rights: every replica believes it holds at most what it really holds
//!   (ground truth: rights created, received, sent and spent), and nobody
//!   really holds a negative amount.
//!
//! At the end every replica sends every other its state reliably; then all
//! report the true value and exactly their real rights.
//!
//! Seeds: `ROOST_BCOUNTER_SEEDS` (default 200) seeds of
//! `ROOST_BCOUNTER_STEPS` (default 500) steps, for each of lower-bound,
//! upper-bound and two-sided counters in both representations.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use roost_bcounter::{
    Bound, CompactRights, DecrementError, FullRights, HandleRequestError, IncrementError,
    MessageError, ProactiveConfig, ProactivePolicy, RateLimit, ReplicaId, Reply, RequestMode,
    RequestOutcome, TransferError, TransferPolicy, TransferRequest,
};

mod common;

use common::{BuggyLower, Lower, SimCounter, TwoSided, Upper, LOWER, UPPER};

const MAX_REPLICAS: usize = 5;

/// The kind of rights an increment or a decrement spends.
fn kind_spent_by(increment: bool) -> Bound {
    if increment {
        Bound::Upper
    } else {
        Bound::Lower
    }
}

/// Ground truth for one kind of rights, from every operation that succeeded.
#[derive(Clone)]
struct Truth {
    created: [u64; MAX_REPLICAS],
    spent: [u64; MAX_REPLICAS],
    moved: [[u64; MAX_REPLICAS]; MAX_REPLICAS],
}

impl Truth {
    fn real(&self, i: usize) -> i128 {
        let received: i128 = (0..MAX_REPLICAS)
            .map(|j| i128::from(self.moved[j][i]))
            .sum();
        let sent: i128 = self.moved[i].iter().map(|&n| i128::from(n)).sum();
        i128::from(self.created[i]) + received - sent - i128::from(self.spent[i])
    }
}

enum Packet<M> {
    State {
        to: usize,
        message: M,
    },
    Request {
        kind: Bound,
        request: TransferRequest,
    },
}

impl<M: Clone> Clone for Packet<M> {
    fn clone(&self) -> Self {
        match self {
            Packet::State { to, message } => Packet::State {
                to: *to,
                message: message.clone(),
            },
            Packet::Request { kind, request } => Packet::Request {
                kind: *kind,
                request: *request,
            },
        }
    }
}

#[derive(Default, Debug)]
struct Stats {
    steps: u64,
    updates_ok: u64,
    updates_refused: u64,
    transfers_ok: u64,
    requests_served: u64,
    requests_ignored: u64,
    packets_lost: u64,
    packets_duplicated: u64,
}

struct Sim<C: SimCounter> {
    seed: u64,
    rng: SmallRng,
    replicas: Vec<C>,
    policies: Vec<ProactivePolicy>,
    network: Vec<Packet<C::Msg>>,
    /// Indexed like `C::KINDS`.
    truth: Vec<Truth>,
    value: i64,
    now_ms: u64,
    stats: Stats,
}

fn id(index: usize) -> ReplicaId {
    ReplicaId(index as u32)
}

impl<C: SimCounter> Sim<C> {
    fn new(seed: u64) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed);
        let initial_replicas = rng.random_range(3..=MAX_REPLICAS);
        let replicas: Vec<C> = (0..initial_replicas)
            .map(|me| C::create(id(me), initial_replicas))
            .collect();
        let policies = (0..MAX_REPLICAS)
            .map(|_| {
                ProactivePolicy::new(ProactiveConfig {
                    threshold_rights: rng.random_range(1..=12),
                    shortfall_mode: if rng.random_bool(0.5) {
                        RequestMode::Sync
                    } else {
                        RequestMode::Async
                    },
                    rate_limit: RateLimit::new(rng.random_range(1..=3), rng.random_range(5..=50))
                        .unwrap(),
                })
            })
            .collect();
        let truth = C::KINDS
            .iter()
            .map(|&kind| {
                let mut created = [0; MAX_REPLICAS];
                created[0] = match kind {
                    Bound::Lower => (C::INITIAL_VALUE - LOWER) as u64,
                    Bound::Upper => (UPPER - C::INITIAL_VALUE) as u64,
                };
                Truth {
                    created,
                    spent: [0; MAX_REPLICAS],
                    moved: [[0; MAX_REPLICAS]; MAX_REPLICAS],
                }
            })
            .collect();
        Sim {
            seed,
            rng,
            replicas,
            policies,
            network: Vec::new(),
            truth,
            value: C::INITIAL_VALUE,
            now_ms: 0,
            stats: Stats::default(),
        }
    }

    fn kind_index(kind: Bound) -> Option<usize> {
        C::KINDS.iter().position(|&k| k == kind)
    }

    fn random_replica(&mut self) -> usize {
        self.rng.random_range(0..self.replicas.len())
    }

    /// Sends with a chance of loss and of duplication.
    fn send(&mut self, packet: Packet<C::Msg>) {
        if self.rng.random_bool(0.15) {
            self.stats.packets_lost += 1;
            return;
        }
        if self.rng.random_bool(0.1) {
            self.stats.packets_duplicated += 1;
            self.network.push(packet.clone());
        }
        self.network.push(packet);
    }

    /// An operation changed the value: record it in the truth of each kind.
    fn record_update(&mut self, at: usize, increment: bool, n: u64) {
        for (index, &kind) in C::KINDS.iter().enumerate() {
            let spends = kind == kind_spent_by(increment);
            let truth = &mut self.truth[index];
            if spends {
                truth.spent[at] += n;
            } else {
                truth.created[at] += n;
            }
        }
        if increment {
            self.value += n as i64;
        } else {
            self.value -= n as i64;
        }
    }

    fn update(&mut self, increment: bool) {
        let at = self.random_replica();
        let n = self.rng.random_range(1..=4);
        let result = if increment {
            self.replicas[at].increment(n).map_err(|error| match error {
                IncrementError::InsufficientRights { available, .. } => available,
                IncrementError::Overflow(overflow) => panic!("seed {}: {overflow}", self.seed),
            })
        } else {
            self.replicas[at].decrement(n).map_err(|error| match error {
                DecrementError::InsufficientRights { available, .. } => available,
                DecrementError::Overflow(overflow) => panic!("seed {}: {overflow}", self.seed),
            })
        };
        match result {
            Ok(()) => {
                self.stats.updates_ok += 1;
                self.record_update(at, increment, n);
            }
            Err(available) => {
                self.stats.updates_refused += 1;
                let kind = kind_spent_by(increment);
                assert_eq!(available, self.replicas[at].rights(kind));
                let view = self.replicas[at].view(kind);
                let requests = self.policies[at].on_shortfall(&view, n, self.now_ms);
                for request in requests {
                    self.send(Packet::Request { kind, request });
                }
            }
        }
    }

    fn transfer(&mut self) {
        let from = self.random_replica();
        let kind = C::KINDS[self.rng.random_range(0..C::KINDS.len())];
        // Sometimes a replica that does not exist yet, or oneself.
        let to = self.rng.random_range(0..MAX_REPLICAS);
        let n = self.rng.random_range(1..=6);
        match self.replicas[from].transfer(kind, n, id(to)) {
            Ok(()) => {
                self.stats.transfers_ok += 1;
                let index = Self::kind_index(kind).unwrap();
                self.truth[index].moved[from][to] += n;
            }
            Err(TransferError::InsufficientRights { .. }) => {}
            Err(TransferError::ToSelf { .. }) => assert_eq!(from, to),
            Err(TransferError::UnknownReplica { .. }) => {
                assert!(to >= self.replicas[from].replica_count())
            }
            Err(error) => panic!("seed {}: {error}", self.seed),
        }
    }

    fn gossip(&mut self) {
        let from = self.random_replica();
        let to = self.random_replica();
        if from == to {
            return;
        }
        match self.replicas[from].message_for(id(to)) {
            Ok(message) => self.send(Packet::State { to, message }),
            // `from` has not heard of `to` yet (it joined later).
            Err(MessageError::UnknownReplica { .. }) => {}
            Err(error) => panic!("seed {}: {error}", self.seed),
        }
    }

    fn proactive(&mut self) {
        let at = self.random_replica();
        let kind = C::KINDS[self.rng.random_range(0..C::KINDS.len())];
        let view = self.replicas[at].view(kind);
        if let Some(request) = self.policies[at].proactive(&view, self.now_ms) {
            assert_eq!(request.mode, RequestMode::Async);
            self.send(Packet::Request { kind, request });
        }
    }

    fn join(&mut self) {
        let count = self.replicas.len();
        if count == MAX_REPLICAS {
            return;
        }
        let newcomer = C::create(id(count), count + 1);
        self.replicas.push(newcomer);
        // Some replicas learn of it at once (membership), others only when
        // they hear from it.
        for replica in 0..count {
            if self.rng.random_bool(0.5) {
                self.replicas[replica].grow(count + 1);
            }
        }
    }

    fn deliver(&mut self) {
        if self.network.is_empty() {
            return;
        }
        let index = self.rng.random_range(0..self.network.len());
        // swap_remove picks any packet: delay and reordering.
        let packet = if self.rng.random_bool(0.1) {
            self.stats.packets_duplicated += 1;
            self.network[index].clone()
        } else {
            self.network.swap_remove(index)
        };
        match packet {
            Packet::State { to, message } => {
                if let Err(error) = self.replicas[to].merge(&message) {
                    panic!("seed {}: merge failed: {error}", self.seed);
                }
            }
            Packet::Request { kind, request } => self.serve(kind, &request),
        }
    }

    fn serve(&mut self, kind: Bound, request: &TransferRequest) {
        let donor = request.donor.index();
        let requester = request.requester.index();
        let policy = self.policies[donor].clone();
        match self.replicas[donor].handle(kind, request, &policy) {
            Ok(RequestOutcome::Transferred { amount, reply }) => {
                self.stats.requests_served += 1;
                assert!(amount <= request.amount);
                let index = Self::kind_index(kind).unwrap();
                self.truth[index].moved[donor][requester] += amount;
                if reply == Reply::SendStateNow {
                    assert_eq!(request.mode, RequestMode::Sync);
                    let message = self.replicas[donor].message_for(request.requester).unwrap();
                    self.send(Packet::State {
                        to: requester,
                        message,
                    });
                }
            }
            Ok(RequestOutcome::AlreadySatisfied { .. }) => self.stats.requests_ignored += 1,
            Ok(RequestOutcome::NothingToGive) => {}
            Err(HandleRequestError::UnknownReplica { .. }) => {
                assert!(requester >= self.replicas[donor].replica_count())
            }
            Err(error) => panic!("seed {}: request failed: {error}", self.seed),
        }
    }

    fn step(&mut self) {
        self.stats.steps += 1;
        self.now_ms += 5;
        match self.rng.random_range(0..100) {
            0..20 => self.update(true),
            20..45 => self.update(false),
            45..53 => self.transfer(),
            53..70 => self.gossip(),
            70..90 => self.deliver(),
            90..93 => {
                if !self.network.is_empty() {
                    let index = self.rng.random_range(0..self.network.len());
                    self.network.swap_remove(index);
                    self.stats.packets_lost += 1;
                }
            }
            93..99 => self.proactive(),
            _ => self.join(),
        }
        self.check();
    }

    fn check(&self) {
        let seed = self.seed;
        let step = self.stats.steps;
        for (index, &kind) in C::KINDS.iter().enumerate() {
            let truth = &self.truth[index];
            // Global invariant.
            let distance = match kind {
                Bound::Lower => i128::from(self.value - LOWER),
                Bound::Upper => i128::from(UPPER - self.value),
            };
            assert!(
                distance >= 0,
                "seed {seed} step {step}: true value {} breaks the {kind:?} bound",
                self.value
            );
            let mut total_real = 0;
            for (i, replica) in self.replicas.iter().enumerate() {
                let real = truth.real(i);
                assert!(
                    real >= 0,
                    "seed {seed} step {step}: r{i} overspent {kind:?} rights"
                );
                let believed = i128::from(replica.rights(kind));
                assert!(
                    believed <= real,
                    "seed {seed} step {step}: r{i} believes {believed} {kind:?} rights, holds {real}"
                );
                total_real += real;
            }
            // Rights are conserved: together they are the distance to the bound.
            assert_eq!(
                total_real, distance,
                "seed {seed} step {step}: rights leaked"
            );
        }
        // Local invariant.
        for (i, replica) in self.replicas.iter().enumerate() {
            let view = replica.value();
            if C::KINDS.contains(&Bound::Lower) {
                assert!(view >= LOWER, "seed {seed} step {step}: r{i} sees {view}");
            }
            if C::KINDS.contains(&Bound::Upper) {
                assert!(view <= UPPER, "seed {seed} step {step}: r{i} sees {view}");
            }
        }
    }

    /// Everyone learns of everyone, then sends everyone its state, reliably.
    fn settle(&mut self) {
        let count = self.replicas.len();
        for replica in &mut self.replicas {
            replica.grow(count);
        }
        for from in 0..count {
            for to in (0..count).filter(|&to| to != from) {
                let message = self.replicas[from].message_for(id(to)).unwrap();
                self.replicas[to].merge(&message).unwrap();
            }
        }
        self.check();
        for (i, replica) in self.replicas.iter().enumerate() {
            assert_eq!(
                replica.value(),
                self.value,
                "seed {}: r{i} did not converge",
                self.seed
            );
            for (index, &kind) in C::KINDS.iter().enumerate() {
                assert_eq!(
                    i128::from(replica.rights(kind)),
                    self.truth[index].real(i),
                    "seed {}: r{i} does not know all its {kind:?} rights",
                    self.seed
                );
            }
        }
    }
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn campaign<C: SimCounter>(label: &str, seed_base: u64) {
    let seeds = env_or("ROOST_BCOUNTER_SEEDS", 200);
    let steps = env_or("ROOST_BCOUNTER_STEPS", 500);
    let mut totals = Stats::default();
    for seed in seed_base..seed_base + seeds {
        let mut sim = Sim::<C>::new(seed);
        for _ in 0..steps {
            sim.step();
        }
        sim.settle();
        totals.steps += sim.stats.steps;
        totals.updates_ok += sim.stats.updates_ok;
        totals.updates_refused += sim.stats.updates_refused;
        totals.transfers_ok += sim.stats.transfers_ok;
        totals.requests_served += sim.stats.requests_served;
        totals.requests_ignored += sim.stats.requests_ignored;
        totals.packets_lost += sim.stats.packets_lost;
        totals.packets_duplicated += sim.stats.packets_duplicated;
    }
    eprintln!("{label}: {seeds} seeds x {steps} steps: {totals:?}");
    // The test must exercise what it claims to.
    assert!(totals.updates_ok > 0 && totals.updates_refused > 0);
    assert!(totals.transfers_ok > 0 && totals.requests_served > 0);
    assert!(
        totals.requests_ignored > 0,
        "duplicate requests never reached a donor"
    );
    assert!(totals.packets_lost > 0 && totals.packets_duplicated > 0);
}

#[test]
fn lower_bound_full() {
    campaign::<Lower<FullRights>>("lower/full", 0);
}

#[test]
fn lower_bound_compact() {
    campaign::<Lower<CompactRights>>("lower/compact", 1_000_000);
}

#[test]
fn upper_bound_full() {
    campaign::<Upper<FullRights>>("upper/full", 2_000_000);
}

#[test]
fn upper_bound_compact() {
    campaign::<Upper<CompactRights>>("upper/compact", 3_000_000);
}

#[test]
fn two_sided_full() {
    campaign::<TwoSided<FullRights>>("two-sided/full", 4_000_000);
}

#[test]
fn two_sided_compact() {
    campaign::<TwoSided<CompactRights>>("two-sided/compact", 5_000_000);
}

/// The same campaign catches a planted bug (rights computed from the global
/// value): some seed breaks one of the invariants `check` asserts (not any
/// other panic, such as an error the simulation did not expect).
#[test]
fn catches_rights_computed_from_the_global_value() {
    const INVARIANT_FAILURES: [&str; 4] = ["breaks the", "overspent", "believes", " sees "];
    let caught = (0..20u64).find_map(|seed| {
        let outcome = std::panic::catch_unwind(|| {
            let mut sim = Sim::<BuggyLower<FullRights>>::new(seed);
            for _ in 0..500 {
                sim.step();
            }
        });
        let payload = outcome.err()?;
        let message = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        assert!(
            INVARIANT_FAILURES.iter().any(|m| message.contains(m)),
            "seed {seed} failed, but not on an invariant: {message}"
        );
        Some(message)
    });
    let message = caught.expect("no seed caught the planted bug");
    println!("caught: {message}");
}

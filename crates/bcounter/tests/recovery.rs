//! §IV-E recovery of a permanently failed replica's rights, randomized: 3 or
//! 4 replicas run random increments, decrements and transfers over a network
//! that loses, duplicates and reorders messages; then one replica fails for
//! good (its messages in flight are fenced off), every survivor reports, one
//! heir adopts the failed replica's rights, and the survivors exchange
//! states and spend everything they hold.
//!
//! Checked, for both representations: the survivors' rights never exceed
//! the value they know (safety: the bound holds for every operation they
//! know of), and once everyone has heard everyone they equal it exactly and
//! can be spent to the bound (no right lost or made twice); a second
//! recovery finds nothing left. A planted bug (the heir counting only one
//! report's transfers received from the failed replica) must be caught.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use roost_bcounter::{
    Bound, BoundedCounter, CompactRights, FullRights, PlantedBug, RecoveryError, ReplicaId,
    RightsState,
};

const INITIAL: i64 = 200;

fn id(i: usize) -> ReplicaId {
    ReplicaId::from_index(i).unwrap()
}

struct Sim<S: RightsState> {
    replicas: Vec<BoundedCounter<S>>,
    /// In flight: (from, to, message).
    network: Vec<(usize, usize, roost_bcounter::CounterMessage<S::Message>)>,
    rng: SmallRng,
}

impl<S: RightsState> Sim<S> {
    fn new(n: usize, seed: u64) -> Self {
        let replicas = (0..n)
            .map(|i| {
                BoundedCounter::with_initial_value(Bound::Lower, 0, INITIAL, id(0), id(i), n)
                    .unwrap()
            })
            .collect();
        Sim {
            replicas,
            network: Vec::new(),
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    fn step(&mut self, alive: &[usize]) {
        let at = alive[self.rng.random_range(0..alive.len())];
        match self.rng.random_range(0..10) {
            0 => {
                let _ = self.replicas[at].increment(self.rng.random_range(1..4));
            }
            1..=3 => {
                let _ = self.replicas[at].decrement(self.rng.random_range(1..6));
            }
            4..=5 => {
                let to = alive[self.rng.random_range(0..alive.len())];
                if to != at {
                    let held = self.replicas[at].local_rights().unwrap();
                    if held > 0 {
                        let n = self.rng.random_range(1..=held);
                        self.replicas[at].transfer(n, id(to)).unwrap();
                    }
                }
            }
            6..=7 => {
                let to = alive[self.rng.random_range(0..alive.len())];
                if to != at {
                    let message = self.replicas[at].message_for(id(to)).unwrap();
                    self.network.push((at, to, message));
                }
            }
            _ => self.deliver_one(),
        }
    }

    fn deliver_one(&mut self) {
        if self.network.is_empty() {
            return;
        }
        let i = self.rng.random_range(0..self.network.len());
        let (_, to, message) = if self.rng.random_ratio(1, 5) {
            self.network[i].clone() // duplicated: delivered, and still in flight
        } else {
            self.network.swap_remove(i)
        };
        if self.rng.random_ratio(1, 10) {
            return; // lost
        }
        self.replicas[to].merge(&message).unwrap();
    }

    /// Every survivor sends every other its state, reliably, twice over (so
    /// what one learned from another reaches the third).
    fn exchange(&mut self, alive: &[usize]) {
        for _ in 0..2 {
            for &from in alive {
                for &to in alive {
                    if from != to {
                        let message = self.replicas[from].message_for(id(to)).unwrap();
                        self.replicas[to].merge(&message).unwrap();
                    }
                }
            }
        }
    }

    fn rights_and_value(&self, alive: &[usize]) -> (u64, i64) {
        let rights = alive
            .iter()
            .map(|&s| self.replicas[s].local_rights().unwrap())
            .sum();
        let value = alive
            .iter()
            .map(|&s| self.replicas[s].value().unwrap())
            .max()
            .unwrap();
        (rights, value)
    }
}

/// One run; `Err` describes a violation. Without `fence`, the failed
/// replica's messages still in flight may arrive after the recovery.
fn run<S: RightsState>(seed: u64, bug: PlantedBug, fence: bool) -> Result<(), String> {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed);
    let n = rng.random_range(3..=4);
    let mut sim = Sim::<S>::new(n, seed);
    let everyone: Vec<usize> = (0..n).collect();
    for _ in 0..rng.random_range(50..400) {
        sim.step(&everyone);
    }
    // Replica `failed` is gone for good; the survivors fence it first.
    let failed = rng.random_range(0..n);
    sim.network
        .retain(|(from, to, _)| (*from != failed || !fence) && *to != failed);
    let alive: Vec<usize> = everyone.iter().copied().filter(|&i| i != failed).collect();
    // The survivors go on for a while: recovery need not be immediate.
    for _ in 0..rng.random_range(0..100) {
        sim.step(&alive);
    }
    let heir = alive[rng.random_range(0..alive.len())];
    let reports: Vec<_> = alive
        .iter()
        .map(|&s| sim.replicas[s].report_on_failed(id(failed)).unwrap())
        .collect();
    sim.replicas[heir].set_planted_bug(bug);
    let recovered = sim.replicas[heir]
        .adopt_rights_of(id(failed), &reports)
        .map_err(|e| format!("seed {seed}: recovery refused: {e}"))?;
    sim.replicas[heir].set_planted_bug(PlantedBug::None);
    // Survivors keep operating over the lossy network, then hear each other.
    for _ in 0..rng.random_range(0..200) {
        sim.step(&alive);
    }
    while !sim.network.is_empty() {
        sim.deliver_one();
    }
    sim.exchange(&alive);
    let (rights, value) = sim.rights_and_value(&alive);
    for &s in &alive {
        let v = sim.replicas[s].value().unwrap();
        if v != value {
            return Err(format!("seed {seed}: survivors disagree: {v} vs {value}"));
        }
    }
    if i128::from(rights) > i128::from(value) {
        return Err(format!(
            "seed {seed}: survivors hold {rights} rights but the value is {value} (recovered {recovered})"
        ));
    }
    if i128::from(rights) != i128::from(value) {
        if std::env::var("DEBUG_RECOVERY").is_ok() {
            eprintln!("reports {reports:?}");
            for &s in &alive {
                eprintln!(
                    "{s}: {:?} believed(f) {:?}",
                    sim.replicas[s].rights(),
                    sim.replicas[s].rights().believed_rights(id(failed))
                );
            }
        }
        return Err(format!(
            "seed {seed}: {} rights lost (hold {rights}, value {value}, recovered {recovered})",
            value - rights as i64
        ));
    }
    // Spend everything: the bound is reached exactly.
    for &s in &alive {
        let held = sim.replicas[s].local_rights().unwrap();
        if held > 0 {
            sim.replicas[s].decrement(held).unwrap();
        }
    }
    sim.exchange(&alive);
    for &s in &alive {
        let v = sim.replicas[s].value().unwrap();
        if v != 0 {
            return Err(format!(
                "seed {seed}: spent everything, value {v} (not the bound 0)"
            ));
        }
    }
    // A second recovery, from fresh reports, finds nothing left.
    let reports: Vec<_> = alive
        .iter()
        .map(|&s| sim.replicas[s].report_on_failed(id(failed)).unwrap())
        .collect();
    let again = sim.replicas[heir].adopt_rights_of(id(failed), &reports);
    if again != Ok(0) {
        return Err(format!("seed {seed}: a second recovery gave {again:?}"));
    }
    Ok(())
}

/// A run that broke an invariant (the survivors disagree, overspend, lose
/// rights or miss the bound), not one whose recovery was merely refused:
/// what a planted bug must produce to count as caught.
fn violated(result: Result<(), String>) -> bool {
    result.is_err_and(|e| !e.contains("recovery refused"))
}

fn seeds() -> u64 {
    std::env::var("ROOST_BCOUNTER_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300)
}

#[test]
fn recovery_keeps_the_bound_and_loses_no_right_full() {
    for seed in 0..seeds() {
        run::<FullRights>(seed, PlantedBug::None, true).unwrap();
    }
}

#[test]
fn recovery_keeps_the_bound_and_loses_no_right_compact() {
    for seed in 0..seeds() {
        run::<CompactRights>(seed, PlantedBug::None, true).unwrap();
    }
}

#[test]
fn recovery_check_catches_an_heir_trusting_one_report() {
    for (name, caught) in [
        (
            "full",
            (0..seeds())
                .any(|s| violated(run::<FullRights>(s, PlantedBug::RecoverFromOneReport, true))),
        ),
        (
            "compact",
            (0..seeds()).any(|s| {
                violated(run::<CompactRights>(
                    s,
                    PlantedBug::RecoverFromOneReport,
                    true,
                ))
            }),
        ),
    ] {
        assert!(caught, "{name}: the planted recovery bug went unnoticed");
    }
}

/// The fence matters: a transfer of the failed replica still in flight
/// when its rights are recovered gives them twice.
#[test]
fn recovery_without_the_fence_is_caught() {
    for (name, caught) in [
        (
            "full",
            (0..seeds()).any(|s| violated(run::<FullRights>(s, PlantedBug::None, false))),
        ),
        (
            "compact",
            (0..seeds()).any(|s| violated(run::<CompactRights>(s, PlantedBug::None, false))),
        ),
    ] {
        assert!(caught, "{name}: recovering without a fence went unnoticed");
    }
}

#[test]
fn recovery_refuses_bad_reports() {
    let n = 3;
    let mk = |i: usize| {
        BoundedCounter::<CompactRights>::with_initial_value(Bound::Lower, 0, 10, id(0), id(i), n)
            .unwrap()
    };
    let (mut heir, other) = (mk(1), mk(2));
    let failed = id(0);
    let mine = heir.report_on_failed(failed).unwrap();
    let theirs = other.report_on_failed(failed).unwrap();
    assert_eq!(
        heir.report_on_failed(id(1)),
        Err(RecoveryError::SelfFailed { failed: id(1) })
    );
    assert!(matches!(
        heir.report_on_failed(id(5)),
        Err(RecoveryError::UnknownReplica { .. })
    ));
    assert_eq!(
        heir.adopt_rights_of(failed, std::slice::from_ref(&mine)),
        Err(RecoveryError::MissingReport { missing: id(2) })
    );
    assert_eq!(
        heir.adopt_rights_of(failed, &[mine.clone(), mine.clone(), theirs.clone()]),
        Err(RecoveryError::DuplicateReport { reporter: id(1) })
    );
    let about_other = other.report_on_failed(id(1)).unwrap();
    assert!(matches!(
        heir.adopt_rights_of(failed, &[mine.clone(), about_other]),
        Err(RecoveryError::WrongReplica { .. })
    ));
    let mut too_long = theirs.clone();
    too_long.sent_by_failed.push(0);
    too_long.sent_by_failed.push(0);
    assert_eq!(
        heir.adopt_rights_of(failed, &[mine.clone(), too_long]),
        Err(RecoveryError::ReportTooLong {
            reporter: id(2),
            replica_count: 3
        })
    );
    // Replica 0 created all 10 rights and is gone: replica 1 takes them.
    assert_eq!(heir.local_rights().unwrap(), 0);
    assert_eq!(heir.adopt_rights_of(failed, &[mine, theirs]), Ok(10));
    assert_eq!(heir.local_rights().unwrap(), 10);
    heir.decrement(10).unwrap();
    assert_eq!(heir.value().unwrap(), 0);
    assert!(heir.decrement(1).is_err());
}

//! Seeded random runs: commits from every node on its own objects,
//! messages reordered, duplicated and lost, timer ticks and crashes; the
//! checkers (durable when answered, pipeline order, committed writes at
//! every live follower at the end) must find nothing. The planted bugs
//! must be found.

mod common;

use common::{w, Net};
use roost_commit::{CommitBugs, CommitConfig};

/// A small deterministic generator (splitmix64), so runs replay by seed.
pub struct Rng(u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Faults {
    pub lose: bool,
    pub duplicate: bool,
    pub crashes: usize,
}

/// One run: the violations found, and how many transactions committed.
pub fn run(seed: u64, nodes: u32, bugs: CommitBugs, faults: Faults) -> (Vec<String>, usize) {
    let config = CommitConfig {
        max_in_flight: 8,
        ..CommitConfig::default()
    };
    let mut net = Net::with(nodes, config, bugs);
    let mut rng = Rng(seed);
    let mut crashes = 0;
    for _ in 0..300 {
        let live: Vec<u32> = net.view.members.keys().map(|m| m.0).collect();
        match rng.below(100) {
            0..=19 => {
                let c = live[rng.below(live.len() as u64) as usize];
                let mut writes = Vec::new();
                for i in 0..3 {
                    if i == 0 || rng.below(2) == 0 {
                        let key = format!("k{c}-{}", rng.below(4));
                        if writes
                            .iter()
                            .any(|x: &roost_commit::Write| x.key == key.as_bytes())
                        {
                            continue;
                        }
                        let v = net
                            .node(c)
                            .store()
                            .get(key.as_bytes())
                            .map_or(0, |o| o.version);
                        writes.push(w(&key, v + 1, &format!("{seed}-{c}-{v}")));
                    }
                }
                let followers: Vec<u32> = live
                    .iter()
                    .copied()
                    .filter(|f| *f != c && rng.below(3) != 0)
                    .collect();
                net.commit(c, writes, &followers);
            }
            20..=79 if !net.queue.is_empty() => {
                let i = rng.below(net.queue.len() as u64) as usize;
                net.deliver(i);
            }
            80..=84 if faults.duplicate && !net.queue.is_empty() => {
                let i = rng.below(net.queue.len() as u64) as usize;
                let m = net.queue[i].clone();
                net.queue.push(m);
            }
            85..=89 if faults.lose && !net.queue.is_empty() => {
                let i = rng.below(net.queue.len() as u64) as usize;
                net.queue.remove(i);
            }
            90..=97 => net.tick(),
            98..=99 if crashes < faults.crashes && live.len() > 2 => {
                crashes += 1;
                let victim = live[rng.below(live.len() as u64) as usize];
                net.crash(&[victim]);
            }
            _ => {}
        }
    }
    for _ in 0..50 {
        net.run();
        if net.check_end().is_empty() {
            break;
        }
        net.tick();
    }
    (net.check_end(), net.committed.len())
}

const ALL: Faults = Faults {
    lose: true,
    duplicate: true,
    crashes: 1,
};

#[test]
fn random_runs_find_nothing() {
    let mut committed = 0;
    for seed in 0..300 {
        for (nodes, faults) in [
            (
                3,
                Faults {
                    lose: false,
                    duplicate: true,
                    crashes: 0,
                },
            ),
            (4, ALL),
            (5, Faults { crashes: 2, ..ALL }),
        ] {
            let (bad, count) = run(seed, nodes, CommitBugs::default(), faults);
            assert!(
                bad.is_empty(),
                "seed {seed}, {nodes} nodes, {faults:?}: {bad:#?}"
            );
            committed += count;
        }
    }
    // Nothing committed would be no evidence.
    assert!(
        committed > 300 * 3 * 10,
        "only {committed} transactions committed"
    );
}

#[test]
fn planted_bug_committed_before_every_ack_is_found() {
    let bugs = CommitBugs {
        committed_before_all_acks: true,
        ..CommitBugs::default()
    };
    let found = (0..100)
        .filter(|seed| !run(*seed, 4, bugs, ALL).0.is_empty())
        .count();
    assert!(found > 0, "the checker never caught the planted bug");
}

#[test]
fn planted_bug_follower_ignores_pipeline_order_is_found() {
    let bugs = CommitBugs {
        follower_ignores_pipeline_order: true,
        ..CommitBugs::default()
    };
    let found = (0..100)
        .filter(|seed| !run(*seed, 4, bugs, ALL).0.is_empty())
        .count();
    assert!(found > 0, "the checker never caught the planted bug");
}

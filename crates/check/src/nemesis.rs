//! The nemesis: faults against a multi-process cluster on a schedule drawn
//! from a seed, every fault logged with its time on the history's clock so the
//! two can be read side by side.
//!
//! Faults: SIGKILL (and a restart as a new incarnation later), SIGSTOP (and
//! SIGCONT), a partition of one node from the others (the transport's chaos
//! layer, both directions), message loss, delay and duplication at one node,
//! and cutting one node off from etcd. At most a minority of the nodes is
//! faulty at any time (ABD, and any majority-quorum protocol, makes no
//! progress beyond that; the point is to test safety while progress is
//! possible), and every fault is healed by the end of the schedule.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use roost_cluster::local_cluster::LocalCluster;
use serde::{Deserialize, Serialize};

/// A kind of fault the schedule may draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    Kill,
    Pause,
    Partition,
    Loss,
    Delay,
    Duplicate,
    CutEtcd,
    /// SIGKILL of every node at once, then every node restarted: what the
    /// nodes' durability logs must survive (not in [`FaultKind::ALL`]: it
    /// takes the whole cluster down, asked for by name).
    KillAll,
}

impl FaultKind {
    pub const ALL: [FaultKind; 7] = [
        FaultKind::Kill,
        FaultKind::Pause,
        FaultKind::Partition,
        FaultKind::Loss,
        FaultKind::Delay,
        FaultKind::Duplicate,
        FaultKind::CutEtcd,
    ];

    pub fn parse(name: &str) -> Option<FaultKind> {
        Some(match name {
            "kill" => FaultKind::Kill,
            "pause" => FaultKind::Pause,
            "partition" => FaultKind::Partition,
            "loss" => FaultKind::Loss,
            "delay" => FaultKind::Delay,
            "dup" | "duplicate" => FaultKind::Duplicate,
            "cut-etcd" => FaultKind::CutEtcd,
            "kill-all" => FaultKind::KillAll,
            _ => return None,
        })
    }
}

/// One action of the nemesis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "fault", rename_all = "kebab-case")]
pub enum Fault {
    Kill {
        node: u32,
    },
    Restart {
        node: u32,
    },
    Pause {
        node: u32,
    },
    Resume {
        node: u32,
    },
    /// `node` stops talking to every other node, both ways.
    Partition {
        node: u32,
        from: Vec<u32>,
    },
    Loss {
        node: u32,
        probability: f64,
    },
    Delay {
        node: u32,
        delay_ms: u64,
    },
    Duplicate {
        node: u32,
        probability: f64,
    },
    CutEtcd {
        node: u32,
    },
    /// Ends the transport and etcd faults at `node`.
    Heal {
        node: u32,
    },
    /// SIGKILL of nodes `0..nodes`, one right after the other.
    KillAll {
        nodes: u32,
    },
    /// Starts nodes `0..nodes` again.
    RestartAll {
        nodes: u32,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduledFault {
    pub at_ms: u64,
    pub fault: Fault,
}

/// Draws a schedule: every `interval_ms` one of `kinds` strikes one healthy
/// node if fewer than a minority are faulty, and lasts 1 to 3 intervals; all
/// faults end by `duration_ms`. The same seed gives the same schedule.
pub fn schedule(
    seed: u64,
    nodes: u32,
    duration_ms: u64,
    interval_ms: u64,
    kinds: &[FaultKind],
) -> Vec<ScheduledFault> {
    assert!(interval_ms > 0, "a zero interval would never end");
    let mut rng = SmallRng::seed_from_u64(seed);
    let minority = (nodes.saturating_sub(1) / 2) as usize;
    let mut out = Vec::new();
    // node -> when its fault ends
    let mut faulty: BTreeMap<u32, u64> = BTreeMap::new();
    let steps = duration_ms / interval_ms;
    for step in 1..steps {
        let at_ms = step * interval_ms;
        faulty.retain(|_, &mut end| end > at_ms);
        if kinds.is_empty() || faulty.len() >= minority {
            continue;
        }
        let healthy: Vec<u32> = (0..nodes).filter(|n| !faulty.contains_key(n)).collect();
        let node = healthy[rng.random_range(0..healthy.len())];
        let kind = kinds[rng.random_range(0..kinds.len())];
        let end_ms = (at_ms + interval_ms * rng.random_range(1..=3)).min(duration_ms);
        if kind == FaultKind::KillAll {
            // Only on a whole cluster, and it takes all of it.
            if !faulty.is_empty() {
                continue;
            }
            // Down for one interval: long enough for every client to see
            // it, short enough to leave the run time to serve.
            let end_ms = (at_ms + interval_ms).min(duration_ms);
            faulty.extend((0..nodes).map(|n| (n, end_ms)));
            out.push(ScheduledFault {
                at_ms,
                fault: Fault::KillAll { nodes },
            });
            out.push(ScheduledFault {
                at_ms: end_ms,
                fault: Fault::RestartAll { nodes },
            });
            continue;
        }
        let (start, stop) = match kind {
            FaultKind::Kill => (Fault::Kill { node }, Fault::Restart { node }),
            FaultKind::Pause => (Fault::Pause { node }, Fault::Resume { node }),
            FaultKind::Partition => (
                Fault::Partition {
                    node,
                    from: (0..nodes).filter(|&n| n != node).collect(),
                },
                Fault::Heal { node },
            ),
            FaultKind::Loss => (
                Fault::Loss {
                    node,
                    probability: rng.random_range(0.1..0.5),
                },
                Fault::Heal { node },
            ),
            FaultKind::Delay => (
                Fault::Delay {
                    node,
                    delay_ms: rng.random_range(5..50),
                },
                Fault::Heal { node },
            ),
            FaultKind::Duplicate => (
                Fault::Duplicate {
                    node,
                    probability: rng.random_range(0.1..0.5),
                },
                Fault::Heal { node },
            ),
            FaultKind::CutEtcd => (Fault::CutEtcd { node }, Fault::Heal { node }),
            FaultKind::KillAll => unreachable!("drawn above"),
        };
        faulty.insert(node, end_ms);
        out.push(ScheduledFault {
            at_ms,
            fault: start,
        });
        out.push(ScheduledFault {
            at_ms: end_ms,
            fault: stop,
        });
    }
    out.sort_by_key(|f| f.at_ms);
    out
}

/// A fault as it was carried out: when (nanoseconds on the history's clock)
/// and whether it worked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FaultRecord {
    pub at_ns: u64,
    #[serde(flatten)]
    pub fault: Fault,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Carries out one fault against `cluster`.
pub fn inject(cluster: &mut LocalCluster, fault: &Fault) -> Result<(), String> {
    let admin = |cluster: &LocalCluster, node: u32, path: String| match cluster.admin(
        node,
        &path,
        Duration::from_secs(2),
    ) {
        Ok((200, _)) => Ok(()),
        Ok((code, body)) => Err(format!("{path}: HTTP {code} {}", body.trim())),
        Err(e) => Err(e.to_string()),
    };
    match fault {
        Fault::Kill { node } => cluster.kill(*node).map_err(|e| e.to_string()),
        Fault::Restart { node } => cluster.start_node(*node).map_err(|e| e.to_string()),
        Fault::Pause { node } => cluster.pause(*node).map_err(|e| e.to_string()),
        Fault::Resume { node } => cluster.resume(*node).map_err(|e| e.to_string()),
        Fault::Partition { node, from } => {
            // The chaos layer drops both what `node` sends to them and what
            // it receives from them.
            let list: Vec<String> = from.iter().map(u32::to_string).collect();
            admin(
                cluster,
                *node,
                format!("/chaos?partition={}", list.join(",")),
            )
        }
        Fault::Loss { node, probability } => {
            admin(cluster, *node, format!("/chaos?drop={probability:.3}"))
        }
        Fault::Delay { node, delay_ms } => {
            admin(cluster, *node, format!("/chaos?delay_ms={delay_ms}"))
        }
        Fault::Duplicate { node, probability } => {
            admin(cluster, *node, format!("/chaos?dup={probability:.3}"))
        }
        Fault::CutEtcd { node } => admin(cluster, *node, "/chaos/coordinator?cut=1".into()),
        Fault::Heal { node } => admin(cluster, *node, "/chaos/heal".into()),
        Fault::KillAll { nodes } => {
            // As close to at once as one process can: no wait between.
            let mut failed = Vec::new();
            for node in 0..*nodes {
                if cluster.is_running(node) {
                    if let Err(e) = cluster.kill(node) {
                        failed.push(e.to_string());
                    }
                }
            }
            if failed.is_empty() {
                Ok(())
            } else {
                Err(failed.join("; "))
            }
        }
        Fault::RestartAll { nodes } => {
            let mut failed = Vec::new();
            for node in 0..*nodes {
                if !cluster.is_running(node) {
                    if let Err(e) = cluster.start_node(node) {
                        failed.push(e.to_string());
                    }
                }
            }
            if failed.is_empty() {
                Ok(())
            } else {
                Err(failed.join("; "))
            }
        }
    }
}

/// Is `fault` the start of one (rather than its end)?
fn strikes(fault: &Fault) -> bool {
    !matches!(
        fault,
        Fault::Restart { .. }
            | Fault::Resume { .. }
            | Fault::Heal { .. }
            | Fault::RestartAll { .. }
    )
}

/// What must hold before a new fault strikes (every replica serves again:
/// for the register, every node reads; for Zeus, every node is a live
/// member and every reactor has its copies back), and how long to wait
/// for it. Striking while a restarted replica is still recovering could
/// leave too few to make progress with, a liveness loss outside the
/// protocol's fault model that would only make the run useless.
pub struct Readiness<'a> {
    pub ready: &'a dyn Fn(&LocalCluster) -> bool,
    pub patience: Duration,
}

fn wait_for_recovery(
    cluster: &LocalCluster,
    readiness: &Readiness<'_>,
    stop: &std::sync::atomic::AtomicBool,
) -> bool {
    let deadline = Instant::now() + readiness.patience;
    // Bounded by the deadline: each probe is a few requests with timeouts.
    loop {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            return false;
        }
        if (readiness.ready)(cluster) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `schedule` against `cluster` from `start` (the history's time base),
/// until done or `stop` is set; returns what was done. A fault strikes only
/// once the cluster is ready again (see [`Readiness`]), so it may run
/// later than scheduled; its record has the time it ran.
pub fn run(
    cluster: &mut LocalCluster,
    schedule: &[ScheduledFault],
    base: Instant,
    stop: &std::sync::atomic::AtomicBool,
    readiness: &Readiness<'_>,
) -> Vec<FaultRecord> {
    let mut records = Vec::with_capacity(schedule.len());
    for scheduled in schedule {
        let due = base + Duration::from_millis(scheduled.at_ms);
        while Instant::now() < due {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                return records;
            }
            std::thread::sleep((due - Instant::now()).min(Duration::from_millis(20)));
        }
        if strikes(&scheduled.fault) && !wait_for_recovery(cluster, readiness, stop) {
            tracing::warn!(fault = ?scheduled.fault, "a replica did not recover in time; striking anyway");
        }
        let error = inject(cluster, &scheduled.fault).err();
        let at_ns = u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        tracing::info!(at_ms = at_ns / 1_000_000, fault = ?scheduled.fault, ?error, "nemesis");
        records.push(FaultRecord {
            at_ns,
            fault: scheduled.fault.clone(),
            error,
        });
    }
    records
}

/// A run's nemesis: faults drawn from `seed` every `fault_interval_ms` over
/// the clients' `duration_ms`.
pub struct Campaign<'a> {
    pub seed: u64,
    pub duration_ms: u64,
    pub fault_interval_ms: u64,
    pub faults: &'a [FaultKind],
    /// Faults at fixed times instead of ones drawn from `faults` (a demo's
    /// one kill and restart).
    pub fixed: Option<&'a [ScheduledFault]>,
}

/// What a cluster run does while its clients run: strikes the campaign's
/// faults from `base` (see [`run`]), waits out the clients' time, stops
/// them (`stop`) and waits for them, then heals everything. Returns the
/// faults struck and what could not be healed.
pub fn run_beside_clients(
    cluster: &mut LocalCluster,
    campaign: &Campaign<'_>,
    base: Instant,
    stop: &std::sync::atomic::AtomicBool,
    readiness: &Readiness<'_>,
    clients: Vec<std::thread::JoinHandle<()>>,
) -> (Vec<FaultRecord>, Vec<String>) {
    let schedule = match campaign.fixed {
        Some(fixed) => fixed.to_vec(),
        None => schedule(
            campaign.seed,
            cluster.nodes(),
            campaign.duration_ms,
            campaign.fault_interval_ms,
            campaign.faults,
        ),
    };
    let faults = run(cluster, &schedule, base, stop, readiness);
    let deadline = base + Duration::from_millis(campaign.duration_ms);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for handle in clients {
        let _ = handle.join();
    }
    (faults, heal_all(cluster))
}

/// Undoes everything: resumes paused nodes, restarts killed ones, heals
/// every node's chaos. Used before the final reads.
pub fn heal_all(cluster: &mut LocalCluster) -> Vec<String> {
    let mut errors = Vec::new();
    for node in 0..cluster.nodes() {
        if cluster.is_running(node) {
            let _ = cluster.resume(node);
        } else if let Err(e) = cluster.start_node(node) {
            errors.push(e.to_string());
        }
    }
    for node in 0..cluster.nodes() {
        // A restarted node may still be starting; give it a moment.
        let mut result = inject(cluster, &Fault::Heal { node });
        for _ in 0..20 {
            if result.is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
            result = inject(cluster, &Fault::Heal { node });
        }
        if let Err(e) = result {
            errors.push(e);
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_all_takes_a_whole_cluster_down_and_brings_it_back() {
        let a = schedule(3, 3, 20_000, 1_000, &[FaultKind::KillAll, FaultKind::Pause]);
        let kills: Vec<_> = a
            .iter()
            .filter(|f| matches!(f.fault, Fault::KillAll { nodes: 3 }))
            .collect();
        let restarts: Vec<_> = a
            .iter()
            .filter(|f| matches!(f.fault, Fault::RestartAll { nodes: 3 }))
            .collect();
        assert!(!kills.is_empty(), "{a:?}");
        assert_eq!(kills.len(), restarts.len());
        // Nothing else strikes while the cluster is down.
        for (kill, restart) in kills.iter().zip(&restarts) {
            assert!(restart.at_ms > kill.at_ms);
            assert!(a.iter().all(|f| {
                !(f.at_ms > kill.at_ms && f.at_ms < restart.at_ms && strikes(&f.fault))
            }));
        }
        assert!(!strikes(&Fault::RestartAll { nodes: 3 }));
        assert_eq!(FaultKind::parse("kill-all"), Some(FaultKind::KillAll));
        assert!(!FaultKind::ALL.contains(&FaultKind::KillAll));
    }

    #[test]
    fn a_seed_gives_one_schedule_that_heals_everything_and_keeps_a_majority() {
        let a = schedule(7, 5, 20_000, 500, &FaultKind::ALL);
        assert_eq!(a, schedule(7, 5, 20_000, 500, &FaultKind::ALL));
        assert_ne!(a, schedule(8, 5, 20_000, 500, &FaultKind::ALL));
        assert!(a.len() >= 10, "{} faults", a.len());
        let mut faulty = std::collections::BTreeSet::new();
        for f in &a {
            assert!(f.at_ms <= 20_000);
            match &f.fault {
                Fault::Restart { node } | Fault::Resume { node } | Fault::Heal { node } => {
                    assert!(faulty.remove(node), "{f:?} ends no fault");
                }
                Fault::Kill { node }
                | Fault::Pause { node }
                | Fault::Partition { node, .. }
                | Fault::Loss { node, .. }
                | Fault::Delay { node, .. }
                | Fault::Duplicate { node, .. }
                | Fault::CutEtcd { node } => {
                    assert!(faulty.insert(*node), "{f:?} strikes a faulty node");
                    assert!(faulty.len() <= 2, "more than a minority of 5 faulty");
                }
                Fault::KillAll { .. } | Fault::RestartAll { .. } => {
                    panic!("{f:?} drawn without being asked for")
                }
            }
        }
        assert!(faulty.is_empty(), "unhealed at the end: {faulty:?}");
        let kinds: std::collections::HashSet<_> =
            a.iter().map(|f| std::mem::discriminant(&f.fault)).collect();
        assert!(
            kinds.len() >= 6,
            "only {} kinds of action drawn",
            kinds.len()
        );
    }

    #[test]
    fn no_kinds_or_one_node_means_no_faults() {
        assert!(schedule(1, 5, 10_000, 500, &[]).is_empty());
        assert!(schedule(1, 1, 10_000, 500, &FaultKind::ALL).is_empty());
    }

    #[test]
    fn fault_names_parse() {
        for name in [
            "kill",
            "pause",
            "partition",
            "loss",
            "delay",
            "dup",
            "cut-etcd",
        ] {
            assert!(FaultKind::parse(name).is_some(), "{name}");
        }
        assert_eq!(FaultKind::parse("meteor"), None);
    }
}

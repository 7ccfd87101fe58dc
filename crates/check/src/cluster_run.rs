//! The register workload against a real multi-process cluster under the
//! nemesis: one client per node reads and writes the cluster's ABD register
//! (unique values) through the node's admin endpoint while the nemesis
//! strikes; then everything is healed, every node reads once more, and the
//! history is checked as an rw-register history of one key (single-operation
//! transactions: strict serializability is linearizability).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use roost_cluster::local_cluster::{admin_request, LocalCluster, LocalClusterConfig};
use roost_cluster::register::RegisterBugs;
use serde_json::Value;

use crate::history::{History, Meta, MicroOp, Outcome, Recorder, WorkloadKind};
use crate::nemesis::{self, FaultKind, FaultRecord};

/// The register's one key in the history.
const KEY: u64 = 0;
/// A client's request may take this long before it counts as unknown.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(3);
/// Bound on waiting for the cluster to form or to come back after healing.
const SETTLE_PATIENCE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct ClusterRunConfig {
    pub roost_bin: PathBuf,
    pub dir: PathBuf,
    pub nodes: u32,
    pub duration_ms: u64,
    pub seed: u64,
    pub faults: Vec<FaultKind>,
    pub fault_interval_ms: u64,
    pub register_bugs: RegisterBugs,
}

/// What a run produced.
pub struct ClusterRun {
    pub history: History,
    pub faults: Vec<FaultRecord>,
    /// Problems healing at the end (a node that did not come back).
    pub heal_errors: Vec<String>,
}

/// Starts the cluster, runs clients and nemesis, heals, reads, and returns
/// the history (not yet checked).
pub fn run_cluster_register(config: &ClusterRunConfig) -> Result<ClusterRun, String> {
    let mut cluster_config =
        LocalClusterConfig::new(config.roost_bin.clone(), config.dir.clone(), config.nodes);
    cluster_config.register_bugs = config.register_bugs;
    let mut cluster = LocalCluster::start(cluster_config).map_err(|e| e.to_string())?;
    wait_until_every_node_reads(&cluster)?;

    let recorder = Arc::new(Recorder::new());
    let base = recorder.base();
    let stop = Arc::new(AtomicBool::new(false));
    let deadline = base + Duration::from_millis(config.duration_ms);
    let clients: Vec<_> = (0..config.nodes)
        .map(|node| {
            let addr = cluster.admin_addr(node).expect("a configured node");
            let recorder = Arc::clone(&recorder);
            let stop = Arc::clone(&stop);
            let seed = config
                .seed
                .wrapping_mul(1_000_003)
                .wrapping_add(u64::from(node));
            std::thread::spawn(move || client(node, addr, &recorder, seed, deadline, &stop))
        })
        .collect();
    let campaign = nemesis::Campaign {
        seed: config.seed,
        duration_ms: config.duration_ms,
        fault_interval_ms: config.fault_interval_ms,
        faults: &config.faults,
        fixed: None,
    };
    let readiness = nemesis::Readiness {
        ready: &every_node_reads,
        patience: RECOVERY_PATIENCE,
    };
    let (faults, heal_errors) =
        nemesis::run_beside_clients(&mut cluster, &campaign, base, &stop, &readiness, clients);
    final_reads(&cluster, &recorder)?;
    let recorder = Arc::try_unwrap(recorder).map_err(|_| "a client still holds the recorder")?;
    Ok(ClusterRun {
        history: recorder.into_history(Meta::new(WorkloadKind::RwRegister)),
        faults,
        heal_errors,
    })
}

/// How long a new fault waits for every replica to serve reads again.
const RECOVERY_PATIENCE: Duration = Duration::from_secs(10);

/// Does every node answer a register read (so every restarted replica has
/// recovered)? ABD recovers a restarted replica from a majority of
/// recovered ones.
fn every_node_reads(cluster: &LocalCluster) -> bool {
    (0..cluster.nodes()).all(|node| {
        matches!(
            cluster.admin(node, "/register/read", Duration::from_secs(2)),
            Ok((200, body)) if body.contains("ReadDone")
        )
    })
}

fn wait_until_every_node_reads(cluster: &LocalCluster) -> Result<(), String> {
    let deadline = Instant::now() + SETTLE_PATIENCE;
    for node in 0..cluster.nodes() {
        let addr = cluster.admin_addr(node).expect("a configured node");
        loop {
            if let Ok((200, body)) = admin_request(addr, "/register/read", CLIENT_TIMEOUT) {
                if body.contains("ReadDone") {
                    break;
                }
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "node {node} could not read within {} s of the start",
                    SETTLE_PATIENCE.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}

/// After healing: one successful read per node, recorded in the history.
fn final_reads(cluster: &LocalCluster, recorder: &Recorder) -> Result<(), String> {
    let deadline = Instant::now() + SETTLE_PATIENCE;
    for node in 0..cluster.nodes() {
        let addr = cluster.admin_addr(node).expect("a configured node");
        let process = 1_000_000 + u64::from(node);
        loop {
            let invocation = recorder.invoke(process);
            let (outcome, ops) = read(addr);
            recorder.complete(invocation, outcome, ops);
            if outcome == Outcome::Ok {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("node {node} did not serve a read after healing"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(())
}

fn client(
    node: u32,
    addr: SocketAddr,
    recorder: &Recorder,
    seed: u64,
    deadline: Instant,
    stop: &AtomicBool,
) {
    let mut rng = SmallRng::seed_from_u64(seed);
    // After an op of unknown outcome the process is retired (it may still be
    // in flight) and the client goes on as a new process, as in Jepsen.
    let mut process = u64::from(node) * 1000;
    let mut next_value = (u64::from(node) + 1) * 1_000_000_000;
    while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
        let invocation = recorder.invoke(process);
        let (outcome, ops) = if rng.random_bool(0.5) {
            next_value += 1;
            write(addr, next_value)
        } else {
            read(addr)
        };
        recorder.complete(invocation, outcome, ops);
        match outcome {
            Outcome::Unknown => process += 1,
            // Refused (not serving, recovering): back off a little.
            Outcome::Fail => std::thread::sleep(Duration::from_millis(20)),
            Outcome::Ok => {}
        }
    }
}

/// A node's answer; `Err(true)` if the request surely never reached it
/// (connection refused: the process is down), `Err(false)` if it may have.
fn request(addr: SocketAddr, path: &str) -> Result<Value, bool> {
    match admin_request(addr, path, CLIENT_TIMEOUT) {
        Ok((200, body)) => serde_json::from_str(&body).map_err(|_| false),
        Ok(_) => Err(false),
        Err(e) => Err(e.kind() == std::io::ErrorKind::ConnectionRefused),
    }
}

fn write(addr: SocketAddr, value: u64) -> (Outcome, Vec<MicroOp>) {
    let ops = vec![MicroOp::Write { key: KEY, value }];
    let outcome = match request(addr, &format!("/register/write?value={value}")) {
        Ok(answer) if answer.get("Written").is_some() => Outcome::Ok,
        // Refused before it started, or never sent: it did not happen.
        Ok(answer) if answer.get("Rejected").is_some() || answer.get("error").is_some() => {
            Outcome::Fail
        }
        Err(true) => Outcome::Fail,
        // Timed out in the protocol, or no answer: it may have happened.
        _ => Outcome::Unknown,
    };
    (outcome, ops)
}

fn read(addr: SocketAddr) -> (Outcome, Vec<MicroOp>) {
    match request(addr, "/register/read") {
        Ok(answer) if answer.get("ReadDone").is_some() => {
            let done = &answer["ReadDone"];
            let counter = done["tag"]["counter"].as_u64().unwrap_or(0);
            let value = done["value"].as_u64();
            // Tag counter 0 is the initial state: nothing written yet.
            let value = if counter == 0 { None } else { value };
            (Outcome::Ok, vec![MicroOp::ReadReg { key: KEY, value }])
        }
        Ok(answer) if answer.get("Rejected").is_some() || answer.get("error").is_some() => (
            Outcome::Fail,
            vec![MicroOp::ReadReg {
                key: KEY,
                value: None,
            }],
        ),
        Err(true) => (
            Outcome::Fail,
            vec![MicroOp::ReadReg {
                key: KEY,
                value: None,
            }],
        ),
        _ => (
            Outcome::Unknown,
            vec![MicroOp::ReadReg {
                key: KEY,
                value: None,
            }],
        ),
    }
}

//! `roost demo --bank`: a local cluster of `roost node` processes
//! (peer-to-peer membership, so no etcd is needed) serves one database;
//! clients on every node move money between accounts
//! over RESP (WATCH, GET, MULTI/EXEC, as a Redis user writes a transfer)
//! while one node is SIGKILLed and restarted; then every node reads every
//! account and the history is checked: strictly serializable, the bank's
//! total conserved, nothing acknowledged lost. The harness is the checker's
//! (`roost_check::resp_run`); this is flags, the schedule and printing.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use roost_check::nemesis::{Fault, ScheduledFault};
use roost_check::resp_run::{run_cluster_resp, ProgressSink, RespRunConfig, RunProgress};
use roost_check::workload::WorkloadConfig;
use roost_check::{AnomalyKind, WorkloadKind};
use roost_cluster::runtime::admin_get;

use roost_bench::results::group_thousands as thousands;

use crate::cluster::sample;

/// What `roost demo` runs.
#[derive(Debug, Clone)]
pub struct ClusterDemo {
    pub seconds: f64,
    pub nodes: u32,
    pub clients_per_node: u32,
    pub seed: u64,
}

/// Accounts the transfers move money between (spread over the keyspace's
/// reactors, so most transfers span nodes).
const ACCOUNTS: u64 = 64;
/// The node killed midway.
pub(crate) const VICTIM: u32 = 1;
/// The kill and the restart, as fractions of the run.
pub(crate) const KILL_AT: f64 = 0.4;
pub(crate) const RESTART_AT: f64 = 0.6;
/// A progress probe's patience per request.
const PROBE_TIMEOUT: Duration = Duration::from_millis(300);

/// One second's look at the nodes.
pub(crate) struct Look {
    pub up: u32,
    /// Each answering node's acquisitions so far (its counter restarts with
    /// the process).
    pub acquires: Vec<(SocketAddr, u64)>,
    /// Fewest copies (owner and readers) of any reactor, as its owner says,
    /// over the reactors whose owner answered.
    pub min_copies: Option<usize>,
    /// Reactors whose owner answered (the others were moving, or their
    /// owner is down).
    pub reactors_seen: usize,
}

/// Acquisitions summed over the run: per node, what its counter gained
/// since the last look (all of it after a restart reset it).
#[derive(Default)]
pub(crate) struct Moves {
    last: std::collections::HashMap<SocketAddr, u64>,
    total: u64,
}

impl Moves {
    pub fn total(&self) -> u64 {
        self.total
    }

    pub fn add(&mut self, acquires: &[(SocketAddr, u64)]) -> u64 {
        for &(addr, now) in acquires {
            let last = self.last.insert(addr, now).unwrap_or(0);
            self.total += if now >= last { now - last } else { now };
        }
        self.total
    }
}

/// Which nodes answer, their acquisitions, and the copies of the first
/// `reactors` keyspace reactors.
pub(crate) fn look(
    runtime: &tokio::runtime::Runtime,
    admins: &[SocketAddr],
    reactors: usize,
) -> Look {
    runtime.block_on(async {
        // A reactor two nodes both call theirs for a moment (the old owner
        // not yet told) is counted once.
        let mut seen = std::collections::HashSet::new();
        let mut look = Look {
            up: 0,
            acquires: Vec::new(),
            min_copies: None,
            reactors_seen: 0,
        };
        for &addr in admins {
            let Ok((200, metrics)) = admin_get(addr, "/metrics", PROBE_TIMEOUT).await else {
                continue;
            };
            look.up += 1;
            if let Some(n) = sample(&metrics, "roost_ownership_acquires_total")
                .and_then(|v| v.parse::<u64>().ok())
            {
                look.acquires.push((addr, n));
            }
            for i in 0..reactors {
                let path = format!("/ownership/describe?key=keyspace/keyspace-{i}");
                let Ok((200, body)) = admin_get(addr, &path, PROBE_TIMEOUT).await else {
                    continue;
                };
                let Ok(json) = serde_json::from_str::<serde_json::Value>(&body) else {
                    continue;
                };
                let described = &json["Described"];
                if described["access"].as_str() != Some("Owner") {
                    continue;
                }
                let readers = described["meta"]["o_replicas"]["readers"]
                    .as_array()
                    .map_or(0, Vec::len);
                seen.insert(i);
                look.reactors_seen = seen.len();
                look.min_copies = Some(look.min_copies.map_or(readers + 1, |m| m.min(readers + 1)));
            }
        }
        look
    })
}

pub fn run(demo: &ClusterDemo) -> anyhow::Result<()> {
    let duration_ms = (demo.seconds * 1000.0).round() as u64;
    let kill_ms = (duration_ms as f64 * KILL_AT) as u64;
    let restart_ms = (duration_ms as f64 * RESTART_AT) as u64;
    println!(
        "roost demo: {} roost node processes on this machine, one database across them \
         (Zeus: reactors move to the node that uses them, every write replicated to 3 copies \
         before it is acknowledged; membership by the nodes' own leases, no etcd needed).",
        demo.nodes
    );
    println!(
        "Bank transfers over RESP (WATCH, GET, MULTI/EXEC between {ACCOUNTS} accounts), {} \
         clients per node, for {:.0} s; node {VICTIM} is SIGKILLed at {:.1} s and restarted at \
         {:.1} s. Then every node reads every account and the history is checked.",
        demo.clients_per_node,
        demo.seconds,
        kill_ms as f64 / 1000.0,
        restart_ms as f64 / 1000.0,
    );
    let dir = std::env::temp_dir().join(format!("roost-demo-{}", std::process::id()));
    let runtime = Arc::new(
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the progress probe's runtime")?,
    );
    let last = Arc::new(Mutex::new((0u64, Duration::ZERO)));
    let moves = Arc::new(Mutex::new(Moves::default()));
    let moves_seen = Arc::new(AtomicU64::new(0));
    let sink = {
        let (last, moves, moves_seen) = (
            Arc::clone(&last),
            Arc::clone(&moves),
            Arc::clone(&moves_seen),
        );
        ProgressSink(Arc::new(move |p: &RunProgress| {
            let look = look(
                &runtime,
                &p.admins,
                roost_check::resp_run::KEYSPACE_REACTORS,
            );
            let total_moves = moves
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .add(&look.acquires);
            moves_seen.store(total_moves, Ordering::Relaxed);
            let done = p.ok + p.failed + p.unknown;
            let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
            let dt = p.elapsed.saturating_sub(last.1).as_secs_f64().max(1e-3);
            let rate = (done.saturating_sub(last.0)) as f64 / dt;
            *last = (done, p.elapsed);
            println!(
                "[{:>5.1} s] {:>6.0} transfers/s | committed {} refused {} unknown {} | nodes up {}/{} | ownership moves {} | copies per reactor {}",
                p.elapsed.as_secs_f64(),
                rate,
                thousands(p.ok),
                thousands(p.failed),
                p.unknown,
                look.up,
                p.admins.len(),
                thousands(total_moves),
                look.min_copies.map_or("-".to_owned(), |c| format!(
                    ">= {c} ({} of {} reactors seen at their owner)",
                    look.reactors_seen,
                    roost_check::resp_run::KEYSPACE_REACTORS
                )),
            );
        }))
    };
    let workload = WorkloadConfig {
        accounts: ACCOUNTS,
        ..WorkloadConfig::new(WorkloadKind::Bank)
    };
    let config = RespRunConfig {
        roost_bin: std::env::current_exe().context("locating the roost binary")?,
        dir: dir.clone(),
        nodes: demo.nodes,
        clients_per_node: demo.clients_per_node,
        duration_ms,
        seed: demo.seed,
        faults: Vec::new(),
        fault_interval_ms: duration_ms,
        workload,
        node_args: Vec::new(),
        etcd: false,
        fixed_faults: Some(vec![
            ScheduledFault {
                at_ms: kill_ms,
                fault: Fault::Kill { node: VICTIM },
            },
            ScheduledFault {
                at_ms: restart_ms,
                fault: Fault::Restart { node: VICTIM },
            },
        ]),
        progress: Some(sink),
    };
    println!("starting the cluster ...");
    let run = run_cluster_resp(&config)
        .map_err(|e| anyhow::anyhow!("{e} (node logs in {})", dir.display()))?;
    let report = roost_check::check(&run.history)?;
    let lost = report.count(AnomalyKind::LostWrite);
    println!();
    println!(
        "summary: {} transfers committed ({}/s), {} refused (not enough money, or a WATCH \
         conflict: nothing applied), {} with an unknown outcome (in flight when node {VICTIM} \
         died), then {} final reads",
        thousands(report.ops_ok as u64),
        thousands((report.ops_ok as f64 / demo.seconds) as u64),
        thousands(report.ops_failed as u64),
        report.ops_unknown,
        demo.nodes,
    );
    for record in &run.faults {
        println!(
            "  fault at {:.1} s: {:?}{}",
            record.at_ns as f64 / 1e9,
            record.fault,
            record
                .error
                .as_ref()
                .map_or(String::new(), |e| format!(" (failed: {e})"))
        );
    }
    for error in &run.heal_errors {
        println!("  heal: {error}");
    }
    println!(
        "  ownership: {} reactor moves seen",
        thousands(moves_seen.load(Ordering::Relaxed))
    );
    println!(
        "  checked: {} (strict serializability of every transfer and read, the bank's total in \
         every read); lost acknowledged writes: {lost}",
        if report.valid() { "VALID" } else { "INVALID" },
    );
    let _ = std::fs::remove_dir_all(&dir);
    if !report.valid() {
        print!("{report}");
        anyhow::bail!("the history is not strictly serializable");
    }
    println!("Nothing acknowledged was lost. `roost up` runs such a cluster for your own clients (redis-cli -p 6379).");
    Ok(())
}

//! `roost demo` (the default): Handover, the Zeus seed's cellular control
//! plane (`roost_bench::handover`), on a local cluster of `roost node`
//! processes (peer-to-peer membership, so no etcd is needed). Clients on
//! every node attach phones to base stations, release them and hand them
//! over, a fifth of the phones to the next node's stations and back, so
//! their sessions move between nodes (Zeus ownership); every commit is
//! replicated to every node before it is acknowledged. One node is
//! SIGKILLed midway and restarted; a transaction whose node dies goes to
//! another node (any node serves any transaction), and one that was sent
//! but not answered sets its phone aside with both sessions it may have
//! left. At the end every node reads every phone's session, which must be
//! what its last acknowledged transaction wrote: checked, not assumed.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use roost_bench::handover::{self, FaultTally, Layout, Params, Scripts, Session};
use roost_bench::results::group_thousands as thousands;
use roost_client::{RouteTable, Router};

use crate::bench_smallbank::{owners_of_tags, start_tagged_cluster, TaggedCluster};
use crate::demo::{look, ClusterDemo, Moves, KILL_AT, RESTART_AT, VICTIM};

/// The workload's sizes: small enough to load in a moment.
const PHONES_PER_NODE: u64 = 600;
const STATIONS_PER_NODE: u64 = 20;
/// Share of transactions that are handovers, and of phones that hand
/// over to the next node's stations and back.
const HANDOVER_FRACTION: f64 = 0.05;
const MOVING_FRACTION: f64 = 0.2;
/// Keyspace reactors: room for every node's phones and stations whatever
/// the hashing gives each node.
const REACTORS: u64 = 4_096;
/// Reactors whose copies the progress line counts (a sample).
const REACTORS_PROBED: usize = 32;
/// How long the restarted node may take to serve again before the reads.
const REJOIN_TIMEOUT: Duration = Duration::from_secs(60);

/// Bugs planted to show that the demo's check catches a lost write
/// (`cli/tests/demo.rs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Planted {
    /// A handover's finish does not write the session.
    pub lose_finish_session: bool,
}

pub fn run(demo: &ClusterDemo, planted: Planted) -> anyhow::Result<()> {
    let kill_at = Duration::from_secs_f64(demo.seconds * KILL_AT);
    let restart_at = Duration::from_secs_f64(demo.seconds * RESTART_AT);
    println!(
        "roost demo: {} roost node processes on this machine, one database across them \
         (Zeus: reactors move to the node that uses them, every write replicated to every node \
         before it is acknowledged; membership by the nodes' own leases, no etcd needed).",
        demo.nodes
    );
    println!(
        "Handover, the Zeus paper's cellular control plane: {} phones and {} base stations per \
         node; phones attach, release and hand over ({:.0}% of transactions), a fifth of them to \
         the next node's stations and back, so their sessions move between nodes. {} clients \
         per node for {:.0} s; node {VICTIM} is SIGKILLed at {:.1} s and restarted at {:.1} s. \
         Then every node reads every phone's session.",
        PHONES_PER_NODE,
        STATIONS_PER_NODE,
        HANDOVER_FRACTION * 100.0,
        demo.clients_per_node,
        demo.seconds,
        kill_at.as_secs_f64(),
        restart_at.as_secs_f64(),
    );
    println!("starting the cluster ...");
    let dir = std::env::temp_dir().join(format!("roost-demo-{}", std::process::id()));
    let _remove = crate::bench_voter::RemoveOnDrop(dir.clone());
    let TaggedCluster {
        mut cluster,
        nodes,
        mut admin,
        owned,
    } = start_tagged_cluster(demo.nodes, REACTORS, dir, "memory", false)?;
    let params = Params {
        phones_per_node: PHONES_PER_NODE,
        stations_per_node: STATIONS_PER_NODE,
        handover_fraction: HANDOVER_FRACTION,
        moving_fraction: MOVING_FRACTION,
    };
    let layout = Arc::new(Layout::new(params, nodes.clone(), owned).map_err(anyhow::Error::msg)?);
    let mut scripts = Scripts::load(&mut admin)?;
    scripts.bugs.lose_finish_session = planted.lose_finish_session;
    {
        let tags: Vec<&String> = layout.all_tags().collect();
        let owners = owners_of_tags(&mut admin, &tags)?;
        handover::load(&mut admin, &layout, &owners)?;
    }
    let admins: Vec<SocketAddr> = (0..demo.nodes)
        .filter_map(|n| cluster.admin_addr(n))
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the progress probe's runtime")?;

    let table = RouteTable::new();
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(FaultTally::default());
    let clients_per_node = u64::from(demo.clients_per_node);
    let mut clients = Vec::new();
    for p in 0..nodes.len() {
        for c in 0..clients_per_node {
            let mut router = Router::new(nodes.clone(), Arc::clone(&table));
            let (layout, scripts) = (Arc::clone(&layout), scripts.clone());
            let (stop, tally) = (Arc::clone(&stop), Arc::clone(&tally));
            let phones = handover::initial_phones(&layout, p, c, clients_per_node);
            let seed = demo.seed ^ ((p as u64) << 32 | c).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            clients.push(std::thread::spawn(move || {
                handover::run_client_through_faults(
                    &mut router,
                    &scripts,
                    &layout,
                    phones,
                    seed,
                    &stop,
                    &tally,
                )
            }));
        }
    }
    // Routes follow ownership; a look that finds no node errs and is
    // tried again at the next tick.
    let follower = {
        let stop = Arc::clone(&stop);
        let mut router = Router::new(nodes.clone(), Arc::clone(&table));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(roost_bench::cluster_load::FOLLOW_INTERVAL);
                let _ = router.follow();
            }
        })
    };

    let started = Instant::now();
    let mut faults: Vec<(f64, String)> = Vec::new();
    let mut moves = Moves::default();
    let mut last = (0u64, Duration::ZERO);
    let mut killed = false;
    let mut restarted = false;
    let end = Duration::from_secs_f64(demo.seconds);
    // Bounded: one pass a second until the run's end.
    while started.elapsed() < end {
        let tick = (last.1 + Duration::from_secs(1)).min(end);
        std::thread::sleep(tick.saturating_sub(started.elapsed()));
        let now = started.elapsed();
        if !killed && now >= kill_at {
            killed = true;
            let outcome = cluster.kill(VICTIM).map_err(|e| e.to_string());
            faults.push((now.as_secs_f64(), fault_line("SIGKILL", outcome)));
        }
        if killed && !restarted && now >= restart_at {
            restarted = true;
            let outcome = cluster.start_node(VICTIM).map_err(|e| e.to_string());
            faults.push((now.as_secs_f64(), fault_line("restart", outcome)));
        }
        let seen = look(&runtime, &admins, REACTORS_PROBED);
        let total_moves = moves.add(&seen.acquires);
        let done = tally.committed.load(Ordering::Relaxed);
        let dt = now.saturating_sub(last.1).as_secs_f64().max(1e-3);
        let rate = done.saturating_sub(last.0) as f64 / dt;
        last = (done, now);
        println!(
            "[{:>5.1} s] {:>6.0} txn/s | committed {} unknown {} | nodes up {}/{} | ownership moves {} | copies per reactor {}",
            now.as_secs_f64(),
            rate,
            thousands(done),
            tally.unknown.load(Ordering::Relaxed),
            seen.up,
            admins.len(),
            thousands(total_moves),
            seen.min_copies.map_or("-".to_owned(), |c| format!(
                ">= {c} ({} of {REACTORS_PROBED} sampled reactors seen at their owner)",
                seen.reactors_seen
            )),
        );
    }
    stop.store(true, Ordering::Relaxed);
    let mut results = Vec::new();
    for client in clients {
        results.push(
            client
                .join()
                .map_err(|_| anyhow::anyhow!("a client thread panicked"))?,
        );
    }
    follower
        .join()
        .map_err(|_| anyhow::anyhow!("the route follower panicked"))?;
    let elapsed = started.elapsed().as_secs_f64();
    let committed = tally.committed.load(Ordering::Relaxed);

    // Every node must serve again before it reads.
    let deadline = Instant::now() + REJOIN_TIMEOUT;
    while let Some(why) = roost_check::resp_run::zeus_unready(&cluster, demo.nodes) {
        anyhow::ensure!(
            Instant::now() < deadline,
            "node {VICTIM} did not rejoin within {} s: {why}",
            REJOIN_TIMEOUT.as_secs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut allowed: Vec<(u64, Vec<Session>)> = Vec::new();
    let mut unknown_phones = 0;
    for r in &results {
        allowed.extend(r.expected.iter().map(|&(p, s)| (p, vec![s])));
        allowed.extend(r.unknown.iter().map(|&(p, a, b)| (p, vec![a, b])));
        unknown_phones += r.unknown.len();
    }
    let mut wrong_at = Vec::new();
    for node in &nodes {
        // The killed node's old connection is dead.
        admin.disconnect(node.id);
        let (wrong, first) = handover::check_at(&mut admin, node.id, &layout, &allowed)?;
        wrong_at.push((node.id, wrong, first));
    }
    let lost: usize = wrong_at.iter().map(|w| w.1).max().unwrap_or(0);

    println!();
    println!(
        "summary: {} transactions committed ({}/s), {unknown_phones} with an unknown outcome (sent \
         and not acknowledged: the node died, or could not tell while the cluster recovered; \
         either session is right for those phones)",
        thousands(committed),
        thousands((committed as f64 / elapsed) as u64),
    );
    for (at, line) in &faults {
        println!("  fault at {at:.1} s: {line}");
    }
    println!(
        "  ownership: {} reactor moves seen",
        thousands(moves.total())
    );
    println!(
        "  checked: {} phones' sessions read at each of the {} nodes; lost acknowledged writes: {lost}",
        thousands(allowed.len() as u64),
        nodes.len()
    );
    if lost > 0 {
        for (node, wrong, first) in &wrong_at {
            if *wrong > 0 {
                println!(
                    "  node {node}: {wrong} sessions are not what their last acknowledged transaction wrote; first: {}",
                    first.as_deref().unwrap_or_default()
                );
            }
        }
        anyhow::bail!("{lost} acknowledged writes were lost");
    }
    println!("Nothing acknowledged was lost. `roost up` runs such a cluster for your own clients (redis-cli -p 6379).");
    drop(cluster);
    Ok(())
}

fn fault_line(what: &str, outcome: Result<(), String>) -> String {
    match outcome {
        Ok(()) => format!("{what} node {VICTIM}"),
        Err(e) => format!("{what} node {VICTIM} failed: {e}"),
    }
}

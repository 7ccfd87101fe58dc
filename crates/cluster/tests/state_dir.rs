//! The runtime with state directories (in-process nodes on loopback): a
//! restarted node recovers the view it installed from its acceptor record
//! and rejoins in a later epoch; bad directories and records are errors at
//! start; a node whose directory fails stops rather than send a vote it
//! could forget.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use roost_cluster::config::{ClusterConfig, NodeAddr};
use roost_cluster::local_cluster::free_ports;
use roost_cluster::membership::MembershipConfig;
use roost_cluster::register::{Register, RegisterBugs};
use roost_cluster::runtime::{start_node_with, RunningNode, RuntimeError, StartOptions};
use roost_cluster::state_dir::{StateDirError, RECORD_FILE};
use roost_cluster::{record, NodeId};

/// Bound on every wait here.
const PATIENCE: Duration = Duration::from_secs(20);

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("roost-state-dir-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `n` nodes on free loopback ports, with quick membership timing.
fn cluster(n: u32) -> ClusterConfig {
    let ports = free_ports(2 * n as usize).unwrap();
    let loopback = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    ClusterConfig {
        nodes: (0..n)
            .map(|i| NodeAddr {
                id: i,
                addr: loopback(ports[2 * i as usize]),
                admin_addr: loopback(ports[2 * i as usize + 1]),
                resp_addr: None,
            })
            .collect(),
        membership: MembershipConfig {
            heartbeat_interval_ms: 20,
            suspect_after_ms: 60,
            lease_duration_ms: 150,
            clock_drift_margin_ms: 5,
            proposal_timeout_ms: 300,
        },
        ..ClusterConfig::local(n)
    }
}

async fn start(
    config: &ClusterConfig,
    id: u32,
    dir: Option<&Path>,
) -> Result<RunningNode<Register>, RuntimeError> {
    let app = Register::new(config.register.clone(), RegisterBugs::default());
    let options = StartOptions {
        state_dir: dir.map(Path::to_owned),
        ..StartOptions::default()
    };
    start_node_with(config, id, app, options).await
}

/// Starts node `id` again in this process on its old ports: the stopped
/// node's listeners close as their tasks notice the stop, so a bind may
/// find the port still taken for a moment (a new process, as in
/// production, has no such predecessor in it).
async fn restart(config: &ClusterConfig, id: u32, dir: &Path) -> RunningNode<Register> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match start(config, id, Some(dir)).await {
            Ok(node) => return node,
            Err(RuntimeError::Bind { source, .. })
                if source.kind() == std::io::ErrorKind::AddrInUse && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(error) => panic!("node {id} did not start again: {error}"),
        }
    }
}

/// Waits until `node` serves as a member of its view; returns that epoch.
async fn serving(node: &RunningNode<Register>) -> u64 {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let status = node.handle().status().await.unwrap();
        if status.serving && status.members.contains(&node.id) {
            return status.epoch;
        }
        assert!(
            Instant::now() < deadline,
            "node {} never served: {status:?}",
            node.id
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_recovers_its_view_and_rejoins_later() {
    let root = scratch("restart");
    let config = cluster(3);
    let dirs: Vec<PathBuf> = (0..3).map(|i| root.join(format!("node{i}"))).collect();
    let mut nodes = Vec::new();
    for i in 0..3 {
        nodes.push(Some(
            start(&config, i, Some(&dirs[i as usize])).await.unwrap(),
        ));
    }
    for node in nodes.iter().flatten() {
        serving(node).await;
    }
    let old = nodes[1].take().unwrap();
    let old_incarnation = old.handle().status().await.unwrap().incarnation;
    old.stop().await;
    let bytes = std::fs::read(dirs[1].join(RECORD_FILE)).unwrap();
    let record = record::decode(&bytes, NodeId(1), &config.ids()).unwrap();
    assert!(record.installed.epoch.0 >= 1, "{record:?}");
    assert_eq!(
        record.installed.members.get(&NodeId(1)),
        Some(&old_incarnation)
    );

    let again = restart(&config, 1, &dirs[1]).await;
    // At once, before it hears anyone: the view it installed, but it is a
    // new incarnation and no member of it.
    let status = again.handle().status().await.unwrap();
    assert!(status.epoch >= record.installed.epoch.0, "{status:?}");
    assert!(!status.serving);
    assert_ne!(status.incarnation, old_incarnation);
    let epoch = serving(&again).await;
    assert!(
        epoch > record.installed.epoch.0,
        "rejoined in epoch {epoch}"
    );
    // Its directory holds its lock: a second process of node 1 is refused.
    let error = start(&config, 1, Some(&dirs[1])).await.err().unwrap();
    assert!(
        matches!(error, RuntimeError::StateDir(StateDirError::InUse(_))),
        "{error}"
    );
    again.stop().await;
    for node in nodes.into_iter().flatten() {
        node.stop().await;
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_state_directories_are_errors_at_start() {
    let root = scratch("bad");
    let config = cluster(1);
    // A file where the directory should be.
    let file = root.join("file");
    std::fs::write(&file, b"x").unwrap();
    let error = start(&config, 0, Some(&file)).await.err().unwrap();
    assert!(
        matches!(
            error,
            RuntimeError::StateDir(StateDirError::NotADirectory(_))
        ),
        "{error}"
    );
    // A corrupt record: named, never taken for none.
    let dir = root.join("corrupt");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(RECORD_FILE), b"ROOSTACC garbage").unwrap();
    let error = start(&config, 0, Some(&dir))
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains(RECORD_FILE) && error.contains("unusable"),
        "{error}"
    );
    // Another node's record.
    let other = roost_cluster::AcceptorRecord::empty(NodeId(5));
    std::fs::write(dir.join(RECORD_FILE), record::encode(&other)).unwrap();
    let error = start(&config, 0, Some(&dir))
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("node n5's"), "{error}");
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_state_directory_fails_stops() {
    let root = scratch("fails");
    let config = cluster(1);
    let dir = root.join("node0");
    let node = start(&config, 0, Some(&dir)).await.unwrap();
    // Gone before the node first votes (it waits proposal_timeout_ms). A
    // record the node writes meanwhile (a temporary file, then a rename)
    // can make one removal find the directory not empty: remove again.
    let mut tries = 0;
    while let Err(error) = std::fs::remove_dir_all(&dir) {
        tries += 1;
        assert!(tries < 50, "cannot remove {}: {error}", dir.display());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let deadline = Instant::now() + PATIENCE;
    while !node.is_stopped() {
        assert!(Instant::now() < deadline, "the node kept running");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(node.handle().status().await.is_err(), "stopped");
    node.stop().await;
    let _ = std::fs::remove_dir_all(&root);
}

//! One node assembled by the composition root: its layers are up, reachable,
//! and report through one metrics endpoint.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use roost_cluster::local_cluster::free_ports;
use roost_cluster::register::{RegisterCmd, RegisterOut};
use roost_cluster::runtime::admin_get;
use roost_node::{Node, NodeError, NodeProtocol};
use roost_ownership::{OwnershipCmd, OwnershipOut, ReqId};

mod common;
use common::one_node_config;

/// Sends one RESP command and reads until `expect` has arrived (or 5 s).
fn resp_round_trip(stream: &mut TcpStream, args: &[&str], expect: &[u8]) {
    let mut frame = format!("*{}\r\n", args.len());
    for arg in args {
        frame.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(frame.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while got.len() < expect.len() {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed after {got:?}");
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got, expect, "reply to {args:?}");
}

fn metrics(node: &Node) -> String {
    let (code, body) = node
        .block_on(admin_get(
            node.admin_addr(),
            "/metrics",
            Duration::from_secs(5),
        ))
        .unwrap();
    assert_eq!(code, 200, "{body}");
    body
}

fn resp_commands(metrics: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("roost_resp_commands_processed_total "))
        .expect("the front door's counter is in the node's metrics")
        .parse()
        .unwrap()
}

/// Waits until the node owns `reactors` reactors (it creates the keyspace's
/// once its first view is installed); the inspection it last saw.
fn wait_until_owning(
    node: &Node,
    reactors: usize,
) -> roost_ownership::Inspection<roost_node::NodeReactor> {
    let handle = node.ownership().expect("the node runs ownership");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let req = ReqId(handle.next_request_id());
        let out = node
            .block_on(handle.request(OwnershipCmd::Inspect { req }))
            .unwrap();
        let OwnershipOut::Inspected { report, .. } = out else {
            panic!("inspect answered {out:?}");
        };
        if report.owned_total == reactors {
            return report;
        }
        assert!(
            Instant::now() < deadline,
            "never owned them all: {report:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_node_serves_resp_over_the_reactors_it_owns_and_one_metrics_endpoint() {
    let config = one_node_config();
    let reactors = config.resp.as_ref().unwrap().keyspace_reactors;
    let node = Node::start(config).unwrap();
    assert_eq!(node.id(), 0);
    assert!(node.example_register().is_none());
    // A one-node cluster: the node is every reactor's home and creates
    // them all through the ownership protocol.
    let report = wait_until_owning(&node, reactors);
    assert!(
        report.blocked.is_empty() && report.pending_requests == 0,
        "{report:?}"
    );
    let before = metrics(&node);
    assert!(before.contains("roost_epoch{node=\"0\"}"), "{before}");
    let commands_before = resp_commands(&before);

    let mut client = TcpStream::connect(node.resp_addr().unwrap()).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    resp_round_trip(&mut client, &["SET", "k", "v"], b"+OK\r\n");
    resp_round_trip(&mut client, &["GET", "k"], b"$1\r\nv\r\n");
    // The database the front door serves is the node's own.
    let row = node.block_on(node.keyspace().unwrap().site_row("absent"));
    assert_eq!(row.unwrap(), None);
    let after = metrics(&node);
    assert!(
        resp_commands(&after) >= commands_before + 2,
        "{commands_before} -> {after}"
    );
    // The admin route answers the same inspection.
    let (code, body) = node
        .block_on(admin_get(
            node.admin_addr(),
            "/ownership/inspect",
            Duration::from_secs(5),
        ))
        .unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains(&format!("\"owned_total\":{reactors}")),
        "{body}"
    );
    node.stop();
}

#[test]
fn a_node_can_run_the_register_example_instead() {
    let mut config = one_node_config();
    config.protocol = NodeProtocol::ExampleRegister {
        bugs: Default::default(),
    };
    let node = Node::start(config).unwrap();
    assert!(node.ownership().is_none());
    // In-process callers reach the protocol through its handle, once the
    // one-node view is installed and the node serves.
    let handle = node.example_register().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let written = loop {
        let out = node
            .block_on(handle.request(RegisterCmd::Write(7)))
            .unwrap();
        if matches!(out, RegisterOut::Written { .. }) {
            break out;
        }
        assert!(Instant::now() < deadline, "never served: {out:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(matches!(written, RegisterOut::Written { .. }));
    let read = node.block_on(handle.request(RegisterCmd::Read)).unwrap();
    match read {
        RegisterOut::ReadDone { value, .. } => assert_eq!(value, 7),
        other => panic!("read answered {other:?}"),
    }
    // Its keyspace is the node's own: served at once.
    let mut client = TcpStream::connect(node.resp_addr().unwrap()).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    resp_round_trip(&mut client, &["SET", "k", "v"], b"+OK\r\n");
    node.stop();
}

#[test]
fn a_node_id_missing_from_the_configuration_is_a_clear_error() {
    let mut config = one_node_config();
    config.id = 5;
    match Node::start(config) {
        Err(error @ NodeError::NotConfigured { id: 5, .. }) => {
            assert!(error.to_string().contains("node 5"), "{error}");
        }
        Err(other) => panic!("wrong error: {other}"),
        Ok(_) => panic!("started a node the configuration does not name"),
    }
}

#[test]
fn a_node_without_a_client_port_still_runs_its_cluster_side() {
    let mut config = one_node_config();
    config.resp = None;
    let node = Node::start(config).unwrap();
    assert!(node.resp_addr().is_none());
    // The database is there all the same: the cluster moves its reactors.
    assert!(node.keyspace().is_some());
    let text = metrics(&node);
    assert!(text.contains("roost_epoch{node=\"0\"}"), "{text}");
    node.stop();
}

#[test]
fn a_node_keeps_its_membership_record_in_its_state_directory() {
    let dir = std::env::temp_dir().join(format!("roost-node-state-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let record = dir.join(roost_cluster::state_dir::RECORD_FILE);
    let mut config = one_node_config();
    config.resp = None;
    config.state_dir = Some(dir.clone());
    let node = Node::start(config.clone()).unwrap();
    // The first view is voted on and installed: its record is on disk.
    let deadline = Instant::now() + Duration::from_secs(10);
    let handle = node.ownership().expect("the default protocol");
    while !record.exists() || !node.block_on(handle.status()).unwrap().serving {
        assert!(Instant::now() < deadline, "no record in {}", dir.display());
        assert!(!node.cluster_stopped());
        std::thread::sleep(Duration::from_millis(20));
    }
    node.stop();
    // A damaged record stops the next start with an error naming it.
    let mut bytes = std::fs::read(&record).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&record, bytes).unwrap();
    match Node::start(config) {
        Err(error @ NodeError::Cluster(_)) => {
            let text = error.to_string();
            assert!(
                text.contains("checksum") && text.contains(&dir.display().to_string()),
                "{text}"
            );
        }
        Err(other) => panic!("wrong error: {other}"),
        Ok(_) => panic!("started from a corrupt record"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A node of a geo site needs the deployment's secret: its site links would
/// otherwise accept anyone. It refuses to start, saying what to add.
#[test]
fn a_geo_site_node_without_a_secret_refuses_to_start() {
    let mut config = one_node_config();
    let link = free_ports(2).unwrap();
    config.cluster.geo = Some(roost_cluster::config::GeoConfig {
        site: 0,
        sites: vec![
            vec![SocketAddr::from(([127, 0, 0, 1], link[0]))],
            vec![SocketAddr::from(([127, 0, 0, 1], link[1]))],
        ],
    });
    let error = Node::start(config).err().expect("refused");
    assert!(matches!(error, NodeError::Site { site: 0, .. }), "{error}");
    assert!(error.to_string().contains("[security]"), "{error}");
}

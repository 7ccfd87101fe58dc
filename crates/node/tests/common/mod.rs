//! Helpers shared by the in-process node tests: RESP over a raw socket, a
//! node's metrics and ownership report.

// Each test binary uses some of them.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use roost_cluster::config::{ClusterConfig, NodeAddr};
use roost_cluster::local_cluster::free_ports;
use roost_cluster::runtime::admin_get;
use roost_node::{Node, NodeConfig, NodeProtocol, NodeReactor};
use roost_ownership::{Inspection, OwnershipCmd, OwnershipOut, ReqId};

/// What `node`'s ownership protocol holds.
pub fn inspect(node: &Node) -> Inspection<NodeReactor> {
    let handle = node.ownership().unwrap();
    let req = ReqId(handle.next_request_id());
    match node.block_on(handle.request(OwnershipCmd::Inspect { req })) {
        Ok(OwnershipOut::Inspected { report, .. }) => report,
        other => panic!("inspect answered {other:?}"),
    }
}

/// Waits until the nodes own `reactors` keyspace reactors in all.
pub fn wait_created(nodes: &[Node], reactors: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while nodes.iter().map(|n| inspect(n).owned_total).sum::<usize>() != reactors {
        assert!(Instant::now() < deadline, "the reactors were not created");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A RESP connection to `node` (replies awaited up to 30 s).
pub fn client(node: &Node) -> TcpStream {
    let s = TcpStream::connect(node.resp_addr().unwrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

/// Sends one command as a RESP array.
pub fn send(stream: &mut TcpStream, args: &[&str]) {
    let mut frame = format!("*{}\r\n", args.len());
    for arg in args {
        frame.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(frame.as_bytes()).unwrap();
}

/// One reply line, its CRLF included.
pub fn line(stream: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n") {
        assert_eq!(stream.read(&mut byte).unwrap(), 1, "closed after {got:?}");
        got.push(byte[0]);
    }
    String::from_utf8(got).unwrap()
}

/// One command, the first line of its reply.
pub fn command(stream: &mut TcpStream, args: &[&str]) -> String {
    send(stream, args);
    line(stream)
}

/// INCR until it is acknowledged (a command that finds its reactor
/// unavailable answers an error and changed nothing).
pub fn incr(stream: &mut TcpStream, key: &str) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let reply = command(stream, &["INCR", key]);
        if let Some(n) = reply.strip_prefix(':') {
            return n.trim().parse().unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "INCR {key} kept failing: {reply}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A counter or gauge from the node's `/metrics`.
pub fn metric(node: &Node, name: &str) -> u64 {
    let (status, body) = node
        .block_on(admin_get(
            node.admin_addr(),
            "/metrics",
            Duration::from_secs(5),
        ))
        .unwrap();
    assert_eq!(status, 200);
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

/// One node alone in its cluster, on free ports, serving RESP on any free
/// port; Zeus; no state directory and no durability log.
pub fn one_node_config() -> NodeConfig {
    let ports = free_ports(2).unwrap();
    let cluster = ClusterConfig {
        nodes: vec![NodeAddr {
            id: 0,
            addr: std::net::SocketAddr::from(([127, 0, 0, 1], ports[0])),
            admin_addr: std::net::SocketAddr::from(([127, 0, 0, 1], ports[1])),
            resp_addr: None,
        }],
        ..ClusterConfig::local(1)
    };
    let resp = roost_resp::Config {
        bind: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        ..roost_resp::Config::default()
    };
    NodeConfig {
        cluster,
        id: 0,
        resp: Some(resp),
        protocol: NodeProtocol::default(),
        state_dir: None,
        durability: None,
    }
}

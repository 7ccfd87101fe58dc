//! Three nodes in one process, each with its own runtime, ports and
//! database: a RESP command on any node runs on the key's reactor, which
//! the Zeus ownership protocol moves to that node with its rows.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use roost_cluster::config::ClusterConfig;
use roost_node::Node;
use roost_ownership::{Access, OwnershipCmd, OwnershipOut, ReqId};

mod common;
use common::{command, incr, inspect, line};

const NODES: u32 = 3;
const REACTORS: usize = 4;

fn start_cluster() -> Vec<Node> {
    let cluster = ClusterConfig::loopback(NODES).unwrap();
    Node::start_in_process(&cluster, REACTORS).unwrap()
}

#[test]
fn a_command_on_any_node_moves_the_keys_reactor_there_with_its_rows() {
    let nodes = start_cluster();
    // Every reactor is created by its home node, exactly once.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let owned: usize = nodes.iter().map(|n| inspect(n).owned_total).sum();
        if owned == REACTORS {
            break;
        }
        assert!(Instant::now() < deadline, "created {owned} of {REACTORS}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut clients: Vec<TcpStream> = nodes
        .iter()
        .map(|n| {
            let s = TcpStream::connect(n.resp_addr().unwrap()).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            s
        })
        .collect();
    // Keys on every reactor, incremented round-robin from every node: each
    // increment sees the one before, wherever it ran.
    let keys: Vec<String> = (0..16).map(|i| format!("counter-{i}")).collect();
    let mut expected = vec![0i64; keys.len()];
    for round in 0..6 {
        for (k, key) in keys.iter().enumerate() {
            let node = (round + k) % NODES as usize;
            expected[k] += 1;
            assert_eq!(
                incr(&mut clients[node], key),
                expected[k],
                "{key} round {round}"
            );
        }
    }
    // Reads on every node see the latest value.
    for client in &mut clients {
        for (k, key) in keys.iter().enumerate() {
            let head = command(client, &["GET", key]);
            assert!(head.starts_with('$'), "GET {key}: {head}");
            assert_eq!(line(client).trim(), expected[k].to_string(), "GET {key}");
        }
    }
    // Afterwards: every reactor has exactly one owner, none is blocked.
    let reports: Vec<_> = nodes.iter().map(inspect).collect();
    let owned: usize = reports.iter().map(|r| r.owned_total).sum();
    assert_eq!(owned, REACTORS, "{reports:?}");
    assert!(reports.iter().all(|r| r.blocked_total == 0), "{reports:?}");
    for node in nodes {
        node.stop();
    }
}

/// With replication degree 1 (no readers) a reactor dies with its owner:
/// once the others dropped it from the view, a command on the reactor
/// fails at once and says why, instead of its transaction acquiring the
/// reactor again and again until it runs out of attempts.
#[test]
fn a_reactor_lost_with_its_owner_fails_clearly_elsewhere() {
    let mut nodes = start_cluster();
    for node in &nodes {
        let (status, body) = node
            .block_on(roost_cluster::runtime::admin_get(
                node.admin_addr(),
                "/replication/degree?degree=1",
                Duration::from_secs(5),
            ))
            .unwrap();
        assert_eq!(status, 200, "{body}");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while nodes.iter().map(|n| inspect(n).owned_total).sum::<usize>() != REACTORS {
        assert!(Instant::now() < deadline, "the reactors were not created");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut first = TcpStream::connect(nodes[0].resp_addr().unwrap()).unwrap();
    first
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    assert_eq!(incr(&mut first, "doomed"), 1);
    drop(first);
    // Node 0 owns every reactor it used; the old owner it took one from
    // stayed a reader, until node 0 asked it to leave (degree 1). Wait
    // until every node agrees: the owner names no readers, and no other
    // node still holds a replica or a request in flight (a reader that
    // saw the INV but not yet the VAL of its removal still holds the rows,
    // and would rightly keep the value alive after node 0 stops).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let owned = inspect(&nodes[0]).owned;
        let mut holders = Vec::new();
        for (n, node) in nodes.iter().enumerate() {
            let handle = node.ownership().unwrap();
            for key in &owned {
                let req = ReqId(handle.next_request_id());
                let cmd = OwnershipCmd::Describe {
                    key: key.clone(),
                    req,
                };
                match node.block_on(handle.request(cmd)) {
                    Ok(OwnershipOut::Described { meta, access, .. }) => {
                        let readers = meta.map_or(0, |m| m.o_replicas.readers.len());
                        if readers > 0 || (n > 0 && access != Access::None) {
                            holders.push((n, key.clone(), readers, access));
                        }
                    }
                    other => panic!("describe answered {other:?}"),
                }
            }
        }
        let settled = nodes.iter().all(|node| {
            let report = inspect(node);
            report.pending_requests == 0 && report.blocked_total == 0
        });
        if !owned.is_empty() && holders.is_empty() && settled {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "replicas stayed: {holders:?} (settled: {settled})"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // It stops, and the others drop it from the view.
    nodes.remove(0).stop();
    let mut other = TcpStream::connect(nodes[0].resp_addr().unwrap()).unwrap();
    other
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let asked = Instant::now();
        let head = command(&mut other, &["GET", "doomed"]);
        // A value would be a resurrection.
        assert!(
            head.starts_with('-'),
            "GET of a lost reactor answered {head}"
        );
        // The directory knows no owner; or this node was made the owner of
        // rows it never got.
        let clear = head.contains("no node is known to hold the reactor")
            || head.contains("could not install its rows");
        if clear {
            assert!(
                asked.elapsed() < Duration::from_secs(5),
                "the failure took {:?}: {head}",
                asked.elapsed()
            );
            break;
        }
        // Before the view change the old owner is still asked.
        assert!(Instant::now() < deadline, "never failed clearly: {head}");
        std::thread::sleep(Duration::from_millis(50));
    }
    for node in nodes {
        node.stop();
    }
}

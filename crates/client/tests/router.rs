//! The router against a real three-node cluster (in process, over real
//! sockets): `ROOST.OWNER` names each reactor's owner, requests routed by
//! it run where their reactors are (no ownership moves), and a reactor
//! that another node takes is followed once its ownership settles.

use std::time::{Duration, Instant};

use roost_client::redis;
use roost_client::{NodeAddr, RouteTable, Router, Value};
use roost_cluster::config::ClusterConfig;
use roost_cluster::runtime::admin_get;
use roost_node::Node;

const NODES: u32 = 3;
const REACTORS: usize = 8;

fn acquisitions(nodes: &[Node]) -> u64 {
    nodes
        .iter()
        .map(|node| {
            let (status, body) = node
                .block_on(admin_get(
                    node.admin_addr(),
                    "/metrics",
                    Duration::from_secs(5),
                ))
                .unwrap();
            assert_eq!(status, 200);
            body.lines()
                .find_map(|l| {
                    l.strip_prefix("roost_ownership_acquires_total ")?
                        .parse::<u64>()
                        .ok()
                })
                .expect("roost_ownership_acquires_total in /metrics")
        })
        .sum()
}

fn addrs(nodes: &[Node]) -> Vec<NodeAddr> {
    nodes
        .iter()
        .map(|n| NodeAddr {
            id: n.id(),
            addr: n.resp_addr().unwrap(),
        })
        .collect()
}

/// One key per reactor (tags `0`, `1`, ... until every reactor has one).
fn key_per_reactor(router: &mut Router) -> Vec<Vec<u8>> {
    let candidates: Vec<Vec<u8>> = (0..256)
        .map(|i| format!("k:{{{i}}}").into_bytes())
        .collect();
    let refs: Vec<&[u8]> = candidates.iter().map(Vec::as_slice).collect();
    let owners = router.owners(&refs).unwrap();
    let mut keys: Vec<Option<Vec<u8>>> = vec![None; REACTORS];
    for (key, owner) in candidates.iter().zip(owners) {
        keys[owner.reactor].get_or_insert_with(|| key.clone());
    }
    keys.into_iter()
        .map(|k| k.expect("256 tags cover 8 reactors"))
        .collect()
}

/// Waits until every node names an owner for every reactor.
fn wait_owned(router: &mut Router, keys: &[Vec<u8>]) {
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // One look at each node (they take turns).
        let known = (0..NODES).all(|_| {
            router
                .owners(&refs)
                .unwrap()
                .iter()
                .all(|o| o.node.is_some())
        });
        if known {
            return;
        }
        assert!(Instant::now() < deadline, "the reactors got no owners");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn routed_requests_run_at_the_owner_and_a_moved_reactor_is_followed() {
    let cluster = ClusterConfig::loopback(NODES).unwrap();
    let nodes = Node::start_in_process(&cluster, REACTORS).unwrap();
    // Routes move after two looks, however close together.
    let table = RouteTable::with_settle(Duration::ZERO);
    let mut router = Router::new(addrs(&nodes), table.clone());
    let keys = key_per_reactor(&mut router);
    wait_owned(&mut router, &keys);

    // Every node names the same owner of each reactor.
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let first = router.owners(&refs).unwrap();
    for _ in 1..NODES {
        assert_eq!(router.owners(&refs).unwrap(), first);
    }
    for (reactor, owner) in first.iter().enumerate() {
        assert_eq!(owner.reactor, reactor);
    }

    // Routed writes on every reactor move none of them.
    let before = acquisitions(&nodes);
    for round in 0..20 {
        for key in &keys {
            let reply = router
                .call(&[key], redis::cmd("SET").arg(key).arg(round))
                .unwrap();
            assert_eq!(reply, Value::Okay);
        }
    }
    assert_eq!(acquisitions(&nodes), before, "routed writes moved reactors");
    assert_eq!(table.len(), REACTORS);
    for (reactor, owner) in first.iter().enumerate() {
        assert_eq!(table.node_of(reactor), owner.node);
    }

    // A second router in the process shares the routes: it asks nothing.
    let mut second = Router::new(addrs(&nodes), table.clone());
    assert_eq!(second.route(&[&keys[0]]).unwrap(), first[0].node.unwrap());

    // Another node takes reactor 0 (a script's keys move to where it runs).
    let owner = first[0].node.unwrap();
    let taker = (owner + 1) % NODES;
    let con = router.connection(taker).unwrap();
    let script = redis::cmd("EVAL")
        .arg("return redis.call('INCR', KEYS[1])")
        .arg(1)
        .arg(format!(
            "n:{{{}}}",
            String::from_utf8_lossy(&keys[0][3..keys[0].len() - 1])
        ))
        .query::<Value>(con)
        .unwrap();
    assert_eq!(script, Value::Int(1));
    assert!(acquisitions(&nodes) > before, "the script moved no reactor");
    // One look is not enough to move the route; two in a row are.
    assert_eq!(router.follow().unwrap(), 0);
    assert_eq!(table.node_of(0), Some(owner));
    assert_eq!(router.follow().unwrap(), 1);
    assert_eq!(table.node_of(0), Some(taker));
    assert_eq!(second.route(&[&keys[0]]).unwrap(), taker);
    assert_eq!(table.moves(), 1);

    // Requests follow it there: no more moves.
    let after = acquisitions(&nodes);
    for round in 0..20 {
        router
            .call(&[&keys[0]], redis::cmd("SET").arg(&keys[0]).arg(round))
            .unwrap();
    }
    assert_eq!(acquisitions(&nodes), after);
    let mut stale = Router::new(addrs(&nodes), RouteTable::new());
    // A fresh router sees the new owner at first sight.
    assert_eq!(stale.route(&[&keys[0]]).unwrap(), taker);
}

#[test]
fn a_router_with_no_reachable_node_says_so() {
    let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = unused.local_addr().unwrap();
    drop(unused);
    let mut router = Router::new(vec![NodeAddr { id: 0, addr }], RouteTable::new());
    let error = router.route(&[b"k"]).unwrap_err();
    assert!(
        matches!(error, roost_client::RouteError::NoNode { .. }),
        "{error}"
    );
    assert!(matches!(
        router.route(&[]),
        Err(roost_client::RouteError::NoKeys)
    ));
}

#[test]
fn a_node_serving_all_the_load_sheds_reactors_to_the_others() {
    let cluster = ClusterConfig::loopback(NODES).unwrap();
    let nodes = Node::start_in_process(&cluster, REACTORS).unwrap();
    let table = RouteTable::with_settle(Duration::ZERO);
    let mut router = Router::new(addrs(&nodes), table.clone());
    let keys = key_per_reactor(&mut router);
    wait_owned(&mut router, &keys);

    // Node 0 takes every reactor (a script's keys move to where it runs),
    // and the routes follow.
    for key in &keys {
        let con = router.connection(0).unwrap();
        let reply = redis::cmd("EVAL")
            .arg("return redis.call('SET', KEYS[1], 'x')")
            .arg(1)
            .arg(key)
            .query::<Value>(con)
            .unwrap();
        assert_eq!(reply, Value::Okay);
    }
    for key in &keys {
        router.route(&[key]).unwrap();
    }
    router.follow().unwrap();
    router.follow().unwrap();
    for reactor in 0..REACTORS {
        assert_eq!(table.node_of(reactor), Some(0), "reactor {reactor}");
    }
    let write_all = |router: &mut Router, rounds: u32| {
        for round in 0..rounds {
            for key in &keys {
                let reply = router
                    .call(&[key], redis::cmd("SET").arg(key).arg(round))
                    .unwrap();
                assert_eq!(reply, Value::Okay);
            }
        }
    };
    // The balancer has seen the load: all at node 0.
    write_all(&mut router, 200);
    let moves = router.balance();
    assert!(moves.len() >= 2, "{moves:?}");
    assert!(moves.iter().all(|m| m.from == 0 && m.to != 0), "{moves:?}");
    let routed: std::collections::HashSet<u32> =
        (0..REACTORS).filter_map(|r| table.node_of(r)).collect();
    assert_eq!(
        routed.len(),
        NODES as usize,
        "routes on every node: {moves:?}"
    );
    // Requests go where the routes say, and the nodes there take the
    // reactors: ownership follows the plan. (Nodes 1 and 2 lost these
    // reactors to node 0 above, so at first they forward the writes; node
    // 0, seeing only forwarded writes, yields them.)
    let before = acquisitions(&nodes);
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        write_all(&mut router, 10);
        let owners = router.owners(&refs).unwrap();
        if owners
            .iter()
            .all(|o| o.node.is_some() && o.node == table.node_of(o.reactor))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "ownership did not follow the routes: {owners:?}, moves {moves:?}"
        );
    }
    assert!(acquisitions(&nodes) >= before + moves.len() as u64);
    // The plans right after a move move nothing (their windows measure
    // the move); then, balanced, a full window moves nothing either.
    for _ in 0..roost_client::balance::SETTLE_PLANS {
        write_all(&mut router, 10);
        assert_eq!(router.balance(), Vec::new());
    }
    write_all(&mut router, 200);
    assert_eq!(router.balance(), Vec::new());
}

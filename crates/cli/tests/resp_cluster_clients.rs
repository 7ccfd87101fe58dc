//! Real Redis clients against one database over three `roost node --protocol
//! ownership` processes (and a real etcd): redis-py (`scripts/resp_cluster.py`)
//! runs a MULTI/EXEC over keys owned by three different nodes, an FCALL
//! transfer between keys owned by two other nodes, and WATCH at one node
//! aborted by a write at another; redis-cli runs a MULTI/EXEC over keys owned
//! elsewhere. No hash tags, no CROSSSLOT, no MOVED: cluster-unaware clients.
//! A missing client fails the test, saying what to install.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use roost_check::resp_run::{zeus_unready, KEYSPACE_REACTORS};
use roost_cluster::local_cluster::{LocalCluster, LocalClusterConfig};

mod common;

use common::require_etcd;

const NODES: u32 = 3;

fn missing(why: &str) -> ! {
    panic!("{why}: run scripts/install-deps.sh (or apt-get install redis-tools python3-redis)");
}

/// `redis-cli -p PORT args...`, its output (the test fails if it cannot run).
fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .unwrap_or_else(|_| missing("redis-cli is not installed"));
    assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Which node `describe` says owns keyspace reactor `index`.
fn owner_of(cluster: &LocalCluster, index: usize) -> Option<u64> {
    let path = format!("/ownership/describe?key=keyspace/keyspace-{index}");
    (0..NODES).find_map(|node| {
        let (code, body) = cluster.admin(node, &path, Duration::from_secs(2)).ok()?;
        let json: serde_json::Value = serde_json::from_str(&body).ok()?;
        let described = json.get("Described")?;
        (code == 200 && described.get("access")?.as_str()? == "Owner").then_some(u64::from(node))
    })
}

/// Three keys in three different keyspace reactors (the keyspace hashes
/// keys to reactors; ownership moves whole reactors).
fn keys_in_distinct_reactors() -> (Vec<String>, Vec<usize>) {
    let (mut keys, mut reactors) = (Vec::new(), Vec::new());
    for j in 0.. {
        let key = format!("acct:{j}");
        let reactor = roost_resp::keyspace_index(key.as_bytes(), KEYSPACE_REACTORS);
        if !reactors.contains(&reactor) {
            keys.push(key);
            reactors.push(reactor);
        }
        if keys.len() == NODES as usize {
            break;
        }
    }
    (keys, reactors)
}

#[test]
fn redis_py_and_redis_cli_see_one_database_across_three_nodes() {
    require_etcd();
    let dir = std::env::temp_dir().join(format!("roost-resp-cluster-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut config =
        LocalClusterConfig::new(env!("CARGO_BIN_EXE_roost").into(), dir.clone(), NODES);
    config.protocol = "ownership";
    config.lease_ttl_s = 2;
    let cluster = LocalCluster::start(config).expect("start three roost nodes and etcd");
    let deadline = Instant::now() + Duration::from_secs(90);
    while let Some(why) = zeus_unready(&cluster, NODES) {
        assert!(Instant::now() < deadline, "the cluster did not form: {why}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let ports: Vec<u16> = (0..NODES)
        .map(|n| cluster.resp_addr(n).expect("a node's RESP port").port())
        .collect();

    // Key i written at node i: node i owns its reactor.
    let (keys, reactors) = keys_in_distinct_reactors();
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(redis_cli(ports[i], &["SET", key, "10"]).trim(), "OK");
    }
    let owners: Vec<Option<u64>> = reactors.iter().map(|r| owner_of(&cluster, *r)).collect();
    assert_eq!(
        owners,
        vec![Some(0), Some(1), Some(2)],
        "each key owned where it was written"
    );

    // redis-cli at node 2: one MULTI/EXEC over keys owned by nodes 0 and 1.
    let script = format!(
        "MULTI\nINCRBY {k0} 5\nDECRBY {k1} 5\nEXEC\nMGET {k0} {k1}\n",
        k0 = keys[0],
        k1 = keys[1]
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "printf '{}' | redis-cli -h 127.0.0.1 -p {}",
            script.replace('\n', "\\n"),
            ports[2]
        ))
        .output()
        .unwrap_or_else(|_| missing("redis-cli is not installed"));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        lines,
        ["OK", "QUEUED", "QUEUED", "15", "5", "15", "5"],
        "redis-cli MULTI/EXEC at node 2 over keys owned by nodes 0 and 1"
    );
    for port in &ports {
        let got = redis_cli(*port, &["MGET", &keys[0], &keys[1]]);
        assert_eq!(
            got.split_whitespace().collect::<Vec<_>>(),
            ["15", "5"],
            "read at {port}"
        );
    }

    // redis-py: MULTI/EXEC over three owners, FCALL across nodes, WATCH.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = ["python3", "/usr/bin/python3"]
        .into_iter()
        .find(|p| {
            Command::new(p)
                .args(["-c", "import redis"])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .unwrap_or_else(|| missing("python3 with redis-py is not installed"));
    let out = Command::new(python)
        .arg(root.join("scripts/resp_cluster.py"))
        .args(ports.iter().map(u16::to_string))
        .args(&keys)
        .output()
        .expect("run scripts/resp_cluster.py");
    assert!(
        out.status.success(),
        "redis-py against three nodes failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}

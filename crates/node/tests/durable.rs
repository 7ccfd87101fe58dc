//! A node's durability log (issue 21), in process: what it acknowledged
//! comes back when it starts again from its directory; a disk that fails
//! stops the writes with a clear error while reads go on.

use std::path::Path;
use std::time::{Duration, Instant};

use roost_durability::{DurabilityConfig, FaultInjector, SyncPolicy};
use roost_node::{Node, NodeConfig};

mod common;
use common::{client, command, incr, metric, wait_created};

const REACTORS: usize = 8;

fn one_node(dir: &Path, faults: &FaultInjector) -> Node {
    let node = Node::start(node_config(dir, faults)).unwrap();
    wait_created(std::slice::from_ref(&node), REACTORS);
    node
}

fn node_config(dir: &Path, faults: &FaultInjector) -> NodeConfig {
    let mut config = common::one_node_config();
    if let Some(resp) = config.resp.as_mut() {
        resp.keyspace_reactors = REACTORS;
    }
    let mut durability = DurabilityConfig::new(dir.join("durability"));
    durability.sync = SyncPolicy::Always;
    durability.faults = faults.clone();
    config.durability = Some(durability);
    config
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("roost-node-durable-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn a_node_started_again_from_its_directory_has_what_it_acknowledged() {
    let dir = temp_dir("restart");
    let faults = FaultInjector::new();
    let node = one_node(&dir, &faults);
    let mut c = client(&node);
    for i in 0..50 {
        assert_eq!(
            command(&mut c, &["SET", &format!("key-{i}"), &format!("value-{i}")]),
            "+OK\r\n"
        );
    }
    for _ in 0..7 {
        incr(&mut c, "counter");
    }
    assert_eq!(command(&mut c, &["DEL", "key-0"]), ":1\r\n");
    assert!(metric(&node, "roost_durability_syncs_total") > 0);
    drop(c);
    node.stop();

    let node = one_node(&dir, &faults);
    assert!(metric(&node, "roost_durability_recovered_reactors") > 0);
    let mut c = client(&node);
    assert_eq!(command(&mut c, &["EXISTS", "key-0"]), ":0\r\n");
    for i in 1..50 {
        assert_eq!(
            command(&mut c, &["GET", &format!("key-{i}")]),
            format!("${}\r\n", format!("value-{i}").len()),
            "key-{i}"
        );
        assert_eq!(common::line(&mut c), format!("value-{i}\r\n"));
    }
    // Versions go on from the recovered ones: the next write is applied.
    assert_eq!(incr(&mut c, "counter"), 8);
    drop(c);
    node.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failed_disk_refuses_writes_clearly_and_reads_go_on() {
    let dir = temp_dir("failed");
    let faults = FaultInjector::new();
    let node = one_node(&dir, &faults);
    let mut c = client(&node);
    assert_eq!(command(&mut c, &["SET", "kept", "1"]), "+OK\r\n");
    faults.fail_writes(true);
    let reply = command(&mut c, &["SET", "lost", "2"]);
    assert!(
        reply.starts_with("-ERR transaction outcome unknown")
            && reply.contains("durability log failed"),
        "{reply}"
    );
    // Sticky, even once the disk has room again: the node must restart.
    faults.fail_writes(false);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let reply = command(&mut c, &["SET", "later", "3"]);
        assert!(
            reply.starts_with("-ERR"),
            "a write after the failure: {reply}"
        );
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    // Reads are served.
    assert_eq!(command(&mut c, &["GET", "kept"]), "$1\r\n");
    assert_eq!(common::line(&mut c), "1\r\n");
    assert_eq!(metric(&node, "roost_durability_failed"), 1);
    assert!(metric(&node, "roost_durability_withheld_total") > 0);
    drop(c);
    node.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_corrupt_log_stops_the_node_from_starting_and_names_the_file() {
    let dir = temp_dir("corrupt");
    let faults = FaultInjector::new();
    let node = one_node(&dir, &faults);
    let mut c = client(&node);
    for i in 0..20 {
        assert_eq!(
            command(&mut c, &["SET", &format!("key-{i}"), "some value"]),
            "+OK\r\n"
        );
    }
    drop(c);
    node.stop();
    // One flipped bit in the middle of the log, far from its tail.
    let durability = dir.join("durability");
    let segment = std::fs::read_dir(&durability)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .expect("a log segment");
    let mut bytes = std::fs::read(&segment).unwrap();
    assert!(bytes.len() > 1_000, "{} bytes", bytes.len());
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x10;
    std::fs::write(&segment, &bytes).unwrap();
    let error = match Node::start(node_config(&dir, &faults)) {
        Ok(_) => panic!("a node started over a corrupt log"),
        Err(error) => error.to_string(),
    };
    let name = segment.file_name().unwrap().to_str().unwrap();
    assert!(
        error.contains("durability log") && error.contains(name),
        "{error}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

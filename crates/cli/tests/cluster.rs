//! Multi-process tests of the cluster substrate: real `roost node` processes on
//! loopback. A SIGKILLed node is removed only after its lease expired and
//! rejoins in a newer epoch when restarted; a partitioned node stops serving
//! when its lease lapses, and rejoins once the partition heals.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use roost_cluster::runtime::StatusReport;

const HEARTBEAT_MS: u64 = 50;
const SUSPECT_MS: u64 = 150;
const LEASE_MS: u64 = 400;
const DRIFT_MS: u64 = 20;
/// Bound on every wait in these tests.
const PATIENCE: Duration = Duration::from_secs(15);

struct Cluster {
    dir: PathBuf,
    config: PathBuf,
    admins: Vec<SocketAddr>,
    children: Vec<Option<Child>>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Ports the OS hands out now (released at once; a clash is unlikely).
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

impl Cluster {
    fn start(name: &str, nodes: usize) -> Cluster {
        let dir = std::env::temp_dir().join(format!("roost-cluster-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ports = free_ports(nodes * 2);
        let mut text = format!(
            "[membership]\nheartbeat_interval_ms = {HEARTBEAT_MS}\nsuspect_after_ms = {SUSPECT_MS}\n\
             lease_duration_ms = {LEASE_MS}\nclock_drift_margin_ms = {DRIFT_MS}\nproposal_timeout_ms = 800\n"
        );
        let mut admins = Vec::new();
        for i in 0..nodes {
            let (cluster, admin) = (ports[2 * i], ports[2 * i + 1]);
            text += &format!(
                "\n[[node]]\nid = {i}\naddr = \"127.0.0.1:{cluster}\"\nadmin_addr = \"127.0.0.1:{admin}\"\n"
            );
            admins.push(SocketAddr::from(([127, 0, 0, 1], admin)));
        }
        let config = dir.join("cluster.toml");
        std::fs::write(&config, text).unwrap();
        let mut cluster = Cluster {
            dir,
            config,
            admins,
            children: (0..nodes).map(|_| None).collect(),
        };
        for i in 0..nodes {
            cluster.spawn(i);
        }
        cluster
    }

    fn spawn(&mut self, i: usize) {
        let log = std::fs::File::create(self.dir.join(format!("node{i}.log"))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_roost"))
            .args(["node", "--id", &i.to_string(), "--config"])
            .arg(&self.config)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn roost node");
        self.children[i] = Some(child);
    }

    fn sigkill(&mut self, i: usize) {
        let mut child = self.children[i].take().expect("running");
        child.kill().expect("SIGKILL");
        child.wait().unwrap();
    }

    fn get(&self, i: usize, path: &str) -> Option<String> {
        http_get(self.admins[i], path)
    }

    fn status(&self, i: usize) -> Option<StatusReport> {
        serde_json::from_str(&self.get(i, "/status")?).ok()
    }

    /// Polls node `i` every 10 ms until `done` holds; returns the status and when.
    fn wait_for(
        &self,
        i: usize,
        what: &str,
        done: impl Fn(&StatusReport) -> bool,
    ) -> (StatusReport, Instant) {
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            if let Some(status) = self.status(i) {
                if done(&status) {
                    return (status, Instant::now());
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!(
            "node {i}: timed out waiting for {what}; last status {:?}",
            self.status(i)
        );
    }
}

fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(300)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
}

fn all_members(status: &StatusReport, n: u32) -> bool {
    status.members == (0..n).collect::<Vec<_>>() && status.serving
}

#[test]
fn killed_node_is_removed_after_its_lease_and_rejoins_in_a_newer_epoch() {
    let mut cluster = Cluster::start("kill", 3);
    let (formed, _) = cluster.wait_for(0, "all three members", |s| all_members(s, 3));
    for i in 1..3 {
        cluster.wait_for(i, "the first view", |s| {
            s.epoch == formed.epoch && s.serving
        });
    }
    let written = cluster.get(0, "/register/write?value=42").expect("write");
    assert!(written.contains("Written"), "{written}");

    let killed_at = Instant::now();
    cluster.sigkill(1);
    let (survivors, moved_at) = cluster.wait_for(0, "a view without node 1", |s| {
        s.epoch > formed.epoch && !s.members.contains(&1)
    });
    let waited_ms = moved_at.duration_since(killed_at).as_millis() as u64;
    // Node 1's last lease grant was at most one heartbeat before the kill, and
    // no survivor declares it dead before that grant plus the lease (and the
    // drift margin) has passed.
    assert!(
        waited_ms >= LEASE_MS - HEARTBEAT_MS,
        "new epoch after only {waited_ms} ms, before node 1's lease could expire"
    );
    assert_eq!(survivors.members, vec![0, 2]);
    let dead = survivors.nodes.iter().find(|n| n.id == 1).unwrap();
    assert_eq!(serde_json::to_value(dead.state).unwrap(), "dead");
    cluster.wait_for(2, "the same view", |s| {
        s.epoch == survivors.epoch && s.serving
    });
    assert!(cluster.status(0).unwrap().serving, "survivors keep serving");

    cluster.spawn(1);
    let (rejoined, _) = cluster.wait_for(1, "rejoin", |s| {
        s.epoch > survivors.epoch && s.members.contains(&1) && s.serving
    });
    assert!(rejoined.epoch > survivors.epoch);
    cluster.wait_for(0, "node 1 back", |s| {
        s.epoch == rejoined.epoch && s.members == vec![0, 1, 2]
    });
    // The restarted replica recovered the register from a majority.
    let deadline = Instant::now() + PATIENCE;
    let read = loop {
        let read = cluster.get(1, "/register/read").unwrap_or_default();
        if read.contains("ReadDone") || Instant::now() > deadline {
            break read;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(read.contains("\"value\":42"), "{read}");
}

#[test]
fn partitioned_node_stops_serving_when_its_lease_lapses() {
    let cluster = Cluster::start("partition", 3);
    let (formed, _) = cluster.wait_for(0, "all three members", |s| all_members(s, 3));
    cluster.wait_for(2, "serving", |s| s.epoch == formed.epoch && s.serving);

    // Node 2 cuts itself off from 0 and 1, both directions.
    let cut_at = Instant::now();
    let chaos = cluster.get(2, "/chaos?partition=0,1").expect("chaos");
    assert!(chaos.contains("\"partitioned\":[0,1]"), "{chaos}");
    let (_, stopped_at) = cluster.wait_for(2, "not serving", |s| !s.serving);
    let stopped_ms = stopped_at.duration_since(cut_at).as_millis() as u64;
    assert!(
        stopped_ms <= LEASE_MS + 300,
        "node 2 served {stopped_ms} ms after the cut (lease {LEASE_MS} ms)"
    );
    let refused = cluster.get(2, "/register/read").unwrap();
    assert!(refused.contains("NotServing"), "{refused}");

    let (survivors, moved_at) = cluster.wait_for(0, "a view without node 2", |s| {
        s.epoch > formed.epoch && !s.members.contains(&2)
    });
    assert!(
        moved_at >= stopped_at || moved_at.duration_since(cut_at).as_millis() as u64 >= LEASE_MS,
        "the survivors removed node 2 while it could still serve"
    );
    assert!(cluster
        .get(0, "/register/write?value=7")
        .unwrap()
        .contains("Written"));

    cluster.get(2, "/chaos/heal").expect("heal");
    let (back, _) = cluster.wait_for(2, "rejoin after healing", |s| {
        s.epoch > survivors.epoch && s.members.contains(&2) && s.serving
    });
    assert_eq!(back.members, vec![0, 1, 2]);
}

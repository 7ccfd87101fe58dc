//! Multi-process tests of the cluster substrate: real `roost node` processes on
//! loopback, with membership from a real etcd (Debian's etcd-server, started
//! by the test) and with the peer lease protocol. A SIGKILLed node is removed
//! only after its lease expired and rejoins in a newer epoch when restarted; a
//! partitioned node stops serving when its lease lapses, and rejoins once the
//! partition heals; the membership survives a restart of etcd.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::etcd_or_skip;
use roost_cluster::local_etcd::LocalEtcd;
use roost_cluster::runtime::StatusReport;

const HEARTBEAT_MS: u64 = 50;
const SUSPECT_MS: u64 = 150;
const LEASE_MS: u64 = 400;
const DRIFT_MS: u64 = 20;
/// Bound on every wait in these tests.
const PATIENCE: Duration = Duration::from_secs(15);

/// etcd-mode timing: leases of one second, refreshed every quarter.
const TTL_MS: u64 = 1000;
const KEEPALIVE_MS: u64 = 250;
const POLL_MS: u64 = 50;
const ETCD_DRIFT_MS: u64 = 50;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Membership {
    Peer,
    Etcd,
}

struct Cluster {
    dir: PathBuf,
    config: PathBuf,
    admins: Vec<SocketAddr>,
    peers: Vec<SocketAddr>,
    children: Vec<Option<Child>>,
    etcd: Option<LocalEtcd>,
    etcd_ports: (u16, u16),
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.etcd = None;
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
    fn start(name: &str, nodes: usize, membership: Membership) -> Cluster {
        let dir = std::env::temp_dir().join(format!("roost-cluster-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ports = free_ports(nodes * 2 + 2);
        let etcd_ports = (ports[nodes * 2], ports[nodes * 2 + 1]);
        let mut text = format!(
            "[membership]\nheartbeat_interval_ms = {HEARTBEAT_MS}\nsuspect_after_ms = {SUSPECT_MS}\n\
             lease_duration_ms = {LEASE_MS}\nclock_drift_margin_ms = {DRIFT_MS}\nproposal_timeout_ms = 800\n"
        );
        if membership == Membership::Etcd {
            // The etcd clusters also authenticate node-to-node connections.
            let secret = dir.join("cluster.secret");
            std::fs::write(&secret, "3c0ffee5ec0e7000000000000000beef").unwrap();
            text += &format!(
                "\n[security]\nsecret_file = {:?}\n",
                secret.display().to_string()
            );
            text += &format!(
                "\n[coordinator]\netcd_endpoints = [\"127.0.0.1:{}\"]\nlease_ttl_s = {}\n\
                 keepalive_interval_ms = {KEEPALIVE_MS}\npoll_interval_ms = {POLL_MS}\n\
                 request_timeout_ms = 200\nclock_drift_margin_ms = {ETCD_DRIFT_MS}\n",
                etcd_ports.0,
                TTL_MS / 1000
            );
        }
        let mut admins = Vec::new();
        let mut peers = Vec::new();
        for i in 0..nodes {
            let (cluster, admin) = (ports[2 * i], ports[2 * i + 1]);
            text += &format!(
                "\n[[node]]\nid = {i}\naddr = \"127.0.0.1:{cluster}\"\nadmin_addr = \"127.0.0.1:{admin}\"\n"
            );
            admins.push(SocketAddr::from(([127, 0, 0, 1], admin)));
            peers.push(SocketAddr::from(([127, 0, 0, 1], cluster)));
        }
        let config = dir.join("cluster.toml");
        std::fs::write(&config, text).unwrap();
        let mut cluster = Cluster {
            dir,
            config,
            admins,
            peers,
            children: (0..nodes).map(|_| None).collect(),
            etcd: None,
            etcd_ports,
        };
        if membership == Membership::Etcd {
            cluster.start_etcd();
        }
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

    /// Starts (or restarts, on the same data) the cluster's etcd.
    fn start_etcd(&mut self) {
        let (client, peer) = self.etcd_ports;
        let etcd = LocalEtcd::start(
            "etcd",
            &self.dir.join("etcd"),
            SocketAddr::from(([127, 0, 0, 1], client)),
            SocketAddr::from(([127, 0, 0, 1], peer)),
        )
        .expect("etcd (Debian's etcd-server; .ci/run installs it) must start");
        self.etcd = Some(etcd);
    }

    fn sigkill(&mut self, i: usize) {
        let mut child = self.children[i].take().expect("running");
        child.kill().expect("SIGKILL");
        child.wait().unwrap();
    }

    /// Writes the register through node `i`, retrying while its replicas are
    /// still recovering after a view change; fails after `PATIENCE`.
    fn write_until_written(&self, i: usize, value: u64) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let answer = self
                .get(i, &format!("/register/write?value={value}"))
                .unwrap_or_default();
            if answer.contains("Written") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "write of {value} never done: {answer}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Reads the register through node `i` until it answers (its replica has
    /// recovered); returns the answer.
    fn read_until_done(&self, i: usize) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let answer = self.get(i, "/register/read").unwrap_or_default();
            if answer.contains("ReadDone") {
                return answer;
            }
            assert!(Instant::now() < deadline, "node {i} never read: {answer}");
            std::thread::sleep(Duration::from_millis(20));
        }
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
fn peer_killed_node_is_removed_after_its_lease_and_rejoins_in_a_newer_epoch() {
    let mut cluster = Cluster::start("kill", 3, Membership::Peer);
    let (formed, _) = cluster.wait_for(0, "all three members", |s| all_members(s, 3));
    for i in 1..3 {
        cluster.wait_for(i, "the first view", |s| {
            s.epoch == formed.epoch && s.serving
        });
    }
    cluster.write_until_written(0, 42);
    // Every replica has recovered before one is lost (ABD recovers a
    // restarted replica from a majority of recovered ones).
    for i in 0..3 {
        cluster.read_until_done(i);
    }

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
fn peer_partitioned_node_stops_serving_when_its_lease_lapses() {
    let cluster = Cluster::start("partition", 3, Membership::Peer);
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
    cluster.wait_for(1, "the survivors' view", |s| s.epoch >= survivors.epoch);
    cluster.write_until_written(0, 7);

    cluster.get(2, "/chaos/heal").expect("heal");
    let (back, _) = cluster.wait_for(2, "rejoin after healing", |s| {
        s.epoch > survivors.epoch && s.members.contains(&2) && s.serving
    });
    assert_eq!(back.members, vec![0, 1, 2]);
}

/// Polls node `watched` and node `observer` in turn until the observer's view
/// drops `watched`; fails if the observer drops it before `watched` was seen
/// to stop serving (a removal before the removed node's lease lapsed).
fn removal_follows_lapse(
    cluster: &Cluster,
    watched: usize,
    observer: usize,
    after: u64,
) -> (Instant, Instant, StatusReport) {
    let deadline = Instant::now() + PATIENCE;
    let mut stopped_at = None;
    while Instant::now() < deadline {
        if stopped_at.is_none() && cluster.status(watched).is_some_and(|s| !s.serving) {
            stopped_at = Some(Instant::now());
        }
        if let Some(s) = cluster.status(observer) {
            if s.epoch > after && !s.members.contains(&(watched as u32)) {
                let stopped_at = stopped_at.unwrap_or_else(|| {
                    panic!("node {observer} removed node {watched} while it was still serving")
                });
                return (stopped_at, Instant::now(), s);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("no view without node {watched} in time");
}

#[test]
fn etcd_killed_node_is_removed_after_its_lease_and_rejoins_in_a_newer_epoch() {
    if !etcd_or_skip("etcd_killed_node_is_removed_after_its_lease_and_rejoins_in_a_newer_epoch") {
        return;
    }
    let mut cluster = Cluster::start("etcd-kill", 3, Membership::Etcd);
    let (formed, _) = cluster.wait_for(0, "all three members", |s| all_members(s, 3));
    assert_eq!(formed.membership, "etcd");
    for i in 1..3 {
        cluster.wait_for(i, "the same view", |s| s.epoch >= formed.epoch && s.serving);
    }
    cluster.write_until_written(0, 42);
    assert_eq!(formed.transport.auth_failures, 0);
    // A process without the secret that connects to node 0's cluster port and
    // speaks the envelope protocol is refused; node 0 keeps serving.
    {
        let mut impostor = TcpStream::connect(cluster.peers[0]).unwrap();
        let _ = impostor.write_all(&[0, 0, 0, 8, 1, 0, 0, 0, 2, 0, 0, 0]);
        let mut buf = [0u8; 16];
        impostor
            .set_read_timeout(Some(Duration::from_secs(3)))
            .unwrap();
        let closed = matches!(impostor.read(&mut buf), Ok(0) | Err(_));
        assert!(
            closed,
            "node 0 kept talking to a connection without the secret"
        );
    }
    let (refused, _) = cluster.wait_for(0, "the impostor counted", |s| {
        s.transport.auth_failures >= 1
    });
    assert!(refused.serving);
    // Every replica has recovered before one is lost (ABD recovers a
    // restarted replica from a majority of recovered ones).
    for i in 0..3 {
        cluster.read_until_done(i);
    }

    let killed_at = Instant::now();
    cluster.sigkill(1);
    let (survivors, moved_at) = cluster.wait_for(0, "a view without node 1", |s| {
        s.epoch > formed.epoch && !s.members.contains(&1)
    });
    let waited_ms = moved_at.duration_since(killed_at).as_millis() as u64;
    // Node 1 refreshed its lease at most one keep-alive interval (plus a poll)
    // before the kill; etcd deletes its registration only when the lease
    // expires, and only then may a view drop it.
    assert!(
        waited_ms >= TTL_MS - KEEPALIVE_MS - POLL_MS,
        "new epoch {waited_ms} ms after the kill, before node 1's lease could expire"
    );
    assert_eq!(survivors.members, vec![0, 2]);
    let dead = survivors.nodes.iter().find(|n| n.id == 1).unwrap();
    assert_eq!(serde_json::to_value(dead.state).unwrap(), "dead");
    cluster.wait_for(2, "the same view", |s| {
        s.epoch >= survivors.epoch && s.serving
    });

    cluster.spawn(1);
    let (rejoined, _) = cluster.wait_for(1, "rejoin", |s| {
        s.epoch > survivors.epoch && s.members.contains(&1) && s.serving
    });
    assert_ne!(rejoined.incarnation, formed.incarnation);
    cluster.wait_for(0, "node 1 back", |s| {
        s.epoch >= rejoined.epoch && s.members == vec![0, 1, 2]
    });
    let read = cluster.read_until_done(1);
    assert!(read.contains("\"value\":42"), "{read}");
}

#[test]
fn etcd_partitioned_node_stops_serving_before_it_is_removed_and_rejoins() {
    if !etcd_or_skip("etcd_partitioned_node_stops_serving_before_it_is_removed_and_rejoins") {
        return;
    }
    let cluster = Cluster::start("etcd-cut", 3, Membership::Etcd);
    let (formed, _) = cluster.wait_for(0, "all three members", |s| all_members(s, 3));
    cluster.wait_for(2, "serving", |s| s.epoch >= formed.epoch && s.serving);
    for i in 0..3 {
        cluster.read_until_done(i);
    }
    let formed_epoch = cluster.status(0).unwrap().epoch;

    // Node 2 loses etcd: its lease can no longer be refreshed.
    let cut_at = Instant::now();
    let cut = cluster.get(2, "/chaos/coordinator?cut=1").expect("chaos");
    assert!(cut.contains("\"cut\":true"), "{cut}");
    let (stopped_at, _, survivors) = removal_follows_lapse(&cluster, 2, 0, formed_epoch);
    let stopped_ms = stopped_at.duration_since(cut_at).as_millis() as u64;
    assert!(
        stopped_ms <= TTL_MS + 200,
        "node 2 served {stopped_ms} ms after losing etcd (lease {TTL_MS} ms)"
    );
    assert_eq!(survivors.members, vec![0, 1]);
    let refused = cluster.get(2, "/register/read").unwrap();
    assert!(refused.contains("NotServing"), "{refused}");
    cluster.wait_for(1, "the survivors' view", |s| s.epoch >= survivors.epoch);
    cluster.write_until_written(0, 7);

    cluster.get(2, "/chaos/heal").expect("heal");
    let (back, _) = cluster.wait_for(2, "rejoin after healing", |s| {
        s.epoch > survivors.epoch && s.members.contains(&2) && s.serving
    });
    assert_eq!(back.members, vec![0, 1, 2]);
}

#[test]
fn etcd_membership_survives_an_etcd_restart() {
    if !etcd_or_skip("etcd_membership_survives_an_etcd_restart") {
        return;
    }
    let mut cluster = Cluster::start("etcd-restart", 2, Membership::Etcd);
    cluster.wait_for(0, "both members", |s| all_members(s, 2));
    cluster.sigkill(1);
    let (before, _) = cluster.wait_for(0, "a view without node 1", |s| s.members == vec![0]);
    assert!(before.epoch >= 2, "{before:?}");

    // SIGKILL etcd and start it again on the same data directory.
    cluster.etcd = None;
    let (lapsed, _) = cluster.wait_for(0, "not serving without etcd", |s| !s.serving);
    assert_eq!(lapsed.epoch, before.epoch);
    cluster.start_etcd();
    let (after, _) = cluster.wait_for(0, "serving again", |s| s.serving);
    // The view (and its epoch) came back from etcd's disk, not from scratch.
    assert!(after.epoch >= before.epoch, "{after:?} after {before:?}");
    cluster.spawn(1);
    let (rejoined, _) = cluster.wait_for(1, "node 1 rejoins", |s| s.serving);
    assert!(rejoined.epoch > before.epoch, "{rejoined:?}");
}

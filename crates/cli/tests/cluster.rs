//! Multi-process tests of the cluster substrate: real `roost node` processes on
//! loopback, with membership from a real etcd (Debian's etcd-server, started
//! by the test) and with the peer lease protocol. A SIGKILLed node is removed
//! only after its lease expired and rejoins in a newer epoch when restarted; a
//! partitioned node stops serving when its lease lapses, and rejoins once the
//! partition heals; the membership survives a restart of etcd.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

mod common;

use common::require_etcd;
use roost_cluster::local_cluster::{LocalCluster, LocalClusterConfig};
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Membership {
    Peer,
    Etcd,
}

/// A test cluster: [`LocalCluster`] (node processes with a cluster secret,
/// and a local etcd in etcd mode) with the test's timing and waits.
struct Cluster {
    inner: LocalCluster,
    /// One cluster at a time in this binary: each picks free ports and
    /// releases them before its processes bind, so two starting at once
    /// could be handed the same ones (a node that never answers).
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Cluster {
    fn start(name: &str, nodes: u32, membership: Membership) -> Cluster {
        let one_at_a_time = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let dir = std::env::temp_dir().join(format!("roost-cluster-{name}-{}", std::process::id()));
        let mut config =
            LocalClusterConfig::new(PathBuf::from(env!("CARGO_BIN_EXE_roost")), dir, nodes);
        config.etcd = membership == Membership::Etcd;
        config.lease_ttl_s = TTL_MS / 1000;
        config.keepalive_interval_ms = KEEPALIVE_MS;
        config.poll_interval_ms = POLL_MS;
        config.extra_toml = format!(
            "[membership]\nheartbeat_interval_ms = {HEARTBEAT_MS}\nsuspect_after_ms = {SUSPECT_MS}\n\
             lease_duration_ms = {LEASE_MS}\nclock_drift_margin_ms = {DRIFT_MS}\nproposal_timeout_ms = 800\n"
        );
        let inner = LocalCluster::start(config).expect(
            "the cluster starts (etcd mode needs Debian's etcd-server; scripts/install-deps.sh installs it)",
        );
        Cluster {
            inner,
            _one_at_a_time: one_at_a_time,
        }
    }

    fn spawn(&mut self, i: usize) {
        self.inner.start_node(i as u32).expect("restart a node");
    }

    fn sigkill(&mut self, i: usize) {
        self.inner.kill(i as u32).expect("SIGKILL a node");
    }

    fn kill_etcd(&mut self) {
        self.inner.kill_etcd();
    }

    fn restart_etcd(&mut self) {
        self.inner
            .restart_etcd()
            .expect("etcd restarts on its data");
    }

    fn cluster_addr(&self, i: usize) -> SocketAddr {
        self.inner
            .cluster_addr(i as u32)
            .expect("a configured node")
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
        match self.inner.admin(i as u32, path, Duration::from_secs(3)) {
            Ok((200, body)) => Some(body),
            _ => None,
        }
    }

    fn status(&self, i: usize) -> Option<StatusReport> {
        self.inner.status(i as u32)
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
    // Both survivors serve the survivors' view (node 0 may sit between two
    // lease grants for a moment on a loaded machine: it serves again
    // within the wait, in that same view, or the wait fails).
    cluster.wait_for(0, "survivors keep serving", |s| {
        s.epoch == survivors.epoch && s.serving
    });

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
    // Both polled in one loop: the survivors must not drop node 2 before it
    // was seen to stop serving.
    let (stopped_at, _, survivors) = removal_follows_lapse(&cluster, 2, 0, formed.epoch);
    let stopped_ms = stopped_at.duration_since(cut_at).as_millis() as u64;
    assert!(
        stopped_ms <= LEASE_MS + 300,
        "node 2 served {stopped_ms} ms after the cut (lease {LEASE_MS} ms)"
    );
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
    require_etcd();
    let mut cluster = Cluster::start("etcd-kill", 3, Membership::Etcd);
    let (formed, _) = cluster.wait_for(0, "all three members", |s| all_members(s, 3));
    assert_eq!(formed.membership, "etcd");
    // Every node serves Redis clients on its RESP port.
    {
        let addr = cluster.inner.resp_addr(2).unwrap();
        let mut client = TcpStream::connect(addr).expect("node 2's RESP port");
        client
            .set_read_timeout(Some(Duration::from_secs(3)))
            .unwrap();
        client.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
        let mut reply = [0u8; 7];
        client.read_exact(&mut reply).unwrap();
        assert_eq!(&reply, b"+PONG\r\n");
    }
    for i in 1..3 {
        cluster.wait_for(i, "the same view", |s| s.epoch >= formed.epoch && s.serving);
    }
    cluster.write_until_written(0, 42);
    assert_eq!(formed.transport.auth_failures, 0);
    // A process without the secret that connects to node 0's cluster port and
    // speaks the envelope protocol is refused; node 0 keeps serving.
    {
        let mut impostor = TcpStream::connect(cluster.cluster_addr(0)).unwrap();
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
    require_etcd();
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
    require_etcd();
    let mut cluster = Cluster::start("etcd-restart", 2, Membership::Etcd);
    cluster.wait_for(0, "both members", |s| all_members(s, 2));
    cluster.sigkill(1);
    let (before, _) = cluster.wait_for(0, "a view without node 1", |s| s.members == vec![0]);
    assert!(before.epoch >= 2, "{before:?}");

    // SIGKILL etcd and start it again on the same data directory.
    cluster.kill_etcd();
    let (lapsed, _) = cluster.wait_for(0, "not serving without etcd", |s| !s.serving);
    assert_eq!(lapsed.epoch, before.epoch);
    cluster.restart_etcd();
    cluster.wait_for(0, "serving again", |s| s.serving);
    cluster.spawn(1);
    let (rejoined, _) = cluster.wait_for(1, "node 1 rejoins", |s| s.serving);
    // The epochs continued from etcd's disk: an etcd that forgot them would
    // start over at epoch 1, and node 1's rejoin would be at most epoch 2.
    assert!(
        rejoined.epoch > before.epoch,
        "{rejoined:?} after {before:?}"
    );
}

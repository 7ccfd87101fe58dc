//! `roost up --nodes 3` as a new user runs it: with no etcd on the machine it
//! says so and uses the built-in membership; with etcd installed it starts
//! one; with an etcd already running it uses that. Each time `roost status`
//! shows three live members. Real processes on loopback ports of their own.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;
mod resp_client;

use roost_cluster::local_cluster::free_ports;
use roost_cluster::local_etcd::LocalEtcd;
use roost_cluster::membership::Health;
use roost_cluster::runtime::StatusReport;

const NODES: u32 = 3;
/// Bound on every wait in these tests.
const PATIENCE: Duration = Duration::from_secs(20);

static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A scratch directory holding the cluster file, the data directory and a
/// `bin/` that stands in for `PATH`.
struct Scratch {
    dir: PathBuf,
    config: PathBuf,
    resp_base: u16,
    /// An etcd's client port (its peer port is the next one), free at start.
    etcd_port: u16,
}

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("roost-up-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        // One run of consecutive free ports, so none of them collide: RESP
        // ports first (node i on base + i), then cluster and admin ports, then
        // two for an etcd (client, peer).
        let n = NODES as u16;
        let base = free_run(3 * n + 2);
        let mut toml = String::new();
        for i in 0..n {
            toml.push_str(&format!(
                "[[node]]\nid = {i}\naddr = \"127.0.0.1:{}\"\nadmin_addr = \"127.0.0.1:{}\"\n",
                base + n + i,
                base + 2 * n + i
            ));
        }
        let config = dir.join("cluster.toml");
        std::fs::write(&config, toml).unwrap();
        Scratch {
            dir,
            config,
            resp_base: base,
            etcd_port: base + 3 * n,
        }
    }

    /// `roost up` with this scratch's configuration; `path` becomes its
    /// `PATH`. Returns the child and its stdout lines as they come.
    fn up(&self, path: &Path, extra: &[&str]) -> (Up, mpsc::Receiver<String>) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_roost"))
            .arg("up")
            .arg("--config")
            .arg(&self.config)
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .args(["--resp-port", &self.resp_base.to_string()])
            .args(extra)
            .env("PATH", path)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(self.dir.join("up.stderr")).unwrap())
            .spawn()
            .expect("roost up starts");
        let stdout = child.stdout.take().unwrap();
        let (lines_tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
        (Up(Some(child)), lines)
    }

    /// `roost status --json --config ..` until every node is a live member
    /// and serving; returns that report.
    fn wait_for_three_live(&self) -> StatusReport {
        let deadline = Instant::now() + PATIENCE;
        let mut last = String::new();
        while Instant::now() < deadline {
            let out = Command::new(env!("CARGO_BIN_EXE_roost"))
                .args(["status", "--json", "--config"])
                .arg(&self.config)
                .output()
                .unwrap();
            last = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            if let Ok(status) = serde_json::from_slice::<StatusReport>(&out.stdout) {
                let live = status
                    .nodes
                    .iter()
                    .filter(|n| n.member && n.state == Health::Live)
                    .count();
                if status.serving && status.members == [0, 1, 2] && live == NODES as usize {
                    return status;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("roost status never showed {NODES} live members; last: {last}");
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `n` consecutive free ports (their first).
fn free_run(n: u16) -> u16 {
    for _ in 0..100 {
        let first = free_ports(1).unwrap()[0];
        if first < 60000 && (0..n).all(|i| TcpListener::bind(("127.0.0.1", first + i)).is_ok()) {
            return first;
        }
    }
    panic!("no {n} consecutive free ports");
}

/// How long `roost up` may take to list its nodes: starting an etcd alone
/// may take its 15 s readiness wait on a loaded 2-core machine.
const FIRST_LINES_PATIENCE: Duration = Duration::from_secs(60);

impl Scratch {
    /// The first stdout lines of `roost up`, up to the one that lists the
    /// nodes. If it exits or stalls first, the panic shows what it said on
    /// stderr (the reason a CI run failed is then in the log).
    fn first_lines(&self, lines: &mpsc::Receiver<String>) -> Vec<String> {
        let deadline = Instant::now() + FIRST_LINES_PATIENCE;
        let mut seen = Vec::new();
        while Instant::now() < deadline {
            match lines.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    let done = line.contains(" nodes, membership ");
                    seen.push(line);
                    if done {
                        return seen;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        let stderr = std::fs::read_to_string(self.dir.join("up.stderr")).unwrap_or_default();
        panic!("roost up never listed its nodes; printed {seen:?}; stderr: {stderr}");
    }
}

/// A running `roost up`: a failing test still stops it (and so its nodes).
struct Up(Option<Child>);

impl Up {
    /// SIGTERM; `roost up` stops its nodes (and its etcd) and exits 0.
    fn stop(mut self) {
        let mut up = self.0.take().unwrap();
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(up.id() as i32, libc::SIGTERM) };
        let status = up.wait().unwrap();
        assert!(status.success(), "roost up exited {status}");
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if let Some(mut up) = self.0.take() {
            // SAFETY: as above; roost up forwards SIGTERM to its nodes.
            unsafe { libc::kill(up.id() as i32, libc::SIGTERM) };
            let _ = up.wait();
        }
    }
}

#[test]
fn without_etcd_roost_up_says_so_and_uses_the_built_in_membership() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let scratch = Scratch::new("peer");
    let etcd_port = scratch.etcd_port.to_string();
    // PATH is an empty directory: no etcd to find, none running on that port.
    let (up, lines) = scratch.up(&scratch.dir.join("bin"), &["--etcd-port", &etcd_port]);
    let first = scratch.first_lines(&lines);
    assert!(
        first[0].contains("membership: built-in") && first[0].contains("scripts/install-deps.sh"),
        "{first:?}"
    );
    assert!(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../scripts/install-deps.sh")
            .exists(),
        "the message names a script that exists"
    );
    let status = scratch.wait_for_three_live();
    assert_eq!(status.membership, "peer");
    // Each node keeps its peer-membership record in its own directory.
    for i in 0..NODES {
        let record = scratch
            .dir
            .join("data")
            .join(format!("node{i}"))
            .join(roost_cluster::state_dir::RECORD_FILE);
        assert!(record.exists(), "{} missing", record.display());
    }
    up.stop();
}

/// The highest epoch the nodes' records under `data` name.
fn recorded_epoch(data: &Path) -> u64 {
    let ids: Vec<roost_cluster::NodeId> = (0..NODES).map(roost_cluster::NodeId).collect();
    (0..NODES)
        .map(|i| {
            let file = data
                .join(format!("node{i}"))
                .join(roost_cluster::state_dir::RECORD_FILE);
            let bytes = std::fs::read(&file).unwrap();
            let record = roost_cluster::record::decode(&bytes, ids[i as usize], &ids).unwrap();
            record.installed.epoch.0
        })
        .max()
        .unwrap()
}

/// Increments `key` on node `node` of `scratch`'s cluster until one is
/// acknowledged (the reactors are created once the cluster serves).
fn incr_acknowledged(scratch: &Scratch, node: u16, key: &str) -> i64 {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], scratch.resp_base + node));
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Ok(Some(n)) =
            resp_client::Client::connect(addr, Duration::from_secs(5)).and_then(|mut c| c.incr(key))
        {
            return n;
        }
        assert!(
            Instant::now() < deadline,
            "INCR {key} on node {node} never acknowledged"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A second `roost up` over the same data directory keeps every node's
/// state directory: the new processes, all of them new incarnations, vote
/// as their predecessors and choose the view after the last run's, and the
/// cluster serves again, with the data of the last run (each node's
/// durability log is in its directory).
#[test]
fn roost_up_again_continues_the_last_runs_views() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let scratch = Scratch::new("again");
    let etcd_port = scratch.etcd_port.to_string();
    let bin = scratch.dir.join("bin");
    let (up, lines) = scratch.up(&bin, &["--etcd-port", &etcd_port]);
    scratch.first_lines(&lines);
    let first = scratch.wait_for_three_live();
    assert_eq!(first.membership, "peer");
    let keys: Vec<String> = (0..6).map(|i| format!("kept-{i}")).collect();
    for (i, key) in keys.iter().enumerate() {
        for _ in 0..=i {
            incr_acknowledged(&scratch, (i % 3) as u16, key);
        }
    }
    up.stop();
    let last = recorded_epoch(&scratch.dir.join("data"));
    assert!(last >= first.epoch);
    let (up, lines) = scratch.up(&bin, &["--etcd-port", &etcd_port]);
    scratch.first_lines(&lines);
    let second = scratch.wait_for_three_live();
    assert!(
        second.epoch > last,
        "epoch {} after the last run's {last}",
        second.epoch
    );
    assert_ne!(second.incarnation, first.incarnation);
    // The last run's writes are back, on any node: the next increment of
    // each key goes on from them.
    for (i, key) in keys.iter().enumerate() {
        let node = ((i + 1) % 3) as u16;
        assert_eq!(
            incr_acknowledged(&scratch, node, key),
            i as i64 + 2,
            "{key} after roost up again"
        );
    }
    up.stop();
}

#[test]
fn with_etcd_installed_roost_up_starts_one() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    common::require_etcd();
    let scratch = Scratch::new("local-etcd");
    let etcd_port = scratch.etcd_port.to_string();
    let path = std::env::var_os("PATH").unwrap();
    let (up, lines) = scratch.up(Path::new(&path), &["--etcd-port", &etcd_port]);
    let first = scratch.first_lines(&lines);
    assert!(
        first[0].contains("membership: etcd at") && first[0].contains("started by roost up"),
        "{first:?}"
    );
    let status = scratch.wait_for_three_live();
    assert_eq!(status.membership, "etcd");
    up.stop();
}

#[test]
fn with_etcd_running_roost_up_uses_it() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    common::require_etcd();
    let scratch = Scratch::new("running-etcd");
    let port = scratch.etcd_port;
    let etcd = LocalEtcd::start(
        "etcd",
        &scratch.dir.join("etcd"),
        ([127, 0, 0, 1], port).into(),
        ([127, 0, 0, 1], port + 1).into(),
    )
    .expect("etcd starts");
    // Even with no etcd on PATH, the running one is found by its port.
    let (up, lines) = scratch.up(
        &scratch.dir.join("bin"),
        &["--etcd-port", &port.to_string()],
    );
    let first = scratch.first_lines(&lines);
    assert!(
        first[0].contains(&format!(
            "membership: etcd already running at 127.0.0.1:{port}"
        )),
        "{first:?}"
    );
    let status = scratch.wait_for_three_live();
    assert_eq!(status.membership, "etcd");
    up.stop();
    drop(etcd);
}

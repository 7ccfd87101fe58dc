//! A cluster of `roost node` processes on loopback, with a local etcd holding
//! its membership, that a harness controls process by process: SIGKILL and
//! restart, SIGSTOP and SIGCONT, admin requests (status, chaos, register).
//! The nemesis (`roost-check`) and the multi-process tests drive clusters
//! through it.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use thiserror::Error;

use crate::local_etcd::{LocalEtcd, LocalEtcdError, DEFAULT_ETCD_BIN};
use crate::register::RegisterBugs;
use crate::runtime::StatusReport;

/// How a [`LocalCluster`] is laid out.
#[derive(Debug, Clone)]
pub struct LocalClusterConfig {
    /// The `roost` binary to run nodes with.
    pub roost_bin: PathBuf,
    pub etcd_bin: String,
    /// Config, secret, logs, etcd data and the nodes' state directories
    /// (`node<i>.state`) go here (created; removed on drop).
    pub dir: PathBuf,
    pub nodes: u32,
    pub lease_ttl_s: u64,
    pub keepalive_interval_ms: u64,
    pub poll_interval_ms: u64,
    /// What the nodes run (`roost node --protocol`): `"register"`, the
    /// example the register checks drive, or `"ownership"`.
    pub protocol: &'static str,
    /// Planted register faults, passed to every node (checker self-tests).
    pub register_bugs: RegisterBugs,
    /// Membership from a local etcd (true) or the peer-to-peer lease protocol.
    pub etcd: bool,
    /// TOML appended to the generated configuration (e.g. `[membership]`
    /// timing for the peer protocol).
    pub extra_toml: String,
    /// More `roost node` arguments for every node (e.g. a planted bug).
    pub extra_args: Vec<String>,
}

impl LocalClusterConfig {
    pub fn new(roost_bin: PathBuf, dir: PathBuf, nodes: u32) -> Self {
        LocalClusterConfig {
            roost_bin,
            etcd_bin: DEFAULT_ETCD_BIN.to_owned(),
            dir,
            nodes,
            lease_ttl_s: 1,
            keepalive_interval_ms: 250,
            poll_interval_ms: 50,
            protocol: "register",
            register_bugs: RegisterBugs::default(),
            etcd: true,
            extra_toml: String::new(),
            extra_args: Vec::new(),
        }
    }
}

#[derive(Debug, Error)]
pub enum LocalClusterError {
    #[error(transparent)]
    Etcd(#[from] LocalEtcdError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("node {0} is not running")]
    NotRunning(u32),
    #[error("no node {0}")]
    NoSuchNode(u32),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LocalClusterError {
    let what = what.into();
    move |source| LocalClusterError::Io { what, source }
}

/// The running cluster; every process is killed when it is dropped.
pub struct LocalCluster {
    config: LocalClusterConfig,
    config_file: PathBuf,
    admins: Vec<SocketAddr>,
    cluster_addrs: Vec<SocketAddr>,
    resp_addrs: Vec<SocketAddr>,
    children: Vec<Option<Child>>,
    etcd: Option<LocalEtcd>,
    etcd_addrs: (SocketAddr, SocketAddr),
}

/// The lowest port [`free_ports`] hands out.
const FIRST_PICKED_PORT: u16 = 10_000;
/// Candidates one [`free_ports`] call tries at most.
const MAX_PORT_TRIES: usize = 4_096;
/// Where the next [`free_ports`] call starts, as an offset into its range
/// (`None` before the first): successive calls in a process hand out
/// different ports. Held for the whole call, so two calls never try the
/// same candidates.
static NEXT_PORT: std::sync::Mutex<Option<usize>> = std::sync::Mutex::new(None);

/// The kernel's range of ephemeral ports (the source ports of outgoing
/// connections), Linux's default where it cannot be read.
fn ephemeral_ports() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut it = text.split_whitespace().map(|p| p.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32_768, 60_999))
}

/// `n` ports free now on loopback (each was bound and released), for
/// servers started next. They are picked below the kernel's ephemeral
/// range where it leaves room: a port the OS hands out for `:0` is one it
/// also hands out as an outgoing connection's source port, and a client of
/// another cluster running meanwhile took one such port before the node it
/// was picked for could bind it. Successive calls in a process return
/// different ports, starting from an offset of the process id.
pub fn free_ports(n: usize) -> std::io::Result<Vec<u16>> {
    let (ephemeral_low, _) = ephemeral_ports();
    let span = usize::from(ephemeral_low.saturating_sub(FIRST_PICKED_PORT));
    if span < n.saturating_mul(16) {
        // No room below the ephemeral range: let the OS pick.
        let listeners = (0..n)
            .map(|_| TcpListener::bind("127.0.0.1:0"))
            .collect::<std::io::Result<Vec<_>>>()?;
        return listeners
            .iter()
            .map(|l| l.local_addr().map(|a| a.port()))
            .collect();
    }
    let mut next = NEXT_PORT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let start = next.unwrap_or((std::process::id() as usize).wrapping_mul(7_919) % span);
    let mut held = Vec::with_capacity(n);
    let mut tried = 0;
    // Bounded: MAX_PORT_TRIES candidates.
    while held.len() < n && tried < MAX_PORT_TRIES {
        let port = FIRST_PICKED_PORT + ((start + tried) % span) as u16;
        tried += 1;
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
            held.push(listener);
        }
    }
    *next = Some((start + tried) % span);
    drop(next);
    if held.len() < n {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            format!(
                "only {} of {n} free ports found among {MAX_PORT_TRIES} tried",
                held.len()
            ),
        ));
    }
    let ports: Vec<u16> = held
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<std::io::Result<_>>()?;
    debug_assert!(ports
        .iter()
        .all(|&p| p >= FIRST_PICKED_PORT && p < ephemeral_low));
    Ok(ports)
}

impl LocalCluster {
    /// Starts etcd and every node (it does not wait for a view).
    pub fn start(config: LocalClusterConfig) -> Result<LocalCluster, LocalClusterError> {
        let _ = std::fs::remove_dir_all(&config.dir);
        std::fs::create_dir_all(&config.dir)
            .map_err(io(format!("creating {}", config.dir.display())))?;
        let n = config.nodes as usize;
        let ports = free_ports(3 * n + 2).map_err(io("finding free ports"))?;
        let loopback = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
        let etcd_addrs = (loopback(ports[2 * n]), loopback(ports[2 * n + 1]));
        let etcd = if config.etcd {
            Some(LocalEtcd::start(
                &config.etcd_bin,
                &config.dir.join("etcd"),
                etcd_addrs.0,
                etcd_addrs.1,
            )?)
        } else {
            None
        };
        let secret = config.dir.join("cluster.secret");
        let secret_hex: String = rand::random::<[u8; 32]>()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        std::fs::write(&secret, secret_hex).map_err(io("writing the cluster secret"))?;
        let mut text = format!(
            "[security]\nsecret_file = {:?}\n\n{}\n",
            secret.display().to_string(),
            config.extra_toml
        );
        if let Some(etcd) = &etcd {
            text += &format!(
                "\n[coordinator]\netcd_endpoints = [\"{}\"]\nlease_ttl_s = {}\nkeepalive_interval_ms = {}\n\
                 poll_interval_ms = {}\nrequest_timeout_ms = 200\n",
                etcd.endpoint,
                config.lease_ttl_s,
                config.keepalive_interval_ms,
                config.poll_interval_ms,
            );
        }
        let mut admins = Vec::with_capacity(n);
        let mut cluster_addrs = Vec::with_capacity(n);
        for i in 0..n {
            let (cluster, admin) = (loopback(ports[2 * i]), loopback(ports[2 * i + 1]));
            let resp = loopback(ports[2 * n + 2 + i]);
            text += &format!(
                "\n[[node]]\nid = {i}\naddr = \"{cluster}\"\nadmin_addr = \"{admin}\"\nresp_addr = \"{resp}\"\n"
            );
            admins.push(admin);
            cluster_addrs.push(cluster);
        }
        let config_file = config.dir.join("cluster.toml");
        std::fs::write(&config_file, text).map_err(io("writing the cluster configuration"))?;
        let mut cluster = LocalCluster {
            config,
            config_file,
            admins,
            cluster_addrs,
            resp_addrs: (0..n).map(|i| loopback(ports[2 * n + 2 + i])).collect(),
            children: (0..n).map(|_| None).collect(),
            etcd,
            etcd_addrs,
        };
        for i in 0..cluster.config.nodes {
            cluster.start_node(i)?;
        }
        Ok(cluster)
    }

    pub fn nodes(&self) -> u32 {
        self.config.nodes
    }

    pub fn dir(&self) -> &Path {
        &self.config.dir
    }

    pub fn admin_addr(&self, node: u32) -> Option<SocketAddr> {
        self.admins.get(node as usize).copied()
    }

    pub fn cluster_addr(&self, node: u32) -> Option<SocketAddr> {
        self.cluster_addrs.get(node as usize).copied()
    }

    /// Node `node`'s RESP (Redis protocol) client port.
    pub fn resp_addr(&self, node: u32) -> Option<SocketAddr> {
        self.resp_addrs.get(node as usize).copied()
    }

    /// Starts node `node` (again), as a new incarnation; its log goes to
    /// `dir/node<i>.log` (appended across restarts).
    pub fn start_node(&mut self, node: u32) -> Result<(), LocalClusterError> {
        let slot = self
            .children
            .get_mut(node as usize)
            .ok_or(LocalClusterError::NoSuchNode(node))?;
        if let Some(mut old) = slot.take() {
            let _ = old.kill();
            let _ = old.wait();
        }
        let log_path = self.config.dir.join(format!("node{node}.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(io(format!("opening {}", log_path.display())))?;
        let resp_port = self.resp_addrs[node as usize].port().to_string();
        let mut command = Command::new(&self.config.roost_bin);
        command
            .args([
                "node",
                "--id",
                &node.to_string(),
                "--resp-port",
                &resp_port,
                "--protocol",
                self.config.protocol,
                "--config",
            ])
            .arg(&self.config_file)
            // Its own state directory, kept across its restarts.
            .arg("--data-dir")
            .arg(self.config.dir.join(format!("node{node}.state")))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        crate::process::die_with_parent(&mut command);
        let bugs = self.config.register_bugs;
        if bugs.quorum_minus_one {
            command.args(["--planted-register", "quorum-minus-one"]);
        }
        if bugs.skip_recovery {
            command.args(["--planted-register", "skip-recovery"]);
        }
        command.args(&self.config.extra_args);
        let child = command
            .spawn()
            .map_err(io(format!("starting {}", self.config.roost_bin.display())))?;
        self.children[node as usize] = Some(child);
        Ok(())
    }

    fn pid(&self, node: u32) -> Result<libc::pid_t, LocalClusterError> {
        self.children
            .get(node as usize)
            .ok_or(LocalClusterError::NoSuchNode(node))?
            .as_ref()
            .map(|c| c.id() as libc::pid_t)
            .ok_or(LocalClusterError::NotRunning(node))
    }

    fn signal(&self, node: u32, signal: libc::c_int) -> Result<(), LocalClusterError> {
        let pid = self.pid(node)?;
        // SAFETY: kill(2) on the id of a child process this cluster owns.
        let rc = unsafe { libc::kill(pid, signal) };
        if rc != 0 {
            return Err(LocalClusterError::Io {
                what: format!("signal {signal} to node {node}"),
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    /// SIGKILL: the process dies at once, its memory lost (SIGKILL also ends
    /// a stopped process on Linux).
    pub fn kill(&mut self, node: u32) -> Result<(), LocalClusterError> {
        let mut child = self
            .children
            .get_mut(node as usize)
            .ok_or(LocalClusterError::NoSuchNode(node))?
            .take()
            .ok_or(LocalClusterError::NotRunning(node))?;
        child
            .kill()
            .map_err(io(format!("SIGKILL to node {node}")))?;
        let _ = child.wait();
        Ok(())
    }

    /// SIGSTOP: the process freezes (its lease lapses; its sockets stay open).
    pub fn pause(&self, node: u32) -> Result<(), LocalClusterError> {
        self.signal(node, libc::SIGSTOP)
    }

    /// SIGCONT.
    pub fn resume(&self, node: u32) -> Result<(), LocalClusterError> {
        self.signal(node, libc::SIGCONT)
    }

    pub fn is_running(&self, node: u32) -> bool {
        self.children
            .get(node as usize)
            .is_some_and(Option::is_some)
    }

    /// Kills etcd (SIGKILL); [`LocalCluster::restart_etcd`] brings it back on
    /// the same data.
    pub fn kill_etcd(&mut self) {
        self.etcd = None;
    }

    /// Starts etcd again on its data (a no-op for a peer-membership cluster).
    pub fn restart_etcd(&mut self) -> Result<(), LocalClusterError> {
        if !self.config.etcd {
            return Ok(());
        }
        self.etcd = None;
        let (client, peer) = self.etcd_addrs;
        let etcd = LocalEtcd::start(
            &self.config.etcd_bin,
            &self.config.dir.join("etcd"),
            client,
            peer,
        )?;
        self.etcd = Some(etcd);
        Ok(())
    }

    /// One admin request to node `node` (blocking): the status code and body.
    pub fn admin(
        &self,
        node: u32,
        path: &str,
        timeout: Duration,
    ) -> Result<(u16, String), LocalClusterError> {
        let addr = self
            .admin_addr(node)
            .ok_or(LocalClusterError::NoSuchNode(node))?;
        admin_request(addr, path, timeout).map_err(io(format!("admin {path} on node {node}")))
    }

    /// Node `node`'s `/status`, if it answers within a second.
    pub fn status(&self, node: u32) -> Option<StatusReport> {
        match self.admin(node, "/status", Duration::from_secs(1)) {
            Ok((200, body)) => serde_json::from_str(&body).ok(),
            _ => None,
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.etcd = None;
    }
}

/// A blocking HTTP/1.0 GET against an admin endpoint.
pub fn admin_request(
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
) -> std::io::Result<(u16, String)> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(stream, "GET {path} HTTP/1.0\r\n\r\n")?;
    let mut response = Vec::new();
    stream
        .take(crate::runtime::MAX_ADMIN_RESPONSE_BYTES)
        .read_to_end(&mut response)?;
    crate::runtime::parse_admin_response(&response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct_free_and_below_the_ephemeral_range() {
        let (low, _) = ephemeral_ports();
        let first = free_ports(8).unwrap();
        let second = free_ports(8).unwrap();
        let mut all: Vec<u16> = first.iter().chain(&second).copied().collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 16, "{first:?} {second:?}");
        for port in all {
            if low > FIRST_PICKED_PORT + 16 * 16 {
                assert!(port >= FIRST_PICKED_PORT && port < low, "{port}");
            }
            TcpListener::bind(("127.0.0.1", port)).expect("a free port binds");
        }
    }
}

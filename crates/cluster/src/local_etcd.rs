//! A single-member etcd server as a child process on loopback: what `roost
//! up` and the multi-process tests run under a local cluster's membership.
//! Debian's `etcd-server` package provides the binary (`/usr/bin/etcd`).

use std::net::SocketAddr;
use std::os::unix::process::CommandExt as _; // process_group
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::etcd::EtcdClient;

/// The binary `roost up` looks for on `PATH` when none is named.
pub const DEFAULT_ETCD_BIN: &str = "etcd";
/// Default client port of a local etcd (etcd's own default).
pub const DEFAULT_ETCD_CLIENT_PORT: u16 = 2379;

#[derive(Debug, Error)]
pub enum LocalEtcdError {
    #[error(
        "cannot run `{bin}`: {source}. Install Debian's etcd-server (scripts/install-deps.sh \
         or `apt-get install etcd-server`), point --etcd at a running etcd, or use \
         --membership peer"
    )]
    Spawn { bin: String, source: std::io::Error },
    #[error("cannot create {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("etcd at {endpoint} did not answer within {waited_ms} ms (its log: {log})")]
    NotReady {
        endpoint: String,
        waited_ms: u64,
        log: String,
    },
    #[error("etcd exited at start ({status}); its log: {log}")]
    Exited { status: String, log: String },
}

/// Whether an etcd answers at `endpoint` (host:port) within `timeout_ms`.
pub fn answers(endpoint: &str, timeout_ms: u64) -> bool {
    let Ok(client) = EtcdClient::new(&[endpoint.to_owned()], timeout_ms) else {
        return false;
    };
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return false;
    };
    runtime.block_on(client.range_prefix(b"/")).is_ok()
}

/// Whether `bin` names an executable file: a path as given, or a name
/// looked up on `PATH` as `Command` would.
pub fn binary_found(bin: &str) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    let executable = |path: &Path| {
        path.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if bin.contains('/') {
        return executable(Path::new(bin));
    }
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| executable(&dir.join(bin))))
}

/// A running single-member etcd; killed when dropped.
pub struct LocalEtcd {
    child: Child,
    pub endpoint: String,
    pub data_dir: PathBuf,
}

impl LocalEtcd {
    /// Starts `bin` with its data in `data_dir` (kept across restarts, so the
    /// membership survives them), clients on `client`, peers on `peer`; the
    /// log goes to `data_dir/etcd.log`. Waits until it answers.
    pub fn start(
        bin: &str,
        data_dir: &Path,
        client: SocketAddr,
        peer: SocketAddr,
    ) -> Result<LocalEtcd, LocalEtcdError> {
        std::fs::create_dir_all(data_dir).map_err(|source| LocalEtcdError::DataDir {
            path: data_dir.to_owned(),
            source,
        })?;
        let log_path = data_dir.join("etcd.log");
        let log = std::fs::File::create(&log_path).map_err(|source| LocalEtcdError::DataDir {
            path: log_path.clone(),
            source,
        })?;
        let client_url = format!("http://{client}");
        let peer_url = format!("http://{peer}");
        // One member on loopback: short Raft timers are safe (no elections to
        // lose) and let etcd grant leases as short as one second.
        let mut command = Command::new(bin);
        command
            .arg("--name")
            .arg("roost")
            .arg("--data-dir")
            .arg(data_dir.join("member-data"))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("roost={peer_url}")])
            .args(["--heartbeat-interval", "10", "--election-timeout", "100"])
            // Its own process group, so a Ctrl-C at the terminal reaches the
            // nodes (which then give up their leases) but not etcd, which
            // `roost up` stops last.
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        crate::process::die_with_parent(&mut command);
        let child = command.spawn().map_err(|source| LocalEtcdError::Spawn {
            bin: bin.to_owned(),
            source,
        })?;
        let mut etcd = LocalEtcd {
            child,
            endpoint: client.to_string(),
            data_dir: data_dir.to_owned(),
        };
        etcd.wait_ready(Duration::from_secs(15))?;
        Ok(etcd)
    }

    fn log_tail(&self) -> String {
        let path = self.data_dir.join("etcd.log");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(3).collect();
        format!("{} [...] {}", path.display(), tail.join(" | "))
    }

    fn wait_ready(&mut self, patience: Duration) -> Result<(), LocalEtcdError> {
        let started = Instant::now();
        let client = EtcdClient::new(std::slice::from_ref(&self.endpoint), 500)
            .expect("one endpoint is configured");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime starts");
        while started.elapsed() < patience {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(LocalEtcdError::Exited {
                    status: status.to_string(),
                    log: self.log_tail(),
                });
            }
            if runtime.block_on(client.range_prefix(b"/")).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(LocalEtcdError::NotReady {
            endpoint: self.endpoint.clone(),
            waited_ms: patience.as_millis() as u64,
            log: self.log_tail(),
        })
    }

    /// Has the process exited (and how)?
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for LocalEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

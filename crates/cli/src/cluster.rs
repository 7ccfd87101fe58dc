//! `roost node`, `roost up` and `roost status`: run one node, a local
//! multi-process cluster, and inspect it (`roost sim` is in [`crate::sim`]).
//! The bodies live in `roost-cluster`; this is flags and printing.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::{Args, ValueEnum};
use roost_cluster::config::{ClusterConfig, SecurityConfig, DEFAULT_ADMIN_PORT};
use roost_cluster::coordinated::CoordinatorConfig;
use roost_cluster::local_etcd::{self, LocalEtcd, DEFAULT_ETCD_BIN, DEFAULT_ETCD_CLIENT_PORT};
use roost_cluster::register::RegisterBugs;
use roost_cluster::runtime::{admin_get, StatusReport};
use roost_cluster::state_dir::StateDir;
use roost_cluster::NodeId;
use roost_node::{Node, NodeConfig, NodeError, NodeProtocol};

/// Where the cluster is described: a file, or `--nodes` on loopback defaults.
#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    /// Cluster configuration (TOML: [[node]] id, addr, admin_addr; [membership]).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Without --config: this many nodes on 127.0.0.1, cluster ports 7000+i,
    /// admin ports 7100+i.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub nodes: u32,
    /// Heartbeat interval (overrides the configuration).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub heartbeat_ms: Option<u64>,
    /// Silence before a node is suspected (overrides the configuration).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub suspect_ms: Option<u64>,
    /// Lease duration of the peer membership (overrides the configuration).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub lease_ms: Option<u64>,
    /// Where membership comes from: `etcd` (the production path) or `peer`
    /// (the lease protocol among the nodes themselves, for machines without
    /// etcd). `roost node` defaults to what the configuration says; `roost up`
    /// to etcd.
    #[arg(long, value_enum)]
    pub membership: Option<MembershipSource>,
    /// etcd client endpoints, comma-separated host:port (implies etcd
    /// membership; overrides the configuration's [coordinator]).
    #[arg(long, value_name = "HOST:PORT,...")]
    pub etcd: Option<String>,
    /// etcd lease time-to-live in seconds (overrides the configuration).
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub lease_ttl_s: Option<u64>,
    /// File with the cluster's shared secret in hex: nodes authenticate each
    /// other's connections with it (overrides [security] secret_file).
    /// `roost up` makes one in its data directory.
    #[arg(long, value_name = "FILE")]
    pub secret_file: Option<PathBuf>,
    /// Each node's durability log, in its data directory: when a reliably
    /// committed write is acknowledged. `always` (fsync first, batched across
    /// concurrent transactions), `every <ms>` (fsync in the background that
    /// often: a power loss may lose that much, a process crash nothing),
    /// `off` (the OS writes it back when it likes), `memory` (no log: a
    /// restart of the whole cluster loses everything). Needs --data-dir.
    #[arg(long, value_name = "POLICY", default_value = "always", value_parser = parse_sync)]
    pub sync: SyncArg,
    /// Each node folds its durability log into a checkpoint (in the
    /// background, transactions go on) once this many MiB are not yet
    /// folded: less log to replay at a restart, more writing meanwhile.
    #[arg(long, value_name = "MIB", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub checkpoint_after_mb: u64,
}

/// `--sync`: a durability log with its policy, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncArg {
    Log(roost_durability::SyncPolicy),
    Memory,
}

impl std::fmt::Display for SyncArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SyncArg::Log(policy) => write!(f, "{policy}"),
            SyncArg::Memory => f.write_str("memory"),
        }
    }
}

fn parse_sync(text: &str) -> Result<SyncArg, String> {
    if text.trim() == "memory" {
        return Ok(SyncArg::Memory);
    }
    text.parse()
        .map(SyncArg::Log)
        .map_err(|e: roost_durability::ParseSyncPolicyError| format!("{e}, or memory"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MembershipSource {
    Etcd,
    Peer,
}

impl ClusterArgs {
    pub fn cluster(&self) -> anyhow::Result<ClusterConfig> {
        let mut config = match &self.config {
            Some(path) => ClusterConfig::load(path)?,
            None => ClusterConfig::local(self.nodes),
        };
        let m = &mut config.membership;
        if let Some(ms) = self.heartbeat_ms {
            m.heartbeat_interval_ms = ms;
        }
        if let Some(ms) = self.suspect_ms {
            m.suspect_after_ms = ms;
        }
        if let Some(ms) = self.lease_ms {
            m.lease_duration_ms = ms;
            m.proposal_timeout_ms = m.proposal_timeout_ms.max(ms * 2);
        }
        self.apply_coordinator(&mut config)?;
        if let Some(path) = &self.secret_file {
            config.security = Some(SecurityConfig {
                secret_file: path.clone(),
            });
        }
        config.validate()?;
        Ok(config)
    }

    /// `--membership`, `--etcd` and `--lease-ttl-s` over the file's [coordinator].
    fn apply_coordinator(&self, config: &mut ClusterConfig) -> anyhow::Result<()> {
        if let Some(list) = &self.etcd {
            let endpoints: Vec<String> = list
                .split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(str::to_owned)
                .collect();
            if endpoints.is_empty() {
                bail!("--etcd needs at least one host:port");
            }
            let coordinator = config
                .coordinator
                .get_or_insert_with(|| CoordinatorConfig::etcd(Vec::new()));
            coordinator.etcd_endpoints = endpoints;
        }
        match self.membership {
            Some(MembershipSource::Peer) => config.coordinator = None,
            Some(MembershipSource::Etcd) if config.coordinator.is_none() => {
                bail!("--membership etcd needs --etcd host:port or a [coordinator] section")
            }
            _ => {}
        }
        if let (Some(ttl_s), Some(coordinator)) = (self.lease_ttl_s, &mut config.coordinator) {
            coordinator.lease_ttl_s = ttl_s;
            // Refresh four times per lease, within the timing rule.
            coordinator.keepalive_interval_ms = ttl_s * 1000 / 4;
        }
        Ok(())
    }

    /// The same cluster as flags for a child `roost node`.
    fn child_flags(&self) -> Vec<String> {
        let mut flags = Vec::new();
        match &self.config {
            Some(path) => flags.extend(["--config".to_owned(), path.display().to_string()]),
            None => flags.extend(["--nodes".to_owned(), self.nodes.to_string()]),
        }
        for (flag, value) in [
            ("--heartbeat-ms", self.heartbeat_ms),
            ("--suspect-ms", self.suspect_ms),
            ("--lease-ms", self.lease_ms),
            ("--lease-ttl-s", self.lease_ttl_s),
        ] {
            if let Some(value) = value {
                flags.extend([flag.to_owned(), value.to_string()]);
            }
        }
        if let Some(etcd) = &self.etcd {
            flags.extend(["--etcd".to_owned(), etcd.clone()]);
        }
        if let Some(path) = &self.secret_file {
            flags.extend(["--secret-file".to_owned(), path.display().to_string()]);
        }
        flags.extend(["--sync".to_owned(), self.sync.to_string()]);
        flags.extend([
            "--checkpoint-after-mb".to_owned(),
            self.checkpoint_after_mb.to_string(),
        ]);
        if let Some(source) = self.membership {
            let name = match source {
                MembershipSource::Etcd => "etcd",
                MembershipSource::Peer => "peer",
            };
            flags.extend(["--membership".to_owned(), name.to_owned()]);
        }
        flags
    }
}

#[derive(Debug, Args)]
pub struct NodeArgs {
    /// This node's id in the configuration.
    #[arg(long, default_value_t = 0)]
    pub id: u32,
    /// What the node runs over the cluster: Zeus ownership of the
    /// keyspace's reactors (a command on any node acquires the reactor of
    /// its key), or the ABD register example (its own keyspace per node).
    #[arg(long, value_enum, default_value_t = ProtocolArg::Ownership)]
    pub protocol: ProtocolArg,
    /// Plant a register bug (checker and nemesis self-tests only; with
    /// --protocol register).
    #[arg(long, hide = true, value_enum)]
    pub planted_register: Vec<PlantedBug>,
    /// Plant a Zeus bug (the no-loss tests' self-checks only; with
    /// --protocol ownership).
    #[arg(long, hide = true, value_enum)]
    pub planted_zeus: Vec<PlantedZeusBug>,
    /// The node's RESP (Redis protocol) client port on 127.0.0.1 (default
    /// 6379 + id; 0: any free port).
    #[arg(long, value_name = "PORT", conflicts_with = "no_resp")]
    pub resp_port: Option<u16>,
    /// RESP client port settings (TOML: limits, requirepass, users; its
    /// `bind` is replaced by --resp-port's).
    #[arg(long, value_name = "FILE")]
    pub resp_config: Option<PathBuf>,
    /// Serve no RESP client port.
    #[arg(long)]
    pub no_resp: bool,
    /// This node's own state directory (created if missing; one per node):
    /// the peer membership keeps its Paxos acceptor record there, so a
    /// restarted node never votes against what it promised before. Without
    /// it that state is in memory only, and a node restarted before the
    /// first view reached it may vote on that view again (a warning says
    /// so). Unused with etcd membership.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, Args)]
pub struct UpArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The etcd binary `roost up` runs when membership is etcd's and no
    /// --etcd endpoint is given (Debian's etcd-server installs /usr/bin/etcd).
    #[arg(long, default_value = DEFAULT_ETCD_BIN, value_name = "PATH")]
    pub etcd_bin: String,
    /// Client port of that local etcd (its peer port is the next one).
    #[arg(long, default_value_t = DEFAULT_ETCD_CLIENT_PORT, value_parser = clap::value_parser!(u16).range(1..65535))]
    pub etcd_port: u16,
    /// Where the local etcd keeps its data (membership survives a restart of
    /// `roost up`) and where node logs go; node i's state directory is
    /// DIR/node<i> (kept across the node's restarts and across runs).
    #[arg(long, default_value = "roost-data", value_name = "DIR")]
    pub data_dir: PathBuf,
    /// Restarts of a node (or of the local etcd) that exits on its own, before
    /// `roost up` gives up on it.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub max_restarts: u32,
    /// Instead of one cluster: this many sites of a geo-replicated
    /// deployment, each a single node (`roost resp --site`) serving RESP on
    /// 6379+i, its bounded counters (BC.*) replicated between the sites and
    /// kept within their bounds by rights (the seed 002's design).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=16), conflicts_with = "config")]
    pub sites: Option<u32>,
    /// With --sites: site i talks to the other sites on this port + i.
    #[arg(long, default_value_t = DEFAULT_SITE_PORT, value_parser = clap::value_parser!(u16).range(1..65000))]
    pub site_port: u16,
    /// With --sites: each site a Roost cluster of this many `roost node`
    /// processes (1: a site is one `roost resp --site` process). The site's
    /// bounded counters are rows of its cluster's keyspace, replicated to
    /// every node of the site by reliable commit, and BC.* work on any of
    /// its nodes; node j of site i is number g = i * N + j below.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16), requires = "sites")]
    pub nodes_per_site: u32,
    /// With --nodes-per-site above 1: node g's cluster port is this + g.
    #[arg(long, default_value_t = DEFAULT_SITE_CLUSTER_PORT, value_parser = clap::value_parser!(u16).range(1..65000))]
    pub site_cluster_port: u16,
    /// With --nodes-per-site above 1: node g's admin port is this + g.
    #[arg(long, default_value_t = DEFAULT_SITE_ADMIN_PORT, value_parser = clap::value_parser!(u16).range(1..65000))]
    pub site_admin_port: u16,
    /// With --sites: site i serves RESP on this port + i (with
    /// --nodes-per-site: node g on this port + g; site-to-site traffic too).
    #[arg(long, default_value_t = DEFAULT_RESP_PORT, value_parser = clap::value_parser!(u16).range(1..65000))]
    pub site_resp_port: u16,
    /// Node i serves RESP clients on this port + i.
    #[arg(long, default_value_t = DEFAULT_RESP_PORT, value_parser = clap::value_parser!(u16).range(1..65000), conflicts_with = "sites")]
    pub resp_port: u16,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Admin address of the node to ask (default: the first that answers of
    /// the configuration's nodes, or of 127.0.0.1:7100..7163).
    #[arg(long, value_name = "HOST:PORT")]
    pub addr: Option<SocketAddr>,
    /// Cluster configuration whose nodes to ask.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the node's JSON status.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProtocolArg {
    /// Zeus ownership of the keyspace's reactors.
    Ownership,
    /// The ABD register example.
    Register,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PlantedZeusBug {
    /// Answer a write at its local commit, before its reliable commit.
    ReplyBeforeCommit,
    /// The reliable commit counts a transaction committed on its first
    /// R-ACK, not on every follower's.
    CommitBeforeAllAcks,
    /// A reader's replica stays readable while Invalid (between an R-INV
    /// and its R-VAL).
    ReadInvalidReplica,
    /// The durability log answers a write before its fsync under `always`.
    AnswerBeforeFsync,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PlantedBug {
    /// Register quorums one short of a majority.
    QuorumMinusOne,
    /// Declare nodes dead before their lease expired.
    EarlyRemoval,
    /// Restarted replicas answer before recovering.
    SkipRecovery,
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the tokio runtime")
}

pub(crate) fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// Resolves on Ctrl-C or SIGTERM.
async fn stop_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async {
            match term.as_mut() {
                Some(term) => { term.recv().await; }
                None => std::future::pending::<()>().await,
            }
        } => {}
    }
}

/// The node's RESP client port settings, unless --no-resp.
fn resp_config(args: &NodeArgs) -> anyhow::Result<Option<roost_resp::Config>> {
    if args.no_resp {
        return Ok(None);
    }
    let mut config = match &args.resp_config {
        Some(path) => roost_resp::Config::from_file(path)?,
        None => roost_resp::Config::default(),
    };
    let port = match args.resp_port {
        Some(port) => port,
        None => u16::try_from(u32::from(DEFAULT_RESP_PORT) + args.id)
            .context("--id too large for the default RESP port; pass --resp-port")?,
    };
    config.bind = SocketAddr::from(([127, 0, 0, 1], port));
    Ok(Some(config))
}

/// Node `i`'s RESP port is this plus `i` by default (Redis's own port first).
const DEFAULT_RESP_PORT: u16 = 6379;
/// `roost up --sites`: site i's site-to-site port is this + i.
const DEFAULT_SITE_PORT: u16 = 7300;
/// `roost up --sites --nodes-per-site`: node g's cluster port is this + g.
const DEFAULT_SITE_CLUSTER_PORT: u16 = 7400;
/// `roost up --sites --nodes-per-site`: node g's admin port is this + g.
const DEFAULT_SITE_ADMIN_PORT: u16 = 7500;
/// `roost up --sites --nodes-per-site`: at most this many nodes in all (the
/// default port ranges are 100 apart).
const MAX_SITE_NODES: u32 = 64;

pub fn node(args: &NodeArgs) -> anyhow::Result<()> {
    init_logging();
    let mut register_bugs = RegisterBugs::default();
    for bug in &args.planted_register {
        match bug {
            PlantedBug::QuorumMinusOne => register_bugs.quorum_minus_one = true,
            PlantedBug::SkipRecovery => register_bugs.skip_recovery = true,
            PlantedBug::EarlyRemoval => bail!("early-removal is a simulator-only bug"),
        }
    }
    let protocol = match args.protocol {
        ProtocolArg::Ownership if !args.planted_register.is_empty() => {
            bail!("--planted-register needs --protocol register")
        }
        ProtocolArg::Ownership => {
            let mut protocol = NodeProtocol::default();
            if let NodeProtocol::Zeus {
                commit_bugs,
                node_bugs,
                ..
            } = &mut protocol
            {
                for bug in &args.planted_zeus {
                    match bug {
                        PlantedZeusBug::ReplyBeforeCommit => {
                            node_bugs.reply_before_reliable_commit = true
                        }
                        PlantedZeusBug::CommitBeforeAllAcks => {
                            commit_bugs.committed_before_all_acks = true
                        }
                        PlantedZeusBug::ReadInvalidReplica => {
                            node_bugs.read_invalid_replicas = true
                        }
                        // The log's, below.
                        PlantedZeusBug::AnswerBeforeFsync => {}
                    }
                }
            }
            protocol
        }
        ProtocolArg::Register if !args.planted_zeus.is_empty() => {
            bail!("--planted-zeus needs --protocol ownership")
        }
        ProtocolArg::Register => NodeProtocol::ExampleRegister {
            bugs: register_bugs,
        },
    };
    let config = NodeConfig {
        cluster: args.cluster.cluster()?,
        id: args.id,
        resp: resp_config(args)?,
        durability: durability_config(args)?,
        protocol,
        state_dir: args.data_dir.clone(),
    };
    let node = Node::start(config).map_err(|error| {
        let hint = if matches!(error, NodeError::FrontDoor { .. }) {
            " (--resp-port, --no-resp)"
        } else {
            ""
        };
        anyhow::anyhow!("{error}{hint}")
    })?;
    println!(
        "roost node {}: cluster {} admin http://{}{}",
        node.id(),
        node.cluster_addr(),
        node.admin_addr(),
        node.resp_addr().map_or(String::new(), |a| format!(
            " resp {a} (redis-cli -p {})",
            a.port()
        ))
    );
    // Until a stop signal, or until the cluster side stops on its own (its
    // state directory failed): then exit non-zero, so a supervisor sees it.
    let stopped_on_its_own = node.block_on(async {
        let watch = async {
            while !node.cluster_stopped() {
                tokio::time::sleep(NODE_WATCH_INTERVAL).await;
            }
        };
        tokio::select! {
            _ = stop_signal() => false,
            _ = watch => true,
        }
    });
    let id = node.id();
    node.stop();
    if stopped_on_its_own {
        bail!("node {id}: its cluster side stopped (the log says why)");
    }
    Ok(())
}

/// The node's durability log from `--sync` and `--data-dir`.
fn durability_config(
    args: &NodeArgs,
) -> anyhow::Result<Option<roost_durability::DurabilityConfig>> {
    let SyncArg::Log(sync) = args.cluster.sync else {
        return Ok(None);
    };
    if args.protocol != ProtocolArg::Ownership {
        return Ok(None);
    }
    let Some(data_dir) = &args.data_dir else {
        tracing::warn!(
            "no --data-dir: this node keeps no durability log (a restart of the whole cluster \
             loses its data); pass --data-dir DIR, or --sync memory to say so"
        );
        return Ok(None);
    };
    let mut config = roost_durability::DurabilityConfig::new(data_dir.join("durability"));
    config.sync = sync;
    config.checkpoint_after_bytes = args.cluster.checkpoint_after_mb << 20;
    config.bugs.answer_before_fsync = args
        .planted_zeus
        .contains(&PlantedZeusBug::AnswerBeforeFsync);
    Ok(Some(config))
}

/// How often `roost node` checks that its cluster side still runs.
const NODE_WATCH_INTERVAL: Duration = Duration::from_millis(200);

/// Node `id`'s state directory under `roost up`'s data directory.
fn node_state_dir(data_dir: &std::path::Path, id: u32) -> PathBuf {
    data_dir.join(format!("node{id}"))
}

/// How often `roost up` checks on its children.
const SUPERVISE_INTERVAL: Duration = Duration::from_millis(100);
/// How long children get to exit after SIGTERM before they are killed.
const STOP_GRACE: Duration = Duration::from_secs(3);
/// First delay before restarting a child that exited; doubles per restart.
const RESTART_BACKOFF_MIN: Duration = Duration::from_millis(200);
const RESTART_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// One supervised node process of `roost up`.
struct Supervised {
    id: u32,
    child: Option<Child>,
    restarts: u32,
    restart_at: Option<Instant>,
}

/// Starts `roost node --id id` serving RESP on `resp_base + id`, with its
/// state directory under `data_dir`.
fn spawn_node(
    exe: &std::path::Path,
    id: u32,
    resp_base: u16,
    data_dir: &std::path::Path,
    flags: &[String],
) -> anyhow::Result<Child> {
    let resp_port = u16::try_from(u32::from(resp_base) + id)
        .with_context(|| format!("--resp-port {resp_base} + node id {id} is not a port"))?;
    Command::new(exe)
        .arg("node")
        .args(["--id", &id.to_string()])
        .args(["--resp-port", &resp_port.to_string()])
        .arg("--data-dir")
        .arg(node_state_dir(data_dir, id))
        .args(flags)
        .stdin(Stdio::null())
        .spawn()
        .with_context(|| format!("starting node {id}"))
}

fn restart_backoff(restarts: u32) -> Duration {
    RESTART_BACKOFF_MIN
        .saturating_mul(1 << restarts.min(16))
        .min(RESTART_BACKOFF_MAX)
}

/// Writes a new random cluster secret (32 bytes, hex) to
/// `data_dir/cluster.secret`, readable by the owner only.
fn write_fresh_secret(data_dir: &std::path::Path) -> anyhow::Result<PathBuf> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let bytes: [u8; 32] = rand::random();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    let path = data_dir.join("cluster.secret");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("writing {}", path.display()))?;
    writeln!(file, "{hex}").with_context(|| format!("writing {}", path.display()))?;
    Ok(path.canonicalize().unwrap_or(path))
}

/// Starts the local etcd `roost up` runs when no --etcd endpoint is given.
fn start_local_etcd(args: &UpArgs) -> anyhow::Result<LocalEtcd> {
    let client = SocketAddr::from(([127, 0, 0, 1], args.etcd_port));
    let peer = SocketAddr::from(([127, 0, 0, 1], args.etcd_port + 1));
    let data_dir = args.data_dir.join("etcd");
    let etcd = LocalEtcd::start(&args.etcd_bin, &data_dir, client, peer)?;
    println!(
        "roost up: membership: etcd at {} started by roost up (data in {})",
        etcd.endpoint,
        data_dir.display()
    );
    Ok(etcd)
}

/// Where `roost up`'s membership comes from, decided before a node starts.
enum MembershipPlan {
    /// The built-in peer-to-peer lease membership; the reason it was chosen.
    Peer(String),
    /// etcd at endpoints given by --etcd or the configuration.
    GivenEtcd,
    /// An etcd that already answers on --etcd-port.
    RunningEtcd(String),
    /// An etcd `roost up` starts from --etcd-bin and supervises.
    LocalEtcd,
}

impl MembershipPlan {
    /// An etcd when one is given, running or installed; otherwise the
    /// built-in membership (so `roost up` works on a machine without etcd).
    fn choose(
        args: &UpArgs,
        asked: Option<MembershipSource>,
        given: &ClusterConfig,
    ) -> MembershipPlan {
        if asked == Some(MembershipSource::Peer) {
            return MembershipPlan::Peer("asked for with --membership peer".to_owned());
        }
        if given.coordinator.is_some() {
            return MembershipPlan::GivenEtcd;
        }
        let endpoint = format!("127.0.0.1:{}", args.etcd_port);
        if local_etcd::answers(&endpoint, ETCD_PROBE_TIMEOUT_MS) {
            return MembershipPlan::RunningEtcd(endpoint);
        }
        if asked == Some(MembershipSource::Etcd) || local_etcd::binary_found(&args.etcd_bin) {
            return MembershipPlan::LocalEtcd;
        }
        MembershipPlan::Peer(format!(
            "no etcd answers at {endpoint} and `{}` is not installed (Debian's etcd-server: \
             scripts/install-deps.sh installs it; --membership etcd --etcd HOST:PORT names one)",
            args.etcd_bin
        ))
    }
}

/// How long `roost up` waits for an etcd on --etcd-port to answer.
const ETCD_PROBE_TIMEOUT_MS: u64 = 300;

pub fn up(args: &UpArgs) -> anyhow::Result<()> {
    if let Some(sites) = args.sites {
        if args.nodes_per_site > 1 {
            return up_site_clusters(args, sites, args.nodes_per_site);
        }
        return up_sites(args, sites);
    }
    let mut cluster_args = args.cluster.clone();
    let given = ClusterArgs {
        membership: None,
        ..cluster_args.clone()
    }
    .cluster()?;
    let mut etcd = settle_membership(args, &mut cluster_args, &given)?;
    if cluster_args.secret_file.is_none() && given.security.is_none() {
        cluster_args.secret_file = Some(write_fresh_secret(&args.data_dir)?);
    }
    let config = cluster_args.cluster()?;
    let flags = cluster_args.child_flags();
    let exe = std::env::current_exe().context("locating the roost binary")?;
    // Each node keeps its state directory across runs: a restarted process
    // votes as its predecessor (its acceptor record), so the nodes of a new
    // run choose the view after the last run's. A directory this
    // configuration cannot use (a record naming a node no longer
    // configured, a damaged one) is an error now rather than a node that
    // fails its restarts.
    if config.coordinator.is_none() {
        for node in &config.nodes {
            let dir = node_state_dir(&args.data_dir, node.id);
            StateDir::open(&dir, NodeId(node.id), &config.ids()).with_context(|| {
                format!(
                    "node {}'s state directory (to start a new cluster, remove every node's: {})",
                    node.id,
                    args.data_dir.join("node<i>").display()
                )
            })?;
        }
    }
    let mut nodes = Vec::with_capacity(config.nodes.len());
    for node in &config.nodes {
        nodes.push(Supervised {
            id: node.id,
            child: Some(spawn_node(
                &exe,
                node.id,
                args.resp_port,
                &args.data_dir,
                &flags,
            )?),
            restarts: 0,
            restart_at: None,
        });
    }
    let last_resp = u32::from(args.resp_port) + config.nodes.len() as u32 - 1;
    println!(
        "roost up: {} nodes, membership {} (admin {}; node state in {}); RESP clients: \
         redis-cli -p {} .. {last_resp}; `roost status` shows them; Ctrl-C stops them",
        nodes.len(),
        if config.coordinator.is_some() {
            "etcd"
        } else {
            "peer"
        },
        config
            .nodes
            .iter()
            .map(|n| n.admin_addr.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        args.data_dir.join("node<i>").display(),
        args.resp_port,
    );
    let mut etcd_restarts = 0;
    let outcome = supervise_until_stopped(|| {
        supervise_etcd(args, &mut etcd, &mut etcd_restarts)?;
        supervise_nodes(
            &exe,
            args.resp_port,
            &args.data_dir,
            &flags,
            args.max_restarts,
            &mut nodes,
        );
        if nodes
            .iter()
            .all(|n| n.child.is_none() && n.restart_at.is_none())
        {
            bail!("every node has exited and used up its restarts");
        }
        Ok(())
    });
    let mut children: Vec<(u32, Child)> = nodes
        .into_iter()
        .filter_map(|n| n.child.map(|c| (n.id, c)))
        .collect();
    stop_children(&mut children);
    drop(etcd); // after the nodes, so they could revoke their leases
    outcome
}

/// Decides where `roost up`'s membership comes from (etcd given, running,
/// started here, or the built-in peer leases), says so, and sets
/// `cluster_args` for the children; returns the etcd started here.
fn settle_membership(
    args: &UpArgs,
    cluster_args: &mut ClusterArgs,
    given: &ClusterConfig,
) -> anyhow::Result<Option<LocalEtcd>> {
    let mut etcd = None;
    match MembershipPlan::choose(args, cluster_args.membership, given) {
        MembershipPlan::Peer(why) => {
            println!("roost up: membership: built-in (peer-to-peer leases among the nodes): {why}");
            cluster_args.membership = Some(MembershipSource::Peer);
            cluster_args.etcd = None;
        }
        MembershipPlan::GivenEtcd => {
            let endpoints = given
                .coordinator
                .as_ref()
                .map(|c| c.etcd_endpoints.join(","))
                .unwrap_or_default();
            println!("roost up: membership: etcd at {endpoints} (given)");
            cluster_args.membership = Some(MembershipSource::Etcd);
        }
        MembershipPlan::RunningEtcd(endpoint) => {
            println!("roost up: membership: etcd already running at {endpoint}");
            cluster_args.membership = Some(MembershipSource::Etcd);
            cluster_args.etcd = Some(endpoint);
        }
        MembershipPlan::LocalEtcd => {
            let local = start_local_etcd(args)?;
            cluster_args.membership = Some(MembershipSource::Etcd);
            cluster_args.etcd = Some(local.endpoint.clone());
            etcd = Some(local);
        }
    }
    Ok(etcd)
}

/// `roost up --sites N`: N site processes, each `roost resp --site i`. A
/// site that exits is not restarted: its counters' rights lived in its
/// memory, and the other sites would refuse a site that forgot what they
/// saw it do (the seed's §IV-E recovery is not built yet); the others go on.
fn up_sites(args: &UpArgs, sites: u32) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("locating the roost binary")?;
    let n = u16::try_from(sites).context("too many sites")?;
    // Every site-to-site link proves this secret: --secret-file, or a fresh
    // one in the data directory.
    let secret_file = match &args.cluster.secret_file {
        Some(path) => path.clone(),
        None => write_fresh_secret(&args.data_dir)?,
    };
    let peers = (0..n)
        .map(|i| format!("127.0.0.1:{}", args.site_port + i))
        .collect::<Vec<_>>()
        .join(",");
    let mut children = Vec::with_capacity(usize::from(n));
    for i in 0..n {
        let child = Command::new(&exe)
            .arg("resp")
            .args(["--port", &(args.site_resp_port + i).to_string()])
            .args(["--site", &i.to_string(), "--site-peers", &peers])
            .arg("--secret-file")
            .arg(&secret_file)
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("starting site {i}"));
        match child {
            Ok(child) => children.push((u32::from(i), child)),
            Err(e) => {
                stop_children(&mut children);
                return Err(e);
            }
        }
    }
    println!(
        "roost up: {sites} sites; RESP clients: redis-cli -p {} .. {} (BC.CREATE, BC.INC, BC.DEC key n LOCAL|GLOBAL, BC.GET); sites talk on {peers}, authenticated with {}; Ctrl-C stops them",
        args.site_resp_port,
        args.site_resp_port + n - 1,
        secret_file.display()
    );
    let outcome = supervise_until_stopped(|| {
        // One wait per child: a site that exited is said and dropped.
        children.retain_mut(|(id, child)| match child.try_wait() {
            Ok(Some(status)) => {
                eprintln!(
                    "roost up: site {id} exited ({status}); the other sites go on without it"
                );
                false
            }
            _ => true,
        });
        if children.is_empty() {
            bail!("every site has exited");
        }
        Ok(())
    });
    stop_children(&mut children);
    outcome
}

/// One site of `roost up --sites --nodes-per-site`: its cluster's
/// configuration file, its children's flags, its nodes.
struct SiteCluster {
    data_dir: PathBuf,
    resp_base: u16,
    flags: Vec<String>,
    nodes: Vec<Supervised>,
}

/// Node `member` of site `site`'s port: `base + site * per_site + member`.
fn site_node_port(base: u16, site: u32, per_site: u32, member: u32) -> anyhow::Result<u16> {
    u16::try_from(u32::from(base) + site * per_site + member)
        .with_context(|| format!("port {base} + {} is not a port", site * per_site + member))
}

/// `roost up --sites S --nodes-per-site N`: S Roost clusters of N `roost
/// node` processes, each cluster one site (a `[geo]` section in its
/// configuration, written to DIR/site<i>/cluster.toml). Membership is
/// settled as for one cluster; with etcd every site has its own key prefix.
/// A node that exits is restarted (its site's rows live on at the others).
fn up_site_clusters(args: &UpArgs, sites: u32, per_site: u32) -> anyhow::Result<()> {
    use roost_cluster::config::{GeoConfig, NodeAddr};
    if sites * per_site > MAX_SITE_NODES {
        bail!("--sites {sites} x --nodes-per-site {per_site} is more than {MAX_SITE_NODES} nodes");
    }
    let exe = std::env::current_exe().context("locating the roost binary")?;
    let mut cluster_args = ClusterArgs {
        config: None,
        ..args.cluster.clone()
    };
    let mut etcd = settle_membership(args, &mut cluster_args, &ClusterConfig::local(per_site))?;
    // Every link (node to node, site to site) proves this secret.
    let secret_file = match &cluster_args.secret_file {
        Some(path) => path.clone(),
        None => write_fresh_secret(&args.data_dir)?,
    };
    cluster_args.secret_file = Some(secret_file.clone());
    let loopback = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    let mut links = Vec::with_capacity(sites as usize);
    for site in 0..sites {
        let mut addrs = Vec::with_capacity(per_site as usize);
        for member in 0..per_site {
            addrs.push(loopback(site_node_port(
                args.site_port,
                site,
                per_site,
                member,
            )?));
        }
        links.push(addrs);
    }
    let mut clusters = Vec::with_capacity(sites as usize);
    for site in 0..sites {
        let data_dir = args.data_dir.join(format!("site{site}"));
        std::fs::create_dir_all(&data_dir)
            .with_context(|| format!("creating {}", data_dir.display()))?;
        let mut nodes = Vec::with_capacity(per_site as usize);
        for member in 0..per_site {
            let port = |base| site_node_port(base, site, per_site, member);
            nodes.push(NodeAddr {
                id: member,
                addr: loopback(port(args.site_cluster_port)?),
                admin_addr: loopback(port(args.site_admin_port)?),
                resp_addr: Some(loopback(port(args.site_resp_port)?)),
            });
        }
        let mut config = ClusterConfig {
            nodes,
            security: Some(SecurityConfig {
                secret_file: secret_file.clone(),
            }),
            geo: Some(GeoConfig {
                site: site as usize,
                sites: links.clone(),
            }),
            ..ClusterConfig::local(per_site)
        };
        if let (Some(MembershipSource::Etcd), Some(endpoints)) =
            (cluster_args.membership, &cluster_args.etcd)
        {
            let mut coordinator = CoordinatorConfig::etcd(
                endpoints.split(',').map(|e| e.trim().to_owned()).collect(),
            );
            coordinator.key_prefix = format!("/roost/site{site}/");
            config.coordinator = Some(coordinator);
        }
        config.validate()?;
        let path = data_dir.join("cluster.toml");
        std::fs::write(&path, config.to_toml())
            .with_context(|| format!("writing {}", path.display()))?;
        let flags = ClusterArgs {
            config: Some(path),
            ..cluster_args.clone()
        }
        .child_flags();
        clusters.push(SiteCluster {
            data_dir,
            resp_base: site_node_port(args.site_resp_port, site, per_site, 0)?,
            flags,
            nodes: Vec::new(),
        });
    }
    for cluster in &mut clusters {
        for member in 0..per_site {
            let child = spawn_node(
                &exe,
                member,
                cluster.resp_base,
                &cluster.data_dir,
                &cluster.flags,
            );
            match child {
                Ok(child) => cluster.nodes.push(Supervised {
                    id: member,
                    child: Some(child),
                    restarts: 0,
                    restart_at: None,
                }),
                Err(e) => {
                    let mut children: Vec<(u32, Child)> = clusters
                        .iter_mut()
                        .flat_map(|c| c.nodes.drain(..))
                        .filter_map(|n| n.child.map(|c| (n.id, c)))
                        .collect();
                    stop_children(&mut children);
                    return Err(e);
                }
            }
        }
    }
    let last = |base: u16| u32::from(base) + sites * per_site - 1;
    println!(
        "roost up: {sites} sites of {per_site} nodes each; site i's node j serves RESP on {} + i*{per_site} + j (redis-cli -p {} .. {}: BC.CREATE, BC.INC, BC.DEC key n LOCAL|GLOBAL, BC.GET, and every other command over the site's keyspace); site links on {} .. {}, cluster ports {} .., admin {} .. (configurations in {}); Ctrl-C stops them",
        args.site_resp_port,
        args.site_resp_port,
        last(args.site_resp_port),
        args.site_port,
        last(args.site_port),
        args.site_cluster_port,
        args.site_admin_port,
        args.data_dir.join("site<i>/cluster.toml").display(),
    );
    let mut etcd_restarts = 0;
    let outcome = supervise_until_stopped(|| {
        supervise_etcd(args, &mut etcd, &mut etcd_restarts)?;
        for cluster in &mut clusters {
            supervise_nodes(
                &exe,
                cluster.resp_base,
                &cluster.data_dir,
                &cluster.flags,
                args.max_restarts,
                &mut cluster.nodes,
            );
        }
        let gone = |n: &Supervised| n.child.is_none() && n.restart_at.is_none();
        if clusters.iter().all(|c| c.nodes.iter().all(gone)) {
            bail!("every node has exited and used up its restarts");
        }
        Ok(())
    });
    let mut children: Vec<(u32, Child)> = clusters
        .into_iter()
        .flat_map(|c| c.nodes)
        .filter_map(|n| n.child.map(|c| (n.id, c)))
        .collect();
    stop_children(&mut children);
    drop(etcd);
    outcome
}

/// Runs `tick` every [`SUPERVISE_INTERVAL`] until Ctrl-C or SIGTERM (`Ok`)
/// or until `tick` fails.
fn supervise_until_stopped(mut tick: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let mut ticker = tokio::time::interval(SUPERVISE_INTERVAL);
        let stop = stop_signal();
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => return Ok(()),
                _ = ticker.tick() => tick()?,
            }
        }
    })
}

/// Restarts a node that exited (with backoff) until it used up its restarts.
fn supervise_nodes(
    exe: &std::path::Path,
    resp_base: u16,
    data_dir: &std::path::Path,
    flags: &[String],
    max_restarts: u32,
    nodes: &mut [Supervised],
) {
    let now = Instant::now();
    for node in nodes.iter_mut() {
        if let Some(child) = &mut node.child {
            if let Ok(Some(status)) = child.try_wait() {
                node.child = None;
                if node.restarts < max_restarts {
                    let delay = restart_backoff(node.restarts);
                    eprintln!(
                        "roost up: node {} exited ({status}); restarting in {} ms",
                        node.id,
                        delay.as_millis()
                    );
                    node.restart_at = Some(now + delay);
                } else {
                    eprintln!(
                        "roost up: node {} exited ({status}) after {} restarts; giving up on it",
                        node.id, node.restarts
                    );
                }
            }
        }
        if node.restart_at.is_some_and(|at| at <= now) {
            node.restart_at = None;
            node.restarts += 1;
            match spawn_node(exe, node.id, resp_base, data_dir, flags) {
                Ok(child) => node.child = Some(child),
                Err(error) => eprintln!("roost up: {error:#}"),
            }
        }
    }
}

/// Restarts the local etcd if it exited; its data directory keeps the view.
fn supervise_etcd(
    args: &UpArgs,
    etcd: &mut Option<LocalEtcd>,
    restarts: &mut u32,
) -> anyhow::Result<()> {
    let Some(local) = etcd else { return Ok(()) };
    let Some(status) = local.exited() else {
        return Ok(());
    };
    if *restarts >= args.max_restarts {
        bail!("etcd exited ({status}) after {restarts} restarts");
    }
    *restarts += 1;
    eprintln!("roost up: etcd exited ({status}); restarting it");
    *etcd = None;
    *etcd = Some(start_local_etcd(args)?);
    Ok(())
}

/// SIGTERM to every child, then SIGKILL to those still running after the grace period.
fn stop_children(children: &mut [(u32, Child)]) {
    for (_, child) in children.iter() {
        // SAFETY: kill(2) on a child process id we own; no memory is involved.
        unsafe {
            libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
        }
    }
    let deadline = Instant::now() + STOP_GRACE;
    for (id, child) in children.iter_mut() {
        while Instant::now() < deadline {
            if !matches!(child.try_wait(), Ok(None)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if matches!(child.try_wait(), Ok(None)) {
            eprintln!("roost up: node {id} ignored SIGTERM; killing it");
            let _ = child.kill();
        }
        let _ = child.wait();
    }
}

fn candidate_admins(args: &StatusArgs) -> anyhow::Result<Vec<SocketAddr>> {
    if let Some(addr) = args.addr {
        return Ok(vec![addr]);
    }
    if let Some(path) = &args.config {
        return Ok(ClusterConfig::load(path)?
            .nodes
            .iter()
            .map(|n| n.admin_addr)
            .collect());
    }
    Ok((0..64)
        .map(|i| SocketAddr::from(([127, 0, 0, 1], DEFAULT_ADMIN_PORT + i)))
        .collect())
}

/// The value text of the unlabelled sample `name` in Prometheus text (a
/// node's `/metrics`).
pub(crate) fn sample<'a>(metrics: &'a str, name: &str) -> Option<&'a str> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
}

pub fn status(args: &StatusArgs) -> anyhow::Result<()> {
    let candidates = candidate_admins(args)?;
    let (addr, body) = runtime()?.block_on(async {
        for addr in &candidates {
            if let Ok((200, body)) = admin_get(*addr, "/status", Duration::from_millis(500)).await {
                return Ok((*addr, body));
            }
        }
        bail!(
            "no node answered at {} (is `roost up` running?)",
            if candidates.len() > 3 {
                format!("{} .. {}", candidates[0], candidates[candidates.len() - 1])
            } else {
                candidates
                    .iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        )
    })?;
    if args.json {
        print!("{body}");
        return Ok(());
    }
    let status: StatusReport =
        serde_json::from_str(&body).with_context(|| format!("unexpected status from {addr}"))?;
    println!(
        "epoch {}  members {:?}  membership {}  (asked node {} at {addr}: {}, lease {} ms left)",
        status.epoch,
        status.members,
        if status.membership.is_empty() {
            "?"
        } else {
            &status.membership
        },
        status.id,
        if status.serving {
            "serving"
        } else {
            "not serving"
        },
        status.lease_remaining_ms
    );
    println!("{:>4}  {:<21}  {:<8}  member", "id", "addr", "state");
    for node in &status.nodes {
        let state = serde_json::to_value(node.state)?;
        println!(
            "{:>4}  {:<21}  {:<8}  {}",
            node.id,
            node.addr.to_string(),
            state.as_str().unwrap_or("?"),
            if node.member { "yes" } else { "no" }
        );
    }
    // Where the asked node's writes ran: migrate (acquisitions) or forward.
    if let Ok((200, metrics)) =
        runtime()?.block_on(admin_get(addr, "/metrics", Duration::from_millis(500)))
    {
        let value = |name: &str| sample(&metrics, name).unwrap_or("?").to_owned();
        println!(
            "node {}: reactors owned {}, acquired {} (migrations), writes forwarded to their owner {} \
             (not sent {}, unknown {}), holds after a loss {}",
            status.id,
            value("roost_ownership_reactors_owned"),
            value("roost_ownership_acquires_total"),
            value("roost_resp_forwarded_total"),
            value("roost_resp_forwards_not_sent_total"),
            value("roost_resp_forwards_unknown_total"),
            value("roost_zeus_forward_holds_total"),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::args::{Cli, Command};

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("roost").chain(args.iter().copied()))
    }

    #[test]
    fn a_sample_is_found_by_its_whole_name() {
        let text = "# HELP roost_a_total A.\n# TYPE roost_a_total counter\n\
                    roost_a_total_more 9\nroost_a_total 3\n";
        assert_eq!(super::sample(text, "roost_a_total"), Some("3"));
        assert_eq!(super::sample(text, "roost_a"), None);
        assert_eq!(super::sample(text, "roost_b_total"), None);
    }

    #[test]
    fn cluster_flags_parse_and_bad_ones_are_errors() {
        let Command::Node(node) = parse(&["node", "--id", "2", "--lease-ms", "300"])
            .unwrap()
            .command
        else {
            panic!("not node");
        };
        assert_eq!(node.id, 2);
        let config = node.cluster.cluster().unwrap();
        assert_eq!(config.membership.lease_duration_ms, 300);
        assert_eq!(config.nodes.len(), 3);
        for bad in [
            &["node", "--nodes", "0"][..],
            &["node", "--lease-ms", "0"],
            &["up", "--nodes", "65"],
            &["status", "--addr", "nowhere"],
            &["bench", "transport", "--reps", "0"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be rejected");
        }
        // Timing that breaks the lease rules is a clear error, not a panic.
        let Command::Node(node) = parse(&["node", "--suspect-ms", "5000"]).unwrap().command else {
            panic!("not node");
        };
        let error = node.cluster.cluster().unwrap_err().to_string();
        assert!(error.contains("suspect_after_ms"), "{error}");
        // A node id missing from the configuration is an error too.
        let config = roost_cluster::config::ClusterConfig::local(3);
        assert!(config.node(7).is_err());
    }
}

//! `roost-node`: the composition root. One Roost node is assembled here and
//! nowhere else:
//!
//! * the **cluster runtime** (`roost-cluster`): membership (peer leases or
//!   etcd), the authenticated transport to the other nodes, the admin HTTP
//!   endpoint, and the protocol the node runs over them;
//! * the **reactor database**: the keyspace's reactors (`roost-resp`'s
//!   [`Keyspace`], made here before the front door so that other layers of
//!   the node can reach it);
//! * the **front door**: the RESP client port over that database;
//! * **metrics**: one `GET /metrics` on the admin port with every layer's
//!   figures (the cluster's and the front door's).
//!
//! `roost node` parses flags into a [`NodeConfig`] and calls
//! [`Node::start`]; `roost up` runs `roost node` processes. The protocol the
//! runtime drives is Zeus ownership of the keyspace's reactors ([`zeus`]):
//! a command on a key whose reactor another node owns acquires that reactor
//! and runs here. [`NodeProtocol::ExampleRegister`] runs the ABD register
//! example instead (the multi-process register checks use it).

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use roost_cluster::config::{ClusterConfig, ConfigError};
use roost_cluster::register::{Register, RegisterBugs};
use roost_cluster::runtime::{
    start_node_with, MetricsSource, ProtocolHandle, RunningNode, RuntimeError, StartOptions,
};
use roost_cluster::NodeId;
use roost_commit::{CommitBugs, CommitConfig, ReliableCommit};
use roost_ownership::{NewError, Ownership, OwnershipBugs, OwnershipConfig};
use roost_reactor::Deployment;
use roost_resp::{Keyspace, RunningServer, Server, ServerError, Services};
use thiserror::Error;

pub mod applier;
pub mod commit;
pub mod durable;
mod forward;
mod prom;
pub mod replicas;
pub mod zeus;

pub use commit::{CommitStore, OwnershipHandle, Zeus, ZeusCmd, ZeusMsg, ZeusOut};
pub use replicas::{DegreeError, ReplicationConfig};
pub use zeus::{DbStore, NodeOwnership, NodeReactor, ZeusBugs, ZeusPlacement};

/// Worker threads of the runtime that drives the cluster side of a node
/// (the protocol driver, the transport's links, the admin endpoint). The
/// database's executors and the front door have threads of their own.
pub const CLUSTER_WORKER_THREADS: usize = 2;
/// The largest copy of a reactor that ownership moves, replicates or creates
/// (under the transport's frame limit, with room for the envelope). Past
/// it, a reactor cannot move: a keyspace of more than about 64 x 15 MiB
/// needs more (smaller) keyspace reactors.
pub const MAX_REACTOR_COPY_BYTES: usize = 15 << 20;
/// How long [`Node::stop`] lets the cluster runtime's tasks finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Everything a node is started from.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The whole cluster (every node's addresses, membership, security).
    pub cluster: ClusterConfig,
    /// This node's id in `cluster`.
    pub id: u32,
    /// The RESP client port's settings (its `bind` is the port); `None`
    /// serves no client port (the keyspace then has the default settings).
    pub resp: Option<roost_resp::Config>,
    /// What the cluster runtime drives.
    pub protocol: NodeProtocol,
    /// This node's own state directory (`roost node --data-dir`): the peer
    /// membership keeps its Paxos acceptor record there, so a restarted
    /// process never votes against what it promised before. `None` keeps it
    /// in memory (a warning at start: a process restarted before the first
    /// view reached it may vote on that view again). Unused with etcd.
    pub state_dir: Option<PathBuf>,
    /// The node's durability log (`roost node --sync`, in
    /// `<data dir>/durability`): every reliably committed update this node
    /// applies, synced by the policy before it is acknowledged, and
    /// recovered at start. `None` keeps the node in memory only (a whole
    /// cluster's restart loses everything). Zeus only.
    pub durability: Option<roost_durability::DurabilityConfig>,
}

/// The protocol a node runs over the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // built once per node
pub enum NodeProtocol {
    /// Zeus (ownership of the keyspace's reactors and the reliable commit
    /// of their writes; planted bugs: the checkers' self-tests only).
    Zeus {
        ownership: OwnershipConfig,
        ownership_bugs: OwnershipBugs,
        commit: CommitConfig,
        commit_bugs: CommitBugs,
        /// Planted faults of the node's own wiring (self-tests only).
        node_bugs: ZeusBugs,
        replication: ReplicationConfig,
    },
    /// The ABD register example with its admin routes (planted bugs: the
    /// nemesis's self-tests only); the keyspace is then this node's alone.
    ExampleRegister { bugs: RegisterBugs },
}

impl Default for NodeProtocol {
    fn default() -> Self {
        NodeProtocol::Zeus {
            // The old owner stays a reader (the seed's sharer vector): the
            // reliable commit keeps its copy current, and a reactor that
            // moves back finds its rows there.
            ownership: OwnershipConfig {
                // A keyspace reactor holds a 64th of the keys: its copy
                // (an ownership ACK, an add-reader, a creation from a
                // recovered copy) may be megabytes. At most what one
                // transport frame carries.
                max_data_bytes: MAX_REACTOR_COPY_BYTES,
                ..OwnershipConfig::default()
            },
            ownership_bugs: OwnershipBugs::default(),
            commit: CommitConfig {
                // A transaction may write every keyspace reactor (FLUSHALL)
                // and large values: the reliable commit must not refuse
                // what the database committed.
                max_writes: 1 << 20,
                max_data_bytes: 64 << 20,
                ..CommitConfig::default()
            },
            commit_bugs: CommitBugs::default(),
            node_bugs: ZeusBugs::default(),
            replication: ReplicationConfig::default(),
        }
    }
}

/// Why a node did not start.
#[derive(Debug, Error)]
pub enum NodeError {
    #[error("node {id} is not in the cluster configuration: {source}")]
    NotConfigured { id: u32, source: ConfigError },
    #[error("starting the node's runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("starting the node's database: {0}")]
    Database(#[source] ServerError),
    #[error("starting the RESP client port on {addr}: {source}")]
    FrontDoor {
        addr: SocketAddr,
        source: ServerError,
    },
    #[error("starting the cluster runtime: {0}")]
    Cluster(#[source] RuntimeError),
    #[error("the ownership configuration: {0}")]
    Ownership(#[source] NewError),
    #[error("the reliable commit's configuration: {0}")]
    Commit(#[source] roost_commit::ConfigError),
    #[error("the replication configuration: {0}")]
    Replication(#[source] DegreeError),
    #[error("recovering the node's durability log: {0}")]
    Durability(#[source] roost_durability::OpenError),
    #[error("starting this node's part of geo site {site}: {reason}")]
    Site { site: usize, reason: String },
    #[error(
        "nodes {id} and {other} tag WATCH stamps alike (node ids must differ modulo {}); renumber one",
        u32::from(roost_resp::MAX_STAMP_ORIGIN) + 1
    )]
    StampOrigin { id: u32, other: u32 },
}

/// Node `id`'s tag in WATCH stamps: its id modulo the tags there are, which
/// no other configured node may share.
fn stamp_origin(cluster: &ClusterConfig, id: u32) -> Result<u16, NodeError> {
    let tags = u32::from(roost_resp::MAX_STAMP_ORIGIN) + 1;
    if let Some(other) = cluster
        .nodes
        .iter()
        .map(|n| n.id)
        .find(|&other| other != id && other % tags == id % tags)
    {
        return Err(NodeError::StampOrigin { id, other });
    }
    Ok(u16::try_from(id % tags).expect("below the tag count"))
}

/// The cluster side of a running node.
enum ClusterSide {
    Zeus(RunningNode<Zeus>),
    Register(RunningNode<Register>),
}

impl ClusterSide {
    fn addrs(&self) -> (u32, SocketAddr, SocketAddr) {
        match self {
            ClusterSide::Zeus(n) => (n.id, n.cluster_addr, n.admin_addr),
            ClusterSide::Register(n) => (n.id, n.cluster_addr, n.admin_addr),
        }
    }

    async fn stop(self) {
        match self {
            ClusterSide::Zeus(n) => n.stop().await,
            ClusterSide::Register(n) => n.stop().await,
        }
    }

    fn is_stopped(&self) -> bool {
        match self {
            ClusterSide::Zeus(n) => n.is_stopped(),
            ClusterSide::Register(n) => n.is_stopped(),
        }
    }
}

/// The front door's forwarding policy ([`forward`]), and the forward user's
/// password in `resp`: derived from the cluster secret, so every node's is
/// the same. Without a secret the cluster's links are unauthenticated (the
/// runtime warns), and so is this one: a fixed password.
fn node_router(
    cluster: &ClusterConfig,
    id: u32,
    shared: &std::sync::Arc<zeus::Shared>,
    reactors: &[roost_reactor::ReactorKey],
    resp: &mut roost_resp::Config,
) -> Option<std::sync::Arc<dyn roost_resp::Router>> {
    if !cluster.forwarding.enabled {
        return None;
    }
    let password = match &cluster.security {
        Some(security) => match security.load_secret() {
            Ok(secret) => secret.derive_password("resp-forward"),
            // The runtime refuses to start with the same error.
            Err(_) => return None,
        },
        None => "roost-forward-without-a-cluster-secret".to_owned(),
    };
    resp.forward_password = Some(password);
    let resp_addrs = cluster
        .nodes
        .iter()
        .filter(|n| n.id != id)
        .filter_map(|n| Some((NodeId(n.id), n.resp_addr?)))
        .collect();
    Some(std::sync::Arc::new(forward::NodeRouter::new(
        NodeId(id),
        std::sync::Arc::clone(shared),
        reactors.to_vec(),
        resp_addrs,
    )))
}

/// A running node. Dropping it without [`stop`](Self::stop) stops it too,
/// less gracefully (the runtime is shut down without waiting).
pub struct Node {
    id: u32,
    runtime: Option<tokio::runtime::Runtime>,
    cluster: Option<ClusterSide>,
    keyspace: Option<Keyspace>,
    front_door: Option<RunningServer>,
    /// This node's part of its geo site, when the cluster is one.
    site: Option<roost_escrow::KeyspaceSite>,
}

/// Starts node `id`'s part of the geo site `cluster` is (its links to the
/// other sites, its engines over the site's rows in `keyspace`), on
/// `runtime`.
fn start_site(
    cluster: &ClusterConfig,
    id: u32,
    keyspace: &Keyspace,
    runtime: &tokio::runtime::Runtime,
) -> Result<Option<roost_escrow::KeyspaceSite>, NodeError> {
    let Some(geo) = &cluster.geo else {
        return Ok(None);
    };
    let fail = |reason: String| NodeError::Site {
        site: geo.site,
        reason,
    };
    let secret = cluster
        .security
        .as_ref()
        .ok_or_else(|| {
            fail("sites must authenticate each other: add [security] secret_file".to_owned())
        })?
        .load_secret()
        .map_err(|e| fail(e.to_string()))?;
    // Validated: this site lists one address per node, in [[node]] order.
    let member = cluster
        .nodes
        .iter()
        .position(|n| n.id == id)
        .expect("the node is configured");
    let listen = geo.sites[geo.site][member];
    let config = roost_escrow::SiteConfig {
        site: geo.site,
        sites: geo.sites.len(),
        redis_url: String::new(),
        peers: geo.sites.clone(),
        member,
        members: cluster.nodes.len(),
        timing: roost_escrow::Timing::default(),
        policy: roost_escrow::default_policy(),
        secret,
        client_listen: None,
        planted: Default::default(),
    };
    runtime
        .block_on(roost_escrow::KeyspaceSite::start(
            config,
            listen,
            keyspace.clone(),
        ))
        .map(Some)
        .map_err(|e| fail(e.to_string()))
}

impl Node {
    /// Starts every layer of node `config.id`: the database first (the other
    /// layers serve it), then the front door, then the cluster runtime with
    /// one `/metrics` for all. Call it outside any async runtime.
    pub fn start(config: NodeConfig) -> Result<Node, NodeError> {
        let NodeConfig {
            cluster,
            id,
            resp,
            protocol,
            state_dir,
            durability,
        } = config;
        cluster
            .node(id)
            .map_err(|source| NodeError::NotConfigured { id, source })?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(CLUSTER_WORKER_THREADS)
            .thread_name(format!("roost-node-{id}"))
            .enable_all()
            .build()
            .map_err(NodeError::Runtime)?;
        let serve_clients = resp.is_some();
        let mut resp = resp.unwrap_or_default();
        // One metrics endpoint per node: the admin port's.
        resp.metrics_bind = None;
        // Writes at different nodes never share a WATCH stamp.
        resp.stamp_origin = stamp_origin(&cluster, id)?;
        let zeus = match &protocol {
            NodeProtocol::Zeus { .. } => Some(zeus::Shared::new(Deployment::shared_everything(
                resp.executors,
            ))),
            NodeProtocol::ExampleRegister { .. } => None,
        };
        if let (Some(shared), Some(config)) = (&zeus, durability) {
            let durable = durable::Durable::open(config).map_err(NodeError::Durability)?;
            let report = durable.report();
            tracing::info!(
                node = id,
                reactors = report.reactors,
                rows = report.rows,
                records = report.records_replayed,
                checkpoint_lsn = ?report.checkpoint_lsn,
                truncated_tail = ?report.truncated_tail,
                ms = report.duration_ms,
                sync = %report.sync,
                "recovered from the durability log"
            );
            shared.set_durable(durable);
        }
        let keyspace = match &zeus {
            Some(shared) => Keyspace::with_placement(
                &resp,
                std::sync::Arc::new(ZeusPlacement::new(std::sync::Arc::clone(shared))),
            ),
            None => Keyspace::new(&resp),
        }
        .map_err(NodeError::Database)?;
        // The keyspace's reactors, by index (what the front door routes by,
        // and what the nodes create).
        let keys: Vec<roost_reactor::ReactorKey> = (0..resp.keyspace_reactors)
            .map(|i| roost_resp::keyspace_reactor(i).expect("keyspace names are valid"))
            .collect();
        let site = if serve_clients {
            start_site(&cluster, id, &keyspace, &runtime)?
        } else {
            None
        };
        let front_door = if serve_clients {
            let addr = resp.bind;
            let router = zeus
                .as_ref()
                .and_then(|shared| node_router(&cluster, id, shared, &keys, &mut resp));
            let directory = zeus.as_ref().map(|shared| {
                let resp_addrs = cluster
                    .nodes
                    .iter()
                    .filter_map(|n| Some((NodeId(n.id), n.resp_addr?)))
                    .collect();
                std::sync::Arc::new(forward::NodeDirectory::new(
                    std::sync::Arc::clone(shared),
                    keys.clone(),
                    resp_addrs,
                )) as std::sync::Arc<dyn roost_resp::Directory>
            });
            let services = Services {
                keyspace: Some(keyspace.clone()),
                router,
                directory,
                site_counters: site.as_ref().map(roost_escrow::KeyspaceSite::counters),
                ..Services::examples()
            };
            let server = Server::spawn_with_services(resp.clone(), services)
                .map_err(|source| NodeError::FrontDoor { addr, source })?;
            Some(server)
        } else {
            None
        };
        let metrics_keyspace = keyspace.clone();
        let metrics_zeus = zeus.clone();
        let extra_metrics: MetricsSource = std::sync::Arc::new(move || {
            let mut text = metrics_keyspace.prometheus();
            if let Some(zeus) = &metrics_zeus {
                text.push_str(&zeus.prometheus());
            }
            text
        });
        let options = StartOptions {
            extra_metrics: Some(extra_metrics),
            state_dir,
        };
        let side = match protocol {
            NodeProtocol::Zeus {
                ownership,
                ownership_bugs,
                commit,
                commit_bugs,
                node_bugs,
                replication,
            } => {
                let shared = zeus.expect("made for Zeus");
                shared.plant(node_bugs);
                if ownership_bugs != OwnershipBugs::default()
                    || commit_bugs != CommitBugs::default()
                    || node_bugs != ZeusBugs::default()
                {
                    tracing::warn!(
                        node = id,
                        ?ownership_bugs,
                        ?commit_bugs,
                        ?node_bugs,
                        "running with planted bugs"
                    );
                }
                let store = DbStore::new(keyspace.clone(), std::sync::Arc::clone(&shared));
                let ownership = Ownership::new(NodeId(id), ownership, ownership_bugs, store)
                    .map_err(NodeError::Ownership)?;
                let commit = ReliableCommit::new(
                    NodeId(id),
                    commit,
                    CommitStore::new(keyspace.clone(), std::sync::Arc::clone(&shared)),
                )
                .map_err(NodeError::Commit)?
                .with_bugs(commit_bugs);
                let app = Zeus::new(
                    ownership,
                    commit,
                    replication,
                    std::sync::Arc::clone(&shared),
                )
                .map_err(NodeError::Replication)?;
                let running = runtime
                    .block_on(start_node_with(&cluster, id, app, options))
                    .map_err(NodeError::Cluster)?;
                shared.connect(running.handle(), runtime.handle().clone());
                runtime.spawn(applier::run(
                    std::sync::Arc::clone(&shared),
                    keyspace.clone(),
                ));
                runtime.spawn(commit::forward_intake(
                    std::sync::Arc::clone(&shared),
                    running.handle(),
                ));
                let nodes: Vec<NodeId> = cluster.nodes.iter().map(|n| NodeId(n.id)).collect();
                runtime.spawn(zeus::create_reactors(
                    OwnershipHandle(running.handle()),
                    std::sync::Arc::clone(&shared),
                    keys.clone(),
                    NodeId(id),
                    nodes,
                ));
                ClusterSide::Zeus(running)
            }
            NodeProtocol::ExampleRegister { bugs } => {
                if bugs != RegisterBugs::default() {
                    tracing::warn!(node = id, ?bugs, "running with planted register bugs");
                }
                let app = Register::new(cluster.register.clone(), bugs);
                let running = runtime
                    .block_on(start_node_with(&cluster, id, app, options))
                    .map_err(NodeError::Cluster)?;
                ClusterSide::Register(running)
            }
        };
        assert_eq!(side.addrs().0, id, "the runtime started the node asked for");
        Ok(Node {
            id,
            runtime: Some(runtime),
            cluster: Some(side),
            keyspace: Some(keyspace),
            front_door,
            site,
        })
    }

    pub fn id(&self) -> u32 {
        self.id
    }

    /// Has the cluster side stopped on its own (say, its state directory
    /// failed)? The process should then exit.
    pub fn cluster_stopped(&self) -> bool {
        self.cluster.as_ref().is_none_or(ClusterSide::is_stopped)
    }

    fn cluster(&self) -> &ClusterSide {
        self.cluster.as_ref().expect("present until stop")
    }

    /// Where the other nodes reach this one.
    pub fn cluster_addr(&self) -> SocketAddr {
        self.cluster().addrs().1
    }

    /// The admin HTTP endpoint (`/status`, `/metrics`, chaos, protocol routes).
    pub fn admin_addr(&self) -> SocketAddr {
        self.cluster().addrs().2
    }

    /// The RESP client port, unless the node serves none.
    pub fn resp_addr(&self) -> Option<SocketAddr> {
        self.front_door.as_ref().map(RunningServer::addr)
    }

    /// The node's database (the keyspace the front door serves).
    pub fn keyspace(&self) -> Option<&Keyspace> {
        self.keyspace.as_ref()
    }

    /// A way into the node's ownership protocol from any thread (`None`
    /// when it runs the register example).
    pub fn ownership(&self) -> Option<OwnershipHandle> {
        match self.cluster() {
            ClusterSide::Zeus(n) => Some(OwnershipHandle(n.handle())),
            ClusterSide::Register(_) => None,
        }
    }

    /// A way into the register example's protocol (`None` when the node
    /// runs ownership).
    pub fn example_register(&self) -> Option<ProtocolHandle<Register>> {
        match self.cluster() {
            ClusterSide::Register(n) => Some(n.handle()),
            ClusterSide::Zeus(_) => None,
        }
    }

    /// Every node of `cluster` in this process (tests, benchmarks), each
    /// with its own runtime, ports and database, serving RESP on a free
    /// port over `keyspace_reactors` reactors with one executor, running
    /// ownership, without a state directory (started once).
    pub fn start_in_process(
        cluster: &ClusterConfig,
        keyspace_reactors: usize,
    ) -> Result<Vec<Node>, NodeError> {
        Node::start_in_process_with(cluster, keyspace_reactors, &NodeProtocol::default())
    }

    /// As [`start_in_process`](Self::start_in_process), every node running
    /// `protocol` (planted bugs: the tests' self-checks).
    pub fn start_in_process_with(
        cluster: &ClusterConfig,
        keyspace_reactors: usize,
        protocol: &NodeProtocol,
    ) -> Result<Vec<Node>, NodeError> {
        let mut cluster = cluster.clone();
        // Every node's RESP port is known before any starts (the others
        // ship writes there), and none is a port the cluster side takes.
        let taken: Vec<u16> = cluster
            .nodes
            .iter()
            .flat_map(|n| [n.addr.port(), n.admin_addr.port()])
            .collect();
        let mut ports = Vec::new();
        for _ in 0..8 {
            ports = roost_cluster::local_cluster::free_ports(cluster.nodes.len())
                .map_err(NodeError::Runtime)?;
            if !ports.iter().any(|p| taken.contains(p)) {
                break;
            }
        }
        for (node, port) in cluster.nodes.iter_mut().zip(&ports) {
            if node.resp_addr.is_none() {
                node.resp_addr = Some(SocketAddr::from(([127, 0, 0, 1], *port)));
            }
        }
        let cluster = &cluster;
        cluster
            .nodes
            .iter()
            .map(|node| {
                let resp = roost_resp::Config {
                    bind: node.resp_addr.expect("set above"),
                    keyspace_reactors,
                    executors: 1,
                    ..roost_resp::Config::default()
                };
                Node::start(NodeConfig {
                    cluster: cluster.clone(),
                    id: node.id,
                    resp: Some(resp),
                    protocol: protocol.clone(),
                    state_dir: None,
                    durability: None,
                })
            })
            .collect()
    }

    /// Runs `future` on the node's cluster runtime (e.g. waiting for a stop
    /// signal, or requests through [`protocol`](Self::protocol)).
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.runtime
            .as_ref()
            .expect("present until stop")
            .block_on(future)
    }

    /// Stops the layers in the reverse order of their start: the cluster
    /// side first (it gives up its lease), then the front door, then the
    /// database.
    pub fn stop(mut self) {
        self.stop_layers();
    }

    fn stop_layers(&mut self) {
        if let (Some(runtime), Some(cluster)) = (self.runtime.as_ref(), self.cluster.take()) {
            runtime.block_on(cluster.stop());
        }
        drop(self.site.take());
        drop(self.front_door.take());
        drop(self.keyspace.take());
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(SHUTDOWN_GRACE);
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        drop(self.site.take());
        drop(self.front_door.take());
        drop(self.keyspace.take());
        if let Some(runtime) = self.runtime.take() {
            // Not stop_layers: drop may run inside another runtime, where
            // block_on panics.
            runtime.shutdown_background();
        }
    }
}

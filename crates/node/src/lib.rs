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
//! runtime drives is still the example register: the Zeus ownership
//! protocol takes its place here once it is wired to the database.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use roost_cluster::config::{ClusterConfig, ConfigError};
use roost_cluster::register::{Register, RegisterBugs};
use roost_cluster::runtime::{
    start_node_with, MetricsSource, ProtocolHandle, RunningNode, RuntimeError, StartOptions,
};
use roost_resp::{Keyspace, RunningServer, Server, ServerError, Services};
use thiserror::Error;

/// Worker threads of the runtime that drives the cluster side of a node
/// (the protocol driver, the transport's links, the admin endpoint). The
/// database's executors and the front door have threads of their own.
pub const CLUSTER_WORKER_THREADS: usize = 2;
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
    /// serves no client port.
    pub resp: Option<roost_resp::Config>,
    /// Planted register bugs (the nemesis's self-tests only).
    pub register_bugs: RegisterBugs,
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
}

/// A running node. Dropping it without [`stop`](Self::stop) stops it too,
/// less gracefully (the runtime is shut down without waiting).
pub struct Node {
    id: u32,
    runtime: Option<tokio::runtime::Runtime>,
    cluster: Option<RunningNode<Register>>,
    keyspace: Option<Keyspace>,
    front_door: Option<RunningServer>,
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
            register_bugs,
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
        let (keyspace, front_door) = match resp {
            None => (None, None),
            Some(mut resp) => {
                // One metrics endpoint per node: the admin port's.
                resp.metrics_bind = None;
                let keyspace = Keyspace::new(&resp).map_err(NodeError::Database)?;
                let addr = resp.bind;
                let services = Services {
                    keyspace: Some(keyspace.clone()),
                    ..Services::examples()
                };
                let server = Server::spawn_with_services(resp, services)
                    .map_err(|source| NodeError::FrontDoor { addr, source })?;
                (Some(keyspace), Some(server))
            }
        };
        let extra_metrics = keyspace.clone().map(|keyspace| {
            let source: MetricsSource = std::sync::Arc::new(move || keyspace.prometheus());
            source
        });
        if register_bugs != RegisterBugs::default() {
            tracing::warn!(
                node = id,
                ?register_bugs,
                "running with planted register bugs"
            );
        }
        let app = Register::new(cluster.register.clone(), register_bugs);
        let options = StartOptions { extra_metrics };
        let running = runtime
            .block_on(start_node_with(&cluster, id, app, options))
            .map_err(NodeError::Cluster)?;
        assert_eq!(running.id, id, "the runtime started the node asked for");
        Ok(Node {
            id,
            runtime: Some(runtime),
            cluster: Some(running),
            keyspace,
            front_door,
        })
    }

    pub fn id(&self) -> u32 {
        self.id
    }

    fn cluster(&self) -> &RunningNode<Register> {
        self.cluster.as_ref().expect("present until stop")
    }

    /// Where the other nodes reach this one.
    pub fn cluster_addr(&self) -> SocketAddr {
        self.cluster().cluster_addr
    }

    /// The admin HTTP endpoint (`/status`, `/metrics`, chaos, protocol routes).
    pub fn admin_addr(&self) -> SocketAddr {
        self.cluster().admin_addr
    }

    /// The RESP client port, unless the node serves none.
    pub fn resp_addr(&self) -> Option<SocketAddr> {
        self.front_door.as_ref().map(RunningServer::addr)
    }

    /// The node's database (the keyspace the front door serves).
    pub fn keyspace(&self) -> Option<&Keyspace> {
        self.keyspace.as_ref()
    }

    /// A way into the node's protocol from any thread.
    pub fn protocol(&self) -> ProtocolHandle<Register> {
        self.cluster().handle()
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
        drop(self.front_door.take());
        drop(self.keyspace.take());
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(SHUTDOWN_GRACE);
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        drop(self.front_door.take());
        drop(self.keyspace.take());
        if let Some(runtime) = self.runtime.take() {
            // Not stop_layers: drop may run inside another runtime, where
            // block_on panics.
            runtime.shutdown_background();
        }
    }
}

//! The listener, the connection limit, and running the server on its own
//! runtime.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use thiserror::Error;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::admin::{Clients, Peer};
use crate::config::{Config, ConfigError};
use crate::connection::{serve_connection, ExecutorTimers, TokioTimers};
use crate::functions::Functions;
use crate::sites::SiteCounters;
use crate::stats::Stats;
use crate::store::{SiteRow, Store};

#[derive(Debug, Error)]
pub enum ServerError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start the database: {0}")]
    Database(String),
    #[error("cannot start the server's runtime: {0}")]
    Runtime(std::io::Error),
}

/// What every connection shares.
pub(crate) struct ServerShared {
    pub(crate) config: Config,
    pub(crate) store: Arc<Store>,
    pub(crate) functions: Functions,
    /// With sites: where BC.* go.
    pub(crate) site_counters: Option<Arc<dyn SiteCounters>>,
    pub(crate) stats: Arc<Stats>,
    pub(crate) next_client_id: AtomicU64,
    /// The open connections (CLIENT LIST).
    pub(crate) clients: Clients,
    /// `max_clients`, as CONFIG SET maxclients left it.
    pub(crate) max_clients: AtomicUsize,
    /// Redis's encoding thresholds as CONFIG SET left them (remembered and
    /// reported; Roost's storage has no such encodings).
    pub(crate) thresholds: crate::admin::Thresholds,
    /// Connections waiting in a blocking command (INFO's `blocked_clients`).
    pub(crate) blocked_clients: AtomicUsize,
    /// Their commands, in the order they began to wait (Redis serves
    /// blocked clients first come, first served).
    pub(crate) blocked: crate::blocked::Blocked,
    /// What the retry ticks of blocked clients count from.
    pub(crate) blocked_epoch: std::time::Instant,
    /// INFO's `run_id`: random per server.
    pub(crate) run_id: u128,
    pub(crate) port: u16,
    /// Set (and `stopping` notified) when the server stops: connections
    /// served on the database's executors close at their next read.
    pub(crate) stopped: AtomicBool,
    pub(crate) stopping: tokio::sync::Notify,
    /// Round-robin over the executors that serve connections.
    next_executor: AtomicUsize,
    /// In a cluster: where writes on reactors owned elsewhere may be
    /// shipped ([`crate::forward`]).
    pub(crate) forwarding: Option<Arc<crate::forward::Forwarding>>,
    /// Who owns each keyspace reactor, where a cluster says (`ROOST.OWNER`).
    pub(crate) directory: Option<Arc<dyn crate::forward::Directory>>,
}

/// Tells the connections the server has stopped, when `serve` ends.
struct StopConnections(Arc<ServerShared>);

impl Drop for StopConnections {
    fn drop(&mut self) {
        self.0.stopped.store(true, Ordering::Release);
        self.0.stopping.notify_waiters();
    }
}

/// What the application plugs into a server.
#[derive(Default)]
pub struct Services {
    /// The functions FCALL calls.
    pub functions: Functions,
    /// With sites: the site's bounded counters, which BC.* then use, and
    /// which procedures reach as rows of the keyspace.
    pub site_counters: Option<Arc<dyn SiteCounters>>,
    /// The keyspace to serve, when the application made it first (a site's
    /// node keeps its counters in it); else the server makes its own.
    pub keyspace: Option<Keyspace>,
    /// In a cluster: the node's forwarding policy (needs the config's
    /// `forward_password`); `None`: every command runs here.
    pub router: Option<Arc<dyn crate::forward::Router>>,
    /// In a cluster: who owns each keyspace reactor (`ROOST.OWNER`).
    pub directory: Option<Arc<dyn crate::forward::Directory>>,
}

impl Services {
    /// The shipped functions, no sites.
    pub fn examples() -> Services {
        Services {
            functions: Functions::examples(),
            ..Services::default()
        }
    }
}

/// The database of a server's keyspace, made before the server so that the
/// application can keep its own rows in it: a site's bounded counters are
/// rows of the keyspace ([`SiteRow`]), which the site's node reads and
/// writes here and procedures (FCALL) update inside their transactions.
#[derive(Clone)]
pub struct Keyspace {
    store: Arc<Store>,
}

impl Keyspace {
    /// Starts the keyspace's database as `config` says (the server that
    /// serves it must be given the same config).
    pub fn new(config: &Config) -> Result<Keyspace, ServerError> {
        Keyspace::start(config, None)
    }

    /// The keyspace of one node of a cluster: `placement` says which
    /// keyspace reactors live here ([`keyspace_reactor`](crate::keyspace_reactor)
    /// names them); a command on one held elsewhere waits while the
    /// placement acquires it.
    pub fn with_placement(
        config: &Config,
        placement: Arc<dyn roost_reactor::Placement>,
    ) -> Result<Keyspace, ServerError> {
        Keyspace::start(config, Some(placement))
    }

    fn start(
        config: &Config,
        placement: Option<Arc<dyn roost_reactor::Placement>>,
    ) -> Result<Keyspace, ServerError> {
        config.validate()?;
        let store = Store::start(config, Arc::new(Stats::default()), placement)
            .map_err(ServerError::Database)?;
        Ok(Keyspace { store })
    }

    /// The keyspace's reactor database (a cluster node's ownership layer
    /// moves its reactors in and out).
    pub fn database(&self) -> &roost_reactor::Database {
        self.store.database()
    }

    /// The keyspace's metrics (commands, latencies, aborts) as Prometheus
    /// text, for a node that serves one `/metrics` for all its layers.
    pub fn prometheus(&self) -> String {
        self.store.stats().snapshot().prometheus()
    }

    /// `key`'s site row (`None`: the site has no such counter).
    pub async fn site_row(&self, key: &str) -> Result<Option<SiteRow>, String> {
        self.store
            .site_row(key.as_bytes())
            .await
            .map_err(|e| e.to_string())
    }

    /// Writes `row` as `key`'s site row if the stored token is `expected`
    /// (`None`: no row yet), in one serializable transaction; `false` if
    /// it was not.
    pub async fn site_row_cas(
        &self,
        key: &str,
        expected: Option<&str>,
        row: SiteRow,
    ) -> Result<bool, String> {
        self.store
            .site_row_cas(key.as_bytes(), expected.map(str::to_owned), row)
            .await
            .map_err(|e| e.to_string())
    }

    /// The keys with a site row.
    pub async fn site_row_keys(&self) -> Result<Vec<String>, String> {
        let keys = self
            .store
            .site_row_keys()
            .await
            .map_err(|e| e.to_string())?;
        Ok(keys
            .into_iter()
            .filter_map(|key| String::from_utf8(key).ok())
            .collect())
    }
}

/// A RESP server bound to its address, not yet serving.
pub struct Server {
    listener: TcpListener,
    /// The Prometheus endpoint's, with `metrics_bind`.
    metrics: Option<TcpListener>,
    shared: Arc<ServerShared>,
}

/// Hands a connection to one of the database's executors (round-robin),
/// which then reads it, runs its commands and writes its replies on one
/// thread: a command on a key served there pays no hand-off at all.
async fn serve_on_executor(stream: tokio::net::TcpStream, shared: &Arc<ServerShared>) {
    let peer = peer_of(&stream);
    let gone = || {
        shared
            .stats
            .connected_clients
            .fetch_sub(1, Ordering::AcqRel);
    };
    let Ok(stream) = stream.into_std() else {
        return gone();
    };
    let db = shared.store.database();
    let executor = shared.next_executor.fetch_add(1, Ordering::Relaxed) % db.executor_count();
    let conn_shared = Arc::clone(shared);
    let sent = db
        .run_on_executor(executor, move || {
            let shared = conn_shared;
            match roost_exec::net::TcpStream::from_std(stream) {
                Ok(stream) => roost_exec::spawn(async move {
                    serve_connection::<_, ExecutorTimers>(stream, &shared, peer).await;
                    shared
                        .stats
                        .connected_clients
                        .fetch_sub(1, Ordering::AcqRel);
                }),
                Err(_) => {
                    shared
                        .stats
                        .connected_clients
                        .fetch_sub(1, Ordering::AcqRel);
                }
            }
        })
        .await;
    if sent.is_err() {
        gone();
    }
}

/// A socket's two ends and descriptor, for CLIENT LIST.
fn peer_of(stream: &tokio::net::TcpStream) -> Peer {
    #[cfg(unix)]
    let fd = {
        use std::os::fd::AsRawFd;
        Some(i64::from(stream.as_raw_fd()))
    };
    #[cfg(not(unix))]
    let fd = None;
    Peer {
        addr: stream.peer_addr().ok(),
        local: stream.local_addr().ok(),
        fd,
    }
}

/// Aborts a spawned task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Server {
    /// Validates `config`, starts the database (its executors) and binds,
    /// serving the shipped functions ([`Functions::examples`]).
    pub async fn bind(config: Config) -> Result<Server, ServerError> {
        Server::bind_with_services(config, Services::examples()).await
    }

    /// [`bind`](Self::bind) serving the application's `functions` (FCALL).
    pub async fn bind_with(config: Config, functions: Functions) -> Result<Server, ServerError> {
        let services = Services {
            functions,
            ..Services::default()
        };
        Server::bind_with_services(config, services).await
    }

    /// [`bind`](Self::bind) with the application's services.
    pub async fn bind_with_services(
        config: Config,
        services: Services,
    ) -> Result<Server, ServerError> {
        let Services {
            functions,
            site_counters,
            keyspace,
            router,
            directory,
        } = services;
        config.validate()?;
        if router.is_some() && config.forward_password.is_none() {
            return Err(ConfigError::Invalid(
                "a forwarding router needs forward_password (the owners authenticate it)".into(),
            )
            .into());
        }
        let listener =
            TcpListener::bind(config.bind)
                .await
                .map_err(|source| ServerError::Bind {
                    addr: config.bind,
                    source,
                })?;
        let metrics = match config.metrics_bind {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|source| ServerError::Bind { addr, source })?,
            ),
            None => None,
        };
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
        let store = match keyspace {
            Some(keyspace) => keyspace.store,
            None => Store::start(&config, Arc::new(Stats::default()), None)
                .map_err(ServerError::Database)?,
        };
        if let Some(sites) = &site_counters {
            store
                .attach_sites(Arc::clone(sites))
                .map_err(ServerError::Database)?;
        }
        let stats = Arc::clone(store.stats());
        let max_clients = config.max_clients;
        let forwarding = router.map(|router| {
            Arc::new(crate::forward::Forwarding::new(
                router,
                config.forward_password.clone().unwrap_or_default(),
                std::time::Duration::from_millis(config.forward_timeout_ms),
                Arc::clone(&stats),
            ))
        });
        functions
            .scripting()
            .set_time_limit(config.lua_time_limit_ms);
        Ok(Server {
            listener,
            metrics,
            shared: Arc::new(ServerShared {
                config,
                store,
                functions,
                site_counters,
                stats,
                next_client_id: AtomicU64::new(1),
                clients: Clients::default(),
                max_clients: AtomicUsize::new(max_clients),
                thresholds: crate::admin::Thresholds::default(),
                blocked_clients: AtomicUsize::new(0),
                blocked: crate::blocked::Blocked::default(),
                blocked_epoch: std::time::Instant::now(),
                run_id: rand::random(),
                port,
                stopped: AtomicBool::new(false),
                stopping: tokio::sync::Notify::new(),
                next_executor: AtomicUsize::new(0),
                forwarding,
                directory,
            }),
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The Prometheus endpoint's address, if `metrics_bind` asked for one.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Accepts connections until the future is dropped. A client beyond
    /// `max_clients` gets `ERR max number of clients reached` and is closed.
    /// With `metrics_bind`, serves `GET /metrics` alongside.
    pub async fn serve(self) -> std::io::Result<()> {
        let Server {
            listener,
            metrics,
            shared,
        } = self;
        let _stop_connections = StopConnections(Arc::clone(&shared));
        let _metrics = metrics.map(|metrics| {
            AbortOnDrop(tokio::spawn(crate::metrics::serve(
                metrics,
                Arc::clone(&shared.stats),
            )))
        });
        loop {
            let (mut stream, _) = match listener.accept().await {
                Ok(accepted) => accepted,
                // Out of descriptors or a connection reset before accept:
                // keep serving the others.
                Err(_) => {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            };
            let stats = &shared.stats;
            stats.total_connections.fetch_add(1, Ordering::Relaxed);
            let connected = stats.connected_clients.fetch_add(1, Ordering::AcqRel);
            if connected >= shared.max_clients.load(Ordering::Relaxed) as u64 {
                stats.connected_clients.fetch_sub(1, Ordering::AcqRel);
                stats.rejected_connections.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(async move {
                    let _ = stream
                        .write_all(b"-ERR max number of clients reached\r\n")
                        .await;
                });
                continue;
            }
            let _ = stream.set_nodelay(true);
            if shared.site_counters.is_none() {
                serve_on_executor(stream, &shared).await;
                continue;
            }
            // With sites, BC.* commands wait on the sites' links, which live
            // on this runtime: such a server keeps its connections here.
            let shared = Arc::clone(&shared);
            let peer = peer_of(&stream);
            tokio::spawn(async move {
                serve_connection::<_, TokioTimers>(stream, &shared, peer).await;
                shared
                    .stats
                    .connected_clients
                    .fetch_sub(1, Ordering::AcqRel);
            });
        }
    }

    /// Runs a server on its own runtime (`io_threads` threads) on a thread
    /// of its own, so it may be called from anywhere, inside a runtime or
    /// not; the server stops when the handle is dropped.
    pub fn spawn(config: Config) -> Result<RunningServer, ServerError> {
        Server::spawn_with_services(config, Services::examples())
    }

    /// [`spawn`](Self::spawn) serving the application's `functions` (FCALL).
    pub fn spawn_with(config: Config, functions: Functions) -> Result<RunningServer, ServerError> {
        let services = Services {
            functions,
            ..Services::default()
        };
        Server::spawn_with_services(config, services)
    }

    /// [`spawn`](Self::spawn) with the application's services.
    pub fn spawn_with_services(
        config: Config,
        services: Services,
    ) -> Result<RunningServer, ServerError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.io_threads.max(1))
            .thread_name("roost-resp-io")
            .enable_all()
            .build()
            .map_err(ServerError::Runtime)?;
        let (stop, stopped) = oneshot::channel::<()>();
        let (bound, bind_result) = std::sync::mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("roost-resp".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let server = match Server::bind_with_services(config, services).await {
                        Ok(server) => server,
                        Err(e) => {
                            let _ = bound.send(Err(e));
                            return;
                        }
                    };
                    let metrics_addr = server.metrics_addr();
                    let addr = server
                        .local_addr()
                        .map(|addr| (addr, metrics_addr))
                        .map_err(ServerError::Runtime);
                    let failed = addr.is_err();
                    let _ = bound.send(addr);
                    if failed {
                        return;
                    }
                    tokio::select! {
                        _ = server.serve() => {}
                        _ = stopped => {}
                    }
                });
                // Connections still open are dropped with the runtime.
                runtime.shutdown_timeout(std::time::Duration::from_secs(1));
            })
            .map_err(ServerError::Runtime)?;
        let (addr, metrics_addr) = match bind_result.recv() {
            Ok(Ok(addrs)) => addrs,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(ServerError::Database(
                    "the server thread ended early".into(),
                ));
            }
        };
        Ok(RunningServer {
            addr,
            metrics_addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

/// A server running in the background ([`Server::spawn`]).
pub struct RunningServer {
    addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RunningServer {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The Prometheus endpoint's address (`GET /metrics`), if served.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Blocks until the server stops (it does not stop by itself).
    pub fn wait(mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

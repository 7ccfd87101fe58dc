//! The tokio shell: drives one [`Node`] (membership plus any [`Protocol`])
//! over `roost-net`, with real time and real sockets, and serves a small
//! admin HTTP endpoint beside it:
//!
//! | request | answer |
//! | --- | --- |
//! | `GET /status` | JSON: epoch, serving, lease, members, every node's health, transport counters |
//! | `GET /metrics` | Prometheus text: messages, bytes, batches, drops, epoch, serving |
//! | `GET /chaos` | the chaos settings now |
//! | `GET /chaos?drop=P&dup=P&delay_ms=N&partition=1,2` | replaces them (a parameter left out is off) |
//! | `GET /chaos/coordinator?cut=1` | cuts this node off from etcd (`cut=0` reconnects) |
//! | `GET /chaos/heal` | switches chaos off (and reconnects etcd) |
//! | protocol routes ([`Served::command_for`]) | e.g. `/register/write?value=7`, `/register/read` |
//!
//! The driver is one task: it owns the node, so the node needs no locks; the
//! admin endpoint and in-process callers ([`ProtocolHandle`], from any thread
//! or executor) talk to it through one bounded channel. Requests are tagged
//! with an id ([`Served::request_id`]), so many are in flight at once; an
//! output answers the request its [`Served::answers`] names.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use roost_net::{
    ChaosSettings, EpochId, Inbox, MetricsSnapshot, NodeId, Transport, TransportConfig,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::ClusterConfig;
use crate::coordinated::CoordinatorUpdate;
use crate::coordinator::{CoordinatorChaos, CoordinatorHandle};
use crate::membership::{Health, MembershipBugs};
use crate::node::{Members, Node, NodeEffects, NodeMsg, TimerKey};
use crate::protocol::Protocol;
use crate::register::{Register, RegisterCmd, RegisterOut};
use crate::state_dir::{StateDir, StateDirError};

/// A request's tag: the driver keeps one reply per id in flight.
pub type RequestId = u64;

/// Requests in flight at one node's driver at most (beyond: [`RequestError::Busy`]).
pub const MAX_REQUESTS_IN_FLIGHT: usize = 4096;

/// A protocol that can be driven from the admin endpoint and from
/// in-process callers.
pub trait Served: Protocol + Send + 'static
where
    Self::Cmd: Send,
    Self::Out: Send,
{
    /// The command an admin request names, tagged `request` if the protocol
    /// carries tags; `None` if the path is not this protocol's, `Some(Err)`
    /// for a bad request.
    fn command_for(
        path: &str,
        query: &BTreeMap<String, String>,
        request: RequestId,
    ) -> Option<Result<Self::Cmd, String>>;
    /// The tag a command carries (a protocol serving one request at a time
    /// answers the same id for all, so a second waits its turn as busy).
    fn request_id(cmd: &Self::Cmd) -> RequestId;
    /// The request this output finally answers, `None` for progress outputs.
    fn answers(out: &Self::Out) -> Option<RequestId>;
    fn out_json(out: &Self::Out) -> Value;
}

/// Why a request got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum RequestError {
    #[error("busy: {MAX_REQUESTS_IN_FLIGHT} requests in flight, or this one's id already is")]
    Busy,
    #[error("node stopped")]
    Stopped,
}

/// What a request's reply channel carries.
type Reply<P> = oneshot::Sender<Result<<P as Protocol>::Out, RequestError>>;

/// A cloneable way into a running node's protocol for in-process callers:
/// any thread or executor may hold one and keep many requests in flight.
pub struct ProtocolHandle<P: Protocol> {
    driver: mpsc::Sender<AdminRequest<P>>,
    next_request: Arc<AtomicU64>,
    lease: Arc<Lease>,
}

impl<P: Protocol> Clone for ProtocolHandle<P> {
    fn clone(&self) -> Self {
        ProtocolHandle {
            driver: self.driver.clone(),
            next_request: Arc::clone(&self.next_request),
            lease: Arc::clone(&self.lease),
        }
    }
}

/// This node's lease as the driver last saw it, readable from any thread:
/// a protocol's local reads (Zeus's read-only transactions, which send no
/// message) are answered only while it holds. The deadline is on the
/// node's clock, so it lapses even if the driver stops updating it (a node
/// cut off from etcd keeps its last deadline, which passes before etcd
/// drops its registration and the others move on).
#[derive(Debug)]
pub struct Lease {
    started: Instant,
    /// Serving until then (ms since `started`; 0: not serving).
    serving_until_ms: AtomicU64,
}

impl Lease {
    fn new(started: Instant) -> Lease {
        Lease {
            started,
            serving_until_ms: AtomicU64::new(0),
        }
    }

    /// Whether this node is a member holding a valid lease now.
    pub fn serving_now(&self) -> bool {
        let now_ms = self.started.elapsed().as_millis() as u64;
        now_ms < self.serving_until_ms.load(Ordering::Acquire)
    }

    fn set(&self, serving_until_ms: u64) {
        self.serving_until_ms
            .store(serving_until_ms, Ordering::Release);
    }
}

impl<P> ProtocolHandle<P>
where
    P: Served,
    P::Cmd: Send,
    P::Out: Send,
{
    /// A fresh request id (unique per node process).
    pub fn next_request_id(&self) -> RequestId {
        self.next_request.fetch_add(1, Ordering::Relaxed)
    }

    /// The node's lease, for reads served without the driver.
    pub fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    /// Sends `cmd` (tagged by the caller with [`next_request_id`](Self::next_request_id))
    /// and waits for the output that answers it.
    pub async fn request(&self, cmd: P::Cmd) -> Result<P::Out, RequestError> {
        let (tx, rx) = oneshot::channel();
        self.driver
            .send(AdminRequest::Command(cmd, tx))
            .await
            .map_err(|_| RequestError::Stopped)?;
        rx.await.map_err(|_| RequestError::Stopped)?
    }

    /// Sends `cmd` and returns once the driver's channel took it, with the
    /// channel its answer will come on. Commands one caller submits reach
    /// the protocol in the order submitted, and the caller need not wait for
    /// an answer before submitting the next (a pipeline fed in order).
    pub async fn submit(&self, cmd: P::Cmd) -> Result<Answer<P>, RequestError> {
        let (tx, rx) = oneshot::channel();
        self.driver
            .send(AdminRequest::Command(cmd, tx))
            .await
            .map_err(|_| RequestError::Stopped)?;
        Ok(Answer(rx))
    }

    /// The node's status report.
    pub async fn status(&self) -> Result<StatusReport, RequestError> {
        let (tx, rx) = oneshot::channel();
        self.driver
            .send(AdminRequest::Status(tx))
            .await
            .map_err(|_| RequestError::Stopped)?;
        rx.await.map_err(|_| RequestError::Stopped)
    }
}

/// The answer to a [`ProtocolHandle::submit`]ted command, to wait for.
pub struct Answer<P: Protocol>(oneshot::Receiver<Result<P::Out, RequestError>>);

impl<P: Protocol> Answer<P> {
    pub async fn wait(self) -> Result<P::Out, RequestError> {
        self.0.await.map_err(|_| RequestError::Stopped)?
    }
}

/// More Prometheus text for `GET /metrics`, from the layers beside the
/// cluster (the node's front door, its database).
pub type MetricsSource = Arc<dyn Fn() -> String + Send + Sync>;

/// What [`start_node_with`] may add to a node beyond its protocol.
#[derive(Clone, Default)]
pub struct StartOptions {
    pub extra_metrics: Option<MetricsSource>,
    /// This node's state directory ([`crate::state_dir`]): the peer
    /// membership keeps its Paxos acceptor record there across restarts.
    /// Without one it keeps it in memory, and a process restarted before the
    /// first view reached it may vote on that view again with forgotten
    /// state (the node logs a warning). Unused with etcd membership.
    pub state_dir: Option<PathBuf>,
}

impl Served for Register {
    fn command_for(
        path: &str,
        query: &BTreeMap<String, String>,
        _request: RequestId,
    ) -> Option<Result<RegisterCmd, String>> {
        match path {
            "/register/read" => Some(Ok(RegisterCmd::Read)),
            "/register/write" => Some(match query.get("value").map(|v| v.parse::<u64>()) {
                Some(Ok(value)) => Ok(RegisterCmd::Write(value)),
                _ => Err("write needs value=<u64>".to_owned()),
            }),
            _ => None,
        }
    }

    /// The register serves one operation at a time per node.
    fn request_id(_cmd: &RegisterCmd) -> RequestId {
        0
    }

    fn answers(out: &RegisterOut) -> Option<RequestId> {
        let progress = matches!(
            out,
            RegisterOut::Accepted { .. }
                | RegisterOut::Storing { .. }
                | RegisterOut::Recovered { .. }
        );
        (!progress).then_some(0)
    }

    fn out_json(out: &RegisterOut) -> Value {
        serde_json::to_value(out).unwrap_or(Value::Null)
    }
}

/// One node's answer to `GET /status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    pub id: u32,
    pub incarnation: u64,
    pub epoch: u64,
    pub serving: bool,
    pub lease_remaining_ms: u64,
    pub members: Vec<u32>,
    pub nodes: Vec<NodeStatus>,
    pub view_changes: u64,
    pub uptime_ms: u64,
    pub transport: MetricsSnapshot,
    /// Where membership comes from: `"etcd"` or `"peer"`.
    #[serde(default)]
    pub membership: String,
    /// This node is cut off from etcd by the chaos switch.
    #[serde(default)]
    pub coordinator_cut: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    pub id: u32,
    pub addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub state: Health,
    pub member: bool,
}

#[derive(Debug, Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Transport(#[from] roost_net::StartError),
    #[error(transparent)]
    Etcd(#[from] crate::etcd::EtcdError),
    #[error(transparent)]
    StateDir(#[from] StateDirError),
}

enum AdminRequest<P: Protocol> {
    Status(oneshot::Sender<StatusReport>),
    Command(P::Cmd, Reply<P>),
}

/// A running node: its addresses and a way to stop it.
pub struct RunningNode<P: Protocol = Register> {
    pub id: u32,
    pub cluster_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    handle: ProtocolHandle<P>,
    shutdown: Option<oneshot::Sender<()>>,
    driver: JoinHandle<()>,
    admin: JoinHandle<()>,
    coordinator: Option<CoordinatorHandle>,
}

impl<P: Protocol> RunningNode<P> {
    /// Has the node's driver stopped on its own (its state directory
    /// failed, or the etcd shell stopped)? Its process should exit.
    pub fn is_stopped(&self) -> bool {
        self.driver.is_finished()
    }

    /// A way into the node's protocol for in-process callers.
    pub fn handle(&self) -> ProtocolHandle<P> {
        self.handle.clone()
    }

    /// Stops the node and waits for its driver to finish.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.admin.abort();
        let _ = (&mut self.driver).await;
        // The node no longer serves: give up the lease so the others need
        // not wait for it to expire.
        if let Some(coordinator) = self.coordinator.take() {
            coordinator.stop().await;
        }
    }
}

/// Wall-clock nanoseconds: a new value for each process start.
pub fn fresh_incarnation() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        .max(1)
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, RuntimeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| RuntimeError::Bind { addr, source })
}

/// Starts node `me` of `config` with `app`. Must run inside a tokio runtime.
pub async fn start_node<P>(
    config: &ClusterConfig,
    me: u32,
    app: P,
) -> Result<RunningNode<P>, RuntimeError>
where
    P: Served,
    P::Cmd: Send,
    P::Out: Send,
{
    start_node_with(config, me, app, StartOptions::default()).await
}

/// [`start_node`] with what the layers beside the cluster add.
pub async fn start_node_with<P>(
    config: &ClusterConfig,
    me: u32,
    app: P,
    options: StartOptions,
) -> Result<RunningNode<P>, RuntimeError>
where
    P: Served,
    P::Cmd: Send,
    P::Out: Send,
{
    config.validate()?;
    let this = config.node(me)?.clone();
    // The state directory before any socket: a bad one is an error at start.
    let (state_dir, recovered) = match (&config.coordinator, &options.state_dir) {
        (None, Some(path)) => {
            let (dir, recovered) = StateDir::open(path, NodeId(me), &config.ids())?;
            tracing::info!(
                node = me,
                path = %path.display(),
                recovered_epoch = recovered.as_ref().map(|r| r.installed.epoch.0),
                "membership state directory"
            );
            (Some(dir), recovered)
        }
        (None, None) => {
            tracing::warn!(
                node = me,
                "no state directory (--data-dir): the peer membership keeps its Paxos acceptor \
                 state in memory only, so if this process restarts before the first view \
                 reaches it, it may vote on that view again with forgotten state (two first \
                 views are possible)"
            );
            (None, None)
        }
        (Some(_), state_dir) => {
            if let Some(path) = state_dir {
                tracing::info!(
                    node = me,
                    path = %path.display(),
                    "state directory unused: etcd keeps the membership's state"
                );
            }
            (None, None)
        }
    };
    let cluster_listener = bind(this.addr).await?;
    let admin_listener = bind(this.admin_addr).await?;
    let cluster_addr = cluster_listener
        .local_addr()
        .map_err(|source| RuntimeError::Bind {
            addr: this.addr,
            source,
        })?;
    let admin_addr = admin_listener
        .local_addr()
        .map_err(|source| RuntimeError::Bind {
            addr: this.admin_addr,
            source,
        })?;
    let peers: BTreeMap<NodeId, SocketAddr> = config
        .nodes
        .iter()
        .filter(|n| n.id != me)
        .map(|n| (NodeId(n.id), n.addr))
        .collect();
    let auth = match &config.security {
        Some(security) => Some(security.load_secret()?),
        None => {
            tracing::warn!(
                node = me,
                "no [security] secret_file: node-to-node connections are not authenticated"
            );
            None
        }
    };
    let (transport, inbox) = Transport::<NodeMsg<P::Msg>>::start(
        NodeId(me),
        cluster_listener,
        peers,
        TransportConfig {
            auth,
            ..TransportConfig::default()
        },
    )?;
    let (admin_tx, admin_rx) = mpsc::channel(64);
    let (shutdown_tx, shutdown_rx) = oneshot::channel();
    let started = Instant::now();
    let incarnation = fresh_incarnation();
    let (node, coordinator, updates) = match &config.coordinator {
        Some(coordinator_config) => {
            let (handle, updates) = crate::coordinator::spawn(
                coordinator_config.clone(),
                NodeId(me),
                incarnation,
                cluster_addr.to_string(),
                config.ids(),
                started,
            )?;
            let node = Node::coordinated(NodeId(me), incarnation, &config.ids(), app);
            (node, Some(handle), Some(updates))
        }
        None => {
            let node = Node::new(
                NodeId(me),
                incarnation,
                &config.ids(),
                config.membership.clone(),
                MembershipBugs::default(),
                recovered,
                app,
                0,
            );
            (node, None, None)
        }
    };
    let coordinator_chaos = coordinator.as_ref().map(|c| c.chaos.clone());
    let lease = Arc::new(Lease::new(started));
    let driver = Driver {
        config: config.clone(),
        started,
        lease: Arc::clone(&lease),
        node,
        transport: transport.clone(),
        timers: BTreeMap::new(),
        fx: NodeEffects::default(),
        in_flight: BTreeMap::new(),
        view_changes: 0,
        coordinator_chaos: coordinator_chaos.clone(),
        state_dir,
        failed: false,
    };
    let driver = tokio::spawn(driver.run(inbox, admin_rx, updates, shutdown_rx));
    let handle = ProtocolHandle {
        driver: admin_tx,
        next_request: Arc::new(AtomicU64::new(1)),
        lease,
    };
    let admin = tokio::spawn(admin_loop::<P>(
        admin_listener,
        handle.clone(),
        transport,
        coordinator_chaos,
        options.extra_metrics,
    ));
    tracing::info!(node = me, %cluster_addr, %admin_addr, "node started");
    Ok(RunningNode {
        id: me,
        cluster_addr,
        admin_addr,
        handle,
        shutdown: Some(shutdown_tx),
        driver,
        admin,
        coordinator,
    })
}

/// The next round from the coordinator shell; never resolves without one.
async fn next_update(
    updates: &mut Option<mpsc::Receiver<CoordinatorUpdate>>,
) -> Option<CoordinatorUpdate> {
    match updates {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

struct Driver<P: Protocol> {
    config: ClusterConfig,
    started: Instant,
    /// What `apply` publishes of the lease (see [`Lease`]).
    lease: Arc<Lease>,
    node: Node<P>,
    transport: Transport<NodeMsg<P::Msg>>,
    timers: BTreeMap<TimerKey, Instant>,
    fx: NodeEffects<P::Msg, P::Out>,
    /// Replies owed, by request id (at most [`MAX_REQUESTS_IN_FLIGHT`]).
    in_flight: BTreeMap<RequestId, Reply<P>>,
    view_changes: u64,
    coordinator_chaos: Option<CoordinatorChaos>,
    /// Where the membership's record is made durable (peer membership).
    state_dir: Option<StateDir>,
    /// A record could not be made durable: the node sends nothing more and stops.
    failed: bool,
}

/// Envelopes handled per wake-up before timers and admin get a turn.
const MAX_MESSAGES_PER_WAKE: usize = 1024;

impl<P> Driver<P>
where
    P: Served,
    P::Cmd: Send,
    P::Out: Send,
{
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    async fn run(
        mut self,
        mut inbox: Inbox<NodeMsg<P::Msg>>,
        mut admin: mpsc::Receiver<AdminRequest<P>>,
        mut updates: Option<mpsc::Receiver<CoordinatorUpdate>>,
        mut shutdown: oneshot::Receiver<()>,
    ) {
        let mut fx = std::mem::take(&mut self.fx);
        self.node.start(self.now_ms(), &mut fx);
        self.apply(&mut fx);
        loop {
            if self.failed {
                break;
            }
            let deadline = self
                .timers
                .values()
                .min()
                .copied()
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                biased;
                _ = &mut shutdown => break,
                envelope = inbox.recv() => {
                    let Some(mut envelope) = envelope else { break };
                    for _ in 0..MAX_MESSAGES_PER_WAKE {
                        let now = self.now_ms();
                        self.node.on_message(now, envelope.from, envelope.epoch, envelope.msg, &mut fx);
                        self.apply(&mut fx);
                        if self.failed {
                            break;
                        }
                        match inbox.try_recv() {
                            Some(next) => envelope = next,
                            None => break,
                        }
                    }
                }
                request = admin.recv() => {
                    let Some(request) = request else { break };
                    self.on_admin(request, &mut fx);
                }
                update = next_update(&mut updates) => {
                    let Some(update) = update else {
                        tracing::error!(node = self.node.me().0, "the etcd shell stopped");
                        break;
                    };
                    let now = self.now_ms();
                    self.node.on_coordinator(now, update, &mut fx);
                    self.apply(&mut fx);
                }
                _ = tokio::time::sleep_until(deadline) => self.fire_timers(&mut fx),
            }
        }
        self.transport.shutdown();
        if self.failed {
            tracing::error!(
                node = self.node.me().0,
                "node stopped: its state directory failed"
            );
        } else {
            tracing::info!(node = self.node.me().0, "node stopped");
        }
    }

    fn fire_timers(&mut self, fx: &mut NodeEffects<P::Msg, P::Out>) {
        let now = Instant::now();
        let due: Vec<TimerKey> = self
            .timers
            .iter()
            .filter(|(_, &at)| at <= now)
            .map(|(&key, _)| key)
            .collect();
        for key in due {
            if self.failed {
                return;
            }
            self.timers.remove(&key);
            let now_ms = self.now_ms();
            self.node.on_timer(now_ms, key, fx);
            self.apply(fx);
        }
    }

    fn on_admin(&mut self, request: AdminRequest<P>, fx: &mut NodeEffects<P::Msg, P::Out>) {
        match request {
            AdminRequest::Status(reply) => {
                let _ = reply.send(self.status());
            }
            AdminRequest::Command(cmd, reply) => {
                let id = P::request_id(&cmd);
                if self.in_flight.len() >= MAX_REQUESTS_IN_FLIGHT
                    || self.in_flight.contains_key(&id)
                {
                    let _ = reply.send(Err(RequestError::Busy));
                    return;
                }
                self.in_flight.insert(id, reply);
                debug_assert!(self.in_flight.len() <= MAX_REQUESTS_IN_FLIGHT);
                let now = self.now_ms();
                self.node.on_command(now, cmd, fx);
                self.apply(fx);
            }
        }
    }

    fn apply(&mut self, fx: &mut NodeEffects<P::Msg, P::Out>) {
        let me = self.node.me();
        // After every event: a view that dropped this node, or a lease
        // refreshed or lost, shows at once to reads served without us.
        let now_ms = self.now_ms();
        self.lease.set(if self.node.serving(now_ms) {
            self.node.membership().lease_expiry_ms()
        } else {
            0
        });
        // The record before the messages: a promise or vote reaches no one
        // before it is on disk. Written inline (a few hundred bytes and an
        // fsync, a handful of times per view change): nothing may be sent
        // before it is done anyway.
        if let (Some(record), Some(dir)) = (fx.persist.take(), self.state_dir.as_mut()) {
            if let Err(error) = dir.store(&record) {
                tracing::error!(
                    node = me.0,
                    %error,
                    "cannot make the membership's acceptor state durable; stopping the node \
                     (it must not send votes it could forget)"
                );
                self.failed = true;
            }
        }
        if self.failed {
            fx.clear();
            return;
        }
        for (to, epoch, msg) in fx.sends.drain(..) {
            if let Err(error) = self.transport.send(to, epoch, msg) {
                tracing::debug!(node = me.0, %to, %error, "send failed");
            }
        }
        let now = Instant::now();
        for (key, after_ms) in fx.timers.drain(..) {
            self.timers
                .insert(key, now + Duration::from_millis(after_ms));
        }
        for out in fx.outputs.drain(..) {
            if let Some(id) = P::answers(&out) {
                if let Some(reply) = self.in_flight.remove(&id) {
                    let _ = reply.send(Ok(out));
                }
            }
        }
        for view in fx.installed.drain(..) {
            self.view_changes += 1;
            tracing::info!(
                node = me.0,
                epoch = view.epoch.0,
                members = ?view.members.keys().map(|n| n.0).collect::<Vec<_>>(),
                "view installed"
            );
        }
        for line in fx.logs.drain(..) {
            tracing::debug!(node = me.0, "{line}");
        }
    }

    fn status(&self) -> StatusReport {
        let now_ms = self.now_ms();
        let membership = self.node.membership();
        let view = membership.view();
        let health = self.node.health(now_ms);
        let nodes = self
            .config
            .nodes
            .iter()
            .map(|addr| {
                let h = health.iter().find(|h| h.id == addr.id);
                NodeStatus {
                    id: addr.id,
                    addr: addr.addr,
                    admin_addr: addr.admin_addr,
                    state: h.map_or(Health::Dead, |h| h.state),
                    member: h.is_some_and(|h| h.member),
                }
            })
            .collect();
        StatusReport {
            id: self.node.me().0,
            incarnation: membership.incarnation(),
            epoch: view.epoch.0,
            serving: self.node.serving(now_ms),
            lease_remaining_ms: membership
                .lease_expiry_ms()
                .saturating_sub(now_ms)
                .min(u64::from(u32::MAX)),
            members: view.members.keys().map(|n| n.0).collect(),
            nodes,
            view_changes: self.view_changes,
            uptime_ms: now_ms,
            transport: self.transport.metrics(),
            membership: match self.node.membership() {
                Members::Peer(_) => "peer".to_owned(),
                Members::Coordinated(_) => "etcd".to_owned(),
            },
            coordinator_cut: self.coordinator_chaos.as_ref().is_some_and(|c| c.is_cut()),
        }
    }
}

/// Bytes of an admin request head we read at most.
const MAX_REQUEST_BYTES: usize = 8 * 1024;
const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Admin requests served at once: each holds a task and up to
/// `MAX_REQUEST_BYTES` for up to `ADMIN_TIMEOUT`, so without a bound a
/// client opening connections faster than they time out grows them without
/// limit. Beyond it a connection is answered 503 at once and closed.
pub const MAX_ADMIN_CONNECTIONS: usize = 64;
const BUSY_RESPONSE: &[u8] = b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\n\
Content-Length: 34\r\nConnection: close\r\n\r\ntoo many admin connections, retry\n";

async fn admin_loop<P>(
    listener: TcpListener,
    driver: ProtocolHandle<P>,
    transport: Transport<NodeMsg<P::Msg>>,
    coordinator: Option<CoordinatorChaos>,
    extra_metrics: Option<MetricsSource>,
) where
    P: Served,
    P::Cmd: Send,
    P::Out: Send,
{
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_ADMIN_CONNECTIONS));
    let refusals = Arc::new(tokio::sync::Semaphore::new(MAX_ADMIN_CONNECTIONS));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            // Non-blocking: a client that does not read cannot hold the
            // accept loop (the answer fits any socket buffer).
            let _ = stream.try_write(BUSY_RESPONSE);
            // Closed with the client's request unread, the socket would
            // answer it with a reset, which can destroy the 503 before the
            // client reads it (CI saw "connection reset"). So the request
            // is read and dropped first, briefly, by a bounded few tasks.
            if let Ok(refusing) = Arc::clone(&refusals).try_acquire_owned() {
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(REFUSAL_LINGER, linger(stream)).await;
                    drop(refusing);
                });
            }
            continue;
        };
        let driver = driver.clone();
        let transport = transport.clone();
        let coordinator = coordinator.clone();
        let extra_metrics = extra_metrics.clone();
        tokio::spawn(async move {
            let serve = serve_admin::<P>(stream, driver, transport, coordinator, extra_metrics);
            let _ = tokio::time::timeout(ADMIN_TIMEOUT, serve).await;
            drop(slot);
        });
    }
}

/// How long a refused admin connection is read from before it is closed.
const REFUSAL_LINGER: Duration = Duration::from_millis(500);

/// Ends a refused connection without a reset: no more writes, then reads
/// (and drops) what the client sent until it closes, `MAX_REQUEST_BYTES`
/// at most.
async fn linger(mut stream: TcpStream) {
    let _ = stream.shutdown().await;
    let mut sink = [0u8; 1024];
    let mut read = 0;
    while read < MAX_REQUEST_BYTES {
        match stream.read(&mut sink).await {
            Ok(0) | Err(_) => break,
            Ok(n) => read += n,
        }
    }
}

/// A parsed request line: path and query parameters.
pub fn parse_request_line(head: &str) -> Result<(String, BTreeMap<String, String>), String> {
    let line = head.lines().next().ok_or("empty request")?;
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return Err("malformed request line".into());
    };
    if method != "GET" && method != "POST" {
        return Err(format!("method {method} not supported"));
    }
    let (path, query_text) = target.split_once('?').unwrap_or((target, ""));
    let mut query = BTreeMap::new();
    for pair in query_text.split('&').filter(|p| !p.is_empty()).take(32) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        query.insert(key.to_owned(), value.to_owned());
    }
    Ok((path.to_owned(), query))
}

/// Chaos settings from query parameters; absent ones are off.
pub fn chaos_from_query(query: &BTreeMap<String, String>) -> Result<ChaosSettings, String> {
    let probability = |name: &str| -> Result<f64, String> {
        query.get(name).map_or(Ok(0.0), |v| {
            v.parse::<f64>()
                .map_err(|_| format!("{name}={v} is not a number"))
        })
    };
    let mut settings = ChaosSettings {
        drop_probability: probability("drop")?,
        duplicate_probability: probability("dup")?,
        delay_ms: query.get("delay_ms").map_or(Ok(0), |v| {
            v.parse::<u64>()
                .map_err(|_| format!("delay_ms={v} is not a number"))
        })?,
        partitioned: Default::default(),
    };
    if let Some(list) = query.get("partition") {
        for id in list.split(',').filter(|s| !s.is_empty()).take(64) {
            let id = id
                .parse::<u32>()
                .map_err(|_| format!("partition: `{id}` is not a node id"))?;
            settings.partitioned.insert(NodeId(id));
        }
    }
    settings.validate().map_err(|e| e.to_string())?;
    Ok(settings)
}

async fn serve_admin<P>(
    mut stream: TcpStream,
    driver: ProtocolHandle<P>,
    transport: Transport<NodeMsg<P::Msg>>,
    coordinator: Option<CoordinatorChaos>,
    extra_metrics: Option<MetricsSource>,
) where
    P: Served,
    P::Cmd: Send,
    P::Out: Send,
{
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.ends_with(b"\n\n") {
        if head.len() >= MAX_REQUEST_BYTES {
            let _ = respond(&mut stream, 431, "text/plain", "request too large\n").await;
            return;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&chunk[..n]),
        }
    }
    let text = String::from_utf8_lossy(&head);
    let (path, query) = match parse_request_line(&text) {
        Ok(parsed) => parsed,
        Err(error) => {
            let _ = respond(&mut stream, 400, "text/plain", &format!("{error}\n")).await;
            return;
        }
    };
    let (code, kind, body) = route::<P>(
        &path,
        &query,
        &driver,
        &transport,
        coordinator.as_ref(),
        extra_metrics.as_ref(),
    )
    .await;
    let _ = respond(&mut stream, code, kind, &body).await;
}

async fn route<P>(
    path: &str,
    query: &BTreeMap<String, String>,
    driver: &ProtocolHandle<P>,
    transport: &Transport<NodeMsg<P::Msg>>,
    coordinator: Option<&CoordinatorChaos>,
    extra_metrics: Option<&MetricsSource>,
) -> (u16, &'static str, String)
where
    P: Served,
    P::Cmd: Send,
    P::Out: Send,
{
    const JSON: &str = "application/json";
    match path {
        "/status" | "/metrics" => {
            let Ok(status) = driver.status().await else {
                return (503, "text/plain", "node stopped\n".into());
            };
            if path == "/status" {
                let body = serde_json::to_string(&status).unwrap_or_default();
                (200, JSON, body + "\n")
            } else {
                let mut text = prometheus_text(&status);
                if let Some(extra) = extra_metrics {
                    text.push_str(&extra());
                }
                (200, "text/plain; version=0.0.4", text)
            }
        }
        "/chaos" => {
            if !query.is_empty() {
                match chaos_from_query(query) {
                    Ok(settings) => {
                        if let Err(error) = transport.chaos().set(settings) {
                            return (400, "text/plain", format!("{error}\n"));
                        }
                    }
                    Err(error) => return (400, "text/plain", format!("{error}\n")),
                }
            }
            let body = serde_json::to_string(&transport.chaos().get()).unwrap_or_default();
            (200, JSON, body + "\n")
        }
        "/chaos/heal" => {
            let _ = transport.chaos().set(ChaosSettings::default());
            if let Some(coordinator) = coordinator {
                coordinator.set_cut(false);
            }
            (200, JSON, "{}\n".into())
        }
        "/chaos/coordinator" => {
            let Some(coordinator) = coordinator else {
                return (
                    404,
                    "text/plain",
                    "this node's membership is not etcd's\n".into(),
                );
            };
            match query.get("cut").map(String::as_str) {
                None => {}
                Some("1" | "true") => coordinator.set_cut(true),
                Some("0" | "false") => coordinator.set_cut(false),
                Some(other) => return (400, "text/plain", format!("cut={other}: use 1 or 0\n")),
            }
            (
                200,
                JSON,
                json!({"cut": coordinator.is_cut()}).to_string() + "\n",
            )
        }
        _ => match P::command_for(path, query, driver.next_request_id()) {
            None => (404, "text/plain", format!("no route {path}\n")),
            Some(Err(error)) => (400, "text/plain", format!("{error}\n")),
            Some(Ok(cmd)) => match driver.request(cmd).await {
                Ok(out) => (200, JSON, P::out_json(&out).to_string() + "\n"),
                // Kept as the register's admin clients read it.
                Err(RequestError::Busy) => (
                    200,
                    JSON,
                    json!({"error": RequestError::Busy.to_string()}).to_string() + "\n",
                ),
                Err(RequestError::Stopped) => (503, "text/plain", "node stopped\n".into()),
            },
        },
    }
}

async fn respond(stream: &mut TcpStream, code: u16, kind: &str, body: &str) -> std::io::Result<()> {
    let reason = match code {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        431 => "Request Header Fields Too Large",
        _ => "Service Unavailable",
    };
    let head = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

/// The Prometheus text exposition of a node's status.
pub fn prometheus_text(status: &StatusReport) -> String {
    let t = &status.transport;
    // (name, type, help, value) of each single-sample metric, labelled by node.
    let single: [(&str, &str, &str, u64); 13] = [
        (
            "roost_epoch",
            "gauge",
            "Installed membership epoch.",
            status.epoch,
        ),
        (
            "roost_serving",
            "gauge",
            "1 while the node holds its lease.",
            u64::from(status.serving),
        ),
        (
            "roost_view_changes_total",
            "counter",
            "Views installed by this process.",
            status.view_changes,
        ),
        (
            "roost_messages_sent_total",
            "counter",
            "Messages written to sockets.",
            t.msgs_sent,
        ),
        (
            "roost_bytes_sent_total",
            "counter",
            "Bytes written to sockets.",
            t.bytes_sent,
        ),
        (
            "roost_batches_sent_total",
            "counter",
            "Socket writes (messages / batches = mean batch size).",
            t.batches_sent,
        ),
        (
            "roost_messages_received_total",
            "counter",
            "Messages decoded.",
            t.msgs_received,
        ),
        (
            "roost_bytes_received_total",
            "counter",
            "Bytes decoded.",
            t.bytes_received,
        ),
        (
            "roost_frames_rejected_total",
            "counter",
            "Malformed or oversized frames (each closed its connection).",
            t.frames_rejected,
        ),
        (
            "roost_connects_total",
            "counter",
            "Outbound connections made (authenticated, where a secret is set).",
            t.connects,
        ),
        (
            "roost_auth_failures_total",
            "counter",
            "Node-to-node connections refused by the shared-secret handshake.",
            t.auth_failures,
        ),
        (
            "roost_coordinator_cut",
            "gauge",
            "1 while the chaos switch cuts this node off from etcd.",
            u64::from(status.coordinator_cut),
        ),
        (
            "roost_uptime_ms",
            "gauge",
            "Milliseconds since the node started.",
            status.uptime_ms,
        ),
    ];
    let id = status.id;
    let mut out = String::with_capacity(4096);
    for (name, kind, help, value) in single {
        out.push_str(&format!(
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{node=\"{id}\"}} {value}\n"
        ));
    }
    let name = "roost_messages_dropped_total";
    out.push_str(&format!(
        "# HELP {name} Messages dropped, by reason.\n# TYPE {name} counter\n"
    ));
    for (reason, value) in [
        ("queue_full", t.dropped_queue_full),
        ("chaos", t.dropped_chaos),
        ("unreachable", t.dropped_unreachable),
    ] {
        out.push_str(&format!(
            "{name}{{node=\"{id}\",reason=\"{reason}\"}} {value}\n"
        ));
    }
    out
}

/// Fetches `path` from an admin endpoint (a tiny HTTP/1.0 client for the
/// CLI and tests). Returns the status code and body.
pub async fn admin_get(
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
) -> std::io::Result<(u16, String)> {
    let work = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: roost\r\n\r\n").as_bytes())
            .await?;
        let mut response = Vec::new();
        let mut limited = (&mut stream).take(MAX_ADMIN_RESPONSE_BYTES);
        limited.read_to_end(&mut response).await?;
        parse_admin_response(&response)
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(result) => result,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "admin request timed out",
        )),
    }
}

/// The most bytes of an admin answer a client reads.
pub const MAX_ADMIN_RESPONSE_BYTES: u64 = 16 << 20;

/// The status code and body of a whole admin HTTP response (read to EOF).
pub fn parse_admin_response(response: &[u8]) -> std::io::Result<(u16, String)> {
    let text = String::from_utf8_lossy(response);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, "not an HTTP response")
        })?;
    Ok((code, body.to_owned()))
}

/// The epoch a status names (for callers that only need that).
pub fn epoch_of(status: &StatusReport) -> EpochId {
    EpochId(status.epoch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_lapses_on_the_nodes_clock_without_the_driver() {
        let lease = Lease::new(Instant::now());
        assert!(!lease.serving_now(), "no lease before the first view");
        let now_ms = lease.started.elapsed().as_millis() as u64;
        lease.set(now_ms + 200);
        assert!(lease.serving_now());
        // Nobody updates it (a node cut off from etcd): it lapses anyway.
        std::thread::sleep(Duration::from_millis(250));
        assert!(!lease.serving_now());
        // Dropped from the view: not serving at once.
        lease.set(u64::MAX);
        assert!(lease.serving_now());
        lease.set(0);
        assert!(!lease.serving_now());
    }
    use crate::protocol::{Context, Effects, Input};

    /// A protocol whose commands `(id, hold)` wait until a command with
    /// `hold == false` answers every held one (and itself): requests in
    /// flight at once, answered by their own ids.
    #[derive(Default)]
    struct Gate {
        held: Vec<u64>,
    }

    impl Protocol for Gate {
        type Msg = ();
        type Cmd = (u64, bool);
        type Out = u64;

        fn on_input(
            &mut self,
            _ctx: &Context<'_>,
            input: Input<(), (u64, bool)>,
            fx: &mut Effects<(), u64>,
        ) {
            if let Input::Command((id, hold)) = input {
                self.held.push(id);
                if !hold {
                    for id in self.held.drain(..) {
                        fx.output(id);
                    }
                }
            }
        }
    }

    impl Served for Gate {
        fn command_for(
            _path: &str,
            _query: &BTreeMap<String, String>,
            _request: RequestId,
        ) -> Option<Result<(u64, bool), String>> {
            None
        }

        fn request_id(cmd: &(u64, bool)) -> RequestId {
            cmd.0
        }

        fn answers(out: &u64) -> Option<RequestId> {
            Some(*out)
        }

        fn out_json(out: &u64) -> Value {
            json!(out)
        }
    }

    fn one_node_config() -> ClusterConfig {
        use crate::config::NodeAddr;
        let ports = crate::local_cluster::free_ports(2).unwrap();
        ClusterConfig {
            nodes: vec![NodeAddr {
                id: 0,
                addr: SocketAddr::from(([127, 0, 0, 1], ports[0])),
                admin_addr: SocketAddr::from(([127, 0, 0, 1], ports[1])),
                resp_addr: None,
            }],
            ..ClusterConfig::local(1)
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_in_flight_at_once_are_answered_by_their_ids() {
        let node = start_node(&one_node_config(), 0, Gate::default())
            .await
            .unwrap();
        let handle = node.handle();
        let (a, b) = (handle.next_request_id(), handle.next_request_id());
        assert_ne!(a, b);
        let first = tokio::spawn({
            let handle = handle.clone();
            async move { handle.request((a, true)).await }
        });
        let second = tokio::spawn({
            let handle = handle.clone();
            async move { handle.request((b, true)).await }
        });
        // Give both time to reach the driver (a local channel), where they
        // are held; a duplicate of a held id is then refused. Every wait is
        // bounded, so a lost answer fails the test instead of hanging it.
        let patience = Duration::from_secs(5);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let duplicate = tokio::time::timeout(patience, handle.request((a, true))).await;
        assert_eq!(duplicate, Ok(Err(RequestError::Busy)));
        assert!(!first.is_finished() && !second.is_finished(), "held");
        let c = handle.next_request_id();
        let release = tokio::time::timeout(patience, handle.request((c, false))).await;
        assert_eq!(release, Ok(Ok(c)));
        let first = tokio::time::timeout(patience, first).await.unwrap();
        let second = tokio::time::timeout(patience, second).await.unwrap();
        assert_eq!(first.unwrap(), Ok(a));
        assert_eq!(second.unwrap(), Ok(b));
        node.stop().await;
        assert_eq!(
            handle.request((handle.next_request_id(), false)).await,
            Err(RequestError::Stopped)
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn admin_connections_are_bounded_and_refused_clearly() {
        use crate::config::{ClusterConfig, NodeAddr};
        use crate::register::{Register, RegisterBugs};
        let ports = crate::local_cluster::free_ports(2).unwrap();
        let config = ClusterConfig {
            nodes: vec![NodeAddr {
                id: 0,
                addr: SocketAddr::from(([127, 0, 0, 1], ports[0])),
                admin_addr: SocketAddr::from(([127, 0, 0, 1], ports[1])),
                resp_addr: None,
            }],
            ..ClusterConfig::local(1)
        };
        let app = Register::new(config.register.clone(), RegisterBugs::default());
        let node = start_node(&config, 0, app).await.unwrap();
        let admin = node.admin_addr;
        let timeout = Duration::from_secs(5);
        assert_eq!(admin_get(admin, "/status", timeout).await.unwrap().0, 200);
        // Connections that send nothing hold every slot...
        let mut idle = Vec::new();
        for _ in 0..MAX_ADMIN_CONNECTIONS {
            idle.push(TcpStream::connect(admin).await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        // ...so the next is refused at once with a clear answer.
        let (code, body) = admin_get(admin, "/status", timeout).await.unwrap();
        assert_eq!(code, 503, "{body}");
        assert!(body.contains("too many admin connections"), "{body}");
        // Once they go, requests are served again.
        drop(idle);
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let (code, _) = admin_get(admin, "/status", timeout).await.unwrap();
            if code == 200 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "still refused");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        node.stop().await;
    }

    #[test]
    fn prometheus_text_has_every_metric_once_with_help_and_type() {
        let status = StatusReport {
            id: 3,
            incarnation: 9,
            epoch: 7,
            serving: true,
            lease_remaining_ms: 100,
            members: vec![3],
            nodes: Vec::new(),
            view_changes: 2,
            uptime_ms: 1234,
            transport: MetricsSnapshot {
                auth_failures: 5,
                dropped_chaos: 4,
                ..MetricsSnapshot::default()
            },
            membership: "etcd".into(),
            coordinator_cut: false,
        };
        let text = prometheus_text(&status);
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert!(kind == "gauge" || kind == "counter", "{line}");
                assert_eq!(
                    text.matches(&format!("# HELP {name} ")).count(),
                    1,
                    "{name}"
                );
            } else if !line.starts_with('#') {
                let (series, value) = line.rsplit_once(' ').unwrap();
                assert!(series.contains("node=\"3\""), "{line}");
                assert!(value.parse::<u64>().is_ok(), "{line}");
            }
        }
        assert!(text.contains("roost_epoch{node=\"3\"} 7\n"));
        assert!(text.contains("roost_auth_failures_total{node=\"3\"} 5\n"));
        assert!(text.contains("roost_messages_dropped_total{node=\"3\",reason=\"chaos\"} 4\n"));
        assert!(text.contains("roost_serving{node=\"3\"} 1\n"));
    }
}

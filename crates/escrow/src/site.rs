//! A site's middleware process: the tokio shell around a design's backend,
//! with the custom cross-site propagation and rights transfer the paper had
//! to build (§IV-B/C/D).
//!
//! One [`Site`] per site (region). Its [`SiteLinks`] (`roost-net`,
//! authenticated with the deployment's secret) carry everything between
//! sites; a client-based site also listens for its own client libraries
//! (authenticated the same way) and relays their requests for rights. It
//! runs these loops:
//!
//! - **propagation**, every `propagate_every`: ship the deltas of the
//!   counters changed since the last batch to every reachable site
//!   ([`Propagator`]); everything to a site that reconnects, and to all every
//!   `resync_every`;
//! - **proactive transfers**, every `proactive_every`: for each counter,
//!   [`ProactivePolicy`] decides whether to ask the site believed to hold the
//!   most rights for half the difference (asynchronous, rate-limited);
//! - **heartbeat**, every `link.heartbeat_every`: ping the peers, take down
//!   those silent too long;
//! - **inbox**: one task takes what the links deliver, decodes it, answers
//!   pings and replies inline, and hands merges (entry-wise max, written back
//!   conditionally), donations (idempotent: `TransferRequest` carries
//!   `R[donor][requester]`; synchronous ones answered with the donor's delta
//!   once the transfer is durable) and Weak deltas to [`WORKERS`] workers
//!   through bounded queues (by key, so one counter's work stays in order).
//!   A full queue stops the inbox, which stops the transport reading, which
//!   stops the peer's TCP: nothing grows without bound, and no task is
//!   started per frame.
//!
//! The backend is what differs between the designs: the client-based
//! design's agent reads and writes Redis with WATCH/MULTI/EXEC for each merge
//! and donation ([`crate::client`]); the server-based design's node routes
//! everything through its per-key engines ([`crate::server`]); the Weak
//! baseline's agent ships increments and decrements ([`crate::weak`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use roost_bcounter::{
    ProactiveConfig, ProactivePolicy, RateLimit, ReplicaId, RequestMode, TransferPolicy,
    TransferRequest,
};
use roost_net::{Chaos, ClusterSecret, Inbox, MetricsSnapshot};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;

use crate::client::CasBackend;
use crate::error::{check_key, EscrowError};
use crate::logic::Counter;
use crate::peer::{
    client_node, link_of, read_message, write_message, LinkConfig, LinkError, SiteLinks,
};
use crate::propagation::Propagator;
use crate::roost_store::{ReplicaRows, RoostStore};
use crate::server::{NodeCore, NodeStore, ServerMiddleware};
use crate::store::LazyConnection;
use crate::weak::WeakBackend;
use crate::wire::{Delta, Frame, SiteMessage, StateEntry, TransferResult, WeakDelta};

/// Workers that handle what the other sites send (merges, donations).
pub const WORKERS: usize = 4;

/// Work items queued per worker before the inbox waits.
pub const WORK_QUEUE_CAPACITY: usize = 256;

/// The most work items a site holds at once (queued or being handled).
pub const MAX_WORK_IN_FLIGHT: u64 = (WORKERS * (WORK_QUEUE_CAPACITY + 1)) as u64;

/// Client libraries connected to an agent at once; more wait to be accepted.
pub const MAX_CLIENT_CONNECTIONS: usize = 256;

/// Proactive transfer requests in flight at once.
const MAX_PROACTIVE_IN_FLIGHT: usize = 64;

/// Which middleware a site runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Design {
    /// §IV-B: client libraries read, apply and write back with WATCH/MULTI/
    /// EXEC; the site runs only an agent for propagation and transfers.
    ClientBased,
    /// §IV-C: a middleware node serializes operations per key, caches the
    /// counters and batches writes.
    ServerBased,
    /// The Weak baseline: Redis counters, read-check-then-decrement,
    /// increments and decrements replicated asynchronously.
    Weak,
    /// The server-based node with the site's counters inside Roost (an
    /// embedded Roost database; no Redis): each replica a row of a reactor's
    /// relation, each conditional write a serializable Roost transaction.
    Roost,
}

impl Design {
    /// The name benchmark rows use in `variant`.
    pub fn variant(self) -> &'static str {
        match self {
            Design::ClientBased => "bc-clt",
            Design::ServerBased => "bc-srv",
            Design::Weak => "weak",
            Design::Roost => "roost",
        }
    }
}

/// Timers of a site.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// How often changed counters are shipped to the other sites.
    pub propagate_every: Duration,
    /// How often every counter is shipped again (anti-entropy).
    pub resync_every: Duration,
    /// How often the proactive policy runs over the counters.
    pub proactive_every: Duration,
    /// How long a transfer request waits for the donor.
    pub transfer_timeout: Duration,
    pub link: LinkConfig,
    /// Counters per propagation frame.
    pub max_batch: usize,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            propagate_every: Duration::from_millis(50),
            resync_every: Duration::from_secs(2),
            proactive_every: Duration::from_millis(50),
            transfer_timeout: Duration::from_secs(2),
            link: LinkConfig::default(),
            max_batch: 512,
        }
    }
}

/// The paper's policy with our defaults: below 10 rights, ask for half the
/// difference; global operations ask synchronously; at most 4 asynchronous
/// requests at once, then one every 20 ms, per counter.
pub fn default_policy() -> ProactiveConfig {
    ProactiveConfig {
        threshold_rights: 10,
        shortfall_mode: RequestMode::Sync,
        rate_limit: RateLimit::new(4, 20).expect("a valid constant rate limit"),
    }
}

/// One site's configuration.
#[derive(Debug, Clone)]
pub struct SiteConfig {
    /// This site's index, its replica id in every counter.
    pub site: usize,
    pub sites: usize,
    /// This site's Redis, `redis://host:port/`.
    pub redis_url: String,
    /// How to reach each other site: its nodes' addresses (through its
    /// wide-area proxy when emulating), one for a site of one node; this
    /// site's own entry is not dialed.
    pub peers: Vec<Vec<SocketAddr>>,
    /// This node's index among its site's nodes (0 for a site of one node).
    pub member: usize,
    /// How many nodes this site has. With more than one they share the
    /// site's rows (a Roost cluster replicating them by reliable commit),
    /// so each counter's engine reads the row again before each batch
    /// instead of trusting what it cached.
    pub members: usize,
    pub timing: Timing,
    pub policy: ProactiveConfig,
    /// The deployment's shared secret: every link between sites, and from a
    /// client library to its agent, proves it (HMAC handshake).
    pub secret: ClusterSecret,
    /// Where a client-based site's agent listens for its client libraries
    /// (`None`: 127.0.0.1, any port; see [`Site::client_addr`]).
    pub client_listen: Option<SocketAddr>,
    #[doc(hidden)]
    pub planted: PlantedSiteBugs,
}

/// Test-only faults the link tests must catch (all off by default).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlantedSiteBugs {
    /// The links run without authentication.
    pub no_auth: bool,
    /// Merges and donations trust the site a message claims to come from
    /// instead of the one whose link delivered it.
    pub trust_claimed_sender: bool,
    /// A task per incoming work item instead of the bounded worker queues.
    pub task_per_frame: bool,
    /// The nodes of a site of several trust their cached replica as if
    /// they were its only writer.
    pub stale_shared_rows: bool,
}

impl SiteConfig {
    fn check(&self) -> Result<ReplicaId, EscrowError> {
        let bad = |reason: String| EscrowError::Config { reason };
        if self.sites == 0 || self.site >= self.sites {
            return Err(bad(format!("site {} of {} sites", self.site, self.sites)));
        }
        if self.peers.len() != self.sites {
            return Err(bad(format!(
                "{} peer addresses for {} sites",
                self.peers.len(),
                self.sites
            )));
        }
        if self.members == 0
            || self.member >= self.members
            || self.members > crate::peer::MAX_SITE_MEMBERS
        {
            return Err(bad(format!(
                "node {} of a site of {} nodes (at most {})",
                self.member,
                self.members,
                crate::peer::MAX_SITE_MEMBERS
            )));
        }
        if let Some((site, addrs)) = self
            .peers
            .iter()
            .enumerate()
            .find(|&(site, addrs)| site != self.site && addrs.is_empty())
        {
            return Err(bad(format!(
                "site {site} has no address ({} given)",
                addrs.len()
            )));
        }
        ReplicaId::from_index(self.site)
            .filter(|_| self.sites <= roost_bcounter::MAX_REPLICAS)
            .ok_or_else(|| bad(format!("at most {} sites", roost_bcounter::MAX_REPLICAS)))
    }
}

/// Counters of what a site did.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub frames_sent: AtomicU64,
    pub states_sent: AtomicU64,
    pub merges_applied: AtomicU64,
    pub merges_rejected: AtomicU64,
    pub frames_rejected: AtomicU64,
    pub proactive_requests: AtomicU64,
    pub sync_requests: AtomicU64,
    pub sync_requests_failed: AtomicU64,
    pub donations: AtomicU64,
    pub rights_donated: AtomicU64,
    pub writes: AtomicU64,
    pub ops_ok: AtomicU64,
    pub cas_conflicts: AtomicU64,
    pub weak_deltas_sent: AtomicU64,
    pub weak_deltas_applied: AtomicU64,
    pub replies_dropped: AtomicU64,
    pub client_auth_failures: AtomicU64,
    work_in_flight: AtomicU64,
    work_in_flight_max: AtomicU64,
}

/// A snapshot of a site's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SiteStats {
    /// Propagation frames and counter states shipped.
    pub frames_sent: u64,
    pub states_sent: u64,
    /// Deltas from other sites that changed a counter here.
    pub merges_applied: u64,
    /// Deltas refused (wrong recipient, other deployment size, ...).
    pub merges_rejected: u64,
    /// Frames or connections refused as malformed.
    pub frames_rejected: u64,
    /// Asynchronous transfer requests this site sent.
    pub proactive_requests: u64,
    /// Synchronous requests sent for global operations, and those that got
    /// no answer (donor unreachable or too slow).
    pub sync_requests: u64,
    pub sync_requests_failed: u64,
    /// Requests this site served as donor with a transfer, and the rights.
    pub donations: u64,
    pub rights_donated: u64,
    /// Server-based: conditional writes, and operations answered `Ok`
    /// (`ops_ok / writes` is the batching factor).
    pub writes: u64,
    pub ops_ok: u64,
    /// Conditional writes of the site agent that lost to another writer.
    pub cas_conflicts: u64,
    pub weak_deltas_sent: u64,
    pub weak_deltas_applied: u64,
    /// Replies to other sites dropped because their queue was full.
    pub replies_dropped: u64,
    /// Connections to the agent's client port that failed authentication.
    pub client_auth_failures: u64,
    /// Work items (merges, donations) from other sites queued or being
    /// handled now, and the most at any time (at most
    /// [`MAX_WORK_IN_FLIGHT`]).
    pub work_in_flight: u64,
    pub work_in_flight_max: u64,
}

impl Stats {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn snapshot(&self) -> SiteStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SiteStats {
            frames_sent: get(&self.frames_sent),
            states_sent: get(&self.states_sent),
            merges_applied: get(&self.merges_applied),
            merges_rejected: get(&self.merges_rejected),
            frames_rejected: get(&self.frames_rejected),
            proactive_requests: get(&self.proactive_requests),
            sync_requests: get(&self.sync_requests),
            sync_requests_failed: get(&self.sync_requests_failed),
            donations: get(&self.donations),
            rights_donated: get(&self.rights_donated),
            writes: get(&self.writes),
            ops_ok: get(&self.ops_ok),
            cas_conflicts: get(&self.cas_conflicts),
            weak_deltas_sent: get(&self.weak_deltas_sent),
            weak_deltas_applied: get(&self.weak_deltas_applied),
            replies_dropped: get(&self.replies_dropped),
            client_auth_failures: get(&self.client_auth_failures),
            work_in_flight: get(&self.work_in_flight),
            work_in_flight_max: get(&self.work_in_flight_max),
        }
    }
}

pub(crate) enum Backend {
    Cas(CasBackend),
    Node(NodeCore),
    Weak(WeakBackend),
}

/// What the loops and the handlers share.
pub(crate) struct SiteInner {
    pub me: ReplicaId,
    pub config: SiteConfig,
    pub links: SiteLinks,
    pub propagator: Arc<Mutex<Propagator>>,
    pub stats: Arc<Stats>,
    pub backend: Backend,
    /// Sites declared permanently failed (§IV-E): nothing from them is
    /// merged or served any more.
    fenced: Mutex<Vec<usize>>,
    started: Instant,
}

impl SiteInner {
    pub fn site(&self) -> usize {
        self.config.site
    }

    pub fn sites(&self) -> usize {
        self.config.sites
    }

    /// §IV-E: from now on nothing from site `failed` is merged or served.
    pub fn fence(&self, failed: usize) -> Result<(), EscrowError> {
        if failed == self.site() || failed >= self.sites() {
            return Err(EscrowError::Config {
                reason: format!(
                    "site {failed} cannot be declared failed at site {} of {}",
                    self.site(),
                    self.sites()
                ),
            });
        }
        let mut fenced = self.fenced.lock().unwrap_or_else(|e| e.into_inner());
        if !fenced.contains(&failed) {
            fenced.push(failed);
        }
        Ok(())
    }

    pub fn is_fenced(&self, site: usize) -> bool {
        self.fenced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&site)
    }

    pub fn changed(&self, key: &str) {
        if let Ok(mut propagator) = self.propagator.lock() {
            propagator.changed(key);
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A synchronous request for a global operation.
    pub async fn ask_donor(
        &self,
        key: &str,
        request: TransferRequest,
    ) -> Result<TransferResult, LinkError> {
        Stats::add(&self.stats.sync_requests, 1);
        let donor = request.donor.index();
        let result = self
            .links
            .transfer(donor, key, request, self.config.timing.transfer_timeout)
            .await;
        if result.is_err() {
            Stats::add(&self.stats.sync_requests_failed, 1);
        }
        result
    }

    /// A delta from site `from` (a propagation batch or a donor's reply).
    pub async fn merge(&self, from: usize, key: &str, message: Delta) {
        if self.is_fenced(from) {
            Stats::add(&self.stats.merges_rejected, 1);
            return;
        }
        let rights = message.rights();
        if rights.from().index() != from || rights.to() != self.me {
            Stats::add(&self.stats.merges_rejected, 1);
            tracing::warn!(
                site = self.site(),
                from,
                key,
                "escrow: delta from {} to {} arrived from site {from}; dropped",
                rights.from(),
                rights.to()
            );
            return;
        }
        match &self.backend {
            Backend::Cas(cas) => cas.merge(self, key, message).await,
            Backend::Node(node) => {
                node.tell(key, crate::engine::Command::Merge { message })
                    .await
            }
            Backend::Weak(_) => {
                Stats::add(&self.stats.merges_rejected, 1);
            }
        }
    }

    /// Serves a transfer request as the donor.
    async fn donate(&self, from: usize, key: &str, request: TransferRequest) -> TransferResult {
        if self.is_fenced(from) {
            return TransferResult::Error {
                reason: format!("site {from} was declared permanently failed"),
            };
        }
        if request.donor != self.me || request.requester.index() != from {
            return TransferResult::Error {
                reason: format!(
                    "request from {} to {} arrived at site {} from site {from}",
                    request.requester,
                    request.donor,
                    self.site()
                ),
            };
        }
        if let Err(error) = check_key(key) {
            return TransferResult::Error {
                reason: error.to_string(),
            };
        }
        let result = match &self.backend {
            Backend::Cas(cas) => cas.donate(self, key, request).await,
            Backend::Node(node) => node.donate(key, request).await,
            Backend::Weak(_) => TransferResult::Error {
                reason: "the Weak baseline keeps no rights".to_owned(),
            },
        };
        if let TransferResult::Transferred { amount, .. } = &result {
            Stats::add(&self.stats.donations, 1);
            Stats::add(&self.stats.rights_donated, *amount);
        }
        result
    }

    async fn states(&self, keys: &[String]) -> Vec<(String, Counter)> {
        match &self.backend {
            Backend::Cas(cas) => cas.states(self, keys).await,
            Backend::Node(node) => node.states(keys),
            Backend::Weak(_) => Vec::new(),
        }
    }

    async fn all_states(&self) -> Vec<(String, Counter)> {
        match &self.backend {
            Backend::Cas(cas) => cas.all_states(self).await,
            Backend::Node(node) => node.all_states(),
            Backend::Weak(_) => Vec::new(),
        }
    }
}

/// A running site.
pub struct Site {
    inner: Arc<SiteInner>,
    design: Design,
    addr: SocketAddr,
    client_addr: Option<SocketAddr>,
    tasks: Vec<JoinHandle<()>>,
}

impl Site {
    /// Starts site `config.site` of `design`, accepting other sites on
    /// `listener`.
    pub async fn start(
        design: Design,
        config: SiteConfig,
        listener: TcpListener,
    ) -> Result<Site, EscrowError> {
        Site::start_with(design, config, listener, None).await
    }

    /// Starts a [`Design::Roost`] site whose counters are rows of the
    /// application's database (`rows`), so that the application's own
    /// transactions may update them (strictly-local operations inside a
    /// procedure); the site's node is then one writer among others.
    pub async fn start_over_rows(
        config: SiteConfig,
        listener: TcpListener,
        rows: Arc<dyn ReplicaRows>,
    ) -> Result<Site, EscrowError> {
        Site::start_with(Design::Roost, config, listener, Some(rows)).await
    }

    async fn start_with(
        design: Design,
        config: SiteConfig,
        listener: TcpListener,
        rows: Option<Arc<dyn ReplicaRows>>,
    ) -> Result<Site, EscrowError> {
        let me = config.check()?;
        let bad = |what: &str, e: &dyn std::fmt::Display| EscrowError::Config {
            reason: format!("{what}: {e}"),
        };
        let addr = listener.local_addr().map_err(|e| bad("listener", &e))?;
        let client_listener = if design == Design::ClientBased {
            let at = config
                .client_listen
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
            Some(
                TcpListener::bind(at)
                    .await
                    .map_err(|e| bad("client listener", &e))?,
            )
        } else {
            None
        };
        let client_addr = match &client_listener {
            Some(listener) => Some(
                listener
                    .local_addr()
                    .map_err(|e| bad("client listener", &e))?,
            ),
            None => None,
        };
        let propagator = Arc::new(Mutex::new(Propagator::new(
            config.site,
            config.sites,
            config.timing.max_batch,
        )));
        let stats = Arc::new(Stats::default());
        let backend = match design {
            Design::ClientBased => Backend::Cas(CasBackend::new(&config.redis_url, me)),
            Design::ServerBased => Backend::Node(NodeCore::new(
                NodeStore::Redis(LazyConnection::new(&config.redis_url, None)),
                me,
                config.sites,
                config.policy,
                Arc::clone(&propagator),
                Arc::clone(&stats),
                config.members > 1 && !config.planted.stale_shared_rows,
            )),
            Design::Weak => Backend::Weak(WeakBackend::new(&config.redis_url, config.sites)),
            Design::Roost => Backend::Node(NodeCore::new(
                NodeStore::Roost(match rows {
                    Some(rows) => RoostStore::external(rows),
                    None => RoostStore::new()?,
                }),
                me,
                config.sites,
                config.policy,
                Arc::clone(&propagator),
                Arc::clone(&stats),
                config.members > 1 && !config.planted.stale_shared_rows,
            )),
        };
        if design != Design::Roost {
            // Fail early if Redis is not there.
            let mut probe = crate::store::connect(&config.redis_url).await?;
            redis::cmd("PING")
                .query_async::<String>(&mut probe)
                .await
                .map_err(EscrowError::from)?;
        }
        let secret = (!config.planted.no_auth).then(|| config.secret.clone());
        let (links, inbox) = SiteLinks::start(
            config.site,
            config.member,
            listener,
            &config.peers,
            config.timing.link,
            config.timing.link.transport(secret),
        )
        .map_err(|e| bad("site links", &e))?;
        let inner = Arc::new(SiteInner {
            me,
            config,
            links,
            propagator,
            stats,
            backend,
            fenced: Mutex::new(Vec::new()),
            started: Instant::now(),
        });
        let mut tasks = Vec::with_capacity(WORKERS + 5);
        let mut queues = Vec::with_capacity(WORKERS);
        for _ in 0..WORKERS {
            let (tx, rx) = mpsc::channel(WORK_QUEUE_CAPACITY);
            queues.push(tx);
            tasks.push(tokio::spawn(worker_loop(rx, Arc::clone(&inner))));
        }
        tasks.push(tokio::spawn(inbox_loop(inbox, queues, Arc::clone(&inner))));
        tasks.push(tokio::spawn(heartbeat_loop(Arc::clone(&inner))));
        tasks.push(tokio::spawn(propagate_loop(Arc::clone(&inner))));
        tasks.push(tokio::spawn(proactive_loop(Arc::clone(&inner))));
        if let Some(listener) = client_listener {
            tasks.push(tokio::spawn(client_accept_loop(
                listener,
                Arc::clone(&inner),
            )));
        }
        Ok(Site {
            inner,
            design,
            addr,
            client_addr,
            tasks,
        })
    }

    /// Where other sites (through their proxies) connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where this site's client libraries reach its agent (client-based
    /// design only).
    pub fn client_addr(&self) -> Option<SocketAddr> {
        self.client_addr
    }

    pub fn design(&self) -> Design {
        self.design
    }

    pub fn index(&self) -> usize {
        self.inner.site()
    }

    pub fn stats(&self) -> SiteStats {
        self.inner.stats.snapshot()
    }

    /// The links' transport counters (messages, bytes, failed handshakes).
    pub fn link_metrics(&self) -> MetricsSnapshot {
        self.inner.links.metrics()
    }

    /// The links' fault layer: drop, delay, duplicate, partition (of what
    /// this site sends and receives), switchable at runtime.
    pub fn chaos(&self) -> &Chaos {
        self.inner.links.chaos()
    }

    /// Whether the link to `peer` is up (its pongs come back).
    pub fn link_up(&self, peer: usize) -> bool {
        self.inner.links.is_up(peer)
    }

    /// A client of this site's middleware node (server-based design only).
    pub fn server_client(&self) -> Option<ServerMiddleware> {
        match self.inner.backend {
            Backend::Node(_) => Some(ServerMiddleware::new(Arc::clone(&self.inner))),
            _ => None,
        }
    }

    /// This site's replica of `key` as its store holds it (the node's
    /// designs: over Redis or inside Roost); `None` for other designs or an
    /// unknown counter.
    pub async fn stored_replica(&self, key: &str) -> Result<Option<Counter>, EscrowError> {
        match &self.inner.backend {
            Backend::Node(node) => node.load(key).await,
            _ => Ok(None),
        }
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        self.inner.links.shutdown();
        if let Backend::Node(node) = &self.inner.backend {
            node.shutdown();
        }
    }
}

async fn heartbeat_loop(site: Arc<SiteInner>) {
    let mut ticker = tokio::time::interval(site.config.timing.link.heartbeat_every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let down = site.links.heartbeat();
        if down.is_empty() {
            continue;
        }
        if let Ok(mut propagator) = site.propagator.lock() {
            for peer in down {
                propagator.disconnected(peer);
            }
        }
    }
}

/// What a worker does for another site.
enum Job {
    Merge {
        key: String,
        message: Delta,
    },
    Donate {
        id: u64,
        key: String,
        request: TransferRequest,
    },
    Weak(Vec<WeakDelta>),
}

struct Work {
    /// The site whose link delivered it.
    from: usize,
    /// Which of that site's nodes (a donation's reply goes back to it).
    member: usize,
    job: Job,
}

fn shard(key: &str) -> usize {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut hasher);
    (hasher.finish() % WORKERS as u64) as usize
}

/// Hands `work` to its worker, waiting for room (backpressure to the link).
async fn dispatch(site: &Arc<SiteInner>, queues: &[mpsc::Sender<Work>], index: usize, work: Work) {
    let stats = &site.stats;
    let now = stats.work_in_flight.fetch_add(1, Ordering::Relaxed) + 1;
    stats.work_in_flight_max.fetch_max(now, Ordering::Relaxed);
    if site.config.planted.task_per_frame {
        let site = Arc::clone(site);
        tokio::spawn(async move { handle(&site, work).await });
        return;
    }
    if queues[index].send(work).await.is_err() {
        stats.work_in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn worker_loop(mut queue: mpsc::Receiver<Work>, site: Arc<SiteInner>) {
    while let Some(work) = queue.recv().await {
        handle(&site, work).await;
    }
}

async fn handle(site: &SiteInner, work: Work) {
    let from = work.from;
    match work.job {
        Job::Merge { key, message } => site.merge(from, &key, message).await,
        Job::Donate { id, key, request } => {
            let result = site.donate(from, &key, request).await;
            let reply = Frame::TransferReply { id, key, result };
            if site.links.send_to(from, work.member, &reply).is_err() {
                // The requester times out and asks again (idempotent).
                Stats::add(&site.stats.replies_dropped, 1);
            }
        }
        Job::Weak(entries) => {
            if let Backend::Weak(weak) = &site.backend {
                weak.apply(site, entries).await;
            }
        }
    }
    site.stats.work_in_flight.fetch_sub(1, Ordering::Relaxed);
}

/// The one task that takes what the links deliver. The transport has
/// checked that each envelope comes from a site of the table that proved
/// the secret, and is `from` that site; everything else is checked here.
async fn inbox_loop(
    mut inbox: Inbox<SiteMessage>,
    queues: Vec<mpsc::Sender<Work>>,
    site: Arc<SiteInner>,
) {
    let planted = site.config.planted;
    while let Some(envelope) = inbox.recv().await {
        let (from, member) = link_of(envelope.from).unwrap_or((usize::MAX, usize::MAX));
        if from >= site.sites()
            || from == site.site()
            || !site.links.knows(from, member)
            || envelope.to != site.links.node()
        {
            Stats::add(&site.stats.frames_rejected, 1);
            tracing::warn!(site = site.site(), from = %envelope.from, "escrow: message from no other site; dropped");
            continue;
        }
        let frame = match crate::wire::decode(&envelope.msg.body) {
            Ok(frame) => frame,
            Err(error) => {
                Stats::add(&site.stats.frames_rejected, 1);
                tracing::warn!(site = site.site(), from, %error, "escrow: bad message; dropped");
                continue;
            }
        };
        match frame {
            Frame::Ping { id } => {
                // Lost if the queue back is full: the peer's heartbeat copes.
                let _ = site.links.send_to(from, member, &Frame::Pong { id });
            }
            Frame::Pong { .. } => {
                if site.links.pong(from, member) {
                    if let Ok(mut propagator) = site.propagator.lock() {
                        propagator.connected(from);
                    }
                }
            }
            Frame::TransferReply { id, result, .. } => site.links.reply(from, member, id, result),
            Frame::States { entries } => {
                for entry in entries {
                    if let Err(error) = check_key(&entry.key) {
                        Stats::add(&site.stats.merges_rejected, 1);
                        tracing::warn!(site = site.site(), from, %error, "escrow: dropped a state");
                        continue;
                    }
                    let sender = if planted.trust_claimed_sender {
                        entry.message.rights().from().index()
                    } else {
                        from
                    };
                    let index = shard(&entry.key);
                    let job = Job::Merge {
                        key: entry.key,
                        message: entry.message,
                    };
                    let work = Work {
                        from: sender,
                        member,
                        job,
                    };
                    dispatch(&site, &queues, index, work).await;
                }
            }
            Frame::Transfer { id, key, request } => {
                let sender = if planted.trust_claimed_sender {
                    request.requester.index()
                } else {
                    from
                };
                let index = shard(&key);
                let job = Job::Donate { id, key, request };
                let work = Work {
                    from: sender,
                    member,
                    job,
                };
                dispatch(&site, &queues, index, work).await;
            }
            Frame::WeakDeltas { entries } => match &site.backend {
                Backend::Weak(_) => {
                    let index = entries.first().map_or(0, |e| shard(&e.key));
                    let work = Work {
                        from,
                        member,
                        job: Job::Weak(entries),
                    };
                    dispatch(&site, &queues, index, work).await;
                }
                _ => {
                    Stats::add(&site.stats.frames_rejected, 1);
                    tracing::warn!(
                        site = site.site(),
                        from,
                        "escrow: weak deltas at a bounded-counter site; dropped"
                    );
                }
            },
            Frame::AskDonor { .. } => {
                Stats::add(&site.stats.frames_rejected, 1);
                tracing::warn!(
                    site = site.site(),
                    from,
                    "escrow: a client's request on a site link; dropped"
                );
            }
        }
    }
}

async fn propagate_loop(site: Arc<SiteInner>) {
    let timing = site.config.timing;
    let mut ticker = tokio::time::interval(timing.propagate_every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_resync = Instant::now();
    loop {
        ticker.tick().await;
        let resync = last_resync.elapsed() >= timing.resync_every;
        if resync {
            last_resync = Instant::now();
        }
        match &site.backend {
            Backend::Weak(weak) => {
                weak.ship(&site).await;
                continue;
            }
            Backend::Cas(cas) => cas.collect_changes(&site, resync).await,
            Backend::Node(node) => node.collect_changes(&site, resync).await,
        }
        ship_batches(&site).await;
    }
}

async fn ship_batches(site: &SiteInner) {
    let mut batches: Vec<(usize, Vec<String>)> = Vec::new();
    if let Ok(mut propagator) = site.propagator.lock() {
        for peer in 0..site.sites() {
            if peer != site.site() && site.links.is_up(peer) {
                let batch = propagator.take_batch(peer);
                if !batch.is_empty() {
                    batches.push((peer, batch));
                }
            }
        }
    }
    if batches.is_empty() {
        return;
    }
    let mut keys: Vec<String> = batches
        .iter()
        .flat_map(|(_, b)| b.iter().cloned())
        .collect();
    keys.sort();
    keys.dedup();
    let states: HashMap<String, Counter> = site.states(&keys).await.into_iter().collect();
    for (peer, batch) in batches {
        let Some(replica) = ReplicaId::from_index(peer) else {
            continue;
        };
        let entries: Vec<StateEntry> = batch
            .iter()
            .filter_map(|key| {
                let message = states.get(key)?.message_for(replica).ok()?;
                Some(StateEntry {
                    key: key.clone(),
                    message,
                })
            })
            .collect();
        if entries.is_empty() {
            continue;
        }
        let count = entries.len() as u64;
        if site.links.send(peer, &Frame::States { entries }) {
            Stats::add(&site.stats.frames_sent, 1);
            Stats::add(&site.stats.states_sent, count);
        } else if let Ok(mut propagator) = site.propagator.lock() {
            propagator.requeue(peer, batch);
        }
    }
}

async fn proactive_loop(site: Arc<SiteInner>) {
    if matches!(site.backend, Backend::Weak(_)) {
        return;
    }
    let in_flight = Arc::new(Semaphore::new(MAX_PROACTIVE_IN_FLIGHT));
    let mut policies: HashMap<String, ProactivePolicy> = HashMap::new();
    let mut ticker = tokio::time::interval(site.config.timing.proactive_every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let now_ms = site.now_ms();
        for (key, counter) in site.all_states().await {
            let Ok(view) = counter.rights_view() else {
                continue;
            };
            let policy = policies
                .entry(key.clone())
                .or_insert_with(|| ProactivePolicy::new(site.config.policy));
            let Some(request) = policy.proactive(&view, now_ms) else {
                continue;
            };
            let donor = request.donor.index();
            if !site.links.is_up(donor) {
                continue; // An unreachable site keeps its rights.
            }
            // Bounded: at most this many requests at once; the policy asks
            // again on a later tick.
            let Ok(permit) = Arc::clone(&in_flight).try_acquire_owned() else {
                continue;
            };
            Stats::add(&site.stats.proactive_requests, 1);
            let site = Arc::clone(&site);
            tokio::spawn(async move {
                let _permit = permit;
                let timeout = site.config.timing.transfer_timeout;
                if let Ok(result) = site.links.transfer(donor, &key, request, timeout).await {
                    if let Some(message) = result.message() {
                        site.merge(donor, &key, message.clone()).await;
                    }
                }
            });
        }
    }
}

async fn client_accept_loop(listener: TcpListener, site: Arc<SiteInner>) {
    let slots = Arc::new(Semaphore::new(MAX_CLIENT_CONNECTIONS));
    loop {
        // At the limit, stop accepting: the kernel's backlog holds the rest.
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                let site = Arc::clone(&site);
                tokio::spawn(async move {
                    let _slot = slot;
                    serve_client(stream, site).await;
                });
            }
            Err(error) => {
                tracing::warn!(site = site.site(), %error, "escrow: accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// One client library of this site: it proves the secret as this site's
/// client identity, then asks for rights one request at a time; each is
/// relayed to the donor over the site links.
async fn serve_client(mut stream: TcpStream, site: Arc<SiteInner>) {
    let me = site.links.node();
    let client = client_node(site.site());
    if !site.config.planted.no_auth {
        let timeout_ms = u64::try_from(site.config.timing.link.handshake_timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let secret = &site.config.secret;
        if let Err(error) =
            roost_net::auth::accept(&mut stream, secret, me, &[client], timeout_ms).await
        {
            Stats::add(&site.stats.client_auth_failures, 1);
            tracing::warn!(site = site.site(), %error, "escrow: client handshake failed; closing");
            return;
        }
    }
    loop {
        let envelope = match read_message(&mut stream).await {
            Ok(Some(envelope)) => envelope,
            Ok(None) => return,
            Err(error) => {
                Stats::add(&site.stats.frames_rejected, 1);
                tracing::warn!(site = site.site(), %error, "escrow: bad client message; closing");
                return;
            }
        };
        if envelope.from != client || envelope.to != me {
            Stats::add(&site.stats.frames_rejected, 1);
            tracing::warn!(site = site.site(), from = %envelope.from, "escrow: client message from another node; closing");
            return;
        }
        let (id, key, request) = match crate::wire::decode(&envelope.msg.body) {
            Ok(Frame::AskDonor { id, key, request }) => (id, key, request),
            other => {
                Stats::add(&site.stats.frames_rejected, 1);
                tracing::warn!(site = site.site(), frame = ?other, "escrow: unexpected client message; closing");
                return;
            }
        };
        let result = if request.requester != site.me || check_key(&key).is_err() {
            TransferResult::Error {
                reason: format!(
                    "a client of site {} asked for rights for {} on key {key:?}",
                    site.site(),
                    request.requester
                ),
            }
        } else {
            match site.ask_donor(&key, request).await {
                Ok(result) => result,
                Err(error) => TransferResult::Error {
                    reason: error.to_string(),
                },
            }
        };
        let reply = Frame::TransferReply { id, key, result };
        if write_message(&mut stream, me, client, &reply)
            .await
            .is_err()
        {
            return;
        }
    }
}

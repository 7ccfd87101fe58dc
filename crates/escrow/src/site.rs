//! A site's middleware process: the tokio shell around a design's backend,
//! with the custom cross-site propagation and rights transfer the paper had
//! to build (§IV-B/C/D).
//!
//! One [`Site`] per site (region). It listens for the other sites (and for
//! client libraries asking for rights), holds one [`PeerLink`] to each other
//! site, and runs three loops:
//!
//! - **propagation**, every `propagate_every`: ship the deltas of the
//!   counters changed since the last batch to every reachable site
//!   ([`Propagator`]); everything to a site that reconnects, and to all every
//!   `resync_every`;
//! - **proactive transfers**, every `proactive_every`: for each counter,
//!   [`ProactivePolicy`] decides whether to ask the site believed to hold the
//!   most rights for half the difference (asynchronous, rate-limited);
//! - **accept**: merge arriving batches (entry-wise max, written back
//!   conditionally), serve transfer requests as the donor (idempotent:
//!   `TransferRequest` carries `R[donor][requester]`), answering synchronous
//!   ones with the donor's delta once the transfer is durable.
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
use tokio::io::BufWriter;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::client::CasBackend;
use crate::error::{check_key, EscrowError};
use crate::logic::Counter;
use crate::peer::{LinkConfig, LinkError, LinkEvent, PeerLink};
use crate::propagation::Propagator;
use crate::roost_store::{ReplicaRows, RoostStore};
use crate::server::{NodeCore, NodeStore, ServerMiddleware};
use crate::store::LazyConnection;
use crate::weak::WeakBackend;
use crate::wire::{read_frame, write_frame, Delta, Frame, StateEntry, TransferResult};

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
    /// How to reach each other site (through its wide-area proxy when
    /// emulating); `None` at this site's own index.
    pub peers: Vec<Option<SocketAddr>>,
    pub timing: Timing,
    pub policy: ProactiveConfig,
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
    pub links: Vec<Option<PeerLink>>,
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

    fn link(&self, peer: usize) -> Option<&PeerLink> {
        self.links.get(peer).and_then(Option::as_ref)
    }

    /// A synchronous request for a global operation.
    pub async fn ask_donor(
        &self,
        key: &str,
        request: TransferRequest,
    ) -> Result<TransferResult, LinkError> {
        Stats::add(&self.stats.sync_requests, 1);
        let donor = request.donor.index();
        let result = match self.link(donor) {
            Some(link) => {
                link.transfer(key, request, self.config.timing.transfer_timeout)
                    .await
            }
            None => Err(LinkError::Down(donor)),
        };
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
            Backend::Node(node) => node.tell(key, crate::engine::Command::Merge { message }),
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
        let addr = listener.local_addr().map_err(|e| EscrowError::Config {
            reason: format!("listener: {e}"),
        })?;
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let links = (0..config.sites)
            .map(|peer| {
                let addr = config.peers[peer].filter(|_| peer != config.site)?;
                Some(PeerLink::spawn(
                    config.site,
                    config.sites,
                    peer,
                    addr,
                    config.timing.link,
                    Some(events_tx.clone()),
                ))
            })
            .collect();
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
        let tasks = vec![
            tokio::spawn(accept_loop(listener, Arc::clone(&inner))),
            tokio::spawn(event_loop(events_rx, Arc::clone(&inner))),
            tokio::spawn(propagate_loop(Arc::clone(&inner))),
            tokio::spawn(proactive_loop(Arc::clone(&inner))),
        ];
        Ok(Site {
            inner,
            design,
            addr,
            tasks,
        })
    }

    /// Where other sites (through their proxies) connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
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

    /// Whether the link to `peer` is up.
    pub fn link_up(&self, peer: usize) -> bool {
        self.inner.link(peer).is_some_and(PeerLink::is_up)
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
        if let Backend::Node(node) = &self.inner.backend {
            node.shutdown();
        }
    }
}

async fn event_loop(mut events: mpsc::UnboundedReceiver<LinkEvent>, site: Arc<SiteInner>) {
    while let Some(event) = events.recv().await {
        if let Ok(mut propagator) = site.propagator.lock() {
            match event {
                LinkEvent::Up(peer) => propagator.connected(peer),
                LinkEvent::Down(peer) => propagator.disconnected(peer),
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
            if peer != site.site() && site.link(peer).is_some_and(PeerLink::is_up) {
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
        let sent = site
            .link(peer)
            .is_some_and(|link| link.send(Frame::States { entries }));
        if sent {
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
            if !site.link(donor).is_some_and(PeerLink::is_up) {
                continue; // An unreachable site keeps its rights.
            }
            Stats::add(&site.stats.proactive_requests, 1);
            let site = Arc::clone(&site);
            tokio::spawn(async move {
                let Some(link) = site.link(donor) else {
                    return;
                };
                let timeout = site.config.timing.transfer_timeout;
                if let Ok(result) = link.transfer(&key, request, timeout).await {
                    if let Some(message) = result.message() {
                        site.merge(donor, &key, message.clone()).await;
                    }
                }
            });
        }
    }
}

async fn accept_loop(listener: TcpListener, site: Arc<SiteInner>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                tokio::spawn(serve_connection(stream, Arc::clone(&site)));
            }
            Err(error) => {
                tracing::warn!(site = site.site(), %error, "escrow: accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// The acceptor's side of one connection from another site (or from a
/// client library of another site asking for rights).
async fn serve_connection(stream: TcpStream, site: Arc<SiteInner>) {
    let (mut read, write) = stream.into_split();
    let hello = tokio::time::timeout(Duration::from_secs(5), read_frame(&mut read)).await;
    let from = match hello {
        Ok(Ok(Some(Frame::Hello { site: from, sites }))) => {
            let from = usize::try_from(from).unwrap_or(usize::MAX);
            let sites = usize::try_from(sites).unwrap_or(usize::MAX);
            if sites != site.sites() || from >= site.sites() || from == site.site() {
                Stats::add(&site.stats.frames_rejected, 1);
                tracing::warn!(
                    site = site.site(),
                    "escrow: hello from site {from} of {sites}, this is site {} of {}; closing",
                    site.site(),
                    site.sites()
                );
                return;
            }
            from
        }
        Ok(Ok(None)) | Err(_) => return,
        Ok(Ok(Some(other))) => {
            Stats::add(&site.stats.frames_rejected, 1);
            tracing::warn!(site = site.site(), frame = ?other, "escrow: expected hello; closing");
            return;
        }
        Ok(Err(error)) => {
            Stats::add(&site.stats.frames_rejected, 1);
            tracing::warn!(site = site.site(), %error, "escrow: bad hello; closing");
            return;
        }
    };
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Frame>();
    let writer = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        let mut write = BufWriter::new(write);
        while let Some(frame) = out_rx.recv().await {
            if write_frame(&mut write, &frame).await.is_err() {
                return;
            }
            while let Ok(frame) = out_rx.try_recv() {
                if write_frame(&mut write, &frame).await.is_err() {
                    return;
                }
            }
            if write.flush().await.is_err() {
                return;
            }
        }
    });
    let me = u32::try_from(site.site()).unwrap_or(u32::MAX);
    let _ = out_tx.send(Frame::HelloAck { site: me });
    loop {
        let frame = match read_frame(&mut read).await {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(error) => {
                Stats::add(&site.stats.frames_rejected, 1);
                tracing::warn!(site = site.site(), from, %error, "escrow: bad frame; closing");
                break;
            }
        };
        match frame {
            Frame::States { entries } => {
                for entry in entries {
                    if let Err(error) = check_key(&entry.key) {
                        Stats::add(&site.stats.merges_rejected, 1);
                        tracing::warn!(site = site.site(), from, %error, "escrow: dropped a state");
                        continue;
                    }
                    site.merge(from, &entry.key, entry.message).await;
                }
            }
            Frame::Transfer { id, key, request } => {
                let site = Arc::clone(&site);
                let out = out_tx.clone();
                tokio::spawn(async move {
                    let result = site.donate(from, &key, request).await;
                    let _ = out.send(Frame::TransferReply { id, key, result });
                });
            }
            Frame::WeakDeltas { entries } => match &site.backend {
                Backend::Weak(weak) => weak.apply(&site, entries).await,
                _ => {
                    Stats::add(&site.stats.frames_rejected, 1);
                    tracing::warn!(
                        site = site.site(),
                        from,
                        "escrow: weak deltas at a bounded-counter site; dropped"
                    );
                }
            },
            other => {
                Stats::add(&site.stats.frames_rejected, 1);
                tracing::warn!(site = site.site(), from, frame = ?other, "escrow: unexpected frame; closing");
                break;
            }
        }
    }
    // The writer ends once the replies still being computed are sent.
    drop(out_tx);
    drop(writer);
}

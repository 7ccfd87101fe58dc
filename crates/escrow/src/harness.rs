//! A local multi-site deployment for tests and benchmarks: one
//! `redis-server` per site, one middleware [`Site`] per site, and a
//! [`DelayProxy`] on every link between sites (and between a client library
//! and a remote site) with Table I's round trips, optionally scaled.
//!
//! `proxies[i][j]` carries everything site `i` sends to site `j` (its
//! `roost-net` link; client libraries reach other sites through their own
//! site's agent); [`Deployment::partition`] cuts every proxy to and from a
//! site. The deployment makes a fresh shared secret ([`Deployment::secret`]):
//! every link proves it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use roost_bcounter::{ProactiveConfig, ReplicaId};
use roost_net::ClusterSecret;
use thiserror::Error;
use tokio::net::TcpListener;

use crate::api::{Bound, EscrowCounters, Flag, Outcome};
use crate::client::{ClientConfig, ClientMiddleware};
use crate::error::EscrowError;
use crate::front_door::{FrontDoor, FrontDoorClient};
use crate::proxy::{DelayProxy, Region};
use crate::redis_server::{LocalRedis, LocalRedisError};
use crate::server::ServerMiddleware;
use crate::site::{default_policy, Design, PlantedSiteBugs, Site, SiteConfig, SiteStats, Timing};
use crate::store;
use crate::weak::{weak_value_key, WeakClient};

#[derive(Debug, Error)]
pub enum HarnessError {
    #[error(transparent)]
    Redis(#[from] LocalRedisError),
    #[error("cannot listen or proxy: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Escrow(#[from] EscrowError),
}

/// What to start.
#[derive(Debug, Clone)]
pub struct DeploymentConfig {
    pub design: Design,
    /// One site per entry, in this region.
    pub regions: Vec<Region>,
    /// Table I's round trips times this (1.0: the paper's; 0: no delay).
    pub rtt_scale: f64,
    pub timing: Timing,
    pub policy: ProactiveConfig,
    /// Test-only faults planted in every site.
    #[doc(hidden)]
    pub planted: PlantedSiteBugs,
}

impl DeploymentConfig {
    /// Three sites (US-East, US-West, EU) with default timers.
    pub fn three_regions(design: Design, rtt_scale: f64) -> DeploymentConfig {
        DeploymentConfig {
            design,
            regions: Region::ALL.to_vec(),
            rtt_scale,
            timing: Timing::default(),
            policy: default_policy(),
            planted: PlantedSiteBugs::default(),
        }
    }
}

/// A running local deployment; everything stops when it is dropped.
pub struct Deployment {
    // Boxed: keeps the handle small next to other deployments in enums.
    config: Box<DeploymentConfig>,
    secret: ClusterSecret,
    // Dropped in this order: front doors, sites, proxies, then the Redis
    // processes.
    /// Server-based designs: each site node's RESP front door and the
    /// password its clients authenticate with, started by the first
    /// [`Deployment::network_client`].
    front_doors: tokio::sync::OnceCell<(String, Vec<FrontDoor>)>,
    sites: Vec<Site>,
    proxies: Vec<Vec<Option<DelayProxy>>>,
    redis: Vec<LocalRedis>,
}

impl Deployment {
    pub async fn start(config: DeploymentConfig) -> Result<Deployment, HarnessError> {
        let n = config.regions.len();
        let mut redis = Vec::with_capacity(n);
        // Roost sites keep their counters in Roost: no redis-server.
        let redis_sites = if config.design == Design::Roost { 0 } else { n };
        for _ in 0..redis_sites {
            redis.push(
                tokio::task::spawn_blocking(LocalRedis::start)
                    .await
                    .map_err(|e| std::io::Error::other(e.to_string()))??,
            );
        }
        let mut listeners = Vec::with_capacity(n);
        for _ in 0..n {
            listeners.push(TcpListener::bind("127.0.0.1:0").await?);
        }
        let mut proxies: Vec<Vec<Option<DelayProxy>>> = Vec::with_capacity(n);
        for from in 0..n {
            let mut row = Vec::with_capacity(n);
            for (to, listener) in listeners.iter().enumerate() {
                row.push(if from == to {
                    None
                } else {
                    Some(
                        DelayProxy::between(
                            listener.local_addr()?,
                            config.regions[from],
                            config.regions[to],
                            config.rtt_scale,
                        )
                        .await?,
                    )
                });
            }
            proxies.push(row);
        }
        let secret = ClusterSecret::random();
        let mut sites = Vec::with_capacity(n);
        for (index, listener) in listeners.into_iter().enumerate() {
            let site_config = SiteConfig {
                site: index,
                sites: n,
                redis_url: redis.get(index).map(LocalRedis::url).unwrap_or_default(),
                peers: peers_of(&proxies, index),
                member: 0,
                members: 1,
                timing: config.timing,
                policy: config.policy,
                secret: secret.clone(),
                client_listen: None,
                planted: config.planted,
            };
            sites.push(Site::start(config.design, site_config, listener).await?);
        }
        Ok(Deployment {
            config: Box::new(config),
            secret,
            front_doors: tokio::sync::OnceCell::new(),
            sites,
            proxies,
            redis,
        })
    }

    pub fn design(&self) -> Design {
        self.config.design
    }

    pub fn sites(&self) -> usize {
        self.sites.len()
    }

    pub fn region(&self, site: usize) -> Region {
        self.config.regions[site]
    }

    pub fn site(&self, site: usize) -> &Site {
        &self.sites[site]
    }

    /// The secret every link of this deployment proves.
    pub fn secret(&self) -> &ClusterSecret {
        &self.secret
    }

    /// Site `site`'s redis-server (empty for [`Design::Roost`], which has none).
    pub fn redis_url(&self, site: usize) -> String {
        self.redis
            .get(site)
            .map(LocalRedis::url)
            .unwrap_or_default()
    }

    /// Kills site `site`'s redis-server (its store fails; for tests).
    pub fn kill_redis(&mut self, site: usize) {
        if let Some(redis) = self.redis.get_mut(site) {
            redis.kill();
        }
    }

    /// The proxy carrying what `from` sends to `to`.
    pub fn proxy(&self, from: usize, to: usize) -> Option<&DelayProxy> {
        self.proxies.get(from)?.get(to)?.as_ref()
    }

    pub fn stats(&self) -> Vec<SiteStats> {
        self.sites.iter().map(Site::stats).collect()
    }

    /// A client at `site` of this deployment's design.
    pub async fn client(&self, site: usize) -> Result<Client, EscrowError> {
        Ok(match self.config.design {
            Design::ClientBased => Client::ClientBased(
                ClientMiddleware::connect(ClientConfig {
                    site,
                    sites: self.sites(),
                    redis_url: self.redis_url(site),
                    agent: self.sites[site].client_addr(),
                    secret: self.secret.clone(),
                    transfer_timeout: self.config.timing.transfer_timeout,
                    link: self.config.timing.link,
                })
                .await?,
            ),
            Design::ServerBased | Design::Roost => Client::ServerBased(
                self.sites[site]
                    .server_client()
                    .ok_or(EscrowError::NodeGone)?,
            ),
            Design::Weak => Client::Weak(WeakClient::connect(&self.redis_url(site)).await?),
        })
    }

    /// A client at `site` that reaches it over a TCP connection of its own,
    /// as the seed's clients reach their site's middleware: for the
    /// server-based designs ([`Design::ServerBased`], [`Design::Roost`]) a
    /// [`FrontDoorClient`] of the site node's RESP front door (BC.*, one
    /// command per operation; the front doors start on first use), for the
    /// others what [`client`](Self::client) gives (a library over its own
    /// connection to the site's Redis).
    pub async fn network_client(&self, site: usize) -> Result<Client, EscrowError> {
        if !matches!(self.config.design, Design::ServerBased | Design::Roost) {
            return self.client(site).await;
        }
        let (password, doors) = self
            .front_doors
            .get_or_try_init(|| async {
                let password = format!("{:032x}", rand::random::<u128>());
                let mut doors = Vec::with_capacity(self.sites());
                for site in &self.sites {
                    let node = site.server_client().ok_or(EscrowError::NodeGone)?;
                    let bind = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
                    doors.push(FrontDoor::start(node, self.sites(), bind, &password).await?);
                }
                Ok::<_, EscrowError>((password, doors))
            })
            .await?;
        let door = doors.get(site).ok_or_else(|| EscrowError::Config {
            reason: format!("no site {site} of {}", self.sites()),
        })?;
        Ok(Client::FrontDoor(
            FrontDoorClient::connect(door.addr(), password).await?,
        ))
    }

    /// Cuts every link to and from `site`.
    pub fn partition(&self, site: usize) {
        for other in 0..self.sites() {
            for (a, b) in [(site, other), (other, site)] {
                if let Some(proxy) = self.proxy(a, b) {
                    proxy.cut();
                }
            }
        }
    }

    pub fn heal(&self, site: usize) {
        for other in 0..self.sites() {
            for (a, b) in [(site, other), (other, site)] {
                if let Some(proxy) = self.proxy(a, b) {
                    proxy.heal();
                }
            }
        }
    }

    /// The value of `key` in each site's store, read directly.
    pub async fn values(&self, key: &str) -> Result<Vec<i64>, EscrowError> {
        let mut values = Vec::with_capacity(self.sites());
        for site in 0..self.sites() {
            let value = match self.config.design {
                Design::Weak => {
                    let mut con = store::connect(&self.redis_url(site)).await?;
                    let value: Option<i64> = redis::cmd("GET")
                        .arg(weak_value_key(key))
                        .query_async(&mut con)
                        .await?;
                    value.ok_or_else(|| EscrowError::UnknownCounter {
                        key: key.to_owned(),
                    })?
                }
                _ => self
                    .replica(site, key)
                    .await?
                    .value()
                    .map_err(|e| EscrowError::counter(key, e))?,
            };
            values.push(value);
        }
        Ok(values)
    }

    /// Site `site`'s replica of `key` as stored (bounded-counter designs).
    pub async fn replica(&self, site: usize, key: &str) -> Result<crate::Counter, EscrowError> {
        if self.config.design == Design::Roost {
            return self.sites[site].stored_replica(key).await?.ok_or_else(|| {
                EscrowError::UnknownCounter {
                    key: key.to_owned(),
                }
            });
        }
        let mut con = store::connect(&self.redis_url(site)).await?;
        let me = ReplicaId::from_index(site).ok_or(EscrowError::NodeGone)?;
        store::load(&mut con, key, me, self.sites())
            .await?
            .map(|record| record.counter)
            .ok_or_else(|| EscrowError::UnknownCounter {
                key: key.to_owned(),
            })
    }

    /// The rights each site holds for `key`, as stored.
    pub async fn rights(&self, key: &str) -> Result<Vec<u64>, EscrowError> {
        let mut rights = Vec::with_capacity(self.sites());
        for site in 0..self.sites() {
            rights.push(
                self.replica(site, key)
                    .await?
                    .local_rights()
                    .map_err(|e| EscrowError::counter(key, e))?,
            );
        }
        Ok(rights)
    }

    /// Waits until every site reports the same value for `key` (and it is
    /// `expected`, if given) and it stays so for a few propagation rounds.
    /// `Err` carries the last values seen.
    pub async fn wait_converged(
        &self,
        key: &str,
        expected: Option<i64>,
        patience: Duration,
    ) -> Result<i64, Vec<i64>> {
        let started = Instant::now();
        let mut last = Vec::new();
        let mut stable = 0;
        while started.elapsed() < patience {
            if let Ok(values) = self.values(key).await {
                let agreed = values.windows(2).all(|w| w[0] == w[1]);
                let right = expected.is_none_or(|e| values.first() == Some(&e));
                if agreed && right && values == last {
                    stable += 1;
                    if stable >= 3 {
                        return Ok(values[0]);
                    }
                } else {
                    stable = 0;
                }
                last = values;
            }
            tokio::time::sleep(
                self.config
                    .timing
                    .propagate_every
                    .max(Duration::from_millis(10)),
            )
            .await;
        }
        Err(last)
    }

    /// Waits until every site has the counter (the create or its first
    /// increment replicated) with value `value`.
    pub async fn wait_value_everywhere(&self, key: &str, value: i64, patience: Duration) -> bool {
        let started = Instant::now();
        while started.elapsed() < patience {
            if self
                .values(key)
                .await
                .is_ok_and(|values| values.iter().all(|&v| v == value))
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    /// Runs `clients_per_site` clients at each site in `sites`, each
    /// decrementing `key` by one with `flag` until the counter is exhausted
    /// (`Fail`), or, with `stop_on_retry`, until a `Retry`, or until
    /// `deadline`.
    pub async fn decrement_until_exhausted(
        &self,
        key: &str,
        sites: &[usize],
        clients_per_site: usize,
        flag: Flag,
        stop_on_retry: bool,
        deadline: Duration,
    ) -> Result<DrainReport, EscrowError> {
        let tally = Arc::new(Tally::new(self.sites()));
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for &site in sites {
            for _ in 0..clients_per_site {
                let mut client = self.client(site).await?;
                let tally = Arc::clone(&tally);
                let key = key.to_owned();
                tasks.spawn(async move {
                    while started.elapsed() < deadline {
                        match client.dec(&key, 1, flag).await {
                            Ok(Outcome::Ok) => {
                                tally.ok[site].fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(Outcome::Fail) => {
                                tally.fail.fetch_add(1, Ordering::Relaxed);
                                return;
                            }
                            Ok(Outcome::Retry { .. }) => {
                                tally.retry.fetch_add(1, Ordering::Relaxed);
                                if stop_on_retry {
                                    return;
                                }
                                tokio::time::sleep(Duration::from_millis(2)).await;
                            }
                            Err(error) => {
                                tally.errors.fetch_add(1, Ordering::Relaxed);
                                tracing::debug!(%error, "decrement failed");
                                tokio::time::sleep(Duration::from_millis(5)).await;
                            }
                        }
                    }
                    tally.timed_out.fetch_add(1, Ordering::Relaxed);
                });
            }
        }
        while tasks.join_next().await.is_some() {}
        Ok(DrainReport {
            ok_per_site: tally.ok.iter().map(|c| c.load(Ordering::Relaxed)).collect(),
            fails: tally.fail.load(Ordering::Relaxed),
            retries: tally.retry.load(Ordering::Relaxed),
            errors: tally.errors.load(Ordering::Relaxed),
            timed_out: tally.timed_out.load(Ordering::Relaxed),
            elapsed: started.elapsed(),
        })
    }
}

fn peers_of(proxies: &[Vec<Option<DelayProxy>>], site: usize) -> Vec<Vec<SocketAddr>> {
    proxies[site]
        .iter()
        .map(|proxy| proxy.iter().map(DelayProxy::addr).collect())
        .collect()
}

struct Tally {
    ok: Vec<AtomicU64>,
    fail: AtomicU64,
    retry: AtomicU64,
    errors: AtomicU64,
    timed_out: AtomicU64,
}

impl Tally {
    fn new(sites: usize) -> Tally {
        Tally {
            ok: (0..sites).map(|_| AtomicU64::new(0)).collect(),
            fail: AtomicU64::new(0),
            retry: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            timed_out: AtomicU64::new(0),
        }
    }
}

/// What a run of decrementing clients did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainReport {
    /// Decrements answered `Ok`, per site.
    pub ok_per_site: Vec<u64>,
    pub fails: u64,
    pub retries: u64,
    pub errors: u64,
    /// Clients stopped by the deadline rather than by an outcome.
    pub timed_out: u64,
    pub elapsed: Duration,
}

impl DrainReport {
    pub fn ok(&self) -> u64 {
        self.ok_per_site.iter().sum()
    }
}

/// Decrements in excess of the bound: successful decrements beyond the
/// rights that existed (`initial − K`, for a lower bound).
pub fn excess_decrements(rights: u64, successful_decrements: u64) -> u64 {
    successful_decrements.saturating_sub(rights)
}

/// A client of any design, for code that runs them all.
pub enum Client {
    ClientBased(ClientMiddleware),
    /// In-process handle of the site's node.
    ServerBased(ServerMiddleware),
    /// The site's node over TCP, through its RESP front door.
    FrontDoor(FrontDoorClient),
    Weak(WeakClient),
}

impl EscrowCounters for Client {
    async fn create(&mut self, key: &str, bound: Bound, k: i64) -> Result<(), EscrowError> {
        match self {
            Client::ClientBased(c) => c.create(key, bound, k).await,
            Client::ServerBased(c) => c.create(key, bound, k).await,
            Client::FrontDoor(c) => c.create(key, bound, k).await,
            Client::Weak(c) => c.create(key, bound, k).await,
        }
    }

    async fn read(&mut self, key: &str) -> Result<i64, EscrowError> {
        match self {
            Client::ClientBased(c) => c.read(key).await,
            Client::ServerBased(c) => c.read(key).await,
            Client::FrontDoor(c) => c.read(key).await,
            Client::Weak(c) => c.read(key).await,
        }
    }

    async fn inc(&mut self, key: &str, delta: u64, flag: Flag) -> Result<Outcome, EscrowError> {
        match self {
            Client::ClientBased(c) => c.inc(key, delta, flag).await,
            Client::ServerBased(c) => c.inc(key, delta, flag).await,
            Client::FrontDoor(c) => c.inc(key, delta, flag).await,
            Client::Weak(c) => c.inc(key, delta, flag).await,
        }
    }

    async fn dec(&mut self, key: &str, delta: u64, flag: Flag) -> Result<Outcome, EscrowError> {
        match self {
            Client::ClientBased(c) => c.dec(key, delta, flag).await,
            Client::ServerBased(c) => c.dec(key, delta, flag).await,
            Client::FrontDoor(c) => c.dec(key, delta, flag).await,
            Client::Weak(c) => c.dec(key, delta, flag).await,
        }
    }
}

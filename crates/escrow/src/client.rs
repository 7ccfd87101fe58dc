//! The client-based middleware (§IV-B): the library reads the counter's
//! replica from its site's Redis, applies the operation with
//! `roost-bcounter`, and writes it back with WATCH/MULTI/EXEC, retrying when
//! another client got in between; so concurrent clients at one site never
//! spend the same rights twice. A global operation short of rights asks
//! its own site's agent, over one connection authenticated with the
//! deployment's secret as the site's client identity
//! ([`client_node`](crate::peer::client_node)), to request them from the
//! donor over the site links, and merges the donor's answer the same way.
//! (The agent relays rather than the library dialing the donor: the donor
//! then only ever hears from sites, over links that prove who they are.)
//!
//! Each site also runs an agent ([`crate::site::Site`] with
//! [`Design::ClientBased`](crate::Design::ClientBased), whose backend is
//! `CasBackend`): it ships the counters the libraries marked dirty, merges
//! what other sites ship, and serves their transfer requests, all with the
//! same conditional write.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use roost_net::ClusterSecret;
use tokio::net::TcpStream;

use redis::aio::MultiplexedConnection;
use roost_bcounter::{ProactivePolicy, ReplicaId, RequestOutcome, TransferRequest};

use crate::api::{Bound, EscrowCounters, Flag, Op, Outcome};
use crate::error::{check_key, EscrowError};
use crate::logic::{self, Counter, Step};
use crate::peer::{client_node, read_message, site_node, write_message, LinkConfig, LinkError};
use crate::site::{SiteInner, Stats};
use crate::store::{self, watch_update, Decision, Tokens, Writer};
use crate::wire::{Delta, Frame, TransferResult};

/// Merges `message` into `current` (creating the counter from the message
/// if this site does not have it). `Keep` when nothing changed.
fn merge_decision(
    key: &str,
    current: Option<Counter>,
    message: &Delta,
    me: ReplicaId,
    sites: usize,
) -> Result<Decision<bool>, EscrowError> {
    let count = message.rights().replica_count();
    if count != sites {
        return Err(EscrowError::counter(
            key,
            format!("delta knows {count} sites, this deployment has {sites}"),
        ));
    }
    let mut counter = match current {
        Some(counter) => counter,
        None => Counter::new(message.bound(), message.k(), me, sites)
            .map_err(|e| EscrowError::counter(key, e))?,
    };
    let before = counter.clone();
    counter
        .merge(message)
        .map_err(|e| EscrowError::counter(key, e))?;
    Ok(if counter == before && before.replica_count() == sites {
        Decision::Keep(false)
    } else {
        Decision::Write(counter, true)
    })
}

/// The client-based design's site agent: every access is a WATCH/MULTI/EXEC
/// read-modify-write on the site's Redis.
pub(crate) struct CasBackend {
    url: String,
    me: ReplicaId,
    pool: Mutex<Vec<MultiplexedConnection>>,
    tokens: Tokens,
}

impl CasBackend {
    pub(crate) fn new(url: &str, me: ReplicaId) -> CasBackend {
        CasBackend {
            url: url.to_owned(),
            me,
            pool: Mutex::new(Vec::new()),
            tokens: Tokens::new(),
        }
    }

    /// A connection of its own (WATCH is per connection), from the pool.
    async fn checkout(&self) -> Result<MultiplexedConnection, EscrowError> {
        let pooled = self.pool.lock().ok().and_then(|mut pool| pool.pop());
        match pooled {
            Some(con) => Ok(con),
            None => store::connect(&self.url).await,
        }
    }

    fn checkin(&self, con: MultiplexedConnection) {
        if let Ok(mut pool) = self.pool.lock() {
            if pool.len() < 64 {
                pool.push(con);
            }
        }
    }

    async fn update<R>(
        &self,
        site: &SiteInner,
        key: &str,
        decide: impl FnMut(Option<Counter>) -> Result<Decision<R>, EscrowError>,
    ) -> Result<(R, Option<Counter>), EscrowError> {
        let mut con = self.checkout().await?;
        let conflicts = AtomicU64::new(0);
        let writer = Writer {
            tokens: &self.tokens,
            me: self.me,
            sites: site.sites(),
            mark_dirty: false,
            conflicts: &conflicts,
        };
        let result = watch_update(&mut con, &writer, key, decide).await;
        Stats::add(&site.stats.cas_conflicts, conflicts.load(Ordering::Relaxed));
        // A connection that failed may be broken: do not pool it.
        if !matches!(result, Err(EscrowError::Redis { .. })) {
            self.checkin(con);
        }
        result
    }

    pub(crate) async fn merge(&self, site: &SiteInner, key: &str, message: Delta) {
        let (me, sites) = (self.me, site.sites());
        let result = self
            .update(site, key, |current| {
                merge_decision(key, current, &message, me, sites)
            })
            .await;
        match result {
            Ok((true, _)) => {
                Stats::add(&site.stats.merges_applied, 1);
                site.changed(key);
            }
            Ok((false, _)) => {}
            Err(error) => {
                Stats::add(&site.stats.merges_rejected, 1);
                tracing::warn!(site = site.site(), key, %error, "escrow: could not merge a delta");
            }
        }
    }

    pub(crate) async fn donate(
        &self,
        site: &SiteInner,
        key: &str,
        request: TransferRequest,
    ) -> TransferResult {
        let policy = ProactivePolicy::new(site.config.policy);
        let result = self
            .update(site, key, |current| {
                let Some(mut counter) = current else {
                    return Err(EscrowError::UnknownCounter {
                        key: key.to_owned(),
                    });
                };
                let outcome = counter
                    .handle_transfer_request(&request, &policy)
                    .map_err(|e| EscrowError::counter(key, e))?;
                Ok(match outcome {
                    RequestOutcome::Transferred { .. } => Decision::Write(counter, outcome),
                    _ => Decision::Keep(outcome),
                })
            })
            .await;
        let (outcome, counter) = match result {
            Ok(done) => done,
            Err(error) => {
                return TransferResult::Error {
                    reason: error.to_string(),
                }
            }
        };
        if matches!(outcome, RequestOutcome::Transferred { .. }) {
            // Asynchronous transfers reach the requester by replication.
            site.changed(key);
        }
        logic::donor_answer(outcome, request, counter.as_ref())
    }

    /// The libraries' changes since the last tick, and everything on resync.
    pub(crate) async fn collect_changes(&self, site: &SiteInner, resync: bool) {
        let Ok(mut con) = self.checkout().await else {
            return;
        };
        let mut keys = match store::take_dirty(&mut con, 10_000).await {
            Ok(keys) => keys,
            Err(_) => return,
        };
        if resync {
            match store::known_keys(&mut con).await {
                Ok(known) => keys.extend(known),
                Err(_) => return,
            }
        }
        self.checkin(con);
        for key in keys {
            if check_key(&key).is_ok() {
                site.changed(&key);
            }
        }
    }

    pub(crate) async fn states(&self, site: &SiteInner, keys: &[String]) -> Vec<(String, Counter)> {
        let Ok(mut con) = self.checkout().await else {
            return Vec::new();
        };
        let Ok(states) = store::load_many(&mut con, keys, self.me, site.sites()).await else {
            return Vec::new();
        };
        self.checkin(con);
        states
            .into_iter()
            .filter_map(|(key, state)| match state {
                Ok(counter) => Some((key, counter)),
                Err(error) => {
                    tracing::warn!(site = site.site(), %error, "escrow: not shipped");
                    None
                }
            })
            .collect()
    }

    pub(crate) async fn all_states(&self, site: &SiteInner) -> Vec<(String, Counter)> {
        let Ok(mut con) = self.checkout().await else {
            return Vec::new();
        };
        let Ok(keys) = store::known_keys(&mut con).await else {
            return Vec::new();
        };
        self.checkin(con);
        self.states(site, &keys).await
    }
}

/// Where a client library works.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The client's site (its replica id).
    pub site: usize,
    pub sites: usize,
    /// The site's Redis.
    pub redis_url: String,
    /// The site's agent (`Site::client_addr`), which asks other sites for
    /// rights on the library's behalf; `None`: global operations find none.
    pub agent: Option<SocketAddr>,
    /// The deployment's shared secret, proven to the agent.
    pub secret: ClusterSecret,
    pub transfer_timeout: Duration,
    pub link: LinkConfig,
}

/// The client-based middleware: a library over one connection to its
/// site's Redis.
pub struct ClientMiddleware {
    config: ClientConfig,
    me: ReplicaId,
    con: Option<MultiplexedConnection>,
    tokens: Tokens,
    /// The authenticated connection to the agent, opened on first need.
    agent: Option<TcpStream>,
    next_id: u64,
    conflicts: AtomicU64,
}

impl ClientMiddleware {
    /// Connects to the site's Redis.
    pub async fn connect(config: ClientConfig) -> Result<ClientMiddleware, EscrowError> {
        let me = ReplicaId::from_index(config.site)
            .filter(|_| config.site < config.sites)
            .ok_or_else(|| EscrowError::Config {
                reason: format!("client of site {} of {}", config.site, config.sites),
            })?;
        let con = store::connect(&config.redis_url).await?;
        Ok(ClientMiddleware {
            config,
            me,
            con: Some(con),
            tokens: Tokens::new(),
            agent: None,
            next_id: 1,
            conflicts: AtomicU64::new(0),
        })
    }

    /// Conditional writes that lost to another writer and were retried.
    pub fn conflicts(&self) -> u64 {
        self.conflicts.load(Ordering::Relaxed)
    }

    async fn update<R>(
        &mut self,
        key: &str,
        decide: impl FnMut(Option<Counter>) -> Result<Decision<R>, EscrowError>,
    ) -> Result<(R, Option<Counter>), EscrowError> {
        let mut con = match self.con.take() {
            Some(con) => con,
            None => store::connect(&self.config.redis_url).await?,
        };
        let writer = Writer {
            tokens: &self.tokens,
            me: self.me,
            sites: self.config.sites,
            mark_dirty: true,
            conflicts: &self.conflicts,
        };
        let result = watch_update(&mut con, &writer, key, decide).await;
        if !matches!(result, Err(EscrowError::Redis { .. })) {
            self.con = Some(con);
        }
        result
    }

    /// The connection to the agent, authenticated (opened if needed).
    async fn agent(&mut self) -> Result<&mut TcpStream, LinkError> {
        if self.agent.is_none() {
            let addr = self
                .config
                .agent
                .ok_or(LinkError::NoSuchPeer(self.config.site))?;
            let timeout = self.config.link.handshake_timeout;
            let timeout_ms = u64::try_from(timeout.as_millis())
                .unwrap_or(u64::MAX)
                .max(1);
            let mut stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
                .await
                .map_err(|_| LinkError::Io(format!("connecting to the agent at {addr} timed out")))?
                .map_err(|e| LinkError::Io(e.to_string()))?;
            let _ = stream.set_nodelay(true);
            let (me, site) = (client_node(self.config.site), site_node(self.config.site));
            roost_net::auth::dial(&mut stream, &self.config.secret, me, site, timeout_ms)
                .await
                .map_err(|e| LinkError::Auth(e.to_string()))?;
            self.agent = Some(stream);
        }
        self.agent
            .as_mut()
            .ok_or(LinkError::Closed(self.config.site))
    }

    /// Asks the agent to request rights from the donor; `None` if no answer
    /// came (the connection is then dropped, and opened anew next time).
    async fn ask(&mut self, key: &str, request: TransferRequest) -> Option<TransferResult> {
        let id = self.next_id;
        self.next_id += 1;
        let (me, site) = (client_node(self.config.site), site_node(self.config.site));
        let patience = self.config.transfer_timeout + self.config.link.handshake_timeout;
        let frame = Frame::AskDonor {
            id,
            key: key.to_owned(),
            request,
        };
        let site_index = self.config.site;
        let exchange = async {
            let stream = self.agent().await?;
            write_message(stream, me, site, &frame).await?;
            let envelope = read_message(stream)
                .await?
                .ok_or(LinkError::Closed(site_index))?;
            if envelope.from != site || envelope.to != me {
                return Err(LinkError::Wire(format!(
                    "reply from {} to {}",
                    envelope.from, envelope.to
                )));
            }
            match crate::wire::decode(&envelope.msg.body) {
                Ok(Frame::TransferReply {
                    id: got, result, ..
                }) if got == id => Ok(result),
                other => Err(LinkError::Wire(format!("unexpected reply {other:?}"))),
            }
        };
        match tokio::time::timeout(patience, exchange).await {
            Ok(Ok(result)) => Some(result),
            Ok(Err(error)) => {
                tracing::debug!(site = self.config.site, %error, "escrow: asking the agent failed");
                self.agent = None;
                None
            }
            Err(_) => {
                self.agent = None;
                None
            }
        }
    }

    async fn op(&mut self, key: &str, op: Op, flag: Flag) -> Result<Outcome, EscrowError> {
        check_key(key)?;
        let mut tried: Vec<ReplicaId> = Vec::new();
        loop {
            let attempt = tried.clone();
            let (step, _) = self
                .update(key, |current| {
                    let Some(mut counter) = current else {
                        return Err(EscrowError::UnknownCounter {
                            key: key.to_owned(),
                        });
                    };
                    Ok(
                        match logic::execute(key, &mut counter, op, flag, &attempt)? {
                            Step::Applied => Decision::Write(counter, Step::Applied),
                            other => Decision::Keep(other),
                        },
                    )
                })
                .await?;
            match step {
                Step::Applied => return Ok(Outcome::Ok),
                Step::Done(outcome) => return Ok(outcome),
                Step::AskDonor(request) => {
                    tried.push(request.donor);
                    let Some(result) = self.ask(key, request).await else {
                        continue;
                    };
                    let Some(message) = result.message().cloned() else {
                        continue;
                    };
                    let (me, sites) = (self.me, self.config.sites);
                    if message.rights().from() != request.donor || message.rights().to() != me {
                        continue;
                    }
                    self.update(key, |current| {
                        merge_decision(key, current, &message, me, sites)
                    })
                    .await?;
                }
            }
        }
    }
}

impl EscrowCounters for ClientMiddleware {
    async fn create(&mut self, key: &str, bound: Bound, k: i64) -> Result<(), EscrowError> {
        check_key(key)?;
        let (me, sites) = (self.me, self.config.sites);
        self.update(key, |current| match current {
            None => {
                let counter =
                    Counter::new(bound, k, me, sites).map_err(|e| EscrowError::counter(key, e))?;
                Ok(Decision::Write(counter, ()))
            }
            Some(c) if c.bound() == bound && c.k() == k => Ok(Decision::Keep(())),
            Some(c) => Err(EscrowError::Conflict {
                key: key.to_owned(),
                existing: format!("{:?} {}", c.bound(), c.k()),
                requested: format!("{bound:?} {k}"),
            }),
        })
        .await
        .map(|_| ())
    }

    async fn read(&mut self, key: &str) -> Result<i64, EscrowError> {
        check_key(key)?;
        let mut con = match self.con.take() {
            Some(con) => con,
            None => store::connect(&self.config.redis_url).await?,
        };
        let record = store::load(&mut con, key, self.me, self.config.sites).await;
        if !matches!(record, Err(EscrowError::Redis { .. })) {
            self.con = Some(con);
        }
        let record = record?.ok_or_else(|| EscrowError::UnknownCounter {
            key: key.to_owned(),
        })?;
        record
            .counter
            .value()
            .map_err(|e| EscrowError::counter(key, e))
    }

    async fn inc(&mut self, key: &str, delta: u64, flag: Flag) -> Result<Outcome, EscrowError> {
        self.op(key, Op::inc(delta), flag).await
    }

    async fn dec(&mut self, key: &str, delta: u64, flag: Flag) -> Result<Outcome, EscrowError> {
        self.op(key, Op::dec(delta), flag).await
    }
}

//! The server-based middleware (§IV-C): a middleware node per site that
//! serializes the operations of each counter, caches the counters, and
//! batches the operations that arrive during a write into the next single
//! conditional write.
//!
//! Each counter gets a tokio task that owns its [`KeyEngine`] and performs
//! its actions on the site's store ([`NodeStore`]): over Redis, loads with
//! `HMGET` and writes with the Lua compare-and-set of
//! [`crate::store::cas_write`] over one shared multiplexed connection
//! (pipelined across counters); inside Roost ([`RoostStore`]), a transaction
//! each. Clients hold a [`ServerMiddleware`] handle (in-process; the node is
//! the only writer of its site's counters).
//!
//! Every queue is bounded: a counter's command queue holds
//! [`KEY_QUEUE_CAPACITY`] commands, and its task stops taking commands while
//! its engine holds [`MAX_ENGINE_WAITING`] unanswered ones (an IO is then in
//! flight, and its end frees room). Senders wait for room (backpressure
//! reaches the client, or the site link's worker and through it TCP);
//! [`ServerMiddleware::reload`], which cannot wait, is refused with
//! [`EscrowError::QueueFull`].

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use roost_bcounter::{FailedReplicaReport, ProactiveConfig, ReplicaId, TransferRequest};
use tokio::sync::{mpsc, oneshot};

use crate::api::{Bound, EscrowCounters, Flag, Op, Outcome};
use crate::engine::{Action, Command, KeyEngine, Reply, WriteOutcome};
use crate::error::{check_key, EscrowError};
use crate::logic::Counter;
use crate::propagation::Propagator;
use crate::roost_store::RoostStore;
use crate::site::{SiteInner, Stats};
use crate::store::{self, CasOutcome, LazyConnection, Record};
use crate::wire::TransferResult;

type Ticket = oneshot::Sender<Reply>;
type Message = (Option<Ticket>, Command);

/// Commands queued per counter before senders wait.
pub const KEY_QUEUE_CAPACITY: usize = 256;

/// Unanswered commands a counter's engine holds before its task stops taking
/// more from its queue.
pub const MAX_ENGINE_WAITING: usize = 1024;

/// What the per-key tasks share.
struct Shared {
    me: ReplicaId,
    sites: usize,
    policy: ProactiveConfig,
    store: NodeStore,
    durable: Mutex<HashMap<String, Counter>>,
    propagator: Arc<Mutex<Propagator>>,
    stats: Arc<Stats>,
    /// Other nodes of this site write the same rows (see
    /// [`KeyEngine::with_shared_rows`]).
    shared_rows: bool,
}

/// Where a node keeps its site's counters.
pub(crate) enum NodeStore {
    /// The site's `redis-server` (the paper's design).
    Redis(LazyConnection),
    /// An embedded Roost database: bounded counters inside Roost.
    Roost(RoostStore),
}

impl NodeStore {
    async fn load(
        &self,
        key: &str,
        me: ReplicaId,
        sites: usize,
    ) -> Result<Option<Record>, EscrowError> {
        match self {
            NodeStore::Redis(con) => {
                let mut connection = con.get().await?;
                let result = store::load(&mut connection, key, me, sites).await;
                if matches!(result, Err(EscrowError::Redis { .. })) {
                    con.invalidate().await;
                }
                result
            }
            NodeStore::Roost(roost) => roost.load(key, me, sites).await,
        }
    }

    async fn write(
        &self,
        key: &str,
        expected: Option<&str>,
        token: &str,
        counter: &Counter,
    ) -> WriteOutcome {
        let written = match self {
            NodeStore::Redis(con) => match con.get().await {
                Ok(mut connection) => {
                    let written =
                        store::cas_write(&mut connection, key, expected, token, counter).await;
                    if written.is_err() {
                        con.invalidate().await;
                    }
                    written
                }
                Err(error) => Err(error),
            },
            NodeStore::Roost(roost) => roost.cas_write(key, expected, token, counter).await,
        };
        match written {
            Ok(CasOutcome::Landed) => WriteOutcome::Landed,
            Ok(CasOutcome::Conflict) => WriteOutcome::Conflict,
            Err(_) => WriteOutcome::Unknown,
        }
    }

    async fn known_keys(&self) -> Result<Vec<String>, EscrowError> {
        match self {
            NodeStore::Redis(con) => store::known_keys(&mut con.get().await?).await,
            NodeStore::Roost(roost) => roost.known_keys().await,
        }
    }
}

/// The middleware node of one site.
pub(crate) struct NodeCore {
    shared: Arc<Shared>,
    routes: Mutex<HashMap<String, mpsc::Sender<Message>>>,
    closed: AtomicBool,
}

impl NodeCore {
    pub(crate) fn new(
        store: NodeStore,
        me: ReplicaId,
        sites: usize,
        policy: ProactiveConfig,
        propagator: Arc<Mutex<Propagator>>,
        stats: Arc<Stats>,
        shared_rows: bool,
    ) -> NodeCore {
        NodeCore {
            shared: Arc::new(Shared {
                me,
                sites,
                policy,
                store,
                durable: Mutex::new(HashMap::new()),
                propagator,
                stats,
                shared_rows,
            }),
            routes: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
        }
    }

    /// The queue of `key`'s task, starting the task if needed (or again, if
    /// it is gone: a panic would be a bug).
    fn queue(&self, key: &str) -> Option<mpsc::Sender<Message>> {
        if self.closed.load(Ordering::SeqCst) {
            return None;
        }
        let mut routes = self.routes.lock().ok()?;
        if routes.get(key).is_some_and(mpsc::Sender::is_closed) {
            routes.remove(key);
        }
        let sender = routes.entry(key.to_owned()).or_insert_with(|| {
            let (tx, rx) = mpsc::channel(KEY_QUEUE_CAPACITY);
            tokio::spawn(key_task(Arc::clone(&self.shared), key.to_owned(), rx));
            tx
        });
        Some(sender.clone())
    }

    /// Routes a command to its counter's task, waiting for room in its queue.
    async fn send(&self, key: &str, ticket: Option<Ticket>, command: Command) -> bool {
        let mut message = (ticket, command);
        for _ in 0..2 {
            let Some(queue) = self.queue(key) else {
                return false;
            };
            match queue.send(message).await {
                Ok(()) => return true,
                Err(mpsc::error::SendError(back)) => message = back,
            }
        }
        false
    }

    /// A command whose answer nobody waits for; waits for room in the queue.
    pub(crate) async fn tell(&self, key: &str, command: Command) {
        self.send(key, None, command).await;
    }

    /// Like [`NodeCore::tell`] without waiting: a full queue is refused.
    pub(crate) fn try_tell(&self, key: &str, command: Command) -> Result<(), EscrowError> {
        let queue = self.queue(key).ok_or(EscrowError::NodeGone)?;
        queue
            .try_send((None, command))
            .map_err(|error| match error {
                mpsc::error::TrySendError::Full(_) => EscrowError::QueueFull {
                    key: key.to_owned(),
                    capacity: KEY_QUEUE_CAPACITY,
                },
                mpsc::error::TrySendError::Closed(_) => EscrowError::NodeGone,
            })
    }

    pub(crate) async fn call(&self, key: &str, command: Command) -> Result<Reply, EscrowError> {
        let (tx, rx) = oneshot::channel();
        if !self.send(key, Some(tx), command).await {
            return Err(EscrowError::NodeGone);
        }
        rx.await.map_err(|_| EscrowError::NodeGone)
    }

    pub(crate) async fn donate(&self, key: &str, request: TransferRequest) -> TransferResult {
        match self.call(key, Command::Donate { request }).await {
            Ok(Reply::Donated(result)) => result,
            Ok(Reply::Error(error)) => TransferResult::Error {
                reason: error.to_string(),
            },
            Ok(other) => TransferResult::Error {
                reason: format!("unexpected answer {other:?}"),
            },
            Err(error) => TransferResult::Error {
                reason: error.to_string(),
            },
        }
    }

    pub(crate) fn states(&self, keys: &[String]) -> Vec<(String, Counter)> {
        let Ok(durable) = self.shared.durable.lock() else {
            return Vec::new();
        };
        keys.iter()
            .filter_map(|key| Some((key.clone(), durable.get(key)?.clone())))
            .collect()
    }

    /// The value of `key`'s last published (durable) state, without asking
    /// its task; `None` if none was published yet.
    fn published_value(&self, key: &str) -> Option<Result<i64, EscrowError>> {
        let durable = self.shared.durable.lock().ok()?;
        let counter = durable.get(key)?;
        Some(counter.value().map_err(|e| EscrowError::counter(key, e)))
    }

    pub(crate) fn all_states(&self) -> Vec<(String, Counter)> {
        let Ok(durable) = self.shared.durable.lock() else {
            return Vec::new();
        };
        durable
            .iter()
            .map(|(key, counter)| (key.clone(), counter.clone()))
            .collect()
    }

    /// Published states mark themselves changed; a resync ships everything
    /// again and loads the counters Redis has that this node has not loaded
    /// (after a restart), which publishes them.
    pub(crate) async fn collect_changes(&self, site: &SiteInner, resync: bool) {
        if !resync {
            return;
        }
        if let Ok(mut propagator) = site.propagator.lock() {
            propagator.resync();
        }
        let Ok(keys) = self.shared.store.known_keys().await else {
            return;
        };
        if self.shared.shared_rows {
            // The other nodes of this site write these rows too: read every
            // one again, so a state one of them wrote (and died before
            // shipping) still reaches the other sites.
            for key in keys {
                if check_key(&key).is_ok() {
                    self.tell(&key, Command::Reload).await;
                }
            }
            return;
        }
        let loaded: Vec<String> = match self.shared.durable.lock() {
            Ok(durable) => keys
                .into_iter()
                .filter(|key| !durable.contains_key(key))
                .collect(),
            Err(_) => return,
        };
        for key in loaded {
            if check_key(&key).is_ok() {
                self.tell(&key, Command::Read).await;
            }
        }
    }

    /// The replica of `key` as the store holds it.
    pub(crate) async fn load(&self, key: &str) -> Result<Option<Counter>, EscrowError> {
        let shared = &self.shared;
        Ok(shared
            .store
            .load(key, shared.me, shared.sites)
            .await?
            .map(|record| record.counter))
    }

    pub(crate) fn shutdown(&self) {
        self.closed.store(true, Ordering::SeqCst);
        if let Ok(mut routes) = self.routes.lock() {
            routes.clear();
        }
    }
}

enum IoDone {
    Wrote(WriteOutcome),
    Loaded(Result<Option<Record>, EscrowError>),
}

type Io = Pin<Box<dyn Future<Output = IoDone> + Send>>;

async fn key_task(shared: Arc<Shared>, key: String, mut rx: mpsc::Receiver<Message>) {
    let mut engine: KeyEngine<Ticket> =
        KeyEngine::new(key.clone(), shared.me, shared.sites, shared.policy)
            .with_shared_rows(shared.shared_rows);
    let mut io: Option<Io> = None;
    let mut closing = false;
    loop {
        let actions = tokio::select! {
            biased;
            done = async { match io.as_mut() { Some(io) => io.await, None => std::future::pending().await } }, if io.is_some() => {
                io = None;
                match done {
                    IoDone::Wrote(outcome) => engine.write_done(outcome),
                    // A state loaded for the first time, or another
                    // writer's, comes back as `Action::Published`.
                    IoDone::Loaded(result) => engine.loaded(result),
                }
            }
            // A full engine takes no more until its IO ends (never with no
            // IO in flight, which would leave nothing to wait for).
            message = rx.recv(), if !closing && (io.is_none() || engine.waiting() < MAX_ENGINE_WAITING) => match message {
                Some((ticket, command)) => engine.handle(ticket, command),
                None => {
                    closing = true;
                    Vec::new()
                }
            },
        };
        for action in actions {
            match action {
                Action::Load => {
                    let shared = Arc::clone(&shared);
                    let key = key.clone();
                    io = Some(Box::pin(async move {
                        IoDone::Loaded(shared.store.load(&key, shared.me, shared.sites).await)
                    }));
                }
                Action::Write {
                    expected,
                    token,
                    counter,
                } => {
                    Stats::add(&shared.stats.writes, 1);
                    let shared = Arc::clone(&shared);
                    let key = key.clone();
                    io = Some(Box::pin(async move {
                        IoDone::Wrote(
                            shared
                                .store
                                .write(&key, expected.as_deref(), &token, &counter)
                                .await,
                        )
                    }));
                }
                Action::Reply { ticket, reply } => {
                    if reply == Reply::Outcome(Outcome::Ok) {
                        Stats::add(&shared.stats.ops_ok, 1);
                    }
                    let _ = ticket.send(reply);
                }
                Action::Published { counter } => {
                    if let Ok(mut durable) = shared.durable.lock() {
                        durable.insert(key.clone(), counter);
                    }
                    if let Ok(mut propagator) = shared.propagator.lock() {
                        propagator.changed(&key);
                    }
                }
                Action::Rejected { reason } => {
                    Stats::add(&shared.stats.merges_rejected, 1);
                    tracing::warn!(key = %key, %reason, "escrow: refused a delta");
                }
            }
        }
        if closing && io.is_none() && engine.waiting() == 0 {
            return;
        }
    }
}

/// A client of a site's middleware node: Figure 1's API.
#[derive(Clone)]
pub struct ServerMiddleware {
    site: Arc<SiteInner>,
}

impl ServerMiddleware {
    pub(crate) fn new(site: Arc<SiteInner>) -> ServerMiddleware {
        ServerMiddleware { site }
    }

    fn node(&self) -> Result<&NodeCore, EscrowError> {
        match &self.site.backend {
            crate::site::Backend::Node(node) => Ok(node),
            _ => Err(EscrowError::NodeGone),
        }
    }

    /// The site this client talks to.
    pub fn site(&self) -> usize {
        self.site.site()
    }

    /// §IV-E, at every surviving site: fences site `failed` (nothing from
    /// it is merged or served any more), then reports, for every counter
    /// this site has, what it knows of `failed`'s rights.
    pub async fn fence_and_report(
        &self,
        failed: usize,
    ) -> Result<Vec<(String, FailedReplicaReport)>, EscrowError> {
        let node = self.node()?;
        self.site.fence(failed)?;
        let failed_id = ReplicaId::from_index(failed).ok_or(EscrowError::NodeGone)?;
        let mut keys: Vec<String> = node.all_states().into_iter().map(|(k, _)| k).collect();
        keys.sort();
        let mut reports = Vec::with_capacity(keys.len());
        for key in keys {
            match node
                .call(&key, Command::Report { failed: failed_id })
                .await?
            {
                Reply::Report(report) => reports.push((key, report)),
                other => return Err(unexpected(&key, other)),
            }
        }
        Ok(reports)
    }

    /// §IV-E, at the one heir: takes over site `failed`'s rights in `key`,
    /// computed from every survivor's report (this site's included, all
    /// taken after every survivor fenced it). Returns the rights recovered.
    pub async fn adopt(
        &self,
        failed: usize,
        key: &str,
        reports: Vec<FailedReplicaReport>,
    ) -> Result<u64, EscrowError> {
        check_key(key)?;
        let node = self.node()?;
        if !self.site.is_fenced(failed) {
            return Err(EscrowError::Config {
                reason: format!("site {failed} must be fenced here first (fence_and_report)"),
            });
        }
        let failed = ReplicaId::from_index(failed).ok_or(EscrowError::NodeGone)?;
        match node.call(key, Command::Adopt { failed, reports }).await? {
            Reply::Adopted(n) => Ok(n),
            other => Err(unexpected(key, other)),
        }
    }

    /// The value of `key` after an operation of this handle was answered
    /// `Ok`: the node's last published state, which already holds that
    /// operation (a counter's task publishes a write before it answers the
    /// operations in it), read without a round trip to the counter's task;
    /// as [`read`](EscrowCounters::read) if nothing was published.
    pub async fn value_after_ok(&mut self, key: &str) -> Result<i64, EscrowError> {
        check_key(key)?;
        match self.node()?.published_value(key) {
            Some(value) => value,
            None => self.read(key).await,
        }
    }

    /// Another writer at this site (a procedure's transaction over the
    /// site's store) changed `key`'s replica: the node reads it again and
    /// ships it to the other sites. Its own next conditional write would
    /// also notice (the token changed), but might not come soon. Does not
    /// wait: a full command queue is [`EscrowError::QueueFull`] (the queued
    /// commands' writes will notice the new token).
    pub fn reload(&self, key: &str) -> Result<(), EscrowError> {
        check_key(key)?;
        self.node()?.try_tell(key, Command::Reload)
    }

    async fn op(&self, key: &str, op: Op, flag: Flag) -> Result<Outcome, EscrowError> {
        check_key(key)?;
        let node = self.node()?;
        let mut tried: Vec<ReplicaId> = Vec::new();
        loop {
            let command = Command::Op {
                op,
                flag,
                tried: tried.clone(),
            };
            match node.call(key, command).await? {
                Reply::Outcome(outcome) => return Ok(outcome),
                Reply::AskDonor(request) => {
                    tried.push(request.donor);
                    if let Ok(result) = self.site.ask_donor(key, request).await {
                        if let Some(message) = result.message() {
                            // Merged before the operation runs again: the
                            // counter's task takes commands in order.
                            self.site
                                .merge(request.donor.index(), key, message.clone())
                                .await;
                        }
                    }
                }
                other => return Err(unexpected(key, other)),
            }
        }
    }
}

/// The node's error, or an error naming an answer the command cannot get.
fn unexpected(key: &str, reply: Reply) -> EscrowError {
    match reply {
        Reply::Error(error) => error,
        other => EscrowError::counter(key, format!("unexpected answer {other:?}")),
    }
}

impl EscrowCounters for ServerMiddleware {
    async fn create(&mut self, key: &str, bound: Bound, k: i64) -> Result<(), EscrowError> {
        check_key(key)?;
        match self.node()?.call(key, Command::Create { bound, k }).await? {
            Reply::Created => Ok(()),
            other => Err(unexpected(key, other)),
        }
    }

    async fn read(&mut self, key: &str) -> Result<i64, EscrowError> {
        check_key(key)?;
        match self.node()?.call(key, Command::Read).await? {
            Reply::Value(value) => Ok(value),
            other => Err(unexpected(key, other)),
        }
    }

    async fn inc(&mut self, key: &str, delta: u64, flag: Flag) -> Result<Outcome, EscrowError> {
        self.op(key, Op::inc(delta), flag).await
    }

    async fn dec(&mut self, key: &str, delta: u64, flag: Flag) -> Result<Outcome, EscrowError> {
        self.op(key, Op::dec(delta), flag).await
    }
}

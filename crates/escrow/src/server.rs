//! The server-based middleware (§IV-C): a middleware node per site that
//! serializes the operations of each counter, caches the counters, and
//! batches the operations that arrive during a write into the next single
//! conditional write.
//!
//! Each counter gets a tokio task that owns its [`KeyEngine`] and performs
//! its actions: loads with `HMGET`, writes with the Lua compare-and-set of
//! [`crate::store::cas_write`] over one shared multiplexed connection
//! (pipelined across counters). Clients hold a [`ServerMiddleware`] handle
//! (in-process; the node is the only writer of its site's counters).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use roost_bcounter::{ProactiveConfig, ReplicaId, TransferRequest};
use tokio::sync::{mpsc, oneshot};

use crate::api::{Bound, EscrowCounters, Flag, Op, Outcome};
use crate::engine::{Action, Command, KeyEngine, Reply, WriteOutcome};
use crate::error::{check_key, EscrowError};
use crate::logic::Counter;
use crate::propagation::Propagator;
use crate::site::{SiteInner, Stats};
use crate::store::{self, CasOutcome, LazyConnection, Record};
use crate::wire::TransferResult;

type Ticket = oneshot::Sender<Reply>;
type Message = (Option<Ticket>, Command);

/// What the per-key tasks share.
struct Shared {
    me: ReplicaId,
    sites: usize,
    policy: ProactiveConfig,
    con: LazyConnection,
    durable: Mutex<HashMap<String, Counter>>,
    propagator: Arc<Mutex<Propagator>>,
    stats: Arc<Stats>,
}

/// The middleware node of one site.
pub(crate) struct NodeCore {
    shared: Arc<Shared>,
    routes: Mutex<HashMap<String, mpsc::UnboundedSender<Message>>>,
    closed: AtomicBool,
}

impl NodeCore {
    pub(crate) fn new(
        url: &str,
        me: ReplicaId,
        sites: usize,
        policy: ProactiveConfig,
        propagator: Arc<Mutex<Propagator>>,
        stats: Arc<Stats>,
    ) -> NodeCore {
        NodeCore {
            shared: Arc::new(Shared {
                me,
                sites,
                policy,
                con: LazyConnection::new(url, None),
                durable: Mutex::new(HashMap::new()),
                propagator,
                stats,
            }),
            routes: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
        }
    }

    /// Routes a command to its counter's task, starting the task if needed.
    fn send(&self, key: &str, ticket: Option<Ticket>, command: Command) -> bool {
        if self.closed.load(Ordering::SeqCst) {
            return false;
        }
        let Ok(mut routes) = self.routes.lock() else {
            return false;
        };
        let mut message = (ticket, command);
        for _ in 0..2 {
            let sender = routes.entry(key.to_owned()).or_insert_with(|| {
                let (tx, rx) = mpsc::unbounded_channel();
                tokio::spawn(key_task(Arc::clone(&self.shared), key.to_owned(), rx));
                tx
            });
            match sender.send(message) {
                Ok(()) => return true,
                Err(mpsc::error::SendError(back)) => {
                    // The task is gone (a panic would be a bug): start anew.
                    routes.remove(key);
                    message = back;
                }
            }
        }
        false
    }

    /// A command whose answer nobody waits for.
    pub(crate) fn tell(&self, key: &str, command: Command) {
        self.send(key, None, command);
    }

    pub(crate) async fn call(&self, key: &str, command: Command) -> Result<Reply, EscrowError> {
        let (tx, rx) = oneshot::channel();
        if !self.send(key, Some(tx), command) {
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
        let Ok(mut con) = self.shared.con.get().await else {
            return;
        };
        let Ok(keys) = store::known_keys(&mut con).await else {
            return;
        };
        let loaded: Vec<String> = match self.shared.durable.lock() {
            Ok(durable) => keys
                .into_iter()
                .filter(|key| !durable.contains_key(key))
                .collect(),
            Err(_) => return,
        };
        for key in loaded {
            if check_key(&key).is_ok() {
                self.tell(&key, Command::Read);
            }
        }
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

async fn key_task(shared: Arc<Shared>, key: String, mut rx: mpsc::UnboundedReceiver<Message>) {
    let mut engine: KeyEngine<Ticket> =
        KeyEngine::new(key.clone(), shared.me, shared.sites, shared.policy);
    let mut io: Option<Io> = None;
    let mut closing = false;
    loop {
        let actions = tokio::select! {
            biased;
            done = async { match io.as_mut() { Some(io) => io.await, None => std::future::pending().await } }, if io.is_some() => {
                io = None;
                match done {
                    IoDone::Wrote(outcome) => engine.write_done(outcome),
                    IoDone::Loaded(result) => {
                        let was_loaded = engine.durable().is_some();
                        let mut actions = engine.loaded(result);
                        // A counter loaded from Redis is published like a new state.
                        if !was_loaded {
                            if let Some(counter) = engine.durable() {
                                actions.push(Action::Published { counter: counter.clone() });
                            }
                        }
                        actions
                    }
                }
            }
            message = rx.recv(), if !closing => match message {
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
                        let result = match shared.con.get().await {
                            Ok(mut con) => {
                                let result =
                                    store::load(&mut con, &key, shared.me, shared.sites).await;
                                if matches!(result, Err(EscrowError::Redis { .. })) {
                                    shared.con.invalidate().await;
                                }
                                result
                            }
                            Err(error) => Err(error),
                        };
                        IoDone::Loaded(result)
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
                        let outcome = match shared.con.get().await {
                            Ok(mut con) => {
                                match store::cas_write(
                                    &mut con,
                                    &key,
                                    expected.as_deref(),
                                    &token,
                                    &counter,
                                )
                                .await
                                {
                                    Ok(CasOutcome::Landed) => WriteOutcome::Landed,
                                    Ok(CasOutcome::Conflict) => WriteOutcome::Conflict,
                                    Err(_) => {
                                        shared.con.invalidate().await;
                                        WriteOutcome::Unknown
                                    }
                                }
                            }
                            Err(_) => WriteOutcome::Unknown,
                        };
                        IoDone::Wrote(outcome)
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
                Reply::Error(error) => return Err(error),
                other => {
                    return Err(EscrowError::counter(
                        key,
                        format!("unexpected answer {other:?}"),
                    ))
                }
            }
        }
    }
}

impl EscrowCounters for ServerMiddleware {
    async fn create(&mut self, key: &str, bound: Bound, k: i64) -> Result<(), EscrowError> {
        check_key(key)?;
        match self.node()?.call(key, Command::Create { bound, k }).await? {
            Reply::Created => Ok(()),
            Reply::Error(error) => Err(error),
            other => Err(EscrowError::counter(
                key,
                format!("unexpected answer {other:?}"),
            )),
        }
    }

    async fn read(&mut self, key: &str) -> Result<i64, EscrowError> {
        check_key(key)?;
        match self.node()?.call(key, Command::Read).await? {
            Reply::Value(value) => Ok(value),
            Reply::Error(error) => Err(error),
            other => Err(EscrowError::counter(
                key,
                format!("unexpected answer {other:?}"),
            )),
        }
    }

    async fn inc(&mut self, key: &str, delta: u64, flag: Flag) -> Result<Outcome, EscrowError> {
        self.op(key, Op::inc(delta), flag).await
    }

    async fn dec(&mut self, key: &str, delta: u64, flag: Flag) -> Result<Outcome, EscrowError> {
        self.op(key, Op::dec(delta), flag).await
    }
}

//! Zeus's reliable commit over the node's reactor database, composed with
//! ownership into the one protocol the node's runtime drives ([`Zeus`]).
//!
//! **From a local commit to a reply.** The database numbers every write
//! commit at its serialization point (after its write set is locked, before
//! it validates) and hands the number, with the rows the transaction
//! changed per reactor or `Aborted`, to [`ZeusPlacement`](crate::ZeusPlacement)
//! on the executor that committed it. The numbers are dense and come in any
//! order; the [`Intake`] releases them in number order, so the stream is a
//! serial order of the node's transactions. The forwarder task submits each
//! released transaction to the driver ([`ZeusCmd::Commit`]), in order: the
//! driver gives every written reactor its next `t_version` and starts the
//! reliable commit (`tx_id = <local_tx_id, node_id>`, one pipeline per node:
//! the node's transactions are serialized by the intake anyway, and a
//! follower needs one order per coordinator). The transaction's caller (the
//! RESP connection) waits until the driver answers [`ZeusOut::Committed`]:
//! every follower (the readers of the reactors it wrote) acknowledged.
//!
//! **R-INV carries rows, not reactors.** A write's data is the reactor's
//! changed rows (`Vec<RowChange>`, postcard); a follower applies them to its
//! copy ([`ExportedReactor::apply_changes`]). Applying the same changes
//! twice is harmless (they are final values), and the protocol applies a
//! reactor's versions in order.
//!
//! **Reads wait for what they may have read.** A read-only transaction at
//! the owner may read a write whose reliable commit is still pending; its
//! reply waits until every write numbered before it finished
//! ([`CommitShared::read_barrier`]). No wait when nothing is in flight.
//!
//! **Ownership.** The owner of a reactor that a transaction still in
//! reliable commit wrote or read NACKs ownership requests
//! (`has_pending_commit`), and ownership
//! waits for the reliable commit's recovery after a view change
//! (`commit_recovery_done`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use roost_cluster::runtime::{ProtocolHandle, RequestError, RequestId, Served};
use roost_cluster::{Context, Effects, Input, NodeId, Protocol};
use roost_commit::{
    CommitMsg, CommitOut, ObjectState, ObjectStore as CommitObjectStore, ReliableCommit,
    Transaction, TxId, Write, RETRANSMIT_TIMER,
};
use roost_ownership::{Access, OState, OwnershipCmd, OwnershipMsg, OwnershipOut, ReqId};
use roost_reactor::{Database, Holding, ReactorChanges, ReactorKey, ReplicationError, RowChange};
use roost_resp::Keyspace;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use roost_zeus::{Recovered, Recoveries};

use crate::replicas::{DegreeError, ReplicaManager, ReplicationConfig, REPLICA_TIMER};
use crate::zeus::{refresh_replica, NodeOwnership, NodeReactor, Shared};

/// Transactions released by the intake but not yet answered, at most
/// (the executors' admission control bounds them well below).
pub const MAX_COMMITS_IN_FLIGHT: usize = 1024;
/// How long [`CommitShared::wait_arrived`] spins (then it answers "not
/// yet"): a number reaches the intake within the poll that took it.
const ARRIVAL_SPINS: u32 = 10_000;

/// A message between nodes: one of the two protocols'.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ZeusMsg {
    Ownership(OwnershipMsg<NodeReactor>),
    Commit(CommitMsg),
    /// The owner asks this node to become a reader of `key` (the
    /// replication degree wants one more copy).
    BecomeReader {
        key: NodeReactor,
    },
    /// The owner asks this reader to leave (one copy too many).
    StopReading {
        key: NodeReactor,
    },
    /// The members the sender knows finished the reliable commit's
    /// recovery in this epoch ([`Recoveries`]).
    Recovered(Recovered),
    /// The owner of `key` saw only forwarded writes on it lately: a node
    /// holding off taking it (`crate::forward`) may take it now.
    Yield {
        key: NodeReactor,
    },
    /// The copies the sender recovered from its disk (reactor, `t_version`,
    /// whole), before reactors are created (`crate::durable::CopyReports`);
    /// `reply` asks for the receiver's.
    Copies {
        copies: Vec<(NodeReactor, u64, bool)>,
        reply: bool,
    },
}

#[derive(Debug, Clone)]
pub enum ZeusCmd {
    Ownership(OwnershipCmd<NodeReactor>),
    /// Reliably commit transactions the database committed here: a group
    /// of consecutive intake numbers up to `seq` (its last), their changes
    /// merged per reactor in number order.
    Commit {
        req: ReqId,
        seq: u64,
        changes: Vec<ReactorChanges>,
        /// Every member transaction's reactors (one per member that wrote
        /// or read it): what the pending-commit counts give back when
        /// answered.
        members: Vec<ReactorKey>,
    },
    /// Set the replication degree of reactors of `reactor_type` (`None`:
    /// the default) on this node's owned reactors.
    SetDegree {
        req: ReqId,
        reactor_type: Option<String>,
        degree: usize,
    },
    /// Let at most `depth` of this node's transactions be in reliable
    /// commit at once (1: each waits for the one before; the benchmark's
    /// baseline against pipelining).
    SetPipelineDepth {
        req: ReqId,
        depth: usize,
    },
}

#[derive(Debug, Clone)]
pub enum ZeusOut {
    Ownership(OwnershipOut<NodeReactor>),
    /// Every follower acknowledged: the client may be answered.
    Committed {
        req: ReqId,
        tx_id: TxId,
    },
    /// Not reliably committed, and this node cannot tell whether it will be
    /// (refused by the protocol, or this node left the view).
    CommitFailed {
        req: ReqId,
        error: ReplicationError,
    },
    /// The answer to [`ZeusCmd::SetDegree`] and
    /// [`ZeusCmd::SetPipelineDepth`].
    Configured {
        req: ReqId,
        result: Result<(), DegreeError>,
    },
}

/// The protocol a Roost node runs: Zeus ownership and reliable commit over
/// the node's reactor database.
pub struct Zeus {
    ownership: NodeOwnership,
    commit: ReliableCommit<CommitStore>,
    shared: Arc<Shared>,
    /// Own transactions in reliable commit: the request and intake number
    /// to answer, and the reactors they wrote.
    in_flight: BTreeMap<TxId, InFlight>,
    /// The transaction being handed to the protocol (named by its
    /// `Started` output).
    starting: Option<InFlight>,
    /// Each written reactor's readers in its last valid metadata here (one
    /// entry per reactor this node wrote as owner).
    followers_of: HashMap<NodeReactor, Vec<NodeId>>,
    replicas: ReplicaManager,
    /// Which members finished the reliable commit's recovery: ownership
    /// serves again only once every one did (the seed).
    recoveries: Recoveries,
}

struct InFlight {
    req: ReqId,
    seq: u64,
    reactors: Vec<ReactorKey>,
}

impl Zeus {
    pub(crate) fn new(
        ownership: NodeOwnership,
        commit: ReliableCommit<CommitStore>,
        replication: ReplicationConfig,
        shared: Arc<Shared>,
    ) -> Result<Zeus, DegreeError> {
        replication.validate()?;
        Ok(Zeus {
            ownership,
            commit,
            shared,
            in_flight: BTreeMap::new(),
            starting: None,
            followers_of: HashMap::new(),
            replicas: ReplicaManager::new(replication),
            recoveries: Recoveries::new(),
        })
    }

    /// Records this node's recovery (telling the other members once it is
    /// over) and sets what ownership reads (`commit_recovery_done`): every
    /// member recovered. One's own recovery is not enough: a reader with
    /// nothing to replay could become owner while another node still
    /// replays a failed coordinator's newer version to it (the composed
    /// simulation, `roost sim --protocol zeus`, found it).
    fn note_recovery(&mut self, ctx: &Context<'_>, fx: &mut Effects<ZeusMsg, ZeusOut>) {
        let here = !self.commit.recovering();
        self.recoveries
            .note(ctx, here, &mut |to, m| fx.send(to, ZeusMsg::Recovered(m)));
        let all = self.recoveries.all_recovered(ctx);
        self.shared.commit.set_recovering(!all);
        debug_assert!(!all || here, "every member includes this one");
    }

    /// The replication settings now.
    pub fn replication(&self) -> &ReplicationConfig {
        &self.replicas.config
    }

    fn set_degree(
        &mut self,
        reactor_type: Option<String>,
        degree: usize,
    ) -> Result<(), DegreeError> {
        if degree == 0 {
            return Err(DegreeError::Zero(degree));
        }
        match reactor_type {
            Some(t) => {
                self.replicas.config.degree_by_type.insert(t, degree);
            }
            None => self.replicas.config.degree = degree,
        }
        Ok(())
    }

    fn on_ask(
        &mut self,
        ctx: &Context<'_>,
        from: NodeId,
        key: NodeReactor,
        become_reader: bool,
        fx: &mut Effects<ZeusMsg, ZeusOut>,
    ) {
        // Only the owner asks (a stale ask is harmless: the request it
        // makes is arbitrated like any other).
        let from_owner = self
            .ownership
            .meta(&key)
            .is_none_or(|m| m.o_replicas.owner == Some(from));
        if !from_owner {
            self.shared.commit.count_bad_ask();
            return;
        }
        if let Some(cmd) = self.replicas.on_ask(&self.ownership, key, become_reader) {
            self.drive_ownership(ctx, Input::Command(cmd), fx);
        }
    }

    pub fn ownership(&self) -> &NodeOwnership {
        &self.ownership
    }

    pub fn reliable_commit(&self) -> &ReliableCommit<CommitStore> {
        &self.commit
    }

    fn start_commit(
        &mut self,
        ctx: &Context<'_>,
        req: ReqId,
        seq: u64,
        changes: Vec<ReactorChanges>,
        reactors: Vec<ReactorKey>,
        fx: &mut Effects<ZeusMsg, ZeusOut>,
    ) {
        debug_assert!(changes.iter().all(|c| reactors.contains(&c.reactor)));
        // The transaction wrote reactors this node owned when it committed,
        // and ownership cannot have moved since: the owner refuses every
        // ownership request while a numbered commit on the reactor is
        // unanswered (`has_pending_commit`, which freezes the reactor
        // before it looks). A refused request still leaves the reactor
        // Invalid here, its rows exported to the held copy, until the
        // driver releases it: the commit goes on (the copy gets the same
        // changes, and is installed back). Its followers are the readers of
        // the last valid metadata: while an arbitration is pending the
        // metadata names the request's vector, which may leave out a reader
        // that still holds the reactor (a remove-reader), so both count.
        let mut followers: Vec<NodeId> = Vec::new();
        let mut writes = Vec::with_capacity(changes.len());
        for change in &changes {
            let node_key = NodeReactor(change.reactor.clone());
            let meta = self.ownership.meta(&node_key);
            match meta {
                Some(meta) if meta.o_state == OState::Valid => {
                    if meta.o_replicas.owner != Some(ctx.me) {
                        // Ruled out above; counted, and the readers the
                        // metadata names still get the changes.
                        self.shared.commit.count_exported_first(1);
                        tracing::error!(seq, reactor = %node_key, "a reactor with a pending commit changed owner");
                    }
                    let readers: Vec<NodeId> = meta.o_replicas.readers.iter().copied().collect();
                    followers.extend(readers.iter().copied());
                    self.followers_of.insert(node_key, readers);
                }
                other => {
                    if let Some(meta) = other {
                        followers.extend(meta.o_replicas.readers.iter().copied());
                    }
                    if let Some(last) = self.followers_of.get(&node_key) {
                        followers.extend(last.iter().copied());
                    }
                }
            }
            let key = reactor_key_bytes(&change.reactor);
            let version = self.commit.store().version(&key).unwrap_or(0) + 1;
            let data = postcard::to_allocvec(&change.rows).unwrap_or_default();
            writes.push(Write { key, version, data });
        }
        followers.sort_unstable();
        followers.dedup();
        followers.retain(|f| *f != ctx.me);
        // Through `on_input`, so that the protocol arms its re-send timer;
        // its `Started` (or `Refused`) output names the transaction.
        self.starting = Some(InFlight { req, seq, reactors });
        let mut cfx = Effects::default();
        // The protocol applies the coordinator's own writes to its store:
        // here they only move the versions (see `CommitStore::apply`).
        self.shared
            .commit
            .coordinating
            .store(true, Ordering::Relaxed);
        self.commit.on_input(
            ctx,
            Input::Command(roost_commit::CommitCmd::Commit(Transaction {
                writes,
                followers,
            })),
            &mut cfx,
        );
        self.shared
            .commit
            .coordinating
            .store(false, Ordering::Relaxed);
        self.absorb_commit(cfx, fx);
        debug_assert!(
            self.starting.is_none(),
            "the protocol named the transaction"
        );
        self.starting = None;
    }

    fn absorb_commit(
        &mut self,
        cfx: Effects<CommitMsg, CommitOut>,
        fx: &mut Effects<ZeusMsg, ZeusOut>,
    ) {
        for out in fx.absorb(cfx, ZeusMsg::Commit) {
            match out {
                CommitOut::Committed { tx_id } => {
                    if let Some(f) = self.in_flight.remove(&tx_id) {
                        self.shared.commit.finished(f.seq, &f.reactors, true);
                        fx.output(ZeusOut::Committed { req: f.req, tx_id });
                    }
                }
                CommitOut::Unknown { tx_id } => {
                    if let Some(f) = self.in_flight.remove(&tx_id) {
                        self.shared.commit.finished(f.seq, &f.reactors, false);
                        fx.output(ZeusOut::CommitFailed {
                            req: f.req,
                            error: ReplicationError::OutcomeUnknown,
                        });
                    }
                }
                CommitOut::Started { tx_id } => {
                    if let Some(f) = self.starting.take() {
                        self.in_flight.insert(tx_id, f);
                    }
                }
                CommitOut::Refused { error } => {
                    if let Some(f) = self.starting.take() {
                        tracing::error!(%error, seq = f.seq, "a locally committed transaction was refused by the reliable commit");
                        self.shared.commit.finished(f.seq, &f.reactors, false);
                        fx.output(ZeusOut::CommitFailed {
                            req: f.req,
                            error: ReplicationError::Refused,
                        });
                    }
                }
                CommitOut::Applied { .. } | CommitOut::Recovered { .. } => {}
            }
        }
        debug_assert!(self.in_flight.len() <= MAX_COMMITS_IN_FLIGHT + 1);
    }

    fn absorb_ownership(
        ofx: Effects<OwnershipMsg<NodeReactor>, OwnershipOut<NodeReactor>>,
        fx: &mut Effects<ZeusMsg, ZeusOut>,
    ) {
        let outputs = fx.absorb(ofx, ZeusMsg::Ownership);
        fx.outputs
            .extend(outputs.into_iter().map(ZeusOut::Ownership));
    }

    fn drive_ownership(
        &mut self,
        ctx: &Context<'_>,
        input: Input<OwnershipMsg<NodeReactor>, OwnershipCmd<NodeReactor>>,
        fx: &mut Effects<ZeusMsg, ZeusOut>,
    ) {
        let mut ofx = Effects::default();
        self.ownership.on_input(ctx, input, &mut ofx);
        // A reactor frozen for a pending-commit check whose ownership
        // stayed here takes transactions again.
        let ownership = &self.ownership;
        ownership
            .store()
            .thaw_if_owned(|key| ownership.access(key) == Access::Owner);
        Self::absorb_ownership(ofx, fx);
    }

    fn drive_commit(
        &mut self,
        ctx: &Context<'_>,
        input: Input<CommitMsg, roost_commit::CommitCmd>,
        fx: &mut Effects<ZeusMsg, ZeusOut>,
    ) {
        let mut cfx = Effects::default();
        self.commit.on_input(ctx, input, &mut cfx);
        self.absorb_commit(cfx, fx);
    }
}

impl Protocol for Zeus {
    type Msg = ZeusMsg;
    type Cmd = ZeusCmd;
    type Out = ZeusOut;

    fn on_input(
        &mut self,
        ctx: &Context<'_>,
        input: Input<ZeusMsg, ZeusCmd>,
        fx: &mut Effects<ZeusMsg, ZeusOut>,
    ) {
        match input {
            Input::Message {
                from,
                msg: ZeusMsg::Ownership(msg),
            } => self.drive_ownership(ctx, Input::Message { from, msg }, fx),
            Input::Message {
                from,
                msg: ZeusMsg::Commit(msg),
            } => self.drive_commit(ctx, Input::Message { from, msg }, fx),
            Input::Timer(RETRANSMIT_TIMER) => {
                self.drive_commit(ctx, Input::Timer(RETRANSMIT_TIMER), fx)
            }
            Input::Timer(REPLICA_TIMER) => {
                // A recovery report, ours or a member's, may have been lost.
                self.recoveries
                    .on_tick(ctx, &mut |to, m| fx.send(to, ZeusMsg::Recovered(m)));
                // Reactors used only elsewhere: the holds on them end.
                let owned = |key: &ReactorKey| self.shared.owns(key);
                let yields = self.shared.contention.to_yield(ctx.now_ms, owned);
                for key in yields {
                    for &to in ctx.view.members.keys().filter(|m| **m != ctx.me) {
                        fx.send(
                            to,
                            ZeusMsg::Yield {
                                key: NodeReactor(key.clone()),
                            },
                        );
                    }
                }
                if self.shared.copies.wanted() {
                    let copies = self.shared.recovered_copies();
                    for &to in ctx.view.members.keys() {
                        if to != ctx.me && !self.shared.copies.has(to) {
                            let copies = copies.clone();
                            fx.send(
                                to,
                                ZeusMsg::Copies {
                                    copies,
                                    reply: true,
                                },
                            );
                        }
                    }
                }
                let adopt = self.replicas.on_tick(ctx, &self.ownership, fx);
                self.shared.commit.count_adoptions(adopt.len());
                for cmd in adopt {
                    self.drive_ownership(ctx, Input::Command(cmd), fx);
                }
            }
            Input::Message {
                from,
                msg: ZeusMsg::Recovered(msg),
            } => {
                let here = !self.commit.recovering();
                let taken = self
                    .recoveries
                    .on_message(ctx, from, msg, here, &mut |to, m| {
                        fx.send(to, ZeusMsg::Recovered(m))
                    });
                if let Err(refusal) = taken {
                    self.shared.commit.count_bad_recovery_report();
                    tracing::debug!(%from, ?refusal, "a recovery report refused");
                }
            }
            Input::Message {
                from,
                msg: ZeusMsg::BecomeReader { key },
            } => self.on_ask(ctx, from, key, true, fx),
            Input::Message {
                from,
                msg: ZeusMsg::Yield { key },
            } => self.shared.contention.release(&key.0, from),
            Input::Message {
                from,
                msg: ZeusMsg::Copies { copies, reply },
            } => {
                if self.shared.copies.note(from, copies) && reply {
                    let copies = self.shared.recovered_copies();
                    fx.send(
                        from,
                        ZeusMsg::Copies {
                            copies,
                            reply: false,
                        },
                    );
                }
            }
            Input::Message {
                from,
                msg: ZeusMsg::StopReading { key },
            } => self.on_ask(ctx, from, key, false, fx),
            Input::Command(ZeusCmd::SetDegree {
                req,
                reactor_type,
                degree,
            }) => {
                let result = self.set_degree(reactor_type, degree);
                fx.output(ZeusOut::Configured { req, result });
            }
            Input::Command(ZeusCmd::SetPipelineDepth { req, depth }) => {
                self.shared.commit.set_pipeline_depth(depth);
                fx.output(ZeusOut::Configured {
                    req,
                    result: Ok(()),
                });
            }
            Input::Timer(timer) => self.drive_ownership(ctx, Input::Timer(timer), fx),
            Input::ViewChange => {
                // The reliable commit first: ownership's recovery waits for
                // its (`commit_recovery_done`).
                self.drive_commit(ctx, Input::ViewChange, fx);
                self.note_recovery(ctx, fx);
                self.drive_ownership(ctx, Input::ViewChange, fx);
            }
            Input::Command(ZeusCmd::Ownership(cmd)) => {
                self.drive_ownership(ctx, Input::Command(cmd), fx)
            }
            Input::Command(ZeusCmd::Commit {
                req,
                seq,
                changes,
                members,
            }) => self.start_commit(ctx, req, seq, changes, members, fx),
        }
        self.note_recovery(ctx, fx);
        self.replicas.arm(ctx, fx);
        if let Some(durable) = self.shared.durable() {
            durable.commit_step(fx);
        }
        debug_assert!(self.in_flight.len() <= self.commit.in_flight());
    }
}

impl Served for Zeus {
    fn command_for(
        path: &str,
        query: &BTreeMap<String, String>,
        request: RequestId,
    ) -> Option<Result<ZeusCmd, String>> {
        if path == "/commit/pipeline" {
            return Some((|| {
                let text = query
                    .get("depth")
                    .ok_or("pipeline needs depth=<transactions>")?;
                let depth: usize = text
                    .parse()
                    .ok()
                    .filter(|d| (1..=MAX_COMMITS_IN_FLIGHT).contains(d))
                    .ok_or_else(|| {
                        format!("depth must be 1 to {MAX_COMMITS_IN_FLIGHT}, not {text:?}")
                    })?;
                Ok(ZeusCmd::SetPipelineDepth {
                    req: ReqId(request),
                    depth,
                })
            })());
        }
        if path == "/replication/degree" {
            return Some((|| {
                let text = query.get("degree").ok_or("degree needs degree=<copies>")?;
                let degree: usize = text
                    .parse()
                    .map_err(|_| format!("degree must be a number, not {text:?}"))?;
                if degree == 0 {
                    return Err(DegreeError::Zero(degree).to_string());
                }
                Ok(ZeusCmd::SetDegree {
                    req: ReqId(request),
                    reactor_type: query.get("type").cloned(),
                    degree,
                })
            })());
        }
        NodeOwnership::command_for(path, query, request).map(|c| c.map(ZeusCmd::Ownership))
    }

    fn request_id(cmd: &ZeusCmd) -> RequestId {
        match cmd {
            ZeusCmd::Ownership(cmd) => NodeOwnership::request_id(cmd),
            ZeusCmd::Commit { req, .. }
            | ZeusCmd::SetDegree { req, .. }
            | ZeusCmd::SetPipelineDepth { req, .. } => req.0,
        }
    }

    fn answers(out: &ZeusOut) -> Option<RequestId> {
        match out {
            ZeusOut::Ownership(out) => NodeOwnership::answers(out),
            ZeusOut::Committed { req, .. }
            | ZeusOut::CommitFailed { req, .. }
            | ZeusOut::Configured { req, .. } => Some(req.0),
        }
    }

    fn out_json(out: &ZeusOut) -> Value {
        match out {
            ZeusOut::Ownership(out) => NodeOwnership::out_json(out),
            ZeusOut::Committed { req, tx_id } => {
                json!({"committed": {"req": req.0, "tx_id": tx_id.to_string()}})
            }
            ZeusOut::CommitFailed { req, error } => {
                json!({"commit_failed": {"req": req.0, "error": error.to_string()}})
            }
            ZeusOut::Configured { req, result } => match result {
                Ok(()) => json!({"configured": {"req": req.0}}),
                Err(error) => json!({"error": error.to_string()}),
            },
        }
    }
}

/// A way into the node's ownership protocol from any thread (tests, the
/// benchmark, the placement).
#[derive(Clone)]
pub struct OwnershipHandle(pub(crate) ProtocolHandle<Zeus>);

impl OwnershipHandle {
    pub fn next_request_id(&self) -> RequestId {
        self.0.next_request_id()
    }

    /// The node's status report.
    pub async fn status(&self) -> Result<roost_cluster::runtime::StatusReport, RequestError> {
        self.0.status().await
    }

    /// Sends an ownership command and waits for the output that answers it.
    pub async fn request(
        &self,
        cmd: OwnershipCmd<NodeReactor>,
    ) -> Result<OwnershipOut<NodeReactor>, RequestError> {
        match self.0.request(ZeusCmd::Ownership(cmd)).await? {
            ZeusOut::Ownership(out) => Ok(out),
            other => {
                tracing::error!(?other, "an ownership request answered by a commit output");
                Err(RequestError::Stopped)
            }
        }
    }
}

/// The cluster-wide key bytes of a reactor in R-INVs (`type/name`).
pub(crate) fn reactor_key_bytes(key: &ReactorKey) -> Vec<u8> {
    key.to_string().into_bytes()
}

pub(crate) fn reactor_of(bytes: &[u8]) -> Option<ReactorKey> {
    let text = std::str::from_utf8(bytes).ok()?;
    text.parse::<NodeReactor>().ok().map(|r| r.0)
}

/// The reliable commit's object store on a node: each reactor's
/// `t_version` and `t_state`, and a follower's copies, which are the
/// database's replicas of the reactors this node reads, kept current by
/// R-INVs ([`Database::apply_to_replica`]: the rows change and the replica
/// turns unreadable in one step) and readable again on R-VAL. The owner's
/// rows are in the database already: for it, `apply` only moves the
/// version.
pub struct CommitStore {
    keyspace: Keyspace,
    shared: Arc<Shared>,
}

impl CommitStore {
    pub(crate) fn new(keyspace: Keyspace, shared: Arc<Shared>) -> Self {
        CommitStore { keyspace, shared }
    }

    fn db(&self) -> &Database {
        self.keyspace.database()
    }
}

impl CommitObjectStore for CommitStore {
    fn version(&self, key: &[u8]) -> Option<u64> {
        reactor_of(key).and_then(|r| self.shared.commit.t_version(&r))
    }

    fn apply(&mut self, key: &[u8], version: u64, data: &[u8]) {
        let Some(reactor) = reactor_of(key) else {
            self.shared.commit.count_bad_apply();
            tracing::error!("an R-INV write for a key that names no reactor");
            return;
        };
        self.shared
            .commit
            .set_version(&reactor, version, ObjectState::Invalid);
        let coordinating = self.shared.commit.coordinating.load(Ordering::Relaxed);
        let coordinator = coordinating || self.shared.owns(&reactor);
        let durable = self.shared.durable();
        if coordinator && durable.is_none() {
            // The coordinator: its database holds the rows already, and
            // later local commits over them (see below). Nothing to decode.
            return;
        }
        let rows: Vec<RowChange> = match postcard::from_bytes(data) {
            Ok(rows) => rows,
            Err(error) => {
                self.shared.commit.count_bad_apply();
                tracing::error!(%reactor, %error, "R-INV rows that do not decode");
                return;
            }
        };
        let replica = matches!(self.db().holding(&reactor), Ok(Holding::Replica { .. }));
        if let (Some(durable), true) = (durable, coordinator || replica) {
            // Owner or follower, what this node applied of the commit, in
            // the driver's order (a follower without a copy logs these rows
            // with the copy, at its install). A follower's are synced before
            // the step's R-ACK leaves (`Durable::commit_step`); the
            // coordinator's own before its client is answered
            // (`Durable::own_writes_durable`, off the driver).
            durable.delta(&reactor, version, &rows, coordinating);
        }
        if coordinator {
            // The coordinator: its database holds the rows already, and
            // later local commits over them. Even if it no longer owns
            // the reactor (a refused hand-over left it Invalid, demoted,
            // while this commit was pending), applying these rows again
            // would overwrite those later commits (the 3-process ownership
            // test lost increments that way).
            return;
        }
        if !replica {
            // No copy here yet: an owner that made this node a reader sends
            // its next writes at once, and they can overtake the copy the
            // add-reader ships (from the owner's snapshot, older). Kept,
            // and applied over the copy when it arrives; without them a
            // reader acked writes its copy lacks, and lost them once it
            // became the owner (the 3-process ownership test).
            self.shared.commit.count_without_copy();
            self.shared.keep_early_rows(&reactor, version, rows);
            return;
        }
        // Into the replica off the driver's path (`crate::applier`): from
        // here it is unreadable until its rows are in and its R-VAL came.
        self.shared
            .applier
            .enqueue(self.db(), &self.shared, &reactor, rows);
        self.shared.commit.count_applied();
        if self.shared.reads_invalid() {
            refresh_replica(self.db(), &self.shared, &reactor);
        }
    }

    fn validate(&mut self, key: &[u8], version: u64) -> bool {
        let Some(reactor) = reactor_of(key) else {
            return false;
        };
        let validated = self.shared.commit.validate(&reactor, version);
        if validated {
            refresh_replica(self.db(), &self.shared, &reactor);
        }
        validated
    }

    fn state(&self, key: &[u8]) -> Option<ObjectState> {
        reactor_of(key).and_then(|r| self.shared.commit.state(&r))
    }

    fn clear(&mut self) {
        // This node left the view: the ownership protocol drops its copies;
        // the versions of reactors it does not own go with them, and no
        // replica is read meanwhile.
        let versioned: Vec<ReactorKey> = self.shared.commit.versioned();
        for reactor in versioned {
            if !self.shared.owns(&reactor) {
                self.shared.commit.forget(&reactor);
                self.shared.applier.hide(self.db(), &reactor);
            }
        }
    }
}

/// What the database's executors, the forwarder and the driver share of
/// the reliable commit.
#[derive(Default)]
pub(crate) struct CommitShared {
    /// `t_version` and `t_state` per reactor this node owns or follows.
    versions: Mutex<HashMap<ReactorKey, (u64, ObjectState)>>,
    /// Transactions numbered and not yet answered per reactor (ownership
    /// NACKs while there is one).
    pending: Mutex<HashMap<ReactorKey, u32>>,
    intake: Mutex<Intake>,
    intake_ready: tokio::sync::Notify,
    /// A released transaction was answered (room in the pipeline).
    room: tokio::sync::Notify,
    /// Transactions in reliable commit at once, at most (0: the default,
    /// [`MAX_COMMITS_IN_FLIGHT`]).
    pipeline_depth: std::sync::atomic::AtomicUsize,
    /// Every intake number up to this one is reliably committed or
    /// aborted (the read barrier's fast path).
    durable_upto: AtomicU64,
    recovering: AtomicBool,
    /// The driver is starting one of this node's own transactions (set
    /// and cleared around it, on the driver's thread).
    coordinating: AtomicBool,
    counters: CommitCounters,
}

#[derive(Default)]
struct CommitCounters {
    committed: AtomicU64,
    failed: AtomicU64,
    aborted_numbers: AtomicU64,
    read_waits: AtomicU64,
    applied: AtomicU64,
    bad_applies: AtomicU64,
    exported_first: AtomicU64,
    bad_asks: AtomicU64,
    /// Ownerless reactors this node asked to own (the replica manager).
    adoptions: AtomicU64,
    bad_recovery_reports: AtomicU64,
    without_copy: AtomicU64,
}

/// Orders the numbered commits: they arrive from every executor in any
/// order and leave in number order.
#[derive(Default)]
pub(crate) struct Intake {
    /// The next number to release.
    next: u64,
    arrived: BTreeMap<u64, Option<Arrived>>,
    /// Groups released to the driver and not answered yet, in order: their
    /// first and last numbers.
    submitted: VecDeque<(u64, u64)>,
    /// Every number up to this one was released.
    released_upto: u64,
    /// Read-only transactions waiting for `durable_upto` to reach a number.
    barriers: BTreeMap<u64, Vec<tokio::sync::oneshot::Sender<()>>>,
}

pub(crate) struct Arrived {
    changes: Vec<ReactorChanges>,
    /// Reactors the transaction read without writing them: pending like
    /// the written ones (their ownership must not move either).
    read: Vec<ReactorKey>,
    reply: tokio::sync::oneshot::Sender<Result<(), ReplicationError>>,
}

impl CommitShared {
    pub(crate) fn t_version(&self, reactor: &ReactorKey) -> Option<u64> {
        self.versions
            .lock()
            .expect("versions lock")
            .get(reactor)
            .map(|v| v.0)
    }

    pub(crate) fn state(&self, reactor: &ReactorKey) -> Option<ObjectState> {
        self.versions
            .lock()
            .expect("versions lock")
            .get(reactor)
            .map(|v| v.1)
    }

    fn set_version(&self, reactor: &ReactorKey, version: u64, state: ObjectState) {
        let mut versions = self.versions.lock().expect("versions lock");
        let entry = versions
            .entry(reactor.clone())
            .or_insert((0, ObjectState::Valid));
        debug_assert!(entry.0 < version, "versions only grow");
        *entry = (version, state);
    }

    fn validate(&self, reactor: &ReactorKey, version: u64) -> bool {
        let mut versions = self.versions.lock().expect("versions lock");
        match versions.get_mut(reactor) {
            Some(v) if v.0 == version => {
                v.1 = ObjectState::Valid;
                true
            }
            _ => false,
        }
    }

    fn versioned(&self) -> Vec<ReactorKey> {
        self.versions
            .lock()
            .expect("versions lock")
            .keys()
            .cloned()
            .collect()
    }

    /// A copy of the reactor arrived with an ownership grant: its version
    /// is the one the copy carries (valid: ownership ships only those).
    pub(crate) fn installed(&self, reactor: &ReactorKey, t_version: u64) {
        let mut versions = self.versions.lock().expect("versions lock");
        let entry = versions
            .entry(reactor.clone())
            .or_insert((0, ObjectState::Valid));
        if t_version >= entry.0 {
            *entry = (t_version, ObjectState::Valid);
        }
    }

    pub(crate) fn forget(&self, reactor: &ReactorKey) {
        self.versions.lock().expect("versions lock").remove(reactor);
    }

    pub(crate) fn pending_any(&self, reactor: &ReactorKey) -> bool {
        self.pending
            .lock()
            .expect("pending lock")
            .get(reactor)
            .is_some_and(|p| *p > 0)
    }

    /// Waits (briefly, spinning) until every number up to `upto` arrived
    /// at the intake; `false` if some did not in time.
    pub(crate) fn wait_arrived(&self, upto: u64) -> bool {
        for spin in 0..ARRIVAL_SPINS {
            {
                let intake = self.intake.lock().expect("intake lock");
                let next = intake.next.max(1);
                if next > upto
                    || intake.arrived.range(next..=upto).count() as u64 == upto - next + 1
                {
                    return true;
                }
            }
            if spin < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        false
    }

    pub(crate) fn recovering(&self) -> bool {
        self.recovering.load(Ordering::Relaxed)
    }

    fn set_recovering(&self, recovering: bool) {
        self.recovering.store(recovering, Ordering::Relaxed);
    }

    pub(crate) fn count_applied(&self) {
        self.counters.applied.fetch_add(1, Ordering::Relaxed);
    }

    fn count_without_copy(&self) {
        self.counters.without_copy.fetch_add(1, Ordering::Relaxed);
    }

    fn count_bad_recovery_report(&self) {
        self.counters
            .bad_recovery_reports
            .fetch_add(1, Ordering::Relaxed);
    }

    fn count_bad_ask(&self) {
        self.counters.bad_asks.fetch_add(1, Ordering::Relaxed);
    }

    fn count_adoptions(&self, reactors: usize) {
        self.counters
            .adoptions
            .fetch_add(reactors as u64, Ordering::Relaxed);
    }

    fn count_exported_first(&self, reactors: usize) {
        self.counters
            .exported_first
            .fetch_add(reactors as u64, Ordering::Relaxed);
    }

    pub(crate) fn count_bad_apply(&self) {
        self.counters.bad_applies.fetch_add(1, Ordering::Relaxed);
    }

    /// A numbered commit arrived from an executor (any order).
    pub(crate) fn arrive(&self, seq: u64, arrived: Option<Arrived>) {
        if let Some(a) = &arrived {
            let mut pending = self.pending.lock().expect("pending lock");
            for reactor in a.changes.iter().map(|c| &c.reactor).chain(&a.read) {
                *pending.entry(reactor.clone()).or_insert(0) += 1;
            }
        } else {
            self.counters
                .aborted_numbers
                .fetch_add(1, Ordering::Relaxed);
        }
        {
            let mut intake = self.intake.lock().expect("intake lock");
            debug_assert!(seq > intake.released_upto, "each number arrives once");
            let fresh = intake.arrived.insert(seq, arrived).is_none();
            debug_assert!(fresh, "each number arrives once");
        }
        self.intake_ready.notify_one();
    }

    /// The numbers ready to leave, in order (stops at the first gap).
    fn take_ready(&self) -> Vec<(u64, Option<Arrived>)> {
        let mut intake = self.intake.lock().expect("intake lock");
        if intake.next == 0 {
            intake.next = 1;
        }
        let mut ready = Vec::new();
        let mut next = intake.next;
        while let Some(entry) = intake.arrived.first_entry() {
            if *entry.key() != next {
                debug_assert!(*entry.key() > next);
                break;
            }
            let (seq, arrived) = entry.remove_entry();
            next = seq + 1;
            ready.push((seq, arrived));
        }
        intake.next = next;
        ready
    }

    /// Numbers `first..=last` leave the intake: aborted ones only
    /// (`submitted == false`), or a group handed to the driver.
    fn released(&self, first: u64, last: u64, submitted: bool) {
        let mut intake = self.intake.lock().expect("intake lock");
        debug_assert!(first == intake.released_upto + 1 && last >= first);
        intake.released_upto = last;
        if submitted {
            intake.submitted.push_back((first, last));
        }
        self.advance(&mut intake);
    }

    /// The driver answered `seq` (committed, failed, or refused).
    fn finished(&self, seq: u64, reactors: &[ReactorKey], committed: bool) {
        {
            let mut pending = self.pending.lock().expect("pending lock");
            for r in reactors {
                if let Some(p) = pending.get_mut(r) {
                    debug_assert!(*p > 0);
                    *p = p.saturating_sub(1);
                    if *p == 0 {
                        pending.remove(r);
                    }
                }
            }
        }
        if committed {
            self.counters.committed.fetch_add(1, Ordering::Relaxed);
        } else {
            self.counters.failed.fetch_add(1, Ordering::Relaxed);
        }
        let mut intake = self.intake.lock().expect("intake lock");
        // The driver answers in pipeline order; a command the runtime
        // turned away (busy) is taken out wherever it is.
        match intake.submitted.iter().position(|s| s.1 == seq) {
            Some(0) => {
                intake.submitted.pop_front();
            }
            Some(at) => {
                intake.submitted.remove(at);
            }
            None => debug_assert!(false, "number {seq} answered twice"),
        }
        self.advance(&mut intake);
        drop(intake);
        self.room.notify_one();
    }

    fn set_pipeline_depth(&self, depth: usize) {
        debug_assert!((1..=MAX_COMMITS_IN_FLIGHT).contains(&depth));
        self.pipeline_depth.store(depth, Ordering::Relaxed);
        self.room.notify_one();
    }

    fn pipeline_depth(&self) -> usize {
        match self.pipeline_depth.load(Ordering::Relaxed) {
            0 => MAX_COMMITS_IN_FLIGHT,
            depth => depth.min(MAX_COMMITS_IN_FLIGHT),
        }
    }

    /// Released to the driver and not answered yet.
    fn in_flight(&self) -> usize {
        self.intake.lock().expect("intake lock").submitted.len()
    }

    fn advance(&self, intake: &mut Intake) {
        let durable = intake
            .submitted
            .front()
            .map_or(intake.released_upto, |s| s.0 - 1);
        self.durable_upto.store(durable, Ordering::Release);
        while let Some(entry) = intake.barriers.first_entry() {
            if *entry.key() > durable {
                break;
            }
            for waiter in entry.remove() {
                let _ = waiter.send(());
            }
        }
    }

    /// What a read-only transaction that validated after number `seq_upto`
    /// was handed out waits for: `None` when it is durable already.
    pub(crate) fn read_barrier(&self, seq_upto: u64) -> Option<tokio::sync::oneshot::Receiver<()>> {
        if self.durable_upto.load(Ordering::Acquire) >= seq_upto {
            return None;
        }
        let mut intake = self.intake.lock().expect("intake lock");
        if self.durable_upto.load(Ordering::Acquire) >= seq_upto {
            return None;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        intake.barriers.entry(seq_upto).or_default().push(tx);
        self.counters.read_waits.fetch_add(1, Ordering::Relaxed);
        Some(rx)
    }

    pub(crate) fn prometheus(&self) -> String {
        let c = &self.counters;
        let mut text = String::new();
        for (name, help, value) in [
            (
                "roost_commit_committed_total",
                "Write transactions of this node reliably committed (or left unknown with the view).",
                c.committed.load(Ordering::Relaxed),
            ),
            (
                "roost_commit_refused_total",
                "Locally committed transactions the reliable commit refused.",
                c.failed.load(Ordering::Relaxed),
            ),
            (
                "roost_commit_aborted_numbers_total",
                "Intake numbers of write transactions that failed validation.",
                c.aborted_numbers.load(Ordering::Relaxed),
            ),
            (
                "roost_commit_read_waits_total",
                "Read-only transactions that waited for earlier writes' reliable commit.",
                c.read_waits.load(Ordering::Relaxed),
            ),
            (
                "roost_commit_follower_applies_total",
                "Reactor writes a follower acknowledged into its copies (queued for the replica; see roost_commit_apply_batches_total).",
                c.applied.load(Ordering::Relaxed),
            ),
            (
                "roost_commit_owner_changed_first_total",
                "Reactor writes whose reactor changed owner before their reliable commit started (never expected).",
                c.exported_first.load(Ordering::Relaxed),
            ),
            (
                "roost_commit_follower_without_copy_total",
                "R-INV writes for reactors this node holds no copy of (its owner's metadata was behind).",
                c.without_copy.load(Ordering::Relaxed),
            ),
            (
                "roost_commit_bad_recovery_reports_total",
                "Recovery reports dropped: of another epoch, or malformed.",
                c.bad_recovery_reports.load(Ordering::Relaxed),
            ),
            (
                "roost_replication_bad_asks_total",
                "Replica asks dropped: not from the reactor's owner.",
                c.bad_asks.load(Ordering::Relaxed),
            ),
            (
                "roost_replication_adoptions_total",
                "Reactors left without a live owner that this node, their first live reader, asked to own.",
                c.adoptions.load(Ordering::Relaxed),
            ),
            (
                "roost_commit_bad_applies_total",
                "R-INV writes a follower could not apply (logged).",
                c.bad_applies.load(Ordering::Relaxed),
            ),
        ] {
            crate::prom::counter(&mut text, name, help, value);
        }
        text
    }
}

/// What a write transaction's caller waits for: its reliable commit.
pub(crate) fn replication_of(
    shared: &Arc<Shared>,
    seq: u64,
    changes: Vec<ReactorChanges>,
    read: Vec<ReactorKey>,
) -> roost_reactor::Replication {
    let (arrived, rx) = Arrived::new(changes, read);
    shared.commit.arrive(seq, Some(arrived));
    Box::pin(async move { rx.await.map_err(|_| ReplicationError::Shutdown)? })
}

/// What a read-only transaction's caller waits for (`None`: nothing).
pub(crate) fn read_barrier_of(
    shared: &Shared,
    seq_upto: u64,
) -> Option<roost_reactor::Replication> {
    let rx = shared.commit.read_barrier(seq_upto)?;
    Some(Box::pin(async move {
        rx.await.map_err(|_| ReplicationError::Shutdown)
    }))
}

impl Arrived {
    pub(crate) fn new(
        changes: Vec<ReactorChanges>,
        read: Vec<ReactorKey>,
    ) -> (
        Arrived,
        tokio::sync::oneshot::Receiver<Result<(), ReplicationError>>,
    ) {
        let (reply, rx) = tokio::sync::oneshot::channel();
        (
            Arrived {
                changes,
                read,
                reply,
            },
            rx,
        )
    }
}

/// A group of consecutive transactions committed reliably as one: the
/// followers apply it at once, so they only ever hold a prefix of the
/// node's serial order (the seed's pipelining, with many transactions per
/// R-INV). A pipeline depth of 1 (the benchmark's baseline) forms no groups.
struct Group {
    first: u64,
    last: u64,
    changes: BTreeMap<ReactorKey, Vec<RowChange>>,
    /// Every member's reactors (a reactor once per member that wrote or
    /// read it): what the pending counts give back when answered.
    reactors: Vec<ReactorKey>,
    replies: Vec<tokio::sync::oneshot::Sender<Result<(), ReplicationError>>>,
}

impl Group {
    fn new(first: u64) -> Group {
        Group {
            first,
            last: first - 1,
            changes: BTreeMap::new(),
            reactors: Vec::new(),
            replies: Vec::new(),
        }
    }

    fn add(&mut self, seq: u64, arrived: Option<Arrived>) {
        debug_assert_eq!(seq, self.last + 1, "consecutive numbers");
        self.last = seq;
        let Some(Arrived {
            changes,
            read,
            reply,
        }) = arrived
        else {
            return;
        };
        self.reactors.extend(read);
        for change in changes {
            self.reactors.push(change.reactor.clone());
            self.changes
                .entry(change.reactor)
                .or_default()
                .extend(change.rows);
        }
        self.replies.push(reply);
    }

    /// The merged changes: per reactor, the last change of each row.
    fn changes(&mut self) -> Vec<ReactorChanges> {
        std::mem::take(&mut self.changes)
            .into_iter()
            .map(|(reactor, rows)| ReactorChanges {
                reactor,
                rows: crate::applier::last_change_per_row(rows),
            })
            .collect()
    }
}

/// Transactions one group holds at most.
pub const MAX_GROUP: usize = 256;

/// Moves released transactions from the intake to the driver, in number
/// order and in groups, without waiting for their answers (pipelining).
/// Runs on the node's runtime until the driver stops.
pub(crate) async fn forward_intake(shared: Arc<Shared>, handle: ProtocolHandle<Zeus>) {
    let mut ready: VecDeque<(u64, Option<Arrived>)> = VecDeque::new();
    loop {
        if ready.is_empty() {
            ready.extend(shared.commit.take_ready());
        }
        if ready.is_empty() {
            shared.commit.intake_ready.notified().await;
            continue;
        }
        while shared.commit.in_flight() >= shared.commit.pipeline_depth() {
            shared.commit.room.notified().await;
        }
        // What has arrived since joins the group too.
        ready.extend(shared.commit.take_ready());
        let max_members = if shared.commit.pipeline_depth() == 1 {
            1
        } else {
            MAX_GROUP
        };
        let mut group = Group::new(ready.front().map_or(1, |r| r.0));
        while let Some((seq, arrived)) = ready.pop_front() {
            let member = arrived.is_some();
            if member && group.replies.len() == max_members {
                ready.push_front((seq, arrived));
                break;
            }
            group.add(seq, arrived);
        }
        if group.replies.is_empty() {
            shared.commit.released(group.first, group.last, false);
            continue;
        }
        let (first, last) = (group.first, group.last);
        let changes = group.changes();
        let reactors = group.reactors;
        shared.commit.released(first, last, true);
        let req = ReqId(handle.next_request_id());
        let submitted = handle
            .submit(ZeusCmd::Commit {
                req,
                seq: last,
                changes,
                members: reactors.clone(),
            })
            .await;
        let replies = group.replies;
        let shared = Arc::clone(&shared);
        let answer = async move {
            let outcome = match submitted {
                Ok(answer) => answer.wait().await,
                Err(error) => Err(error),
            };
            let result = match outcome {
                // Reliably committed: answered once this node's own log has
                // it too (the followers synced theirs before their R-ACKs).
                Ok(ZeusOut::Committed { .. }) => match shared.durable() {
                    Some(durable) => match durable.own_writes_durable() {
                        Some(wait) => wait.await,
                        None => Ok(()),
                    },
                    None => Ok(()),
                },
                Ok(ZeusOut::CommitFailed { error, .. }) => Err(error),
                Ok(other) => {
                    tracing::error!(?other, "a commit answered by another output");
                    Err(ReplicationError::OutcomeUnknown)
                }
                Err(RequestError::Busy) => {
                    // Turned away before the protocol saw it: nothing sent.
                    shared.commit.finished(last, &reactors, false);
                    Err(ReplicationError::Refused)
                }
                Err(RequestError::Stopped) => Err(ReplicationError::Shutdown),
            };
            for reply in replies {
                let _ = reply.send(result);
            }
        };
        tokio::spawn(answer);
    }
}

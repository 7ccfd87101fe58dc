//! The ownership state machine: one per node, every role in one type (a node
//! is a requester for some objects, a directory replica, driver or arbiter
//! for others, an owner or reader of yet others). See the crate
//! documentation for the protocol.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::hash::{Hash, Hasher};

use roost_cluster::{Context, Effects, Incarnation, Input, NodeId, Protocol, TimerId};
use serde::{Deserialize, Serialize};

use crate::config::{NewError, OwnershipBugs, OwnershipConfig};
use crate::key::{directory, mix64, ObjectKey};
use crate::meta::{Access, ArbKind, OReplicas, OState, OTs, RTs, ReqId, RequestKind};
use crate::msg::{Ack, Body, Current, Inv, Nack, NackReason, OwnershipMsg, Req, Resp, Sync, Val};
use crate::stats::{DropReason, Stats};
use crate::store::{ObjectData, ObjectStore};
use crate::WIRE_VERSION;

/// The protocol's only timer: it fires at the earliest deadline (a backoff
/// ending, a retransmission, a stuck arbitration's replay, a timeout).
pub const TICK_TIMER: TimerId = 0x6f77_6e65_7273_6870;

/// Messages to self are handled in the same call. Each handler sends a
/// bounded number of them, so a call handles at most this many plus
/// [`LOOPBACK_PER_ITEM`] per message queued when draining starts and per
/// request and arbitration in flight (one tick may touch all of those);
/// more is a cycle, a bug.
const MAX_LOOPBACK: usize = 1_000;
const LOOPBACK_PER_ITEM: usize = 16;

/// A local caller's command.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OwnershipCmd<K> {
    /// Acquire an ownership level (or give up a reader copy) for `key`.
    Acquire {
        key: K,
        req: ReqId,
        kind: RequestKind,
    },
    /// Register a new object in the directory with this node as its owner
    /// and `data` as its contents.
    Create {
        key: K,
        req: ReqId,
        data: ObjectData,
    },
    /// Report what this node owns and holds blocked (the admin endpoint's
    /// and the tests' view of one node; changes nothing).
    Inspect { req: ReqId },
    /// Report one object's metadata and this node's access to it.
    Describe { key: K, req: ReqId },
}

/// The most keys an [`Inspection`] lists per kind (the counts are exact).
pub const INSPECT_MAX_KEYS: usize = 10_000;

/// One node's objects as [`OwnershipCmd::Inspect`] reports them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Inspection<K> {
    /// Objects this node is the valid owner of (the first
    /// [`INSPECT_MAX_KEYS`], in key order) and how many there are.
    pub owned: Vec<K>,
    pub owned_total: usize,
    /// Objects with an arbitration pending here (`Invalid` or `Drive`).
    pub blocked: Vec<K>,
    pub blocked_total: usize,
    /// Objects with metadata here, and requests in flight from here.
    pub objects: usize,
    pub pending_requests: usize,
    /// Recovery after the last view change is still running.
    pub recovering: bool,
}

/// What the protocol tells its local callers.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OwnershipOut<K> {
    /// The request took effect here (the requester applied it): the
    /// transaction that waited for it may resume.
    Acquired {
        key: K,
        req: ReqId,
        kind: RequestKind,
        o_ts: OTs,
    },
    /// The request did not take effect and will not be retried.
    Failed {
        key: K,
        req: ReqId,
        reason: FailReason,
    },
    /// An attempt whose request was already answered (failed or timed out)
    /// won after all; it was applied, since its arbiters wait for it.
    LateWin {
        key: K,
        kind: RequestKind,
        o_ts: OTs,
    },
    /// The answer to [`OwnershipCmd::Inspect`].
    Inspected { req: ReqId, report: Inspection<K> },
    /// The answer to [`OwnershipCmd::Describe`] (`meta: None`: no metadata
    /// here).
    Described {
        key: K,
        req: ReqId,
        meta: Option<Meta>,
        access: Access,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum FailReason {
    /// This node holds no valid lease (or is not a member).
    NotServing,
    /// A request for this object is already in flight here.
    Busy,
    /// `max_pending_requests` reached.
    TooManyPending,
    /// `max_objects` reached: no room for this object's metadata.
    TooManyObjects,
    /// No directory replica of the object is live.
    NoDirectory,
    /// The owner cannot stop being a reader (it must hand ownership over).
    IsOwner,
    /// The object exists (a create).
    AlreadyExists,
    /// Create data over `max_data_bytes`.
    Oversized,
    /// The last NACK, when it is permanent or the attempts ran out.
    Nacked(NackReason),
    /// `request_timeout_ms` passed.
    TimedOut,
}

/// An object's ownership metadata as this node sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Meta {
    pub o_ts: OTs,
    pub o_state: OState,
    pub o_replicas: OReplicas,
    /// The attempt the metadata's `o_ts` arbitrated.
    pub r_ts: RTs,
}

/// The arbitration an arbiter accepted and waits to see applied.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Arb {
    r_type: ArbKind,
    driver: NodeId,
    ackers: BTreeSet<NodeId>,
    data_from: Option<NodeId>,
    ack_to: NodeId,
    create: bool,
    /// This node (the owner) NACKed it: a pending commit.
    refused: bool,
    /// This node replays it (arb-replay: the ACKs come to it).
    replaying: bool,
    /// Its requester left the view or restarted since issuing it: finished
    /// without it (the new incarnation gets no RESP for it).
    requester_gone: bool,
    /// A replay that proceeds without the rows (no live source, or the
    /// source reader has a pending commit): the requester decides with the
    /// RESP (apply if it already has, else refuse).
    no_data: bool,
    /// When it was accepted or last replayed (the stuck timer).
    since_ms: u64,
    /// Set while this node collects the ACKs (it replays the arbitration,
    /// or drives a NOOP).
    collect: Option<Collect>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
struct Collect {
    got: BTreeSet<NodeId>,
    data: Option<ObjectData>,
    /// An arbiter answered that it applied the arbitration: it completed,
    /// and is finished here without a RESP once every directory replica
    /// among the ackers answered.
    completed: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Entry {
    o_ts: OTs,
    o_state: OState,
    o_replicas: OReplicas,
    /// `r_ts` of the arbitration at `o_ts` (kept after its VAL: an equal
    /// `o_ts` with another request is forged).
    last_r_ts: RTs,
    arb: Option<Arb>,
    /// Highest `r_ts.version` arbitrated per requester: a REQ at or below
    /// it is not processed again. At most one entry per configured node.
    seen: BTreeMap<NodeId, u64>,
    /// The access level last reported to the store.
    reported: Access,
    /// As a data-source reader: the last arbitration this node answered and
    /// whether it refused (a pending commit). It repeats that answer for the
    /// same `o_ts` (a refusal then proves the arbitration cannot complete,
    /// and an ACK is never followed by a refusal a driver could mistake for
    /// one), and ignores older arbitrations.
    source_said: Option<(OTs, bool)>,
    /// As requester: a replayed win this node refused; it never applies it.
    refused_win: Option<(OTs, RTs)>,
}

impl Entry {
    fn fresh() -> Entry {
        Entry {
            o_ts: OTs::ZERO,
            o_state: OState::Valid,
            o_replicas: OReplicas::default(),
            last_r_ts: RTs::default(),
            arb: None,
            seen: BTreeMap::new(),
            reported: Access::None,
            source_said: None,
            refused_win: None,
        }
    }

    fn blocked(&self) -> bool {
        self.arb.is_some()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Attempt {
    r_ts: RTs,
    driver: NodeId,
    sent_ms: u64,
    /// What the first ACK said; every later ACK must agree.
    expect: Option<Expect>,
    got: BTreeSet<NodeId>,
    data: Option<ObjectData>,
}

impl Attempt {
    /// Adds `from`'s ACK to this attempt's: every ACK must name `from` among
    /// its ackers and agree with the first; exactly the data source's
    /// carries the rows. `Ok(Some(expect))` once every acker has answered.
    fn collect(&mut self, from: NodeId, ack: Ack) -> Result<Option<Expect>, DropReason> {
        debug_assert_eq!(self.r_ts, ack.r_ts);
        if !ack.ackers.contains(&from) {
            return Err(DropReason::UnexpectedAck);
        }
        let said = Expect {
            o_ts: ack.o_ts,
            r_type: ack.r_type,
            o_replicas: ack.o_replicas,
            ackers: ack.ackers,
            data_from: ack.data_from,
        };
        match &self.expect {
            None => self.expect = Some(said),
            Some(expect) if *expect == said => {}
            Some(_) => return Err(DropReason::ConflictingOTs),
        }
        let expect = self.expect.as_ref().expect("just set");
        match (&ack.data, expect.data_from == Some(from)) {
            (Some(_), false) => return Err(DropReason::UnexpectedData),
            (None, true) => return Err(DropReason::MissingData),
            _ => {}
        }
        if !self.got.insert(from) {
            return Err(DropReason::Duplicate);
        }
        if ack.data.is_some() {
            self.data = ack.data;
        }
        if self.got != expect.ackers {
            debug_assert!(self.got.is_subset(&expect.ackers));
            return Ok(None);
        }
        Ok(Some(expect.clone()))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Expect {
    o_ts: OTs,
    r_type: ArbKind,
    o_replicas: OReplicas,
    ackers: BTreeSet<NodeId>,
    data_from: Option<NodeId>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    Backoff { until_ms: u64 },
    Requesting(Attempt),
}

/// A request this node is the requester of.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Pending {
    req: ReqId,
    kind: RequestKind,
    create: Option<ObjectData>,
    /// Every attempt's `r_ts`, oldest first (a win of any of them answers
    /// the request). At most `max_attempts`.
    attempts: Vec<RTs>,
    phase: Phase,
    started_ms: u64,
    last_nack: Option<NackReason>,
    /// Directory replicas that answered `UnknownObject` (a restarted one
    /// forgot the object): the next attempt asks another.
    unknown_at: BTreeSet<NodeId>,
}

/// A seeded generator for backoff jitter (SplitMix64): deterministic per
/// node, never the OS's randomness.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Jitter(u64);

impl Jitter {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.0)
    }

    fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 {
            0
        } else {
            self.next() % bound
        }
    }
}

/// The Zeus ownership protocol at one node, generic over the object key and
/// the store the object data lives in.
#[derive(Debug, Clone)]
pub struct Ownership<K: ObjectKey, S> {
    me: NodeId,
    config: OwnershipConfig,
    bugs: OwnershipBugs,
    store: S,
    entries: BTreeMap<K, Entry>,
    requests: BTreeMap<K, Pending>,
    /// Fast-path ACKs for attempts of ours that are not the current one of
    /// a request (a late REQ driven after we moved on): collected, so that
    /// such a win is applied (a late win) and its arbiters released. At most
    /// `max_pending_requests`; emptied by a view change.
    stray: BTreeMap<(K, RTs), Attempt>,
    /// Keys whose entry holds an arbitration (`Invalid` or `Drive`).
    blocked: BTreeSet<K>,
    /// Keys replayed after the last view change and not finished: drivers
    /// NACK new requests (`Recovering`) until it is empty.
    recovery: BTreeSet<K>,
    /// Highest `r_ts.version` this node issued.
    last_r_ts: u64,
    /// The members (and incarnations) of the last view: a node whose
    /// incarnation changed restarted, its memory gone, even if the new view
    /// admits the new incarnation in the same step.
    members: BTreeMap<NodeId, Incarnation>,
    /// The epoch of that view. A node may install views with gaps (it was
    /// cut off, or not a member meanwhile): an incarnation change it notes
    /// happened in some view after this one, not necessarily in the one
    /// that shows it.
    members_epoch: u64,
    /// The last view change excluded this node: it dropped everything it
    /// held (until a view admits it again).
    left: bool,
    /// Per node, the epoch since which its current incarnation counts (it
    /// left the view, or restarted, in the view change to that epoch): its
    /// attempts from before are a dead requester's. At most one per
    /// configured node.
    gone_since: BTreeMap<NodeId, u64>,
    /// The lowest attempt version this incarnation may have issued: wins of
    /// lower ones are a previous incarnation's.
    r_ts_base: Option<u64>,
    /// The highest `o_ts` version this node bumped to as a driver: its next
    /// bump goes above it, so that an `o_ts` it drove is never reused for
    /// another arbitration of the object, even once it forgot the entry
    /// (a refused create: `forget_refused_create`).
    driven_floor: u64,
    jitter: Jitter,
    /// When the tick timer is set to fire (`None`: not set).
    armed_at: Option<u64>,
    /// SYNCs sent and not answered yet, by object and replica: the `o_ts`
    /// taught and when it was last sent. Re-sent every `retransmit_ms`
    /// while the entry is still valid there; emptied by a view change. At
    /// most one per object and directory replica.
    syncing: BTreeMap<(K, NodeId), (OTs, u64)>,
    /// Messages to self, handled before the call returns.
    loopback: VecDeque<OwnershipMsg<K>>,
    stats: Stats,
}

/// Hashes the protocol state (not its counters), for the model checker's
/// visited set.
impl<K: ObjectKey, S: Hash> Hash for Ownership<K, S> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.me.hash(state);
        self.store.hash(state);
        self.entries.hash(state);
        self.requests.hash(state);
        self.stray.hash(state);
        self.blocked.hash(state);
        self.recovery.hash(state);
        self.last_r_ts.hash(state);
        self.members.hash(state);
        self.members_epoch.hash(state);
        self.left.hash(state);
        self.gone_since.hash(state);
        self.r_ts_base.hash(state);
        self.driven_floor.hash(state);
        self.jitter.hash(state);
        self.armed_at.hash(state);
        self.syncing.hash(state);
    }
}

type Fx<K> = Effects<OwnershipMsg<K>, OwnershipOut<K>>;

fn live(ctx: &Context<'_>, node: NodeId) -> bool {
    ctx.view.members.contains_key(&node)
}

impl<K: ObjectKey, S: ObjectStore<K>> Ownership<K, S> {
    pub fn new(
        me: NodeId,
        config: OwnershipConfig,
        bugs: OwnershipBugs,
        store: S,
    ) -> Result<Self, NewError> {
        config.validate()?;
        assert!(config.directory_replicas >= 1);
        assert!(config.max_attempts >= 1 && config.max_pending_requests >= 1);
        let jitter = Jitter(mix64(config.seed ^ mix64(u64::from(me.0))));
        Ok(Ownership {
            me,
            config,
            bugs,
            store,
            entries: BTreeMap::new(),
            requests: BTreeMap::new(),
            stray: BTreeMap::new(),
            blocked: BTreeSet::new(),
            recovery: BTreeSet::new(),
            last_r_ts: 0,
            members: BTreeMap::new(),
            members_epoch: 0,
            left: false,
            gone_since: BTreeMap::new(),
            r_ts_base: None,
            driven_floor: 0,
            jitter,
            armed_at: None,
            syncing: BTreeMap::new(),
            loopback: VecDeque::new(),
            stats: Stats::default(),
        })
    }

    pub fn me(&self) -> NodeId {
        self.me
    }

    /// Plants bugs (the model checker's tests; never in production).
    #[doc(hidden)]
    pub fn set_bugs(&mut self, bugs: OwnershipBugs) {
        self.bugs = bugs;
    }

    pub fn config(&self) -> &OwnershipConfig {
        &self.config
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn store_mut(&mut self) -> &mut S {
        &mut self.store
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The object's metadata here, if this node keeps any.
    pub fn meta(&self, key: &K) -> Option<Meta> {
        self.entries.get(key).map(|e| Meta {
            o_ts: e.o_ts,
            o_state: e.o_state,
            o_replicas: e.o_replicas.clone(),
            r_ts: e.last_r_ts,
        })
    }

    /// Every object this node keeps metadata for.
    pub fn metas(&self) -> impl Iterator<Item = (&K, Meta)> + '_ {
        self.entries.iter().map(|(k, e)| {
            (
                k,
                Meta {
                    o_ts: e.o_ts,
                    o_state: e.o_state,
                    o_replicas: e.o_replicas.clone(),
                    r_ts: e.last_r_ts,
                },
            )
        })
    }

    /// The objects this node keeps metadata for, in key order, after
    /// `after` (from the first with `None`), with this node's access: for
    /// callers that visit them a bounded batch at a time.
    pub fn accesses_after(&self, after: Option<&K>) -> impl Iterator<Item = (&K, Access)> + '_ {
        use std::ops::Bound;
        let from = match after {
            Some(k) => Bound::Excluded(k),
            None => Bound::Unbounded,
        };
        self.entries
            .range((from, Bound::Unbounded))
            .map(|(k, e)| (k, access_of(e, self.me)))
    }

    /// What this node may do with the object now.
    pub fn access(&self, key: &K) -> Access {
        self.entries
            .get(key)
            .map_or(Access::None, |e| access_of(e, self.me))
    }

    /// This node is the object's valid owner.
    pub fn is_owner(&self, key: &K) -> bool {
        self.access(key) == Access::Owner
    }

    /// A request for the object is in flight here (as requester).
    pub fn is_requesting(&self, key: &K) -> bool {
        self.requests.contains_key(key)
    }

    pub fn pending_requests(&self) -> usize {
        self.requests.len()
    }

    /// Arbitrations this node holds (`Invalid` or `Drive` entries).
    pub fn blocked(&self) -> usize {
        self.blocked.len()
    }

    /// This node is a member of the view it last installed (and so may
    /// hold metadata).
    pub fn in_a_view(&self) -> bool {
        !self.members.is_empty() && !self.left
    }

    /// The last view change excluded this node, which then dropped every
    /// object's metadata it held (as a directory replica too).
    pub fn left_the_view(&self) -> bool {
        self.left
    }

    /// Recovery after the last view change is still running here (drivers
    /// NACK new requests meanwhile).
    pub fn recovering(&self) -> bool {
        !self.recovery.is_empty() || !self.store.commit_recovery_done()
    }

    /// The object's directory replicas for the given configuration.
    pub fn directory_of(&self, key: &K, nodes: &[NodeId]) -> Vec<NodeId> {
        directory(key, nodes, self.config.directory_replicas)
    }

    // ---- plumbing ---------------------------------------------------------

    fn send(&mut self, ctx: &Context<'_>, fx: &mut Fx<K>, to: NodeId, key: &K, body: Body) {
        debug_assert!(ctx.nodes.contains(&to), "sends only to configured nodes");
        let msg = OwnershipMsg::new(ctx.view.epoch, key.clone(), body);
        if to == self.me {
            debug_assert!(self.loopback.len() < MAX_LOOPBACK);
            self.loopback.push_back(msg);
        } else {
            fx.send(to, msg);
        }
    }

    fn nack(
        &mut self,
        ctx: &Context<'_>,
        fx: &mut Fx<K>,
        to: &BTreeSet<NodeId>,
        key: &K,
        nack: Nack,
    ) {
        debug_assert!(!to.is_empty());
        debug_assert!(to.len() <= MAX_LOOPBACK);
        for &node in to {
            self.stats.nacks_sent += 1;
            self.send(ctx, fx, node, key, Body::Nack(nack.clone()));
        }
    }

    fn drop_input(&mut self, fx: &mut Fx<K>, reason: DropReason, from: NodeId, what: &str) {
        debug_assert!(!what.is_empty());
        self.stats.count_drop(reason);
        debug_assert!(self.stats.dropped(reason) > 0);
        if reason.is_bad_input() {
            fx.log(format!(
                "ownership {}: dropped {what} from {from}: {reason:?}",
                self.me
            ));
        }
    }

    fn dir(&self, ctx: &Context<'_>, key: &K) -> Vec<NodeId> {
        directory(key, ctx.nodes, self.config.directory_replicas)
    }

    /// The requester of attempt `r_ts` is gone: not in the view, or it left
    /// or restarted after issuing it.
    fn requester_gone(&self, ctx: &Context<'_>, r_ts: RTs) -> bool {
        let since = self.gone_since.get(&r_ts.node).copied();
        let gone = !live(ctx, r_ts.node) || since.is_some_and(|e| (r_ts.version >> 32) < e);
        debug_assert!(!gone || r_ts.node != self.me || !live(ctx, self.me));
        debug_assert!(self.gone_since.len() <= ctx.nodes.len());
        gone
    }

    /// The object's live directory replicas, this node excepted.
    fn live_dir_others(&self, ctx: &Context<'_>, key: &K) -> BTreeSet<NodeId> {
        let others: BTreeSet<NodeId> = self
            .dir(ctx, key)
            .into_iter()
            .filter(|&n| n != self.me && live(ctx, n))
            .collect();
        debug_assert!(!others.contains(&self.me));
        debug_assert!(others.len() < self.config.directory_replicas.max(1) + 1);
        others
    }

    /// Arms the tick timer for `at` unless it fires earlier already.
    fn schedule(&mut self, ctx: &Context<'_>, fx: &mut Fx<K>, at: u64) {
        debug_assert!(at >= ctx.now_ms, "a deadline in the past");
        if self.armed_at.is_none_or(|armed| at < armed) {
            self.armed_at = Some(at);
            fx.set_timer(TICK_TIMER, at.saturating_sub(ctx.now_ms));
        }
        debug_assert!(self.armed_at.is_some_and(|armed| armed <= at));
    }

    fn next_deadline(&self) -> Option<u64> {
        let mut next: Option<u64> = None;
        let mut consider = |at: u64| next = Some(next.map_or(at, |n| n.min(at)));
        for pending in self.requests.values() {
            if let Some(timeout) = self.config.request_timeout_ms {
                consider(pending.started_ms.saturating_add(timeout));
            }
            match &pending.phase {
                Phase::Backoff { until_ms } => consider(*until_ms),
                Phase::Requesting(attempt) => {
                    if let Some(every) = self.config.retransmit_ms {
                        consider(attempt.sent_ms.saturating_add(every));
                    }
                }
            }
        }
        if let Some(after) = self.config.replay_after_ms {
            for key in &self.blocked {
                let arb = self.entries[key].arb.as_ref().expect("blocked has an arb");
                consider(arb.since_ms.saturating_add(after));
            }
        }
        if let Some(every) = self.config.retransmit_ms {
            for &(_, sent_ms) in self.syncing.values() {
                consider(sent_ms.saturating_add(every));
            }
        }
        // A request backing off always has a deadline.
        debug_assert!(
            next.is_some()
                || !self
                    .requests
                    .values()
                    .any(|p| matches!(p.phase, Phase::Backoff { .. }))
        );
        debug_assert!(self.blocked.len() <= self.entries.len());
        next
    }

    /// Re-reports the access level if it changed, and forgets an entry this
    /// node no longer needs (not a directory replica, not a holder, not
    /// blocked, not requesting).
    fn settle(&mut self, ctx: &Context<'_>, key: &K) {
        let is_dir = self.dir(ctx, key).contains(&self.me);
        let me = self.me;
        let Some(entry) = self.entries.get_mut(key) else {
            return;
        };
        let access = access_of(entry, me);
        if access != entry.reported {
            entry.reported = access;
            self.store
                .access_changed(key, access, entry.o_replicas.owner);
        }
        let needed = is_dir
            || entry.o_replicas.holds(me)
            || entry.blocked()
            || entry.o_state == OState::Request
            || entry.refused_win.is_some();
        if !needed {
            debug_assert!(!self.blocked.contains(key));
            self.entries.remove(key);
        }
        debug_assert_eq!(
            self.entries.get(key).is_some_and(Entry::blocked),
            self.blocked.contains(key)
        );
    }

    fn new_entry(&mut self, key: &K) -> Result<(), DropReason> {
        if self.entries.contains_key(key) {
            return Ok(());
        }
        if self.entries.len() >= self.config.max_objects {
            return Err(DropReason::Overloaded);
        }
        self.entries.insert(key.clone(), Entry::fresh());
        debug_assert!(self.entries.len() <= self.config.max_objects);
        debug_assert!(!self.blocked.contains(key));
        Ok(())
    }

    fn next_r_ts(&mut self, ctx: &Context<'_>) -> RTs {
        // The epoch in the high bits: a restarted node (a new member, in a
        // later epoch) never reuses an attempt version.
        let floor = ctx.view.epoch.0 << 32;
        let version = (self.last_r_ts + 1).max(floor);
        debug_assert!(version > self.last_r_ts);
        debug_assert!(version >> 32 >= ctx.view.epoch.0);
        self.last_r_ts = version;
        RTs {
            version,
            node: self.me,
        }
    }

    fn backoff_ms(&mut self, attempt: u32) -> u64 {
        debug_assert!(attempt >= 1);
        let shift = (attempt - 1).min(20);
        let base = self
            .config
            .backoff_base_ms
            .saturating_mul(1 << shift)
            .min(self.config.backoff_max_ms)
            .max(1);
        let total = base + self.jitter.below(base);
        debug_assert!(total >= base && total < 2 * base);
        total
    }

    // ---- requester --------------------------------------------------------

    /// What this node owns and holds blocked.
    pub fn inspect(&self) -> Inspection<K> {
        let me = self.me;
        let owned = self
            .entries
            .iter()
            .filter(|(_, e)| access_of(e, me) == Access::Owner)
            .map(|(k, _)| k);
        let owned_total = owned.clone().count();
        let report = Inspection {
            owned: owned.take(INSPECT_MAX_KEYS).cloned().collect(),
            owned_total,
            blocked: self
                .blocked
                .iter()
                .take(INSPECT_MAX_KEYS)
                .cloned()
                .collect(),
            blocked_total: self.blocked.len(),
            objects: self.entries.len(),
            pending_requests: self.requests.len(),
            recovering: self.recovering(),
        };
        debug_assert!(report.owned.len() <= report.owned_total);
        debug_assert!(report.owned_total <= report.objects);
        report
    }

    fn on_command(&mut self, ctx: &Context<'_>, cmd: OwnershipCmd<K>, fx: &mut Fx<K>) {
        let (key, req, kind, create) = match cmd {
            OwnershipCmd::Inspect { req } => {
                fx.output(OwnershipOut::Inspected {
                    req,
                    report: self.inspect(),
                });
                return;
            }
            OwnershipCmd::Describe { key, req } => {
                let (meta, access) = (self.meta(&key), self.access(&key));
                fx.output(OwnershipOut::Described {
                    key,
                    req,
                    meta,
                    access,
                });
                return;
            }
            OwnershipCmd::Acquire { key, req, kind } => (key, req, kind, None),
            OwnershipCmd::Create { key, req, data } => {
                if data.payload_len() > self.config.max_data_bytes {
                    fx.output(OwnershipOut::Failed {
                        key,
                        req,
                        reason: FailReason::Oversized,
                    });
                    return;
                }
                (key, req, RequestKind::AddOwner, Some(data))
            }
        };
        let fail = |fx: &mut Fx<K>, key: K, reason| {
            fx.output(OwnershipOut::Failed { key, req, reason });
        };
        if !ctx.serving || !ctx.member {
            return fail(fx, key, FailReason::NotServing);
        }
        if self.requests.contains_key(&key) {
            return fail(fx, key, FailReason::Busy);
        }
        if self.requests.len() >= self.config.max_pending_requests {
            return fail(fx, key, FailReason::TooManyPending);
        }
        let entry = self.entries.get(&key);
        if create.is_some() && entry.is_some_and(|e| !e.o_replicas.is_empty()) {
            return fail(fx, key, FailReason::AlreadyExists);
        }
        if create.is_none() {
            if let Some(o_ts) = entry.and_then(|e| satisfied(e, self.me, kind)) {
                fx.output(OwnershipOut::Acquired {
                    key,
                    req,
                    kind,
                    o_ts,
                });
                return;
            }
            let owner = entry.is_some_and(|e| e.o_replicas.owner == Some(self.me));
            if kind == RequestKind::RemoveReader && owner {
                return fail(fx, key, FailReason::IsOwner);
            }
        }
        // A node that is no arbiter of the object shows its request in
        // `o_state` (the TLA+ "request" state).
        let is_dir = self.dir(ctx, &key).contains(&self.me);
        let arbiter =
            is_dir || entry.is_some_and(|e| e.blocked() || e.o_replicas.owner == Some(self.me));
        if !arbiter {
            if self.new_entry(&key).is_err() {
                return fail(fx, key, FailReason::TooManyObjects);
            }
            let entry = self.entries.get_mut(&key).expect("just made");
            debug_assert_eq!(entry.o_state, OState::Valid);
            entry.o_state = OState::Request;
            self.settle(ctx, &key);
        }
        self.requests.insert(
            key.clone(),
            Pending {
                req,
                kind,
                create,
                attempts: Vec::new(),
                phase: Phase::Backoff {
                    until_ms: ctx.now_ms,
                },
                started_ms: ctx.now_ms,
                last_nack: None,
                unknown_at: BTreeSet::new(),
            },
        );
        if let Some(timeout) = self.config.request_timeout_ms {
            self.schedule(ctx, fx, ctx.now_ms.saturating_add(timeout));
        }
        debug_assert!(self.requests.len() <= self.config.max_pending_requests);
        self.start_attempt(ctx, &key, fx);
        debug_assert!(self
            .requests
            .get(&key)
            .is_none_or(|p| !p.attempts.is_empty()));
    }

    /// Sends a new REQ (a fresh `r_ts`) to the object's driver: this node if
    /// it is a live directory replica, else the first live one.
    fn start_attempt(&mut self, ctx: &Context<'_>, key: &K, fx: &mut Fx<K>) {
        let pending = self.requests.get(key).expect("pending request");
        debug_assert!(matches!(pending.phase, Phase::Backoff { .. }));
        if pending.attempts.len() >= self.config.max_attempts as usize {
            let reason = pending
                .last_nack
                .map_or(FailReason::TimedOut, FailReason::Nacked);
            return self.fail(ctx, key, reason, fx);
        }
        let dir = self.dir(ctx, key);
        let unknown_at = &pending.unknown_at;
        let driver = if dir.contains(&self.me) && !unknown_at.contains(&self.me) {
            Some(self.me)
        } else {
            dir.iter()
                .copied()
                .find(|&n| live(ctx, n) && !unknown_at.contains(&n))
        };
        let Some(driver) = driver else {
            return self.fail(ctx, key, FailReason::NoDirectory, fx);
        };
        let r_ts = self.next_r_ts(ctx);
        let pending = self.requests.get_mut(key).expect("pending request");
        if !pending.attempts.is_empty() {
            self.stats.retries += 1;
        }
        pending.attempts.push(r_ts);
        pending.phase = Phase::Requesting(Attempt {
            r_ts,
            driver,
            sent_ms: ctx.now_ms,
            expect: None,
            got: BTreeSet::new(),
            data: None,
        });
        let req = Req {
            r_ts,
            r_type: pending.kind,
            create: pending.create.is_some(),
        };
        debug_assert!(pending.attempts.len() <= self.config.max_attempts as usize);
        if let Some(every) = self.config.retransmit_ms {
            self.schedule(ctx, fx, ctx.now_ms.saturating_add(every));
        }
        self.send(ctx, fx, driver, key, Body::Req(req));
    }

    /// Re-sends the current attempt's REQ (same `r_ts`): the driver's
    /// at-most-once filter makes this safe. A dead driver gets a new attempt.
    fn resend_req(&mut self, ctx: &Context<'_>, key: &K, fx: &mut Fx<K>) {
        let pending = self.requests.get_mut(key).expect("pending request");
        let Phase::Requesting(attempt) = &mut pending.phase else {
            unreachable!("resend of a request in backoff");
        };
        if !live(ctx, attempt.driver) {
            pending.phase = Phase::Backoff {
                until_ms: ctx.now_ms,
            };
            return self.start_attempt(ctx, key, fx);
        }
        attempt.sent_ms = ctx.now_ms;
        let (driver, r_ts) = (attempt.driver, attempt.r_ts);
        let req = Req {
            r_ts,
            r_type: pending.kind,
            create: pending.create.is_some(),
        };
        self.stats.retransmits += 1;
        debug_assert!(live(ctx, driver));
        debug_assert_eq!(r_ts.node, self.me);
        if let Some(every) = self.config.retransmit_ms {
            self.schedule(ctx, fx, ctx.now_ms.saturating_add(every));
        }
        self.send(ctx, fx, driver, key, Body::Req(req));
    }

    fn fail(&mut self, ctx: &Context<'_>, key: &K, reason: FailReason, fx: &mut Fx<K>) {
        let pending = self.requests.remove(key).expect("pending request");
        debug_assert!(!self.requests.contains_key(key));
        debug_assert!(pending.attempts.len() <= self.config.max_attempts as usize);
        if let Some(entry) = self.entries.get_mut(key) {
            if entry.o_state == OState::Request {
                entry.o_state = OState::Valid;
            }
        }
        self.settle(ctx, key);
        fx.output(OwnershipOut::Failed {
            key: key.clone(),
            req: pending.req,
            reason,
        });
    }

    fn requester_nacked(&mut self, ctx: &Context<'_>, key: &K, reason: NackReason, fx: &mut Fx<K>) {
        let max = self.config.max_attempts as usize;
        let dir = self.dir(ctx, key);
        let pending = self.requests.get_mut(key).expect("pending request");
        debug_assert!(matches!(pending.phase, Phase::Requesting(_)));
        pending.last_nack = Some(reason);
        let attempts = pending.attempts.len();
        let mut permanent = reason.is_permanent();
        if reason == NackReason::UnknownObject {
            // Another directory replica may still know it (this one may
            // have restarted and forgotten it).
            let Phase::Requesting(attempt) = &pending.phase else {
                unreachable!("checked above");
            };
            pending.unknown_at.insert(attempt.driver);
            let others = dir
                .iter()
                .any(|&n| live(ctx, n) && !pending.unknown_at.contains(&n));
            permanent = !others;
        }
        if permanent || attempts >= max {
            return self.fail(ctx, key, FailReason::Nacked(reason), fx);
        }
        let wait = self.backoff_ms(attempts as u32);
        let until_ms = ctx.now_ms.saturating_add(wait);
        let pending = self.requests.get_mut(key).expect("pending request");
        pending.phase = Phase::Backoff { until_ms };
        debug_assert!(until_ms > ctx.now_ms);
        self.schedule(ctx, fx, until_ms);
    }

    fn on_requester_ack(
        &mut self,
        ctx: &Context<'_>,
        from: NodeId,
        key: &K,
        ack: Ack,
        fx: &mut Fx<K>,
    ) {
        let dir = self.dir(ctx, key);
        let pending = self.requests.get_mut(key).expect("pending request");
        let want = ArbKind::Request(pending.kind);
        let Phase::Requesting(attempt) = &mut pending.phase else {
            unreachable!("matched a requesting attempt");
        };
        // The current attempt's ACKs also name its own kind and driver.
        if ack.ackers.contains(&from)
            && (ack.r_type != want || !ack.ackers.contains(&ack.o_ts.node))
        {
            return self.drop_input(fx, DropReason::ConflictingOTs, from, "ACK");
        }
        let expect = match attempt.collect(from, ack) {
            Ok(Some(expect)) => expect,
            Ok(None) => return,
            Err(reason) => return self.drop_input(fx, reason, from, "ACK"),
        };
        // Every ACK is in: apply first, then VAL the arbiters.
        let win = Win::of(expect, attempt.r_ts, attempt.data.take(), &dir);
        self.requester_apply(ctx, from, key, win, fx);
    }

    /// An ACK for one of our attempts that no request waits for: collect it
    /// like the current attempt's, and apply the win when complete.
    fn on_stray_ack(&mut self, ctx: &Context<'_>, from: NodeId, key: &K, ack: Ack, fx: &mut Fx<K>) {
        debug_assert_eq!(ack.r_ts.node, self.me);
        let slot = (key.clone(), ack.r_ts);
        if !self.stray.contains_key(&slot) {
            if self.stray.len() >= self.config.max_pending_requests {
                // The replay timers at the arbiters recover it (RESP).
                return self.drop_input(fx, DropReason::Overloaded, from, "ACK");
            }
            self.stray.insert(
                slot.clone(),
                Attempt {
                    r_ts: ack.r_ts,
                    driver: ack.o_ts.node,
                    sent_ms: ctx.now_ms,
                    expect: None,
                    got: BTreeSet::new(),
                    data: None,
                },
            );
        }
        debug_assert!(self.stray.len() <= self.config.max_pending_requests);
        let attempt = self.stray.get_mut(&slot).expect("present");
        let expect = match attempt.collect(from, ack) {
            Ok(Some(expect)) => expect,
            Ok(None) => return,
            Err(reason) => return self.drop_input(fx, reason, from, "ACK"),
        };
        let attempt = self.stray.remove(&slot).expect("present");
        let win = Win::of(expect, attempt.r_ts, attempt.data, &self.dir(ctx, key));
        self.requester_apply(ctx, from, key, win, fx);
    }

    /// The requester applies a won arbitration: installs the data, becomes
    /// owner or reader (or stops being one), `Valid`, outputs, then sends
    /// VAL. Arbiters apply only on VAL, so the requester is always first.
    fn requester_apply(
        &mut self,
        ctx: &Context<'_>,
        from: NodeId,
        key: &K,
        win: Win,
        fx: &mut Fx<K>,
    ) {
        let me = self.me;
        if self.r_ts_base.is_some_and(|base| win.r_ts.version < base) {
            // A previous incarnation's attempt: not ours to apply.
            return self.drop_input(fx, DropReason::Stale, from, "win");
        }
        if let Some(entry) = self.entries.get(key) {
            if entry.o_ts > win.o_ts {
                // We are past it (we applied it, or it lost): tell the
                // replayer, which asks the arbiters again.
                self.stats.count_drop(DropReason::Stale);
                let nack = Nack {
                    r_ts: win.r_ts,
                    o_ts: Some(win.o_ts),
                    reason: NackReason::Stale,
                    current: None,
                };
                return self.nack(ctx, fx, &BTreeSet::from([from]), key, nack);
            }
            if entry.o_ts == win.o_ts {
                if entry.last_r_ts != win.r_ts || entry.arb.as_ref().is_some_and(|a| a.refused) {
                    return self.drop_input(fx, DropReason::ConflictingOTs, from, "win");
                }
                if !entry.blocked() {
                    // Applied already (a duplicate RESP: the VALs may have
                    // been lost), whether or not a newer request of ours has
                    // put the entry in Request since.
                    self.stats.count_drop(DropReason::Duplicate);
                    let val = Val {
                        o_ts: win.o_ts,
                        r_ts: win.r_ts,
                        r_floor: self.r_floor(key),
                    };
                    for &node in win.val_to.iter().filter(|&&n| n != me) {
                        self.send(ctx, fx, node, key, Body::Val(val.clone()));
                    }
                    return;
                }
            }
        }
        if self
            .entries
            .get(key)
            .is_some_and(|e| e.refused_win == Some((win.o_ts, win.r_ts)))
        {
            return self.refuse_win(ctx, from, key, &win, fx);
        }
        let answers = self
            .requests
            .get(key)
            .is_some_and(|p| p.attempts.contains(&win.r_ts));
        let needs_data = win.kind.wants_data() && !win.pre.holds(me);
        let data = match win.data {
            Some(data) => Some(data),
            None if needs_data => {
                // Only a create's own rows, or none: a replay that found no
                // rows (this node has not applied it, or it would have
                // answered as applied above). Refuse it for good.
                let create = answers.then(|| self.requests[key].create.clone()).flatten();
                match create {
                    Some(data) => Some(data),
                    None => return self.refuse_win(ctx, from, key, &win, fx),
                }
            }
            None => None,
        };
        if let Some(data) = data {
            self.store.install(key, data);
        }
        if self.new_entry(key).is_err() {
            // Never refuse a win: the arbiters wait for it. Grow past the
            // bound for this one entry.
            self.entries.insert(key.clone(), Entry::fresh());
        }
        // What our VAL will say (the request this answers is over).
        let r_floor = if answers {
            self.last_r_ts
        } else {
            self.r_floor(key)
        };
        let entry = self.entries.get_mut(key).expect("present");
        debug_assert!(entry.refused_win.is_none_or(|(o, _)| o != win.o_ts));
        if entry.refused_win.is_some_and(|(o, _)| o < win.o_ts) {
            entry.refused_win = None;
        }
        entry.o_ts = win.o_ts;
        entry.o_replicas = win.pre.post_with(
            me,
            ArbKind::Request(win.kind),
            self.config.old_owner_stays_reader,
        );
        entry.o_state = OState::Valid;
        entry.last_r_ts = win.r_ts;
        entry.arb = None;
        // As our VAL tells the others: no older attempt of ours is driven
        // here afterwards.
        let floor = entry.seen.entry(me).or_insert(0);
        *floor = (*floor).max(r_floor);
        let holds = entry.o_replicas.holds(me);
        // The owner stays a holder whatever it asked (a remove-reader that
        // raced with a win making this node the owner changes nothing).
        let is_owner = entry.o_replicas.owner == Some(me);
        debug_assert!(holds == win.kind.wants_data() || is_owner);
        debug_assert!(!win.kind.wants_ownership() || is_owner);
        self.blocked.remove(key);
        self.recovery.remove(key);
        if !holds {
            self.store.remove(key);
        }
        self.stats.applied += 1;
        self.settle(ctx, key);
        if answers {
            let pending = self.requests.remove(key).expect("answers a request");
            if pending.kind == RequestKind::RemoveReader && is_owner {
                fx.output(OwnershipOut::Failed {
                    key: key.clone(),
                    req: pending.req,
                    reason: FailReason::IsOwner,
                });
            } else {
                fx.output(OwnershipOut::Acquired {
                    key: key.clone(),
                    req: pending.req,
                    kind: pending.kind,
                    o_ts: win.o_ts,
                });
            }
        } else {
            fx.output(OwnershipOut::LateWin {
                key: key.clone(),
                kind: win.kind,
                o_ts: win.o_ts,
            });
            // A request still waiting may be satisfied by the late win.
            if let Some(pending) = self.requests.get(key) {
                let entry = &self.entries.get(key);
                if let Some(o_ts) = entry.and_then(|e| satisfied(e, me, pending.kind)) {
                    if pending.create.is_none() {
                        let pending = self.requests.remove(key).expect("present");
                        fx.output(OwnershipOut::Acquired {
                            key: key.clone(),
                            req: pending.req,
                            kind: pending.kind,
                            o_ts,
                        });
                    }
                }
            }
        }
        let val = Val {
            o_ts: win.o_ts,
            r_ts: win.r_ts,
            r_floor: self.r_floor(key),
        };
        for &node in win.val_to.iter().filter(|&&n| n != me) {
            self.send(ctx, fx, node, key, Body::Val(val.clone()));
        }
    }

    /// The highest attempt version for `key` this node has given up on (a
    /// VAL's `r_floor`): every one it issued, but the attempt in flight for
    /// `key`, if any, and what follows. (Using the highest one issued made
    /// the driver drop a request's current attempt as already arbitrated,
    /// after a duplicate RESP of an earlier win: the request hung; 3-node
    /// seed 5675 with the end-of-run check.)
    fn r_floor(&self, key: &K) -> u64 {
        let floor = match self.requests.get(key).map(|p| &p.phase) {
            Some(Phase::Requesting(attempt)) => attempt.r_ts.version.saturating_sub(1),
            _ => self.last_r_ts,
        };
        debug_assert!(floor <= self.last_r_ts);
        floor
    }

    /// Refuses a replayed win this node cannot apply (no rows), for good:
    /// remembered, NACKed to the replayer (which releases the arbiters), and
    /// the attempt counts as NACKed.
    fn refuse_win(&mut self, ctx: &Context<'_>, from: NodeId, key: &K, win: &Win, fx: &mut Fx<K>) {
        if self.new_entry(key).is_err() {
            // The refusal must be remembered: grow past the bound.
            self.entries.insert(key.clone(), Entry::fresh());
        }
        let entry = self.entries.get_mut(key).expect("present");
        entry.refused_win = Some((win.o_ts, win.r_ts));
        debug_assert!(entry.o_ts <= win.o_ts);
        debug_assert_eq!(win.r_ts.node, self.me);
        self.stats.refused_wins += 1;
        let nack = Nack {
            r_ts: win.r_ts,
            o_ts: Some(win.o_ts),
            reason: NackReason::Refused,
            current: Some(Current {
                o_ts: win.o_ts,
                r_ts: win.r_ts,
                valid: false,
                o_replicas: win.pre.clone(),
            }),
        };
        // To the replayer and every live directory replica: any of them that
        // holds it (or never saw it) releases it.
        let mut to = self.live_dir_others(ctx, key);
        to.insert(from);
        self.nack(ctx, fx, &to, key, nack);
        let current = self
            .requests
            .get(key)
            .is_some_and(|p| matches!(&p.phase, Phase::Requesting(a) if a.r_ts == win.r_ts));
        if current {
            self.requester_nacked(ctx, key, NackReason::Refused, fx);
        }
        self.settle(ctx, key);
    }

    // ---- driver -----------------------------------------------------------

    fn on_req(&mut self, ctx: &Context<'_>, from: NodeId, key: &K, req: Req, fx: &mut Fx<K>) {
        let dir = self.dir(ctx, key);
        if req.r_ts.node != from {
            return self.drop_input(fx, DropReason::ForgedSender, from, "REQ");
        }
        if !dir.contains(&self.me) {
            return self.drop_input(fx, DropReason::NotDirectory, from, "REQ");
        }
        let me = self.me;
        let refuse = |this: &mut Self, fx: &mut Fx<K>, reason| {
            let nack = Nack {
                r_ts: req.r_ts,
                o_ts: None,
                reason,
                current: None,
            };
            this.nack(ctx, fx, &BTreeSet::from([from]), key, nack);
        };
        if !ctx.serving {
            return refuse(self, fx, NackReason::NotServing);
        }
        if !self.entries.contains_key(key) {
            if !req.create {
                return refuse(self, fx, NackReason::UnknownObject);
            }
            if self.recovering() {
                // Before the entry: a fresh one left behind would claim, valid,
                // that the object does not exist.
                return refuse(self, fx, NackReason::Recovering);
            }
            if let Err(reason) = self.new_entry(key) {
                return self.drop_input(fx, reason, from, "REQ");
            }
        }
        let entry = self.entries.get(key).expect("present");
        let seen = entry.seen.get(&from).copied().unwrap_or(0);
        if req.r_ts.version <= seen {
            // At most once: this attempt was arbitrated already.
            let this_one = entry.last_r_ts == req.r_ts;
            let fast_path_driver = entry.o_state == OState::Drive
                && entry
                    .arb
                    .as_ref()
                    .is_some_and(|a| a.collect.is_none() && a.ack_to == from);
            if this_one && fast_path_driver {
                // A retransmission: our INVs or ACKs may have been lost.
                self.stats.count_drop(DropReason::Duplicate);
                return self.send_round(ctx, key, fx);
            }
            if this_one && entry.blocked() {
                // Being replayed: the RESP will answer it.
                return self.drop_input(fx, DropReason::Duplicate, from, "REQ");
            }
            if req.r_ts.version == seen {
                return refuse(self, fx, NackReason::Superseded);
            }
            return self.drop_input(fx, DropReason::Stale, from, "REQ");
        }
        if entry.o_state != OState::Valid {
            return refuse(self, fx, NackReason::Busy);
        }
        if self.recovering() {
            return refuse(self, fx, NackReason::Recovering);
        }
        if req.create && !entry.o_replicas.is_empty() {
            return refuse(self, fx, NackReason::AlreadyExists);
        }
        let pre = entry.o_replicas.clone();
        let needs_data = !req.create && req.r_type.wants_data() && !pre.holds(from);
        let data_from = needs_data.then(|| data_source(ctx, &pre, from)).flatten();
        if needs_data && data_from.is_none() {
            return refuse(self, fx, NackReason::DataLost);
        }
        let freezes_me = pre.owner == Some(me) || data_from == Some(me);
        if freezes_me && self.store.has_pending_commit(key) {
            return refuse(self, fx, NackReason::PendingCommit);
        }
        let mut ackers = ackers_for(ctx, &dir, &pre, data_from, me);
        if req.create {
            // Every live member witnesses a create: the directory may have
            // lost the object (each replica that knew it restarted or was
            // cut off) while a reader still holds its rows; any node that
            // knows it refuses (`on_create_witness`).
            ackers.extend(ctx.view.members.keys().copied().filter(|&n| live(ctx, n)));
        }
        let entry = self.entries.get_mut(key).expect("present");
        let old = entry.o_ts;
        entry.o_ts = old.bumped_above(self.driven_floor, me, ctx.view.epoch);
        self.driven_floor = entry.o_ts.version;
        entry.o_state = OState::Drive;
        entry.last_r_ts = req.r_ts;
        entry.seen.insert(from, req.r_ts.version);
        entry.arb = Some(Arb {
            r_type: ArbKind::Request(req.r_type),
            driver: me,
            ackers,
            data_from,
            ack_to: from,
            create: req.create,
            refused: false,
            no_data: false,
            replaying: false,
            requester_gone: false,
            since_ms: ctx.now_ms,
            collect: None,
        });
        debug_assert!(entry.o_ts > old);
        debug_assert!(entry.seen.len() <= ctx.nodes.len());
        self.blocked.insert(key.clone());
        self.stats.driven += 1;
        if let Some(after) = self.config.replay_after_ms {
            self.schedule(ctx, fx, ctx.now_ms.saturating_add(after));
        }
        self.settle(ctx, key);
        self.send_round(ctx, key, fx);
        if self.bugs.arbiters_apply_before_requester {
            self.apply_val(ctx, key);
        }
    }

    /// One round of an arbitration: INV to every other acker, and this
    /// node's own ACK to `ack_to`.
    fn send_round(&mut self, ctx: &Context<'_>, key: &K, fx: &mut Fx<K>) {
        let me = self.me;
        let entry = self.entries.get(key).expect("arbitration entry");
        let arb = entry.arb.as_ref().expect("arbitration");
        debug_assert!(arb.ackers.contains(&me));
        debug_assert!(matches!(entry.o_state, OState::Drive | OState::Invalid));
        let inv = Inv {
            o_ts: entry.o_ts,
            r_ts: entry.last_r_ts,
            r_type: arb.r_type,
            o_replicas: entry.o_replicas.clone(),
            driver: arb.driver,
            ackers: arb.ackers.clone(),
            data_from: arb.data_from,
            ack_to: arb.ack_to,
            create: arb.create,
            requester_gone: arb.requester_gone,
        };
        let others: Vec<NodeId> = arb.ackers.iter().copied().filter(|&n| n != me).collect();
        let with_data = arb.data_from == Some(me);
        for node in others {
            self.send(ctx, fx, node, key, Body::Inv(inv.clone()));
        }
        let data = if with_data {
            self.store.export(key)
        } else {
            None
        };
        if with_data && data.is_none() {
            // Our data vanished from the store: nothing to ship.
            fx.log(format!(
                "ownership {me}: no data for {key:?} to ship as its source"
            ));
            return;
        }
        self.send_ack(ctx, key, &inv, data, fx);
    }

    fn send_ack(
        &mut self,
        ctx: &Context<'_>,
        key: &K,
        inv: &Inv,
        data: Option<ObjectData>,
        fx: &mut Fx<K>,
    ) {
        debug_assert!(inv.ackers.contains(&self.me));
        debug_assert!(data.is_none() || inv.data_from == Some(self.me));
        let applied = self
            .entries
            .get(key)
            .is_some_and(|e| e.o_ts == inv.o_ts && e.last_r_ts == inv.r_ts && !e.blocked());
        let ack = Ack {
            o_ts: inv.o_ts,
            r_ts: inv.r_ts,
            r_type: inv.r_type,
            o_replicas: inv.o_replicas.clone(),
            ackers: inv.ackers.clone(),
            data_from: inv.data_from,
            data,
            applied,
        };
        self.send(ctx, fx, inv.ack_to, key, Body::Ack(ack));
    }

    // ---- arbiter ----------------------------------------------------------

    fn on_inv(&mut self, ctx: &Context<'_>, from: NodeId, key: &K, inv: Inv, fx: &mut Fx<K>) {
        let me = self.me;
        let dir = self.dir(ctx, key);
        if inv.driver != inv.o_ts.node {
            return self.drop_input(fx, DropReason::ImpossibleOTs, from, "INV");
        }
        if from != inv.driver && from != inv.ack_to {
            return self.drop_input(fx, DropReason::ForgedSender, from, "INV");
        }
        let shape_ok = inv.ackers.contains(&from)
            && inv.ackers.contains(&me)
            && ctx.nodes.contains(&inv.ack_to)
            && inv.data_from.is_none_or(|d| inv.ackers.contains(&d))
            && (inv.r_type != ArbKind::Noop || inv.r_ts.node == inv.driver);
        if !shape_ok {
            return self.drop_input(fx, DropReason::Malformed, from, "INV");
        }
        let is_dir = dir.contains(&me);
        let is_owner = inv.o_replicas.owner == Some(me);
        let is_source = inv.data_from == Some(me);
        debug_assert!(dir_contains_ts(&dir, inv.o_ts), "checked by check_shape");
        debug_assert!(inv.ackers.contains(&me));
        if !is_dir && !is_owner && !is_source {
            if inv.create && inv.r_type != ArbKind::Noop {
                return self.on_create_witness(ctx, from, key, inv, fx);
            }
            return self.drop_input(fx, DropReason::NotArbiter, from, "INV");
        }
        let learned = !self.entries.contains_key(key);
        if learned {
            if !is_dir {
                return self.drop_input(fx, DropReason::UnknownObject, from, "INV");
            }
            // A directory replica that has no entry yet (a create, or a
            // replica that joined): the INV carries all the metadata.
            if let Err(reason) = self.new_entry(key) {
                return self.drop_input(fx, reason, from, "INV");
            }
        }
        if !is_dir && !is_owner {
            return self.inv_as_source(ctx, from, key, inv, fx);
        }
        let entry = self.entries.get(key).expect("present");
        let accept_smaller = self.bugs.arbiter_accepts_smaller_o_ts && inv.r_type != ArbKind::Noop;
        match inv.o_ts.cmp(&entry.o_ts) {
            std::cmp::Ordering::Greater
                if inv.create && !learned && is_dir && !entry.o_replicas.is_empty() =>
            {
                self.refuse_recreate(ctx, from, key, inv, fx)
            }
            std::cmp::Ordering::Greater => {
                // A directory replica that learns the object from a replay
                // (it restarted, say) may be the last to hear of it: it
                // replays too, and a superseded arbitration then meets the
                // others' Stale replies instead of blocking it for good.
                let replay = from != inv.driver && inv.r_type != ArbKind::Noop;
                self.accept_inv(ctx, from, key, inv, is_source, fx);
                if learned && replay && self.entries.get(key).is_some_and(Entry::blocked) {
                    let refused = self.entries[key].arb.as_ref().is_some_and(|a| a.refused);
                    if !refused {
                        self.start_replay(ctx, key, fx);
                    }
                }
            }
            std::cmp::Ordering::Less if accept_smaller => {
                self.accept_inv(ctx, from, key, inv, is_source, fx)
            }
            std::cmp::Ordering::Equal => {
                if entry.last_r_ts != inv.r_ts {
                    return self.drop_input(fx, DropReason::ConflictingOTs, from, "INV");
                }
                if entry.arb.as_ref().is_some_and(|a| a.refused) {
                    let to = nack_targets(&inv, from);
                    let nack = Nack {
                        r_ts: inv.r_ts,
                        o_ts: Some(inv.o_ts),
                        reason: NackReason::PendingCommit,
                        current: Some(Current {
                            o_ts: inv.o_ts,
                            r_ts: inv.r_ts,
                            valid: false,
                            o_replicas: entry.o_replicas.clone(),
                        }),
                    };
                    return self.nack(ctx, fx, &to, key, nack);
                }
                // A replay (or retransmission) of what we accepted, or even
                // applied: ACK again (idempotent). Applied, we say so and
                // ship no rows: the requester has them, and we may not any
                // more (an old owner that keeps no copy; 3-node seed 10086
                // of that configuration replayed for ever waiting for them).
                let applied = !entry.blocked();
                let data = if is_source && !applied {
                    match self.store.export(key) {
                        Some(data) => Some(data),
                        None => return self.drop_input(fx, DropReason::MissingData, from, "INV"),
                    }
                } else {
                    None
                };
                self.send_ack(ctx, key, &inv, data, fx);
            }
            std::cmp::Ordering::Less => {
                // Tell a replayer what it missed (an owner that lost its VAL
                // learns it was demoted).
                self.stats.count_drop(DropReason::Stale);
                if from == inv.ack_to {
                    let current = Current {
                        o_ts: entry.o_ts,
                        r_ts: entry.last_r_ts,
                        valid: entry.o_state == OState::Valid,
                        o_replicas: entry.o_replicas.clone(),
                    };
                    let nack = Nack {
                        r_ts: inv.r_ts,
                        o_ts: Some(inv.o_ts),
                        reason: NackReason::Stale,
                        current: Some(current),
                    };
                    self.nack(ctx, fx, &BTreeSet::from([from]), key, nack);
                }
            }
        }
    }

    /// A create INV, newer than what this directory replica knows, for an
    /// object it knows exists: the driver is a directory replica that
    /// restarted and re-created its objects before anyone taught it (its
    /// fresh entry's `o_ts` is bumped in the new epoch, so it is Greater).
    /// Accepting it would re-create the object empty while its owner holds
    /// it. We change nothing and tell everyone the create involves: the
    /// requester fails with `AlreadyExists`, and the replicas that accepted
    /// the create (fresh entries with an empty vector) forget the object,
    /// so that what we may be arbitrating meanwhile (which needs their ACKs)
    /// is not blocked behind a create that can never complete.
    fn refuse_recreate(
        &mut self,
        ctx: &Context<'_>,
        from: NodeId,
        key: &K,
        inv: Inv,
        fx: &mut Fx<K>,
    ) {
        debug_assert!(inv.create);
        debug_assert!(self
            .entries
            .get(key)
            .is_some_and(|e| !e.o_replicas.is_empty()));
        self.stats.refused_recreates += 1;
        let mut to = nack_targets(&inv, from);
        to.extend(inv.ackers.iter().copied());
        to.remove(&self.me);
        to.retain(|&n| live(ctx, n));
        let nack = Nack {
            r_ts: inv.r_ts,
            o_ts: Some(inv.o_ts),
            reason: NackReason::AlreadyExists,
            current: None,
        };
        self.nack(ctx, fx, &to, key, nack);
        // The directory replicas the create involved know nothing of the
        // object: teach them, if we may (a directory replica or the owner,
        // valid; else their replays and the view changes do).
        let me = self.me;
        let dir = self.dir(ctx, key);
        let entry = &self.entries[key];
        let teacher = (dir.contains(&me) || entry.o_replicas.owner == Some(me))
            && entry.o_state == OState::Valid
            && !entry.blocked();
        if !teacher {
            return;
        }
        let o_ts = entry.o_ts;
        let pupils: Vec<NodeId> = dir
            .iter()
            .copied()
            .filter(|&n| n != me && inv.ackers.contains(&n) && live(ctx, n))
            .collect();
        debug_assert!(pupils.len() < dir.len().max(1));
        for node in pupils {
            self.syncing.insert((key.clone(), node), (o_ts, ctx.now_ms));
            self.send_sync(ctx, key, node, fx);
        }
        if let Some(every) = self.config.retransmit_ms {
            self.schedule(ctx, fx, ctx.now_ms.saturating_add(every));
        }
    }

    /// A directory replica or a witness refused a create we accepted (or
    /// drive) because the object exists: forget the fresh entry the create made (it holds
    /// nothing), to be taught or to learn the object like any replica that
    /// never heard of it.
    fn forget_refused_create(
        &mut self,
        ctx: &Context<'_>,
        from: NodeId,
        key: &K,
        o_ts: OTs,
        nack: &Nack,
    ) -> bool {
        debug_assert_eq!(nack.reason, NackReason::AlreadyExists);
        let Some(entry) = self.entries.get(key) else {
            return false;
        };
        let holds_create = entry.o_ts == o_ts
            && entry.last_r_ts == nack.r_ts
            && entry.o_replicas.is_empty()
            && entry.arb.as_ref().is_some_and(|a| a.create && !a.refused);
        // The refuser is a directory replica or a witness (any member).
        if !holds_create || from == self.me || !live(ctx, from) {
            return false;
        }
        self.entries.remove(key);
        self.blocked.remove(key);
        self.recovery.remove(key);
        self.stats.forgotten_creates += 1;
        debug_assert!(!self.entries.contains_key(key));
        true
    }

    /// A create INV at a node that is no arbiter of the object, asked as a
    /// witness: it refuses if it knows the object (a reader, an old owner),
    /// else ACKs, keeping nothing (the create's VAL goes to the arbiters).
    fn on_create_witness(
        &mut self,
        ctx: &Context<'_>,
        from: NodeId,
        key: &K,
        inv: Inv,
        fx: &mut Fx<K>,
    ) {
        debug_assert!(inv.create && !self.dir(ctx, key).contains(&self.me));
        debug_assert!(inv.ackers.contains(&self.me));
        let knows = self
            .entries
            .get(key)
            .is_some_and(|e| !e.o_replicas.is_empty());
        if knows {
            return self.refuse_recreate(ctx, from, key, inv, fx);
        }
        self.send_ack(ctx, key, &inv, None, fx);
        debug_assert!(!knows);
    }

    /// A reader named as the data source (the owner is gone): it ships its
    /// rows and changes nothing; readers are not arbiters.
    fn inv_as_source(
        &mut self,
        ctx: &Context<'_>,
        from: NodeId,
        key: &K,
        inv: Inv,
        fx: &mut Fx<K>,
    ) {
        debug_assert_eq!(inv.data_from, Some(self.me));
        debug_assert!(!self.dir(ctx, key).contains(&self.me));
        let entry = self.entries.get_mut(key).expect("a reader has an entry");
        let pending = inv.r_type != ArbKind::Noop && self.store.has_pending_commit(key);
        let refuse = match entry.source_said {
            Some((o_ts, refused)) if o_ts == inv.o_ts => refused,
            Some((o_ts, _)) if o_ts > inv.o_ts => {
                // Older than one we answered (whose driver may be gone):
                // never a refusal, which a driver could take for a proof;
                // the rows if we can, else silence until the commit is done
                // (the replayer asks again).
                if pending {
                    return self.drop_input(fx, DropReason::Stale, from, "INV");
                }
                let Some(data) = self.store.export(key) else {
                    return self.drop_input(fx, DropReason::MissingData, from, "INV");
                };
                return self.send_ack(ctx, key, &inv, Some(data), fx);
            }
            _ => pending,
        };
        let entry = self.entries.get_mut(key).expect("present");
        entry.source_said = Some((inv.o_ts, refuse));
        debug_assert!(entry.source_said.is_some_and(|(o, _)| o == inv.o_ts));
        if refuse {
            let to = nack_targets(&inv, from);
            let nack = Nack {
                r_ts: inv.r_ts,
                o_ts: Some(inv.o_ts),
                reason: NackReason::PendingCommit,
                current: None,
            };
            return self.nack(ctx, fx, &to, key, nack);
        }
        let Some(data) = self.store.export(key) else {
            return self.drop_input(fx, DropReason::MissingData, from, "INV");
        };
        self.send_ack(ctx, key, &inv, Some(data), fx);
    }

    fn accept_inv(
        &mut self,
        ctx: &Context<'_>,
        from: NodeId,
        key: &K,
        inv: Inv,
        is_source: bool,
        fx: &mut Fx<K>,
    ) {
        let me = self.me;
        let is_owner = inv.o_replicas.owner == Some(me);
        let freezes = inv.r_type != ArbKind::Noop && (is_owner || is_source);
        let requester_gone = inv.r_type != ArbKind::Noop
            && (inv.requester_gone || self.requester_gone(ctx, inv.r_ts));
        let refused = freezes && self.store.has_pending_commit(key);
        let data = if is_source && !refused {
            match self.store.export(key) {
                Some(data) => Some(data),
                None => return self.drop_input(fx, DropReason::MissingData, from, "INV"),
            }
        } else {
            None
        };
        self.supersede(ctx, key, inv.o_ts, fx);
        let entry = self.entries.get_mut(key).expect("present");
        debug_assert!(inv.o_ts != entry.o_ts);
        entry.o_ts = inv.o_ts;
        entry.o_state = OState::Invalid;
        entry.o_replicas = inv.o_replicas.clone();
        entry.last_r_ts = inv.r_ts;
        if inv.r_type != ArbKind::Noop {
            let seen = entry.seen.entry(inv.r_ts.node).or_insert(0);
            *seen = (*seen).max(inv.r_ts.version);
        }
        entry.arb = Some(Arb {
            r_type: inv.r_type,
            driver: inv.driver,
            ackers: inv.ackers.clone(),
            data_from: inv.data_from,
            ack_to: inv.ack_to,
            create: inv.create,
            refused,
            no_data: false,
            replaying: false,
            requester_gone,
            since_ms: ctx.now_ms,
            collect: None,
        });
        debug_assert!(entry.seen.len() <= ctx.nodes.len() + 1);
        self.blocked.insert(key.clone());
        self.stats.invalidated += 1;
        if !refused {
            if let Some(after) = self.config.replay_after_ms {
                self.schedule(ctx, fx, ctx.now_ms.saturating_add(after));
            }
        }
        self.settle(ctx, key);
        if refused {
            // The owner NACKs a request for an object with a pending reliable
            // commit, to the requester and to whoever collects, so that a
            // driver releases the other arbiters (NOOP).
            let to = nack_targets(&inv, from);
            let nack = Nack {
                r_ts: inv.r_ts,
                o_ts: Some(inv.o_ts),
                reason: NackReason::PendingCommit,
                current: Some(Current {
                    o_ts: inv.o_ts,
                    r_ts: inv.r_ts,
                    valid: false,
                    o_replicas: inv.o_replicas.clone(),
                }),
            };
            return self.nack(ctx, fx, &to, key, nack);
        }
        self.send_ack(ctx, key, &inv, data, fx);
        if self.bugs.arbiters_apply_before_requester && inv.r_type != ArbKind::Noop {
            self.apply_val(ctx, key);
        }
    }

    /// We (the owner) refused the arbitration we hold, so it can never
    /// complete: release it (a directory replica), or send the proof, with
    /// its pre-vector, to its driver and the live directory replicas.
    fn prove_refusal(&mut self, ctx: &Context<'_>, key: &K, fx: &mut Fx<K>) {
        let entry = self.entries.get_mut(key).expect("present");
        let arb = entry.arb.as_mut().expect("a refused arbitration");
        debug_assert!(arb.refused);
        arb.since_ms = ctx.now_ms;
        let driver = arb.driver;
        let (o_ts, r_ts, pre) = (entry.o_ts, entry.last_r_ts, entry.o_replicas.clone());
        debug_assert!(pre.owner == Some(self.me));
        if self.dir(ctx, key).contains(&self.me) {
            return self.start_noop(ctx, key, o_ts, pre, NackReason::PendingCommit, fx);
        }
        let mut to = self.live_dir_others(ctx, key);
        if live(ctx, driver) {
            to.insert(driver);
        }
        if to.is_empty() {
            return;
        }
        let nack = Nack {
            r_ts,
            o_ts: Some(o_ts),
            reason: NackReason::PendingCommit,
            current: Some(Current {
                o_ts,
                r_ts,
                valid: false,
                o_replicas: pre,
            }),
        };
        self.nack(ctx, fx, &to, key, nack);
    }

    /// A greater arbitration replaces the one this node held: a driver or
    /// replayer of a request NACKs its requester (who may retry).
    fn supersede(&mut self, ctx: &Context<'_>, key: &K, by: OTs, fx: &mut Fx<K>) {
        let entry = self.entries.get(key).expect("present");
        let Some(arb) = &entry.arb else {
            return;
        };
        let leads = entry.o_state == OState::Drive || arb.replaying;
        let requester = entry.last_r_ts.node;
        if arb.refused
            || !leads
            || arb.r_type == ArbKind::Noop
            || arb.requester_gone
            || !live(ctx, requester)
        {
            return;
        }
        debug_assert!(by != entry.o_ts);
        debug_assert!(self.blocked.contains(key));
        let nack = Nack {
            r_ts: entry.last_r_ts,
            o_ts: Some(entry.o_ts),
            reason: NackReason::Superseded,
            current: None,
        };
        self.nack(ctx, fx, &BTreeSet::from([requester]), key, nack);
    }

    /// An arbiter applies the arbitration it holds (on VAL, or itself for a
    /// dead requester or a NOOP): the post-request sharer vector, `Valid`.
    fn apply_val(&mut self, ctx: &Context<'_>, key: &K) {
        let me = self.me;
        let keep_old_owner = self.config.old_owner_stays_reader;
        let entry = self.entries.get_mut(key).expect("present");
        let arb = entry.arb.take().expect("an arbitration to apply");
        debug_assert!(!arb.refused);
        debug_assert!(matches!(entry.o_state, OState::Invalid | OState::Drive));
        let requester = entry.last_r_ts.node;
        let was_holder = entry.o_replicas.holds(me);
        let mut post = entry
            .o_replicas
            .post_with(requester, arb.r_type, keep_old_owner);
        // A requester that left or restarted since: applied, then stripped
        // (its new incarnation, if any, holds nothing).
        let gone = arb.requester_gone;
        post.retain_live(|n| live(ctx, n) && !(gone && n == requester));
        entry.o_replicas = post;
        entry.o_state = OState::Valid;
        let holder = entry.o_replicas.holds(me);
        self.blocked.remove(key);
        self.recovery.remove(key);
        if was_holder && !holder {
            self.store.remove(key);
        }
        self.settle(ctx, key);
    }

    fn on_val(&mut self, ctx: &Context<'_>, from: NodeId, key: &K, val: Val, fx: &mut Fx<K>) {
        let dir = self.dir(ctx, key);
        let Some(entry) = self.entries.get(key) else {
            return self.drop_input(fx, DropReason::UnknownObject, from, "VAL");
        };
        let may_send =
            from == val.r_ts.node || dir.contains(&from) || entry.o_replicas.owner == Some(from);
        if !may_send {
            return self.drop_input(fx, DropReason::ForgedSender, from, "VAL");
        }
        debug_assert!(dir.len() <= self.config.directory_replicas);
        if from == val.r_ts.node && val.r_floor > 0 {
            // The requester moved past every attempt up to r_floor.
            let entry = self.entries.get_mut(key).expect("present");
            let seen = entry.seen.entry(from).or_insert(0);
            *seen = (*seen).max(val.r_floor);
            debug_assert!(entry.seen.len() <= ctx.nodes.len() + 1);
        }
        let entry = self.entries.get(key).expect("present");
        match val.o_ts.cmp(&entry.o_ts) {
            std::cmp::Ordering::Less => self.drop_input(fx, DropReason::Stale, from, "VAL"),
            std::cmp::Ordering::Greater => {
                // This node never accepted that arbitration, so it cannot
                // have completed with it as an arbiter.
                self.drop_input(fx, DropReason::ImpossibleOTs, from, "VAL")
            }
            std::cmp::Ordering::Equal => {
                if entry.last_r_ts != val.r_ts {
                    return self.drop_input(fx, DropReason::ConflictingOTs, from, "VAL");
                }
                match &entry.arb {
                    None => self.drop_input(fx, DropReason::Duplicate, from, "VAL"),
                    Some(arb) if arb.refused => {
                        self.drop_input(fx, DropReason::ConflictingOTs, from, "VAL")
                    }
                    Some(_) => self.apply_val(ctx, key),
                }
            }
        }
    }

    // ---- NACK, RESP -------------------------------------------------------

    fn on_nack(&mut self, ctx: &Context<'_>, from: NodeId, key: &K, nack: Nack, fx: &mut Fx<K>) {
        debug_assert!(nack
            .o_ts
            .is_none_or(|o| dir_contains_ts(&self.dir(ctx, key), o)));
        let mut used = false;
        // As requester.
        let current_attempt = self
            .requests
            .get(key)
            .is_some_and(|p| matches!(&p.phase, Phase::Requesting(a) if a.r_ts == nack.r_ts));
        if nack.r_ts.node == self.me && current_attempt && nack.reason != NackReason::Stale {
            used = true;
            self.requester_nacked(ctx, key, nack.reason, fx);
        }
        // As driver or replayer of the refused arbitration.
        if let Some(o_ts) = nack.o_ts {
            used |= self.arbiter_nacked(ctx, from, key, o_ts, &nack, fx);
        }
        if !used {
            self.drop_input(fx, DropReason::Stale, from, "NACK");
        }
        // The attempt a NACK answered is no longer the one in flight.
        debug_assert!(!self.requests.get(key).is_some_and(|p| {
            nack.r_ts.node == self.me
                && nack.reason != NackReason::Stale
                && matches!(&p.phase, Phase::Requesting(a) if a.r_ts == nack.r_ts)
        }));
    }

    fn arbiter_nacked(
        &mut self,
        ctx: &Context<'_>,
        from: NodeId,
        key: &K,
        o_ts: OTs,
        nack: &Nack,
        fx: &mut Fx<K>,
    ) -> bool {
        let me = self.me;
        let is_dir = self.dir(ctx, key).contains(&me);
        debug_assert_eq!(nack.o_ts, Some(o_ts));
        let Some(entry) = self.entries.get(key) else {
            return false;
        };
        debug_assert_eq!(entry.blocked(), self.blocked.contains(key));
        if nack.reason == NackReason::AlreadyExists {
            return self.forget_refused_create(ctx, from, key, o_ts, nack);
        }
        // Holds exactly the refused arbitration (not refused by us).
        let holds = entry.o_ts == o_ts
            && entry.last_r_ts == nack.r_ts
            && entry.arb.as_ref().is_some_and(|a| !a.refused);
        let source_refusal = nack.reason == NackReason::PendingCommit
            && holds
            && entry
                .arb
                .as_ref()
                .is_some_and(|a| a.data_from == Some(from))
            && entry.o_replicas.owner != Some(from);
        if source_refusal {
            let arb = entry.arb.as_ref().expect("held");
            if arb.replaying {
                // A replay: a reader's refusal does not prove that the
                // arbitration never completed (the requester may have
                // applied it, in an earlier epoch, with other rows). Finish
                // without the rows; the requester decides.
                let entry = self.entries.get_mut(key).expect("present");
                let arb = entry.arb.as_mut().expect("held");
                if let Some(collect) = arb.collect.as_mut() {
                    arb.no_data = true;
                    collect.got.insert(from);
                    self.collect_done(ctx, key, fx);
                }
            } else if is_dir && entry.o_state == OState::Drive {
                // We drive it on the fast path, which needs the source's
                // rows, and the source keeps refusing this arbitration: it
                // can never complete. (A mere arbiter proves nothing here:
                // the refusal may answer a replay of an arbitration that
                // completed long ago with other rows.)
                let pre = entry.o_replicas.clone();
                self.start_noop(ctx, key, o_ts, pre, NackReason::PendingCommit, fx);
            }
            return true;
        }
        // A proof that the arbitration can never complete: its owner (an
        // arbiter every completion needs) refused it and keeps refusing, or
        // its requester refused its win and never applies it. It carries the
        // arbitration's pre-vector, the latest completed state (a valid
        // driver bumped it), so any directory replica at or below it can
        // release it with a NOOP.
        let proof = matches!(nack.reason, NackReason::PendingCommit | NackReason::Refused);
        if proof && is_dir && entry.o_ts <= o_ts {
            let pre = if holds {
                entry.o_replicas.clone()
            } else {
                match &nack.current {
                    Some(current) if current.o_ts == o_ts => {
                        let mut pre = current.o_replicas.clone();
                        pre.retain_live(|n| live(ctx, n));
                        pre
                    }
                    _ => return false,
                }
            };
            let by_prover = match nack.reason {
                NackReason::PendingCommit => pre.owner == Some(from),
                _ => from == nack.r_ts.node && nack.r_ts.version > 0,
            };
            if !by_prover {
                self.drop_input(fx, DropReason::ForgedSender, from, "NACK");
                return true;
            }
            if entry.o_ts == o_ts && !holds {
                return false; // we refused it ourselves, or another request
            }
            self.start_noop(ctx, key, o_ts, pre, nack.reason, fx);
            return true;
        }
        match nack.reason {
            NackReason::Stale if holds => {
                let Some(current) = &nack.current else {
                    // Our requester is past it: ask the arbiters again (they
                    // applied it, or are past it too, and say so).
                    let replaying = entry.arb.as_ref().is_some_and(|a| a.replaying);
                    if replaying && from == nack.r_ts.node {
                        self.start_replay(ctx, key, fx);
                        return true;
                    }
                    return false;
                };
                // A directory replica is past our arbitration, so it can
                // no longer complete with us (or it did, and we lost its
                // VAL). If the directory's vector does not make us the owner,
                // we are no arbiter of what followed: adopt it (even while
                // that replica is mid-arbitration: its pre-vector is what
                // holds for us, a reader at most). A directory replica adopts
                // only a completed state: it missed that arbitration (it
                // restarted, say, and learned ours from a replay), and nobody
                // will send it again.
                // (Never an empty vector: that is the pre-vector of a
                // create, which an object that exists refuses.)
                let demoted = current.o_ts > entry.o_ts
                    && !current.o_replicas.is_empty()
                    && current.o_replicas.owner != Some(me)
                    && (current.valid || !is_dir)
                    && dir_contains_ts(&self.dir(ctx, key), current.o_ts);
                if !demoted || !self.dir(ctx, key).contains(&from) {
                    return false;
                }
                self.supersede(ctx, key, current.o_ts, fx);
                let entry = self.entries.get_mut(key).expect("present");
                if current.valid {
                    entry.o_ts = current.o_ts;
                    entry.last_r_ts = current.r_ts;
                }
                // Else keep our stamp: the replica's pending arbitration may
                // be ours to apply (a RESP may come for it).
                entry.o_state = OState::Valid;
                let was_holder = entry.o_replicas.holds(me);
                entry.o_replicas = current.o_replicas.clone();
                entry.arb = None;
                let holder = entry.o_replicas.holds(me);
                self.blocked.remove(key);
                self.recovery.remove(key);
                if was_holder && !holder {
                    self.store.remove(key);
                }
                self.settle(ctx, key);
                true
            }
            _ => false,
        }
    }

    fn on_resp(&mut self, ctx: &Context<'_>, from: NodeId, key: &K, resp: Resp, fx: &mut Fx<K>) {
        let dir = self.dir(ctx, key);
        if resp.r_ts.node != self.me {
            return self.drop_input(fx, DropReason::ForgedSender, from, "RESP");
        }
        let replayer = dir.contains(&from) || resp.o_replicas.owner == Some(from);
        if !replayer {
            return self.drop_input(fx, DropReason::ForgedSender, from, "RESP");
        }
        if !resp.val_to.contains(&from) || !resp.val_to.iter().all(|n| ctx.nodes.contains(n)) {
            return self.drop_input(fx, DropReason::Malformed, from, "RESP");
        }
        debug_assert!(dir_contains_ts(&dir, resp.o_ts), "checked by check_shape");
        debug_assert_eq!(resp.r_ts.node, self.me);
        self.requester_apply(
            ctx,
            from,
            key,
            Win {
                o_ts: resp.o_ts,
                r_ts: resp.r_ts,
                kind: resp.r_type,
                pre: resp.o_replicas,
                data: resp.data,
                val_to: resp.val_to,
            },
            fx,
        );
    }

    // ---- collection (replays, NOOPs) ----------------------------------------

    fn on_collector_ack(
        &mut self,
        ctx: &Context<'_>,
        from: NodeId,
        key: &K,
        ack: Ack,
        fx: &mut Fx<K>,
    ) {
        let entry = self.entries.get_mut(key).expect("present");
        let last_r_ts = entry.last_r_ts;
        let arb = entry.arb.as_mut().expect("collecting");
        debug_assert_eq!(entry.o_ts, ack.o_ts);
        if !arb.ackers.contains(&from) {
            return self.drop_input(fx, DropReason::UnexpectedAck, from, "ACK");
        }
        if ack.r_ts != last_r_ts
            || ack.r_type != arb.r_type
            || ack.ackers != arb.ackers
            || ack.data_from != arb.data_from
        {
            // An ACK of an earlier round with other ackers, or a forgery.
            return self.drop_input(fx, DropReason::Stale, from, "ACK");
        }
        let applied = ack.applied && matches!(arb.r_type, ArbKind::Request(_));
        match (&ack.data, arb.data_from == Some(from)) {
            (Some(_), false) => {
                return self.drop_input(fx, DropReason::UnexpectedData, from, "ACK")
            }
            // A source that applied it ships nothing: it completed.
            (None, true) if !applied => {
                return self.drop_input(fx, DropReason::MissingData, from, "ACK")
            }
            _ => {}
        }
        let collect = arb.collect.as_mut().expect("collecting");
        debug_assert!(collect.got.is_subset(&arb.ackers));
        if !collect.got.insert(from) {
            return self.drop_input(fx, DropReason::Duplicate, from, "ACK");
        }
        // An arbiter applied it: it completed (its requester applied it
        // first). It is finished here too, but only once every directory
        // replica among the ackers has answered: one that learned it from a
        // replay (it rejoined knowing nothing) may be behind the others,
        // which are past it and say so with their state (seed 1358, 7
        // nodes).
        collect.completed |= applied;
        if ack.data.is_some() {
            collect.data = ack.data;
        }
        self.collect_done(ctx, key, fx);
    }

    /// When every acker answered a replay or NOOP: RESP to a live requester,
    /// or apply it here and VAL the arbiters (NOOP, dead requester).
    fn collect_done(&mut self, ctx: &Context<'_>, key: &K, fx: &mut Fx<K>) {
        let me = self.me;
        let dir = self.dir(ctx, key);
        let entry = self.entries.get_mut(key).expect("present");
        let arb = entry.arb.as_mut().expect("collecting");
        let collect = arb.collect.as_ref().expect("collecting");
        debug_assert!(collect.got.is_subset(&arb.ackers));
        let rows_ready = arb.data_from.is_none() || collect.data.is_some() || arb.no_data;
        // Completed (an arbiter applied it): only the directory replicas'
        // answers still matter (one may be past it). The old owner or the
        // data source may have forgotten the object since, and never answer.
        let answered = if collect.completed {
            arb.ackers
                .iter()
                .filter(|n| dir.contains(n))
                .all(|n| collect.got.contains(n))
        } else {
            collect.got == arb.ackers && rows_ready
        };
        if !answered {
            return;
        }
        if !self.store.commit_recovery_done() {
            // A replay finishes only once the reliable commit's recovery
            // is over at every live node (the seed: ownership "starts
            // accepting again" then): until then a reader may lack a
            // version a failed coordinator's R-INV still carries to it,
            // and would become the owner without it. The replay timer
            // collects again.
            self.stats.replays_held_for_commit_recovery += 1;
            return;
        }
        let collect = arb.collect.take().expect("collecting");
        let val_to = val_targets(&arb.ackers, &entry.o_replicas, &dir);
        debug_assert!(val_to.contains(&me));
        let (o_ts, r_ts) = (entry.o_ts, entry.last_r_ts);
        let requester = r_ts.node;
        match arb.r_type {
            ArbKind::Request(kind)
                if live(ctx, requester) && !arb.requester_gone && !collect.completed =>
            {
                let resp = Resp {
                    o_ts,
                    r_ts,
                    r_type: kind,
                    o_replicas: entry.o_replicas.clone(),
                    val_to,
                    data: collect.data,
                };
                self.send(ctx, fx, requester, key, Body::Resp(resp));
            }
            r_type => {
                if matches!(r_type, ArbKind::Request(_)) && !collect.completed {
                    self.stats.finished_without_requester += 1;
                }
                self.apply_val(ctx, key);
                let val = Val {
                    o_ts,
                    r_ts,
                    r_floor: 0,
                };
                for &node in val_to.iter().filter(|&&n| n != me) {
                    self.send(ctx, fx, node, key, Body::Val(val.clone()));
                }
            }
        }
    }

    /// arb-replay: re-issue the held arbitration with the same `o_ts` to the
    /// live arbiters, collecting their ACKs here (the slow path).
    fn start_replay(&mut self, ctx: &Context<'_>, key: &K, fx: &mut Fx<K>) {
        if self.bugs.arbiter_never_replays {
            // Planted: the arbitration stays blocked (its stuck timer is
            // re-armed as if it had replayed, so time goes on).
            if let Some(arb) = self.entries.get_mut(key).and_then(|e| e.arb.as_mut()) {
                arb.since_ms = ctx.now_ms;
            }
            return;
        }
        let me = self.me;
        let dir = self.dir(ctx, key);
        let entry = self.entries.get(key).expect("present");
        let arb = entry.arb.as_ref().expect("an arbitration to replay");
        debug_assert!(!arb.refused);
        let pre = entry.o_replicas.clone();
        let requester = entry.last_r_ts.node;
        let requester_live = live(ctx, requester) && !arb.requester_gone;
        let needs_data = match arb.r_type {
            ArbKind::Request(kind) => {
                kind.wants_data() && requester_live && !arb.create && !pre.holds(requester)
            }
            ArbKind::Noop => false,
        };
        let data_from = needs_data
            .then(|| data_source(ctx, &pre, requester))
            .flatten();
        // Nobody else live holds the rows. The requester may have applied
        // already (in an earlier epoch), and then holds them: the replay
        // proceeds without, and the requester decides on the RESP.
        let no_data = needs_data && data_from.is_none();
        let ackers = ackers_for(ctx, &dir, &pre, data_from, me);
        debug_assert!(ackers.iter().all(|&n| live(ctx, n)));
        debug_assert!(!no_data || requester_live);
        let entry = self.entries.get_mut(key).expect("present");
        let arb = entry.arb.as_mut().expect("an arbitration to replay");
        arb.ackers = ackers;
        arb.data_from = data_from;
        arb.no_data = no_data;
        arb.replaying = true;
        arb.ack_to = me;
        arb.since_ms = ctx.now_ms;
        arb.collect = Some(Collect::default());
        self.stats.replays += 1;
        if let Some(after) = self.config.replay_after_ms {
            self.schedule(ctx, fx, ctx.now_ms.saturating_add(after));
        }
        self.send_round(ctx, key, fx);
    }

    /// NOOP: a directory replica releases the arbiters of an arbitration
    /// `dead` that can never complete (its owner refused it, its requester
    /// refused its win, or its data source refused on the fast path) by
    /// arbitrating a greater `o_ts` that changes nothing. This node either
    /// holds `dead` (its vector is `dead`'s pre-vector) or is valid below it
    /// (never saw it: its vector is that pre-vector too).
    fn start_noop(
        &mut self,
        ctx: &Context<'_>,
        key: &K,
        dead: OTs,
        pre: OReplicas,
        why: NackReason,
        fx: &mut Fx<K>,
    ) {
        let me = self.me;
        let dir = self.dir(ctx, key);
        debug_assert!(dir.contains(&me));
        let entry = self.entries.get(key).expect("present");
        debug_assert!(entry.o_ts <= dead);
        if let Some(arb) = &entry.arb {
            let requester = entry.last_r_ts.node;
            let told = live(ctx, requester) && !arb.requester_gone && !arb.refused;
            if matches!(arb.r_type, ArbKind::Request(_)) && told {
                let nack = Nack {
                    r_ts: entry.last_r_ts,
                    o_ts: Some(entry.o_ts),
                    reason: why,
                    current: None,
                };
                self.nack(ctx, fx, &BTreeSet::from([requester]), key, nack);
            }
        }
        let ackers = ackers_for(ctx, &dir, &pre, None, me);
        let entry = self.entries.get_mut(key).expect("present");
        let old = entry.o_ts;
        if entry.o_replicas.holds(me) && !pre.holds(me) {
            self.store.remove(key);
        }
        entry.o_replicas = pre;
        entry.o_ts = old
            .max(dead)
            .bumped_above(self.driven_floor, me, ctx.view.epoch);
        self.driven_floor = entry.o_ts.version;
        entry.o_state = OState::Drive;
        entry.last_r_ts = RTs {
            version: 0,
            node: me,
        };
        entry.arb = Some(Arb {
            r_type: ArbKind::Noop,
            driver: me,
            ackers,
            data_from: None,
            ack_to: me,
            create: false,
            refused: false,
            no_data: false,
            replaying: false,
            requester_gone: false,
            since_ms: ctx.now_ms,
            collect: Some(Collect::default()),
        });
        debug_assert!(entry.o_ts > old && entry.o_ts > dead);
        self.blocked.insert(key.clone());
        self.stats.noops += 1;
        self.recovery.remove(key);
        if let Some(after) = self.config.replay_after_ms {
            self.schedule(ctx, fx, ctx.now_ms.saturating_add(after));
        }
        self.settle(ctx, key);
        self.send_round(ctx, key, fx);
    }

    // ---- membership, timers -----------------------------------------------

    fn on_view_change(&mut self, ctx: &Context<'_>, fx: &mut Fx<K>) {
        if !ctx.member {
            return self.abandon(ctx, fx);
        }
        self.left = false;
        // The old epoch's fast-path ACKs are void.
        self.stray.clear();
        // A restarted node is a new member that holds nothing.
        let restarted: BTreeSet<NodeId> = ctx
            .view
            .members
            .iter()
            .filter(|(n, inc)| self.members.get(n).is_some_and(|old| old != *inc))
            .map(|(&n, _)| n)
            .collect();
        let left: Vec<NodeId> = self
            .members
            .keys()
            .copied()
            .filter(|n| !live(ctx, *n))
            .collect();
        let epoch = ctx.view.epoch.0;
        debug_assert!(self.members.is_empty() || self.members_epoch <= epoch);
        for &n in &left {
            // Its next incarnation joins in a later view than this one.
            self.gone_since.insert(n, epoch);
        }
        for &n in &restarted {
            // The new incarnation joined in some view after the one we knew,
            // maybe one we missed (cut off, or not a member meanwhile): only
            // attempts up to that view are surely the old incarnation's.
            // Dating the change to this view instead would strip a live
            // requester whose win its arbiters applied (seed 65, 5 nodes).
            let since = self.members_epoch.saturating_add(1).min(epoch);
            self.gone_since.insert(n, since);
        }
        // Members that joined or restarted since the last view we knew: as
        // directory replicas they know nothing yet.
        let fresh: BTreeSet<NodeId> = ctx
            .view
            .members
            .keys()
            .copied()
            .filter(|n| !self.members.contains_key(n) || restarted.contains(n))
            .collect();
        self.members = ctx.view.members.clone();
        self.members_epoch = epoch;
        let survived = |n: NodeId| live(ctx, n) && !restarted.contains(&n);
        // Dead nodes leave o_replicas (and the at-most-once memory).
        let keys: Vec<K> = self.entries.keys().cloned().collect();
        for key in &keys {
            let entry = self.entries.get_mut(key).expect("present");
            entry.o_replicas.retain_live(survived);
            entry.seen.retain(|&n, _| survived(n));
            debug_assert!(entry.o_replicas.owner.is_none_or(survived));
            self.settle(ctx, key);
        }
        debug_assert!(
            !restarted.contains(&self.me),
            "a restart is a new state machine"
        );
        // arb-replay of every arbitration this node holds, in the new epoch.
        self.recovery.clear();
        let held: Vec<K> = self.blocked.iter().cloned().collect();
        for key in &held {
            let r_ts = self.entries[key].last_r_ts;
            let gone = self.requester_gone(ctx, r_ts);
            let arb = self.entries.get_mut(key).and_then(|e| e.arb.as_mut());
            if let Some(arb) = arb {
                if matches!(arb.r_type, ArbKind::Request(_)) && gone {
                    arb.requester_gone = true;
                }
            }
        }
        for key in &held {
            let Some(entry) = self.entries.get(key) else {
                continue;
            };
            let refused = entry.arb.as_ref().is_some_and(|a| a.refused);
            if refused {
                // We (the owner) refused it: it can never complete. Release
                // it ourselves if we are a directory replica, else prove it to
                // them (its driver may be gone with our first NACK).
                self.prove_refusal(ctx, key, fx);
                continue;
            }
            self.recovery.insert(key.clone());
            self.start_replay(ctx, key, fx);
        }
        self.sync_fresh_replicas(ctx, &fresh, fx);
        // Requests: the old epoch's ACKs are void; the arbiters' replays
        // answer with RESP. Re-send the REQ (a dead driver: a new attempt).
        let requesting: Vec<K> = self
            .requests
            .iter()
            .filter(|(_, p)| matches!(p.phase, Phase::Requesting(_)))
            .map(|(k, _)| k.clone())
            .collect();
        for key in &requesting {
            let mut fresh_attempt = false;
            if let Some(Phase::Requesting(attempt)) =
                self.requests.get_mut(key).map(|p| &mut p.phase)
            {
                attempt.expect = None;
                attempt.got.clear();
                attempt.data = None;
                fresh_attempt = restarted.contains(&attempt.driver);
            }
            if fresh_attempt {
                // The driver forgot the attempt: a new one, elsewhere or not.
                let pending = self.requests.get_mut(key).expect("requesting");
                pending.phase = Phase::Backoff {
                    until_ms: ctx.now_ms,
                };
                self.start_attempt(ctx, key, fx);
            } else {
                self.resend_req(ctx, key, fx);
            }
        }
        debug_assert!(self.recovery.is_subset(&self.blocked));
    }

    /// Directory re-replication. A replica that joined or restarted knows
    /// none of its objects, and once the replicas that knew one have all
    /// left, a stale arbitration replayed into the empty ones would win
    /// (5-node seed 4094: one replica out, one restarted, then the last one
    /// that knew cut off). So the first replica (in placement order) that
    /// survived the view change, and the owner (an arbiter of every
    /// arbitration, so valid only at the latest one), send the fresh ones a
    /// SYNC with every valid object they know; a blocked object reaches
    /// them with its replay instead (its ackers are the live replicas).
    fn sync_fresh_replicas(&mut self, ctx: &Context<'_>, fresh: &BTreeSet<NodeId>, fx: &mut Fx<K>) {
        // SYNCs not answered yet go on to replicas still here (the view
        // change may have lost them); fresh ones get new ones.
        self.syncing
            .retain(|(_, n), _| live(ctx, *n) && !fresh.contains(n));
        if fresh.is_empty() || fresh.contains(&self.me) {
            return;
        }
        let me = self.me;
        let mut syncs = Vec::new();
        for (key, entry) in &self.entries {
            if entry.o_state != OState::Valid || entry.blocked() {
                continue;
            }
            let dir = self.dir(ctx, key);
            let first_survivor = dir
                .iter()
                .copied()
                .find(|&n| live(ctx, n) && !fresh.contains(&n));
            let owner = entry.o_replicas.owner == Some(me);
            if first_survivor != Some(me) && !owner {
                continue;
            }
            for &node in dir
                .iter()
                .filter(|&&n| n != me && fresh.contains(&n) && live(ctx, n))
            {
                syncs.push((key.clone(), node, entry.o_ts));
            }
        }
        debug_assert!(syncs.len() <= self.entries.len() * self.config.directory_replicas);
        for (key, node, o_ts) in syncs {
            self.syncing.insert((key.clone(), node), (o_ts, ctx.now_ms));
            self.send_sync(ctx, &key, node, fx);
        }
        debug_assert!(self.syncing.len() <= self.entries.len() * self.config.directory_replicas);
        if let Some(every) = self.config.retransmit_ms {
            if !self.syncing.is_empty() {
                self.schedule(ctx, fx, ctx.now_ms.saturating_add(every));
            }
        }
    }

    /// Sends (again) the SYNC of `key` to `node`, if the entry is still
    /// valid at the `o_ts` taught; else forgets it (what replaced it was
    /// arbitrated with `node` among the ackers, or taught by its driver).
    fn send_sync(&mut self, ctx: &Context<'_>, key: &K, node: NodeId, fx: &mut Fx<K>) {
        let slot = (key.clone(), node);
        let Some(&(o_ts, _)) = self.syncing.get(&slot) else {
            return;
        };
        let current = self
            .entries
            .get(key)
            .filter(|e| e.o_ts == o_ts && e.o_state == OState::Valid && !e.blocked())
            .map(|e| Current {
                o_ts: e.o_ts,
                r_ts: e.last_r_ts,
                valid: true,
                o_replicas: e.o_replicas.clone(),
            });
        let Some(current) = current.filter(|_| live(ctx, node)) else {
            self.syncing.remove(&slot);
            return;
        };
        self.syncing.insert(slot, (o_ts, ctx.now_ms));
        self.stats.synced += 1;
        let sync = Sync {
            current,
            answer: false,
        };
        self.send(ctx, fx, node, key, Body::Sync(sync));
    }

    /// A SYNC. A teacher's answer clears its retransmission. A directory
    /// replica adopts a completed state greater than its own: anything it
    /// holds below that is over (it completed before, or can never complete:
    /// every replica live when the taught state completed moved past it;
    /// only an empty directory could still let it win), and answers.
    fn on_sync(&mut self, ctx: &Context<'_>, from: NodeId, key: &K, sync: Sync, fx: &mut Fx<K>) {
        let me = self.me;
        let dir = self.dir(ctx, key);
        let current = sync.current;
        if sync.answer {
            let slot = (key.clone(), from);
            if self
                .syncing
                .get(&slot)
                .is_some_and(|&(o_ts, _)| o_ts == current.o_ts)
            {
                self.syncing.remove(&slot);
            } else {
                self.drop_input(fx, DropReason::Stale, from, "SYNC");
            }
            return;
        }
        if !dir.contains(&from) && current.o_replicas.owner != Some(from) {
            return self.drop_input(fx, DropReason::ForgedSender, from, "SYNC");
        }
        if !dir.contains(&me) {
            return self.drop_input(fx, DropReason::NotDirectory, from, "SYNC");
        }
        let answer = Sync {
            current: current.clone(),
            answer: true,
        };
        // A create we hold (an empty pre-vector) for an object a teacher
        // knows: it can never complete (the teacher refuses it), and what
        // is taught replaces it whatever its o_ts.
        let refused_create = |e: &Entry| {
            !current.o_replicas.is_empty()
                && e.o_replicas.is_empty()
                && e.arb.as_ref().is_some_and(|a| a.create)
        };
        match self.entries.get(key) {
            Some(entry) if entry.o_ts >= current.o_ts && !refused_create(entry) => {
                // Known, or past it: answered all the same.
                self.stats.count_drop(DropReason::Duplicate);
                return self.send(ctx, fx, from, key, Body::Sync(answer));
            }
            Some(_) => self.supersede(ctx, key, current.o_ts, fx),
            None => {
                if let Err(reason) = self.new_entry(key) {
                    return self.drop_input(fx, reason, from, "SYNC");
                }
            }
        }
        let entry = self.entries.get_mut(key).expect("present");
        let was_holder = entry.o_replicas.holds(me);
        entry.o_ts = current.o_ts;
        entry.last_r_ts = current.r_ts;
        entry.o_state = OState::Valid;
        entry.o_replicas = current.o_replicas;
        entry.o_replicas.retain_live(|n| live(ctx, n));
        entry.arb = None;
        let holder = entry.o_replicas.holds(me);
        self.blocked.remove(key);
        self.recovery.remove(key);
        if was_holder && !holder {
            self.store.remove(key);
        }
        debug_assert_eq!(self.entries[key].o_ts, current.o_ts);
        self.settle(ctx, key);
        self.send(ctx, fx, from, key, Body::Sync(answer));
    }

    /// This node left the view: it takes part in nothing any more (a
    /// restart comes back as a new member, with nothing).
    fn abandon(&mut self, ctx: &Context<'_>, fx: &mut Fx<K>) {
        let keys: Vec<K> = self.requests.keys().cloned().collect();
        for key in &keys {
            self.fail(ctx, key, FailReason::NotServing, fx);
        }
        let keys: Vec<K> = self.entries.keys().cloned().collect();
        for key in &keys {
            self.store.access_changed(key, Access::None, None);
        }
        self.entries.clear();
        self.blocked.clear();
        self.recovery.clear();
        // Nor does it follow the views while out: the incarnation changes
        // it would find against the last view it saw, when it is a member
        // again, may have happened epochs earlier, so it would take live
        // requesters for gone (and apply, without them, requests the others
        // wait on). Back in, it knows no more than a new process, and trusts
        // the drivers' word on who is gone, as one does.
        self.members.clear();
        self.gone_since.clear();
        self.stray.clear();
        self.syncing.clear();
        self.left = true;
        // Back in a view, this node is a new member to the others (they
        // noted it leave): wins of its attempts from before are a dead
        // requester's, never its own to apply.
        self.r_ts_base = None;
        debug_assert!(self.requests.is_empty());
        debug_assert!(self.entries.is_empty());
    }

    fn on_tick(&mut self, ctx: &Context<'_>, fx: &mut Fx<K>) {
        let now = ctx.now_ms;
        debug_assert!(self.loopback.is_empty());
        self.armed_at = None;
        let keys: Vec<K> = self.requests.keys().cloned().collect();
        for key in &keys {
            let pending = &self.requests[key];
            if self
                .config
                .request_timeout_ms
                .is_some_and(|t| now >= pending.started_ms.saturating_add(t))
            {
                self.fail(ctx, key, FailReason::TimedOut, fx);
                continue;
            }
            match &pending.phase {
                Phase::Backoff { until_ms } if now >= *until_ms => {
                    self.start_attempt(ctx, key, fx);
                }
                Phase::Requesting(attempt)
                    if self
                        .config
                        .retransmit_ms
                        .is_some_and(|r| now >= attempt.sent_ms.saturating_add(r)) =>
                {
                    self.resend_req(ctx, key, fx);
                }
                _ => {}
            }
        }
        if let Some(after) = self.config.replay_after_ms {
            let stuck: Vec<K> = self
                .blocked
                .iter()
                .filter(|k| {
                    let arb = self.entries[*k].arb.as_ref().expect("blocked");
                    now >= arb.since_ms.saturating_add(after)
                })
                .cloned()
                .collect();
            for key in &stuck {
                let Some(entry) = self.entries.get(key).filter(|e| e.blocked()) else {
                    continue;
                };
                if entry.arb.as_ref().is_some_and(|a| a.refused) {
                    // Our refusal (or its proof) may have been lost.
                    self.prove_refusal(ctx, key, fx);
                } else {
                    // A lost VAL or ACK: replay in the current epoch.
                    self.start_replay(ctx, key, fx);
                }
            }
        }
        if let Some(every) = self.config.retransmit_ms {
            let due: Vec<(K, NodeId)> = self
                .syncing
                .iter()
                .filter(|(_, &(_, sent_ms))| now >= sent_ms.saturating_add(every))
                .map(|(slot, _)| slot.clone())
                .collect();
            for (key, node) in due {
                self.send_sync(ctx, &key, node, fx);
            }
        }
        // No backoff that ended is left waiting.
        debug_assert!(!self
            .requests
            .values()
            .any(|p| matches!(p.phase, Phase::Backoff { until_ms } if until_ms <= now)));
        debug_assert!(self.armed_at.is_none_or(|at| at >= now));
    }

    fn on_message(
        &mut self,
        ctx: &Context<'_>,
        from: NodeId,
        msg: OwnershipMsg<K>,
        fx: &mut Fx<K>,
    ) {
        let what = msg.body.name();
        if msg.version != WIRE_VERSION {
            return self.drop_input(fx, DropReason::UnsupportedVersion, from, what);
        }
        if !ctx.member {
            return self.drop_input(fx, DropReason::NotMember, from, what);
        }
        if msg.epoch != ctx.view.epoch {
            return self.drop_input(fx, DropReason::WrongEpoch, from, what);
        }
        if from != self.me && !live(ctx, from) {
            return self.drop_input(fx, DropReason::SenderNotMember, from, what);
        }
        if let Err(reason) = self.check_shape(ctx, &msg) {
            return self.drop_input(fx, reason, from, what);
        }
        let key = msg.key;
        let before = self.entries.get(&key).map(|e| e.o_ts);
        self.dispatch(ctx, from, key.clone(), msg.body, fx);
        // o_ts only grows at an entry (the planted bug aside).
        let after = self.entries.get(&key).map(|e| e.o_ts);
        debug_assert!(
            self.bugs.arbiter_accepts_smaller_o_ts
                || !matches!((before, after), (Some(b), Some(a)) if a < b),
            "o_ts went back from {before:?} to {after:?}"
        );
        debug_assert!(self.blocked.iter().all(|k| self.entries.contains_key(k)));
    }

    fn dispatch(&mut self, ctx: &Context<'_>, from: NodeId, key: K, body: Body, fx: &mut Fx<K>) {
        let what = body.name();
        debug_assert!(from == self.me || live(ctx, from));
        debug_assert!(ctx.member);
        match body {
            Body::Req(req) => self.on_req(ctx, from, &key, req, fx),
            Body::Inv(inv) => self.on_inv(ctx, from, &key, inv, fx),
            Body::Ack(ack) => {
                let collecting = self.entries.get(&key).is_some_and(|e| {
                    e.o_ts == ack.o_ts && e.arb.as_ref().is_some_and(|a| a.collect.is_some())
                });
                let requesting = ack.r_ts.node == self.me
                    && self.requests.get(&key).is_some_and(
                        |p| matches!(&p.phase, Phase::Requesting(a) if a.r_ts == ack.r_ts),
                    );
                let ours = ack.r_ts.node == self.me
                    && ack.r_ts.version <= self.last_r_ts
                    && self.r_ts_base.is_some_and(|b| ack.r_ts.version >= b);
                if collecting {
                    self.on_collector_ack(ctx, from, &key, ack, fx);
                } else if requesting {
                    self.on_requester_ack(ctx, from, &key, ack, fx);
                } else if ours && matches!(ack.r_type, ArbKind::Request(_)) {
                    self.on_stray_ack(ctx, from, &key, ack, fx);
                } else {
                    self.drop_input(fx, DropReason::Stale, from, what);
                }
            }
            Body::Val(val) => self.on_val(ctx, from, &key, val, fx),
            Body::Nack(nack) => self.on_nack(ctx, from, &key, nack, fx),
            Body::Resp(resp) => self.on_resp(ctx, from, &key, resp, fx),
            Body::Sync(sync) => self.on_sync(ctx, from, &key, sync, fx),
        }
    }

    /// Limits and the `o_ts` every arbitration message must plausibly have.
    fn check_shape(&self, ctx: &Context<'_>, msg: &OwnershipMsg<K>) -> Result<(), DropReason> {
        let nodes = ctx.nodes;
        let known_set = |set: &BTreeSet<NodeId>| {
            if set.len() > nodes.len() {
                Err(DropReason::Oversized)
            } else if set.iter().all(|n| nodes.contains(n)) {
                Ok(())
            } else {
                Err(DropReason::Malformed)
            }
        };
        let known_replicas = |v: &OReplicas| {
            known_set(&v.readers)?;
            match v.owner {
                Some(o) if !nodes.contains(&o) => Err(DropReason::Malformed),
                Some(o) if v.readers.contains(&o) => Err(DropReason::Malformed),
                _ => Ok(()),
            }
        };
        let data_ok = |d: &Option<ObjectData>| match d {
            Some(d) if d.payload_len() > self.config.max_data_bytes => Err(DropReason::Oversized),
            _ => Ok(()),
        };
        let dir = self.dir(ctx, &msg.key);
        debug_assert!(!dir.is_empty() || nodes.is_empty());
        debug_assert!(dir.len() <= self.config.directory_replicas);
        if let Some(o_ts) = msg.body.o_ts() {
            if !dir_contains_ts(&dir, o_ts) {
                return Err(DropReason::ImpossibleOTs);
            }
        }
        match &msg.body {
            Body::Req(_) | Body::Val(_) => Ok(()),
            Body::Inv(m) => {
                known_set(&m.ackers)?;
                known_replicas(&m.o_replicas)?;
                if m.ackers.is_empty() {
                    return Err(DropReason::Malformed);
                }
                Ok(())
            }
            Body::Ack(m) => {
                known_set(&m.ackers)?;
                known_replicas(&m.o_replicas)?;
                data_ok(&m.data)
            }
            Body::Nack(m) => match &m.current {
                Some(c) => {
                    known_replicas(&c.o_replicas)?;
                    if c.o_ts != OTs::ZERO && !dir_contains_ts(&dir, c.o_ts) {
                        return Err(DropReason::ImpossibleOTs);
                    }
                    Ok(())
                }
                None => Ok(()),
            },
            Body::Resp(m) => {
                known_set(&m.val_to)?;
                known_replicas(&m.o_replicas)?;
                data_ok(&m.data)
            }
            Body::Sync(m) => {
                known_replicas(&m.current.o_replicas)?;
                if !m.current.valid {
                    return Err(DropReason::Malformed);
                }
                Ok(())
            }
        }
    }

    fn drain_loopback(&mut self, ctx: &Context<'_>, fx: &mut Fx<K>) {
        let items = self.loopback.len() + self.requests.len() + self.blocked.len();
        let limit = MAX_LOOPBACK + LOOPBACK_PER_ITEM * items;
        let mut handled = 0usize;
        while let Some(msg) = self.loopback.pop_front() {
            handled += 1;
            assert!(handled <= limit, "ownership loopback does not settle");
            self.on_message(ctx, self.me, msg, fx);
        }
        debug_assert!(self.loopback.is_empty());
    }
}

/// A won arbitration, as the requester applies it.
struct Win {
    o_ts: OTs,
    r_ts: RTs,
    kind: RequestKind,
    pre: OReplicas,
    data: Option<ObjectData>,
    val_to: BTreeSet<NodeId>,
}

impl Win {
    /// The win every ACK of attempt `r_ts` agreed on (`expect`), with the
    /// rows its data source shipped.
    fn of(expect: Expect, r_ts: RTs, data: Option<ObjectData>, dir: &[NodeId]) -> Win {
        let ArbKind::Request(kind) = expect.r_type else {
            unreachable!("only ACKs of requests are collected by a requester");
        };
        let val_to = val_targets(&expect.ackers, &expect.o_replicas, dir);
        Win {
            o_ts: expect.o_ts,
            r_ts,
            kind,
            pre: expect.o_replicas,
            data,
            val_to,
        }
    }
}

fn access_of(entry: &Entry, me: NodeId) -> Access {
    if !entry.o_replicas.holds(me) {
        return Access::None;
    }
    if entry.o_state != OState::Valid {
        return Access::Invalid;
    }
    debug_assert!(entry.arb.is_none(), "a valid entry holds no arbitration");
    if entry.o_replicas.owner == Some(me) {
        debug_assert!(!entry.o_replicas.readers.contains(&me));
        Access::Owner
    } else {
        Access::Reader
    }
}

/// The request is already in effect at `me` (no message needed).
fn satisfied(entry: &Entry, me: NodeId, kind: RequestKind) -> Option<OTs> {
    let valid = entry.o_state == OState::Valid;
    debug_assert!(!valid || entry.arb.is_none());
    let done = match kind {
        RequestKind::AddOwner | RequestKind::ChangeOwner => {
            valid && entry.o_replicas.owner == Some(me)
        }
        RequestKind::AddReader => valid && entry.o_replicas.holds(me),
        RequestKind::RemoveReader => !entry.o_replicas.holds(me) && !entry.blocked(),
    };
    debug_assert!(!done || kind == RequestKind::RemoveReader || valid);
    done.then_some(entry.o_ts)
}

/// A plausible arbitration stamp: bumped by one of the object's directory
/// replicas.
fn dir_contains_ts(dir: &[NodeId], o_ts: OTs) -> bool {
    o_ts.version > 0 && dir.contains(&o_ts.node)
}

/// Who ships the rows: the owner if live, else the first live reader (never
/// the requester itself).
fn data_source(ctx: &Context<'_>, pre: &OReplicas, requester: NodeId) -> Option<NodeId> {
    let source = match pre.owner {
        Some(owner) if owner != requester && live(ctx, owner) => Some(owner),
        _ => pre
            .readers
            .iter()
            .copied()
            .find(|&r| r != requester && live(ctx, r)),
    };
    debug_assert!(source.is_none_or(|s| s != requester && pre.holds(s)));
    debug_assert!(source.is_none_or(|s| live(ctx, s)));
    source
}

/// Everyone whose ACK an arbitration needs: the live directory replicas, the
/// live owner, the data source, and the collector/driver itself.
fn ackers_for(
    ctx: &Context<'_>,
    dir: &[NodeId],
    pre: &OReplicas,
    data_from: Option<NodeId>,
    me: NodeId,
) -> BTreeSet<NodeId> {
    let mut ackers: BTreeSet<NodeId> = dir.iter().copied().filter(|&n| live(ctx, n)).collect();
    if let Some(owner) = pre.owner.filter(|&o| live(ctx, o)) {
        ackers.insert(owner);
    }
    ackers.extend(data_from);
    ackers.insert(me);
    debug_assert!(ackers.len() <= dir.len() + 3);
    debug_assert!(data_from.is_none_or(|d| ackers.contains(&d)));
    ackers
}

/// The arbiters among the ackers (VAL goes to them, not to a reader that
/// only shipped data).
fn val_targets(ackers: &BTreeSet<NodeId>, pre: &OReplicas, dir: &[NodeId]) -> BTreeSet<NodeId> {
    let targets: BTreeSet<NodeId> = ackers
        .iter()
        .copied()
        .filter(|n| dir.contains(n) || pre.owner == Some(*n))
        .collect();
    debug_assert!(targets.is_subset(ackers));
    debug_assert!(targets.len() <= dir.len() + 1);
    targets
}

/// Where a refusal goes: the requester, the driver and whoever collects.
fn nack_targets(inv: &Inv, from: NodeId) -> BTreeSet<NodeId> {
    let mut to = BTreeSet::from([inv.ack_to, inv.driver, from]);
    if inv.r_type != ArbKind::Noop {
        to.insert(inv.r_ts.node);
    }
    debug_assert!(to.contains(&inv.ack_to) && to.contains(&from));
    debug_assert!(to.len() <= 4);
    to
}

impl<K: ObjectKey, S: ObjectStore<K>> Protocol for Ownership<K, S> {
    type Msg = OwnershipMsg<K>;
    type Cmd = OwnershipCmd<K>;
    type Out = OwnershipOut<K>;

    fn on_input(&mut self, ctx: &Context<'_>, input: Input<Self::Msg, Self::Cmd>, fx: &mut Fx<K>) {
        assert_eq!(ctx.me, self.me, "a protocol runs at one node");
        debug_assert!(self.loopback.is_empty());
        if self.members.is_empty() && ctx.member && !matches!(input, Input::ViewChange) {
            // The view this node runs in, whether or not its install was
            // announced (incarnation changes are detected against it).
            self.members = ctx.view.members.clone();
            self.members_epoch = ctx.view.epoch.0;
        }
        if self.r_ts_base.is_none() && ctx.member {
            self.r_ts_base = Some(ctx.view.epoch.0 << 32);
        }
        match input {
            Input::Message { from, msg } => self.on_message(ctx, from, msg, fx),
            Input::Timer(TICK_TIMER) => self.on_tick(ctx, fx),
            Input::Timer(_) => {}
            Input::ViewChange => self.on_view_change(ctx, fx),
            Input::Command(cmd) => self.on_command(ctx, cmd, fx),
        }
        self.drain_loopback(ctx, fx);
        if self.armed_at.is_none() {
            if let Some(at) = self.next_deadline() {
                self.schedule(ctx, fx, at.max(ctx.now_ms));
            }
        }
        debug_assert!(self.blocked.iter().all(|k| self.entries.contains_key(k)));
        debug_assert!(self.requests.len() <= self.config.max_pending_requests);
    }
}

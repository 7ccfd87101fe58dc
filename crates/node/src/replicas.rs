//! The replication degree: how many nodes hold each reactor (its owner and
//! its readers, the followers of its reliable commits).
//!
//! The owner keeps the count. On a timer it visits the reactors it owns a
//! bounded batch at a time; for one with fewer live readers than the degree
//! asks for, it asks the missing nodes (the first live ones in the
//! reactor's rendezvous order that are not readers yet) to become readers
//! (`BecomeReader`), and a node asked runs the ownership protocol's
//! add-reader, which ships it the reactor's rows. For one with more, it
//! asks the readers last in that order to leave (`StopReading`: the
//! protocol's remove-reader). Readers come and go only through the
//! ownership protocol, so its metadata always names them, and the reliable
//! commit's followers are exactly they. A node that restarted, or one a
//! view change dropped, gets its replicas back the same way.
//!
//! A reactor whose owner died has no owner until a transaction writes it,
//! and so nobody to keep its count: its first live reader in rendezvous
//! order (one node, by the same rule everywhere) takes ownership itself
//! (the protocol's add-owner, arbitrated like any request), and then keeps
//! the count as above.
//!
//! The degree is per reactor type (default 3: owner plus two readers),
//! capped by the live members, and changeable at run time
//! (`GET /replication/degree?degree=N[&type=T]` on each node, or
//! [`ZeusCmd::SetDegree`](crate::ZeusCmd::SetDegree)).

use std::collections::{BTreeMap, HashMap};

use roost_cluster::{Context, Effects, NodeId, TimerId};
use roost_ownership::{directory, Access, OState, OwnershipCmd, ReqId, RequestKind};
use thiserror::Error;

use crate::commit::{ZeusMsg, ZeusOut};
use crate::zeus::{NodeOwnership, NodeReactor};

/// The replica manager's timer.
pub const REPLICA_TIMER: TimerId = 0x7265_706c_6963_6173;
/// Ownership requests the replica manager makes carry ids from here up, so
/// that no caller's request id is ever answered by one of them.
pub const INTERNAL_REQUESTS: u64 = 1 << 62;

/// Tunables of the replication degree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicationConfig {
    /// Copies of a reactor (owner and readers) unless its type says
    /// otherwise.
    pub degree: usize,
    /// The degree of the reactors of a type.
    pub degree_by_type: BTreeMap<String, usize>,
    /// Period of the owner's check.
    pub check_ms: u64,
    /// Metadata entries one check visits at most.
    pub checks_per_tick: usize,
    /// An unanswered ask for a reactor is repeated after this long.
    pub ask_again_ms: u64,
    /// Reactors with an ask outstanding, at most.
    pub max_asks: usize,
}

impl Default for ReplicationConfig {
    fn default() -> Self {
        ReplicationConfig {
            degree: 3,
            degree_by_type: BTreeMap::new(),
            check_ms: 50,
            checks_per_tick: 512,
            ask_again_ms: 1_000,
            max_asks: 4_096,
        }
    }
}

/// A replication setting that cannot hold.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DegreeError {
    #[error("a replication degree must be at least 1 (the owner), not {0}")]
    Zero(usize),
    #[error("{field} must be at least 1")]
    ZeroBound { field: &'static str },
}

impl ReplicationConfig {
    pub fn validate(&self) -> Result<(), DegreeError> {
        if self.degree == 0 {
            return Err(DegreeError::Zero(0));
        }
        if self.degree_by_type.values().any(|d| *d == 0) {
            return Err(DegreeError::Zero(0));
        }
        for (field, value) in [
            ("check_ms", self.check_ms as usize),
            ("checks_per_tick", self.checks_per_tick),
            ("ask_again_ms", self.ask_again_ms as usize),
            ("max_asks", self.max_asks),
        ] {
            if value == 0 {
                return Err(DegreeError::ZeroBound { field });
            }
        }
        Ok(())
    }

    /// Copies wanted of a reactor of `reactor_type`.
    pub fn degree_of(&self, reactor_type: &str) -> usize {
        self.degree_by_type
            .get(reactor_type)
            .copied()
            .unwrap_or(self.degree)
    }
}

/// The owner's side (asks) and the asked node's side (requests).
pub(crate) struct ReplicaManager {
    pub(crate) config: ReplicationConfig,
    /// Where the next check resumes (key order).
    cursor: Option<NodeReactor>,
    /// Reactors asked about, and when (ms).
    asked: HashMap<NodeReactor, u64>,
    armed: bool,
    next_internal: u64,
    pub(crate) asks_sent: u64,
    pub(crate) requests_made: u64,
}

impl ReplicaManager {
    pub(crate) fn new(config: ReplicationConfig) -> Self {
        ReplicaManager {
            config,
            cursor: None,
            asked: HashMap::new(),
            armed: false,
            next_internal: INTERNAL_REQUESTS,
            asks_sent: 0,
            requests_made: 0,
        }
    }

    /// Arms the check timer once this node is a member.
    pub(crate) fn arm(&mut self, ctx: &Context<'_>, fx: &mut Effects<ZeusMsg, ZeusOut>) {
        if !self.armed && ctx.member {
            self.armed = true;
            fx.set_timer(REPLICA_TIMER, self.config.check_ms);
        }
    }

    /// The check: visits a batch of entries, asks for missing readers and
    /// for surplus ones to leave, then re-arms. Returns the ownership
    /// requests to make here: add-owner for the ownerless reactors this
    /// node is to adopt.
    pub(crate) fn on_tick(
        &mut self,
        ctx: &Context<'_>,
        ownership: &NodeOwnership,
        fx: &mut Effects<ZeusMsg, ZeusOut>,
    ) -> Vec<OwnershipCmd<NodeReactor>> {
        self.armed = false;
        self.arm(ctx, fx);
        if !ctx.serving {
            return Vec::new();
        }
        let now = ctx.now_ms;
        let again = self.config.ask_again_ms;
        self.asked.retain(|_, at| now.saturating_sub(*at) < again);
        let live: Vec<NodeId> = ctx.view.members.keys().copied().collect();
        let batch: Vec<(NodeReactor, Access)> = ownership
            .accesses_after(self.cursor.as_ref())
            .take(self.config.checks_per_tick)
            .map(|(k, a)| (k.clone(), a))
            .collect();
        // A short batch reached the end: start over next time.
        self.cursor = if batch.len() < self.config.checks_per_tick {
            None
        } else {
            batch.last().map(|(k, _)| k.clone())
        };
        let mut adopt = Vec::new();
        for (key, access) in batch {
            if self.asked.len() >= self.config.max_asks {
                break;
            }
            if self.asked.contains_key(&key) {
                continue;
            }
            match access {
                Access::Owner => self.check(ctx, ownership, &key, &live, fx),
                Access::Reader if self.adopts(ctx, ownership, &key, &live) => {
                    let req = ReqId(self.next_internal);
                    self.next_internal += 1;
                    self.requests_made += 1;
                    self.asked.insert(key.clone(), now);
                    adopt.push(OwnershipCmd::Acquire {
                        key,
                        req,
                        kind: RequestKind::AddOwner,
                    });
                }
                _ => {}
            }
        }
        debug_assert!(self.asked.len() <= self.config.max_asks);
        debug_assert!(adopt.len() <= self.config.checks_per_tick);
        adopt
    }

    /// Whether this reader is to take ownership of `key`: it has no live
    /// owner, nothing is moving it, and this node is its first live reader
    /// in rendezvous order.
    fn adopts(
        &self,
        ctx: &Context<'_>,
        ownership: &NodeOwnership,
        key: &NodeReactor,
        live: &[NodeId],
    ) -> bool {
        let Some(meta) = ownership.meta(key) else {
            return false;
        };
        let orphan = meta.o_replicas.owner.is_none_or(|o| !live.contains(&o));
        if !orphan || meta.o_state != OState::Valid || ownership.is_requesting(key) {
            return false;
        }
        let first = directory(key, live, live.len())
            .into_iter()
            .find(|n| meta.o_replicas.readers.contains(n));
        first == Some(ctx.me)
    }

    fn check(
        &mut self,
        ctx: &Context<'_>,
        ownership: &NodeOwnership,
        key: &NodeReactor,
        live: &[NodeId],
        fx: &mut Effects<ZeusMsg, ZeusOut>,
    ) {
        let Some(meta) = ownership.meta(key) else {
            return;
        };
        debug_assert_eq!(
            meta.o_replicas.owner,
            Some(ctx.me),
            "checked for owned ones"
        );
        let want = (self.config.degree_of(key.0.reactor_type()) - 1).min(live.len() - 1);
        let readers: Vec<NodeId> = meta
            .o_replicas
            .readers
            .iter()
            .copied()
            .filter(|r| live.contains(r))
            .collect();
        if readers.len() == want {
            return;
        }
        // The reactor's preferred holders: its rendezvous order over the
        // live members, the owner left out.
        let order: Vec<NodeId> = directory(key, live, live.len())
            .into_iter()
            .filter(|n| *n != ctx.me)
            .collect();
        if readers.len() < want {
            for to in order
                .iter()
                .filter(|n| !readers.contains(n))
                .take(want - readers.len())
            {
                fx.send(*to, ZeusMsg::BecomeReader { key: key.clone() });
                self.asks_sent += 1;
            }
        } else {
            for to in order
                .iter()
                .rev()
                .filter(|n| readers.contains(n))
                .take(readers.len() - want)
            {
                fx.send(*to, ZeusMsg::StopReading { key: key.clone() });
                self.asks_sent += 1;
            }
        }
        self.asked.insert(key.clone(), ctx.now_ms);
    }

    /// The ownership request an ask turns into here (`None`: nothing to do).
    pub(crate) fn on_ask(
        &mut self,
        ownership: &NodeOwnership,
        key: NodeReactor,
        become_reader: bool,
    ) -> Option<OwnershipCmd<NodeReactor>> {
        if ownership.is_requesting(&key) {
            return None;
        }
        let access = ownership.access(&key);
        let kind = match (become_reader, access) {
            (true, Access::None) => RequestKind::AddReader,
            (false, Access::Reader) => RequestKind::RemoveReader,
            _ => return None,
        };
        let req = ReqId(self.next_internal);
        self.next_internal += 1;
        self.requests_made += 1;
        debug_assert!(req.0 >= INTERNAL_REQUESTS);
        Some(OwnershipCmd::Acquire { key, req, kind })
    }
}

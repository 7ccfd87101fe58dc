//! Static membership with a lease-based failure detector, as the Zeus paper's
//! reliable membership: every membership update is tagged with a monotonically
//! increasing epoch id, and a node is removed only after its lease has expired,
//! so all nodes of an epoch share one view of who is live despite an
//! unreliable failure detector.
//!
//! **Leases.** A node `X` sends `Heartbeat`s every `heartbeat_interval_ms` to
//! every configured node. A member `P` of the same epoch answers with a
//! `HeartbeatAck`, a *grant* valid until the heartbeat's send time plus
//! `lease_duration_ms` on `X`'s clock. `X` holds a lease while grants from a
//! majority of the configured nodes (itself included) are valid, and serves
//! only while it is a member of its view and holds its lease.
//!
//! **Declaring a node dead.** `P` declares member `X` dead in its epoch when it
//! has not heard `X` for `suspect_after_ms` *and* its last grant to `X` has
//! expired (plus `clock_drift_margin_ms`); from then on `P` grants `X` nothing
//! in that epoch. Heartbeats carry the sender's declarations. Once a majority
//! has declared `X` dead, at most a minority can still grant `X`, so `X`'s
//! lease has lapsed: it may be removed.
//!
//! **View changes.** The coordinator (the lowest id among this node and the
//! peers it hears) proposes the next epoch's members: the current ones minus
//! those a majority declared dead, plus configured nodes it hears that have
//! caught up with the current epoch. It also proposes when that set is the
//! current one but a member in it was declared dead by a majority (heard
//! again, same incarnation): declarations are final for an epoch, so only a
//! new one lets that member hold a lease again. The view of epoch `e + 1` is
//! chosen by single-decree Paxos among the member slots of view `e` (ballots
//! `(round, node)`; `Prepare`/`Promise`, then `Propose`/`Accept` by a
//! majority of them), so two nodes never install different views for one
//! epoch. The chosen view spreads with the heartbeats (only installed views
//! travel in them).
//!
//! **Stable storage.** A Paxos acceptor's promise and vote must outlive its
//! process. Whenever its durable state changes (the installed view; the
//! promised ballot and accepted `(ballot, view)` for the next epoch; the
//! highest round it proposed in; the lineage, below), the state machine
//! hands the whole [`AcceptorRecord`] out in [`MembershipOut::persist`]; the
//! driver makes it durable **before** it sends that call's messages, and
//! gives the last one back to [`Membership::new`] after a restart. A process
//! that recovers a record keeps its promise and vote, and proposes above its
//! old rounds (one ballot never carries two values). The runtime keeps the
//! record in the node's state directory ([`crate::state_dir`], `roost node
//! --data-dir`); the simulator on each node's simulated disk.
//!
//! **A restarted process votes as its predecessor.** A process that
//! recovers an installed view adopts it; it is a new incarnation, no member
//! of it, and joins in a later epoch like any restarted process. Meanwhile
//! it is the Paxos acceptor of its node's slot in that view, `(node, old
//! incarnation)` ([`Membership::votes_as`]; its `Promise`s and `Accept`s
//! name that slot), so a majority of a view's members restarted at once (a
//! whole cluster, any restart of a lone node) still chooses the next view,
//! which by the rules above drops the old incarnations once their leases
//! lapsed and admits the new ones. Why this is safe:
//!
//! * *Paxos needs each voter's promises and votes to form one history.* The
//!   slot's history is the record: every process of the node writes it
//!   before it sends a `Promise` or `Accept`, a process starts from the last
//!   one written, and only one process of a node runs at a time (the state
//!   directory's lock; the simulator boots a node only when it is down). So
//!   the processes acting for a slot, one after another, are one acceptor
//!   that never forgets, as if the old incarnation had never stopped.
//! * *A record holds only the votes of its lineage.* The record is per node
//!   id, but a process that started without one (a first start, a wiped or
//!   lost directory) knows nothing its predecessors promised. So a record
//!   lists its lineage: the incarnations from the last start without a
//!   record on, each process adding its own (written at its first call,
//!   before any vote). A process votes as its node's slot only if the slot's
//!   incarnation is in its lineage; an earlier slot's votes may be lost, and
//!   its heir stays silent on that epoch, as before. The lineage keeps the
//!   last [`MAX_LINEAGE`] incarnations and the node's slots in the installed
//!   and accepted views (a bound; dropping one costs liveness, never safety).
//! * *It never serves as the old member.* Voting is all it does for the
//!   slot: [`Membership::is_member`], leases, grants to others and
//!   [`Membership::serving`] go by this process's own incarnation, so it
//!   holds no lease of the old one (grants are to an incarnation, and the
//!   others grant by the heartbeat's), grants nothing (it forgot whom the
//!   old one declared dead), and the protocols see it as no member.
//! * *Leases after a restart.* A new process cannot know which leases its
//!   predecessor granted just before it stopped, so it declares no member
//!   dead within a lease (plus the drift margin) of its start. After that
//!   wait an heir also declares its own node's old incarnation dead (it is
//!   gone, and this process grants it nothing): a lone node has no one else
//!   to declare it.
//!
//! **Without a state directory** the acceptor state lives in memory only,
//! and a process behaves as before records: its lineage is itself, so it
//! never votes on a later epoch before it is a member, and a majority
//! restarted at once stalls the cluster. The first view (epoch 1) is voted on
//! by every configured node: a process without a record waits
//! `proposal_timeout_ms` before voting on it, assuming a first view chosen
//! before it restarted has reached it by then. When it has not, the process
//! votes on epoch 1 again with forgotten state, and two first views may be
//! installed (the ownership campaign's seed 2002;
//! [`MembershipBugs::forget_acceptor_state_on_restart`] plants it). A
//! restarted proposer also starts from round 0 and may reuse a ballot its
//! predecessor proposed with. The runtime warns at start when it runs this
//! way.

use std::collections::{BTreeMap, BTreeSet};

use roost_net::{EpochId, NodeId};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::protocol::{Incarnation, View};

/// The most nodes a static configuration may list (bounds every per-node loop).
pub const MAX_NODES: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MembershipConfig {
    pub heartbeat_interval_ms: u64,
    pub lease_duration_ms: u64,
    pub suspect_after_ms: u64,
    pub clock_drift_margin_ms: u64,
    /// A proposal without a decision after this long is retried with a
    /// higher ballot.
    pub proposal_timeout_ms: u64,
}

impl Default for MembershipConfig {
    fn default() -> Self {
        MembershipConfig {
            heartbeat_interval_ms: 50,
            lease_duration_ms: 400,
            suspect_after_ms: 150,
            clock_drift_margin_ms: 20,
            proposal_timeout_ms: 800,
        }
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum MembershipConfigError {
    #[error("heartbeat_interval_ms must be at least 1")]
    ZeroHeartbeat,
    #[error(
        "need heartbeat_interval_ms < suspect_after_ms < lease_duration_ms (got {0} / {1} / {2})"
    )]
    Ordering(u64, u64, u64),
    #[error("proposal_timeout_ms ({0}) must be at least lease_duration_ms ({1})")]
    ProposalTimeout(u64, u64),
    #[error("lease_duration_ms {0} exceeds one hour")]
    TooLong(u64),
}

impl MembershipConfig {
    pub fn validate(&self) -> Result<(), MembershipConfigError> {
        if self.heartbeat_interval_ms == 0 {
            return Err(MembershipConfigError::ZeroHeartbeat);
        }
        if !(self.heartbeat_interval_ms < self.suspect_after_ms
            && self.suspect_after_ms < self.lease_duration_ms)
        {
            return Err(MembershipConfigError::Ordering(
                self.heartbeat_interval_ms,
                self.suspect_after_ms,
                self.lease_duration_ms,
            ));
        }
        if self.lease_duration_ms > 3_600_000 {
            return Err(MembershipConfigError::TooLong(self.lease_duration_ms));
        }
        if self.proposal_timeout_ms < self.lease_duration_ms {
            return Err(MembershipConfigError::ProposalTimeout(
                self.proposal_timeout_ms,
                self.lease_duration_ms,
            ));
        }
        Ok(())
    }
}

/// Planted faults for the simulator's tests (never set in production).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipBugs {
    /// Declare a node dead as soon as it is suspected, without waiting for
    /// its lease to expire: a removed node may still be serving.
    pub declare_before_lease_expiry: bool,
    /// The simulator boots a restarted node without its persisted
    /// [`AcceptorRecord`] (a disk that loses what it acknowledged): the node
    /// may vote again on a view it already voted on.
    #[serde(default)]
    pub forget_acceptor_state_on_restart: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MembershipMsg {
    Heartbeat {
        seq: u64,
        sent_at_ms: u64,
        incarnation: Incarnation,
        view: View,
        /// The members of `view` the sender has declared dead.
        dead: Vec<NodeId>,
    },
    /// A lease grant to `incarnation` for `epoch`, valid until
    /// `sent_at_ms + lease_duration_ms` on the heartbeat sender's clock.
    HeartbeatAck {
        seq: u64,
        sent_at_ms: u64,
        incarnation: Incarnation,
        epoch: EpochId,
    },
    /// Paxos phase 1a for the view of `epoch`.
    Prepare { epoch: EpochId, ballot: Ballot },
    /// 1b: the acceptor promises to ignore lower ballots and reports what it
    /// accepted already. `incarnation` (here and in `Accept`) names the
    /// member slot the acceptor votes as: its own incarnation, or its
    /// predecessor's ([`Membership::votes_as`]); the proposer counts the
    /// vote only if its view lists that slot.
    Promise {
        epoch: EpochId,
        ballot: Ballot,
        incarnation: Incarnation,
        accepted: Option<(Ballot, View)>,
    },
    /// 2a.
    Propose {
        epoch: EpochId,
        ballot: Ballot,
        view: View,
    },
    /// 2b.
    Accept {
        epoch: EpochId,
        ballot: Ballot,
        incarnation: Incarnation,
    },
    /// The acceptor has promised a higher ballot: try again above it.
    Nack { epoch: EpochId, promised: Ballot },
}

/// A Paxos ballot: higher round wins, the proposer's id breaks ties.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Ballot {
    pub round: u64,
    pub node: NodeId,
}

/// A node's health as this node sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    Live,
    Suspect,
    Dead,
}

#[derive(Debug, Clone, Default)]
struct Peer {
    incarnation: Option<Incarnation>,
    last_heard_ms: Option<u64>,
    /// The epoch of the peer's last heartbeat and its declarations in it.
    their_epoch: EpochId,
    their_dead: BTreeSet<NodeId>,
    /// The last grant this node gave the peer, in any epoch.
    last_grant: Option<(Incarnation, u64)>,
}

#[derive(Debug, Clone)]
struct Proposal {
    epoch: EpochId,
    ballot: Ballot,
    /// Phase 1 answers: what each acceptor had accepted.
    promises: BTreeMap<NodeId, Option<(Ballot, View)>>,
    /// Set once phase 2 starts.
    value: Option<View>,
    accepts: BTreeSet<NodeId>,
    started_ms: u64,
}

/// Acceptor state for the epoch after the installed one.
#[derive(Debug, Clone, Default)]
struct Acceptor {
    promised: Ballot,
    accepted: Option<(Ballot, View)>,
}

/// What the peer membership keeps on stable storage: a Paxos acceptor's
/// promise and vote must outlive its process, or a restarted process may
/// vote against them. The driver makes it durable
/// ([`MembershipOut::persist`]) before it sends the messages of the same
/// call, and hands the last one back to [`Membership::new`] after a restart.
/// [`crate::record`] encodes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AcceptorRecord {
    /// The node it belongs to (a record of another node is refused).
    pub node: NodeId,
    /// The highest view this node installed (epoch 0: none yet).
    pub installed: View,
    /// Acceptor state for epoch `installed.epoch + 1`.
    pub promised: Ballot,
    pub accepted: Option<(Ballot, View)>,
    /// The highest round this node proposed in: a restarted proposer goes
    /// above it, so one ballot never carries two values.
    pub proposed_round: u64,
    /// The incarnations of this node whose every promise and vote this
    /// record holds, oldest first: the writer's own and its predecessors'
    /// back to the last process that started without a record (at most
    /// [`MAX_LINEAGE`] of them, plus this node's slots in `installed` and
    /// `accepted`). A process votes as its node's slot in the installed
    /// view only when the slot's incarnation is listed here.
    pub lineage: Vec<Incarnation>,
}

/// The most recent incarnations a record's lineage keeps besides the slots
/// it may still vote as (bounds the record as a node restarts again and again).
pub const MAX_LINEAGE: usize = 8;

/// Why a recovered [`AcceptorRecord`] cannot be used with this configuration.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RecordInvalid {
    #[error("the record is node {found}'s, not node {expected}'s")]
    WrongNode { found: NodeId, expected: NodeId },
    #[error("the record names node {0}, which is not in the configuration")]
    NotConfigured(NodeId),
    #[error("the record is inconsistent: {0}")]
    Inconsistent(&'static str),
}

impl AcceptorRecord {
    /// The state a node has before it ever voted or installed a view (what
    /// no record on disk means).
    pub fn empty(node: NodeId) -> Self {
        AcceptorRecord {
            node,
            ..AcceptorRecord::default()
        }
    }

    /// Holds for every record the membership writes; a recovered one is
    /// checked before use (a configuration may have changed since).
    pub fn check(&self, me: NodeId, nodes: &[NodeId]) -> Result<(), RecordInvalid> {
        if self.node != me {
            return Err(RecordInvalid::WrongNode {
                found: self.node,
                expected: me,
            });
        }
        let configured = |view: &View| -> Result<(), RecordInvalid> {
            if view.members.len() > MAX_NODES {
                return Err(RecordInvalid::Inconsistent("a view with too many members"));
            }
            match view.members.keys().find(|n| !nodes.contains(n)) {
                Some(&stranger) => Err(RecordInvalid::NotConfigured(stranger)),
                None => Ok(()),
            }
        };
        configured(&self.installed)?;
        if (self.installed.epoch == EpochId(0)) != self.installed.members.is_empty() {
            return Err(RecordInvalid::Inconsistent(
                "an installed view has members exactly when its epoch is above 0",
            ));
        }
        let next = self
            .installed
            .epoch
            .0
            .checked_add(1)
            .ok_or(RecordInvalid::Inconsistent(
                "the installed epoch is the last",
            ))?;
        if let Some((ballot, view)) = &self.accepted {
            configured(view)?;
            if view.epoch != EpochId(next) || view.members.is_empty() {
                return Err(RecordInvalid::Inconsistent(
                    "the accepted view is not of the epoch after the installed one",
                ));
            }
            if *ballot > self.promised {
                return Err(RecordInvalid::Inconsistent(
                    "a view accepted above the promised ballot",
                ));
            }
        }
        if self.lineage.len() > MAX_LINEAGE + 2 {
            return Err(RecordInvalid::Inconsistent("a lineage that is too long"));
        }
        let distinct: BTreeSet<&Incarnation> = self.lineage.iter().collect();
        if distinct.len() != self.lineage.len() {
            return Err(RecordInvalid::Inconsistent(
                "an incarnation listed twice in the lineage",
            ));
        }
        Ok(())
    }

    /// The lineage of a process of this node started as `incarnation` from
    /// this record: the record's, then `incarnation`, pruned to the last
    /// [`MAX_LINEAGE`] and the slots the process may still vote as.
    fn lineage_for(&self, incarnation: Incarnation) -> Vec<Incarnation> {
        let slots = [
            self.installed.members.get(&self.node).copied(),
            self.accepted
                .as_ref()
                .and_then(|(_, view)| view.members.get(&self.node).copied()),
        ];
        let mut lineage: Vec<Incarnation> = self
            .lineage
            .iter()
            .copied()
            .filter(|&i| i != incarnation) // a reused number is one identity
            .collect();
        lineage.push(incarnation);
        let recent = lineage.len().saturating_sub(MAX_LINEAGE);
        let lineage: Vec<Incarnation> = lineage
            .iter()
            .enumerate()
            .filter(|&(at, i)| at >= recent || slots.contains(&Some(*i)))
            .map(|(_, &i)| i)
            .collect();
        debug_assert!(lineage.len() <= MAX_LINEAGE + 2);
        lineage
    }
}

/// The membership state machine of one node (sans-IO).
#[derive(Debug, Clone)]
pub struct Membership {
    me: NodeId,
    incarnation: Incarnation,
    nodes: Vec<NodeId>,
    config: MembershipConfig,
    bugs: MembershipBugs,
    started_ms: u64,
    view: View,
    peers: BTreeMap<NodeId, Peer>,
    /// Grants held in the current epoch: expiry on this node's clock.
    grants: BTreeMap<NodeId, u64>,
    declared: BTreeSet<NodeId>,
    acceptor: Acceptor,
    proposal: Option<Proposal>,
    /// The highest ballot round seen (proposals go above it).
    max_round: u64,
    /// The highest round this node proposed in (durable: see [`AcceptorRecord`]).
    proposed_round: u64,
    heartbeat_seq: u64,
    /// The durable state as last handed to the driver.
    persisted: AcceptorRecord,
    /// Started without a record: this process may have voted before it
    /// restarted and forgotten it, so it waits before voting on the first view.
    amnesiac: bool,
    /// This node's incarnations whose promises and votes this process holds
    /// (durable: see [`AcceptorRecord::lineage`]); its own among them.
    lineage: Vec<Incarnation>,
    /// A view recovered from the record, not yet announced as installed.
    announce_recovered: bool,
}

/// Messages the membership wants sent, whether it installed a view, and
/// what the driver must make durable **before** it sends any of them.
#[derive(Debug, Default)]
pub struct MembershipOut {
    pub sends: Vec<(NodeId, MembershipMsg)>,
    pub installed: bool,
    /// The durable state changed (a promise, a vote, an installed view or a
    /// new proposal round): write this whole record first; a driver that
    /// cannot must not send these messages (nor any later ones).
    pub persist: Option<AcceptorRecord>,
}

impl Membership {
    /// A process of node `me` as `incarnation`. `recovered` is the last
    /// [`AcceptorRecord`] this node's earlier processes persisted (checked
    /// with [`AcceptorRecord::check`]), `None` for a node without one (a
    /// first start, or a driver without stable storage).
    pub fn new(
        me: NodeId,
        incarnation: Incarnation,
        nodes: &[NodeId],
        config: MembershipConfig,
        bugs: MembershipBugs,
        recovered: Option<AcceptorRecord>,
        now_ms: u64,
    ) -> Self {
        assert!(nodes.contains(&me), "{me} is not in the configuration");
        assert!(!nodes.is_empty() && nodes.len() <= MAX_NODES);
        debug_assert!(config.validate().is_ok());
        if let Some(record) = &recovered {
            assert_eq!(record.check(me, nodes), Ok(()), "checked by the caller");
        }
        let amnesiac = recovered.is_none();
        let record = recovered.unwrap_or_else(|| AcceptorRecord::empty(me));
        let lineage = record.lineage_for(incarnation);
        assert!(
            lineage.last() == Some(&incarnation),
            "a process holds its own votes"
        );
        let max_round = [
            record.proposed_round,
            record.promised.round,
            record.accepted.as_ref().map_or(0, |(b, _)| b.round),
        ]
        .into_iter()
        .max()
        .unwrap_or(0);
        let mut nodes = nodes.to_vec();
        nodes.sort_unstable();
        nodes.dedup();
        let peers = nodes
            .iter()
            .filter(|&&n| n != me)
            .map(|&n| (n, Peer::default()))
            .collect();
        Membership {
            me,
            incarnation,
            nodes,
            config,
            bugs,
            started_ms: now_ms,
            // A recovered view is adopted, but this incarnation is no member
            // of it: it joins in a later epoch like any restarted process
            // (meanwhile it votes as its predecessor's slot: `votes_as`).
            view: record.installed.clone(),
            peers,
            grants: BTreeMap::new(),
            declared: BTreeSet::new(),
            acceptor: Acceptor {
                promised: record.promised,
                accepted: record.accepted.clone(),
            },
            proposal: None,
            max_round,
            proposed_round: record.proposed_round,
            heartbeat_seq: 0,
            announce_recovered: record.installed.epoch > EpochId(0),
            // The lineage goes out with the first call (`sync_durable`), so
            // a later process counts this one among its predecessors even if
            // it never votes.
            persisted: record,
            amnesiac,
            lineage,
        }
    }

    /// The durable state now.
    fn record(&self) -> AcceptorRecord {
        AcceptorRecord {
            node: self.me,
            installed: self.view.clone(),
            promised: self.acceptor.promised,
            accepted: self.acceptor.accepted.clone(),
            proposed_round: self.proposed_round,
            lineage: self.lineage.clone(),
        }
    }

    /// Hands the driver the durable state if it changed during this call;
    /// every entry point ends here, so it goes out with the messages that
    /// depend on it.
    fn sync_durable(&mut self, out: &mut MembershipOut) {
        let p = &self.persisted;
        let unchanged = p.installed == self.view
            && p.promised == self.acceptor.promised
            && p.accepted == self.acceptor.accepted
            && p.proposed_round == self.proposed_round
            && p.lineage == self.lineage;
        if !unchanged {
            self.persisted = self.record();
            debug_assert_eq!(self.persisted.check(self.me, &self.nodes), Ok(()));
            out.persist = Some(self.persisted.clone());
        }
    }

    pub fn me(&self) -> NodeId {
        self.me
    }

    pub fn incarnation(&self) -> Incarnation {
        self.incarnation
    }

    pub fn nodes(&self) -> &[NodeId] {
        &self.nodes
    }

    pub fn view(&self) -> &View {
        &self.view
    }

    pub fn config(&self) -> &MembershipConfig {
        &self.config
    }

    fn majority(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// This process (this incarnation) is a member of its view: it may hold
    /// a lease, grant leases and serve. A process voting as its
    /// predecessor's slot ([`Membership::votes_as`]) is not.
    pub fn is_member(&self) -> bool {
        self.view.contains(self.me, self.incarnation)
    }

    /// The incarnation this process votes as on the next view, if any: its
    /// node's slot in the installed view, when every promise and vote of
    /// that slot is in this process's hands (its own incarnation, or a
    /// predecessor's it recovered the record of: the lineage). The slot
    /// acts only as a Paxos acceptor, never as a member.
    pub fn votes_as(&self) -> Option<Incarnation> {
        let slot = *self.view.members.get(&self.me)?;
        self.lineage.contains(&slot).then_some(slot)
    }

    /// When this node's lease lapses (0: it holds none).
    pub fn lease_expiry_ms(&self) -> u64 {
        if !self.is_member() {
            return 0;
        }
        let mut expiries: Vec<u64> = Vec::with_capacity(self.nodes.len());
        expiries.push(u64::MAX); // this node's own grant
        expiries.extend(self.grants.values().copied());
        expiries.sort_unstable_by(|a, b| b.cmp(a));
        expiries.get(self.majority() - 1).copied().unwrap_or(0)
    }

    /// Member of its view and holding its lease.
    pub fn serving(&self, now_ms: u64) -> bool {
        now_ms < self.lease_expiry_ms()
    }

    pub fn health(&self, node: NodeId, now_ms: u64) -> Health {
        if node == self.me {
            return if self.serving(now_ms) {
                Health::Live
            } else {
                Health::Suspect
            };
        }
        let Some(peer) = self.peers.get(&node) else {
            return Health::Dead;
        };
        if self.declared.contains(&node) {
            return Health::Dead;
        }
        match peer.last_heard_ms {
            Some(heard) if now_ms < heard + self.config.suspect_after_ms => Health::Live,
            Some(heard) if now_ms < heard + self.config.lease_duration_ms => Health::Suspect,
            _ => Health::Dead,
        }
    }

    /// The periodic work: heartbeats, declarations, view changes.
    pub fn on_tick(&mut self, now_ms: u64, out: &mut MembershipOut) {
        if std::mem::take(&mut self.announce_recovered) {
            out.installed = true; // the recovered view, for this process's protocol
        }
        self.send_heartbeats(now_ms, out);
        self.declare_dead(now_ms);
        self.maybe_propose(now_ms, out);
        self.sync_durable(out);
    }

    fn send_heartbeats(&mut self, now_ms: u64, out: &mut MembershipOut) {
        self.heartbeat_seq += 1;
        let dead: Vec<NodeId> = self.declared.iter().copied().collect();
        for &peer in self.peers.keys() {
            let msg = MembershipMsg::Heartbeat {
                seq: self.heartbeat_seq,
                sent_at_ms: now_ms,
                incarnation: self.incarnation,
                view: self.view.clone(),
                dead: dead.clone(),
            };
            out.sends.push((peer, msg));
        }
    }

    fn declare_dead(&mut self, now_ms: u64) {
        let config = &self.config;
        for (&node, &incarnation) in &self.view.members {
            if self.declared.contains(&node) {
                continue;
            }
            if node == self.me {
                // An earlier incarnation of this node in the view: it stopped
                // before this process started (one process per state
                // directory), and this process grants it nothing. Declared
                // like a silent peer this process never granted (a lease
                // after its start), and only by an heir of its record, so a
                // process without one behaves as before. A lone node needs
                // this to replace its old self: no one else can declare it.
                let predecessor = incarnation != self.incarnation && !self.amnesiac;
                let waited = now_ms
                    >= self.started_ms + config.lease_duration_ms + config.clock_drift_margin_ms;
                if predecessor && waited {
                    self.declared.insert(node);
                }
                continue;
            }
            let peer = &self.peers[&node];
            let restarted = peer.incarnation.is_some_and(|i| i != incarnation);
            let silent = peer
                .last_heard_ms
                .is_none_or(|heard| now_ms >= heard + config.suspect_after_ms);
            if !(restarted || silent) {
                continue;
            }
            let grant_expired = match peer.last_grant {
                Some((granted, at_ms)) if granted == incarnation => {
                    now_ms >= at_ms + config.lease_duration_ms + config.clock_drift_margin_ms
                }
                // This process granted it nothing, but an earlier process of
                // this node may have, just before it stopped: such a grant
                // lapses a lease after this process started.
                _ => {
                    now_ms
                        >= self.started_ms + config.lease_duration_ms + config.clock_drift_margin_ms
                }
            };
            if grant_expired || self.bugs.declare_before_lease_expiry {
                self.declared.insert(node);
            }
        }
    }

    /// How many nodes declared `node` dead in this node's epoch.
    fn dead_votes(&self, node: NodeId) -> usize {
        let mine = usize::from(self.declared.contains(&node));
        let theirs = self
            .peers
            .values()
            .filter(|p| p.their_epoch == self.view.epoch && p.their_dead.contains(&node))
            .count();
        mine + theirs
    }

    fn fresh(&self, peer: &Peer, now_ms: u64) -> bool {
        peer.last_heard_ms
            .is_some_and(|heard| now_ms < heard + self.config.suspect_after_ms)
    }

    /// The members the next view should have.
    fn desired_members(&self, now_ms: u64) -> BTreeMap<NodeId, Incarnation> {
        let majority = self.majority();
        let mut members: BTreeMap<NodeId, Incarnation> = self
            .view
            .members
            .iter()
            .filter(|(&node, _)| self.dead_votes(node) < majority)
            .map(|(&n, &i)| (n, i))
            .collect();
        members.entry(self.me).or_insert(self.incarnation);
        for (&node, peer) in &self.peers {
            let caught_up = peer.their_epoch == self.view.epoch;
            if !members.contains_key(&node) && caught_up && self.fresh(peer, now_ms) {
                if let Some(incarnation) = peer.incarnation {
                    members.insert(node, incarnation);
                }
            }
        }
        members
    }

    fn coordinator(&self, now_ms: u64) -> NodeId {
        self.peers
            .iter()
            .filter(|(_, p)| self.fresh(p, now_ms))
            .map(|(&n, _)| n)
            .chain(std::iter::once(self.me))
            .min()
            .unwrap_or(self.me)
    }

    fn maybe_propose(&mut self, now_ms: u64, out: &mut MembershipOut) {
        if let Some(proposal) = &self.proposal {
            if now_ms >= proposal.started_ms + self.config.proposal_timeout_ms {
                self.proposal = None; // retried below with a higher ballot
            }
        }
        if self.proposal.is_some() {
            self.retransmit(out);
            return;
        }
        // Give the nodes started together a moment to hear each other, so the
        // first view has them all.
        if now_ms < self.started_ms + self.config.suspect_after_ms {
            return;
        }
        if self.coordinator(now_ms) != self.me {
            return;
        }
        let members = self.desired_members(now_ms);
        // A member a majority declared dead gets no lease in this epoch
        // again (declarations are final), even when it is heard again and
        // stays in (same incarnation): only a new epoch, with the same
        // members maybe, lets it serve again. (Found by the outage
        // campaign's liveness check: two nodes muted in turn, each
        // declared dead by the other two, never served again.)
        let majority = self.majority();
        let declared_out = self
            .view
            .members
            .keys()
            .any(|&node| self.dead_votes(node) >= majority);
        if (members == self.view.members && !declared_out) || members.len() < majority {
            return;
        }
        self.max_round += 1;
        self.proposed_round = self.max_round;
        let epoch = EpochId(self.view.epoch.0 + 1);
        self.proposal = Some(Proposal {
            epoch,
            ballot: Ballot {
                round: self.max_round,
                node: self.me,
            },
            promises: BTreeMap::new(),
            value: None,
            accepts: BTreeSet::new(),
            started_ms: now_ms,
        });
        self.retransmit(out);
        // This node votes like any other (if it is an acceptor).
        let ballot = self.proposal.as_ref().map(|p| p.ballot).unwrap_or_default();
        self.on_prepare(now_ms, self.me, epoch, ballot, out);
    }

    /// Sends the current phase's request to every acceptor that has not answered.
    fn retransmit(&self, out: &mut MembershipOut) {
        let Some(proposal) = &self.proposal else {
            return;
        };
        for &node in &self.nodes {
            if node == self.me {
                continue;
            }
            let msg = match &proposal.value {
                None if !proposal.promises.contains_key(&node) => MembershipMsg::Prepare {
                    epoch: proposal.epoch,
                    ballot: proposal.ballot,
                },
                Some(view) if !proposal.accepts.contains(&node) => MembershipMsg::Propose {
                    epoch: proposal.epoch,
                    ballot: proposal.ballot,
                    view: view.clone(),
                },
                _ => continue,
            };
            out.sends.push((node, msg));
        }
    }

    /// May this node vote on the view of `epoch`? Members of the installed
    /// view vote on the next one; the first view is voted on by every
    /// configured node (a process without a recovered record first waits:
    /// it may have voted before a restart).
    fn is_acceptor(&self, now_ms: u64, epoch: EpochId) -> bool {
        if epoch.0 != self.view.epoch.0 + 1 {
            return false;
        }
        if self.view.epoch == EpochId(0) {
            !self.amnesiac || now_ms >= self.started_ms + self.config.proposal_timeout_ms
        } else {
            self.votes_as().is_some()
        }
    }

    /// The incarnation a Promise or Accept names: the slot voted as (any
    /// configured node votes on the first view, as itself).
    fn voter_incarnation(&self) -> Incarnation {
        self.votes_as().unwrap_or(self.incarnation)
    }

    /// Is `from` (as `incarnation`) a voter on the next view, as this node sees it?
    fn counts_as_voter(&self, from: NodeId, incarnation: Incarnation) -> bool {
        if self.view.epoch == EpochId(0) {
            true
        } else {
            self.view.contains(from, incarnation)
        }
    }

    /// Votes needed to choose the next view.
    fn decision_quorum(&self) -> usize {
        if self.view.epoch == EpochId(0) {
            self.majority()
        } else {
            self.view.members.len() / 2 + 1
        }
    }

    fn reply(&mut self, from: NodeId, msg: MembershipMsg, now_ms: u64, out: &mut MembershipOut) {
        if from == self.me {
            self.on_message(now_ms, from, msg, out);
        } else {
            out.sends.push((from, msg));
        }
    }

    fn on_prepare(
        &mut self,
        now_ms: u64,
        from: NodeId,
        epoch: EpochId,
        ballot: Ballot,
        out: &mut MembershipOut,
    ) {
        self.max_round = self.max_round.max(ballot.round);
        if !self.is_acceptor(now_ms, epoch) {
            return;
        }
        if ballot < self.acceptor.promised {
            let promised = self.acceptor.promised;
            self.reply(from, MembershipMsg::Nack { epoch, promised }, now_ms, out);
            return;
        }
        self.acceptor.promised = ballot;
        let msg = MembershipMsg::Promise {
            epoch,
            ballot,
            incarnation: self.voter_incarnation(),
            accepted: self.acceptor.accepted.clone(),
        };
        self.reply(from, msg, now_ms, out);
    }

    fn on_promise(
        &mut self,
        now_ms: u64,
        from: NodeId,
        ballot: Ballot,
        incarnation: Incarnation,
        accepted: Option<(Ballot, View)>,
        out: &mut MembershipOut,
    ) {
        let voter = self.counts_as_voter(from, incarnation);
        let quorum = self.decision_quorum();
        let Some(proposal) = &mut self.proposal else {
            return;
        };
        if proposal.ballot != ballot || proposal.value.is_some() || !voter {
            return;
        }
        proposal.promises.insert(from, accepted);
        if proposal.promises.len() < quorum {
            return;
        }
        // Paxos: a view some quorum may have chosen must be proposed again.
        let earlier = proposal
            .promises
            .values()
            .flatten()
            .max_by_key(|(b, _)| *b)
            .map(|(_, view)| view.clone());
        let view = match earlier {
            Some(view) => view,
            None => View {
                epoch: proposal.epoch,
                members: self.desired_members(now_ms),
            },
        };
        let (epoch, ballot) = {
            let proposal = self.proposal.as_mut().expect("checked above");
            proposal.value = Some(view.clone());
            (proposal.epoch, proposal.ballot)
        };
        self.retransmit(out);
        self.on_propose(now_ms, self.me, epoch, ballot, view, out);
    }

    fn on_propose(
        &mut self,
        now_ms: u64,
        from: NodeId,
        epoch: EpochId,
        ballot: Ballot,
        view: View,
        out: &mut MembershipOut,
    ) {
        self.max_round = self.max_round.max(ballot.round);
        if !self.is_acceptor(now_ms, epoch) || view.epoch != epoch {
            return;
        }
        if ballot < self.acceptor.promised {
            let promised = self.acceptor.promised;
            self.reply(from, MembershipMsg::Nack { epoch, promised }, now_ms, out);
            return;
        }
        self.acceptor.promised = ballot;
        self.acceptor.accepted = Some((ballot, view));
        let msg = MembershipMsg::Accept {
            epoch,
            ballot,
            incarnation: self.voter_incarnation(),
        };
        self.reply(from, msg, now_ms, out);
    }

    fn on_accepted(
        &mut self,
        now_ms: u64,
        from: NodeId,
        ballot: Ballot,
        incarnation: Incarnation,
        out: &mut MembershipOut,
    ) {
        let voter = self.counts_as_voter(from, incarnation);
        let quorum = self.decision_quorum();
        let Some(proposal) = &mut self.proposal else {
            return;
        };
        if proposal.ballot != ballot || proposal.value.is_none() || !voter {
            return;
        }
        proposal.accepts.insert(from);
        if proposal.accepts.len() >= quorum {
            let view = proposal.value.clone().expect("phase 2");
            self.install(view, out);
            // Spread the news now rather than at the next tick.
            self.send_heartbeats(now_ms, out);
        }
    }

    fn install(&mut self, view: View, out: &mut MembershipOut) {
        assert!(view.epoch > self.view.epoch, "epochs only increase");
        self.announce_recovered = false; // superseded
        self.view = view;
        self.grants.clear();
        self.declared.clear();
        self.acceptor = Acceptor::default();
        if self
            .proposal
            .as_ref()
            .is_some_and(|p| p.epoch <= self.view.epoch)
        {
            self.proposal = None;
        }
        out.installed = true;
    }

    pub fn on_message(
        &mut self,
        now_ms: u64,
        from: NodeId,
        msg: MembershipMsg,
        out: &mut MembershipOut,
    ) {
        if from != self.me && !self.peers.contains_key(&from) {
            return; // not in the configuration (the transport rejects these too)
        }
        self.handle(now_ms, from, msg, out);
        self.sync_durable(out);
    }

    fn handle(&mut self, now_ms: u64, from: NodeId, msg: MembershipMsg, out: &mut MembershipOut) {
        match msg {
            MembershipMsg::Heartbeat {
                seq,
                sent_at_ms,
                incarnation,
                view,
                dead,
            } => self.on_heartbeat(now_ms, from, seq, sent_at_ms, incarnation, view, dead, out),
            MembershipMsg::HeartbeatAck {
                sent_at_ms,
                incarnation,
                epoch,
                ..
            } => {
                if epoch == self.view.epoch && incarnation == self.incarnation && self.is_member() {
                    let expiry = sent_at_ms.saturating_add(self.config.lease_duration_ms);
                    let grant = self.grants.entry(from).or_insert(0);
                    *grant = (*grant).max(expiry);
                }
            }
            MembershipMsg::Prepare { epoch, ballot } => {
                self.on_prepare(now_ms, from, epoch, ballot, out)
            }
            MembershipMsg::Promise {
                epoch,
                ballot,
                incarnation,
                accepted,
            } => {
                let sane = accepted
                    .as_ref()
                    .is_none_or(|(_, v)| v.epoch == epoch && v.members.len() <= MAX_NODES);
                if sane {
                    self.on_promise(now_ms, from, ballot, incarnation, accepted, out);
                }
            }
            MembershipMsg::Propose {
                epoch,
                ballot,
                view,
            } => {
                if view.members.len() <= MAX_NODES {
                    self.on_propose(now_ms, from, epoch, ballot, view, out);
                }
            }
            MembershipMsg::Accept {
                ballot,
                incarnation,
                ..
            } => self.on_accepted(now_ms, from, ballot, incarnation, out),
            MembershipMsg::Nack { promised, .. } => {
                self.max_round = self.max_round.max(promised.round);
                if self.proposal.as_ref().is_some_and(|p| p.ballot < promised) {
                    self.proposal = None; // the next tick tries a higher ballot
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_heartbeat(
        &mut self,
        now_ms: u64,
        from: NodeId,
        seq: u64,
        sent_at_ms: u64,
        incarnation: Incarnation,
        view: View,
        dead: Vec<NodeId>,
        out: &mut MembershipOut,
    ) {
        if view.epoch > self.view.epoch && view.members.len() <= MAX_NODES {
            // Only installed (chosen) views travel in heartbeats.
            self.install(view.clone(), out);
        }
        let grant = view.epoch == self.view.epoch
            && self.is_member()
            && self.view.contains(from, incarnation)
            && !self.declared.contains(&from);
        let peer = self.peers.get_mut(&from).expect("checked by the caller");
        peer.incarnation = Some(incarnation);
        peer.last_heard_ms = Some(now_ms);
        peer.their_epoch = view.epoch;
        peer.their_dead = dead.into_iter().take(MAX_NODES).collect();
        if grant {
            peer.last_grant = Some((incarnation, now_ms));
            let ack = MembershipMsg::HeartbeatAck {
                seq,
                sent_at_ms,
                incarnation,
                epoch: self.view.epoch,
            };
            out.sends.push((from, ack));
        }
    }
}

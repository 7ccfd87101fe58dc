//! The reliable-commit state machine: coordinator, follower and replayer
//! roles of one node.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};

use roost_cluster::{Context, Effects, EpochId, Incarnation, Input, NodeId, Protocol, TimerId};

use crate::config::{CommitBugs, CommitConfig, CommitError, ConfigError, ReadOnlyError};
use crate::msg::{Body, CommitMsg, Key, RAck, RInv, RVal, TxId, Write, WIRE_VERSION};
use crate::stats::{CommitStats, DropReason};
use crate::store::{ObjectState, ObjectStore, PayloadStore};

/// The retransmission timer.
pub const RETRANSMIT_TIMER: TimerId = 1;

/// A transaction the local commit has committed, handed to the reliable
/// commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transaction {
    /// Every object written, with its new version (greater than the one
    /// held) and data.
    pub writes: Vec<Write>,
    /// The readers of the objects written (from the ownership metadata).
    /// This node and nodes outside the view are left out: a dead reader
    /// holds nothing to keep current.
    pub followers: Vec<NodeId>,
}

/// One object a read-only transaction read: its `t_version` and `t_data`,
/// Valid when read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadValue {
    pub key: Key,
    pub version: u64,
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitCmd {
    Commit(Transaction),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitOut {
    /// `commit` accepted the transaction under this id.
    Started { tx_id: TxId },
    /// Every follower acknowledged: the transaction survives any crash the
    /// membership tolerates. Only now may the client be answered. Emitted
    /// in pipeline order.
    Committed { tx_id: TxId },
    /// `commit` refused the transaction (nothing was sent).
    Refused { error: CommitError },
    /// This node left the view with the transaction in flight: whether it
    /// commits is up to the followers that applied it.
    Unknown { tx_id: TxId },
    /// As follower, this node applied the R-INV (replays included).
    Applied { tx_id: TxId, replay: bool },
    /// No R-INV of a failed coordinator is pending here any more (the
    /// ownership protocol may serve again, as far as this node goes).
    Recovered { epoch: EpochId },
}

pub type Fx = Effects<CommitMsg, CommitOut>;

/// An R-INV this node is driving (its own, or a failed coordinator's it
/// replays), with the followers that acknowledged it in this epoch.
#[derive(Debug, Clone, Hash)]
struct Driving {
    inv: RInv,
    acked: BTreeSet<NodeId>,
}

impl Driving {
    fn fully_acked(&self) -> bool {
        self.inv.followers.iter().all(|f| self.acked.contains(f))
    }
}

/// An applied R-INV a follower keeps until its R-VAL.
#[derive(Debug, Clone, Hash)]
struct Stored {
    inv: RInv,
    /// The coordinator's incarnation when it was applied (0: applied from
    /// a replay, the coordinator already gone). It is an orphan, for this
    /// node to replay, once the view no longer holds that incarnation.
    incarnation: Incarnation,
}

/// A follower's view of one coordinator's pipeline.
#[derive(Debug, Clone, Default, Hash)]
struct Pipeline {
    /// The coordinator's incarnation the held R-INVs came from (held ones
    /// of an incarnation that is gone are dropped).
    incarnation: Incarnation,
    /// Every slot up to this one is applied here or validated: the next
    /// slot may be applied.
    done_upto: u64,
    /// Applied R-INVs, kept until their R-VAL (pending reliable commits).
    stored: BTreeMap<u64, Stored>,
    /// R-INVs waiting for their predecessor slot.
    held: BTreeMap<u64, RInv>,
}

/// One node's reliable commit (Zeus §5): sans-IO, driven by
/// [`Protocol::on_input`] or the direct methods.
///
/// `Clone` and `Hash` serve model checkers: the hash covers the protocol
/// state and the store, not the configuration, the planted bugs or the
/// counters (two states that differ only in their counters are one).
#[derive(Debug, Clone)]
pub struct ReliableCommit<S> {
    me: NodeId,
    config: CommitConfig,
    bugs: CommitBugs,
    store: S,
    /// The epoch this node's state was last moved to.
    epoch: EpochId,
    /// The epoch this node's state began in: its first view, or the first
    /// view that took it back after one excluded it (`None` while
    /// excluded). A replay of a slot issued before it is not for this
    /// state.
    joined: Option<EpochId>,
    started: bool,
    // Coordinator.
    /// The next `local` id; starts at `epoch << 32` so that a restarted
    /// node (a new incarnation, in a later epoch) never reuses a tx id.
    next_local: u64,
    /// Every own transaction up to this one is validated.
    validated_upto: u64,
    pending: BTreeMap<u64, Driving>,
    // Follower.
    pipelines: BTreeMap<NodeId, Pipeline>,
    /// Failed coordinators' transactions this node replays.
    replays: BTreeMap<TxId, Driving>,
    recovering: bool,
    timer_armed: bool,
    stats: CommitStats,
}

impl<S: ObjectStore> ReliableCommit<S> {
    pub fn new(me: NodeId, config: CommitConfig, store: S) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(ReliableCommit {
            me,
            config,
            bugs: CommitBugs::default(),
            store,
            epoch: EpochId(0),
            joined: None,
            started: false,
            next_local: 1,
            validated_upto: 0,
            pending: BTreeMap::new(),
            pipelines: BTreeMap::new(),
            replays: BTreeMap::new(),
            recovering: false,
            timer_armed: false,
            stats: CommitStats::default(),
        })
    }

    pub fn with_bugs(mut self, bugs: CommitBugs) -> Self {
        self.bugs = bugs;
        self
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn store_mut(&mut self) -> &mut S {
        &mut self.store
    }

    pub fn stats(&self) -> &CommitStats {
        &self.stats
    }

    pub fn me(&self) -> NodeId {
        self.me
    }

    /// This node has run in a view (it may hold replicated data).
    pub fn in_a_view(&self) -> bool {
        self.started
    }

    /// Own transactions not yet reliably committed.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Applied R-INVs of others waiting for their R-VAL.
    pub fn stored(&self) -> usize {
        self.pipelines.values().map(|p| p.stored.len()).sum()
    }

    /// R-INVs held back for their pipeline predecessor.
    pub fn held(&self) -> usize {
        self.pipelines.values().map(|p| p.held.len()).sum()
    }

    /// Recovery after the last view change is still running here: some
    /// R-INV of a failed coordinator is not finished (the ownership
    /// protocol waits for it).
    pub fn recovering(&self) -> bool {
        self.recovering
    }

    /// Replays of failed coordinators' transactions in progress.
    pub fn replaying(&self) -> usize {
        self.replays.len()
    }

    /// The tx ids of the R-INVs this node stores as follower.
    pub fn stored_tx_ids(&self) -> Vec<TxId> {
        self.pipelines
            .iter()
            .flat_map(|(c, p)| p.stored.keys().map(|l| TxId::new(*c, *l)))
            .collect()
    }

    /// Adopts the context's epoch the first time this node runs as a
    /// member (later epochs come through view changes).
    fn start(&mut self, ctx: &Context<'_>) {
        if self.started || !ctx.member {
            return;
        }
        self.started = true;
        self.epoch = ctx.view.epoch;
        self.joined = Some(ctx.view.epoch);
        self.next_local = (ctx.view.epoch.0 << 32) + 1;
        self.validated_upto = self.next_local - 1;
        debug_assert!(self.pending.is_empty());
        debug_assert!(self.validated_upto < self.next_local);
    }

    // ---------------------------------------------------------------
    // Read-only transactions (Zeus §6).

    /// Whether a read-only transaction may read `key` here: the object is
    /// held (this node owns or follows it) and Valid, no reliable commit
    /// of its version pending. The one rule every local reader applies
    /// (the node's database too); the other is the caller's: read only
    /// while holding the lease of the view (`Context::serving`, as
    /// [`read_only`](Self::read_only) checks), since a node cut off keeps
    /// its Valid copies until it installs a view without it, and the
    /// others may commit newer versions once its lease lapsed.
    ///
    /// An Invalid object's version may not survive (its R-INV may not have
    /// reached every follower; it is lost if every node that holds it
    /// crashes), and a replica the R-INV has not reached yet still serves
    /// the older version: reading it would break real-time order.
    pub fn readable(&self, key: &[u8]) -> bool {
        match self.store.state(key) {
            Some(ObjectState::Valid) => true,
            // Planted: an Invalid object is read as well.
            Some(ObjectState::Invalid) => self.bugs.read_only_reads_invalid,
            None => false,
        }
    }

    /// A read-only transaction over `keys`, run locally at this replica
    /// with no message (Zeus §6): the version and data of every object, or
    /// a refusal if this node holds no lease or any object is not held
    /// here or not [`readable`](Self::readable) (a client retries).
    ///
    /// Zeus reads the objects one by one as the transaction asks for them
    /// and, at the end, validates that every version it read is still the
    /// one held Valid (a reliable commit in between would have moved one
    /// on, and the transaction retries). Here the whole transaction is one
    /// call on `&self`: nothing runs between its reads (in the simulator,
    /// within one event), so that end validation holds trivially and is
    /// not repeated. The objects read are one snapshot: the state after a
    /// prefix of each coordinator's pipeline (the model check's
    /// `ReadOnlySnapshot`).
    pub fn read_only(
        &self,
        ctx: &Context<'_>,
        keys: &[Key],
    ) -> Result<Vec<ReadValue>, ReadOnlyError>
    where
        S: PayloadStore,
    {
        debug_assert_eq!(ctx.me, self.me, "a protocol runs at one node");
        debug_assert!(!ctx.serving || ctx.member, "serving implies member");
        if !ctx.serving {
            return Err(ReadOnlyError::NotServing);
        }
        if keys.len() > self.config.max_reads {
            return Err(ReadOnlyError::TooManyKeys {
                count: keys.len(),
                limit: self.config.max_reads,
            });
        }
        if keys.len() > 1 && keys.iter().collect::<BTreeSet<_>>().len() != keys.len() {
            return Err(ReadOnlyError::DuplicateKey);
        }
        let mut reads = Vec::with_capacity(keys.len());
        for key in keys {
            let Some(version) = self.store.version(key) else {
                return Err(ReadOnlyError::NotReplica { key: key.clone() });
            };
            if !self.readable(key) {
                return Err(ReadOnlyError::Invalid {
                    key: key.clone(),
                    version,
                });
            }
            let Some(data) = self.store.data(key) else {
                debug_assert!(false, "a store holds a version without its data");
                return Err(ReadOnlyError::NotReplica { key: key.clone() });
            };
            reads.push(ReadValue {
                key: key.clone(),
                version,
                data: data.to_vec(),
            });
        }
        debug_assert_eq!(reads.len(), keys.len());
        debug_assert!(
            self.bugs.read_only_reads_invalid
                || reads
                    .iter()
                    .all(|r| self.store.state(&r.key) == Some(ObjectState::Valid)),
            "a reader reads Valid objects only"
        );
        Ok(reads)
    }

    // ---------------------------------------------------------------
    // Coordinator.

    /// Starts the reliable commit of a locally committed transaction:
    /// installs its writes here (Invalid until every follower acked) and
    /// sends R-INV. Does not wait for earlier transactions (pipelining).
    pub fn commit(
        &mut self,
        ctx: &Context<'_>,
        tx: Transaction,
        fx: &mut Fx,
    ) -> Result<TxId, CommitError> {
        self.start(ctx);
        if !ctx.member || !self.started {
            return Err(CommitError::NotMember);
        }
        if self.pending.len() >= self.config.max_in_flight {
            return Err(CommitError::TooManyInFlight {
                limit: self.config.max_in_flight,
            });
        }
        if tx.writes.is_empty() {
            return Err(CommitError::NoWrites);
        }
        if tx.writes.len() > self.config.max_writes {
            return Err(CommitError::TooManyWrites {
                count: tx.writes.len(),
                limit: self.config.max_writes,
            });
        }
        let mut keys = BTreeSet::new();
        for w in &tx.writes {
            if w.data.len() > self.config.max_data_bytes {
                return Err(CommitError::Oversized {
                    len: w.data.len(),
                    limit: self.config.max_data_bytes,
                });
            }
            if !keys.insert(&w.key) {
                return Err(CommitError::DuplicateKey);
            }
            let held = self.store.version(&w.key).unwrap_or(0);
            if w.version <= held {
                return Err(CommitError::StaleVersion {
                    held,
                    given: w.version,
                });
            }
        }
        if let Some(f) = tx.followers.iter().find(|f| !ctx.nodes.contains(f)) {
            return Err(CommitError::UnknownFollower(*f));
        }
        let followers: Vec<NodeId> = tx
            .followers
            .iter()
            .copied()
            .filter(|f| *f != self.me && ctx.view.members.contains_key(f))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let tx_id = TxId::new(self.me, self.next_local);
        self.next_local += 1;
        for w in &tx.writes {
            self.store.apply(&w.key, w.version, &w.data);
        }
        let inv = RInv {
            tx_id,
            epoch_id: self.epoch,
            origin: self.epoch,
            followers,
            writes: tx.writes,
            // Every earlier slot validated: a follower that missed them may
            // apply this one at once.
            prev_val: self.pending.is_empty(),
            replay: false,
        };
        for f in &inv.followers {
            fx.send(*f, CommitMsg::new(self.epoch, Body::RInv(inv.clone())));
        }
        self.pending.insert(
            tx_id.local,
            Driving {
                inv,
                acked: BTreeSet::new(),
            },
        );
        fx.output(CommitOut::Started { tx_id });
        self.try_commit(fx);
        debug_assert!(self.pending.len() <= self.config.max_in_flight);
        debug_assert!(self.validated_upto < self.next_local);
        Ok(tx_id)
    }

    /// Reliably commits own transactions, oldest first, while the oldest
    /// is fully acked. In order, so that an R-VAL (and a prev-VAL bit)
    /// speaks for every earlier slot as well.
    fn try_commit(&mut self, fx: &mut Fx) {
        while let Some(entry) = self.pending.first_entry() {
            let d = entry.get();
            let ready = if self.bugs.committed_before_all_acks {
                d.inv.followers.is_empty() || !d.acked.is_empty()
            } else {
                d.fully_acked()
            };
            if !ready {
                break;
            }
            let d = entry.remove();
            let tx_id = d.inv.tx_id;
            debug_assert_eq!(
                tx_id.local,
                self.validated_upto + 1,
                "commits in pipeline order"
            );
            for w in &d.inv.writes {
                self.validate(&w.key, w.version);
            }
            self.validated_upto = tx_id.local;
            self.stats.committed += 1;
            fx.output(CommitOut::Committed { tx_id });
            // The R-VAL also goes to the followers of later slots: one
            // that is not a follower of this slot may hold the next one
            // back until it hears that this one is validated.
            let mut to: BTreeSet<NodeId> = d.inv.followers.iter().copied().collect();
            for later in self.pending.values() {
                to.extend(later.inv.followers.iter().copied());
            }
            for f in to {
                let val = RVal {
                    tx_id,
                    epoch_id: self.epoch,
                };
                fx.send(f, CommitMsg::new(self.epoch, Body::RVal(val)));
            }
        }
        debug_assert!(self.pending.keys().all(|l| *l > self.validated_upto));
        debug_assert!(self
            .pending
            .first_key_value()
            .is_none_or(|(l, _)| *l == self.validated_upto + 1));
    }

    fn on_ack(&mut self, from: NodeId, ack: RAck, fx: &mut Fx) {
        debug_assert!(from != self.me, "no ack from oneself");
        let tx_id = ack.tx_id;
        if tx_id.node == self.me {
            if tx_id.local <= self.validated_upto {
                // Validated already: the follower re-acks because it missed
                // the R-VAL. The R-VAL of this slot speaks for it.
                self.stats.drop(DropReason::Stale);
                let val = RVal {
                    tx_id,
                    epoch_id: self.epoch,
                };
                fx.send(from, CommitMsg::new(self.epoch, Body::RVal(val)));
                return;
            }
            let Some(d) = self.pending.get(&tx_id.local) else {
                self.stats.drop(DropReason::Unknown);
                return;
            };
            if !d.inv.followers.contains(&from) {
                self.stats.drop(DropReason::NotFollower);
                return;
            }
            // An R-ACK of slot n implies every earlier slot this follower
            // follows: it applied n only once n-1 was applied or validated
            // there (the seed: a message with a tx_id implies the
            // processing of all previous ones of the pipeline).
            for d in self.pending.range_mut(..=tx_id.local).map(|(_, d)| d) {
                if d.inv.followers.contains(&from) {
                    d.acked.insert(from);
                }
            }
            self.try_commit(fx);
        } else {
            // A replay's acks are its own (not cumulative): a replayer
            // speaks for the slots it replays only.
            let Some(d) = self.replays.get_mut(&tx_id) else {
                self.stats.drop(DropReason::Unknown);
                return;
            };
            if !d.inv.followers.contains(&from) {
                self.stats.drop(DropReason::NotFollower);
                return;
            }
            d.acked.insert(from);
            self.advance_replays(tx_id.node, false, fx);
        }
        debug_assert!(self.pending.len() <= self.config.max_in_flight);
    }

    // ---------------------------------------------------------------
    // Follower.

    fn check_inv(&self, ctx: &Context<'_>, from: NodeId, inv: &RInv) -> Result<(), DropReason> {
        debug_assert!(
            ctx.view.members.contains_key(&from),
            "checked by on_message"
        );
        if inv.tx_id.local == 0 || inv.writes.is_empty() {
            return Err(DropReason::Malformed);
        }
        if inv.writes.len() > self.config.max_writes
            || inv.followers.len() > ctx.nodes.len()
            || inv
                .writes
                .iter()
                .any(|w| w.data.len() > self.config.max_data_bytes)
        {
            return Err(DropReason::Oversized);
        }
        let keys: BTreeSet<&Vec<u8>> = inv.writes.iter().map(|w| &w.key).collect();
        let followers: BTreeSet<&NodeId> = inv.followers.iter().collect();
        if keys.len() != inv.writes.len()
            || inv.origin > inv.epoch_id
            || followers.len() != inv.followers.len()
            || inv.writes.iter().any(|w| w.version == 0)
            || followers.contains(&inv.tx_id.node)
        {
            return Err(DropReason::Malformed);
        }
        if !followers.contains(&self.me) {
            return Err(DropReason::NotFollower);
        }
        if inv.tx_id.node == self.me {
            // Nobody replays a live coordinator's transactions.
            return Err(DropReason::ForgedSender);
        }
        if inv.replay {
            // The coordinator's id may be in the view again as a new
            // incarnation: a replay of its old incarnation's slots is
            // legitimate, so only the sender is checked.
            if !followers.contains(&from) || from == self.me {
                return Err(DropReason::ForgedSender);
            }
        } else if from != inv.tx_id.node {
            return Err(DropReason::ForgedSender);
        }
        Ok(())
    }

    /// The pipeline of `coordinator`. A restarted coordinator keeps it:
    /// its tx ids start above the old ones (they begin at its epoch), and
    /// its first R-INV carries the prev-VAL bit.
    fn pipeline(&mut self, ctx: &Context<'_>, coordinator: NodeId) -> &mut Pipeline {
        debug_assert!(coordinator != self.me, "no pipeline of one's own");
        let incarnation = ctx.view.members.get(&coordinator).copied().unwrap_or(0);
        let p = self.pipelines.entry(coordinator).or_default();
        if p.incarnation != incarnation {
            // Held R-INVs of an incarnation that is gone would block the
            // new one's slots.
            let gone = std::mem::take(&mut p.held).len() as u64;
            *self
                .stats
                .drops
                .entry(DropReason::CoordinatorGone)
                .or_default() += gone;
            p.incarnation = incarnation;
        }
        p
    }

    fn on_inv(&mut self, ctx: &Context<'_>, from: NodeId, inv: RInv, fx: &mut Fx) {
        if let Err(reason) = self.check_inv(ctx, from, &inv) {
            self.stats.drop(reason);
            return;
        }
        let tx_id = inv.tx_id;
        let total_held = self.held();
        let total_stored = self.stored();
        let ignore_order = self.bugs.follower_ignores_pipeline_order;
        let p = self.pipeline(ctx, tx_id.node);
        // `done_upto` speaks for the coordinator's own stream only: a
        // replayed slot of an older incarnation may sit below a newer
        // incarnation's, unapplied here.
        let duplicate =
            p.stored.contains_key(&tx_id.local) || (!inv.replay && tx_id.local <= p.done_upto);
        let was_held = p.held.contains_key(&tx_id.local);
        if duplicate {
            // Applied (or validated) already: re-ack, do not re-apply.
            self.stats.drop(DropReason::Duplicate);
            self.send_ack(from, tx_id, fx);
            return;
        }
        if inv.replay {
            // A replayer applied it, so its pipeline predecessors are
            // applied or validated at a live node and replayed too; the
            // versions make the per-object result order-independent.
            if total_stored >= self.config.max_stored {
                self.stats.drop(DropReason::Overloaded);
                return;
            }
            if let Some(p) = self.pipelines.get_mut(&tx_id.node) {
                p.held.remove(&tx_id.local);
            }
            self.apply(ctx, from, inv, fx);
            return;
        }
        if was_held {
            // A re-send may carry a prev-VAL bit the first copy lacked.
            self.stats.drop(DropReason::Duplicate);
        } else if !ignore_order && total_held >= self.config.max_held {
            self.stats.drop(DropReason::Overloaded);
            return;
        } else {
            self.stats.held += 1;
        }
        debug_assert!(!inv.replay);
        self.pipeline(ctx, tx_id.node).held.insert(tx_id.local, inv);
        self.drain(ctx, tx_id.node, fx);
        debug_assert!(
            self.pipelines.get(&tx_id.node).is_some_and(|p| p
                .held
                .keys()
                .all(|l| *l > p.done_upto)
                || ignore_order)
                || self.stored() >= self.config.max_stored
        );
    }

    /// Applies the held R-INVs of `coordinator` whose turn has come (the
    /// partial-stream rule: slot n once slot n-1 is applied or validated
    /// here, or n carries the prev-VAL bit).
    fn drain(&mut self, ctx: &Context<'_>, coordinator: NodeId, fx: &mut Fx) {
        let ignore_order = self.bugs.follower_ignores_pipeline_order;
        loop {
            if self.stored() >= self.config.max_stored {
                break;
            }
            let Some(p) = self.pipelines.get_mut(&coordinator) else {
                return;
            };
            let Some((&local, inv)) = p.held.first_key_value() else {
                break;
            };
            if local <= p.done_upto {
                // Validated meanwhile through a later R-VAL.
                p.held.remove(&local);
                continue;
            }
            if !(ignore_order || inv.prev_val || local == p.done_upto + 1) {
                break;
            }
            let inv = p.held.remove(&local).unwrap_or_else(|| unreachable!());
            self.apply(ctx, coordinator, inv, fx);
        }
        debug_assert!(self.held() <= self.config.max_held || ignore_order);
    }

    /// Installs the R-INV's newer versions (Invalid), stores it until its
    /// R-VAL and acks it to `ack_to`.
    fn apply(&mut self, ctx: &Context<'_>, ack_to: NodeId, inv: RInv, fx: &mut Fx) {
        let tx_id = inv.tx_id;
        let replay = inv.replay;
        // A replay of a slot issued before this node's state began (it
        // restarted, or the view excluded it, since): a follower by node
        // id only. It keeps current the copies this state got since (from
        // the coordinator's re-sends, then newer writes), but installs
        // none: the slot may be older than a version committed before
        // this state began, which it never got, and a reader here would
        // then see the older version after the newer one (the simulator's
        // real-time check, 5-node seed 50123).
        let predates = replay && self.joined.is_none_or(|joined| inv.origin < joined);
        for w in &inv.writes {
            let held = self.store.version(&w.key);
            if predates && held.is_none() {
                self.stats.replayed_writes_skipped += 1;
                continue;
            }
            // Only newer versions: a replay or duplicate is idempotent.
            if held.is_none_or(|v| v < w.version) {
                self.store.apply(&w.key, w.version, &w.data);
            }
        }
        let p = self.pipelines.entry(tx_id.node).or_default();
        if !replay {
            // Every earlier slot was applied or validated here, or the
            // prev-VAL bit says the coordinator validated them.
            p.done_upto = p.done_upto.max(tx_id.local);
        }
        let incarnation = if replay {
            0
        } else {
            ctx.view.members.get(&tx_id.node).copied().unwrap_or(0)
        };
        p.stored.insert(tx_id.local, Stored { inv, incarnation });
        self.stats.applied += 1;
        fx.output(CommitOut::Applied { tx_id, replay });
        self.send_ack(ack_to, tx_id, fx);
        debug_assert!(self
            .pipelines
            .get(&tx_id.node)
            .is_some_and(|p| p.stored.contains_key(&tx_id.local)));
    }

    fn send_ack(&mut self, to: NodeId, tx_id: TxId, fx: &mut Fx) {
        debug_assert!(to != self.me, "no ack to oneself");
        debug_assert!(tx_id.node != self.me, "no ack of one's own slot");
        let ack = RAck {
            tx_id,
            epoch_id: self.epoch,
        };
        fx.send(to, CommitMsg::new(self.epoch, Body::RAck(ack)));
    }

    fn on_val(&mut self, ctx: &Context<'_>, from: NodeId, val: RVal, fx: &mut Fx) {
        let tx_id = val.tx_id;
        if tx_id.node == self.me {
            self.stats.drop(DropReason::ForgedSender);
            return;
        }
        if from == tx_id.node {
            // From the coordinator: it validates in pipeline order, so the
            // R-VAL of slot n validates every earlier slot of its
            // incarnation as well (an older incarnation's are replays').
            let live = ctx.view.members.get(&tx_id.node).copied();
            let p = self.pipeline(ctx, tx_id.node);
            let duplicate = tx_id.local <= p.done_upto && !p.stored.contains_key(&tx_id.local);
            let done: Vec<u64> = p
                .stored
                .range(..=tx_id.local)
                .filter(|(_, s)| Some(s.incarnation) == live)
                .map(|(l, _)| *l)
                .collect();
            p.done_upto = p.done_upto.max(tx_id.local);
            let done: Vec<Stored> = done.iter().filter_map(|l| p.stored.remove(l)).collect();
            if duplicate {
                self.stats.drop(DropReason::Duplicate);
            }
            for stored in &done {
                for w in &stored.inv.writes {
                    self.validate_on_val(w);
                }
            }
            self.drain(ctx, tx_id.node, fx);
        } else {
            // From a replayer: it speaks for its slot only, and only a
            // follower of the slot replays it.
            let Some(p) = self.pipelines.get_mut(&tx_id.node) else {
                self.stats.drop(DropReason::Stale);
                return;
            };
            let Some(held) = p.stored.get(&tx_id.local) else {
                self.stats.drop(DropReason::Stale);
                return;
            };
            if !held.inv.followers.contains(&from) {
                self.stats.drop(DropReason::ForgedSender);
                return;
            }
            let Some(stored) = p.stored.remove(&tx_id.local) else {
                return;
            };
            for w in &stored.inv.writes {
                self.validate_on_val(w);
            }
            // Someone finished it: this node's replay of it is moot, and
            // if it was this node's oldest of the pipeline, the next one's
            // turn has come.
            let turn = self.replay_turn(tx_id);
            if self.replays.remove(&tx_id).is_some() && turn {
                self.advance_replays(tx_id.node, true, fx);
            }
            self.check_recovered(fx);
        }
        debug_assert!(self
            .pipelines
            .get(&tx_id.node)
            .is_none_or(|p| from != tx_id.node || p.done_upto >= tx_id.local));
    }

    /// Marks the object Valid iff it is still at `version` (counted).
    fn validate(&mut self, key: &[u8], version: u64) {
        if self.store.validate(key, version) {
            self.stats.validated += 1;
        }
    }

    /// A follower validates one write of a slot an R-VAL finished: Valid
    /// iff the object is still at that version (a later slot's pending
    /// R-INV keeps it Invalid).
    fn validate_on_val(&mut self, w: &Write) {
        let version = if self.bugs.follower_validates_stale_rval {
            // Planted: whatever version is held now.
            self.store.version(&w.key).unwrap_or(w.version)
        } else {
            w.version
        };
        self.validate(&w.key, version);
    }

    // ---------------------------------------------------------------
    // Recovery.

    fn on_view_change(&mut self, ctx: &Context<'_>, fx: &mut Fx) {
        if !ctx.member {
            // Out of the view: the others finish (or drop) what this node
            // started; its copies are no longer kept current.
            for d in std::mem::take(&mut self.pending).into_values() {
                fx.output(CommitOut::Unknown { tx_id: d.inv.tx_id });
            }
            // The abandoned slots are the followers' to finish (they replay
            // what they applied): this pipeline goes on after them, and its
            // next R-INV carries the prev-VAL bit.
            self.validated_upto = self.next_local - 1;
            self.replays.clear();
            self.pipelines.clear();
            // Nothing keeps this node's copies current any more.
            self.store.clear();
            self.epoch = ctx.view.epoch;
            self.joined = None;
            return;
        }
        if !self.started {
            self.start(ctx);
            return;
        }
        if self.joined.is_none() {
            // Back in the view with nothing: a new state begins here.
            self.joined = Some(ctx.view.epoch);
        }
        debug_assert!(ctx.view.epoch >= self.epoch, "epochs only grow");
        self.epoch = ctx.view.epoch;
        let live = |n: &NodeId| ctx.view.members.contains_key(n);
        // Own pending R-INVs: the new epoch, live followers only, acks
        // asked again (an ack of the old epoch may come from a node whose
        // state is gone), re-sent.
        let oldest = self.validated_upto + 1;
        for d in self.pending.values_mut() {
            d.inv.epoch_id = self.epoch;
            d.inv.followers.retain(live);
            d.acked.clear();
            d.inv.prev_val = d.inv.tx_id.local == oldest;
        }
        // Pipelines of coordinators that failed (or restarted): their
        // applied R-INVs become replays run by this node; held ones are
        // dropped (no live node acked them unless it applied them, and
        // then it replays them to this node).
        let coordinators: Vec<NodeId> = self.pipelines.keys().copied().collect();
        for c in coordinators {
            self.pipeline(ctx, c);
        }
        self.adopt_orphans(ctx);
        for d in self.replays.values_mut() {
            d.inv.epoch_id = self.epoch;
            d.inv.followers.retain(live);
            d.acked.clear();
            d.acked.insert(self.me);
        }
        self.recovering = !self.replays.is_empty();
        // Re-send every own pending R-INV, start each failed pipeline's
        // replay at its oldest slot, and finish what needs no one else.
        let mut sends = Vec::new();
        for d in self.pending.values() {
            for f in d.inv.followers.iter().filter(|f| **f != self.me) {
                sends.push((*f, d.inv.clone()));
            }
        }
        for (f, inv) in sends {
            self.stats.resends += 1;
            fx.send(f, CommitMsg::new(self.epoch, Body::RInv(inv)));
        }
        self.try_commit(fx);
        let failed: BTreeSet<NodeId> = self.replays.keys().map(|t| t.node).collect();
        for c in failed {
            self.advance_replays(c, true, fx);
        }
        self.check_recovered(fx);
        debug_assert!(self.pending.values().all(|d| d.inv.epoch_id == self.epoch));
        debug_assert!(self.replays.values().all(|d| d.inv.replay));
    }

    /// Takes over every applied R-INV of a coordinator that failed (or
    /// restarted) that this node does not replay yet: at a view change,
    /// and on the timer for one whose replayer's R-VAL was lost (or whose
    /// replayer failed too). Returns the new replays.
    fn adopt_orphans(&mut self, ctx: &Context<'_>) -> Vec<TxId> {
        let mut adopted = Vec::new();
        for (c, p) in self.pipelines.iter_mut() {
            for stored in p.stored.values_mut() {
                if ctx.view.members.get(c) == Some(&stored.incarnation) {
                    continue;
                }
                // An orphan for good: should the same incarnation come back
                // (after being cut off, with nothing), its R-VALs do not
                // speak for this slot.
                stored.incarnation = 0;
                if self.replays.contains_key(&stored.inv.tx_id) {
                    continue;
                }
                let mut inv = stored.inv.clone();
                inv.replay = true;
                inv.epoch_id = self.epoch;
                inv.followers.retain(|f| ctx.view.members.contains_key(f));
                adopted.push(inv.tx_id);
                self.replays.insert(
                    inv.tx_id,
                    Driving {
                        inv,
                        acked: BTreeSet::from([self.me]),
                    },
                );
            }
        }
        self.stats.replays_started += adopted.len() as u64;
        if !adopted.is_empty() {
            self.recovering = true;
        }
        debug_assert!(adopted.iter().all(|t| self.replays.contains_key(t)));
        debug_assert!(adopted.iter().all(|t| t.node != self.me));
        adopted
    }

    /// Whether `tx_id` is the oldest slot of its pipeline this node
    /// replays: only that one is sent and finished (replays of a pipeline
    /// go one at a time, in slot order).
    fn replay_turn(&self, tx_id: TxId) -> bool {
        self.replays
            .range(TxId::new(tx_id.node, 0)..tx_id)
            .next()
            .is_none()
    }

    /// Runs the replays of `coordinator`'s failed pipeline in slot order:
    /// finishes the oldest while every live follower acked it, and sends
    /// the R-INV of each one whose turn comes (of the oldest too, with
    /// `send_oldest`). So a follower applies a replayed slot only once
    /// every earlier slot this node replays is applied at every live
    /// follower, and a later slot is never Valid anywhere while an earlier
    /// one is not yet applied there: a reader sees a prefix of the
    /// pipeline, and a later slot never survives without the earlier ones
    /// this node holds.
    fn advance_replays(&mut self, coordinator: NodeId, mut send_oldest: bool, fx: &mut Fx) {
        let all = TxId::new(coordinator, 0)..=TxId::new(coordinator, u64::MAX);
        while let Some((&tx_id, d)) = self.replays.range(all.clone()).next() {
            if send_oldest {
                let to: Vec<NodeId> = d
                    .inv
                    .followers
                    .iter()
                    .copied()
                    .filter(|f| *f != self.me && !d.acked.contains(f))
                    .collect();
                for f in to {
                    self.stats.resends += 1;
                    let inv = d.inv.clone();
                    fx.send(f, CommitMsg::new(self.epoch, Body::RInv(inv)));
                }
            }
            if !d.fully_acked() {
                break;
            }
            self.finish_replay(tx_id, fx);
            send_oldest = true;
        }
        self.check_recovered(fx);
    }

    /// A replay every live follower acked (and the oldest of its pipeline
    /// here): validate it here, R-VAL the others.
    fn finish_replay(&mut self, tx_id: TxId, fx: &mut Fx) {
        debug_assert!(self.replay_turn(tx_id));
        let Some(d) = self.replays.remove(&tx_id) else {
            return;
        };
        debug_assert!(d.fully_acked());
        if let Some(p) = self.pipelines.get_mut(&tx_id.node) {
            p.stored.remove(&tx_id.local);
        }
        for w in &d.inv.writes {
            self.validate(&w.key, w.version);
        }
        for f in d.inv.followers.iter().filter(|f| **f != self.me) {
            let val = RVal {
                tx_id,
                epoch_id: self.epoch,
            };
            fx.send(*f, CommitMsg::new(self.epoch, Body::RVal(val)));
        }
        self.stats.replays_finished += 1;
        debug_assert!(!self.replays.contains_key(&tx_id));
        debug_assert!(d.inv.replay);
    }

    fn check_recovered(&mut self, fx: &mut Fx) {
        debug_assert!(self.replays.keys().all(|t| t.node != self.me));
        if self.recovering && self.replays.is_empty() {
            self.recovering = false;
            fx.output(CommitOut::Recovered { epoch: self.epoch });
        }
    }

    // ---------------------------------------------------------------
    // Timer.

    fn on_tick(&mut self, ctx: &Context<'_>, fx: &mut Fx) {
        let adopted = self.adopt_orphans(ctx);
        let mut budget = self.config.max_resends_per_tick;
        let oldest = self.validated_upto + 1;
        let mut sends = Vec::new();
        // Own pending R-INVs, and the replay whose turn it is of each
        // failed pipeline.
        let turns: BTreeSet<TxId> = self
            .replays
            .keys()
            .copied()
            .filter(|t| self.replay_turn(*t))
            .collect();
        let replays = self
            .replays
            .values_mut()
            .filter(|d| turns.contains(&d.inv.tx_id));
        for d in self.pending.values_mut().chain(replays) {
            if d.inv.tx_id.node == self.me {
                // Recomputed: the slot before may have been validated since.
                d.inv.prev_val = d.inv.tx_id.local == oldest;
            }
            for f in &d.inv.followers {
                if budget == 0 {
                    break;
                }
                if *f != self.me && !d.acked.contains(f) {
                    sends.push((*f, d.inv.clone()));
                    budget -= 1;
                }
            }
        }
        for (f, inv) in sends {
            self.stats.resends += 1;
            fx.send(f, CommitMsg::new(self.epoch, Body::RInv(inv)));
        }
        // A replay just taken over may need no one else (or be acked by
        // every follower already).
        let adopted: BTreeSet<NodeId> = adopted.iter().map(|t| t.node).collect();
        for c in adopted {
            self.advance_replays(c, false, fx);
        }
        // A follower whose R-VAL was lost re-acks its newest stored slot of
        // each live coordinator; the coordinator answers with the R-VAL.
        let mut acks = Vec::new();
        for (c, p) in &self.pipelines {
            if budget == 0 {
                break;
            }
            let live = ctx.view.members.get(c);
            if let Some((&local, _)) = p
                .stored
                .range(..=p.done_upto)
                .rev()
                .find(|(_, s)| Some(&s.incarnation) == live)
            {
                acks.push(TxId::new(*c, local));
                budget -= 1;
            }
        }
        for tx_id in acks {
            self.send_ack(tx_id.node, tx_id, fx);
        }
        debug_assert!(budget <= self.config.max_resends_per_tick);
    }

    fn busy(&self) -> bool {
        !self.pending.is_empty()
            || !self.replays.is_empty()
            || self.pipelines.values().any(|p| !p.stored.is_empty())
    }

    fn on_message(&mut self, ctx: &Context<'_>, from: NodeId, msg: CommitMsg, fx: &mut Fx) {
        debug_assert_eq!(ctx.me, self.me);
        if msg.version != WIRE_VERSION {
            self.stats.drop(DropReason::UnsupportedVersion);
            return;
        }
        if !ctx.member || !self.started {
            self.stats.drop(DropReason::NotMember);
            return;
        }
        let inner = match &msg.body {
            Body::RInv(m) => m.epoch_id,
            Body::RAck(m) => m.epoch_id,
            Body::RVal(m) => m.epoch_id,
        };
        if msg.epoch != self.epoch || inner != self.epoch || ctx.view.epoch != self.epoch {
            self.stats.drop(DropReason::WrongEpoch);
            return;
        }
        if !ctx.view.members.contains_key(&from) {
            self.stats.drop(DropReason::SenderNotMember);
            return;
        }
        match msg.body {
            Body::RInv(inv) => self.on_inv(ctx, from, inv, fx),
            Body::RAck(ack) => self.on_ack(from, ack, fx),
            Body::RVal(val) => self.on_val(ctx, from, val, fx),
        }
    }

    /// Checks the invariants that hold between inputs (debug builds call
    /// it after every input; tests may call it any time).
    pub fn check_invariants(&self) {
        assert!(self.validated_upto < self.next_local);
        assert!(self.started || self.joined.is_none());
        assert!(self.joined.is_none_or(|joined| joined <= self.epoch));
        assert!(self.pending.len() <= self.config.max_in_flight);
        assert!(self.pending.keys().all(|l| *l > self.validated_upto));
        assert!(self.replays.keys().all(|t| t.node != self.me));
        for (c, p) in &self.pipelines {
            assert!(*c != self.me, "no pipeline of one's own");
            assert!(p.stored.values().all(|s| s.inv.tx_id.node == *c));
            assert!(p.held.keys().all(|l| !p.stored.contains_key(l)));
        }
    }
}

impl<S: Hash> Hash for ReliableCommit<S> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        // Every field but `config`, `bugs` (fixed for a node's life) and
        // `stats` (counters only).
        self.me.hash(h);
        self.store.hash(h);
        self.epoch.hash(h);
        self.joined.hash(h);
        self.started.hash(h);
        self.next_local.hash(h);
        self.validated_upto.hash(h);
        self.pending.hash(h);
        self.pipelines.hash(h);
        self.replays.hash(h);
        self.recovering.hash(h);
        self.timer_armed.hash(h);
    }
}

impl<S: ObjectStore> Protocol for ReliableCommit<S> {
    type Msg = CommitMsg;
    type Cmd = CommitCmd;
    type Out = CommitOut;

    fn on_input(&mut self, ctx: &Context<'_>, input: Input<CommitMsg, CommitCmd>, fx: &mut Fx) {
        assert_eq!(ctx.me, self.me, "a protocol runs at one node");
        if !matches!(input, Input::ViewChange) {
            self.start(ctx);
        }
        match input {
            Input::Message { from, msg } => self.on_message(ctx, from, msg, fx),
            Input::Timer(RETRANSMIT_TIMER) => {
                self.timer_armed = false;
                self.on_tick(ctx, fx);
            }
            Input::Timer(_) => {}
            Input::ViewChange => self.on_view_change(ctx, fx),
            Input::Command(CommitCmd::Commit(tx)) => {
                if let Err(error) = self.commit(ctx, tx, fx) {
                    fx.output(CommitOut::Refused { error });
                }
            }
        }
        if !self.timer_armed && self.busy() {
            self.timer_armed = true;
            fx.set_timer(RETRANSMIT_TIMER, self.config.retransmit_ms);
        }
        #[cfg(debug_assertions)]
        self.check_invariants();
    }
}

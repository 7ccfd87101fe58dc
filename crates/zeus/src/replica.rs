//! One Zeus node: the ownership protocol and the reliable commit over one
//! object store, composed into one [`Protocol`] by the rules that tie them
//! (the same rules the node crate's `Zeus` applies over its database):
//!
//! * **Only the owner writes.** A write transaction first acquires every
//!   object it writes or reads (ownership's `ChangeOwner`), then commits locally at
//!   once, in the same step: each object's next `t_version`, Invalid here,
//!   and the reliable commit's R-INV to the **followers**, the readers the
//!   ownership metadata names.
//! * **The pending-commit hook.** An owner NACKs every ownership request
//!   for an object while one of its transactions that wrote or read it is
//!   not reliably committed (`has_pending_commit`): the object cannot move,
//!   or gain a reader, with a write still on its way to the readers. (The
//!   seed names written objects; with read ones left out, a new owner's
//!   write to what a pending transaction read is answered first, and a
//!   later read that misses the pending write closes a real-time cycle:
//!   the `pending_ignores_reads` bug, which the simulator's real-time
//!   check finds.)
//! * **Recovery order.** On a view change the reliable commit recovers
//!   first; ownership serves again (takes new requests, finishes replayed
//!   ones) only once it has **at every live node** (the seed: "once all
//!   live nodes finish the recovery"): each node tells the others
//!   ([`ZeusMsg::Recovered`], [`Recoveries`]) when no R-INV of a failed coordinator is
//!   pending there. So a reader that becomes owner holds every version a
//!   failed coordinator's R-INV carried to some live node. (With the
//!   local check alone, the simulator found a reader becoming owner at
//!   version 4 while a replay of versions 5 and 6 was still on its way.)
//! * **Data moves with its version.** Ownership ships an object as its
//!   `t_version` and data; an install never replaces a newer copy.
//! * **Read-only transactions** run here, with no message, when this node
//!   is a valid owner or reader of every object read (ownership) and each
//!   is Valid (reliable commit).
//! * **Replication degree**: every node is a replica of every object (3
//!   nodes: the default degree 3). A node that holds no copy of an object
//!   asks to read it (`AddReader`), so a restarted node gets its replicas
//!   back; the home node of an object creates it.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use roost_cluster::{Context, Effects, Input, NodeId, Protocol, TimerId};
use roost_commit::{
    CommitBugs, CommitCmd, CommitConfig, CommitError, CommitMsg, CommitOut, Key, ObjectState,
    ObjectStore as CommitObjectStore, ReliableCommit, Transaction, TxId, Write, RETRANSMIT_TIMER,
};
use roost_ownership::{
    Access, FailReason, ObjectData, ObjectStore as OwnershipObjectStore, Ownership, OwnershipBugs,
    OwnershipCmd, OwnershipConfig, OwnershipMsg, OwnershipOut, ReqId, RequestKind,
};
use serde::{Deserialize, Serialize};

use crate::recoveries::{Recovered, Recoveries};

/// An object's key, for ownership (the reliable commit keys it by
/// [`commit_key`]).
pub type Object = u64;

/// The replica manager's tick: missing copies and home objects are asked
/// for then.
pub const REPLICA_TIMER: TimerId = 0x7a65_7573_7265_706c;
/// Its period.
pub const REPLICA_TICK_MS: u64 = 40;
/// Add-reader and create requests one node keeps in flight, at most.
pub const MAX_REPLICA_REQUESTS: usize = 4;
/// Rounds of acquisitions one write transaction may need (an object it
/// acquired can be taken away before the others arrive).
pub const MAX_ACQUIRE_ROUNDS: u32 = 3;
/// Write transactions waiting for ownership at one node, at most.
pub const MAX_WAITING: usize = 256;
/// Objects one transaction may write or read.
pub const MAX_TX_OBJECTS: usize = 8;

/// The reliable commit's key of an object.
pub fn commit_key(object: Object) -> Key {
    object.to_be_bytes().to_vec()
}

fn object_of(key: &[u8]) -> Option<Object> {
    <[u8; 8]>::try_from(key).ok().map(u64::from_be_bytes)
}

/// Planted faults in the glue between the protocols (never set in
/// production): each breaks one of the rules above.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ZeusBugs {
    /// The owner answers "no pending commit" to ownership: an object moves
    /// (or gains a reader) while a write on it is still on its way.
    pub ignore_pending_commit: bool,
    /// Ownership serves again after a view change once the reliable
    /// commit's recovery is over at this node, not at every live node.
    pub local_commit_recovery: bool,
    /// A read-only transaction reads any copy held here, whatever
    /// ownership says of it (a copy whose reader was dropped, or one an
    /// arbitration invalidated).
    pub read_without_access: bool,
    /// The client is answered at the local commit, before the followers
    /// acknowledged (the seed: only once reliably committed).
    pub answer_before_replication: bool,
    /// A write transaction's pending commit holds back the ownership of
    /// the objects it wrote, not of those it only read: a new owner's
    /// write to one of those is answered first, and a reader that then
    /// misses this transaction's writes sees the two out of order.
    pub pending_ignores_reads: bool,
}

/// What the node holds of one object.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Copy {
    pub version: u64,
    pub data: Vec<u8>,
    pub state: ObjectState,
}

/// The one store both protocols see.
#[derive(Debug, Default)]
pub struct Objects {
    pub copies: BTreeMap<Object, Copy>,
    /// Transactions this node coordinates that wrote or read the object
    /// and are not reliably committed (or known lost) yet.
    pub pending: BTreeMap<Object, u32>,
    /// The reliable commit's recovery after the last view change runs.
    pub recovering: bool,
    pub bugs: ZeusBugs,
    /// Installs that found a newer copy here and kept it.
    pub stale_installs: u64,
}

type Shared = Rc<RefCell<Objects>>;

/// Ownership's view of the store.
#[derive(Debug)]
pub struct OwnershipStore(Shared);

impl OwnershipObjectStore<Object> for OwnershipStore {
    fn export(&mut self, key: &Object) -> Option<ObjectData> {
        let objects = self.0.borrow();
        let copy = objects.copies.get(key)?;
        Some(ObjectData::new(copy.version, copy.data.clone()))
    }

    fn install(&mut self, key: &Object, data: ObjectData) {
        let mut objects = self.0.borrow_mut();
        let held = objects.copies.get(key).map(|c| c.version);
        if held.is_some_and(|v| v > data.t_version) {
            // A reliable commit brought a newer version here already.
            objects.stale_installs += 1;
            return;
        }
        objects.copies.insert(
            *key,
            Copy {
                version: data.t_version,
                data: data.rows,
                state: ObjectState::Valid,
            },
        );
        debug_assert_eq!(objects.copies[key].version, data.t_version);
    }

    fn remove(&mut self, key: &Object) {
        self.0.borrow_mut().copies.remove(key);
    }

    fn has_pending_commit(&self, key: &Object) -> bool {
        let objects = self.0.borrow();
        if objects.bugs.ignore_pending_commit {
            return false;
        }
        objects.pending.get(key).is_some_and(|n| *n > 0)
    }

    fn commit_recovery_done(&self) -> bool {
        let objects = self.0.borrow();
        !objects.recovering
    }
}

/// The reliable commit's view of the store.
#[derive(Debug)]
pub struct CommitStore(Shared);

impl CommitObjectStore for CommitStore {
    fn version(&self, key: &[u8]) -> Option<u64> {
        let object = object_of(key)?;
        self.0.borrow().copies.get(&object).map(|c| c.version)
    }

    fn apply(&mut self, key: &[u8], version: u64, data: &[u8]) {
        let Some(object) = object_of(key) else {
            debug_assert!(false, "a write names no object");
            return;
        };
        let mut objects = self.0.borrow_mut();
        let old = objects.copies.get(&object).map(|c| c.version);
        debug_assert!(old.is_none_or(|v| v < version), "apply only newer versions");
        objects.copies.insert(
            object,
            Copy {
                version,
                data: data.to_vec(),
                state: ObjectState::Invalid,
            },
        );
    }

    fn validate(&mut self, key: &[u8], version: u64) -> bool {
        let Some(object) = object_of(key) else {
            return false;
        };
        match self.0.borrow_mut().copies.get_mut(&object) {
            Some(copy) if copy.version == version => {
                copy.state = ObjectState::Valid;
                true
            }
            _ => false,
        }
    }

    fn state(&self, key: &[u8]) -> Option<ObjectState> {
        let object = object_of(key)?;
        self.0.borrow().copies.get(&object).map(|c| c.state)
    }

    fn clear(&mut self) {
        self.0.borrow_mut().copies.clear();
    }
}

/// Messages between Zeus nodes: each protocol's own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ZeusMsg {
    Ownership(OwnershipMsg<Object>),
    Commit(CommitMsg),
    /// The sender's knowledge of the reliable commit's recovery
    /// ([`Recoveries`]).
    Recovered(Recovered),
}

/// A client's transaction, tagged by the client (tags are unique).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZeusCmd {
    /// Write every object of `objects` (its data becomes [`WriteRecord`]
    /// of this transaction), having read those of `reads` (owned too, as
    /// the seed's write transactions own everything they access).
    Write {
        tag: u64,
        objects: Vec<Object>,
        reads: Vec<Object>,
    },
    /// Read every object, here, with no message.
    Read { tag: u64, objects: Vec<Object> },
}

/// One object a read-only transaction read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadValue {
    pub object: Object,
    pub version: u64,
    pub data: Vec<u8>,
}

/// Why a transaction was not run (nothing of it took effect).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    NotServing,
    TooManyObjects,
    Busy,
    Ownership(FailReason),
    /// Its objects kept moving away while it acquired them.
    KeptMoving,
    Commit(CommitError),
    /// A read-only transaction found an object this node may not read now.
    NotReadable {
        object: Object,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZeusOut {
    /// Reliably committed: every follower acknowledged.
    Committed {
        tag: u64,
        tx_id: TxId,
        writes: Vec<(Object, u64)>,
        /// The objects it read without writing them, at the versions read.
        reads: Vec<(Object, u64)>,
    },
    /// The coordinator left the view with it in flight.
    Unknown {
        tag: u64,
    },
    Refused {
        tag: u64,
        refusal: Refusal,
    },
    Read {
        tag: u64,
        reads: Vec<ReadValue>,
    },
}

/// The data a transaction writes to each of its objects: its tag and its
/// whole write set, so a reader of one object knows what else the same
/// transaction wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteRecord {
    pub tag: u64,
    pub writes: Vec<(Object, u64)>,
}

impl WriteRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + 16 * self.writes.len());
        out.extend_from_slice(&self.tag.to_le_bytes());
        for (object, version) in &self.writes {
            out.extend_from_slice(&object.to_le_bytes());
            out.extend_from_slice(&version.to_le_bytes());
        }
        out
    }

    /// `None` for the empty data an object is created with, or bytes that
    /// are no record.
    pub fn decode(data: &[u8]) -> Option<WriteRecord> {
        if data.len() < 8 || (data.len() - 8) % 16 != 0 {
            return None;
        }
        let word = |at: usize| u64::from_le_bytes(data[at..at + 8].try_into().expect("8 bytes"));
        let writes = (0..(data.len() - 8) / 16)
            .map(|i| (word(8 + 16 * i), word(16 + 16 * i)))
            .collect();
        Some(WriteRecord {
            tag: word(0),
            writes,
        })
    }
}

#[derive(Debug)]
enum Asked {
    /// A write transaction waits for it.
    Tx(u64),
    /// The replica manager: a copy to read.
    Reader(Object),
    /// The replica manager: a home object to create.
    Create(Object),
}

#[derive(Debug)]
struct Waiting {
    objects: Vec<Object>,
    reads: Vec<Object>,
    outstanding: usize,
    rounds: u32,
}

/// A write transaction handed to the reliable commit.
#[derive(Debug, Clone)]
struct Started {
    tag: u64,
    writes: Vec<(Object, u64)>,
    reads: Vec<(Object, u64)>,
    /// The objects counted pending for it (given back when it ends).
    pending: Vec<Object>,
}

/// The settings of a Zeus node.
#[derive(Debug, Clone)]
pub struct ZeusConfig {
    pub ownership: OwnershipConfig,
    pub ownership_bugs: OwnershipBugs,
    pub commit: CommitConfig,
    pub commit_bugs: CommitBugs,
    pub bugs: ZeusBugs,
    /// Objects `0..objects`; object `o` is created by node `o % nodes`.
    pub objects: u64,
}

/// One Zeus node (see the module's documentation).
#[derive(Debug)]
pub struct ZeusReplica {
    me: NodeId,
    objects: u64,
    ownership: Ownership<Object, OwnershipStore>,
    commit: ReliableCommit<CommitStore>,
    shared: Shared,
    asked: BTreeMap<ReqId, Asked>,
    waiting: BTreeMap<u64, Waiting>,
    in_flight: BTreeMap<TxId, Started>,
    /// The transaction being handed to the reliable commit now (its
    /// `Started` or `Refused` comes in the same call).
    starting: Option<Started>,
    /// Planted `answer_before_replication`: transactions answered already.
    answered_early: BTreeSet<TxId>,
    /// Home objects this incarnation saw created (or exist).
    created: BTreeSet<Object>,
    next_req: u64,
    /// Which members finished the reliable commit's recovery.
    recoveries: Recoveries,
    /// Recovery reports refused (another epoch, malformed).
    refused_reports: u64,
}

impl ZeusReplica {
    /// # Panics
    /// If a protocol's configuration is invalid (the scenario validates it).
    pub fn new(me: NodeId, config: &ZeusConfig) -> ZeusReplica {
        let shared: Shared = Rc::new(RefCell::new(Objects {
            bugs: config.bugs,
            ..Objects::default()
        }));
        let ownership = Ownership::new(
            me,
            config.ownership.clone(),
            config.ownership_bugs,
            OwnershipStore(shared.clone()),
        )
        .expect("a valid ownership configuration");
        let commit = ReliableCommit::new(me, config.commit.clone(), CommitStore(shared.clone()))
            .expect("a valid commit configuration")
            .with_bugs(config.commit_bugs);
        ZeusReplica {
            me,
            objects: config.objects,
            ownership,
            commit,
            shared,
            asked: BTreeMap::new(),
            waiting: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            starting: None,
            answered_early: BTreeSet::new(),
            created: BTreeSet::new(),
            next_req: 0,
            recoveries: Recoveries::new(),
            refused_reports: 0,
        }
    }

    pub fn ownership(&self) -> &Ownership<Object, OwnershipStore> {
        &self.ownership
    }

    pub fn commit(&self) -> &ReliableCommit<CommitStore> {
        &self.commit
    }

    /// The copy held here.
    pub fn copy(&self, object: Object) -> Option<Copy> {
        self.shared.borrow().copies.get(&object).cloned()
    }

    /// Recovery reports refused (another epoch, malformed).
    pub fn refused_reports(&self) -> u64 {
        self.refused_reports
    }

    pub fn stale_installs(&self) -> u64 {
        self.shared.borrow().stale_installs
    }

    /// Transactions waiting for ownership or in reliable commit here.
    pub fn busy(&self) -> usize {
        self.waiting.len() + self.in_flight.len()
    }

    /// Holds a copy of every object, as a replica (owner or reader, an
    /// arbitration pending or not).
    pub fn holds_every_object(&self) -> bool {
        (0..self.objects).all(|o| {
            self.ownership.access(&o) != Access::None
                && self.shared.borrow().copies.contains_key(&o)
        })
    }

    /// Records this node's recovery (telling the others) and sets the
    /// flag ownership reads.
    fn note_recovery(&mut self, ctx: &Context<'_>, fx: &mut Effects<ZeusMsg, ZeusOut>) {
        let here = !self.commit.recovering();
        self.recoveries
            .note(ctx, here, &mut |to, m| fx.send(to, ZeusMsg::Recovered(m)));
        let done = if self.shared.borrow().bugs.local_commit_recovery {
            // Planted: this node's recovery alone.
            ctx.member && here
        } else {
            self.recoveries.all_recovered(ctx)
        };
        self.shared.borrow_mut().recovering = !done;
    }

    fn req(&mut self, asked: Asked) -> ReqId {
        self.next_req += 1;
        let req = ReqId(self.next_req);
        self.asked.insert(req, asked);
        req
    }

    fn drive_ownership(
        &mut self,
        ctx: &Context<'_>,
        input: Input<OwnershipMsg<Object>, OwnershipCmd<Object>>,
        fx: &mut Effects<ZeusMsg, ZeusOut>,
    ) {
        let mut ofx = Effects::default();
        self.ownership.on_input(ctx, input, &mut ofx);
        for out in fx.absorb(ofx, ZeusMsg::Ownership) {
            self.on_ownership_out(ctx, out, fx);
        }
    }

    fn drive_commit(
        &mut self,
        ctx: &Context<'_>,
        input: Input<CommitMsg, CommitCmd>,
        fx: &mut Effects<ZeusMsg, ZeusOut>,
    ) {
        let mut cfx = Effects::default();
        self.commit.on_input(ctx, input, &mut cfx);
        for out in fx.absorb(cfx, ZeusMsg::Commit) {
            self.on_commit_out(out, fx);
        }
    }

    fn on_ownership_out(
        &mut self,
        ctx: &Context<'_>,
        out: OwnershipOut<Object>,
        fx: &mut Effects<ZeusMsg, ZeusOut>,
    ) {
        let (req, failed) = match out {
            OwnershipOut::Acquired { req, .. } => (req, None),
            OwnershipOut::Failed { req, reason, .. } => (req, Some(reason)),
            OwnershipOut::LateWin { .. }
            | OwnershipOut::Inspected { .. }
            | OwnershipOut::Described { .. } => return,
        };
        match self.asked.remove(&req) {
            Some(Asked::Tx(tag)) => {
                let Some(waiting) = self.waiting.get_mut(&tag) else {
                    return;
                };
                if let Some(reason) = failed {
                    self.waiting.remove(&tag);
                    fx.output(ZeusOut::Refused {
                        tag,
                        refusal: Refusal::Ownership(reason),
                    });
                    return;
                }
                debug_assert!(waiting.outstanding > 0);
                waiting.outstanding -= 1;
                if waiting.outstanding == 0 {
                    self.try_write(ctx, tag, fx);
                }
            }
            Some(Asked::Create(object)) => {
                let exists = matches!(
                    failed,
                    None | Some(FailReason::AlreadyExists)
                        | Some(FailReason::Nacked(
                            roost_ownership::NackReason::AlreadyExists
                        ))
                );
                if exists {
                    self.created.insert(object);
                }
            }
            Some(Asked::Reader(_)) | None => {}
        }
    }

    fn on_commit_out(&mut self, out: CommitOut, fx: &mut Effects<ZeusMsg, ZeusOut>) {
        match out {
            CommitOut::Started { tx_id } => {
                let started = self.starting.take();
                debug_assert!(started.is_some(), "a Started answers a commit");
                if let Some(started) = started {
                    if self.shared.borrow().bugs.answer_before_replication {
                        // Planted: the client hears "committed" now.
                        fx.output(ZeusOut::Committed {
                            tag: started.tag,
                            tx_id,
                            writes: started.writes.clone(),
                            reads: started.reads.clone(),
                        });
                        self.answered_early.insert(tx_id);
                    }
                    self.in_flight.insert(tx_id, started);
                }
            }
            CommitOut::Refused { error } => {
                if let Some(started) = self.starting.take() {
                    self.finished(&started);
                    fx.output(ZeusOut::Refused {
                        tag: started.tag,
                        refusal: Refusal::Commit(error),
                    });
                }
            }
            CommitOut::Committed { tx_id } => {
                if let Some(started) = self.in_flight.remove(&tx_id) {
                    self.finished(&started);
                    if !self.answered_early.remove(&tx_id) {
                        fx.output(ZeusOut::Committed {
                            tag: started.tag,
                            tx_id,
                            writes: started.writes,
                            reads: started.reads,
                        });
                    }
                }
            }
            CommitOut::Unknown { tx_id } => {
                if let Some(started) = self.in_flight.remove(&tx_id) {
                    self.finished(&started);
                    if !self.answered_early.remove(&tx_id) {
                        fx.output(ZeusOut::Unknown { tag: started.tag });
                    }
                }
            }
            CommitOut::Applied { .. } | CommitOut::Recovered { .. } => {}
        }
    }

    /// A coordinated transaction is no longer pending on its objects.
    fn finished(&mut self, started: &Started) {
        let mut objects = self.shared.borrow_mut();
        for object in &started.pending {
            let count = objects.pending.entry(*object).or_default();
            debug_assert!(*count > 0, "pending counts match the transactions");
            *count = count.saturating_sub(1);
            if *count == 0 {
                objects.pending.remove(object);
            }
        }
    }

    fn start_write(
        &mut self,
        ctx: &Context<'_>,
        tag: u64,
        objects: Vec<Object>,
        reads: Vec<Object>,
        fx: &mut Effects<ZeusMsg, ZeusOut>,
    ) {
        let refuse = |refusal| ZeusOut::Refused { tag, refusal };
        if !ctx.serving {
            return fx.output(refuse(Refusal::NotServing));
        }
        let accessed = objects.len() + reads.len();
        let distinct: BTreeSet<Object> = objects.iter().chain(&reads).copied().collect();
        if objects.is_empty()
            || accessed > MAX_TX_OBJECTS
            || distinct.len() != accessed
            || distinct.iter().any(|o| *o >= self.objects)
        {
            return fx.output(refuse(Refusal::TooManyObjects));
        }
        if self.waiting.len() >= MAX_WAITING || self.waiting.contains_key(&tag) {
            return fx.output(refuse(Refusal::Busy));
        }
        self.waiting.insert(
            tag,
            Waiting {
                objects,
                reads,
                outstanding: 0,
                rounds: 0,
            },
        );
        self.try_write(ctx, tag, fx);
    }

    /// Acquires what the waiting transaction `tag` does not own, or runs it
    /// if it owns everything.
    fn try_write(&mut self, ctx: &Context<'_>, tag: u64, fx: &mut Effects<ZeusMsg, ZeusOut>) {
        let Some(waiting) = self.waiting.get(&tag) else {
            return;
        };
        let missing: Vec<Object> = waiting
            .objects
            .iter()
            .chain(&waiting.reads)
            .copied()
            .filter(|o| self.ownership.access(o) != Access::Owner)
            .collect();
        if missing.is_empty() {
            let waiting = self.waiting.remove(&tag).expect("looked up above");
            return self.run_write(ctx, tag, waiting.objects, waiting.reads, fx);
        }
        if waiting.rounds >= MAX_ACQUIRE_ROUNDS || !ctx.serving {
            self.waiting.remove(&tag);
            return fx.output(ZeusOut::Refused {
                tag,
                refusal: Refusal::KeptMoving,
            });
        }
        let waiting = self.waiting.get_mut(&tag).expect("looked up above");
        waiting.rounds += 1;
        waiting.outstanding = missing.len();
        for object in missing {
            let req = self.req(Asked::Tx(tag));
            self.drive_ownership(
                ctx,
                Input::Command(OwnershipCmd::Acquire {
                    key: object,
                    req,
                    kind: RequestKind::ChangeOwner,
                }),
                fx,
            );
        }
    }

    /// The local commit, at the owner of every object: next versions,
    /// applied here Invalid, and the reliable commit to their readers.
    fn run_write(
        &mut self,
        ctx: &Context<'_>,
        tag: u64,
        objects: Vec<Object>,
        reads: Vec<Object>,
        fx: &mut Effects<ZeusMsg, ZeusOut>,
    ) {
        // What it read: the owner's copies, at their versions now.
        let mut read_versions = Vec::with_capacity(reads.len());
        for &object in &reads {
            debug_assert_eq!(self.ownership.access(&object), Access::Owner);
            let Some(held) = self.shared.borrow().copies.get(&object).map(|c| c.version) else {
                return fx.output(ZeusOut::Refused {
                    tag,
                    refusal: Refusal::KeptMoving,
                });
            };
            read_versions.push((object, held));
        }
        let mut versions = Vec::with_capacity(objects.len());
        let mut followers = BTreeSet::new();
        for &object in &objects {
            debug_assert_eq!(self.ownership.access(&object), Access::Owner);
            let held = self.shared.borrow().copies.get(&object).map(|c| c.version);
            let (Some(held), Some(meta)) = (held, self.ownership.meta(&object)) else {
                // An owner without the data: ownership's business (it
                // fails later acquisitions); this transaction cannot run.
                return fx.output(ZeusOut::Refused {
                    tag,
                    refusal: Refusal::KeptMoving,
                });
            };
            debug_assert_eq!(
                meta.o_replicas.owner,
                Some(self.me),
                "only the owner writes"
            );
            versions.push((object, held + 1));
            followers.extend(meta.o_replicas.readers.iter().copied());
        }
        followers.remove(&self.me);
        followers.retain(|f| ctx.view.members.contains_key(f));
        let data = WriteRecord {
            tag,
            writes: versions.clone(),
        }
        .encode();
        let writes = versions
            .iter()
            .map(|&(object, version)| Write {
                key: commit_key(object),
                version,
                data: data.clone(),
            })
            .collect();
        // Pending on what it wrote and what it read: neither may change
        // owner before it is reliably committed (a new owner's write to an
        // object it read, answered first, would precede it in real time
        // and follow it in the serial order).
        let mut pending: Vec<Object> = versions.iter().map(|(o, _)| *o).collect();
        if !self.shared.borrow().bugs.pending_ignores_reads {
            pending.extend(read_versions.iter().map(|(o, _)| *o));
        }
        {
            let mut shared = self.shared.borrow_mut();
            for object in &pending {
                *shared.pending.entry(*object).or_default() += 1;
            }
        }
        debug_assert!(pending.len() <= MAX_TX_OBJECTS);
        self.starting = Some(Started {
            tag,
            writes: versions,
            reads: read_versions,
            pending,
        });
        self.drive_commit(
            ctx,
            Input::Command(CommitCmd::Commit(Transaction {
                writes,
                followers: followers.into_iter().collect(),
            })),
            fx,
        );
        debug_assert!(self.starting.is_none(), "the commit named the transaction");
        self.starting = None;
    }

    /// A read-only transaction, here, with no message.
    fn read(&self, ctx: &Context<'_>, tag: u64, objects: &[Object]) -> ZeusOut {
        let refuse = |refusal| ZeusOut::Refused { tag, refusal };
        if !ctx.serving {
            return refuse(Refusal::NotServing);
        }
        if objects.is_empty() || objects.len() > MAX_TX_OBJECTS {
            return refuse(Refusal::TooManyObjects);
        }
        let bugs = self.shared.borrow().bugs;
        let mut reads = Vec::with_capacity(objects.len());
        for &object in objects {
            let access = self.ownership.access(&object);
            let may = bugs.read_without_access || matches!(access, Access::Owner | Access::Reader);
            let copy = self.copy(object);
            match copy {
                Some(copy) if may && self.commit.readable(&commit_key(object)) => {
                    reads.push(ReadValue {
                        object,
                        version: copy.version,
                        data: copy.data,
                    });
                }
                _ => return refuse(Refusal::NotReadable { object }),
            }
        }
        ZeusOut::Read { tag, reads }
    }

    /// The replica manager: create home objects, read the ones not held.
    fn on_tick(&mut self, ctx: &Context<'_>, fx: &mut Effects<ZeusMsg, ZeusOut>) {
        fx.set_timer(REPLICA_TIMER, REPLICA_TICK_MS);
        // Someone's recovery report, or ours to them, may have been lost.
        self.recoveries
            .on_tick(ctx, &mut |to, m| fx.send(to, ZeusMsg::Recovered(m)));
        if !ctx.serving || self.ownership.recovering() {
            return;
        }
        let nodes = ctx.nodes.len() as u64;
        for object in 0..self.objects {
            let replica_requests = self
                .asked
                .values()
                .filter(|a| matches!(a, Asked::Reader(_) | Asked::Create(_)))
                .count();
            if replica_requests >= MAX_REPLICA_REQUESTS {
                break;
            }
            let asked = self.ownership.is_requesting(&object)
                || self
                    .asked
                    .values()
                    .any(|a| matches!(a, Asked::Reader(o) | Asked::Create(o) if *o == object));
            if asked {
                continue;
            }
            let home = object % nodes == u64::from(self.me.0);
            if home && !self.created.contains(&object) {
                let req = self.req(Asked::Create(object));
                self.drive_ownership(
                    ctx,
                    Input::Command(OwnershipCmd::Create {
                        key: object,
                        req,
                        data: ObjectData::new(0, Vec::new()),
                    }),
                    fx,
                );
                continue;
            }
            if self.ownership.access(&object) == Access::None {
                let req = self.req(Asked::Reader(object));
                self.drive_ownership(
                    ctx,
                    Input::Command(OwnershipCmd::Acquire {
                        key: object,
                        req,
                        kind: RequestKind::AddReader,
                    }),
                    fx,
                );
            }
        }
    }
}

impl Protocol for ZeusReplica {
    type Msg = ZeusMsg;
    type Cmd = ZeusCmd;
    type Out = ZeusOut;

    fn on_input(
        &mut self,
        ctx: &Context<'_>,
        input: Input<ZeusMsg, ZeusCmd>,
        fx: &mut Effects<ZeusMsg, ZeusOut>,
    ) {
        debug_assert_eq!(ctx.me, self.me);
        match input {
            Input::Message {
                from,
                msg: ZeusMsg::Ownership(msg),
            } => self.drive_ownership(ctx, Input::Message { from, msg }, fx),
            Input::Message {
                from,
                msg: ZeusMsg::Commit(msg),
            } => self.drive_commit(ctx, Input::Message { from, msg }, fx),
            Input::Message {
                from,
                msg: ZeusMsg::Recovered(msg),
            } => {
                let here = !self.commit.recovering();
                // A refused report (another epoch, malformed) changes nothing.
                let taken = self
                    .recoveries
                    .on_message(ctx, from, msg, here, &mut |to, m| {
                        fx.send(to, ZeusMsg::Recovered(m))
                    });
                if taken.is_err() {
                    self.refused_reports += 1;
                }
            }
            Input::Timer(RETRANSMIT_TIMER) => {
                self.drive_commit(ctx, Input::Timer(RETRANSMIT_TIMER), fx)
            }
            Input::Timer(REPLICA_TIMER) => self.on_tick(ctx, fx),
            Input::Timer(timer) => self.drive_ownership(ctx, Input::Timer(timer), fx),
            Input::ViewChange => {
                // The reliable commit first: ownership's recovery waits
                // for its, at every member.
                self.drive_commit(ctx, Input::ViewChange, fx);
                self.note_recovery(ctx, fx);
                self.drive_ownership(ctx, Input::ViewChange, fx);
                if !ctx.member {
                    // Left the view: what waited for ownership is lost.
                    for (tag, _) in std::mem::take(&mut self.waiting) {
                        fx.output(ZeusOut::Refused {
                            tag,
                            refusal: Refusal::NotServing,
                        });
                    }
                }
                fx.set_timer(REPLICA_TIMER, REPLICA_TICK_MS);
            }
            Input::Command(ZeusCmd::Write {
                tag,
                objects,
                reads,
            }) => self.start_write(ctx, tag, objects, reads, fx),
            Input::Command(ZeusCmd::Read { tag, objects }) => {
                let out = self.read(ctx, tag, &objects);
                fx.output(out);
            }
        }
        self.note_recovery(ctx, fx);
        debug_assert!(self.starting.is_none());
        debug_assert!(self.in_flight.len() <= self.commit.in_flight());
    }
}

//! The Zeus ownership protocol (Katsarakis et al., EuroSys '21, §4, and the
//! TLA+ spec `ZeusOwnership*.tla`) as a sans-IO state machine implementing
//! [`roost_cluster::Protocol`]: everything goes through
//! [`Protocol::on_input`](roost_cluster::Protocol::on_input), so the tokio
//! shell and a deterministic simulator drive the same code.
//!
//! # Roles
//!
//! Every object (a reactor, a RESP key) has exactly one **owner**, the only
//! node that may write it, and zero or more **readers**; both hold the
//! object's data. Its ownership metadata is
//!
//! - `o_ts`, a timestamp `[version, node]` ordered lexicographically
//!   ([`OTs`]); `node` is the directory replica that bumped it;
//! - `o_state` ∈ `Valid`, `Invalid`, `Drive`, `Request` ([`OState`]);
//! - `o_replicas`, the sharer vector: owner and readers ([`OReplicas`]).
//!
//! The metadata is kept by the object's **directory**: a few **directory
//! replicas** ([`OwnershipConfig::directory_replicas`], default 3, fewer if
//! fewer nodes) chosen by rendezvous hashing of the key over the configured
//! nodes ([`directory`]), and by the owner (and, loosely, the readers). No
//! node keeps metadata for every object and nothing is broadcast to find an
//! owner: any node computes an object's directory from its key.
//!
//! For one ownership request the roles are:
//!
//! - the **requester**, the node that wants the object (any node);
//! - the **driver**, a directory replica that takes the REQ, bumps `o_ts`
//!   (`o_state = Drive`) and invalidates the others. The requester drives
//!   its own request when it is a directory replica, else it asks the first
//!   live one in placement order;
//! - the **arbiters**: the other live directory replicas and the current
//!   owner (the owner is an arbiter even when it is no directory replica).
//!   If the requester does not hold the data, a **data source** (the owner,
//!   or a reader when the owner is gone) ships it in its ACK.
//!
//! # The fast path: 1.5 round trips
//!
//! ```text
//! requester ──REQ──▶ driver ──INV──▶ arbiters (incl. owner)
//!     ▲                │                 │  ACK (owner's carries the rows)
//!     └──────ACK───────┴─────────────────┘
//! requester: all ACKs → applies (installs rows, owner, Valid), unblocks its
//! transaction (Acquired) → VAL ──▶ driver and arbiters, who apply.
//! ```
//!
//! At most three hops from any requester (REQ, INV, ACK), two when the
//! requester is a directory replica (it is its own driver). The requester
//! applies first, arbiters only on VAL: `o_replicas` at the directory never
//! names an owner that has not taken over yet, and the old owner stops
//! writing (it is `Invalid`) from the moment it ACKs with its rows.
//!
//! # Contention
//!
//! A driver drives only from `Valid` (else it NACKs `Busy`). An arbiter
//! accepts an INV only if its `o_ts` is greater than its own (whatever its
//! state: a driver that accepts a greater INV NACKs its own requester); an
//! equal one (a replay or retransmission) is ACKed again. So among
//! concurrent requests at most one collects every ACK, and a later one is
//! bumped only after the winner applied. Losers back off (bounded, jittered
//! by a generator seeded from the node id) and retry with a new attempt
//! (`r_ts`); each REQ is processed at most once by its driver, which
//! remembers the last attempt version per requester.
//!
//! An owner (or data source) with a pending reliable commit
//! ([`ObjectStore::has_pending_commit`]) NACKs the request to the requester
//! and to the driver, and keeps refusing that arbitration; the driver then
//! releases the other arbiters with a `NOOP` arbitration (the spec's
//! no-change `rType`) at a greater `o_ts`.
//!
//! # Recovery (the slow path)
//!
//! On a view change every node drops dead nodes from its `o_replicas`, and
//! every arbiter holding an arbitration (`Invalid` or `Drive`) replays it
//! (**arb-replay**): the same INV, same `o_ts`, in the new epoch, to the
//! live arbiters, with ACKs coming back to the replayer. Once all have
//! answered, the replayer sends **RESP** to a live requester, which applies
//! and sends VAL as on the fast path (a requester that applied already just
//! repeats its VAL). A dead requester's request is finished without it: the
//! replayer applies it as if the requester were live, strips the dead node
//! (the spec's `post_sVec(n, 0, ...)`: a change-owner then leaves the object
//! ownerless, its rows with the readers) and sends VAL itself. A requester
//! whose driver died starts a new attempt; its VAL carries the highest
//! attempt version it issued (`r_floor`), below which no directory replica
//! drives its attempts afterwards, so a late REQ of an abandoned attempt is
//! never arbitrated. Drivers NACK new requests (`Recovering`) until this
//! node's replays have finished and the store says reliable-commit recovery
//! is done. A blocked arbiter also replays after
//! [`OwnershipConfig::replay_after_ms`] without a VAL (lost messages), and a
//! requester re-sends its REQ after [`OwnershipConfig::retransmit_ms`].
//!
//! A replay is never abandoned on a guess: the requester may have applied
//! the arbitration in an earlier epoch, and then it alone holds the rows.
//! An arbitration is released (NOOP) only with a proof that it can never
//! complete: its owner, an arbiter that every completion needs, refused it
//! and keeps refusing; or its requester refused the replayed win (a RESP
//! without rows for a request it had not applied) and remembers that; or,
//! on the fast path, the driver's data source refused it (a source repeats
//! its answer for an `o_ts` and never refuses an older one). A reader's
//! refusal during a replay proves nothing, so the replay completes without
//! rows and the requester decides. A proof carries the dead arbitration's
//! pre-vector, which is the latest completed state (a valid driver bumped
//! it), and goes to the live directory replicas: any of them at or below it
//! can release it; the owner re-sends it on its stuck timer. Conversely, an
//! ACK from an arbiter that has already applied the arbitration proves it
//! completed, and the replayer finishes it without a RESP, once every live
//! directory replica among the ackers has answered (one may be past it,
//! and says so; a source that applied it ships no rows).
//!
//! Nodes that miss an outcome learn it from a `Stale` NACK, the answer to an
//! INV older than the answerer's `o_ts`, which carries its metadata: an old
//! owner that lost the VAL demoting it, or a directory replica that restarted
//! and learned an old arbitration from a replay (such a replica replays what
//! it learns at once, to meet those answers).
//!
//! A node that restarts is a new member holding nothing, even if the view
//! change that drops its old incarnation admits the new one: every node
//! notes the incarnation change, strips the node from `o_replicas`, and
//! treats its earlier attempts as a dead requester's (`gone_since`; a replay
//! INV says `requester_gone` to arbiters that did not see it). A node that
//! missed views (cut off) dates such a change to the view after the last
//! one it knew, not to the one it learns it in. Stamps cannot repeat across
//! restarts: attempt versions and `o_ts` bumps are at least `epoch << 32`.
//! A node the view excludes drops everything, and comes back as a new
//! member too.
//!
//! **Directory re-replication.** A directory replica that joined or
//! restarted knows no objects. On the view change that admits it, the first
//! directory replica (in placement order) that survived, and the owner (an
//! arbiter of every arbitration, so valid only at the latest), send it a
//! `SYNC` with each valid object's metadata; it adopts a state greater than
//! its own (anything it held below it is over) and answers, and the SYNC is
//! re-sent until answered. Blocked objects reach it with their replays. The
//! metadata survives as long as, at every view change, one replica that
//! knows it (or the owner) stays in the view; when every replica of an
//! object and its owner leave at once it is lost (readers are no source: a
//! reader's vector may lag), and a requester that gets `UnknownObject`
//! asks the next live replica, then fails.
//!
//! Late wins are applied, never ignored: a requester collects the ACKs of
//! its own earlier attempts too (a REQ can be driven after the request was
//! answered) and reports [`OwnershipOut::LateWin`].
//!
//! The model checker (`tests/model_check.rs`) and the seeded random runs
//! (`tests/random_runs.rs`) found the flaws that shaped these rules; the
//! commits that fixed them describe each.
//!
//! # Using it
//!
//! The local node sends [`OwnershipCmd::Acquire`] (`AddOwner`, `ChangeOwner`,
//! `AddReader`, `RemoveReader`, with a caller-chosen [`ReqId`]; many may be
//! in flight, one per object) or [`OwnershipCmd::Create`] (register a new
//! object with this node as owner) as `Input::Command`, and gets
//! [`OwnershipOut::Acquired`] once the request took effect here (the
//! transaction that waited resumes), [`OwnershipOut::Failed`] with a
//! [`FailReason`], or [`OwnershipOut::LateWin`] for an attempt that won
//! after its request was answered. The rows move through an
//! [`ObjectStore`] the protocol is generic over ([`MemStore`] for tests);
//! [`Ownership::access`] tells the transaction layer what it may do.
//!
//! # Bad input
//!
//! A message of another version or epoch, from a non-member, about an
//! unknown object, with an impossible `o_ts`, an ACK from a node that was
//! not asked, rows over [`OwnershipConfig::max_data_bytes`], ... is counted
//! per reason ([`Ownership::stats`], [`DropReason`]), logged through the
//! effects, and dropped. It never panics and never changes ownership.
//!
//! # Bounds
//!
//! Requests in flight per node ([`OwnershipConfig::max_pending_requests`]),
//! objects with metadata ([`OwnershipConfig::max_objects`]), attempts per
//! request, the at-most-once memory (one number per configured node per
//! object), the refusal memories (one slot per object), and messages to self
//! per call are all bounded.

mod config;
mod key;
mod meta;
mod msg;
mod ownership;
mod served;
pub mod sim;
mod stats;
mod store;

pub use config::{NewError, OwnershipBugs, OwnershipConfig};
pub use key::{directory, fnv1a, mix64, ObjectKey};
pub use meta::{Access, ArbKind, OReplicas, OState, OTs, RTs, ReqId, RequestKind};
pub use msg::{
    Ack, Body, Current, Inv, Nack, NackReason, OwnershipMsg, Req, Resp, Sync, Val, WIRE_VERSION,
};
pub use ownership::{
    FailReason, Inspection, Meta, Ownership, OwnershipCmd, OwnershipOut, INSPECT_MAX_KEYS,
    TICK_TIMER,
};
pub use stats::{DropReason, Stats};
pub use store::{MemStore, ObjectData, ObjectStore};

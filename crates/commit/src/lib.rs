//! Zeus's reliable commit (Katsarakis et al., EuroSys '21, §5, and the TLA+
//! spec `ZeusReliableCommit.tla`) as a sans-IO state machine implementing
//! [`roost_cluster::Protocol`].
//!
//! A transaction is first committed locally at its coordinator, the owner
//! of every object it wrote (the ownership protocol makes sure of that).
//! The reliable commit then replicates its writes to the **followers**, the
//! readers of those objects, in one round trip:
//!
//! ```text
//! coordinator ──R-INV{tx_id, e_id, followers, writes, prev_val}──▶ followers
//!     ▲            (apply newer versions, Invalid; store the R-INV)
//!     └──────────────────────R-ACK{tx_id, e_id}─────────┘
//! all R-ACKs → objects Valid, Committed{tx_id} (the client may be
//! answered now) → R-VAL{tx_id, e_id} ──▶ followers: Valid iff the version
//! has not moved on; the R-INV is discarded.
//! ```
//!
//! # Pipelining
//!
//! The coordinator does not wait for one reliable commit before the next
//! transaction on the same objects. `tx_id = <local_tx_id, node_id>`: one
//! pipeline per coordinator node, and followers apply a pipeline in
//! `local_tx_id` order. A follower may see only part of a pipeline, so it
//! applies slot n once slot n-1 is applied or validated there, or the R-INV
//! carries the **prev-VAL** bit (the coordinator had validated every
//! earlier slot when it sent it); else it holds slot n back. The R-VAL of a
//! slot also goes to the followers of later pending slots, so one that
//! follows only the later slot learns that it may go on.
//!
//! The coordinator commits in pipeline order, so a message about slot n
//! speaks for the earlier slots (the seed: "sending a message with a tx_id
//! implies the successful reception and processing of all previous
//! messages in that pipeline"): an R-ACK of slot n acks every earlier
//! pending slot the same follower follows (**cumulative R-ACK**), and the
//! coordinator's R-VAL of slot n validates every earlier slot stored at the
//! follower (**cumulative R-VAL**). Replayers' messages speak for their
//! slot only.
//!
//! # Recovery
//!
//! On a view change every live node moves its pending R-INVs to the new
//! epoch, drops dead followers and re-sends them: the coordinator its own
//! (asking every ack again), and each follower those it applied from a
//! coordinator that failed (**replay**; held, unapplied ones are dropped,
//! since a live node that applied one replays it). A follower re-acks a
//! replayed R-INV it holds; a fully acked replay is validated and R-VALed.
//! Messages of other epochs are counted and dropped. Once no R-INV of a
//! failed coordinator is pending, the node reports
//! [`CommitOut::Recovered`].
//!
//! A replayer runs the replays of one failed pipeline one at a time, in
//! slot order: it sends slot n's R-INV only once its replay of every
//! earlier slot is finished (acked by every live follower, validated,
//! R-VALed). So a follower applies a replayed slot only after the earlier
//! ones are applied there, and a reader never sees a later slot's write
//! Valid next to an object an earlier slot wrote that it does not hold
//! yet (the model check's `ReadOnlySnapshot` found that when replays ran
//! independently).
//!
//! Lost messages: un-acked R-INVs are re-sent on a timer (bounded per
//! tick), and a follower re-acks its newest stored slot so that a
//! coordinator answers a lost R-VAL again; a stored slot of a failed
//! coordinator that nobody finishes (its replayer's R-VAL lost) is taken
//! over on the timer.
//!
//! A restarted coordinator is a new incarnation: its tx ids start at
//! `epoch << 32`, above its old ones, and its first R-INV carries the
//! prev-VAL bit, so followers keep one pipeline per node id. A node the
//! view excludes drops its copies ([`ObjectStore::clear`]) and its pending
//! transactions ([`CommitOut::Unknown`]).
//!
//! Followers are named by node id, so a replay may reach a node whose
//! state began after the slot was issued (it restarted, or the view
//! excluded it, since; [`RInv::origin`] says when the slot was issued).
//! There it updates the copies that state got since, but installs no
//! object it does not hold: the slot may be older than a version
//! committed before, which that state never got, and a reader there
//! would see the older version after the newer one (the simulator's
//! real-time check found it).
//!
//! # Read-only transactions
//!
//! A read-only transaction runs locally at any replica, with no message
//! (Zeus §6): [`ReliableCommit::read_only`] reads only objects held here
//! and Valid ([`ReliableCommit::readable`]), and only while this node
//! holds the lease of its view. An Invalid object's version is still in
//! its reliable commit: reading it could expose a version that a replica
//! not yet invalidated does not serve (a later reader there sees the older
//! one) or that does not survive a crash ([`CommitBugs`]'s
//! `read_only_reads_invalid` plants that).
//!
//! [`sim`] runs the state machine under the cluster's deterministic
//! simulator.

mod commit;
mod config;
mod msg;
pub mod sim;
mod stats;
mod store;

pub use commit::{
    CommitCmd, CommitOut, Fx, ReadValue, ReliableCommit, Transaction, RETRANSMIT_TIMER,
};
pub use config::{CommitBugs, CommitConfig, CommitError, ConfigError, ReadOnlyError};
pub use msg::{
    decode, Body, CommitMsg, DecodeError, Key, RAck, RInv, RVal, TxId, Write, WIRE_VERSION,
};
pub use stats::{CommitStats, DropReason};
pub use store::{MemStore, Object, ObjectState, ObjectStore, PayloadStore};

//! The compact representation of the paper's Optimizations paragraph.
//!
//! Local rights at replica `i` read only row `i` and column `i` of `R` and
//! `U[i]`; the value reads the diagonal `R[k][k]` and all of `U`. So replica
//! `i` stores exactly those: about `4n` numbers instead of `n² + n`. To replica
//! `j` it sends what both store: the diagonal, `U` and `R[i][j]`, about `2n`
//! numbers ([`RightsDelta`]).
//!
//! What it gives up: replica `j` learns a transfer `R[k][j]` only from `k`
//! itself, never relayed through a third replica (nobody else stores it). Its
//! view of its own rights is therefore never larger than the full matrix's
//! under the same messages, and equal once `k` has sent to `j` directly; the
//! value, built from the diagonal and `U`, which are relayed, is the same.

use crate::error::{
    ConsumeError, GrantError, GrowError, MergeError, MessageError, NewError, Overflow, RightsError,
    TransferError,
};
use crate::replica::ReplicaId;
use crate::rights::{
    add_count, check_grow, check_membership, check_peer, checked_sum, held_rights, signed_rights,
    Ledger, PlantedBug, RightsDelta, RightsState,
};

/// Replica `me`'s part of Figure 2's state.
///
/// `R[me][me]` lives in `diagonal` only; `row[me]` and `column[me]` are kept 0
/// so that each entry of `R` has exactly one home.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CompactRights {
    me: ReplicaId,
    /// `R[me][j]`: rights this replica has transferred to `j`.
    row: Vec<u64>,
    /// `R[j][me]`: rights `j` has transferred to this replica, as far as known.
    column: Vec<u64>,
    /// `R[k][k]`: rights created at `k`.
    diagonal: Vec<u64>,
    /// `U[k]`: rights spent at `k`.
    u: Vec<u64>,
    planted_bug: PlantedBug,
}

impl CompactRights {
    fn ledger(&self) -> Result<Ledger, Overflow> {
        let me = self.me.index();
        debug_assert_eq!(self.row[me], 0);
        debug_assert_eq!(self.column[me], 0);
        Ok(Ledger {
            received: checked_sum(
                std::iter::once(self.diagonal[me]).chain(self.column.iter().copied()),
                "rights received",
            )?,
            transferred_out: checked_sum(self.row.iter().copied(), "rights transferred")?,
            consumed: self.u[me],
        })
    }

    /// `R[me][j]` for every `j` (entry `me` is 0; see `diagonal`).
    pub fn row(&self) -> &[u64] {
        &self.row
    }

    /// `R[j][me]` for every `j` (entry `me` is 0; see `diagonal`).
    pub fn column(&self) -> &[u64] {
        &self.column
    }

    /// `R[k][k]` for every `k`.
    pub fn diagonal(&self) -> &[u64] {
        &self.diagonal
    }

    /// All of `U`.
    pub fn u_vector(&self) -> &[u64] {
        &self.u
    }

    /// How many numbers this replica stores: the size claim of the paper.
    pub fn numbers(&self) -> usize {
        self.row.len() + self.column.len() + self.diagonal.len() + self.u.len()
    }

    /// The delta for `to`: the diagonal, `U` and `R[me][to]`.
    pub fn delta_for(&self, to: ReplicaId) -> Result<RightsDelta, MessageError> {
        check_peer(self.me, to, self.replica_count())?;
        Ok(RightsDelta {
            from: self.me,
            to,
            diagonal: self.diagonal.clone(),
            u: self.u.clone(),
            transferred_from_to: self.row[to.index()],
        })
    }

    /// Whether [`CompactRights::merge_delta`] would accept `delta`.
    pub fn check_delta(&self, delta: &RightsDelta) -> Result<(), MergeError> {
        delta.validate()?;
        if delta.to != self.me {
            return Err(MergeError::WrongRecipient {
                me: self.me,
                addressed_to: delta.to,
            });
        }
        let me = self.me.index();
        // The receiver is in the delta's range, validated above.
        if delta.diagonal[me] > self.diagonal[me] || delta.u[me] > self.u[me] {
            return Err(MergeError::OwnEntriesAhead { replica: self.me });
        }
        Ok(())
    }

    /// Merges a delta addressed to this replica: max of the diagonal, of `U`,
    /// and of the one column entry `R[from][me]`.
    pub fn merge_delta(&mut self, delta: &RightsDelta) -> Result<(), MergeError> {
        self.check_delta(delta)?;
        self.grow(delta.replica_count())
            .expect("a validated delta knows at most MAX_REPLICAS replicas");
        for (k, (&diagonal, &u)) in delta.diagonal.iter().zip(&delta.u).enumerate() {
            self.diagonal[k] = self.diagonal[k].max(diagonal);
            self.u[k] = self.u[k].max(u);
        }
        let from = delta.from.index();
        self.column[from] = self.column[from].max(delta.transferred_from_to);
        Ok(())
    }

    /// A state from its parts, as decoded from the wire.
    pub(crate) fn from_parts(
        me: ReplicaId,
        row: Vec<u64>,
        column: Vec<u64>,
        diagonal: Vec<u64>,
        u: Vec<u64>,
    ) -> Result<CompactRights, &'static str> {
        let n = diagonal.len();
        check_membership(me, n).map_err(|_| "bad replica count or replica id")?;
        if row.len() != n || column.len() != n || u.len() != n {
            return Err("row, column, diagonal and U must have the same length");
        }
        if row[me.index()] != 0 || column[me.index()] != 0 {
            return Err("R[me][me] belongs in the diagonal, not in the row or column");
        }
        let state = CompactRights {
            me,
            row,
            column,
            diagonal,
            u,
            planted_bug: PlantedBug::None,
        };
        let ledger = state.ledger().map_err(|_| "rights sums overflow")?;
        if !crate::rights::ledger_is_sound(&ledger) {
            return Err("the replica has spent more rights than it received");
        }
        Ok(state)
    }
}

impl RightsState for CompactRights {
    type Message = RightsDelta;

    fn with_genesis(
        me: ReplicaId,
        replica_count: usize,
        holder: ReplicaId,
        rights: u64,
    ) -> Result<Self, NewError> {
        check_membership(me, replica_count)?;
        check_membership(holder, replica_count)?;
        let mut diagonal = vec![0; replica_count];
        diagonal[holder.index()] = rights;
        Ok(CompactRights {
            me,
            row: vec![0; replica_count],
            column: vec![0; replica_count],
            diagonal,
            u: vec![0; replica_count],
            planted_bug: PlantedBug::None,
        })
    }

    fn me(&self) -> ReplicaId {
        self.me
    }

    fn replica_count(&self) -> usize {
        self.diagonal.len()
    }

    fn grow(&mut self, replica_count: usize) -> Result<(), GrowError> {
        check_grow(replica_count)?;
        if replica_count > self.replica_count() {
            self.row.resize(replica_count, 0);
            self.column.resize(replica_count, 0);
            self.diagonal.resize(replica_count, 0);
            self.u.resize(replica_count, 0);
        }
        Ok(())
    }

    fn r(&self, from: ReplicaId, to: ReplicaId) -> Option<u64> {
        let me = self.me;
        let stored = if from == to {
            self.diagonal.get(from.index())
        } else if from == me {
            self.row.get(to.index())
        } else if to == me {
            self.column.get(from.index())
        } else {
            return None;
        };
        Some(stored.copied().unwrap_or(0))
    }

    fn u(&self, replica: ReplicaId) -> u64 {
        self.u.get(replica.index()).copied().unwrap_or(0)
    }

    fn local_rights(&self) -> Result<u64, RightsError> {
        held_rights(&self.ledger()?, self.planted_bug, || {
            Ok((self.granted_total()?, self.consumed_total()?))
        })
    }

    /// For another replica `j`: `R[j][j] + R[me][j] − R[j][me] − U[j]`, the
    /// full formula restricted to what this replica stores. Transfers between
    /// third replicas are missing, so this is an estimate.
    fn believed_rights(&self, replica: ReplicaId) -> Result<i128, Overflow> {
        let j = replica.index();
        if j >= self.replica_count() {
            return Ok(0);
        }
        if replica == self.me {
            let ledger = self.ledger()?;
            return signed_rights(ledger.received, ledger.transferred_out, ledger.consumed);
        }
        let received = checked_sum(
            [self.diagonal[j], self.row[j]].into_iter(),
            "believed rights",
        )?;
        signed_rights(received, u128::from(self.column[j]), self.u[j])
    }

    fn granted_total(&self) -> Result<u128, Overflow> {
        checked_sum(self.diagonal.iter().copied(), "rights granted")
    }

    fn consumed_total(&self) -> Result<u128, Overflow> {
        checked_sum(self.u.iter().copied(), "rights consumed")
    }

    fn check_grant(&self, n: u64) -> Result<(), GrantError> {
        add_count(self.diagonal[self.me.index()], n, "R[i][i]")?;
        Ok(())
    }

    fn check_consume(&self, n: u64) -> Result<(), ConsumeError> {
        let available = self.local_rights()?;
        if n > available {
            return Err(ConsumeError::InsufficientRights {
                requested: n,
                available,
            });
        }
        add_count(self.u[self.me.index()], n, "U[i]")?;
        Ok(())
    }

    fn grant(&mut self, n: u64) -> Result<(), GrantError> {
        let me = self.me.index();
        self.diagonal[me] = add_count(self.diagonal[me], n, "R[i][i]")?;
        Ok(())
    }

    fn consume(&mut self, n: u64) -> Result<(), ConsumeError> {
        self.check_consume(n)?;
        let me = self.me.index();
        self.u[me] = add_count(self.u[me], n, "U[i]")?;
        Ok(())
    }

    fn transfer(&mut self, n: u64, to: ReplicaId) -> Result<(), TransferError> {
        check_peer(self.me, to, self.replica_count())?;
        let available = self.local_rights().map_err(ConsumeError::from)?;
        if n > available {
            return Err(TransferError::InsufficientRights {
                requested: n,
                available,
            });
        }
        let to = to.index();
        self.row[to] = add_count(self.row[to], n, "R[i][j]")?;
        Ok(())
    }

    fn adopt(&mut self, failed: ReplicaId, known: u64, n: u64) -> Result<(), Overflow> {
        let (me, from) = (self.me.index(), failed.index());
        assert!(
            from != me && from < self.column.len(),
            "checked by the caller"
        );
        // `R[failed][me]` is this replica's column entry.
        self.column[from] = add_count(self.column[from].max(known), n, "R[j][i]")?;
        Ok(())
    }

    fn message_for(&self, to: ReplicaId) -> Result<RightsDelta, MessageError> {
        self.delta_for(to)
    }

    fn check_message(&self, message: &RightsDelta) -> Result<(), MergeError> {
        self.check_delta(message)
    }

    fn merge_message(&mut self, message: &RightsDelta) -> Result<(), MergeError> {
        self.merge_delta(message)
    }

    fn message_sender(message: &RightsDelta) -> ReplicaId {
        message.from
    }

    /// Entry-wise on the stored vectors; states of two different replicas
    /// store different entries and are not comparable.
    fn le(&self, other: &CompactRights) -> bool {
        fn vector_le(mine: &[u64], theirs: &[u64]) -> bool {
            mine.iter()
                .enumerate()
                .all(|(k, &value)| value <= theirs.get(k).copied().unwrap_or(0))
        }
        self.me == other.me
            && vector_le(&self.row, &other.row)
            && vector_le(&self.column, &other.column)
            && vector_le(&self.diagonal, &other.diagonal)
            && vector_le(&self.u, &other.u)
    }

    fn set_planted_bug(&mut self, bug: PlantedBug) {
        self.planted_bug = bug;
    }

    fn planted_bug(&self) -> PlantedBug {
        self.planted_bug
    }
}

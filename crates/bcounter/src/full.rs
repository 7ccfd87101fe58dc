//! The full representation: every replica keeps all of `R` (n × n) and `U`,
//! exactly as Figure 2 specifies. This is the reference the compact form is
//! tested against, and the one whose states form the lattice of the paper's
//! correctness argument.

use crate::error::{
    ConsumeError, GrantError, GrowError, MergeError, MessageError, NewError, Overflow, RightsError,
    TransferError,
};
use crate::replica::ReplicaId;
use crate::rights::{
    add_count, check_grow, check_membership, check_peer, checked_sum, held_rights, signed_rights,
    Ledger, PlantedBug, RightsDelta, RightsState,
};

/// Figure 2's state at replica `me`: the rights matrix `R` and the decrement
/// vector `U`.
///
/// - `R[i][i]`: rights created at `i` (increments of a lower-bound counter);
/// - `R[i][j]`, `j ≠ i`: rights `i` has transferred to `j`;
/// - `U[i]`: rights spent at `i` (decrements of a lower-bound counter).
///
/// Every entry only grows; merge takes the entry-wise max.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FullRights {
    me: ReplicaId,
    replica_count: usize,
    /// `R`, row-major: `R[from][to]` is `r[from * replica_count + to]`.
    r: Vec<u64>,
    /// `U`, one entry per replica.
    u: Vec<u64>,
    planted_bug: PlantedBug,
}

impl FullRights {
    /// Index arithmetic on `R` is plain: both indices are below
    /// `replica_count <= MAX_REPLICAS`, so `from * n + to < MAX_REPLICAS²`.
    fn slot(&self, from: usize, to: usize) -> usize {
        debug_assert!(from < self.replica_count && to < self.replica_count);
        from * self.replica_count + to
    }

    /// `R[from][to]` by index; 0 outside the known replicas.
    fn entry(&self, from: usize, to: usize) -> u64 {
        if from < self.replica_count && to < self.replica_count {
            self.r[self.slot(from, to)]
        } else {
            0
        }
    }

    fn u_at(&self, replica: usize) -> u64 {
        self.u.get(replica).copied().unwrap_or(0)
    }

    fn ledger(&self) -> Result<Ledger, Overflow> {
        let me = self.me.index();
        let n = self.replica_count;
        let row = &self.r[me * n..(me + 1) * n];
        Ok(Ledger {
            received: checked_sum((0..n).map(|from| self.r[from * n + me]), "rights received")?,
            transferred_out: checked_sum(
                row.iter()
                    .enumerate()
                    .filter(|&(to, _)| to != me)
                    .map(|(_, &count)| count),
                "rights transferred",
            )?,
            consumed: self.u[me],
        })
    }

    /// The join (least upper bound) of the two states' `R` and `U`; `me`
    /// stays this replica's. This is Figure 2's merge without the
    /// sanity checks of [`FullRights::merge`], for lattice reasoning.
    pub fn join(&mut self, other: &FullRights) {
        self.grow(other.replica_count)
            .expect("a FullRights never knows more than MAX_REPLICAS replicas");
        let n = self.replica_count;
        for from in 0..other.replica_count {
            for to in 0..other.replica_count {
                let slot = from * n + to;
                self.r[slot] = self.r[slot].max(other.r[from * other.replica_count + to]);
            }
        }
        for (mine, &theirs) in self.u.iter_mut().zip(&other.u) {
            *mine = (*mine).max(theirs);
        }
    }

    /// Whether [`FullRights::merge`] would accept `other`: it must not know
    /// more of this replica's own row or `U` entry than this replica does.
    pub fn check_merge(&self, other: &FullRights) -> Result<(), MergeError> {
        let me = self.me.index();
        if me < other.replica_count {
            let own_row_ahead = (0..other.replica_count)
                .any(|to| other.r[me * other.replica_count + to] > self.entry(me, to));
            if own_row_ahead || other.u[me] > self.u[me] {
                return Err(MergeError::OwnEntriesAhead { replica: self.me });
            }
        }
        Ok(())
    }

    /// Figure 2's merge of another replica's whole state.
    pub fn merge(&mut self, other: &FullRights) -> Result<(), MergeError> {
        self.check_merge(other)?;
        self.join(other);
        Ok(())
    }

    /// The compact delta this replica would send `to` (for the equivalence
    /// test and for mixed deployments).
    pub fn delta_for(&self, to: ReplicaId) -> Result<RightsDelta, MessageError> {
        check_peer(self.me, to, self.replica_count)?;
        Ok(RightsDelta {
            from: self.me,
            to,
            diagonal: (0..self.replica_count)
                .map(|k| self.r[self.slot(k, k)])
                .collect(),
            u: self.u.clone(),
            transferred_from_to: self.entry(self.me.index(), to.index()),
        })
    }

    /// Whether [`FullRights::merge_delta`] would accept `delta`.
    pub fn check_delta(&self, delta: &RightsDelta) -> Result<(), MergeError> {
        delta.validate()?;
        if delta.to != self.me {
            return Err(MergeError::WrongRecipient {
                me: self.me,
                addressed_to: delta.to,
            });
        }
        let me = self.me.index();
        if delta.diagonal[me] > self.entry(me, me) || delta.u[me] > self.u_at(me) {
            return Err(MergeError::OwnEntriesAhead { replica: self.me });
        }
        Ok(())
    }

    /// Merges a compact delta addressed to this replica.
    pub fn merge_delta(&mut self, delta: &RightsDelta) -> Result<(), MergeError> {
        self.check_delta(delta)?;
        let me = self.me.index();
        self.grow(delta.replica_count())
            .expect("a validated delta knows at most MAX_REPLICAS replicas");
        for (k, (&diagonal, &u)) in delta.diagonal.iter().zip(&delta.u).enumerate() {
            let slot = self.slot(k, k);
            self.r[slot] = self.r[slot].max(diagonal);
            self.u[k] = self.u[k].max(u);
        }
        let slot = self.slot(delta.from.index(), me);
        self.r[slot] = self.r[slot].max(delta.transferred_from_to);
        Ok(())
    }

    /// The whole matrix, row-major, `replica_count²` entries.
    pub fn r_matrix(&self) -> &[u64] {
        &self.r
    }

    /// All of `U`.
    pub fn u_vector(&self) -> &[u64] {
        &self.u
    }

    /// A state from its parts, as decoded from the wire. Checks the shape and
    /// that `me` has not spent more than it received.
    pub(crate) fn from_parts(
        me: ReplicaId,
        replica_count: usize,
        r: Vec<u64>,
        u: Vec<u64>,
    ) -> Result<FullRights, &'static str> {
        check_membership(me, replica_count).map_err(|_| "bad replica count or replica id")?;
        let cells = replica_count
            .checked_mul(replica_count)
            .ok_or("replica count overflows")?;
        if r.len() != cells || u.len() != replica_count {
            return Err("R must have replica_count² entries and U replica_count");
        }
        let state = FullRights {
            me,
            replica_count,
            r,
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

impl RightsState for FullRights {
    type Message = FullRights;

    fn with_genesis(
        me: ReplicaId,
        replica_count: usize,
        holder: ReplicaId,
        rights: u64,
    ) -> Result<Self, NewError> {
        check_membership(me, replica_count)?;
        check_membership(holder, replica_count)?;
        let mut state = FullRights {
            me,
            replica_count,
            r: vec![0; replica_count * replica_count],
            u: vec![0; replica_count],
            planted_bug: PlantedBug::None,
        };
        let slot = state.slot(holder.index(), holder.index());
        state.r[slot] = rights;
        Ok(state)
    }

    fn me(&self) -> ReplicaId {
        self.me
    }

    fn replica_count(&self) -> usize {
        self.replica_count
    }

    fn grow(&mut self, replica_count: usize) -> Result<(), GrowError> {
        check_grow(replica_count)?;
        let old = self.replica_count;
        if replica_count <= old {
            return Ok(());
        }
        // Rare (a site joins), so a plain re-layout of the rows is fine.
        let mut r = vec![0; replica_count * replica_count];
        for from in 0..old {
            r[from * replica_count..from * replica_count + old]
                .copy_from_slice(&self.r[from * old..(from + 1) * old]);
        }
        self.r = r;
        self.u.resize(replica_count, 0);
        self.replica_count = replica_count;
        Ok(())
    }

    fn r(&self, from: ReplicaId, to: ReplicaId) -> Option<u64> {
        Some(self.entry(from.index(), to.index()))
    }

    fn u(&self, replica: ReplicaId) -> u64 {
        self.u_at(replica.index())
    }

    fn local_rights(&self) -> Result<u64, RightsError> {
        held_rights(&self.ledger()?, self.planted_bug, || {
            Ok((self.granted_total()?, self.consumed_total()?))
        })
    }

    fn believed_rights(&self, replica: ReplicaId) -> Result<i128, Overflow> {
        let j = replica.index();
        let n = self.replica_count;
        if j >= n {
            return Ok(0);
        }
        let received = checked_sum((0..n).map(|from| self.r[from * n + j]), "believed rights")?;
        let transferred_out = checked_sum(
            (0..n).filter(|&to| to != j).map(|to| self.r[j * n + to]),
            "believed rights",
        )?;
        signed_rights(received, transferred_out, self.u[j])
    }

    fn granted_total(&self) -> Result<u128, Overflow> {
        checked_sum(
            (0..self.replica_count).map(|k| self.r[self.slot(k, k)]),
            "rights granted",
        )
    }

    fn consumed_total(&self) -> Result<u128, Overflow> {
        checked_sum(self.u.iter().copied(), "rights consumed")
    }

    fn check_grant(&self, n: u64) -> Result<(), GrantError> {
        let me = self.me.index();
        add_count(self.r[self.slot(me, me)], n, "R[i][i]")?;
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
        let slot = self.slot(me, me);
        self.r[slot] = add_count(self.r[slot], n, "R[i][i]")?;
        Ok(())
    }

    fn consume(&mut self, n: u64) -> Result<(), ConsumeError> {
        self.check_consume(n)?;
        let me = self.me.index();
        self.u[me] = add_count(self.u[me], n, "U[i]")?;
        Ok(())
    }

    fn transfer(&mut self, n: u64, to: ReplicaId) -> Result<(), TransferError> {
        check_peer(self.me, to, self.replica_count)?;
        let available = self.local_rights().map_err(ConsumeError::from)?;
        if n > available {
            return Err(TransferError::InsufficientRights {
                requested: n,
                available,
            });
        }
        let slot = self.slot(self.me.index(), to.index());
        self.r[slot] = add_count(self.r[slot], n, "R[i][j]")?;
        Ok(())
    }

    fn adopt(&mut self, failed: ReplicaId, known: u64, n: u64) -> Result<(), Overflow> {
        assert!(
            failed != self.me && failed.index() < self.replica_count,
            "checked by the caller"
        );
        let slot = self.slot(failed.index(), self.me.index());
        self.r[slot] = add_count(self.r[slot].max(known), n, "R[i][j]")?;
        Ok(())
    }

    fn message_for(&self, to: ReplicaId) -> Result<FullRights, MessageError> {
        check_peer(self.me, to, self.replica_count)?;
        let mut message = self.clone();
        // The switch is the sender's; a receiver keeps its own.
        message.planted_bug = PlantedBug::None;
        Ok(message)
    }

    fn check_message(&self, message: &FullRights) -> Result<(), MergeError> {
        self.check_merge(message)
    }

    fn merge_message(&mut self, message: &FullRights) -> Result<(), MergeError> {
        self.merge(message)
    }

    fn message_sender(message: &FullRights) -> ReplicaId {
        message.me
    }

    fn le(&self, other: &FullRights) -> bool {
        let n = self.replica_count;
        let r_le =
            (0..n).all(|from| (0..n).all(|to| self.r[from * n + to] <= other.entry(from, to)));
        r_le && (0..n).all(|k| self.u[k] <= other.u_at(k))
    }

    fn set_planted_bug(&mut self, bug: PlantedBug) {
        self.planted_bug = bug;
    }

    fn planted_bug(&self) -> PlantedBug {
        self.planted_bug
    }
}

//! §IV-E: "If a DC fails permanently, as the Bounded Counter records the
//! rights owned by every replica, it is possible to recover the rights that
//! were owned by the failed DC."
//!
//! A replica `f` declared permanently failed held
//! `R[f][f] + Σ_j R[j][f] − Σ_{j≠f} R[f][j] − U[f]` rights. No survivor
//! knows all of that alone (the compact form keeps only its own row and
//! column), but each knows exactly what it sent `f` (`R[j][f]`, its row) and
//! what it received from `f` (`R[f][j]`, its column), everyone knows
//! `R[f][f]` and `U[f]` as far as `f` propagated them, and the full form
//! also relays third parties' entries. Every entry is taken at the most any
//! survivor knows: an entry of `f`'s row a survivor has not heard of yet
//! but another has would otherwise count as `f`'s rights and reach that
//! survivor later, spent twice. So:
//!
//! 1. every survivor **fences** `f` (drops any later message from it: a
//!    transfer of `f` still in flight would otherwise give its rights twice)
//!    and then writes its [`FailedReplicaReport`];
//! 2. **one** heir (chosen by one decider: an operator, a consensus service)
//!    collects a report from every survivor, itself included, and calls
//!    [`BoundedCounter::adopt_rights_of`], which computes `f`'s rights from
//!    them and records `R[f][heir] += rights`, as if `f` had transferred
//!    them; propagation then spreads it like any transfer.
//!
//! What `f` did and never propagated is lost with it: its unpropagated
//! transfers to others are counted as its rights (nobody received them, so
//! nobody can spend them twice, thanks to the fence), and its unpropagated
//! decrements are not known, so the rights they used are recovered too. The
//! bound then holds for every operation the survivors know of; a client of
//! `f` whose decrement `f` acknowledged but never shipped may see it
//! counted again. That is the price of a DC lost forever, as in the seed.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::counter::BoundedCounter;
use crate::error::Overflow;
use crate::replica::ReplicaId;
use crate::rights::{PlantedBug, RightsState};

/// What survivor `reporter` knows of replica `failed`, taken after fencing it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FailedReplicaReport {
    pub reporter: ReplicaId,
    pub failed: ReplicaId,
    /// `R[k][failed]` for every `k`, as the reporter knows it (0 where its
    /// representation does not keep the entry): rights sent to the failed
    /// replica. The reporter's own entry is exact.
    pub sent_to_failed: Vec<u64>,
    /// `R[failed][k]` for every `k`, as known (0 where not kept): rights the
    /// failed replica transferred (for the heir, recoveries already adopted
    /// included).
    pub sent_by_failed: Vec<u64>,
    /// `R[failed][failed]`: rights created at it, as far as propagated.
    pub created_at_failed: u64,
    /// `U[failed]`: rights it spent, as far as propagated.
    pub spent_at_failed: u64,
}

/// Why rights could not be recovered.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RecoveryError {
    #[error("replica {failed} is this replica: a replica cannot recover itself")]
    SelfFailed { failed: ReplicaId },
    #[error("replica {failed} is not one of the {replica_count} replicas")]
    UnknownReplica {
        failed: ReplicaId,
        replica_count: usize,
    },
    #[error("a report is about replica {about}, not {failed}")]
    WrongReplica { about: ReplicaId, failed: ReplicaId },
    #[error("no report from surviving replica {missing}: every survivor must report")]
    MissingReport { missing: ReplicaId },
    #[error("two reports from replica {reporter}")]
    DuplicateReport { reporter: ReplicaId },
    #[error(
        "the report from replica {reporter} has entries for more than the {replica_count} replicas"
    )]
    ReportTooLong {
        reporter: ReplicaId,
        replica_count: usize,
    },
    #[error("a report from the failed replica {failed} itself")]
    ReportFromFailed { failed: ReplicaId },
    #[error("the reports do not add up: {failed} would hold {rights} rights")]
    Inconsistent { failed: ReplicaId, rights: i128 },
    #[error(transparent)]
    Overflow(#[from] Overflow),
}

impl<S: RightsState> BoundedCounter<S> {
    fn check_failed(&self, failed: ReplicaId) -> Result<(), RecoveryError> {
        let replica_count = self.replica_count();
        if failed == self.me() {
            return Err(RecoveryError::SelfFailed { failed });
        }
        if failed.index() >= replica_count {
            return Err(RecoveryError::UnknownReplica {
                failed,
                replica_count,
            });
        }
        Ok(())
    }

    /// This replica's report on `failed` (call it only after fencing it).
    pub fn report_on_failed(
        &self,
        failed: ReplicaId,
    ) -> Result<FailedReplicaReport, RecoveryError> {
        self.check_failed(failed)?;
        let me = self.me();
        let rights = self.rights();
        let known = |from: ReplicaId, to: ReplicaId| rights.r(from, to).unwrap_or(0);
        let replicas = (0..self.replica_count()).filter_map(ReplicaId::from_index);
        debug_assert!(rights.r(me, failed).is_some() && rights.r(failed, me).is_some());
        Ok(FailedReplicaReport {
            reporter: me,
            failed,
            sent_to_failed: replicas.clone().map(|k| known(k, failed)).collect(),
            sent_by_failed: replicas.map(|k| known(failed, k)).collect(),
            created_at_failed: rights
                .r(failed, failed)
                .expect("both representations keep the diagonal"),
            spent_at_failed: rights.u(failed),
        })
    }

    /// Takes over the rights `failed` still held, computed from `reports`
    /// (one from every replica but `failed`, this one's included, all taken
    /// after fencing it): `R[failed][me] += rights`. Returns the rights
    /// recovered (0 when an earlier recovery took them already, since this
    /// replica's own report then includes it).
    pub fn adopt_rights_of(
        &mut self,
        failed: ReplicaId,
        reports: &[FailedReplicaReport],
    ) -> Result<u64, RecoveryError> {
        self.check_failed(failed)?;
        let me = self.me();
        let (rights, sent_here) =
            rights_of_failed(failed, me, self.replica_count(), reports, self.planted())?;
        if rights > 0 {
            // On top of every transfer of the failed replica to this one that
            // any survivor knew of: one this replica had not heard of itself
            // is counted in `rights` as already given away.
            self.rights_mut().adopt(failed, sent_here, rights)?;
        }
        Ok(rights)
    }
}

/// `R[f][f] + Σ_j R[j][f] − Σ_{j≠f} R[f][j] − U[f]` from every survivor's
/// report, each entry at the most any survivor knows; and that most of
/// `R[f][heir]`.
fn rights_of_failed(
    failed: ReplicaId,
    heir: ReplicaId,
    replica_count: usize,
    reports: &[FailedReplicaReport],
    planted: PlantedBug,
) -> Result<(u64, u64), RecoveryError> {
    let mut seen = vec![false; replica_count];
    let (mut created, mut spent) = (0u64, 0u64);
    let mut sent_to = vec![0u64; replica_count];
    let mut sent_by = vec![0u64; replica_count];
    for (i, report) in reports.iter().enumerate() {
        if report.failed != failed {
            return Err(RecoveryError::WrongReplica {
                about: report.failed,
                failed,
            });
        }
        let reporter = report.reporter;
        if reporter == failed {
            return Err(RecoveryError::ReportFromFailed { failed });
        }
        let slot = seen
            .get_mut(reporter.index())
            .ok_or(RecoveryError::UnknownReplica {
                failed: reporter,
                replica_count,
            })?;
        if std::mem::replace(slot, true) {
            return Err(RecoveryError::DuplicateReport { reporter });
        }
        if report.sent_to_failed.len() > replica_count
            || report.sent_by_failed.len() > replica_count
        {
            return Err(RecoveryError::ReportTooLong {
                reporter,
                replica_count,
            });
        }
        created = created.max(report.created_at_failed);
        spent = spent.max(report.spent_at_failed);
        for (k, &n) in report.sent_to_failed.iter().enumerate() {
            sent_to[k] = sent_to[k].max(n);
        }
        // Planted bug: the failed replica's transfers as the first report
        // alone knows them (the heir trusting its own view).
        if planted != PlantedBug::RecoverFromOneReport || i == 0 {
            for (k, &n) in report.sent_by_failed.iter().enumerate() {
                sent_by[k] = sent_by[k].max(n);
            }
        }
    }
    if let Some(missing) = (0..replica_count)
        .filter(|&j| j != failed.index() && !seen[j])
        .find_map(ReplicaId::from_index)
    {
        return Err(RecoveryError::MissingReport { missing });
    }
    let f = failed.index();
    let received: i128 = sent_to
        .iter()
        .enumerate()
        .filter(|&(k, _)| k != f)
        .map(|(_, &n)| i128::from(n))
        .sum();
    let transferred: i128 = sent_by
        .iter()
        .enumerate()
        .filter(|&(k, _)| k != f)
        .map(|(_, &n)| i128::from(n))
        .sum();
    let rights = i128::from(created) + received - transferred - i128::from(spent);
    let rights =
        u64::try_from(rights).map_err(|_| RecoveryError::Inconsistent { failed, rights })?;
    Ok((rights, sent_by[heir.index()]))
}

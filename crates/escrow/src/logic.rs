//! What one operation does to one site's replica of a counter: pure logic
//! shared by both middleware designs (they differ only in how the replica is
//! read and written back).

use roost_bcounter::{
    Bound, BoundedCounter, CompactRights, DecrementError, IncrementError, ReplicaId, RequestMode,
    RequestOutcome, TransferRequest,
};

use crate::api::{Direction, Flag, Op, Outcome};
use crate::error::EscrowError;
use crate::wire::TransferResult;

/// A site's replica of a counter: the compact representation (row and column
/// of `R` for this site, the diagonal, `U`), whose messages are deltas.
pub type Counter = BoundedCounter<CompactRights>;

/// What executing an operation on a replica came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The operation changed the replica; it succeeds once the replica is
    /// written back.
    Applied,
    /// The replica is unchanged and this is the answer.
    Done(Outcome),
    /// A global operation lacks rights: ask this donor synchronously, merge
    /// what it sends back, and execute again (with the donor in `tried`).
    AskDonor(TransferRequest),
}

/// `value − delta >= K` (lower) or `value + delta <= K` (upper): whether the
/// bound, as this replica knows it, leaves room for `op`.
pub fn room_for(key: &str, counter: &Counter, op: Op) -> Result<bool, EscrowError> {
    let value = i128::from(counter.value().map_err(|e| EscrowError::counter(key, e))?);
    let k = i128::from(counter.k());
    let delta = i128::from(op.delta);
    Ok(match counter.bound() {
        Bound::Lower => value - delta >= k,
        Bound::Upper => value + delta <= k,
    })
}

/// Executes `op` on `counter` (changed only when the answer is
/// [`Step::Applied`]). `tried` lists the donors a global operation has
/// already asked.
pub fn execute(
    key: &str,
    counter: &mut Counter,
    op: Op,
    flag: Flag,
    tried: &[ReplicaId],
) -> Result<Step, EscrowError> {
    let shortfall = match op.direction {
        Direction::Dec => match counter.decrement(op.delta) {
            Ok(()) => return Ok(Step::Applied),
            Err(DecrementError::InsufficientRights {
                requested,
                available,
            }) => requested.saturating_sub(available),
            Err(error @ DecrementError::Overflow(_)) => {
                return Err(EscrowError::counter(key, error))
            }
        },
        Direction::Inc => match counter.increment(op.delta) {
            Ok(()) => return Ok(Step::Applied),
            Err(IncrementError::InsufficientRights {
                requested,
                available,
            }) => requested.saturating_sub(available),
            Err(error @ IncrementError::Overflow(_)) => {
                return Err(EscrowError::counter(key, error))
            }
        },
    };
    if !room_for(key, counter, op)? {
        return Ok(Step::Done(Outcome::Fail));
    }
    let view = counter
        .rights_view()
        .map_err(|e| EscrowError::counter(key, e))?;
    let donors = view.donors_by_rights();
    if flag == Flag::Global {
        // Peers believed to hold rights first, then the others: the compact
        // representation does not see transfers between two other sites, so
        // a peer believed to hold nothing may hold what is missing.
        let unlikely = view.peers.iter().filter(|peer| peer.believed_rights <= 0);
        if let Some(donor) = donors
            .iter()
            .chain(unlikely)
            .find(|d| !tried.contains(&d.replica))
        {
            let request = counter
                .transfer_request(donor.replica, shortfall, RequestMode::Sync)
                .map_err(|e| EscrowError::counter(key, e))?;
            return Ok(Step::AskDonor(request));
        }
    }
    let elsewhere: i128 = donors.iter().map(|d| d.believed_rights).sum();
    Ok(Step::Done(Outcome::Retry {
        global_may_succeed: elsewhere >= i128::from(shortfall),
    }))
}

/// A donor's answer to `request` after `outcome`, from its replica as
/// stored: a synchronous requester gets the donor's delta (§IV-D: "replies
/// to r_i immediately with the new state"), an asynchronous one gets the
/// transfer by replication.
pub fn donor_answer(
    outcome: RequestOutcome,
    request: TransferRequest,
    counter: Option<&Counter>,
) -> TransferResult {
    let message = match (request.mode, counter) {
        (RequestMode::Sync, Some(counter)) => counter.message_for(request.requester).ok(),
        _ => None,
    };
    match outcome {
        RequestOutcome::Transferred { amount, .. } => {
            TransferResult::Transferred { amount, message }
        }
        RequestOutcome::AlreadySatisfied { transferred } => TransferResult::AlreadySatisfied {
            transferred,
            message,
        },
        RequestOutcome::NothingToGive => TransferResult::NothingToGive { message },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(i: u32) -> ReplicaId {
        ReplicaId(i)
    }

    /// Three sites; site 0 created 10 rights and moved 4 to site 1.
    fn sites() -> (Counter, Counter) {
        let mut a = Counter::new(Bound::Lower, 0, replica(0), 3).unwrap();
        let mut b = Counter::new(Bound::Lower, 0, replica(1), 3).unwrap();
        a.increment(10).unwrap();
        a.transfer(4, replica(1)).unwrap();
        b.merge(&a.message_for(replica(1)).unwrap()).unwrap();
        (a, b)
    }

    /// Site 2 learns of site 0's counter but not of its transfer to site 1
    /// (the compact representation stores no transfer between two other
    /// sites): it believes site 1 holds nothing. A global operation still
    /// asks site 1 once site 0 was asked, before answering Retry.
    #[test]
    fn global_asks_peers_believed_to_hold_nothing_last() {
        let (a, _) = sites();
        let mut c = Counter::new(Bound::Lower, 0, replica(2), 3).unwrap();
        c.merge(&a.message_for(replica(2)).unwrap()).unwrap();
        let view = c.rights_view().unwrap();
        let believed_1 = view.peers.iter().find(|p| p.replica == replica(1)).unwrap();
        assert!(believed_1.believed_rights <= 0, "{view:?}");
        let ask = |c: &mut Counter, tried: &[ReplicaId]| match execute(
            "k",
            c,
            Op::dec(8),
            Flag::Global,
            tried,
        )
        .unwrap()
        {
            Step::AskDonor(request) => Some(request.donor),
            Step::Done(Outcome::Retry { .. }) => None,
            other => panic!("{other:?}"),
        };
        assert_eq!(ask(&mut c, &[]), Some(replica(0)));
        assert_eq!(ask(&mut c, &[replica(0)]), Some(replica(1)));
        assert_eq!(ask(&mut c, &[replica(0), replica(1)]), None);
    }

    #[test]
    fn local_rights_apply() {
        let (_, mut b) = sites();
        assert_eq!(
            execute("k", &mut b, Op::dec(4), Flag::StrictLocal, &[]).unwrap(),
            Step::Applied
        );
        assert_eq!(b.value().unwrap(), 6);
        assert_eq!(b.local_rights().unwrap(), 0);
    }

    #[test]
    fn strict_local_shortfall_is_retry_with_hint() {
        let (_, mut b) = sites();
        let before = b.clone();
        // Needs 6, holds 4; site 0 is believed to hold 6: global may succeed.
        assert_eq!(
            execute("k", &mut b, Op::dec(6), Flag::StrictLocal, &[]).unwrap(),
            Step::Done(Outcome::Retry {
                global_may_succeed: true
            })
        );
        assert_eq!(b, before, "a refused operation changes nothing");
        // Needs 10: exactly what the value leaves, 4 here and 6 at site 0.
        assert_eq!(
            execute("k", &mut b, Op::dec(10), Flag::StrictLocal, &[]).unwrap(),
            Step::Done(Outcome::Retry {
                global_may_succeed: true
            })
        );
        // Site 0's rights are spent (and site 1 knows it): nothing elsewhere.
        let (mut a, mut b) = sites();
        a.decrement(5).unwrap();
        b.merge(&a.message_for(replica(1)).unwrap()).unwrap();
        b.increment(2).unwrap(); // value 7, site 1 holds 6, site 0 holds 1
        assert_eq!(
            execute("k", &mut b, Op::dec(7), Flag::StrictLocal, &[]).unwrap(),
            Step::Done(Outcome::Retry {
                global_may_succeed: true
            })
        );
        a.decrement(1).unwrap();
        b.merge(&a.message_for(replica(1)).unwrap()).unwrap();
        assert_eq!(
            execute("k", &mut b, Op::dec(7), Flag::StrictLocal, &[]).unwrap(),
            Step::Done(Outcome::Fail)
        );
    }

    #[test]
    fn beyond_the_bound_is_fail() {
        let (_, mut b) = sites();
        for flag in [Flag::StrictLocal, Flag::Global] {
            assert_eq!(
                execute("k", &mut b, Op::dec(11), flag, &[]).unwrap(),
                Step::Done(Outcome::Fail)
            );
        }
    }

    #[test]
    fn global_asks_the_richest_untried_donor() {
        let (_, mut b) = sites();
        let Step::AskDonor(request) = execute("k", &mut b, Op::dec(6), Flag::Global, &[]).unwrap()
        else {
            panic!("expected a donor request");
        };
        assert_eq!(request.donor, replica(0));
        assert_eq!(request.requester, replica(1));
        assert_eq!(request.amount, 2);
        assert_eq!(request.mode, RequestMode::Sync);
        // Site 0 tried already; site 2 is believed to hold nothing, but it is
        // asked before giving up (a belief may miss transfers).
        let Step::AskDonor(request) =
            execute("k", &mut b, Op::dec(6), Flag::Global, &[replica(0)]).unwrap()
        else {
            panic!("expected a donor request");
        };
        assert_eq!(request.donor, replica(2));
        assert_eq!(
            execute(
                "k",
                &mut b,
                Op::dec(6),
                Flag::Global,
                &[replica(0), replica(2)]
            )
            .unwrap(),
            Step::Done(Outcome::Retry {
                global_may_succeed: true
            })
        );
    }

    #[test]
    fn increments_of_a_lower_bound_need_no_rights() {
        let (_, mut b) = sites();
        assert_eq!(
            execute("k", &mut b, Op::inc(3), Flag::StrictLocal, &[]).unwrap(),
            Step::Applied
        );
        assert_eq!(b.local_rights().unwrap(), 7);
    }

    #[test]
    fn upper_bound_mirrors() {
        let mut c = Counter::new(Bound::Upper, 100, replica(0), 2).unwrap();
        assert_eq!(
            execute("k", &mut c, Op::inc(1), Flag::StrictLocal, &[]).unwrap(),
            Step::Done(Outcome::Fail)
        );
        assert_eq!(
            execute("k", &mut c, Op::dec(5), Flag::StrictLocal, &[]).unwrap(),
            Step::Applied
        );
        assert_eq!(
            execute("k", &mut c, Op::inc(5), Flag::StrictLocal, &[]).unwrap(),
            Step::Applied
        );
        assert_eq!(c.value().unwrap(), 100);
    }
}

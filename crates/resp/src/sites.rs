//! Bounded counters over geo-replicated sites (issue 6): when this node is a
//! site, BC.CREATE, BC.INC, BC.DEC and BC.GET go to the site's counters (a
//! [`SiteCounters`] the application plugs in; `roost resp --site` plugs in
//! an escrow site whose counters live inside Roost) instead of the keyspace
//! transaction, so their rights, propagation and transfers are the site's.
//!
//! Procedures (FCALL) at a site reach the same counters: each replica is a
//! row of the keyspace (`site_counters`) that a procedure's transaction
//! reads and writes with a strictly-local operation ([`SiteCounters::apply_local`]),
//! under a fresh token; the site's node writes a row only if the token is the
//! one it last saw, so it reloads and re-runs instead of overwriting, and
//! [`SiteCounters::changed`] has it ship the new state to the other sites.
//!
//! Replies: BC.INC/BC.DEC answer the counter's value at this site after the
//! operation; the seed's `fail` is `BOUND ...` (the bound as known leaves no
//! room), its `retry` is `RETRY ...` saying whether the operation with the
//! GLOBAL flag (or later) may succeed.

use std::future::Future;
use std::pin::Pin;

pub use roost_bcounter::Bound;

use crate::protocol::Frame;

/// A boxed future of a site operation.
pub type SiteFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The seed's outcomes of an operation at a site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SiteOutcome {
    Ok,
    /// The bound forbids it (as this site knows the counter).
    Fail,
    /// Not enough rights here; `global_may_succeed`: the other sites are
    /// believed to hold the shortfall.
    Retry {
        global_may_succeed: bool,
    },
}

/// What a procedure's strictly-local operation came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalApplied {
    /// Done: write `state` with `token`; `value` is the counter's value at
    /// this site after it.
    Applied {
        state: String,
        token: String,
        value: i64,
    },
    /// Not done ([`SiteOutcome::Fail`] or [`SiteOutcome::Retry`]).
    Refused(SiteOutcome),
}

/// A site's bounded counters.
pub trait SiteCounters: Send + Sync + 'static {
    /// Creates `key` with bound `k` and value `initial` (its rights at this
    /// site). Creating an existing counter with the same definition is `Ok`.
    fn create(
        &self,
        key: &str,
        bound: Bound,
        k: i64,
        initial: i64,
    ) -> SiteFuture<'_, Result<(), String>>;

    /// Adds (`up`) or subtracts `delta`; `global`: may ask other sites for
    /// rights (the seed's `global` flag), else strictly local.
    fn add(
        &self,
        key: &str,
        up: bool,
        delta: u64,
        global: bool,
    ) -> SiteFuture<'_, Result<SiteOutcome, String>>;

    /// The counter's value at this site (`None`: unknown here).
    fn value(&self, key: &str) -> SiteFuture<'_, Result<Option<i64>, String>>;

    /// The value BC.INC/BC.DEC reply with after [`add`](Self::add) answered
    /// `Ok`: [`value`](Self::value) unless the site knows it cheaper (it
    /// must include that operation).
    fn value_after_ok(&self, key: &str) -> SiteFuture<'_, Result<Option<i64>, String>> {
        self.value(key)
    }

    /// A procedure's read: the value of the replica whose stored row state
    /// is `state` (read inside the procedure's transaction).
    fn state_value(&self, key: &str, state: &str) -> Result<i64, String>;

    /// A procedure's strictly-local operation on the replica whose stored
    /// row state is `state`: adds (`up`) or subtracts `delta` using this
    /// site's rights only (a transaction cannot wait for other sites). The
    /// caller writes the new state with the token returned, in its
    /// transaction, then calls [`changed`](Self::changed) once committed.
    fn apply_local(
        &self,
        key: &str,
        state: &str,
        up: bool,
        delta: u64,
    ) -> Result<LocalApplied, String>;

    /// A transaction changed `key`'s row: the site re-reads it and ships it
    /// to the other sites.
    fn changed(&self, key: &str);

    /// §IV-E, at every survivor: fence site `failed` (nothing from it is
    /// accepted any more), then report, per counter, what this site knows of
    /// its rights (`(key, report)`, the report in the counter crate's JSON).
    fn fence_and_report(
        &self,
        failed: usize,
    ) -> SiteFuture<'_, Result<Vec<(String, String)>, String>>;

    /// §IV-E, at the one heir: take over `failed`'s rights in `key` from
    /// every survivor's report; returns the rights recovered.
    fn adopt(
        &self,
        failed: usize,
        key: &str,
        reports: Vec<String>,
    ) -> SiteFuture<'_, Result<u64, String>>;
}

/// The error text of a refused operation (`BOUND ...`, `RETRY ...`).
pub(crate) fn refusal_text(outcome: SiteOutcome) -> Option<String> {
    match outcome_reply(outcome, Ok(None)) {
        Frame::Error(text) if outcome != SiteOutcome::Ok => Some(text),
        _ => None,
    }
}

/// What a client makes of a refused BC.INC/BC.DEC: the error reply's code
/// (`BOUND`, `RETRY`) and the rest of its line, as this server sends them
/// (the inverse of the replies to [`SiteOutcome::Fail`] and
/// [`SiteOutcome::Retry`]); `None` for any other error.
pub fn refusal_of(code: &str, detail: &str) -> Option<SiteOutcome> {
    [
        SiteOutcome::Fail,
        SiteOutcome::Retry {
            global_may_succeed: true,
        },
        SiteOutcome::Retry {
            global_may_succeed: false,
        },
    ]
    .into_iter()
    .find(|&outcome| {
        refusal_text(outcome).is_some_and(|text| {
            text.split_once(' ')
                .is_some_and(|(c, d)| c == code && d == detail)
        })
    })
}

/// The reply to an operation's outcome, `value` being read after it.
pub(crate) fn outcome_reply(outcome: SiteOutcome, value: Result<Option<i64>, String>) -> Frame {
    match outcome {
        SiteOutcome::Ok => match value {
            Ok(Some(value)) => Frame::Integer(value),
            Ok(None) => Frame::error("ERR no such bounded counter"),
            Err(e) => Frame::error(format!("ERR {e}")),
        },
        SiteOutcome::Fail => Frame::error("BOUND the counter's bound forbids it"),
        SiteOutcome::Retry {
            global_may_succeed: true,
        } => Frame::error(
            "RETRY not enough rights at this site; other sites are believed to hold them (GLOBAL asks them; a site that is unreachable keeps its rights until it returns)",
        ),
        SiteOutcome::Retry {
            global_may_succeed: false,
        } => Frame::error(
            "RETRY not enough rights at this site, and the other sites are not believed to hold them either; retry later",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_reads_every_refusal_back() {
        for outcome in [
            SiteOutcome::Fail,
            SiteOutcome::Retry {
                global_may_succeed: true,
            },
            SiteOutcome::Retry {
                global_may_succeed: false,
            },
        ] {
            let text = refusal_text(outcome).expect("a refusal has a text");
            let (code, detail) = text.split_once(' ').expect("code, then detail");
            assert_eq!(refusal_of(code, detail), Some(outcome), "{text}");
        }
        assert_eq!(refusal_text(SiteOutcome::Ok), None);
        assert_eq!(refusal_of("ERR", "no such bounded counter"), None);
        assert_eq!(refusal_of("RETRY", "something else"), None);
    }
}

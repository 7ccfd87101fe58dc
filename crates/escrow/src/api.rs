//! The API of the seed's Figure 1, for bounded counters:
//!
//! ```text
//! create(key, type, bound): ok | error
//! read(key): integer | error
//! inc(key, delta, flag): ok | fail | retry
//! dec(key, delta, flag): ok | fail | retry
//! ```
//!
//! Infrastructure errors (the site's Redis is down, a corrupt state) are the
//! `Err` side; `ok | fail | retry` is an [`Outcome`].

use std::future::Future;

use serde::{Deserialize, Serialize};

pub use roost_bcounter::Bound;

use crate::error::EscrowError;

/// Where an operation may look for rights (§II-B).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Flag {
    /// Only with the rights this site holds: never waits for another site.
    StrictLocal,
    /// Locally first; if this site lacks rights, ask the other sites for
    /// them synchronously (the most-provisioned first) before giving up.
    Global,
}

/// The result of `inc` and `dec`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Applied; durable in this site's store.
    Ok,
    /// The counter has reached its bound as far as this site knows: no site
    /// holds the rights (unless increments elsewhere have not arrived yet).
    Fail,
    /// The bound leaves room, but this site does not hold enough rights
    /// (a global operation: could not obtain them now, e.g. the sites that
    /// hold them are unreachable). `global_may_succeed` is the paper's hint:
    /// the other sites are believed to hold at least the shortfall.
    Retry { global_may_succeed: bool },
}

/// Increment or decrement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Inc,
    Dec,
}

/// One update of a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Op {
    pub direction: Direction,
    pub delta: u64,
}

impl Op {
    pub fn inc(delta: u64) -> Op {
        Op {
            direction: Direction::Inc,
            delta,
        }
    }

    pub fn dec(delta: u64) -> Op {
        Op {
            direction: Direction::Dec,
            delta,
        }
    }

    /// Whether the operation spends rights on a counter with this bound (a
    /// decrement of a lower-bounded counter, an increment of an
    /// upper-bounded one).
    pub fn needs_rights(&self, bound: Bound) -> bool {
        matches!(
            (bound, self.direction),
            (Bound::Lower, Direction::Dec) | (Bound::Upper, Direction::Inc)
        )
    }
}

/// Figure 1's bounded-counter operations. Implemented by the client-based
/// middleware, the server-based middleware, and the Weak baseline (which
/// ignores the flag and keeps no rights).
///
/// `create` initializes the counter to its bound, as in the paper; it is
/// idempotent (creating an existing counter with the same type and bound is
/// `Ok`), so every site may create it.
pub trait EscrowCounters {
    fn create(
        &mut self,
        key: &str,
        bound: Bound,
        k: i64,
    ) -> impl Future<Output = Result<(), EscrowError>> + Send;

    /// The value as this site knows it (possibly stale, never outside the
    /// bound).
    fn read(&mut self, key: &str) -> impl Future<Output = Result<i64, EscrowError>> + Send;

    fn inc(
        &mut self,
        key: &str,
        delta: u64,
        flag: Flag,
    ) -> impl Future<Output = Result<Outcome, EscrowError>> + Send;

    fn dec(
        &mut self,
        key: &str,
        delta: u64,
        flag: Flag,
    ) -> impl Future<Output = Result<Outcome, EscrowError>> + Send;
}

//! The Weak baseline (§V-A, "Weakly Consistent Counters"): plain Redis
//! counters; before a decrement the client reads the value and decrements
//! only if the bound still holds (GET, check, DECRBY: nothing stops two
//! clients, or two sites, from both passing the check). Each site's agent
//! replicates the increments and decrements to the other sites
//! asynchronously, as deltas. It keeps no rights, so it can and does break
//! the bound under concurrency; the tests check that it does.
//!
//! Keys: `weak:def:{key}` (`lower K` or `upper K`), `weak:v:{key}` (the
//! value), `weak:log` (a list of `key<TAB>delta` not yet shipped).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::api::{Bound, Direction, EscrowCounters, Flag, Op, Outcome};
use crate::error::{check_key, EscrowError};
use crate::site::{SiteInner, Stats};
use crate::store::{self, LazyConnection};
use crate::wire::{Frame, WeakDelta};

/// Updates not yet shipped to the other sites.
pub const WEAK_LOG: &str = "weak:log";
/// At most this many updates wait for an unreachable site; older ones are
/// dropped (the baseline does not promise convergence across long
/// partitions).
pub const MAX_WEAK_BACKLOG: usize = 1 << 20;
const SHIP_BATCH: usize = 10_000;

pub fn weak_value_key(key: &str) -> String {
    format!("weak:v:{key}")
}

pub fn weak_def_key(key: &str) -> String {
    format!("weak:def:{key}")
}

fn format_def(bound: Bound, k: i64) -> String {
    match bound {
        Bound::Lower => format!("lower {k}"),
        Bound::Upper => format!("upper {k}"),
    }
}

fn parse_def(key: &str, def: &str) -> Result<(Bound, i64), EscrowError> {
    let corrupt = || EscrowError::CorruptState {
        key: key.to_owned(),
        reason: format!("weak counter definition {def:?} is not `lower K` or `upper K`"),
    };
    let (bound, k) = def.split_once(' ').ok_or_else(corrupt)?;
    let bound = match bound {
        "lower" => Bound::Lower,
        "upper" => Bound::Upper,
        _ => return Err(corrupt()),
    };
    Ok((bound, k.parse().map_err(|_| corrupt())?))
}

fn parse_value(key: &str, value: &str) -> Result<i64, EscrowError> {
    value.parse().map_err(|_| EscrowError::CorruptState {
        key: key.to_owned(),
        reason: format!("weak counter value {value:?} is not an integer"),
    })
}

/// A client of the Weak baseline at one site.
pub struct WeakClient {
    con: LazyConnection,
    defs: HashMap<String, (Bound, i64)>,
}

impl WeakClient {
    pub async fn connect(url: &str) -> Result<WeakClient, EscrowError> {
        Ok(WeakClient {
            con: LazyConnection::new(url, Some(store::connect(url).await?)),
            defs: HashMap::new(),
        })
    }

    async fn def(&mut self, key: &str) -> Result<(Bound, i64), EscrowError> {
        if let Some(def) = self.defs.get(key) {
            return Ok(*def);
        }
        let mut con = self.con.get().await?;
        let def: Option<String> = redis::cmd("GET")
            .arg(weak_def_key(key))
            .query_async(&mut con)
            .await
            .map_err(EscrowError::from)?;
        let def = def.ok_or_else(|| EscrowError::UnknownCounter {
            key: key.to_owned(),
        })?;
        let def = parse_def(key, &def)?;
        self.defs.insert(key.to_owned(), def);
        Ok(def)
    }

    async fn op(&mut self, key: &str, op: Op) -> Result<Outcome, EscrowError> {
        check_key(key)?;
        let (bound, k) = self.def(key).await?;
        let mut con = self.con.get().await?;
        let current: Result<Option<String>, _> = redis::cmd("GET")
            .arg(weak_value_key(key))
            .query_async(&mut con)
            .await;
        let current = self
            .con
            .failed(current)?
            .ok_or_else(|| EscrowError::UnknownCounter {
                key: key.to_owned(),
            })?;
        let current = parse_value(key, &current)?;
        let delta = i64::try_from(op.delta)
            .map_err(|_| EscrowError::counter(key, "delta does not fit an i64"))?;
        let signed = match op.direction {
            Direction::Inc => delta,
            Direction::Dec => -delta,
        };
        let next = current
            .checked_add(signed)
            .ok_or_else(|| EscrowError::counter(key, "value overflows"))?;
        let within = match bound {
            Bound::Lower => next >= k,
            Bound::Upper => next <= k,
        };
        if op.needs_rights(bound) && !within {
            return Ok(Outcome::Fail);
        }
        // The check above and this update are not atomic: that is the point.
        let written: Result<(), _> = redis::pipe()
            .atomic()
            .cmd("INCRBY")
            .arg(weak_value_key(key))
            .arg(signed)
            .ignore()
            .cmd("RPUSH")
            .arg(WEAK_LOG)
            .arg(format!("{key}\t{signed}"))
            .ignore()
            .query_async(&mut con)
            .await;
        self.con.failed(written)?;
        Ok(Outcome::Ok)
    }
}

impl EscrowCounters for WeakClient {
    async fn create(&mut self, key: &str, bound: Bound, k: i64) -> Result<(), EscrowError> {
        check_key(key)?;
        let mut con = self.con.get().await?;
        let def = format_def(bound, k);
        let set: Result<Option<String>, _> = redis::cmd("SET")
            .arg(weak_def_key(key))
            .arg(&def)
            .arg("NX")
            .query_async(&mut con)
            .await;
        if self.con.failed(set)?.is_none() {
            let existing = self.def(key).await?;
            if existing != (bound, k) {
                return Err(EscrowError::Conflict {
                    key: key.to_owned(),
                    existing: format!("{:?} {}", existing.0, existing.1),
                    requested: format!("{bound:?} {k}"),
                });
            }
        }
        let initial: Result<Option<String>, _> = redis::cmd("SET")
            .arg(weak_value_key(key))
            .arg(k)
            .arg("NX")
            .query_async(&mut con)
            .await;
        self.con.failed(initial)?;
        self.defs.insert(key.to_owned(), (bound, k));
        Ok(())
    }

    async fn read(&mut self, key: &str) -> Result<i64, EscrowError> {
        check_key(key)?;
        let mut con = self.con.get().await?;
        let value: Result<Option<String>, _> = redis::cmd("GET")
            .arg(weak_value_key(key))
            .query_async(&mut con)
            .await;
        let value = self
            .con
            .failed(value)?
            .ok_or_else(|| EscrowError::UnknownCounter {
                key: key.to_owned(),
            })?;
        parse_value(key, &value)
    }

    async fn inc(&mut self, key: &str, delta: u64, _flag: Flag) -> Result<Outcome, EscrowError> {
        self.op(key, Op::inc(delta)).await
    }

    async fn dec(&mut self, key: &str, delta: u64, _flag: Flag) -> Result<Outcome, EscrowError> {
        self.op(key, Op::dec(delta)).await
    }
}

/// The Weak baseline's site agent: ships the log, replays what arrives.
pub(crate) struct WeakBackend {
    con: LazyConnection,
    backlog: Mutex<Vec<VecDeque<WeakDelta>>>,
}

impl WeakBackend {
    pub(crate) fn new(url: &str, sites: usize) -> WeakBackend {
        WeakBackend {
            con: LazyConnection::new(url, None),
            backlog: Mutex::new(vec![VecDeque::new(); sites]),
        }
    }

    /// Moves the log into per-site backlogs and sends to reachable sites.
    pub(crate) async fn ship(&self, site: &SiteInner) {
        let Ok(mut con) = self.con.get().await else {
            return;
        };
        let popped: Result<Option<Vec<String>>, _> = redis::cmd("LPOP")
            .arg(WEAK_LOG)
            .arg(SHIP_BATCH)
            .query_async(&mut con)
            .await;
        let popped = match popped {
            Ok(popped) => popped.unwrap_or_default(),
            Err(error) => {
                tracing::warn!(site = site.site(), %error, "weak: cannot read the log");
                self.con.invalidate().await;
                return;
            }
        };
        let mut deltas = Vec::with_capacity(popped.len());
        for line in popped {
            let parsed = line.split_once('\t').and_then(|(key, delta)| {
                Some(WeakDelta {
                    key: key.to_owned(),
                    delta: delta.parse().ok()?,
                })
            });
            match parsed {
                Some(delta) => deltas.push(delta),
                None => tracing::warn!(site = site.site(), line, "weak: malformed log entry"),
            }
        }
        let Ok(mut backlog) = self.backlog.lock() else {
            return;
        };
        for (peer, queue) in backlog.iter_mut().enumerate() {
            if peer == site.site() {
                continue;
            }
            queue.extend(deltas.iter().cloned());
            while queue.len() > MAX_WEAK_BACKLOG {
                queue.pop_front();
            }
            while !queue.is_empty() {
                if !site.links.is_up(peer) {
                    break;
                }
                let take = queue.len().min(SHIP_BATCH);
                let entries: Vec<WeakDelta> = queue.drain(..take).collect();
                let count = entries.len() as u64;
                if site.links.send(
                    peer,
                    &Frame::WeakDeltas {
                        entries: entries.clone(),
                    },
                ) {
                    Stats::add(&site.stats.frames_sent, 1);
                    Stats::add(&site.stats.weak_deltas_sent, count);
                } else {
                    for entry in entries.into_iter().rev() {
                        queue.push_front(entry);
                    }
                    break;
                }
            }
        }
    }

    /// Replays another site's updates (not logged again: no echo).
    pub(crate) async fn apply(&self, site: &SiteInner, entries: Vec<WeakDelta>) {
        let mut pipe = redis::pipe();
        let mut count = 0u64;
        for entry in &entries {
            if check_key(&entry.key).is_err() {
                Stats::add(&site.stats.merges_rejected, 1);
                continue;
            }
            pipe.cmd("INCRBY")
                .arg(weak_value_key(&entry.key))
                .arg(entry.delta)
                .ignore();
            count += 1;
        }
        if count == 0 {
            return;
        }
        let Ok(mut con) = self.con.get().await else {
            return;
        };
        let applied: Result<(), _> = pipe.query_async(&mut con).await;
        match applied {
            Ok(()) => Stats::add(&site.stats.weak_deltas_applied, count),
            Err(error) => {
                tracing::warn!(site = site.site(), %error, "weak: cannot apply deltas");
                self.con.invalidate().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_round_trip_and_garbage_is_an_error() {
        for (bound, k) in [(Bound::Lower, 0), (Bound::Upper, -5)] {
            assert_eq!(parse_def("k", &format_def(bound, k)).unwrap(), (bound, k));
        }
        for bad in ["", "lower", "sideways 3", "lower x"] {
            assert!(matches!(
                parse_def("k", bad),
                Err(EscrowError::CorruptState { .. })
            ));
        }
        assert!(parse_value("k", "12a").is_err());
    }
}

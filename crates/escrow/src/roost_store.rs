//! The site's store as an embedded Roost database ([`Design::Roost`]
//! (crate::Design::Roost)): bounded counters inside Roost, each replica a row
//! of a reactor's relation, every write a serializable Roost transaction.
//!
//! The server-based node runs unchanged on top (its per-key engines, caching
//! and batching); only its two store operations change: a load reads the row,
//! and a conditional write is one transaction that reads the row's token and
//! writes the new state only if it is the expected one (what the Lua
//! compare-and-set does over Redis). The counters are spread over
//! [`REACTORS`] reactors of type `escrow` by a hash of the key.

use std::collections::hash_map::DefaultHasher;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::pin::Pin;
use std::sync::Arc;

use roost_bcounter::ReplicaId;
use roost_reactor::{Database, Deployment, ReactorId, RelationDef, ScanDirection, Schema};
use serde::{Deserialize, Serialize};

use crate::api::{Flag, Op, Outcome};
use crate::error::EscrowError;
use crate::logic::{self, Counter, Step};
use crate::store::{decode_state, encode_state, CasOutcome, Record};

const REACTOR_TYPE: &str = "escrow";
/// Reactors the counters are spread over.
pub const REACTORS: usize = 16;
/// Executors of the embedded database.
const EXECUTORS: usize = 2;

/// A boxed future of a [`ReplicaRows`] operation.
pub type RowFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A counter's replica at this site as a row: its state (the same versioned
/// JSON as over Redis, as [`encode_state`] writes it) and the token of the
/// write that left it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaRow {
    pub state: String,
    pub token: String,
}

/// Where a site's replica rows live: a Roost database of their own
/// ([`RoostStore::new`]) or one the application already runs (a node's
/// keyspace), so that its own transactions (procedures) can update a counter
/// together with other data; the node is then one writer among others,
/// which its conditional writes already allow for.
pub trait ReplicaRows: Send + Sync + 'static {
    /// The row of `key` (`None`: this site does not have the counter).
    fn load(&self, key: &str) -> RowFuture<'_, Result<Option<ReplicaRow>, String>>;

    /// Writes `row` if the stored token is `expected` (`None`: no row yet),
    /// in one serializable transaction; `false` if it was not.
    fn cas(
        &self,
        key: &str,
        expected: Option<&str>,
        row: ReplicaRow,
    ) -> RowFuture<'_, Result<bool, String>>;

    /// Every key with a row.
    fn keys(&self) -> RowFuture<'_, Result<Vec<String>, String>>;
}

/// Ordered (not point-access only): a resync lists every counter by
/// scanning the reactors' rows.
static ROWS: RelationDef<String, ReplicaRow> = RelationDef::new(REACTOR_TYPE, "counters");

/// The rows in an embedded database of their own, spread over [`REACTORS`]
/// reactors by a hash of the key.
struct EmbeddedRows {
    db: Database,
    reactors: Vec<ReactorId>,
}

impl EmbeddedRows {
    fn reactor_of(&self, key: &str) -> ReactorId {
        let mut hasher = DefaultHasher::new();
        key.hash(&mut hasher);
        self.reactors[(hasher.finish() % self.reactors.len() as u64) as usize]
    }
}

impl ReplicaRows for EmbeddedRows {
    fn load(&self, key: &str) -> RowFuture<'_, Result<Option<ReplicaRow>, String>> {
        let (reactor, row_key) = (self.reactor_of(key), key.to_owned());
        Box::pin(async move {
            self.db
                .run(reactor, move |ctx| {
                    let row_key = row_key.clone();
                    async move { ctx.get(&ROWS, &row_key) }
                })
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn cas(
        &self,
        key: &str,
        expected: Option<&str>,
        row: ReplicaRow,
    ) -> RowFuture<'_, Result<bool, String>> {
        let reactor = self.reactor_of(key);
        let (row_key, expected) = (key.to_owned(), expected.map(str::to_owned));
        Box::pin(async move {
            self.db
                .run(reactor, move |ctx| {
                    let (row_key, expected, row) = (row_key.clone(), expected.clone(), row.clone());
                    async move {
                        let stored = ctx.get(&ROWS, &row_key)?.map(|r| r.token);
                        if stored != expected {
                            return Ok(false);
                        }
                        ctx.put(&ROWS, &row_key, &row)?;
                        Ok(true)
                    }
                })
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn keys(&self) -> RowFuture<'_, Result<Vec<String>, String>> {
        Box::pin(async move {
            let mut keys = Vec::new();
            for &reactor in &self.reactors {
                let rows = self
                    .db
                    .run(reactor, |ctx| async move {
                        ctx.scan(&ROWS, .., ScanDirection::Forward, usize::MAX)
                    })
                    .await
                    .map_err(|e| e.to_string())?;
                keys.extend(rows.into_iter().map(|(key, _)| key));
            }
            Ok(keys)
        })
    }
}

/// One site's counters in Roost, as rows ([`ReplicaRows`]).
pub struct RoostStore {
    rows: Arc<dyn ReplicaRows>,
}

fn roost_error(reason: String) -> EscrowError {
    EscrowError::Roost { reason }
}

impl RoostStore {
    /// The counters in an embedded Roost database of their own.
    pub fn new() -> Result<RoostStore, EscrowError> {
        let config = |e: String| EscrowError::Config {
            reason: format!("the site's Roost store: {e}"),
        };
        let schema = Schema::new()
            .reactor_type(REACTOR_TYPE, &[&ROWS])
            .map_err(|e| config(e.to_string()))?;
        let db = Database::new(schema, Deployment::shared_everything(EXECUTORS))
            .map_err(|e| config(e.to_string()))?;
        let reactors = (0..REACTORS)
            .map(|i| db.create_reactor(REACTOR_TYPE, &format!("escrow-{i}")))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| config(e.to_string()))?;
        Ok(RoostStore::external(Arc::new(EmbeddedRows {
            db,
            reactors,
        })))
    }

    /// The counters in the application's database.
    pub fn external(rows: Arc<dyn ReplicaRows>) -> RoostStore {
        RoostStore { rows }
    }

    /// Reads a replica (`None` if this site does not have the counter).
    pub async fn load(
        &self,
        key: &str,
        me: ReplicaId,
        sites: usize,
    ) -> Result<Option<Record>, EscrowError> {
        match self.rows.load(key).await.map_err(roost_error)? {
            None => Ok(None),
            Some(row) => Ok(Some(Record {
                counter: decode_state(key, row.state.as_bytes(), me, sites)?,
                token: row.token,
            })),
        }
    }

    /// Writes `counter` with `token` if the stored token is `expected`
    /// (`None`: the counter must not exist yet), in one serializable
    /// transaction.
    pub async fn cas_write(
        &self,
        key: &str,
        expected: Option<&str>,
        token: &str,
        counter: &Counter,
    ) -> Result<CasOutcome, EscrowError> {
        let row = ReplicaRow {
            state: encode_state(key, counter)?,
            token: token.to_owned(),
        };
        let landed = self
            .rows
            .cas(key, expected, row)
            .await
            .map_err(roost_error)?;
        Ok(if landed {
            CasOutcome::Landed
        } else {
            CasOutcome::Conflict
        })
    }

    /// The counters this site has.
    pub async fn known_keys(&self) -> Result<Vec<String>, EscrowError> {
        self.rows.keys().await.map_err(roost_error)
    }
}

/// What a strictly-local operation on a stored row came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalStep {
    /// Done: the new row state and the counter's value after it.
    Applied { state: String, value: i64 },
    /// Not done: the answer (`Fail`, or `Retry` with the hint).
    Refused(Outcome),
}

/// Executes `op` strictly locally (this site's rights only) on the replica
/// whose row state is `state`: what a procedure does inside its own
/// transaction, beside the site's node (the row's token tells the node).
pub fn apply_strictly_local(
    key: &str,
    state: &str,
    me: ReplicaId,
    sites: usize,
    op: Op,
) -> Result<LocalStep, EscrowError> {
    let mut counter = decode_state(key, state.as_bytes(), me, sites)?;
    match logic::execute(key, &mut counter, op, Flag::StrictLocal, &[])? {
        Step::Applied => Ok(LocalStep::Applied {
            state: encode_state(key, &counter)?,
            value: counter.value().map_err(|e| EscrowError::counter(key, e))?,
        }),
        Step::Done(outcome) => Ok(LocalStep::Refused(outcome)),
        // Only a global operation asks a donor.
        Step::AskDonor(_) => Err(EscrowError::counter(
            key,
            "a strictly-local operation asked for a transfer",
        )),
    }
}

/// The value of the replica whose row state is `state`.
pub fn state_value(
    key: &str,
    state: &str,
    me: ReplicaId,
    sites: usize,
) -> Result<i64, EscrowError> {
    decode_state(key, state.as_bytes(), me, sites)?
        .value()
        .map_err(|e| EscrowError::counter(key, e))
}

#[cfg(test)]
mod tests {
    use roost_bcounter::Bound;

    use super::*;

    fn counter(me: ReplicaId, k: i64) -> Counter {
        Counter::with_initial_value(Bound::Lower, 0, k, me, me, 3).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn conditional_writes_check_the_token() {
        let store = RoostStore::new().unwrap();
        let me = ReplicaId::from_index(1).unwrap();
        assert!(store.load("c", me, 3).await.unwrap().is_none());
        let first = counter(me, 10);
        // Creating: no token expected.
        assert_eq!(
            store.cas_write("c", None, "t1", &first).await.unwrap(),
            CasOutcome::Landed
        );
        assert_eq!(
            store.cas_write("c", None, "t2", &first).await.unwrap(),
            CasOutcome::Conflict
        );
        let mut second = first.clone();
        second.decrement(4).unwrap();
        assert_eq!(
            store
                .cas_write("c", Some("stale"), "t2", &second)
                .await
                .unwrap(),
            CasOutcome::Conflict
        );
        assert_eq!(
            store
                .cas_write("c", Some("t1"), "t2", &second)
                .await
                .unwrap(),
            CasOutcome::Landed
        );
        let record = store.load("c", me, 3).await.unwrap().unwrap();
        assert_eq!(record.token, "t2");
        assert_eq!(record.counter.value().unwrap(), 6);
        // Another site's id does not own this replica.
        let other = ReplicaId::from_index(2).unwrap();
        assert!(matches!(
            store.load("c", other, 3).await,
            Err(EscrowError::CorruptState { .. })
        ));
        for key in ["a", "b", "d"] {
            store.cas_write(key, None, "t", &first).await.unwrap();
        }
        let mut keys = store.known_keys().await.unwrap();
        keys.sort();
        assert_eq!(keys, ["a", "b", "c", "d"]);
    }
}

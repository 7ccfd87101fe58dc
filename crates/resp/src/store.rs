//! The keyspace on reactors, and the data commands run as root transactions.
//!
//! **Keys to reactors.** The keyspace is split over `K` reactors of type
//! `keyspace`, named `keyspace-0` .. `keyspace-{K-1}`; a key belongs to
//! reactor `fnv1a64(key) mod K`, where it is one row of the relation `kv`
//! ([`KvKey`]: the key's bytes, to an [`Entry`]: a write stamp and a value). A batch of commands is one root transaction that starts on the
//! reactor of its first key and reaches the reactor of every other key it
//! touches (synchronously when it lives in the same container, through a call
//! otherwise), so a multi-key command, a pipeline batch or a MULTI/EXEC block
//! is serializable as a whole whichever reactors its keys live on.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use roost_bcounter::{Bound, BoundedCounter, FullRights, ReplicaId};
use roost_reactor::{
    Database, Deployment, KeyCodec, KeyDecodeError, ReactorCtx, ReactorError, ReactorId,
    RelationDef, ScanDirection, Schema,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::functions::{run_call, FCall, Writes};
use crate::protocol::Frame;
use crate::sites::SiteCounters;
use crate::stats::Stats;

pub(crate) const REACTOR_TYPE: &str = "keyspace";
/// Every key's row: key to its entry. Hash-indexed: no command walks the
/// keyspace in order.
pub(crate) static KV: RelationDef<KvKey, Entry> =
    RelationDef::new(REACTOR_TYPE, "kv").point_access_only();

/// With sites (`roost resp --site`): each bounded counter's replica at this
/// site, a row per key beside the keyspace's strings, so that a procedure
/// (FCALL) updates a counter in the same transaction as its other keys.
/// Ordered: the site's node lists the counters it has (a resync).
pub(crate) static SITE_ROWS: RelationDef<KvKey, SiteRow> =
    RelationDef::new(REACTOR_TYPE, "site_counters");

/// A bounded counter's replica at this site: its state (the site's versioned
/// JSON, opaque here) and the token of the write that left it. The site's
/// node writes a row only if its token is the one it last saw, so a
/// procedure's write (with a fresh token) is never overwritten unseen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteRow {
    pub state: String,
    pub token: String,
}

/// A key as the `kv` relation stores it: its bytes as they are. It is the
/// whole key (no component follows it), so raw bytes keep the byte order
/// without the escaping and terminator a tuple component needs; and the
/// relation is hash-indexed, so nothing looks at that order anyway.
#[derive(Debug, Clone, PartialEq, Eq)]
#[repr(transparent)]
pub(crate) struct KvKey(pub(crate) Vec<u8>);

impl KvKey {
    /// A key of a command as a `KvKey`, without copying it.
    fn from_ref(key: &Vec<u8>) -> &KvKey {
        // SAFETY: `KvKey` is a `repr(transparent)` wrapper of `Vec<u8>`.
        unsafe { &*(key as *const Vec<u8>).cast::<KvKey>() }
    }
}

impl KeyCodec for KvKey {
    fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0);
    }

    /// Takes the rest of `input`: a `KvKey` is always the last component.
    fn decode_from(input: &mut &[u8]) -> Result<Self, KeyDecodeError> {
        Ok(KvKey(std::mem::take(input).to_vec()))
    }
}

/// Longest key accepted (the storage engine's keys are at most 4 KiB, the
/// reactor's id included).
pub const MAX_KEY_BYTES: usize = 1024;
/// Largest string value or list element accepted (a stored entry must fit the
/// storage engine's 16 MiB value limit).
pub const MAX_VALUE_BYTES: usize = 8 << 20;

pub(crate) const WRONGTYPE: &str =
    "WRONGTYPE Operation against a key holding the wrong kind of value";
pub(crate) const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
pub(crate) const OVERFLOW: &str = "ERR increment or decrement would overflow";
pub(crate) const NOT_A_SITE: &str =
    "ERR this node is not a site of a geo-replicated deployment (roost resp --site, roost up --sites)";

/// A key's stored row.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// Unique per write (from a server-wide counter): WATCH compares stamps,
    /// so a key changed and changed back still aborts the EXEC.
    pub(crate) stamp: u64,
    pub(crate) value: Value,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum Value {
    Str(#[serde(with = "raw_bytes")] Vec<u8>),
    /// A string that INCR/DECR/INCRBY left: kept as the integer it holds
    /// (as Redis's int encoding), so the next one neither parses nor formats
    /// it. Every command reads it as its decimal string.
    Int(i64),
    List(VecDeque<Vec<u8>>),
    /// Fields in insertion order.
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    /// A bounded counter in roost-bcounter's versioned wire encoding (JSON):
    /// that encoding reads optional fields, which postcard's non-self-describing
    /// format cannot carry, so it is stored as bytes inside the entry.
    Counter(Vec<u8>),
}

/// A byte string as serde bytes rather than a sequence of `u8`: the same
/// postcard encoding (a length, then the bytes), copied at once instead of
/// byte by byte.
mod raw_bytes {
    use serde::de::{Deserializer, SeqAccess, Visitor};
    use serde::Serializer;

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(bytes)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        d.deserialize_byte_buf(BytesVisitor)
    }

    struct BytesVisitor;

    impl<'de> Visitor<'de> for BytesVisitor {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a byte string")
        }

        fn visit_bytes<E>(self, bytes: &[u8]) -> Result<Vec<u8>, E> {
            Ok(bytes.to_vec())
        }

        fn visit_byte_buf<E>(self, bytes: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(bytes)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
            while let Some(b) = seq.next_element()? {
                bytes.push(b);
            }
            Ok(bytes)
        }
    }
}

pub(crate) fn encode_counter(counter: &BoundedCounter<FullRights>) -> Vec<u8> {
    serde_json::to_vec(counter).expect("a counter always serializes")
}

pub(crate) fn decode_counter(bytes: &[u8]) -> Result<BoundedCounter<FullRights>, Frame> {
    serde_json::from_slice(bytes)
        .map_err(|e| Frame::error(format!("ERR stored bounded counter is unreadable: {e}")))
}

/// SET's condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SetCond {
    Always,
    IfAbsent,
    IfPresent,
}

/// A data command, parsed and ready to run inside a transaction.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    Get(Vec<u8>),
    Set {
        key: Vec<u8>,
        value: Vec<u8>,
        cond: SetCond,
        get: bool,
    },
    Del(Vec<Vec<u8>>),
    Exists(Vec<Vec<u8>>),
    IncrBy(Vec<u8>, i64),
    MGet(Vec<Vec<u8>>),
    MSet(Vec<(Vec<u8>, Vec<u8>)>),
    Push {
        key: Vec<u8>,
        left: bool,
        values: Vec<Vec<u8>>,
    },
    LRange {
        key: Vec<u8>,
        start: i64,
        stop: i64,
    },
    LLen(Vec<u8>),
    HGet(Vec<u8>, Vec<u8>),
    HSet(Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>),
    HGetAll(Vec<u8>),
    HDel(Vec<u8>, Vec<Vec<u8>>),
    BcCreate {
        key: Vec<u8>,
        bound: Bound,
        k: i64,
        initial: i64,
    },
    /// `up`: BC.INC, else BC.DEC; `global`: the GLOBAL flag (the default),
    /// else LOCAL (one node holds every right, so both act alike here).
    BcAdd {
        key: Vec<u8>,
        up: bool,
        delta: u64,
        global: bool,
    },
    BcGet(Vec<u8>),
    /// §IV-E at a site: BC.FENCE failed-site.
    BcFence(usize),
    /// §IV-E at a site: BC.ADOPT failed-site key report...
    BcAdopt {
        failed: usize,
        key: Vec<u8>,
        reports: Vec<Vec<u8>>,
    },
    /// Read the keys' stamps (WATCH).
    Stamps(Vec<Vec<u8>>),
    /// A registered function's call (FCALL, FCALL_RO).
    FCall(Arc<FCall>),
    /// A reply known before the transaction runs (a rejected argument's error, or a
    /// connection command queued in MULTI), given at its place.
    Reply(Frame),
}

impl Op {
    /// The first key the command touches (where its transaction starts).
    fn first_key(&self) -> Option<&[u8]> {
        match self {
            Op::Get(k)
            | Op::Set { key: k, .. }
            | Op::IncrBy(k, _)
            | Op::Push { key: k, .. }
            | Op::LRange { key: k, .. }
            | Op::LLen(k)
            | Op::HGet(k, _)
            | Op::HSet(k, _)
            | Op::HGetAll(k)
            | Op::HDel(k, _)
            | Op::BcCreate { key: k, .. }
            | Op::BcAdd { key: k, .. }
            | Op::BcGet(k)
            | Op::BcAdopt { key: k, .. } => Some(k),
            Op::Del(keys) | Op::Exists(keys) | Op::MGet(keys) | Op::Stamps(keys) => {
                keys.first().map(Vec::as_slice)
            }
            Op::MSet(pairs) => pairs.first().map(|(k, _)| k.as_slice()),
            Op::FCall(call) => call.first_key(),
            Op::Reply(_) | Op::BcFence(_) => None,
        }
    }

    /// Bytes of keys and values the command carries (bounds a batch).
    pub(crate) fn payload_bytes(&self) -> usize {
        match self {
            Op::Set { key, value, .. } => key.len() + value.len(),
            Op::MSet(pairs) | Op::HSet(_, pairs) => {
                pairs.iter().map(|(k, v)| k.len() + v.len()).sum()
            }
            Op::Push { values, .. } => values.iter().map(Vec::len).sum(),
            Op::FCall(call) => call.payload_bytes(),
            _ => 64,
        }
    }
}

/// `fnv1a64(key) mod k`: which keyspace reactor holds `key`.
pub fn keyspace_index(key: &[u8], k: usize) -> usize {
    (fnv1a64(key) % k as u64) as usize
}

fn fnv1a64(key: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The database, its keyspace reactors and the server's counters.
pub(crate) struct Store {
    db: Database,
    shared: Arc<Shared>,
}

/// What a transaction's procedure needs (shared with every attempt).
struct Shared {
    reactors: Vec<ReactorId>,
    next_stamp: AtomicU64,
    stats: Arc<Stats>,
    /// With sites: the site's counters (procedures' bounded counters are
    /// then site rows, and the site's node is told what they changed).
    sites: OnceLock<Arc<dyn SiteCounters>>,
}

impl Shared {
    fn reactor_of(&self, key: &[u8]) -> ReactorId {
        self.reactors[keyspace_index(key, self.reactors.len())]
    }
}

/// WATCHed keys and the stamps they had when watched (`None`: absent).
pub(crate) type Watched = Vec<(Vec<u8>, Option<u64>)>;

/// The outcome of a batch: replies in order, or `None` when a WATCHed key
/// had changed (nothing was applied).
pub(crate) type BatchOutcome = Result<Option<Vec<Frame>>, ReactorError>;

impl Store {
    pub(crate) fn new(config: &Config, stats: Arc<Stats>) -> Result<Self, String> {
        let (keyspace_reactors, executors) = (config.keyspace_reactors, config.executors);
        assert!(
            keyspace_reactors > 0 && executors > 0,
            "validated by the config"
        );
        let mut deployment = Deployment::shared_everything(executors);
        deployment.spin_before_park_us = config.spin_before_park_us;
        deployment.spin_while_active_us = config.spin_while_active_us;
        let schema = Schema::new()
            .reactor_type(REACTOR_TYPE, &[&KV, &SITE_ROWS])
            .map_err(|e| e.to_string())?;
        let db = Database::new(schema, deployment).map_err(|e| e.to_string())?;
        let reactors = (0..keyspace_reactors)
            .map(|i| db.create_reactor(REACTOR_TYPE, &format!("keyspace-{i}")))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        Ok(Store {
            db,
            shared: Arc::new(Shared {
                reactors,
                next_stamp: AtomicU64::new(1),
                stats,
                sites: OnceLock::new(),
            }),
        })
    }

    pub(crate) fn stats(&self) -> &Arc<Stats> {
        &self.shared.stats
    }

    /// Makes this keyspace a site's: its procedures' bounded counters are
    /// then the site's rows. Once only.
    /// The keyspace's database (its executors serve connections).
    pub(crate) fn database(&self) -> &Database {
        &self.db
    }

    pub(crate) fn attach_sites(&self, sites: Arc<dyn SiteCounters>) -> Result<(), String> {
        self.shared
            .sites
            .set(sites)
            .map_err(|_| "this keyspace already serves a site".to_owned())
    }

    /// `key`'s site row, in a transaction of its own.
    pub(crate) async fn site_row(&self, key: &[u8]) -> Result<Option<SiteRow>, ReactorError> {
        let key = KvKey(key.to_vec());
        self.db
            .run(self.shared.reactor_of(&key.0), move |ctx| {
                let key = key.clone();
                async move { ctx.get(&SITE_ROWS, &key) }
            })
            .await
    }

    /// Writes `row` as `key`'s site row if the stored token is `expected`
    /// (`None`: no row yet), in one transaction; `false` if it was not.
    pub(crate) async fn site_row_cas(
        &self,
        key: &[u8],
        expected: Option<String>,
        row: SiteRow,
    ) -> Result<bool, ReactorError> {
        let key = KvKey(key.to_vec());
        self.db
            .run(self.shared.reactor_of(&key.0), move |ctx| {
                let (key, expected, row) = (key.clone(), expected.clone(), row.clone());
                async move {
                    let stored = ctx.get(&SITE_ROWS, &key)?.map(|r| r.token);
                    if stored != expected {
                        return Ok(false);
                    }
                    ctx.put(&SITE_ROWS, &key, &row)?;
                    Ok(true)
                }
            })
            .await
    }

    /// The keys with a site row.
    pub(crate) async fn site_row_keys(&self) -> Result<Vec<Vec<u8>>, ReactorError> {
        let mut keys = Vec::new();
        for &reactor in &self.shared.reactors {
            let rows = self
                .db
                .run(reactor, |ctx| async move {
                    ctx.scan(&SITE_ROWS, .., ScanDirection::Forward, usize::MAX)
                })
                .await?;
            keys.extend(rows.into_iter().map(|(key, _)| key.0));
        }
        Ok(keys)
    }

    /// Runs `ops` in order as one root transaction. With `watched`, first
    /// checks each key still has the stamp it had (`None`: absent); if one
    /// changed, applies nothing and returns `Ok(None)`.
    pub(crate) async fn run(
        &self,
        ops: Arc<Vec<Op>>,
        watched: Option<Arc<Watched>>,
    ) -> BatchOutcome {
        let root = watched
            .as_ref()
            .and_then(|w| w.first().map(|(k, _)| k.as_slice()))
            .or_else(|| ops.iter().find_map(Op::first_key))
            .map_or(self.shared.reactors[0], |k| self.shared.reactor_of(k));
        let shared = Arc::clone(&self.shared);
        let started = Instant::now();
        // Only with the planted fault: writes of calls, for a second transaction.
        let deferred = ops
            .iter()
            .any(|op| matches!(op, Op::FCall(call) if call.split))
            .then(|| Arc::new(Mutex::new(Writes::new())));
        let deferred_writes = deferred.clone();
        // With sites: the site rows calls changed, for the site's node.
        let site_changed = (self.shared.sites.get().is_some()
            && ops.iter().any(|op| matches!(op, Op::FCall(_))))
        .then(|| Arc::new(Mutex::new(Vec::new())));
        let changed = site_changed.clone();
        let outcome = self
            .db
            .run(root, move |ctx| {
                let tx = Tx {
                    ctx,
                    shared: Arc::clone(&shared),
                    deferred: deferred.clone(),
                    site_changed: site_changed.clone(),
                };
                let ops = Arc::clone(&ops);
                let watched = watched.clone();
                async move {
                    tx.shared.stats.attempts.fetch_add(1, Ordering::Relaxed);
                    if let Some(deferred) = &tx.deferred {
                        deferred.lock().expect("deferred writes").clear();
                    }
                    if let Some(changed) = &tx.site_changed {
                        changed.lock().expect("changed site rows").clear();
                    }
                    if let Some(watched) = watched {
                        for (key, stamp) in watched.iter() {
                            if tx.read(key).await?.map(|e| e.stamp) != *stamp {
                                return Ok(None);
                            }
                        }
                    }
                    let mut replies = Vec::with_capacity(ops.len());
                    for op in ops.iter() {
                        replies.push(tx.apply(op).await?);
                    }
                    Ok(Some(replies))
                }
            })
            .await;
        if let (Ok(Some(_)), Some(deferred)) = (&outcome, deferred_writes) {
            self.apply_deferred(deferred).await?;
        }
        if let (Ok(Some(_)), Some(changed), Some(sites)) =
            (&outcome, changed, self.shared.sites.get())
        {
            for key in changed.lock().expect("changed site rows").drain(..) {
                // A row exists only under a key the site accepted: UTF-8.
                if let Ok(key) = std::str::from_utf8(&key) {
                    sites.changed(key);
                }
            }
        }
        let stats = &self.shared.stats;
        match &outcome {
            Ok(_) => {
                stats.transactions.fetch_add(1, Ordering::Relaxed);
                stats.latency.record(started.elapsed());
            }
            Err(_) => {
                stats.failed_transactions.fetch_add(1, Ordering::Relaxed);
            }
        }
        outcome
    }

    /// The planted fault's second transaction: applies writes computed by
    /// calls that already committed.
    async fn apply_deferred(&self, deferred: Arc<Mutex<Writes>>) -> Result<(), ReactorError> {
        let writes = Arc::new(std::mem::take(
            &mut *deferred.lock().expect("deferred writes"),
        ));
        let Some((first, _)) = writes.first() else {
            return Ok(());
        };
        let root = self.shared.reactor_of(first);
        let shared = Arc::clone(&self.shared);
        self.db
            .run(root, move |ctx| {
                let tx = Tx {
                    ctx,
                    shared: Arc::clone(&shared),
                    deferred: None,
                    site_changed: None,
                };
                let writes = Arc::clone(&writes);
                async move {
                    for (key, value) in writes.iter() {
                        tx.write(key, value.clone()).await?;
                    }
                    Ok(())
                }
            })
            .await
    }
}

fn write_entry(ctx: &ReactorCtx, key: &KvKey, entry: Option<Entry>) -> Result<(), ReactorError> {
    match entry {
        Some(entry) => ctx.put(&KV, key, &entry),
        None => ctx.delete(&KV, key).map(|_| ()),
    }
}

/// One attempt of a transaction: the context of its root reactor.
pub(crate) struct Tx {
    ctx: ReactorCtx,
    shared: Arc<Shared>,
    /// Calls' writes held back for a second transaction: only under the
    /// planted fault of `Functions::plant_bug_split_transaction`.
    deferred: Option<Arc<Mutex<Writes>>>,
    /// With sites: the keys whose site rows this attempt's calls wrote.
    site_changed: Option<Arc<Mutex<Vec<Vec<u8>>>>>,
}

impl Tx {
    /// Reads `key`'s entry. A key in this container (every key, with the
    /// shared-everything deployment) is read synchronously through its
    /// reactor's context; one elsewhere through a call.
    // `&Vec` rather than `&[u8]`: the relation's key type wraps the vector.
    #[allow(clippy::ptr_arg)]
    pub(crate) async fn read(&self, key: &Vec<u8>) -> Result<Option<Entry>, ReactorError> {
        self.get_row(&KV, key).await
    }

    /// `key`'s row of `relation` (`kv` or `site_counters`), in the reactor
    /// the key belongs to.
    #[allow(clippy::ptr_arg)]
    async fn get_row<V>(
        &self,
        relation: &'static RelationDef<KvKey, V>,
        key: &Vec<u8>,
    ) -> Result<Option<V>, ReactorError>
    where
        V: DeserializeOwned + Send + 'static,
    {
        let target = self.shared.reactor_of(key);
        if let Some(local) = self.ctx.local(target)? {
            return local.get(relation, KvKey::from_ref(key));
        }
        let key = KvKey(key.clone());
        self.ctx
            .call(target, move |c| async move { c.get(relation, &key) })
            .await
    }

    /// With sites: the site's counters.
    pub(crate) fn sites(&self) -> Option<&Arc<dyn SiteCounters>> {
        self.shared.sites.get()
    }

    /// `key`'s site row (with sites).
    #[allow(clippy::ptr_arg)]
    pub(crate) async fn read_site_row(
        &self,
        key: &Vec<u8>,
    ) -> Result<Option<SiteRow>, ReactorError> {
        self.get_row(&SITE_ROWS, key).await
    }

    /// Writes `key`'s site row, and notes it for the site's node.
    #[allow(clippy::ptr_arg)]
    async fn write_site_row(&self, key: &Vec<u8>, row: SiteRow) -> Result<(), ReactorError> {
        if let Some(changed) = &self.site_changed {
            changed.lock().expect("changed site rows").push(key.clone());
        }
        let target = self.shared.reactor_of(key);
        if let Some(local) = self.ctx.local(target)? {
            return local.put(&SITE_ROWS, KvKey::from_ref(key), &row);
        }
        let key = KvKey(key.clone());
        self.ctx
            .call(
                target,
                move |c| async move { c.put(&SITE_ROWS, &key, &row) },
            )
            .await
    }

    /// Writes `value` (a fresh stamp), or deletes the key.
    #[allow(clippy::ptr_arg)]
    pub(crate) async fn write(
        &self,
        key: &Vec<u8>,
        value: Option<Value>,
    ) -> Result<(), ReactorError> {
        let target = self.shared.reactor_of(key);
        let entry = value.map(|value| Entry {
            stamp: self.shared.next_stamp.fetch_add(1, Ordering::Relaxed),
            value,
        });
        if let Some(local) = self.ctx.local(target)? {
            return write_entry(&local, KvKey::from_ref(key), entry);
        }
        let key = KvKey(key.clone());
        self.ctx
            .call(target, move |c| async move { write_entry(&c, &key, entry) })
            .await
    }

    /// Reads `key`'s entry and writes the value `modify` returns (`None`: no
    /// write) in one access to the row when its reactor is local.
    #[allow(clippy::ptr_arg)]
    async fn modify(
        &self,
        key: &Vec<u8>,
        modify: impl FnOnce(Option<Entry>) -> (Option<Value>, Frame),
    ) -> Result<Frame, ReactorError> {
        let target = self.shared.reactor_of(key);
        if let Some(local) = self.ctx.local(target)? {
            let next_stamp = &self.shared.next_stamp;
            return local.modify(&KV, KvKey::from_ref(key), |old| {
                let (value, reply) = modify(old);
                let entry = value.map(|value| Entry {
                    stamp: next_stamp.fetch_add(1, Ordering::Relaxed),
                    value,
                });
                (entry, reply)
            });
        }
        let (value, reply) = modify(self.read(key).await?);
        if value.is_some() {
            self.write(key, value).await?;
        }
        Ok(reply)
    }

    async fn apply(&self, op: &Op) -> Result<Frame, ReactorError> {
        Ok(match op {
            Op::Reply(error) => error.clone(),
            Op::BcFence(_) | Op::BcAdopt { .. } => Frame::error(NOT_A_SITE),
            Op::FCall(call) => {
                let (reply, writes, site_writes) = run_call(self, call).await?;
                for (key, row) in site_writes {
                    self.write_site_row(&key, row).await?;
                }
                match &self.deferred {
                    Some(deferred) if call.split => {
                        deferred.lock().expect("deferred writes").extend(writes);
                    }
                    _ => {
                        for (key, value) in writes {
                            self.write(&key, value).await?;
                        }
                    }
                }
                reply
            }
            Op::Get(key) => match self.read(key).await?.map(|e| e.value) {
                None => Frame::Null,
                Some(Value::Str(s)) => Frame::Bulk(s),
                Some(Value::Int(n)) => Frame::Bulk(n.to_string().into_bytes()),
                Some(_) => Frame::error(WRONGTYPE),
            },
            Op::Set {
                key,
                value,
                cond: SetCond::Always,
                get: false,
            } => {
                // Nothing depends on the old value: a blind write (the
                // commit still orders it against every other writer).
                self.write(key, Some(Value::Str(value.clone()))).await?;
                Frame::ok()
            }
            Op::Set {
                key,
                value,
                cond,
                get,
            } => {
                let old = self.read(key).await?.map(|e| e.value);
                let old_reply = match &old {
                    None => Frame::Null,
                    Some(Value::Str(s)) => Frame::Bulk(s.clone()),
                    Some(Value::Int(n)) => Frame::Bulk(n.to_string().into_bytes()),
                    Some(_) if *get => return Ok(Frame::error(WRONGTYPE)),
                    Some(_) => Frame::Null,
                };
                let allowed = match cond {
                    SetCond::Always => true,
                    SetCond::IfAbsent => old.is_none(),
                    SetCond::IfPresent => old.is_some(),
                };
                if allowed {
                    self.write(key, Some(Value::Str(value.clone()))).await?;
                }
                match (get, allowed) {
                    (true, _) => old_reply,
                    (false, true) => Frame::ok(),
                    (false, false) => Frame::Null,
                }
            }
            Op::Del(keys) => {
                let mut deleted = 0;
                for key in keys {
                    if self.read(key).await?.is_some() {
                        self.write(key, None).await?;
                        deleted += 1;
                    }
                }
                Frame::Integer(deleted)
            }
            Op::Exists(keys) => {
                let mut found = 0;
                for key in keys {
                    if self.read(key).await?.is_some() {
                        found += 1;
                    }
                }
                Frame::Integer(found)
            }
            Op::IncrBy(key, by) => {
                self.modify(key, |old| {
                    let current = match old.map(|e| e.value) {
                        None => 0,
                        Some(Value::Int(n)) => n,
                        Some(Value::Str(s)) => match parse_i64(&s) {
                            Some(n) => n,
                            None => return (None, Frame::error(NOT_INTEGER)),
                        },
                        Some(_) => return (None, Frame::error(WRONGTYPE)),
                    };
                    match current.checked_add(*by) {
                        Some(next) => (Some(Value::Int(next)), Frame::Integer(next)),
                        None => (None, Frame::error(OVERFLOW)),
                    }
                })
                .await?
            }
            Op::MGet(keys) => {
                let mut values = Vec::with_capacity(keys.len());
                for key in keys {
                    values.push(match self.read(key).await?.map(|e| e.value) {
                        Some(Value::Str(s)) => Frame::Bulk(s),
                        Some(Value::Int(n)) => Frame::Bulk(n.to_string().into_bytes()),
                        _ => Frame::Null,
                    });
                }
                Frame::Array(values)
            }
            Op::MSet(pairs) => {
                for (key, value) in pairs {
                    self.write(key, Some(Value::Str(value.clone()))).await?;
                }
                Frame::ok()
            }
            Op::Push { key, left, values } => {
                let mut list = match self.read(key).await?.map(|e| e.value) {
                    None => VecDeque::new(),
                    Some(Value::List(list)) => list,
                    Some(_) => return Ok(Frame::error(WRONGTYPE)),
                };
                for value in values {
                    if *left {
                        list.push_front(value.clone());
                    } else {
                        list.push_back(value.clone());
                    }
                }
                let len = list.len();
                self.write(key, Some(Value::List(list))).await?;
                Frame::Integer(len as i64)
            }
            Op::LRange { key, start, stop } => match self.read(key).await?.map(|e| e.value) {
                None => Frame::Array(Vec::new()),
                Some(Value::List(list)) => Frame::Array(
                    list_range(list.len(), *start, *stop)
                        .map(|i| Frame::Bulk(list[i].clone()))
                        .collect(),
                ),
                Some(_) => Frame::error(WRONGTYPE),
            },
            Op::LLen(key) => match self.read(key).await?.map(|e| e.value) {
                None => Frame::Integer(0),
                Some(Value::List(list)) => Frame::Integer(list.len() as i64),
                Some(_) => Frame::error(WRONGTYPE),
            },
            Op::HGet(key, field) => match self.read(key).await?.map(|e| e.value) {
                None => Frame::Null,
                Some(Value::Hash(fields)) => fields
                    .into_iter()
                    .find(|(f, _)| f == field)
                    .map_or(Frame::Null, |(_, v)| Frame::Bulk(v)),
                Some(_) => Frame::error(WRONGTYPE),
            },
            Op::HSet(key, pairs) => {
                let mut fields = match self.read(key).await?.map(|e| e.value) {
                    None => Vec::new(),
                    Some(Value::Hash(fields)) => fields,
                    Some(_) => return Ok(Frame::error(WRONGTYPE)),
                };
                let mut added = 0;
                for (field, value) in pairs {
                    match fields.iter_mut().find(|(f, _)| f == field) {
                        Some((_, v)) => v.clone_from(value),
                        None => {
                            fields.push((field.clone(), value.clone()));
                            added += 1;
                        }
                    }
                }
                self.write(key, Some(Value::Hash(fields))).await?;
                Frame::Integer(added)
            }
            Op::HGetAll(key) => match self.read(key).await?.map(|e| e.value) {
                None => Frame::Map(Vec::new()),
                Some(Value::Hash(fields)) => Frame::Map(
                    fields
                        .into_iter()
                        .map(|(f, v)| (Frame::Bulk(f), Frame::Bulk(v)))
                        .collect(),
                ),
                Some(_) => Frame::error(WRONGTYPE),
            },
            Op::HDel(key, to_delete) => {
                let mut fields = match self.read(key).await?.map(|e| e.value) {
                    None => return Ok(Frame::Integer(0)),
                    Some(Value::Hash(fields)) => fields,
                    Some(_) => return Ok(Frame::error(WRONGTYPE)),
                };
                let before = fields.len();
                fields.retain(|(f, _)| !to_delete.contains(f));
                let removed = before - fields.len();
                if removed > 0 {
                    let value = (!fields.is_empty()).then_some(Value::Hash(fields));
                    self.write(key, value).await?;
                }
                Frame::Integer(removed as i64)
            }
            Op::BcCreate {
                key,
                bound,
                k,
                initial,
            } => {
                if self.read(key).await?.is_some() {
                    return Ok(Frame::error("ERR key already exists"));
                }
                let me = ReplicaId::from_index(0).expect("replica 0 exists");
                let counter =
                    match BoundedCounter::with_initial_value(*bound, *k, *initial, me, me, 1) {
                        Ok(counter) => counter,
                        Err(e) => return Ok(Frame::error(format!("ERR bounded counter: {e}"))),
                    };
                self.write(key, Some(Value::Counter(encode_counter(&counter))))
                    .await?;
                Frame::ok()
            }
            Op::BcAdd { key, up, delta, .. } => {
                let mut counter = match self.read(key).await?.map(|e| e.value) {
                    None => return Ok(Frame::error("ERR no such bounded counter")),
                    Some(Value::Counter(bytes)) => match decode_counter(&bytes) {
                        Ok(counter) => counter,
                        Err(e) => return Ok(e),
                    },
                    Some(_) => return Ok(Frame::error(WRONGTYPE)),
                };
                let changed = if *up {
                    counter.increment(*delta).map_err(|e| e.to_string())
                } else {
                    counter.decrement(*delta).map_err(|e| e.to_string())
                };
                if let Err(e) = changed {
                    return Ok(Frame::error(format!(
                        "BOUND the counter's bound forbids it: {e}"
                    )));
                }
                let value = match counter.value() {
                    Ok(value) => value,
                    Err(e) => return Ok(Frame::error(format!("ERR bounded counter: {e}"))),
                };
                self.write(key, Some(Value::Counter(encode_counter(&counter))))
                    .await?;
                Frame::Integer(value)
            }
            Op::BcGet(key) => match self.read(key).await?.map(|e| e.value) {
                None => Frame::Null,
                Some(Value::Counter(bytes)) => match decode_counter(&bytes).map(|c| c.value()) {
                    Ok(Ok(value)) => Frame::Integer(value),
                    Ok(Err(e)) => Frame::error(format!("ERR bounded counter: {e}")),
                    Err(e) => e,
                },
                Some(_) => Frame::error(WRONGTYPE),
            },
            Op::Stamps(keys) => {
                let mut stamps = Vec::with_capacity(keys.len());
                for key in keys {
                    stamps.push(match self.read(key).await? {
                        Some(entry) => Frame::Integer(entry.stamp as i64),
                        None => Frame::Null,
                    });
                }
                Frame::Array(stamps)
            }
        })
    }
}

/// Redis's LRANGE indices (negative from the end, clamped) as a range.
fn list_range(len: usize, start: i64, stop: i64) -> std::ops::Range<usize> {
    let len = len as i64;
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        len + stop
    } else {
        stop.min(len - 1)
    };
    if start > stop || start >= len {
        return 0..0;
    }
    start as usize..stop as usize + 1
}

/// Redis's strict integer syntax: an optional `-`, digits, no leading zero,
/// no spaces or `+`, within `i64`.
pub(crate) fn parse_i64(bytes: &[u8]) -> Option<i64> {
    let (negative, digits) = match bytes.strip_prefix(b"-") {
        Some(digits) => (true, digits),
        None => (false, bytes),
    };
    // 19 digits hold every i64 and cannot overflow a u64.
    if digits.is_empty()
        || digits.len() > 19
        || (digits[0] == b'0' && (digits.len() > 1 || negative))
    {
        return None;
    }
    let mut n: u64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u64::from(b - b'0');
    }
    if negative {
        (n <= 1 << 63).then(|| (n as i64).wrapping_neg())
    } else {
        i64::try_from(n).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_follow_redis() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"01",
            b"-0",
            b"+1",
            b" 1",
            b"1 ",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"99999999999999999999",
            b"1.5",
        ] {
            assert_eq!(parse_i64(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn lrange_indices() {
        assert_eq!(list_range(5, 0, -1), 0..5);
        assert_eq!(list_range(5, -2, -1), 3..5);
        assert_eq!(list_range(5, 1, 100), 1..5);
        assert_eq!(list_range(5, 3, 1), 0..0);
        assert_eq!(list_range(5, 7, 9), 0..0);
        assert_eq!(list_range(0, 0, -1), 0..0);
        assert_eq!(list_range(5, -100, 0), 0..1);
    }

    #[test]
    fn string_values_round_trip() {
        // JSON writes bytes as a sequence: the visitor reads both forms.
        for bytes in [Vec::new(), b"hello".to_vec(), vec![0u8; 300]] {
            let entry = Entry {
                stamp: 7,
                value: Value::Str(bytes.clone()),
            };
            let json = serde_json::to_vec(&entry).unwrap();
            match serde_json::from_slice::<Entry>(&json).unwrap().value {
                Value::Str(back) => assert_eq!(back, bytes),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn kv_keys_are_their_bytes() {
        for key in [
            Vec::new(),
            b"user:1".to_vec(),
            vec![0u8, 255, 0],
            vec![7u8; 300],
        ] {
            let mut encoded = Vec::new();
            KvKey(key.clone()).encode_into(&mut encoded);
            assert_eq!(encoded, key);
            let mut input = encoded.as_slice();
            assert_eq!(KvKey::decode_from(&mut input).unwrap(), KvKey(key));
            assert!(input.is_empty());
        }
    }

    #[test]
    fn keys_spread_over_reactors() {
        let mut counts = [0usize; 8];
        for i in 0..8000 {
            counts[keyspace_index(format!("key:{i}").as_bytes(), 8)] += 1;
        }
        assert!(counts.iter().all(|&c| c > 800), "{counts:?}");
    }
}

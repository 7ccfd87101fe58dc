//! The keyspace on reactors, and the data commands run as root transactions.
//!
//! **Keys to reactors.** The keyspace is split over `K` reactors of type
//! `keyspace`, named `keyspace-0` .. `keyspace-{K-1}`; a key belongs to
//! reactor `fnv1a64(key) mod K`. A batch of commands is one root transaction
//! that starts on the reactor of its first key and reaches the reactor of
//! every other key it touches (synchronously when it lives in the same
//! container, through a call otherwise), so a multi-key command, a pipeline
//! batch or a MULTI/EXEC block is serializable as a whole whichever reactors
//! its keys live on.
//!
//! **A key's rows**, all in its reactor:
//! - `kv` (hash-indexed): the key's bytes ([`KvKey`]) to an [`Entry`]: a write
//!   stamp, a deadline (absolute Unix ms, 0: none; see [`crate::expiry`]) and
//!   the value;
//! - `keys` (ordered): the key under its scan position
//!   ([`crate::keyspace::IndexKey`]), what SCAN, KEYS, RANDOMKEY and FLUSHALL
//!   walk;
//! - `expiry` (ordered by deadline), only with a deadline: what the
//!   background sweep reclaims.
//!
//! Every write goes through [`Tx::modify`], which keeps the three in step in
//! the same transaction; `keys` and `expiry` change only when a key appears,
//! disappears or changes deadline, so overwriting a key that has no time to
//! live touches its `kv` row alone (one index search, with the read of the
//! old entry). An expired entry is absent to every command (it is filtered
//! where the row is read, against the transaction's one clock reading).
//!
//! **Counts.** DBSIZE and INFO keyspace come from counters of keys and of
//! keys with a deadline, which each committed transaction moves by what it
//! did ([`RowChange`], returned with its replies, so an attempt that
//! aborted counts nothing).

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use roost_bcounter::{Bound, BoundedCounter, FullRights, ReplicaId};
use roost_reactor::{
    Database, Deployment, EngineConfig, KeyCodec, KeyDecodeError, Location, Placement, ReactorCtx,
    ReactorError, ReactorId, ReactorKey, RelationDef, ScanDirection, Schema,
};
use serde::de::{self, DeserializeOwned, Deserializer, SeqAccess, Visitor};
use serde::ser::{SerializeTuple, Serializer};
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::expiry::{self, Clock, ExpireOp, ExpiryKey, SetTtl};
use crate::functions::{run_call, FCall, Writes};
use crate::hashes::{self, HashOp};
use crate::keyspace::{self, IndexKey, KeyOp};
use crate::lists::{self, ListOp};
use crate::members::{
    self, Fail, KeyRows, Members, HASH_FIELDS, SET_MEMBERS, ZSET_MEMBERS, ZSET_SCORES,
};
use crate::protocol::Frame;
use crate::sets::{self, SetOp};
use crate::sites::SiteCounters;
use crate::sort::{self, SortOp};
use crate::stats::Stats;
use crate::strings::{self, StrOp};
use crate::zsets::{self, ZSetOp};

pub(crate) const REACTOR_TYPE: &str = "keyspace";
/// Every key's entry. Hash-indexed: point access only (the ordered walks go
/// over `keys`).
pub(crate) static KV: RelationDef<KvKey, Entry> =
    RelationDef::new(REACTOR_TYPE, "kv").point_access_only();

/// Every key under its scan position, in position order (SCAN's cursor).
pub(crate) static KEY_INDEX: RelationDef<IndexKey, ()> = RelationDef::new(REACTOR_TYPE, "keys");

/// `(deadline, key)` of every key with a deadline, in deadline order.
pub(crate) static EXPIRY_INDEX: RelationDef<ExpiryKey, ()> =
    RelationDef::new(REACTOR_TYPE, "expiry");

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
    pub(crate) fn from_ref(key: &Vec<u8>) -> &KvKey {
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
/// reactor's id and the index prefixes included).
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
///
/// Stored as a tuple whose first element is [`ENTRY_FORMAT`]: a reader
/// refuses a format it does not know rather than misreading it.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// Unique per write (from a server-wide counter): WATCH compares stamps,
    /// so a key changed and changed back still aborts the EXEC.
    pub(crate) stamp: u64,
    /// When the key stops existing: Unix time in ms (gone once the clock is
    /// past it); 0: never.
    pub(crate) deadline: i64,
    pub(crate) value: Value,
}

/// The version of [`Entry`]'s encoding. 1: stamp, deadline, value (before
/// deadlines, entries had no version byte; nothing stored them durably);
/// 2: a hash's value is its field count, its fields rows of their own (in
/// format 1 it held every field: a node of either build refuses the
/// other's entries rather than misread a hash).
pub(crate) const ENTRY_FORMAT: u8 = 2;

impl Serialize for Entry {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut tuple = s.serialize_tuple(4)?;
        tuple.serialize_element(&ENTRY_FORMAT)?;
        tuple.serialize_element(&self.stamp)?;
        tuple.serialize_element(&self.deadline)?;
        tuple.serialize_element(&self.value)?;
        tuple.end()
    }
}

impl<'de> Deserialize<'de> for Entry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct EntryVisitor;

        impl<'de> Visitor<'de> for EntryVisitor {
            type Value = Entry;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a keyspace entry")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Entry, A::Error> {
                let format: u8 = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(0, &self))?;
                if format != ENTRY_FORMAT {
                    return Err(de::Error::custom(format!(
                        "keyspace entry format {format} is not known (this build reads format {ENTRY_FORMAT})"
                    )));
                }
                let stamp = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(1, &self))?;
                let deadline = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(2, &self))?;
                if HEADER_ONLY.with(Cell::get) {
                    // The value's variant (and a collection's count, a few
                    // bytes); the rest is left unread (postcard does not
                    // ask for the whole input to be consumed).
                    let head: ValueHead = seq
                        .next_element()?
                        .ok_or_else(|| de::Error::invalid_length(3, &self))?;
                    return Ok(Entry {
                        stamp,
                        deadline,
                        value: head.0,
                    });
                }
                let value = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(3, &self))?;
                Ok(Entry {
                    stamp,
                    deadline,
                    value,
                })
            }
        }

        d.deserialize_tuple(4, EntryVisitor)
    }
}

/// A stored [`Value`] as a header-only read gives it: a hash's, set's or
/// sorted set's whole (its count), anything else [`Value::Unread`].
struct ValueHead(Value);

impl<'de> Deserialize<'de> for ValueHead {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct HeadVisitor;

        impl<'de> Visitor<'de> for HeadVisitor {
            type Value = ValueHead;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a value's variant")
            }

            fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<ValueHead, A::Error> {
                use serde::de::VariantAccess;
                // The variants' indexes in `Value`'s declaration order (a
                // test checks them against the derived encoding); other
                // variants' contents are never read.
                let (index, contents): (u32, _) = data.variant()?;
                Ok(ValueHead(match index {
                    3 => Value::Hash(contents.newtype_variant()?),
                    5 => Value::Set(contents.newtype_variant()?),
                    6 => Value::ZSet(contents.newtype_variant()?),
                    _ => Value::Unread,
                }))
            }
        }

        d.deserialize_enum("Value", VALUE_VARIANTS, HeadVisitor)
    }
}

const VALUE_VARIANTS: &[&str] = &["Str", "Int", "List", "Hash", "Counter", "Set", "ZSet"];

thread_local! {
    /// Set while entries are decoded for their header alone ([`headers_only`]).
    static HEADER_ONLY: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with every entry it decodes (on this thread) read without its
/// value ([`Value::Unread`]; a hash's, set's or sorted set's, a count,
/// whole): for
/// what needs only whether a key exists, its deadline and stamp and whether
/// it has member rows, and not the copy of a value of up to 8 MiB.
pub(crate) fn headers_only<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            HEADER_ONLY.with(|h| h.set(self.0));
        }
    }
    let _restore = Restore(HEADER_ONLY.with(|h| h.replace(true)));
    f()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum Value {
    Str(#[serde(with = "raw_bytes")] Vec<u8>),
    /// A string that INCR/DECR/INCRBY left: kept as the integer it holds
    /// (as Redis's int encoding), so the next one neither parses nor formats
    /// it. Every command reads it as its decimal string.
    Int(i64),
    List(VecDeque<Vec<u8>>),
    /// A hash of this many fields, each a row of `hash_fields` (see
    /// [`crate::members`]).
    Hash(u64),
    /// A bounded counter in roost-bcounter's versioned wire encoding (JSON):
    /// that encoding reads optional fields, which postcard's non-self-describing
    /// format cannot carry, so it is stored as bytes inside the entry.
    Counter(Vec<u8>),
    /// A set of this many members, each a row of `set_members` (see
    /// [`crate::members`]).
    Set(u64),
    /// A sorted set of this many members, each a row of `zset_members` and
    /// one of `zset_scores`.
    ZSet(u64),
    /// A value not read ([`headers_only`]; a hash's, set's or sorted
    /// set's is read whole): never stored (serializing it fails), never answered.
    /// Last, so that skipping it leaves the other variants' indexes.
    #[serde(skip)]
    Unread,
}

impl Value {
    /// The string this value is (an integer as its decimal digits); `None`
    /// for other types.
    pub(crate) fn string_bytes(&self) -> Option<Cow<'_, [u8]>> {
        match self {
            Value::Str(s) => Some(Cow::Borrowed(s)),
            Value::Int(n) => Some(Cow::Owned(n.to_string().into_bytes())),
            _ => None,
        }
    }

    /// The string this value is, taken (no copy of a `Str`).
    pub(crate) fn into_string(self) -> Option<Vec<u8>> {
        match self {
            Value::Str(s) => Some(s),
            Value::Int(n) => Some(n.to_string().into_bytes()),
            _ => None,
        }
    }

    /// TYPE's answer.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) | Value::Int(_) => "string",
            Value::List(_) => "list",
            Value::Hash(_) => "hash",
            Value::Counter(_) => "bcounter",
            Value::Set(_) => "set",
            Value::ZSet(_) => "zset",
            Value::Unread => "unread",
        }
    }

    /// Which member rows this value has beside its entry.
    pub(crate) fn members(&self) -> Members {
        match self {
            Value::Hash(_) => Members::Hash,
            Value::Set(_) => Members::Set,
            Value::ZSet(_) => Members::ZSet,
            _ => Members::None,
        }
    }
}

/// A byte string as serde bytes rather than a sequence of `u8`: the same
/// postcard encoding (a length, then the bytes), copied at once instead of
/// byte by byte.
pub(crate) mod raw_bytes {
    use serde::de::{Deserializer, SeqAccess, Visitor};
    use serde::Serializer;

    pub(crate) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(bytes)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
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
    /// SET (and GETSET, SETEX, PSETEX). The value is a boxed slice: it
    /// keeps `Op` at 64 bytes.
    Set {
        key: Vec<u8>,
        value: Box<[u8]>,
        cond: SetCond,
        get: bool,
        ttl: SetTtl,
    },
    /// DEL and UNLINK.
    Del(Vec<Vec<u8>>),
    /// EXISTS and TOUCH.
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
    /// Commands over keys and the keyspace (`keyspace`).
    Key(KeyOp),
    /// Commands about time to live (`expiry`).
    Expire(ExpireOp),
    /// The other string commands (`strings`).
    Str(StrOp),
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
    /// The hash commands (`hashes`); boxed, to keep `Op` small.
    Hashes(Box<HashOp>),
    /// The set commands (`sets`).
    Sets(Box<SetOp>),
    /// The sorted-set commands (`zsets`).
    ZSets(Box<ZSetOp>),
    /// The list commands beside the four above (`lists`).
    Lists(Box<ListOp>),
    /// SORT and SORT_RO (`sort`).
    Sort(Box<SortOp>),
    /// A registered function's call (FCALL, FCALL_RO).
    FCall(Arc<FCall>),
    /// A Lua script's run (EVAL and its kin, FCALL of a Lua function).
    Script(Arc<crate::scripting::ScriptCall>),
    /// A reply known before the transaction runs (a rejected argument's error, or a
    /// connection command queued in MULTI), given at its place.
    Reply(Frame),
}

impl Op {
    /// Whether the command may push to a list (and so feed a blocked
    /// client): the list commands, keyspace commands (RENAME, COPY,
    /// RESTORE), SORT's STORE, functions and scripts.
    pub(crate) fn may_push(&self) -> bool {
        matches!(
            self,
            Op::Push { .. }
                | Op::Lists(_)
                | Op::Key(_)
                | Op::Sort(_)
                | Op::FCall(_)
                | Op::Script(_)
        )
    }

    /// The first key the command touches (where its transaction starts).
    fn first_key(&self) -> Option<&[u8]> {
        match self {
            Op::Get(k)
            | Op::Set { key: k, .. }
            | Op::IncrBy(k, _)
            | Op::Push { key: k, .. }
            | Op::LRange { key: k, .. }
            | Op::LLen(k)
            | Op::BcCreate { key: k, .. }
            | Op::BcAdd { key: k, .. }
            | Op::BcGet(k)
            | Op::BcAdopt { key: k, .. } => Some(k),
            Op::Del(keys) | Op::Exists(keys) | Op::MGet(keys) | Op::Stamps(keys) => {
                keys.first().map(Vec::as_slice)
            }
            Op::MSet(pairs) => pairs.first().map(|(k, _)| k.as_slice()),
            Op::Key(op) => op.first_key(),
            Op::Expire(op) => op.first_key(),
            Op::Str(op) => op.first_key(),
            Op::Hashes(op) => op.first_key(),
            Op::Sets(op) => op.first_key(),
            Op::ZSets(op) => op.first_key(),
            Op::Lists(op) => op.first_key(),
            Op::Sort(op) => op.first_key(),
            Op::FCall(call) => call.first_key(),
            Op::Script(call) => call.first_key(),
            Op::Reply(_) | Op::BcFence(_) => None,
        }
    }

    /// Bytes of keys and values the command carries (bounds a batch).
    /// A blocking command's timeout (ms; 0: none): BLPOP and its kin,
    /// BZPOPMIN/BZPOPMAX/BZMPOP. `None` for every other op.
    /// The form a blocked client's command is retried in (keys of another
    /// type are passed over, as Redis serves only a key of the right type).
    pub(crate) fn waiting_form(mut self) -> Op {
        match &mut self {
            Op::Lists(op) => op.waiting_form(),
            Op::ZSets(op) => op.waiting_form(),
            _ => {}
        }
        self
    }

    pub(crate) fn blocking_timeout_ms(&self) -> Option<u64> {
        match self {
            Op::Lists(op) => op.timeout_ms(),
            Op::ZSets(op) => op.timeout_ms(),
            _ => None,
        }
    }

    pub(crate) fn payload_bytes(&self) -> usize {
        match self {
            Op::Set { key, value, .. } => key.len() + value.len(),
            Op::MSet(pairs) => pairs.iter().map(|(k, v)| k.len() + v.len()).sum(),
            Op::Push { values, .. } => values.iter().map(Vec::len).sum(),
            Op::Str(op) => op.payload_bytes(),
            Op::Hashes(op) => op.payload_bytes(),
            Op::Sets(op) => op.payload_bytes(),
            Op::ZSets(op) => op.payload_bytes(),
            Op::Lists(op) => op.payload_bytes(),
            Op::Sort(op) => op.payload_bytes(),
            Op::FCall(call) => call.payload_bytes(),
            Op::Script(call) => call.payload_bytes(),
            _ => 64,
        }
    }
}

/// `fnv1a64(key) mod k`: which keyspace reactor holds `key`. As in Redis
/// Cluster, a key with a hash tag (the bytes between its first `{` and the
/// first `}` after it, if any) is placed by the tag alone, so that an
/// application keeps the keys it uses together (`acct:{17}:sav`,
/// `acct:{17}:chk`) in one reactor, which moves as one.
pub fn keyspace_index(key: &[u8], k: usize) -> usize {
    (fnv1a64(hash_tag(key)) % k as u64) as usize
}

/// The part of `key` that places it: its hash tag, else the whole key.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    match key[open + 1..].iter().position(|&b| b == b'}') {
        Some(len) if len > 0 => &key[open + 1..open + 1 + len],
        _ => key,
    }
}

fn fnv1a64(key: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The largest [`Config::stamp_origin`](crate::Config::stamp_origin).
pub const MAX_STAMP_ORIGIN: u16 = (1 << STAMP_ORIGIN_BITS) - 1;
const STAMP_ORIGIN_BITS: u32 = 10;

/// The stamps of writes (WATCH compares them): unique across the cluster
/// and across restarts. A stamp is a hybrid clock (Unix microseconds, or
/// one past the last stamp's if that is later) above the node's origin
/// tag: two nodes never share a tag, and a restarted node starts above
/// every stamp it gave before (its clock moved on while it was down). A
/// node-local counter from 1 is not enough once keys move between nodes: a
/// write elsewhere could give a watched key the very stamp it had, and the
/// EXEC would miss the change.
pub(crate) struct Stamps {
    origin: u64,
    /// The clock part of the last stamp.
    last: AtomicU64,
}

impl Stamps {
    pub(crate) fn new(origin: u16) -> Stamps {
        assert!(
            origin <= MAX_STAMP_ORIGIN,
            "stamp origin {origin} too large"
        );
        Stamps {
            origin: u64::from(origin),
            last: AtomicU64::new(0),
        }
    }

    pub(crate) fn next(&self) -> u64 {
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let mut last = self.last.load(Ordering::Relaxed);
        let clock = loop {
            let clock = now_us.max(last + 1);
            match self
                .last
                .compare_exchange_weak(last, clock, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => break clock,
                Err(seen) => last = seen,
            }
        };
        // Microseconds since 1970 need 51 bits until the year 2041; with
        // the tag the stamp stays a positive i64 (WATCH's replies) for
        // centuries.
        debug_assert!(clock < 1 << (63 - STAMP_ORIGIN_BITS));
        let stamp = (clock << STAMP_ORIGIN_BITS) | self.origin;
        debug_assert_eq!(stamp & u64::from(MAX_STAMP_ORIGIN), self.origin);
        stamp
    }
}

/// The database, its keyspace reactors and the server's counters.
pub(crate) struct Store {
    db: Database,
    shared: Arc<Shared>,
}

/// What a transaction's procedure needs (shared with every attempt).
pub(crate) struct Shared {
    pub(crate) reactors: Vec<ReactorId>,
    stamps: Stamps,
    pub(crate) stats: Arc<Stats>,
    pub(crate) clock: Clock,
    /// With sites: the site's counters (procedures' bounded counters are
    /// then site rows, and the site's node is told what they changed).
    sites: OnceLock<Arc<dyn SiteCounters>>,
    /// The expiry sweep's period (ms) and the most keys one sweep deletes.
    sweep_interval_ms: AtomicU64,
    sweep_batch: AtomicUsize,
}

/// The cluster-wide key of keyspace reactor `index` (the same on every node).
pub fn keyspace_reactor(index: usize) -> Result<ReactorKey, roost_reactor::DirectoryError> {
    ReactorKey::new(REACTOR_TYPE, &format!("keyspace-{index}"))
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

/// What an attempt's procedure returns: its replies (as [`BatchOutcome`])
/// and what its writes did to the keyspace's counts.
type Attempt = (Option<Vec<Frame>>, RowChange);

impl Store {
    /// The keyspace's database: one node's own (`placement: None`), or a
    /// cluster node's, whose placement says which keyspace reactors are
    /// here; the others get handles that acquire them when used.
    pub(crate) fn new(
        config: &Config,
        stats: Arc<Stats>,
        placement: Option<Arc<dyn Placement>>,
    ) -> Result<Self, String> {
        let (keyspace_reactors, executors) = (config.keyspace_reactors, config.executors);
        assert!(
            keyspace_reactors > 0 && executors > 0,
            "validated by the config"
        );
        let mut deployment = Deployment::shared_everything(executors);
        deployment.spin_before_park_us = config.spin_before_park_us;
        deployment.spin_while_active_us = config.spin_while_active_us;
        let schema = Schema::new()
            .reactor_type(
                REACTOR_TYPE,
                &[
                    &KV,
                    &KEY_INDEX,
                    &EXPIRY_INDEX,
                    &SITE_ROWS,
                    &SET_MEMBERS,
                    &ZSET_MEMBERS,
                    &ZSET_SCORES,
                    &HASH_FIELDS,
                ],
            )
            .map_err(|e| e.to_string())?;
        let db = match &placement {
            None => Database::new(schema, deployment),
            Some(placement) => Database::with_placement(
                schema,
                deployment,
                EngineConfig::default(),
                Arc::clone(placement),
            ),
        }
        .map_err(|e| e.to_string())?;
        let reactors = (0..keyspace_reactors)
            .map(|i| {
                let key = keyspace_reactor(i).map_err(|e| e.to_string())?;
                let remote = placement.as_ref().map(|p| p.locate(&key)) == Some(Location::Remote);
                if remote {
                    db.reactor_by_key(&key)
                } else {
                    db.create_reactor(key.reactor_type(), key.name())
                }
                .map_err(|e| e.to_string())
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Store {
            db,
            shared: Arc::new(Shared {
                reactors,
                stamps: Stamps::new(config.stamp_origin),
                stats,
                clock: Clock::default(),
                sites: OnceLock::new(),
                sweep_interval_ms: AtomicU64::new(config.expire_sweep_interval_ms),
                sweep_batch: AtomicUsize::new(config.expire_sweep_batch),
            }),
        })
    }

    /// A store with its expiry sweep running (until the store is dropped).
    pub(crate) fn start(
        config: &Config,
        stats: Arc<Stats>,
        placement: Option<Arc<dyn Placement>>,
    ) -> Result<Arc<Self>, String> {
        let store = Arc::new(Store::new(config, stats, placement)?);
        expiry::start_sweeper(&store).map_err(|e| format!("cannot start the expiry sweep: {e}"))?;
        Ok(store)
    }

    pub(crate) fn stats(&self) -> &Arc<Stats> {
        &self.shared.stats
    }

    /// The keyspace's database (its executors serve connections).
    pub(crate) fn database(&self) -> &Database {
        &self.db
    }

    /// How many keyspace reactors there are.
    pub(crate) fn reactor_count(&self) -> usize {
        self.shared.reactors.len()
    }

    pub(crate) fn sweep_interval(&self) -> Duration {
        Duration::from_millis(self.shared.sweep_interval_ms.load(Ordering::Relaxed).max(1))
    }

    pub(crate) fn set_sweep_interval(&self, interval: Duration) {
        let ms = u64::try_from(interval.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        self.shared.sweep_interval_ms.store(ms, Ordering::Relaxed);
    }

    pub(crate) fn sweep_batch(&self) -> usize {
        self.shared.sweep_batch.load(Ordering::Relaxed).max(1)
    }

    /// Runs one sweep transaction (`ExpireOp::Sweep`) from the sweep's own
    /// thread: `(keys deleted, next start, whether its batch was full)`.
    pub(crate) fn sweep_once(&self, op: Op) -> Result<(usize, usize, bool), ReactorError> {
        let start = match &op {
            Op::Expire(ExpireOp::Sweep { start, .. }) => start % self.reactor_count(),
            _ => 0,
        };
        // The transaction starts at a reactor this node owns: on a cluster
        // a sweep never acquires one (its owner sweeps it). Not at a
        // replica: one dropped between this look and the transaction's
        // entry is remote by then, and the placement would acquire it,
        // pulling ownership here (a degree lowered from 3 to 1 saw its
        // reactors move to a former reader this way).
        let count = self.reactor_count();
        let window = count.min(crate::expiry::SWEEP_MAX_REACTORS);
        let Some(root) = (0..window)
            .map(|i| self.shared.reactors[(start + i) % count])
            .find(|&r| self.db.owns(r))
        else {
            // None of these is held here: the next sweep looks further on.
            return Ok((0, (start + window) % count, false));
        };
        let shared = Arc::clone(&self.shared);
        let ops = Arc::new(vec![op]);
        let (replies, change) = self.db.run_blocking(root, move |ctx| {
            attempt(
                ctx,
                Arc::clone(&shared),
                Arc::clone(&ops),
                None,
                None,
                None,
                None,
            )
        })?;
        self.shared.apply_change(change);
        let number = |frame: &Frame| match frame {
            Frame::Integer(n) => usize::try_from(*n).unwrap_or(0),
            _ => 0,
        };
        match replies.as_deref() {
            Some([Frame::Array(parts)]) if parts.len() == 3 => {
                Ok((number(&parts[0]), number(&parts[1]), number(&parts[2]) == 1))
            }
            _ => Ok((0, 0, false)),
        }
    }

    /// Makes this keyspace a site's: its procedures' bounded counters are
    /// then the site's rows. Once only.
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

    /// Every reactor's member rows checked against its entries
    /// (`members::audit`), one transaction per reactor.
    pub(crate) async fn member_audit(&self) -> Result<members::MemberAudit, ReactorError> {
        let mut total = members::MemberAudit::default();
        for &reactor in &self.shared.reactors {
            let audit = self
                .db
                .run(reactor, |ctx| async move { members::audit(&ctx) })
                .await?;
            total.add(audit);
        }
        Ok(total)
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
        self.run_on(root, ops, watched).await
    }

    /// [`run`](Self::run) with its root on reactor `index` (commands of no
    /// key that walk the reactors from there).
    pub(crate) async fn run_at(&self, index: usize, ops: Arc<Vec<Op>>) -> BatchOutcome {
        let root = self.shared.reactors[index % self.reactor_count()];
        self.run_on(root, ops, None).await
    }

    async fn run_on(
        &self,
        root: ReactorId,
        ops: Arc<Vec<Op>>,
        watched: Option<Arc<Watched>>,
    ) -> BatchOutcome {
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
        let mut ops = ops;
        let outcome = loop {
            let script_failed: Option<ScriptFailed> = ops
                .iter()
                .any(|op| matches!(op, Op::Script(_)))
                .then(|| Arc::new(Mutex::new(None)));
            let failed = script_failed.clone();
            let (shared, batch, watched, deferred, site_changed) = (
                Arc::clone(&shared),
                Arc::clone(&ops),
                watched.clone(),
                deferred.clone(),
                site_changed.clone(),
            );
            let outcome = self
                .db
                .run(root, move |ctx| {
                    attempt(
                        ctx,
                        Arc::clone(&shared),
                        Arc::clone(&batch),
                        watched.clone(),
                        deferred.clone(),
                        site_changed.clone(),
                        script_failed.clone(),
                    )
                })
                .await;
            // A script raised: rerun the batch with its error in its place
            // (each rerun replaces one script, so this ends).
            let failure = failed.and_then(|f| f.lock().expect("script failure").take());
            if let (Err(_), Some((i, error))) = (&outcome, failure) {
                let mut rerun = (*ops).clone();
                rerun[i] = Op::Reply(error);
                ops = Arc::new(rerun);
                continue;
            }
            break outcome.map(|(replies, change)| {
                self.shared.apply_change(change);
                replies
            });
        };
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
        let change = self
            .db
            .run(root, move |ctx| {
                let tx = Tx::new(ctx, Arc::clone(&shared), None, None);
                let writes = Arc::clone(&writes);
                async move {
                    for (key, value) in writes.iter() {
                        tx.write(key, value.clone()).await?;
                    }
                    Ok(tx.change.get())
                }
            })
            .await?;
        self.shared.apply_change(change);
        Ok(())
    }
}

/// One attempt of a batch's transaction.
fn attempt(
    ctx: ReactorCtx,
    shared: Arc<Shared>,
    ops: Arc<Vec<Op>>,
    watched: Option<Arc<Watched>>,
    deferred: Option<Arc<Mutex<Writes>>>,
    site_changed: Option<Arc<Mutex<Vec<Vec<u8>>>>>,
    script_failed: Option<ScriptFailed>,
) -> impl std::future::Future<Output = Result<Attempt, ReactorError>> {
    let tx = Tx::new(ctx, shared, deferred, site_changed);
    tx.shared.stats.attempts.fetch_add(1, Ordering::Relaxed);
    if let Some(deferred) = &tx.deferred {
        deferred.lock().expect("deferred writes").clear();
    }
    if let Some(changed) = &tx.site_changed {
        changed.lock().expect("changed site rows").clear();
    }
    run_ops(tx, ops, watched, script_failed)
}

/// The commands of an attempt, after the watched keys' check.
async fn run_ops(
    tx: Tx,
    ops: Arc<Vec<Op>>,
    watched: Option<Arc<Watched>>,
    script_failed: Option<ScriptFailed>,
) -> Result<Attempt, ReactorError> {
    if let Some(watched) = watched {
        // Boxed: only an EXEC after WATCH has it.
        if !Box::pin(tx.watched_unchanged(&watched)).await? {
            return Ok((None, RowChange::default()));
        }
    }
    let mut replies = Vec::with_capacity(ops.len());
    for (i, op) in ops.iter().enumerate() {
        match tx.apply(op).await {
            Ok(reply) => replies.push(reply),
            Err(e) => {
                if let (Some(error), Some(failed)) =
                    (tx.script_failure.borrow_mut().take(), &script_failed)
                {
                    *failed.lock().expect("script failure") = Some((i, error));
                }
                return Err(e);
            }
        }
    }
    Ok((Some(replies), tx.change.get()))
}

impl Shared {
    /// Moves the keyspace's counts by what a committed transaction did.
    fn apply_change(&self, change: RowChange) {
        let stats = &self.stats;
        if change.keys != 0 {
            stats.keys.fetch_add(change.keys, Ordering::Relaxed);
        }
        if change.volatile != 0 {
            stats
                .volatile_keys
                .fetch_add(change.volatile, Ordering::Relaxed);
        }
        if change.expired != 0 {
            stats
                .expired_keys
                .fetch_add(change.expired, Ordering::Relaxed);
        }
    }
}

/// What writes did to the keyspace's counts: keys and keys with a deadline
/// added (negative: removed), and expired keys reclaimed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RowChange {
    pub(crate) keys: i64,
    pub(crate) volatile: i64,
    pub(crate) expired: u64,
}

impl RowChange {
    pub(crate) fn add(&mut self, other: RowChange) {
        self.keys += other.keys;
        self.volatile += other.volatile;
        self.expired += other.expired;
    }
}

/// What a command writes to one key (see [`Tx::modify`]).
#[derive(Debug)]
pub(crate) enum Write {
    /// Nothing.
    Keep,
    /// This value, with this deadline (Unix ms; 0: none).
    Put(Value, i64),
    /// Deletes the key (and reclaims it if it had expired).
    Delete,
}

/// What became of a key's `kv` row (for [`index_rows`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum After {
    Keep,
    Put(i64),
    Delete,
}

/// Runs `f` on `key`'s entry as the transaction sees it (`None` if absent or
/// expired at `now`) and applies the write it returns, in `key`'s reactor
/// (`ctx`): one search of the `kv` index for the read and the write, then
/// the `keys` and `expiry` rows if the key appeared, went or changed
/// deadline, and the old value's member rows if it was a collection now
/// deleted or replaced (see [`crate::members`]).
pub(crate) fn modify_row<R>(
    ctx: &ReactorCtx,
    shared: &Shared,
    key: &KvKey,
    now: &dyn Fn() -> i64,
    header_only: bool,
    f: impl FnOnce(Option<Entry>) -> (Write, R),
) -> Result<(R, RowChange), ReactorError> {
    let stamps = &shared.stamps;
    // The stored entry's deadline and whether it had expired; `None`: none.
    let mut before = None;
    // The member rows the stored value has, if the write drops them.
    let mut drop_members = Members::None;
    let modify = |old: Option<Entry>| {
        let expired = old
            .as_ref()
            .is_some_and(|e| expiry::is_expired(e.deadline, now()));
        before = old.as_ref().map(|e| (e.deadline, expired));
        let members = old.as_ref().map_or(Members::None, |e| e.value.members());
        let (write, result) = f(if expired { None } else { old });
        // A write of the same kind of collection is the collection
        // commands', which keep its rows; any other write replaces them.
        drop_members = match &write {
            Write::Keep => Members::None,
            Write::Put(value, _) if !expired && value.members() == members => Members::None,
            Write::Put(..) | Write::Delete => members,
        };
        match write {
            Write::Keep => (None, (result, After::Keep)),
            Write::Delete => (None, (result, After::Delete)),
            Write::Put(value, deadline) => (
                Some(Entry {
                    stamp: stamps.next(),
                    deadline,
                    value,
                }),
                (result, After::Put(deadline)),
            ),
        }
    };
    let (result, after) = if header_only {
        headers_only(|| ctx.modify(&KV, key, modify))?
    } else {
        ctx.modify(&KV, key, modify)?
    };
    members::drop_all(ctx, &key.0, drop_members)?;
    let change = index_rows(ctx, key, before, after)?;
    Ok((result, change))
}

/// Brings `key`'s `keys` and `expiry` rows in step with what became of its
/// `kv` row (`before`: the stored entry's deadline and whether it had
/// expired; `None`: there was none), and deletes the `kv` row for
/// [`After::Delete`].
pub(crate) fn index_rows(
    ctx: &ReactorCtx,
    key: &KvKey,
    before: Option<(i64, bool)>,
    after: After,
) -> Result<RowChange, ReactorError> {
    let mut change = RowChange::default();
    match (before, after) {
        (_, After::Keep) | (None, After::Delete) => {}
        (Some((deadline, expired)), After::Delete) => {
            ctx.delete(&KV, key)?;
            ctx.delete(&KEY_INDEX, &IndexKey::of(&key.0))?;
            change.keys -= 1;
            if deadline != 0 {
                ctx.delete(&EXPIRY_INDEX, &ExpiryKey::row(deadline, &key.0))?;
                change.volatile -= 1;
            }
            change.expired += u64::from(expired);
        }
        (before, After::Put(deadline)) => {
            let old_deadline = match before {
                None => {
                    ctx.put(&KEY_INDEX, &IndexKey::of(&key.0), &())?;
                    change.keys += 1;
                    0
                }
                Some((old, expired)) => {
                    change.expired += u64::from(expired);
                    old
                }
            };
            if old_deadline != deadline {
                if old_deadline != 0 {
                    ctx.delete(&EXPIRY_INDEX, &ExpiryKey::row(old_deadline, &key.0))?;
                    change.volatile -= 1;
                }
                if deadline != 0 {
                    ctx.put(&EXPIRY_INDEX, &ExpiryKey::row(deadline, &key.0), &())?;
                    change.volatile += 1;
                }
            }
        }
    }
    Ok(change)
}

/// A future that is ready at once (the work was done synchronously, on a
/// reactor of this container) or a boxed one (through a call to another
/// container): the hot path's futures stay a few words, whatever the
/// remote path holds.
pub(crate) enum Soon<'a, T> {
    Ready(Option<T>),
    Later(std::pin::Pin<Box<dyn std::future::Future<Output = T> + 'a>>),
}

impl<T: Unpin> std::future::Future for Soon<'_, T> {
    type Output = T;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<T> {
        match self.get_mut() {
            Soon::Ready(value) => {
                std::task::Poll::Ready(value.take().expect("a Soon polled after it completed"))
            }
            Soon::Later(future) => future.as_mut().poll(cx),
        }
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
    /// The transaction's clock reading (Unix ms), taken when first needed.
    now: Cell<Option<i64>>,
    /// What this attempt's writes did to the keyspace's counts.
    change: Cell<RowChange>,
    /// The error of a script that raised, aborting this attempt (see
    /// [`ScriptFailed`]).
    script_failure: std::cell::RefCell<Option<Frame>>,
}

/// Where an attempt aborted by a raising script leaves the script's position
/// in the batch and its error: the batch is then rerun with that error in
/// the script's place, so the script applies nothing and the batch's other
/// commands still run as one transaction.
type ScriptFailed = Arc<Mutex<Option<(usize, Frame)>>>;

impl Tx {
    fn new(
        ctx: ReactorCtx,
        shared: Arc<Shared>,
        deferred: Option<Arc<Mutex<Writes>>>,
        site_changed: Option<Arc<Mutex<Vec<Vec<u8>>>>>,
    ) -> Tx {
        Tx {
            ctx,
            shared,
            deferred,
            site_changed,
            now: Cell::new(None),
            change: Cell::new(RowChange::default()),
            script_failure: std::cell::RefCell::new(None),
        }
    }

    /// The transaction's clock (Unix ms): read once, the first time a
    /// command needs it (a key with a deadline, a command about time), and
    /// the same for every later command of the transaction.
    pub(crate) fn now(&self) -> i64 {
        match self.now.get() {
            Some(now) => now,
            None => {
                let now = self.shared.clock.now_ms();
                self.now.set(Some(now));
                now
            }
        }
    }

    /// Whether every watched key still has the stamp it had.
    async fn watched_unchanged(&self, watched: &Watched) -> Result<bool, ReactorError> {
        for (key, stamp) in watched {
            if self.read_header(key).await?.map(|e| e.stamp) != *stamp {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Adds a write's effect on the keyspace's counts.
    pub(crate) fn note(&self, change: RowChange) {
        let mut total = self.change.get();
        total.add(change);
        self.change.set(total);
    }

    /// The keys this transaction added (negative: removed) so far.
    pub(crate) fn keys_added(&self) -> i64 {
        self.change.get().keys
    }

    pub(crate) fn stats(&self) -> &Stats {
        &self.shared.stats
    }

    pub(crate) fn reactor_count(&self) -> usize {
        self.shared.reactors.len()
    }

    /// Keyspace reactor `index` lives in this node's database now (see
    /// [`ReactorCtx::lives_here`]).
    pub(crate) fn lives_here(&self, index: usize) -> bool {
        self.ctx
            .lives_here(self.shared.reactors[index % self.reactor_count()])
    }

    /// Runs `f` with reactor `index`'s context and the shared state: at once
    /// when the reactor lives in this container, through a call otherwise.
    pub(crate) async fn on_reactor<T, F>(&self, index: usize, f: F) -> Result<T, ReactorError>
    where
        T: Send + 'static,
        F: FnOnce(&ReactorCtx, &Shared) -> Result<T, ReactorError> + Send + 'static,
    {
        let target = self.shared.reactors[index];
        if let Some(local) = self.ctx.local(target)? {
            return f(&local, &self.shared);
        }
        let shared = Arc::clone(&self.shared);
        self.ctx
            .call(target, move |c| async move { f(&c, &shared) })
            .await
    }

    /// Runs `f` on `key`'s rows in its reactor (the hash, set and
    /// sorted-set commands); an error reply `f` gives is the command's reply.
    pub(crate) async fn on_key<T, F>(
        &self,
        key: &[u8],
        f: F,
    ) -> Result<Result<T, Frame>, ReactorError>
    where
        T: Send + 'static,
        F: FnOnce(&mut KeyRows<'_>) -> Result<T, Fail> + Send + 'static,
    {
        let index = keyspace_index(key, self.reactor_count());
        let now = self.now();
        let key = key.to_vec();
        let (result, change) = self
            .on_reactor(index, move |ctx, shared| {
                let mut rows = KeyRows::new(ctx, shared, &key, now);
                match f(&mut rows) {
                    Ok(value) => Ok((Ok(value), rows.change)),
                    Err(Fail::Reply(reply)) => Ok((Err(reply), rows.change)),
                    Err(Fail::Tx(e)) => Err(e),
                }
            })
            .await?;
        self.note(change);
        Ok(result)
    }

    /// [`on_key`](Self::on_key) for a command whose result is its reply.
    pub(crate) async fn on_key_reply<F>(&self, key: &[u8], f: F) -> Result<Frame, ReactorError>
    where
        F: FnOnce(&mut KeyRows<'_>) -> Result<Frame, Fail> + Send + 'static,
    {
        Ok(self.on_key(key, f).await?.unwrap_or_else(|reply| reply))
    }

    /// Reads `key`'s entry as this transaction sees it: `None` if absent or
    /// expired. A key in this container (every key, with the
    /// shared-everything deployment) is read synchronously through its
    /// reactor's context (the future is ready at once); one elsewhere
    /// through a call.
    // `&Vec` rather than `&[u8]`: the relation's key type wraps the vector.
    #[allow(clippy::ptr_arg)]
    pub(crate) fn read<'a>(
        &'a self,
        key: &'a Vec<u8>,
    ) -> Soon<'a, Result<Option<Entry>, ReactorError>> {
        self.read_entry(key, false)
    }

    /// [`read`](Self::read) of the entry's header alone: its value is
    /// [`Value::Unread`] (existence, deadline and stamp).
    #[allow(clippy::ptr_arg)]
    pub(crate) fn read_header<'a>(
        &'a self,
        key: &'a Vec<u8>,
    ) -> Soon<'a, Result<Option<Entry>, ReactorError>> {
        self.read_entry(key, true)
    }

    #[allow(clippy::ptr_arg)]
    fn read_entry<'a>(
        &'a self,
        key: &'a Vec<u8>,
        header_only: bool,
    ) -> Soon<'a, Result<Option<Entry>, ReactorError>> {
        let target = self.shared.reactor_of(key);
        let local = match self.ctx.local(target) {
            Ok(local) => local,
            Err(e) => return Soon::Ready(Some(Err(e))),
        };
        if let Some(local) = local {
            let entry = if header_only {
                headers_only(|| local.get(&KV, KvKey::from_ref(key)))
            } else {
                local.get(&KV, KvKey::from_ref(key))
            };
            return Soon::Ready(Some(entry.map(|e| self.live(e))));
        }
        let key = KvKey(key.clone());
        let call = self.ctx.call(target, move |c| async move {
            if header_only {
                headers_only(|| c.get(&KV, &key))
            } else {
                c.get(&KV, &key)
            }
        });
        Soon::Later(Box::pin(async move { call.await.map(|e| self.live(e)) }))
    }

    /// `entry` if it has not expired at the transaction's clock.
    fn live(&self, entry: Option<Entry>) -> Option<Entry> {
        entry.filter(|e| e.deadline == 0 || !expiry::is_expired(e.deadline, self.now()))
    }

    /// `key`'s row of `relation` (`site_counters`), in the reactor the key
    /// belongs to.
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
        Box::pin(
            self.ctx
                .call(target, move |c| async move { c.get(relation, &key) }),
        )
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

    /// Runs `f` on `key`'s entry as this transaction sees it (`None`: absent
    /// or expired) and applies the [`Write`] it returns, keeping the key's
    /// index rows in step; returns `f`'s other result. In this container it
    /// is one access to the row, done before the future is returned;
    /// elsewhere a read and a write through calls (the transaction validates
    /// both).
    #[allow(clippy::ptr_arg)]
    pub(crate) fn modify<'a, R: Unpin + 'a>(
        &'a self,
        key: &'a Vec<u8>,
        f: impl FnOnce(Option<Entry>) -> (Write, R) + 'a,
    ) -> Soon<'a, Result<R, ReactorError>> {
        self.modify_entry(key, false, f)
    }

    /// [`modify`](Self::modify) for a command that needs only whether the
    /// key exists and its deadline: `f` sees the entry with its value
    /// [`Value::Unread`] (the old value is neither decoded nor copied).
    #[allow(clippy::ptr_arg)]
    pub(crate) fn modify_header<'a, R: Unpin + 'a>(
        &'a self,
        key: &'a Vec<u8>,
        f: impl FnOnce(Option<Entry>) -> (Write, R) + 'a,
    ) -> Soon<'a, Result<R, ReactorError>> {
        self.modify_entry(key, true, f)
    }

    #[allow(clippy::ptr_arg)]
    fn modify_entry<'a, R: Unpin + 'a>(
        &'a self,
        key: &'a Vec<u8>,
        header_only: bool,
        f: impl FnOnce(Option<Entry>) -> (Write, R) + 'a,
    ) -> Soon<'a, Result<R, ReactorError>> {
        let target = self.shared.reactor_of(key);
        let local = match self.ctx.local(target) {
            Ok(local) => local,
            Err(e) => return Soon::Ready(Some(Err(e))),
        };
        if let Some(local) = local {
            let outcome = modify_row(
                &local,
                &self.shared,
                KvKey::from_ref(key),
                &|| self.now(),
                header_only,
                f,
            )
            .map(|(result, change)| {
                self.note(change);
                result
            });
            return Soon::Ready(Some(outcome));
        }
        Soon::Later(Box::pin(self.modify_remote(target, key, header_only, f)))
    }

    /// `modify` of a key in another container: a read, then the write
    /// through a call (the transaction validates both).
    #[allow(clippy::ptr_arg)]
    async fn modify_remote<R>(
        &self,
        target: ReactorId,
        key: &Vec<u8>,
        header_only: bool,
        f: impl FnOnce(Option<Entry>) -> (Write, R),
    ) -> Result<R, ReactorError> {
        let old = self.read_entry(key, header_only).await?;
        let (write, result) = f(old);
        if !matches!(write, Write::Keep) {
            let now = self.now();
            let shared = Arc::clone(&self.shared);
            let key = KvKey(key.clone());
            let change = self
                .ctx
                .call(target, move |c| async move {
                    modify_row(&c, &shared, &key, &|| now, true, |_| (write, ())).map(|((), c)| c)
                })
                .await?;
            self.note(change);
        }
        Ok(result)
    }

    /// Writes `value` with `deadline` (0: none) whatever the key held.
    #[allow(clippy::ptr_arg)]
    pub(crate) fn put<'a>(
        &'a self,
        key: &'a Vec<u8>,
        value: Value,
        deadline: i64,
    ) -> Soon<'a, Result<(), ReactorError>> {
        self.modify_header(key, move |_| (Write::Put(value, deadline), ()))
    }

    /// Deletes the key; whether it existed (expired keys did not).
    #[allow(clippy::ptr_arg)]
    pub(crate) fn delete<'a>(&'a self, key: &'a Vec<u8>) -> Soon<'a, Result<bool, ReactorError>> {
        self.modify_header(key, |old| (Write::Delete, old.is_some()))
    }

    /// Writes `value` keeping the key's time to live (`None`: deletes the
    /// key): how a function's writes apply.
    #[allow(clippy::ptr_arg)]
    pub(crate) fn write<'a>(
        &'a self,
        key: &'a Vec<u8>,
        value: Option<Value>,
    ) -> Soon<'a, Result<(), ReactorError>> {
        self.modify_header(key, move |old| match value {
            Some(value) => (Write::Put(value, old.map_or(0, |e| e.deadline)), ()),
            None => (Write::Delete, ()),
        })
    }

    pub(crate) async fn apply(&self, op: &Op) -> Result<Frame, ReactorError> {
        Ok(match op {
            Op::Reply(error) => error.clone(),
            Op::BcFence(_) | Op::BcAdopt { .. } => Frame::error(NOT_A_SITE),
            // Boxed, with the bounded counters': rare, and their futures
            // would otherwise size every batch's.
            Op::FCall(_)
            | Op::Script(_)
            | Op::BcCreate { .. }
            | Op::BcAdd { .. }
            | Op::BcGet(_) => Box::pin(self.apply_rare(op)).await?,
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
                ttl: SetTtl::Clear,
            } => {
                // Nothing depends on the old value (its deadline and
                // existence only keep the indexes in step).
                self.put(key, Value::Str(value.to_vec()), 0).await?;
                Frame::ok()
            }
            Op::Set {
                key,
                value,
                cond,
                get,
                ttl,
            } => {
                let deadline = match ttl {
                    SetTtl::At(deadline) => match deadline.at(self.now()) {
                        Ok(at) => Some(at),
                        Err(error) => return Ok(error),
                    },
                    _ => None,
                };
                self.modify(key, |old| {
                    let old_reply = match old.as_ref().map(|e| &e.value) {
                        None => Frame::Null,
                        Some(value) => match value.string_bytes() {
                            Some(bytes) => Frame::Bulk(bytes.into_owned()),
                            None if *get => return (Write::Keep, Frame::error(WRONGTYPE)),
                            None => Frame::Null,
                        },
                    };
                    let allowed = match cond {
                        SetCond::Always => true,
                        SetCond::IfAbsent => old.is_none(),
                        SetCond::IfPresent => old.is_some(),
                    };
                    let reply = match (get, allowed) {
                        (true, _) => old_reply,
                        (false, true) => Frame::ok(),
                        (false, false) => Frame::Null,
                    };
                    if !allowed {
                        return (Write::Keep, reply);
                    }
                    let deadline = match (ttl, deadline) {
                        (_, Some(at)) => at,
                        (SetTtl::Keep, _) => old.map_or(0, |e| e.deadline),
                        _ => 0,
                    };
                    // An absolute deadline already past: set, and gone at
                    // once (Redis lets it expire on the next access).
                    if deadline != 0 && expiry::is_expired(deadline, self.now()) {
                        return (Write::Delete, reply);
                    }
                    (Write::Put(Value::Str(value.to_vec()), deadline), reply)
                })
                .await?
            }
            Op::Del(keys) => {
                let mut deleted = 0;
                for key in keys {
                    if self.delete(key).await? {
                        deleted += 1;
                    }
                }
                Frame::Integer(deleted)
            }
            Op::Exists(keys) => {
                let mut found = 0;
                for key in keys {
                    if self.read_header(key).await?.is_some() {
                        found += 1;
                    }
                }
                Frame::Integer(found)
            }
            Op::IncrBy(key, by) => {
                self.modify(key, |old| {
                    let (current, deadline) = match old {
                        None => (0, 0),
                        Some(Entry {
                            value: Value::Int(n),
                            deadline,
                            ..
                        }) => (n, deadline),
                        Some(Entry {
                            value: Value::Str(s),
                            deadline,
                            ..
                        }) => match parse_i64(&s) {
                            Some(n) => (n, deadline),
                            None => return (Write::Keep, Frame::error(NOT_INTEGER)),
                        },
                        Some(_) => return (Write::Keep, Frame::error(WRONGTYPE)),
                    };
                    match current.checked_add(*by) {
                        Some(next) => {
                            (Write::Put(Value::Int(next), deadline), Frame::Integer(next))
                        }
                        None => (Write::Keep, Frame::error(OVERFLOW)),
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
                    self.put(key, Value::Str(value.clone()), 0).await?;
                }
                Frame::ok()
            }
            Op::Push { key, left, values } => {
                self.modify(key, |old| {
                    let (mut list, deadline) = match old {
                        None => (VecDeque::new(), 0),
                        Some(Entry {
                            value: Value::List(list),
                            deadline,
                            ..
                        }) => (list, deadline),
                        Some(_) => return (Write::Keep, Frame::error(WRONGTYPE)),
                    };
                    for value in values {
                        if *left {
                            list.push_front(value.clone());
                        } else {
                            list.push_back(value.clone());
                        }
                    }
                    let len = list.len();
                    (
                        Write::Put(Value::List(list), deadline),
                        Frame::Integer(len as i64),
                    )
                })
                .await?
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
            // Boxed: their futures would otherwise size every batch's.
            Op::Key(op) => Box::pin(keyspace::apply(self, op)).await?,
            Op::Expire(op) => Box::pin(expiry::apply(self, op)).await?,
            Op::Str(op) => Box::pin(strings::apply(self, op)).await?,
            Op::Hashes(op) => Box::pin(hashes::apply(self, op)).await?,
            Op::Sets(op) => Box::pin(sets::apply(self, op)).await?,
            Op::ZSets(op) => Box::pin(zsets::apply(self, op)).await?,
            Op::Lists(op) => Box::pin(lists::apply(self, op)).await?,
            Op::Sort(op) => Box::pin(sort::apply(self, op)).await?,
            Op::Stamps(keys) => {
                let mut stamps = Vec::with_capacity(keys.len());
                for key in keys {
                    stamps.push(match self.read_header(key).await? {
                        Some(entry) => Frame::Integer(entry.stamp as i64),
                        None => Frame::Null,
                    });
                }
                Frame::Array(stamps)
            }
        })
    }

    /// FCALL and the bounded counters' commands.
    async fn apply_rare(&self, op: &Op) -> Result<Frame, ReactorError> {
        Ok(match op {
            Op::Script(call) => match crate::scripting::run(self, call).await? {
                Ok(reply) => reply,
                Err(error) => {
                    // The script raised: abort the whole transaction (its
                    // writes so far go with it); `Store::run_on` reruns the
                    // batch with this error in the script's place.
                    *self.script_failure.borrow_mut() = Some(error);
                    return Err(ReactorError::user_abort("a script raised an error"));
                }
            },
            Op::FCall(call) => {
                let (reply, writes, site_writes) = Box::pin(run_call(self, call)).await?;
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
                self.put(key, Value::Counter(encode_counter(&counter)), 0)
                    .await?;
                Frame::ok()
            }
            Op::BcAdd { key, up, delta, .. } => {
                let entry = match self.read(key).await? {
                    None => return Ok(Frame::error("ERR no such bounded counter")),
                    Some(entry) => entry,
                };
                let mut counter = match &entry.value {
                    Value::Counter(bytes) => match decode_counter(bytes) {
                        Ok(counter) => counter,
                        Err(e) => return Ok(e),
                    },
                    _ => return Ok(Frame::error(WRONGTYPE)),
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
                self.put(
                    key,
                    Value::Counter(encode_counter(&counter)),
                    entry.deadline,
                )
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
            other => unreachable!("{other:?} is not a rare command"),
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
    fn a_hash_tag_places_a_key_as_redis_cluster_does() {
        assert_eq!(hash_tag(b"acct:{17}:sav"), b"17");
        assert_eq!(hash_tag(b"{user1000}.following"), b"user1000");
        // The first `{` and the first `}` after it; an empty tag is none.
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hash_tag(b"no tag"), b"no tag");
        assert_eq!(hash_tag(b"open{only"), b"open{only");
        for k in [1, 7, 64, 4096] {
            assert_eq!(
                keyspace_index(b"acct:{17}:sav", k),
                keyspace_index(b"acct:{17}:chk", k)
            );
            assert_eq!(keyspace_index(b"x{17}", k), keyspace_index(b"17", k));
        }
    }

    #[test]
    fn stamps_are_unique_across_nodes_and_restarts() {
        let a = Stamps::new(1);
        let b = Stamps::new(2);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            assert!(seen.insert(a.next()));
            assert!(seen.insert(b.next()));
        }
        let last_a = a.next();
        assert_eq!(last_a & u64::from(MAX_STAMP_ORIGIN), 1);
        assert!(
            i64::try_from(last_a).is_ok(),
            "WATCH replies stamps as integers"
        );
        // A restart of node 1 (a new counter) starts above what it gave,
        // once the clock has passed its last stamp (a burst of more than one
        // write a microsecond runs ahead of it; a restart takes seconds).
        let ahead_us = (last_a >> STAMP_ORIGIN_BITS).saturating_sub(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_micros() as u64,
        );
        std::thread::sleep(std::time::Duration::from_micros(ahead_us + 1_000));
        let restarted = Stamps::new(1);
        assert!(restarted.next() > last_a);
        // One node's stamps only grow.
        let mut before = restarted.next();
        for _ in 0..1_000 {
            let next = restarted.next();
            assert!(next > before);
            before = next;
        }
    }

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
                deadline: 1_700_000_000_000,
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
    fn entries_carry_their_format_version() {
        let entry = Entry {
            stamp: 3,
            deadline: 0,
            value: Value::Int(42),
        };
        let bytes = postcard::to_allocvec(&entry).unwrap();
        assert_eq!(bytes[0], ENTRY_FORMAT);
        let back: Entry = postcard::from_bytes(&bytes).unwrap();
        assert_eq!((back.stamp, back.deadline), (3, 0));
        assert!(matches!(back.value, Value::Int(42)));
        let mut future = bytes.clone();
        future[0] = ENTRY_FORMAT + 1;
        assert!(postcard::from_bytes::<Entry>(&future).is_err());
    }

    #[test]
    fn headers_say_which_values_have_member_rows() {
        let values = [
            (Value::Str(b"x".to_vec()), Members::None),
            (Value::Int(3), Members::None),
            (Value::List(VecDeque::from([b"a".to_vec()])), Members::None),
            (Value::Hash(4), Members::Hash),
            (Value::Counter(b"{}".to_vec()), Members::None),
            (Value::Set(3), Members::Set),
            (Value::ZSet(2), Members::ZSet),
        ];
        for (i, (value, members)) in values.into_iter().enumerate() {
            assert_eq!(value.members(), members);
            let entry = Entry {
                stamp: 1,
                deadline: 5,
                value,
            };
            let bytes = postcard::to_allocvec(&entry).unwrap();
            // The variant's index, as `ValueTag` reads it.
            assert_eq!(bytes[3] as usize, i, "{:?}", entry.value);
            let header: Entry = headers_only(|| postcard::from_bytes(&bytes)).unwrap();
            assert_eq!(header.deadline, 5);
            assert_eq!(header.value.members(), members);
            match header.value {
                Value::Hash(n) => assert_eq!(n, 4),
                Value::Set(n) => assert_eq!(n, 3),
                Value::ZSet(n) => assert_eq!(n, 2),
                Value::Unread => assert_eq!(members, Members::None),
                other => panic!("{other:?}"),
            }
            let full: Entry = postcard::from_bytes(&bytes).unwrap();
            assert_eq!(full.value.members(), members);
        }
        assert_eq!(VALUE_VARIANTS.len(), 7);
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
#[cfg(test)]
mod sizes {
    use super::*;

    /// A batch's commands are a `Vec<Op>`: at 64 bytes, 16 pipelined
    /// commands stay under glibc's 1 KiB large-request path
    /// (malloc_consolidate showed up per batch at 88).
    #[test]
    fn op_stays_64_bytes() {
        assert!(
            std::mem::size_of::<Op>() <= 64,
            "{}",
            std::mem::size_of::<Op>()
        );
    }
}

//! Commands over keys and the whole keyspace: TYPE, RENAME/RENAMENX, COPY,
//! KEYS, SCAN, RANDOMKEY, DBSIZE, FLUSHDB/FLUSHALL, OBJECT.
//!
//! **The key index and SCAN's cursor.** Each reactor keeps every key of its
//! own in the ordered relation `keys`, under its *scan position*: the top
//! 48 bits of SipHash-2-4 of the key (fixed key: positions are part of the
//! stored rows, the same on every node and every build). A SCAN cursor is
//! `reactor << 48 | position`: a call walks reactor `reactor`'s index from
//! `position` on, in position order, then the next reactors, and returns
//! the cursor where it stopped (0 once past the last reactor). A key's
//! place `(reactor, position)` never changes while it exists, and each
//! call returns every key of the stretch it walked (a stretch always ends
//! after a whole position: keys sharing a 48-bit position are returned by
//! the same call), so the stretches of a full scan cover every place once:
//! **every key present for the whole scan is returned, exactly once**, and
//! keys added or removed meanwhile are returned at most once. A call walks
//! at most `COUNT` index entries (plus the rest of the last position: with
//! a 48-bit keyed hash, practically none) and at most
//! `max(COUNT, SCAN_REACTORS_PER_CALL)` reactors; `COUNT` above
//! [`SCAN_MAX_COUNT`] counts as that.
//!
//! **Bounds.** KEYS and FLUSHALL inside MULTI/EXEC are one transaction over
//! the whole keyspace: KEYS refuses to walk more than [`KEYS_MAX_EXAMINED`]
//! index entries (use SCAN), FLUSHALL inside MULTI more than
//! [`FLUSH_IN_TRANSACTION_MAX`] keys. FLUSHALL/FLUSHDB outside MULTI deletes
//! reactor by reactor in transactions of at most [`FLUSH_BATCH`] keys, so it
//! is not atomic with writes running at the same time: a key written while
//! it runs may survive (as if written just after it); every key that
//! existed when it started and was not written meanwhile is gone when it
//! answers.

use std::ops::Bound;
use std::sync::Arc;

use roost_reactor::{KeyCodec, KeyDecodeError, ReactorCtx, ReactorError, ScanDirection};

use crate::expiry::is_expired;
use crate::members::Members;
use crate::protocol::Frame;
use crate::store::KvKey;
use crate::store::{
    headers_only, index_rows, After, Entry, Op, Store, Tx, Value, Write, KEY_INDEX, KV,
};

/// Bits of a key's scan position (the rest of a cursor's 64 name the reactor).
pub(crate) const POSITION_BITS: u32 = 48;
const POSITION_MASK: u64 = (1 << POSITION_BITS) - 1;
/// COUNT beyond this is taken as this (COUNT is a hint in Redis too).
pub(crate) const SCAN_MAX_COUNT: usize = 100_000;
/// Empty reactors a SCAN call passes at least, whatever its COUNT.
pub(crate) const SCAN_REACTORS_PER_CALL: usize = 64;
/// The most index entries one KEYS walks.
pub(crate) const KEYS_MAX_EXAMINED: usize = 1_000_000;
/// The most keys FLUSHALL deletes inside a MULTI/EXEC transaction.
pub(crate) const FLUSH_IN_TRANSACTION_MAX: usize = 100_000;
/// Keys per transaction of FLUSHALL outside MULTI.
pub(crate) const FLUSH_BATCH: usize = 1024;
/// Index entries RANDOMKEY looks at before answering nil (all expired).
const RANDOMKEY_MAX_EXAMINED: usize = 1024;

/// A row of the `keys` relation: the key's scan position (8 bytes,
/// big-endian, of which the low 48 bits are used) and the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IndexKey {
    pub(crate) pos: u64,
    pub(crate) key: Vec<u8>,
}

impl IndexKey {
    /// `key`'s row.
    pub(crate) fn of(key: &[u8]) -> IndexKey {
        IndexKey {
            pos: scan_position(key),
            key: key.to_vec(),
        }
    }

    /// Where position `pos` starts (before every key at it).
    fn start(pos: u64) -> IndexKey {
        IndexKey {
            pos,
            key: Vec::new(),
        }
    }
}

impl KeyCodec for IndexKey {
    fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.pos.to_be_bytes());
        out.extend_from_slice(&self.key);
    }

    fn decode_from(input: &mut &[u8]) -> Result<Self, KeyDecodeError> {
        if input.len() < 8 {
            return Err(KeyDecodeError::Truncated {
                what: "scan position",
                at: input.len(),
            });
        }
        let (head, rest) = input.split_at(8);
        let pos = u64::from_be_bytes(head.try_into().expect("8 bytes"));
        let key = rest.to_vec();
        *input = &[];
        Ok(IndexKey { pos, key })
    }
}

/// `key`'s scan position: the top 48 bits of SipHash-2-4 under a fixed key.
pub(crate) fn scan_position(key: &[u8]) -> u64 {
    siphash24(0x726f_6f73_745f_6b65, 0x7973_7061_6365_5f31, key) >> (64 - POSITION_BITS)
}

/// SipHash-2-4 (Aumasson and Bernstein), as in the reference implementation.
fn siphash24(k0: u64, k1: u64, data: &[u8]) -> u64 {
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }
    let mut chunks = data.chunks_exact(8);
    for chunk in &mut chunks {
        let m = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        v[3] ^= m;
        round(&mut v);
        round(&mut v);
        v[0] ^= m;
    }
    let mut last = (data.len() as u64) << 56;
    for (i, &b) in chunks.remainder().iter().enumerate() {
        last |= u64::from(b) << (8 * i);
    }
    v[3] ^= last;
    round(&mut v);
    round(&mut v);
    v[0] ^= last;
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

/// A SCAN cursor for `(reactor, position)`.
pub(crate) fn cursor(reactor: usize, pos: u64) -> u64 {
    ((reactor as u64) << POSITION_BITS) | (pos & POSITION_MASK)
}

/// Redis's glob-style pattern match (`stringmatchlen`): `*`, `?`, `[...]`
/// with `^` and ranges, `\` escapes; byte for byte what Redis matches,
/// including its limit of 1000 nested `*`.
pub(crate) fn glob_match(pattern: &[u8], string: &[u8]) -> bool {
    let mut skip_longer = false;
    glob(pattern, string, &mut skip_longer, 0)
}

fn glob(mut p: &[u8], mut s: &[u8], skip_longer: &mut bool, nesting: usize) -> bool {
    // Redis compares pattern and string bytes as C `char`s: signed.
    let c = |b: u8| i32::from(b as i8);
    if nesting > 1000 {
        return false;
    }
    while !p.is_empty() && !s.is_empty() {
        match p[0] {
            b'*' => {
                while p.len() > 1 && p[1] == b'*' {
                    p = &p[1..];
                }
                if p.len() == 1 {
                    return true;
                }
                while !s.is_empty() {
                    if glob(&p[1..], s, skip_longer, nesting + 1) {
                        return true;
                    }
                    if *skip_longer {
                        return false;
                    }
                    s = &s[1..];
                }
                *skip_longer = true;
                return false;
            }
            b'?' => s = &s[1..],
            b'[' => {
                p = &p[1..];
                let not = p.first() == Some(&b'^');
                if not {
                    p = &p[1..];
                }
                let mut matched = false;
                loop {
                    if p.first() == Some(&b'\\') && p.len() >= 2 {
                        p = &p[1..];
                        if p[0] == s[0] {
                            matched = true;
                        }
                    } else if p.first() == Some(&b']') {
                        break;
                    } else if p.is_empty() {
                        // An unterminated class: Redis steps back one so
                        // that the step below ends the pattern.
                        break;
                    } else if p.len() >= 3 && p[1] == b'-' {
                        let (mut start, mut end) = (c(p[0]), c(p[2]));
                        if start > end {
                            std::mem::swap(&mut start, &mut end);
                        }
                        p = &p[2..];
                        if (start..=end).contains(&c(s[0])) {
                            matched = true;
                        }
                    } else if p[0] == s[0] {
                        matched = true;
                    }
                    p = &p[1..];
                }
                if not {
                    matched = !matched;
                }
                if !matched {
                    return false;
                }
                s = &s[1..];
                if p.is_empty() {
                    // The class ran to the end of the pattern.
                    return s.is_empty();
                }
            }
            b'\\' => {
                if p.len() >= 2 {
                    p = &p[1..];
                }
                if p[0] != s[0] {
                    return false;
                }
                s = &s[1..];
            }
            other => {
                if other != s[0] {
                    return false;
                }
                s = &s[1..];
            }
        }
        p = &p[1..];
        if s.is_empty() {
            while p.first() == Some(&b'*') {
                p = &p[1..];
            }
            break;
        }
    }
    p.is_empty() && s.is_empty()
}

/// OBJECT's subcommands that read a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ObjectSub {
    Encoding,
    Freq,
    IdleTime,
    RefCount,
}

/// SCAN's arguments.
#[derive(Debug, Clone)]
pub(crate) struct ScanArgs {
    pub(crate) cursor: u64,
    /// `None`: every key (no MATCH, or MATCH `*`).
    pub(crate) pattern: Option<Arc<Vec<u8>>>,
    pub(crate) count: usize,
    pub(crate) kind: Option<Arc<Vec<u8>>>,
}

/// A command over keys or the keyspace.
#[derive(Debug, Clone)]
pub(crate) enum KeyOp {
    Type(Vec<u8>),
    Rename {
        src: Vec<u8>,
        dst: Vec<u8>,
        nx: bool,
    },
    /// COPY (the same key for both was refused when parsed).
    Copy {
        src: Vec<u8>,
        dst: Vec<u8>,
        replace: bool,
    },
    Keys(Arc<Vec<u8>>),
    Scan(ScanArgs),
    RandomKey,
    DbSize,
    /// FLUSHALL/FLUSHDB as one command of a transaction (inside MULTI).
    Flush,
    /// One step of FLUSHALL outside MULTI: deletes up to `limit` keys of
    /// reactor `index`; replies how many.
    FlushReactor {
        index: usize,
        limit: usize,
    },
    Object {
        sub: ObjectSub,
        key: Vec<u8>,
    },
    /// MEMORY USAGE: an estimate of the bytes `key` takes (its entry, and
    /// its members at an average size, not read one by one).
    MemoryUsage(Vec<u8>),
}

impl KeyOp {
    pub(crate) fn first_key(&self) -> Option<&[u8]> {
        match self {
            KeyOp::Type(key)
            | KeyOp::Rename { src: key, .. }
            | KeyOp::Copy { src: key, .. }
            | KeyOp::Object { key, .. }
            | KeyOp::MemoryUsage(key) => Some(key),
            KeyOp::Keys(_)
            | KeyOp::Scan(_)
            | KeyOp::RandomKey
            | KeyOp::DbSize
            | KeyOp::Flush
            | KeyOp::FlushReactor { .. } => None,
        }
    }
}

/// Runs a key command inside `tx`.
pub(crate) async fn apply(tx: &Tx, op: &KeyOp) -> Result<Frame, ReactorError> {
    Ok(match op {
        KeyOp::Type(key) => Frame::Simple(
            tx.read(key)
                .await?
                .map_or("none", |e| e.value.type_name())
                .into(),
        ),
        KeyOp::Rename { src, dst, nx } => {
            let Some(entry) = tx.read(src).await? else {
                return Ok(Frame::error("ERR no such key"));
            };
            let done = if *nx { Frame::Integer(1) } else { Frame::ok() };
            if src == dst {
                return Ok(if *nx { Frame::Integer(0) } else { done });
            }
            if entry.value.members() != Members::None {
                if *nx && tx.read_header(dst).await?.is_some() {
                    return Ok(Frame::Integer(0));
                }
                copy_collection(tx, src, dst, entry).await?;
                tx.delete(src).await?;
                return Ok(done);
            }
            let moved = tx
                .modify(dst, |old| match old {
                    Some(_) if *nx => (Write::Keep, false),
                    _ => (Write::Put(entry.value, entry.deadline), true),
                })
                .await?;
            if !moved {
                return Ok(Frame::Integer(0));
            }
            tx.delete(src).await?;
            done
        }
        KeyOp::Copy { src, dst, replace } => {
            let Some(entry) = tx.read(src).await? else {
                return Ok(Frame::Integer(0));
            };
            if entry.value.members() != Members::None {
                if !*replace && tx.read_header(dst).await?.is_some() {
                    return Ok(Frame::Integer(0));
                }
                copy_collection(tx, src, dst, entry).await?;
                return Ok(Frame::Integer(1));
            }
            tx.modify(dst, |old| match old {
                Some(_) if !*replace => (Write::Keep, Frame::Integer(0)),
                _ => (Write::Put(entry.value, entry.deadline), Frame::Integer(1)),
            })
            .await?
        }
        KeyOp::Keys(pattern) => keys(tx, pattern).await?,
        KeyOp::Scan(args) => scan(tx, args).await?,
        KeyOp::RandomKey => random_key(tx).await?,
        KeyOp::DbSize => Frame::Integer((tx.stats().key_count() + tx.keys_added()).max(0)),
        KeyOp::Flush => flush_in_transaction(tx).await?,
        KeyOp::FlushReactor { index, limit } => {
            let limit = *limit;
            let (deleted, change) = tx
                .on_reactor(*index % tx.reactor_count(), move |ctx, _| {
                    let rows = ctx.scan(&KEY_INDEX, .., ScanDirection::Forward, limit)?;
                    let keys: Vec<Vec<u8>> = rows.into_iter().map(|(row, ())| row.key).collect();
                    delete_rows(ctx, keys)
                })
                .await?;
            tx.note(change);
            Frame::Integer(deleted as i64)
        }
        KeyOp::MemoryUsage(key) => match tx.read(key).await? {
            None => Frame::Null,
            Some(entry) => Frame::Integer(memory_usage(key, &entry.value) as i64),
        },
        KeyOp::Object { sub, key } => {
            let Some(entry) = tx.read(key).await? else {
                return Ok(Frame::Null);
            };
            match sub {
                ObjectSub::Encoding if entry.value.members() != Members::None => {
                    let (kind, len) = match entry.value {
                        Value::Hash(n) => (Members::Hash, n),
                        Value::Set(n) => (Members::Set, n),
                        Value::ZSet(n) => (Members::ZSet, n),
                        _ => (Members::None, 0),
                    };
                    tx.on_key_reply(key, move |rows| {
                        Ok(Frame::bulk(rows.encoding(kind, len)?))
                    })
                    .await?
                }
                ObjectSub::Encoding => Frame::bulk(encoding(&entry.value)),
                ObjectSub::Freq => Frame::error(
                    "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.",
                ),
                // Roost does not track when a key was last read.
                ObjectSub::IdleTime => Frame::Integer(0),
                ObjectSub::RefCount => Frame::Integer(1),
            }
        }
    })
}

/// Bytes an entry takes, estimated: the key and its entry's header, the
/// value's bytes, and for a collection stored a row per member
/// [`MEMBER_ROW_BYTES`] per member (its row and index slot at a typical
/// member size), so MEMORY USAGE costs one read whatever the size.
fn memory_usage(key: &[u8], value: &Value) -> usize {
    let members = |n: u64| {
        usize::try_from(n)
            .unwrap_or(usize::MAX)
            .saturating_mul(MEMBER_ROW_BYTES)
    };
    let value_bytes = match value {
        Value::Str(bytes) | Value::Counter(bytes) => bytes.len(),
        Value::Int(_) => 8,
        Value::List(list) => list.iter().map(|v| v.len() + LIST_ITEM_BYTES).sum(),
        Value::Hash(n) | Value::Set(n) | Value::ZSet(n) => members(*n),
        // `tx.read` reads whole entries; a header-only read is not one.
        Value::Unread => 0,
    };
    ENTRY_BYTES + key.len() + value_bytes
}

/// An entry's fixed cost (record header, index slot, expiry and stamp).
const ENTRY_BYTES: usize = 56;
/// A list element's cost beside its bytes.
const LIST_ITEM_BYTES: usize = 24;
/// A collection member's row, at a typical member size.
const MEMBER_ROW_BYTES: usize = 64;

/// OBJECT ENCODING: the names Redis 7.0 gives its encodings of the same
/// values.
fn encoding(value: &Value) -> &'static str {
    match value {
        Value::Int(_) => "int",
        Value::Str(s) if s.len() <= 20 && crate::store::parse_i64(s).is_some() => "int",
        Value::Str(s) if s.len() <= 44 => "embstr",
        Value::Str(_) | Value::Counter(_) | Value::Unread => "raw",
        // Read from the members (`members::KeyRows::encoding`); these are
        // the large ones'.
        Value::Hash(_) | Value::Set(_) => "hashtable",
        Value::ZSet(_) => "skiplist",
        Value::List(_) => "quicklist",
    }
}

/// Writes `entry` (a hash's, set's or sorted set's, read from `src`) as `dst`'s,
/// with a copy of every member row: `dst` is deleted first (whatever it
/// held), then the rows are copied a chunk at a time, then the entry.
async fn copy_collection(
    tx: &Tx,
    src: &[u8],
    dst: &Vec<u8>,
    entry: Entry,
) -> Result<(), ReactorError> {
    tx.delete(dst).await?;
    let kind = entry.value.members();
    let (from, to) = (
        crate::store::keyspace_index(src, tx.reactor_count()),
        crate::store::keyspace_index(dst, tx.reactor_count()),
    );
    let mut after = None;
    loop {
        let src = src.to_vec();
        let rows = tx
            .on_reactor(from, move |ctx, _| {
                crate::members::copy_chunk(ctx, &src, kind, after)
            })
            .await?;
        let Some((last, _)) = rows.last() else {
            break;
        };
        after = Some(last.clone());
        let full = rows.len() == crate::members::CHUNK;
        let dst = dst.clone();
        tx.on_reactor(to, move |ctx, _| {
            crate::members::paste_chunk(ctx, &dst, kind, &rows)
        })
        .await?;
        if !full {
            break;
        }
    }
    tx.put(dst, entry.value, entry.deadline).await
}

/// Deletes `keys` (of this reactor) with all their rows.
fn delete_rows(
    ctx: &ReactorCtx,
    keys: Vec<Vec<u8>>,
) -> Result<(usize, crate::store::RowChange), ReactorError> {
    let mut change = crate::store::RowChange::default();
    let mut deleted = 0;
    for key in keys {
        let key = KvKey(key);
        let entry: Option<Entry> = headers_only(|| ctx.get(&KV, &key))?;
        if let Some(entry) = entry {
            crate::members::drop_all(ctx, &key.0, entry.value.members())?;
            change.add(index_rows(
                ctx,
                &key,
                Some((entry.deadline, false)),
                After::Delete,
            )?);
            deleted += 1;
        } else {
            // An index row without its entry (none should exist): dropped.
            ctx.delete(&KEY_INDEX, &IndexKey::of(&key.0))?;
        }
    }
    Ok((deleted, change))
}

/// Whether the key of an index row exists at `now` and is of `kind`
/// (`None`: any), read from its entry.
#[allow(clippy::ptr_arg)]
fn live_of_kind(
    ctx: &ReactorCtx,
    key: &Vec<u8>,
    now: i64,
    kind: Option<&[u8]>,
) -> Result<bool, ReactorError> {
    // Only a TYPE filter needs the value (its type).
    let entry: Option<Entry> = if kind.is_none() {
        headers_only(|| ctx.get(&KV, KvKey::from_ref(key)))?
    } else {
        ctx.get(&KV, KvKey::from_ref(key))?
    };
    Ok(match entry {
        None => false,
        Some(entry) if is_expired(entry.deadline, now) => false,
        Some(entry) => kind.is_none_or(|kind| {
            entry
                .value
                .type_name()
                .as_bytes()
                .eq_ignore_ascii_case(kind)
        }),
    })
}

async fn keys(tx: &Tx, pattern: &Arc<Vec<u8>>) -> Result<Frame, ReactorError> {
    let now = tx.now();
    let all = pattern.as_slice() == b"*";
    let mut found = Vec::new();
    let mut examined = 0;
    for index in 0..tx.reactor_count() {
        let pattern = Arc::clone(pattern);
        let limit = KEYS_MAX_EXAMINED - examined + 1;
        let (keys, seen) = tx
            .on_reactor(index, move |ctx, _| {
                let rows = ctx.scan(&KEY_INDEX, .., ScanDirection::Forward, limit)?;
                let seen = rows.len();
                let mut keys = Vec::new();
                for (row, ()) in rows {
                    if (all || glob_match(&pattern, &row.key))
                        && live_of_kind(ctx, &row.key, now, None)?
                    {
                        keys.push(row.key);
                    }
                }
                Ok((keys, seen))
            })
            .await?;
        examined += seen;
        if examined > KEYS_MAX_EXAMINED {
            return Ok(Frame::error(format!(
                "ERR KEYS walks at most {KEYS_MAX_EXAMINED} keys and the keyspace holds more: use SCAN"
            )));
        }
        found.extend(keys.into_iter().map(Frame::Bulk));
    }
    Ok(Frame::Array(found))
}

/// What one reactor's stretch of a SCAN gave: the keys to return, the index
/// entries walked, and where the walk stopped inside the reactor (`None`:
/// it reached the reactor's end).
type Stretch = (Vec<Vec<u8>>, usize, Option<u64>);

/// Walks up to `limit` entries of this reactor's key index from position
/// `from`, then the rest of the last position, keeping the live keys that
/// match.
fn scan_stretch(
    ctx: &ReactorCtx,
    from: u64,
    limit: usize,
    now: i64,
    pattern: Option<&[u8]>,
    kind: Option<&[u8]>,
) -> Result<Stretch, ReactorError> {
    let mut rows = ctx.scan(
        &KEY_INDEX,
        IndexKey::start(from)..,
        ScanDirection::Forward,
        limit,
    )?;
    let mut next = None;
    if rows.len() == limit {
        let (last, ()) = rows.last().expect("limit is at least 1").clone();
        let same_position = ctx.scan(
            &KEY_INDEX,
            (
                Bound::Excluded(last.clone()),
                Bound::Excluded(IndexKey::start(last.pos + 1)),
            ),
            ScanDirection::Forward,
            usize::MAX,
        )?;
        rows.extend(same_position);
        next = Some(last.pos + 1);
    }
    let walked = rows.len();
    let mut keys = Vec::new();
    for (row, ()) in rows {
        if pattern.is_none_or(|p| glob_match(p, &row.key))
            && live_of_kind(ctx, &row.key, now, kind)?
        {
            keys.push(row.key);
        }
    }
    Ok((keys, walked, next))
}

async fn scan(tx: &Tx, args: &ScanArgs) -> Result<Frame, ReactorError> {
    let reactors = tx.reactor_count();
    let mut reactor = (args.cursor >> POSITION_BITS) as usize;
    let mut pos = args.cursor & POSITION_MASK;
    let count = args.count.clamp(1, SCAN_MAX_COUNT);
    let max_reactors = count.max(SCAN_REACTORS_PER_CALL);
    let now = tx.now();
    let mut budget = count;
    let mut visited = 0;
    let mut found = Vec::new();
    let next = loop {
        if reactor >= reactors {
            break 0;
        }
        let (pattern, kind) = (args.pattern.clone(), args.kind.clone());
        let limit = budget;
        let (keys, walked, stopped) = tx
            .on_reactor(reactor, move |ctx, _| {
                scan_stretch(
                    ctx,
                    pos,
                    limit,
                    now,
                    pattern.as_deref().map(Vec::as_slice),
                    kind.as_deref().map(Vec::as_slice),
                )
            })
            .await?;
        found.extend(keys.into_iter().map(Frame::Bulk));
        visited += 1;
        match stopped {
            Some(at) if at <= POSITION_MASK => break cursor(reactor, at),
            // The last position of the reactor: its next stretch is the
            // next reactor.
            Some(_) => {
                reactor += 1;
                break if reactor >= reactors {
                    0
                } else {
                    cursor(reactor, 0)
                };
            }
            None => {
                reactor += 1;
                pos = 0;
                budget = budget.saturating_sub(walked);
                if reactor >= reactors {
                    break 0;
                }
                if budget == 0 || visited >= max_reactors {
                    break cursor(reactor, 0);
                }
            }
        }
    };
    Ok(Frame::Array(vec![
        Frame::Bulk(next.to_string().into_bytes()),
        Frame::Array(found),
    ]))
}

async fn random_key(tx: &Tx) -> Result<Frame, ReactorError> {
    let reactors = tx.reactor_count();
    let first = (rand::random::<u64>() % reactors as u64) as usize;
    let from = rand::random::<u64>() & POSITION_MASK;
    let now = tx.now();
    let mut examined = 0;
    // From a random place of a random reactor to the end of the keyspace,
    // then from the start back to it.
    for step in 0..=reactors {
        if examined >= RANDOMKEY_MAX_EXAMINED {
            break;
        }
        let index = (first + step) % reactors;
        let limit = (RANDOMKEY_MAX_EXAMINED - examined).min(64);
        let range = match step {
            0 => (Bound::Included(IndexKey::start(from)), Bound::Unbounded),
            s if s == reactors => (Bound::Unbounded, Bound::Excluded(IndexKey::start(from))),
            _ => (Bound::Unbounded, Bound::Unbounded),
        };
        let (key, seen) = tx
            .on_reactor(index, move |ctx, _| {
                let rows = ctx.scan(&KEY_INDEX, range, ScanDirection::Forward, limit)?;
                let seen = rows.len();
                for (row, ()) in rows {
                    if live_of_kind(ctx, &row.key, now, None)? {
                        return Ok((Some(row.key), seen));
                    }
                }
                Ok((None, seen))
            })
            .await?;
        if let Some(key) = key {
            return Ok(Frame::Bulk(key));
        }
        examined += seen;
    }
    Ok(Frame::Null)
}

impl Store {
    /// FLUSHALL outside MULTI: every reactor emptied in transactions of at
    /// most [`FLUSH_BATCH`] keys (see the module's doc).
    pub(crate) async fn flush_all(&self) -> Result<(), ReactorError> {
        for index in 0..self.reactor_count() {
            loop {
                let op = Op::Key(KeyOp::FlushReactor {
                    index,
                    limit: FLUSH_BATCH,
                });
                let replies = self.run_at(index, Arc::new(vec![op])).await?;
                match replies.as_deref() {
                    Some([Frame::Integer(n)]) if (*n as usize) >= FLUSH_BATCH => continue,
                    _ => break,
                }
            }
        }
        Ok(())
    }
}

/// FLUSHALL inside a transaction: every key, or an error (deleting nothing)
/// past [`FLUSH_IN_TRANSACTION_MAX`].
async fn flush_in_transaction(tx: &Tx) -> Result<Frame, ReactorError> {
    let mut per_reactor = Vec::with_capacity(tx.reactor_count());
    let mut total = 0;
    for index in 0..tx.reactor_count() {
        let limit = FLUSH_IN_TRANSACTION_MAX - total + 1;
        let keys: Vec<Vec<u8>> = tx
            .on_reactor(index, move |ctx, _| {
                let rows = ctx.scan(&KEY_INDEX, .., ScanDirection::Forward, limit)?;
                Ok(rows.into_iter().map(|(row, ())| row.key).collect())
            })
            .await?;
        total += keys.len();
        if total > FLUSH_IN_TRANSACTION_MAX {
            return Ok(Frame::error(format!(
                "ERR FLUSHALL inside MULTI/EXEC deletes at most {FLUSH_IN_TRANSACTION_MAX} keys: run it outside MULTI"
            )));
        }
        per_reactor.push(keys);
    }
    for (index, keys) in per_reactor.into_iter().enumerate() {
        if keys.is_empty() {
            continue;
        }
        let (_, change) = tx
            .on_reactor(index, move |ctx, _| delete_rows(ctx, keys))
            .await?;
        tx.note(change);
    }
    Ok(Frame::ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siphash_reference_vectors() {
        // The reference implementation's key 00 01 .. 0f.
        let (k0, k1) = (0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908);
        assert_eq!(siphash24(k0, k1, b""), 0x726f_db47_dd0e_0e31);
        let fifteen: Vec<u8> = (0..15).collect();
        assert_eq!(siphash24(k0, k1, &fifteen), 0xa129_ca61_49be_45e5);
        let sixty_three: Vec<u8> = (0..63).collect();
        assert_eq!(siphash24(k0, k1, &sixty_three), 0x958a_324c_eb06_4572);
    }

    #[test]
    fn positions_fit_the_cursor_and_spread() {
        let mut buckets = [0usize; 16];
        for i in 0..16_000 {
            let pos = scan_position(format!("key:{i}").as_bytes());
            assert!(pos <= POSITION_MASK);
            buckets[(pos >> (POSITION_BITS - 4)) as usize] += 1;
        }
        assert!(buckets.iter().all(|&b| b > 800), "{buckets:?}");
        assert_eq!(cursor(0, 0), 0);
        assert_eq!(cursor(3, 5), (3 << 48) | 5);
    }

    #[test]
    fn index_rows_sort_by_position_then_key() {
        let encode = |k: &IndexKey| {
            let mut out = Vec::new();
            k.encode_into(&mut out);
            out
        };
        let a = IndexKey {
            pos: 1,
            key: b"zz".to_vec(),
        };
        let b = IndexKey {
            pos: 2,
            key: b"a".to_vec(),
        };
        assert!(encode(&IndexKey::start(1)) < encode(&a));
        assert!(encode(&a) < encode(&b));
        let bytes = encode(&b);
        assert_eq!(IndexKey::decode_from(&mut bytes.as_slice()).unwrap(), b);
    }

    #[test]
    fn globs_match_as_redis_does() {
        let cases: &[(&str, &str, bool)] = &[
            ("*", "anything", true),
            ("h?llo", "hello", true),
            ("h?llo", "hllo", false),
            ("h*llo", "hllo", true),
            ("h*llo", "heeeello", true),
            ("h[ae]llo", "hello", true),
            ("h[ae]llo", "hillo", false),
            ("h[^e]llo", "hallo", true),
            ("h[^e]llo", "hello", false),
            ("h[a-b]llo", "hbllo", true),
            ("h[b-a]llo", "hallo", true),
            ("h\\*llo", "h*llo", true),
            ("h\\*llo", "hello", false),
            ("user:*", "user:1", true),
            ("user:*", "user", false),
            ("*:*", "a:b", true),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXbY", false),
            ("[abc", "a", true),
            ("[abc", "ab", false),
            ("a**", "a", true),
            ("**", "", false),
            ("", "", true),
            ("a[\\]]b", "a]b", true),
            ("\\", "\\", true),
        ];
        for (pattern, string, expected) in cases {
            assert_eq!(
                glob_match(pattern.as_bytes(), string.as_bytes()),
                *expected,
                "{pattern} ~ {string}"
            );
        }
        // Many stars against a long string stay fast (the skip rule).
        let pattern = "*a".repeat(50) + "b";
        assert!(!glob_match(pattern.as_bytes(), &[b'a'; 200]));
        // Past 1000 nested stars nothing matches.
        let deep = "*x".repeat(1100);
        assert!(!glob_match(deep.as_bytes(), &b"x".repeat(1100)));
    }

    #[test]
    fn encodings() {
        assert_eq!(encoding(&Value::Int(5)), "int");
        assert_eq!(encoding(&Value::Str(b"123".to_vec())), "int");
        assert_eq!(encoding(&Value::Str(b"0123".to_vec())), "embstr");
        assert_eq!(encoding(&Value::Str(vec![b'a'; 45])), "raw");
        assert_eq!(encoding(&Value::List(Default::default())), "quicklist");
        assert_eq!(encoding(&Value::Hash(200)), "hashtable");
        assert_eq!(Value::Counter(Vec::new()).type_name(), "bcounter");
    }
}

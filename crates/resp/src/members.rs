//! Hashes, sets and sorted sets as rows: one row per field or member,
//! beside the key's entry.
//!
//! A hash's, set's or sorted set's entry in `kv` holds its cardinality
//! alone ([`Value::Hash`], [`Value::Set`], [`Value::ZSet`]); its fields or
//! members are rows of four ordered relations of the key's reactor, so
//! adding, changing or removing one writes that one's rows and the small
//! entry, never the whole collection:
//! - `hash_fields`: `(key, position, field)` to the field's value;
//! - `set_members`: `(key, position, member)` to `()`;
//! - `zset_members`: `(key, position, member)` to the member's score;
//! - `zset_scores`: `(key, score, member)` to `()`: the order ZRANGE,
//!   ZRANK, ZCOUNT and ZPOPMIN walk.
//!
//! A hash's field is a "member" below: it is stored, scanned, copied and
//! dropped as a set's member is, with its value beside it.
//!
//! A row key starts with the key's length (2 bytes) and bytes, so one key's
//! rows are one contiguous range of each relation and no key's range holds
//! another key's rows. `position` is the member's scan position (the 48
//! bits of SipHash the key index uses, [`keyspace::scan_position`]), so
//! HSCAN, SSCAN and ZSCAN have SCAN's cursor and guarantees: a member present for
//! the whole scan is returned exactly once. A score is stored as 8 bytes
//! that sort as the doubles do (`-inf` first), with `-0` stored as `0`
//! (Redis's small sorted sets, listpacks, do the same; its large ones keep
//! `-0`).
//!
//! **What walks cost.** The storage engine's ordered index is a B+-tree
//! without counts in its nodes, so a rank is found by walking rows, in
//! chunks of [`CHUNK`] (bounded memory): ZRANK walks from both ends at once
//! and stops at the member, `O(min(rank, n - rank))`; a range by rank walks
//! from the nearer end, `O(min(start, n - stop) + returned)`; ZCOUNT and
//! ZLEXCOUNT walk what they count. A range by score or lex seeks its start
//! in `O(log n)`. Deleting, overwriting, renaming or copying a collection
//! (DEL, expiry, FLUSHALL, SET over it, RENAME, COPY) walks all its rows in
//! that transaction, `O(n)` (Redis's RENAME is `O(1)`), bounded like any
//! transaction by the storage engine's 1 GiB write arena.
//!
//! **Who keeps the rows in step.** Every write of an entry goes through
//! `store::modify_row`, which drops a collection's rows when its entry is
//! deleted or replaced by a value of another kind, and keeps them when the
//! write is the collection's own (the commands here maintain the rows
//! themselves). An entry read for its header alone still gives a hash's,
//! set's or sorted set's value whole (its count: a few bytes), so DEL, FLUSHALL, the
//! expiry sweep and these commands know a key's kind without decoding
//! another value (a string of 8 MiB, say).

use std::ops::Bound;

use roost_reactor::{KeyCodec, KeyDecodeError, ReactorCtx, ReactorError, ScanDirection};

use crate::expiry::is_expired;
use crate::keyspace::{glob_match, scan_position, POSITION_BITS};
use crate::protocol::Frame;
use crate::store::{
    index_rows, modify_row, After, Entry, Shared, Value, Write, KV, REACTOR_TYPE, WRONGTYPE,
};
use crate::store::{KvKey, RowChange};
use roost_reactor::RelationDef;
use serde::{Deserialize, Serialize};

/// Longest member accepted: a row key holds the key (up to 1 KiB), a score
/// or position and the member, within the storage engine's 4 KiB keys.
pub const MAX_MEMBER_BYTES: usize = 2048;

/// A member argument longer than [`MAX_MEMBER_BYTES`] is refused.
pub(crate) fn check_member(member: &[u8]) -> Result<(), Frame> {
    if member.len() > MAX_MEMBER_BYTES {
        return Err(Frame::error(format!(
            "ERR member is longer than {MAX_MEMBER_BYTES} bytes"
        )));
    }
    Ok(())
}

pub(crate) fn check_members(members: &[Vec<u8>]) -> Result<(), Frame> {
    members.iter().try_for_each(|m| check_member(m))
}

/// HSCAN's, SSCAN's and ZSCAN's options, as Redis's SCAN reads them.
#[derive(Debug, Clone)]
pub(crate) struct ScanOptions {
    pub(crate) pattern: Option<Vec<u8>>,
    pub(crate) count: usize,
}

/// `[MATCH pattern] [COUNT count]`: COUNT below 1 is a syntax error, above
/// `SCAN_MAX_COUNT` counts as that.
pub(crate) fn parse_scan_options(a: &[Vec<u8>]) -> Result<ScanOptions, Frame> {
    let mut options = ScanOptions {
        pattern: None,
        count: 10,
    };
    let mut i = 0;
    while i < a.len() {
        let has_value = i + 1 < a.len();
        match a[i].to_ascii_lowercase().as_slice() {
            b"count" if has_value => {
                let count = crate::commands::integer(&a[i + 1])?;
                if count < 1 {
                    return Err(crate::commands::syntax_error());
                }
                options.count = usize::try_from(count)
                    .unwrap_or(usize::MAX)
                    .min(crate::keyspace::SCAN_MAX_COUNT);
            }
            b"match" if has_value => {
                options.pattern = (a[i + 1].as_slice() != b"*").then(|| a[i + 1].clone());
            }
            _ => return Err(crate::commands::syntax_error()),
        }
        i += 2;
    }
    Ok(options)
}

/// A lex interval's range, whose rows are kept only if their member is in
/// it (see [`LexRange::bounds`]).
fn lex_filter(interval: &Interval) -> Option<&LexRange> {
    match interval {
        Interval::Lex(range) => Some(range),
        Interval::Score(_) => None,
    }
}

/// Rows a walk reads at a time.
pub(crate) const CHUNK: usize = 512;

/// Past the last position: a cursor's end.
const POSITION_END: u64 = 1 << POSITION_BITS;

/// A hash's fields and their values.
pub(crate) static HASH_FIELDS: RelationDef<MemberKey, FieldValue> =
    RelationDef::new(REACTOR_TYPE, "hash_fields");
/// A set's members.
pub(crate) static SET_MEMBERS: RelationDef<MemberKey, ()> =
    RelationDef::new(REACTOR_TYPE, "set_members");
/// A sorted set's members and their scores.
pub(crate) static ZSET_MEMBERS: RelationDef<MemberKey, f64> =
    RelationDef::new(REACTOR_TYPE, "zset_members");
/// A sorted set's members in (score, member) order.
pub(crate) static ZSET_SCORES: RelationDef<ScoreKey, ()> =
    RelationDef::new(REACTOR_TYPE, "zset_scores");

/// A hash field's value as its row stores it: the bytes as serde bytes
/// (copied at once, not byte by byte).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FieldValue(#[serde(with = "crate::store::raw_bytes")] pub(crate) Vec<u8>);

/// Which member rows a value has beside its entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Members {
    None,
    Hash,
    Set,
    ZSet,
}

/// A hash's field and its value.
pub(crate) type Field = (Vec<u8>, Vec<u8>);

/// What a member row carries beside its member, as [`copy_chunk`] reads
/// it: nothing (a set's), a score or a field's value.
#[derive(Debug, Clone)]
pub(crate) enum RowData {
    Member,
    Score(f64),
    Value(FieldValue),
}

fn encode_key_prefix(key: &[u8], out: &mut Vec<u8>) {
    // Keys are at most 1 KiB (checked when parsed).
    let len = u16::try_from(key.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(key);
}

fn decode_key_prefix(input: &mut &[u8]) -> Result<Vec<u8>, KeyDecodeError> {
    if input.len() < 2 {
        return Err(KeyDecodeError::Truncated {
            what: "key length",
            at: input.len(),
        });
    }
    let len = usize::from(u16::from_be_bytes([input[0], input[1]]));
    if input.len() < 2 + len + 8 {
        return Err(KeyDecodeError::Truncated {
            what: "member row",
            at: input.len(),
        });
    }
    let key = input[2..2 + len].to_vec();
    *input = &input[2 + len..];
    Ok(key)
}

fn take_u64(input: &mut &[u8]) -> u64 {
    let (head, rest) = input.split_at(8);
    *input = rest;
    u64::from_be_bytes(head.try_into().expect("8 bytes"))
}

/// A row of `hash_fields`, `set_members` or `zset_members`: key, member's
/// (field's) scan position, member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemberKey {
    pub(crate) key: Vec<u8>,
    pub(crate) pos: u64,
    pub(crate) member: Vec<u8>,
}

impl MemberKey {
    pub(crate) fn of(key: &[u8], member: &[u8]) -> MemberKey {
        MemberKey {
            key: key.to_vec(),
            pos: scan_position(member),
            member: member.to_vec(),
        }
    }

    /// Before every member of `key` at position `pos` or later.
    fn at(key: &[u8], pos: u64) -> MemberKey {
        MemberKey {
            key: key.to_vec(),
            pos,
            member: Vec::new(),
        }
    }

    /// After every member of `key` (positions are below 2^48).
    fn end(key: &[u8]) -> MemberKey {
        MemberKey::at(key, u64::MAX)
    }
}

impl KeyCodec for MemberKey {
    fn encode_into(&self, out: &mut Vec<u8>) {
        encode_key_prefix(&self.key, out);
        out.extend_from_slice(&self.pos.to_be_bytes());
        out.extend_from_slice(&self.member);
    }

    fn decode_from(input: &mut &[u8]) -> Result<Self, KeyDecodeError> {
        let key = decode_key_prefix(input)?;
        let pos = take_u64(input);
        let member = std::mem::take(input).to_vec();
        Ok(MemberKey { key, pos, member })
    }
}

/// A row of `zset_scores`: key, score (as [`score_bits`]), member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScoreKey {
    pub(crate) key: Vec<u8>,
    pub(crate) bits: u64,
    pub(crate) member: Vec<u8>,
}

impl ScoreKey {
    pub(crate) fn of(key: &[u8], score: f64, member: &[u8]) -> ScoreKey {
        ScoreKey {
            key: key.to_vec(),
            bits: score_bits(score),
            member: member.to_vec(),
        }
    }

    pub(crate) fn score(&self) -> f64 {
        score_of(self.bits)
    }

    /// Before every row of `key` (no score sorts below 0).
    fn start(key: &[u8]) -> ScoreKey {
        ScoreKey {
            key: key.to_vec(),
            bits: 0,
            member: Vec::new(),
        }
    }

    /// After every row of `key` (`u64::MAX` is a NaN's, never stored).
    fn end(key: &[u8]) -> ScoreKey {
        ScoreKey {
            key: key.to_vec(),
            bits: u64::MAX,
            member: Vec::new(),
        }
    }
}

impl KeyCodec for ScoreKey {
    fn encode_into(&self, out: &mut Vec<u8>) {
        encode_key_prefix(&self.key, out);
        out.extend_from_slice(&self.bits.to_be_bytes());
        out.extend_from_slice(&self.member);
    }

    fn decode_from(input: &mut &[u8]) -> Result<Self, KeyDecodeError> {
        let key = decode_key_prefix(input)?;
        let bits = take_u64(input);
        let member = std::mem::take(input).to_vec();
        Ok(ScoreKey { key, bits, member })
    }
}

/// A score as 8 bytes that sort as the doubles do (no NaN; `-0` as `0`).
pub(crate) fn score_bits(score: f64) -> u64 {
    let bits = (score + 0.0).to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    }
}

pub(crate) fn score_of(bits: u64) -> f64 {
    if bits >> 63 == 1 {
        f64::from_bits(bits & !(1 << 63))
    } else {
        f64::from_bits(!bits)
    }
}

/// A bound of a score range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ScoreBound {
    pub(crate) score: f64,
    pub(crate) exclusive: bool,
}

/// A range of scores (ZRANGEBYSCORE's `min max`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ScoreRange {
    pub(crate) min: ScoreBound,
    pub(crate) max: ScoreBound,
}

impl ScoreRange {
    /// Whether no score is in the range.
    pub(crate) fn is_empty(&self) -> bool {
        self.min.score > self.max.score
            || (self.min.score == self.max.score && (self.min.exclusive || self.max.exclusive))
    }

    /// The range as bounds of `key`'s `zset_scores` rows.
    fn bounds(&self, key: &[u8]) -> RowBounds {
        let at = |score: f64, bits_past: bool| ScoreKey {
            key: key.to_vec(),
            bits: score_bits(score) + u64::from(bits_past),
            member: Vec::new(),
        };
        // `bits + 1`: past every member of that score (a finite score's
        // successor is the next double, +inf's a NaN's, never stored).
        let lower = Bound::Included(at(self.min.score, self.min.exclusive));
        let upper = Bound::Excluded(at(self.max.score, !self.max.exclusive));
        (lower, upper)
    }
}

/// A bound of a lex range: `-`, `+`, `[member` or `(member`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LexBound {
    Min,
    Max,
    Inclusive(Vec<u8>),
    Exclusive(Vec<u8>),
}

/// A range of members (ZRANGEBYLEX's `min max`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LexRange {
    pub(crate) min: LexBound,
    pub(crate) max: LexBound,
}

impl LexRange {
    pub(crate) fn is_empty(&self) -> bool {
        use LexBound::*;
        match (&self.min, &self.max) {
            (Max, _) | (_, Min) => true,
            (Min, _) | (_, Max) => false,
            (Inclusive(a), Inclusive(b)) => a > b,
            (Inclusive(a) | Exclusive(a), Inclusive(b) | Exclusive(b)) => a >= b,
        }
    }

    /// Whether `member` is inside the range.
    pub(crate) fn contains(&self, member: &[u8]) -> bool {
        let above_min = match &self.min {
            LexBound::Min => true,
            LexBound::Max => false,
            LexBound::Inclusive(m) => member >= m.as_slice(),
            LexBound::Exclusive(m) => member > m.as_slice(),
        };
        let below_max = match &self.max {
            LexBound::Max => true,
            LexBound::Min => false,
            LexBound::Inclusive(m) => member <= m.as_slice(),
            LexBound::Exclusive(m) => member < m.as_slice(),
        };
        above_min && below_max
    }

    /// The range as bounds of `key`'s `zset_scores` rows: Redis ranks by
    /// member only when every score is the same, so the bounds are taken at
    /// the first row's score (`low`) and the last row's (`high`), and the
    /// rows between are kept only if their member is in the range (with
    /// different scores Redis calls the result unspecified; its walk finds
    /// none in a range past every member, and neither does this).
    fn bounds(&self, key: &[u8], low: u64, high: u64) -> RowBounds {
        let row = |bits: u64, member: &[u8]| ScoreKey {
            key: key.to_vec(),
            bits,
            member: member.to_vec(),
        };
        let lower = match &self.min {
            LexBound::Min | LexBound::Max => Bound::Included(ScoreKey::start(key)),
            LexBound::Inclusive(m) => Bound::Included(row(low, m)),
            LexBound::Exclusive(m) => Bound::Excluded(row(low, m)),
        };
        let upper = match &self.max {
            LexBound::Min | LexBound::Max => Bound::Excluded(ScoreKey::end(key)),
            LexBound::Inclusive(m) => Bound::Included(row(high, m)),
            LexBound::Exclusive(m) => Bound::Excluded(row(high, m)),
        };
        (lower, upper)
    }
}

/// Bounds of a range of `zset_scores` rows.
type RowBounds = (Bound<ScoreKey>, Bound<ScoreKey>);

/// What one HSCAN/SSCAN/ZSCAN call found: the next cursor, and the members
/// with what their rows carry (a score, a field's value; `()` for a set).
pub(crate) type ScanStep<V> = (u64, Vec<(Vec<u8>, V)>);

/// A range of a sorted set's rows in (score, member) order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Interval {
    Score(ScoreRange),
    Lex(LexRange),
}

/// A command's failure inside a key's reactor: its error reply (given
/// before any row was written), or the transaction's error.
#[derive(Debug)]
pub(crate) enum Fail {
    Reply(Frame),
    Tx(ReactorError),
}

impl From<ReactorError> for Fail {
    fn from(e: ReactorError) -> Fail {
        Fail::Tx(e)
    }
}

impl From<Frame> for Fail {
    fn from(frame: Frame) -> Fail {
        Fail::Reply(frame)
    }
}

/// What a collection command found under its key.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Found {
    /// Members (0: the key is absent).
    pub(crate) len: u64,
    pub(crate) deadline: i64,
}

/// Drops every member row of `key` (its value was of `kind`).
pub(crate) fn drop_all(ctx: &ReactorCtx, key: &[u8], kind: Members) -> Result<(), ReactorError> {
    match kind {
        Members::None => Ok(()),
        Members::Hash => walk(
            ctx,
            &HASH_FIELDS,
            (
                Bound::Included(MemberKey::at(key, 0)),
                Bound::Excluded(MemberKey::end(key)),
            ),
            ScanDirection::Forward,
            |row, _| {
                ctx.delete(&HASH_FIELDS, &row)?;
                Ok(true)
            },
        ),
        Members::Set => walk(
            ctx,
            &SET_MEMBERS,
            (
                Bound::Included(MemberKey::at(key, 0)),
                Bound::Excluded(MemberKey::end(key)),
            ),
            ScanDirection::Forward,
            |row, ()| {
                ctx.delete(&SET_MEMBERS, &row)?;
                Ok(true)
            },
        ),
        Members::ZSet => walk(
            ctx,
            &ZSET_MEMBERS,
            (
                Bound::Included(MemberKey::at(key, 0)),
                Bound::Excluded(MemberKey::end(key)),
            ),
            ScanDirection::Forward,
            |row, score| {
                ctx.delete(&ZSET_SCORES, &ScoreKey::of(key, score, &row.member))?;
                ctx.delete(&ZSET_MEMBERS, &row)?;
                Ok(true)
            },
        ),
    }
}

/// Visits the rows of `range` in `direction`, [`CHUNK`] at a time, until
/// `visit` returns `false`. A visit may delete the row it is given.
fn walk<K: KeyCodec + Clone, V: serde::de::DeserializeOwned>(
    ctx: &ReactorCtx,
    def: &RelationDef<K, V>,
    range: (Bound<K>, Bound<K>),
    direction: ScanDirection,
    visit: impl FnMut(K, V) -> Result<bool, ReactorError>,
) -> Result<(), ReactorError> {
    walk_from(ctx, def, range, direction, CHUNK, visit)
}

/// [`walk`] whose first chunk is `first_chunk` rows (at most [`CHUNK`]): a
/// walk that wants a few rows (ZPOPMIN's one) reads those, not a chunk
/// (each row read is decoded and joins the transaction's read set, which a
/// concurrent change of any of them aborts).
fn walk_from<K: KeyCodec + Clone, V: serde::de::DeserializeOwned>(
    ctx: &ReactorCtx,
    def: &RelationDef<K, V>,
    range: (Bound<K>, Bound<K>),
    direction: ScanDirection,
    first_chunk: usize,
    mut visit: impl FnMut(K, V) -> Result<bool, ReactorError>,
) -> Result<(), ReactorError> {
    let (mut lower, mut upper) = range;
    let mut chunk = first_chunk.clamp(1, CHUNK);
    loop {
        let rows = ctx.scan(def, (lower.clone(), upper.clone()), direction, chunk)?;
        let full = rows.len() == chunk;
        chunk = CHUNK;
        let Some((last, _)) = rows.last() else {
            return Ok(());
        };
        match direction {
            ScanDirection::Forward => lower = Bound::Excluded(last.clone()),
            ScanDirection::Reverse => upper = Bound::Excluded(last.clone()),
        }
        for (key, value) in rows {
            if !visit(key, value)? {
                return Ok(());
            }
        }
        if !full {
            return Ok(());
        }
    }
}

/// A key's rows in its reactor, inside a transaction: what the hash, set
/// and sorted-set commands run on.
pub(crate) struct KeyRows<'a> {
    pub(crate) ctx: &'a ReactorCtx,
    shared: &'a Shared,
    key: &'a Vec<u8>,
    now: i64,
    /// What this command's writes did to the keyspace's counts.
    pub(crate) change: RowChange,
}

impl<'a> KeyRows<'a> {
    pub(crate) fn new(
        ctx: &'a ReactorCtx,
        shared: &'a Shared,
        key: &'a Vec<u8>,
        now: i64,
    ) -> KeyRows<'a> {
        KeyRows {
            ctx,
            shared,
            key,
            now,
            change: RowChange::default(),
        }
    }

    /// The stored entry, a collection's whole, another value's header only
    /// (a command here needs no more of it than its type).
    fn stored(&self) -> Result<Option<Entry>, ReactorError> {
        crate::store::headers_only(|| self.ctx.get(&KV, KvKey::from_ref(self.key)))
    }

    /// The key's collection of `kind` as the transaction sees it (`None`:
    /// absent or expired), or WRONGTYPE. Never writes.
    pub(crate) fn read(&self, kind: Members) -> Result<Option<Found>, Fail> {
        match self.stored()? {
            None => Ok(None),
            Some(entry) if is_expired(entry.deadline, self.now) => Ok(None),
            Some(entry) => Ok(Some(found_of(&entry, kind)?)),
        }
    }

    /// The key's set or sorted set (ZUNION's inputs): its kind and size;
    /// `None`: absent or expired; another type is WRONGTYPE.
    pub(crate) fn read_any(&self) -> Result<Option<(Members, Found)>, Fail> {
        let Some(entry) = self.stored()? else {
            return Ok(None);
        };
        if is_expired(entry.deadline, self.now) {
            return Ok(None);
        }
        let kind = entry.value.members();
        if !matches!(kind, Members::Set | Members::ZSet) {
            return Err(Fail::Reply(Frame::error(WRONGTYPE)));
        }
        Ok(Some((kind, found_of(&entry, kind)?)))
    }

    /// [`read`](Self::read) for a write: an expired entry is reclaimed
    /// first (with its rows), so the command starts from an absent key
    /// (`len` 0).
    pub(crate) fn open(&mut self, kind: Members) -> Result<Found, Fail> {
        match self.stored()? {
            None => Ok(Found::default()),
            Some(entry) if is_expired(entry.deadline, self.now) => {
                drop_all(self.ctx, self.key, entry.value.members())?;
                let change = index_rows(
                    self.ctx,
                    KvKey::from_ref(self.key),
                    Some((entry.deadline, true)),
                    After::Delete,
                )?;
                self.change.add(change);
                Ok(Found::default())
            }
            Some(entry) => Ok(found_of(&entry, kind)?),
        }
    }

    /// Writes the entry after the command changed the rows: `len` members
    /// now (0 deletes the key), keeping the deadline. Without `changed`,
    /// nothing (the entry's stamp stays, as for a write that did nothing).
    pub(crate) fn close(
        &mut self,
        kind: Members,
        found: Found,
        len: u64,
        changed: bool,
    ) -> Result<(), ReactorError> {
        if !changed || (len == 0 && found.len == 0) {
            return Ok(());
        }
        let write = match (len, kind) {
            (0, _) => Write::Delete,
            (_, Members::Hash) => Write::Put(Value::Hash(len), found.deadline),
            (_, Members::Set) => Write::Put(Value::Set(len), found.deadline),
            (_, Members::ZSet) => Write::Put(Value::ZSet(len), found.deadline),
            (_, Members::None) => unreachable!("a collection's entry"),
        };
        self.write(write)
    }

    /// Deletes whatever the key holds, with its rows (a STORE command's
    /// destination), expired or not.
    pub(crate) fn clear(&mut self) -> Result<(), ReactorError> {
        self.write(Write::Delete)
    }

    fn write(&mut self, write: Write) -> Result<(), ReactorError> {
        let now = self.now;
        let ((), change) = modify_row(
            self.ctx,
            self.shared,
            KvKey::from_ref(self.key),
            &|| now,
            true,
            |_| (write, ()),
        )?;
        self.change.add(change);
        Ok(())
    }

    fn all_members(&self) -> (Bound<MemberKey>, Bound<MemberKey>) {
        (
            Bound::Included(MemberKey::at(self.key, 0)),
            Bound::Excluded(MemberKey::end(self.key)),
        )
    }

    // ---- sets ----

    pub(crate) fn set_contains(&self, member: &[u8]) -> Result<bool, ReactorError> {
        Ok(self
            .ctx
            .get(&SET_MEMBERS, &MemberKey::of(self.key, member))?
            .is_some())
    }

    /// Adds `member`; whether it was new.
    pub(crate) fn set_add(&self, member: &[u8]) -> Result<bool, ReactorError> {
        self.ctx.modify(
            &SET_MEMBERS,
            &MemberKey::of(self.key, member),
            |old| match old {
                Some(()) => (None, false),
                None => (Some(()), true),
            },
        )
    }

    /// Removes `member`; whether it was there.
    pub(crate) fn set_remove(&self, member: &[u8]) -> Result<bool, ReactorError> {
        self.ctx
            .delete(&SET_MEMBERS, &MemberKey::of(self.key, member))
    }

    /// Every member, in position order.
    pub(crate) fn set_members(&self) -> Result<Vec<Vec<u8>>, ReactorError> {
        let mut members = Vec::new();
        walk(
            self.ctx,
            &SET_MEMBERS,
            self.all_members(),
            ScanDirection::Forward,
            |row, ()| {
                members.push(row.member);
                Ok(true)
            },
        )?;
        Ok(members)
    }

    /// A random member of a set that has one (`None` only if it has none):
    /// the first at or after a random position, wrapping around. Members
    /// after a wide gap of positions come up more often; the positions are
    /// a keyed hash, so no client can choose which.
    pub(crate) fn set_random(&self) -> Result<Option<Vec<u8>>, ReactorError> {
        Ok(self.random_row(&SET_MEMBERS)?.map(|(member, ())| member))
    }

    /// The row of `def` at or after a random position of this key's,
    /// wrapping around (see [`set_random`](Self::set_random)).
    fn random_row<V: serde::de::DeserializeOwned>(
        &self,
        def: &RelationDef<MemberKey, V>,
    ) -> Result<Option<(Vec<u8>, V)>, ReactorError> {
        let from = rand::random::<u64>() % POSITION_END;
        let end = Bound::Excluded(MemberKey::end(self.key));
        let after = self.ctx.scan(
            def,
            (Bound::Included(MemberKey::at(self.key, from)), end),
            ScanDirection::Forward,
            1,
        )?;
        let found = match after.into_iter().next() {
            Some(row) => Some(row),
            None => self
                .ctx
                .scan(def, self.all_members(), ScanDirection::Forward, 1)?
                .into_iter()
                .next(),
        };
        Ok(found.map(|(row, value)| (row.member, value)))
    }

    // ---- hashes ----

    /// `field`'s value, `None`: no such field.
    pub(crate) fn hget(&self, field: &[u8]) -> Result<Option<Vec<u8>>, ReactorError> {
        Ok(self
            .ctx
            .get(&HASH_FIELDS, &MemberKey::of(self.key, field))?
            .map(|v| v.0))
    }

    /// Whether `field` is there (its value is not read).
    pub(crate) fn hcontains(&self, field: &[u8]) -> Result<bool, ReactorError> {
        Ok(self
            .ctx
            .get(&HASH_FIELDS, &MemberKey::of(self.key, field))?
            .is_some())
    }

    /// Sets `field` to `value`; whether the field is new.
    pub(crate) fn hput(&self, field: &[u8], value: &[u8]) -> Result<bool, ReactorError> {
        let value = FieldValue(value.to_vec());
        self.ctx
            .modify(&HASH_FIELDS, &MemberKey::of(self.key, field), |old| {
                (Some(value), old.is_none())
            })
    }

    /// Removes `field`; whether it was there.
    pub(crate) fn hremove(&self, field: &[u8]) -> Result<bool, ReactorError> {
        self.ctx
            .delete(&HASH_FIELDS, &MemberKey::of(self.key, field))
    }

    /// Every field and its value, in position order.
    pub(crate) fn hfields(&self) -> Result<Vec<Field>, ReactorError> {
        let mut fields = Vec::new();
        walk(
            self.ctx,
            &HASH_FIELDS,
            self.all_members(),
            ScanDirection::Forward,
            |row, value| {
                fields.push((row.member, value.0));
                Ok(true)
            },
        )?;
        Ok(fields)
    }

    /// A random field and its value, as [`set_random`](Self::set_random)
    /// picks a member.
    pub(crate) fn hrandom(&self) -> Result<Option<Field>, ReactorError> {
        Ok(self
            .random_row(&HASH_FIELDS)?
            .map(|(field, value)| (field, value.0)))
    }

    // ---- sorted sets ----

    pub(crate) fn zscore(&self, member: &[u8]) -> Result<Option<f64>, ReactorError> {
        self.ctx
            .get(&ZSET_MEMBERS, &MemberKey::of(self.key, member))
    }

    /// Sets `member`'s score (`old`: its score now, `None`: not a member).
    pub(crate) fn zput(
        &self,
        member: &[u8],
        score: f64,
        old: Option<f64>,
    ) -> Result<(), ReactorError> {
        let score = score + 0.0;
        match old {
            Some(old) if score_bits(old) == score_bits(score) => return Ok(()),
            Some(old) => {
                self.ctx
                    .delete(&ZSET_SCORES, &ScoreKey::of(self.key, old, member))?;
            }
            None => {}
        }
        self.ctx
            .put(&ZSET_MEMBERS, &MemberKey::of(self.key, member), &score)?;
        self.ctx
            .put(&ZSET_SCORES, &ScoreKey::of(self.key, score, member), &())
    }

    /// Removes `member`; its score if it was there.
    pub(crate) fn zremove(&self, member: &[u8]) -> Result<Option<f64>, ReactorError> {
        let row = MemberKey::of(self.key, member);
        let Some(score) = self.ctx.get(&ZSET_MEMBERS, &row)? else {
            return Ok(None);
        };
        self.ctx.delete(&ZSET_MEMBERS, &row)?;
        self.ctx
            .delete(&ZSET_SCORES, &ScoreKey::of(self.key, score, member))?;
        Ok(Some(score))
    }

    /// A random member and its score, as [`set_random`](Self::set_random)
    /// picks a member.
    pub(crate) fn zrandom(&self) -> Result<Option<(Vec<u8>, f64)>, ReactorError> {
        self.random_row(&ZSET_MEMBERS)
    }

    /// Every member and its score, in position order.
    pub(crate) fn zmembers(&self) -> Result<Vec<(Vec<u8>, f64)>, ReactorError> {
        let mut members = Vec::new();
        walk(
            self.ctx,
            &ZSET_MEMBERS,
            self.all_members(),
            ScanDirection::Forward,
            |row, score| {
                members.push((row.member, score));
                Ok(true)
            },
        )?;
        Ok(members)
    }

    /// The first row of the sorted set in `direction`.
    fn zedge(&self, direction: ScanDirection) -> Result<Option<ScoreKey>, ReactorError> {
        Ok(self
            .ctx
            .scan(
                &ZSET_SCORES,
                (
                    Bound::Included(ScoreKey::start(self.key)),
                    Bound::Excluded(ScoreKey::end(self.key)),
                ),
                direction,
                1,
            )?
            .into_iter()
            .next()
            .map(|(row, ())| row))
    }

    /// The bounds of `interval` over this key's rows (`None`: empty).
    fn interval_bounds(&self, interval: &Interval) -> Result<Option<RowBounds>, ReactorError> {
        Ok(match interval {
            Interval::Score(range) if range.is_empty() => None,
            Interval::Score(range) => Some(range.bounds(self.key)),
            Interval::Lex(range) if range.is_empty() => None,
            Interval::Lex(range) => {
                let (Some(low), Some(high)) = (
                    self.zedge(ScanDirection::Forward)?,
                    self.zedge(ScanDirection::Reverse)?,
                ) else {
                    return Ok(None);
                };
                Some(range.bounds(self.key, low.bits, high.bits))
            }
        })
    }

    /// The rows of `interval` in `direction` (backward: from its high end),
    /// after skipping `skip`, at most `take`: `(member, score)`.
    pub(crate) fn zinterval(
        &self,
        interval: &Interval,
        direction: ScanDirection,
        skip: u64,
        take: u64,
    ) -> Result<Vec<(Vec<u8>, f64)>, ReactorError> {
        let Some(bounds) = self.interval_bounds(interval)? else {
            return Ok(Vec::new());
        };
        self.zwalk(bounds, direction, skip, take, lex_filter(interval))
    }

    /// How many rows `interval` holds (walks them).
    pub(crate) fn zcount(&self, interval: &Interval) -> Result<u64, ReactorError> {
        let Some(bounds) = self.interval_bounds(interval)? else {
            return Ok(0);
        };
        let filter = lex_filter(interval);
        let mut count = 0;
        walk(
            self.ctx,
            &ZSET_SCORES,
            bounds,
            ScanDirection::Forward,
            |row, ()| {
                if filter.is_none_or(|range| range.contains(&row.member)) {
                    count += 1;
                }
                Ok(true)
            },
        )?;
        Ok(count)
    }

    /// The rows at ranks `first..=last` (0-based, ascending order, both
    /// within the `len` rows), walking from the nearer end; ascending.
    pub(crate) fn zranks(
        &self,
        len: u64,
        first: u64,
        last: u64,
    ) -> Result<Vec<(Vec<u8>, f64)>, ReactorError> {
        let whole = (
            Bound::Included(ScoreKey::start(self.key)),
            Bound::Excluded(ScoreKey::end(self.key)),
        );
        let take = last - first + 1;
        if first <= len - 1 - last {
            self.zwalk(whole, ScanDirection::Forward, first, take, None)
        } else {
            let mut rows = self.zwalk(whole, ScanDirection::Reverse, len - 1 - last, take, None)?;
            rows.reverse();
            Ok(rows)
        }
    }

    fn zwalk(
        &self,
        bounds: RowBounds,
        direction: ScanDirection,
        mut skip: u64,
        take: u64,
        filter: Option<&LexRange>,
    ) -> Result<Vec<(Vec<u8>, f64)>, ReactorError> {
        let mut rows = Vec::new();
        if take == 0 {
            return Ok(rows);
        }
        let wanted = usize::try_from(skip.saturating_add(take)).unwrap_or(CHUNK);
        walk_from(
            self.ctx,
            &ZSET_SCORES,
            bounds,
            direction,
            wanted,
            |row, ()| {
                if filter.is_some_and(|range| !range.contains(&row.member)) {
                    return Ok(true);
                }
                if skip > 0 {
                    skip -= 1;
                    return Ok(true);
                }
                let score = row.score();
                rows.push((row.member, score));
                Ok((rows.len() as u64) < take)
            },
        )?;
        Ok(rows)
    }

    /// The 0-based ascending rank of `member` (of `score`) among `len`
    /// rows: walks from both ends at once, a chunk each in turn, until one
    /// reaches the member, so it costs `O(min(rank, len - rank))` rows.
    pub(crate) fn zrank(&self, member: &[u8], score: f64, len: u64) -> Result<u64, ReactorError> {
        let target = ScoreKey::of(self.key, score, member);
        let mut below = Bound::Included(ScoreKey::start(self.key));
        let mut above = Bound::Excluded(ScoreKey::end(self.key));
        let (mut before, mut after) = (0u64, 0u64);
        loop {
            // From the low end, up to the member.
            let rows = self.ctx.scan(
                &ZSET_SCORES,
                (below.clone(), Bound::Excluded(target.clone())),
                ScanDirection::Forward,
                CHUNK,
            )?;
            before += rows.len() as u64;
            match rows.last() {
                Some((last, ())) if rows.len() == CHUNK => below = Bound::Excluded(last.clone()),
                _ => return Ok(before),
            }
            // From the high end, down to the member.
            let rows = self.ctx.scan(
                &ZSET_SCORES,
                (Bound::Excluded(target.clone()), above.clone()),
                ScanDirection::Reverse,
                CHUNK,
            )?;
            after += rows.len() as u64;
            match rows.last() {
                Some((last, ())) if rows.len() == CHUNK => above = Bound::Excluded(last.clone()),
                _ => return Ok(len.saturating_sub(after + 1)),
            }
        }
    }

    // ---- both ----

    /// One HSCAN/SSCAN/ZSCAN call over `def`'s rows of this key: up to
    /// `count` rows from position `cursor` (plus the rest of the last
    /// position), the ones whose member matches `pattern` with what their
    /// rows carry, and the next cursor (0: done).
    pub(crate) fn scan<V: serde::de::DeserializeOwned>(
        &self,
        def: &RelationDef<MemberKey, V>,
        cursor: u64,
        count: usize,
        pattern: Option<&[u8]>,
    ) -> Result<ScanStep<V>, ReactorError> {
        if cursor >= POSITION_END {
            return Ok((0, Vec::new()));
        }
        let from = Bound::Included(MemberKey::at(self.key, cursor));
        let end = Bound::Excluded(MemberKey::end(self.key));
        let mut rows = self
            .ctx
            .scan(def, (from, end), ScanDirection::Forward, count)?;
        let mut next = 0;
        if rows.len() == count {
            let last = rows.last().expect("count is at least 1").0.clone();
            // The rest of the last position: a call ends after a whole one.
            let same = (
                Bound::Excluded(last.clone()),
                Bound::Excluded(MemberKey::at(self.key, last.pos + 1)),
            );
            rows.extend(
                self.ctx
                    .scan(def, same, ScanDirection::Forward, usize::MAX)?,
            );
            next = (last.pos + 1) % POSITION_END;
        }
        let found = rows
            .into_iter()
            .filter(|(row, _)| pattern.is_none_or(|p| glob_match(p, &row.member)))
            .map(|(row, value)| (row.member, value))
            .collect();
        Ok((next, found))
    }

    /// OBJECT ENCODING of a collection of `len` members: the encoding Redis
    /// 7.0 gives one that was built with these members (Redis never
    /// converts back, so one that shrank may say otherwise there).
    pub(crate) fn encoding(&self, kind: Members, len: u64) -> Result<&'static str, ReactorError> {
        Ok(match kind {
            // Redis 7.0's hash-max-listpack-entries and -value.
            Members::Hash if len <= 128 => {
                let fields = self.hfields()?;
                if fields.iter().all(|(f, v)| f.len() <= 64 && v.len() <= 64) {
                    "listpack"
                } else {
                    "hashtable"
                }
            }
            Members::Hash => "hashtable",
            Members::Set if len <= 512 => {
                let members = self.set_members()?;
                let ints = members
                    .iter()
                    .all(|m| m.len() <= 20 && crate::store::parse_i64(m).is_some());
                if ints {
                    "intset"
                } else {
                    "hashtable"
                }
            }
            Members::Set => "hashtable",
            Members::ZSet if len <= 128 => {
                let members = self.zmembers()?;
                if members.iter().all(|(m, _)| m.len() <= 64) {
                    "listpack"
                } else {
                    "skiplist"
                }
            }
            Members::ZSet => "skiplist",
            Members::None => "raw",
        })
    }
}

fn found_of(entry: &Entry, kind: Members) -> Result<Found, Frame> {
    match (&entry.value, kind) {
        (Value::Hash(n), Members::Hash)
        | (Value::Set(n), Members::Set)
        | (Value::ZSet(n), Members::ZSet) => Ok(Found {
            len: *n,
            deadline: entry.deadline,
        }),
        _ => Err(Frame::error(WRONGTYPE)),
    }
}

/// Copies `src`'s member rows (of `kind`, in `from`'s reactor) under `dst`
/// in `to`'s reactor, a chunk at a time: RENAME and COPY of a collection.
/// `dst` holds no rows (the caller deleted it).
pub(crate) fn copy_chunk(
    from: &ReactorCtx,
    src: &[u8],
    kind: Members,
    after: Option<MemberKey>,
) -> Result<Vec<(MemberKey, RowData)>, ReactorError> {
    let lower = match after {
        Some(row) => Bound::Excluded(row),
        None => Bound::Included(MemberKey::at(src, 0)),
    };
    let range = (lower, Bound::Excluded(MemberKey::end(src)));
    Ok(match kind {
        Members::Hash => from
            .scan(&HASH_FIELDS, range, ScanDirection::Forward, CHUNK)?
            .into_iter()
            .map(|(row, value)| (row, RowData::Value(value)))
            .collect(),
        Members::Set => from
            .scan(&SET_MEMBERS, range, ScanDirection::Forward, CHUNK)?
            .into_iter()
            .map(|(row, ())| (row, RowData::Member))
            .collect(),
        Members::ZSet => from
            .scan(&ZSET_MEMBERS, range, ScanDirection::Forward, CHUNK)?
            .into_iter()
            .map(|(row, score)| (row, RowData::Score(score)))
            .collect(),
        Members::None => Vec::new(),
    })
}

/// Writes rows [`copy_chunk`] read under `dst`.
pub(crate) fn paste_chunk(
    to: &ReactorCtx,
    dst: &[u8],
    kind: Members,
    rows: &[(MemberKey, RowData)],
) -> Result<(), ReactorError> {
    for (row, data) in rows {
        let at = MemberKey {
            key: dst.to_vec(),
            pos: row.pos,
            member: row.member.clone(),
        };
        match (kind, data) {
            (Members::Hash, RowData::Value(value)) => to.put(&HASH_FIELDS, &at, value)?,
            (Members::Set, _) => to.put(&SET_MEMBERS, &at, &())?,
            (Members::ZSet, RowData::Score(score)) => {
                to.put(&ZSET_MEMBERS, &at, score)?;
                to.put(&ZSET_SCORES, &ScoreKey::of(dst, *score, &row.member), &())?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// What [`audit`] found in one reactor's rows (all zero when the rows are
/// in step with the entries).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemberAudit {
    /// Member rows whose key holds no collection of their kind.
    pub orphaned_rows: usize,
    /// Collections whose entry's count is not their number of rows.
    pub miscounted: usize,
    /// `zset_scores` rows without the same member and score in
    /// `zset_members`, or the other way round.
    pub unindexed: usize,
}

impl MemberAudit {
    pub(crate) fn add(&mut self, other: MemberAudit) {
        self.orphaned_rows += other.orphaned_rows;
        self.miscounted += other.miscounted;
        self.unindexed += other.unindexed;
    }
}

/// Checks every member row of this reactor against the entries (tests and
/// fuzzing: it reads the whole reactor).
pub(crate) fn audit(ctx: &ReactorCtx) -> Result<MemberAudit, ReactorError> {
    use std::collections::HashMap;
    let mut audit = MemberAudit::default();
    let mut rows: HashMap<(Vec<u8>, Members), u64> = HashMap::new();
    for (row, _) in ctx.scan(&HASH_FIELDS, .., ScanDirection::Forward, usize::MAX)? {
        *rows.entry((row.key, Members::Hash)).or_default() += 1;
    }
    for (row, ()) in ctx.scan(&SET_MEMBERS, .., ScanDirection::Forward, usize::MAX)? {
        *rows.entry((row.key, Members::Set)).or_default() += 1;
    }
    let members = ctx.scan(&ZSET_MEMBERS, .., ScanDirection::Forward, usize::MAX)?;
    let index = ctx.scan(&ZSET_SCORES, .., ScanDirection::Forward, usize::MAX)?;
    let mut indexed: HashMap<(Vec<u8>, Vec<u8>), u64> = index
        .into_iter()
        .map(|(row, ())| ((row.key, row.member), row.bits))
        .collect();
    for (row, score) in members {
        match indexed.remove(&(row.key.clone(), row.member.clone())) {
            Some(bits) if bits == score_bits(score) => {}
            _ => audit.unindexed += 1,
        }
        *rows.entry((row.key, Members::ZSet)).or_default() += 1;
    }
    audit.unindexed += indexed.len();
    for ((key, kind), count) in rows {
        let entry: Option<Entry> = ctx.get(&KV, &KvKey(key))?;
        match entry.map(|e| e.value) {
            Some(Value::Hash(n)) if kind == Members::Hash => {
                audit.miscounted += usize::from(n != count);
            }
            Some(Value::Set(n)) if kind == Members::Set => {
                audit.miscounted += usize::from(n != count);
            }
            Some(Value::ZSet(n)) if kind == Members::ZSet => {
                audit.miscounted += usize::from(n != count);
            }
            _ => audit.orphaned_rows += count as usize,
        }
    }
    Ok(audit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded<K: KeyCodec>(k: &K) -> Vec<u8> {
        let mut out = Vec::new();
        k.encode_into(&mut out);
        out
    }

    #[test]
    fn scores_sort_as_doubles() {
        let scores = [
            f64::NEG_INFINITY,
            -1e300,
            -1.5,
            -5e-324,
            0.0,
            5e-324,
            1.0,
            1.5,
            1e300,
            f64::INFINITY,
        ];
        for pair in scores.windows(2) {
            assert!(score_bits(pair[0]) < score_bits(pair[1]), "{pair:?}");
        }
        for s in scores {
            assert_eq!(score_of(score_bits(s)), s);
        }
        assert_eq!(score_bits(-0.0), score_bits(0.0));
        assert!(score_of(score_bits(-0.0)).is_sign_positive());
        assert!(score_bits(f64::NEG_INFINITY) > 0);
        assert!(score_bits(f64::INFINITY) + 1 < u64::MAX);
    }

    #[test]
    fn rows_of_a_key_are_contiguous_and_round_trip() {
        let a = ScoreKey::of(b"k", 2.0, b"a");
        let b = ScoreKey::of(b"k", 10.0, b"a");
        let c = ScoreKey::of(b"k", 10.0, b"b");
        // "k" and "k2": the length prefix keeps their rows apart.
        let other = ScoreKey::of(b"k2", f64::NEG_INFINITY, b"");
        assert!(encoded(&ScoreKey::start(b"k")) < encoded(&a));
        assert!(encoded(&a) < encoded(&b) && encoded(&b) < encoded(&c));
        assert!(encoded(&c) < encoded(&ScoreKey::end(b"k")));
        assert!(encoded(&ScoreKey::end(b"k")) < encoded(&other));
        assert_eq!(ScoreKey::decode(&encoded(&c)).unwrap(), c);
        let m = MemberKey::of(b"key", b"member");
        assert!(encoded(&MemberKey::at(b"key", 0)) <= encoded(&m));
        assert!(encoded(&m) < encoded(&MemberKey::end(b"key")));
        assert_eq!(MemberKey::decode(&encoded(&m)).unwrap(), m);
        assert!(MemberKey::decode(b"\x00\x05ab").is_err());
    }

    #[test]
    fn empty_ranges() {
        let bound = |score, exclusive| ScoreBound { score, exclusive };
        let range = |a, b| ScoreRange { min: a, max: b };
        assert!(!range(bound(1.0, false), bound(1.0, false)).is_empty());
        assert!(range(bound(1.0, true), bound(1.0, false)).is_empty());
        assert!(range(bound(2.0, false), bound(1.0, false)).is_empty());
        let lex = |min, max| LexRange { min, max };
        use LexBound::*;
        assert!(lex(Max, Max).is_empty());
        assert!(lex(Min, Min).is_empty());
        assert!(!lex(Min, Max).is_empty());
        assert!(!lex(Inclusive(b"a".to_vec()), Inclusive(b"a".to_vec())).is_empty());
        assert!(lex(Exclusive(b"a".to_vec()), Inclusive(b"a".to_vec())).is_empty());
        assert!(lex(Inclusive(b"b".to_vec()), Inclusive(b"a".to_vec())).is_empty());
    }
}

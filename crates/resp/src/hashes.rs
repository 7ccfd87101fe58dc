//! Hash commands: HSET, HSETNX, HMSET, HGET, HMGET, HGETALL, HDEL, HLEN,
//! HEXISTS, HKEYS, HVALS, HSTRLEN, HINCRBY, HINCRBYFLOAT, HRANDFIELD
//! (count, negative count, WITHVALUES) and HSCAN (MATCH, COUNT), with
//! Redis 7.0's replies, error texts and order of checks.
//!
//! A hash is a row per field, its value beside it (`hash_fields`, see
//! [`crate::members`]), and an entry holding its field count: setting,
//! incrementing or deleting one field writes that field's row and the
//! small entry, never the whole hash. A hash emptied by a command is
//! deleted, as in Redis. A command that changes nothing (HDEL of no field
//! there, HSETNX of a field there) writes nothing, so WATCH is not aborted
//! by it; HSET always writes, as Redis always signals the key.
//!
//! Fields come in scan-position order (HGETALL, HKEYS, HVALS, HSCAN),
//! where Redis answers a small hash in insertion order and a large one in
//! hash-table order. HRANDFIELD picks fields as SRANDMEMBER picks members
//! (uniformly up to [`EXACT_SAMPLE_MAX`] fields, else the first at or after
//! a random position); with a negative count it
//! returns at most [`MAX_RANDOM_COUNT`] fields. HINCRBYFLOAT adds as
//! INCRBYFLOAT does (exact decimal, see [`crate::strings`]). A field is at
//! most [`MAX_MEMBER_BYTES`] (it is part of a row key), a value at most
//! [`crate::MAX_VALUE_BYTES`].

use std::collections::HashSet;

use roost_reactor::ReactorError;

use crate::commands::{check_value, integer, syntax_error, take, take_all, wrong_arity};
use crate::members::{
    parse_scan_options, Fail, Field, KeyRows, Members, ScanOptions, HASH_FIELDS, MAX_MEMBER_BYTES,
};
use crate::protocol::Frame;
use crate::sets::{scan_reply, MAX_RANDOM_COUNT};
use crate::store::{parse_i64, Op, Tx, OVERFLOW};
use crate::strings::{add_numbers, parse_number, Number, NAN_OR_INFINITY, NOT_A_FLOAT};

const HASH: Members = Members::Hash;

const HASH_NOT_INTEGER: &str = "ERR hash value is not an integer";
const HASH_NOT_FLOAT: &str = "ERR hash value is not a float";
const NOT_FINITE: &str = "ERR value is NaN or Infinity";

/// A hash command.
#[derive(Debug, Clone)]
pub(crate) enum HashOp {
    /// HSET (replies the fields added) and HMSET (`ok`: replies OK).
    Set {
        key: Vec<u8>,
        pairs: Vec<(Vec<u8>, Vec<u8>)>,
        ok: bool,
    },
    SetNx {
        key: Vec<u8>,
        field: Vec<u8>,
        value: Vec<u8>,
    },
    Get {
        key: Vec<u8>,
        field: Vec<u8>,
    },
    MGet {
        key: Vec<u8>,
        fields: Vec<Vec<u8>>,
    },
    GetAll(Vec<u8>),
    Del {
        key: Vec<u8>,
        fields: Vec<Vec<u8>>,
    },
    Len(Vec<u8>),
    Exists {
        key: Vec<u8>,
        field: Vec<u8>,
    },
    Keys(Vec<u8>),
    Vals(Vec<u8>),
    StrLen {
        key: Vec<u8>,
        field: Vec<u8>,
    },
    IncrBy {
        key: Vec<u8>,
        field: Vec<u8>,
        by: i64,
    },
    IncrByFloat {
        key: Vec<u8>,
        field: Vec<u8>,
        by: Number,
    },
    RandField {
        key: Vec<u8>,
        count: Option<i64>,
        with_values: bool,
    },
    /// The options' error is answered after the key's type, as Redis does.
    Scan {
        key: Vec<u8>,
        cursor: u64,
        options: Result<ScanOptions, Frame>,
    },
}

impl HashOp {
    pub(crate) fn first_key(&self) -> Option<&[u8]> {
        match self {
            HashOp::Set { key, .. }
            | HashOp::SetNx { key, .. }
            | HashOp::Get { key, .. }
            | HashOp::MGet { key, .. }
            | HashOp::GetAll(key)
            | HashOp::Del { key, .. }
            | HashOp::Len(key)
            | HashOp::Exists { key, .. }
            | HashOp::Keys(key)
            | HashOp::Vals(key)
            | HashOp::StrLen { key, .. }
            | HashOp::IncrBy { key, .. }
            | HashOp::IncrByFloat { key, .. }
            | HashOp::RandField { key, .. }
            | HashOp::Scan { key, .. } => Some(key),
        }
    }

    pub(crate) fn payload_bytes(&self) -> usize {
        match self {
            HashOp::Set { key, pairs, .. } => {
                key.len() + pairs.iter().map(|(f, v)| f.len() + v.len()).sum::<usize>()
            }
            HashOp::SetNx { key, field, value } => key.len() + field.len() + value.len(),
            HashOp::MGet { key, fields } | HashOp::Del { key, fields } => {
                key.len() + fields.iter().map(Vec::len).sum::<usize>()
            }
            _ => 64,
        }
    }
}

/// Whether `name` is a hash command (the command table's group).
pub(crate) fn is_hash_command(name: &str) -> bool {
    matches!(
        name,
        "hset"
            | "hsetnx"
            | "hmset"
            | "hget"
            | "hmget"
            | "hgetall"
            | "hdel"
            | "hlen"
            | "hexists"
            | "hkeys"
            | "hvals"
            | "hstrlen"
            | "hincrby"
            | "hincrbyfloat"
            | "hrandfield"
            | "hscan"
    )
}

/// A field argument longer than [`MAX_MEMBER_BYTES`] is refused.
fn check_field(field: &[u8]) -> Result<(), Frame> {
    if field.len() > MAX_MEMBER_BYTES {
        return Err(Frame::error(format!(
            "ERR field is longer than {MAX_MEMBER_BYTES} bytes"
        )));
    }
    Ok(())
}

fn check_fields(fields: &[Vec<u8>]) -> Result<(), Frame> {
    fields.iter().try_for_each(|f| check_field(f))
}

/// The hash command `name`'s arguments (after the name, arity checked, the
/// table's key positions checked) as an [`Op`]; `None`: not a hash command.
pub(crate) fn parse(name: &str, a: &mut [Vec<u8>]) -> Option<Result<Op, Frame>> {
    if !is_hash_command(name) {
        return None;
    }
    Some(parse_hash(name, a).map(|op| Op::Hashes(Box::new(op))))
}

fn parse_hash(name: &str, a: &mut [Vec<u8>]) -> Result<HashOp, Frame> {
    Ok(match name {
        "hset" | "hmset" => {
            if a.len() % 2 != 1 {
                return Err(wrong_arity(name));
            }
            for pair in a[1..].chunks_exact(2) {
                check_field(&pair[0])?;
                check_value(&pair[1])?;
            }
            let pairs = a[1..]
                .chunks_exact_mut(2)
                .map(|pair| (take(pair, 0), take(pair, 1)))
                .collect();
            HashOp::Set {
                key: take(a, 0),
                pairs,
                ok: name == "hmset",
            }
        }
        "hsetnx" => {
            check_field(&a[1])?;
            check_value(&a[2])?;
            HashOp::SetNx {
                key: take(a, 0),
                field: take(a, 1),
                value: take(a, 2),
            }
        }
        "hget" | "hexists" | "hstrlen" => {
            check_field(&a[1])?;
            let (key, field) = (take(a, 0), take(a, 1));
            match name {
                "hget" => HashOp::Get { key, field },
                "hexists" => HashOp::Exists { key, field },
                _ => HashOp::StrLen { key, field },
            }
        }
        "hmget" | "hdel" => {
            check_fields(&a[1..])?;
            let (key, fields) = (take(a, 0), take_all(&mut a[1..]));
            if name == "hmget" {
                HashOp::MGet { key, fields }
            } else {
                HashOp::Del { key, fields }
            }
        }
        "hgetall" => HashOp::GetAll(take(a, 0)),
        "hlen" => HashOp::Len(take(a, 0)),
        "hkeys" => HashOp::Keys(take(a, 0)),
        "hvals" => HashOp::Vals(take(a, 0)),
        "hincrby" => {
            // The increment is read before the key, as Redis does.
            let by = integer(&a[2])?;
            check_field(&a[1])?;
            HashOp::IncrBy {
                key: take(a, 0),
                field: take(a, 1),
                by,
            }
        }
        "hincrbyfloat" => {
            let by = parse_number(&a[2]).ok_or_else(|| Frame::error(NOT_A_FLOAT))?;
            if !by.is_finite() {
                return Err(Frame::error(NOT_FINITE));
            }
            check_field(&a[1])?;
            HashOp::IncrByFloat {
                key: take(a, 0),
                field: take(a, 1),
                by,
            }
        }
        "hrandfield" => {
            let (count, with_values) = parse_random_count(a, b"withvalues")?;
            HashOp::RandField {
                key: take(a, 0),
                count,
                with_values,
            }
        }
        "hscan" => {
            let cursor = crate::commands::parse_cursor(&a[1])
                .ok_or_else(|| Frame::error("ERR invalid cursor"))?;
            HashOp::Scan {
                options: parse_scan_options(&a[2..]),
                key: take(a, 0),
                cursor,
            }
        }
        other => unreachable!("hash command `{other}` without a parser"),
    })
}

fn bulks(items: impl IntoIterator<Item = Vec<u8>>) -> Vec<Frame> {
    items.into_iter().map(Frame::Bulk).collect()
}

/// Runs a hash command inside `tx`.
pub(crate) async fn apply(tx: &Tx, op: &HashOp) -> Result<Frame, ReactorError> {
    Ok(match op {
        HashOp::Set { key, pairs, ok } => {
            let (pairs, ok) = (pairs.clone(), *ok);
            tx.on_key_reply(key, move |rows| {
                let found = rows.open(HASH)?;
                let mut added = 0;
                for (field, value) in &pairs {
                    added += u64::from(rows.hput(field, value)?);
                }
                rows.close(HASH, found, found.len + added, true)?;
                Ok(if ok {
                    Frame::ok()
                } else {
                    Frame::Integer(added as i64)
                })
            })
            .await?
        }
        HashOp::SetNx { key, field, value } => {
            let (field, value) = (field.clone(), value.clone());
            tx.on_key_reply(key, move |rows| {
                let found = rows.open(HASH)?;
                if found.len > 0 && rows.hcontains(&field)? {
                    return Ok(Frame::Integer(0));
                }
                rows.hput(&field, &value)?;
                rows.close(HASH, found, found.len + 1, true)?;
                Ok(Frame::Integer(1))
            })
            .await?
        }
        HashOp::Get { key, field } => {
            let field = field.clone();
            tx.on_key_reply(key, move |rows| {
                Ok(match rows.read(HASH)? {
                    None => Frame::Null,
                    Some(_) => rows.hget(&field)?.map_or(Frame::Null, Frame::Bulk),
                })
            })
            .await?
        }
        HashOp::MGet { key, fields } => {
            let fields = fields.clone();
            tx.on_key_reply(key, move |rows| {
                let present = rows.read(HASH)?.is_some();
                let mut replies = Vec::with_capacity(fields.len());
                for field in &fields {
                    let value = if present { rows.hget(field)? } else { None };
                    replies.push(value.map_or(Frame::Null, Frame::Bulk));
                }
                Ok(Frame::Array(replies))
            })
            .await?
        }
        HashOp::GetAll(key) => {
            tx.on_key_reply(key, |rows| {
                Ok(Frame::Map(match rows.read(HASH)? {
                    None => Vec::new(),
                    Some(_) => rows
                        .hfields()?
                        .into_iter()
                        .map(|(f, v)| (Frame::Bulk(f), Frame::Bulk(v)))
                        .collect(),
                }))
            })
            .await?
        }
        HashOp::Del { key, fields } => {
            let fields = fields.clone();
            tx.on_key_reply(key, move |rows| {
                let found = rows.open(HASH)?;
                if found.len == 0 {
                    return Ok(Frame::Integer(0));
                }
                let mut removed = 0;
                for field in &fields {
                    removed += u64::from(rows.hremove(field)?);
                }
                rows.close(HASH, found, found.len.saturating_sub(removed), removed > 0)?;
                Ok(Frame::Integer(removed as i64))
            })
            .await?
        }
        HashOp::Len(key) => {
            tx.on_key_reply(key, |rows| {
                Ok(Frame::Integer(rows.read(HASH)?.map_or(0, |f| f.len) as i64))
            })
            .await?
        }
        HashOp::Exists { key, field } => {
            let field = field.clone();
            tx.on_key_reply(key, move |rows| {
                Ok(Frame::Integer(match rows.read(HASH)? {
                    None => 0,
                    Some(_) => i64::from(rows.hcontains(&field)?),
                }))
            })
            .await?
        }
        HashOp::Keys(key) | HashOp::Vals(key) => {
            let keys = matches!(op, HashOp::Keys(_));
            tx.on_key_reply(key, move |rows| {
                Ok(Frame::Array(match rows.read(HASH)? {
                    None => Vec::new(),
                    Some(_) => rows
                        .hfields()?
                        .into_iter()
                        .map(|(f, v)| Frame::Bulk(if keys { f } else { v }))
                        .collect(),
                }))
            })
            .await?
        }
        HashOp::StrLen { key, field } => {
            let field = field.clone();
            tx.on_key_reply(key, move |rows| {
                Ok(Frame::Integer(match rows.read(HASH)? {
                    None => 0,
                    Some(_) => rows.hget(&field)?.map_or(0, |v| v.len() as i64),
                }))
            })
            .await?
        }
        HashOp::IncrBy { key, field, by } => {
            let (field, by) = (field.clone(), *by);
            tx.on_key_reply(key, move |rows| {
                let found = rows.open(HASH)?;
                let current = match found.len {
                    0 => None,
                    _ => rows.hget(&field)?,
                };
                let current = match current {
                    None => 0,
                    Some(value) => {
                        parse_i64(&value).ok_or_else(|| Frame::error(HASH_NOT_INTEGER))?
                    }
                };
                let next = current
                    .checked_add(by)
                    .ok_or_else(|| Frame::error(OVERFLOW))?;
                let added = rows.hput(&field, next.to_string().as_bytes())?;
                rows.close(HASH, found, found.len + u64::from(added), true)?;
                Ok(Frame::Integer(next))
            })
            .await?
        }
        HashOp::IncrByFloat { key, field, by } => {
            let (field, by) = (field.clone(), *by);
            tx.on_key_reply(key, move |rows| {
                let found = rows.open(HASH)?;
                let current = match found.len {
                    0 => None,
                    _ => rows.hget(&field)?,
                };
                let current = match current {
                    None => Number::ZERO,
                    Some(value) => {
                        parse_number(&value).ok_or_else(|| Frame::error(HASH_NOT_FLOAT))?
                    }
                };
                let text = add_numbers(current, by).ok_or_else(|| Frame::error(NAN_OR_INFINITY))?;
                let added = rows.hput(&field, text.as_bytes())?;
                rows.close(HASH, found, found.len + u64::from(added), true)?;
                Ok(Frame::Bulk(text.into_bytes()))
            })
            .await?
        }
        HashOp::RandField {
            key,
            count,
            with_values,
        } => {
            let (count, with_values) = (*count, *with_values);
            tx.on_key_reply(key, move |rows| random_fields(rows, count, with_values))
                .await?
        }
        HashOp::Scan {
            key,
            cursor,
            options,
        } => {
            let (cursor, options) = (*cursor, options.clone());
            tx.on_key_reply(key, move |rows| {
                if rows.read(HASH)?.is_none() {
                    return Ok(scan_reply(0, Vec::new()));
                }
                let options = options?;
                let (next, found) = rows.scan(
                    &HASH_FIELDS,
                    cursor,
                    options.count,
                    options.pattern.as_deref(),
                )?;
                let elements = found
                    .into_iter()
                    .flat_map(|(field, value)| [Frame::Bulk(field), Frame::Bulk(value.0)])
                    .collect();
                Ok(scan_reply(next, elements))
            })
            .await?
        }
    })
}

/// HRANDFIELD's reply of `picked` fields: the fields, or with their values
/// (pairs in RESP3, one flat array in RESP2).
fn fields_reply(picked: Vec<Field>, with_values: bool) -> Frame {
    if with_values {
        Frame::Pairs(
            picked
                .into_iter()
                .map(|(f, v)| (Frame::Bulk(f), Frame::Bulk(v)))
                .collect(),
        )
    } else {
        Frame::Array(bulks(picked.into_iter().map(|(f, _)| f)))
    }
}

/// HRANDFIELD key [count [WITHVALUES]].
fn random_fields(
    rows: &mut KeyRows<'_>,
    count: Option<i64>,
    with_values: bool,
) -> Result<Frame, Fail> {
    let found = rows.read(HASH)?;
    let Some(count) = count else {
        return Ok(match found {
            None => Frame::Null,
            Some(found) => random_one(found.len, || rows.hrandom(), || rows.hfields())?
                .map_or(Frame::Null, |(f, _)| Frame::Bulk(f)),
        });
    };
    let len = found.map_or(0, |f| f.len);
    Ok(
        match random_picks(
            "HRANDFIELD",
            "fields",
            len,
            count,
            || rows.hrandom(),
            || rows.hfields(),
        )? {
            Ok(picked) => fields_reply(picked, with_values),
            Err(error) => error,
        },
    )
}

/// `key [count [FLAG]]` of HRANDFIELD (`WITHVALUES`) and ZRANDMEMBER
/// (`WITHSCORES`), checked as Redis checks them: the count, and with the
/// flag, whether twice it fits.
pub(crate) fn parse_random_count(a: &[Vec<u8>], flag: &[u8]) -> Result<(Option<i64>, bool), Frame> {
    if a.len() == 1 {
        return Ok((None, false));
    }
    let n = integer(&a[1])?;
    if n == i64::MIN {
        return Err(Frame::error(
            "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
        ));
    }
    if a.len() > 3 || (a.len() == 3 && !a[2].eq_ignore_ascii_case(flag)) {
        return Err(syntax_error());
    }
    let with = a.len() == 3;
    // Redis: twice the count must fit (the element and its value).
    if with && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&n) {
        return Err(Frame::error("ERR value is out of range"));
    }
    Ok((Some(n), with))
}

/// Random elements and their values.
pub(crate) type Picks<T> = Vec<(Vec<u8>, T)>;

/// Collections of at most this many elements are sampled exactly
/// uniformly: read whole, then drawn from. A larger one's pick is the first
/// element at or after a random position (one short scan; an element after
/// a wider gap of positions comes up more often, and the positions are a
/// keyed hash, so no client can choose which).
pub(crate) const EXACT_SAMPLE_MAX: u64 = 512;

/// One random element of a collection of `len` (HRANDFIELD, SRANDMEMBER,
/// ZRANDMEMBER without a count): `pick` draws one by position, `all` lists
/// them. `None`: the collection is empty.
pub(crate) fn random_one<T>(
    len: u64,
    pick: impl FnOnce() -> Result<Option<(Vec<u8>, T)>, ReactorError>,
    all: impl FnOnce() -> Result<Vec<(Vec<u8>, T)>, ReactorError>,
) -> Result<Option<(Vec<u8>, T)>, ReactorError> {
    if len > EXACT_SAMPLE_MAX {
        return pick();
    }
    let mut every = all()?;
    if every.is_empty() {
        return Ok(None);
    }
    let i = uniform_index(every.len());
    Ok(Some(every.swap_remove(i)))
}

/// A uniform index below `n` (> 0).
fn uniform_index(n: usize) -> usize {
    debug_assert!(n > 0, "an index into something");
    rand::random_range(0..n)
}

/// `count` random elements of a collection of `len` (HRANDFIELD,
/// SRANDMEMBER, ZRANDMEMBER): `pick` draws one by position, `all` lists
/// them. A negative count may repeat (each pick on its own, at most
/// [`MAX_RANDOM_COUNT`]); a positive one is distinct. Uniform up to
/// [`EXACT_SAMPLE_MAX`] elements. `Err(frame)`: the error reply.
pub(crate) fn random_picks<T: Clone>(
    command: &str,
    what: &str,
    len: u64,
    count: i64,
    mut pick: impl FnMut() -> Result<Option<(Vec<u8>, T)>, ReactorError>,
    all: impl FnOnce() -> Result<Vec<(Vec<u8>, T)>, ReactorError>,
) -> Result<Result<Picks<T>, Frame>, ReactorError> {
    if len == 0 || count == 0 {
        return Ok(Ok(Vec::new()));
    }
    if count < 0 {
        let count = count.unsigned_abs();
        if count > MAX_RANDOM_COUNT {
            return Ok(Err(Frame::error(format!(
                "ERR {command} with a negative count returns at most {MAX_RANDOM_COUNT} {what}"
            ))));
        }
        let mut picked = Vec::with_capacity(count as usize);
        if len <= EXACT_SAMPLE_MAX {
            let every = all()?;
            if every.is_empty() {
                return Ok(Ok(picked));
            }
            for _ in 0..count {
                picked.push(every[uniform_index(every.len())].clone());
            }
            return Ok(Ok(picked));
        }
        for _ in 0..count {
            match pick()? {
                Some(one) => picked.push(one),
                None => break,
            }
        }
        return Ok(Ok(picked));
    }
    let count = count as u64;
    if count >= len {
        return Ok(Ok(all()?));
    }
    // Distinct ones from a large collection: picked one by one while they
    // are a small part of it (few repeats to skip), else drawn from all.
    if len > EXACT_SAMPLE_MAX && count * 3 <= len {
        let mut seen = HashSet::with_capacity(count as usize);
        let mut picked = Vec::with_capacity(count as usize);
        // Bounded: repeats are rare at a third of the collection at most.
        for _ in 0..count * 8 + 64 {
            let Some((name, value)) = pick()? else {
                break;
            };
            if seen.insert(name.clone()) {
                picked.push((name, value));
                if picked.len() as u64 == count {
                    return Ok(Ok(picked));
                }
            }
        }
    }
    let mut every = all()?;
    let n = every.len();
    let count = (count as usize).min(n);
    // A partial Fisher-Yates shuffle: the first `count` are a uniform pick.
    for i in 0..count {
        every.swap(i, i + uniform_index(n - i));
    }
    every.truncate(count);
    Ok(Ok(every))
}

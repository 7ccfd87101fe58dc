//! Set commands: SADD, SREM, SMEMBERS, SISMEMBER, SMISMEMBER, SCARD, SPOP,
//! SRANDMEMBER, SINTER/SUNION/SDIFF and their STORE forms, SINTERCARD,
//! SMOVE, SSCAN, with Redis 7.0's replies, error texts and order of checks.
//! A set is a row per member (see [`crate::members`]); a set emptied by a
//! command is deleted, as in Redis.
//!
//! Multi-key commands read each key in its own reactor, inside the one
//! transaction: SINTER walks its smallest set and looks each member up in
//! the others, SDIFF walks the first and looks up in the rest, SUNION walks
//! all. SPOP picks members at random positions (see
//! `KeyRows::set_random`). SRANDMEMBER picks uniformly from a set of up to
//! [`EXACT_SAMPLE_MAX`](crate::hashes::EXACT_SAMPLE_MAX) members, by
//! position from a larger one; with a negative count it returns at most
//! [`MAX_RANDOM_COUNT`] members.

use std::collections::BTreeSet;

use roost_reactor::ReactorError;

use crate::commands::{check_key, check_keys, integer, syntax_error, take, take_all};
use crate::members::{
    check_member, check_members, parse_scan_options, Found, KeyRows, Members, ScanOptions,
    SET_MEMBERS,
};
use crate::protocol::Frame;
use crate::store::{parse_i64, Op, Tx};

/// The most members one SRANDMEMBER with a negative count returns (they
/// may repeat, so the set's size does not bound them).
pub(crate) const MAX_RANDOM_COUNT: u64 = 1_000_000;

const MUST_BE_POSITIVE: &str = "ERR value is out of range, must be positive";

/// SINTER, SUNION or SDIFF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Combine {
    Inter,
    Union,
    Diff,
}

/// A set command.
#[derive(Debug, Clone)]
pub(crate) enum SetOp {
    Add {
        key: Vec<u8>,
        members: Vec<Vec<u8>>,
    },
    Rem {
        key: Vec<u8>,
        members: Vec<Vec<u8>>,
    },
    Members(Vec<u8>),
    IsMember {
        key: Vec<u8>,
        member: Vec<u8>,
    },
    MIsMember {
        key: Vec<u8>,
        members: Vec<Vec<u8>>,
    },
    Card(Vec<u8>),
    Pop {
        key: Vec<u8>,
        count: Option<u64>,
    },
    RandMember {
        key: Vec<u8>,
        count: Option<i64>,
    },
    /// SINTER/SUNION/SDIFF, with `store`: their STORE form's destination.
    Combine {
        how: Combine,
        keys: Vec<Vec<u8>>,
        store: Option<Vec<u8>>,
    },
    /// SINTERCARD (`limit` 0: none).
    InterCard {
        keys: Vec<Vec<u8>>,
        limit: u64,
    },
    Move {
        src: Vec<u8>,
        dst: Vec<u8>,
        member: Vec<u8>,
    },
    /// The options' error is answered after the key's type, as Redis does.
    Scan {
        key: Vec<u8>,
        cursor: u64,
        options: Result<ScanOptions, Frame>,
    },
}

impl SetOp {
    pub(crate) fn first_key(&self) -> Option<&[u8]> {
        match self {
            SetOp::Add { key, .. }
            | SetOp::Rem { key, .. }
            | SetOp::Members(key)
            | SetOp::IsMember { key, .. }
            | SetOp::MIsMember { key, .. }
            | SetOp::Card(key)
            | SetOp::Pop { key, .. }
            | SetOp::RandMember { key, .. }
            | SetOp::Move { src: key, .. }
            | SetOp::Scan { key, .. } => Some(key),
            SetOp::Combine {
                store: Some(key), ..
            } => Some(key),
            SetOp::Combine { keys, .. } | SetOp::InterCard { keys, .. } => {
                keys.first().map(Vec::as_slice)
            }
        }
    }

    pub(crate) fn payload_bytes(&self) -> usize {
        match self {
            SetOp::Add { key, members } | SetOp::Rem { key, members } => {
                key.len() + members.iter().map(Vec::len).sum::<usize>()
            }
            _ => 64,
        }
    }
}

/// SINTERCARD's arguments, `numkeys key [key ...] [LIMIT limit]`: the
/// keys, and the limit (0: none), with Redis's errors.
fn parse_intercard(a: &mut [Vec<u8>]) -> Result<(Vec<Vec<u8>>, u64), Frame> {
    const NUMKEYS: &str = "ERR numkeys should be greater than 0";
    let numkeys = parse_i64(&a[0])
        .filter(|n| *n > 0)
        .ok_or_else(|| Frame::error(NUMKEYS))?;
    let numkeys = usize::try_from(numkeys).unwrap_or(usize::MAX);
    if numkeys > a.len() - 1 {
        return Err(Frame::error(
            "ERR Number of keys can't be greater than number of args",
        ));
    }
    check_keys(&a[1..=numkeys])?;
    let limit = parse_card_limit(&a[numkeys + 1..])?;
    Ok((take_all(&mut a[1..=numkeys]), limit))
}

/// What follows the keys of SINTERCARD and ZINTERCARD: `[LIMIT limit]`
/// (the last one given counts), the limit or 0 for none.
pub(crate) fn parse_card_limit(rest: &[Vec<u8>]) -> Result<u64, Frame> {
    let mut limit = 0;
    let mut i = 0;
    while i < rest.len() {
        if rest[i].eq_ignore_ascii_case(b"limit") && i + 1 < rest.len() {
            const NEGATIVE: &str = "ERR LIMIT can't be negative";
            limit = parse_i64(&rest[i + 1])
                .and_then(|n| u64::try_from(n).ok())
                .ok_or_else(|| Frame::error(NEGATIVE))?;
            i += 2;
        } else {
            return Err(syntax_error());
        }
    }
    Ok(limit)
}

/// Whether `name` is a set command (the command table's group).
pub(crate) fn is_set_command(name: &str) -> bool {
    matches!(
        name,
        "sadd"
            | "srem"
            | "smembers"
            | "sismember"
            | "smismember"
            | "scard"
            | "spop"
            | "srandmember"
            | "sinter"
            | "sunion"
            | "sdiff"
            | "sinterstore"
            | "sunionstore"
            | "sdiffstore"
            | "sintercard"
            | "smove"
            | "sscan"
    )
}

/// The set command `name`'s arguments (after the name, arity checked, the
/// table's key positions checked) as an [`Op`]; `None`: not a set command.
pub(crate) fn parse(name: &str, a: &mut [Vec<u8>]) -> Option<Result<Op, Frame>> {
    if !is_set_command(name) {
        return None;
    }
    Some(parse_set(name, a).map(|op| Op::Sets(Box::new(op))))
}

fn parse_set(name: &str, a: &mut [Vec<u8>]) -> Result<SetOp, Frame> {
    Ok(match name {
        "sadd" | "srem" | "smismember" => {
            check_members(&a[1..])?;
            let key = take(a, 0);
            let members = take_all(&mut a[1..]);
            match name {
                "sadd" => SetOp::Add { key, members },
                "srem" => SetOp::Rem { key, members },
                _ => SetOp::MIsMember { key, members },
            }
        }
        "smembers" => SetOp::Members(take(a, 0)),
        "scard" => SetOp::Card(take(a, 0)),
        "sismember" => {
            check_member(&a[1])?;
            SetOp::IsMember {
                key: take(a, 0),
                member: take(a, 1),
            }
        }
        "spop" => {
            let count = match a.len() {
                1 => None,
                2 => Some(
                    parse_i64(&a[1])
                        .and_then(|n| u64::try_from(n).ok())
                        .ok_or_else(|| Frame::error(MUST_BE_POSITIVE))?,
                ),
                _ => return Err(syntax_error()),
            };
            SetOp::Pop {
                key: take(a, 0),
                count,
            }
        }
        "srandmember" => {
            let count = match a.len() {
                1 => None,
                2 => {
                    let n = integer(&a[1])?;
                    if n == i64::MIN {
                        return Err(Frame::error(
                            "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
                        ));
                    }
                    Some(n)
                }
                _ => return Err(syntax_error()),
            };
            SetOp::RandMember {
                key: take(a, 0),
                count,
            }
        }
        "sinter" | "sunion" | "sdiff" | "sinterstore" | "sunionstore" | "sdiffstore" => {
            let how = match &name[..name.len().min(6)] {
                "sinter" => Combine::Inter,
                "sunion" => Combine::Union,
                _ => Combine::Diff,
            };
            let store = name.ends_with("store");
            let keys_from = usize::from(store);
            SetOp::Combine {
                how,
                keys: take_all(&mut a[keys_from..]),
                store: store.then(|| take(a, 0)),
            }
        }
        "sintercard" => {
            let (keys, limit) = parse_intercard(a)?;
            SetOp::InterCard { keys, limit }
        }
        "smove" => {
            check_member(&a[2])?;
            SetOp::Move {
                src: take(a, 0),
                dst: take(a, 1),
                member: take(a, 2),
            }
        }
        "sscan" => {
            check_key(&a[0])?;
            let cursor = crate::commands::parse_cursor(&a[1])
                .ok_or_else(|| Frame::error("ERR invalid cursor"))?;
            SetOp::Scan {
                options: parse_scan_options(&a[2..]),
                key: take(a, 0),
                cursor,
            }
        }
        other => unreachable!("set command `{other}` without a parser"),
    })
}

fn bulks(members: impl IntoIterator<Item = Vec<u8>>) -> Vec<Frame> {
    members.into_iter().map(Frame::Bulk).collect()
}

/// Each key's set size (0: absent), or the first key's WRONGTYPE.
async fn sizes(tx: &Tx, keys: &[Vec<u8>]) -> Result<Result<Vec<u64>, Frame>, ReactorError> {
    let mut sizes = Vec::with_capacity(keys.len());
    for key in keys {
        match tx
            .on_key(key, |rows| {
                Ok(rows.read(Members::Set)?.map_or(0, |f| f.len))
            })
            .await?
        {
            Ok(n) => sizes.push(n),
            Err(reply) => return Ok(Err(reply)),
        }
    }
    Ok(Ok(sizes))
}

/// `key`'s members.
async fn members_of(tx: &Tx, key: &[u8]) -> Result<Vec<Vec<u8>>, ReactorError> {
    Ok(tx
        .on_key(key, |rows| Ok(rows.set_members()?))
        .await?
        .unwrap_or_default())
}

/// Those of `candidates` that are (`keep_members`) or are not members of
/// `key`.
async fn filter(
    tx: &Tx,
    key: &[u8],
    candidates: Vec<Vec<u8>>,
    keep_members: bool,
) -> Result<Vec<Vec<u8>>, ReactorError> {
    Ok(tx
        .on_key(key, move |rows| {
            let mut kept = Vec::with_capacity(candidates.len());
            for member in candidates {
                if rows.set_contains(&member)? == keep_members {
                    kept.push(member);
                }
            }
            Ok(kept)
        })
        .await?
        .unwrap_or_default())
}

/// SINTER, SUNION or SDIFF of `keys` (every key a set or absent).
async fn combine(
    tx: &Tx,
    how: Combine,
    keys: &[Vec<u8>],
    sizes: &[u64],
) -> Result<Vec<Vec<u8>>, ReactorError> {
    Ok(match how {
        Combine::Inter => {
            if sizes.contains(&0) {
                return Ok(Vec::new());
            }
            // The smallest set's members, looked up in the others from the
            // next smallest on (Redis's order).
            let mut order: Vec<usize> = (0..keys.len()).collect();
            order.sort_by_key(|&i| sizes[i]);
            let mut members = members_of(tx, &keys[order[0]]).await?;
            for &i in &order[1..] {
                if members.is_empty() {
                    break;
                }
                members = filter(tx, &keys[i], members, true).await?;
            }
            members
        }
        Combine::Union => {
            let mut union = BTreeSet::new();
            for (key, &size) in keys.iter().zip(sizes) {
                if size > 0 {
                    union.extend(members_of(tx, key).await?);
                }
            }
            union.into_iter().collect()
        }
        Combine::Diff => {
            if sizes[0] == 0 {
                return Ok(Vec::new());
            }
            let mut members = members_of(tx, &keys[0]).await?;
            for (key, &size) in keys.iter().zip(sizes).skip(1) {
                if members.is_empty() {
                    break;
                }
                if size > 0 {
                    members = filter(tx, key, members, false).await?;
                }
            }
            members
        }
    })
}

/// Replaces whatever `dst` holds by a set of `members` (deleted if none);
/// replies how many.
async fn store_set(tx: &Tx, dst: &[u8], members: Vec<Vec<u8>>) -> Result<Frame, ReactorError> {
    tx.on_key_reply(dst, move |rows| {
        rows.clear()?;
        let mut len = 0;
        for member in &members {
            len += u64::from(rows.set_add(member)?);
        }
        rows.close(Members::Set, Found::default(), len, true)?;
        Ok(Frame::Integer(len as i64))
    })
    .await
}

/// Runs a set command inside `tx`.
pub(crate) async fn apply(tx: &Tx, op: &SetOp) -> Result<Frame, ReactorError> {
    const SET: Members = Members::Set;
    Ok(match op {
        SetOp::Add { key, members } => {
            let members = members.clone();
            tx.on_key_reply(key, move |rows| {
                let found = rows.open(SET)?;
                let mut added = 0;
                for member in &members {
                    added += u64::from(rows.set_add(member)?);
                }
                rows.close(SET, found, found.len + added, added > 0)?;
                Ok(Frame::Integer(added as i64))
            })
            .await?
        }
        SetOp::Rem { key, members } => {
            let members = members.clone();
            tx.on_key_reply(key, move |rows| {
                let found = rows.open(SET)?;
                if found.len == 0 {
                    return Ok(Frame::Integer(0));
                }
                let mut removed = 0;
                for member in &members {
                    removed += u64::from(rows.set_remove(member)?);
                }
                rows.close(SET, found, found.len.saturating_sub(removed), removed > 0)?;
                Ok(Frame::Integer(removed as i64))
            })
            .await?
        }
        SetOp::Members(key) => {
            tx.on_key_reply(key, |rows| {
                Ok(match rows.read(SET)? {
                    None => Frame::Set(Vec::new()),
                    Some(_) => Frame::Set(bulks(rows.set_members()?)),
                })
            })
            .await?
        }
        SetOp::IsMember { key, member } => {
            let member = member.clone();
            tx.on_key_reply(key, move |rows| {
                Ok(Frame::Integer(match rows.read(SET)? {
                    None => 0,
                    Some(_) => i64::from(rows.set_contains(&member)?),
                }))
            })
            .await?
        }
        SetOp::MIsMember { key, members } => {
            let members = members.clone();
            tx.on_key_reply(key, move |rows| {
                let present = rows.read(SET)?.is_some();
                let mut replies = Vec::with_capacity(members.len());
                for member in &members {
                    let is = present && rows.set_contains(member)?;
                    replies.push(Frame::Integer(i64::from(is)));
                }
                Ok(Frame::Array(replies))
            })
            .await?
        }
        SetOp::Card(key) => {
            tx.on_key_reply(key, |rows| {
                Ok(Frame::Integer(rows.read(SET)?.map_or(0, |f| f.len) as i64))
            })
            .await?
        }
        SetOp::Pop { key, count } => {
            let count = *count;
            tx.on_key_reply(key, move |rows| pop(rows, count)).await?
        }
        SetOp::RandMember { key, count } => {
            let count = *count;
            tx.on_key_reply(key, move |rows| random_members(rows, count))
                .await?
        }
        SetOp::Combine { how, keys, store } => {
            let sizes = match sizes(tx, keys).await? {
                Ok(sizes) => sizes,
                Err(reply) => return Ok(reply),
            };
            let members = combine(tx, *how, keys, &sizes).await?;
            match store {
                Some(dst) => store_set(tx, dst, members).await?,
                None => Frame::Set(bulks(members)),
            }
        }
        SetOp::InterCard { keys, limit } => {
            let sizes = match sizes(tx, keys).await? {
                Ok(sizes) => sizes,
                Err(reply) => return Ok(reply),
            };
            let count = combine(tx, Combine::Inter, keys, &sizes).await?.len() as u64;
            let count = if *limit > 0 { count.min(*limit) } else { count };
            Frame::Integer(count as i64)
        }
        SetOp::Move { src, dst, member } => smove(tx, src, dst, member).await?,
        SetOp::Scan {
            key,
            cursor,
            options,
        } => {
            let (cursor, options) = (*cursor, options.clone());
            tx.on_key_reply(key, move |rows| {
                if rows.read(SET)?.is_none() {
                    return Ok(scan_reply(0, Vec::new()));
                }
                let options = options?;
                let (next, found) = rows.scan(
                    &SET_MEMBERS,
                    cursor,
                    options.count,
                    options.pattern.as_deref(),
                )?;
                Ok(scan_reply(
                    next,
                    found.into_iter().map(|(m, _)| Frame::Bulk(m)).collect(),
                ))
            })
            .await?
        }
    })
}

/// HSCAN's, SSCAN's and ZSCAN's reply: the next cursor and the elements.
pub(crate) fn scan_reply(next: u64, elements: Vec<Frame>) -> Frame {
    Frame::Array(vec![
        Frame::Bulk(next.to_string().into_bytes()),
        Frame::Array(elements),
    ])
}

/// SPOP key [count].
fn pop(rows: &mut KeyRows<'_>, count: Option<u64>) -> Result<Frame, crate::members::Fail> {
    const SET: Members = Members::Set;
    let found = rows.open(SET)?;
    let Some(count) = count else {
        if found.len == 0 {
            return Ok(Frame::Null);
        }
        let Some(member) = rows.set_random()? else {
            return Ok(Frame::Null);
        };
        rows.set_remove(&member)?;
        rows.close(SET, found, found.len.saturating_sub(1), true)?;
        return Ok(Frame::Bulk(member));
    };
    if found.len == 0 || count == 0 {
        return Ok(Frame::Set(Vec::new()));
    }
    if count >= found.len {
        // The whole set: read, then deleted with its rows.
        let members = rows.set_members()?;
        rows.close(SET, found, 0, true)?;
        return Ok(Frame::Set(bulks(members)));
    }
    let mut popped = Vec::with_capacity(count as usize);
    while (popped.len() as u64) < count {
        let Some(member) = rows.set_random()? else {
            break;
        };
        rows.set_remove(&member)?;
        popped.push(member);
    }
    rows.close(
        SET,
        found,
        found.len.saturating_sub(popped.len() as u64),
        true,
    )?;
    Ok(Frame::Set(bulks(popped)))
}

/// SRANDMEMBER key [count]: as HRANDFIELD's picks
/// ([`random_picks`](crate::hashes::random_picks)).
fn random_members(
    rows: &mut KeyRows<'_>,
    count: Option<i64>,
) -> Result<Frame, crate::members::Fail> {
    let found = rows.read(Members::Set)?;
    let len = found.map_or(0, |f| f.len);
    let pick = || Ok(rows.set_random()?.map(|member| (member, ())));
    let all = || Ok(rows.set_members()?.into_iter().map(|m| (m, ())).collect());
    let Some(count) = count else {
        if found.is_none() {
            return Ok(Frame::Null);
        }
        let one = crate::hashes::random_one(len, pick, all)?;
        return Ok(one.map_or(Frame::Null, |(member, ())| Frame::Bulk(member)));
    };
    if found.is_none() {
        return Ok(Frame::Array(Vec::new()));
    }
    let picked = crate::hashes::random_picks("SRANDMEMBER", "members", len, count, pick, all)?;
    Ok(match picked {
        Ok(picked) => Frame::Array(bulks(picked.into_iter().map(|(m, ())| m))),
        Err(error) => error,
    })
}

/// SMOVE source destination member.
async fn smove(tx: &Tx, src: &[u8], dst: &[u8], member: &[u8]) -> Result<Frame, ReactorError> {
    const SET: Members = Members::Set;
    match tx.on_key(src, |rows| rows.read(SET)).await? {
        Err(reply) => return Ok(reply),
        Ok(None) => return Ok(Frame::Integer(0)),
        Ok(Some(_)) => {}
    }
    if let Err(reply) = tx.on_key(dst, |rows| rows.read(SET)).await? {
        return Ok(reply);
    }
    let owned = member.to_vec();
    if src == dst {
        return tx
            .on_key_reply(src, move |rows| {
                Ok(Frame::Integer(i64::from(rows.set_contains(&owned)?)))
            })
            .await;
    }
    let removed = tx
        .on_key(src, move |rows| {
            let found = rows.open(SET)?;
            if !rows.set_remove(&owned)? {
                return Ok(false);
            }
            rows.close(SET, found, found.len.saturating_sub(1), true)?;
            Ok(true)
        })
        .await?;
    if removed != Ok(true) {
        return Ok(Frame::Integer(0));
    }
    let owned = member.to_vec();
    tx.on_key_reply(dst, move |rows| {
        let found = rows.open(SET)?;
        let added = rows.set_add(&owned)?;
        rows.close(SET, found, found.len + u64::from(added), added)?;
        Ok(Frame::Integer(1))
    })
    .await
}

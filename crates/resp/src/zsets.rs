//! Sorted-set commands: ZADD (NX, XX, GT, LT, CH, INCR), ZINCRBY, ZSCORE,
//! ZMSCORE, ZCARD, ZRANGE (BYSCORE, BYLEX, REV, LIMIT, WITHSCORES) and the
//! older ZRANGEBYSCORE, ZREVRANGE, ZREVRANGEBYSCORE, ZRANGEBYLEX,
//! ZREVRANGEBYLEX, ZRANGESTORE, ZRANK/ZREVRANK (WITHSCORE, as Redis 7.2),
//! ZREM, ZREMRANGEBYRANK/BYSCORE/BYLEX, ZCOUNT, ZLEXCOUNT, ZPOPMIN/ZPOPMAX,
//! ZUNION/ZINTER/ZDIFF and their STORE forms (WEIGHTS, AGGREGATE; sets as
//! inputs count 1 per member), ZINTERCARD (LIMIT), ZSCAN.
//!
//! Scores are read as Redis reads them: a member's score or a weight as C's
//! `strtod` of the whole argument (`inf`, `-inf`, hex; no NaN, no leading
//! space, no overflow), a range bound as `strtod` of a prefix with `(` for
//! an exclusive one (what Redis accepts there, an empty string included);
//! lex bounds are `-`, `+`, `[member`, `(member`. Scores are answered as
//! Redis prints them (`%.17g`, `protocol::format_double`). What walks cost
//! (ranks are counted, the storage's B+-tree has no counts) is in
//! [`crate::members`].

use std::collections::HashMap;

use roost_reactor::{ReactorError, ScanDirection};

use crate::commands::{check_keys, integer, syntax_error, take, take_all, wrong_arity};
use crate::members::{
    check_member, check_members, parse_scan_options, Fail, Found, Interval, KeyRows, LexBound,
    LexRange, Members, ScanOptions, ScoreBound, ScoreRange, MAX_MEMBER_BYTES, ZSET_MEMBERS,
};
use crate::protocol::{format_double, Frame};
use crate::sets::scan_reply;
use crate::store::{parse_i64, Op, Tx, WRONGTYPE};

const NOT_A_FLOAT: &str = "ERR value is not a valid float";
const RANGE_NOT_A_FLOAT: &str = "ERR min or max is not a float";
const NOT_A_LEX_RANGE: &str = "ERR min or max not valid string range item";
const NAN_SCORE: &str = "ERR resulting score is not a number (NaN)";
const MUST_BE_POSITIVE: &str = "ERR value is out of range, must be positive";

const ZSET: Members = Members::ZSet;

/// ZADD's flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct AddFlags {
    pub(crate) nx: bool,
    pub(crate) xx: bool,
    pub(crate) gt: bool,
    pub(crate) lt: bool,
    pub(crate) ch: bool,
    pub(crate) incr: bool,
}

/// Which rows a range command names.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Selection {
    /// `start stop`: ranks, negative from the end.
    Rank(i64, i64),
    Interval(Interval),
}

/// ZRANGE and its older forms, ZRANGESTORE.
#[derive(Debug, Clone)]
pub(crate) struct RangeOp {
    pub(crate) key: Vec<u8>,
    pub(crate) store: Option<Vec<u8>>,
    pub(crate) selection: Selection,
    pub(crate) rev: bool,
    /// LIMIT's offset and count (a negative count: no limit).
    pub(crate) offset: i64,
    pub(crate) count: i64,
    pub(crate) withscores: bool,
}

/// ZUNION, ZINTER or ZDIFF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Combine {
    Union,
    Inter,
    Diff,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Aggregate {
    Sum,
    Min,
    Max,
}

/// The options after ZUNION's keys.
#[derive(Debug, Clone)]
pub(crate) struct CombineOptions {
    pub(crate) weights: Vec<f64>,
    pub(crate) aggregate: Aggregate,
    pub(crate) withscores: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct CombineOp {
    pub(crate) how: Combine,
    pub(crate) keys: Vec<Vec<u8>>,
    pub(crate) store: Option<Vec<u8>>,
    /// ZINTERCARD: answer the result's size, at most this (0: no limit).
    pub(crate) card_limit: Option<u64>,
    /// Answered after the keys' types, as Redis checks them.
    pub(crate) options: Result<CombineOptions, Frame>,
}

/// A sorted-set command.
#[derive(Debug, Clone)]
pub(crate) enum ZSetOp {
    /// ZADD, and ZINCRBY (INCR, no other flag).
    Add {
        key: Vec<u8>,
        flags: AddFlags,
        pairs: Vec<(f64, Vec<u8>)>,
    },
    Score {
        key: Vec<u8>,
        member: Vec<u8>,
    },
    MScore {
        key: Vec<u8>,
        members: Vec<Vec<u8>>,
    },
    Card(Vec<u8>),
    Range(RangeOp),
    Rank {
        key: Vec<u8>,
        member: Vec<u8>,
        rev: bool,
        withscore: bool,
    },
    Rem {
        key: Vec<u8>,
        members: Vec<Vec<u8>>,
    },
    RemRange {
        key: Vec<u8>,
        selection: Selection,
    },
    /// ZCOUNT, ZLEXCOUNT.
    Count {
        key: Vec<u8>,
        interval: Interval,
    },
    Pop {
        key: Vec<u8>,
        max: bool,
        count: Option<u64>,
    },
    Combine(CombineOp),
    Scan {
        key: Vec<u8>,
        cursor: u64,
        options: Result<ScanOptions, Frame>,
    },
    /// ZMPOP numkeys key [key ...] MIN|MAX [COUNT count]: pops from the
    /// first key that holds members.
    MPop {
        keys: Vec<Vec<u8>>,
        max: bool,
        count: u64,
        /// BZMPOP's timeout (ms; 0: none): it waits outside MULTI.
        timeout_ms: Option<u64>,
        /// A blocked client's retry: keys of another type are passed over.
        waiting: bool,
    },
    /// BZPOPMIN/BZPOPMAX key [key ...] timeout: one member of the first key
    /// that holds some, as `[key, member, score]`; outside MULTI it waits.
    BPop {
        keys: Vec<Vec<u8>>,
        max: bool,
        timeout_ms: u64,
        /// A blocked client's retry: keys of another type are passed over.
        waiting: bool,
    },
    /// ZRANDMEMBER key [count [WITHSCORES]].
    RandMember {
        key: Vec<u8>,
        count: Option<i64>,
        with_scores: bool,
    },
}

impl ZSetOp {
    pub(crate) fn first_key(&self) -> Option<&[u8]> {
        match self {
            ZSetOp::Add { key, .. }
            | ZSetOp::Score { key, .. }
            | ZSetOp::MScore { key, .. }
            | ZSetOp::Card(key)
            | ZSetOp::Rank { key, .. }
            | ZSetOp::Rem { key, .. }
            | ZSetOp::RemRange { key, .. }
            | ZSetOp::Count { key, .. }
            | ZSetOp::Pop { key, .. }
            | ZSetOp::Scan { key, .. }
            | ZSetOp::RandMember { key, .. } => Some(key),
            ZSetOp::MPop { keys, .. } | ZSetOp::BPop { keys, .. } => {
                keys.first().map(Vec::as_slice)
            }
            ZSetOp::Range(range) => Some(range.store.as_ref().unwrap_or(&range.key)),
            ZSetOp::Combine(op) => op
                .store
                .as_deref()
                .or_else(|| op.keys.first().map(Vec::as_slice)),
        }
    }

    /// The form a blocked client retries: keys of another type are passed
    /// over (Redis serves a blocked client only from a sorted set).
    pub(crate) fn waiting_form(&mut self) {
        if let ZSetOp::MPop { waiting, .. } | ZSetOp::BPop { waiting, .. } = self {
            *waiting = true;
        }
    }

    /// A blocking form's timeout (ms; 0: none); `None` for the others.
    pub(crate) fn timeout_ms(&self) -> Option<u64> {
        match self {
            ZSetOp::MPop { timeout_ms, .. } => *timeout_ms,
            ZSetOp::BPop { timeout_ms, .. } => Some(*timeout_ms),
            _ => None,
        }
    }

    pub(crate) fn payload_bytes(&self) -> usize {
        match self {
            ZSetOp::Add { key, pairs, .. } => {
                key.len() + pairs.iter().map(|(_, m)| m.len() + 8).sum::<usize>()
            }
            _ => 64,
        }
    }
}

/// Whether `name` is a sorted-set command.
pub(crate) fn is_zset_command(name: &str) -> bool {
    matches!(
        name,
        "zadd"
            | "zincrby"
            | "zscore"
            | "zmscore"
            | "zcard"
            | "zrange"
            | "zrangestore"
            | "zrangebyscore"
            | "zrevrangebyscore"
            | "zrevrange"
            | "zrangebylex"
            | "zrevrangebylex"
            | "zrank"
            | "zrevrank"
            | "zrem"
            | "zremrangebyrank"
            | "zremrangebyscore"
            | "zremrangebylex"
            | "zcount"
            | "zlexcount"
            | "zpopmin"
            | "zpopmax"
            | "zunion"
            | "zinter"
            | "zdiff"
            | "zunionstore"
            | "zinterstore"
            | "zdiffstore"
            | "zintercard"
            | "zscan"
            | "zrandmember"
            | "zmpop"
            | "bzpopmin"
            | "bzpopmax"
            | "bzmpop"
    )
}

/// The sorted-set command `name`'s arguments (after the name, arity and
/// the table's key positions checked) as an [`Op`]; `None`: not one.
pub(crate) fn parse(name: &str, a: &mut [Vec<u8>]) -> Option<Result<Op, Frame>> {
    if !is_zset_command(name) {
        return None;
    }
    Some(parse_zset(name, a).map(|op| Op::ZSets(Box::new(op))))
}

fn parse_zset(name: &str, a: &mut [Vec<u8>]) -> Result<ZSetOp, Frame> {
    Ok(match name {
        "zadd" => parse_zadd(a)?,
        "zincrby" => {
            let incr = parse_score(&a[1]).ok_or_else(|| Frame::error(NOT_A_FLOAT))?;
            check_member(&a[2])?;
            ZSetOp::Add {
                key: take(a, 0),
                flags: AddFlags {
                    incr: true,
                    ..AddFlags::default()
                },
                pairs: vec![(incr, take(a, 2))],
            }
        }
        "zscore" => {
            check_member(&a[1])?;
            ZSetOp::Score {
                key: take(a, 0),
                member: take(a, 1),
            }
        }
        "zmscore" | "zrem" => {
            check_members(&a[1..])?;
            let (key, members) = (take(a, 0), take_all(&mut a[1..]));
            if name == "zrem" {
                ZSetOp::Rem { key, members }
            } else {
                ZSetOp::MScore { key, members }
            }
        }
        "zcard" => ZSetOp::Card(take(a, 0)),
        "zrange" | "zrangestore" | "zrangebyscore" | "zrevrangebyscore" | "zrevrange"
        | "zrangebylex" | "zrevrangebylex" => ZSetOp::Range(parse_range(name, a)?),
        "zrank" | "zrevrank" => {
            let withscore = match a.len() {
                2 => false,
                3 if a[2].eq_ignore_ascii_case(b"withscore") => true,
                3 => return Err(syntax_error()),
                _ => return Err(wrong_arity(name)),
            };
            check_member(&a[1])?;
            ZSetOp::Rank {
                key: take(a, 0),
                member: take(a, 1),
                rev: name == "zrevrank",
                withscore,
            }
        }
        "zremrangebyrank" => ZSetOp::RemRange {
            selection: Selection::Rank(integer(&a[1])?, integer(&a[2])?),
            key: take(a, 0),
        },
        "zremrangebyscore" | "zcount" => {
            let interval = Interval::Score(parse_score_range(&a[1], &a[2])?);
            let key = take(a, 0);
            if name == "zcount" {
                ZSetOp::Count { key, interval }
            } else {
                ZSetOp::RemRange {
                    key,
                    selection: Selection::Interval(interval),
                }
            }
        }
        "zremrangebylex" | "zlexcount" => {
            let interval = Interval::Lex(parse_lex_range(&a[1], &a[2])?);
            let key = take(a, 0);
            if name == "zlexcount" {
                ZSetOp::Count { key, interval }
            } else {
                ZSetOp::RemRange {
                    key,
                    selection: Selection::Interval(interval),
                }
            }
        }
        "zpopmin" | "zpopmax" => {
            let count = match a.len() {
                1 => None,
                2 => Some(
                    parse_i64(&a[1])
                        .and_then(|n| u64::try_from(n).ok())
                        .ok_or_else(|| Frame::error(MUST_BE_POSITIVE))?,
                ),
                _ => return Err(syntax_error()),
            };
            ZSetOp::Pop {
                key: take(a, 0),
                max: name == "zpopmax",
                count,
            }
        }
        "zunion" | "zinter" | "zdiff" | "zunionstore" | "zinterstore" | "zdiffstore" => {
            ZSetOp::Combine(parse_combine(name, a)?)
        }
        "zintercard" => {
            // Redis checks numkeys as its other combining commands do.
            let numkeys = integer(&a[0])?;
            if numkeys < 1 {
                return Err(Frame::error(
                    "ERR at least 1 input key is needed for 'zintercard' command",
                ));
            }
            let numkeys = usize::try_from(numkeys).unwrap_or(usize::MAX);
            if numkeys > a.len() - 1 {
                return Err(syntax_error());
            }
            check_keys(&a[1..=numkeys])?;
            let limit = crate::sets::parse_card_limit(&a[numkeys + 1..])?;
            let keys = take_all(&mut a[1..=numkeys]);
            ZSetOp::Combine(CombineOp {
                how: Combine::Inter,
                options: Ok(CombineOptions {
                    weights: vec![1.0; keys.len()],
                    aggregate: Aggregate::Sum,
                    withscores: false,
                }),
                keys,
                store: None,
                card_limit: Some(limit),
            })
        }
        "zmpop" => parse_zmpop(a, None)?,
        "bzmpop" => {
            let (timeout, rest) = a.split_at_mut(1);
            let timeout_ms = crate::lists::parse_timeout(&timeout[0])?;
            parse_zmpop(rest, Some(timeout_ms))?
        }
        "bzpopmin" | "bzpopmax" => {
            let last = a.len() - 1;
            let timeout_ms = crate::lists::parse_timeout(&a[last])?;
            check_keys(&a[..last])?;
            ZSetOp::BPop {
                keys: take_all(&mut a[..last]),
                max: name == "bzpopmax",
                timeout_ms,
                waiting: false,
            }
        }
        "zrandmember" => {
            let (count, with_scores) = crate::hashes::parse_random_count(a, b"withscores")?;
            ZSetOp::RandMember {
                key: take(a, 0),
                count,
                with_scores,
            }
        }
        "zscan" => {
            crate::commands::check_key(&a[0])?;
            let cursor = crate::commands::parse_cursor(&a[1])
                .ok_or_else(|| Frame::error("ERR invalid cursor"))?;
            ZSetOp::Scan {
                options: parse_scan_options(&a[2..]),
                key: take(a, 0),
                cursor,
            }
        }
        other => unreachable!("sorted-set command `{other}` without a parser"),
    })
}

/// ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...].
fn parse_zadd(a: &mut [Vec<u8>]) -> Result<ZSetOp, Frame> {
    let mut flags = AddFlags::default();
    let mut i = 1;
    while i < a.len() {
        match a[i].to_ascii_lowercase().as_slice() {
            b"nx" => flags.nx = true,
            b"xx" => flags.xx = true,
            b"gt" => flags.gt = true,
            b"lt" => flags.lt = true,
            b"ch" => flags.ch = true,
            b"incr" => flags.incr = true,
            _ => break,
        }
        i += 1;
    }
    let elements = a.len() - i;
    if elements == 0 || elements % 2 != 0 {
        return Err(syntax_error());
    }
    if flags.nx && flags.xx {
        return Err(Frame::error(
            "ERR XX and NX options at the same time are not compatible",
        ));
    }
    if ((flags.gt || flags.lt) && flags.nx) || (flags.gt && flags.lt) {
        return Err(Frame::error(
            "ERR GT, LT, and/or NX options at the same time are not compatible",
        ));
    }
    if flags.incr && elements > 2 {
        return Err(Frame::error(
            "ERR INCR option supports a single increment-element pair",
        ));
    }
    let mut scores = Vec::with_capacity(elements / 2);
    for pair in a[i..].chunks_exact(2) {
        scores.push(parse_score(&pair[0]).ok_or_else(|| Frame::error(NOT_A_FLOAT))?);
    }
    for pair in a[i..].chunks_exact(2) {
        check_member(&pair[1])?;
    }
    let pairs = scores
        .into_iter()
        .zip(a[i..].chunks_exact_mut(2).map(|pair| take(pair, 1)))
        .collect();
    Ok(ZSetOp::Add {
        key: take(a, 0),
        flags,
        pairs,
    })
}

/// The range commands, as one parser with each older form's type and
/// direction fixed (so their own options are the only ones accepted).
fn parse_range(name: &str, a: &mut [Vec<u8>]) -> Result<RangeOp, Frame> {
    #[derive(Clone, Copy, PartialEq)]
    enum By {
        Auto,
        Rank,
        Score,
        Lex,
    }
    let store = name == "zrangestore";
    let (mut by, mut rev) = match name {
        "zrangebyscore" => (By::Score, Some(false)),
        "zrevrangebyscore" => (By::Score, Some(true)),
        "zrevrange" => (By::Rank, Some(true)),
        "zrangebylex" => (By::Lex, Some(false)),
        "zrevrangebylex" => (By::Lex, Some(true)),
        _ => (By::Auto, None),
    };
    let first = usize::from(store);
    let (mut min, mut max) = (first + 1, first + 2);
    let (mut withscores, mut offset, mut count) = (false, 0, -1);
    let mut j = first + 3;
    while j < a.len() {
        let left = a.len() - j - 1;
        let option = a[j].to_ascii_lowercase();
        match option.as_slice() {
            b"withscores" if !store => withscores = true,
            b"limit" if left >= 2 => {
                offset = integer(&a[j + 1])?;
                count = integer(&a[j + 2])?;
                j += 2;
            }
            b"rev" if rev.is_none() => rev = Some(true),
            b"bylex" if by == By::Auto => by = By::Lex,
            b"byscore" if by == By::Auto => by = By::Score,
            _ => return Err(syntax_error()),
        }
        j += 1;
    }
    let rev = rev.unwrap_or(false);
    if by == By::Auto {
        by = By::Rank;
    }
    if count != -1 && by == By::Rank {
        return Err(Frame::error(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if withscores && by == By::Lex {
        return Err(Frame::error(
            "ERR syntax error, WITHSCORES not supported in combination with BYLEX",
        ));
    }
    if rev && by != By::Rank {
        // Given as `max min`.
        std::mem::swap(&mut min, &mut max);
    }
    let selection = match by {
        By::Score => Selection::Interval(Interval::Score(parse_score_range(&a[min], &a[max])?)),
        By::Lex => Selection::Interval(Interval::Lex(parse_lex_range(&a[min], &a[max])?)),
        _ => Selection::Rank(integer(&a[min])?, integer(&a[max])?),
    };
    check_keys(&a[..first + 1])?;
    Ok(RangeOp {
        key: take(a, first),
        store: store.then(|| take(a, 0)),
        selection,
        rev,
        offset,
        count,
        withscores,
    })
}

/// ZUNION/ZINTER/ZDIFF numkeys key... [WEIGHTS w...] [AGGREGATE
/// SUM|MIN|MAX] [WITHSCORES], and the STORE forms with a destination first
/// (and no WITHSCORES).
fn parse_combine(name: &str, a: &mut [Vec<u8>]) -> Result<CombineOp, Frame> {
    let store = name.ends_with("store");
    let how = match &name[..5] {
        "zunio" => Combine::Union,
        "zinte" => Combine::Inter,
        _ => Combine::Diff,
    };
    let at = usize::from(store);
    let numkeys = integer(&a[at])?;
    if numkeys < 1 {
        return Err(Frame::error(format!(
            "ERR at least 1 input key is needed for '{name}' command"
        )));
    }
    let numkeys = usize::try_from(numkeys).unwrap_or(usize::MAX);
    if numkeys > a.len() - at - 1 {
        return Err(syntax_error());
    }
    let keys_end = at + 1 + numkeys;
    check_keys(&a[at + 1..keys_end])?;
    let options = parse_combine_options(&a[keys_end..], numkeys, how, store);
    Ok(CombineOp {
        how,
        keys: take_all(&mut a[at + 1..keys_end]),
        store: store.then(|| take(a, 0)),
        card_limit: None,
        options,
    })
}

fn parse_combine_options(
    a: &[Vec<u8>],
    numkeys: usize,
    how: Combine,
    store: bool,
) -> Result<CombineOptions, Frame> {
    let mut options = CombineOptions {
        weights: vec![1.0; numkeys],
        aggregate: Aggregate::Sum,
        withscores: false,
    };
    let mut j = 0;
    while j < a.len() {
        let left = a.len() - j - 1;
        let option = a[j].to_ascii_lowercase();
        match option.as_slice() {
            b"weights" if how != Combine::Diff && left >= numkeys => {
                for (i, weight) in a[j + 1..=j + numkeys].iter().enumerate() {
                    options.weights[i] = parse_score(weight)
                        .ok_or_else(|| Frame::error("ERR weight value is not a float"))?;
                }
                j += numkeys;
            }
            b"aggregate" if how != Combine::Diff && left >= 1 => {
                options.aggregate = match a[j + 1].to_ascii_lowercase().as_slice() {
                    b"sum" => Aggregate::Sum,
                    b"min" => Aggregate::Min,
                    b"max" => Aggregate::Max,
                    _ => return Err(syntax_error()),
                };
                j += 1;
            }
            b"withscores" if !store => options.withscores = true,
            _ => return Err(syntax_error()),
        }
        j += 1;
    }
    Ok(options)
}

// ---- reading numbers as Redis does ----

/// The longest prefix of `s` that C's `strtod` reads (after leading
/// spaces): its value and length, `(0.0, 0)` if none.
pub(crate) fn strtod_prefix(s: &[u8]) -> (f64, usize) {
    let mut i = 0;
    while i < s.len() && matches!(s[i], b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r') {
        i += 1;
    }
    let negative = s.get(i) == Some(&b'-');
    if matches!(s.get(i), Some(b'-' | b'+')) {
        i += 1;
    }
    let sign = if negative { -1.0 } else { 1.0 };
    let rest = &s[i..];
    let starts =
        |word: &[u8]| rest.len() >= word.len() && rest[..word.len()].eq_ignore_ascii_case(word);
    if starts(b"infinity") {
        return (sign * f64::INFINITY, i + 8);
    }
    if starts(b"inf") {
        return (sign * f64::INFINITY, i + 3);
    }
    if starts(b"nan") {
        let mut end = i + 3;
        // `nan(chars)`, as strtod reads it.
        if s.get(end) == Some(&b'(') {
            let close = s[end + 1..]
                .iter()
                .position(|&b| !(b.is_ascii_alphanumeric() || b == b'_'));
            if let Some(n) = close {
                if s[end + 1 + n] == b')' {
                    end += n + 2;
                }
            }
        }
        return (f64::NAN, end);
    }
    if (starts(b"0x") || starts(b"0X"))
        && rest.get(2).is_some_and(|&b| {
            b.is_ascii_hexdigit() || (b == b'.' && rest.get(3).is_some_and(u8::is_ascii_hexdigit))
        })
    {
        let (value, used) = hex_prefix(&rest[2..]);
        return (sign * value, i + 2 + used);
    }
    // digits [. digits] [e [sign] digits]
    let mut j = 0;
    let mut mantissa_digits = 0;
    while j < rest.len() && rest[j].is_ascii_digit() {
        j += 1;
        mantissa_digits += 1;
    }
    if j < rest.len() && rest[j] == b'.' {
        j += 1;
        while j < rest.len() && rest[j].is_ascii_digit() {
            j += 1;
            mantissa_digits += 1;
        }
    }
    if mantissa_digits == 0 {
        return (0.0, 0);
    }
    if j < rest.len() && (rest[j] == b'e' || rest[j] == b'E') {
        let mut k = j + 1;
        if k < rest.len() && (rest[k] == b'+' || rest[k] == b'-') {
            k += 1;
        }
        if k < rest.len() && rest[k].is_ascii_digit() {
            while k < rest.len() && rest[k].is_ascii_digit() {
                k += 1;
            }
            j = k;
        }
    }
    let text = std::str::from_utf8(&rest[..j]).expect("ASCII");
    // Rust's parser rounds correctly, as glibc's strtod does; it wants a
    // digit before an exponent (`.e5` is not read above, `5.e5` is).
    let value: f64 = text
        .replace(".e", ".0e")
        .replace(".E", ".0E")
        .parse()
        .unwrap_or(0.0);
    (sign * value, i + j)
}

/// `hex[.hex][p[sign]digits]` after `0x`: its value and length.
fn hex_prefix(s: &[u8]) -> (f64, usize) {
    let mut mantissa: u128 = 0;
    let mut exponent: i64 = 0;
    let mut j = 0;
    let mut seen_point = false;
    let mut digits = 0;
    while j < s.len() {
        let b = s[j];
        if b == b'.' && !seen_point {
            seen_point = true;
        } else if let Some(d) = (b as char).to_digit(16) {
            if mantissa >> 120 == 0 {
                mantissa = mantissa * 16 + u128::from(d);
                if seen_point {
                    exponent -= 4;
                }
            } else if !seen_point {
                // Digits past what 120 bits hold: dropped, their weight kept.
                exponent += 4;
            }
            digits += 1;
        } else {
            break;
        }
        j += 1;
    }
    if digits == 0 {
        return (0.0, 0);
    }
    if j < s.len() && (s[j] == b'p' || s[j] == b'P') {
        let mut k = j + 1;
        let negative = s.get(k) == Some(&b'-');
        if matches!(s.get(k), Some(b'-' | b'+')) {
            k += 1;
        }
        let from = k;
        let mut e: i64 = 0;
        while k < s.len() && s[k].is_ascii_digit() {
            e = (e * 10 + i64::from(s[k] - b'0')).min(1 << 20);
            k += 1;
        }
        if k > from {
            exponent += if negative { -e } else { e };
            j = k;
        }
    }
    let value = mantissa as f64;
    // Scaled in steps so that no step overflows before the result would.
    let mut scaled = value;
    let mut e = exponent.clamp(-2200, 2200);
    while e != 0 {
        let step = e.clamp(-1000, 1000);
        scaled *= 2f64.powi(step as i32);
        e -= step;
    }
    (scaled, j)
}

/// A score, increment or weight: the whole argument as `strtod` reads it,
/// refused as Redis refuses it (empty, leading space, anything after the
/// number, NaN, an overflow, an underflow to zero). `-0` reads as `0`.
pub(crate) fn parse_score(arg: &[u8]) -> Option<f64> {
    if arg.is_empty() || matches!(arg[0], b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r') {
        return None;
    }
    let (value, used) = strtod_prefix(arg);
    if used != arg.len() || value.is_nan() {
        return None;
    }
    let text = &arg[..used];
    let literal_infinity = text.iter().any(|b| b.eq_ignore_ascii_case(&b'i'));
    if value.is_infinite() && !literal_infinity {
        return None;
    }
    if value == 0.0 && !mantissa_is_zero(text) {
        return None;
    }
    Some(value + 0.0)
}

/// Whether a number's mantissa (before its exponent) is all zeros: a zero
/// result from a nonzero one is an underflow.
pub(crate) fn mantissa_is_zero(text: &[u8]) -> bool {
    let lower = text.to_ascii_lowercase();
    let (digits, exponent) = match lower.windows(2).position(|w| w == b"0x") {
        Some(at) => (&lower[at + 2..], b'p'),
        None => (&lower[..], b'e'),
    };
    let end = digits
        .iter()
        .position(|&b| b == exponent)
        .unwrap_or(digits.len());
    digits[..end]
        .iter()
        .all(|&b| !b.is_ascii_hexdigit() || b == b'0')
}

/// A range bound as Redis reads one: `(` for exclusive, then `strtod` of a
/// prefix, with nothing but a NUL after it; not NaN.
fn parse_score_bound(arg: &[u8]) -> Option<ScoreBound> {
    let (exclusive, text) = match arg.first() {
        Some(b'(') => (true, &arg[1..]),
        _ => (false, arg),
    };
    let (value, used) = strtod_prefix(text);
    if text.get(used).is_some_and(|&b| b != 0) || value.is_nan() {
        return None;
    }
    Some(ScoreBound {
        score: value + 0.0,
        exclusive,
    })
}

pub(crate) fn parse_score_range(min: &[u8], max: &[u8]) -> Result<ScoreRange, Frame> {
    match (parse_score_bound(min), parse_score_bound(max)) {
        (Some(min), Some(max)) => Ok(ScoreRange { min, max }),
        _ => Err(Frame::error(RANGE_NOT_A_FLOAT)),
    }
}

/// A lex bound; a member past [`MAX_MEMBER_BYTES`] (longer than any member)
/// becomes the bound of its prefix that selects the same members, so that
/// it fits a row key.
fn parse_lex_bound(arg: &[u8], is_min: bool) -> Option<LexBound> {
    let only = arg.get(1).is_none_or(|&b| b == 0);
    let bound = match arg.first() {
        Some(b'+') if only => LexBound::Max,
        Some(b'-') if only => LexBound::Min,
        Some(b'(') => LexBound::Exclusive(arg[1..].to_vec()),
        Some(b'[') => LexBound::Inclusive(arg[1..].to_vec()),
        _ => return None,
    };
    Some(match bound {
        LexBound::Inclusive(m) | LexBound::Exclusive(m) if m.len() > MAX_MEMBER_BYTES => {
            let prefix = m[..MAX_MEMBER_BYTES].to_vec();
            // A member `>=` or `>` a longer string is `>` its prefix; one
            // `<=` or `<` it is `<=` its prefix.
            if is_min {
                LexBound::Exclusive(prefix)
            } else {
                LexBound::Inclusive(prefix)
            }
        }
        other => other,
    })
}

pub(crate) fn parse_lex_range(min: &[u8], max: &[u8]) -> Result<LexRange, Frame> {
    match (parse_lex_bound(min, true), parse_lex_bound(max, false)) {
        (Some(min), Some(max)) => Ok(LexRange { min, max }),
        _ => Err(Frame::error(NOT_A_LEX_RANGE)),
    }
}

// ---- running ----

fn whole() -> Interval {
    Interval::Score(ScoreRange {
        min: ScoreBound {
            score: f64::NEG_INFINITY,
            exclusive: false,
        },
        max: ScoreBound {
            score: f64::INFINITY,
            exclusive: false,
        },
    })
}

/// Redis's rank range (negative from the end, clamped) over `len` rows:
/// `(first, last)` inclusive, or `None` when empty.
fn rank_range(len: u64, start: i64, stop: i64) -> Option<(u64, u64)> {
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    let start = if start < 0 {
        start.saturating_add(len).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        stop.saturating_add(len)
    } else {
        stop.min(len - 1)
    };
    if start > stop || start >= len {
        return None;
    }
    Some((start as u64, stop as u64))
}

fn double(score: f64) -> Frame {
    Frame::Double(score)
}

/// Members, or members and scores (WITHSCORES).
fn range_reply(rows: Vec<(Vec<u8>, f64)>, withscores: bool) -> Frame {
    if withscores {
        Frame::Pairs(
            rows.into_iter()
                .map(|(m, s)| (Frame::Bulk(m), double(s)))
                .collect(),
        )
    } else {
        Frame::Array(rows.into_iter().map(|(m, _)| Frame::Bulk(m)).collect())
    }
}

/// The rows `selection` names, in its order (`rev`: descending), after
/// LIMIT's `offset` and `count`.
fn select(
    rows: &KeyRows<'_>,
    len: u64,
    selection: &Selection,
    rev: bool,
    offset: i64,
    count: i64,
) -> Result<Vec<(Vec<u8>, f64)>, ReactorError> {
    match selection {
        Selection::Rank(start, stop) => {
            let Some((first, last)) = rank_range(len, *start, *stop) else {
                return Ok(Vec::new());
            };
            if rev {
                // Ranks from the top: ascending ranks `len-1-last ..`.
                let mut found = rows.zranks(len, len - 1 - last, len - 1 - first)?;
                found.reverse();
                Ok(found)
            } else {
                rows.zranks(len, first, last)
            }
        }
        Selection::Interval(interval) => {
            if offset < 0 {
                return Ok(Vec::new());
            }
            let direction = if rev {
                ScanDirection::Reverse
            } else {
                ScanDirection::Forward
            };
            let take = u64::try_from(count).unwrap_or(u64::MAX);
            rows.zinterval(interval, direction, offset as u64, take)
        }
    }
}

/// Removes and returns the `count` members with the lowest scores (`max`:
/// highest), lowest (highest) first; none if the key holds none.
fn pop(rows: &mut KeyRows<'_>, max: bool, count: u64) -> Result<Vec<(Vec<u8>, f64)>, Fail> {
    let found = rows.open(ZSET)?;
    if found.len == 0 || count == 0 {
        return Ok(Vec::new());
    }
    let direction = if max {
        ScanDirection::Reverse
    } else {
        ScanDirection::Forward
    };
    let popped = rows.zinterval(&whole(), direction, 0, count)?;
    for (member, _) in &popped {
        rows.zremove(member)?;
    }
    let removed = popped.len() as u64;
    rows.close(ZSET, found, found.len.saturating_sub(removed), removed > 0)?;
    debug_assert!(removed <= count);
    Ok(popped)
}

/// ZMPOP's arguments, checked in Redis's order: numkeys, the keys, MIN or
/// MAX, then COUNT once.
fn parse_zmpop(a: &mut [Vec<u8>], timeout_ms: Option<u64>) -> Result<ZSetOp, Frame> {
    let positive = |arg: &[u8], what: &str| {
        parse_i64(arg)
            .filter(|n| *n > 0)
            .ok_or_else(|| Frame::error(format!("ERR {what} should be greater than 0")))
    };
    let numkeys = positive(&a[0], "numkeys")?;
    let numkeys = usize::try_from(numkeys).unwrap_or(usize::MAX);
    if numkeys >= a.len() - 1 {
        return Err(syntax_error());
    }
    let max = match &a[numkeys + 1] {
        w if w.eq_ignore_ascii_case(b"min") => false,
        w if w.eq_ignore_ascii_case(b"max") => true,
        _ => return Err(syntax_error()),
    };
    let mut count = None;
    let mut rest = a[numkeys + 2..].iter();
    // Bounded by the arguments.
    while let Some(option) = rest.next() {
        match rest.next() {
            Some(n) if count.is_none() && option.eq_ignore_ascii_case(b"count") => {
                count = Some(positive(n, "count")? as u64);
            }
            _ => return Err(syntax_error()),
        }
    }
    check_keys(&a[1..=numkeys])?;
    Ok(ZSetOp::MPop {
        keys: take_all(&mut a[1..=numkeys]),
        max,
        count: count.unwrap_or(1),
        timeout_ms,
        waiting: false,
    })
}

fn is_wrongtype(reply: &Frame) -> bool {
    matches!(reply, Frame::Error(e) if e == WRONGTYPE)
}

/// Replaces whatever `dst` holds by a sorted set of `rows` (deleted if
/// none); replies how many.
async fn store_zset(tx: &Tx, dst: &[u8], rows: Vec<(Vec<u8>, f64)>) -> Result<Frame, ReactorError> {
    tx.on_key_reply(dst, move |key| {
        key.clear()?;
        let mut len = 0;
        for (member, score) in &rows {
            let old = key.zscore(member)?;
            len += u64::from(old.is_none());
            key.zput(member, *score, old)?;
        }
        key.close(ZSET, Found::default(), len, true)?;
        Ok(Frame::Integer(len as i64))
    })
    .await
}

/// Runs a sorted-set command inside `tx`.
pub(crate) async fn apply(tx: &Tx, op: &ZSetOp) -> Result<Frame, ReactorError> {
    Ok(match op {
        ZSetOp::Add { key, flags, pairs } => {
            let (flags, pairs) = (*flags, pairs.clone());
            tx.on_key_reply(key, move |rows| zadd(rows, flags, &pairs))
                .await?
        }
        ZSetOp::Score { key, member } => {
            let member = member.clone();
            tx.on_key_reply(key, move |rows| {
                Ok(match rows.read(ZSET)? {
                    None => Frame::Null,
                    Some(_) => rows.zscore(&member)?.map_or(Frame::Null, double),
                })
            })
            .await?
        }
        ZSetOp::MScore { key, members } => {
            let members = members.clone();
            tx.on_key_reply(key, move |rows| {
                let present = rows.read(ZSET)?.is_some();
                let mut replies = Vec::with_capacity(members.len());
                for member in &members {
                    let score = if present { rows.zscore(member)? } else { None };
                    replies.push(score.map_or(Frame::Null, double));
                }
                Ok(Frame::Array(replies))
            })
            .await?
        }
        ZSetOp::Card(key) => {
            tx.on_key_reply(key, |rows| {
                Ok(Frame::Integer(rows.read(ZSET)?.map_or(0, |f| f.len) as i64))
            })
            .await?
        }
        ZSetOp::Range(range) => zrange(tx, range).await?,
        ZSetOp::Rank {
            key,
            member,
            rev,
            withscore,
        } => {
            let (member, rev, withscore) = (member.clone(), *rev, *withscore);
            tx.on_key_reply(key, move |rows| {
                let missing = if withscore {
                    Frame::NullArray
                } else {
                    Frame::Null
                };
                let Some(found) = rows.read(ZSET)? else {
                    return Ok(missing);
                };
                let Some(score) = rows.zscore(&member)? else {
                    return Ok(missing);
                };
                let rank = rows.zrank(&member, score, found.len)?;
                let rank = if rev {
                    found.len.saturating_sub(rank + 1)
                } else {
                    rank
                };
                let rank = Frame::Integer(rank as i64);
                Ok(if withscore {
                    Frame::Array(vec![rank, double(score)])
                } else {
                    rank
                })
            })
            .await?
        }
        ZSetOp::Rem { key, members } => {
            let members = members.clone();
            tx.on_key_reply(key, move |rows| {
                let found = rows.open(ZSET)?;
                if found.len == 0 {
                    return Ok(Frame::Integer(0));
                }
                let mut removed = 0;
                for member in &members {
                    removed += u64::from(rows.zremove(member)?.is_some());
                }
                rows.close(ZSET, found, found.len.saturating_sub(removed), removed > 0)?;
                Ok(Frame::Integer(removed as i64))
            })
            .await?
        }
        ZSetOp::RemRange { key, selection } => {
            let selection = selection.clone();
            tx.on_key_reply(key, move |rows| {
                let found = rows.open(ZSET)?;
                if found.len == 0 {
                    return Ok(Frame::Integer(0));
                }
                let doomed = select(rows, found.len, &selection, false, 0, -1)?;
                for (member, _) in &doomed {
                    rows.zremove(member)?;
                }
                let removed = doomed.len() as u64;
                rows.close(ZSET, found, found.len.saturating_sub(removed), removed > 0)?;
                Ok(Frame::Integer(removed as i64))
            })
            .await?
        }
        ZSetOp::Count { key, interval } => {
            let interval = interval.clone();
            tx.on_key_reply(key, move |rows| {
                Ok(Frame::Integer(match rows.read(ZSET)? {
                    None => 0,
                    Some(_) => rows.zcount(&interval)? as i64,
                }))
            })
            .await?
        }
        ZSetOp::BPop {
            keys, max, waiting, ..
        } => {
            // The first key with members, in order, as BZPOPMIN answers:
            // `[key, member, score]`; a key of another type on the way is
            // an error.
            for key in keys {
                let (max, name) = (*max, key.clone());
                let reply = tx
                    .on_key_reply(key, move |rows| {
                        let mut popped = pop(rows, max, 1)?;
                        Ok(match popped.pop() {
                            None => Frame::NullArray,
                            Some((member, score)) => Frame::Array(vec![
                                Frame::Bulk(name),
                                Frame::Bulk(member),
                                double(score),
                            ]),
                        })
                    })
                    .await?;
                let passed_over = *waiting && is_wrongtype(&reply);
                if !matches!(reply, Frame::NullArray) && !passed_over {
                    return Ok(reply);
                }
            }
            Frame::NullArray
        }
        ZSetOp::MPop {
            keys,
            max,
            count,
            waiting,
            ..
        } => {
            // The first key with members, in order; a key of another type
            // on the way is an error, as in Redis.
            for key in keys {
                let (max, count, name) = (*max, *count, key.clone());
                let reply = tx
                    .on_key_reply(key, move |rows| {
                        let popped = pop(rows, max, count)?;
                        if popped.is_empty() {
                            return Ok(Frame::NullArray);
                        }
                        let pairs = popped
                            .into_iter()
                            .map(|(m, s)| Frame::Array(vec![Frame::Bulk(m), double(s)]))
                            .collect();
                        Ok(Frame::Array(vec![Frame::Bulk(name), Frame::Array(pairs)]))
                    })
                    .await?;
                let passed_over = *waiting && is_wrongtype(&reply);
                if !matches!(reply, Frame::NullArray) && !passed_over {
                    return Ok(reply);
                }
            }
            Frame::NullArray
        }
        ZSetOp::Pop { key, max, count } => {
            let (max, count) = (*max, *count);
            tx.on_key_reply(key, move |rows| {
                let popped = pop(rows, max, count.unwrap_or(1))?;
                Ok(match count {
                    None => Frame::Array(
                        popped
                            .into_iter()
                            .flat_map(|(m, s)| [Frame::Bulk(m), double(s)])
                            .collect(),
                    ),
                    Some(_) => range_reply(popped, true),
                })
            })
            .await?
        }
        ZSetOp::Combine(op) => combine(tx, op).await?,
        ZSetOp::RandMember {
            key,
            count,
            with_scores,
        } => {
            let (count, with_scores) = (*count, *with_scores);
            tx.on_key_reply(key, move |rows| {
                let found = rows.read(ZSET)?;
                let Some(count) = count else {
                    return Ok(match found {
                        None => Frame::Null,
                        Some(found) => crate::hashes::random_one(
                            found.len,
                            || rows.zrandom(),
                            || rows.zmembers(),
                        )?
                        .map_or(Frame::Null, |(m, _)| Frame::Bulk(m)),
                    });
                };
                let len = found.map_or(0, |f| f.len);
                let picked = crate::hashes::random_picks(
                    "ZRANDMEMBER",
                    "members",
                    len,
                    count,
                    || rows.zrandom(),
                    || rows.zmembers(),
                )?;
                Ok(match picked {
                    Ok(picked) => range_reply(picked, with_scores),
                    Err(error) => error,
                })
            })
            .await?
        }
        ZSetOp::Scan {
            key,
            cursor,
            options,
        } => {
            let (cursor, options) = (*cursor, options.clone());
            tx.on_key_reply(key, move |rows| {
                if rows.read(ZSET)?.is_none() {
                    return Ok(scan_reply(0, Vec::new()));
                }
                let options = options?;
                let (next, found) = rows.scan(
                    &ZSET_MEMBERS,
                    cursor,
                    options.count,
                    options.pattern.as_deref(),
                )?;
                let elements = found
                    .into_iter()
                    .flat_map(|(m, s)| {
                        let score = format_double(s).into_bytes();
                        [Frame::Bulk(m), Frame::Bulk(score)]
                    })
                    .collect();
                Ok(scan_reply(next, elements))
            })
            .await?
        }
    })
}

/// ZADD's pairs, in order (a member given twice: the later one wins).
fn zadd(rows: &mut KeyRows<'_>, flags: AddFlags, pairs: &[(f64, Vec<u8>)]) -> Result<Frame, Fail> {
    let nothing = if flags.incr {
        Frame::Null
    } else {
        Frame::Integer(0)
    };
    let found = rows.open(ZSET)?;
    if found.len == 0 && flags.xx {
        return Ok(nothing);
    }
    let (mut added, mut updated) = (0u64, 0u64);
    let mut last = None;
    for (score, member) in pairs {
        let current = rows.zscore(member)?;
        match current {
            Some(_) if flags.nx => continue,
            None if flags.xx => continue,
            Some(old) => {
                let new = if flags.incr { old + score } else { *score };
                if new.is_nan() {
                    // INCR's single pair: nothing was written yet.
                    return Err(Fail::Reply(Frame::error(NAN_SCORE)));
                }
                if (flags.lt && new >= old) || (flags.gt && new <= old) {
                    continue;
                }
                if new != old {
                    rows.zput(member, new, Some(old))?;
                    updated += 1;
                }
                last = Some(new + 0.0);
            }
            None => {
                rows.zput(member, *score, None)?;
                added += 1;
                last = Some(score + 0.0);
            }
        }
    }
    rows.close(ZSET, found, found.len + added, added + updated > 0)?;
    Ok(if flags.incr {
        last.map_or(Frame::Null, double)
    } else if flags.ch {
        Frame::Integer((added + updated) as i64)
    } else {
        Frame::Integer(added as i64)
    })
}

async fn zrange(tx: &Tx, range: &RangeOp) -> Result<Frame, ReactorError> {
    let op = range.clone();
    let found = tx
        .on_key(&range.key, move |rows| {
            let Some(found) = rows.read(ZSET)? else {
                return Ok(Vec::new());
            };
            let selected = select(rows, found.len, &op.selection, op.rev, op.offset, op.count)?;
            Ok(selected)
        })
        .await?;
    let rows = match found {
        Ok(rows) => rows,
        Err(reply) => return Ok(reply),
    };
    Ok(match &range.store {
        Some(dst) => store_zset(tx, dst, rows).await?,
        None => range_reply(rows, range.withscores),
    })
}

/// `target` aggregated with `value`, as Redis does (a sum that is NaN, from
/// `inf + -inf`, is 0).
fn aggregate(how: Aggregate, target: f64, value: f64) -> f64 {
    match how {
        Aggregate::Sum => {
            let sum = target + value;
            if sum.is_nan() {
                0.0
            } else {
                sum
            }
        }
        Aggregate::Min if value < target => value,
        Aggregate::Max if value > target => value,
        Aggregate::Min | Aggregate::Max => target,
    }
}

/// A weighted score (a NaN, from `inf * 0`, is 0).
fn weighted(score: f64, weight: f64) -> f64 {
    let value = score * weight;
    if value.is_nan() {
        0.0
    } else {
        value
    }
}

/// An input's members and scores (a set's count 1 each).
async fn elements(tx: &Tx, key: &[u8], kind: Members) -> Result<Vec<(Vec<u8>, f64)>, ReactorError> {
    Ok(tx
        .on_key(key, move |rows| {
            Ok(match kind {
                Members::Set => rows.set_members()?.into_iter().map(|m| (m, 1.0)).collect(),
                _ => rows.zmembers()?,
            })
        })
        .await?
        .unwrap_or_default())
}

/// The scores `key` (of `kind`) has for `members` (`None`: not a member).
async fn lookup(
    tx: &Tx,
    key: &[u8],
    kind: Members,
    members: Vec<Vec<u8>>,
) -> Result<Vec<Option<f64>>, ReactorError> {
    Ok(tx
        .on_key(key, move |rows| {
            let mut scores = Vec::with_capacity(members.len());
            for member in &members {
                scores.push(match kind {
                    Members::Set => rows.set_contains(member)?.then_some(1.0),
                    _ => rows.zscore(member)?,
                });
            }
            Ok(scores)
        })
        .await?
        .unwrap_or_default())
}

async fn combine(tx: &Tx, op: &CombineOp) -> Result<Frame, ReactorError> {
    // Each input's kind and size (0: absent), or the first WRONGTYPE.
    let mut inputs = Vec::with_capacity(op.keys.len());
    for key in &op.keys {
        match tx
            .on_key(key, |rows| {
                Ok(rows
                    .read_any()?
                    .map_or((Members::None, 0), |(kind, found)| (kind, found.len)))
            })
            .await?
        {
            Ok(input) => inputs.push(input),
            Err(reply) => return Ok(reply),
        }
    }
    let options = match &op.options {
        Ok(options) => options,
        Err(reply) => return Ok(reply.clone()),
    };
    let how = options.aggregate;
    // Union and intersection walk the inputs from the smallest (the order
    // Redis aggregates in).
    let mut order: Vec<usize> = (0..op.keys.len()).collect();
    order.sort_by_key(|&i| inputs[i].1);
    let mut result: Vec<(Vec<u8>, f64)> = match op.how {
        Combine::Union => {
            let mut scores: HashMap<Vec<u8>, f64> = HashMap::new();
            for &i in &order {
                let (kind, len) = inputs[i];
                if len == 0 {
                    continue;
                }
                for (member, score) in elements(tx, &op.keys[i], kind).await? {
                    let value = weighted(score, options.weights[i]);
                    scores
                        .entry(member)
                        .and_modify(|s| *s = aggregate(how, *s, value))
                        .or_insert(value);
                }
            }
            scores.into_iter().collect()
        }
        Combine::Inter => {
            if inputs.iter().any(|&(_, len)| len == 0) {
                Vec::new()
            } else {
                let first = order[0];
                let mut rows: Vec<(Vec<u8>, f64)> = elements(tx, &op.keys[first], inputs[first].0)
                    .await?
                    .into_iter()
                    .map(|(m, s)| (m, weighted(s, options.weights[first])))
                    .collect();
                for &i in &order[1..] {
                    if rows.is_empty() {
                        break;
                    }
                    let members = rows.iter().map(|(m, _)| m.clone()).collect();
                    let scores = lookup(tx, &op.keys[i], inputs[i].0, members).await?;
                    rows = rows
                        .into_iter()
                        .zip(scores)
                        .filter_map(|((m, s), other)| {
                            other.map(|o| (m, aggregate(how, s, o * options.weights[i])))
                        })
                        .collect();
                }
                rows
            }
        }
        Combine::Diff => {
            if inputs[0].1 == 0 {
                Vec::new()
            } else {
                let mut rows = elements(tx, &op.keys[0], inputs[0].0).await?;
                for (i, &(kind, len)) in inputs.iter().enumerate().skip(1) {
                    if rows.is_empty() {
                        break;
                    }
                    if len == 0 {
                        continue;
                    }
                    let members = rows.iter().map(|(m, _)| m.clone()).collect();
                    let scores = lookup(tx, &op.keys[i], kind, members).await?;
                    rows = rows
                        .into_iter()
                        .zip(scores)
                        .filter(|(_, other)| other.is_none())
                        .map(|(row, _)| row)
                        .collect();
                }
                rows
            }
        }
    };
    if let Some(limit) = op.card_limit {
        let count = result.len() as u64;
        let count = if limit > 0 { count.min(limit) } else { count };
        return Ok(Frame::Integer(i64::try_from(count).unwrap_or(i64::MAX)));
    }
    result.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    for row in &mut result {
        row.1 += 0.0;
    }
    Ok(match &op.store {
        Some(dst) => store_zset(tx, dst, result).await?,
        None => range_reply(result, options.withscores),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_read_as_redis_reads_them() {
        for (text, value) in [
            ("1", 1.0),
            ("-1.5", -1.5),
            ("+2", 2.0),
            (".5", 0.5),
            ("5.", 5.0),
            ("1e3", 1000.0),
            ("1E-2", 0.01),
            ("inf", f64::INFINITY),
            ("-inf", f64::NEG_INFINITY),
            ("+Infinity", f64::INFINITY),
            ("0x10", 16.0),
            ("0x1p-2", 0.25),
            ("-0", 0.0),
            ("1e-310", 1e-310),
            ("0e999", 0.0),
        ] {
            assert_eq!(parse_score(text.as_bytes()), Some(value), "{text}");
        }
        for bad in [
            "", " 1", "1 ", "abc", "nan", "-nan", "1e400", "1e-400", "1e", "0x", "1.2.3", "--1",
            "1\0",
        ] {
            assert_eq!(parse_score(bad.as_bytes()), None, "{bad:?}");
        }
        assert!(parse_score(b"-0").unwrap().is_sign_positive());
    }

    #[test]
    fn range_bounds_read_a_prefix() {
        let bound = |text: &str| parse_score_bound(text.as_bytes());
        assert_eq!(
            bound("(1.5"),
            Some(ScoreBound {
                score: 1.5,
                exclusive: true
            })
        );
        assert_eq!(bound("-inf").unwrap().score, f64::NEG_INFINITY);
        // What strtod leaves: nothing, or a NUL.
        assert_eq!(bound("").unwrap().score, 0.0);
        assert_eq!(bound("(").unwrap().score, 0.0);
        assert_eq!(bound(" 5").unwrap().score, 5.0);
        assert_eq!(bound("5\0x").unwrap().score, 5.0);
        assert_eq!(bound("1e400").unwrap().score, f64::INFINITY);
        assert_eq!(bound("5x"), None);
        assert_eq!(bound(" "), None);
        assert_eq!(bound("nan"), None);
        assert_eq!(bound("[1"), None);
    }

    #[test]
    fn lex_bounds() {
        let lex = |text: &str| parse_lex_bound(text.as_bytes(), true);
        assert_eq!(lex("-"), Some(LexBound::Min));
        assert_eq!(lex("+"), Some(LexBound::Max));
        assert_eq!(lex("[a"), Some(LexBound::Inclusive(b"a".to_vec())));
        assert_eq!(lex("("), Some(LexBound::Exclusive(Vec::new())));
        for bad in ["", "a", "+a", "-a"] {
            assert_eq!(lex(bad), None, "{bad:?}");
        }
        let long = [b'['].into_iter().chain([b'x'; 3000]).collect::<Vec<u8>>();
        assert_eq!(
            parse_lex_bound(&long, true),
            Some(LexBound::Exclusive(vec![b'x'; MAX_MEMBER_BYTES]))
        );
        assert_eq!(
            parse_lex_bound(&long, false),
            Some(LexBound::Inclusive(vec![b'x'; MAX_MEMBER_BYTES]))
        );
    }

    #[test]
    fn rank_ranges_follow_redis() {
        assert_eq!(rank_range(5, 0, -1), Some((0, 4)));
        assert_eq!(rank_range(5, -2, -1), Some((3, 4)));
        assert_eq!(rank_range(5, 1, 100), Some((1, 4)));
        assert_eq!(rank_range(5, 3, 1), None);
        assert_eq!(rank_range(5, 7, 9), None);
        assert_eq!(rank_range(0, 0, -1), None);
        assert_eq!(rank_range(5, -100, 0), Some((0, 0)));
        assert_eq!(rank_range(5, i64::MIN, i64::MAX), Some((0, 4)));
    }

    #[test]
    fn aggregates_follow_redis() {
        assert_eq!(
            aggregate(Aggregate::Sum, f64::INFINITY, f64::NEG_INFINITY),
            0.0
        );
        assert_eq!(aggregate(Aggregate::Min, 1.0, 2.0), 1.0);
        assert_eq!(aggregate(Aggregate::Max, 1.0, 2.0), 2.0);
        assert_eq!(weighted(f64::INFINITY, 0.0), 0.0);
    }
}

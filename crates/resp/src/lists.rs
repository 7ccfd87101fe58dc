//! List commands beside RPUSH, LPUSH, LRANGE and LLEN (which stay inline
//! in [`Op`], on the benchmarks' hot path): LPOP and RPOP (with a count),
//! LINDEX, LSET, LINSERT, LREM, LTRIM, LPOS (RANK, COUNT, MAXLEN), LPUSHX,
//! RPUSHX, LMOVE, RPOPLPUSH, LMPOP, and the blocking BLPOP, BRPOP, BLMOVE,
//! BRPOPLPUSH and BLMPOP, with Redis 7.0's replies, error texts and order
//! of checks.
//!
//! **A list is one value**: the key's entry holds the whole list
//! (`Value::List`), so every change reads and rewrites all of it, however
//! small the change (LPOP of a million-element list copies the rest). A
//! known limitation, kept because lists here are short queues and logs;
//! a row per element (as hashes, sets and sorted sets have) would lift it.
//!
//! A list emptied by a command is deleted, as in Redis. A command that
//! changes nothing (LREM of no match, LINSERT of a missing pivot, LTRIM
//! that keeps every element, LPUSHX of a missing key, a pop of nothing)
//! writes nothing, so WATCH is not aborted by it (Redis signals the key on
//! every LTRIM); LSET always writes, as SET of the same value does.
//!
//! **Blocking forms.** Each is an [`Op`] of its non-blocking form (LMOVE,
//! LMPOP, a pop of the first non-empty list) that answers Redis's
//! "nothing to pop" reply (the nil array, or nil for BLMOVE and
//! BRPOPLPUSH) when it finds nothing: that is what they answer inside
//! MULTI and scripts, where Redis does not block either. Outside MULTI the
//! connection re-runs the op, each time a transaction of its own, until it
//! pops or its [`ListOp::timeout_ms`] passes (see `connection`); no
//! transaction is held open while it waits.

use std::collections::VecDeque;

use roost_reactor::ReactorError;

use crate::commands::{check_keys, check_value, integer, syntax_error, take, take_all};
use crate::protocol::Frame;
use crate::store::{parse_i64, Entry, Op, Tx, Value, Write, WRONGTYPE};

const MUST_BE_POSITIVE: &str = "ERR value is out of range, must be positive";
const RANK_ZERO: &str = "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list";
const NOT_A_TIMEOUT: &str = "ERR timeout is not a float or out of range";
const NEGATIVE_TIMEOUT: &str = "ERR timeout is negative";

/// A list command (see the module doc for which).
#[derive(Debug, Clone)]
pub(crate) enum ListOp {
    /// LPUSHX, RPUSHX: pushes only onto a list that exists.
    PushX {
        key: Vec<u8>,
        left: bool,
        values: Vec<Vec<u8>>,
    },
    /// LPOP, RPOP; `count` given: an array reply.
    Pop {
        key: Vec<u8>,
        left: bool,
        count: Option<u64>,
    },
    /// LINDEX. The index's error is answered after the key's type, as
    /// Redis checks it.
    Index {
        key: Vec<u8>,
        index: Result<i64, Frame>,
    },
    /// LSET (the index's error after the key's existence and type).
    Set {
        key: Vec<u8>,
        index: Result<i64, Frame>,
        value: Vec<u8>,
    },
    /// LINSERT key BEFORE|AFTER pivot element.
    Insert {
        key: Vec<u8>,
        before: bool,
        pivot: Vec<u8>,
        value: Vec<u8>,
    },
    /// LREM key count element.
    Rem {
        key: Vec<u8>,
        count: i64,
        value: Vec<u8>,
    },
    Trim {
        key: Vec<u8>,
        start: i64,
        stop: i64,
    },
    Pos(Box<PosArgs>),
    /// LMOVE, RPOPLPUSH, and with `timeout_ms` BLMOVE, BRPOPLPUSH.
    Move {
        src: Vec<u8>,
        dst: Vec<u8>,
        from_left: bool,
        to_left: bool,
        timeout_ms: Option<u64>,
        /// A blocked client's retry: a source of another type is nil (it
        /// waits on) rather than an error.
        waiting: bool,
    },
    /// LMPOP, BLMPOP (`reply: Reply::KeyAndElements`) and BLPOP, BRPOP
    /// (`Reply::KeyAndElement`, one element): pops from the first list of
    /// `keys` that has elements.
    MPop {
        keys: Vec<Vec<u8>>,
        left: bool,
        count: u64,
        reply: MPopReply,
        timeout_ms: Option<u64>,
        /// A blocked client's retry: keys of another type are passed over.
        waiting: bool,
    },
}

/// How a multi-key pop answers what it popped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MPopReply {
    /// LMPOP, BLMPOP: `[key, [element, ...]]`.
    KeyAndElements,
    /// BLPOP, BRPOP: `[key, element]`.
    KeyAndElement,
}

/// LPOS key element [RANK rank] [COUNT num-matches] [MAXLEN len].
#[derive(Debug, Clone)]
pub(crate) struct PosArgs {
    key: Vec<u8>,
    element: Vec<u8>,
    /// Never 0; negative: from the tail.
    rank: i64,
    /// `None`: COUNT not given (a single index or nil); `Some(0)`: every match.
    count: Option<i64>,
    /// 0: the whole list.
    maxlen: i64,
}

impl ListOp {
    pub(crate) fn first_key(&self) -> Option<&[u8]> {
        match self {
            ListOp::PushX { key, .. }
            | ListOp::Pop { key, .. }
            | ListOp::Index { key, .. }
            | ListOp::Set { key, .. }
            | ListOp::Insert { key, .. }
            | ListOp::Rem { key, .. }
            | ListOp::Trim { key, .. }
            | ListOp::Move { src: key, .. } => Some(key),
            ListOp::Pos(args) => Some(&args.key),
            ListOp::MPop { keys, .. } => keys.first().map(Vec::as_slice),
        }
    }

    pub(crate) fn payload_bytes(&self) -> usize {
        match self {
            ListOp::PushX { key, values, .. } => {
                key.len() + values.iter().map(Vec::len).sum::<usize>()
            }
            ListOp::Set { key, value, .. } => key.len() + value.len(),
            ListOp::Insert {
                key, pivot, value, ..
            } => key.len() + pivot.len() + value.len(),
            _ => 64,
        }
    }

    /// The form a blocked client retries: keys of another type are nil to
    /// it (Redis serves a blocked client only from a key that holds a
    /// list); the others unchanged.
    pub(crate) fn waiting_form(&mut self) {
        if let ListOp::Move { waiting, .. } | ListOp::MPop { waiting, .. } = self {
            *waiting = true;
        }
    }

    /// A blocking form's timeout outside MULTI (ms; 0: none, it waits until
    /// it pops); `None` for the others.
    pub(crate) fn timeout_ms(&self) -> Option<u64> {
        match self {
            ListOp::Move { timeout_ms, .. } | ListOp::MPop { timeout_ms, .. } => *timeout_ms,
            _ => None,
        }
    }
}

/// Whether `name` is one of this module's commands.
pub(crate) fn is_list_command(name: &str) -> bool {
    matches!(
        name,
        "lpop"
            | "rpop"
            | "lindex"
            | "lset"
            | "linsert"
            | "lrem"
            | "ltrim"
            | "lpos"
            | "lpushx"
            | "rpushx"
            | "lmove"
            | "rpoplpush"
            | "lmpop"
            | "blpop"
            | "brpop"
            | "blmove"
            | "brpoplpush"
            | "blmpop"
    )
}

/// Whether `name` blocks outside MULTI (Redis's `blocking` flag): the
/// list forms and the sorted-set pops (`zsets`).
pub(crate) fn is_blocking(name: &str) -> bool {
    matches!(
        name,
        "blpop" | "brpop" | "blmove" | "brpoplpush" | "blmpop" | "bzpopmin" | "bzpopmax" | "bzmpop"
    )
}

/// The list command `name`'s arguments (after the name, arity checked, the
/// table's key positions checked) as an [`Op`]; `None`: not one of this
/// module's commands.
pub(crate) fn parse(name: &str, a: &mut [Vec<u8>]) -> Option<Result<Op, Frame>> {
    if !is_list_command(name) {
        return None;
    }
    Some(parse_list(name, a).map(|op| Op::Lists(Box::new(op))))
}

fn parse_list(name: &str, a: &mut [Vec<u8>]) -> Result<ListOp, Frame> {
    Ok(match name {
        "lpop" | "rpop" => {
            // Arity -2 lets more through; Redis answers the arity error.
            if a.len() > 2 {
                return Err(crate::commands::wrong_arity(name));
            }
            let count = match a.get(1) {
                None => None,
                Some(arg) => Some(positive(arg, MUST_BE_POSITIVE)? as u64),
            };
            ListOp::Pop {
                key: take(a, 0),
                left: name == "lpop",
                count,
            }
        }
        "lindex" => ListOp::Index {
            index: integer(&a[1]),
            key: take(a, 0),
        },
        "lset" => {
            check_value(&a[2])?;
            ListOp::Set {
                index: integer(&a[1]),
                key: take(a, 0),
                value: take(a, 2),
            }
        }
        "linsert" => {
            let before = if a[1].eq_ignore_ascii_case(b"before") {
                true
            } else if a[1].eq_ignore_ascii_case(b"after") {
                false
            } else {
                return Err(syntax_error());
            };
            check_value(&a[3])?;
            ListOp::Insert {
                key: take(a, 0),
                before,
                pivot: take(a, 2),
                value: take(a, 3),
            }
        }
        "lrem" => ListOp::Rem {
            count: integer(&a[1])?,
            key: take(a, 0),
            value: take(a, 2),
        },
        "ltrim" => ListOp::Trim {
            start: integer(&a[1])?,
            stop: integer(&a[2])?,
            key: take(a, 0),
        },
        "lpos" => parse_lpos(a)?,
        "lpushx" | "rpushx" => {
            for value in &a[1..] {
                check_value(value)?;
            }
            ListOp::PushX {
                key: take(a, 0),
                left: name == "lpushx",
                values: take_all(&mut a[1..]),
            }
        }
        "lmove" | "blmove" => {
            let from_left = parse_end(&a[2])?;
            let to_left = parse_end(&a[3])?;
            let timeout_ms = match name {
                "blmove" => Some(parse_timeout(&a[4])?),
                _ => None,
            };
            ListOp::Move {
                src: take(a, 0),
                dst: take(a, 1),
                from_left,
                to_left,
                timeout_ms,
                waiting: false,
            }
        }
        "rpoplpush" | "brpoplpush" => {
            let timeout_ms = match name {
                "brpoplpush" => Some(parse_timeout(&a[2])?),
                _ => None,
            };
            ListOp::Move {
                src: take(a, 0),
                dst: take(a, 1),
                from_left: false,
                to_left: true,
                timeout_ms,
                waiting: false,
            }
        }
        "lmpop" => parse_lmpop(a, None)?,
        "blmpop" => {
            let (timeout, rest) = a.split_at_mut(1);
            parse_lmpop(rest, Some(&timeout[0]))?
        }
        "blpop" | "brpop" => {
            let last = a.len() - 1;
            let timeout_ms = parse_timeout(&a[last])?;
            ListOp::MPop {
                keys: take_all(&mut a[..last]),
                left: name == "blpop",
                count: 1,
                reply: MPopReply::KeyAndElement,
                timeout_ms: Some(timeout_ms),
                waiting: false,
            }
        }
        other => unreachable!("list command `{other}` without a parser"),
    })
}

/// A non-negative integer, as Redis's `getPositiveLongFromObjectOrReply`
/// reads it: anything else (not a number too) answers `error`.
fn positive(arg: &[u8], error: &str) -> Result<i64, Frame> {
    parse_i64(arg)
        .filter(|n| *n >= 0)
        .ok_or_else(|| Frame::error(error))
}

/// LEFT or RIGHT: whether it is LEFT.
fn parse_end(arg: &[u8]) -> Result<bool, Frame> {
    if arg.eq_ignore_ascii_case(b"left") {
        Ok(true)
    } else if arg.eq_ignore_ascii_case(b"right") {
        Ok(false)
    } else {
        Err(syntax_error())
    }
}

/// LPOS's options, in order, each error as soon as it is met (as Redis).
fn parse_lpos(a: &mut [Vec<u8>]) -> Result<ListOp, Frame> {
    let (mut rank, mut count, mut maxlen) = (1, None, 0);
    let mut j = 2;
    // Bounded by the arguments: each turn moves on by two.
    while j < a.len() {
        let option = &a[j];
        let Some(value) = a.get(j + 1) else {
            return Err(syntax_error());
        };
        if option.eq_ignore_ascii_case(b"rank") {
            rank = integer(value)?;
            if rank == 0 {
                return Err(Frame::error(RANK_ZERO));
            }
        } else if option.eq_ignore_ascii_case(b"count") {
            count = Some(positive(value, "ERR COUNT can't be negative")?);
        } else if option.eq_ignore_ascii_case(b"maxlen") {
            maxlen = positive(value, "ERR MAXLEN can't be negative")?;
        } else {
            return Err(syntax_error());
        }
        j += 2;
    }
    Ok(ListOp::Pos(Box::new(PosArgs {
        key: take(a, 0),
        element: take(a, 1),
        rank,
        count,
        maxlen,
    })))
}

/// LMPOP's arguments (`numkeys key... LEFT|RIGHT [COUNT count]`), checked
/// in Redis's order: numkeys, LEFT|RIGHT, COUNT once; then, for BLMPOP
/// (`timeout`), the timeout.
fn parse_lmpop(a: &mut [Vec<u8>], timeout: Option<&[u8]>) -> Result<ListOp, Frame> {
    const NUMKEYS: &str = "ERR numkeys should be greater than 0";
    let numkeys = parse_i64(&a[0])
        .filter(|n| *n > 0)
        .ok_or_else(|| Frame::error(NUMKEYS))?;
    let numkeys = usize::try_from(numkeys).unwrap_or(usize::MAX);
    if numkeys >= a.len() - 1 {
        return Err(syntax_error());
    }
    let left = parse_end(&a[numkeys + 1])?;
    let mut count = None;
    let mut rest = a[numkeys + 2..].iter();
    // Bounded by the arguments.
    while let Some(option) = rest.next() {
        match rest.next() {
            Some(n) if count.is_none() && option.eq_ignore_ascii_case(b"count") => {
                let n = parse_i64(n)
                    .filter(|n| *n > 0)
                    .ok_or_else(|| Frame::error("ERR count should be greater than 0"))?;
                count = Some(n as u64);
            }
            _ => return Err(syntax_error()),
        }
    }
    let timeout_ms = timeout.map(parse_timeout).transpose()?;
    check_keys(&a[1..=numkeys])?;
    Ok(ListOp::MPop {
        keys: take_all(&mut a[1..=numkeys]),
        left,
        count: count.unwrap_or(1),
        reply: MPopReply::KeyAndElements,
        timeout_ms,
        waiting: false,
    })
}

/// A blocking command's timeout in seconds, as Redis 7.0 reads it: a
/// `long double` (as `strtold`: no leading space, nothing after it, no
/// NaN), times 1000 rounded up to an integer of ms (a value past the
/// integer's range becomes its minimum there, hence negative; so does
/// `inf`); 0 is no timeout. Read as a double here, whose range is smaller:
/// a finite number past it reads as one past the integer's range (Redis
/// says "not a float" past the `long double`'s), and one too small for it
/// as what it is, a fraction of a ms.
pub(crate) fn parse_timeout(arg: &[u8]) -> Result<u64, Frame> {
    let starts_with_space = arg
        .first()
        .is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'));
    let (seconds, used) = crate::zsets::strtod_prefix(arg);
    if arg.is_empty() || starts_with_space || used != arg.len() || seconds.is_nan() {
        return Err(Frame::error(NOT_A_TIMEOUT));
    }
    let product = seconds * 1000.0;
    let ms = if seconds == 0.0 && !crate::zsets::mantissa_is_zero(arg) {
        // Below the double's range: a positive one waits 1 ms, as Redis's
        // rounded up; a negative one rounds up to 0.
        if arg.first() == Some(&b'-') {
            0.0
        } else {
            1.0
        }
    } else if product == -1.0 {
        // Redis's `long double` 0.001 is just below 0.001, so -0.001 s is
        // just above -1 ms, rounded up to 0: no timeout.
        0.0
    } else {
        product.ceil()
    };
    // x86's conversion of a value out of the integer's range.
    let ms = if (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&ms) {
        ms as i64
    } else {
        i64::MIN
    };
    u64::try_from(ms).map_err(|_| Frame::error(NEGATIVE_TIMEOUT))
}

/// What a key holds, for the list commands.
enum Found {
    Absent,
    List(VecDeque<Vec<u8>>, i64),
    WrongType,
}

fn found(entry: Option<Entry>) -> Found {
    match entry {
        None => Found::Absent,
        Some(Entry {
            value: Value::List(list),
            deadline,
            ..
        }) => Found::List(list, deadline),
        Some(_) => Found::WrongType,
    }
}

/// The write that leaves `list` as the key's value: a deletion once empty.
fn store(list: VecDeque<Vec<u8>>, deadline: i64) -> Write {
    if list.is_empty() {
        Write::Delete
    } else {
        Write::Put(Value::List(list), deadline)
    }
}

fn pop_end(list: &mut VecDeque<Vec<u8>>, left: bool) -> Option<Vec<u8>> {
    if left {
        list.pop_front()
    } else {
        list.pop_back()
    }
}

fn push_end(list: &mut VecDeque<Vec<u8>>, left: bool, value: Vec<u8>) {
    if left {
        list.push_front(value);
    } else {
        list.push_back(value);
    }
}

/// Pops up to `count` elements from one end, in the order they come off.
fn pop_many(list: &mut VecDeque<Vec<u8>>, left: bool, count: u64) -> Vec<Frame> {
    let n = usize::try_from(count).unwrap_or(usize::MAX).min(list.len());
    (0..n)
        .filter_map(|_| pop_end(list, left).map(Frame::Bulk))
        .collect()
}

/// A list index (negative from the tail) as a position, if inside.
fn position(len: usize, index: i64) -> Option<usize> {
    let len = len as i64;
    let at = if index < 0 { len + index } else { index };
    (0..len).contains(&at).then_some(at as usize)
}

/// Runs a list command inside `tx`.
pub(crate) async fn apply(tx: &Tx, op: &ListOp) -> Result<Frame, ReactorError> {
    Ok(match op {
        ListOp::PushX { key, left, values } => {
            tx.modify(key, |old| match found(old) {
                Found::Absent => (Write::Keep, Frame::Integer(0)),
                Found::WrongType => (Write::Keep, Frame::error(WRONGTYPE)),
                Found::List(mut list, deadline) => {
                    for value in values {
                        push_end(&mut list, *left, value.clone());
                    }
                    let len = list.len() as i64;
                    (store(list, deadline), Frame::Integer(len))
                }
            })
            .await?
        }
        ListOp::Pop { key, left, count } => {
            tx.modify(key, |old| match found(old) {
                Found::Absent if count.is_some() => (Write::Keep, Frame::NullArray),
                Found::Absent => (Write::Keep, Frame::Null),
                Found::WrongType => (Write::Keep, Frame::error(WRONGTYPE)),
                Found::List(mut list, deadline) => match count {
                    Some(0) => (Write::Keep, Frame::Array(Vec::new())),
                    Some(n) => {
                        let popped = pop_many(&mut list, *left, *n);
                        (store(list, deadline), Frame::Array(popped))
                    }
                    None => match pop_end(&mut list, *left) {
                        Some(value) => (store(list, deadline), Frame::Bulk(value)),
                        None => (Write::Keep, Frame::Null),
                    },
                },
            })
            .await?
        }
        ListOp::Index { key, index } => match found(tx.read(key).await?) {
            Found::Absent => Frame::Null,
            Found::WrongType => Frame::error(WRONGTYPE),
            Found::List(list, _) => match index {
                Err(error) => error.clone(),
                Ok(index) => match position(list.len(), *index) {
                    Some(at) => Frame::Bulk(list[at].clone()),
                    None => Frame::Null,
                },
            },
        },
        ListOp::Set { key, index, value } => {
            tx.modify(key, |old| match found(old) {
                Found::Absent => (Write::Keep, Frame::error("ERR no such key")),
                Found::WrongType => (Write::Keep, Frame::error(WRONGTYPE)),
                Found::List(mut list, deadline) => {
                    let index = match index {
                        Ok(index) => *index,
                        Err(error) => return (Write::Keep, error.clone()),
                    };
                    match position(list.len(), index) {
                        Some(at) => {
                            list[at] = value.clone();
                            (store(list, deadline), Frame::ok())
                        }
                        None => (Write::Keep, Frame::error("ERR index out of range")),
                    }
                }
            })
            .await?
        }
        ListOp::Insert {
            key,
            before,
            pivot,
            value,
        } => {
            tx.modify(key, |old| match found(old) {
                Found::Absent => (Write::Keep, Frame::Integer(0)),
                Found::WrongType => (Write::Keep, Frame::error(WRONGTYPE)),
                Found::List(mut list, deadline) => {
                    let Some(at) = list.iter().position(|e| e == pivot) else {
                        return (Write::Keep, Frame::Integer(-1));
                    };
                    list.insert(if *before { at } else { at + 1 }, value.clone());
                    let len = list.len() as i64;
                    (store(list, deadline), Frame::Integer(len))
                }
            })
            .await?
        }
        ListOp::Rem { key, count, value } => {
            tx.modify(key, |old| match found(old) {
                Found::Absent => (Write::Keep, Frame::Integer(0)),
                Found::WrongType => (Write::Keep, Frame::error(WRONGTYPE)),
                Found::List(list, deadline) => {
                    let (kept, removed) = remove(list, *count, value);
                    if removed == 0 {
                        return (Write::Keep, Frame::Integer(0));
                    }
                    (store(kept, deadline), Frame::Integer(removed))
                }
            })
            .await?
        }
        ListOp::Trim { key, start, stop } => {
            tx.modify(key, |old| match found(old) {
                Found::Absent => (Write::Keep, Frame::ok()),
                Found::WrongType => (Write::Keep, Frame::error(WRONGTYPE)),
                Found::List(mut list, deadline) => {
                    let (left, right) = trims(list.len(), *start, *stop);
                    if left == 0 && right == 0 {
                        return (Write::Keep, Frame::ok());
                    }
                    list.drain(..left);
                    list.truncate(list.len() - right);
                    (store(list, deadline), Frame::ok())
                }
            })
            .await?
        }
        ListOp::Pos(args) => match found(tx.read(&args.key).await?) {
            Found::Absent if args.count.is_some() => Frame::Array(Vec::new()),
            Found::Absent => Frame::Null,
            Found::WrongType => Frame::error(WRONGTYPE),
            Found::List(list, _) => lpos(&list, args),
        },
        ListOp::Move {
            src,
            dst,
            from_left,
            to_left,
            waiting,
            ..
        } => lmove(tx, src, dst, *from_left, *to_left, *waiting).await?,
        ListOp::MPop {
            keys,
            left,
            count,
            reply,
            waiting,
            ..
        } => {
            // The first key with elements, in order; a key of another type
            // on the way is an error, as in Redis.
            for key in keys {
                let popped = tx
                    .modify(key, |old| match found(old) {
                        Found::Absent => (Write::Keep, None),
                        Found::WrongType if *waiting => (Write::Keep, None),
                        Found::WrongType => (Write::Keep, Some(Err(Frame::error(WRONGTYPE)))),
                        Found::List(mut list, deadline) => {
                            let popped = pop_many(&mut list, *left, *count);
                            if popped.is_empty() {
                                return (Write::Keep, None);
                            }
                            (store(list, deadline), Some(Ok(popped)))
                        }
                    })
                    .await?;
                match popped {
                    None => continue,
                    Some(Err(error)) => return Ok(error),
                    Some(Ok(mut popped)) => {
                        let elements = match reply {
                            MPopReply::KeyAndElements => Frame::Array(popped),
                            MPopReply::KeyAndElement => popped.swap_remove(0),
                        };
                        return Ok(Frame::Array(vec![Frame::Bulk(key.clone()), elements]));
                    }
                }
            }
            Frame::NullArray
        }
    })
}

/// LREM's removal: `count` > 0 the first `count` matches from the head,
/// < 0 from the tail, 0 all; the kept elements and how many went. As
/// Redis's, `i64::MIN` (whose negation wraps to itself) removes all.
fn remove(list: VecDeque<Vec<u8>>, count: i64, value: &[u8]) -> (VecDeque<Vec<u8>>, i64) {
    let from_tail = count < 0;
    let limit = if from_tail {
        count.wrapping_neg()
    } else {
        count
    };
    let mut removed: i64 = 0;
    let mut kept = VecDeque::with_capacity(list.len());
    let mut drop_it = |element: &Vec<u8>| {
        let matches = element == value && !(limit != 0 && removed == limit);
        removed += i64::from(matches);
        matches
    };
    if from_tail {
        for element in list.into_iter().rev() {
            if !drop_it(&element) {
                kept.push_front(element);
            }
        }
    } else {
        for element in list {
            if !drop_it(&element) {
                kept.push_back(element);
            }
        }
    }
    (kept, removed)
}

/// LTRIM's elements to drop from the head and from the tail to keep
/// `start..=stop` (negative from the end, clamped; an empty range drops
/// all), as Redis computes them.
fn trims(len: usize, start: i64, stop: i64) -> (usize, usize) {
    let len = len as i64;
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let stop = if stop < 0 { len + stop } else { stop };
    if start > stop || start >= len {
        return (len as usize, 0);
    }
    let stop = stop.min(len - 1);
    (start as usize, (len - stop - 1) as usize)
}

/// LPOS over `list`, as Redis's loop: matches counted from the rank's end,
/// the scan stopped after MAXLEN elements (bounded by the list). Its
/// arithmetic wraps as Redis's does for RANK `i64::MIN` (every match).
fn lpos(list: &VecDeque<Vec<u8>>, args: &PosArgs) -> Frame {
    let from_tail = args.rank < 0;
    let rank = if from_tail {
        args.rank.wrapping_neg()
    } else {
        args.rank
    };
    let len = list.len() as i64;
    let mut found = Vec::new();
    let mut single = None;
    let mut matches: i64 = 0;
    let elements: Box<dyn Iterator<Item = &Vec<u8>>> = if from_tail {
        Box::new(list.iter().rev())
    } else {
        Box::new(list.iter())
    };
    for (index, element) in (0i64..).zip(elements) {
        if args.maxlen != 0 && index >= args.maxlen {
            break;
        }
        if element != &args.element {
            continue;
        }
        matches += 1;
        if matches < rank {
            continue;
        }
        let at = if from_tail { len - index - 1 } else { index };
        match args.count {
            None => {
                single = Some(at);
                break;
            }
            Some(count) => {
                found.push(Frame::Integer(at));
                if count != 0 && matches.wrapping_sub(rank).wrapping_add(1) >= count {
                    break;
                }
            }
        }
    }
    match args.count {
        Some(_) => Frame::Array(found),
        None => single.map_or(Frame::Null, Frame::Integer),
    }
}

/// LMOVE (and RPOPLPUSH, BLMOVE, BRPOPLPUSH): the source checked first (nil
/// if absent, or of another type for a blocked client's retry), then the
/// destination's type, then the pop and the push.
async fn lmove(
    tx: &Tx,
    src: &Vec<u8>,
    dst: &Vec<u8>,
    from_left: bool,
    to_left: bool,
    waiting: bool,
) -> Result<Frame, ReactorError> {
    if src == dst {
        // A rotation (or nothing): one read and one write of the list.
        return tx
            .modify(src, |old| match found(old) {
                Found::Absent => (Write::Keep, Frame::Null),
                Found::WrongType if waiting => (Write::Keep, Frame::Null),
                Found::WrongType => (Write::Keep, Frame::error(WRONGTYPE)),
                Found::List(mut list, deadline) => match pop_end(&mut list, from_left) {
                    None => (Write::Keep, Frame::Null),
                    Some(value) => {
                        push_end(&mut list, to_left, value.clone());
                        (store(list, deadline), Frame::Bulk(value))
                    }
                },
            })
            .await;
    }
    let (mut source, source_deadline) = match found(tx.read(src).await?) {
        Found::Absent => return Ok(Frame::Null),
        Found::WrongType if waiting => return Ok(Frame::Null),
        Found::WrongType => return Ok(Frame::error(WRONGTYPE)),
        Found::List(list, deadline) => (list, deadline),
    };
    let (mut destination, destination_deadline) = match found(tx.read(dst).await?) {
        Found::Absent => (VecDeque::new(), 0),
        Found::WrongType => return Ok(Frame::error(WRONGTYPE)),
        Found::List(list, deadline) => (list, deadline),
    };
    let Some(value) = pop_end(&mut source, from_left) else {
        return Ok(Frame::Null);
    };
    push_end(&mut destination, to_left, value.clone());
    // Both were read in this transaction: each is written whole with the
    // deadline it had.
    match store(source, source_deadline) {
        Write::Put(list, deadline) => tx.put(src, list, deadline).await?,
        _ => {
            tx.delete(src).await?;
        }
    }
    tx.put(dst, Value::List(destination), destination_deadline)
        .await?;
    Ok(Frame::Bulk(value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::NOT_INTEGER;

    fn args(line: &str) -> Vec<Vec<u8>> {
        line.split(' ').map(|s| s.as_bytes().to_vec()).collect()
    }

    /// `line` (a command and its arguments) parsed: the op, or its error.
    fn parsed(line: &str) -> Result<ListOp, String> {
        let mut a = args(line);
        let name = String::from_utf8(a[0].clone()).unwrap();
        match parse(&name, &mut a[1..]).expect("a list command") {
            Ok(Op::Lists(op)) => Ok(*op),
            Ok(other) => panic!("{line}: {other:?}"),
            Err(Frame::Error(e)) => Err(e),
            Err(other) => panic!("{line}: {other:?}"),
        }
    }

    fn error(line: &str) -> String {
        match parsed(line) {
            Err(e) => e,
            Ok(op) => panic!("{line}: parsed as {op:?}"),
        }
    }

    #[test]
    fn pops_and_their_counts() {
        assert!(matches!(
            parsed("lpop k"),
            Ok(ListOp::Pop {
                left: true,
                count: None,
                ..
            })
        ));
        assert!(matches!(
            parsed("rpop k 0"),
            Ok(ListOp::Pop {
                left: false,
                count: Some(0),
                ..
            })
        ));
        assert!(matches!(
            parsed("rpop k 9223372036854775807"),
            Ok(ListOp::Pop { count: Some(n), .. }) if n == i64::MAX as u64
        ));
        for bad in ["lpop k -1", "lpop k abc", "rpop k 1.5", "lpop k 01"] {
            assert_eq!(error(bad), MUST_BE_POSITIVE, "{bad}");
        }
        assert_eq!(
            error("lpop k 1 2"),
            "ERR wrong number of arguments for 'lpop' command"
        );
    }

    #[test]
    fn indexes_are_answered_after_the_type() {
        // Not an error yet: LINDEX of a missing key is nil whatever the index.
        assert!(matches!(
            parsed("lindex k abc"),
            Ok(ListOp::Index { index: Err(_), .. })
        ));
        assert!(matches!(
            parsed("lset k x v"),
            Ok(ListOp::Set { index: Err(_), .. })
        ));
        assert!(matches!(
            parsed("lindex k -3"),
            Ok(ListOp::Index { index: Ok(-3), .. })
        ));
        assert_eq!(error("lrem k x v"), NOT_INTEGER);
        assert_eq!(error("ltrim k 0 x"), NOT_INTEGER);
        assert_eq!(error("ltrim k 1.0 2"), NOT_INTEGER);
    }

    #[test]
    fn insert_and_move_words() {
        assert!(matches!(
            parsed("linsert k BEFORE p v"),
            Ok(ListOp::Insert { before: true, .. })
        ));
        assert!(matches!(
            parsed("linsert k after p v"),
            Ok(ListOp::Insert { before: false, .. })
        ));
        assert_eq!(error("linsert k middle p v"), "ERR syntax error");
        assert!(matches!(
            parsed("lmove a b RIGHT left"),
            Ok(ListOp::Move {
                from_left: false,
                to_left: true,
                timeout_ms: None,
                ..
            })
        ));
        assert_eq!(error("lmove a b up left"), "ERR syntax error");
        assert_eq!(error("lmove a b left down"), "ERR syntax error");
        assert!(matches!(
            parsed("rpoplpush a b"),
            Ok(ListOp::Move {
                from_left: false,
                to_left: true,
                ..
            })
        ));
    }

    #[test]
    fn lpos_options_in_order() {
        match parsed("lpos k e RANK -2 COUNT 0 MAXLEN 10") {
            Ok(ListOp::Pos(p)) => {
                assert_eq!((p.rank, p.count, p.maxlen), (-2, Some(0), 10));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(error("lpos k e rank 0"), RANK_ZERO);
        assert_eq!(error("lpos k e rank x"), NOT_INTEGER);
        assert_eq!(error("lpos k e count -1"), "ERR COUNT can't be negative");
        assert_eq!(error("lpos k e count x"), "ERR COUNT can't be negative");
        assert_eq!(error("lpos k e maxlen -1"), "ERR MAXLEN can't be negative");
        assert_eq!(error("lpos k e rank"), "ERR syntax error");
        assert_eq!(error("lpos k e foo 1"), "ERR syntax error");
        // The first bad option is the one answered.
        assert_eq!(error("lpos k e rank 0 count -1"), RANK_ZERO);
        assert_eq!(
            error("lpos k e count -1 rank 0"),
            "ERR COUNT can't be negative"
        );
    }

    #[test]
    fn lmpop_checks_in_redis_order() {
        match parsed("lmpop 2 a b RIGHT COUNT 3") {
            Ok(ListOp::MPop {
                keys,
                left: false,
                count: 3,
                reply: MPopReply::KeyAndElements,
                waiting: false,
                timeout_ms: None,
            }) => assert_eq!(keys, vec![b"a".to_vec(), b"b".to_vec()]),
            other => panic!("{other:?}"),
        }
        let numkeys = "ERR numkeys should be greater than 0";
        assert_eq!(error("lmpop 0 a left"), numkeys);
        assert_eq!(error("lmpop x a left"), numkeys);
        assert_eq!(error("lmpop -1 a left"), numkeys);
        assert_eq!(error("lmpop 2 a left"), "ERR syntax error");
        assert_eq!(
            error("lmpop 9223372036854775807 a left"),
            "ERR syntax error"
        );
        assert_eq!(error("lmpop 1 a up"), "ERR syntax error");
        assert_eq!(
            error("lmpop 1 a left count 0"),
            "ERR count should be greater than 0"
        );
        assert_eq!(error("lmpop 1 a left count 1 count 2"), "ERR syntax error");
        assert_eq!(error("lmpop 1 a left count"), "ERR syntax error");
    }

    #[test]
    fn blocking_forms_read_their_timeouts() {
        match parsed("blpop a b 1.5") {
            Ok(ListOp::MPop {
                keys,
                left: true,
                count: 1,
                reply: MPopReply::KeyAndElement,
                timeout_ms: Some(1500),
                waiting: false,
            }) => assert_eq!(keys.len(), 2),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parsed("blmove a b left right 0"),
            Ok(ListOp::Move {
                timeout_ms: Some(0),
                from_left: true,
                to_left: false,
                ..
            })
        ));
        assert!(matches!(
            parsed("brpoplpush a b 2"),
            Ok(ListOp::Move {
                timeout_ms: Some(2000),
                ..
            })
        ));
        assert!(matches!(
            parsed("blmpop 0.25 1 a left count 2"),
            Ok(ListOp::MPop {
                timeout_ms: Some(250),
                count: 2,
                ..
            })
        ));
        // BLMPOP's own arguments come before its timeout.
        assert_eq!(
            error("blmpop x 0 a left"),
            "ERR numkeys should be greater than 0"
        );
        assert_eq!(error("blmpop x 1 a left"), NOT_A_TIMEOUT);
        // BLMOVE's ends come before its timeout.
        assert_eq!(error("blmove a b up left x"), "ERR syntax error");
        assert_eq!(error("blmove a b left left x"), NOT_A_TIMEOUT);
    }

    #[test]
    fn timeouts_read_as_redis_reads_them() {
        assert_eq!(parse_timeout(b"0"), Ok(0));
        assert_eq!(parse_timeout(b"-0"), Ok(0));
        // Rounded up to whole ms: a positive fraction of one waits 1 ms, a
        // negative one (down to Redis's -0.001) is no timeout.
        assert_eq!(parse_timeout(b"0.0001"), Ok(1));
        assert_eq!(parse_timeout(b"1e-400"), Ok(1));
        assert_eq!(parse_timeout(b"0.0015"), Ok(2));
        assert_eq!(parse_timeout(b"-0.0005"), Ok(0));
        assert_eq!(parse_timeout(b"-0.001"), Ok(0));
        assert_eq!(parse_timeout(b"-1e-400"), Ok(0));
        assert_eq!(parse_timeout(b".01"), Ok(10));
        assert_eq!(parse_timeout(b"+2"), Ok(2000));
        assert_eq!(parse_timeout(b"1e3"), Ok(1_000_000));
        assert_eq!(parse_timeout(b"0x10"), Ok(16_000));
        for bad in ["", " 1", "1 ", "x", "1e3x", "nan"] {
            assert_eq!(
                parse_timeout(bad.as_bytes()),
                Err(Frame::error(NOT_A_TIMEOUT)),
                "{bad:?}"
            );
        }
        for negative in ["-1", "-0.002", "-0.0011", "inf", "-inf", "1e16", "1e400"] {
            assert_eq!(
                parse_timeout(negative.as_bytes()),
                Err(Frame::error(NEGATIVE_TIMEOUT)),
                "{negative:?}"
            );
        }
    }

    #[test]
    fn positions_trims_and_removals() {
        assert_eq!(position(3, 0), Some(0));
        assert_eq!(position(3, -1), Some(2));
        assert_eq!(position(3, -3), Some(0));
        assert_eq!(position(3, -4), None);
        assert_eq!(position(3, 3), None);
        assert_eq!(position(3, i64::MIN), None);
        assert_eq!(position(0, 0), None);
        assert_eq!(trims(5, 1, -2), (1, 1));
        assert_eq!(trims(5, 0, -1), (0, 0));
        assert_eq!(trims(5, 3, 1), (5, 0));
        assert_eq!(trims(5, -100, 100), (0, 0));
        assert_eq!(trims(5, 5, 10), (5, 0));
        assert_eq!(trims(5, i64::MIN, i64::MAX), (0, 0));
        let list = |s: &str| -> VecDeque<Vec<u8>> { s.bytes().map(|b| vec![b]).collect() };
        let text = |l: &VecDeque<Vec<u8>>| -> String { l.iter().map(|e| e[0] as char).collect() };
        let (kept, n) = remove(list("abacada"), 2, b"a");
        assert_eq!((text(&kept), n), ("bcada".to_owned(), 2));
        let (kept, n) = remove(list("abacada"), -2, b"a");
        assert_eq!((text(&kept), n), ("abacd".to_owned(), 2));
        let (kept, n) = remove(list("abacada"), 0, b"a");
        assert_eq!((text(&kept), n), ("bcd".to_owned(), 4));
        let (kept, n) = remove(list("abacada"), i64::MIN, b"a");
        assert_eq!((text(&kept), n), ("bcd".to_owned(), 4));
        let (kept, n) = remove(list("bcd"), 1, b"a");
        assert_eq!((text(&kept), n), ("bcd".to_owned(), 0));
    }

    #[test]
    fn lpos_walks_as_redis_does() {
        let list: VecDeque<Vec<u8>> = "abcabca".bytes().map(|b| vec![b]).collect();
        let pos = |rank: i64, count: Option<i64>, maxlen: i64| {
            lpos(
                &list,
                &PosArgs {
                    key: b"k".to_vec(),
                    element: b"a".to_vec(),
                    rank,
                    count,
                    maxlen,
                },
            )
        };
        let ints = |v: &[i64]| Frame::Array(v.iter().map(|&n| Frame::Integer(n)).collect());
        assert_eq!(pos(1, None, 0), Frame::Integer(0));
        assert_eq!(pos(2, None, 0), Frame::Integer(3));
        assert_eq!(pos(-1, None, 0), Frame::Integer(6));
        assert_eq!(pos(4, None, 0), Frame::Null);
        assert_eq!(pos(1, Some(0), 0), ints(&[0, 3, 6]));
        assert_eq!(pos(2, Some(1), 0), ints(&[3]));
        assert_eq!(pos(-1, Some(2), 0), ints(&[6, 3]));
        assert_eq!(pos(1, Some(0), 4), ints(&[0, 3]));
        assert_eq!(pos(-1, Some(0), 1), ints(&[6]));
        assert_eq!(pos(2, None, 3), Frame::Null);
        // Redis's wrapped negation: every match, from the tail.
        assert_eq!(pos(i64::MIN, Some(1), 0), ints(&[6, 3, 0]));
        assert_eq!(pos(i64::MIN, None, 0), Frame::Integer(6));
        assert_eq!(pos(i64::MAX, None, 0), Frame::Null);
    }
}

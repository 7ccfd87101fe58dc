//! SORT and SORT_RO, with Redis 7.0's replies, error texts and order of
//! checks (`sort.c`): the elements of a list, set or sorted set, sorted
//! as numbers (each parsed as `strtod` reads it) or, with ALPHA, as byte
//! strings, optionally by weights read from other keys (`BY pattern`),
//! answered as themselves or as values read from other keys (`GET
//! pattern`), cut by `LIMIT offset count`, and with `STORE destination`
//! written as a list.
//!
//! **Keys the patterns name.** BY and GET read keys the command does not
//! name (the pattern with its first `*` replaced by the element; `->field`
//! a hash's field). A command is one transaction that reaches any key's
//! reactor through [`Tx`] (`Tx::read`, `Tx::on_key`), so those keys are
//! read inside the same transaction as the sorted key and the destination:
//! a SORT is serializable with every other command, whatever reactors the
//! weights and the values live on, and a conflict on any of them re-runs
//! it. A key the patterns name that is longer than a key may be
//! ([`MAX_KEY_BYTES`]) cannot exist and reads as missing, as does a hash
//! field longer than [`MAX_MEMBER_BYTES`].
//!
//! **Order.** Numbers compare as doubles, ties by the elements' bytes
//! (Redis's tie-break, so the order is deterministic); ALPHA compares
//! bytes (Redis's `strcoll` in the C locale: up to a NUL byte, the whole
//! strings with STORE), and with BY a missing weight sorts first, ties
//! keeping the collection's order (the sort is stable, as glibc's `qsort`
//! is). DESC reverses the comparison, so tied elements keep their order.
//! `BY` a pattern without `*` sorts nothing: a list in its order, a sorted
//! set in score order (DESC reverses either); a set has no order of its
//! own, so it is sorted ALPHA, as Redis does with STORE and in scripts
//! (its order is unspecified otherwise).
//!
//! **STORE** writes the result as a list with no time to live, replacing
//! whatever the destination held (its rows with it), or deletes the
//! destination when the result is empty, through [`Tx::modify_header`]:
//! the normal write path, so a WATCH of the destination is aborted.

use std::cmp::Ordering;
use std::collections::VecDeque;

use roost_reactor::ReactorError;

use crate::commands::{check_key, integer, syntax_error, take};
use crate::members::{Fail, Members, MAX_MEMBER_BYTES};
use crate::protocol::Frame;
use crate::store::{Op, Tx, Value, Write, MAX_KEY_BYTES, WRONGTYPE};
use crate::zsets::{mantissa_is_zero, strtod_prefix};

const NOT_A_DOUBLE: &str = "ERR One or more scores can't be converted into double";

/// A SORT or SORT_RO, parsed.
#[derive(Debug, Clone)]
pub(crate) struct SortOp {
    pub(crate) key: Vec<u8>,
    /// The last BY pattern (it weighs the elements unless `dont_sort`).
    pub(crate) by: Option<Vec<u8>>,
    /// A BY pattern without `*` was given (Redis keeps this once set).
    pub(crate) dont_sort: bool,
    /// LIMIT's offset and count (0, -1 without LIMIT).
    pub(crate) offset: i64,
    pub(crate) count: i64,
    /// The GET patterns, in order.
    pub(crate) gets: Vec<Vec<u8>>,
    pub(crate) desc: bool,
    pub(crate) alpha: bool,
    /// STORE's destination (SORT only).
    pub(crate) store: Option<Vec<u8>>,
}

impl SortOp {
    pub(crate) fn first_key(&self) -> Option<&[u8]> {
        Some(&self.key)
    }

    pub(crate) fn payload_bytes(&self) -> usize {
        64 + self.key.len()
            + self.by.as_ref().map_or(0, Vec::len)
            + self.gets.iter().map(Vec::len).sum::<usize>()
            + self.store.as_ref().map_or(0, Vec::len)
    }
}

/// SORT's or SORT_RO's arguments (after the name, arity checked, the key
/// checked) as an [`Op`]; `None`: neither command.
pub(crate) fn parse(name: &str, a: &mut [Vec<u8>]) -> Option<Result<Op, Frame>> {
    let read_only = match name {
        "sort" => false,
        "sort_ro" => true,
        _ => return None,
    };
    Some(parse_sort(read_only, a).map(|op| Op::Sort(Box::new(op))))
}

/// The options as `sortCommandGeneric` reads them, left to right: an
/// unknown word, an option missing its arguments, or STORE in SORT_RO is
/// a syntax error; LIMIT's numbers are integers (else Redis's
/// not-an-integer error). Every error comes before the key is looked at.
fn parse_sort(read_only: bool, a: &mut [Vec<u8>]) -> Result<SortOp, Frame> {
    let mut op = SortOp {
        key: Vec::new(),
        by: None,
        dont_sort: false,
        offset: 0,
        count: -1,
        gets: Vec::new(),
        desc: false,
        alpha: false,
        store: None,
    };
    let mut store_at = None;
    let mut j = 1;
    while j < a.len() {
        let left = a.len() - j - 1;
        let word = a[j].as_slice();
        let is = |name: &str| word.eq_ignore_ascii_case(name.as_bytes());
        if is("asc") {
            op.desc = false;
        } else if is("desc") {
            op.desc = true;
        } else if is("alpha") {
            op.alpha = true;
        } else if is("limit") && left >= 2 {
            op.offset = integer(&a[j + 1])?;
            op.count = integer(&a[j + 2])?;
            j += 2;
        } else if !read_only && is("store") && left >= 1 {
            store_at = Some(j + 1);
            j += 1;
        } else if is("by") && left >= 1 {
            if !c_string(&a[j + 1]).contains(&b'*') {
                op.dont_sort = true;
            }
            op.by = Some(a[j + 1].clone());
            j += 1;
        } else if is("get") && left >= 1 {
            op.gets.push(a[j + 1].clone());
            j += 1;
        } else {
            return Err(syntax_error());
        }
        j += 1;
    }
    if let Some(at) = store_at {
        check_key(&a[at])?;
        op.store = Some(take(a, at));
    }
    op.key = take(a, 0);
    Ok(op)
}

/// Where SORT's STORE destination is among a whole command's arguments
/// (the name at 0), as Redis's `sortGetKeys` finds it: the last STORE,
/// skipping LIMIT's, BY's and GET's arguments. `None`: no STORE.
pub(crate) fn store_key_position(args: &[Vec<u8>]) -> Option<usize> {
    let mut found = None;
    let mut i = 2;
    while i < args.len() {
        let word = args[i].as_slice();
        if word.eq_ignore_ascii_case(b"limit") {
            i += 2;
        } else if word.eq_ignore_ascii_case(b"get") || word.eq_ignore_ascii_case(b"by") {
            i += 1;
        } else if word.eq_ignore_ascii_case(b"store") && i + 1 < args.len() {
            found = Some(i + 1);
        }
        i += 1;
    }
    found
}

/// `bytes` as C reads a string: up to its first NUL byte (Redis finds a
/// pattern's `*` and `->` with `strchr` and `strstr`, and compares ALPHA
/// with `strcoll`).
fn c_string(bytes: &[u8]) -> &[u8] {
    match bytes.iter().position(|&b| b == 0) {
        Some(end) => &bytes[..end],
        None => bytes,
    }
}

/// What a BY or GET pattern names for one element (`lookupKeyByPattern`).
#[derive(Debug, PartialEq, Eq)]
enum Target {
    /// `#`: the element itself.
    Element,
    /// A pattern without `*`: nothing (a GET of it is nil).
    Nothing,
    /// A string key's value.
    Key(Vec<u8>),
    /// A hash field's value (`key->field`, the `->` after the `*` and
    /// something after it).
    Field(Vec<u8>, Vec<u8>),
}

fn target(pattern: &[u8], element: &[u8]) -> Target {
    let c = c_string(pattern);
    if c == b"#" {
        return Target::Element;
    }
    let Some(star) = c.iter().position(|&b| b == b'*') else {
        return Target::Nothing;
    };
    // `strstr(p + 1, "->")`, with something (not a NUL) after the arrow.
    let arrow = c[star + 1..]
        .windows(2)
        .position(|w| w == b"->")
        .map(|i| star + 1 + i)
        .filter(|&at| at + 2 < c.len());
    let postfix_end = arrow.unwrap_or(pattern.len());
    let mut key = Vec::with_capacity(pattern.len() + element.len());
    key.extend_from_slice(&pattern[..star]);
    key.extend_from_slice(element);
    key.extend_from_slice(&pattern[star + 1..postfix_end]);
    match arrow {
        Some(at) => Target::Field(key, pattern[at + 2..].to_vec()),
        None => Target::Key(key),
    }
}

/// The value `pattern` names for `element`, read inside `tx`: `None` when
/// the key is missing, not a string (not a hash for `->field`), or the
/// field is missing.
async fn lookup(tx: &Tx, pattern: &[u8], element: &[u8]) -> Result<Option<Vec<u8>>, ReactorError> {
    Ok(match target(pattern, element) {
        Target::Element => Some(element.to_vec()),
        Target::Nothing => None,
        Target::Key(key) if key.len() > MAX_KEY_BYTES => None,
        Target::Key(key) => tx.read(&key).await?.and_then(|e| e.value.into_string()),
        Target::Field(key, field)
            if key.len() > MAX_KEY_BYTES || field.len() > MAX_MEMBER_BYTES =>
        {
            None
        }
        Target::Field(key, field) => tx
            .on_key(&key, move |rows| match rows.read(Members::Hash) {
                Ok(Some(_)) => Ok(rows.hget(&field)?),
                Ok(None) | Err(Fail::Reply(_)) => Ok(None),
                Err(Fail::Tx(e)) => Err(Fail::Tx(e)),
            })
            .await?
            .unwrap_or(None),
    })
}

/// A weight as SORT reads it: `strtod` of the whole value (leading spaces
/// and an empty value, 0, allowed; anything after the number but a NUL
/// refused), refused when NaN or out of range (an overflow to infinity,
/// an underflow: `strtod`'s `ERANGE`).
fn weight(bytes: &[u8]) -> Option<f64> {
    let (value, used) = strtod_prefix(bytes);
    if bytes.get(used).is_some_and(|&b| b != 0) || value.is_nan() {
        return None;
    }
    let text = &bytes[..used];
    if value.is_infinite() && !text.iter().any(|b| b.eq_ignore_ascii_case(&b'i')) {
        return None;
    }
    if value != 0.0 && value.abs() < f64::MIN_POSITIVE {
        return None;
    }
    if value == 0.0 && used > 0 && !mantissa_is_zero(text) {
        return None;
    }
    Some(value)
}

/// One element and what it sorts by.
struct Item {
    element: Vec<u8>,
    score: f64,
    /// ALPHA with BY: the weight (`None`: missing, sorts first).
    by: Option<Vec<u8>>,
}

/// The elements of `key` in its own order (a sorted set's by score), or
/// WRONGTYPE; a missing key is an empty list. Whether it is a set.
async fn elements(
    tx: &Tx,
    key: &Vec<u8>,
) -> Result<Result<(Vec<Vec<u8>>, bool), Frame>, ReactorError> {
    Ok(Ok(match tx.read(key).await?.map(|e| e.value) {
        None => (Vec::new(), false),
        Some(Value::List(list)) => (Vec::from(list), false),
        Some(Value::Set(_)) => {
            let members = tx.on_key(key, |rows| Ok(rows.set_members()?)).await?;
            (members.unwrap_or_default(), true)
        }
        Some(Value::ZSet(len)) => {
            let members = tx
                .on_key(key, move |rows| {
                    if len == 0 {
                        return Ok(Vec::new());
                    }
                    Ok(rows
                        .zranks(len, 0, len - 1)?
                        .into_iter()
                        .map(|(member, _)| member)
                        .collect())
                })
                .await?;
            (members.unwrap_or_default(), false)
        }
        Some(_) => return Ok(Err(Frame::error(WRONGTYPE))),
    }))
}

/// Runs a SORT or SORT_RO inside `tx`.
pub(crate) async fn apply(tx: &Tx, op: &SortOp) -> Result<Frame, ReactorError> {
    let (elements, is_set) = match elements(tx, &op.key).await? {
        Ok(found) => found,
        Err(reply) => return Ok(reply),
    };
    let (mut dont_sort, mut alpha, mut by) = (op.dont_sort, op.alpha, op.by.as_deref());
    if dont_sort && is_set {
        // A set has no order of its own: sorted ALPHA, as Redis does with
        // STORE and in scripts.
        (dont_sort, alpha, by) = (false, true, None);
    }

    // LIMIT, as Redis clamps it: `start..=end` of the sorted elements.
    let len = elements.len() as i64;
    let mut start = op.offset.max(0);
    let mut end = if op.count < 0 {
        len - 1
    } else {
        start.saturating_add(op.count - 1)
    };
    if start >= len {
        start = len - 1;
        end = len - 2;
    }
    if end >= len {
        end = len - 1;
    }

    let sorted: Vec<Vec<u8>> = if dont_sort {
        let mut elements = elements;
        if op.desc {
            elements.reverse();
        }
        elements
    } else {
        let mut items = Vec::with_capacity(elements.len());
        for element in elements {
            let mut item = Item {
                element,
                score: 0.0,
                by: None,
            };
            let weighed = match by {
                Some(pattern) => lookup(tx, pattern, &item.element).await?,
                None => None,
            };
            if alpha {
                item.by = weighed;
            } else {
                let value = match (by, &weighed) {
                    (Some(_), None) => None,
                    (Some(_), Some(w)) => Some(w.as_slice()),
                    (None, _) => Some(item.element.as_slice()),
                };
                if let Some(value) = value {
                    match weight(value) {
                        Some(score) => item.score = score,
                        None => return Ok(Frame::error(NOT_A_DOUBLE)),
                    }
                }
            }
            items.push(item);
        }
        let binary = op.store.is_some();
        let bytes = |x: &[u8], y: &[u8]| {
            if binary {
                x.cmp(y)
            } else {
                c_string(x).cmp(c_string(y))
            }
        };
        items.sort_by(|a, b| {
            let order = if !alpha {
                a.score
                    .partial_cmp(&b.score)
                    .unwrap_or(Ordering::Equal)
                    .then_with(|| a.element.cmp(&b.element))
            } else if by.is_some() {
                match (&a.by, &b.by) {
                    (None, None) => Ordering::Equal,
                    (None, Some(_)) => Ordering::Less,
                    (Some(_), None) => Ordering::Greater,
                    (Some(x), Some(y)) => bytes(x, y),
                }
            } else {
                bytes(&a.element, &b.element)
            };
            if op.desc {
                order.reverse()
            } else {
                order
            }
        });
        items.into_iter().map(|item| item.element).collect()
    };

    let chosen: &[Vec<u8>] = if end >= start {
        &sorted[start as usize..=end as usize]
    } else {
        &[]
    };
    let mut values: Vec<Option<Vec<u8>>> = Vec::with_capacity(chosen.len() * op.gets.len().max(1));
    for element in chosen {
        if op.gets.is_empty() {
            values.push(Some(element.clone()));
        }
        for pattern in &op.gets {
            values.push(lookup(tx, pattern, element).await?);
        }
    }

    let Some(dst) = &op.store else {
        return Ok(Frame::Array(
            values
                .into_iter()
                .map(|v| v.map_or(Frame::Null, Frame::Bulk))
                .collect(),
        ));
    };
    let stored = values.len();
    let list: VecDeque<Vec<u8>> = values.into_iter().map(Option::unwrap_or_default).collect();
    tx.modify_header(dst, move |_| {
        if list.is_empty() {
            (Write::Delete, ())
        } else {
            (Write::Put(Value::List(list), 0), ())
        }
    })
    .await?;
    Ok(Frame::Integer(stored as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<Vec<u8>> {
        text.split(' ').map(|s| s.as_bytes().to_vec()).collect()
    }

    fn parsed(read_only: bool, text: &str) -> Result<SortOp, Frame> {
        parse_sort(read_only, &mut args(text))
    }

    #[test]
    fn options_parse_as_redis_reads_them() {
        let op = parsed(
            false,
            "k BY w_* LIMIT 1 2 GET # GET o_*->f DESC ALPHA STORE d ASC",
        )
        .unwrap();
        assert_eq!(op.key, b"k");
        assert_eq!(op.by.as_deref(), Some(&b"w_*"[..]));
        assert!(!op.dont_sort && !op.desc && op.alpha);
        assert_eq!((op.offset, op.count), (1, 2));
        assert_eq!(op.gets, vec![b"#".to_vec(), b"o_*->f".to_vec()]);
        assert_eq!(op.store.as_deref(), Some(&b"d"[..]));
        // A BY without `*` stays "no sort" even after one with.
        let op = parsed(false, "k BY nosort BY w_*").unwrap();
        assert!(op.dont_sort);
        let syntax = Err(syntax_error());
        assert_eq!(parsed(false, "k LIMIT 1").map(|_| ()), syntax);
        assert_eq!(parsed(false, "k STORE").map(|_| ()), syntax);
        assert_eq!(parsed(false, "k BY").map(|_| ()), syntax);
        assert_eq!(parsed(false, "k GET").map(|_| ()), syntax);
        assert_eq!(parsed(false, "k FOO").map(|_| ()), syntax);
        assert_eq!(parsed(true, "k STORE d").map(|_| ()), syntax);
        assert_eq!(
            parsed(false, "k LIMIT x 1").map(|_| ()),
            Err(Frame::error(crate::store::NOT_INTEGER))
        );
    }

    #[test]
    fn patterns_name_keys_and_fields() {
        assert_eq!(target(b"#", b"e"), Target::Element);
        assert_eq!(target(b"#\0x", b"e"), Target::Element);
        assert_eq!(target(b"nosort", b"e"), Target::Nothing);
        assert_eq!(target(b"w_*", b"e"), Target::Key(b"w_e".to_vec()));
        assert_eq!(target(b"a*b*c", b"e"), Target::Key(b"aeb*c".to_vec()));
        assert_eq!(
            target(b"h_*_x->f->g", b"e"),
            Target::Field(b"h_e_x".to_vec(), b"f->g".to_vec())
        );
        // Nothing after the arrow: a key whose name ends in `->`.
        assert_eq!(target(b"h_*->", b"e"), Target::Key(b"h_e->".to_vec()));
        // An arrow before the `*` is part of the key.
        assert_eq!(target(b"a->*", b"e"), Target::Key(b"a->e".to_vec()));
    }

    #[test]
    fn weights_read_as_strtod() {
        assert_eq!(weight(b"3.5"), Some(3.5));
        assert_eq!(weight(b""), Some(0.0));
        assert_eq!(weight(b" 2"), Some(2.0));
        assert_eq!(weight(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(weight(b"0x10"), Some(16.0));
        assert_eq!(weight(b"1e3"), Some(1000.0));
        for bad in [&b"abc"[..], b"2 ", b"1x", b"nan", b"1e400", b"1e-400", b" "] {
            assert_eq!(weight(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn store_keys_are_found_as_redis_finds_them() {
        let position = |text: &str| store_key_position(&args(text));
        assert_eq!(position("sort k"), None);
        assert_eq!(position("sort k store d"), Some(3));
        assert_eq!(position("sort k by store store d"), Some(5));
        assert_eq!(position("sort k limit 0 1 store d store e"), Some(8));
        assert_eq!(position("sort k store"), None);
    }
}

//! String commands beyond GET/SET/INCR: SETNX, GETDEL, APPEND, STRLEN,
//! GETRANGE/SUBSTR, SETRANGE, MSETNX, INCRBYFLOAT and the bit commands
//! (SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP), with Redis 7.0's argument
//! order and error texts. (GETSET is SET .. GET; SETEX/PSETEX are SET with
//! a deadline.)
//!
//! A command that changes a string keeps the key's time to live (APPEND,
//! SETRANGE, SETBIT, INCRBYFLOAT); one that replaces it clears it (SETNX,
//! MSETNX, BITOP's destination), as in Redis. A string grows to at most
//! [`MAX_VALUE_BYTES`]: beyond it APPEND and SETRANGE answer Redis's
//! `string exceeds maximum allowed size` and SETBIT its bit-offset error.
//!
//! **INCRBYFLOAT** adds in exact decimal when both numbers have at most 38
//! significant digits (every amount a client types), rounding the sum to 17
//! decimals and printing it as Redis does (`%.17Lf` with the trailing zeros
//! cut). Redis adds in C `long double` (about 19 significant digits), so
//! where its sum carries binary noise in the 17 printed decimals Roost's is
//! the exact one: `12345.6789 + 0` is `12345.6789` here and
//! `12345.67889999999999961` in Redis. Numbers beyond 38 digits, and hex
//! ones, are added in `f64`; a result outside `f64`'s range is refused
//! (`increment would produce NaN or Infinity`) where `long double` would
//! still hold it.

use std::borrow::Cow;

use roost_reactor::ReactorError;

use crate::protocol::Frame;
use crate::store::{parse_i64, Entry, Tx, Value, Write, MAX_VALUE_BYTES, NOT_INTEGER, WRONGTYPE};

const TOO_LONG: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";
pub(crate) const BIT_OFFSET: &str = "ERR bit offset is not an integer or out of range";
pub(crate) const NOT_A_BIT: &str = "ERR bit is not an integer or out of range";
pub(crate) const NOT_A_FLOAT: &str = "ERR value is not a valid float";
pub(crate) const NAN_OR_INFINITY: &str = "ERR increment would produce NaN or Infinity";
/// Redis's `proto-max-bulk-len` default: the bit offsets GETBIT accepts
/// (reading past the end costs nothing).
const REDIS_MAX_STRING_BYTES: u64 = 512 << 20;

/// BITOP's operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BitOpKind {
    And,
    Or,
    Xor,
    Not,
}

/// A string command.
#[derive(Debug, Clone)]
pub(crate) enum StrOp {
    SetNx {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    GetDel(Vec<u8>),
    Append {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    StrLen(Vec<u8>),
    GetRange {
        key: Vec<u8>,
        start: i64,
        end: i64,
    },
    SetRange {
        key: Vec<u8>,
        /// At most `u32::MAX` (larger ones are refused when parsed).
        offset: u32,
        value: Vec<u8>,
    },
    MSetNx(Vec<(Vec<u8>, Vec<u8>)>),
    /// The increment is parsed when it runs: Redis checks the key's type
    /// first.
    IncrByFloat {
        key: Vec<u8>,
        incr: Vec<u8>,
    },
    SetBit {
        key: Vec<u8>,
        offset: usize,
        bit: bool,
    },
    GetBit {
        key: Vec<u8>,
        offset: u64,
    },
    /// The range arguments, parsed when it runs (Redis 7.0 looks the key up
    /// first: a missing key counts 0 whatever they are).
    BitCount {
        key: Vec<u8>,
        range: Vec<Vec<u8>>,
    },
    BitPos {
        key: Vec<u8>,
        bit: bool,
        range: Vec<Vec<u8>>,
    },
    BitOp {
        op: BitOpKind,
        dest: Vec<u8>,
        sources: Vec<Vec<u8>>,
    },
}

impl StrOp {
    pub(crate) fn first_key(&self) -> Option<&[u8]> {
        match self {
            StrOp::SetNx { key, .. }
            | StrOp::GetDel(key)
            | StrOp::Append { key, .. }
            | StrOp::StrLen(key)
            | StrOp::GetRange { key, .. }
            | StrOp::SetRange { key, .. }
            | StrOp::IncrByFloat { key, .. }
            | StrOp::SetBit { key, .. }
            | StrOp::GetBit { key, .. }
            | StrOp::BitCount { key, .. }
            | StrOp::BitPos { key, .. }
            | StrOp::BitOp { dest: key, .. } => Some(key),
            StrOp::MSetNx(pairs) => pairs.first().map(|(k, _)| k.as_slice()),
        }
    }

    pub(crate) fn payload_bytes(&self) -> usize {
        match self {
            StrOp::SetNx { key, value }
            | StrOp::Append { key, value }
            | StrOp::SetRange { key, value, .. } => key.len() + value.len(),
            StrOp::MSetNx(pairs) => pairs.iter().map(|(k, v)| k.len() + v.len()).sum(),
            _ => 64,
        }
    }
}

/// A stored value as a string, or WRONGTYPE.
fn as_string(entry: &Entry) -> Result<Cow<'_, [u8]>, Frame> {
    entry
        .value
        .string_bytes()
        .ok_or_else(|| Frame::error(WRONGTYPE))
}

/// Runs a string command inside `tx`.
pub(crate) async fn apply(tx: &Tx, op: &StrOp) -> Result<Frame, ReactorError> {
    Ok(match op {
        StrOp::SetNx { key, value } => {
            tx.modify(key, |old| match old {
                Some(_) => (Write::Keep, Frame::Integer(0)),
                None => (Write::Put(Value::Str(value.clone()), 0), Frame::Integer(1)),
            })
            .await?
        }
        StrOp::GetDel(key) => {
            tx.modify(key, |old| match old {
                None => (Write::Keep, Frame::Null),
                Some(entry) => match entry.value.into_string() {
                    Some(bytes) => (Write::Delete, Frame::Bulk(bytes)),
                    None => (Write::Keep, Frame::error(WRONGTYPE)),
                },
            })
            .await?
        }
        StrOp::Append { key, value } => {
            tx.modify(key, |old| {
                let Some(entry) = old else {
                    let len = value.len() as i64;
                    return (
                        Write::Put(Value::Str(value.clone()), 0),
                        Frame::Integer(len),
                    );
                };
                let deadline = entry.deadline;
                let Some(mut bytes) = entry.value.into_string() else {
                    return (Write::Keep, Frame::error(WRONGTYPE));
                };
                if bytes.len() + value.len() > MAX_VALUE_BYTES {
                    return (Write::Keep, Frame::error(TOO_LONG));
                }
                bytes.extend_from_slice(value);
                let len = bytes.len() as i64;
                (Write::Put(Value::Str(bytes), deadline), Frame::Integer(len))
            })
            .await?
        }
        StrOp::StrLen(key) => match tx.read(key).await? {
            None => Frame::Integer(0),
            Some(entry) => match as_string(&entry) {
                Ok(bytes) => Frame::Integer(bytes.len() as i64),
                Err(e) => e,
            },
        },
        StrOp::GetRange { key, start, end } => match tx.read(key).await? {
            None => Frame::Bulk(Vec::new()),
            Some(entry) => match as_string(&entry) {
                Ok(bytes) => Frame::Bulk(get_range(&bytes, *start, *end).to_vec()),
                Err(e) => e,
            },
        },
        StrOp::SetRange { key, offset, value } => {
            tx.modify(key, |old| {
                let (mut bytes, deadline) = match old {
                    None if value.is_empty() => return (Write::Keep, Frame::Integer(0)),
                    None => (Vec::new(), 0),
                    Some(entry) => {
                        let deadline = entry.deadline;
                        match entry.value.into_string() {
                            Some(bytes) if value.is_empty() => {
                                return (Write::Keep, Frame::Integer(bytes.len() as i64))
                            }
                            Some(bytes) => (bytes, deadline),
                            None => return (Write::Keep, Frame::error(WRONGTYPE)),
                        }
                    }
                };
                let offset = *offset as usize;
                let end = offset.saturating_add(value.len());
                if end > MAX_VALUE_BYTES {
                    return (Write::Keep, Frame::error(TOO_LONG));
                }
                if bytes.len() < end {
                    bytes.resize(end, 0);
                }
                bytes[offset..end].copy_from_slice(value);
                let len = bytes.len() as i64;
                (Write::Put(Value::Str(bytes), deadline), Frame::Integer(len))
            })
            .await?
        }
        StrOp::MSetNx(pairs) => {
            for (key, _) in pairs {
                if tx.read(key).await?.is_some() {
                    return Ok(Frame::Integer(0));
                }
            }
            for (key, value) in pairs {
                tx.put(key, Value::Str(value.clone()), 0).await?;
            }
            Frame::Integer(1)
        }
        StrOp::IncrByFloat { key, incr } => {
            tx.modify(key, |old| {
                let (current, deadline) = match &old {
                    None => (Number::Decimal(Decimal::ZERO), 0),
                    Some(entry) => match as_string(entry) {
                        Err(e) => return (Write::Keep, e),
                        Ok(bytes) => match parse_number(&bytes) {
                            Some(n) => (n, entry.deadline),
                            None => return (Write::Keep, Frame::error(NOT_A_FLOAT)),
                        },
                    },
                };
                let Some(incr) = parse_number(incr) else {
                    return (Write::Keep, Frame::error(NOT_A_FLOAT));
                };
                match add_numbers(current, incr) {
                    Some(text) => (
                        Write::Put(Value::Str(text.clone().into_bytes()), deadline),
                        Frame::Bulk(text.into_bytes()),
                    ),
                    None => (Write::Keep, Frame::error(NAN_OR_INFINITY)),
                }
            })
            .await?
        }
        StrOp::SetBit { key, offset, bit } => {
            tx.modify(key, |old| {
                let (mut bytes, deadline) = match old {
                    None => (Vec::new(), 0),
                    Some(entry) => {
                        let deadline = entry.deadline;
                        match entry.value.into_string() {
                            Some(bytes) => (bytes, deadline),
                            None => return (Write::Keep, Frame::error(WRONGTYPE)),
                        }
                    }
                };
                let byte = offset / 8;
                if bytes.len() <= byte {
                    bytes.resize(byte + 1, 0);
                }
                let mask = 0x80u8 >> (offset % 8);
                let was = bytes[byte] & mask != 0;
                if *bit {
                    bytes[byte] |= mask;
                } else {
                    bytes[byte] &= !mask;
                }
                (
                    Write::Put(Value::Str(bytes), deadline),
                    Frame::Integer(i64::from(was)),
                )
            })
            .await?
        }
        StrOp::GetBit { key, offset } => match tx.read(key).await? {
            None => Frame::Integer(0),
            Some(entry) => match as_string(&entry) {
                Ok(bytes) => Frame::Integer(i64::from(bit_at(&bytes, *offset))),
                Err(e) => e,
            },
        },
        StrOp::BitCount { key, range } => match tx.read(key).await? {
            None => Frame::Integer(0),
            Some(entry) => match as_string(&entry) {
                Ok(bytes) => bit_count(&bytes, range).unwrap_or_else(|e| e),
                Err(e) => e,
            },
        },
        StrOp::BitPos { key, bit, range } => match tx.read(key).await? {
            None => Frame::Integer(if *bit { -1 } else { 0 }),
            Some(entry) => match as_string(&entry) {
                Ok(bytes) => bit_pos(&bytes, *bit, range).unwrap_or_else(|e| e),
                Err(e) => e,
            },
        },
        StrOp::BitOp { op, dest, sources } => {
            let mut values = Vec::with_capacity(sources.len());
            for source in sources {
                match tx.read(source).await? {
                    None => values.push(Vec::new()),
                    Some(entry) => match entry.value.into_string() {
                        Some(bytes) => values.push(bytes),
                        None => return Ok(Frame::error(WRONGTYPE)),
                    },
                }
            }
            let result = bit_op(*op, &values);
            let len = result.len() as i64;
            if result.is_empty() {
                tx.delete(dest).await?;
            } else {
                tx.put(dest, Value::Str(result), 0).await?;
            }
            Frame::Integer(len)
        }
    })
}

/// GETRANGE's slice (Redis 7.0's index rules).
pub(crate) fn get_range(bytes: &[u8], start: i64, end: i64) -> &[u8] {
    let len = bytes.len() as i64;
    if start < 0 && end < 0 && start > end {
        return &[];
    }
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let end = if end < 0 { (len + end).max(0) } else { end };
    let end = end.min(len - 1);
    if start > end || len == 0 {
        return &[];
    }
    &bytes[start as usize..=end as usize]
}

fn bit_at(bytes: &[u8], offset: u64) -> bool {
    usize::try_from(offset / 8)
        .ok()
        .and_then(|byte| bytes.get(byte))
        .is_some_and(|b| b & (0x80 >> (offset % 8)) != 0)
}

/// A bit offset of SETBIT/GETBIT: a non-negative integer under `max_bytes`
/// bytes' worth of bits.
pub(crate) fn parse_bit_offset(arg: &[u8], max_bytes: u64) -> Result<u64, Frame> {
    parse_i64(arg)
        .and_then(|n| u64::try_from(n).ok())
        .filter(|n| n / 8 < max_bytes)
        .ok_or_else(|| Frame::error(BIT_OFFSET))
}

/// GETBIT's bound on offsets (Redis's default `proto-max-bulk-len`).
pub(crate) fn getbit_max_bytes() -> u64 {
    REDIS_MAX_STRING_BYTES
}

/// The range of BITCOUNT/BITPOS: `[start, end]` clamped as Redis does, in
/// bits (`BIT`) or bytes (the default), as a bit range `[first, last]`, or
/// `None` when empty.
fn bit_range(len_bytes: usize, mut start: i64, mut end: i64, in_bits: bool) -> Option<(u64, u64)> {
    let total = if in_bits {
        len_bytes as i64 * 8
    } else {
        len_bytes as i64
    };
    if start < 0 {
        start += total;
    }
    if end < 0 {
        end += total;
    }
    start = start.max(0);
    end = end.max(0).min(total - 1);
    if start > end || total == 0 {
        return None;
    }
    let (first, last) = if in_bits {
        (start as u64, end as u64)
    } else {
        (start as u64 * 8, end as u64 * 8 + 7)
    };
    Some((first, last))
}

fn parse_unit(arg: &[u8]) -> Result<bool, Frame> {
    if arg.eq_ignore_ascii_case(b"bit") {
        Ok(true)
    } else if arg.eq_ignore_ascii_case(b"byte") {
        Ok(false)
    } else {
        Err(Frame::error("ERR syntax error"))
    }
}

fn integer(arg: &[u8]) -> Result<i64, Frame> {
    parse_i64(arg).ok_or_else(|| Frame::error(NOT_INTEGER))
}

/// Set bits of `bytes` in the bit range `[first, last]`.
fn count_ones(bytes: &[u8], first: u64, last: u64) -> u64 {
    let (first_byte, last_byte) = ((first / 8) as usize, (last / 8) as usize);
    let mut count = 0u64;
    for (i, &b) in bytes[first_byte..=last_byte].iter().enumerate() {
        let index = first_byte + i;
        let mut b = b;
        if index == first_byte {
            b &= 0xffu8 >> (first % 8);
        }
        if index == last_byte {
            b &= 0xffu8 << (7 - last % 8);
        }
        count += u64::from(b.count_ones());
    }
    count
}

/// BITCOUNT key [start end [BYTE|BIT]].
fn bit_count(bytes: &[u8], range: &[Vec<u8>]) -> Result<Frame, Frame> {
    let (start, end, in_bits) = match range {
        [] => (0, -1, false),
        [start, end] | [start, end, _] => {
            let (start, end) = (integer(start)?, integer(end)?);
            if start < 0 && end < 0 && start > end {
                return Ok(Frame::Integer(0));
            }
            let in_bits = match range.get(2) {
                Some(unit) => parse_unit(unit)?,
                None => false,
            };
            (start, end, in_bits)
        }
        _ => return Err(Frame::error("ERR syntax error")),
    };
    Ok(Frame::Integer(
        bit_range(bytes.len(), start, end, in_bits)
            .map_or(0, |(first, last)| count_ones(bytes, first, last)) as i64,
    ))
}

/// BITPOS key bit [start [end [BYTE|BIT]]].
fn bit_pos(bytes: &[u8], bit: bool, range: &[Vec<u8>]) -> Result<Frame, Frame> {
    if range.len() > 3 {
        return Err(Frame::error("ERR syntax error"));
    }
    let start = match range.first() {
        Some(start) => integer(start)?,
        None => 0,
    };
    let in_bits = match range.get(2) {
        Some(unit) => parse_unit(unit)?,
        None => false,
    };
    let (end, end_given) = match range.get(1) {
        Some(end) => (integer(end)?, true),
        None => (-1, false),
    };
    let Some((first, last)) = bit_range(bytes.len(), start, end, in_bits) else {
        return Ok(Frame::Integer(-1));
    };
    for position in first..=last {
        if bit_at(bytes, position) == bit {
            return Ok(Frame::Integer(position as i64));
        }
    }
    // No such bit in the range: looking for a 1 there is none; looking for
    // a 0 with no end given, the string goes on with zeros.
    Ok(Frame::Integer(if bit || end_given {
        -1
    } else {
        last as i64 + 1
    }))
}

fn bit_op(op: BitOpKind, values: &[Vec<u8>]) -> Vec<u8> {
    let len = values.iter().map(Vec::len).max().unwrap_or(0);
    if len == 0 {
        return Vec::new();
    }
    let byte = |v: &Vec<u8>, i: usize| v.get(i).copied().unwrap_or(0);
    (0..len)
        .map(|i| match op {
            BitOpKind::Not => !byte(&values[0], i),
            BitOpKind::And => values.iter().fold(0xff, |acc, v| acc & byte(v, i)),
            BitOpKind::Or => values.iter().fold(0, |acc, v| acc | byte(v, i)),
            BitOpKind::Xor => values.iter().fold(0, |acc, v| acc ^ byte(v, i)),
        })
        .collect()
}

/// An exact decimal: `mantissa / 10^scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decimal {
    mantissa: i128,
    scale: u32,
}

impl Decimal {
    const ZERO: Decimal = Decimal {
        mantissa: 0,
        scale: 0,
    };
    /// Digits an `i128` always holds.
    const MAX_DIGITS: u32 = 38;
    /// The decimals INCRBYFLOAT prints (Redis's `%.17Lf`).
    const PRINTED_DECIMALS: u32 = 17;

    fn to_f64(self) -> f64 {
        // Through the decimal text: exact to the nearest f64.
        self.format().parse().unwrap_or(f64::NAN)
    }

    fn with_scale(self, scale: u32) -> Option<Decimal> {
        let factor = 10i128.checked_pow(scale - self.scale)?;
        Some(Decimal {
            mantissa: self.mantissa.checked_mul(factor)?,
            scale,
        })
    }

    /// Rounded (half to even) to at most `decimals` decimals.
    fn rounded(self, decimals: u32) -> Decimal {
        if self.scale <= decimals {
            return self;
        }
        let divisor = 10i128.pow(self.scale - decimals);
        let (q, r) = (self.mantissa / divisor, self.mantissa % divisor);
        let twice = r.unsigned_abs() * 2;
        let half = divisor.unsigned_abs();
        let away = twice > half || (twice == half && q % 2 != 0);
        let q = if away { q + self.mantissa.signum() } else { q };
        Decimal {
            mantissa: q,
            scale: decimals,
        }
    }

    /// Fixed notation without trailing zeros (and `0`, never `-0`).
    fn format(self) -> String {
        if self.mantissa == 0 {
            return "0".into();
        }
        let digits = self.mantissa.unsigned_abs().to_string();
        let scale = self.scale as usize;
        let (int, frac) = if digits.len() > scale {
            digits.split_at(digits.len() - scale)
        } else {
            ("", digits.as_str())
        };
        let mut out = String::with_capacity(digits.len() + 3);
        if self.mantissa < 0 {
            out.push('-');
        }
        out.push_str(if int.is_empty() { "0" } else { int });
        let frac = format!("{frac:0>scale$}");
        let frac = frac.trim_end_matches('0');
        if !frac.is_empty() {
            out.push('.');
            out.push_str(frac);
        }
        out
    }
}

/// A number INCRBYFLOAT (and HINCRBYFLOAT) reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Number {
    Decimal(Decimal),
    /// Beyond an exact decimal (or hex, or infinite).
    Float(f64),
}

impl Number {
    pub(crate) const ZERO: Number = Number::Decimal(Decimal::ZERO);

    /// Neither infinite nor NaN (a decimal always is).
    pub(crate) fn is_finite(self) -> bool {
        match self {
            Number::Decimal(_) => true,
            Number::Float(f) => f.is_finite(),
        }
    }

    fn to_f64(self) -> f64 {
        match self {
            Number::Decimal(d) => d.to_f64(),
            Number::Float(f) => f,
        }
    }
}

/// What C's `strtold` reads, as Redis's `string2ld` accepts it: no leading
/// space, nothing after the number, not NaN. `None`: not a valid float.
pub(crate) fn parse_number(text: &[u8]) -> Option<Number> {
    if text.is_empty() || text.len() > 5 * 1024 || text[0].is_ascii_whitespace() {
        return None;
    }
    let text = std::str::from_utf8(text).ok()?;
    let (negative, body) = match text.as_bytes()[0] {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let sign = if negative { -1.0 } else { 1.0 };
    let lower = body.to_ascii_lowercase();
    if lower == "inf" || lower == "infinity" {
        return Some(Number::Float(sign * f64::INFINITY));
    }
    if let Some(hex) = lower.strip_prefix("0x") {
        return parse_hex_float(hex).map(|f| Number::Float(sign * f));
    }
    // digits [. digits] [e [sign] digits], at least one mantissa digit.
    let bytes = body.as_bytes();
    let mut i = 0;
    let mut digits = String::new();
    let mut decimals: i64 = 0;
    while i < bytes.len() && bytes[i].is_ascii_digit() {
        digits.push(bytes[i] as char);
        i += 1;
    }
    if i < bytes.len() && bytes[i] == b'.' {
        i += 1;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            digits.push(bytes[i] as char);
            decimals += 1;
            i += 1;
        }
    }
    if digits.is_empty() {
        return None;
    }
    let mut exponent: i64 = 0;
    if i < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
        let mut j = i + 1;
        let exp_negative = match bytes.get(j) {
            Some(b'-') => {
                j += 1;
                true
            }
            Some(b'+') => {
                j += 1;
                false
            }
            _ => false,
        };
        let from = j;
        while j < bytes.len() && bytes[j].is_ascii_digit() {
            exponent = (exponent * 10 + i64::from(bytes[j] - b'0')).min(1 << 40);
            j += 1;
        }
        if j == from {
            return None;
        }
        if exp_negative {
            exponent = -exponent;
        }
        i = j;
    }
    if i != bytes.len() {
        return None;
    }
    // Exact when it fits: significant digits, then the scale.
    let significant = digits.trim_start_matches('0');
    let scale = decimals - exponent;
    let exact = (significant.len() as u32) <= Decimal::MAX_DIGITS
        && (-(Decimal::MAX_DIGITS as i64)..=Decimal::MAX_DIGITS as i64).contains(&scale);
    if exact {
        let mantissa: i128 = if significant.is_empty() {
            0
        } else {
            significant.parse().ok()?
        };
        let mantissa = if negative { -mantissa } else { mantissa };
        let decimal = if scale >= 0 {
            Some(Decimal {
                mantissa,
                scale: scale as u32,
            })
        } else {
            10i128
                .checked_pow((-scale) as u32)
                .and_then(|f| mantissa.checked_mul(f))
                .map(|mantissa| Decimal { mantissa, scale: 0 })
        };
        if let Some(decimal) = decimal {
            return Some(Number::Decimal(decimal));
        }
    }
    let value: f64 = format!("{}{digits}e{}", if negative { "-" } else { "" }, -scale)
        .parse()
        .ok()?;
    Some(Number::Float(value))
}

/// `hex[.hex][p[sign]digits]` (after `0x`), as `strtold` reads it.
fn parse_hex_float(text: &str) -> Option<f64> {
    let (mantissa, exponent) = match text.split_once('p') {
        Some((m, e)) => (m, e.parse::<i32>().ok()?),
        None => (text, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let mut value = 0f64;
    for c in int.chars().chain(frac.chars()) {
        value = value * 16.0 + f64::from(c.to_digit(16)?);
    }
    let shift = exponent - 4 * frac.len() as i32;
    Some(value * 2f64.powi(shift))
}

/// `a + b` as INCRBYFLOAT prints it; `None` for NaN or infinity.
pub(crate) fn add_numbers(a: Number, b: Number) -> Option<String> {
    if let (Number::Decimal(a), Number::Decimal(b)) = (a, b) {
        let scale = a.scale.max(b.scale);
        if let (Some(a), Some(b)) = (a.with_scale(scale), b.with_scale(scale)) {
            if let Some(mantissa) = a.mantissa.checked_add(b.mantissa) {
                let sum = Decimal { mantissa, scale };
                return Some(sum.rounded(Decimal::PRINTED_DECIMALS).format());
            }
        }
    }
    let sum = a.to_f64() + b.to_f64();
    if !sum.is_finite() {
        return None;
    }
    let text = format!("{sum:.17}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    Some(if text == "-0" {
        "0".into()
    } else {
        text.into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incr(value: &str, by: &str) -> Option<String> {
        add_numbers(
            parse_number(value.as_bytes()).expect("a number"),
            parse_number(by.as_bytes()).expect("a number"),
        )
    }

    #[test]
    fn incrbyfloat_prints_as_redis() {
        assert_eq!(incr("10.5", "0.1").as_deref(), Some("10.6"));
        assert_eq!(incr("0.1", "0.2").as_deref(), Some("0.3"));
        assert_eq!(incr("1", "-1.1").as_deref(), Some("-0.1"));
        assert_eq!(incr("17179869184", "1.5").as_deref(), Some("17179869185.5"));
        assert_eq!(
            incr("17179869184", "17179869184").as_deref(),
            Some("34359738368")
        );
        assert_eq!(incr("1e5", "1").as_deref(), Some("100001"));
        assert_eq!(incr("1E+2", "1").as_deref(), Some("101"));
        assert_eq!(incr(".5", "1").as_deref(), Some("1.5"));
        assert_eq!(incr("1.", "1").as_deref(), Some("2"));
        assert_eq!(incr("+5", "1").as_deref(), Some("6"));
        assert_eq!(incr("-0", "0").as_deref(), Some("0"));
        assert_eq!(incr("1e20", "1").as_deref(), Some("100000000000000000001"));
        assert_eq!(
            incr("0.123456789012345678", "0").as_deref(),
            Some("0.12345678901234568")
        );
        // No negative zero (Redis's test "No negative zero").
        let third = incr("0", "0.024390243902439025").unwrap();
        assert_eq!(third, "0.02439024390243902");
        assert_eq!(incr(&third, "-0.024390243902439025").as_deref(), Some("0"));
        assert_eq!(incr("0x10", "1").as_deref(), Some("17"));
        assert_eq!(incr("1", "inf"), None);
        assert_eq!(incr("1e308", "1e308"), None);
        assert_eq!(incr("1e-400", "0").as_deref(), Some("0"));
        for bad in [
            " 1", "1 ", "", "abc", "1e", "e5", ".", "nan", "1..2", "--1", "0x",
        ] {
            assert_eq!(parse_number(bad.as_bytes()), None, "{bad:?}");
        }
    }

    #[test]
    fn getrange_follows_redis() {
        let s = b"Hello World";
        assert_eq!(get_range(s, 0, 3), b"Hell");
        assert_eq!(get_range(s, -3, -1), b"rld");
        assert_eq!(get_range(s, 0, -1), s);
        assert_eq!(get_range(s, 10, 100), b"d");
        assert_eq!(get_range(s, 5, 3), b"");
        assert_eq!(get_range(s, -1, -5), b"");
        assert_eq!(get_range(s, -100, 2), b"Hel");
        assert_eq!(get_range(b"", 0, -1), b"");
    }

    #[test]
    fn bit_commands_follow_redis() {
        let none: [Vec<u8>; 0] = [];
        let args =
            |s: &str| -> Vec<Vec<u8>> { s.split(' ').map(|a| a.as_bytes().to_vec()).collect() };
        // "foobar": Redis's documented examples.
        assert_eq!(bit_count(b"foobar", &none), Ok(Frame::Integer(26)));
        assert_eq!(bit_count(b"foobar", &args("0 0")), Ok(Frame::Integer(4)));
        assert_eq!(bit_count(b"foobar", &args("1 1")), Ok(Frame::Integer(6)));
        assert_eq!(
            bit_count(b"foobar", &args("1 1 BYTE")),
            Ok(Frame::Integer(6))
        );
        assert_eq!(
            bit_count(b"foobar", &args("5 30 BIT")),
            Ok(Frame::Integer(17))
        );
        assert_eq!(bit_count(b"foobar", &args("-2 -5")), Ok(Frame::Integer(0)));
        assert!(bit_count(b"foobar", &args("1")).is_err());
        assert!(bit_count(b"foobar", &args("0 1 foo")).is_err());
        let s = [0xff, 0xf0, 0x00];
        assert_eq!(bit_pos(&s, false, &none), Ok(Frame::Integer(12)));
        assert_eq!(
            bit_pos(&[0, 0xff, 0xf0], true, &args("2")),
            Ok(Frame::Integer(16))
        );
        assert_eq!(
            bit_pos(&[0, 0xff, 0xf0], true, &args("2 -1 BYTE")),
            Ok(Frame::Integer(16))
        );
        assert_eq!(
            bit_pos(&[0, 0xff, 0xf0], true, &args("7 15 BIT")),
            Ok(Frame::Integer(8))
        );
        assert_eq!(bit_pos(&[0xff, 0xff], false, &none), Ok(Frame::Integer(16)));
        assert_eq!(
            bit_pos(&[0xff, 0xff], false, &args("0 -1")),
            Ok(Frame::Integer(-1))
        );
        assert_eq!(bit_pos(&[0, 0], true, &none), Ok(Frame::Integer(-1)));
        assert_eq!(bit_pos(b"", false, &none), Ok(Frame::Integer(-1)));
        assert_eq!(
            bit_op(BitOpKind::And, &[vec![0xff, 0x0f], vec![0xf0]]),
            vec![0xf0, 0x00]
        );
        assert_eq!(bit_op(BitOpKind::Not, &[vec![0x0f]]), vec![0xf0]);
        assert_eq!(bit_op(BitOpKind::Xor, &[vec![1], vec![3, 4]]), vec![2, 4]);
        assert_eq!(bit_op(BitOpKind::Or, &[vec![], vec![]]), Vec::<u8>::new());
        assert_eq!(parse_bit_offset(b"7", 1), Ok(7));
        assert!(parse_bit_offset(b"8", 1).is_err());
        assert!(parse_bit_offset(b"-1", 1).is_err());
    }
}

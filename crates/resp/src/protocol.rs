//! RESP2 and RESP3: frames, the encoder, an incremental request parser for
//! the server and a general frame parser (replies, tests, fuzzing).
//!
//! Every length read from the wire is checked against [`Limits`] before
//! anything is allocated for it, and no input makes the parsers panic (the
//! fuzz target `resp_parse`, `scripts/fuzz.sh`, checks this).

use std::fmt;

/// The protocol a connection speaks; `HELLO` switches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Resp2,
    Resp3,
}

/// Bounds on what one client may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest bulk string (Redis: `proto-max-bulk-len`).
    pub max_bulk_bytes: usize,
    /// Most elements in one array (a command's arguments).
    pub max_array_len: usize,
    /// Longest inline command line (Redis: 64 KiB).
    pub max_inline_bytes: usize,
    /// Deepest nesting of aggregates (general frame parser only; requests are flat).
    pub max_nesting: usize,
    /// Most bytes of arguments one request may carry (request parser only;
    /// Redis's counterpart is `client-query-buffer-limit`).
    pub max_request_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk_bytes: 16 << 20,
            max_array_len: 1 << 20,
            max_inline_bytes: 64 << 10,
            max_nesting: 32,
            max_request_bytes: 256 << 20,
        }
    }
}

/// Longest `*<count>` or `$<len>` header line before the count itself is
/// malformed (Redis uses the inline limit; a count has at most 20 digits).
const MAX_HEADER_LINE_BYTES: usize = 64 << 10;
/// Capacity reserved up front for an array, whatever count it announces.
const MAX_PREALLOCATED_ARGS: usize = 1024;

/// A protocol error: the connection gets this text as an error reply and is
/// closed, as Redis does. The texts are Redis's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtocolError {
    InvalidMultibulkLength,
    InvalidBulkLength,
    TooBigInlineRequest,
    TooBigMultibulkCount,
    TooBigBulkCount,
    UnbalancedQuotes,
    ExpectedDollar(u8),
    /// General frame parser only.
    InvalidFrame(&'static str),
    TooDeep,
    RequestTooLarge,
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ERR Protocol error: ")?;
        match self {
            ProtocolError::InvalidMultibulkLength => f.write_str("invalid multibulk length"),
            ProtocolError::InvalidBulkLength => f.write_str("invalid bulk length"),
            ProtocolError::TooBigInlineRequest => f.write_str("too big inline request"),
            ProtocolError::TooBigMultibulkCount => f.write_str("too big mbulk count string"),
            ProtocolError::TooBigBulkCount => f.write_str("too big bulk count string"),
            ProtocolError::UnbalancedQuotes => f.write_str("unbalanced quotes in request"),
            ProtocolError::ExpectedDollar(got) => {
                write!(
                    f,
                    "expected '$', got '{}'",
                    char::from(*got).escape_default()
                )
            }
            ProtocolError::InvalidFrame(what) => write!(f, "invalid frame: {what}"),
            ProtocolError::TooDeep => f.write_str("nesting too deep"),
            ProtocolError::RequestTooLarge => f.write_str("query buffer limit exceeded"),
        }
    }
}

impl std::error::Error for ProtocolError {}

/// A RESP value. RESP3-only kinds are downgraded when encoded for RESP2.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Simple(String),
    Error(String),
    Integer(i64),
    Bulk(Vec<u8>),
    /// The nil reply: `$-1` in RESP2, `_` in RESP3.
    Null,
    /// The nil array: `*-1` in RESP2 (EXEC aborted by WATCH), `_` in RESP3.
    NullArray,
    Array(Vec<Frame>),
    Boolean(bool),
    Double(f64),
    BigNumber(String),
    BulkError(Vec<u8>),
    Verbatim {
        format: [u8; 3],
        text: Vec<u8>,
    },
    Map(Vec<(Frame, Frame)>),
    Set(Vec<Frame>),
    Push(Vec<Frame>),
    /// Redis's replies WITHSCORES: an array of two-element arrays in RESP3,
    /// one flat array in RESP2. Never parsed (it reads back as what it
    /// encodes to).
    Pairs(Vec<(Frame, Frame)>),
}

impl Frame {
    pub fn ok() -> Frame {
        Frame::Simple("OK".into())
    }

    pub fn error(text: impl Into<String>) -> Frame {
        Frame::Error(text.into())
    }

    pub fn bulk(bytes: impl Into<Vec<u8>>) -> Frame {
        Frame::Bulk(bytes.into())
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Frame::Error(_) | Frame::BulkError(_))
    }

    /// Appends this frame's encoding in `protocol` to `out`.
    pub fn encode(&self, protocol: Protocol, out: &mut Vec<u8>) {
        let resp3 = protocol == Protocol::Resp3;
        match self {
            Frame::Simple(s) => clean_line_to(out, b'+', s),
            Frame::Error(s) => clean_line_to(out, b'-', s),
            Frame::Integer(n) => {
                out.push(b':');
                push_decimal(out, n.unsigned_abs(), *n < 0);
                out.extend_from_slice(b"\r\n");
            }
            Frame::Bulk(b) => bulk(out, b'$', b),
            Frame::Null if resp3 => out.extend_from_slice(b"_\r\n"),
            Frame::NullArray if resp3 => out.extend_from_slice(b"_\r\n"),
            Frame::Null => out.extend_from_slice(b"$-1\r\n"),
            Frame::NullArray => out.extend_from_slice(b"*-1\r\n"),
            Frame::Array(items) => aggregate(out, b'*', items, protocol),
            Frame::Boolean(b) if resp3 => {
                out.extend_from_slice(if *b { b"#t\r\n" } else { b"#f\r\n" })
            }
            Frame::Boolean(b) => line(out, b':', if *b { b"1" } else { b"0" }),
            Frame::Double(d) if resp3 => line(out, b',', format_double(*d).as_bytes()),
            Frame::Double(d) => bulk(out, b'$', format_double(*d).as_bytes()),
            Frame::BigNumber(n) if resp3 => line(out, b'(', clean_line(n).as_bytes()),
            Frame::BigNumber(n) => bulk(out, b'$', n.as_bytes()),
            Frame::BulkError(b) if resp3 => bulk(out, b'!', b),
            Frame::BulkError(b) => line(
                out,
                b'-',
                clean_line(&String::from_utf8_lossy(b)).as_bytes(),
            ),
            Frame::Verbatim { format, text } if resp3 => {
                let mut body = Vec::with_capacity(4 + text.len());
                body.extend_from_slice(format);
                body.push(b':');
                body.extend_from_slice(text);
                bulk(out, b'=', &body);
            }
            Frame::Verbatim { text, .. } => bulk(out, b'$', text),
            Frame::Map(pairs) if resp3 => {
                header(out, b'%', pairs.len());
                for (k, v) in pairs {
                    k.encode(protocol, out);
                    v.encode(protocol, out);
                }
            }
            Frame::Map(pairs) => {
                header(out, b'*', pairs.len() * 2);
                for (k, v) in pairs {
                    k.encode(protocol, out);
                    v.encode(protocol, out);
                }
            }
            Frame::Set(items) if resp3 => aggregate(out, b'~', items, protocol),
            Frame::Push(items) if resp3 => aggregate(out, b'>', items, protocol),
            Frame::Set(items) | Frame::Push(items) => aggregate(out, b'*', items, protocol),
            Frame::Pairs(pairs) if resp3 => {
                header(out, b'*', pairs.len());
                for (a, b) in pairs {
                    out.extend_from_slice(b"*2\r\n");
                    a.encode(protocol, out);
                    b.encode(protocol, out);
                }
            }
            Frame::Pairs(pairs) => {
                header(out, b'*', pairs.len() * 2);
                for (a, b) in pairs {
                    a.encode(protocol, out);
                    b.encode(protocol, out);
                }
            }
        }
    }

    /// What this frame becomes when sent as RESP2 and read back.
    pub fn downgraded(&self) -> Frame {
        match self {
            Frame::Array(items) | Frame::Set(items) | Frame::Push(items) => {
                Frame::Array(items.iter().map(Frame::downgraded).collect())
            }
            Frame::Map(pairs) | Frame::Pairs(pairs) => Frame::Array(
                pairs
                    .iter()
                    .flat_map(|(k, v)| [k.downgraded(), v.downgraded()])
                    .collect(),
            ),
            Frame::Boolean(b) => Frame::Integer(i64::from(*b)),
            Frame::Double(d) => Frame::Bulk(format_double(*d).into_bytes()),
            Frame::BigNumber(n) => Frame::Bulk(n.clone().into_bytes()),
            Frame::BulkError(b) => Frame::Error(clean_line(&String::from_utf8_lossy(b))),
            Frame::Verbatim { text, .. } => Frame::Bulk(text.clone()),
            Frame::Simple(s) => Frame::Simple(clean_line(s)),
            Frame::Error(s) => Frame::Error(clean_line(s)),
            other => other.clone(),
        }
    }
}

/// A simple string or error cannot hold CR or LF: they become spaces.
fn clean_line(s: &str) -> String {
    s.replace(['\r', '\n'], " ")
}

/// A double as Redis 7.0 prints one (`%.17g`; `inf`, `-inf`): 17
/// significant digits, so it reads back as the same value, in fixed notation
/// for exponents from -4 to 16 and scientific (`1.5e+300`) otherwise,
/// trailing zeros cut.
pub(crate) fn format_double(d: f64) -> String {
    if d.is_nan() {
        return "nan".into();
    }
    if d.is_infinite() {
        return if d > 0.0 { "inf" } else { "-inf" }.into();
    }
    format_g(d, 17)
}

/// C's `%.<precision>g` of a finite number.
pub(crate) fn format_g(d: f64, precision: usize) -> String {
    let precision = precision.clamp(1, 17);
    if d == 0.0 {
        return if d.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let scientific = format!("{:.*e}", precision - 1, d.abs());
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let mut out = String::with_capacity(24);
    if d < 0.0 {
        out.push('-');
    }
    if exponent < -4 || exponent >= precision as i32 {
        let significant = digits.trim_end_matches('0');
        out.push_str(&significant[..1]);
        if significant.len() > 1 {
            out.push('.');
            out.push_str(&significant[1..]);
        }
        out.push('e');
        out.push(if exponent < 0 { '-' } else { '+' });
        out.push_str(&format!("{:02}", exponent.unsigned_abs()));
    } else if exponent < 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-exponent - 1) as usize));
        out.push_str(digits.trim_end_matches('0'));
    } else {
        let (int, frac) = digits.split_at(exponent as usize + 1);
        out.push_str(int);
        let frac = frac.trim_end_matches('0');
        if !frac.is_empty() {
            out.push('.');
            out.push_str(frac);
        }
    }
    out
}

fn line(out: &mut Vec<u8>, tag: u8, body: &[u8]) {
    out.push(tag);
    out.extend_from_slice(body);
    out.extend_from_slice(b"\r\n");
}

fn header(out: &mut Vec<u8>, tag: u8, len: usize) {
    out.push(tag);
    push_decimal(out, len as u64, false);
    out.extend_from_slice(b"\r\n");
}

/// A simple string or error line, CR and LF turned into spaces.
fn clean_line_to(out: &mut Vec<u8>, tag: u8, s: &str) {
    if s.bytes().any(|b| b == b'\r' || b == b'\n') {
        line(out, tag, clean_line(s).as_bytes());
    } else {
        line(out, tag, s.as_bytes());
    }
}

/// Appends `n` in decimal (with a `-` if `negative`), without allocating.
fn push_decimal(out: &mut Vec<u8>, mut n: u64, negative: bool) {
    if negative {
        out.push(b'-');
    }
    if n < 10 {
        out.push(b'0' + n as u8);
        return;
    }
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    while n > 0 {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
    }
    out.extend_from_slice(&digits[at..]);
}

fn bulk(out: &mut Vec<u8>, tag: u8, body: &[u8]) {
    header(out, tag, body.len());
    out.extend_from_slice(body);
    out.extend_from_slice(b"\r\n");
}

fn aggregate(out: &mut Vec<u8>, tag: u8, items: &[Frame], protocol: Protocol) {
    header(out, tag, items.len());
    for item in items {
        item.encode(protocol, out);
    }
}

// ---- the server's request parser --------------------------------------------

/// A command as the client sent it: its arguments, name first.
pub type Args = Vec<Vec<u8>>;

/// Where the request parser stands inside a multibulk request.
#[derive(Debug)]
struct InArray {
    remaining: usize,
    args: Args,
    /// Bytes of `args` so far.
    bytes: usize,
}

/// Parses requests (`*<n>` arrays of `$<len>` bulk strings, or inline
/// commands) incrementally: call [`RequestParser::parse`] with the unread
/// bytes; it consumes what it can, keeping its place inside a multibulk
/// request across calls, so a request split over many reads is never
/// re-scanned.
#[derive(Debug)]
pub struct RequestParser {
    limits: Limits,
    in_array: Option<InArray>,
}

/// One step of [`RequestParser::parse_in_place`].
#[derive(Debug, PartialEq)]
pub enum InPlace {
    /// A whole request of this many bytes, its arguments in the spans.
    Spans { consumed: usize },
    /// What [`RequestParser::parse`] made of the input.
    Parsed(Parsed),
}

/// One step of the request parser.
#[derive(Debug, PartialEq)]
pub struct Parsed {
    /// Bytes of the input consumed (drop them before the next call).
    pub consumed: usize,
    /// A complete request, if one ended within the consumed bytes.
    pub request: Option<Args>,
}

impl RequestParser {
    pub fn new(limits: Limits) -> Self {
        RequestParser {
            limits,
            in_array: None,
        }
    }

    /// Changes the limits (for example once a client has authenticated).
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// As [`parse`](Self::parse), but a multibulk request found whole at the
    /// front of `input` is not copied: its arguments are left in `spans` as
    /// byte ranges of `input` ([`InPlace::Spans`]). Anything else (a request
    /// split over reads, an inline command, an error) is [`parse`]'s.
    ///
    /// [`parse`]: Self::parse
    pub fn parse_in_place(
        &mut self,
        input: &[u8],
        spans: &mut Vec<std::ops::Range<usize>>,
    ) -> Result<InPlace, ProtocolError> {
        if self.in_array.is_none() {
            if let Some(consumed) = self.whole_request(input, spans) {
                return Ok(InPlace::Spans { consumed });
            }
        }
        self.parse(input).map(InPlace::Parsed)
    }

    /// The length of the well-formed, complete, non-empty multibulk request
    /// at the front of `input` within the limits, its arguments in `spans`;
    /// `None` for anything else.
    fn whole_request(
        &self,
        input: &[u8],
        spans: &mut Vec<std::ops::Range<usize>>,
    ) -> Option<usize> {
        spans.clear();
        if input.first() != Some(&b'*') {
            return None;
        }
        let (count, mut pos) = short_header(input)?;
        if count == 0 || count > self.limits.max_array_len {
            return None;
        }
        let mut bytes = 0usize;
        for _ in 0..count {
            let rest = &input[pos..];
            if rest.first() != Some(&b'$') {
                return None;
            }
            let (len, header_len) = short_header(rest)?;
            if len > self.limits.max_bulk_bytes {
                return None;
            }
            let start = pos + header_len;
            let end = start.checked_add(len)?;
            if input.get(end..end.checked_add(2)?)? != b"\r\n" {
                return None;
            }
            bytes += len;
            spans.push(start..end);
            pos = end + 2;
        }
        (bytes <= self.limits.max_request_bytes).then_some(pos)
    }

    /// Consumes bytes from the front of `input` until one request is complete
    /// or the input runs out. Empty requests (blank inline lines, `*0`) are
    /// consumed and skipped.
    pub fn parse(&mut self, input: &[u8]) -> Result<Parsed, ProtocolError> {
        let mut pos = 0;
        loop {
            if let Some(state) = &mut self.in_array {
                while state.remaining > 0 {
                    let rest = &input[pos..];
                    let Some(&first) = rest.first() else {
                        return Ok(Parsed {
                            consumed: pos,
                            request: None,
                        });
                    };
                    if first != b'$' {
                        return Err(ProtocolError::ExpectedDollar(first));
                    }
                    let Some((len, header_len)) =
                        header_line(rest, ProtocolError::TooBigBulkCount)?
                    else {
                        return Ok(Parsed {
                            consumed: pos,
                            request: None,
                        });
                    };
                    let len = parse_len(len)
                        .filter(|&n| n <= self.limits.max_bulk_bytes)
                        .ok_or(ProtocolError::InvalidBulkLength)?;
                    // Wait for the whole payload and its CRLF; nothing is copied before.
                    let total = header_len
                        .checked_add(len)
                        .and_then(|n| n.checked_add(2))
                        .ok_or(ProtocolError::InvalidBulkLength)?;
                    if rest.len() < total {
                        return Ok(Parsed {
                            consumed: pos,
                            request: None,
                        });
                    }
                    if &rest[header_len + len..total] != b"\r\n" {
                        return Err(ProtocolError::InvalidBulkLength);
                    }
                    state.bytes += len;
                    if state.bytes > self.limits.max_request_bytes {
                        return Err(ProtocolError::RequestTooLarge);
                    }
                    state.args.push(rest[header_len..header_len + len].to_vec());
                    state.remaining -= 1;
                    pos += total;
                }
                let done = self.in_array.take().expect("in an array");
                return Ok(Parsed {
                    consumed: pos,
                    request: Some(done.args),
                });
            }
            let rest = &input[pos..];
            let Some(&first) = rest.first() else {
                return Ok(Parsed {
                    consumed: pos,
                    request: None,
                });
            };
            if first == b'*' {
                let Some((count, header_len)) =
                    header_line(rest, ProtocolError::TooBigMultibulkCount)?
                else {
                    return Ok(Parsed {
                        consumed: pos,
                        request: None,
                    });
                };
                pos += header_len;
                let count = parse_count(count).ok_or(ProtocolError::InvalidMultibulkLength)?;
                match count {
                    None | Some(0) => continue,
                    Some(n) if n > self.limits.max_array_len => {
                        return Err(ProtocolError::InvalidMultibulkLength)
                    }
                    Some(n) => {
                        self.in_array = Some(InArray {
                            remaining: n,
                            args: Vec::with_capacity(n.min(MAX_PREALLOCATED_ARGS)),
                            bytes: 0,
                        })
                    }
                }
            } else {
                let Some(newline) = memchr(b'\n', rest) else {
                    if rest.len() > self.limits.max_inline_bytes {
                        return Err(ProtocolError::TooBigInlineRequest);
                    }
                    return Ok(Parsed {
                        consumed: pos,
                        request: None,
                    });
                };
                if newline > self.limits.max_inline_bytes {
                    return Err(ProtocolError::TooBigInlineRequest);
                }
                let mut text = &rest[..newline];
                if text.last() == Some(&b'\r') {
                    text = &text[..text.len() - 1];
                }
                pos += newline + 1;
                let args = split_inline(text)?;
                if args.len() > self.limits.max_array_len {
                    return Err(ProtocolError::InvalidMultibulkLength);
                }
                if !args.is_empty() {
                    return Ok(Parsed {
                        consumed: pos,
                        request: Some(args),
                    });
                }
            }
        }
    }
}

fn memchr(needle: u8, haystack: &[u8]) -> Option<usize> {
    haystack.iter().position(|&b| b == needle)
}

/// A `<tag><digits>\r\n` line: its body (after the tag) and its length with
/// CRLF; `None` if the line is not complete yet.
fn header_line(
    input: &[u8],
    too_long: ProtocolError,
) -> Result<Option<(&[u8], usize)>, ProtocolError> {
    match memchr(b'\r', input) {
        Some(cr) if cr + 1 < input.len() => {
            if input[cr + 1] != b'\n' {
                return Err(too_long_or_invalid(too_long));
            }
            Ok(Some((&input[1..cr], cr + 2)))
        }
        Some(_) => Ok(None),
        None if input.len() > MAX_HEADER_LINE_BYTES => Err(too_long),
        None => Ok(None),
    }
}

/// A `<tag><digits>\r\n` line of at most 19 digits at the front of `input`:
/// the number and the line's length; `None` if it is anything else or is
/// not complete.
fn short_header(input: &[u8]) -> Option<(usize, usize)> {
    let mut n: u64 = 0;
    for (i, &b) in input.iter().enumerate().skip(1).take(20) {
        match b {
            b'0'..=b'9' if i < 20 => n = n * 10 + u64::from(b - b'0'),
            b'\r' if i > 1 && input.get(i + 1) == Some(&b'\n') => {
                return Some((usize::try_from(n).ok()?, i + 2))
            }
            _ => return None,
        }
    }
    None
}

fn too_long_or_invalid(kind: ProtocolError) -> ProtocolError {
    match kind {
        ProtocolError::TooBigBulkCount => ProtocolError::InvalidBulkLength,
        _ => ProtocolError::InvalidMultibulkLength,
    }
}

/// A non-negative decimal without sign or leading garbage.
fn parse_len(digits: &[u8]) -> Option<usize> {
    // 19 digits cannot overflow a u64.
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    let mut n: u64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u64::from(b - b'0');
    }
    usize::try_from(n).ok()
}

/// An array count: `-1` (and any negative, as Redis treats them) is none.
fn parse_count(digits: &[u8]) -> Option<Option<usize>> {
    if let Some(negative) = digits.strip_prefix(b"-") {
        return parse_len(negative).map(|_| None);
    }
    parse_len(digits).map(Some)
}

/// Splits an inline command line into arguments: whitespace separates them;
/// `"..."` takes the escapes `\n \r \t \b \a \\ \" \xHH`, `'...'` only `\'`.
/// A closing quote must be followed by whitespace or the end.
pub fn split_inline(line: &[u8]) -> Result<Args, ProtocolError> {
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == line.len() {
            return Ok(args);
        }
        let mut arg = Vec::new();
        match line[i] {
            b'"' => {
                i += 1;
                loop {
                    match line.get(i) {
                        None => return Err(ProtocolError::UnbalancedQuotes),
                        Some(b'"') => {
                            i += 1;
                            break;
                        }
                        Some(b'\\') => {
                            let (byte, used) = match line.get(i + 1) {
                                Some(b'x') => match (hex(line.get(i + 2)), hex(line.get(i + 3))) {
                                    (Some(h), Some(l)) => (h * 16 + l, 4),
                                    _ => (b'x', 2),
                                },
                                Some(b'n') => (b'\n', 2),
                                Some(b'r') => (b'\r', 2),
                                Some(b't') => (b'\t', 2),
                                Some(b'b') => (0x08, 2),
                                Some(b'a') => (0x07, 2),
                                Some(&other) => (other, 2),
                                None => return Err(ProtocolError::UnbalancedQuotes),
                            };
                            arg.push(byte);
                            i += used;
                        }
                        Some(&b) => {
                            arg.push(b);
                            i += 1;
                        }
                    }
                }
                if line.get(i).is_some_and(|b| !b.is_ascii_whitespace()) {
                    return Err(ProtocolError::UnbalancedQuotes);
                }
            }
            b'\'' => {
                i += 1;
                loop {
                    match line.get(i) {
                        None => return Err(ProtocolError::UnbalancedQuotes),
                        Some(b'\'') => {
                            i += 1;
                            break;
                        }
                        Some(b'\\') if line.get(i + 1) == Some(&b'\'') => {
                            arg.push(b'\'');
                            i += 2;
                        }
                        Some(&b) => {
                            arg.push(b);
                            i += 1;
                        }
                    }
                }
                if line.get(i).is_some_and(|b| !b.is_ascii_whitespace()) {
                    return Err(ProtocolError::UnbalancedQuotes);
                }
            }
            _ => {
                while i < line.len() && !line[i].is_ascii_whitespace() {
                    arg.push(line[i]);
                    i += 1;
                }
            }
        }
        args.push(arg);
    }
}

fn hex(b: Option<&u8>) -> Option<u8> {
    match b? {
        d @ b'0'..=b'9' => Some(d - b'0'),
        l @ b'a'..=b'f' => Some(l - b'a' + 10),
        u @ b'A'..=b'F' => Some(u - b'A' + 10),
        _ => None,
    }
}

// ---- the general frame parser -----------------------------------------------

/// Parses one whole frame of either protocol from the front of `input`:
/// `Ok(None)` if it is not complete yet, otherwise the frame and the bytes it
/// took. Not resumable (a partial frame is parsed again from its start); for
/// clients and tests, where replies are small. Lengths and nesting are bounded
/// by `limits`.
pub fn parse_frame(input: &[u8], limits: &Limits) -> Result<Option<(Frame, usize)>, ProtocolError> {
    let mut pos = 0;
    match frame_at(input, &mut pos, limits, 0)? {
        Some(frame) => Ok(Some((frame, pos))),
        None => Ok(None),
    }
}

/// `Ok(None)`: incomplete.
fn frame_at(
    input: &[u8],
    pos: &mut usize,
    limits: &Limits,
    depth: usize,
) -> Result<Option<Frame>, ProtocolError> {
    if depth > limits.max_nesting {
        return Err(ProtocolError::TooDeep);
    }
    let Some(&tag) = input.get(*pos) else {
        return Ok(None);
    };
    let rest = &input[*pos..];
    let Some(cr) = memchr(b'\r', rest) else {
        if rest.len() > MAX_HEADER_LINE_BYTES.max(limits.max_inline_bytes) {
            return Err(ProtocolError::InvalidFrame("line too long"));
        }
        return Ok(None);
    };
    if cr == 0 {
        // The type byte is the CR itself: there is no frame here (and no
        // body to slice; fuzz/regressions/resp_parse/frame-starting-with-cr).
        return Err(ProtocolError::InvalidFrame("a line without a type byte"));
    }
    if cr + 1 >= rest.len() {
        return Ok(None);
    }
    if rest[cr + 1] != b'\n' {
        return Err(ProtocolError::InvalidFrame("CR without LF"));
    }
    let body = &rest[1..cr];
    if memchr(b'\n', body).is_some() {
        return Err(ProtocolError::InvalidFrame("LF inside a line"));
    }
    let after_line = *pos + cr + 2;
    let text = || {
        std::str::from_utf8(body)
            .map(str::to_owned)
            .map_err(|_| ProtocolError::InvalidFrame("line is not UTF-8"))
    };
    let frame = match tag {
        b'+' => Frame::Simple(text()?),
        b'-' => Frame::Error(text()?),
        b':' => Frame::Integer(
            text()?
                .parse()
                .map_err(|_| ProtocolError::InvalidFrame("bad integer"))?,
        ),
        b'_' if body.is_empty() => Frame::Null,
        b'#' => match body {
            b"t" => Frame::Boolean(true),
            b"f" => Frame::Boolean(false),
            _ => return Err(ProtocolError::InvalidFrame("bad boolean")),
        },
        b',' => Frame::Double(parse_double(&text()?)?),
        b'(' => {
            let n = text()?;
            let digits = n.strip_prefix('-').unwrap_or(&n);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(ProtocolError::InvalidFrame("bad big number"));
            }
            Frame::BigNumber(n)
        }
        b'$' | b'!' | b'=' => {
            if tag == b'$' && body == b"-1" {
                *pos = after_line;
                return Ok(Some(Frame::Null));
            }
            let len = parse_len(body)
                .filter(|&n| n <= limits.max_bulk_bytes)
                .ok_or(ProtocolError::InvalidBulkLength)?;
            let end = after_line
                .checked_add(len)
                .ok_or(ProtocolError::InvalidBulkLength)?;
            if input.len() < end + 2 {
                return Ok(None);
            }
            if &input[end..end + 2] != b"\r\n" {
                return Err(ProtocolError::InvalidBulkLength);
            }
            let payload = input[after_line..end].to_vec();
            *pos = end + 2;
            return Ok(Some(match tag {
                b'$' => Frame::Bulk(payload),
                b'!' => Frame::BulkError(payload),
                _ => {
                    if payload.len() < 4 || payload[3] != b':' {
                        return Err(ProtocolError::InvalidFrame("bad verbatim string"));
                    }
                    Frame::Verbatim {
                        format: [payload[0], payload[1], payload[2]],
                        text: payload[4..].to_vec(),
                    }
                }
            }));
        }
        b'*' | b'~' | b'>' | b'%' => {
            if tag == b'*' && body == b"-1" {
                *pos = after_line;
                return Ok(Some(Frame::NullArray));
            }
            let len = parse_len(body)
                .filter(|&n| n <= limits.max_array_len)
                .ok_or(ProtocolError::InvalidMultibulkLength)?;
            let mut cursor = after_line;
            let frame = if tag == b'%' {
                let mut pairs = Vec::with_capacity(len.min(MAX_PREALLOCATED_ARGS));
                for _ in 0..len {
                    let Some(k) = frame_at(input, &mut cursor, limits, depth + 1)? else {
                        return Ok(None);
                    };
                    let Some(v) = frame_at(input, &mut cursor, limits, depth + 1)? else {
                        return Ok(None);
                    };
                    pairs.push((k, v));
                }
                Frame::Map(pairs)
            } else {
                let mut items = Vec::with_capacity(len.min(MAX_PREALLOCATED_ARGS));
                for _ in 0..len {
                    let Some(item) = frame_at(input, &mut cursor, limits, depth + 1)? else {
                        return Ok(None);
                    };
                    items.push(item);
                }
                match tag {
                    b'*' => Frame::Array(items),
                    b'~' => Frame::Set(items),
                    _ => Frame::Push(items),
                }
            };
            *pos = cursor;
            return Ok(Some(frame));
        }
        _ => return Err(ProtocolError::InvalidFrame("unknown type byte")),
    };
    *pos = after_line;
    Ok(Some(frame))
}

fn parse_double(text: &str) -> Result<f64, ProtocolError> {
    match text {
        "inf" => Ok(f64::INFINITY),
        "-inf" => Ok(f64::NEG_INFINITY),
        "nan" => Ok(f64::NAN),
        _ => text
            .parse()
            .map_err(|_| ProtocolError::InvalidFrame("bad double")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_print_as_redis_does() {
        // Each pair: C's `%.17g` of the value (what Redis 7.0 answers).
        let cases: &[(f64, &str)] = &[
            (1e-5, "1.0000000000000001e-05"),
            (0.1, "0.10000000000000001"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (1.5e300, "1.5000000000000001e+300"),
            (4.5, "4.5"),
            (1.0, "1"),
            (0.0, "0"),
            (-0.0, "-0"),
            (1e16, "10000000000000000"),
            (1e17, "1e+17"),
            (0.0001, "0.0001"),
            (-2.5, "-2.5"),
            (3e-5, "3.0000000000000001e-05"),
            (5e-324, "4.9406564584124654e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (-0.00012345, "-0.00012344999999999999"),
            (9007199254740992.0, "9007199254740992"),
            (123.456, "123.456"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
        ];
        for (value, text) in cases {
            assert_eq!(format_double(*value), *text, "{value:?}");
            if value.is_finite() {
                assert_eq!(text.parse::<f64>().unwrap(), *value);
            }
        }
    }

    #[test]
    fn pairs_are_nested_in_resp3_and_flat_in_resp2() {
        let pairs = Frame::Pairs(vec![(Frame::bulk("a"), Frame::Double(1.5))]);
        let mut out = Vec::new();
        pairs.encode(Protocol::Resp3, &mut out);
        assert_eq!(out, b"*1\r\n*2\r\n$1\r\na\r\n,1.5\r\n");
        out.clear();
        pairs.encode(Protocol::Resp2, &mut out);
        assert_eq!(out, b"*2\r\n$1\r\na\r\n$3\r\n1.5\r\n");
        assert_eq!(
            pairs.downgraded(),
            Frame::Array(vec![Frame::bulk("a"), Frame::bulk("1.5")])
        );
    }

    fn parse_all(parser: &mut RequestParser, mut input: &[u8]) -> Result<Vec<Args>, ProtocolError> {
        let mut out = Vec::new();
        loop {
            let step = parser.parse(input)?;
            input = &input[step.consumed..];
            match step.request {
                Some(r) => out.push(r),
                None => return Ok(out),
            }
        }
    }

    #[test]
    fn multibulk_and_inline() {
        let mut p = RequestParser::new(Limits::default());
        let got = parse_all(
            &mut p,
            b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\n\r\nset a \"b c\\x41\"\n",
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                vec![b"GET".to_vec(), b"k".to_vec()],
                vec![b"PING".to_vec()],
                vec![b"set".to_vec(), b"a".to_vec(), b"b cA".to_vec()],
            ]
        );
    }

    #[test]
    fn byte_at_a_time() {
        let input = b"*3\r\n$3\r\nSET\r\n$5\r\nhello\r\n$0\r\n\r\n";
        let mut p = RequestParser::new(Limits::default());
        let mut buffer = Vec::new();
        let mut requests = Vec::new();
        for &b in input.iter() {
            buffer.push(b);
            let step = p.parse(&buffer).unwrap();
            buffer.drain(..step.consumed);
            requests.extend(step.request);
        }
        assert_eq!(
            requests,
            vec![vec![b"SET".to_vec(), b"hello".to_vec(), vec![]]]
        );
        assert!(buffer.is_empty());
    }

    #[test]
    fn limits_give_redis_errors() {
        let limits = Limits {
            max_bulk_bytes: 4,
            max_array_len: 2,
            max_inline_bytes: 8,
            max_nesting: 2,
            max_request_bytes: 6,
        };
        let err = |input: &[u8]| {
            RequestParser::new(limits)
                .parse(input)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(b"*3\r\n"),
            "ERR Protocol error: invalid multibulk length"
        );
        assert_eq!(
            err(b"*1\r\n$5\r\n"),
            "ERR Protocol error: invalid bulk length"
        );
        assert_eq!(
            err(b"*1\r\n$x\r\n"),
            "ERR Protocol error: invalid bulk length"
        );
        assert_eq!(
            err(b"*1\r\n:1\r\n"),
            "ERR Protocol error: expected '$', got ':'"
        );
        assert_eq!(
            err(b"aaaaaaaaaaaa"),
            "ERR Protocol error: too big inline request"
        );
        assert_eq!(
            err(b"a \"b\n"),
            "ERR Protocol error: unbalanced quotes in request"
        );
        assert_eq!(
            err(b"*1\r\n$2\r\nabcd"),
            "ERR Protocol error: invalid bulk length"
        );
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = b"*1\r\n".repeat(100);
        assert_eq!(
            parse_frame(&deep, &Limits::default()),
            Err(ProtocolError::TooDeep)
        );
    }
}

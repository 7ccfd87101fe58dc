//! The `cmsgpack` table scripts see (Redis ships lua-cmsgpack):
//! `cmsgpack.pack(...)`, `cmsgpack.unpack(data)`,
//! `cmsgpack.unpack_one(data [, offset])` and
//! `cmsgpack.unpack_limit(data, limit [, offset])`, with lua-cmsgpack's
//! encodings (an integral number as the smallest integer, a number a float
//! holds exactly as a float, else a double; a table whose keys are 1..n as
//! an array, else a map; tables nested past 16 levels, cyclic ones
//! included, as nil) and its error texts. Unpacking is bounded: nesting
//! past [`MAX_UNPACK_DEPTH`] is refused, and no length read from the input
//! reserves memory beyond what the input can hold.

use mlua::{Lua, MultiValue, Table, Value};

/// lua-cmsgpack's `LUACMSGPACK_MAX_NESTING`: deeper tables encode as nil.
const MAX_PACK_NESTING: usize = 16;
/// The most values one `unpack` returns (each is a slot of the Lua stack
/// and of mlua's bounded reference stack).
const MAX_UNPACK_VALUES: i64 = 2000;
/// The deepest input `unpack` decodes (lua-cmsgpack is bounded by the Lua
/// stack instead; this keeps the recursion well inside a thread's stack).
const MAX_UNPACK_DEPTH: usize = 128;

/// Builds the `cmsgpack` table.
pub(crate) fn table(lua: &Lua) -> mlua::Result<Table> {
    let cmsgpack = lua.create_table()?;
    cmsgpack.set(
        "pack",
        lua.create_function(|lua, values: MultiValue| {
            if values.is_empty() {
                return Err(mlua::Error::runtime(
                    "bad argument #0 to 'pack' (MessagePack pack needs input.)",
                ));
            }
            let mut out = Vec::new();
            for value in &values {
                pack_value(value, 0, &mut out)?;
            }
            lua.create_string(&out)
        })?,
    )?;
    cmsgpack.set(
        "unpack",
        lua.create_function(|lua, data: mlua::String| unpack_full(lua, &data.as_bytes(), 0, 0))?,
    )?;
    cmsgpack.set(
        "unpack_one",
        lua.create_function(|lua, (data, offset): (mlua::String, Option<i64>)| {
            unpack_full(lua, &data.as_bytes(), 1, offset.unwrap_or(0))
        })?,
    )?;
    cmsgpack.set(
        "unpack_limit",
        lua.create_function(
            |lua, (data, limit, offset): (mlua::String, i64, Option<i64>)| {
                unpack_full(lua, &data.as_bytes(), limit, offset.unwrap_or(0))
            },
        )?,
    )?;
    cmsgpack.set("_NAME", "cmsgpack")?;
    cmsgpack.set("_VERSION", "lua-cmsgpack 0.4.0")?;
    cmsgpack.set("_COPYRIGHT", "Copyright (C) 2012, Salvatore Sanfilippo")?;
    cmsgpack.set("_DESCRIPTION", "MessagePack C implementation for Lua")?;
    Ok(cmsgpack)
}

/// Appends one value's encoding; `level` counts the tables around it.
fn pack_value(value: &Value, level: usize, out: &mut Vec<u8>) -> mlua::Result<()> {
    match value {
        Value::Boolean(true) => out.push(0xc3),
        Value::Boolean(false) => out.push(0xc2),
        Value::Integer(n) => pack_int(*n, out),
        Value::Number(n) => pack_number(*n, out),
        Value::String(s) => pack_bytes(&s.as_bytes(), out),
        Value::Table(t) if level < MAX_PACK_NESTING => pack_table(t, level, out)?,
        // Nil, tables past the nesting limit, and what msgpack cannot
        // carry (functions, userdata, threads) encode as nil.
        _ => out.push(0xc0),
    }
    Ok(())
}

fn pack_number(n: f64, out: &mut Vec<u8>) {
    // lua-cmsgpack's IS_INT64_EQUIVALENT: integral and within int64.
    if n.is_finite()
        && n.fract() == 0.0
        && (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&n)
    {
        pack_int(n as i64, out);
    } else if f64::from(n as f32) == n {
        out.push(0xca);
        out.extend_from_slice(&(n as f32).to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn pack_int(n: i64, out: &mut Vec<u8>) {
    if n >= 0 {
        match n {
            0..=127 => out.push(n as u8),
            128..=0xff => out.extend_from_slice(&[0xcc, n as u8]),
            0x100..=0xffff => {
                out.push(0xcd);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            0x1_0000..=0xffff_ffff => {
                out.push(0xce);
                out.extend_from_slice(&(n as u32).to_be_bytes());
            }
            _ => {
                out.push(0xcf);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
    } else if n >= -32 {
        out.push(n as i8 as u8);
    } else if n >= -128 {
        out.extend_from_slice(&[0xd0, n as i8 as u8]);
    } else if n >= -32768 {
        out.push(0xd1);
        out.extend_from_slice(&(n as i16).to_be_bytes());
    } else if n >= -2_147_483_648 {
        out.push(0xd2);
        out.extend_from_slice(&(n as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn pack_bytes(bytes: &[u8], out: &mut Vec<u8>) {
    let len = bytes.len();
    if len < 32 {
        out.push(0xa0 | len as u8);
    } else if len <= 0xff {
        out.extend_from_slice(&[0xd9, len as u8]);
    } else if len <= 0xffff {
        out.push(0xda);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
    out.extend_from_slice(bytes);
}

fn pack_header(len: usize, fix: u8, m16: u8, m32: u8, out: &mut Vec<u8>) {
    if len <= 15 {
        out.push(fix | len as u8);
    } else if len <= 0xffff {
        out.push(m16);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(m32);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
}

/// lua-cmsgpack's `table_is_an_array`: every key a positive integral
/// number and the largest equal to the count (the empty table included).
/// Two passes over the table, each holding one entry at a time (a Rust
/// handle on a Lua value takes a slot of a bounded stack).
fn pack_table(table: &Table, level: usize, out: &mut Vec<u8>) -> mlua::Result<()> {
    let mut count = 0usize;
    let mut max = 0.0f64;
    let mut is_array = true;
    for pair in table.clone().pairs::<Value, Value>() {
        let (key, _) = pair?;
        match key {
            Value::Integer(n) if n >= 1 => max = max.max(n as f64),
            Value::Number(n) if n >= 1.0 && n.fract() == 0.0 => max = max.max(n),
            _ => is_array = false,
        }
        count += 1;
    }
    if is_array && max == count as f64 {
        pack_header(count, 0x90, 0xdc, 0xdd, out);
        for i in 1..=count {
            let value: Value = table.raw_get(i)?;
            pack_value(&value, level + 1, out)?;
        }
    } else {
        pack_header(count, 0x80, 0xde, 0xdf, out);
        // Nothing changes the table meanwhile: the count holds.
        for pair in table.clone().pairs::<Value, Value>().take(count) {
            let (key, value) = pair?;
            pack_value(&key, level + 1, out)?;
            pack_value(&value, level + 1, out)?;
        }
    }
    Ok(())
}

/// Why decoding stopped.
enum DecodeError {
    Eof,
    BadFormat,
    Lua(mlua::Error),
}

impl From<mlua::Error> for DecodeError {
    fn from(e: mlua::Error) -> Self {
        DecodeError::Lua(e)
    }
}

struct Cursor<'a> {
    data: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn left(&self) -> usize {
        self.data.len() - self.at
    }

    fn take(&mut self, n: usize) -> Result<&[u8], DecodeError> {
        if self.left() < n {
            return Err(DecodeError::Eof);
        }
        let slice = &self.data[self.at..self.at + n];
        self.at += n;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn len(&mut self, bytes: usize) -> Result<usize, DecodeError> {
        Ok(match bytes {
            1 => usize::from(self.array::<1>()?[0]),
            2 => usize::from(u16::from_be_bytes(self.array()?)),
            _ => u32::from_be_bytes(self.array()?) as usize,
        })
    }
}

fn decode(lua: &Lua, c: &mut Cursor<'_>, depth: usize) -> Result<Value, DecodeError> {
    if depth > MAX_UNPACK_DEPTH {
        return Err(DecodeError::BadFormat);
    }
    let tag = c.array::<1>()?[0];
    let number = |n: f64| Ok(Value::Number(n));
    match tag {
        0x00..=0x7f => number(f64::from(tag)),
        0xe0..=0xff => number(f64::from(tag as i8)),
        0xc0 => Ok(Value::Nil),
        0xc2 => Ok(Value::Boolean(false)),
        0xc3 => Ok(Value::Boolean(true)),
        0xcc => number(f64::from(c.array::<1>()?[0])),
        0xcd => number(f64::from(u16::from_be_bytes(c.array()?))),
        0xce => number(f64::from(u32::from_be_bytes(c.array()?))),
        0xcf => number(u64::from_be_bytes(c.array()?) as f64),
        0xd0 => number(f64::from(c.array::<1>()?[0] as i8)),
        0xd1 => number(f64::from(i16::from_be_bytes(c.array()?))),
        0xd2 => number(f64::from(i32::from_be_bytes(c.array()?))),
        0xd3 => number(i64::from_be_bytes(c.array()?) as f64),
        0xca => number(f64::from(f32::from_be_bytes(c.array()?))),
        0xcb => number(f64::from_be_bytes(c.array()?)),
        0xa0..=0xbf => string(lua, c, usize::from(tag & 0x1f)),
        0xd9 | 0xc4 => {
            let n = c.len(1)?;
            string(lua, c, n)
        }
        0xda | 0xc5 => {
            let n = c.len(2)?;
            string(lua, c, n)
        }
        0xdb | 0xc6 => {
            let n = c.len(4)?;
            string(lua, c, n)
        }
        0x90..=0x9f => array(lua, c, usize::from(tag & 0x0f), depth),
        0xdc => {
            let n = c.len(2)?;
            array(lua, c, n, depth)
        }
        0xdd => {
            let n = c.len(4)?;
            array(lua, c, n, depth)
        }
        0x80..=0x8f => map(lua, c, usize::from(tag & 0x0f), depth),
        0xde => {
            let n = c.len(2)?;
            map(lua, c, n, depth)
        }
        0xdf => {
            let n = c.len(4)?;
            map(lua, c, n, depth)
        }
        _ => Err(DecodeError::BadFormat),
    }
}

fn string(lua: &Lua, c: &mut Cursor<'_>, n: usize) -> Result<Value, DecodeError> {
    let bytes = c.take(n)?;
    Ok(Value::String(lua.create_string(bytes)?))
}

fn array(lua: &Lua, c: &mut Cursor<'_>, n: usize, depth: usize) -> Result<Value, DecodeError> {
    // Each element takes a byte at least: no more room than the input holds.
    let table = lua.create_table_with_capacity(n.min(c.left()), 0)?;
    for i in 1..=n {
        let value = decode(lua, c, depth + 1)?;
        table.raw_set(i, value)?;
    }
    Ok(Value::Table(table))
}

fn map(lua: &Lua, c: &mut Cursor<'_>, n: usize, depth: usize) -> Result<Value, DecodeError> {
    let table = lua.create_table_with_capacity(0, n.min(c.left() / 2))?;
    for _ in 0..n {
        let key = decode(lua, c, depth + 1)?;
        let value = decode(lua, c, depth + 1)?;
        match key {
            Value::Nil => return Err(DecodeError::Lua(mlua::Error::runtime("table index is nil"))),
            Value::Number(n) if n.is_nan() => {
                return Err(DecodeError::Lua(mlua::Error::runtime("table index is NaN")))
            }
            key => table.raw_set(key, value)?,
        }
    }
    Ok(Value::Table(table))
}

/// lua-cmsgpack's `mp_unpack_full`: `limit` values from `offset` (every
/// value when both are 0); with a limit or an offset, the next offset
/// (-1 at the end) comes first.
fn unpack_full(lua: &Lua, data: &[u8], limit: i64, offset: i64) -> mlua::Result<MultiValue> {
    if offset < 0 || limit < 0 {
        return Err(mlua::Error::runtime(format!(
            "Invalid request to unpack with offset of {offset} and limit of {}.",
            data.len()
        )));
    }
    if offset as u64 > data.len() as u64 {
        return Err(mlua::Error::runtime(format!(
            "Start offset {offset} greater than input length {}.",
            data.len()
        )));
    }
    let decode_all = limit == 0 && offset == 0;
    let limit = if decode_all { i64::MAX } else { limit };
    let mut c = Cursor {
        data,
        at: offset as usize,
    };
    let mut values = Vec::new();
    let mut count = 0i64;
    while c.left() > 0 && count < limit {
        if count >= MAX_UNPACK_VALUES {
            return Err(mlua::Error::runtime(format!(
                "too many values to unpack (at most {MAX_UNPACK_VALUES})"
            )));
        }
        match decode(lua, &mut c, 0) {
            Ok(value) => values.push(value),
            Err(DecodeError::Eof) => return Err(mlua::Error::runtime("Missing bytes in input.")),
            Err(DecodeError::BadFormat) => {
                return Err(mlua::Error::runtime("Bad data format in input."))
            }
            Err(DecodeError::Lua(e)) => return Err(e),
        }
        count += 1;
    }
    if !decode_all {
        let next = if c.left() == 0 { -1 } else { c.at as i64 };
        values.insert(0, Value::Integer(next));
    }
    Ok(MultiValue::from_iter(values))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn packed(value: Value) -> String {
        let mut out = Vec::new();
        pack_value(&value, 0, &mut out).unwrap();
        hex(&out)
    }

    #[test]
    fn encodings_match_redis() {
        // redis-server 7.0.15's answers (scripting.tcl and redis-cli).
        assert_eq!(packed(Value::Number(0.1)), "cb3fb999999999999a");
        assert_eq!(
            packed(Value::Number(-1_099_511_627_776.0)),
            "d3ffffff0000000000"
        );
        assert_eq!(packed(Value::Number(1.5)), "ca3fc00000");
        assert_eq!(packed(Value::Number(-1.0)), "ff");
        assert_eq!(packed(Value::Number(-33.0)), "d0df");
        assert_eq!(packed(Value::Number(200.0)), "ccc8");
        assert_eq!(packed(Value::Number(65530.0)), "cdfffa");
        assert_eq!(packed(Value::Number(100000.0)), "ce000186a0");
        assert_eq!(packed(Value::Number(2f64.powi(40))), "cf0000010000000000");
        assert_eq!(packed(Value::Boolean(true)), "c3");
        assert_eq!(packed(Value::Nil), "c0");
    }

    #[test]
    fn round_trips_and_refuses_bad_input() {
        let lua = Lua::new();
        let t = lua.create_table().unwrap();
        t.raw_set(1, "a").unwrap();
        t.raw_set(2, 2).unwrap();
        let mut out = Vec::new();
        pack_value(&Value::Table(t), 0, &mut out).unwrap();
        assert_eq!(hex(&out), "92a16102");
        let values = unpack_full(&lua, &out, 0, 0).unwrap();
        let Some(Value::Table(back)) = values.front() else {
            panic!("{values:?}")
        };
        assert_eq!(back.raw_get::<String>(1).unwrap(), "a");
        assert_eq!(back.raw_get::<f64>(2).unwrap(), 2.0);
        // Truncated, unknown and absurdly long inputs are errors, not panics.
        for bad in [
            &b"\x92\xa1"[..],
            b"\xc1",
            b"\xdd\xff\xff\xff\xff",
            b"\xdb\xff\xff\xff\xff",
        ] {
            assert!(unpack_full(&lua, bad, 0, 0).is_err(), "{bad:?}");
        }
        let deep = vec![0x91u8; 100_000];
        assert!(unpack_full(&lua, &deep, 0, 0).is_err());
        assert!(unpack_full(&lua, b"\x01", 1, 5).is_err());
        assert!(unpack_full(&lua, b"\x01", -1, 0).is_err());
        // unpack_one: the next offset first, -1 at the end.
        let values = unpack_full(&lua, b"\x01\x02", 1, 0).unwrap();
        assert_eq!(values.len(), 2);
        assert!(matches!(values.front(), Some(Value::Integer(1))));
        let values = unpack_full(&lua, b"\x01\x02", 1, 1).unwrap();
        assert!(matches!(values.front(), Some(Value::Integer(-1))));
    }
}

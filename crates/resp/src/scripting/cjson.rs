//! The `cjson` table scripts see (Redis ships lua-cjson): `cjson.encode`,
//! `cjson.decode`, `cjson.null` and lua-cjson's settings
//! (`encode_max_depth`, `decode_max_depth`, `encode_invalid_numbers`,
//! `decode_invalid_numbers`, `encode_keep_buffer`,
//! `encode_number_precision`, `encode_sparse_array`), each state its own.
//! The encoder writes what lua-cjson writes (`/` escaped, numbers as
//! `%.14g`, an empty table as `{}`, excessively sparse arrays refused);
//! decoding goes through `serde_json`. Deep or cyclic tables are refused
//! with lua-cjson's error text instead of recursing without bound (past
//! 128 levels, whatever `encode_max_depth` allows; decoding stops at 128
//! levels too, `serde_json`'s limit).

use std::cell::Cell;
use std::rc::Rc;

use mlua::{Lua, MultiValue, Table, Value};

/// lua-cjson's defaults.
const DEFAULT_MAX_DEPTH: i64 = 1000;
/// The deepest table the encoder walks whatever `encode_max_depth` says
/// (it recurses: this keeps it well inside a thread's stack).
const MAX_RECURSION: i64 = 128;
const DEFAULT_PRECISION: i64 = 14;
const DEFAULT_SPARSE_RATIO: i64 = 2;
const DEFAULT_SPARSE_SAFE: i64 = 10;

/// One state's lua-cjson settings.
struct Settings {
    encode_max_depth: Cell<i64>,
    decode_max_depth: Cell<i64>,
    encode_invalid_numbers: Cell<bool>,
    decode_invalid_numbers: Cell<bool>,
    precision: Cell<i64>,
    sparse_convert: Cell<bool>,
    sparse_ratio: Cell<i64>,
    sparse_safe: Cell<i64>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            encode_max_depth: Cell::new(DEFAULT_MAX_DEPTH),
            decode_max_depth: Cell::new(DEFAULT_MAX_DEPTH),
            encode_invalid_numbers: Cell::new(false),
            decode_invalid_numbers: Cell::new(true),
            precision: Cell::new(DEFAULT_PRECISION),
            sparse_convert: Cell::new(false),
            sparse_ratio: Cell::new(DEFAULT_SPARSE_RATIO),
            sparse_safe: Cell::new(DEFAULT_SPARSE_SAFE),
        }
    }
}

fn boolean_option(value: &Value) -> mlua::Result<Option<bool>> {
    match value {
        Value::Nil => Ok(None),
        Value::Boolean(b) => Ok(Some(*b)),
        Value::String(s) => match s.to_str()?.as_ref() {
            "on" => Ok(Some(true)),
            "off" => Ok(Some(false)),
            _ => Err(mlua::Error::runtime(
                "bad argument #1 (invalid option 'on' or 'off' expected)",
            )),
        },
        _ => Err(mlua::Error::runtime("bad argument #1 (boolean expected)")),
    }
}

fn integer_option(value: &Value, min: i64, max: i64) -> mlua::Result<Option<i64>> {
    let n = match value {
        Value::Nil => return Ok(None),
        Value::Integer(n) => *n,
        Value::Number(n) => *n as i64,
        _ => return Err(mlua::Error::runtime("bad argument #1 (number expected)")),
    };
    if n < min || n > max {
        return Err(mlua::Error::runtime(format!(
            "bad argument #1 (expected integer between {min} and {max})"
        )));
    }
    Ok(Some(n))
}

/// Builds the `cjson` table.
pub(crate) fn table(lua: &Lua) -> mlua::Result<Table> {
    let settings = Rc::new(Settings::default());
    let cjson = lua.create_table()?;
    let s = Rc::clone(&settings);
    cjson.set(
        "encode",
        lua.create_function(move |lua, value: Value| {
            let mut out = Vec::new();
            encode(&s, &value, 0, &mut out)?;
            lua.create_string(&out)
        })?,
    )?;
    let s = Rc::clone(&settings);
    cjson.set(
        "decode",
        lua.create_function(move |lua, text: mlua::String| {
            let json: serde_json::Value =
                serde_json::from_slice(&text.as_bytes()).map_err(|e| {
                    mlua::Error::runtime(format!("Expected value but found invalid token: {e}"))
                })?;
            let limit = s.decode_max_depth.get();
            if depth_of(&json) > limit {
                return Err(mlua::Error::runtime(format!(
                    "Found too many nested data structures ({}) at character 1",
                    limit + 1
                )));
            }
            from_json(lua, &json)
        })?,
    )?;
    let s = Rc::clone(&settings);
    cjson.set(
        "encode_max_depth",
        lua.create_function(move |_, value: Value| {
            if let Some(n) = integer_option(&value, 1, i64::from(i32::MAX))? {
                s.encode_max_depth.set(n);
            }
            Ok(s.encode_max_depth.get())
        })?,
    )?;
    let s = Rc::clone(&settings);
    cjson.set(
        "decode_max_depth",
        lua.create_function(move |_, value: Value| {
            if let Some(n) = integer_option(&value, 1, i64::from(i32::MAX))? {
                s.decode_max_depth.set(n);
            }
            Ok(s.decode_max_depth.get())
        })?,
    )?;
    let s = Rc::clone(&settings);
    cjson.set(
        "encode_number_precision",
        lua.create_function(move |_, value: Value| {
            if let Some(n) = integer_option(&value, 1, 14)? {
                s.precision.set(n);
            }
            Ok(s.precision.get())
        })?,
    )?;
    let s = Rc::clone(&settings);
    cjson.set(
        "encode_invalid_numbers",
        lua.create_function(move |_, value: Value| {
            if let Some(b) = boolean_option(&value)? {
                s.encode_invalid_numbers.set(b);
            }
            Ok(s.encode_invalid_numbers.get())
        })?,
    )?;
    let s = Rc::clone(&settings);
    cjson.set(
        "decode_invalid_numbers",
        lua.create_function(move |_, value: Value| {
            if let Some(b) = boolean_option(&value)? {
                s.decode_invalid_numbers.set(b);
            }
            Ok(s.decode_invalid_numbers.get())
        })?,
    )?;
    // The encoder keeps no buffer between calls: accepted and answered.
    cjson.set(
        "encode_keep_buffer",
        lua.create_function(move |_, value: Value| Ok(boolean_option(&value)?.unwrap_or(true)))?,
    )?;
    let s = Rc::clone(&settings);
    cjson.set(
        "encode_sparse_array",
        lua.create_function(move |_, values: MultiValue| {
            let mut values = values.into_iter();
            if let Some(b) = boolean_option(&values.next().unwrap_or(Value::Nil))? {
                s.sparse_convert.set(b);
            }
            if let Some(n) =
                integer_option(&values.next().unwrap_or(Value::Nil), 0, i64::from(i32::MAX))?
            {
                s.sparse_ratio.set(n);
            }
            if let Some(n) =
                integer_option(&values.next().unwrap_or(Value::Nil), 0, i64::from(i32::MAX))?
            {
                s.sparse_safe.set(n);
            }
            Ok((
                s.sparse_convert.get(),
                s.sparse_ratio.get(),
                s.sparse_safe.get(),
            ))
        })?,
    )?;
    // lua-cjson's `null` is a light userdata holding NULL, as `Value::NULL`.
    cjson.set("null", Value::NULL)?;
    cjson.set("_NAME", "cjson")?;
    cjson.set("_VERSION", "2.1.0")?;
    Ok(cjson)
}

/// How deep a decoded document nests (a scalar: 0).
fn depth_of(json: &serde_json::Value) -> i64 {
    match json {
        serde_json::Value::Array(items) => 1 + items.iter().map(depth_of).max().unwrap_or(0),
        serde_json::Value::Object(fields) => 1 + fields.values().map(depth_of).max().unwrap_or(0),
        _ => 0,
    }
}

fn cannot(what: &str, why: &str) -> mlua::Error {
    mlua::Error::runtime(format!("Cannot serialise {what}: {why}"))
}

/// Appends `value`'s JSON; `depth` counts the tables around it.
fn encode(s: &Settings, value: &Value, depth: i64, out: &mut Vec<u8>) -> mlua::Result<()> {
    match value {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(ud) if ud.0.is_null() => out.extend_from_slice(b"null"),
        Value::Boolean(true) => out.extend_from_slice(b"true"),
        Value::Boolean(false) => out.extend_from_slice(b"false"),
        Value::Integer(n) => encode_number(s, *n as f64, out)?,
        Value::Number(f) => encode_number(s, *f, out)?,
        Value::String(text) => encode_string(&text.as_bytes(), out),
        Value::Table(table) => {
            let depth = depth + 1;
            if depth > s.encode_max_depth.get().min(MAX_RECURSION) {
                return Err(mlua::Error::runtime(format!(
                    "Cannot serialise, excessive nesting ({depth})"
                )));
            }
            encode_table(s, table, depth, out)?;
        }
        other => return Err(cannot(other.type_name(), "type not supported")),
    }
    Ok(())
}

fn encode_number(s: &Settings, f: f64, out: &mut Vec<u8>) -> mlua::Result<()> {
    if !f.is_finite() {
        if !s.encode_invalid_numbers.get() {
            return Err(cannot("number", "must not be NaN or Inf"));
        }
        out.extend_from_slice(if f.is_nan() {
            b"nan"
        } else if f > 0.0 {
            b"inf"
        } else {
            b"-inf"
        });
        return Ok(());
    }
    out.extend_from_slice(crate::protocol::format_g(f, s.precision.get() as usize).as_bytes());
    Ok(())
}

fn encode_string(bytes: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &b in bytes {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            0..=0x1f | 0x7f => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
            _ => out.push(b),
        }
    }
    out.push(b'"');
}

/// lua-cjson's `lua_array_length`: an array when every key is a positive
/// integral number (then its length is the largest), unless too sparse;
/// -1 for an object. One entry at a time is held (a Rust handle on a Lua
/// value takes a slot of a bounded stack).
fn array_length(s: &Settings, table: &Table) -> mlua::Result<(i64, usize)> {
    let mut max = 0i64;
    let mut items = 0usize;
    let mut is_array = true;
    for pair in table.clone().pairs::<Value, Value>() {
        let (key, _) = pair?;
        items += 1;
        let index = match key {
            Value::Integer(n) => n as f64,
            Value::Number(f) => f,
            _ => {
                is_array = false;
                continue;
            }
        };
        if index < 1.0 || index.fract() != 0.0 || index > i64::MAX as f64 {
            is_array = false;
            continue;
        }
        max = max.max(index as i64);
    }
    if !is_array {
        return Ok((-1, items));
    }
    let ratio = s.sparse_ratio.get();
    if ratio > 0 && max > (items as i64).saturating_mul(ratio) && max > s.sparse_safe.get() {
        if !s.sparse_convert.get() {
            return Err(cannot("table", "excessively sparse array"));
        }
        return Ok((-1, items));
    }
    Ok((max, items))
}

fn encode_table(s: &Settings, table: &Table, depth: i64, out: &mut Vec<u8>) -> mlua::Result<()> {
    let (length, _) = array_length(s, table)?;
    if length > 0 {
        out.push(b'[');
        for i in 1..=length {
            if i > 1 {
                out.push(b',');
            }
            let value: Value = table.raw_get(i)?;
            encode(s, &value, depth, out)?;
        }
        out.push(b']');
        return Ok(());
    }
    out.push(b'{');
    for (i, pair) in table.clone().pairs::<Value, Value>().enumerate() {
        let (key, value) = pair?;
        if i > 0 {
            out.push(b',');
        }
        match &key {
            Value::String(text) => encode_string(&text.as_bytes(), out),
            Value::Integer(n) => {
                out.push(b'"');
                encode_number(s, *n as f64, out)?;
                out.push(b'"');
            }
            Value::Number(f) => {
                out.push(b'"');
                encode_number(s, *f, out)?;
                out.push(b'"');
            }
            other => {
                return Err(cannot(
                    other.type_name(),
                    "table key must be a number or string",
                ))
            }
        }
        out.push(b':');
        encode(s, &value, depth, out)?;
    }
    out.push(b'}');
    Ok(())
}

fn from_json(lua: &Lua, json: &serde_json::Value) -> mlua::Result<Value> {
    use serde_json::Value as Json;
    Ok(match json {
        Json::Null => Value::NULL,
        Json::Bool(b) => Value::Boolean(*b),
        Json::Number(n) => Value::Number(n.as_f64().unwrap_or(0.0)),
        Json::String(s) => Value::String(lua.create_string(s)?),
        Json::Array(items) => {
            let table = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                table.raw_set(i + 1, from_json(lua, item)?)?;
            }
            Value::Table(table)
        }
        Json::Object(fields) => {
            let table = lua.create_table_with_capacity(0, fields.len())?;
            for (name, item) in fields {
                table.raw_set(name.as_str(), from_json(lua, item)?)?;
            }
            Value::Table(table)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(lua: &Lua, code: &str) -> mlua::Result<String> {
        let cjson = table(lua)?;
        lua.globals().set("cjson", cjson)?;
        lua.load(code).eval::<String>()
    }

    #[test]
    fn encodes_as_redis_does() {
        let lua = Lua::new();
        // redis-server 7.0.15's answers.
        assert_eq!(
            encoded(&lua, r#"return cjson.encode({['a/b']='\1'})"#).unwrap(),
            r#"{"a\/b":"\u0001"}"#
        );
        assert_eq!(
            encoded(&lua, "return cjson.encode({1,nil,3})").unwrap(),
            "[1,null,3]"
        );
        assert_eq!(
            encoded(
                &lua,
                "return cjson.encode(0.1)..cjson.encode(1e300)..cjson.encode(2^53)"
            )
            .unwrap(),
            "0.11e+3009.007199254741e+15"
        );
        let sparse = encoded(&lua, "local t={} t[20]=1 return cjson.encode(t)").unwrap_err();
        assert!(sparse.to_string().contains("excessively sparse array"));
        let key = encoded(&lua, "return cjson.encode({[false]=1})").unwrap_err();
        assert!(key
            .to_string()
            .contains("Cannot serialise boolean: table key must be a number or string"));
        assert_eq!(encoded(&lua, "return cjson.encode({})").unwrap(), "{}");
        // Settings: depth, invalid numbers.
        assert!(encoded(&lua, "cjson.encode_max_depth(1) return cjson.encode({{}})").is_err());
        assert_eq!(
            encoded(
                &lua,
                "cjson.encode_invalid_numbers(true) return cjson.encode({0/0})"
            )
            .unwrap()
            .len(),
            5
        );
        assert!(encoded(
            &lua,
            r#"cjson.decode_max_depth(1) return cjson.decode('{"a":{"b":1}}')"#
        )
        .is_err());
        // A cyclic table stops at the depth limit.
        assert!(encoded(
            &lua,
            "cjson.encode_max_depth(1000) local a = {} a[1] = a return cjson.encode(a)"
        )
        .unwrap_err()
        .to_string()
        .contains("excessive nesting"));
    }
}

//! The `cjson` table scripts see (Redis ships lua-cjson): `cjson.encode`,
//! `cjson.decode` and `cjson.null`, written over `serde_json` because no
//! crate offers lua-cjson for mlua. Deep or cyclic tables are refused with
//! lua-cjson's error text instead of recursing without bound.

use mlua::{Lua, Table, Value};

/// The deepest table `cjson.encode` serialises (lua-cjson's default).
const MAX_ENCODE_DEPTH: usize = 1000;

/// Builds the `cjson` table.
pub(crate) fn table(lua: &Lua) -> mlua::Result<Table> {
    let cjson = lua.create_table()?;
    cjson.set(
        "encode",
        lua.create_function(|lua, value: Value| {
            let json = to_json(&value, 0)?;
            lua.create_string(json.to_string())
        })?,
    )?;
    cjson.set(
        "decode",
        lua.create_function(|lua, text: mlua::String| {
            // serde_json refuses nesting past 128 levels: no unbounded recursion.
            let json: serde_json::Value =
                serde_json::from_slice(&text.as_bytes()).map_err(|e| {
                    mlua::Error::runtime(format!("Expected value but found invalid token: {e}"))
                })?;
            from_json(lua, &json)
        })?,
    )?;
    // lua-cjson's `null` is a light userdata holding NULL, as `Value::NULL`.
    cjson.set("null", Value::NULL)?;
    Ok(cjson)
}

fn to_json(value: &Value, depth: usize) -> mlua::Result<serde_json::Value> {
    use serde_json::Value as Json;
    Ok(match value {
        Value::Nil => Json::Null,
        Value::LightUserData(ud) if ud.0.is_null() => Json::Null,
        Value::Boolean(b) => Json::Bool(*b),
        Value::Integer(n) => Json::from(*n),
        Value::Number(f) => number(*f)?,
        Value::String(s) => Json::String(String::from_utf8_lossy(&s.as_bytes()).into_owned()),
        Value::Table(table) => {
            if depth >= MAX_ENCODE_DEPTH {
                return Err(mlua::Error::runtime(format!(
                    "Cannot serialise, excessive nesting ({})",
                    depth + 1
                )));
            }
            table_to_json(table, depth + 1)?
        }
        other => {
            return Err(mlua::Error::runtime(format!(
                "Cannot serialise {}: type not supported",
                other.type_name()
            )))
        }
    })
}

fn number(f: f64) -> mlua::Result<serde_json::Value> {
    if !f.is_finite() {
        return Err(mlua::Error::runtime(
            "Cannot serialise number: must not be NaN or Inf",
        ));
    }
    // Integral values print without a fraction, as lua-cjson's %.14g does.
    if f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15 {
        return Ok(serde_json::Value::from(f as i64));
    }
    Ok(serde_json::Number::from_f64(f).map_or(serde_json::Value::Null, serde_json::Value::Number))
}

/// An array when the keys are exactly 1..n (n > 0), else an object; an
/// empty table encodes as `{}`, as lua-cjson's does.
fn table_to_json(table: &Table, depth: usize) -> mlua::Result<serde_json::Value> {
    let mut entries = Vec::new();
    let mut max_index = 0usize;
    let mut all_indices = true;
    for pair in table.pairs::<Value, Value>() {
        let (key, value) = pair?;
        match &key {
            Value::Integer(n) if *n >= 1 => max_index = max_index.max(*n as usize),
            Value::Number(f) if *f >= 1.0 && f.fract() == 0.0 && *f < 1e15 => {
                max_index = max_index.max(*f as usize)
            }
            _ => all_indices = false,
        }
        entries.push((key, value));
    }
    if all_indices && !entries.is_empty() && max_index == entries.len() {
        let mut items = vec![serde_json::Value::Null; max_index];
        for (key, value) in &entries {
            let index = match key {
                Value::Integer(n) => *n as usize,
                Value::Number(f) => *f as usize,
                _ => unreachable!("checked above: every key is an index"),
            };
            items[index - 1] = to_json(value, depth)?;
        }
        return Ok(serde_json::Value::Array(items));
    }
    let mut object = serde_json::Map::new();
    for (key, value) in &entries {
        let name = match key {
            Value::String(s) => String::from_utf8_lossy(&s.as_bytes()).into_owned(),
            Value::Integer(n) => n.to_string(),
            Value::Number(f) => f.to_string(),
            _ => {
                return Err(mlua::Error::runtime(
                    "Cannot serialise table: table key must be a number or string",
                ))
            }
        };
        object.insert(name, to_json(value, depth)?);
    }
    Ok(serde_json::Value::Object(object))
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

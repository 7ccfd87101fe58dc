//! The `bit` table scripts see (Redis ships LuaBitOp): 32-bit operations
//! on Lua numbers. As LuaBitOp does, a number becomes 32 bits by rounding
//! it to the nearest integer and keeping its low 32 bits, and a result is
//! the signed 32-bit value (`bit.tobit(0xffffffff) == -1`).

use mlua::{Lua, MultiValue, Table, Value};

/// A number's 32 bits, as LuaBitOp's `barg` computes them: adding 2^52 +
/// 2^51 makes the double's low mantissa bits the number rounded to the
/// nearest integer (modulo 2^32 once the high bits are dropped).
pub(crate) fn to_bits(n: f64) -> u32 {
    (n + 6_755_399_441_055_744.0).to_bits() as u32
}

fn number(value: &Value, position: usize, name: &str) -> mlua::Result<f64> {
    match value {
        Value::Integer(n) => Ok(*n as f64),
        Value::Number(n) => Ok(*n),
        Value::String(s) => {
            let text = s.to_str().map(|s| s.trim().to_owned()).unwrap_or_default();
            parse_lua_number(&text).ok_or_else(|| bad_argument(position, name, value))
        }
        _ => Err(bad_argument(position, name, value)),
    }
}

/// A string as Lua 5.1 converts it to a number (decimal or `0x` hex).
fn parse_lua_number(text: &str) -> Option<f64> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        let value = u64::from_str_radix(hex, 16).ok()? as f64;
        return Some(if negative { -value } else { value });
    }
    text.parse::<f64>().ok()
}

fn bad_argument(position: usize, name: &str, value: &Value) -> mlua::Error {
    let got = match value {
        Value::Nil => "no value".to_owned(),
        other => other.type_name().to_owned(),
    };
    mlua::Error::runtime(format!(
        "bad argument #{position} to '{name}' (number expected, got {got})"
    ))
}

fn args(values: &MultiValue, name: &str, at_least: usize) -> mlua::Result<Vec<u32>> {
    let mut out = Vec::with_capacity(values.len().max(at_least));
    for (i, value) in values.iter().enumerate() {
        out.push(to_bits(number(value, i + 1, name)?));
    }
    if out.len() < at_least {
        return Err(bad_argument(out.len() + 1, name, &Value::Nil));
    }
    Ok(out)
}

fn result(bits: u32) -> f64 {
    f64::from(bits as i32)
}

/// `bit.tohex(x [, n])`: the low `n` hex digits of `x` (8 by default;
/// a negative `n` gives upper-case digits).
pub(crate) fn tohex(bits: u32, n: i64) -> String {
    let (digits, n): (&[u8; 16], i64) = if n < 0 {
        (b"0123456789ABCDEF", n.saturating_neg())
    } else {
        (b"0123456789abcdef", n)
    };
    let n = n.min(8) as usize;
    let mut b = bits;
    let mut out = vec![b'0'; n];
    for slot in out.iter_mut().rev() {
        *slot = digits[(b & 15) as usize];
        b >>= 4;
    }
    String::from_utf8(out).unwrap_or_default()
}

/// Builds the `bit` table.
pub(crate) fn table(lua: &Lua) -> mlua::Result<Table> {
    let bit = lua.create_table()?;
    let unary = |name: &'static str, f: fn(u32) -> u32| {
        lua.create_function(move |_, values: MultiValue| {
            let a = args(&values, name, 1)?;
            Ok(result(f(a[0])))
        })
    };
    bit.set("tobit", unary("tobit", |b| b)?)?;
    bit.set("bnot", unary("bnot", |b| !b)?)?;
    bit.set("bswap", unary("bswap", u32::swap_bytes)?)?;
    let fold = |name: &'static str, f: fn(u32, u32) -> u32| {
        lua.create_function(move |_, values: MultiValue| {
            let a = args(&values, name, 1)?;
            Ok(result(a[1..].iter().fold(a[0], |acc, &b| f(acc, b))))
        })
    };
    bit.set("band", fold("band", |a, b| a & b)?)?;
    bit.set("bor", fold("bor", |a, b| a | b)?)?;
    bit.set("bxor", fold("bxor", |a, b| a ^ b)?)?;
    let shift = |name: &'static str, f: fn(u32, u32) -> u32| {
        lua.create_function(move |_, values: MultiValue| {
            let a = args(&values, name, 2)?;
            Ok(result(f(a[0], a[1] & 31)))
        })
    };
    bit.set("lshift", shift("lshift", |b, n| b << n)?)?;
    bit.set("rshift", shift("rshift", |b, n| b >> n)?)?;
    bit.set(
        "arshift",
        shift("arshift", |b, n| ((b as i32) >> n) as u32)?,
    )?;
    bit.set("rol", shift("rol", u32::rotate_left)?)?;
    bit.set("ror", shift("ror", u32::rotate_right)?)?;
    bit.set(
        "tohex",
        lua.create_function(|lua, values: MultiValue| {
            let first = values.front().cloned().unwrap_or(Value::Nil);
            let bits = to_bits(number(&first, 1, "tohex")?);
            let n = match values.get(1) {
                None | Some(Value::Nil) => 8,
                Some(value) => to_bits(number(value, 2, "tohex")?) as i32 as i64,
            };
            lua.create_string(tohex(bits, n))
        })?,
    )?;
    Ok(bit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_become_32_bits_as_luabitop_makes_them() {
        assert_eq!(to_bits(1.0), 1);
        assert_eq!(to_bits(-1.0) as i32, -1);
        assert_eq!(to_bits(4_294_967_295.0) as i32, -1);
        assert_eq!(to_bits(4_294_967_301.0), 5);
        assert_eq!(to_bits(2.5), 2, "rounds half to even");
        assert_eq!(to_bits(3.5), 4);
    }

    #[test]
    fn tohex_as_redis_answers() {
        // redis-server 7.0.15: bit.tohex(-1, -4) == "FFFF", bit.tohex(65535) == "0000ffff"
        assert_eq!(tohex(to_bits(-1.0), -4), "FFFF");
        assert_eq!(tohex(65535, 8), "0000ffff");
        assert_eq!(tohex(0x1234_5678, 20), "12345678");
        assert_eq!(tohex(0x1234_5678, 0), "");
    }
}

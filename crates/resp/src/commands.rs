//! The command table (names, arity, flags, key positions: what COMMAND
//! reports) and the parsing of data commands' arguments into [`Op`]s.

use roost_bcounter::Bound;

use crate::functions::Functions;
use crate::protocol::Frame;
use crate::store::{parse_i64, Op, SetCond, MAX_KEY_BYTES, MAX_VALUE_BYTES, NOT_INTEGER};

/// How a command is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Runs against the keyspace inside a transaction.
    Data,
    /// Changes or reads the connection or server (handled by the connection).
    Conn,
    /// Known but not served: answered with this error.
    Unsupported(&'static str),
}

pub(crate) struct Spec {
    pub(crate) name: &'static str,
    /// Redis's convention: `n` exactly n arguments (name included), `-n` at least n.
    pub(crate) arity: i32,
    pub(crate) kind: Kind,
    pub(crate) write: bool,
    /// Allowed before authentication.
    pub(crate) noauth: bool,
    pub(crate) first_key: i32,
    pub(crate) last_key: i32,
    pub(crate) step: i32,
    pub(crate) summary: &'static str,
}

const PUBSUB: &str = "ERR pub/sub is not supported by Roost";
const EXPIRY: &str = "ERR expiry is not supported by Roost: keys never expire";

const fn data(
    name: &'static str,
    arity: i32,
    write: bool,
    keys: (i32, i32, i32),
    summary: &'static str,
) -> Spec {
    Spec {
        name,
        arity,
        kind: Kind::Data,
        write,
        noauth: false,
        first_key: keys.0,
        last_key: keys.1,
        step: keys.2,
        summary,
    }
}

const fn conn(name: &'static str, arity: i32, noauth: bool, summary: &'static str) -> Spec {
    Spec {
        name,
        arity,
        kind: Kind::Conn,
        write: false,
        noauth,
        first_key: 0,
        last_key: 0,
        step: 0,
        summary,
    }
}

const fn unsupported(name: &'static str, why: &'static str) -> Spec {
    Spec {
        name,
        arity: -1,
        kind: Kind::Unsupported(why),
        write: false,
        noauth: false,
        first_key: 0,
        last_key: 0,
        step: 0,
        summary: "not supported by Roost",
    }
}

pub(crate) static COMMANDS: &[Spec] = &[
    data(
        "get",
        2,
        false,
        (1, 1, 1),
        "Returns the string value of a key.",
    ),
    data(
        "set",
        -3,
        true,
        (1, 1, 1),
        "Sets the string value of a key (NX, XX, GET).",
    ),
    data("del", -2, true, (1, -1, 1), "Deletes keys."),
    data(
        "exists",
        -2,
        false,
        (1, -1, 1),
        "Counts the keys that exist.",
    ),
    data(
        "incr",
        2,
        true,
        (1, 1, 1),
        "Increments an integer value by one.",
    ),
    data(
        "decr",
        2,
        true,
        (1, 1, 1),
        "Decrements an integer value by one.",
    ),
    data("incrby", 3, true, (1, 1, 1), "Increments an integer value."),
    data("decrby", 3, true, (1, 1, 1), "Decrements an integer value."),
    data(
        "mget",
        -2,
        false,
        (1, -1, 1),
        "Returns the string values of keys.",
    ),
    data(
        "mset",
        -3,
        true,
        (1, -1, 2),
        "Sets the string values of keys, atomically.",
    ),
    data("rpush", -3, true, (1, 1, 1), "Appends elements to a list."),
    data("lpush", -3, true, (1, 1, 1), "Prepends elements to a list."),
    data("lrange", 4, false, (1, 1, 1), "Returns a range of a list."),
    data("llen", 2, false, (1, 1, 1), "Returns the length of a list."),
    data("hget", 3, false, (1, 1, 1), "Returns a field of a hash."),
    data("hset", -4, true, (1, 1, 1), "Sets fields of a hash."),
    data(
        "hgetall",
        2,
        false,
        (1, 1, 1),
        "Returns all fields and values of a hash.",
    ),
    data("hdel", -3, true, (1, 1, 1), "Deletes fields of a hash."),
    data(
        "bc.create",
        -4,
        true,
        (1, 1, 1),
        "BC.CREATE key LOWER|UPPER bound [initial]: creates a bounded counter.",
    ),
    data(
        "bc.inc",
        -3,
        true,
        (1, 1, 1),
        "BC.INC key delta [LOCAL|GLOBAL]: increments a bounded counter.",
    ),
    data(
        "bc.dec",
        -3,
        true,
        (1, 1, 1),
        "BC.DEC key delta [LOCAL|GLOBAL]: decrements a bounded counter.",
    ),
    data(
        "bc.get",
        2,
        false,
        (1, 1, 1),
        "Returns a bounded counter's value.",
    ),
    data(
        "bc.fence",
        2,
        true,
        (0, 0, 0),
        "BC.FENCE site: at a site, refuses a site declared permanently failed and reports what it knows of its rights (section IV-E).",
    ),
    data(
        "bc.adopt",
        -4,
        true,
        (2, 2, 1),
        "BC.ADOPT site key report...: at the heir, takes over a failed site's rights from every survivor's report.",
    ),
    // Keys are named after `numkeys` (Redis: first key 0, `movablekeys`).
    data(
        "fcall",
        -3,
        true,
        (0, 0, 0),
        "FCALL function numkeys key... arg...: calls a registered function.",
    ),
    data(
        "fcall_ro",
        -3,
        false,
        (0, 0, 0),
        "FCALL_RO function numkeys key... arg...: calls a no-writes function.",
    ),
    conn(
        "function",
        -2,
        false,
        "FUNCTION LIST|HELP: the registered functions.",
    ),
    conn("ping", -1, false, "Returns PONG or the argument."),
    conn("echo", 2, false, "Returns the argument."),
    conn("select", 2, false, "Selects a database (only 0 exists)."),
    conn("client", -2, false, "CLIENT SETNAME/GETNAME/ID/SETINFO."),
    conn("info", -1, false, "Server information and statistics."),
    conn("command", -1, false, "Information about commands."),
    conn("config", -2, false, "CONFIG GET answers an empty list."),
    conn(
        "hello",
        -1,
        true,
        "Negotiates the protocol (2 or 3) and authenticates.",
    ),
    conn("auth", -2, true, "Authenticates the connection."),
    conn("quit", -1, true, "Closes the connection."),
    conn("reset", 1, true, "Resets the connection's state."),
    conn("multi", 1, false, "Starts a transaction."),
    conn(
        "exec",
        1,
        false,
        "Runs the queued commands as one serializable transaction.",
    ),
    conn("discard", 1, false, "Discards the queued commands."),
    conn(
        "watch",
        -2,
        false,
        "Aborts the next EXEC if these keys change.",
    ),
    conn("unwatch", 1, false, "Forgets the watched keys."),
    unsupported("subscribe", PUBSUB),
    unsupported("unsubscribe", PUBSUB),
    unsupported("psubscribe", PUBSUB),
    unsupported("punsubscribe", PUBSUB),
    unsupported("ssubscribe", PUBSUB),
    unsupported("sunsubscribe", PUBSUB),
    unsupported("publish", PUBSUB),
    unsupported("spublish", PUBSUB),
    unsupported("pubsub", PUBSUB),
    unsupported("expire", EXPIRY),
    unsupported("pexpire", EXPIRY),
    unsupported("expireat", EXPIRY),
    unsupported("pexpireat", EXPIRY),
    unsupported("expiretime", EXPIRY),
    unsupported("pexpiretime", EXPIRY),
    unsupported("ttl", EXPIRY),
    unsupported("pttl", EXPIRY),
    unsupported("persist", EXPIRY),
    unsupported("setex", EXPIRY),
    unsupported("psetex", EXPIRY),
    unsupported("getex", EXPIRY),
];

pub(crate) fn lookup(name: &[u8]) -> Option<&'static Spec> {
    lookup_index(name).map(|i| &COMMANDS[i])
}

/// The command's index in [`COMMANDS`].
pub(crate) fn lookup_index(name: &[u8]) -> Option<usize> {
    COMMANDS
        .iter()
        .position(|spec| spec.name.as_bytes().eq_ignore_ascii_case(name))
}

pub(crate) fn arity_ok(spec: &Spec, argc: usize) -> bool {
    let argc = argc as i64;
    let arity = i64::from(spec.arity);
    if arity >= 0 {
        argc == arity
    } else {
        argc >= -arity
    }
}

/// `ERR unknown command 'foo', with args beginning with: 'a' 'b' `, as Redis
/// words it (name and each argument cut to 128 bytes).
pub(crate) fn unknown_command(args: &[Vec<u8>]) -> Frame {
    let shown = |bytes: &[u8]| {
        let cut = &bytes[..bytes.len().min(128)];
        String::from_utf8_lossy(cut).replace(['\r', '\n'], " ")
    };
    let mut text = format!(
        "ERR unknown command '{}', with args beginning with: ",
        shown(&args[0])
    );
    for arg in args.iter().skip(1) {
        text.push_str(&format!("'{}' ", shown(arg)));
    }
    Frame::Error(text)
}

pub(crate) fn wrong_arity(name: &str) -> Frame {
    Frame::error(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

fn syntax_error() -> Frame {
    Frame::error("ERR syntax error")
}

fn check_key(key: &[u8]) -> Result<(), Frame> {
    if key.len() > MAX_KEY_BYTES {
        return Err(Frame::error(format!(
            "ERR key is longer than {MAX_KEY_BYTES} bytes"
        )));
    }
    Ok(())
}

pub(crate) fn check_keys(keys: &[Vec<u8>]) -> Result<(), Frame> {
    keys.iter().try_for_each(|k| check_key(k))
}

fn check_value(value: &[u8]) -> Result<(), Frame> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(Frame::error(format!(
            "ERR value exceeds the maximum allowed size ({MAX_VALUE_BYTES} bytes)"
        )));
    }
    Ok(())
}

fn integer(arg: &[u8]) -> Result<i64, Frame> {
    parse_i64(arg).ok_or_else(|| Frame::error(NOT_INTEGER))
}

/// The data command `spec` with `args` (arity already checked) as an [`Op`];
/// a bad argument becomes [`Op::Reply`] with Redis's error text, answered
/// when the command runs (inside MULTI: at EXEC, in its place).
/// The arguments are moved into the `Op`, not copied.
pub(crate) fn parse_op(spec: &Spec, mut args: Vec<Vec<u8>>, functions: &Functions) -> Op {
    if let "fcall" | "fcall_ro" = spec.name {
        return match functions.parse_call(spec.name == "fcall_ro", &mut args) {
            Ok(call) => Op::FCall(std::sync::Arc::new(call)),
            Err(error) => Op::Reply(error),
        };
    }
    parse_op_checked(spec, &mut args).unwrap_or_else(Op::Reply)
}

/// Moves argument `i` out (it is left empty).
fn take(a: &mut [Vec<u8>], i: usize) -> Vec<u8> {
    std::mem::take(&mut a[i])
}

fn take_all(a: &mut [Vec<u8>]) -> Vec<Vec<u8>> {
    a.iter_mut().map(std::mem::take).collect()
}

fn parse_op_checked(spec: &Spec, args: &mut [Vec<u8>]) -> Result<Op, Frame> {
    let a = &mut args[1..];
    if spec.first_key > 0 {
        let last = if spec.last_key < 0 {
            a.len()
        } else {
            spec.last_key as usize
        };
        let mut i = spec.first_key as usize;
        while i <= last && i <= a.len() {
            check_key(&a[i - 1])?;
            i += spec.step.max(1) as usize;
        }
    }
    Ok(match spec.name {
        "get" => Op::Get(take(a, 0)),
        "set" => parse_set(a)?,
        "del" => Op::Del(take_all(a)),
        "exists" => Op::Exists(take_all(a)),
        "incr" => Op::IncrBy(take(a, 0), 1),
        "decr" => Op::IncrBy(take(a, 0), -1),
        "incrby" => Op::IncrBy(take(a, 0), integer(&a[1])?),
        "decrby" => {
            let by = integer(&a[1])?;
            // Redis: "ERR decrement would overflow" for i64::MIN.
            let by = by
                .checked_neg()
                .ok_or_else(|| Frame::error("ERR decrement would overflow"))?;
            Op::IncrBy(take(a, 0), by)
        }
        "mget" => Op::MGet(take_all(a)),
        "mset" => {
            if a.len() % 2 != 0 {
                return Err(wrong_arity("mset"));
            }
            let mut pairs = Vec::with_capacity(a.len() / 2);
            for pair in a.chunks_exact(2) {
                check_value(&pair[1])?;
            }
            for pair in a.chunks_exact_mut(2) {
                pairs.push((take(pair, 0), take(pair, 1)));
            }
            Op::MSet(pairs)
        }
        "rpush" | "lpush" => {
            for v in &a[1..] {
                check_value(v)?;
            }
            Op::Push {
                key: take(a, 0),
                left: spec.name == "lpush",
                values: take_all(&mut a[1..]),
            }
        }
        "lrange" => Op::LRange {
            key: take(a, 0),
            start: integer(&a[1])?,
            stop: integer(&a[2])?,
        },
        "llen" => Op::LLen(take(a, 0)),
        "hget" => Op::HGet(take(a, 0), take(a, 1)),
        "hset" => {
            if a.len() % 2 != 1 {
                return Err(wrong_arity("hset"));
            }
            let mut pairs = Vec::with_capacity(a.len() / 2);
            for pair in a[1..].chunks_exact(2) {
                check_value(&pair[1])?;
            }
            for pair in a[1..].chunks_exact_mut(2) {
                pairs.push((take(pair, 0), take(pair, 1)));
            }
            Op::HSet(take(a, 0), pairs)
        }
        "hgetall" => Op::HGetAll(take(a, 0)),
        "hdel" => Op::HDel(take(a, 0), take_all(&mut a[1..])),
        "bc.create" => {
            if a.len() > 4 {
                return Err(syntax_error());
            }
            let bound = if a[1].eq_ignore_ascii_case(b"lower") {
                Bound::Lower
            } else if a[1].eq_ignore_ascii_case(b"upper") {
                Bound::Upper
            } else {
                return Err(Frame::error("ERR the bound must be LOWER or UPPER"));
            };
            let k = integer(&a[2])?;
            let initial = match a.get(3) {
                Some(v) => integer(v)?,
                None => k,
            };
            Op::BcCreate {
                key: take(a, 0),
                bound,
                k,
                initial,
            }
        }
        "bc.inc" | "bc.dec" => {
            let global = match a.get(2) {
                None => true,
                Some(mode) if mode.eq_ignore_ascii_case(b"local") => false,
                Some(mode) if mode.eq_ignore_ascii_case(b"global") => true,
                Some(_) => return Err(syntax_error()),
            };
            if a.len() > 3 {
                return Err(syntax_error());
            }
            let delta = integer(&a[1])?;
            let delta = u64::try_from(delta)
                .map_err(|_| Frame::error("ERR delta must be a non-negative integer"))?;
            Op::BcAdd {
                key: take(a, 0),
                up: spec.name == "bc.inc",
                delta,
                global,
            }
        }
        "bc.get" => Op::BcGet(take(a, 0)),
        "bc.fence" => Op::BcFence(site_index(&a[0])?),
        "bc.adopt" => Op::BcAdopt {
            failed: site_index(&a[0])?,
            key: take(a, 1),
            reports: take_all(&mut a[2..]),
        },
        other => unreachable!("data command `{other}` without a parser"),
    })
}

fn site_index(arg: &[u8]) -> Result<usize, Frame> {
    parse_i64(arg)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| Frame::error("ERR a site is a non-negative integer"))
}

fn parse_set(a: &mut [Vec<u8>]) -> Result<Op, Frame> {
    check_value(&a[1])?;
    let mut cond = SetCond::Always;
    let mut get = false;
    for option in &a[2..] {
        let option = option.to_ascii_lowercase();
        match option.as_slice() {
            b"nx" if cond == SetCond::Always => cond = SetCond::IfAbsent,
            b"xx" if cond == SetCond::Always => cond = SetCond::IfPresent,
            b"get" => get = true,
            // Keys never expire, so keeping a key's time to live is a no-op.
            b"keepttl" => {}
            b"ex" | b"px" | b"exat" | b"pxat" => return Err(Frame::error(EXPIRY)),
            _ => return Err(syntax_error()),
        }
    }
    Ok(Op::Set {
        key: take(a, 0),
        value: take(a, 1),
        cond,
        get,
    })
}

/// COMMAND's entry for one command: name, arity, flags, first key, last key,
/// step, ACL categories, tips, key specs, subcommands.
pub(crate) fn command_info(spec: &Spec) -> Frame {
    let mut flags = Vec::new();
    match spec.kind {
        Kind::Data if spec.name.starts_with("fcall") => {
            flags.push(Frame::Simple("movablekeys".into()))
        }
        Kind::Data if spec.write => flags.push(Frame::Simple("write".into())),
        Kind::Data => flags.push(Frame::Simple("readonly".into())),
        _ => {}
    }
    if spec.noauth {
        flags.push(Frame::Simple("no-auth".into()));
    }
    Frame::Array(vec![
        Frame::bulk(spec.name),
        Frame::Integer(i64::from(spec.arity)),
        Frame::Set(flags),
        Frame::Integer(i64::from(spec.first_key)),
        Frame::Integer(i64::from(spec.last_key)),
        Frame::Integer(i64::from(spec.step)),
        Frame::Set(Vec::new()),
        Frame::Set(Vec::new()),
        Frame::Array(Vec::new()),
        Frame::Array(Vec::new()),
    ])
}

/// COMMAND DOCS's entry: a summary and the group.
pub(crate) fn command_docs(spec: &Spec) -> (Frame, Frame) {
    let group = match spec.kind {
        Kind::Data if spec.name.starts_with("bc.") => "roost",
        Kind::Data if spec.name.starts_with("fcall") => "scripting",
        Kind::Data => "generic",
        Kind::Conn => "connection",
        Kind::Unsupported(_) => "unsupported",
    };
    (
        Frame::bulk(spec.name),
        Frame::Map(vec![
            (Frame::bulk("summary"), Frame::bulk(spec.summary)),
            (Frame::bulk("since"), Frame::bulk("1.0.0")),
            (Frame::bulk("group"), Frame::bulk(group)),
        ]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<Vec<u8>> {
        text.split(' ').map(|s| s.as_bytes().to_vec()).collect()
    }

    fn parse_op_examples(spec: &Spec, args: Vec<Vec<u8>>) -> Op {
        parse_op(spec, args, &Functions::examples())
    }

    /// Every data command, given valid arguments, parses into the operation
    /// it names, with its arguments in place (not an error reply); a data
    /// command missing from this table fails the test.
    #[test]
    fn every_data_command_parses() {
        type Case = (&'static str, fn(&Op) -> bool);
        let cases: Vec<Case> = vec![
            ("get k", |op| matches!(op, Op::Get(key) if key == b"k")),
            (
                "set k v",
                |op| matches!(op, Op::Set { key, value, cond: SetCond::Always, get: false } if key == b"k" && value == b"v"),
            ),
            (
                "del k j",
                |op| matches!(op, Op::Del(keys) if keys.len() == 2),
            ),
            (
                "exists k",
                |op| matches!(op, Op::Exists(keys) if keys.len() == 1),
            ),
            (
                "incr k",
                |op| matches!(op, Op::IncrBy(key, 1) if key == b"k"),
            ),
            (
                "decr k",
                |op| matches!(op, Op::IncrBy(key, -1) if key == b"k"),
            ),
            (
                "incrby k 5",
                |op| matches!(op, Op::IncrBy(key, 5) if key == b"k"),
            ),
            (
                "decrby k 5",
                |op| matches!(op, Op::IncrBy(key, -5) if key == b"k"),
            ),
            (
                "mget k j",
                |op| matches!(op, Op::MGet(keys) if keys.len() == 2),
            ),
            (
                "mset k v j w",
                |op| matches!(op, Op::MSet(pairs) if pairs.len() == 2 && pairs[1].1 == b"w"),
            ),
            (
                "rpush k a b",
                |op| matches!(op, Op::Push { left: false, values, .. } if values.len() == 2),
            ),
            (
                "lpush k a",
                |op| matches!(op, Op::Push { left: true, values, .. } if values.len() == 1),
            ),
            ("lrange k 0 -1", |op| {
                matches!(
                    op,
                    Op::LRange {
                        start: 0,
                        stop: -1,
                        ..
                    }
                )
            }),
            ("llen k", |op| matches!(op, Op::LLen(key) if key == b"k")),
            (
                "hget k f",
                |op| matches!(op, Op::HGet(key, field) if key == b"k" && field == b"f"),
            ),
            (
                "hset k f v g w",
                |op| matches!(op, Op::HSet(key, pairs) if key == b"k" && pairs.len() == 2),
            ),
            (
                "hgetall k",
                |op| matches!(op, Op::HGetAll(key) if key == b"k"),
            ),
            (
                "hdel k f g",
                |op| matches!(op, Op::HDel(key, fields) if key == b"k" && fields.len() == 2),
            ),
            ("bc.create k lower 0 10", |op| {
                matches!(
                    op,
                    Op::BcCreate {
                        bound: Bound::Lower,
                        k: 0,
                        initial: 10,
                        ..
                    }
                )
            }),
            ("bc.inc k 3", |op| {
                matches!(
                    op,
                    Op::BcAdd {
                        up: true,
                        delta: 3,
                        global: true,
                        ..
                    }
                )
            }),
            ("bc.dec k 3 local", |op| {
                matches!(
                    op,
                    Op::BcAdd {
                        up: false,
                        delta: 3,
                        global: false,
                        ..
                    }
                )
            }),
            ("bc.get k", |op| matches!(op, Op::BcGet(key) if key == b"k")),
            ("bc.fence 2", |op| matches!(op, Op::BcFence(2))),
            (
                "bc.adopt 1 k r1 r2",
                |op| matches!(op, Op::BcAdopt { failed: 1, reports, .. } if reports.len() == 2),
            ),
            (
                "fcall sum 1 k",
                |op| matches!(op, Op::FCall(call) if call.first_key() == Some(&b"k"[..])),
            ),
            (
                "fcall_ro sum 1 k",
                |op| matches!(op, Op::FCall(call) if call.first_key() == Some(&b"k"[..])),
            ),
        ];
        for spec in COMMANDS.iter().filter(|s| s.kind == Kind::Data) {
            let (line, expected) = cases
                .iter()
                .find(|(line, _)| line.split(' ').next() == Some(spec.name))
                .unwrap_or_else(|| panic!("no case for data command {}", spec.name));
            let op = parse_op_examples(spec, args(line));
            assert!(expected(&op), "{line}: parsed as {op:?}");
        }
    }

    #[test]
    fn set_options() {
        let spec = lookup(b"SET").unwrap();
        assert!(matches!(
            parse_op_examples(spec, args("set k v nx get")),
            Op::Set {
                cond: SetCond::IfAbsent,
                get: true,
                ..
            }
        ));
        assert!(matches!(
            parse_op_examples(spec, args("set k v nx xx")),
            Op::Reply(_)
        ));
        match parse_op_examples(spec, args("set k v ex 10")) {
            Op::Reply(Frame::Error(e)) => assert!(e.contains("expiry")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unknown_command_text() {
        assert_eq!(
            unknown_command(&args("foo a b")),
            Frame::Error("ERR unknown command 'foo', with args beginning with: 'a' 'b' ".into())
        );
        assert_eq!(
            unknown_command(&args("foo")),
            Frame::Error("ERR unknown command 'foo', with args beginning with: ".into())
        );
    }
}
